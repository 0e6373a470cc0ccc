//! The training loop: AdamW with a warmup + decay schedule, global-norm clipping, the
//! balancing-bias updates, evaluation, checkpoints, budgets, cancellation, and the run's
//! outcome. Generic over the backend; it never panics on a bad run — NaN/inf, a budget or a
//! cancel request end the run with a [`RunOutcome`] that carries the metrics.
//!
//! Balancing (per layer, after each optimiser step, stop-gradient):
//! - `aux_loss_free` (DeepSeek-V3): `b_i += rate * sign(mean_load - load_i)`, then `b -= mean(b)`;
//! - `quantile` (Marin): `b_i -= scale * q_i`, with `q_i` the per-expert upper `(1 - K/E)`
//!   quantile of `score + bias - (K-th biased score of the token)` from this step's forward,
//!   so next step expert i is chosen by about `N K / E` tokens;
//! - `switch_aux_loss`: a loss term in the model (`coef E sum f_i P_i`), no bias;
//! - `none`.
//!
//! Not here: the model's math ([`crate::model`]), data ([`crate::data`]), printing (the CLI).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use glassbox_schemas::metrics as mn;
use glassbox_schemas::record::RunEnding;
use glassbox_schemas::spec::{Balancing, ExperimentSpec, Precision, Schedule};
use glassbox_schemas::{RunStatus, cost};

use crate::anomaly::AnomalyDetector;
use crate::backend::{AdamW, Backend};
use crate::data::{DataPipeline, Source};
use crate::decode::DecodeWeights;
use crate::error::RunnerError;
use crate::inference::generate_ids;
use crate::model::{BatchIds, Model, ModelDims, PassStats};
use crate::observer::{MetricRecord, Observer, RecordKind, RunInfo, SampleSet};
use crate::sampling::{SampleSettings, Sampler};
use crate::scalar::Real;
use crate::snapshot::{self, TrainingSnapshot};

/// Learning rate at 0-based `step`: linear warmup from 0 to `lr` over `warmup_steps`, then the
/// schedule down to `min_lr_ratio * lr` at the last step (`wsd`: constant, then linear decay
/// over the last `decay_fraction` of steps); times the factor of every `lr_milestones` entry
/// whose step has been reached.
pub fn learning_rate(spec: &ExperimentSpec, step: u64) -> f64 {
    let factor: f64 = spec
        .train
        .lr_milestones
        .iter()
        .filter(|m| step >= m.step)
        .map(|m| m.factor)
        .product();
    factor * scheduled_rate(spec, step)
}

fn scheduled_rate(spec: &ExperimentSpec, step: u64) -> f64 {
    let t = &spec.train;
    let (lr, min) = (t.lr, t.lr * t.min_lr_ratio);
    if step < t.warmup_steps {
        return lr * (step + 1) as f64 / t.warmup_steps as f64;
    }
    let span = t.steps.saturating_sub(t.warmup_steps).max(1) as f64;
    let progress = ((step - t.warmup_steps) as f64 / span).min(1.0);
    match t.schedule {
        Schedule::Constant => lr,
        Schedule::Linear => lr + (min - lr) * progress,
        Schedule::Cosine => {
            min + 0.5 * (lr - min) * (1.0 + (std::f64::consts::PI * progress).cos())
        }
        Schedule::Wsd => {
            let decay_start = 1.0 - t.decay_fraction;
            if progress <= decay_start || t.decay_fraction <= 0.0 {
                lr
            } else {
                lr + (min - lr) * ((progress - decay_start) / t.decay_fraction)
            }
        }
    }
}

/// The wall-clock limit in force: the smaller of the spec's `budget.max_wall_seconds` and the
/// runner's [`WallLimit`], with a description of whose it is.
fn wall_limit(spec: &ExperimentSpec, outside: Option<&WallLimit>) -> Option<(f64, String)> {
    let own = spec
        .budget
        .max_wall_seconds
        .map(|s| (s, "wall-clock budget (budget.max_wall_seconds)".to_string()));
    let outside = outside.map(|l| (l.seconds, format!("wall-clock limit ({})", l.source)));
    match (own, outside) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// How to run, beyond the spec.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where metrics, checkpoints and the summary go (None: nowhere).
    pub out_dir: Option<PathBuf>,
    /// Resume from this checkpoint.
    pub resume: Option<PathBuf>,
    /// MFU reference.
    pub peak: Peak,
    /// Set to true to cancel at the next step.
    pub cancel: Arc<AtomicBool>,
    /// A wall-clock limit set by whoever runs the spec (a lab's `limits.max_wall_seconds`),
    /// applied together with the spec's own `budget.max_wall_seconds`: the smaller wins.
    pub wall_limit: Option<WallLimit>,
}

