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

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use glassbox_ledger::BlobStore;
use glassbox_ledger::board::BoardBuilder;
use glassbox_schemas::data::{CorpusFormat, TokenizedBody, TokenizerBody};
use glassbox_schemas::record::{
    AnomalyBody, ApprovalBody, DatasetBody, ForecastBody, ForecastVerdict, GateBody, GateSide,
    IssueRef, ProposalBody, RejectionBody, ResultBody, RunStartedBody, SweepBody,
};
use glassbox_schemas::{BlobHash, EntryKind, ExperimentSpec, LedgerEntry};
use serde::Serialize;
use sqlx::{AnyPool, Row};
use utoipa::ToSchema;

use crate::error::WebError;

/// Entries fetched per query while catching up.
const FETCH_BATCH: i64 = 5000;

/// One component of a spec's data mixture.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MixtureRow {
    /// Domain name.
    pub domain: String,
    /// Sampling weight.
    pub weight: f64,
    /// The corpus blob, or a description of the built-in generator.
    pub source: String,
}

/// What the dashboard shows of a spec without re-reading its blob.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SpecFacts {
    /// `experiment.name`.
    pub name: String,
    /// `experiment.hypothesis`.
    pub hypothesis: String,
    /// `experiment.tags`.
    pub tags: Vec<String>,
    /// `data.mixture`.
    pub mixture: Vec<MixtureRow>,
    /// Training FLOPs of the full run (the schemas cost model).
    pub train_flops: f64,
    /// Training FLOPs per token (the schemas cost model, as the runner counts them): charts
    /// plot `throughput/total_tokens` times this against FLOPs.
    pub flops_per_token: f64,
    /// Training steps asked for.
    pub steps: u64,
    /// The forecast pre-registered in the spec.
    pub forecast: Option<SpecForecast>,
}

/// A spec's own `[forecast]`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SpecForecast {
    /// Metric.
    pub metric: String,
    /// Predicted value.
    pub value: f64,
    /// Allowed absolute difference.
    pub tolerance: f64,
}

/// A forecast entry.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ForecastRow {
    /// Its entry index.
    pub entry: u64,
    /// RFC 3339 time.
    pub time: String,
    /// Experiment, if any.
    pub experiment: Option<String>,
    /// The spec whose outcome is predicted.
    pub spec_hash: String,
    /// Metric.
    pub metric: String,
    /// Predicted value.
    pub value: f64,
    /// Allowed absolute difference.
    pub tolerance: f64,
    /// `author`, `scaling_law`, ...
    pub method: String,
    /// Method details (for a scaling law: fitted parameters and uncertainty).
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

/// A forecast compared with what happened.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ForecastCheck {
    /// Metric name.
    pub metric: String,
    /// Predicted value.
    pub predicted: f64,
    /// Allowed absolute difference.
    pub tolerance: f64,
    /// Observed value.
    pub actual: Option<f64>,
    /// `actual - predicted`, when measured.
    pub error: Option<f64>,
    /// Within tolerance.
    pub hit: bool,
    /// `hit` or `miss` (`pending` only where no run has finished).
    #[schema(value_type = String, example = "hit")]
    pub verdict: ForecastVerdict,
}

/// One run.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunRow {
    /// Run id.
    pub id: String,
    /// Its experiment.
    pub experiment: Option<String>,
    /// Spec trained.
    pub spec_hash: String,
    /// `running` until a result, then the result's status.
    pub status: String,
    /// Steps completed (from the result).
    pub steps: Option<u64>,
    /// `run_started` entry.
    pub started_entry: Option<u64>,
    /// `result` entry.
    pub result_entry: Option<u64>,
    /// Start time.
    pub started: Option<String>,
    /// End time.
    pub ended: Option<String>,
    /// `cpu` / `cuda`.
    pub backend: Option<String>,
    /// Hardware description.
    pub hardware: Option<String>,
    /// Last value of each metric (from the result).
    pub final_metrics: BTreeMap<String, f64>,
    /// Forecast vs outcome.
    pub forecast: Option<ForecastCheck>,
    /// Why it ended that way (anything but success).
    pub reason: Option<String>,
    /// Its stored tokenizer, from `run_started`.
    pub tokenizer: Option<String>,
    /// Domain -> the token shard it drew from, from `run_started`.
    pub shards: BTreeMap<String, String>,
    /// Anomalies the worker flagged during the run (`anomaly` entries).
    pub anomalies: u32,
}

