//! The CUDA backend's stand-in when this binary is built without cargo feature `cuda` (as
//! candle's `dummy_cuda_backend.rs`): the same names, so callers need no `cfg`, and a
//! constructor that always fails with the reason. A [`CudaBackend`] can never exist here — it
//! holds an uninhabited field — so every method is `match self.0 {}`: unreachable by
//! construction, no panics.
//!
//! Not here: anything that runs (that is `device.rs` and `ops/` with the feature on).

use std::convert::Infallible;

use super::{AttentionPath, NOT_BUILT};
use crate::backend::Peak;
use crate::backend::{
    Accumulate, AdamW, AttnDims, Backend, BackendKind, CrossEntropySums, Groups, KernelSource, Qkv,
    RmsNormSaved, RopeTables, Routing, ScoreKind,
};
use crate::error::RunnerError;

/// The CUDA backend, absent from this build: [`CudaBackend::new`] says so.
#[derive(Debug)]
pub struct CudaBackend(Infallible);

/// A float buffer of the (absent) CUDA backend.
#[derive(Debug)]
pub struct CudaBuf(Infallible);

/// An index buffer of the (absent) CUDA backend.
#[derive(Debug)]
pub struct CudaIds(Infallible);

impl CudaBackend {
    /// Always [`RunnerError::BackendUnavailable`]: this binary was built without the CUDA
    /// backend.
    pub fn new(_ordinal: usize) -> Result<Self, RunnerError> {
        Err(RunnerError::BackendUnavailable {
            backend: "cuda",
            reason: NOT_BUILT.into(),
        })
    }

    /// The device architecture kernels were compiled for.
    pub fn arch(&self) -> &str {
        match self.0 {}
    }

    /// Device memory `(free, total)` in bytes.
    pub fn memory(&self) -> Option<(usize, usize)> {
        match self.0 {}
    }

    /// Waits for all queued work.
    pub fn synchronize(&self) -> Result<(), RunnerError> {
        match self.0 {}
    }

    /// Measured f32 SGEMM throughput (FLOP/s).
    pub fn measure_sgemm_peak(&self, _n: usize, _reps: usize) -> Result<f64, RunnerError> {
        match self.0 {}
    }

    /// Measured matmul throughput in the current precision (FLOP/s).
    pub fn measure_matmul_peak(&self, _n: usize, _reps: usize) -> Result<f64, RunnerError> {
        match self.0 {}
    }

    /// Check mode: wait for the stream after every op.
    pub fn set_sync_each_op(&self, _on: bool) {
        match self.0 {}
    }

    /// How attention runs from now on.
    pub fn set_attention_path(&self, _path: AttentionPath) {
        match self.0 {}
    }

    /// The MFU reference of a CUDA run.
    pub fn measured_peak(&self) -> Result<Peak, RunnerError> {
        match self.0 {}
    }
}

impl Backend for CudaBackend {
    type F = f32;
    type Buf = CudaBuf;
    type Ids = CudaIds;

