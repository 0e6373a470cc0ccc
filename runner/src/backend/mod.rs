//! The backend boundary: the op-level trait every compute backend implements, and the types
//! that cross it. The model ([`crate::model`]) and the trainer ([`crate::train`]) are written
//! once against [`Backend`]; a backend only supplies kernels and memory.
//!
//! Design (candle's `BackendStorage`/`BackendDevice`, llm.c's one-forward-one-backward-per-op):
//! - every op is a forward kernel and a backward kernel with the same shape legend;
//! - buffers are opaque ([`Backend::Buf`] for floats, [`Backend::Ids`] for `u32` indices) and
//!   live wherever the backend keeps them; only small per-step values cross to the host
//!   (scalar losses, per-expert counts, router scores for the balancing update);
//! - the CPU kernels in [`cpu`] are the reference twins: a new backend is checked op by op
//!   against them within stated tolerances;
//! - each backend reports the BLAKE3 of every kernel source it ran ([`KernelSource`]), which
//!   goes into the run record so a ledger entry proves which kernels a run used.
//!
//! Shape legend used in every doc comment here: `B` batch, `T` sequence length, `C` d_model,
//! `H` heads, `D = C / H` head size, `N = B*T` tokens, `V` vocab, `E` experts, `K` top-k,
//! `F` d_expert, `S` kept expert assignments (slots) after routing.
//!
//! Not here: what the model is (that is [`crate::model`]), optimisation policy, data, I/O.
//! Backend choice, for the CLI and the lab's worker alike, is [`select`] (`auto|cpu|cuda`),
//! which probes for CUDA without touching a missing library and says which backend it chose
//! and why, then [`Selection::start`], which starts it as a [`Selected`] backend that callers
//! match on (no `cfg`: without the `cuda` feature the CUDA arm exists but is never taken).

pub mod cpu;
pub mod cuda;
pub mod heap;
pub mod parity;
mod peak;

pub use peak::Peak;
pub mod telemetry;

use std::fmt;

pub use glassbox_schemas::spec::Precision;

use self::cpu::CpuBackend;
use self::cuda::CudaBackend;
use crate::error::RunnerError;
use crate::scalar::Real;

/// Which backend a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// The CPU reference backend (deterministic for any thread count).
    Cpu,
    /// The CUDA backend (`cuda::CudaBackend`, cargo feature `cuda`).
    Cuda,
}

impl BackendKind {
    /// Name as written in run records and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the user asked for on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendRequest {
    /// CUDA when built and present, else CPU.
    Auto,
    /// The CPU backend.
    Cpu,
    /// The CUDA backend, or an error saying why it is not available.
    Cuda,
}

/// The backend [`select`] chose, and why (printed by the CLI, so a run says what it ran on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The backend to run.
    pub kind: BackendKind,
    /// Why this one, e.g. `auto: CUDA not usable (no libcuda.so); using the CPU`.
    pub why: String,
}

/// A started backend, ready to train on.
#[derive(Debug)]
pub enum Selected {
    /// The CPU reference backend in f32.
    Cpu(CpuBackend<f32>),
    /// CUDA device 0 (without the `cuda` feature this arm can never be built).
    Cuda(CudaBackend),
}

impl Selected {
    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        match self {
            Selected::Cpu(_) => BackendKind::Cpu,
            Selected::Cuda(_) => BackendKind::Cuda,
        }
    }
}

impl Selection {
    /// Start the chosen backend: a CPU pool of `threads` workers (at least 1), or CUDA device
    /// 0 (which compiles or loads its kernels). Fails when the backend cannot start — e.g.
    /// [`RunnerError::BackendUnavailable`] from a CUDA build or device that is not usable.
    pub fn start(&self, threads: usize) -> Result<Selected, RunnerError> {
        match self.kind {
            BackendKind::Cpu => Ok(Selected::Cpu(CpuBackend::new(threads)?)),
            BackendKind::Cuda => Ok(Selected::Cuda(CudaBackend::new(0)?)),
        }
    }
}

