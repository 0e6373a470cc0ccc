//! CPU reference kernels: the SwiGLU activation of the experts, forward and backward.
//!
//! Shapes: `R` rows (expert slots, or tokens for shared experts), `F` expert width;
//! `h, dh [R, 2F]` (gate then up), `out, dout [R, F]`. One row block per work item, no
//! reductions. In f32 the rows go through [`super::expf`] (its own exponential, vectorised,
//! the same bits on every CPU); in f64 (the gradient checks) through the loops below.
//! Not here: the expert matmuls (grouped `linear`, [`super::gemm`]).

use rayon::prelude::*;

use super::{ROW_BLOCK, expf};
use crate::scalar::Real;

/// `silu(g) = g * sigmoid(g)`.
#[inline]
fn sigmoid<F: Real>(g: F) -> F {
    F::ONE / (F::ONE + (-g).exp())
}

/// Forward SwiGLU: `out[r, i] = silu(h[r, i]) * h[r, F + i]`; h `[R, 2F]`, out `[R, F]`.
pub fn swiglu_fwd<F: Real>(out: &mut [F], h: &[F], f: usize) {
    if let (Some(out), Some(h)) = (F::as_f32_mut(out), F::as_f32(h)) {
        out.par_chunks_mut(f * ROW_BLOCK)
            .enumerate()
            .for_each(|(blk, o)| {
                for (r, orow) in o.chunks_mut(f).enumerate() {
                    let n = blk * ROW_BLOCK + r;
                    let (g, u) = h[n * 2 * f..(n + 1) * 2 * f].split_at(f);
                    expf::swiglu_fwd_row(orow, g, u);
                }
            });
        return;
    }
    out.par_chunks_mut(f * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, o)| {
            for (r, orow) in o.chunks_mut(f).enumerate() {
                let n = blk * ROW_BLOCK + r;
                let hr = &h[n * 2 * f..(n + 1) * 2 * f];
                for i in 0..f {
                    let g = hr[i];
                    orow[i] = g * sigmoid(g) * hr[f + i];
                }
            }
        });
}

/// Backward SwiGLU: with `sg = sigmoid(g)`, `dg = dout * u * sg * (1 + g (1 - sg))`,
/// `du = dout * g * sg`. Overwrites dh `[R, 2F]`.
pub fn swiglu_bwd<F: Real>(dh: &mut [F], dout: &[F], h: &[F], f: usize) {
    if let (Some(dh), Some(dout), Some(h)) = (F::as_f32_mut(dh), F::as_f32(dout), F::as_f32(h)) {
        dh.par_chunks_mut(2 * f * ROW_BLOCK)
            .enumerate()
            .for_each(|(blk, d)| {
                for (r, drow) in d.chunks_mut(2 * f).enumerate() {
                    let n = blk * ROW_BLOCK + r;
                    let (g, u) = h[n * 2 * f..(n + 1) * 2 * f].split_at(f);
                    let (dg, du) = drow.split_at_mut(f);
                    expf::swiglu_bwd_row(dg, du, &dout[n * f..(n + 1) * f], g, u);
                }
            });
        return;
    }
    dh.par_chunks_mut(2 * f * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, d)| {
            for (r, drow) in d.chunks_mut(2 * f).enumerate() {
                let n = blk * ROW_BLOCK + r;
                let hr = &h[n * 2 * f..(n + 1) * 2 * f];
                let dr = &dout[n * f..(n + 1) * f];
                for i in 0..f {
                    let (g, u) = (hr[i], hr[f + i]);
                    let sg = sigmoid(g);
                    drow[i] = dr[i] * u * sg * (F::ONE + g * (F::ONE - sg));
                    drow[f + i] = dr[i] * g * sg;
                }
            }
        });
}
