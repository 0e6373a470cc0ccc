//! A run's trained model, from the record: its snapshots (one per `snapshot` entry), the one a
//! user picks (the newest, a step, or a blob hash), loaded with the spec and the tokenizer it
//! was trained with, each checked against its hash; and what it does with text ([`score`],
//! [`sample`]) on this machine's CPU.
//!
//! [`score`]: TrainedModel::score
//! [`sample`]: TrainedModel::sample
//!
//! Not here: the model's mathematics and decoding (the runner), or recording samples.

use std::path::Path;

use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::backend::{Backend, Selected};
use glassbox_runner::decode::DecodeWeights;
use glassbox_runner::error::RunnerError;
use glassbox_runner::inference::{self, Completion, Score};
use glassbox_runner::model::{Model, ModelDims};
use glassbox_runner::sampling::SampleSettings;
use glassbox_runner::snapshot::{self, TrainingSnapshot};
use glassbox_runner::text::TextCodec;
use glassbox_schemas::record::{EntryBody, RunStartedBody};
use glassbox_schemas::{BlobHash, ExperimentId, ExperimentSpec, RefRole, RunId};

use crate::error::LabError;
use crate::recorder::Recorder;
use crate::reproduce::verified;

/// One snapshot of a run on the record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotRef {
    /// Steps completed when it was saved.
    pub step: u64,
    /// Its blob.
    pub blob: BlobHash,
    /// Its `snapshot` entry.
    pub entry: u64,
}

/// Which snapshot of a run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Pick {
    /// The newest (highest step).
    #[default]
    Newest,
    /// The one saved after this many steps.
    Step(u64),
    /// The one with this blob.
    Blob(BlobHash),
}

/// A run's start and its snapshots, oldest first.
#[derive(Debug, Clone)]
pub struct RunSnapshots {
    /// The experiment the run belongs to.
    pub experiment: Option<ExperimentId>,
    /// Its `run_started` entry's body.
    pub started: RunStartedBody,
    /// Its snapshots by step.
    pub snapshots: Vec<SnapshotRef>,
}

impl RunSnapshots {
    /// Reads them from the record.
    pub fn find(rec: &Recorder, run: &RunId) -> Result<Self, LabError> {
        let mut started = None;
        let mut experiment = None;
        let mut snapshots = Vec::new();
        rec.for_each_entry(|i, e| {
            if e.body.run() != Some(run) {
                return;
            }
            match &e.body {
                EntryBody::RunStarted(b) if started.is_none() => {
                    experiment = e.experiment.clone();
                    started = Some(b.clone());
                }
                EntryBody::Snapshot(b) => {
                    if let Some(h) = e.blob(RefRole::Checkpoint) {
                        snapshots.push(SnapshotRef {
                            step: b.step,
                            blob: BlobHash(*h),
                            entry: i,
                        });
                    }
                }
                _ => {}
            }
        })?;
        let started = started.ok_or_else(|| {
            LabError::Refused(format!(
                "no run {run} in this ledger (no `run_started` entry; `glassbox jobs` and `glassbox ledger log` list runs)"
            ))
        })?;
        snapshots.sort_by_key(|s| (s.step, s.entry));
        Ok(Self {
            experiment,
            started,
            snapshots,
        })
    }

    /// The snapshot `pick` names, or an error listing the steps there are.
    pub fn pick(&self, run: &RunId, pick: &Pick) -> Result<&SnapshotRef, LabError> {
        let steps = || {
            let s: Vec<String> = self.snapshots.iter().map(|s| s.step.to_string()).collect();
            if s.is_empty() {
                "it has none (set train.checkpoint_every in the spec to keep snapshots)".to_string()
            } else {
                format!("its snapshots are at steps {}", s.join(", "))
            }
        };
        let found = match pick {
            Pick::Newest => self.snapshots.last(),
            // The newest entry for a step, should a resumed run have saved it twice.
            Pick::Step(n) => self.snapshots.iter().rev().find(|s| s.step == *n),
            Pick::Blob(h) => self.snapshots.iter().find(|s| s.blob == *h),
        };
        found.ok_or_else(|| {
            let what = match pick {
                Pick::Newest => "no snapshot".to_string(),
                Pick::Step(n) => format!("no snapshot at step {n}"),
                Pick::Blob(h) => format!("no snapshot {h}"),
            };
            LabError::Refused(format!("run {run} has {what}: {}", steps()))
        })
    }
}

/// A snapshot loaded with its spec and tokenizer.
pub struct TrainedModel {
    /// The run.
    pub run: RunId,
    /// The run's record.
    pub record: RunSnapshots,
    /// The snapshot loaded.
    pub snapshot: SnapshotRef,
    /// The spec it was trained with.
    pub spec: ExperimentSpec,
    /// The model's layout.
    pub model: Model,
    /// The snapshot's state (parameters, selection bias, counters).
    pub state: TrainingSnapshot<f32>,
    /// Its tokenizer.
    pub codec: TextCodec,
}

impl std::fmt::Debug for TrainedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainedModel")
            .field("run", &self.run)
            .field("snapshot", &self.snapshot)
            .finish()
    }
}

