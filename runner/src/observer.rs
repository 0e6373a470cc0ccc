//! Telemetry: the [`Observer`] trait the trainer reports through, the metric records it
//! passes, and [`JsonlObserver`], which appends them to `metrics.jsonl`.
//!
//! The ledger and the live dashboard implement [`Observer`] later; the runner itself only
//! calls it. Metric names are the schemas crate's ([`glassbox_schemas::metrics`]).
//! Not here: what is measured (the trainer) or how a run ends (its outcome).

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::RunnerError;
use glassbox_schemas::run::RunOutcome;

pub use glassbox_schemas::metrics::{MetricRecord, RecordKind};
pub use glassbox_schemas::record::Anomaly;

/// What the model wrote after each of the spec's prompts at one snapshot, as token ids (the
/// text is the recorder's business: it holds the tokenizer).
#[derive(Debug, Clone, PartialEq)]
pub struct SampleSet {
    /// Steps completed.
    pub step: u64,
    /// Tokens asked for per prompt (after fitting the context).
    pub max_tokens: u32,
    /// 0 is greedy.
    pub temperature: f64,
    /// Seed of the draws.
    pub seed: u64,
    /// `(prompt, completion)` token ids, in prompt order.
    pub items: Vec<(Vec<u32>, Vec<u32>)>,
}

/// Receives a run's telemetry. Every method has an empty default.
pub trait Observer {
    /// The run (re)started at `step` with this description (backend, peak, params).
    fn on_start(&mut self, _step: u64, _total_steps: u64, _info: &RunInfo) {}
    /// A training step or an evaluation finished.
    fn on_metrics(&mut self, _record: &MetricRecord) {}
    /// A checkpoint is about to be written: what was reported so far must be durable first, so
    /// that a process killed once the checkpoint exists has not lost the records before it.
    fn before_snapshot(&mut self, _step: u64) {}
    /// The anomaly detector flagged something at a train step (after that step's metrics).
    fn on_anomaly(&mut self, _anomaly: &Anomaly) {}
    /// A checkpoint was written.
    fn on_snapshot(&mut self, _step: u64, _path: &Path) {}
    /// The spec's `[samples]` were written at a snapshot (after its [`Observer::on_snapshot`]).
    fn on_samples(&mut self, _samples: &SampleSet) {}
    /// The run ended (any way).
    fn on_end(&mut self, _outcome: &RunOutcome) {}
}

pub use glassbox_schemas::run::RunInfo;

/// Several observers as one.
#[derive(Default)]
pub struct Fanout<'a> {
    /// The observers, called in order.
    pub observers: Vec<&'a mut dyn Observer>,
}

impl std::fmt::Debug for Fanout<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fanout({} observers)", self.observers.len())
    }
}

impl Observer for Fanout<'_> {
    fn on_start(&mut self, step: u64, total: u64, info: &RunInfo) {
        for o in &mut self.observers {
            o.on_start(step, total, info);
        }
    }
    fn on_metrics(&mut self, r: &MetricRecord) {
        for o in &mut self.observers {
            o.on_metrics(r);
        }
    }
    fn before_snapshot(&mut self, step: u64) {
        for o in &mut self.observers {
            o.before_snapshot(step);
        }
    }
    fn on_anomaly(&mut self, a: &Anomaly) {
        for o in &mut self.observers {
            o.on_anomaly(a);
        }
    }
    fn on_snapshot(&mut self, step: u64, path: &Path) {
        for o in &mut self.observers {
            o.on_snapshot(step, path);
        }
    }
    fn on_samples(&mut self, samples: &SampleSet) {
        for o in &mut self.observers {
            o.on_samples(samples);
        }
    }
    fn on_end(&mut self, outcome: &RunOutcome) {
        for o in &mut self.observers {
            o.on_end(outcome);
        }
    }
}

/// Appends each record as one JSON line to a file.
#[derive(Debug)]
pub struct JsonlObserver {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
}

impl JsonlObserver {
    /// Open `path` for appending. When resuming at `keep_through`, records after that step
    /// (written by the interrupted run after its last checkpoint) are dropped first, so the
    /// file reads as one uninterrupted run.
    pub fn open(path: &Path, keep_through: Option<u64>) -> Result<Self, RunnerError> {
        let ioe = |e| RunnerError::io(format!("metrics file {}", path.display()), e);
        let kept = match (keep_through, std::fs::File::open(path)) {
            (Some(step), Ok(f)) => {
                let mut kept = Vec::new();
                for line in std::io::BufReader::new(f).lines() {
                    let line = line.map_err(ioe)?;
                    match serde_json::from_str::<MetricRecord>(&line) {
                        Ok(r) if r.step <= step => kept.push(line),
                        _ => {}
                    }
                }
                Some(kept)
            }
            _ => None,
        };
        let file = match kept {
            Some(lines) => {
                let mut f = std::fs::File::create(path).map_err(ioe)?;
                for l in lines {
                    writeln!(f, "{l}").map_err(ioe)?;
                }
                f
            }
            None => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(ioe)?,
        };
        Ok(Self {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        })
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Observer for JsonlObserver {
    fn on_metrics(&mut self, r: &MetricRecord) {
        // Telemetry must not kill a run: a failed write is reported once on stderr by the
        // final flush below, not turned into a panic here.
        if let Ok(line) = serde_json::to_string(r) {
            let _ = writeln!(self.out, "{line}");
        }
    }
    fn before_snapshot(&mut self, _step: u64) {
        let _ = self.out.flush();
    }
    fn on_snapshot(&mut self, _step: u64, _path: &Path) {
        let _ = self.out.flush();
    }
    fn on_end(&mut self, _outcome: &RunOutcome) {
        if let Err(e) = self.out.flush() {
            eprintln!("warning: could not write {}: {e}", self.path.display());
        }
    }
}
