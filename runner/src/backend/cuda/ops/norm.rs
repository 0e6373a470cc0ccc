//! CUDA launchers of `kernels/norm.cu`: RMSNorm, forward and backward.
//!
//! Shapes: `N` rows, `C` channels. One 256-thread block per row; the weight gradient is
//! reduced over fixed blocks of [`ROW_BLOCK`] rows (the CPU's blocking) into a partial buffer
//! `[nblk, C]`, then summed in block order by a second kernel. Not here: SwiGLU
//! ([`super::swiglu`]) and the elementwise adds ([`super::elementwise`]).

use cudarc::driver::LaunchConfig;

use crate::backend::RmsNormSaved;

use super::super::device::{BLOCK, CudaBackend, CudaBuf, blocks_of, grid_for, launch};

/// Rows per partial sum of the RMSNorm weight gradient (the CPU's `ROW_BLOCK`).
const ROW_BLOCK: usize = 64;

/// The launcher of [`Backend::rmsnorm_fwd`](crate::backend::Backend::rmsnorm_fwd).
pub(super) fn rmsnorm_fwd(
    be: &CudaBackend,
    out: &mut CudaBuf,
    rstd: &mut CudaBuf,
    x: &CudaBuf,
    w: &CudaBuf,
    c: usize,
    eps: f64,
) {
    let n = x.len / c.max(1);
    let (ni, ci, epsf) = (n as i32, c as i32, eps as f32);
    be.op("rmsnorm_fwd", || {
        // One 256-thread block per row.
        launch!(
            be,
            "rmsnorm_fwd_f32",
            blocks_of(n, 256),
            [
                out.get_mut()?,
                rstd.get_mut()?,
                x.get()?,
                w.get()?,
                &ni,
                &ci,
                &epsf
            ]
        )?;
        Ok(())
    });
}

/// The launcher of [`Backend::rmsnorm_bwd`](crate::backend::Backend::rmsnorm_bwd).
pub(super) fn rmsnorm_bwd(
    be: &CudaBackend,
    dx: &mut CudaBuf,
    dw: &mut CudaBuf,
    dout: &CudaBuf,
    saved: RmsNormSaved<&CudaBuf>,
    c: usize,
) {
    let RmsNormSaved { x, w, rstd } = saved;
    let n = x.len / c.max(1);
    let nblk = n.div_ceil(ROW_BLOCK);
    let mut part = be.scratch::<f32>(nblk * c);
    let (ni, ci, rb, nb) = (n as i32, c as i32, ROW_BLOCK as i32, nblk as i32);
    be.op("rmsnorm_bwd", || {
        // One block per row.
        launch!(
            be,
            "rmsnorm_bwd_dx_f32",
            blocks_of(n, 256),
            [
                dx.get_mut()?,
                dout.get()?,
                x.get()?,
                w.get()?,
                rstd.get()?,
                &ni,
                &ci
            ]
        )?;
        let cfg = LaunchConfig {
            grid_dim: ((c as u32).div_ceil(BLOCK), nblk as u32, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // Grid (ceil(C/256), nblk).
        launch!(
            be,
            "rmsnorm_bwd_dw_partial_f32",
            cfg,
            [
                part.get_mut()?,
                dout.get()?,
                x.get()?,
                rstd.get()?,
                &ni,
                &ci,
                &rb
            ]
        )?;
        // One thread per column.
        launch!(
            be,
            "col_sum_accumulate_f32",
            grid_for(c),
            [dw.get_mut()?, part.get()?, &nb, &ci]
        )?;
        Ok(())
    });
}
