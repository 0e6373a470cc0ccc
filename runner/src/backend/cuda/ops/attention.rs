//! Causal attention on CUDA: the four per-head products as cuBLAS strided-batched SGEMMs
//! (`cuda/blas.rs`) and, between them, the causal softmax kernels of `kernels/attention.cu`
//! (one 256-thread block per row of the `T x T` matrix).
//!
//! Not here: the QKV split, RoPE and the head merge ([`super::rope`]).

use super::super::blas::{self, HeadProduct};
use super::super::device::{CudaBackend, CudaBuf, blocks_of, launch};
use crate::backend::{AttnDims, Qkv};

/// The launcher of [`Backend::attention_fwd`](crate::backend::Backend::attention_fwd).
pub(super) fn attention_fwd(
    be: &CudaBackend,
    out: &mut CudaBuf,
    probs: &mut CudaBuf,
    qkv: Qkv<&CudaBuf>,
    dims: AttnDims,
) {
    let Qkv { q, k, v } = qkv;
    let AttnDims { b, t, h, d } = dims;
    let bh = b * h;
    let rows = (bh * t) as u64;
    let (ti, scale) = (t as i32, (1.0 / (d as f64).sqrt()) as f32);
    be.op("attention_fwd", || {
        let p = probs.get_mut()?;
        blas::per_head(be.blas(), HeadProduct::ABt, p, q.get()?, k.get()?, dims)?;
        // One block per row.
        launch!(
            be,
            "causal_softmax_fwd_f32",
            blocks_of(bh * t, 256),
            [&mut *p, &rows, &ti, &scale]
        )?;
        blas::per_head(
            be.blas(),
            HeadProduct::AB,
            out.get_mut()?,
            p,
            v.get()?,
            dims,
        )
    });
}

/// The launcher of [`Backend::attention_bwd`](crate::backend::Backend::attention_bwd).
pub(super) fn attention_bwd(
    be: &CudaBackend,
    d: Qkv<&mut CudaBuf>,
    dout: &CudaBuf,
    probs: &CudaBuf,
    qkv: Qkv<&CudaBuf>,
    dims: AttnDims,
) {
    let Qkv {
        q: dq,
        k: dk,
        v: dv,
    } = d;
    let Qkv { q, k, v } = qkv;
    let AttnDims { b, t, h, d } = dims;
    let bh = b * h;
    let rows = (bh * t) as u64;
    let (ti, scale) = (t as i32, (1.0 / (d as f64).sqrt()) as f32);
    let mut ds = be.scratch::<f32>(bh * t * t);
    be.op("attention_bwd", || {
        let (p, g) = (probs.get()?, dout.get()?);
        blas::per_head(be.blas(), HeadProduct::AtB, dv.get_mut()?, p, g, dims)?;
        let dsb = ds.get_mut()?;
        blas::per_head(be.blas(), HeadProduct::ABt, dsb, g, v.get()?, dims)?;
        // One block per row.
        launch!(
            be,
            "causal_softmax_bwd_f32",
            blocks_of(bh * t, 256),
            [&mut *dsb, p, &rows, &ti, &scale]
        )?;
        blas::per_head(
            be.blas(),
            HeadProduct::AB,
            dq.get_mut()?,
            dsb,
            k.get()?,
            dims,
        )?;
        blas::per_head(
            be.blas(),
            HeadProduct::AtB,
            dk.get_mut()?,
            dsb,
            q.get()?,
            dims,
        )
    });
}
