//! The CPU reference backend: [`CpuBackend`], buffers as `Vec<F>`, kernels as plain Rust
//! functions over slices (one file per op family, each with its forward and backward).
//!
//! It is the spec every other backend is checked against, and it is bitwise deterministic for
//! any thread count: work is split into fixed blocks (rows, tiles, elements) whose sizes depend
//! only on the shapes, and every cross-block reduction adds the blocks' partial results in block
//! order. Threads come from a private rayon pool of the requested size ([`Backend::run`]).
//! Generic over the element type so the finite-difference checks run the same kernels in f64.

pub mod attention;
pub mod gemm;
pub mod loss;
pub mod moe;
pub mod norm;

use std::marker::PhantomData;

use self::gemm::{GemmShape, Mat, MatMut, Tiles, gemm_into};
use crate::backend::{
    Accumulate, AdamW, AttnDims, Backend, BackendKind, CrossEntropySums, Groups, KernelSource, Qkv,
    RopeTables, Routing, ScoreKind,
};
use crate::error::RunnerError;
use crate::scalar::Real;

/// Kernel sources of this backend, hashed into every run record.
const SOURCES: &[(&str, &str)] = &[
    ("runner/src/backend/cpu/mod.rs", include_str!("mod.rs")),
    ("runner/src/backend/cpu/gemm.rs", include_str!("gemm.rs")),
    ("runner/src/backend/cpu/norm.rs", include_str!("norm.rs")),
    (
        "runner/src/backend/cpu/attention.rs",
        include_str!("attention.rs"),
    ),
    ("runner/src/backend/cpu/moe.rs", include_str!("moe.rs")),
    ("runner/src/backend/cpu/loss.rs", include_str!("loss.rs")),
];

/// The CPU backend computing in `F` (`f32` for training, `f64` for gradient checks).
#[derive(Debug)]
pub struct CpuBackend<F: Real> {
    pool: rayon::ThreadPool,
    threads: usize,
    _f: PhantomData<F>,
}