/// A wall-clock limit from outside the spec.
#[derive(Debug, Clone, PartialEq)]
pub struct WallLimit {
    /// Seconds of training (all segments of a resumed run together).
    pub seconds: f64,
    /// Who set it, for the outcome's reason (e.g. `the lab's limits.max_wall_seconds`).
    pub source: String,
}

pub use crate::backend::Peak;
pub use glassbox_schemas::run::RunOutcome;

/// A training run in progress.
pub struct Trainer<'a, B: Backend> {
    be: &'a B,
    spec: ExperimentSpec,
    spec_hash: String,
    /// The model.
    pub model: Model,
    data: DataPipeline,
    params: Vec<B::Buf>,
    grads: Vec<B::Buf>,
    adam_m: Vec<B::Buf>,
    adam_v: Vec<B::Buf>,
    bias: Vec<Vec<f64>>,
    step: u64,
    total_tokens: u64,
    /// Training tokens each domain gave so far (`data/<domain>/tokens`).
    domain_tokens: Vec<u64>,
    flops_used: f64,
    elapsed_before: f64,
    info: RunInfo,
    /// Last good value of every scalar metric (kept across `run` calls).
    last: BTreeMap<String, f64>,
    /// Watches the train records for spikes, jumps and collapse.
    detector: AnomalyDetector,
    /// `[samples]` prompts given as token ids, when the caller encoded them.
    sample_prompts: Option<Vec<Vec<u32>>>,
    /// Which step records carry hardware telemetry (`hw/...`).
    hardware: crate::backend::telemetry::Sampler,
}

impl<B: Backend> std::fmt::Debug for Trainer<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("spec", &self.spec.experiment.slug)
            .field("step", &self.step)
            .field("backend", &self.info.backend)
            .finish()
    }
}

impl<'a, B: Backend> Trainer<'a, B> {
    /// Set up a run: model, data, fresh parameters (or a checkpoint's state with `resume`).
    pub fn new(
        be: &'a B,
        spec: ExperimentSpec,
        data: DataPipeline,
        opts: &RunOptions,
    ) -> Result<Self, RunnerError> {
        let dims = ModelDims::from_spec(&spec)?;
        // The backend computes in the spec's precision or refuses it (the CPU keeps f32):
        // never a run recorded as bf16 that trained in f32.
        be.set_precision(spec.train.precision)
            .map_err(|fix| RunnerError::Unsupported {
                field: "train.precision",
                value: match spec.train.precision {
                    Precision::F32 => "\"f32\"".into(),
                    Precision::Bf16 => "\"bf16\"".into(),
                },
                fix,
            })?;
        let mut model = Model::new(dims);
        // Only quantile balancing reads the per-expert offsets (a host-side sort per layer).
        model.quantile_stats = matches!(spec.model.moe.balancing, Balancing::Quantile { .. });
        let spec_hash = glassbox_schemas::spec_hash(&spec)
            .map(|h| h.to_string())
            .map_err(|e| RunnerError::Unsupported {
                field: "spec",
                value: "(whole spec)".into(),
                fix: format!("the spec has no canonical form: {e}"),
            })?;
        // The run's big buffers, allocated fallibly: a model too big for the machine stops here
        // with the size asked for, instead of aborting the process.
        let params = model.try_init_params(be, spec.train.seed)?;
        let grads = model.try_zeros_like_params(be)?;
        let adam_m = model.try_zeros_like_params(be)?;
        let adam_v = model.try_zeros_like_params(be)?;
        let bias = vec![vec![0.0; model.dims.n_experts]; model.dims.n_layers];
        let entropy_floor_nats = data
            .domains
            .iter()
            .filter_map(|d| {
                d.entropy_bits_per_byte()
                    .map(|h| (d.name.clone(), h * std::f64::consts::LN_2))
            })
            .collect();
        let info = RunInfo {
            backend: be.describe(),
            kernel_sources: be.kernel_sources(),
            peak_flops: opts.peak.flops_per_second,
            peak_label: opts.peak.label.clone(),
            params: model.num_params() as u64,
            flops_per_token: cost::flops_per_token(&spec),
            entropy_floor_nats,
        };
        let n_domains = data.domains.len();
        let detector = AnomalyDetector::new(
            &spec.train.anomaly,
            model.dims.n_layers,
            model.dims.n_experts,
            spec.model.moe.top_k as usize,
        );
        let mut t = Self {
            detector,
            sample_prompts: None,
            hardware: crate::backend::telemetry::Sampler::new(be.host_threads()),
            be,
            spec,
            spec_hash,
            model,
            data,
            params,
            grads,
            adam_m,
            adam_v,
            bias,
            step: 0,
            total_tokens: 0,
            domain_tokens: vec![0; n_domains],
            flops_used: 0.0,
            elapsed_before: 0.0,
            info,
            last: BTreeMap::new(),
        };
        if let Some(path) = &opts.resume {
            t.restore(path)?;
        }
        if let Some(err) = be.take_error() {
            return Err(RunnerError::Backend(err));
        }
        Ok(t)
    }

