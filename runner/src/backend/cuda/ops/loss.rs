//! CUDA launcher of `kernels/loss.cu`: fused softmax cross-entropy with z-loss, forward and
//! backward in one pass (one 256-thread block per row).
//!
//! The per-row losses are summed on the device by [`super::reduce`]'s fixed tree; the host
//! reads back the two sums only. Not here: the router z-loss ([`super::router`]).

use super::super::device::{CudaBackend, CudaBuf, CudaIds, blocks_of, launch};
use super::reduce;
use crate::backend::CrossEntropySums;

/// The launcher of [`Backend::cross_entropy`](crate::backend::Backend::cross_entropy).
pub(super) fn cross_entropy(
    be: &CudaBackend,
    logits: &mut CudaBuf,
    targets: &CudaIds,
    v: usize,
    z_coef: f64,
    grad_scale: Option<f64>,
) -> CrossEntropySums {
    let n = targets.len;
    let mut row_ce = be.scratch::<f64>(n);
    let mut row_z = be.scratch::<f64>(n);
    let mut out = be.scratch::<f64>(2);
    let (ni, vi, zc) = (n as i32, v as i32, z_coef as f32);
    let (gs, want) = (
        grad_scale.unwrap_or(0.0) as f32,
        grad_scale.is_some() as i32,
    );
    be.op("cross_entropy", || {
        // One 256-thread block per row.
        launch!(
            be,
            "cross_entropy_f32",
            blocks_of(n, 256),
            [
                logits.get_mut()?,
                targets.get()?,
                row_ce.get_mut()?,
                row_z.get_mut()?,
                &ni,
                &vi,
                &zc,
                &gs,
                &want
            ]
        )?;
        reduce::sum_f64_into(be, &mut out, 0, &row_ce, n)?;
        reduce::sum_f64_into(be, &mut out, 1, &row_z, n)
    });
    let sums = be.download_any(&out);
    CrossEntropySums {
        cross_entropy: sums.first().copied().unwrap_or(f64::NAN),
        z: sums.get(1).copied().unwrap_or(f64::NAN),
    }
}
