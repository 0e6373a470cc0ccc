//! The MoE transformer of DESIGN.md ("The model the runner trains"), written once against the
//! [`Backend`] trait: parameter layout and init, the forward pass with its caches, the hand
//! written backward pass, and the loss terms.
//!
//! Shape legend: `B` batch, `T` seq, `N = B T` tokens, `C` d_model, `H` heads, `D = C/H`,
//! `V` vocab, `E` routed experts, `K` top-k, `F` d_expert, `S` kept slots, `Sh` shared experts.
//!
//! ```text
//! x = wte[tokens]                                                     [N, C]
//! per layer:  a = rmsnorm(x) ; qkv = a Wqkv^T ; q,k = rope(q,k)
//!             x = x + merge(attn(q, k, v)) Wo^T
//!             m = rmsnorm(x) ; s = score(m Wr^T) ; route top-k on s + bias
//!             x = x + sum_j w_j SwiGLU_{e_j}(m) + sum_sh SwiGLU_sh(m)
//! logits = rmsnorm(x) Wlm^T ; loss = CE + z * lse^2 + router terms
//! ```
//! Loss terms: `train/cross_entropy_loss` (mean CE), `z_loss * mean(lse^2)` on final logits,
//! per layer `router_z_loss * mean(lse_router^2)` and, for `switch_aux_loss`,
//! `coef * E * sum_i f_i P_i` (f: fraction of assignments, no gradient; P: mean score).
//! Not here: the optimiser, balancing bias updates and data (see [`crate::train`]).

use glassbox_schemas::spec::{Balancing, ExperimentSpec, ScoreFn, Tokenizer};

use crate::backend::{
    Accumulate, AttnDims, Backend, Groups, Qkv, RmsNormSaved, RopeTables, RouterStats, Routing,
    ScoreKind, WeightLayout,
};
use crate::error::RunnerError;
use crate::rng::{SplitMix64, derive};
use crate::scalar::Real;

/// Stream key for parameter init (see [`crate::rng::derive`]).
const INIT_STREAM: u64 = 0x494e_4954; // "INIT"
/// Standard deviation of weight init (GPT-2).
const INIT_STD: f64 = 0.02;

/// Model hyperparameters, resolved from a spec.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelDims {
    /// Vocab `V`.
    pub vocab: usize,
    /// Width `C`.
    pub d_model: usize,
    /// Layers `L`.
    pub n_layers: usize,
    /// Heads `H`.
    pub n_heads: usize,
    /// Context `T`.
    pub seq_len: usize,
    /// Routed experts `E`.
    pub n_experts: usize,
    /// Top-k `K`.
    pub top_k: usize,
    /// Expert width `F`.
    pub d_expert: usize,
    /// Shared experts.
    pub n_shared: usize,
    /// RoPE base.
    pub rope_theta: f64,
    /// RMSNorm epsilon.
    pub norm_eps: f64,
    /// Router score function.
    pub score: ScoreKind,
    /// Combine weight multiplier.
    pub combine_scale: f64,
    /// Capacity factor (None: dropless).
    pub capacity_factor: Option<f64>,
    /// Router z-loss coefficient.
    pub router_z_loss: f64,
    /// Final-logit z-loss coefficient.
    pub z_loss: f64,
    /// Switch auxiliary loss coefficient, when that balancing method is chosen.
    pub switch_coef: Option<f64>,
}

impl ModelDims {
    /// Resolve and check a spec's model (schema validation already ran; these are the rules
    /// this runner adds).
    pub fn from_spec(spec: &ExperimentSpec) -> Result<Self, RunnerError> {
        let m = &spec.model;
        // A stored tokenizer's vocabulary is checked against its token shards (`data`).
        if spec.data.tokenizer == Tokenizer::Bytes && m.vocab != 256 {
            return Err(RunnerError::Unsupported {
                field: "model.vocab",
                value: m.vocab.to_string(),
                fix: "the bytes tokenizer needs vocab = 256".into(),
            });
        }
        if !m.d_model.is_multiple_of(m.n_heads) || !(m.d_model / m.n_heads).is_multiple_of(2) {
            return Err(RunnerError::Unsupported {
                field: "model.n_heads",
                value: m.n_heads.to_string(),
                fix: format!(
                    "n_heads must divide d_model = {} into an even head size",
                    m.d_model
                ),
            });
        }
        if m.moe.top_k > m.moe.n_experts {
            return Err(RunnerError::Unsupported {
                field: "model.moe.top_k",
                value: m.moe.top_k.to_string(),
                fix: format!("at most n_experts = {}", m.moe.n_experts),
            });
        }
        Ok(Self {
            vocab: m.vocab as usize,
            d_model: m.d_model as usize,
            n_layers: m.n_layers as usize,
            n_heads: m.n_heads as usize,
            seq_len: m.seq_len as usize,
            n_experts: m.moe.n_experts as usize,
            top_k: m.moe.top_k as usize,
            d_expert: m.moe.d_expert as usize,
            n_shared: m.moe.n_shared as usize,
            rope_theta: m.rope_theta,
            norm_eps: m.norm_eps,
            score: match m.moe.score {
                ScoreFn::Softmax => ScoreKind::Softmax,
                ScoreFn::Sigmoid => ScoreKind::Sigmoid,
            },
            combine_scale: m.moe.combine_scale,
            capacity_factor: m.moe.capacity_factor,
            router_z_loss: m.moe.router_z_loss,
            z_loss: spec.train.z_loss,
            switch_coef: match m.moe.balancing {
                Balancing::SwitchAuxLoss { coef } => Some(coef),
                _ => None,
            },
        })
    }

