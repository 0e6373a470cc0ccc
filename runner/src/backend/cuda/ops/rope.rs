//! CUDA launchers of `kernels/rope.cu`: the QKV split with RoPE, and the head merge, forward
//! and backward.
//!
//! Shapes: `B` batch, `T` positions, `H` heads, `D` head size. Grid-stride over the
//! `(b, h, t, i < D/2)` pairs (RoPE) or the elements (merge); no reductions.
//! Not here: attention itself ([`super::attention`]).

use super::super::device::{CudaBackend, CudaBuf, grid_for, launch};
use crate::backend::{AttnDims, Qkv, RopeTables};

/// The launcher of [`Backend::qkv_rope_fwd`](crate::backend::Backend::qkv_rope_fwd).
pub(super) fn qkv_rope_fwd(
    be: &CudaBackend,
    out: Qkv<&mut CudaBuf>,
    qkv: &CudaBuf,
    rope: RopeTables<&CudaBuf>,
    dims: AttnDims,
) {
    let (Qkv { q, k, v }, RopeTables { cos, sin }) = (out, rope);
    let (b, t, h, d) = (dims.b as i32, dims.t as i32, dims.h as i32, dims.d as i32);
    let pairs = dims.b * dims.h * dims.t * (dims.d / 2);
    be.op("qkv_rope_fwd", || {
        // Grid-stride over pairs.
        launch!(
            be,
            "qkv_rope_fwd_f32",
            grid_for(pairs),
            [
                q.get_mut()?,
                k.get_mut()?,
                v.get_mut()?,
                qkv.get()?,
                cos.get()?,
                sin.get()?,
                &b,
                &t,
                &h,
                &d
            ]
        )?;
        Ok(())
    });
}

/// The launcher of [`Backend::qkv_rope_bwd`](crate::backend::Backend::qkv_rope_bwd).
pub(super) fn qkv_rope_bwd(
    be: &CudaBackend,
    dqkv: &mut CudaBuf,
    d: Qkv<&CudaBuf>,
    rope: RopeTables<&CudaBuf>,
    dims: AttnDims,
) {
    let Qkv {
        q: dq,
        k: dk,
        v: dv,
    } = d;
    let RopeTables { cos, sin } = rope;
    let (b, t, h, d) = (dims.b as i32, dims.t as i32, dims.h as i32, dims.d as i32);
    let pairs = dims.b * dims.h * dims.t * (dims.d / 2);
    be.op("qkv_rope_bwd", || {
        // Grid-stride over pairs.
        launch!(
            be,
            "qkv_rope_bwd_f32",
            grid_for(pairs),
            [
                dqkv.get_mut()?,
                dq.get()?,
                dk.get()?,
                dv.get()?,
                cos.get()?,
                sin.get()?,
                &b,
                &t,
                &h,
                &d
            ]
        )?;
        Ok(())
    });
}

/// The launcher of [`Backend::merge_heads_fwd`](crate::backend::Backend::merge_heads_fwd).
pub(super) fn merge_heads_fwd(be: &CudaBackend, out: &mut CudaBuf, y: &CudaBuf, dims: AttnDims) {
    let (b, t, h, d) = (dims.b as i32, dims.t as i32, dims.h as i32, dims.d as i32);
    let total = out.len;
    be.op("merge_heads_fwd", || {
        launch!(
            be,
            "merge_heads_fwd_f32",
            grid_for(total),
            [out.get_mut()?, y.get()?, &b, &t, &h, &d]
        )?;
        Ok(())
    });
}

/// The launcher of [`Backend::merge_heads_bwd`](crate::backend::Backend::merge_heads_bwd).
pub(super) fn merge_heads_bwd(be: &CudaBackend, dy: &mut CudaBuf, dout: &CudaBuf, dims: AttnDims) {
    let (b, t, h, d) = (dims.b as i32, dims.t as i32, dims.h as i32, dims.d as i32);
    let total = dy.len;
    be.op("merge_heads_bwd", || {
        launch!(
            be,
            "merge_heads_bwd_f32",
            grid_for(total),
            [dy.get_mut()?, dout.get()?, &b, &t, &h, &d]
        )?;
        Ok(())
    });
}
