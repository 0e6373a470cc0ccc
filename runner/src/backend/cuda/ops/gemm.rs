//! The linear layers on CUDA: the [`Backend`] linear ops over the cuBLAS calls of
//! `cuda/blas.rs` (no `.cu` file of its own: every matmul is cuBLAS), and the measured matmul
//! peaks that MFU is stated against ([`CudaBackend::measured_peak`]).
//!
//! Precision: in f32 runs the operands are the f32 buffers themselves; in bf16 runs each
//! operand is first copied to bf16 (`f32_to_bf16` of `kernels/elementwise.cu`, round to
//! nearest even) and the product runs on tensor cores with f32 accumulation into the f32
//! output. Master weights, gradients and optimiser state stay f32: the copies are scratch,
//! made per product (a weight's copy lives only as long as its product). The CPU twin of a bf16
//! product is the f32 product of the same operands rounded to bf16 (`gpu_check`).
//!
//! Not here: the row-major-on-column-major transpose trick, the per-head products and the
//! grouped call (they are `cuda/blas.rs`).

use std::ops::Range;

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use glassbox_schemas::spec::Precision;

use super::super::blas::{self, InType, Operand, Problem};
use super::super::device::{CudaBackend, CudaBuf, DevBuf, grid_for, launch};
use crate::backend::Peak;
use crate::backend::{Accumulate, Backend, Groups};
use crate::error::RunnerError;
use crate::rng::SplitMix64;

/// An operand as cuBLAS reads it: the f32 buffer, or a bf16 copy of a range of it (kept alive
/// until the product is queued; the pool reuses it only in stream order).
struct Input {
    op: Operand,
    _copy: Option<DevBuf<u16>>,
}

impl CudaBackend {
    /// The matmul operand type of the current precision.
    pub(super) fn in_type(&self) -> InType {
        match self.precision() {
            Precision::F32 => InType::F32,
            Precision::Bf16 => InType::Bf16,
        }
    }

    /// `range` of `src` as an operand of type `ty`: the buffer itself, or its bf16 copy.
    fn input(
        &self,
        src: &CudaSlice<f32>,
        range: Range<usize>,
        ty: InType,
    ) -> Result<Input, String> {
        match ty {
            InType::F32 => {
                let (base, _sync) = src.device_ptr(self.stream());
                Ok(Input {
                    op: Operand {
                        base,
                        first: 0,
                        bytes: 4,
                    },
                    _copy: None,
                })
            }
            InType::Bf16 => {
                let n = range.len();
                let mut copy = self.scratch::<u16>(n);
                let n64 = n as u64;
                let view = src.slice(range.clone());
                launch!(
                    self,
                    "f32_to_bf16",
                    grid_for(n),
                    [copy.get_mut()?, &view, &n64]
                )?;
                let base = copy.get()?.device_ptr(self.stream()).0;
                Ok(Input {
                    op: Operand {
                        base,
                        first: range.start,
                        bytes: 2,
                    },
                    _copy: Some(copy),
                })
            }
        }
    }

    /// The f32 output operand.
    fn output(&self, dst: &mut CudaSlice<f32>) -> Operand {
        let (base, _sync) = dst.device_ptr_mut(self.stream());
        Operand {
            base,
            first: 0,
            bytes: 4,
        }
    }

    /// Runs a layer's products (dense: one; grouped: one grouped call or one per group).
    fn run_problems(&self, probs: &[Problem], ty: InType) -> Result<(), String> {
        let mut grouped = self.grouped();
        blas::run(self.blas(), self.stream(), &mut grouped, probs, ty)
    }
}

/// The weight elements a layer's groups use: matrices `first..first + G` of `[G, O, I]`.
fn weight_range(g: &Groups) -> Range<usize> {
    let per = g.out_dim * g.in_dim;
    g.first * per..(g.first + g.rows.len()) * per
}

