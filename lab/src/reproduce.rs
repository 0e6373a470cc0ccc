//! Reproduction: re-run a recorded run from the ledger alone and compare.
//!
//! [`reproduce`] reads the run's `run_started`, metric-chunk `artifact` and `result` entries,
//! re-hashes every blob they reference (a changed byte anywhere stops it with the blob named),
//! loads the spec by its hash, trains it again on this machine's CPU backend, and compares the
//! final parameters' hash and every deterministic metric at every step bitwise. Wall-clock
//! metrics (`throughput/tokens_per_second`, `throughput/mfu`, `hw/...`) are not compared: they
//! measure the machine, not the run. The outcome is a `reproduction` entry: `reproduced`, or
//! `differs` with `differs at step N: metric, expected X, got Y`.
//!
//! It also says which program re-ran it against the one that made the run (same binary, a
//! different binary of the same commit, ...) from the `run_started` entry's build identity.
//!
//! [`reproduce`] is `glassbox reproduce`: compare and record at once. A `/reproduce` from
//! GitHub is a queued job instead: a worker calls [`compare`] with its threads, the job's cancel
//! flag and the lab's wall-clock limit, and records the entry itself when the job ends.
//!
//! A run made on the CPU backend is compared bit for bit (`comparison: bitwise`). A run made on
//! another backend (CUDA) is re-run here on the CPU and compared within the backend-parity
//! tolerances (`comparison: tolerance`): every loss and bits-per-byte value within
//! [`TOL_STEP_LOSS`] relative (bf16 runs: [`TOL_BF16_LOSS`]); parameters are not compared.
//!
//! Not here: choosing what to reproduce, by hand (the CLI and the bot) or by the lab's
//! `[reproduce]` policy (`crate::flow::after_run`), or training internals (runner).

use glassbox_schemas::RefRole;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use glassbox_runner::backend::Backend;
use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::data::DataPipeline;
use glassbox_runner::observer::{MetricRecord, Observer, RecordKind};
use glassbox_runner::train::{Peak, RunOptions, Trainer, WallLimit};
use glassbox_schemas::record::EntryBody;
use glassbox_schemas::record::{
    BinaryComparison, BuildIdentity, ReproductionBody, ResultBody, RunStartedBody,
};
use glassbox_schemas::{Blake3Hash, BlobHash, ExperimentId, ExperimentSpec, RunId, RunStatus};
use serde::Serialize;

use glassbox_runner::backend::parity::{TOL_BF16_LOSS, TOL_STEP_LOSS};
use glassbox_schemas::record::Comparison;

use crate::corpus::BlobCorpusStore;
use crate::error::LabError;
use crate::recorder::Recorder;

/// What was found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reproduction {
    /// The run.
    pub run: RunId,
    /// `reproduced` or `differs`.
    pub outcome: String,
    /// The first difference, when any.
    pub detail: Option<String>,
    /// The `reproduction` entry.
    pub entry: u64,
    /// The code revision the run was made with.
    pub original_revision: String,
    /// The backend the run was made with.
    pub original_backend: String,
    /// Steps compared.
    pub steps: u64,
    /// Metric values compared.
    pub values_compared: usize,
    /// This program against the one that made the run.
    pub binary: BinaryComparison,
}

/// How to re-run a run.
#[derive(Debug, Clone)]
pub struct ReproduceOptions {
    /// CPU threads (the result is the same for any number).
    pub threads: usize,
    /// Set to stop the re-run at its next step (the outcome is then `cancelled`).
    pub cancel: Arc<AtomicBool>,
    /// A wall-clock limit (the lab's), besides the spec's own budget.
    pub wall_limit: Option<WallLimit>,
    /// The program re-running it, compared with the run's.
    pub build: Option<BuildIdentity>,
}

/// A re-run compared with its record, before the `reproduction` entry is written.
#[derive(Debug, Clone)]
pub struct Compared {
    /// The body of the `reproduction` entry.
    pub body: ReproductionBody,
    /// The experiment the run belongs to.
    pub experiment: Option<ExperimentId>,
    /// The code revision the run was made with.
    pub original_revision: String,
    /// The backend the run was made with.
    pub original_backend: String,
    /// Steps re-run.
    pub steps: u64,
    /// Metric values compared.
    pub values_compared: usize,
}

