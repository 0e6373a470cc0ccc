//! The CPU reference backend: [`CpuBackend`], buffers as `Vec<F>`, kernels as plain Rust
//! functions over slices, one file per op family, each with its forward and backward. The
//! families and their names are the CUDA backend's too (`cuda/ops/<family>.rs`,
//! `runner/kernels/<family>.cu`): elementwise, embedding, norm, gemm (the linear layers; cuBLAS
//! on CUDA), rope, attention, swiglu, router, topk, permute, combine, loss, reduce, adamw.
//! Beside them, `expf`: not an op but the f32 exponential that swiglu and attention share.
//!
//! It is the spec every other backend is checked against, and it is bitwise deterministic for
//! any thread count: work is split into fixed blocks (rows, tiles, elements) whose sizes depend
//! only on the shapes, and every cross-block reduction adds the blocks' partial results in block
//! order. Threads come from a private rayon pool of the requested size ([`Backend::run`]).
//! Generic over the element type so the finite-difference checks run the same kernels in f64.
//! Not here: the model ([`crate::model`]); this file only maps the [`Backend`] trait onto the
//! family files.

pub mod adamw;
pub mod attention;
pub mod combine;
pub mod elementwise;
pub mod embedding;
pub mod expf;
pub mod gemm;
pub mod loss;
pub mod norm;
pub mod peak;
pub mod permute;
pub mod reduce;
pub mod rope;
pub mod router;
pub mod swiglu;
pub mod topk;

use std::marker::PhantomData;

use crate::backend::{
    Accumulate, AdamW, AttnDims, Backend, BackendKind, CrossEntropySums, Groups, KernelSource, Qkv,
    RmsNormSaved, RopeTables, Routing, ScoreKind, WeightLayout,
};
use crate::error::RunnerError;
use crate::scalar::Real;

/// Rows per parallel work item and per partial sum of cross-row reductions.
pub const ROW_BLOCK: usize = 64;
/// Elements per parallel work item of elementwise updates, and per partial sum of
/// [`reduce::sum_squares`].
pub const NORM_BLOCK: usize = 4096;

macro_rules! sources {
    ($($file:literal),* $(,)?) => {
        &[$((concat!("runner/src/backend/cpu/", $file), include_str!($file))),*]
    };
}

/// Kernel sources of this backend, hashed into every run record.
const SOURCES: &[(&str, &str)] = sources!(
    "mod.rs",
    "elementwise.rs",
    "embedding.rs",
    "norm.rs",
    "gemm.rs",
    "rope.rs",
    "attention.rs",
    "expf.rs",
    "swiglu.rs",
    "router.rs",
    "topk.rs",
    "permute.rs",
    "combine.rs",
    "loss.rs",
    "reduce.rs",
    "adamw.rs",
);

/// The CPU backend computing in `F` (`f32` for training, `f64` for gradient checks).
#[derive(Debug)]
pub struct CpuBackend<F: Real> {
    pool: rayon::ThreadPool,
    threads: usize,
    _f: PhantomData<F>,
}

impl<F: Real> CpuBackend<F> {
    /// A backend with its own pool of `threads` worker threads (at least 1). Tunes the
    /// process's allocator to keep freed activations for the next step
    /// ([`crate::backend::heap`]).
    pub fn new(threads: usize) -> Result<Self, RunnerError> {
        let threads = threads.max(1);
        crate::backend::heap::keep_freed_memory();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("glassbox-cpu-{i}"))
            .build()
            .map_err(|e| {
                RunnerError::Backend(format!("cannot start {threads} CPU threads: {e}"))
            })?;
        Ok(Self {
            pool,
            threads,
            _f: PhantomData,
        })
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl<F: Real> Drop for CpuBackend<F> {
    fn drop(&mut self) {
        crate::backend::heap::give_back_freed_memory();
    }
}

impl<F: Real> Backend for CpuBackend<F> {
    type F = F;
    type Buf = Vec<F>;
    type Ids = Vec<u32>;

    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn host_threads(&self) -> usize {
        self.threads
    }

    fn describe(&self) -> String {
        format!(
            "cpu ({} threads, {})",
            self.threads,
            F::DTYPE.to_lowercase()
        )
    }

    fn kernel_sources(&self) -> Vec<KernelSource> {
        SOURCES
            .iter()
            .map(|(name, text)| KernelSource {
                name: (*name).to_string(),
                blake3: format!("blake3:{}", blake3::hash(text.as_bytes()).to_hex()),
            })
            .collect()
    }