/// One experiment.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExperimentRow {
    /// Experiment id (`owner/repo#12`, or a spec slug).
    pub id: String,
    /// Proposal title.
    pub title: Option<String>,
    /// Who proposed it.
    pub author: Option<String>,
    /// Current spec hash.
    pub spec_hash: Option<String>,
    /// The spec blob.
    pub spec_blob: Option<String>,
    /// GitHub issue.
    pub issue_url: Option<String>,
    /// Facts from the spec, when its blob could be read.
    pub spec: Option<SpecFacts>,
    /// Who approved the current spec.
    pub approved_by: Option<String>,
    /// Why it was rejected.
    pub rejected: Option<String>,
    /// Runs, oldest first.
    pub runs: Vec<String>,
    /// Forecast entries about it, by entry index.
    pub forecasts: Vec<u64>,
    /// First and last entry.
    pub first_entry: u64,
    /// Last entry.
    pub last_entry: u64,
    /// Time of the last entry.
    pub updated: String,
    /// The sweep it is a child of (from its proposal).
    pub sweep: Option<SweepLinkRow>,
}

/// A sweep child's link to its sweep, as its proposal states it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SweepLinkRow {
    /// The sweep's experiment.
    pub parent: String,
    /// The sweep file's hash.
    pub parent_hash: String,
    /// The child's position, from 0.
    pub index: u32,
    /// The swept fields' values, `n_experts=4, lr=0.001`.
    pub values: String,
}

/// A sweep's promotion gate as the `sweep` entry declares it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GateRule {
    /// The metric compared.
    pub metric: String,
    /// The baseline experiment's slug.
    pub beats: String,
    /// The margin the best child must beat it by (in the metric's units).
    pub by: f64,
}

/// One side of a gate's comparison.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GateSideRow {
    /// The experiment.
    pub experiment: String,
    /// Its run.
    pub run: String,
    /// Its final value of the gate's metric.
    pub value: f64,
}

/// A `gate` entry: the decision of a sweep's promotion gate.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GateRow {
    /// Its entry index.
    pub entry: u64,
    /// RFC 3339 time.
    pub time: String,
    /// `passed` or `failed`.
    pub outcome: String,
    /// The metric compared.
    pub metric: String,
    /// `min` or `max`.
    pub direction: String,
    /// The baseline's slug.
    pub beats: String,
    /// The margin.
    pub by: f64,
    /// The baseline's run and value, when one was found.
    pub baseline: Option<GateSideRow>,
    /// The best child's run and value, when any child reported the metric.
    pub best: Option<GateSideRow>,
    /// Why, with the numbers.
    pub detail: String,
}

impl GateRow {
    /// Whether the gate passed.
    pub fn passed(&self) -> bool {
        self.outcome == "passed"
    }
}

/// One child as the `sweep` entry lists it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SweepMemberRow {
    /// The child's experiment.
    pub experiment: String,
    /// Its spec's hash.
    pub spec_hash: String,
    /// Its values.
    pub values: String,
    /// Its training-plus-evaluation FLOPs (the cost model's).
    pub flops: f64,
}

/// A sweep: its latest `sweep` entry and the gate decided for that version of it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SweepRow {
    /// The sweep's experiment (the issue it was proposed in).
    pub id: String,
    /// The `sweep` entry.
    pub entry: u64,
    /// Its time.
    pub time: String,
    /// The sweep file's hash (the one approval of the set is bound to it).
    pub parent_hash: String,
    /// Who proposed it.
    pub author: String,
    /// Its title.
    pub title: String,
    /// `grid` or `list`.
    pub mode: String,
    /// The metric that picks the best child, if named.
    pub metric: Option<String>,
    /// `min` (lower is better) or `max`.
    pub direction: String,
    /// The promotion gate, if any.
    pub gate: Option<GateRule>,
    /// The children, in order.
    pub children: Vec<SweepMemberRow>,
    /// Total FLOPs of all children.
    pub total_flops: f64,
    /// The gate's decision for this version of the sweep, once recorded.
    pub decision: Option<GateRow>,
}

impl SweepRow {
    /// The metric the best child is picked by: the sweep's, else its gate's.
    pub fn ranking_metric(&self) -> Option<&str> {
        self.metric
            .as_deref()
            .or(self.gate.as_ref().map(|g| g.metric.as_str()))
    }

