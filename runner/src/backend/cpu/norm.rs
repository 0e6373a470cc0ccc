//! CPU reference kernels: token embedding, RMSNorm, SwiGLU, elementwise adds.
//!
//! Shapes: `N` rows (tokens), `C` channels, `V` vocab, `F` expert width. Every kernel
//! parallelises over fixed row blocks ([`ROW_BLOCK`]) and reduces across rows only over those
//! blocks in ascending order, so results do not depend on the thread count.
//! Not here: matmuls ([`super::gemm`]), attention, routing.

use rayon::prelude::*;

use crate::scalar::Real;

/// Rows per parallel work item and per partial sum of cross-row reductions.
pub const ROW_BLOCK: usize = 64;

/// Forward: `out[n, :] = wte[tokens[n], :]`. Tokens were checked `< V` by the data pipeline.
pub fn embedding_fwd<F: Real>(out: &mut [F], wte: &[F], tokens: &[u32], c: usize) {
    out.par_chunks_mut(c * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, o)| {
            for (r, row) in o.chunks_mut(c).enumerate() {
                let t = tokens[blk * ROW_BLOCK + r] as usize;
                row.copy_from_slice(&wte[t * c..(t + 1) * c]);
            }
        });
}

/// Backward: `dwte[tokens[n], :] += dout[n, :]`, n ascending (a scatter-add done serially so
/// repeated tokens always sum in the same order; it is O(N C), small next to the matmuls).
pub fn embedding_bwd<F: Real>(dwte: &mut [F], dout: &[F], tokens: &[u32], c: usize) {
    for (n, &t) in tokens.iter().enumerate() {
        let t = t as usize;
        let src = &dout[n * c..(n + 1) * c];
        for (d, s) in dwte[t * c..(t + 1) * c].iter_mut().zip(src) {
            *d += *s;
        }
    }
}

/// Forward: `rstd[n] = 1/sqrt(mean_i x[n,i]^2 + eps)`, `out[n,i] = x[n,i] * rstd[n] * w[i]`.
/// Caches `rstd` for backward.
pub fn rmsnorm_fwd<F: Real>(out: &mut [F], rstd: &mut [F], x: &[F], w: &[F], c: usize, eps: f64) {
    let eps = F::from_f64(eps);
    let inv_c = F::from_f64(1.0 / c as f64);
    out.par_chunks_mut(c * ROW_BLOCK)
        .zip(rstd.par_chunks_mut(ROW_BLOCK))
        .enumerate()
        .for_each(|(blk, (o, rs))| {
            for (r, (orow, rr)) in o.chunks_mut(c).zip(rs.iter_mut()).enumerate() {
                let n = blk * ROW_BLOCK + r;
                let xr = &x[n * c..(n + 1) * c];
                let mut ss = F::ZERO;
                for &xi in xr {
                    ss += xi * xi;
                }
                let s = F::ONE / (ss * inv_c + eps).sqrt();
                *rr = s;
                for i in 0..c {
                    orow[i] = xr[i] * s * w[i];
                }
            }
        });
}

/// Backward of RMSNorm. With `xh = x * rstd` and `g = dout * w`:
/// `dx += rstd * (g - xh * mean_i(g_i xh_i))`, `dw[i] += sum_n dout[n,i] xh[n,i]`.
/// `dw` is reduced as per-block partial sums added in block order.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_bwd<F: Real>(
    dx: &mut [F],
    dw: &mut [F],
    dout: &[F],
    x: &[F],
    w: &[F],
    rstd: &[F],
    c: usize,
) {
    let inv_c = F::from_f64(1.0 / c as f64);
    let partials: Vec<Vec<F>> = dx
        .par_chunks_mut(c * ROW_BLOCK)
        .enumerate()
        .map(|(blk, dxb)| {
            let mut dwp = vec![F::ZERO; c];
            for (r, dxr) in dxb.chunks_mut(c).enumerate() {
                let n = blk * ROW_BLOCK + r;
                let (xr, dr, s) = (&x[n * c..(n + 1) * c], &dout[n * c..(n + 1) * c], rstd[n]);
                let mut dot = F::ZERO;
                for i in 0..c {
                    dot += dr[i] * w[i] * xr[i] * s;
                }
                let mean = dot * inv_c;
                for i in 0..c {
                    let xh = xr[i] * s;
                    dxr[i] += s * (dr[i] * w[i] - xh * mean);
                    dwp[i] += dr[i] * xh;
                }
            }
            dwp
        })
        .collect();
    for p in partials {
        for (d, v) in dw.iter_mut().zip(p) {
            *d += v;
        }
    }
}

/// `silu(g) = g * sigmoid(g)`.
#[inline]
fn sigmoid<F: Real>(g: F) -> F {
    F::ONE / (F::ONE + (-g).exp())
}

/// Forward SwiGLU: `out[r, i] = silu(h[r, i]) * h[r, F + i]`; h `[R, 2F]`, out `[R, F]`.
pub fn swiglu_fwd<F: Real>(out: &mut [F], h: &[F], f: usize) {
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

/// `a += b`, elementwise.
pub fn add_assign<F: Real>(a: &mut [F], b: &[F]) {
    a.par_chunks_mut(4096)
        .zip(b.par_chunks(4096))
        .for_each(|(x, y)| {
            for (p, q) in x.iter_mut().zip(y) {
                *p += *q;
            }
        });
}

/// `buf[n, e] += row[e]` for every row of `[N, E]`.
pub fn add_row_broadcast<F: Real>(buf: &mut [F], row: &[F]) {
    for r in buf.chunks_mut(row.len()) {
        for (p, q) in r.iter_mut().zip(row) {
            *p += *q;
        }
    }
}