/// What the ledger says about a run.
struct RunRecord {
    experiment: Option<ExperimentId>,
    started: RunStartedBody,
    result: ResultBody,
    chunks: Vec<(u64, BlobHash)>,
}

/// Metrics that depend on the machine's speed, not on the run.
fn is_wall_clock(name: &str) -> bool {
    name == glassbox_schemas::metrics::TOKENS_PER_SECOND
        || name == glassbox_schemas::metrics::MFU
        || name.starts_with("hw/")
}

fn find_run(rec: &Recorder, run: &RunId) -> Result<RunRecord, LabError> {
    let mut started = None;
    let mut result = None;
    let mut experiment = None;
    let mut chunks = Vec::new();
    // From the record as the sequencer holds it, so a worker without the lab's files (on
    // another machine) reproduces as well as one beside the log.
    rec.for_each_entry(|i, e| {
        if e.body.run() != Some(run) {
            return;
        }
        match &e.body {
            EntryBody::RunStarted(b) if started.is_none() => {
                experiment = e.experiment.clone();
                started = Some(b.clone());
            }
            EntryBody::Result(b) => result = Some(b.clone()),
            EntryBody::Artifact(_) => {
                if let Some(h) = e.blob(RefRole::Metrics) {
                    chunks.push((i, BlobHash(*h)));
                }
            }
            _ => {}
        }
    })?;
    let started = started.ok_or_else(|| {
        LabError::Refused(format!(
            "no `run_started` entry for {run} in this ledger (see `glassbox ledger log`)"
        ))
    })?;
    let result = result.ok_or_else(|| {
        LabError::Refused(format!(
            "{run} has no `result` entry yet; reproduce it once it has ended"
        ))
    })?;
    Ok(RunRecord {
        experiment,
        started,
        result,
        chunks,
    })
}

/// A blob's bytes, refused unless they hash to its name.
pub(crate) fn verified(rec: &Recorder, hash: &BlobHash, what: &str) -> Result<Vec<u8>, LabError> {
    let bytes = rec.get_bytes(hash)?;
    let actual = Blake3Hash::of(&bytes);
    if actual != hash.0 {
        return Err(LabError::Refused(format!(
            "{what} blob {hash} is corrupt: its bytes hash to {actual}; the ledger cannot be re-run from it"
        )));
    }
    Ok(bytes)
}

/// Collects a run's records as it trains.
struct Collect(Vec<MetricRecord>);

impl Observer for Collect {
    fn on_metrics(&mut self, r: &MetricRecord) {
        self.0.push(r.clone());
    }
}

type MetricKey = (u64, bool, String);

fn flatten(records: &[MetricRecord]) -> BTreeMap<MetricKey, f64> {
    let mut out = BTreeMap::new();
    for r in records {
        let eval = r.kind == RecordKind::Eval;
        for (k, v) in &r.scalars {
            out.insert((r.step, eval, k.clone()), *v);
        }
        for (k, vs) in &r.vectors {
            for (i, v) in vs.iter().enumerate() {
                out.insert((r.step, eval, format!("{k}/{i}")), *v);
            }
        }
    }
    out
}

/// Re-runs `run` on `threads` CPU threads and records the outcome; `before_run` is told the
/// original code revision first (so a caller can say when it differs from this binary's).
pub async fn reproduce(
    rec: Arc<Recorder>,
    run: RunId,
    threads: usize,
    build: Option<BuildIdentity>,
    before_run: impl FnMut(&str, &str),
) -> Result<Reproduction, LabError> {
    let opts = ReproduceOptions {
        threads,
        cancel: Arc::new(AtomicBool::new(false)),
        wall_limit: None,
        build,
    };
    let c = compare(rec.clone(), run.clone(), &opts, before_run).await?;
    let body = c.body.clone();
    let experiment = c.experiment.clone();
    let entry = tokio::task::spawn_blocking(move || {
        rec.record(experiment.as_ref(), Default::default(), body)
    })
    .await
    .map_err(|e| LabError::Task(e.to_string()))??;
    Ok(Reproduction {
        run,
        outcome: c.body.outcome,
        detail: c.body.detail,
        entry,
        original_revision: c.original_revision,
        original_backend: c.original_backend,
        steps: c.steps,
        values_compared: c.values_compared,
        binary: c.body.binary.unwrap_or(BinaryComparison::Unrecorded),
    })
}

