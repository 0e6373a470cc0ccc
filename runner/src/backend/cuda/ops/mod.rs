//! The CUDA backend's ops: the [`Backend`] impl of [`CudaBackend`], one line per op into the
//! op family that implements it. Each family has one file here, its kernels in
//! `runner/kernels/<family>.cu`, and its CPU reference twin in `backend/cpu/<family>.rs`
//! (same name): elementwise, embedding, norm, gemm (cuBLAS, no `.cu`), rope, attention, swiglu,
//! router, topk, permute, combine, loss, reduce, adamw.
//!
//! A family's file holds launchers only: shapes to kernel arguments and launch geometry, one
//! [`CudaBackend::op`] per op (so a failure becomes the sticky error and nothing runs after
//! it). Not here: the device, memory and module loading (`cuda/device.rs`), cuBLAS calls
//! (`cuda/blas.rs`).

mod adamw;
mod attention;
mod combine;
mod elementwise;
mod embedding;
mod gemm;
mod loss;
mod norm;
mod permute;
mod reduce;
mod rope;
mod router;
mod swiglu;
mod topk;

use super::device::{CudaBackend, CudaBuf, CudaIds};
use super::sources;
use crate::backend::{
    Accumulate, AdamW, AttnDims, Backend, BackendKind, CrossEntropySums, Groups, KernelSource,
    Precision, Qkv, RmsNormSaved, RopeTables, RouterStats, Routing, ScoreKind, telemetry,
};

impl Backend for CudaBackend {
    type F = f32;
    type Buf = CudaBuf;
    type Ids = CudaIds;

    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn describe(&self) -> String {
        self.description().to_string()
    }

    fn kernel_sources(&self) -> Vec<KernelSource> {
        sources::kernel_sources()
    }

    fn take_error(&self) -> Option<String> {
        self.take_sticky_error()
    }

    fn set_precision(&self, precision: Precision) -> Result<(), String> {
        self.switch_precision(precision)
    }

    fn attention_cache_len(&self, dims: AttnDims) -> usize {
        attention::cache_len(self, dims)
    }

    fn telemetry(&self) -> Vec<(&'static str, f64)> {
        let mut v = telemetry::process();
        if let Ok(nvml) = self.nvml() {
            v.extend(nvml.sample());
        }
        v
    }

    // ---- memory (cuda/device.rs) ----
    fn zeros(&self, n: usize) -> CudaBuf {
        self.zeroed(n)
    }
    fn upload(&self, host: &[f32]) -> CudaBuf {
        self.upload_any(host)
    }
    fn upload_ids(&self, host: &[u32]) -> CudaIds {
        self.upload_any(host)
    }
    fn download(&self, buf: &CudaBuf) -> Vec<f32> {
        self.download_any(buf)
    }
    fn download_ids(&self, ids: &CudaIds) -> Vec<u32> {
        self.download_any(ids)
    }
    fn duplicate(&self, buf: &CudaBuf) -> CudaBuf {
        self.duplicate_buf(buf)
    }
    fn fill_zero(&self, buf: &mut CudaBuf) {
        self.fill_zero_buf(buf);
    }
    fn len(&self, buf: &CudaBuf) -> usize {
        buf.len
    }

    // ---- elementwise ----
    fn add_assign(&self, a: &mut CudaBuf, b: &CudaBuf) {
        elementwise::add_assign(self, a, b)
    }
    fn add_row_broadcast(&self, buf: &mut CudaBuf, row: &[f32]) {
        elementwise::add_row_broadcast(self, buf, row)
    }

    // ---- embedding ----
    fn embedding_fwd(&self, out: &mut CudaBuf, wte: &CudaBuf, tokens: &CudaIds, c: usize) {
        embedding::embedding_fwd(self, out, wte, tokens, c)
    }
    fn embedding_bwd(&self, dwte: &mut CudaBuf, dout: &CudaBuf, tokens: &CudaIds, c: usize) {
        embedding::embedding_bwd(self, dwte, dout, tokens, c)
    }