    /// Expert capacity for `n` tokens: `ceil(cf * n K / E)`, or None when dropless.
    pub fn capacity(&self, n: usize) -> Option<usize> {
        self.capacity_factor.map(|cf| {
            ((cf * (n * self.top_k) as f64 / self.n_experts as f64).ceil() as usize).max(1)
        })
    }
}

/// One parameter tensor's description.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamInfo {
    /// Name, e.g. `layers.0.attn.wqkv` (checkpoint tensor names).
    pub name: String,
    /// Shape, row-major.
    pub shape: Vec<usize>,
    /// Whether weight decay applies (matrices yes; norm gains no).
    pub decay: bool,
    /// Init: `Some(std)` for normal(0, std), `None` for ones (norm gains).
    pub init_std: Option<f64>,
}

impl ParamInfo {
    /// Element count.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// What a parameter tensor is, which fixes its init and whether weight decay applies.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TensorKind {
    /// A weight matrix: normal(0, std) init, decayed.
    Matrix(f64),
    /// A norm gain: ones, not decayed.
    Gain,
}

/// A model's parameters as a forward reads them: the buffers in [`Model::params`] order, as
/// trained, and where a decoder has one, its copy of the linear layers' weights in another
/// layout (see [`crate::decode::DecodeWeights`]).
pub struct Weights<'a, B: Backend> {
    /// Every parameter tensor as trained, in layout order.
    pub bufs: &'a [B::Buf],
    /// By parameter index, a linear weight's copy in `layout`; `None` (or no copy at all):
    /// read the trained buffer.
    relaid: Option<(&'a [Option<B::Buf>], WeightLayout)>,
}

impl<B: Backend> std::fmt::Debug for Weights<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weights")
            .field("tensors", &self.bufs.len())
            .field("layout", &self.relaid.map(|r| r.1))
            .finish()
    }
}

impl<B: Backend> Clone for Weights<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Weights<'_, B> {}

impl<'a, B: Backend> Weights<'a, B> {
    /// The parameters as trained and checkpointed.
    pub fn trained(bufs: &'a [B::Buf]) -> Self {
        Self { bufs, relaid: None }
    }

    /// `bufs`, with the linear weights that `relaid` holds (by index) read from it in `layout`.
    pub(crate) fn relaid(
        bufs: &'a [B::Buf],
        relaid: &'a [Option<B::Buf>],
        layout: WeightLayout,
    ) -> Self {
        Self {
            bufs,
            relaid: Some((relaid, layout)),
        }
    }

    /// The layout linear weight `i` is read in.
    pub fn layout(&self, i: usize) -> WeightLayout {
        match self.relaid {
            Some((r, layout)) if r[i].is_some() => layout,
            _ => WeightLayout::OutIn,
        }
    }

    /// `out = inp @ W_i^T` over `g`'s groups, reading linear weight `i` in its layout.
    pub(crate) fn linear_fwd(&self, be: &B, out: &mut B::Buf, inp: &B::Buf, i: usize, g: Groups) {
        let w = match self.relaid {
            Some((r, _)) => r[i].as_ref().unwrap_or(&self.bufs[i]),
            None => &self.bufs[i],
        };
        be.linear_fwd(out, inp, w, &g.with_layout(self.layout(i)));
    }
}

/// What [`Model::attention_inputs`] computes for one layer.
pub(crate) struct AttentionInputs<B: Backend> {
    /// `rmsnorm(x)`.
    pub(crate) ln1: B::Buf,
    /// Its saved reciprocal RMS per row.
    pub(crate) rstd1: B::Buf,
    /// q, k (rotated) and v, `[B, H, T, D]`.
    pub(crate) heads: Qkv<B::Buf>,
}

/// Indices of one layer's tensors in [`Model::params`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LayerIx {
    pub(crate) ln1: usize,
    pub(crate) wqkv: usize,
    pub(crate) wo: usize,
    pub(crate) ln2: usize,
    router: usize,
    w13: usize,
    w2: usize,
    ws13: usize,
    ws2: usize,
}

/// The model: dims, parameter layout, RoPE tables. Parameters themselves are passed in, so the
/// same model serves training, evaluation and the gradient checks.
#[derive(Debug)]
pub struct Model {
    /// Hyperparameters.
    pub dims: ModelDims,
    /// Parameter layout, in checkpoint order.
    pub params: Vec<ParamInfo>,
    /// Whether each forward computes the quantile-balancing offsets (a per-expert sort over
    /// the tokens, on the host): on by default; the trainer turns it off unless the spec
    /// balances by quantile.
    pub quantile_stats: bool,
    layers: Vec<LayerIx>,
    wte: usize,
    lnf: usize,
    lm_head: usize,
    cos: Vec<f64>,
    sin: Vec<f64>,
}