/// Resolve a request to a backend that can run here. `auto` picks CUDA when this binary has it
/// and [`cuda::probe`] finds a usable device, else the CPU; an explicit `cuda` request that
/// cannot be met fails with [`RunnerError::BackendUnavailable`] naming the reason. Nothing is
/// started: [`Selection::start`] does that (a caller may report the choice first, or hand the
/// run to a worker that starts its own).
pub fn select(request: BackendRequest) -> Result<Selection, RunnerError> {
    match request {
        BackendRequest::Cpu => Ok(Selection {
            kind: BackendKind::Cpu,
            why: "requested with --backend cpu".into(),
        }),
        BackendRequest::Cuda => match cuda::probe() {
            Ok(found) => Ok(Selection {
                kind: BackendKind::Cuda,
                why: format!("requested with --backend cuda; {found}"),
            }),
            Err(reason) => Err(RunnerError::BackendUnavailable {
                backend: "cuda",
                reason: format!("{reason}; use --backend cpu or --backend auto"),
            }),
        },
        BackendRequest::Auto => Ok(match cuda::probe() {
            Ok(found) => Selection {
                kind: BackendKind::Cuda,
                why: format!("auto: {found}"),
            },
            Err(reason) => Selection {
                kind: BackendKind::Cpu,
                why: format!("auto: CUDA is not usable here ({reason}); using the CPU"),
            },
        }),
    }
}

pub use glassbox_schemas::run::KernelSource;

/// How router logits become scores (mirrors the spec's `ScoreFn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreKind {
    /// `s = softmax(logits)` over experts.
    Softmax,
    /// `s = sigmoid(logits)` per expert.
    Sigmoid,
}

/// How a linear layer's weight matrices lie in their buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WeightLayout {
    /// `[G, out_dim, in_dim]`: one row per output feature, as trained, checkpointed and
    /// exported.
    #[default]
    OutIn,
    /// Each `[out_dim, in_dim]` matrix cut into panels of [`WEIGHT_PANEL`] output features
    /// (the last one narrower where `out_dim` is not a multiple), each panel stored transposed
    /// (`[in_dim, width]`), panel after panel: element `(o, i)` of a panel starting at output
    /// `o0` with `width` columns is at `in_dim * o0 + i * width + (o - o0)` within its matrix.
    /// A product of one input row (decoding) then reads each panel as one contiguous stream,
    /// and a thread takes whole panels. A decoder's copy ([`Backend::decode_layout`]): only
    /// the forward reads it; training never uses it.
    Panels,
}

/// Output features per panel of [`WeightLayout::Panels`] (a multiple of every SIMD width).
pub const WEIGHT_PANEL: usize = 64;

/// Where each `[rows, cols]` row-major matrix of `src` (`[out, in]`, as trained) puts its
/// elements in `dst` under [`WeightLayout::Panels`]: the same values, so products over either
/// layout give the same bits.
pub fn panel_matrices<F: Copy>(src: &[F], dst: &mut [F], rows: usize, cols: usize) {
    let size = rows * cols;
    for (s, d) in src.chunks_exact(size).zip(dst.chunks_exact_mut(size)) {
        for o0 in (0..rows).step_by(WEIGHT_PANEL) {
            let width = WEIGHT_PANEL.min(rows - o0);
            let panel = &mut d[cols * o0..cols * (o0 + width)];
            for o in 0..width {
                for (i, &x) in s[(o0 + o) * cols..(o0 + o + 1) * cols].iter().enumerate() {
                    panel[i * width + o] = x;
                }
            }
        }
    }
}

