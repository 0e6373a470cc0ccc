//! The experiment spec: what a proposer asks the lab to train, as typed Rust.
//!
//! People write it as TOML (see `examples/*.toml`); the lab hashes it as canonical JSON
//! ([`crate::canonical`]). Every field that may be left out has its default here, in one place,
//! so "left out" and "spelled out" are the same experiment and hash the same.
//!
//! Per-field rules (ranges, patterns, enums) are declared on the types and so land in the JSON
//! Schema ([`crate::schema`]); rules that relate two fields live in [`crate::validate`]. This
//! module does not parse or validate text; it only declares the shape.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hash::BlobHash;

/// Largest integer a JSON number holds exactly (2^53 - 1). Seeds and counts above it would not
/// survive canonical JSON (RFC 8785 numbers are IEEE-754 doubles), so they are refused.
pub const MAX_EXACT_INT: u64 = (1 << 53) - 1;

/// One experiment: who asks what, on which model, with which data, for how long, at what cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "glassbox experiment spec")]
pub struct ExperimentSpec {
    /// Who is asking what, and why.
    pub experiment: Experiment,
    /// The MoE transformer to train.
    pub model: ModelConfig,
    /// Which corpora, in what mixture.
    pub data: DataConfig,
    /// Optimiser, schedule and step counts.
    pub train: TrainConfig,
    /// Hard limits; a run that would exceed one ends as `budget_exceeded`.
    #[serde(default)]
    pub budget: Budget,
    /// How often the per-step vector metrics (expert load per layer) are recorded. Left out
    /// (or empty), it is left out of the hash too, so specs written before it hash as before.
    #[serde(default, skip_serializing_if = "MetricsConfig::is_default")]
    pub metrics: MetricsConfig,
    /// A pre-registered forecast of the outcome, compared with the result when the run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<Forecast>,
    /// Completions written at every snapshot, on the record (`samples` entries). Left out: none,
    /// and the spec hashes as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<SamplesConfig>,
    /// Suites each snapshot is evaluated on, each as a queued job of its own (`evaluation`
    /// entries), beside the lab's own `[evals]`. Left out: the lab's only, and the spec hashes
    /// as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evals: Option<crate::eval::EvalsConfig>,
}

/// What the model is asked to write at each snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SamplesConfig {
    /// Prompts, as text. Left out or empty: the first tokens of each domain's held-out split
    /// (at most four domains).
    #[serde(default)]
    #[schemars(length(max = 8), inner(length(min = 1, max = 2000)))]
    pub prompts: Vec<String>,
    /// Tokens written per prompt (fewer when the prompt leaves less of the context).
    #[serde(default = "default_sample_tokens")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_tokens: u32,
    /// 0 is greedy; otherwise a seeded draw at this temperature.
    #[serde(default = "default_sample_temperature")]
    #[schemars(range(min = 0.0, max = 10.0))]
    pub temperature: f64,
    /// Seed of the draws (the same at every snapshot, so snapshots are compared on equal terms).
    #[serde(default)]
    #[schemars(range(max = 9007199254740991u64))]
    pub seed: u64,
}

fn default_sample_tokens() -> u32 {
    48
}
fn default_sample_temperature() -> f64 {
    0.0
}

/// The human part of the proposal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// A short title.
    #[schemars(length(min = 1, max = 120))]
    pub name: String,
    /// A stable identifier used in URLs and file names.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{2,63}$"))]
    pub slug: String,
    /// What the experiment expects to find and why; at least a sentence.
    #[schemars(length(min = 20, max = 4000))]
    pub hypothesis: String,
    /// Free labels for filtering (lowercase, digits, `-`).
    #[serde(default)]
    #[schemars(length(max = 16), inner(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,31}$")))]
    pub tags: Vec<String>,
}

/// The decoder-only MoE transformer (DESIGN.md, "The model the runner trains").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Vocabulary size; the `bytes` tokenizer needs exactly 256, a stored tokenizer its own
    /// vocabulary size (added tokens included).
    #[serde(default = "default_vocab")]
    #[schemars(range(min = 2, max = 1048576))]
    pub vocab: u32,
    /// Residual stream width.
    #[schemars(range(min = 8, max = 65536))]
    pub d_model: u32,
    /// Number of transformer blocks.
    #[schemars(range(min = 1, max = 512))]
    pub n_layers: u32,
    /// Attention heads; must divide `d_model` into an even head size (RoPE rotates pairs).
    #[schemars(range(min = 1, max = 1024))]
    pub n_heads: u32,
    /// Context length in tokens.
    #[schemars(range(min = 2, max = 1048576))]
    pub seq_len: u32,
    /// RoPE base frequency.
    #[serde(default = "default_rope_theta")]
    #[schemars(range(min = 1.0, max = 1.0e9))]
    pub rope_theta: f64,
    /// RMSNorm epsilon.
    #[serde(default = "default_norm_eps")]
    #[schemars(range(min = 0.0, max = 0.1))]
    pub norm_eps: f64,
    /// The mixture-of-experts feed-forward block used in every layer.
    pub moe: MoeConfig,
}