    // ---- RMSNorm ----
    fn rmsnorm_fwd(
        &self,
        out: &mut CudaBuf,
        rstd: &mut CudaBuf,
        x: &CudaBuf,
        w: &CudaBuf,
        c: usize,
        eps: f64,
    ) {
        norm::rmsnorm_fwd(self, out, rstd, x, w, c, eps)
    }
    fn rmsnorm_bwd(
        &self,
        dx: &mut CudaBuf,
        dw: &mut CudaBuf,
        dout: &CudaBuf,
        saved: RmsNormSaved<&CudaBuf>,
        c: usize,
    ) {
        norm::rmsnorm_bwd(self, dx, dw, dout, saved, c)
    }

    // ---- (grouped) linear: cuBLAS ----
    fn linear_fwd(&self, out: &mut CudaBuf, inp: &CudaBuf, w: &CudaBuf, groups: &Groups) {
        gemm::linear_fwd(self, out, inp, w, groups)
    }
    fn linear_bwd_data(
        &self,
        dinp: &mut CudaBuf,
        dout: &CudaBuf,
        w: &CudaBuf,
        groups: &Groups,
        accumulate: Accumulate,
    ) {
        gemm::linear_bwd_data(self, dinp, dout, w, groups, accumulate)
    }
    fn linear_bwd_weight(&self, dw: &mut CudaBuf, dout: &CudaBuf, inp: &CudaBuf, groups: &Groups) {
        gemm::linear_bwd_weight(self, dw, dout, inp, groups)
    }

    // ---- attention ----
    fn qkv_rope_fwd(
        &self,
        out: Qkv<&mut CudaBuf>,
        qkv: &CudaBuf,
        rope: RopeTables<&CudaBuf>,
        dims: AttnDims,
    ) {
        rope::qkv_rope_fwd(self, out, qkv, rope, dims)
    }
    fn qkv_rope_bwd(
        &self,
        dqkv: &mut CudaBuf,
        d: Qkv<&CudaBuf>,
        rope: RopeTables<&CudaBuf>,
        dims: AttnDims,
    ) {
        rope::qkv_rope_bwd(self, dqkv, d, rope, dims)
    }
    fn attention_fwd(
        &self,
        out: &mut CudaBuf,
        probs: &mut CudaBuf,
        qkv: Qkv<&CudaBuf>,
        dims: AttnDims,
    ) {
        attention::attention_fwd(self, out, probs, qkv, dims)
    }
    fn attention_bwd(
        &self,
        d: Qkv<&mut CudaBuf>,
        dout: &CudaBuf,
        probs: &CudaBuf,
        qkv: Qkv<&CudaBuf>,
        dims: AttnDims,
    ) {
        attention::attention_bwd(self, d, dout, probs, qkv, dims)
    }
    fn merge_heads_fwd(&self, out: &mut CudaBuf, y: &CudaBuf, dims: AttnDims) {
        rope::merge_heads_fwd(self, out, y, dims)
    }
    fn merge_heads_bwd(&self, dy: &mut CudaBuf, dout: &CudaBuf, dims: AttnDims) {
        rope::merge_heads_bwd(self, dy, dout, dims)
    }

    // ---- SwiGLU ----
    fn swiglu_fwd(&self, out: &mut CudaBuf, h: &CudaBuf, f: usize) {
        swiglu::swiglu_fwd(self, out, h, f)
    }
    fn swiglu_bwd(&self, dh: &mut CudaBuf, dout: &CudaBuf, h: &CudaBuf, f: usize) {
        swiglu::swiglu_bwd(self, dh, dout, h, f)
    }

