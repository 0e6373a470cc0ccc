//! The linear layers on CUDA: the [`Backend`] linear ops over the cuBLAS calls of
//! `cuda/blas.rs` (no `.cu` file: every matmul is cuBLAS SGEMM), and the measured SGEMM peak
//! that MFU is stated against ([`CudaBackend::measured_peak`]).
//!
//! Not here: the row-major-on-column-major transpose trick and the per-head products (they
//! are `cuda/blas.rs`, which attention uses too).

use super::super::blas;
use super::super::device::{CudaBackend, CudaBuf};
use crate::backend::{Accumulate, Backend, Groups};
use crate::error::RunnerError;
use crate::train::Peak;

/// The launcher of [`Backend::linear_fwd`].
pub(super) fn linear_fwd(
    be: &CudaBackend,
    out: &mut CudaBuf,
    inp: &CudaBuf,
    w: &CudaBuf,
    groups: &Groups,
) {
    be.op("linear_fwd", || {
        blas::linear_fwd(be.blas(), out.get_mut()?, inp.get()?, w.get()?, groups)
    });
}

/// The launcher of [`Backend::linear_bwd_data`].
pub(super) fn linear_bwd_data(
    be: &CudaBackend,
    dinp: &mut CudaBuf,
    dout: &CudaBuf,
    w: &CudaBuf,
    groups: &Groups,
    accumulate: Accumulate,
) {
    be.op("linear_bwd_data", || {
        blas::linear_bwd_data(
            be.blas(),
            dinp.get_mut()?,
            dout.get()?,
            w.get()?,
            groups,
            accumulate,
        )
    });
}

/// The launcher of [`Backend::linear_bwd_weight`].
pub(super) fn linear_bwd_weight(
    be: &CudaBackend,
    dw: &mut CudaBuf,
    dout: &CudaBuf,
    inp: &CudaBuf,
    groups: &Groups,
) {
    be.op("linear_bwd_weight", || {
        blas::linear_bwd_weight(be.blas(), dw.get_mut()?, dout.get()?, inp.get()?, groups)
    });
}

impl CudaBackend {
    /// Measured f32 SGEMM throughput (FLOP/s) of a `n^3` product, best of `reps`: the MFU
    /// reference for f32 runs.
    pub fn measure_sgemm_peak(&self, n: usize, reps: usize) -> Result<f64, RunnerError> {
        let mut a = self.zeros(n * n);
        let b = self.zeros(n * n);
        let mut best = f64::INFINITY;
        let g = Groups::dense(n, n, n);
        for _ in 0..reps.max(2) {
            self.synchronize()?;
            let t0 = std::time::Instant::now();
            self.linear_fwd(&mut a, &b, &b, &g);
            self.synchronize()?;
            best = best.min(t0.elapsed().as_secs_f64());
        }
        if let Some(err) = self.take_error() {
            return Err(RunnerError::Backend(err));
        }
        Ok(2.0 * (n as f64).powi(3) / best.max(1e-9))
    }

    /// The MFU reference of a CUDA run: the measured SGEMM peak of a `4096^3` product, best
    /// of 5, labelled with the device.
    pub fn measured_peak(&self) -> Result<Peak, RunnerError> {
        Ok(Peak {
            flops_per_second: self.measure_sgemm_peak(4096, 5)?,
            label: format!(
                "measured f32 SGEMM peak (cuBLAS 4096^3) of {}",
                self.describe()
            ),
        })
    }
}
