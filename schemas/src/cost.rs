//! The cost model: parameters, FLOPs and memory of a spec. One function, used by the CLI, the bot
//! (validation comments), budgets (the lab) and MFU (the runner), so they can never disagree.
//!
//! Shapes: V vocab, d d_model, L n_layers, T seq_len, E routed experts, k top_k, S shared
//! experts, f d_expert, B batch size.
//!
//! Parameters (no biases anywhere):
//! - embedding `V d`, lm_head `d V` (untied), final norm `d`;
//! - per layer: attention `4 d^2` (q, k, v, o), two RMSNorms `2 d`, router `d E`,
//!   experts `(E + S) * 3 d f` (SwiGLU: gate, up, down).
//!
//! Active parameters count `k + S` experts instead of `E + S`.
//!
//! FLOPs per token (training, forward + backward), in the PaLM convention:
//! `6 N + 12 L d T`, where `N` is the active parameter count *excluding the embedding table*
//! (a lookup, not a matmul; the lm_head is a matmul and is counted) and `12 L d T` is attention's
//! `QK^T` and `AV` over the full context (forward `4 L d T`, backward twice that), not halved
//! for the causal mask. Evaluation counts the forward third, `2 N + 4 L d T`.
//!
//! Memory (training, estimate): parameters, gradients and AdamW's two moments at 4 bytes each
//! (16 bytes/param; bf16 adds a 2-byte working copy), plus activations kept for backward,
//! about `B T L (16 d + 4 k f + 3 H T) + 2 B T V` floats at the activation width (4 bytes in
//! f32, 2 in bf16), where `H` is n_heads (attention probabilities are kept per head).
//! This module does not time anything; [`CostEstimate::seconds_at`] only divides.
//!
//! Metric volume ([`metric_volume`]): every train step records `13 + L + D` scalars (the fixed
//! train metrics of [`crate::metrics`], one `bias_norm` per layer and one
//! `data/<domain>/tokens` per domain), every evaluation `2`
//! per domain (loss, bpb), and every `spec.vector_interval()` steps (and at the last step) one
//! expert-load vector of `E` components per layer. Hardware telemetry (`hw/...`) adds at most
//! [`HARDWARE_SERIES`] scalars per sample and at most [`MAX_HARDWARE_SAMPLES`] samples a run
//! (never more than one a step): the runner's sampler keeps to both.

use serde::{Deserialize, Serialize};

use crate::spec::{ExperimentSpec, Precision};

/// The cost of one spec.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CostEstimate {
    /// All parameters.
    pub params_total: u64,
    /// Parameters a token passes through (top-k + shared experts), embedding included.
    pub params_active: u64,
    /// Active parameters excluding the embedding table (the `N` of `6 N`).
    pub params_active_nonembedding: u64,
    /// Training FLOPs per token: `6 N + 12 L d T`.
    pub flops_per_token: f64,
    /// Tokens trained on: steps x batch x seq_len.
    pub train_tokens: u64,
    /// Training FLOPs: `flops_per_token * train_tokens`.
    pub train_flops: f64,
    /// Evaluation FLOPs: forward only over every scheduled evaluation, and over every
    /// snapshot's `[samples]` (each prompt with its completion bounded by the context).
    pub eval_flops: f64,
    /// Training plus evaluation FLOPs; what budgets are checked against.
    pub total_flops: f64,
    /// Estimated peak training memory in bytes (see the module doc for the formula).
    pub memory_bytes: u64,
}

impl CostEstimate {
    /// Seconds the run would take at a sustained rate of `flops_per_second`.
    pub fn seconds_at(&self, flops_per_second: f64) -> f64 {
        self.total_flops / flops_per_second
    }
}

/// The most `hw/...` series one hardware sample holds: the process's resident memory, peak
/// resident memory and CPU time, the utilisation of the run's cores, the machine's available
/// memory, and on a GPU its utilisation, memory used and peak, power, temperature and SM clock.
pub const HARDWARE_SERIES: u64 = 11;

/// The most hardware samples one run records, however long it is.
pub const MAX_HARDWARE_SAMPLES: u64 = 4096;

/// How many metric values a run of the spec records (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricVolume {
    /// Steps between vector records ([`ExperimentSpec::vector_interval`]).
    pub vector_interval: u64,
    /// Vector-metric components: `ceil(steps / vector_interval) * L * E`.
    pub vector_components: u64,
    /// Scalar points: `steps * (13 + L + D) + evaluations * 2 * D` (`D` domains).
    pub scalar_points: u64,
    /// Hardware telemetry points at most: `min(steps, MAX_HARDWARE_SAMPLES) * HARDWARE_SERIES`.
    #[serde(default)]
    pub hardware_points: u64,
}

impl MetricVolume {
    /// Scalar points, vector components and hardware points: what a lab's
    /// `max_metric_points` bounds.
    pub fn total(&self) -> u64 {
        self.scalar_points
            .saturating_add(self.vector_components)
            .saturating_add(self.hardware_points)
    }
}

/// Scalars in each train step's record: the fixed train metrics, throughput and MFU (13), one
/// `bias_norm` per layer and one `data/<domain>/tokens` per domain. The runner's step record is
/// tested against it.
pub fn train_scalars_per_step(spec: &ExperimentSpec) -> u64 {
    13 + u64::from(spec.model.n_layers) + spec.data.mixture.len() as u64
}