/// Re-runs `run` as `opts` says and compares it with its record; records nothing. Errors are
/// a run that cannot be re-run (no record, a corrupt blob, a spec that does not load).
pub async fn compare(
    rec: Arc<Recorder>,
    run: RunId,
    opts: &ReproduceOptions,
    mut before_run: impl FnMut(&str, &str),
) -> Result<Compared, LabError> {
    let r2 = rec.clone();
    let run2 = run.clone();
    let record = tokio::task::spawn_blocking(move || find_run(&r2, &run2))
        .await
        .map_err(|e| LabError::Task(e.to_string()))??;
    before_run(&record.started.code_revision, &record.started.backend);
    let rec2 = rec.clone();
    let (spec, expected) = tokio::task::spawn_blocking(move || {
        let spec_bytes = verified(&rec2, &BlobHash(record.result.spec_hash.0), "spec")?;
        let spec: ExperimentSpec =
            serde_json::from_slice(&spec_bytes).map_err(|e| LabError::BadSpec {
                hash: record.result.spec_hash.to_string(),
                reason: e.to_string(),
            })?;
        let mut expected: Vec<MetricRecord> = Vec::new();
        for (entry, hash) in &record.chunks {
            let bytes = verified(&rec2, hash, &format!("metric chunk (entry {entry})"))?;
            for line in String::from_utf8_lossy(&bytes).lines() {
                if let Ok(r) = serde_json::from_str::<MetricRecord>(line) {
                    expected.push(r);
                }
            }
        }
        Ok::<_, LabError>((spec, (expected, record)))
    })
    .await
    .map_err(|e| LabError::Task(e.to_string()))??;
    let (expected, record) = expected;

    // The exact token shards the run trained on, as its `run_started` entry names them.
    let mut shards = crate::tokens::ShardMap::new();
    if let Some(data) = &record.started.data {
        for c in &spec.data.mixture {
            if let (Some(corpus), Some(shard)) = (c.corpus, data.shards.get(&c.domain)) {
                shards.insert((corpus, data.tokenizer), *shard);
            }
        }
    }
    let spec2 = spec.clone();
    let blobs = rec.blobs().clone();
    let threads = opts.threads;
    let run_opts = RunOptions {
        out_dir: None,
        resume: None,
        peak: Peak {
            flops_per_second: 1e12,
            label: "reproduction (MFU not compared)".into(),
        },
        cancel: opts.cancel.clone(),
        wall_limit: opts.wall_limit.clone(),
    };
    let (outcome, got) = tokio::task::spawn_blocking(move || {
        let be = CpuBackend::<f32>::new(threads.max(1))?;
        let store = BlobCorpusStore::new(blobs).with_shards(shards);
        let data = DataPipeline::new(&spec2, &store)?;
        let mut trainer = Trainer::new(&be, spec2, data, &run_opts)?;
        let mut collect = Collect(Vec::new());
        let outcome = be.run(|| trainer.run(&run_opts, &mut collect));
        Ok::<_, LabError>((outcome, collect.0))
    })
    .await
    .map_err(|e| LabError::Task(e.to_string()))??;

    let want = flatten(&expected);
    let have = flatten(&got);
    let mut detail = None;
    let mut compared = 0;
    let comparison = comparison_for(&record.started.backend);
    let tolerance = if record.started.backend.contains("bf16") {
        TOL_BF16_LOSS
    } else {
        TOL_STEP_LOSS
    };
    // A re-run stopped from outside (a cancel, the lab's wall-clock limit) did not differ: it
    // did not finish.
    let stopped = match outcome.ending.status {
        RunStatus::Cancelled if record.result.ending.status != RunStatus::Cancelled => {
            Some("cancelled")
        }
        RunStatus::BudgetExceeded if record.result.ending.status != RunStatus::BudgetExceeded => {
            Some("failed")
        }
        _ => None,
    };
    if let Some(how) = stopped {
        detail = Some(format!(
            "the re-run stopped after {} of {} steps: {}",
            outcome.ending.steps,
            record.result.ending.steps,
            outcome.ending.reason.clone().unwrap_or_default()
        ));
        let body = ReproductionBody {
            comparison: Some(comparison),
            worker: None,
            host: None,
            automatic: false,
            run: run.clone(),
            outcome: how.into(),
            detail,
            backend: format!("cpu: {}", outcome.info.backend),
            binary: opts
                .build
                .as_ref()
                .map(|b| b.compare(record.started.build.as_ref())),
            build: opts.build.clone(),
        };
        return Ok(Compared {
            body,
            experiment: record.experiment,
            original_revision: record.started.code_revision,
            original_backend: record.started.backend,
            steps: outcome.ending.steps,
            values_compared: 0,
        });
    }
    for ((step, eval, name), w) in &want {
        if is_wall_clock(name) || !w.is_finite() {
            continue;
        }
        if comparison == Comparison::Tolerance && !is_parity_checked(name) {
            continue;
        }
        compared += 1;
        match have.get(&(*step, *eval, name.clone())) {
            Some(g) if g.to_bits() == w.to_bits() => {}
            Some(g)
                if comparison == Comparison::Tolerance
                    && (g - w).abs() <= tolerance * w.abs().max(1e-12) => {}
            Some(g) => {
                detail = Some(format!(
                    "differs at step {step}: {name}, expected {w}, got {g}"
                ));
                break;
            }
            None => {
                detail = Some(format!(
                    "differs at step {step}: {name}, expected {w}, got nothing"
                ));
                break;
            }
        }
    }
    if detail.is_none() && outcome.ending.status != record.result.ending.status {
        detail = Some(format!(
            "differs at step {}: status, expected {}, got {}",
            outcome.ending.steps, record.result.ending.status, outcome.ending.status
        ));
    }
    if detail.is_none()
        && comparison == Comparison::Bitwise
        && let Some(p) = &record.result.params_blake3
        && *p != outcome.params_blake3
    {
        detail = Some(format!(
            "differs at step {}: final parameters, expected {p}, got {}",
            outcome.ending.steps, outcome.params_blake3
        ));
    }
    let body = ReproductionBody {
        comparison: Some(comparison),
        worker: None,
        host: None,
        automatic: false,
        run: run.clone(),
        outcome: if detail.is_none() {
            "reproduced".into()
        } else {
            "differs".into()
        },
        detail,
        backend: format!("cpu: {}", outcome.info.backend),
        binary: opts
            .build
            .as_ref()
            .map(|b| b.compare(record.started.build.as_ref())),
        build: opts.build.clone(),
    };
    Ok(Compared {
        body,
        experiment: record.experiment,
        original_revision: record.started.code_revision,
        original_backend: record.started.backend,
        steps: outcome.ending.steps,
        values_compared: compared,
    })
}

/// Bitwise for a run made on the CPU backend (as this re-run is); within tolerances otherwise.
fn comparison_for(original_backend: &str) -> Comparison {
    if original_backend.starts_with("cpu") {
        Comparison::Bitwise
    } else {
        Comparison::Tolerance
    }
}

/// The metrics a cross-backend comparison checks: losses and bits per byte (what the backend
/// parity tolerances are stated for).
fn is_parity_checked(name: &str) -> bool {
    name.ends_with("/loss") || name.ends_with("/bpb")
}

/// The boards of `defs` over the lab's record as the sequencer holds it.
pub fn derive_boards(
    rec: &Recorder,
    defs: &[glassbox_ledger::board::BoardDef],
) -> Result<Vec<glassbox_ledger::board::Board>, LabError> {
    let mut builder = glassbox_ledger::board::BoardBuilder::new();
    rec.for_each_entry(|i, e| builder.add(i, &e))?;
    Ok(builder.finish(defs, |h| {
        rec.get_bytes(&BlobHash(h.0))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    }))
}