    /// Steps completed.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The parameters, for tools and fault-injection tests (e.g. poisoning a value to check
    /// that divergence is reported).
    pub fn params_mut(&mut self) -> &mut [B::Buf] {
        &mut self.params
    }

    /// Facts for the run record.
    pub fn info(&self) -> &RunInfo {
        &self.info
    }

    fn restore(&mut self, path: &std::path::Path) -> Result<(), RunnerError> {
        let st: TrainingSnapshot<B::F> = snapshot::load(path)?;
        let bad = |reason: String| RunnerError::Snapshot {
            path: path.to_path_buf(),
            reason,
        };
        if st.spec_hash != self.spec_hash {
            return Err(bad(format!(
                "it belongs to spec {}, not {}: resume with the spec it was trained on",
                st.spec_hash, self.spec_hash
            )));
        }
        if st.params.len() != self.model.params.len() || st.router_bias.len() != self.bias.len() {
            return Err(bad("its tensors do not match the model".into()));
        }
        for (i, (name, shape, values)) in st.params.iter().enumerate() {
            let want = &self.model.params[i];
            if *name != want.name || *shape != want.shape || values.len() != want.numel() {
                return Err(bad(format!("tensor {name} does not match {}", want.name)));
            }
            self.params[i] = self.be.upload(values);
            self.adam_m[i] = self.be.upload(&st.adam_m[i]);
            self.adam_v[i] = self.be.upload(&st.adam_v[i]);
        }
        self.bias = st.router_bias;
        self.step = st.step;
        self.domain_tokens = self.data.tokens_by_domain(st.step);
        self.total_tokens = st.total_tokens;
        self.flops_used = st.flops_used;
        self.elapsed_before = st.elapsed_seconds;
        Ok(())
    }

    /// Prompts for the spec's `[samples]` given as token ids (a stored tokenizer's encoding of
    /// `samples.prompts`, which the runner cannot do itself); replaces the default.
    pub fn set_sample_prompts(&mut self, prompts: Vec<Vec<u32>>) {
        self.sample_prompts = Some(prompts);
    }

    /// The prompts of `[samples]`: as set, else the spec's own for the `bytes` tokenizer, else
    /// the first tokens (up to 16, at most half the context) of each domain's held-out split
    /// (at most four domains).
    fn prompt_ids(&self) -> Vec<Vec<u32>> {
        if let Some(p) = &self.sample_prompts {
            return p.clone();
        }
        let given = self
            .spec
            .samples
            .as_ref()
            .map_or(&[][..], |s| &s.prompts[..]);
        if !given.is_empty() && self.spec.data.tokenizer.stored().is_none() {
            return given
                .iter()
                .map(|p| p.bytes().map(u32::from).collect())
                .collect();
        }
        let t = self.model.dims.seq_len;
        let take = 16.min(t / 2).max(1);
        (0..self.data.domains.len().min(4))
            .map(|d| {
                let b = self.data.eval_batch(d, 0);
                b.tokens[..take.min(b.tokens.len())].to_vec()
            })
            .collect()
    }

