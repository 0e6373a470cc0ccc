//! The catalog: experiments, runs, sweeps (with their gate decisions), datasets, tokenizers,
//! token shards and forecasts as the dashboard lists them, folded from the index's `entries`
//! table and kept in memory, together with the leaderboards' [`BoardBuilder`] fed in log order.
//!
//! Listing 10,000 experiments with their author, tags, status and final loss would otherwise
//! parse every proposal, result and spec on each request. The catalog reads each entry once:
//! [`Catalog::refresh`] fetches the entries past the last one folded (one indexed query that
//! returns nothing when the log has not grown) and folds them into [`CatalogData`]. Specs are
//! read from their blobs once per blob hash. The catalog is derived from the index, which is
//! derived from the log; it is never written back anywhere.
//!
//! A `sweep` entry becomes a [`SweepRow`] (a new entry for the same experiment replaces it,
//! and a decision recorded for an older version of the file is not shown against the new one);
//! a `gate` entry becomes that sweep's [`GateRow`]; a child's `proposal` carries its link to the
//! sweep ([`ExperimentRow::sweep`]). Boards are only *fed* here: ranking them needs the specs
//! (`crate::leaderboards`).
//!
//! This module does not render anything and does not read metric curves (that is `series`).

//! The catalog: experiments, runs, sweeps (with their gate decisions), datasets, tokenizers,
//! token shards and forecasts as the dashboard lists them, folded from the index's `entries`
//! table and kept in memory, together with the leaderboards' [`BoardBuilder`] fed in log order.
//!
//! Listing 10,000 experiments with their author, tags, status and final loss would otherwise
//! parse every proposal, result and spec on each request. The catalog reads each entry once:
//! [`Catalog::refresh`] fetches the entries past the last one folded (one indexed query that
//! returns nothing when the log has not grown) and folds them into [`CatalogData`]. Specs are
//! read from their blobs once per blob hash. The catalog is derived from the index, which is
//! derived from the log; it is never written back anywhere.
//!
//! A `sweep` entry becomes a [`SweepRow`] (a new entry for the same experiment replaces it,
//! and a decision recorded for an older version of the file is not shown against the new one);
//! a `gate` entry becomes that sweep's [`GateRow`]; a child's `proposal` carries its link to the
//! sweep ([`ExperimentRow::sweep`]). Boards are only *fed* here: ranking them needs the specs
//! (`crate::leaderboards`).
//!
//! This module does not render anything and does not read metric curves (that is `series`).
use crate::error::WebError;
use glassbox_ledger::BlobStore;
use glassbox_ledger::board::BoardBuilder;
use glassbox_ledger::index::Index;
use glassbox_schemas::RefRole;
use glassbox_schemas::{BlobHash, EntryKind, ExperimentSpec, LedgerEntry};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock, RwLockReadGuard};

mod fold;
mod listing;
mod rows;

pub use listing::*;
pub use rows::*;

/// Entries fetched per query while catching up.
const FETCH_BATCH: u32 = 5000;

/// The kinds whose entries the catalog folds (the others only say what they are about);
/// snapshots, suites and evaluations only for the leaderboards that rank an evaluation metric.
const FOLDED_KINDS: [EntryKind; 16] = [
    EntryKind::Dataset,
    EntryKind::Proposal,
    EntryKind::Approval,
    EntryKind::Rejection,
    EntryKind::Forecast,
    EntryKind::RunStarted,
    EntryKind::Result,
    EntryKind::Tokenizer,
    EntryKind::Tokenized,
    EntryKind::Anomaly,
    EntryKind::Reproduction,
    EntryKind::Sweep,
    EntryKind::Gate,
    EntryKind::Snapshot,
    EntryKind::EvalSuite,
    EntryKind::Evaluation,
];

/// Everything folded so far.
#[derive(Debug, Default)]
pub struct CatalogData {
    /// Entries with index below this are folded.
    pub next: u64,
    /// Entries the index held (of every kind, one past the highest index) when the catalog last
    /// caught up: everything below is folded. The render cache stamps pages with it.
    pub indexed: u64,
    /// By id.
    pub experiments: BTreeMap<String, ExperimentRow>,
    /// By id.
    pub runs: BTreeMap<String, RunRow>,
    /// In log order.
    pub datasets: Vec<DatasetRow>,
    /// In log order.
    pub tokenizers: Vec<TokenizerRow>,
    /// In log order.
    pub tokenized: Vec<TokenizedRow>,
    /// Sweeps by their experiment id.
    pub sweeps: BTreeMap<String, SweepRow>,
    /// Every `proposal`, `result` and `reproduction` folded so far, in log order: what the
    /// leaderboards are derived from (`crate::leaderboards`).
    pub board: BoardBuilder,
    /// By entry index.
    pub forecasts: BTreeMap<u64, ForecastRow>,
    /// The last entry about each experiment or one of its runs, of any kind (metric chunks,
    /// checkpoints and artifacts included): a page about it drawn after that entry stays true
    /// until this grows (see `page_cache`).
    pub touched_experiments: HashMap<String, u64>,
    /// The last entry about each run, of any kind.
    pub touched_runs: HashMap<String, u64>,
    specs: HashMap<String, Option<Arc<SpecFacts>>>,
}

/// The in-memory catalog, shared by all requests.
#[derive(Debug, Default)]
pub struct Catalog {
    refresh: tokio::sync::Mutex<Option<std::time::Instant>>,
    data: RwLock<CatalogData>,
}