/// The launcher of [`Backend::linear_fwd`].
pub(super) fn linear_fwd(
    be: &CudaBackend,
    out: &mut CudaBuf,
    inp: &CudaBuf,
    w: &CudaBuf,
    groups: &Groups,
) {
    be.op("linear_fwd", || {
        let ty = be.in_type();
        let x = be.input(inp.get()?, 0..groups.total_rows() * groups.in_dim, ty)?;
        let wt = be.input(w.get()?, weight_range(groups), ty)?;
        let o = be.output(out.get_mut()?);
        let probs = blas::linear_fwd_problems(groups, x.op, wt.op, o)?;
        be.run_problems(&probs, ty)
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
        let ty = be.in_type();
        let g = be.input(dout.get()?, 0..groups.total_rows() * groups.out_dim, ty)?;
        let wt = be.input(w.get()?, weight_range(groups), ty)?;
        let o = be.output(dinp.get_mut()?);
        let probs = blas::linear_bwd_data_problems(groups, g.op, wt.op, o, accumulate)?;
        be.run_problems(&probs, ty)
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
        let ty = be.in_type();
        let g = be.input(dout.get()?, 0..groups.total_rows() * groups.out_dim, ty)?;
        let x = be.input(inp.get()?, 0..groups.total_rows() * groups.in_dim, ty)?;
        let o = be.output(dw.get_mut()?);
        let probs = blas::linear_bwd_weight_problems(groups, g.op, x.op, o)?;
        be.run_problems(&probs, ty)
    });
}

impl CudaBackend {
    /// Measured throughput (FLOP/s) of an `n^3` product through the linear layer's path in the
    /// current precision (f32: pedantic SGEMM; bf16: tensor cores, the operand copies
    /// included), best of `reps`. The operands are random normal values: zeros (or any
    /// constant) run faster on some GPUs and would inflate the MFU denominator.
    pub fn measure_matmul_peak(&self, n: usize, reps: usize) -> Result<f64, RunnerError> {
        let mut rng = SplitMix64::new(0x5045_414b); // "PEAK"
        let host: Vec<f32> = (0..n * n).map(|_| rng.normal() as f32).collect();
        let a = self.upload(&host);
        let b = self.upload(&host);
        let mut c = self.zeros(n * n);
        let mut best = f64::INFINITY;
        let g = Groups::dense(n, n, n);
        // The first product warms cuBLAS's heuristics and the kernel cache; not timed.
        self.linear_fwd(&mut c, &a, &b, &g);
        for _ in 0..reps.max(2) {
            self.synchronize()?;
            let t0 = std::time::Instant::now();
            self.linear_fwd(&mut c, &a, &b, &g);
            self.synchronize()?;
            best = best.min(t0.elapsed().as_secs_f64());
        }
        if let Some(err) = self.take_error() {
            return Err(RunnerError::Backend(err));
        }
        Ok(2.0 * (n as f64).powi(3) / best.max(1e-9))
    }

    /// Measured f32 SGEMM throughput (FLOP/s), as [`CudaBackend::measure_matmul_peak`] with the
    /// backend in f32 for the measurement.
    pub fn measure_sgemm_peak(&self, n: usize, reps: usize) -> Result<f64, RunnerError> {
        let was = self.precision();
        self.switch_precision(Precision::F32)
            .map_err(RunnerError::Backend)?;
        let r = self.measure_matmul_peak(n, reps);
        self.switch_precision(was).map_err(RunnerError::Backend)?;
        r
    }

    /// The MFU reference of a CUDA run in the current precision: the measured `4096^3` product
    /// peak, best of 5, labelled with the device and precision.
    pub fn measured_peak(&self) -> Result<Peak, RunnerError> {
        let what = match self.precision() {
            Precision::F32 => "f32 SGEMM (pedantic)",
            Precision::Bf16 => "bf16 GEMM (f32 accumulation)",
        };
        Ok(Peak {
            flops_per_second: self.measure_matmul_peak(4096, 5)?,
            label: format!(
                "measured {what} peak (cuBLAS 4096^3, random operands) of {}",
                self.describe()
            ),
        })
    }
}