    fn zeros(&self, n: usize) -> Vec<F> {
        vec![F::ZERO; n]
    }
    fn upload(&self, host: &[F]) -> Vec<F> {
        host.to_vec()
    }
    fn try_zeros(&self, n: usize) -> Result<Vec<F>, RunnerError> {
        let mut v = RunnerError::try_vec(n, "a buffer")?;
        v.resize(n, F::ZERO);
        Ok(v)
    }
    fn try_upload(&self, host: &[F]) -> Result<Vec<F>, RunnerError> {
        let mut v = RunnerError::try_vec(host.len(), "a buffer")?;
        v.extend_from_slice(host);
        Ok(v)
    }
    fn upload_ids(&self, host: &[u32]) -> Vec<u32> {
        host.to_vec()
    }
    fn download(&self, buf: &Vec<F>) -> Vec<F> {
        buf.clone()
    }
    fn download_ids(&self, ids: &Vec<u32>) -> Vec<u32> {
        ids.clone()
    }
    fn duplicate(&self, buf: &Vec<F>) -> Vec<F> {
        buf.clone()
    }
    fn panel_matrices(&self, buf: &Vec<F>, rows: usize, cols: usize) -> Vec<F> {
        let mut out = vec![F::ZERO; buf.len()];
        crate::backend::panel_matrices(buf, &mut out, rows, cols);
        out
    }
    fn decode_layout(&self) -> WeightLayout {
        // One row's product over panels streams each one in order, where the trained
        // layout interleaves eight weight rows (see the gemm module's thin path).
        WeightLayout::Panels
    }
    fn fill_zero(&self, buf: &mut Vec<F>) {
        buf.fill(F::ZERO);
    }
    fn len(&self, buf: &Vec<F>) -> usize {
        buf.len()
    }

    fn add_assign(&self, a: &mut Vec<F>, b: &Vec<F>) {
        elementwise::add_assign(a, b);
    }
    fn add_row_broadcast(&self, buf: &mut Vec<F>, row: &[F]) {
        elementwise::add_row_broadcast(buf, row);
    }

    fn embedding_fwd(&self, out: &mut Vec<F>, wte: &Vec<F>, tokens: &Vec<u32>, c: usize) {
        embedding::embedding_fwd(out, wte, tokens, c);
    }
    fn embedding_bwd(&self, dwte: &mut Vec<F>, dout: &Vec<F>, tokens: &Vec<u32>, c: usize) {
        embedding::embedding_bwd(dwte, dout, tokens, c);
    }

    fn rmsnorm_fwd(
        &self,
        out: &mut Vec<F>,
        rstd: &mut Vec<F>,
        x: &Vec<F>,
        w: &Vec<F>,
        c: usize,
        eps: f64,
    ) {
        norm::rmsnorm_fwd(out, rstd, x, w, c, eps);
    }
    fn rmsnorm_bwd(
        &self,
        dx: &mut Vec<F>,
        dw: &mut Vec<F>,
        dout: &Vec<F>,
        saved: RmsNormSaved<&Vec<F>>,
        c: usize,
    ) {
        norm::rmsnorm_bwd(dx, dw, dout, saved.map(Vec::as_slice), c);
    }

    fn linear_fwd(&self, out: &mut Vec<F>, inp: &Vec<F>, w: &Vec<F>, g: &Groups) {
        gemm::linear_fwd(out, inp, w, g);
    }
    fn linear_bwd_data(
        &self,
        dinp: &mut Vec<F>,
        dout: &Vec<F>,
        w: &Vec<F>,
        g: &Groups,
        accumulate: Accumulate,
    ) {
        gemm::linear_bwd_data(dinp, dout, w, g, accumulate);
    }
    fn linear_bwd_weight(&self, dw: &mut Vec<F>, dout: &Vec<F>, inp: &Vec<F>, g: &Groups) {
        gemm::linear_bwd_weight(dw, dout, inp, g);
    }

    fn qkv_rope_fwd(
        &self,
        out: Qkv<&mut Vec<F>>,
        qkv: &Vec<F>,
        rope: RopeTables<&Vec<F>>,
        dims: AttnDims,
    ) {
        rope::qkv_rope_fwd(
            out.map(Vec::as_mut_slice),
            qkv,
            rope.map(Vec::as_slice),
            dims,
        );
    }
    fn qkv_rope_bwd(
        &self,
        dqkv: &mut Vec<F>,
        d: Qkv<&Vec<F>>,
        rope: RopeTables<&Vec<F>>,
        dims: AttnDims,
    ) {
        rope::qkv_rope_bwd(dqkv, d.map(Vec::as_slice), rope.map(Vec::as_slice), dims);
    }
    fn attention_fwd(
        &self,
        out: &mut Vec<F>,
        probs: &mut Vec<F>,
        qkv: Qkv<&Vec<F>>,
        dims: AttnDims,
    ) {
        attention::attention_fwd(out, probs, qkv.map(Vec::as_slice), dims);
    }
    fn attention_bwd(
        &self,
        d: Qkv<&mut Vec<F>>,
        dout: &Vec<F>,
        probs: &Vec<F>,
        qkv: Qkv<&Vec<F>>,
        dims: AttnDims,
    ) {
        attention::attention_bwd(
            d.map(Vec::as_mut_slice),
            dout,
            probs,
            qkv.map(Vec::as_slice),
            dims,
        );
    }
    fn merge_heads_fwd(&self, out: &mut Vec<F>, y: &Vec<F>, dims: AttnDims) {
        rope::merge_heads_fwd(out, y, dims);
    }
    fn merge_heads_bwd(&self, dy: &mut Vec<F>, dout: &Vec<F>, dims: AttnDims) {
        rope::merge_heads_bwd(dy, dout, dims);
    }