    fn kind(&self) -> BackendKind {
        match self.0 {}
    }
    fn describe(&self) -> String {
        match self.0 {}
    }
    fn kernel_sources(&self) -> Vec<KernelSource> {
        match self.0 {}
    }
    fn take_error(&self) -> Option<String> {
        match self.0 {}
    }
    fn zeros(&self, _n: usize) -> CudaBuf {
        match self.0 {}
    }
    fn upload(&self, _host: &[f32]) -> CudaBuf {
        match self.0 {}
    }
    fn upload_ids(&self, _host: &[u32]) -> CudaIds {
        match self.0 {}
    }
    fn download(&self, _buf: &CudaBuf) -> Vec<f32> {
        match self.0 {}
    }
    fn download_ids(&self, _ids: &CudaIds) -> Vec<u32> {
        match self.0 {}
    }
    fn duplicate(&self, _buf: &CudaBuf) -> CudaBuf {
        match self.0 {}
    }
    fn fill_zero(&self, _buf: &mut CudaBuf) {
        match self.0 {}
    }
    fn len(&self, _buf: &CudaBuf) -> usize {
        match self.0 {}
    }
    fn add_assign(&self, _a: &mut CudaBuf, _b: &CudaBuf) {
        match self.0 {}
    }
    fn add_row_broadcast(&self, _buf: &mut CudaBuf, _row: &[f32]) {
        match self.0 {}
    }
    fn embedding_fwd(&self, _out: &mut CudaBuf, _wte: &CudaBuf, _tokens: &CudaIds, _c: usize) {
        match self.0 {}
    }
    fn embedding_bwd(&self, _dwte: &mut CudaBuf, _dout: &CudaBuf, _tokens: &CudaIds, _c: usize) {
        match self.0 {}
    }
    fn rmsnorm_fwd(
        &self,
        _out: &mut CudaBuf,
        _rstd: &mut CudaBuf,
        _x: &CudaBuf,
        _w: &CudaBuf,
        _c: usize,
        _eps: f64,
    ) {
        match self.0 {}
    }
    fn rmsnorm_bwd(
        &self,
        _dx: &mut CudaBuf,
        _dw: &mut CudaBuf,
        _dout: &CudaBuf,
        _saved: RmsNormSaved<&CudaBuf>,
        _c: usize,
    ) {
        match self.0 {}
    }
    fn linear_fwd(&self, _out: &mut CudaBuf, _inp: &CudaBuf, _w: &CudaBuf, _groups: &Groups) {
        match self.0 {}
    }
    fn linear_bwd_data(
        &self,
        _dinp: &mut CudaBuf,
        _dout: &CudaBuf,
        _w: &CudaBuf,
        _groups: &Groups,
        _accumulate: Accumulate,
    ) {
        match self.0 {}
    }
    fn linear_bwd_weight(
        &self,
        _dw: &mut CudaBuf,
        _dout: &CudaBuf,
        _inp: &CudaBuf,
        _groups: &Groups,
    ) {
        match self.0 {}
    }
    fn qkv_rope_fwd(
        &self,
        _out: Qkv<&mut CudaBuf>,
        _qkv: &CudaBuf,
        _rope: RopeTables<&CudaBuf>,
        _dims: AttnDims,
    ) {
        match self.0 {}
    }
    fn qkv_rope_bwd(
        &self,
        _dqkv: &mut CudaBuf,
        _d: Qkv<&CudaBuf>,
        _rope: RopeTables<&CudaBuf>,
        _dims: AttnDims,
    ) {
        match self.0 {}
    }
    fn attention_fwd(
        &self,
        _out: &mut CudaBuf,
        _probs: &mut CudaBuf,
        _qkv: Qkv<&CudaBuf>,
        _dims: AttnDims,
    ) {
        match self.0 {}
    }
    fn attention_bwd(
        &self,
        _d: Qkv<&mut CudaBuf>,
        _dout: &CudaBuf,
        _probs: &CudaBuf,
        _qkv: Qkv<&CudaBuf>,
        _dims: AttnDims,
    ) {
        match self.0 {}
    }
    fn merge_heads_fwd(&self, _out: &mut CudaBuf, _y: &CudaBuf, _dims: AttnDims) {
        match self.0 {}
    }
    fn merge_heads_bwd(&self, _dy: &mut CudaBuf, _dout: &CudaBuf, _dims: AttnDims) {
        match self.0 {}
    }
    fn swiglu_fwd(&self, _out: &mut CudaBuf, _h: &CudaBuf, _f: usize) {
        match self.0 {}
    }
    fn swiglu_bwd(&self, _dh: &mut CudaBuf, _dout: &CudaBuf, _h: &CudaBuf, _f: usize) {
        match self.0 {}
    }
    fn router_scores_fwd(
        &self,
        _scores: &mut CudaBuf,
        _logits: &CudaBuf,
        _e_: usize,
        _kind: ScoreKind,
    ) {
        match self.0 {}
    }
    fn router_scores_bwd(
        &self,
        _dlogits: &mut CudaBuf,
        _dscores: &CudaBuf,
        _scores: &CudaBuf,
        _e_: usize,
        _kind: ScoreKind,
    ) {
        match self.0 {}
    }
    fn router_z_loss(
        &self,
        _dlogits: Option<&mut CudaBuf>,
        _logits: &CudaBuf,
        _e_: usize,
        _coef_per_token: f64,
    ) -> f64 {
        match self.0 {}
    }
    fn route(
        &self,
        _scores: &CudaBuf,
        _bias: &[f64],
        _top_k: usize,
        _combine_scale: f64,
        _capacity: Option<usize>,
    ) -> Routing<Self> {
        match self.0 {}
    }
    fn route_weights_bwd(
        &self,
        _dscores: &mut CudaBuf,
        _dweights: &CudaBuf,
        _scores: &CudaBuf,
        _routing: &Routing<Self>,
        _combine_scale: f64,
    ) {
        match self.0 {}
    }
    fn dispatch_fwd(&self, _xs: &mut CudaBuf, _x: &CudaBuf, _routing: &Routing<Self>, _c: usize) {
        match self.0 {}
    }
    fn dispatch_bwd(&self, _dx: &mut CudaBuf, _dxs: &CudaBuf, _routing: &Routing<Self>, _c: usize) {
        match self.0 {}
    }
    fn combine_fwd(
        &self,
        _out: &mut CudaBuf,
        _y: &CudaBuf,
        _routing: &Routing<Self>,
        _c: usize,
        _accumulate: Accumulate,
    ) {
        match self.0 {}
    }
    fn combine_bwd(
        &self,
        _dy: &mut CudaBuf,
        _dweights: &mut CudaBuf,
        _dout: &CudaBuf,
        _y: &CudaBuf,
        _routing: &Routing<Self>,
        _c: usize,
    ) {
        match self.0 {}
    }
    fn cross_entropy(
        &self,
        _logits: &mut CudaBuf,
        _targets: &CudaIds,
        _v: usize,
        _z_coef: f64,
        _grad_scale: Option<f64>,
    ) -> CrossEntropySums {
        match self.0 {}
    }
    fn sum_squares(&self, _buf: &CudaBuf) -> f64 {
        match self.0 {}
    }
    fn adamw(
        &self,
        _param: &mut CudaBuf,
        _grad: &CudaBuf,
        _m: &mut CudaBuf,
        _v: &mut CudaBuf,
        _hp: &AdamW,
    ) {
        match self.0 {}
    }
    fn run<R: Send>(&self, _f: impl FnOnce() -> R + Send) -> R {
        match self.0 {}
    }
}