/// Rows per weight group for a (grouped) linear layer: group `g` multiplies the next
/// `rows[g]` input rows by weight matrix `first + g` of a `[G, out_dim, in_dim]` tensor
/// (`[G, in_dim, out_dim]` where `layout` says so).
/// A dense layer is one group over all `N` rows with `first = 0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    /// Rows in each group, in order; they tile the input rows.
    pub rows: Vec<usize>,
    /// Index of the first weight matrix used.
    pub first: usize,
    /// Input features (`in_dim`).
    pub in_dim: usize,
    /// Output features (`out_dim`).
    pub out_dim: usize,
    /// How the weight matrices lie.
    pub layout: WeightLayout,
}

impl Groups {
    /// One dense `[out_dim, in_dim]` weight over `n` rows.
    pub fn dense(n: usize, in_dim: usize, out_dim: usize) -> Self {
        Self {
            rows: vec![n],
            first: 0,
            in_dim,
            out_dim,
            layout: WeightLayout::OutIn,
        }
    }

    /// The same groups over weights laid out as `layout`.
    pub fn with_layout(self, layout: WeightLayout) -> Self {
        Self { layout, ..self }
    }

    /// Total rows.
    pub fn total_rows(&self) -> usize {
        self.rows.iter().sum()
    }
}

/// Whether a kernel overwrites its output or adds into it (the `(+)=` of the op docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accumulate {
    /// `out = ...`.
    Overwrite,
    /// `out += ...` (a gradient with several contributions, a residual sum).
    Add,
}

/// Attention's three head-major tensors `q, k, v [B, H, T, D]` (or their gradients), as
/// buffers, references to buffers, or slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qkv<T> {
    /// Queries.
    pub q: T,
    /// Keys.
    pub k: T,
    /// Values.
    pub v: T,
}

impl<T> Qkv<T> {
    /// The three, borrowed.
    pub fn each_ref(&self) -> Qkv<&T> {
        Qkv {
            q: &self.q,
            k: &self.k,
            v: &self.v,
        }
    }

    /// The three, borrowed mutably.
    pub fn each_mut(&mut self) -> Qkv<&mut T> {
        Qkv {
            q: &mut self.q,
            k: &mut self.k,
            v: &mut self.v,
        }
    }

    /// `f` applied to each (e.g. a backend's buffer to its slice).
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> Qkv<U> {
        Qkv {
            q: f(self.q),
            k: f(self.k),
            v: f(self.v),
        }
    }
}

/// RoPE tables `cos, sin [T, D/2]`: entry `[t, i]` is the cosine / sine of `t theta^(-2i/D)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RopeTables<T> {
    /// `cos [T, D/2]`.
    pub cos: T,
    /// `sin [T, D/2]`.
    pub sin: T,
}

impl<T> RopeTables<T> {
    /// Both tables, borrowed.
    pub fn each_ref(&self) -> RopeTables<&T> {
        RopeTables {
            cos: &self.cos,
            sin: &self.sin,
        }
    }

    /// `f` applied to both.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> RopeTables<U> {
        RopeTables {
            cos: f(self.cos),
            sin: f(self.sin),
        }
    }
}

/// What RMSNorm's backward reads from its forward: the input `x [N, C]`, the gain `w [C]` and
/// the cached `rstd [N]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmsNormSaved<T> {
    /// The forward's input `[N, C]`.
    pub x: T,
    /// The gain `[C]`.
    pub w: T,
    /// `1 / rms(x)` per row `[N]`.
    pub rstd: T,
}

impl<T> RmsNormSaved<T> {
    /// `f` applied to each.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> RmsNormSaved<U> {
        RmsNormSaved {
            x: f(self.x),
            w: f(self.w),
            rstd: f(self.rstd),
        }
    }
}

/// Attention dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnDims {
    /// Batch `B`.
    pub b: usize,
    /// Sequence length `T`.
    pub t: usize,
    /// Heads `H`.
    pub h: usize,
    /// Head size `D`.
    pub d: usize,
}

