//! The CUDA backend: the CPU reference's ops as CUDA C kernels (`runner/kernels/*.cu`,
//! compiled at run time by NVRTC for the device's architecture) plus cuBLAS for every matmul,
//! through `cudarc` with dynamic loading — the binary builds and runs on machines with no CUDA
//! at all, and [`probe`] says why CUDA cannot be used before anything touches the driver.
//!
//! - [`sources`] — the embedded `.cu` texts and their BLAKE3 (always built);
//! - `probe` — library-presence checks (cudarc's loader panics on a missing library; we check
//!   first and also catch any unwind), device count;
//! - [`compat`] — the version and environment rules the probe applies (always built, tested
//!   without a GPU);
//! - [`check`] — the GPU check harness behind `examples/gpu_check.rs` (always built: its
//!   no-GPU mode runs the CPU twin against itself, so CI tests the harness);
//! - `nvrtc` — compile a kernel file for an architecture, with an on-disk cache keyed by
//!   BLAKE3(source, options, NVRTC version); the log is returned so tests fail on warnings;
//! - `blas` — row-major dense, grouped (one `cublasGemmGroupedBatchedEx`) and strided-batched
//!   products on cuBLAS, f32 or bf16 operands with f32 accumulation (the transpose trick);
//! - `device` — [`CudaBackend`]: one context, one stream, one cuBLAS handle with a fixed
//!   workspace and an explicit math mode, module loading, a caching buffer pool (allocate once
//!   per run, reuse every step), the check mode, and the `launch!` macro;
//! - `nvml` — GPU telemetry (`hw/gpu/...`) where the driver's NVML is present;
//! - `ops` — the [`Backend`](crate::backend::Backend) impl, one file per op family, named as
//!   the family's kernel file (`runner/kernels/<family>.cu`) and its CPU twin
//!   (`backend/cpu/<family>.rs`).
//!
//! Determinism: one stream; every reduction is a fixed tree or a fixed serial order; no float
//! atomics (checked by a test over the sources); cuBLAS is bitwise reproducible on the same
//! GPU, toolkit and workspace. Not bitwise equal to the CPU backend: parity is within the
//! tolerances stated in `examples/gpu_check.rs`.
//!
//! Built without the feature, `stub` stands in: [`CudaBackend`] still exists (so callers need
//! no `cfg`), its constructor fails with the reason, and it can never be constructed.
//!
//! Precision: `precision = "bf16"` runs the matmuls on bf16 copies of their operands (tensor
//! cores, f32 accumulation) and keeps every buffer — activations, master weights, gradients,
//! optimiser state — in f32; attention runs the fused kernels (f32). Not here: bf16 storage
//! of activations between ops, router statistics computed on the device (the model still
//! downloads each layer's scores for them).

pub mod compat;
pub mod sources;

#[cfg(feature = "cuda")]
mod blas;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
pub mod nvml;
#[cfg(feature = "cuda")]
pub mod nvrtc;
#[cfg(feature = "cuda")]
mod ops;

#[cfg(not(feature = "cuda"))]
mod stub;

#[cfg(feature = "cuda")]
pub use device::{CudaBackend, CudaBuf, CudaIds, DevBuf, Pooled};
#[cfg(not(feature = "cuda"))]
pub use stub::{CudaBackend, CudaBuf, CudaIds};

/// How attention runs (see `ops/attention.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionPath {
    /// The fused flash-style kernels when the head size has one (16, 32, 64, 128) and the run
    /// is bf16; the cuBLAS path otherwise.
    Auto,
    /// The fused kernels (head sizes 16, 32, 64, 128; the cuBLAS path for any other).
    Fused,
    /// cuBLAS strided-batched products around the causal softmax kernels (`T x T` scores).
    Materialized,
}

/// Why CUDA cannot run in a binary built without it (the probe's answer and the stub's error).
#[cfg(not(feature = "cuda"))]
const NOT_BUILT: &str = "this binary was built without the CUDA backend (cargo feature `cuda`)";

/// Whether the CUDA backend can run here: `Ok(description)` of the device(s) found, or why not
/// (with what to install). Never panics and never calls into a library that is absent. The
/// answer is found once per process (a dozen `dlopen` attempts) and remembered: a lab run asks
/// twice, for the run record and for the backend.
pub fn probe() -> Result<String, String> {
    #[cfg(feature = "cuda")]
    {
        static PROBED: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
        PROBED.get_or_init(device::probe).clone()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(NOT_BUILT.into())
    }
}