/// How stale the catalog may be: a request within this long of the last catch-up, or while
/// another request is catching up, reads what is folded instead of queueing behind it.
const REFRESH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

impl Catalog {
    /// Folds entries added to the index since the last call, then returns a read guard.
    pub async fn read(
        &self,
        index: &Index,
        blobs: &dyn BlobStore,
    ) -> Result<RwLockReadGuard<'_, CatalogData>, WebError> {
        self.refresh(index, blobs).await?;
        Ok(self.data.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Catches up with the index.
    pub async fn refresh(&self, index: &Index, blobs: &dyn BlobStore) -> Result<(), WebError> {
        let mut last = match self.refresh.try_lock() {
            Ok(guard) => guard,
            // Someone is catching up; once anything is folded, do not queue behind them.
            Err(_) if self.data.read().unwrap_or_else(|p| p.into_inner()).next > 0 => {
                return Ok(());
            }
            Err(_) => self.refresh.lock().await,
        };
        if last.is_some_and(|t| t.elapsed() < REFRESH_INTERVAL) {
            return Ok(());
        }
        *last = Some(std::time::Instant::now());
        // Read before folding, so that everything below it is folded when it is published.
        let indexed = index.next_index().await?;
        loop {
            let next = self.data.read().unwrap_or_else(|p| p.into_inner()).next;
            // Every entry, for what it is about; the text only of the kinds folded.
            let rows = index
                .entries_about(next, FETCH_BATCH, &FOLDED_KINDS)
                .await?;
            let (fetched, last_index) = (rows.len(), rows.last().map(|r| r.index));
            let mut parsed = Vec::with_capacity(rows.len());
            let mut about = Vec::with_capacity(rows.len());
            for r in rows {
                about.push((r.index, r.experiment, r.run));
                if let Some(text) = r.entry {
                    parsed.push((r.index, text));
                }
            }
            // Specs are read outside the lock (file I/O).
            let mut new_specs: Vec<(String, Option<Arc<SpecFacts>>)> = Vec::new();
            let entries: Vec<(u64, LedgerEntry)> = parsed
                .into_iter()
                .filter_map(|(i, t)| LedgerEntry::from_bytes(t.as_bytes()).ok().map(|e| (i, e)))
                .collect();
            {
                let known = self.data.read().unwrap_or_else(|p| p.into_inner());
                for (_, e) in &entries {
                    if e.kind() == EntryKind::Proposal {
                        if let Some(h) = e.blob(RefRole::Spec) {
                            let key = h.to_string();
                            if !known.specs.contains_key(&key)
                                && !new_specs.iter().any(|(k, _)| k == &key)
                            {
                                new_specs.push((key, read_spec(blobs, h).map(Arc::new)));
                            }
                        }
                    }
                }
            }
            let mut data = self.data.write().unwrap_or_else(|p| p.into_inner());
            data.specs.extend(new_specs);
            for (idx, e) in &entries {
                data.fold(*idx, e);
            }
            for (idx, experiment, run) in about {
                data.touch(idx, experiment, run);
            }
            if let Some(last) = last_index {
                data.next = data.next.max(last + 1);
            }
            if fetched < FETCH_BATCH as usize {
                data.indexed = data.indexed.max(indexed);
                return Ok(());
            }
        }
    }
}

/// Reads and summarises a spec blob (canonical JSON or TOML); `None` when it cannot, or when
/// it is over the spec size limit (a proposal names its spec blob; nothing else bounds it).
fn read_spec(blobs: &dyn BlobStore, hash: &glassbox_schemas::Blake3Hash) -> Option<SpecFacts> {
    let limit = glassbox_schemas::validate::MAX_SPEC_BYTES as u64 * 4;
    let r = blobs.get(&BlobHash(*hash)).ok()?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(r, limit + 1), &mut text).ok()?;
    if text.len() as u64 > limit {
        return None;
    }
    let spec = parse_spec_text(&text)?;
    Some(spec_facts(&spec))
}

/// Parses a spec blob: canonical JSON, else TOML.
pub fn parse_spec_text(text: &str) -> Option<ExperimentSpec> {
    if text.trim_start().starts_with('{') {
        glassbox_schemas::validate::parse_json(text).ok()
    } else {
        glassbox_schemas::parse_toml(text).ok()
    }
}

fn spec_facts(spec: &ExperimentSpec) -> SpecFacts {
    let cost = glassbox_schemas::estimate(spec);
    SpecFacts {
        name: spec.experiment.name.clone(),
        hypothesis: spec.experiment.hypothesis.clone(),
        tags: spec.experiment.tags.clone(),
        mixture: spec
            .data
            .mixture
            .iter()
            .map(|m| MixtureRow {
                domain: m.domain.clone(),
                weight: m.weight,
                source: match (&m.corpus, &m.generator) {
                    (Some(c), _) => c.to_string(),
                    (None, Some(g)) => format!(
                        "generator {} seed={} order={} alphabet={} branching={}",
                        serde_json::to_value(g.kind)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default(),
                        g.seed,
                        g.order,
                        g.alphabet,
                        g.branching
                    ),
                    (None, None) => "unspecified".into(),
                },
            })
            .collect(),
        train_flops: cost.train_flops,
        flops_per_token: cost.flops_per_token,
        steps: spec.train.steps,
        forecast: spec.forecast.as_ref().map(|f| SpecForecast {
            metric: f.metric.clone(),
            value: f.value,
            tolerance: f.tolerance,
        }),
    }
}
