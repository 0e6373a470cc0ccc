//! CUDA launchers of `kernels/reduce.cu`: deterministic sums — the squared norm of a buffer,
//! the sum of per-row f64 values (losses), and the f64 squares the router z-loss sums.
//!
//! Every order is a fixed function of the length (blocks of [`NORM_BLOCK`] elements, then one
//! 1024-thread block over the partials), so results are the same on every run.
//! Not here: the losses whose rows these sum ([`super::loss`], [`super::router`]).

use super::super::device::{CudaBackend, CudaBuf, DevBuf, blocks_of, grid_for, launch};

/// Elements per partial sum of `sum_squares` (the CPU's `NORM_BLOCK`).
const NORM_BLOCK: usize = 4096;

/// [`crate::backend::Backend::sum_squares`]: per-block f64 partials, then one fixed tree.
pub(super) fn sum_squares(be: &CudaBackend, buf: &CudaBuf) -> f64 {
    let nblk = buf.len.div_ceil(NORM_BLOCK).max(1);
    let mut part = be.scratch::<f64>(nblk);
    let mut out = be.scratch::<f64>(1);
    let (n64, block) = (buf.len as u64, NORM_BLOCK as i32);
    be.op("sum_squares", || {
        // One block per NORM_BLOCK elements.
        launch!(
            be,
            "sum_squares_partial_f32",
            blocks_of(nblk, 256),
            [part.get_mut()?, buf.get()?, &n64, &block]
        )?;
        sum_f64_into(be, &mut out, 0, &part, nblk)
    });
    be.download_any(&out).first().copied().unwrap_or(f64::NAN)
}

/// Sums `values[0..n]` (f64) on the device into `out[slot]`.
pub(super) fn sum_f64_into(
    be: &CudaBackend,
    out: &mut DevBuf<f64>,
    slot: i32,
    values: &DevBuf<f64>,
    n: usize,
) -> Result<(), String> {
    let n64 = n as u64;
    let (o, v) = (out.get_mut()?, values.get()?);
    launch!(be, "sum_f64", blocks_of(1, 1024), [o, &slot, v, &n64])?;
    Ok(())
}

/// `values[i] = x[i]^2` in f64, one thread per element.
pub(super) fn square_to_f64(
    be: &CudaBackend,
    values: &mut DevBuf<f64>,
    x: &DevBuf<f32>,
    n: usize,
) -> Result<(), String> {
    let n64 = n as u64;
    launch!(
        be,
        "square_to_f64",
        grid_for(n),
        [values.get_mut()?, x.get()?, &n64]
    )
}
