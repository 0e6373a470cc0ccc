//! CPU reference kernels: causal softmax attention, forward and backward.
//!
//! Shapes: `B` batch, `T` positions, `H` heads, `D` head size; `q, k, v, out [B, H, T, D]`
//! (head-major, so each (b, h) is one contiguous block and the work splits over (b, h) with no
//! shared outputs); `probs [B, H, T, T]`. Attention computes the full `T x T` score matrix per
//! (b, h) with GEMMs, in blocks of [`QB`] query rows: rows `i0..i1` need keys `0..i1` only
//! (causal), so each block's products stop at its last row and the masked upper triangle is
//! mostly not computed (the cost model still counts the full `T x T`). The backward's
//! transposed products (`dv`, `dk`) likewise start at their block's first key. In f32 the
//! softmax's exponentials are the backend's own ([`super::expf`]).
//! Not here: the QKV split, RoPE and the head merge ([`super::rope`]).

use rayon::prelude::*;

use super::expf;
use super::gemm::{GemmShape, Mat, MatMut, Tiles, gemm_into};

/// Query (or key) rows per causal block.
pub const QB: usize = 64;

/// The causal row blocks `(i0, i1)` of `t` rows.
fn blocks(t: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..t).step_by(QB).map(move |i0| (i0, (i0 + QB).min(t)))
}
use crate::backend::{Accumulate, AttnDims, Qkv};
use crate::scalar::Real;

/// Forward causal attention per (b, h):
/// `S = q k^T / sqrt(D)`, `P[i, j] = softmax_j<=i(S[i, :])` (0 for j > i), `out = P v`.
/// Caches `P` in `probs [B,H,T,T]`.
pub fn attention_fwd<F: Real>(out: &mut [F], probs: &mut [F], qkv: Qkv<&[F]>, dims: AttnDims) {
    let Qkv { q, k, v } = qkv;
    let AttnDims { t, d, .. } = dims;
    let scale = F::from_f64(1.0 / (d as f64).sqrt());
    out.par_chunks_mut(t * d)
        .zip(probs.par_chunks_mut(t * t))
        .enumerate()
        .for_each(|(bh, (ob, pb))| {
            let (qb, kb, vb) = (
                &q[bh * t * d..(bh + 1) * t * d],
                &k[bh * t * d..(bh + 1) * t * d],
                &v[bh * t * d..(bh + 1) * t * d],
            );
            // S[i0..i1, 0..i1] = q[i0..i1] k[0..i1]^T per block (the rest of each row is
            // zeroed below).
            for (i0, i1) in blocks(t) {
                gemm_into(
                    GemmShape {
                        m: i1 - i0,
                        n: i1,
                        k: d,
                    },
                    MatMut::rows(&mut pb[i0 * t..], t),
                    Mat::rows(&qb[i0 * d..], d),
                    Mat::transposed(&kb[..i1 * d], d),
                    Accumulate::Overwrite,
                    Tiles::Serial,
                );
            }
            for i in 0..t {
                let row = &mut pb[i * t..(i + 1) * t];
                let mut mx = row[0] * scale;
                for &s in &row[1..=i] {
                    mx = mx.max(s * scale);
                }
                // In f32 the backend's own exponential (the same bits on every CPU).
                match F::as_f32_mut(&mut row[..=i]) {
                    Some(r) => {
                        expf::exp_scaled_shifted(r, scale.to_f64() as f32, mx.to_f64() as f32)
                    }
                    None => {
                        for s in row[..=i].iter_mut() {
                            *s = (*s * scale - mx).exp();
                        }
                    }
                }
                let mut sum = F::ZERO;
                for &s in &row[..=i] {
                    sum += s;
                }
                let inv = F::ONE / sum;
                for s in row[..=i].iter_mut() {
                    *s *= inv;
                }
                row[i + 1..].fill(F::ZERO);
            }
            // out[i0..i1] = P[i0..i1, 0..i1] v[0..i1]  (P is 0 past the diagonal)
            for (i0, i1) in blocks(t) {
                gemm_into(
                    GemmShape {
                        m: i1 - i0,
                        n: d,
                        k: i1,
                    },
                    MatMut::rows(&mut ob[i0 * d..], d),
                    Mat::rows(&pb[i0 * t..], t),
                    Mat::rows(vb, d),
                    Accumulate::Overwrite,
                    Tiles::Serial,
                );
            }
        });
}