impl TrainedModel {
    /// Loads `run`'s snapshot `pick` from the record, checking every blob against its hash.
    pub fn load(rec: &Recorder, run: &RunId, pick: &Pick) -> Result<Self, LabError> {
        let record = RunSnapshots::find(rec, run)?;
        let snapshot = record.pick(run, pick)?.clone();
        let spec_hash = record.started.spec_hash;
        let spec_bytes = verified(rec, &BlobHash(spec_hash.0), "spec")?;
        // A spec this build does not know (a field or a value of a newer glassbox) is refused
        // as one it cannot run, naming what it does not know, rather than as a broken record.
        let spec: ExperimentSpec = serde_json::from_slice(&spec_bytes).map_err(|e| {
            LabError::Refused(format!(
                "run {run}'s spec {spec_hash} cannot be run by this binary (glassbox {}): {e}; \
                 a newer glassbox may know it",
                env!("CARGO_PKG_VERSION")
            ))
        })?;
        let dims = ModelDims::from_spec(&spec).map_err(|e| {
            LabError::Refused(format!(
                "run {run}'s spec cannot be run by this binary: {e}"
            ))
        })?;
        let model = Model::new(dims);
        let bytes = verified(rec, &snapshot.blob, "snapshot")?;
        let state: TrainingSnapshot<f32> =
            snapshot::from_bytes(&bytes, Path::new(&snapshot.blob.to_string()))?;
        if state.spec_hash != spec_hash.to_string() {
            return Err(LabError::Refused(format!(
                "snapshot {} belongs to spec {}, not the run's {spec_hash}",
                snapshot.blob, state.spec_hash
            )));
        }
        let matches = state.params.len() == model.params.len()
            && state.router_bias.len() == model.dims.n_layers
            && state
                .params
                .iter()
                .zip(&model.params)
                .all(|((name, shape, values), want)| {
                    *name == want.name && *shape == want.shape && values.len() == want.numel()
                });
        if !matches {
            return Err(LabError::Refused(format!(
                "snapshot {}'s tensors do not match the model its spec describes",
                snapshot.blob
            )));
        }
        let codec = crate::tokens::codec_for(rec, &spec)?;
        Ok(Self {
            run: run.clone(),
            record,
            snapshot,
            spec,
            model,
            state,
            codec,
        })
    }

    /// Runs `f` with the parameters on a CPU backend of `threads` threads, inside its pool.
    fn on_cpu<T>(
        &self,
        threads: usize,
        f: impl FnOnce(&CpuBackend<f32>, &[<CpuBackend<f32> as Backend>::Buf]) -> Result<T, LabError>
        + Send,
    ) -> Result<T, LabError>
    where
        T: Send,
    {
        let be = CpuBackend::<f32>::new(threads.max(1))?;
        self.on(&be, f)
    }

    /// Runs `f` with the parameters uploaded to `be`, inside its [`Backend::run`]; a device
    /// failure on the way (out of memory, a failed launch) is the error.
    fn on<B: Backend<F = f32>, T: Send>(
        &self,
        be: &B,
        f: impl FnOnce(&B, &[B::Buf]) -> Result<T, LabError> + Send,
    ) -> Result<T, LabError> {
        let params: Vec<_> = self
            .state
            .params
            .iter()
            .map(|(_, _, v)| be.upload(v))
            .collect();
        let out = be.run(|| f(be, &params));
        match be.take_error() {
            Some(e) => Err(LabError::Runner(RunnerError::Backend(e))),
            None => out,
        }
    }

    /// The model's negative log-likelihood of `text`.
    pub fn score(&self, threads: usize, text: &str) -> Result<Score, LabError> {
        let (ids, bytes) = self.codec.encode(text)?;
        self.on_cpu(threads, |be, params| {
            Ok(inference::score(
                &self.model,
                be,
                params,
                &self.state.router_bias,
                &ids,
                &bytes,
            )?)
        })
    }

    /// Each request's continuation log-likelihood ([`inference::continuation_logliks`]);
    /// `None` when `cancelled` turned true on the way.
    pub fn continuation_logliks(
        &self,
        threads: usize,
        requests: &[inference::Continuation],
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<Option<Vec<f64>>, LabError> {
        self.on_cpu(threads, |be, params| {
            Ok(inference::continuation_logliks(
                &self.model,
                be,
                params,
                &self.state.router_bias,
                requests,
                cancelled,
            )?)
        })
    }

    /// Each text's score, with the parameters uploaded once; `None` when `cancelled` turned
    /// true between texts.
    pub fn score_many(
        &self,
        threads: usize,
        texts: &[&str],
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<Option<Vec<Score>>, LabError> {
        let encoded = texts
            .iter()
            .map(|t| self.codec.encode(t))
            .collect::<Result<Vec<_>, _>>()?;
        self.on_cpu(threads, |be, params| {
            let mut out = Vec::with_capacity(encoded.len());
            for (ids, bytes) in &encoded {
                if cancelled() {
                    return Ok(None);
                }
                out.push(inference::score(
                    &self.model,
                    be,
                    params,
                    &self.state.router_bias,
                    ids,
                    bytes,
                )?);
            }
            Ok(Some(out))
        })
    }

    /// What the model writes after `prompt`, on a started backend: the CPU reference, or a
    /// device computing its products in the precision the run trained in.
    pub fn sample(
        &self,
        on: &Selected,
        prompt: &str,
        max_tokens: usize,
        settings: SampleSettings,
    ) -> Result<Completion, LabError> {
        match on {
            Selected::Cpu(be) => self.sample_on(be, prompt, max_tokens, settings),
            Selected::Cuda(be) => {
                be.set_precision(self.spec.train.precision)
                    .map_err(|e| LabError::Runner(RunnerError::Backend(e)))?;
                self.sample_on(be, prompt, max_tokens, settings)
            }
        }
    }

    fn sample_on<B: Backend<F = f32>>(
        &self,
        be: &B,
        prompt: &str,
        max_tokens: usize,
        settings: SampleSettings,
    ) -> Result<Completion, LabError> {
        self.on(be, |be, params| {
            let weights = DecodeWeights::new(&self.model, be, params);
            Ok(inference::generate(
                &self.model,
                be,
                &weights,
                &self.state.router_bias,
                &self.codec,
                prompt,
                max_tokens,
                settings,
            )?)
        })
    }
}
