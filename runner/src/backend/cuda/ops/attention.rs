//! Causal attention on CUDA, two paths (`kernels/attention.cu` has the design notes):
//! - materialized: the four per-head products as cuBLAS strided-batched SGEMMs
//!   (`cuda/blas.rs`) and, between them, the causal softmax kernels (one 256-thread block per
//!   row of the `T x T` matrix), which the cache holds (`B H T T` floats);
//! - fused: the flash-style kernels (forward; backward as delta, then dq, then dk/dv), one
//!   thread per row, 64 rows per block, grid `(ceil(T / 64), B H)`; the cache holds each row's
//!   log-sum-exp and a copy of the output (`B H T (D + 1)` floats).
//!
//! Which path runs ([`uses_fused`]) depends only on the backend's settings and the shapes, so
//! [`cache_len`], the forward and the backward always agree.
//! Not here: the QKV split, RoPE and the head merge ([`super::rope`]).

use cudarc::driver::LaunchConfig;
use glassbox_schemas::spec::Precision;

use super::super::AttentionPath;
use super::super::blas::{self, HeadProduct};
use super::super::device::{CudaBackend, CudaBuf, blocks_of, grid_for, launch};
use crate::backend::{AttnDims, Qkv};

/// Rows per block of the fused kernels (the kernels' `FA_ROWS`).
const FA_ROWS: usize = 64;
/// Head sizes the fused kernels are instantiated for.
const FUSED_HEAD_SIZES: [usize; 4] = [16, 32, 64, 128];

/// Whether attention of `dims` runs the fused kernels: asked for (or bf16 under `Auto`), a
/// head size they have, and `B H` within a grid's y dimension.
pub(super) fn uses_fused(be: &CudaBackend, dims: AttnDims) -> bool {
    let wanted = match be.attention_path() {
        AttentionPath::Fused => true,
        AttentionPath::Materialized => false,
        AttentionPath::Auto => be.precision() == Precision::Bf16,
    };
    wanted && FUSED_HEAD_SIZES.contains(&dims.d) && dims.b * dims.h <= 65_535 && dims.t > 0
}

/// [`Backend::attention_cache_len`](crate::backend::Backend::attention_cache_len).
pub(super) fn cache_len(be: &CudaBackend, dims: AttnDims) -> usize {
    let AttnDims { b, t, h, d } = dims;
    if uses_fused(be, dims) {
        b * h * t * (d + 1)
    } else {
        b * h * t * t
    }
}

/// Grid `(ceil(T / FA_ROWS), B H)` of `FA_ROWS` threads.
fn fused_grid(dims: AttnDims) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (dims.t.div_ceil(FA_ROWS) as u32, (dims.b * dims.h) as u32, 1),
        block_dim: (FA_ROWS as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

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
    if uses_fused(be, dims) {
        be.op("attention_fwd (fused)", || {
            let args = (
                out.get_mut()?,
                probs.get_mut()?,
                q.get()?,
                k.get()?,
                v.get()?,
            );
            let (o, cache, q, k, v) = args;
            // Grid (ceil(T/64), BH) of 64 threads.
            match d {
                16 => launch!(
                    be,
                    "flash_attn_fwd_d16",
                    fused_grid(dims),
                    [o, cache, q, k, v, &ti, &scale]
                ),
                32 => launch!(
                    be,
                    "flash_attn_fwd_d32",
                    fused_grid(dims),
                    [o, cache, q, k, v, &ti, &scale]
                ),
                64 => launch!(
                    be,
                    "flash_attn_fwd_d64",
                    fused_grid(dims),
                    [o, cache, q, k, v, &ti, &scale]
                ),
                _ => launch!(
                    be,
                    "flash_attn_fwd_d128",
                    fused_grid(dims),
                    [o, cache, q, k, v, &ti, &scale]
                ),
            }
        });
        return;
    }
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
    if uses_fused(be, dims) {
        let mut delta = be.scratch::<f32>(bh * t);
        let di = d as i32;
        be.op("attention_bwd (fused)", || {
            let (g, cache) = (dout.get()?, probs.get()?);
            let (q, k, v) = (q.get()?, k.get()?, v.get()?);
            let dl = delta.get_mut()?;
            // One thread per row.
            launch!(
                be,
                "flash_attn_bwd_delta",
                grid_for(bh * t),
                [&mut *dl, g, cache, &rows, &di]
            )?;
            let dq = dq.get_mut()?;
            // Grid (ceil(T/64), BH) of 64 threads: one thread per query row.
            let cfg = fused_grid(dims);
            match d {
                16 => launch!(
                    be,
                    "flash_attn_bwd_dq_d16",
                    cfg,
                    [dq, g, cache, &*dl, q, k, v, &ti, &scale]
                ),
                32 => launch!(
                    be,
                    "flash_attn_bwd_dq_d32",
                    cfg,
                    [dq, g, cache, &*dl, q, k, v, &ti, &scale]
                ),
                64 => launch!(
                    be,
                    "flash_attn_bwd_dq_d64",
                    cfg,
                    [dq, g, cache, &*dl, q, k, v, &ti, &scale]
                ),
                _ => launch!(
                    be,
                    "flash_attn_bwd_dq_d128",
                    cfg,
                    [dq, g, cache, &*dl, q, k, v, &ti, &scale]
                ),
            }?;
            let (dk, dv) = (dk.get_mut()?, dv.get_mut()?);
            // Same grid: one thread per key row, one block per 64-key tile of dk and dv.
            match d {
                16 => launch!(
                    be,
                    "flash_attn_bwd_dkdv_d16",
                    cfg,
                    [dk, dv, g, cache, &*dl, q, k, v, &ti, &scale]
                ),
                32 => launch!(
                    be,
                    "flash_attn_bwd_dkdv_d32",
                    cfg,
                    [dk, dv, g, cache, &*dl, q, k, v, &ti, &scale]
                ),
                64 => launch!(
                    be,
                    "flash_attn_bwd_dkdv_d64",
                    cfg,
                    [dk, dv, g, cache, &*dl, q, k, v, &ti, &scale]
                ),
                _ => launch!(
                    be,
                    "flash_attn_bwd_dkdv_d128",
                    cfg,
                    [dk, dv, g, cache, &*dl, q, k, v, &ti, &scale]
                ),
            }
        });
        return;
    }
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