/// The MoE feed-forward block: router, experts, balancing, dispatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoeConfig {
    /// Routed experts per layer.
    #[schemars(range(min = 1, max = 1024))]
    pub n_experts: u32,
    /// Experts each token is sent to; at most `n_experts`.
    #[schemars(range(min = 1, max = 64))]
    pub top_k: u32,
    /// Hidden width of each SwiGLU expert.
    #[schemars(range(min = 1, max = 65536))]
    pub d_expert: u32,
    /// Shared experts that every token always passes through (same width as routed ones).
    #[serde(default)]
    #[schemars(range(max = 16))]
    pub n_shared: u32,
    /// How router logits become scores.
    #[serde(default)]
    pub score: ScoreFn,
    /// Multiplier on the renormalised combine weights.
    #[serde(default = "one")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub combine_scale: f64,
    /// How expert load is kept balanced.
    #[serde(default)]
    pub balancing: Balancing,
    /// Expert capacity as a multiple of the even share (`tokens * top_k / n_experts`);
    /// assignments past it are dropped and counted. Left out: dropless dispatch.
    #[serde(default)]
    #[schemars(range(min = 0.1, max = 64.0))]
    pub capacity_factor: Option<f64>,
    /// Coefficient of the router z-loss (mean squared logsumexp of router logits); 0 turns it off.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub router_z_loss: f64,
}

/// How router logits become scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScoreFn {
    /// Independent sigmoid per expert (DeepSeek-V3).
    Sigmoid,
    /// Softmax over experts (Switch, Mixtral).
    #[default]
    Softmax,
}

/// Load-balancing method, written as a table with a `method` key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "method", rename_all = "snake_case", deny_unknown_fields)]
pub enum Balancing {
    /// DeepSeek-V3: after each step `bias_i += rate * sign(mean_load - load_i)`, then centred.
    AuxLossFree {
        /// Bias update rate.
        #[serde(default = "default_alf_rate")]
        #[schemars(range(min = 0.0, max = 1.0))]
        rate: f64,
    },
    /// Marin's hero run: next step's bias from the per-expert upper `(1 - k/E)` quantile of
    /// `logit - top-k threshold`, stop-gradient.
    Quantile {
        /// How much of the quantile offset is applied each step (1 = all of it).
        #[serde(default = "one")]
        #[schemars(range(min = 0.0, max = 1.0))]
        scale: f64,
    },
    /// Switch Transformer auxiliary loss `coef * E * sum_i f_i P_i`.
    SwitchAuxLoss {
        /// Loss coefficient.
        #[serde(default = "default_switch_coef")]
        #[schemars(range(min = 0.0, max = 10.0))]
        coef: f64,
    },
    /// No balancing.
    None,
}

impl Default for Balancing {
    fn default() -> Self {
        Balancing::AuxLossFree {
            rate: default_alf_rate(),
        }
    }
}

impl Balancing {
    /// The method's name as written in the spec.
    pub fn method(&self) -> &'static str {
        match self {
            Balancing::AuxLossFree { .. } => "aux_loss_free",
            Balancing::Quantile { .. } => "quantile",
            Balancing::SwitchAuxLoss { .. } => "switch_aux_loss",
            Balancing::None => "none",
        }
    }
}

/// Training data: a weighted mixture of domains, each a stored corpus or a built-in generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// How text becomes tokens.
    #[serde(default)]
    pub tokenizer: Tokenizer,
    /// Training domains and their weights: each weight over their sum is the expected fraction of
    /// training tokens drawn from that domain (every row of a batch is one domain's window).
    #[schemars(length(min = 1, max = 64))]
    pub mixture: Vec<MixtureComponent>,
    /// Fraction of each stored corpus held out for evaluation (the last bytes of the corpus, or
    /// the last tokens of its token shard with a stored tokenizer).
    #[serde(default = "default_heldout_fraction")]
    #[schemars(range(min = 0.001, max = 0.5))]
    pub heldout_fraction: f64,
}