    fn swiglu_fwd(&self, out: &mut Vec<F>, h: &Vec<F>, f: usize) {
        swiglu::swiglu_fwd(out, h, f);
    }
    fn swiglu_bwd(&self, dh: &mut Vec<F>, dout: &Vec<F>, h: &Vec<F>, f: usize) {
        swiglu::swiglu_bwd(dh, dout, h, f);
    }

    fn router_scores_fwd(&self, scores: &mut Vec<F>, logits: &Vec<F>, e: usize, kind: ScoreKind) {
        router::router_scores_fwd(scores, logits, e, kind);
    }
    fn router_scores_bwd(
        &self,
        dlogits: &mut Vec<F>,
        dscores: &Vec<F>,
        scores: &Vec<F>,
        e: usize,
        kind: ScoreKind,
    ) {
        router::router_scores_bwd(dlogits, dscores, scores, e, kind);
    }
    fn router_z_loss(
        &self,
        dlogits: Option<&mut Vec<F>>,
        logits: &Vec<F>,
        e: usize,
        coef: f64,
    ) -> f64 {
        router::router_z_loss(dlogits.map(|d| d.as_mut_slice()), logits, e, coef)
    }
    fn route(
        &self,
        scores: &Vec<F>,
        bias: &[f64],
        top_k: usize,
        combine_scale: f64,
        capacity: Option<usize>,
    ) -> Routing<Self> {
        let choices = topk::topk_bias(scores, bias, bias.len(), top_k, combine_scale);
        let sorted = permute::sort_by_expert(&choices.token_expert, bias.len(), capacity);
        Routing {
            top_k,
            token_expert: choices.token_expert,
            token_slot: sorted.token_slot,
            slot_assignment: sorted.slot_assignment,
            weights: choices.weights,
            expert_rows: sorted.expert_rows,
            expert_load: sorted.expert_load,
            dropped: sorted.dropped,
        }
    }
    fn route_weights_bwd(
        &self,
        dscores: &mut Vec<F>,
        dweights: &Vec<F>,
        scores: &Vec<F>,
        routing: &Routing<Self>,
        combine_scale: f64,
    ) {
        router::route_weights_bwd(dscores, dweights, scores, routing, combine_scale);
    }

    fn dispatch_fwd(&self, xs: &mut Vec<F>, x: &Vec<F>, routing: &Routing<Self>, c: usize) {
        permute::dispatch_fwd(xs, x, routing, c);
    }
    fn dispatch_bwd(&self, dx: &mut Vec<F>, dxs: &Vec<F>, routing: &Routing<Self>, c: usize) {
        permute::dispatch_bwd(dx, dxs, routing, c);
    }
    fn combine_fwd(
        &self,
        out: &mut Vec<F>,
        y: &Vec<F>,
        routing: &Routing<Self>,
        c: usize,
        accumulate: Accumulate,
    ) {
        combine::combine_fwd(out, y, routing, c, accumulate);
    }
    fn combine_bwd(
        &self,
        dy: &mut Vec<F>,
        dweights: &mut Vec<F>,
        dout: &Vec<F>,
        y: &Vec<F>,
        routing: &Routing<Self>,
        c: usize,
    ) {
        combine::combine_bwd(dy, dweights, dout, y, routing, c);
    }

    fn cross_entropy(
        &self,
        logits: &mut Vec<F>,
        targets: &Vec<u32>,
        v: usize,
        z_coef: f64,
        grad_scale: Option<f64>,
    ) -> CrossEntropySums {
        loss::cross_entropy(logits, targets, v, z_coef, grad_scale)
    }

    fn sum_squares(&self, buf: &Vec<F>) -> f64 {
        reduce::sum_squares(buf)
    }
    fn adamw(&self, param: &mut Vec<F>, grad: &Vec<F>, m: &mut Vec<F>, v: &mut Vec<F>, hp: &AdamW) {
        adamw::adamw(param, grad, m, v, hp);
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}