    // ---- router ----
    fn router_scores_fwd(
        &self,
        scores: &mut CudaBuf,
        logits: &CudaBuf,
        e_: usize,
        kind: ScoreKind,
    ) {
        router::router_scores_fwd(self, scores, logits, e_, kind)
    }
    fn router_scores_bwd(
        &self,
        dlogits: &mut CudaBuf,
        dscores: &CudaBuf,
        scores: &CudaBuf,
        e_: usize,
        kind: ScoreKind,
    ) {
        router::router_scores_bwd(self, dlogits, dscores, scores, e_, kind)
    }
    fn router_z_loss(
        &self,
        dlogits: Option<&mut CudaBuf>,
        logits: &CudaBuf,
        e_: usize,
        coef_per_token: f64,
    ) -> f64 {
        router::router_z_loss(self, dlogits, logits, e_, coef_per_token)
    }
    fn route(
        &self,
        scores: &CudaBuf,
        bias: &[f64],
        top_k: usize,
        combine_scale: f64,
        capacity: Option<usize>,
    ) -> Routing<Self> {
        let choices = topk::topk_bias(self, scores, bias, top_k, combine_scale);
        let sorted =
            permute::sort_by_expert(self, &choices.token_expert, bias.len().max(1), capacity);
        Routing {
            top_k,
            token_expert: choices.token_expert,
            token_slot: sorted.token_slot,
            slot_assignment: sorted.slot_assignment,
            weights: choices.weights,
            dropped: sorted.dropped,
            expert_rows: sorted.expert_rows,
            expert_load: sorted.expert_load,
        }
    }
    fn router_stats(
        &self,
        scores: &CudaBuf,
        bias: &[f64],
        top_k: usize,
        quantile: bool,
    ) -> RouterStats {
        router::router_stats(self, scores, bias, top_k, quantile)
    }
    fn route_weights_bwd(
        &self,
        dscores: &mut CudaBuf,
        dweights: &CudaBuf,
        scores: &CudaBuf,
        routing: &Routing<Self>,
        combine_scale: f64,
    ) {
        router::route_weights_bwd(self, dscores, dweights, scores, routing, combine_scale)
    }

    // ---- dispatch / combine ----
    fn dispatch_fwd(&self, xs: &mut CudaBuf, x: &CudaBuf, routing: &Routing<Self>, c: usize) {
        permute::dispatch_fwd(self, xs, x, routing, c)
    }
    fn dispatch_bwd(&self, dx: &mut CudaBuf, dxs: &CudaBuf, routing: &Routing<Self>, c: usize) {
        permute::dispatch_bwd(self, dx, dxs, routing, c)
    }
    fn combine_fwd(
        &self,
        out: &mut CudaBuf,
        y: &CudaBuf,
        routing: &Routing<Self>,
        c: usize,
        accumulate: Accumulate,
    ) {
        combine::combine_fwd(self, out, y, routing, c, accumulate)
    }
    fn combine_bwd(
        &self,
        dy: &mut CudaBuf,
        dweights: &mut CudaBuf,
        dout: &CudaBuf,
        y: &CudaBuf,
        routing: &Routing<Self>,
        c: usize,
    ) {
        combine::combine_bwd(self, dy, dweights, dout, y, routing, c)
    }

    // ---- loss ----
    fn cross_entropy(
        &self,
        logits: &mut CudaBuf,
        targets: &CudaIds,
        v: usize,
        z_coef: f64,
        grad_scale: Option<f64>,
    ) -> CrossEntropySums {
        loss::cross_entropy(self, logits, targets, v, z_coef, grad_scale)
    }

    // ---- optimiser ----
    fn sum_squares(&self, buf: &CudaBuf) -> f64 {
        reduce::sum_squares(self, buf)
    }
    fn adamw(
        &self,
        param: &mut CudaBuf,
        grad: &CudaBuf,
        m: &mut CudaBuf,
        v: &mut CudaBuf,
        hp: &AdamW,
    ) {
        adamw::adamw(self, param, grad, m, v, hp)
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        // Kernels launch from this thread on the backend's one stream; make the context
        // current here (the trainer may call from any thread).
        self.bind_to_this_thread();
        f()
    }
}