/// The result of routing one layer's tokens (top-k on biased scores, stable sort by expert,
/// optional capacity). Index buffers live on the backend; counts come back to the host because
/// the grouped matmuls need them as shapes.
#[derive(Debug)]
pub struct Routing<B: Backend + ?Sized> {
    /// Choices per token `K`.
    pub top_k: usize,
    /// `[N*K]` chosen expert of token `n`'s `j`-th choice (choices in descending biased score,
    /// ties to the lower expert index).
    pub token_expert: B::Ids,
    /// `[N*K]` slot (row of the sorted buffer) of token `n`'s `j`-th choice, or
    /// [`DROPPED`] when the capacity limit dropped it.
    pub token_slot: B::Ids,
    /// `[S]` assignment `n*K + j` held by each sorted slot: slots are grouped by expert
    /// (expert 0 first), and within an expert by ascending assignment (a stable sort).
    pub slot_assignment: B::Ids,
    /// `[N*K]` combine weights: the unbiased scores of the chosen experts, renormalised to sum
    /// to 1 over the K choices and multiplied by `combine_scale`. Dropped choices keep their
    /// weight here but contribute nothing.
    pub weights: B::Buf,
    /// Kept slots per expert (the grouped matmuls' row counts); sums to `S`.
    pub expert_rows: Vec<usize>,
    /// Assignments per expert before the capacity limit (the load the balancer sees).
    pub expert_load: Vec<u64>,
    /// Assignments dropped by the capacity limit.
    pub dropped: u64,
}

/// Router statistics of one layer (see [`Backend::router_stats`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RouterStats {
    /// `P_i`: the mean over tokens of expert i's score.
    pub p_mean: Vec<f64>,
    /// Mean over tokens of the entropy (nats) of the normalised scores.
    pub entropy_mean: f64,
    /// Per-expert quantile offsets, when asked for (quantile balancing).
    pub quantile_offset: Option<Vec<f64>>,
}

/// Marker in [`Routing::token_slot`] for a dropped assignment.
pub const DROPPED: u32 = u32::MAX;

/// Per-row loss sums from the fused cross-entropy kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropySums {
    /// `sum_n -log softmax(logits_n)[target_n]` (nats).
    pub cross_entropy: f64,
    /// `sum_n logsumexp(logits_n)^2`.
    pub z: f64,
}

/// AdamW hyperparameters for one update (already scheduled: `lr` is this step's rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamW {
    /// Learning rate of this step.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Denominator epsilon.
    pub eps: f64,
    /// Decoupled weight decay (0 for norms and biases).
    pub weight_decay: f64,
    /// 1-based step number, for bias correction.
    pub step: u64,
    /// Multiplier applied to the gradient first (global-norm clipping).
    pub grad_scale: f64,
}

/// One compute backend: memory plus a forward and a backward kernel per op.
///
/// Every reduction must be over fixed blocks in a fixed order (never "however many threads"),
/// so results do not depend on parallelism; and no kernel may use float atomics.
/// Accumulating kernels say so (`+=`); the rest overwrite their outputs.
pub trait Backend: Send + Sync {
    /// Element type of float buffers on this backend.
    type F: Real;
    /// A float buffer.
    type Buf: Send + Sync;
    /// A `u32` index buffer.
    type Ids: Send + Sync;

    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// A one-line description for run records (device, threads).
    fn describe(&self) -> String;
    /// Host threads the backend keeps busy: the CPU backend's pool, one for a device backend
    /// (what hardware telemetry's CPU utilisation is a share of).
    fn host_threads(&self) -> usize {
        1
    }
    /// The BLAKE3 of every kernel source this backend runs.
    fn kernel_sources(&self) -> Vec<KernelSource>;
    /// The first failure since the last call, for backends whose ops can fail (a device out of
    /// memory, a failed launch). Ops after a failure do nothing; the trainer checks after each
    /// step and ends the run `failed` with this message. The CPU backend never fails so.
    fn take_error(&self) -> Option<String> {
        None
    }
    /// Computes the matmuls in `precision` from now on (the trainer calls it with the spec's
    /// `train.precision` before anything runs), or says why this backend cannot. The default
    /// is the CPU's answer: f32 only, since the reference stays f32 (a bf16 spec trained in f32
    /// would record an experiment that was not run). The error is the fix, for the user.
    fn set_precision(&self, precision: Precision) -> Result<(), String> {
        match precision {
            Precision::F32 => Ok(()),
            Precision::Bf16 => Err(format!(
                "the {} backend computes in f32 only (bf16 runs on the CUDA backend: \
                 --backend cuda); use precision = \"f32\"",
                self.kind()
            )),
        }
    }
    /// Elements of the attention cache ([`Backend::attention_fwd`]'s `probs`) for `dims`: the
    /// `B H T T` probabilities by default; a fused kernel keeps less (its log-sum-exps).
    fn attention_cache_len(&self, dims: AttnDims) -> usize {
        dims.b * dims.h * dims.t * dims.t
    }
    /// Hardware telemetry now, as `hw/...` metrics (see [`telemetry`]): by default this
    /// process's resident memory and CPU time; the CUDA backend adds the GPU's (NVML) where
    /// the library is present. Never fails: what cannot be read is left out.
    fn telemetry(&self) -> Vec<(&'static str, f64)> {
        telemetry::process()
    }