    /// The spec's `[samples]` at this step: each prompt (cut from the front to leave room for
    /// the completion) through the cached decoder. The tokens fed count in the FLOPs budget at
    /// an evaluation forward's cost.
    fn write_samples(&mut self) -> Result<SampleSet, RunnerError> {
        let Some(cfg) = self.spec.samples.clone() else {
            return Err(RunnerError::Backend("no [samples] in the spec".into()));
        };
        let t = self.model.dims.seq_len;
        let max_new = (cfg.max_tokens as usize).clamp(1, t - 1);
        let settings = SampleSettings {
            temperature: cfg.temperature,
            top_k: None,
            top_p: 1.0,
            seed: cfg.seed,
        };
        let mut items = Vec::new();
        let mut fed = 0u64;
        let weights = DecodeWeights::new(&self.model, self.be, &self.params);
        for mut prompt in self.prompt_ids() {
            let room = t - max_new;
            if prompt.len() > room {
                prompt.drain(..prompt.len() - room);
            }
            if prompt.is_empty() {
                continue;
            }
            // Every prompt starts the same stream: a completion depends on its prompt only.
            let mut sampler = Sampler::new(settings)?;
            let out = generate_ids(
                &self.model,
                self.be,
                &weights,
                &self.bias,
                &prompt,
                max_new,
                &mut sampler,
                None,
            )?;
            fed += (prompt.len() + out.ids.len()) as u64;
            items.push((prompt, out.ids));
        }
        self.flops_used += cost::eval_flops_per_token(&self.spec) * fed as f64;
        Ok(SampleSet {
            step: self.step,
            max_tokens: max_new as u32,
            temperature: cfg.temperature,
            seed: cfg.seed,
            items,
        })
    }

    /// BLAKE3 of the parameters (little-endian bytes, layout order), `blake3:<hex>`.
    pub fn params_hash(&self) -> glassbox_schemas::Blake3Hash {
        let mut h = blake3::Hasher::new();
        let mut bytes = Vec::new();
        for p in &self.params {
            bytes.clear();
            for &x in &self.be.download(p) {
                x.write_le(&mut bytes);
            }
            h.update(&bytes);
        }
        h.finalize().into()
    }

    fn snapshot_path(&self, dir: &std::path::Path) -> PathBuf {
        dir.join("checkpoints")
            .join(format!("step-{:08}.safetensors", self.step))
    }

    /// Write the current state.
    pub fn save_snapshot(&self, path: &std::path::Path, elapsed: f64) -> Result<(), RunnerError> {
        let st = TrainingSnapshot {
            spec_hash: self.spec_hash.clone(),
            step: self.step,
            total_tokens: self.total_tokens,
            flops_used: self.flops_used,
            elapsed_seconds: elapsed,
            params: self
                .model
                .params
                .iter()
                .zip(&self.params)
                .map(|(p, b)| (p.name.clone(), p.shape.clone(), self.be.download(b)))
                .collect(),
            adam_m: self.adam_m.iter().map(|b| self.be.download(b)).collect(),
            adam_v: self.adam_v.iter().map(|b| self.be.download(b)).collect(),
            router_bias: self.bias.clone(),
        };
        snapshot::save(path, &st)
    }

    /// Held-out evaluation of every domain: `eval/<d>/loss` (nats/token) and `eval/<d>/bpb`.
    ///
    /// Bits per byte: for bytes and generators one target is one byte, so it is the loss over
    /// ln 2; for a token shard it is the targets' summed NLL over ln 2 and over the source
    /// bytes those targets stand for (`Batch::target_bytes`), exact for any tokenizer.
    pub fn evaluate(&mut self) -> BTreeMap<String, f64> {
        let be = self.be;
        let b = self.spec.train.batch_size as usize;
        let mut out = BTreeMap::new();
        for d in 0..self.data.domains.len() {
            let mut sum = 0.0;
            let (mut nll, mut bytes) = (0.0, 0u64);
            let nb = self.spec.train.eval_batches as u64;
            for i in 0..nb {
                let batch = self.data.eval_batch(d, i);
                bytes += batch.target_bytes;
                let tokens = be.upload_ids(&batch.tokens);
                let targets = be.upload_ids(&batch.targets);
                let model = &self.model;
                let params = &self.params;
                let bias = &self.bias;
                let ids = BatchIds {
                    tokens: &tokens,
                    targets: &targets,
                    batch_size: b,
                };
                let st = be.run(|| model.evaluate(be, params, bias, &ids));
                sum += st.cross_entropy;
                nll += st.cross_entropy * batch.targets.len() as f64;
            }
            let loss = sum / nb as f64;
            let dom = &self.data.domains[d];
            let bpb = match dom.source {
                Source::Tokens { .. } => nll / std::f64::consts::LN_2 / bytes.max(1) as f64,
                Source::Corpus { .. } | Source::Markov(_) => loss / std::f64::consts::LN_2,
            };
            out.insert(mn::eval_loss(&dom.name), loss);
            out.insert(mn::eval_bpb(&dom.name), bpb);
        }
        self.flops_used += cost::eval_flops_per_token(&self.spec)
            * (self.spec.train.eval_batches as u64
                * b as u64
                * self.spec.model.seq_len as u64
                * self.data.domains.len() as u64) as f64;
        out
    }

