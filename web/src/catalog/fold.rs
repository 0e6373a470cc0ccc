//! The fold: each entry of the index, once and in log order, into the catalog's rows.
//!
//! Not here: fetching the entries (`Catalog::refresh`) or listing the rows (`listing`).

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
use glassbox_schemas::data::{TokenizedBody, TokenizerBody};
use glassbox_schemas::record::{
    AnomalyBody, ApprovalBody, DatasetBody, ForecastBody, GateBody, IssueRef, ProposalBody,
    RejectionBody, ResultBody, RunStartedBody, SweepBody,
};
use glassbox_schemas::{EntryKind, LedgerEntry};
use glassbox_schemas::{RefRole, RunPhase};
use std::collections::BTreeMap;

use super::*;

impl CatalogData {
    /// Notes that entry `idx` is about `experiment` and `run` (and so about the run's
    /// experiment).
    pub(super) fn touch(&mut self, idx: u64, experiment: Option<String>, run: Option<String>) {
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
            status: RunPhase::Running,
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

    pub(super) fn fold(&mut self, idx: u64, e: &LedgerEntry) {
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
                let spec_blob = e.blob(RefRole::Spec).map(|h| h.to_string());
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
                    run.status = RunPhase::Ended(b.ending.status);
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
                        corpus: e.blob(RefRole::Corpus).map(|h| h.to_string()),
                        entropy_bits_per_byte: d.entropy_bits_per_byte,
                        format: d.format,
                        documents: d.documents,
                        text_bytes: d.text_bytes,
                    });
                }
            }
            EntryKind::Tokenizer => {
                if let (Ok(t), Some(h)) = (e.body_as::<TokenizerBody>(), e.blob(RefRole::Tokenizer))
                {
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

pub(crate) fn rfc3339(t: &time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}