/// How text becomes tokens: `"bytes"` (one token per byte, vocab 256, the default) or a stored
/// tokenizer named by the BLAKE3 of its `tokenizer.json` blob (`"blake3:<hex>"`, added with
/// `glassbox data tokenizer train` or `import`). Written as one string either way, so a spec
/// that says `"bytes"` hashes as it always did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tokenizer {
    /// One token per byte.
    #[default]
    Bytes,
    /// A stored tokenizer (a Hugging Face `tokenizer.json` blob), by hash.
    Stored(BlobHash),
}

impl Tokenizer {
    /// The stored tokenizer's hash, when it is one.
    pub fn stored(&self) -> Option<&BlobHash> {
        match self {
            Tokenizer::Bytes => None,
            Tokenizer::Stored(h) => Some(h),
        }
    }
}

impl std::fmt::Display for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tokenizer::Bytes => f.write_str("bytes"),
            Tokenizer::Stored(h) => write!(f, "{h}"),
        }
    }
}

impl Serialize for Tokenizer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Tokenizer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == "bytes" {
            return Ok(Tokenizer::Bytes);
        }
        text.parse::<BlobHash>()
            .map(Tokenizer::Stored)
            .map_err(|e| {
                serde::de::Error::custom(format!(
                    "{text:?} is not a tokenizer: expected \"bytes\" or a stored tokenizer's hash \"blake3:<64 hex>\" ({e})"
                ))
            })
    }
}

impl JsonSchema for Tokenizer {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Tokenizer".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "How text becomes tokens: \"bytes\" (one token per byte, vocab 256) or a stored tokenizer's hash (\"blake3:<64 hex>\", see `glassbox data tokenizer`).",
            "type": "string",
            "pattern": "^(bytes|blake3:[0-9a-f]{64})$"
        })
    }
}

/// One domain of the mixture. Exactly one of `corpus` and `generator` is given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MixtureComponent {
    /// Domain name, used in metric names (`eval/<domain>/loss`).
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,31}$"))]
    pub domain: String,
    /// A stored corpus, by the hash of its bytes (see `glassbox data import`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus: Option<BlobHash>,
    /// A built-in synthetic source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorSpec>,
    /// Relative sampling weight.
    #[serde(default = "one")]
    #[schemars(range(min = 0.0, max = 1.0e6))]
    pub weight: f64,
}

/// A built-in synthetic source whose entropy rate is known exactly (a true loss floor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GeneratorSpec {
    /// Which generator.
    pub kind: GeneratorKind,
    /// Seed of the source's structure and of its sample stream.
    #[schemars(range(max = 9007199254740991u64))]
    pub seed: u64,
    /// Context length of the Markov source (symbols it conditions on).
    #[serde(default = "default_markov_order")]
    #[schemars(range(min = 1, max = 4))]
    pub order: u32,
    /// Number of distinct byte symbols emitted.
    #[serde(default = "default_markov_alphabet")]
    #[schemars(range(min = 2, max = 256))]
    pub alphabet: u32,
    /// Successors each context may emit; at most `alphabet`.
    #[serde(default = "default_markov_branching")]
    #[schemars(range(min = 1, max = 256))]
    pub branching: u32,
}

/// Built-in generators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GeneratorKind {
    /// A seeded order-`order` Markov source over `alphabet` byte symbols in which every context
    /// has `branching` successors with the same probability vector, so its entropy rate is that
    /// vector's entropy whatever the stationary distribution.
    Markov,
}

