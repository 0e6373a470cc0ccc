//! Backend parity: how far a device backend's results may be from the CPU reference's, the
//! bounds the GPU check (`examples/gpu_check/`) holds every op and step to and a
//! cross-backend reproduction compares losses with.
//!
//! Tolerances (relative to the largest magnitude of the reference output, so scale-free):
//! - [`TOL_SAME_ORDER`] `1e-5` for ops whose CUDA kernel sums in the CPU's order (embedding,
//!   dispatch, combine forward, elementwise, RoPE, SwiGLU, router scores, AdamW): only
//!   expf/FMA rounding differs;
//! - [`TOL_REORDERED`] `1e-4` for reductions done as trees or online (RMSNorm, attention both
//!   ways, cross-entropy, norms, the weight-gradient dot products) and for cuBLAS (blocked
//!   k-order; with k <= 1024 the f32 error bound is ~k 2^-24 |a||b| ~ 6e-5 relative); the bf16
//!   products too, since their twin rounds the same operands (a product of two bf16 values is
//!   exact in f32, so only the accumulation order differs);
//! - routing indices must be identical (same top-k, same stable order);
//! - [`TOL_STEP_LOSS`] `2e-3` relative on whole-step losses: 1e-6 differences per op compound
//!   through AdamW (whose first steps move every weight by ~lr regardless of gradient size) and
//!   an occasional near-tie in top-k flips one assignment (the CPU-vs-JAX check
//!   used the same bound);
//! - [`TOL_BF16_LOSS`] `3e-2` relative for a bf16 device step against the f32 CPU: every matmul
//!   operand carries bf16's 2^-9 relative rounding, through 2 matmuls per block, 8 layers.
//!
//!
//! Not here: the check itself (the example) or the comparison of a reproduction (the lab).

/// Tolerance of ops that sum in the CPU's order.
pub const TOL_SAME_ORDER: f64 = 1e-5;
/// Tolerance of tree/online reductions, cuBLAS and bf16 products against their twin.
pub const TOL_REORDERED: f64 = 1e-4;
/// Whole-step loss tolerance (relative), same precision.
pub const TOL_STEP_LOSS: f64 = 2e-3;
/// A bf16 device step against the f32 CPU (relative).
pub const TOL_BF16_LOSS: f64 = 3e-2;