    // ---- memory ----
    /// A zero-filled buffer of `n` elements.
    fn zeros(&self, n: usize) -> Self::Buf;
    /// Copy host values to a new buffer.
    fn upload(&self, host: &[Self::F]) -> Self::Buf;
    /// [`Backend::zeros`] for the run's big buffers (parameters, gradients, optimiser moments):
    /// an error instead of an abort when the memory cannot be had. Backends whose allocations
    /// report through [`Backend::take_error`] keep this default.
    fn try_zeros(&self, n: usize) -> Result<Self::Buf, crate::error::RunnerError> {
        Ok(self.zeros(n))
    }
    /// [`Backend::upload`] for the run's big buffers, as [`Backend::try_zeros`].
    fn try_upload(&self, host: &[Self::F]) -> Result<Self::Buf, crate::error::RunnerError> {
        Ok(self.upload(host))
    }
    /// Copy host indices to a new buffer.
    fn upload_ids(&self, host: &[u32]) -> Self::Ids;
    /// Copy a buffer to the host.
    fn download(&self, buf: &Self::Buf) -> Vec<Self::F>;
    /// Copy an index buffer to the host.
    fn download_ids(&self, ids: &Self::Ids) -> Vec<u32>;
    /// A copy of a buffer, on the same device.
    fn duplicate(&self, buf: &Self::Buf) -> Self::Buf;
    /// The layout in which a decoder's products of one row read linear weights fastest here.
    /// The default is the trained one: a decoder then reads the parameters as they are.
    fn decode_layout(&self) -> WeightLayout {
        WeightLayout::OutIn
    }
    /// `buf`'s consecutive `[rows, cols]` row-major matrices (`[out, in]`) laid out as
    /// [`WeightLayout::Panels`] ([`panel_matrices`]). Done once per decoder's weights, through
    /// the host by default.
    fn panel_matrices(&self, buf: &Self::Buf, rows: usize, cols: usize) -> Self::Buf {
        let host = self.download(buf);
        let mut out = host.clone();
        panel_matrices(&host, &mut out, rows, cols);
        self.upload(&out)
    }
    /// Set every element to zero.
    fn fill_zero(&self, buf: &mut Self::Buf);
    /// Number of elements.
    fn len(&self, buf: &Self::Buf) -> usize;

    // ---- elementwise ----
    /// `a += b`.
    fn add_assign(&self, a: &mut Self::Buf, b: &Self::Buf);
    /// `buf[n, e] += row[e]` for every row of an `[N, E]` buffer.
    fn add_row_broadcast(&self, buf: &mut Self::Buf, row: &[Self::F]);