/// Per-layer router statistics of one forward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerStats {
    /// Assignments per expert (before capacity).
    pub load: Vec<u64>,
    /// Assignments dropped by capacity.
    pub dropped: u64,
    /// Mean over tokens of the entropy (nats) of the normalised router scores.
    pub routing_entropy: f64,
    /// `E sum_i f_i P_i` (the Switch load-balancing loss before its coefficient).
    pub load_balancing: f64,
    /// Mean over tokens of `logsumexp(router logits)^2`.
    pub router_z: f64,
    /// Per-expert upper `(1 - K/E)` quantile of `score + bias - threshold` (quantile method).
    pub quantile_offset: Vec<f64>,
}

/// Losses and statistics of one forward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct PassStats {
    /// Mean cross-entropy (nats/token).
    pub cross_entropy: f64,
    /// `z_loss * mean(lse^2)` on final logits.
    pub z_loss: f64,
    /// Sum over layers of `router_z_loss * mean(lse_router^2)`.
    pub router_z_loss: f64,
    /// Sum over layers of `coef * E sum f P` (0 unless switch_aux_loss).
    pub aux_loss: f64,
    /// Per layer.
    pub layers: Vec<LayerStats>,
}

impl PassStats {
    /// The optimised loss: CE + every auxiliary term.
    pub fn total(&self) -> f64 {
        self.cross_entropy + self.z_loss + self.router_z_loss + self.aux_loss
    }
}

/// A batch's inputs on the backend: `tokens, targets [N]` with `N = batch_size * T`.
#[derive(Debug)]
pub struct BatchIds<'a, B: Backend> {
    /// `[N]` input token ids, row-major `[B, T]`.
    pub tokens: &'a B::Ids,
    /// `[N]` next-token targets.
    pub targets: &'a B::Ids,
    /// Sequences in the batch (`B`).
    pub batch_size: usize,
}

/// A SwiGLU block's two grouped matmuls over `rows` per weight matrix, from matrix `first`:
/// `W13 [2F, C]` then `W2 [C, F]` (the routed experts from 0, a shared expert alone).
fn swiglu_groups(rows: &[usize], first: usize, c: usize, f: usize) -> (Groups, Groups) {
    let group = |in_dim, out_dim| Groups {
        rows: rows.to_vec(),
        first,
        in_dim,
        out_dim,
        layout: WeightLayout::OutIn,
    };
    (group(c, 2 * f), group(f, c))
}

/// What a forward pass is for, which decides what it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Losses and statistics only (evaluation): nothing is cached.
    Evaluate,
    /// Followed by backward: every layer's [`LayerCache`], and the logits overwritten by
    /// `dloss/dlogits` (see [`ForwardCache::dlogits`]).
    Train,
    /// Scoring: the logits come back to the host, and routing is dropless (inference never
    /// drops an assignment, whatever capacity training used).
    Logits,
}

/// What a forward pass returns: its losses, and what its [`Pass`] asked it to keep.
struct Forward<B: Backend> {
    stats: PassStats,
    cache: Option<ForwardCache<B>>,
    logits: Option<Vec<f32>>,
}

/// One MoE block's forward: its output and every activation backward reads.
pub(crate) struct MoeFwd<B: Backend> {
    /// `[N, C]` the block's output (routed experts combined, plus the shared experts).
    pub(crate) out: B::Buf,
    router_logits: B::Buf,
    scores: B::Buf,
    routing: Routing<B>,
    xs: B::Buf,
    h: B::Buf,
    a: B::Buf,
    ye: B::Buf,
    shared: Vec<(B::Buf, B::Buf)>,
}

/// What backward needs from one layer's forward (llm.c's activations): the layer's input,
/// every normalised or projected activation a backward kernel reads, and the routing.
struct LayerCache<B: Backend> {
    /// `[N, C]` the layer's input `x` (the attention block's residual and RMSNorm input).
    x_in: B::Buf,
    /// `[N, C]` `rmsnorm(x_in)`, the input of the QKV projection.
    ln1: B::Buf,
    /// `[N]` the first RMSNorm's `1 / rms(x_in)`.
    rstd1: B::Buf,
    /// `[B, H, T, D]` queries and keys after RoPE, and values.
    heads: Qkv<B::Buf>,
    /// `[B, H, T, T]` causal attention probabilities.
    probs: B::Buf,
    /// `[N, C]` the attention output with heads merged, the input of `Wo`.
    ym: B::Buf,
    /// `[N, C]` `x_in + attention`, the MoE block's residual and RMSNorm input.
    x_mid: B::Buf,
    /// `[N, C]` `rmsnorm(x_mid)`, the input of the router and of every expert.
    ln2: B::Buf,
    /// `[N]` the second RMSNorm's `1 / rms(x_mid)`.
    rstd2: B::Buf,
    /// `[N, E]` router logits (for the router z-loss).
    router_logits: B::Buf,
    /// `[N, E]` router scores (softmax or sigmoid of the logits).
    scores: B::Buf,
    /// The layer's top-k choices, slots and combine weights.
    routing: Routing<B>,
    /// `[S, C]` `ln2` gathered into expert order (the routed experts' input).
    xs: B::Buf,
    /// `[S, 2F]` routed experts' `xs W13^T` (gate then up).
    h: B::Buf,
    /// `[S, F]` `swiglu(h)`, the input of `W2`.
    a: B::Buf,
    /// `[S, C]` routed experts' outputs, before the weighted combine.
    ye: B::Buf,
    /// Per shared expert, its `h [N, 2F]` and `a [N, F]`.
    shared: Vec<(B::Buf, B::Buf)>,
    /// `coef E f_i / N`: the switch loss's gradient on every row's scores (empty if unused).
    aux_grad: Vec<f64>,
}