/// The metric volume of a spec (module doc).
pub fn metric_volume(spec: &ExperimentSpec) -> MetricVolume {
    let steps = spec.train.steps;
    let interval = spec.vector_interval();
    let per_vector_record = u64::from(spec.model.n_layers) * u64::from(spec.model.moe.n_experts);
    let evals = eval_count(spec);
    let domains = spec.data.mixture.len() as u64;
    MetricVolume {
        vector_interval: interval,
        vector_components: steps.div_ceil(interval).saturating_mul(per_vector_record),
        scalar_points: steps
            .saturating_mul(train_scalars_per_step(spec))
            .saturating_add(evals.saturating_mul(2 * domains)),
        hardware_points: steps.min(MAX_HARDWARE_SAMPLES) * HARDWARE_SERIES,
    }
}

/// Parameter counts of a spec's model: `(total, active, active_nonembedding)`.
pub fn param_counts(spec: &ExperimentSpec) -> (u64, u64, u64) {
    let m = &spec.model;
    let (v, d, l) = (m.vocab as u64, m.d_model as u64, m.n_layers as u64);
    let (e, k, s, f) = (
        m.moe.n_experts as u64,
        m.moe.top_k as u64,
        m.moe.n_shared as u64,
        m.moe.d_expert as u64,
    );
    let embed = v * d;
    let head = d * v;
    let per_layer_dense = 4 * d * d + 2 * d + d * e;
    let expert = 3 * d * f;
    let total = embed + head + d + l * (per_layer_dense + (e + s) * expert);
    let active = embed + head + d + l * (per_layer_dense + (k + s) * expert);
    (total, active, active - embed)
}

/// Training FLOPs per token, `6 N + 12 L d T` (module doc).
pub fn flops_per_token(spec: &ExperimentSpec) -> f64 {
    let (_, _, n) = param_counts(spec);
    let m = &spec.model;
    6.0 * n as f64 + 12.0 * m.n_layers as f64 * m.d_model as f64 * m.seq_len as f64
}

/// Forward-only FLOPs per token, `2 N + 4 L d T`.
pub fn eval_flops_per_token(spec: &ExperimentSpec) -> f64 {
    flops_per_token(spec) / 3.0
}

/// Number of evaluations a run performs: every `eval_interval` steps and once at the end.
pub fn eval_count(spec: &ExperimentSpec) -> u64 {
    let t = &spec.train;
    let periodic = t.steps / t.eval_interval;
    if t.steps % t.eval_interval == 0 {
        periodic
    } else {
        periodic + 1
    }
}

/// Snapshots a run takes: every `checkpoint_interval` steps and at the last step.
pub fn snapshot_count(spec: &ExperimentSpec) -> u64 {
    let t = &spec.train;
    match t.checkpoint_interval {
        0 => 1,
        every if t.steps % every == 0 => t.steps / every,
        every => t.steps / every + 1,
    }
}

/// Tokens fed through the model for `[samples]` over a run, at most: per snapshot, each prompt
/// and its completion fill at most the context (prompts left out: one per domain, at most 4).
pub fn sample_tokens(spec: &ExperimentSpec) -> u64 {
    let Some(s) = &spec.samples else {
        return 0;
    };
    let prompts = if s.prompts.is_empty() {
        spec.data.mixture.len().min(4)
    } else {
        s.prompts.len()
    } as u64;
    snapshot_count(spec) * prompts * u64::from(spec.model.seq_len)
}

/// The full estimate for a spec.
pub fn estimate(spec: &ExperimentSpec) -> CostEstimate {
    let (params_total, params_active, params_active_nonembedding) = param_counts(spec);
    let m = &spec.model;
    let t = &spec.train;
    let tokens_per_step = t.batch_size as u64 * m.seq_len as u64;
    let train_tokens = t.steps * tokens_per_step;
    let fpt = flops_per_token(spec);
    let train_flops = fpt * train_tokens as f64;
    let eval_tokens =
        eval_count(spec) * t.eval_batches as u64 * tokens_per_step * spec.data.mixture.len() as u64;
    let eval_flops = eval_flops_per_token(spec) * (eval_tokens + sample_tokens(spec)) as f64;

    let (state_bytes, act_bytes) = match t.precision {
        Precision::F32 => (16u64, 4u64),
        Precision::Bf16 => (18, 2),
    };
    let (b, tt, l, d, h, v) = (
        t.batch_size as u64,
        m.seq_len as u64,
        m.n_layers as u64,
        m.d_model as u64,
        m.n_heads as u64,
        m.vocab as u64,
    );
    let kf = m.moe.top_k as u64 * m.moe.d_expert as u64;
    let activations = b * tt * l * (16 * d + 4 * kf + 3 * h * tt) + 2 * b * tt * v;
    let memory_bytes = params_total * state_bytes + activations * act_bytes;

    CostEstimate {
        params_total,
        params_active,
        params_active_nonembedding,
        flops_per_token: fpt,
        train_tokens,
        train_flops,
        eval_flops,
        total_flops: train_flops + eval_flops,
        memory_bytes,
    }
}