impl<F: Real> CpuBackend<F> {
    /// A backend with its own pool of `threads` worker threads (at least 1).
    pub fn new(threads: usize) -> Result<Self, RunnerError> {
        let threads = threads.max(1);
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

impl<F: Real> Backend for CpuBackend<F> {
    type F = F;
    type Buf = Vec<F>;
    type Ids = Vec<u32>;

    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
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
    fn fill_zero(&self, buf: &mut Vec<F>) {
        buf.fill(F::ZERO);
    }
    fn len(&self, buf: &Vec<F>) -> usize {
        buf.len()
    }

    fn add_assign(&self, a: &mut Vec<F>, b: &Vec<F>) {
        norm::add_assign(a, b);
    }
    fn add_row_broadcast(&self, buf: &mut Vec<F>, row: &[F]) {
        norm::add_row_broadcast(buf, row);
    }

    fn embedding_fwd(&self, out: &mut Vec<F>, wte: &Vec<F>, tokens: &Vec<u32>, c: usize) {
        norm::embedding_fwd(out, wte, tokens, c);
    }
    fn embedding_bwd(&self, dwte: &mut Vec<F>, dout: &Vec<F>, tokens: &Vec<u32>, c: usize) {
        norm::embedding_bwd(dwte, dout, tokens, c);
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
        x: &Vec<F>,
        w: &Vec<F>,
        rstd: &Vec<F>,
        c: usize,
    ) {
        norm::rmsnorm_bwd(dx, dw, dout, x, w, rstd, c);
    }

    fn linear_fwd(&self, out: &mut Vec<F>, inp: &Vec<F>, w: &Vec<F>, g: &Groups) {
        let (ind, outd) = (g.in_dim, g.out_dim);
        let mut r0 = 0;
        for (gi, &rows) in g.rows.iter().enumerate() {
            let wo = (g.first + gi) * outd * ind;
            gemm_into(
                GemmShape {
                    m: rows,
                    n: outd,
                    k: ind,
                },
                MatMut::rows(&mut out[r0 * outd..], outd),
                Mat::rows(&inp[r0 * ind..], ind),
                Mat::transposed(&w[wo..wo + outd * ind], ind),
                Accumulate::Overwrite,
                Tiles::Parallel,
            );
            r0 += rows;
        }
    }
    fn linear_bwd_data(
        &self,
        dinp: &mut Vec<F>,
        dout: &Vec<F>,
        w: &Vec<F>,
        g: &Groups,
        accumulate: Accumulate,
    ) {
        let (ind, outd) = (g.in_dim, g.out_dim);
        let mut r0 = 0;
        for (gi, &rows) in g.rows.iter().enumerate() {
            let wo = (g.first + gi) * outd * ind;
            gemm_into(
                GemmShape {
                    m: rows,
                    n: ind,
                    k: outd,
                },
                MatMut::rows(&mut dinp[r0 * ind..], ind),
                Mat::rows(&dout[r0 * outd..], outd),
                Mat::rows(&w[wo..wo + outd * ind], ind),
                accumulate,
                Tiles::Parallel,
            );
            r0 += rows;
        }
    }
    fn linear_bwd_weight(&self, dw: &mut Vec<F>, dout: &Vec<F>, inp: &Vec<F>, g: &Groups) {
        let (ind, outd) = (g.in_dim, g.out_dim);
        let mut r0 = 0;
        for (gi, &rows) in g.rows.iter().enumerate() {
            let wo = (g.first + gi) * outd * ind;
            if rows > 0 {
                gemm_into(
                    GemmShape {
                        m: outd,
                        n: ind,
                        k: rows,
                    },
                    MatMut::rows(&mut dw[wo..wo + outd * ind], ind),
                    Mat::transposed(&dout[r0 * outd..r0 * outd + rows * outd], outd),
                    Mat::rows(&inp[r0 * ind..r0 * ind + rows * ind], ind),
                    Accumulate::Add,
                    Tiles::Parallel,
                );
            }
            r0 += rows;
        }
    }

    fn qkv_rope_fwd(
        &self,
        out: Qkv<&mut Vec<F>>,
        qkv: &Vec<F>,
        rope: RopeTables<&Vec<F>>,
        dims: AttnDims,
    ) {
        attention::qkv_rope_fwd(out.map(Vec::as_mut_slice), qkv, slices(rope), dims);
    }
    fn qkv_rope_bwd(
        &self,
        dqkv: &mut Vec<F>,
        d: Qkv<&Vec<F>>,
        rope: RopeTables<&Vec<F>>,
        dims: AttnDims,
    ) {
        attention::qkv_rope_bwd(dqkv, d.map(Vec::as_slice), slices(rope), dims);
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
        attention::merge_heads_fwd(out, y, dims);
    }
    fn merge_heads_bwd(&self, dy: &mut Vec<F>, dout: &Vec<F>, dims: AttnDims) {
        attention::merge_heads_bwd(dy, dout, dims);
    }

    fn swiglu_fwd(&self, out: &mut Vec<F>, h: &Vec<F>, f: usize) {
        norm::swiglu_fwd(out, h, f);
    }
    fn swiglu_bwd(&self, dh: &mut Vec<F>, dout: &Vec<F>, h: &Vec<F>, f: usize) {
        norm::swiglu_bwd(dh, dout, h, f);
    }

    fn router_scores_fwd(&self, scores: &mut Vec<F>, logits: &Vec<F>, e: usize, kind: ScoreKind) {
        moe::router_scores_fwd(scores, logits, e, kind);
    }
    fn router_scores_bwd(
        &self,
        dlogits: &mut Vec<F>,
        dscores: &Vec<F>,
        scores: &Vec<F>,
        e: usize,
        kind: ScoreKind,
    ) {
        moe::router_scores_bwd(dlogits, dscores, scores, e, kind);
    }
    fn router_z_loss(
        &self,
        dlogits: Option<&mut Vec<F>>,
        logits: &Vec<F>,
        e: usize,
        coef: f64,
    ) -> f64 {
        moe::router_z_loss(dlogits.map(|d| d.as_mut_slice()), logits, e, coef)
    }
    fn route(
        &self,
        scores: &Vec<F>,
        bias: &[f64],
        top_k: usize,
        combine_scale: f64,
        capacity: Option<usize>,
    ) -> Routing<Self> {
        let r = moe::route(scores, bias, bias.len(), top_k, combine_scale, capacity);
        Routing {
            top_k,
            token_expert: r.token_expert,
            token_slot: r.token_slot,
            slot_assignment: r.slot_assignment,
            weights: r.weights,
            expert_rows: r.expert_rows,
            expert_load: r.expert_load,
            dropped: r.dropped,
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
        let e = routing.expert_rows.len();
        moe::route_weights_bwd(
            dscores,
            dweights,
            scores,
            &routing.token_expert,
            e,
            routing.top_k,
            combine_scale,
        );
    }

    fn dispatch_fwd(&self, xs: &mut Vec<F>, x: &Vec<F>, routing: &Routing<Self>, c: usize) {
        moe::dispatch_fwd(xs, x, &routing.slot_assignment, routing.top_k, c);
    }
    fn dispatch_bwd(&self, dx: &mut Vec<F>, dxs: &Vec<F>, routing: &Routing<Self>, c: usize) {
        moe::dispatch_bwd(dx, dxs, &routing.token_slot, routing.top_k, c);
    }
    fn combine_fwd(
        &self,
        out: &mut Vec<F>,
        y: &Vec<F>,
        routing: &Routing<Self>,
        c: usize,
        accumulate: Accumulate,
    ) {
        moe::combine_fwd(
            out,
            y,
            &routing.weights,
            &routing.token_slot,
            routing.top_k,
            c,
            accumulate,
        );
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
        moe::combine_bwd(
            dy,
            dweights,
            dout,
            y,
            &routing.weights,
            &routing.slot_assignment,
            &routing.token_slot,
            routing.top_k,
            c,
        );
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
        loss::sum_squares(buf)
    }
    fn adamw(&self, param: &mut Vec<F>, grad: &Vec<F>, m: &mut Vec<F>, v: &mut Vec<F>, hp: &AdamW) {
        loss::adamw(param, grad, m, v, hp);
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}

/// The RoPE tables as slices.
fn slices<F>(rope: RopeTables<&Vec<F>>) -> RopeTables<&[F]> {
    RopeTables {
        cos: rope.cos,
        sin: rope.sin,
    }
}