/// Optimiser, schedule and step counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Optimiser steps.
    #[schemars(range(min = 1, max = 100000000))]
    pub steps: u64,
    /// Sequences per step.
    #[schemars(range(min = 1, max = 65536))]
    pub batch_size: u32,
    /// Peak learning rate.
    #[schemars(range(min = 0.0, max = 10.0))]
    pub lr: f64,
    /// Learning-rate schedule after warmup.
    #[serde(default)]
    pub schedule: Schedule,
    /// Linear warmup steps from 0 to `lr`.
    #[serde(default)]
    #[schemars(range(max = 100000000))]
    pub warmup_steps: u64,
    /// Final learning rate as a fraction of `lr` (cosine, linear, wsd).
    #[serde(default = "default_min_lr_ratio")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_lr_ratio: f64,
    /// For `wsd`: the fraction of steps spent decaying at the end.
    #[serde(default = "default_wsd_decay_fraction")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub decay_fraction: f64,
    /// AdamW beta1.
    #[serde(default = "default_beta1")]
    #[schemars(range(min = 0.0, max = 0.999999))]
    pub beta1: f64,
    /// AdamW beta2.
    #[serde(default = "default_beta2")]
    #[schemars(range(min = 0.0, max = 0.999999))]
    pub beta2: f64,
    /// AdamW epsilon.
    #[serde(default = "default_adam_eps")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub adam_eps: f64,
    /// Decoupled weight decay (not applied to norms and biases).
    #[serde(default = "default_weight_decay")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub weight_decay: f64,
    /// Global gradient-norm clip; 0 turns clipping off.
    #[serde(default = "one")]
    #[schemars(range(min = 0.0, max = 1.0e6))]
    pub grad_clip: f64,
    /// Coefficient of the z-loss on the final logits; 0 turns it off.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub z_loss: f64,
    /// Seed of parameter init and data sampling.
    #[serde(default)]
    #[schemars(range(max = 9007199254740991u64))]
    pub seed: u64,
    /// Evaluate every this many steps (and always at the end).
    #[serde(default = "default_eval_interval")]
    #[schemars(range(min = 1, max = 100000000))]
    pub eval_interval: u64,
    /// Batches per domain in each evaluation.
    #[serde(default = "default_eval_batches")]
    #[schemars(range(min = 1, max = 10000))]
    pub eval_batches: u32,
    /// Checkpoint every this many steps; 0 means only at the end.
    #[serde(default)]
    #[schemars(range(max = 100000000))]
    pub checkpoint_interval: u64,
    /// Numeric precision of the step.
    #[serde(default)]
    pub precision: Precision,
    /// Learning-rate milestones (PyTorch's `MultiStepLR`): from each milestone's step on, the
    /// scheduled rate is multiplied by its factor (factors compound). A factor above 1 is a
    /// re-warm (or, on purpose, an injected instability). Left out (or empty), it is left out
    /// of the hash too, so specs written before it hash as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub lr_milestones: Vec<LrMilestone>,
    /// How the worker flags anomalies while the run trains (`anomaly` entries). Left out (or
    /// every key at its default), it is left out of the hash too.
    #[serde(default, skip_serializing_if = "AnomalyConfig::is_default")]
    pub anomaly: AnomalyConfig,
}

/// One learning-rate milestone: from 0-based step `step` on, the rate is multiplied by `factor`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LrMilestone {
    /// The 0-based step from which the factor applies (the optimiser step `step + 1`).
    #[schemars(range(min = 1, max = 100000000))]
    pub step: u64,
    /// Multiplier on the scheduled learning rate from then on.
    #[schemars(range(min = 0.0, max = 10000.0))]
    pub factor: f64,
}

/// Thresholds of the worker's anomaly detector (`runner::anomaly` states the rule). A scalar
/// series is flagged at a step when it is further than `threshold` robust deviations
/// (`1.4826 x MAD` of the trailing `window` values) from the trailing median, and by at least
/// `min_relative` of the median's magnitude (for a jump, of the norm's previous value): upwards for `train/loss` and `grad/norm/total` (spikes),
/// either way for the step-to-step change of `params/norm/total` and of each layer's router
/// bias norm (jumps). Nothing is flagged before `min_steps` values are seen, and a series once
/// flagged is quiet for `cooldown` steps. An expert collapses when one expert takes more than
/// `collapse_share` of a layer's tokens for `collapse_steps` steps in a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AnomalyConfig {
    /// Trailing values the median and MAD are taken over.
    #[schemars(range(min = 4, max = 10000))]
    pub window: u32,
    /// Values of a series seen before it can be flagged.
    #[schemars(range(min = 2, max = 100000000))]
    pub min_steps: u32,
    /// Robust deviations (`1.4826 x MAD`) from the trailing median that make a spike or jump.
    #[schemars(range(min = 1.0, max = 1.0e6))]
    pub threshold: f64,
    /// The deviation must also be at least this fraction of the trailing median's magnitude
    /// (for a jump, of the norm's previous value), so a flat or lumpy series (MAD near 0) is
    /// not flagged for noise.
    #[schemars(range(min = 0.0, max = 100.0))]
    pub min_relative: f64,
    /// Steps after a flag during which the same series is not flagged again.
    #[schemars(range(max = 100000000))]
    pub cooldown: u32,
    /// Share of a layer's tokens one expert must take to count as collapsed.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub collapse_share: f64,
    /// Consecutive steps of collapse before it is flagged.
    #[schemars(range(min = 1, max = 100000000))]
    pub collapse_steps: u32,
}

impl Default for AnomalyConfig {
    fn default() -> Self {
        Self {
            window: 32,
            min_steps: 16,
            threshold: 8.0,
            min_relative: 0.1,
            cooldown: 32,
            collapse_share: 0.9,
            collapse_steps: 20,
        }
    }
}