    /// Train to the end of the spec (or an earlier outcome), reporting to `obs`.
    pub fn run(&mut self, opts: &RunOptions, obs: &mut dyn Observer) -> RunOutcome {
        let outcome = self.run_inner(opts, obs);
        self.last = outcome.ending.final_metrics.clone();
        outcome
    }

    fn run_inner(&mut self, opts: &RunOptions, obs: &mut dyn Observer) -> RunOutcome {
        let start = Instant::now();
        let total_steps = self.spec.train.steps;
        obs.on_start(self.step, total_steps, &self.info);
        let mut last = std::mem::take(&mut self.last);
        let mut last_ckpt = None;
        let tokens_per_step = self.spec.train.batch_size as u64 * self.spec.model.seq_len as u64;
        let step_flops = cost::flops_per_token(&self.spec) * tokens_per_step as f64;
        let ckpt_every = self.spec.train.checkpoint_interval;
        let vector_interval = self.spec.vector_interval();

        // Every way the loop ends yields `(status, reason)`; one outcome is built after it.
        let (status, reason): (RunStatus, Option<String>) = loop {
            if self.step >= total_steps {
                break (RunStatus::Succeeded, None);
            }
            if opts.cancel.load(Ordering::SeqCst) {
                break (
                    RunStatus::Cancelled,
                    Some(format!(
                        "cancel requested; stopped before step {}",
                        self.step + 1
                    )),
                );
            }
            let elapsed = self.elapsed_before + start.elapsed().as_secs_f64();
            if let Some((max, whose)) = wall_limit(&self.spec, opts.wall_limit.as_ref())
                && elapsed > max
            {
                break (
                    RunStatus::BudgetExceeded,
                    Some(format!(
                        "{whose} of {max} s used up after {elapsed:.1} s at step {}",
                        self.step
                    )),
                );
            }
            if let Some(max) = self.spec.budget.max_flops
                && self.flops_used + step_flops > max
            {
                break (
                    RunStatus::BudgetExceeded,
                    Some(format!(
                        "FLOP budget of {max:e} would be exceeded by step {} ({:e} used, {step_flops:e} per step)",
                        self.step + 1,
                        self.flops_used
                    )),
                );
            }
            let t0 = Instant::now();
            let attempted = self.step + 1;
            let stepped = self.train_step();
            // A device failure (out of memory, a failed launch) ends the run `failed`, whatever
            // the step's numbers say: they were computed by ops that did not run.
            if let Some(err) = self.be.take_error() {
                break (
                    RunStatus::Failed,
                    Some(format!("backend failure at step {attempted}: {err}")),
                );
            }
            let mut record = match stepped {
                Ok(r) => r,
                Err(reason) => break (RunStatus::Diverged, Some(reason)),
            };
            let dt = t0.elapsed().as_secs_f64().max(1e-9);
            self.flops_used += step_flops;
            // Every step's expert loads are watched, whatever is kept for the record below.
            let anomalies = self.detector.observe(&record);
            // Vector metrics at a bounded rate (`metrics.vector_interval`), and at the end.
            if !(self.step.is_multiple_of(vector_interval) || self.step == total_steps) {
                record.vectors.clear();
            }
            let tps = tokens_per_step as f64 / dt;
            record.scalars.insert(mn::TOKENS_PER_SECOND.into(), tps);
            record.scalars.insert(
                mn::MFU.into(),
                tps * self.info.flops_per_token / self.info.peak_flops,
            );
            for (k, v) in &record.scalars {
                last.insert(k.clone(), *v);
            }
            // Hardware telemetry at a bounded rate (`backend::telemetry`); it describes the
            // machine, so it is charted but is not among the run's final metrics.
            let be = self.be;
            for (k, v) in self
                .hardware
                .sample(self.step, Instant::now(), || be.telemetry())
            {
                record.scalars.insert(k.to_string(), v);
            }
            obs.on_metrics(&record);
            for a in &anomalies {
                obs.on_anomaly(a);
            }

            let eval_due =
                self.step.is_multiple_of(self.spec.train.eval_interval) || self.step == total_steps;
            if eval_due {
                let ev = self.evaluate();
                for (k, v) in &ev {
                    last.insert(k.clone(), *v);
                }
                obs.on_metrics(&MetricRecord {
                    step: self.step,
                    kind: RecordKind::Eval,
                    scalars: ev,
                    vectors: BTreeMap::new(),
                });
            }
            let ckpt_due = (ckpt_every > 0 && self.step.is_multiple_of(ckpt_every))
                || self.step == total_steps;
            if let (true, Some(dir)) = (ckpt_due, &opts.out_dir) {
                let path = self.snapshot_path(dir);
                obs.before_snapshot(self.step);
                let elapsed = self.elapsed_before + start.elapsed().as_secs_f64();
                match self.save_snapshot(&path, elapsed) {
                    Ok(()) => {
                        obs.on_snapshot(self.step, &path);
                        last_ckpt = Some(path);
                    }
                    Err(e) => break (RunStatus::Failed, Some(e.to_string())),
                }
            }
            if ckpt_due && self.spec.samples.is_some() {
                match self.write_samples() {
                    Ok(set) => obs.on_samples(&set),
                    Err(e) => break (RunStatus::Failed, Some(format!("writing samples: {e}"))),
                }
            }
        };
        let outcome = RunOutcome {
            ending: RunEnding {
                status,
                steps: self.step,
                final_metrics: last,
                reason,
            },
            params_blake3: self.params_hash(),
            total_tokens: self.total_tokens,
            elapsed_seconds: self.elapsed_before + start.elapsed().as_secs_f64(),
            snapshot: last_ckpt,
            info: self.info.clone(),
        };
        obs.on_end(&outcome);
        outcome
    }

