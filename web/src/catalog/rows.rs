//! The catalog's rows: what the dashboard lists about an experiment, a run, a forecast, a sweep
//! and its gate, a dataset, a tokenizer and a token shard, each as the API serializes it.
//!
//! Not here: how they are filled (`fold`) or listed (`listing`).

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
use glassbox_schemas::data::CorpusFormat;
use glassbox_schemas::record::{ForecastVerdict, GateSide};
use glassbox_schemas::{ExperimentPhase, RunPhase};
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

use super::*;

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
    #[schema(value_type = String)]
    pub status: RunPhase,
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
pub(crate) fn serde_name(v: impl Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

pub(crate) fn gate_side(s: GateSide) -> GateSideRow {
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

impl ExperimentRow {
    /// Where it stands: its latest run's phase, else rejected, approved or proposed.
    pub fn phase(&self, data: &CatalogData) -> ExperimentPhase {
        if let Some(run) = self.runs.last().and_then(|r| data.runs.get(r)) {
            return ExperimentPhase::Run(run.status);
        }
        if self.rejected.is_some() {
            ExperimentPhase::Rejected
        } else if self.approved_by.is_some() {
            ExperimentPhase::Approved
        } else {
            ExperimentPhase::Proposed
        }
    }

    /// [`ExperimentRow::phase`] in its word.
    pub fn status(&self, data: &CatalogData) -> String {
        self.phase(data).as_str().to_string()
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
