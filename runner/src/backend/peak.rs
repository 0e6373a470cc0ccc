//! The MFU reference a run states its utilization against: a peak FLOP/s and what it is
//! (measured on this machine by the backend, or given by the person running).
//!
//! Not here: measuring it (`cpu::peak` for the CPU, the CUDA backend's own GEMM timing).

/// The peak FLOP/s that MFU is stated against.
#[derive(Debug, Clone, PartialEq)]
pub struct Peak {
    /// FLOP/s.
    pub flops_per_second: f64,
    /// What it is, e.g. `measured f32 GEMM peak (512^3), 2 threads`.
    pub label: String,
}

impl Peak {
    /// A peak stated by the person running, in GFLOP/s, instead of one measured.
    pub fn given(gflops: f64) -> Self {
        Self {
            flops_per_second: gflops * 1e9,
            label: format!("given peak {gflops} GFLOP/s"),
        }
    }
}