    /// `passed`, `failed`, `pending` (a gate not decided yet) or `none`.
    pub fn gate_state(&self) -> &'static str {
        match (&self.decision, &self.gate) {
            (Some(d), _) if d.passed() => "passed",
            (Some(_), _) => "failed",
            (None, Some(_)) => "pending",
            (None, None) => "none",
        }
    }
}

/// The snake_case name serde gives a unit variant (`grid`, `min`, `passed`).
fn serde_name(v: impl Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn gate_side(s: GateSide) -> GateSideRow {
    GateSideRow {
        experiment: s.experiment.0,
        run: s.run.0,
        value: s.value,
    }
}

/// A dataset entry.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DatasetRow {
    /// Entry index.
    pub entry: u64,
    /// Time.
    pub time: String,
    /// Domain.
    pub domain: String,
    /// Bytes.
    pub bytes: u64,
    /// Tokenizer.
    pub tokenizer: String,
    /// `import:...` or `generator:...`.
    pub source: String,
    /// The corpus blob.
    pub corpus: Option<String>,
    /// Known entropy rate.
    pub entropy_bits_per_byte: Option<f64>,
    /// How the raw file splits into documents (`{"kind": "jsonl", "text_field": ...}`).
    #[schema(value_type = Option<Object>)]
    pub format: Option<CorpusFormat>,
    /// Documents.
    pub documents: Option<u64>,
    /// UTF-8 bytes of document text.
    pub text_bytes: Option<u64>,
}

/// A `tokenizer` entry.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenizerRow {
    /// Entry index.
    pub entry: u64,
    /// Time.
    pub time: String,
    /// The `tokenizer.json` blob.
    pub hash: String,
    /// `bpe`, `unigram` or `imported`.
    pub kind: String,
    /// The model type inside.
    pub model: String,
    /// Vocabulary size.
    pub vocab_size: u32,
    /// Corpora it was trained on.
    pub trained_on: Vec<String>,
    /// The end-of-document token.
    pub end_of_document: String,
    /// Where it came from.
    pub source: String,
}

/// A `tokenized` entry: a corpus's token shard under a tokenizer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenizedRow {
    /// Entry index.
    pub entry: u64,
    /// The corpus.
    pub corpus: String,
    /// The tokenizer.
    pub tokenizer: String,
    /// The shard blob.
    pub shard: String,
    /// Tokens.
    pub tokens: u64,
    /// Documents.
    pub documents: u64,
    /// Text bytes the tokens cover.
    pub text_bytes: u64,
}

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

impl ExperimentRow {
    /// `running`, the latest run's status, `rejected`, `approved` or `proposed`.
    pub fn status(&self, data: &CatalogData) -> String {
        self.status_str(data).to_string()
    }

    /// [`ExperimentRow::status`] without a copy.
    pub fn status_str<'a>(&'a self, data: &'a CatalogData) -> &'a str {
        if let Some(run) = self.runs.last().and_then(|r| data.runs.get(r)) {
            return &run.status;
        }
        if self.rejected.is_some() {
            "rejected"
        } else if self.approved_by.is_some() {
            "approved"
        } else {
            "proposed"
        }
    }

    /// The latest run.
    pub fn latest_run<'a>(&self, data: &'a CatalogData) -> Option<&'a RunRow> {
        self.runs.last().and_then(|r| data.runs.get(r))
    }

    /// Tags from the spec.
    pub fn tags(&self) -> &[String] {
        self.spec.as_ref().map(|s| s.tags.as_slice()).unwrap_or(&[])
    }
}

