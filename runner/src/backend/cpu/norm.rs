//! CPU reference kernels: RMSNorm, forward and backward.
//!
//! Shapes: `N` rows (tokens), `C` channels; `x, out, dout, dx [N, C]`, `w, dw [C]`,
//! `rstd [N]` (cached by forward). Every kernel parallelises over fixed row blocks
//! ([`ROW_BLOCK`]) and reduces across rows only over those blocks in ascending order, so results
//! do not depend on the thread count.
//! Not here: the embedding, SwiGLU and the elementwise adds (their own files).

use rayon::prelude::*;

use super::ROW_BLOCK;
use crate::backend::RmsNormSaved;
use crate::scalar::Real;

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
pub fn rmsnorm_bwd<F: Real>(
    dx: &mut [F],
    dw: &mut [F],
    dout: &[F],
    saved: RmsNormSaved<&[F]>,
    c: usize,
) {
    let RmsNormSaved { x, w, rstd } = saved;
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