    /// One optimiser step; `Err(reason)` when the loss or gradients are not finite (the
    /// parameters are then left as they were: the last good state).
    fn train_step(&mut self) -> Result<MetricRecord, String> {
        let be = self.be;
        let batch = self.data.train_batch(self.step);
        let row_domains = batch.row_domains;
        let tokens = be.upload_ids(&batch.tokens);
        let targets = be.upload_ids(&batch.targets);
        let bsz = self.spec.train.batch_size as usize;
        let step_no = self.step + 1;
        let lr = learning_rate(&self.spec, self.step);
        let t = &self.spec.train;
        let (beta1, beta2, eps, wd, clip) =
            (t.beta1, t.beta2, t.adam_eps, t.weight_decay, t.grad_clip);
        let model = &self.model;
        let (params, grads, am, av, bias) = (
            &mut self.params,
            &mut self.grads,
            &mut self.adam_m,
            &mut self.adam_v,
            &self.bias,
        );
        let result = be.run(|| {
            for g in grads.iter_mut() {
                be.fill_zero(g);
            }
            let ids = BatchIds {
                tokens: &tokens,
                targets: &targets,
                batch_size: bsz,
            };
            let stats = model.forward_backward(be, params, grads, bias, &ids);
            let grad_sq: f64 = grads.iter().map(|g| be.sum_squares(g)).sum();
            let grad_norm = grad_sq.sqrt();
            if !stats.total().is_finite() || !grad_norm.is_finite() {
                return Err((stats, grad_norm));
            }
            let scale = if clip > 0.0 && grad_norm > clip {
                clip / grad_norm
            } else {
                1.0
            };
            for (i, info) in model.params.iter().enumerate() {
                let hp = AdamW {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay: if info.decay { wd } else { 0.0 },
                    step: step_no,
                    grad_scale: scale,
                };
                be.adamw(&mut params[i], &grads[i], &mut am[i], &mut av[i], &hp);
            }
            let param_norm = params.iter().map(|p| be.sum_squares(p)).sum::<f64>().sqrt();
            Ok((stats, grad_norm, param_norm))
        });
        let (stats, grad_norm, param_norm) = match result {
            Ok(x) => x,
            Err((stats, gn)) => {
                return Err(format!(
                    "non-finite values at step {step_no}: loss {}, grad norm {gn}",
                    stats.total()
                ));
            }
        };
        if !param_norm.is_finite() {
            return Err(format!("parameters became non-finite at step {step_no}"));
        }
        self.update_bias(&stats);
        self.step = step_no;
        self.total_tokens += (bsz * self.spec.model.seq_len as usize) as u64;
        for d in row_domains {
            self.domain_tokens[d] += u64::from(self.spec.model.seq_len);
        }
        Ok(self.step_record(&stats, lr, grad_norm, param_norm))
    }