impl AnomalyConfig {
    /// Whether every key is at its default (the table is then left out of the canonical form).
    pub fn is_default(&self) -> bool {
        *self == AnomalyConfig::default()
    }
}

/// Learning-rate schedule after warmup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// Cosine decay to `min_lr_ratio * lr`.
    #[default]
    Cosine,
    /// Linear decay to `min_lr_ratio * lr`.
    Linear,
    /// Constant at `lr`.
    Constant,
    /// Warmup-stable-decay: constant, then linear decay over the last `decay_fraction` of steps.
    Wsd,
}

/// Numeric precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// f32 everywhere.
    #[default]
    F32,
    /// bf16 storage and matmul inputs, f32 accumulation and f32 master weights.
    Bf16,
}

/// Hard limits. Left out: no limit beyond the lab's own.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Maximum training FLOPs (as counted by [`crate::cost`]).
    #[serde(default)]
    #[schemars(range(min = 1.0, max = 1.0e30))]
    pub max_flops: Option<f64>,
    /// Maximum wall-clock seconds.
    #[serde(default)]
    #[schemars(range(min = 1.0, max = 3.2e7))]
    pub max_wall_seconds: Option<f64>,
}

/// Most vector-metric components a run records when `metrics.vector_interval` is left out: the
/// automatic interval is the smallest that keeps `records x layers x experts` at or under it.
pub const DEFAULT_MAX_VECTOR_COMPONENTS: u64 = 1_000_000;

/// What the run records beyond its scalar metrics, and how often.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Record the vector metrics (`train/router/layer_<i>/expert_load`, one component per
    /// expert) every this many steps, and at the last step. Left out: the smallest interval at
    /// which the run records at most 1,000,000 components in total (see
    /// [`ExperimentSpec::vector_interval`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000000))]
    pub vector_interval: Option<u64>,
}

impl MetricsConfig {
    /// Whether nothing is set (the section is then left out of the canonical form).
    pub fn is_default(&self) -> bool {
        *self == MetricsConfig::default()
    }
}

impl ExperimentSpec {
    /// The interval (in steps) at which the vector metrics are recorded: `metrics.vector_interval`
    /// when given, else `ceil(steps * n_layers * n_experts / DEFAULT_MAX_VECTOR_COMPONENTS)`
    /// (at least 1), so that a run records about a million components at most.
    pub fn vector_interval(&self) -> u64 {
        if let Some(n) = self.metrics.vector_interval {
            return n.max(1);
        }
        let per_record = u64::from(self.model.n_layers) * u64::from(self.model.moe.n_experts);
        let total = self.train.steps.saturating_mul(per_record);
        total.div_ceil(DEFAULT_MAX_VECTOR_COMPONENTS).max(1)
    }
}

/// A pre-registered forecast: the value a metric will have at the end of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Forecast {
    /// Metric name (DESIGN.md conventions), e.g. `eval/markov/loss`.
    /// An evaluation's metric is `eval:SUITE/METRIC` (`eval:markov-choice/acc_norm`), settled
    /// when the run's last snapshot is evaluated on that suite.
    #[schemars(regex(
        pattern = r"^([a-z][a-z0-9_]*(/[a-z0-9_<>-]+)+|eval:[a-z0-9][a-z0-9._-]{0,63}/[a-z_]+)$"
    ))]
    pub metric: String,
    /// Predicted final value.
    pub value: f64,
    /// Allowed absolute difference for the forecast to count as a hit.
    #[schemars(range(min = 0.0))]
    pub tolerance: f64,
}

pub(crate) fn default_vocab() -> u32 {
    256
}
fn default_rope_theta() -> f64 {
    10_000.0
}
fn default_norm_eps() -> f64 {
    1e-5
}
fn one() -> f64 {
    1.0
}
fn default_alf_rate() -> f64 {
    1e-3
}
fn default_switch_coef() -> f64 {
    1e-2
}
fn default_heldout_fraction() -> f64 {
    0.05
}
fn default_markov_order() -> u32 {
    2
}
fn default_markov_alphabet() -> u32 {
    64
}
fn default_markov_branching() -> u32 {
    4
}
fn default_min_lr_ratio() -> f64 {
    0.1
}
fn default_wsd_decay_fraction() -> f64 {
    0.2
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.95
}
fn default_adam_eps() -> f64 {
    1e-8
}
fn default_weight_decay() -> f64 {
    0.1
}
fn default_eval_interval() -> u64 {
    100
}
fn default_eval_batches() -> u32 {
    4
}