/// Everything a forward pass kept for [`Model::forward_backward`]'s backward.
struct ForwardCache<B: Backend> {
    /// Per layer, in order.
    layers: Vec<LayerCache<B>>,
    /// `[N, C]` the last layer's output, the final RMSNorm's input.
    x_final: B::Buf,
    /// `[N, C]` `rmsnorm(x_final)`, the input of `lm_head`.
    lnf: B::Buf,
    /// `[N]` the final RMSNorm's `1 / rms(x_final)`.
    rstdf: B::Buf,
    /// `[N, V]` `dloss/dlogits`: the fused cross-entropy kernel overwrote the logits with it.
    dlogits: B::Buf,
}

impl Model {
    /// Lay out the parameters of `dims`.
    pub fn new(dims: ModelDims) -> Self {
        let (v, c, e, f, sh) = (
            dims.vocab,
            dims.d_model,
            dims.n_experts,
            dims.d_expert,
            dims.n_shared,
        );
        use TensorKind::{Gain, Matrix};
        let out_std = INIT_STD / (2.0 * dims.n_layers as f64).sqrt();
        let mut params = Vec::new();
        let mut push = |name: String, shape: Vec<usize>, kind: TensorKind| {
            let (decay, init_std) = match kind {
                Matrix(std) => (true, Some(std)),
                Gain => (false, None),
            };
            params.push(ParamInfo {
                name,
                shape,
                decay,
                init_std,
            });
            params.len() - 1
        };
        let wte = push("wte".into(), vec![v, c], Matrix(INIT_STD));
        let mut layers = Vec::new();
        for l in 0..dims.n_layers {
            let p = |s: &str| format!("layers.{l}.{s}");
            layers.push(LayerIx {
                ln1: push(p("ln1"), vec![c], Gain),
                wqkv: push(p("attn.wqkv"), vec![3 * c, c], Matrix(INIT_STD)),
                wo: push(p("attn.wo"), vec![c, c], Matrix(out_std)),
                ln2: push(p("ln2"), vec![c], Gain),
                router: push(p("moe.router"), vec![e, c], Matrix(INIT_STD)),
                w13: push(p("moe.w13"), vec![e, 2 * f, c], Matrix(INIT_STD)),
                w2: push(p("moe.w2"), vec![e, c, f], Matrix(out_std)),
                ws13: push(p("moe.shared_w13"), vec![sh, 2 * f, c], Matrix(INIT_STD)),
                ws2: push(p("moe.shared_w2"), vec![sh, c, f], Matrix(out_std)),
            });
        }
        let lnf = push("lnf".into(), vec![c], Gain);
        let lm_head = push("lm_head".into(), vec![v, c], Matrix(INIT_STD));
        // RoPE tables [T, D/2]: angle t * theta^(-2i/D).
        let (t, d) = (dims.seq_len, dims.d_model / dims.n_heads);
        let mut cos = Vec::with_capacity(t * d / 2);
        let mut sin = Vec::with_capacity(t * d / 2);
        for pos in 0..t {
            for i in 0..d / 2 {
                let freq = dims.rope_theta.powf(-2.0 * i as f64 / d as f64);
                let ang = pos as f64 * freq;
                cos.push(ang.cos());
                sin.push(ang.sin());
            }
        }
        Self {
            dims,
            params,
            quantile_stats: true,
            layers,
            wte,
            lnf,
            lm_head,
            cos,
            sin,
        }
    }

    /// Total parameter count.
    pub fn num_params(&self) -> usize {
        self.params.iter().map(ParamInfo::numel).sum()
    }

