//! The CPU's MFU reference: this machine's peak f32 GEMM rate, measured once per run.
//!
//! Measured as the best of several timed 512 x 512 x 512 products through the CPU backend's
//! own GEMM path ([`crate::backend::cpu::gemm`], all pool threads), which is what the model's
//! matmuls can reach at best, so MFU reads as "fraction of the achievable GEMM rate".
//! Not a vendor spec sheet number; the label says which it is.

use std::time::Instant;

use crate::backend::Accumulate;
use crate::backend::Peak;
use crate::backend::cpu::gemm::{GemmShape, Mat, MatMut, Tiles, gemm_into};

/// Measure the f32 GEMM peak inside the current rayon pool with `threads` threads (the label
/// records it). Takes about `budget_seconds`.
pub fn measure_gemm_peak(threads: usize, budget_seconds: f64) -> Peak {
    let n = 512;
    let a: Vec<f32> = (0..n * n).map(|i| ((i % 13) as f32) * 0.01).collect();
    let b: Vec<f32> = (0..n * n).map(|i| ((i % 7) as f32) * 0.01).collect();
    let mut c = vec![0f32; n * n];
    let flops = 2.0 * (n * n * n) as f64;
    let start = Instant::now();
    let mut best = f64::MAX;
    let mut reps = 0;
    while reps < 3 || (start.elapsed().as_secs_f64() < budget_seconds && reps < 200) {
        let t = Instant::now();
        gemm_into(
            GemmShape { m: n, n, k: n },
            MatMut::rows(&mut c, n),
            Mat::rows(&a, n),
            Mat::rows(&b, n),
            Accumulate::Overwrite,
            Tiles::Parallel,
        );
        best = best.min(t.elapsed().as_secs_f64());
        reps += 1;
    }
    Peak {
        flops_per_second: flops / best.max(1e-12),
        label: format!("measured f32 GEMM peak (512^3, best of {reps}), {threads} threads"),
    }
}