    // ---- embedding ----
    /// `out[n, :] = wte[tokens[n], :]`; out `[N, C]`, wte `[V, C]`.
    fn embedding_fwd(&self, out: &mut Self::Buf, wte: &Self::Buf, tokens: &Self::Ids, c: usize);
    /// `dwte[tokens[n], :] += dout[n, :]`, summed over `n` in ascending order.
    fn embedding_bwd(&self, dwte: &mut Self::Buf, dout: &Self::Buf, tokens: &Self::Ids, c: usize);

    // ---- RMSNorm ----
    /// `out = x * rstd * w` with `rstd[n] = 1 / sqrt(mean(x[n]^2) + eps)`; x, out `[N, C]`,
    /// w `[C]`, rstd `[N]` cached for backward.
    fn rmsnorm_fwd(
        &self,
        out: &mut Self::Buf,
        rstd: &mut Self::Buf,
        x: &Self::Buf,
        w: &Self::Buf,
        c: usize,
        eps: f64,
    );
    /// `dx += ...`, `dw += ...` for [`Backend::rmsnorm_fwd`], from `dout` and what the
    /// forward saw and cached.
    fn rmsnorm_bwd(
        &self,
        dx: &mut Self::Buf,
        dw: &mut Self::Buf,
        dout: &Self::Buf,
        saved: RmsNormSaved<&Self::Buf>,
        c: usize,
    );

    // ---- (grouped) linear: the only matmuls of the model ----
    /// `out[rows_g, :] = inp[rows_g, :] @ W[first+g]^T`; inp `[R, in]`, W `[G, out, in]`,
    /// out `[R, out]`.
    fn linear_fwd(&self, out: &mut Self::Buf, inp: &Self::Buf, w: &Self::Buf, groups: &Groups);
    /// `dinp[rows_g, :] (+)= dout[rows_g, :] @ W[first+g]`.
    fn linear_bwd_data(
        &self,
        dinp: &mut Self::Buf,
        dout: &Self::Buf,
        w: &Self::Buf,
        groups: &Groups,
        accumulate: Accumulate,
    );
    /// `dW[first+g] += dout[rows_g, :]^T @ inp[rows_g, :]`.
    fn linear_bwd_weight(
        &self,
        dw: &mut Self::Buf,
        dout: &Self::Buf,
        inp: &Self::Buf,
        groups: &Groups,
    );

    // ---- attention ----
    /// Split `qkv [B, T, 3C]` into `out.q, out.k, out.v [B, H, T, D]`, rotating q and k by
    /// RoPE (pairs `(i, i + D/2)`).
    fn qkv_rope_fwd(
        &self,
        out: Qkv<&mut Self::Buf>,
        qkv: &Self::Buf,
        rope: RopeTables<&Self::Buf>,
        dims: AttnDims,
    );
    /// Inverse of [`Backend::qkv_rope_fwd`] for gradients: `dqkv = ...` from `d.q, d.k, d.v`
    /// (overwrites).
    fn qkv_rope_bwd(
        &self,
        dqkv: &mut Self::Buf,
        d: Qkv<&Self::Buf>,
        rope: RopeTables<&Self::Buf>,
        dims: AttnDims,
    );
    /// Causal softmax attention per (b, h): `P = softmax(q k^T / sqrt(D) + mask)`,
    /// `out = P v`; q, k, v, out `[B, H, T, D]`; `probs` is the cache backward reads, of
    /// [`Backend::attention_cache_len`] elements (`P [B, H, T, T]` unless a fused kernel keeps
    /// less).
    fn attention_fwd(
        &self,
        out: &mut Self::Buf,
        probs: &mut Self::Buf,
        qkv: Qkv<&Self::Buf>,
        dims: AttnDims,
    );
    /// Gradients of [`Backend::attention_fwd`] into `d.q, d.k, d.v` (overwrites), from `dout`
    /// and the forward's `probs` and `qkv`.
    fn attention_bwd(
        &self,
        d: Qkv<&mut Self::Buf>,
        dout: &Self::Buf,
        probs: &Self::Buf,
        qkv: Qkv<&Self::Buf>,
        dims: AttnDims,
    );
    /// `[B, H, T, D] -> [B, T, C]` (head h at columns `h*D..(h+1)*D`).
    fn merge_heads_fwd(&self, out: &mut Self::Buf, y: &Self::Buf, dims: AttnDims);
    /// `[B, T, C] -> [B, H, T, D]`, the backward of [`Backend::merge_heads_fwd`].
    fn merge_heads_bwd(&self, dy: &mut Self::Buf, dout: &Self::Buf, dims: AttnDims);