impl Catalog {
    /// Folds entries added to the index since the last call, then returns a read guard.
    pub async fn read(
        &self,
        pool: &AnyPool,
        blobs: &dyn BlobStore,
    ) -> Result<RwLockReadGuard<'_, CatalogData>, WebError> {
        self.refresh(pool, blobs).await?;
        Ok(self.data.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Catches up with the index.
    pub async fn refresh(&self, pool: &AnyPool, blobs: &dyn BlobStore) -> Result<(), WebError> {
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
        let indexed: i64 = sqlx::query("SELECT COALESCE(MAX(idx) + 1, 0) AS n FROM entries")
            .fetch_one(pool)
            .await?
            .try_get("n")?;
        loop {
            let next = self.data.read().unwrap_or_else(|p| p.into_inner()).next;
            // Every entry, for what it is about; the text only of the kinds folded.
            let rows = sqlx::query(
                "SELECT idx, experiment, run, CASE WHEN kind IN \
                 ('dataset', 'proposal', 'approval', 'rejection', 'forecast', 'run_started', 'result', \
                 'tokenizer', 'tokenized', 'anomaly', 'reproduction', 'sweep', 'gate') \
                 THEN entry ELSE NULL END AS entry FROM entries WHERE idx >= $1 \
                 ORDER BY idx LIMIT $2",
            )
            .bind(next as i64)
            .bind(FETCH_BATCH)
            .fetch_all(pool)
            .await?;
            let mut parsed = Vec::with_capacity(rows.len());
            let mut about = Vec::with_capacity(rows.len());
            for r in &rows {
                let idx: i64 = r.try_get("idx")?;
                let text: Option<String> = r.try_get("entry")?;
                let experiment: Option<String> = r.try_get("experiment")?;
                let run: Option<String> = r.try_get("run")?;
                about.push((idx as u64, experiment, run));
                if let Some(text) = text {
                    parsed.push((idx as u64, text));
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
                        if let Some(h) = e.refs.get("spec") {
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
            let last = rows.len() as i64;
            if let Some(r) = rows.last() {
                let idx: i64 = r.try_get("idx")?;
                data.next = data.next.max(idx as u64 + 1);
            }
            if last < FETCH_BATCH {
                data.indexed = data.indexed.max(indexed as u64);
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

fn rfc3339(t: &time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

impl CatalogData {
    /// Notes that entry `idx` is about `experiment` and `run` (and so about the run's
    /// experiment).
    fn touch(&mut self, idx: u64, experiment: Option<String>, run: Option<String>) {
        let run_experiment = run
            .as_ref()
            .and_then(|r| self.runs.get(r))
            .and_then(|r| r.experiment.clone());
        if let Some(r) = run {
            self.touched_runs.insert(r, idx);
        }
        for x in [experiment, run_experiment].into_iter().flatten() {
            self.touched_experiments.insert(x, idx);
        }
    }

    /// The last entry about experiment `id` or one of its runs (0 when none is known).
    pub fn touched(&self, id: &str) -> u64 {
        self.touched_experiments.get(id).copied().unwrap_or(0)
    }

    /// What the spec `spec_hash` says, when its blob was read.
    pub fn spec_facts(&self, spec_hash: &str) -> Option<&SpecFacts> {
        // Specs are read by their blob's hash, which is the spec hash only for a blob of the
        // canonical JSON; a TOML blob is found through the experiment that proposed it.
        self.specs
            .get(spec_hash)
            .and_then(|s| s.as_deref())
            .or_else(|| {
                self.experiments
                    .values()
                    .find(|e| e.spec_hash.as_deref() == Some(spec_hash))
                    .and_then(|e| e.spec.as_ref())
            })
    }

    fn experiment(&mut self, id: &str, idx: u64, time: &str) -> &mut ExperimentRow {
        let e = self
            .experiments
            .entry(id.to_string())
            .or_insert_with(|| ExperimentRow {
                id: id.to_string(),
                title: None,
                author: None,
                spec_hash: None,
                spec_blob: None,
                issue_url: None,
                spec: None,
                approved_by: None,
                rejected: None,
                runs: Vec::new(),
                forecasts: Vec::new(),
                first_entry: idx,
                last_entry: idx,
                updated: time.to_string(),
                sweep: None,
            });
        e.last_entry = idx;
        e.updated = time.to_string();
        e
    }

    fn run(&mut self, id: &str, experiment: Option<&str>, spec_hash: String) -> &mut RunRow {
        if let Some(exp) = experiment.and_then(|x| self.experiments.get_mut(x)) {
            if !exp.runs.iter().any(|r| r == id) {
                exp.runs.push(id.to_string());
            }
        }
        self.runs.entry(id.to_string()).or_insert_with(|| RunRow {
            id: id.to_string(),
            experiment: experiment.map(str::to_string),
            spec_hash,
            status: "running".into(),
            steps: None,
            started_entry: None,
            result_entry: None,
            started: None,
            ended: None,
            backend: None,
            hardware: None,
            final_metrics: BTreeMap::new(),
            forecast: None,
            reason: None,
            tokenizer: None,
            shards: BTreeMap::new(),
            anomalies: 0,
        })
    }

    fn fold(&mut self, idx: u64, e: &LedgerEntry) {
        self.board.add(idx, e);
        let time = rfc3339(&e.time);
        let exp_id = e.experiment.as_ref().map(|x| x.0.clone());
        if let Some(x) = &exp_id {
            self.experiment(x, idx, &time);
        }
        match e.kind() {
            EntryKind::Proposal => {
                let (Some(x), Ok(p)) = (&exp_id, e.body_as::<ProposalBody>()) else {
                    return;
                };
                let spec_blob = e.refs.get("spec").map(|h| h.to_string());
                let facts = spec_blob
                    .as_ref()
                    .and_then(|k| self.specs.get(k).cloned().flatten());
                let exp = self.experiment(x, idx, &time);
                let new_hash = p.spec_hash.to_string();
                if exp.spec_hash.as_deref() != Some(new_hash.as_str()) {
                    // A new spec voids an approval of the old one.
                    exp.approved_by = None;
                }
                exp.title = Some(p.title);
                exp.author = Some(p.author);
                exp.spec_hash = Some(new_hash);
                exp.issue_url = p.issue.map(|IssueRef { url, .. }| url);
                exp.spec_blob = spec_blob;
                exp.spec = facts.map(|f| (*f).clone());
                exp.sweep = p.sweep.map(|l| SweepLinkRow {
                    parent: l.parent.0,
                    parent_hash: l.parent_hash.to_string(),
                    index: l.index,
                    values: l.values,
                });
            }
            EntryKind::Sweep => {
                let (Some(x), Ok(b)) = (&exp_id, e.body_as::<SweepBody>()) else {
                    return;
                };
                let exp = self.experiment(x, idx, &time);
                exp.title.get_or_insert_with(|| b.title.clone());
                exp.author.get_or_insert_with(|| b.author.clone());
                let parent_hash = b.parent_hash.to_string();
                // A decision about an earlier version of the file does not hold for this one.
                let decision = self
                    .sweeps
                    .remove(x)
                    .and_then(|old| old.decision.filter(|_| old.parent_hash == parent_hash));
                self.sweeps.insert(
                    x.clone(),
                    SweepRow {
                        id: x.clone(),
                        entry: idx,
                        time,
                        parent_hash,
                        author: b.author,
                        title: b.title,
                        mode: serde_name(b.mode),
                        metric: b.metric,
                        direction: serde_name(b.direction),
                        gate: b.gate.map(|g| GateRule {
                            metric: g.metric,
                            beats: g.beats,
                            by: g.by,
                        }),
                        children: b
                            .children
                            .into_iter()
                            .map(|c| SweepMemberRow {
                                experiment: c.experiment.0,
                                spec_hash: c.spec_hash.to_string(),
                                values: c.values,
                                flops: c.flops,
                            })
                            .collect(),
                        total_flops: b.total_flops,
                        decision,
                    },
                );
            }
            EntryKind::Gate => {
                let Ok(g) = e.body_as::<GateBody>() else {
                    return;
                };
                let Some(sweep) = self.sweeps.get_mut(&g.sweep.0) else {
                    return;
                };
                if sweep.parent_hash != g.parent_hash.to_string() {
                    return;
                }
                sweep.decision = Some(GateRow {
                    entry: idx,
                    time,
                    outcome: serde_name(g.outcome),
                    metric: g.metric,
                    direction: serde_name(g.direction),
                    beats: g.beats,
                    by: g.by,
                    baseline: g.baseline.map(gate_side),
                    best: g.best.map(gate_side),
                    detail: g.detail,
                });
            }
            EntryKind::Approval => {
                if let (Some(x), Ok(a)) = (&exp_id, e.body_as::<ApprovalBody>()) {
                    let exp = self.experiment(x, idx, &time);
                    if exp.spec_hash.is_none()
                        || exp.spec_hash.as_deref() == Some(a.spec_hash.to_string().as_str())
                    {
                        exp.approved_by = Some(a.approver);
                    }
                }
            }
            EntryKind::Rejection => {
                if let (Some(x), Ok(r)) = (&exp_id, e.body_as::<RejectionBody>()) {
                    self.experiment(x, idx, &time).rejected = Some(r.reason);
                }
            }
            EntryKind::Forecast => {
                if let Ok(f) = e.body_as::<ForecastBody>() {
                    if let Some(x) = &exp_id {
                        self.experiment(x, idx, &time).forecasts.push(idx);
                    }
                    self.forecasts.insert(
                        idx,
                        ForecastRow {
                            entry: idx,
                            time,
                            experiment: exp_id,
                            spec_hash: f.spec_hash.to_string(),
                            metric: f.metric,
                            value: f.value,
                            tolerance: f.tolerance,
                            method: f.method,
                            details: f.details,
                        },
                    );
                }
            }
            EntryKind::RunStarted => {
                if let Ok(b) = e.body_as::<RunStartedBody>() {
                    let run = self.run(&b.run.0, exp_id.as_deref(), b.spec_hash.to_string());
                    run.started_entry = Some(idx);
                    run.started = Some(time);
                    run.backend = Some(b.backend);
                    run.hardware = Some(b.hardware);
                    if let Some(d) = b.data {
                        run.tokenizer = Some(d.tokenizer.to_string());
                        run.shards = d
                            .shards
                            .into_iter()
                            .map(|(k, v)| (k, v.to_string()))
                            .collect();
                    }
                }
            }
            EntryKind::Result => {
                if let Ok(b) = e.body_as::<ResultBody>() {
                    let run = self.run(&b.run.0, exp_id.as_deref(), b.spec_hash.to_string());
                    run.status = b.ending.status.as_str().to_string();
                    run.steps = Some(b.ending.steps);
                    run.result_entry = Some(idx);
                    run.ended = Some(time);
                    run.final_metrics = b.ending.final_metrics;
                    run.reason = b.ending.reason;
                    run.forecast = b.forecast.map(|f| ForecastCheck {
                        error: f.error(),
                        verdict: f.verdict(),
                        metric: f.metric,
                        predicted: f.predicted,
                        tolerance: f.tolerance,
                        actual: f.actual,
                        hit: f.hit,
                    });
                }
            }
            EntryKind::Anomaly => {
                if let Ok(a) = e.body_as::<AnomalyBody>()
                    && let Some(run) = self.runs.get_mut(&a.run.0)
                {
                    run.anomalies += 1;
                }
            }
            EntryKind::Dataset => {
                if let Ok(d) = e.body_as::<DatasetBody>() {
                    self.datasets.push(DatasetRow {
                        entry: idx,
                        time,
                        domain: d.domain,
                        bytes: d.bytes,
                        tokenizer: d.tokenizer,
                        source: d.source,
                        corpus: e.refs.get("corpus").map(|h| h.to_string()),
                        entropy_bits_per_byte: d.entropy_bits_per_byte,
                        format: d.format,
                        documents: d.documents,
                        text_bytes: d.text_bytes,
                    });
                }
            }
            EntryKind::Tokenizer => {
                if let (Ok(t), Some(h)) = (e.body_as::<TokenizerBody>(), e.refs.get("tokenizer")) {
                    self.tokenizers.push(TokenizerRow {
                        entry: idx,
                        time,
                        hash: h.to_string(),
                        kind: t.kind.as_str().to_string(),
                        model: t.model,
                        vocab_size: t.vocab_size,
                        trained_on: t.trained_on.iter().map(|c| c.to_string()).collect(),
                        end_of_document: t.end_of_document,
                        source: t.source,
                    });
                }
            }
            EntryKind::Tokenized => {
                if let Ok(t) = e.body_as::<TokenizedBody>() {
                    self.tokenized.push(TokenizedRow {
                        entry: idx,
                        corpus: t.corpus.to_string(),
                        tokenizer: t.tokenizer.to_string(),
                        shard: t.shard.to_string(),
                        tokens: t.tokens,
                        documents: t.documents,
                        text_bytes: t.text_bytes,
                    });
                }
            }
            _ => {}
        }
    }
}

/// Filters for the experiments list.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExperimentFilter {
    /// Exact status (`running`, `succeeded`, `diverged`, `proposed`, ...).
    pub status: Option<String>,
    /// A tag the spec carries.
    pub tag: Option<String>,
    /// Proposer (case-insensitive).
    pub author: Option<String>,
    /// A search in the query language (`model.moe.n_experts >= 8 and status = succeeded`; a
    /// bare word is found in the id, title, author or hypothesis). A bad query is a 400 naming
    /// the column and what was expected.
    pub q: Option<String>,
    /// The columns shown, comma-separated (a saved view): any of the sort columns, and
    /// `metric:<name>` for a final metric of the latest run.
    pub cols: Option<String>,
    /// Column: `id`, `title`, `status`, `author`, `runs`, `final_loss`, `forecast`, `spec_hash`,
    /// `updated` (default).
    #[param(inline, value_type = Option<SortColumn>)]
    pub sort: Option<String>,
    /// `asc` or `desc` (default `desc`).
    #[param(inline, value_type = Option<SortDirection>)]
    pub dir: Option<String>,
    /// Page, from 1.
    #[param(minimum = 1, maximum = 2147483647)]
    pub page: Option<u32>,
    /// Rows per page (default 50, 1 to 500).
    #[param(minimum = 1, maximum = 500)]
    pub per_page: Option<u32>,
    /// The final metric on the search result's parallel coordinates (page only; default: the
    /// first metric column, else `train/loss`).
    pub pc: Option<String>,
}

/// One row of the experiments list.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ListRow {
    /// Experiment id.
    pub id: String,
    /// Title.
    pub title: Option<String>,
    /// Status.
    pub status: String,
    /// Author.
    pub author: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
    /// Spec hash.
    pub spec_hash: Option<String>,
    /// Number of runs.
    pub runs: usize,
    /// Latest run.
    pub latest_run: Option<String>,
    /// Latest run's final `train/loss`.
    pub final_loss: Option<f64>,
    /// Latest run's forecast outcome.
    pub forecast_hit: Option<bool>,
    /// Anomalies flagged in the latest run.
    pub anomalies: u32,
    /// Time of the last entry.
    pub updated: String,
}

/// A page of rows.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ListPage {
    /// Rows matching the filter, in all pages.
    pub total: usize,
    /// This page, from 1.
    pub page: u32,
    /// Rows per page.
    pub per_page: u32,
    /// The rows.
    pub items: Vec<ListRow>,
}

/// The sort columns of [`ExperimentFilter::sort`] as the OpenAPI document lists them; the
/// handler checks against [`SORT_COLUMNS`], and a test holds the two equal.
#[derive(Debug, Clone, Copy, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum SortColumn {
    Id,
    Title,
    Status,
    Author,
    Runs,
    FinalLoss,
    Forecast,
    SpecHash,
    Updated,
}

/// [`ExperimentFilter::dir`] as the OpenAPI document lists it.
#[derive(Debug, Clone, Copy, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum SortDirection {
    Asc,
    Desc,
}

/// Sort columns accepted by [`ExperimentFilter::sort`].
pub const SORT_COLUMNS: &[&str] = &[
    "id",
    "title",
    "status",
    "author",
    "runs",
    "final_loss",
    "forecast",
    "spec_hash",
    "updated",
];

impl CatalogData {
    /// The experiments list: filtered, sorted, one page. `f.q` is not read here: the caller
    /// runs the query on the index ([`crate::search`]) and passes the experiments it matched as
    /// `only`.
    pub fn list(
        &self,
        f: &ExperimentFilter,
        only: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<ListPage, WebError> {
        let sort = f.sort.as_deref().unwrap_or("updated");
        if !SORT_COLUMNS.contains(&sort) {
            return Err(WebError::BadRequest(format!(
                "sort={sort:?} is not a column; use one of {}",
                SORT_COLUMNS.join(", ")
            )));
        }
        let desc = match f.dir.as_deref().unwrap_or("desc") {
            "asc" => false,
            "desc" => true,
            other => {
                return Err(WebError::BadRequest(format!(
                    "dir={other:?}: use asc or desc"
                )));
            }
        };
        let per_page = match f.per_page {
            Some(n) => crate::extract::within("per_page", u64::from(n), 1, 500)? as u32,
            None => 50,
        };
        let page = match f.page {
            Some(n) => crate::extract::within("page", u64::from(n), 1, i32::MAX as u64)? as u32,
            None => 1,
        };
        let author = f
            .author
            .as_deref()
            .map(str::to_lowercase)
            .filter(|s| !s.is_empty());
        let status = f.status.as_deref().filter(|s| !s.is_empty());
        let tag = f.tag.as_deref().filter(|s| !s.is_empty());
        // Keys are computed once per experiment and rows built for the page only: with 10,000
        // experiments, cloning every row and every key per comparison was most of a list's time.
        // A search names its experiments: only those are looked up, not every one tested.
        let candidates: Box<dyn Iterator<Item = &ExperimentRow>> = match only {
            Some(ids) => Box::new(ids.iter().filter_map(|id| self.experiments.get(id))),
            None => Box::new(self.experiments.values()),
        };
        let picked: Vec<&ExperimentRow> = candidates
            .filter(|e| tag.is_none_or(|t| e.tags().iter().any(|x| x == t)))
            .filter(|e| {
                author
                    .as_deref()
                    .is_none_or(|a| e.author.as_deref().is_some_and(|x| x.to_lowercase() == a))
            })
            .filter(|e| status.is_none_or(|s| e.status_str(self) == s))
            .collect();
        let key_f = |e: &ExperimentRow| -> Option<f64> {
            let latest = e.latest_run(self);
            match sort {
                "final_loss" => latest.and_then(|r| {
                    r.final_metrics
                        .get(glassbox_schemas::metrics::TRAIN_LOSS)
                        .copied()
                }),
                "runs" => Some(e.runs.len() as f64),
                "forecast" => latest
                    .and_then(|r| r.forecast.as_ref())
                    .map(|f| if f.hit { 1.0 } else { 0.0 }),
                _ => None,
            }
        };
        // Borrowed where the key is the field as it is (the default, `updated`, included).
        fn key_s<'a>(sort: &str, e: &'a ExperimentRow, data: &'a CatalogData) -> Cow<'a, str> {
            match sort {
                "id" => Cow::Borrowed(e.id.as_str()),
                "title" => Cow::Owned(e.title.as_deref().unwrap_or_default().to_lowercase()),
                "status" => Cow::Borrowed(e.status_str(data)),
                "author" => Cow::Owned(e.author.as_deref().unwrap_or_default().to_lowercase()),
                "spec_hash" => Cow::Borrowed(e.spec_hash.as_deref().unwrap_or_default()),
                _ => Cow::Borrowed(e.updated.as_str()),
            }
        }
        let mut order: Vec<&ExperimentRow> = if matches!(sort, "final_loss" | "runs" | "forecast") {
            let mut keyed: Vec<(Option<f64>, &ExperimentRow)> =
                picked.into_iter().map(|e| (key_f(e), e)).collect();
            // Missing values sort last whatever the direction.
            keyed.sort_by(|(ka, a), (kb, b)| match (ka, kb) {
                (Some(x), Some(y)) => {
                    let o = x.total_cmp(y);
                    if desc { o.reverse() } else { o }
                }
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => a.id.cmp(&b.id),
            });
            keyed.into_iter().map(|(_, e)| e).collect()
        } else {
            let mut keyed: Vec<(Cow<'_, str>, &ExperimentRow)> = picked
                .into_iter()
                .map(|e| (key_s(sort, e, self), e))
                .collect();
            keyed.sort_by(|(ka, a), (kb, b)| {
                let o = ka.cmp(kb).then_with(|| a.id.cmp(&b.id));
                if desc { o.reverse() } else { o }
            });
            keyed.into_iter().map(|(_, e)| e).collect()
        };
        let total = order.len();
        let start = ((page - 1) as usize).saturating_mul(per_page as usize);
        let items = order
            .drain(..)
            .skip(start)
            .take(per_page as usize)
            .map(|e| self.list_row(e))
            .collect();
        Ok(ListPage {
            total,
            page,
            per_page,
            items,
        })
    }

    /// The list row of one experiment.
    pub fn list_row(&self, e: &ExperimentRow) -> ListRow {
        let latest = e.latest_run(self);
        ListRow {
            id: e.id.clone(),
            title: e.title.clone(),
            status: e.status(self),
            author: e.author.clone(),
            tags: e.tags().to_vec(),
            spec_hash: e.spec_hash.clone(),
            runs: e.runs.len(),
            latest_run: latest.map(|r| r.id.clone()),
            final_loss: latest.and_then(|r| {
                r.final_metrics
                    .get(glassbox_schemas::metrics::TRAIN_LOSS)
                    .copied()
            }),
            forecast_hit: latest.and_then(|r| r.forecast.as_ref().map(|f| f.hit)),
            anomalies: latest.map_or(0, |r| r.anomalies),
            updated: e.updated.clone(),
        }
    }

    /// Sweeps whose promotion gate failed (a negative result), newest decision first.
    pub fn failed_gates(&self) -> Vec<&SweepRow> {
        let mut v: Vec<&SweepRow> = self
            .sweeps
            .values()
            .filter(|s| s.gate_state() == "failed")
            .collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.decision.as_ref().map(|d| d.entry)));
        v
    }

    /// Runs that diverged, failed, ran out of budget, or missed their forecast, newest first.
    pub fn negative(&self) -> Vec<&RunRow> {
        let mut v: Vec<&RunRow> = self
            .runs
            .values()
            .filter(|r| {
                matches!(r.status.as_str(), "diverged" | "failed" | "budget_exceeded")
                    || r.forecast.as_ref().is_some_and(|f| !f.hit)
            })
            .collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.result_entry));
        v
    }
}