    /// Fresh parameters: tensor `i` drawn from its own stream `derive([seed, INIT, i])`.
    pub fn init_params<B: Backend>(&self, be: &B, seed: u64) -> Vec<B::Buf> {
        self.params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let host: Vec<B::F> = match p.init_std {
                    None => vec![B::F::ONE; p.numel()],
                    Some(std) => {
                        let mut rng = SplitMix64::new(derive(&[seed, INIT_STREAM, i as u64]));
                        (0..p.numel())
                            .map(|_| B::F::from_f64(rng.normal() * std))
                            .collect()
                    }
                };
                be.upload(&host)
            })
            .collect()
    }

    /// Zero buffers shaped like the parameters (gradients, optimiser moments).
    pub fn zeros_like_params<B: Backend>(&self, be: &B) -> Vec<B::Buf> {
        self.params.iter().map(|p| be.zeros(p.numel())).collect()
    }

    /// [`Model::init_params`] for a run: every buffer is allocated fallibly, so a model too big
    /// for the machine is an error, not an aborted process. Same values as `init_params`.
    pub fn try_init_params<B: Backend>(
        &self,
        be: &B,
        seed: u64,
    ) -> Result<Vec<B::Buf>, RunnerError> {
        let mut out = RunnerError::try_vec(self.params.len(), "parameters")?;
        for (i, p) in self.params.iter().enumerate() {
            let mut host: Vec<B::F> = RunnerError::try_vec(p.numel(), "parameters")?;
            match p.init_std {
                None => host.resize(p.numel(), B::F::ONE),
                Some(std) => {
                    let mut rng = SplitMix64::new(derive(&[seed, INIT_STREAM, i as u64]));
                    host.extend((0..p.numel()).map(|_| B::F::from_f64(rng.normal() * std)));
                }
            }
            out.push(be.try_upload(&host)?);
        }
        Ok(out)
    }

    /// [`Model::zeros_like_params`], allocated fallibly.
    pub fn try_zeros_like_params<B: Backend>(&self, be: &B) -> Result<Vec<B::Buf>, RunnerError> {
        let mut out = RunnerError::try_vec(self.params.len(), "optimizer state")?;
        for p in &self.params {
            out.push(be.try_zeros(p.numel())?);
        }
        Ok(out)
    }

    /// The RoPE tables `cos, sin [T, D/2]` on the backend, in its float type.
    fn rope_tables<B: Backend>(&self, be: &B) -> RopeTables<B::Buf> {
        let up = |table: &[f64]| {
            be.upload(&table.iter().map(|&x| B::F::from_f64(x)).collect::<Vec<_>>())
        };
        RopeTables {
            cos: up(&self.cos),
            sin: up(&self.sin),
        }
    }

    fn attn_dims(&self, b: usize) -> AttnDims {
        let d = &self.dims;
        AttnDims {
            b,
            t: d.seq_len,
            h: d.n_heads,
            d: d.d_model / d.n_heads,
        }
    }

    /// Forward only: losses and router statistics of a batch (evaluation).
    pub fn evaluate<B: Backend>(
        &self,
        be: &B,
        params: &[B::Buf],
        bias: &[Vec<f64>],
        batch: &BatchIds<'_, B>,
    ) -> PassStats {
        self.forward(be, params, bias, batch, Pass::Evaluate).stats
    }

    /// Forward only, dropless: the next-token logits `[N, V]` on the host, as f32 (scoring).
    pub fn logits<B: Backend>(
        &self,
        be: &B,
        params: &[B::Buf],
        bias: &[Vec<f64>],
        batch: &BatchIds<'_, B>,
    ) -> Vec<f32> {
        self.forward(be, params, bias, batch, Pass::Logits)
            .logits
            .unwrap_or_default()
    }

    /// The parameter index of the token embedding.
    pub(crate) fn wte_index(&self) -> usize {
        self.wte
    }

    /// The parameter index of the final RMSNorm's gain.
    pub(crate) fn lnf_index(&self) -> usize {
        self.lnf
    }

    /// The parameter index of the output projection.
    pub(crate) fn lm_head_index(&self) -> usize {
        self.lm_head
    }

    /// The parameter indices of every linear layer's weights (`[.., out, in]`, read by
    /// `linear_fwd`): each layer's projections, router and experts, and the output projection.
    /// Not the embedding table, which is looked up by row.
    pub(crate) fn linear_weight_indices(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .layers
            .iter()
            .flat_map(|ix| [ix.wqkv, ix.wo, ix.router, ix.w13, ix.w2, ix.ws13, ix.ws2])
            .collect();
        v.push(self.lm_head);
        v
    }

    /// Each layer's parameter indices, in order.
    pub(crate) fn layer_indices(&self) -> impl Iterator<Item = &LayerIx> {
        self.layers.iter()
    }

    /// RoPE's `cos, sin [D/2]` at position `pos` (below `seq_len`).
    pub(crate) fn rope_row(&self, pos: usize) -> (&[f64], &[f64]) {
        let half = self.dims.d_model / self.dims.n_heads / 2;
        let span = pos * half..(pos + 1) * half;
        (&self.cos[span.clone()], &self.sin[span])
    }

    /// Forward and backward: adds the gradient of [`PassStats::total`] into `grads`
    /// (callers zero them first) and returns the forward's losses and statistics.
    pub fn forward_backward<B: Backend>(
        &self,
        be: &B,
        params: &[B::Buf],
        grads: &mut [B::Buf],
        bias: &[Vec<f64>],
        batch: &BatchIds<'_, B>,
    ) -> PassStats {
        let Forward { stats, cache, .. } = self.forward(be, params, bias, batch, Pass::Train);
        if let Some(cache) = cache {
            self.backward(be, params, grads, batch, cache);
        }
        stats
    }

    /// The forward pass; with [`Pass::Train`] it also returns what backward needs.
    fn forward<B: Backend>(
        &self,
        be: &B,
        params: &[B::Buf],
        bias: &[Vec<f64>],
        batch: &BatchIds<'_, B>,
        pass: Pass,
    ) -> Forward<B> {
        let (tokens, targets, b) = (batch.tokens, batch.targets, batch.batch_size);
        let keep = pass == Pass::Train;
        let d = &self.dims;
        let (c, t, e, k, v) = (d.d_model, d.seq_len, d.n_experts, d.top_k, d.vocab);
        let n = b * t;
        let capacity = match pass {
            Pass::Logits => None,
            Pass::Evaluate | Pass::Train => d.capacity(n),
        };
        let ad = self.attn_dims(b);
        let rope = self.rope_tables(be);
        let trained = Weights::trained(params);

        let mut x = be.zeros(n * c);
        be.embedding_fwd(&mut x, &params[self.wte], tokens, c);
        let mut caches = Vec::with_capacity(d.n_layers);
        let mut layer_stats = Vec::with_capacity(d.n_layers);
        let (mut router_z_total, mut aux_total) = (0.0, 0.0);
        for (li, ix) in self.layers.iter().enumerate() {
            // --- attention block ---
            let AttentionInputs { ln1, rstd1, heads } =
                self.attention_inputs(be, trained, ix, &x, n, rope.each_ref(), ad);
            let mut y = be.zeros(n * c);
            let mut probs = be.zeros(be.attention_cache_len(ad));
            be.attention_fwd(&mut y, &mut probs, heads.each_ref(), ad);
            let mut ym = be.zeros(n * c);
            be.merge_heads_fwd(&mut ym, &y, ad);
            drop(y);
            let mut ao = be.zeros(n * c);
            be.linear_fwd(&mut ao, &ym, &params[ix.wo], &Groups::dense(n, c, c));
            let x_in = x;
            let mut x_mid = be.duplicate(&x_in);
            be.add_assign(&mut x_mid, &ao);
            drop(ao);

            // --- MoE block ---
            let mut ln2 = be.zeros(n * c);
            let mut rstd2 = be.zeros(n);
            be.rmsnorm_fwd(&mut ln2, &mut rstd2, &x_mid, &params[ix.ln2], c, d.norm_eps);
            let MoeFwd {
                out: moe_out,
                router_logits,
                scores,
                routing,
                xs,
                h,
                a,
                ye,
                shared,
            } = self.moe_fwd(be, trained, li, &bias[li], &ln2, n, capacity);
            let mut x_out = be.duplicate(&x_mid);
            be.add_assign(&mut x_out, &moe_out);
            drop(moe_out);
            x = x_out;

            // --- router statistics and auxiliary losses (host side, O(N E)) ---
            let rz = be.router_z_loss(None, &router_logits, e, 0.0) / n as f64;
            router_z_total += d.router_z_loss * rz;
            let rs = be.router_stats(&scores, &bias[li], k, self.quantile_stats);
            let (ls, aux_grad) = self.layer_stats(rs, &routing, rz, n);
            if let Some(coef) = d.switch_coef {
                aux_total += coef * ls.load_balancing;
            }
            layer_stats.push(ls);
            if keep {
                caches.push(LayerCache {
                    x_in,
                    ln1,
                    rstd1,
                    heads,
                    probs,
                    ym,
                    x_mid,
                    ln2,
                    rstd2,
                    router_logits,
                    scores,
                    routing,
                    xs,
                    h,
                    a,
                    ye,
                    shared,
                    aux_grad,
                });
            }
        }
        let mut lnf = be.zeros(n * c);
        let mut rstdf = be.zeros(n);
        be.rmsnorm_fwd(&mut lnf, &mut rstdf, &x, &params[self.lnf], c, d.norm_eps);
        let mut logits = be.zeros(n * v);
        be.linear_fwd(
            &mut logits,
            &lnf,
            &params[self.lm_head],
            &Groups::dense(n, c, v),
        );
        let host_logits = (pass == Pass::Logits).then(|| {
            be.download(&logits)
                .into_iter()
                .map(|x| x.to_f64() as f32)
                .collect()
        });
        let grad_scale = keep.then_some(1.0 / n as f64);
        let sums = be.cross_entropy(&mut logits, targets, v, d.z_loss, grad_scale);
        let stats = PassStats {
            cross_entropy: sums.cross_entropy / n as f64,
            z_loss: d.z_loss * sums.z / n as f64,
            router_z_loss: router_z_total,
            aux_loss: aux_total,
            layers: layer_stats,
        };
        let cache = keep.then_some(ForwardCache {
            layers: caches,
            x_final: x,
            lnf,
            rstdf,
            dlogits: logits,
        });
        Forward {
            stats,
            cache,
            logits: host_logits,
        }
    }

    /// One layer's attention inputs for the `n` rows of `x [N, C]`: `ln1 = rmsnorm(x)` with
    /// its saved `rstd1`, and the QKV projection split into heads and rotated by `rope`
    /// (`ad`'s shape; one table row per position of a sequence).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention_inputs<B: Backend>(
        &self,
        be: &B,
        w: Weights<'_, B>,
        ix: &LayerIx,
        x: &B::Buf,
        n: usize,
        rope: RopeTables<&B::Buf>,
        ad: AttnDims,
    ) -> AttentionInputs<B> {
        let (c, eps) = (self.dims.d_model, self.dims.norm_eps);
        let mut ln1 = be.zeros(n * c);
        let mut rstd1 = be.zeros(n);
        be.rmsnorm_fwd(&mut ln1, &mut rstd1, x, &w.bufs[ix.ln1], c, eps);
        let mut qkv = be.zeros(n * 3 * c);
        w.linear_fwd(be, &mut qkv, &ln1, ix.wqkv, Groups::dense(n, c, 3 * c));
        let mut heads = Qkv {
            q: be.zeros(n * c),
            k: be.zeros(n * c),
            v: be.zeros(n * c),
        };
        be.qkv_rope_fwd(heads.each_mut(), &qkv, rope, ad);
        AttentionInputs { ln1, rstd1, heads }
    }

    /// One MoE block on `ln2 [N, C]`: router, top-k routing (with `capacity`, if any), the
    /// routed experts combined by their weights, and the shared experts.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn moe_fwd<B: Backend>(
        &self,
        be: &B,
        w: Weights<'_, B>,
        li: usize,
        bias: &[f64],
        ln2: &B::Buf,
        n: usize,
        capacity: Option<usize>,
    ) -> MoeFwd<B> {
        let d = &self.dims;
        let ix = &self.layers[li];
        let (c, e, k, f) = (d.d_model, d.n_experts, d.top_k, d.d_expert);
        let mut router_logits = be.zeros(n * e);
        w.linear_fwd(
            be,
            &mut router_logits,
            ln2,
            ix.router,
            Groups::dense(n, c, e),
        );
        let mut scores = be.zeros(n * e);
        be.router_scores_fwd(&mut scores, &router_logits, e, d.score);
        let routing = be.route(&scores, bias, k, d.combine_scale, capacity);
        let s_rows: usize = routing.expert_rows.iter().sum();
        let mut xs = be.zeros(s_rows * c);
        be.dispatch_fwd(&mut xs, ln2, &routing, c);
        let (eg13, eg2) = swiglu_groups(&routing.expert_rows, 0, c, f);
        let mut h = be.zeros(s_rows * 2 * f);
        w.linear_fwd(be, &mut h, &xs, ix.w13, eg13);
        let mut a = be.zeros(s_rows * f);
        be.swiglu_fwd(&mut a, &h, f);
        let mut ye = be.zeros(s_rows * c);
        w.linear_fwd(be, &mut ye, &a, ix.w2, eg2);
        let mut moe_out = be.zeros(n * c);
        let mut shared = Vec::with_capacity(d.n_shared);
        for si in 0..d.n_shared {
            let (g13, g2) = swiglu_groups(&[n], si, c, f);
            let mut hs = be.zeros(n * 2 * f);
            w.linear_fwd(be, &mut hs, ln2, ix.ws13, g13);
            let mut as_ = be.zeros(n * f);
            be.swiglu_fwd(&mut as_, &hs, f);
            let mut ys = be.zeros(n * c);
            w.linear_fwd(be, &mut ys, &as_, ix.ws2, g2);
            be.add_assign(&mut moe_out, &ys);
            shared.push((hs, as_));
        }
        be.combine_fwd(&mut moe_out, &ye, &routing, c, Accumulate::Add);
        MoeFwd {
            out: moe_out,
            router_logits,
            scores,
            routing,
            xs,
            h,
            a,
            ye,
            shared,
        }
    }

    /// Router statistics of one layer, and the switch loss's per-expert score gradient.
    fn layer_stats<B: Backend>(
        &self,
        rs: RouterStats,
        routing: &Routing<B>,
        router_z: f64,
        n: usize,
    ) -> (LayerStats, Vec<f64>) {
        let d = &self.dims;
        let e = d.n_experts;
        let p_mean = rs.p_mean;
        let total: u64 = routing.expert_load.iter().sum();
        let frac: Vec<f64> = routing
            .expert_load
            .iter()
            .map(|&l| l as f64 / total.max(1) as f64)
            .collect();
        let load_balancing = e as f64 * frac.iter().zip(&p_mean).map(|(f, p)| f * p).sum::<f64>();
        let quantile_offset = rs.quantile_offset.unwrap_or_default();
        let aux_grad = match d.switch_coef {
            Some(coef) => frac
                .iter()
                .map(|fi| coef * e as f64 * fi / n as f64)
                .collect(),
            None => Vec::new(),
        };
        (
            LayerStats {
                load: routing.expert_load.clone(),
                dropped: routing.dropped,
                routing_entropy: rs.entropy_mean,
                load_balancing,
                router_z,
                quantile_offset,
            },
            aux_grad,
        )
    }

    /// Backward of [`Model::forward`] from its cache: adds every parameter's gradient into
    /// `grads`, last layer first.
    fn backward<B: Backend>(
        &self,
        be: &B,
        params: &[B::Buf],
        grads: &mut [B::Buf],
        batch: &BatchIds<'_, B>,
        cache: ForwardCache<B>,
    ) {
        let (tokens, b) = (batch.tokens, batch.batch_size);
        let d = &self.dims;
        let (c, t, e, f, v) = (d.d_model, d.seq_len, d.n_experts, d.d_expert, d.vocab);
        let n = b * t;
        let ad = self.attn_dims(b);
        let ForwardCache {
            layers: mut caches,
            x_final,
            lnf,
            rstdf,
            dlogits,
        } = cache;
        let rope = self.rope_tables(be);

        // Final norm and lm_head: logits = lnf Wlm^T.
        let dense_v = Groups::dense(n, c, v);
        let mut dlnf = be.zeros(n * c);
        be.linear_bwd_data(
            &mut dlnf,
            &dlogits,
            &params[self.lm_head],
            &dense_v,
            Accumulate::Overwrite,
        );
        be.linear_bwd_weight(&mut grads[self.lm_head], &dlogits, &lnf, &dense_v);
        drop(dlogits);
        let mut dx = be.zeros(n * c);
        let saved = RmsNormSaved {
            x: &x_final,
            w: &params[self.lnf],
            rstd: &rstdf,
        };
        be.rmsnorm_bwd(&mut dx, &mut grads[self.lnf], &dlnf, saved, c);

        for (li, ix) in self.layers.iter().enumerate().rev() {
            let Some(lc) = caches.pop() else { break };
            debug_assert_eq!(caches.len(), li);
            let routing = &lc.routing;
            let s_rows: usize = routing.expert_rows.iter().sum();
            // --- MoE block: x_out = x_mid + moe(ln2) ---
            let mut dye = be.zeros(s_rows * c);
            let mut dweights = be.zeros(n * d.top_k);
            be.combine_bwd(&mut dye, &mut dweights, &dx, &lc.ye, routing, c);
            let (eg13, eg2) = swiglu_groups(&routing.expert_rows, 0, c, f);
            let mut da = be.zeros(s_rows * f);
            be.linear_bwd_data(&mut da, &dye, &params[ix.w2], &eg2, Accumulate::Overwrite);
            be.linear_bwd_weight(&mut grads[ix.w2], &dye, &lc.a, &eg2);
            drop(dye);
            let mut dh = be.zeros(s_rows * 2 * f);
            be.swiglu_bwd(&mut dh, &da, &lc.h, f);
            drop(da);
            let mut dxs = be.zeros(s_rows * c);
            be.linear_bwd_data(&mut dxs, &dh, &params[ix.w13], &eg13, Accumulate::Overwrite);
            be.linear_bwd_weight(&mut grads[ix.w13], &dh, &lc.xs, &eg13);
            drop(dh);
            let mut dln2 = be.zeros(n * c);
            be.dispatch_bwd(&mut dln2, &dxs, routing, c);
            drop(dxs);
            for (si, (hs, as_)) in lc.shared.iter().enumerate() {
                let (g13, g2) = swiglu_groups(&[n], si, c, f);
                let mut das = be.zeros(n * f);
                be.linear_bwd_data(&mut das, &dx, &params[ix.ws2], &g2, Accumulate::Overwrite);
                be.linear_bwd_weight(&mut grads[ix.ws2], &dx, as_, &g2);
                let mut dhs = be.zeros(n * 2 * f);
                be.swiglu_bwd(&mut dhs, &das, hs, f);
                be.linear_bwd_data(&mut dln2, &dhs, &params[ix.ws13], &g13, Accumulate::Add);
                be.linear_bwd_weight(&mut grads[ix.ws13], &dhs, &lc.ln2, &g13);
            }
            // Router: scores -> combine weights (and the switch loss), logits -> z-loss.
            let mut dscores = be.zeros(n * e);
            if !lc.aux_grad.is_empty() {
                let row: Vec<B::F> = lc.aux_grad.iter().map(|&g| B::F::from_f64(g)).collect();
                be.add_row_broadcast(&mut dscores, &row);
            }
            be.route_weights_bwd(
                &mut dscores,
                &dweights,
                &lc.scores,
                routing,
                d.combine_scale,
            );
            let mut drl = be.zeros(n * e);
            be.router_scores_bwd(&mut drl, &dscores, &lc.scores, e, d.score);
            if d.router_z_loss > 0.0 {
                be.router_z_loss(
                    Some(&mut drl),
                    &lc.router_logits,
                    e,
                    d.router_z_loss / n as f64,
                );
            }
            let dense_e = Groups::dense(n, c, e);
            be.linear_bwd_data(
                &mut dln2,
                &drl,
                &params[ix.router],
                &dense_e,
                Accumulate::Add,
            );
            be.linear_bwd_weight(&mut grads[ix.router], &drl, &lc.ln2, &dense_e);
            // dx (= d x_out) flows to x_mid unchanged, plus the norm's branch.
            let saved = RmsNormSaved {
                x: &lc.x_mid,
                w: &params[ix.ln2],
                rstd: &lc.rstd2,
            };
            be.rmsnorm_bwd(&mut dx, &mut grads[ix.ln2], &dln2, saved, c);
            // --- attention block: x_mid = x_in + merge(attn) Wo^T ---
            let dense_c = Groups::dense(n, c, c);
            let mut dym = be.zeros(n * c);
            be.linear_bwd_data(
                &mut dym,
                &dx,
                &params[ix.wo],
                &dense_c,
                Accumulate::Overwrite,
            );
            be.linear_bwd_weight(&mut grads[ix.wo], &dx, &lc.ym, &dense_c);
            let mut dy = be.zeros(n * c);
            be.merge_heads_bwd(&mut dy, &dym, ad);
            drop(dym);
            let mut dheads = Qkv {
                q: be.zeros(n * c),
                k: be.zeros(n * c),
                v: be.zeros(n * c),
            };
            be.attention_bwd(dheads.each_mut(), &dy, &lc.probs, lc.heads.each_ref(), ad);
            drop(dy);
            let mut dqkv = be.zeros(n * 3 * c);
            be.qkv_rope_bwd(&mut dqkv, dheads.each_ref(), rope.each_ref(), ad);
            let dense_qkv = Groups::dense(n, c, 3 * c);
            let mut dln1 = be.zeros(n * c);
            be.linear_bwd_data(
                &mut dln1,
                &dqkv,
                &params[ix.wqkv],
                &dense_qkv,
                Accumulate::Overwrite,
            );
            be.linear_bwd_weight(&mut grads[ix.wqkv], &dqkv, &lc.ln1, &dense_qkv);
            let saved = RmsNormSaved {
                x: &lc.x_in,
                w: &params[ix.ln1],
                rstd: &lc.rstd1,
            };
            be.rmsnorm_bwd(&mut dx, &mut grads[ix.ln1], &dln1, saved, c);
        }
        be.embedding_bwd(&mut grads[self.wte], &dx, tokens, c);
    }
}