    fn update_bias(&mut self, stats: &PassStats) {
        let e = self.model.dims.n_experts;
        match self.spec.model.moe.balancing {
            Balancing::AuxLossFree { rate } => {
                for (b, ls) in self.bias.iter_mut().zip(&stats.layers) {
                    let mean = ls.load.iter().sum::<u64>() as f64 / e as f64;
                    for (bi, &l) in b.iter_mut().zip(&ls.load) {
                        let d = mean - l as f64;
                        *bi += rate
                            * if d > 0.0 {
                                1.0
                            } else if d < 0.0 {
                                -1.0
                            } else {
                                0.0
                            };
                    }
                    let c = b.iter().sum::<f64>() / e as f64;
                    for bi in b.iter_mut() {
                        *bi -= c;
                    }
                }
            }
            Balancing::Quantile { scale } => {
                for (b, ls) in self.bias.iter_mut().zip(&stats.layers) {
                    for (bi, q) in b.iter_mut().zip(&ls.quantile_offset) {
                        *bi -= scale * q;
                    }
                }
            }
            Balancing::SwitchAuxLoss { .. } | Balancing::None => {}
        }
    }

    fn step_record(&self, s: &PassStats, lr: f64, grad_norm: f64, param_norm: f64) -> MetricRecord {
        let mut sc = BTreeMap::new();
        let nl = s.layers.len().max(1) as f64;
        sc.insert(mn::TRAIN_LOSS.to_string(), s.total());
        sc.insert(mn::TRAIN_CROSS_ENTROPY.to_string(), s.cross_entropy);
        sc.insert(mn::TRAIN_Z_LOSS.to_string(), s.z_loss);
        sc.insert(mn::GRAD_NORM_TOTAL.to_string(), grad_norm);
        sc.insert(mn::PARAMS_NORM_TOTAL.to_string(), param_norm);
        sc.insert(mn::LEARNING_RATE.to_string(), lr);
        sc.insert(mn::TOTAL_TOKENS.to_string(), self.total_tokens as f64);
        for (d, n) in self.data.domains.iter().zip(&self.domain_tokens) {
            sc.insert(mn::data_tokens(&d.name), *n as f64);
        }
        sc.insert(
            mn::ROUTING_ENTROPY_MEAN.to_string(),
            s.layers.iter().map(|l| l.routing_entropy).sum::<f64>() / nl,
        );
        sc.insert(
            mn::LOAD_BALANCING_LOSS.to_string(),
            s.layers.iter().map(|l| l.load_balancing).sum::<f64>() / nl,
        );
        sc.insert(mn::ROUTER_Z_LOSS.to_string(), s.router_z_loss);
        sc.insert(
            mn::DROPPED_ASSIGNMENTS.to_string(),
            s.layers.iter().map(|l| l.dropped).sum::<u64>() as f64,
        );
        let mut vectors = BTreeMap::new();
        for (i, l) in s.layers.iter().enumerate() {
            let total = l.load.iter().sum::<u64>().max(1) as f64;
            vectors.insert(
                mn::expert_load(i),
                l.load.iter().map(|&x| x as f64 / total).collect(),
            );
            sc.insert(
                mn::bias_norm(i),
                self.bias[i].iter().map(|b| b * b).sum::<f64>().sqrt(),
            );
        }
        MetricRecord {
            step: self.step,
            kind: RecordKind::Train,
            scalars: sc,
            vectors,
        }
    }
}