    // ---- SwiGLU ----
    /// `out[r, i] = silu(h[r, i]) * h[r, F + i]`; h `[R, 2F]` (gate then up), out `[R, F]`.
    fn swiglu_fwd(&self, out: &mut Self::Buf, h: &Self::Buf, f: usize);
    /// `dh = ...` (overwrites) for [`Backend::swiglu_fwd`].
    fn swiglu_bwd(&self, dh: &mut Self::Buf, dout: &Self::Buf, h: &Self::Buf, f: usize);

    // ---- router ----
    /// `scores = softmax(logits)` per row or `sigmoid(logits)` elementwise; `[N, E]`.
    fn router_scores_fwd(
        &self,
        scores: &mut Self::Buf,
        logits: &Self::Buf,
        e: usize,
        kind: ScoreKind,
    );
    /// `dlogits = ...` (overwrites) for [`Backend::router_scores_fwd`].
    fn router_scores_bwd(
        &self,
        dlogits: &mut Self::Buf,
        dscores: &Self::Buf,
        scores: &Self::Buf,
        e: usize,
        kind: ScoreKind,
    );
    /// Router z-loss: returns `sum_n logsumexp(logits_n)^2` and adds
    /// `coef_per_token * d/dlogits (lse^2)` into `dlogits` when it is given.
    fn router_z_loss(
        &self,
        dlogits: Option<&mut Self::Buf>,
        logits: &Self::Buf,
        e: usize,
        coef_per_token: f64,
    ) -> f64;
    /// Top-k of `scores + bias` per token, combine weights from the unbiased scores
    /// (renormalised, times `combine_scale`), stable sort of assignments by expert, and an
    /// optional per-expert `capacity` (assignments past it, in token order, are dropped).
    fn route(
        &self,
        scores: &Self::Buf,
        bias: &[f64],
        top_k: usize,
        combine_scale: f64,
        capacity: Option<usize>,
    ) -> Routing<Self>;
    /// Router statistics of one layer's `scores [N, E]` (`E = bias.len()`): mean score per
    /// expert, mean routing entropy and, when `quantile`, the quantile-balancing offsets (see
    /// [`cpu::router::router_stats`], the reference). The default downloads the scores and runs
    /// the reference; a device backend may reduce on the device and copy back `E + 1` values.
    fn router_stats(
        &self,
        scores: &Self::Buf,
        bias: &[f64],
        top_k: usize,
        quantile: bool,
    ) -> RouterStats {
        cpu::router::router_stats(&self.download(scores), bias, top_k, quantile)
    }
    /// Backward of the combine weights: `dscores +=` the gradient through the
    /// renormalisation, from `dweights [N*K]`.
    fn route_weights_bwd(
        &self,
        dscores: &mut Self::Buf,
        dweights: &Self::Buf,
        scores: &Self::Buf,
        routing: &Routing<Self>,
        combine_scale: f64,
    );

