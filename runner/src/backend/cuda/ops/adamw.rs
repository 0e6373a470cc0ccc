//! CUDA launcher of `kernels/adamw.cu`: one AdamW update, one thread per element.
//!
//! The bias corrections are computed on the host in f64 and passed as f32, as the CPU
//! reference converts them. Not here: the schedule and clipping (the trainer).

use super::super::device::{CudaBackend, CudaBuf, grid_for, launch};
use crate::backend::AdamW;

/// The launcher of [`Backend::adamw`](crate::backend::Backend::adamw).
pub(super) fn adamw(
    be: &CudaBackend,
    param: &mut CudaBuf,
    grad: &CudaBuf,
    m: &mut CudaBuf,
    v: &mut CudaBuf,
    hp: &AdamW,
) {
    let t = hp.step.min(i32::MAX as u64) as i32;
    let bc1 = (1.0 / (1.0 - hp.beta1.powi(t))) as f32;
    let bc2 = (1.0 / (1.0 - hp.beta2.powi(t))) as f32;
    let (lr, b1, b2, eps, wd, gs) = (
        hp.lr as f32,
        hp.beta1 as f32,
        hp.beta2 as f32,
        hp.eps as f32,
        hp.weight_decay as f32,
        hp.grad_scale as f32,
    );
    let n = param.len as u64;
    be.op("adamw", || {
        launch!(
            be,
            "adamw_f32",
            grid_for(n as usize),
            [
                param.get_mut()?,
                grad.get()?,
                m.get_mut()?,
                v.get_mut()?,
                &n,
                &lr,
                &b1,
                &b2,
                &eps,
                &wd,
                &gs,
                &bc1,
                &bc2
            ]
        )?;
        Ok(())
    });
}