/// Backward causal attention per (b, h), with `dP = dout v^T`,
/// `dS = P * (dP - rowsum(dP * P))` (softmax backward), then
/// `dq = dS k / sqrt(D)`, `dk = dS^T q / sqrt(D)`, `dv = P^T dout`. Overwrites dq, dk, dv.
pub fn attention_bwd<F: Real>(
    d: Qkv<&mut [F]>,
    dout: &[F],
    probs: &[F],
    qkv: Qkv<&[F]>,
    dims: AttnDims,
) {
    let Qkv {
        q: dq,
        k: dk,
        v: dv,
    } = d;
    let Qkv { q, k, v } = qkv;
    let AttnDims { t, d, .. } = dims;
    let scale = F::from_f64(1.0 / (d as f64).sqrt());
    dq.par_chunks_mut(t * d)
        .zip(dk.par_chunks_mut(t * d))
        .zip(dv.par_chunks_mut(t * d))
        .enumerate()
        .for_each(|(bh, ((dqb, dkb), dvb))| {
            let blk = bh * t * d..(bh + 1) * t * d;
            let (qb, kb, vb, gb) = (
                &q[blk.clone()],
                &k[blk.clone()],
                &v[blk.clone()],
                &dout[blk],
            );
            let pb = &probs[bh * t * t..(bh + 1) * t * t];
            // dv[j0..j1] = P[j0..T, j0..j1]^T dout[j0..T]  (P[i, j] = 0 for i < j)
            for (j0, j1) in blocks(t) {
                gemm_into(
                    GemmShape {
                        m: j1 - j0,
                        n: d,
                        k: t - j0,
                    },
                    MatMut::rows(&mut dvb[j0 * d..], d),
                    Mat::transposed(&pb[j0 * t + j0..], t),
                    Mat::rows(&gb[j0 * d..], d),
                    Accumulate::Overwrite,
                    Tiles::Serial,
                );
            }
            // dP[i0..i1, 0..i1] = dout[i0..i1] v[0..i1]^T, then dS in place (times the score
            // scale; the rest of each row is zeroed there).
            let mut ds = vec![F::ZERO; t * t];
            for (i0, i1) in blocks(t) {
                gemm_into(
                    GemmShape {
                        m: i1 - i0,
                        n: i1,
                        k: d,
                    },
                    MatMut::rows(&mut ds[i0 * t..], t),
                    Mat::rows(&gb[i0 * d..], d),
                    Mat::transposed(&vb[..i1 * d], d),
                    Accumulate::Overwrite,
                    Tiles::Serial,
                );
            }
            for i in 0..t {
                let (dr, pr) = (&mut ds[i * t..(i + 1) * t], &pb[i * t..(i + 1) * t]);
                let mut dot = F::ZERO;
                for j in 0..=i {
                    dot += dr[j] * pr[j];
                }
                for j in 0..=i {
                    dr[j] = pr[j] * (dr[j] - dot) * scale;
                }
                dr[i + 1..].fill(F::ZERO);
            }
            // dq[i0..i1] = dS[i0..i1, 0..i1] k[0..i1] ; dk[j0..j1] = dS[j0..T, j0..j1]^T q[j0..T]
            for (i0, i1) in blocks(t) {
                gemm_into(
                    GemmShape {
                        m: i1 - i0,
                        n: d,
                        k: i1,
                    },
                    MatMut::rows(&mut dqb[i0 * d..], d),
                    Mat::rows(&ds[i0 * t..], t),
                    Mat::rows(kb, d),
                    Accumulate::Overwrite,
                    Tiles::Serial,
                );
                let (j0, j1) = (i0, i1);
                gemm_into(
                    GemmShape {
                        m: j1 - j0,
                        n: d,
                        k: t - j0,
                    },
                    MatMut::rows(&mut dkb[j0 * d..], d),
                    Mat::transposed(&ds[j0 * t + j0..], t),
                    Mat::rows(&qb[j0 * d..], d),
                    Accumulate::Overwrite,
                    Tiles::Serial,
                );
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(out, probs)` of [`attention_fwd`] on `q, k, v`.
    fn forward<F: Real>(q: &[F], k: &[F], v: &[F], dims: AttnDims) -> (Vec<F>, Vec<F>) {
        let mut out = vec![F::ZERO; q.len()];
        let mut probs = vec![F::ZERO; dims.b * dims.h * dims.t * dims.t];
        attention_fwd(&mut out, &mut probs, Qkv { q, k, v }, dims);
        (out, probs)
    }

    /// The f32 forward (the backend's own exponential, vectorised with a scalar tail) against
    /// the f64 forward (the platform's `exp`) on the same inputs: probabilities and outputs
    /// within f32 rounding, every masked probability exactly 0, every row summing to 1.
    #[test]
    fn the_f32_forward_matches_the_f64_forward() {
        // t = 131: three causal blocks and rows of every length mod 8.
        let dims = AttnDims {
            b: 1,
            t: 131,
            h: 2,
            d: 16,
        };
        let n = dims.b * dims.h * dims.t * dims.d;
        let mut s = 0x9e37_79b9_u32;
        let mut next = |spread: f64| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f64 / u32::MAX as f64 * 2.0 - 1.0) * spread
        };
        // Large q and k in the second head: scores far apart, some past the clamp at -87.
        let q: Vec<f64> = (0..n)
            .map(|i| next(if i >= n / 2 { 12.0 } else { 1.0 }))
            .collect();
        let k: Vec<f64> = (0..n)
            .map(|i| next(if i >= n / 2 { 12.0 } else { 1.0 }))
            .collect();
        let v: Vec<f64> = (0..n).map(|_| next(1.0)).collect();
        let f32s = |x: &[f64]| x.iter().map(|&y| y as f32).collect::<Vec<f32>>();
        let (q32, k32, v32) = (f32s(&q), f32s(&k), f32s(&v));
        let f64s = |x: &[f32]| x.iter().map(|&y| y as f64).collect::<Vec<f64>>();
        let (out64, p64) = forward(&f64s(&q32), &f64s(&k32), &f64s(&v32), dims);
        let (out32, p32) = forward(&q32, &k32, &v32, dims);
        let t = dims.t;
        // Head 0's scores are O(1); head 1's are O(100), where the f32 rounding of the scores
        // alone moves a probability by ~1e-5 (the f32 inputs are fed to the f64 run too, so
        // that only the f32 arithmetic differs).
        let mut worst = [0f64; 2];
        for (row, (r32, r64)) in p32.chunks(t).zip(p64.chunks(t)).enumerate() {
            let i = row % t;
            assert!(r32[i + 1..].iter().all(|&x| x == 0.0), "row {row}: mask");
            let sum: f64 = r32.iter().map(|&x| x as f64).sum();
            assert!((sum - 1.0).abs() < 1e-5, "row {row}: sums to {sum}");
            for (&a, &b) in r32.iter().zip(r64) {
                let w = &mut worst[row / t];
                *w = w.max((a as f64 - b).abs());
            }
        }
        assert!(
            worst[0] < 1e-6 && worst[1] < 1e-4,
            "worst |p32 - p64| per head: {worst:?}"
        );
        let worst_out = out32
            .iter()
            .zip(&out64)
            .map(|(&a, &b)| (a as f64 - b).abs())
            .fold(0.0, f64::max);
        assert!(worst_out < 1e-4, "worst |out32 - out64|: {worst_out}");
    }
}
