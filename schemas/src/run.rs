//! What a training run reports about itself: [`RunOutcome`] (the runner's ending with what only
//! the trainer knows), [`RunInfo`] (backend, peak, kernels), and [`RunSummary`], the
//! `summary.json` that `glassbox run` writes and prints with `--json`.
//!
//! These are formats, so they live here; the runner produces them and everyone else reads
//! them. The ending itself ([`RunEnding`]) is the one the ledger's `result` entry carries. Not
//! here: how a run is trained or recorded.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::hash::{Blake3Hash, BlobHash, SpecHash};
use crate::record::{ExperimentId, JobId, RunEnding, RunId, RunStatus};

/// The BLAKE3 of one kernel source file a backend ran, for the run record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSource {
    /// Source name, e.g. `cpu/attention.rs` or `kernels/attention.cu`.
    pub name: String,
    /// `blake3:<hex>` of the source bytes.
    pub blake3: String,
}

/// Facts about a run for its record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Backend description, e.g. `cpu (2 threads, f32)`.
    pub backend: String,
    /// BLAKE3 of each kernel source the backend runs.
    pub kernel_sources: Vec<KernelSource>,
    /// Peak FLOP/s MFU is stated against.
    pub peak_flops: f64,
    /// What that peak is (e.g. `measured f32 GEMM peak, 2 threads`).
    pub peak_label: String,
    /// Parameter count.
    pub params: u64,
    /// Training FLOPs per token (the cost model).
    pub flops_per_token: f64,
    /// Known entropy floor per domain, nats per token, where the domain has one.
    pub entropy_floor_nats: BTreeMap<String, f64>,
}

/// How a run ended, with its metrics (a negative result is as complete as a positive one):
/// the [`RunEnding`] everyone downstream carries, plus what only the trainer knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// Status (succeeded, diverged, budget_exceeded, cancelled, failed), steps completed, the
    /// last good value of every scalar metric, and why (for anything but success).
    #[serde(flatten)]
    pub ending: RunEnding,
    /// `blake3:<hex>` of the final parameters (little-endian, snapshot order).
    pub params_blake3: Blake3Hash,
    /// Tokens trained on.
    pub total_tokens: u64,
    /// Wall seconds of training (all segments).
    pub elapsed_seconds: f64,
    /// The last training snapshot written, if any (a file the runner wrote).
    #[serde(rename = "checkpoint")]
    pub snapshot: Option<PathBuf>,
    /// Backend, peak and kernel hashes.
    pub info: RunInfo,
}

/// `summary.json`: what `glassbox run` tells its caller about a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The spec file trained.
    pub spec: String,
    /// How it ended.
    pub status: RunStatus,
    /// Why, for anything but success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The trainer's outcome; absent when the run ended before training (refused, lost).
    pub outcome: Option<RunOutcome>,
    /// The process's peak resident memory, where the system reports it.
    pub peak_rss_bytes: Option<u64>,
    /// Where metrics and (for a bare run) snapshots were written.
    pub out_dir: String,
    /// Where the run is on the record, when it went through the lab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<SummaryLedger>,
}

/// A run's place in the ledger, for its summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryLedger {
    /// The experiment.
    pub experiment: ExperimentId,
    /// The run.
    pub run: RunId,
    /// The queue's job.
    pub job: JobId,
    /// The spec trained.
    pub spec_hash: SpecHash,
    /// Index of the `proposal` entry.
    pub proposal_entry: u64,
    /// Index of the `approval` entry.
    pub approval_entry: u64,
    /// Index of the `result` entry, once it is in the log's published checkpoint; `null` when
    /// it could not be written yet (see `unpublished_result`).
    pub result_entry: Option<u64>,
    /// The `result` entry that is sequenced (committed with the job's end) but could not be
    /// written to the log when the run ended, and why. The lab publishes it when it can; it is
    /// not on the record until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unpublished_result: Option<UnpublishedEntry>,
    /// The last training snapshot, by blob.
    #[serde(rename = "checkpoint")]
    pub snapshot: Option<SummarySnapshot>,
}

/// An entry on its way into the log that could not be written yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnpublishedEntry {
    /// The index it is sequenced at.
    pub entry: u64,
    /// Why it is not in the log.
    pub error: String,
}

/// A training snapshot stored as a blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummarySnapshot {
    /// The blob.
    pub blob: BlobHash,
    /// The step it holds.
    pub step: u64,
}
