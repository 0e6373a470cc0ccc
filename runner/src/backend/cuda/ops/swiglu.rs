//! CUDA launchers of `kernels/swiglu.cu`: the experts' SwiGLU, forward and backward.
//!
//! Shapes: `R` rows, `F` expert width; one thread per `(r, i)`, no reductions.
//! Not here: the expert matmuls ([`super::gemm`]).

use super::super::device::{CudaBackend, CudaBuf, grid_for, launch};

/// The launcher of [`Backend::swiglu_fwd`](crate::backend::Backend::swiglu_fwd).
pub(super) fn swiglu_fwd(be: &CudaBackend, out: &mut CudaBuf, h: &CudaBuf, f: usize) {
    let rows = (out.len / f.max(1)) as u64;
    let (fi, total) = (f as i32, out.len);
    be.op("swiglu_fwd", || {
        launch!(
            be,
            "swiglu_fwd_f32",
            grid_for(total),
            [out.get_mut()?, h.get()?, &rows, &fi]
        )?;
        Ok(())
    });
}

/// The launcher of [`Backend::swiglu_bwd`](crate::backend::Backend::swiglu_bwd).
pub(super) fn swiglu_bwd(
    be: &CudaBackend,
    dh: &mut CudaBuf,
    dout: &CudaBuf,
    h: &CudaBuf,
    f: usize,
) {
    let rows = (dout.len / f.max(1)) as u64;
    let fi = f as i32;
    be.op("swiglu_bwd", || {
        launch!(
            be,
            "swiglu_bwd_f32",
            grid_for(dout.len),
            [dh.get_mut()?, dout.get()?, h.get()?, &rows, &fi]
        )?;
        Ok(())
    });
}