    // ---- dispatch / combine ----
    /// `xs[s, :] = x[slot_assignment[s] / K, :]`; x `[N, C]`, xs `[S, C]`.
    fn dispatch_fwd(&self, xs: &mut Self::Buf, x: &Self::Buf, routing: &Routing<Self>, c: usize);
    /// `dx[n, :] += sum_j dxs[token_slot[n, j], :]`, the K slots summed in order j = 0..K.
    fn dispatch_bwd(&self, dx: &mut Self::Buf, dxs: &Self::Buf, routing: &Routing<Self>, c: usize);
    /// `out[n, :] (+)= sum_j weights[n, j] * y[token_slot[n, j], :]` in order j = 0..K
    /// (the model adds onto the shared experts' sum).
    fn combine_fwd(
        &self,
        out: &mut Self::Buf,
        y: &Self::Buf,
        routing: &Routing<Self>,
        c: usize,
        accumulate: Accumulate,
    );
    /// `dy[slot] = weights[n, j] * dout[n]` and `dweights[n, j] = dout[n] . y[slot]`
    /// (both overwrite; dropped choices get 0).
    fn combine_bwd(
        &self,
        dy: &mut Self::Buf,
        dweights: &mut Self::Buf,
        dout: &Self::Buf,
        y: &Self::Buf,
        routing: &Routing<Self>,
        c: usize,
    );

    // ---- loss ----
    /// Fused softmax cross-entropy (+ z-loss) over `logits [N, V]` with `targets [N]`.
    /// Returns the sums; when `grad_scale` is given, overwrites `logits` with
    /// `grad_scale * d(ce + z_coef * lse^2)/dlogits` (the llm.c in-place trick).
    fn cross_entropy(
        &self,
        logits: &mut Self::Buf,
        targets: &Self::Ids,
        v: usize,
        z_coef: f64,
        grad_scale: Option<f64>,
    ) -> CrossEntropySums;

    // ---- optimiser ----
    /// `sum(buf^2)` reduced over fixed blocks in a fixed order, in f64.
    fn sum_squares(&self, buf: &Self::Buf) -> f64;
    /// One AdamW update of `param` from `grad`, updating the moments `m`, `v`.
    fn adamw(
        &self,
        param: &mut Self::Buf,
        grad: &Self::Buf,
        m: &mut Self::Buf,
        v: &mut Self::Buf,
        hp: &AdamW,
    );

    /// Run `f` inside this backend's execution context (the CPU backend's thread pool).
    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_says_what_it_picked_and_why() {
        let cpu = select(BackendRequest::Cpu).unwrap();
        assert_eq!(cpu.kind, BackendKind::Cpu);
        let auto = select(BackendRequest::Auto).unwrap();
        assert!(auto.why.starts_with("auto: "), "{}", auto.why);
        match cuda::probe() {
            // A machine with a usable GPU (and a binary built with `cuda`).
            Ok(_) => {
                assert_eq!(auto.kind, BackendKind::Cuda);
                assert_eq!(
                    select(BackendRequest::Cuda).unwrap().kind,
                    BackendKind::Cuda
                );
            }
            // The CPU-only machines: auto falls back, an explicit request is a clear error.
            Err(reason) => {
                let started = auto.start(2).expect("the CPU backend starts");
                assert_eq!(started.kind(), BackendKind::Cpu);
                // Starting CUDA anyway (a selection made elsewhere) fails with the reason.
                let cuda = Selection {
                    kind: BackendKind::Cuda,
                    why: "test".into(),
                };
                match cuda.start(1) {
                    Err(RunnerError::BackendUnavailable { backend, reason: r }) => {
                        assert_eq!(backend, "cuda");
                        assert_eq!(r, reason);
                    }
                    other => panic!("expected BackendUnavailable, got {other:?}"),
                }
                assert_eq!(auto.kind, BackendKind::Cpu);
                assert!(auto.why.contains(&reason), "{}", auto.why);
                match select(BackendRequest::Cuda) {
                    Err(RunnerError::BackendUnavailable { backend, reason: r }) => {
                        assert_eq!(backend, "cuda");
                        assert!(r.contains("--backend cpu"), "{r}");
                    }
                    other => panic!("expected BackendUnavailable, got {other:?}"),
                }
            }
        }
    }
}
