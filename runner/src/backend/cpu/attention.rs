//! CPU reference kernels: causal softmax attention, forward and backward.
//!
//! Shapes: `B` batch, `T` positions, `H` heads, `D` head size; `q, k, v, out [B, H, T, D]`
//! (head-major, so each (b, h) is one contiguous block and the work splits over (b, h) with no
//! shared outputs); `probs [B, H, T, T]`. Attention computes the full `T x T` score matrix per
//! (b, h) with GEMMs and masks the upper triangle (simple, twice the needed FLOPs for scores;
//! the cost model counts it the same way).
//! Not here: the QKV split, RoPE and the head merge ([`super::rope`]).

use rayon::prelude::*;

use super::gemm::{GemmShape, Mat, MatMut, Tiles, gemm_into};
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
            // S = q k^T  [T, T]
            gemm_into(
                GemmShape { m: t, n: t, k: d },
                MatMut::rows(pb, t),
                Mat::rows(qb, d),
                Mat::transposed(kb, d),
                Accumulate::Overwrite,
                Tiles::Serial,
            );
            for i in 0..t {
                let row = &mut pb[i * t..(i + 1) * t];
                let mut mx = row[0] * scale;
                for &s in &row[1..=i] {
                    mx = mx.max(s * scale);
                }
                let mut sum = F::ZERO;
                for s in row[..=i].iter_mut() {
                    *s = (*s * scale - mx).exp();
                    sum += *s;
                }
                let inv = F::ONE / sum;
                for s in row[..=i].iter_mut() {
                    *s *= inv;
                }
                row[i + 1..].fill(F::ZERO);
            }
            // out = P v  [T, D]
            gemm_into(
                GemmShape { m: t, n: d, k: t },
                MatMut::rows(ob, d),
                Mat::rows(pb, t),
                Mat::rows(vb, d),
                Accumulate::Overwrite,
                Tiles::Serial,
            );
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
            // dv = P^T dout
            gemm_into(
                GemmShape { m: t, n: d, k: t },
                MatMut::rows(dvb, d),
                Mat::transposed(pb, t),
                Mat::rows(gb, d),
                Accumulate::Overwrite,
                Tiles::Serial,
            );
            // dP = dout v^T, then dS in place (times the score scale).
            let mut ds = vec![F::ZERO; t * t];
            gemm_into(
                GemmShape { m: t, n: t, k: d },
                MatMut::rows(&mut ds, t),
                Mat::rows(gb, d),
                Mat::transposed(vb, d),
                Accumulate::Overwrite,
                Tiles::Serial,
            );
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
            // dq = dS k ; dk = dS^T q
            gemm_into(
                GemmShape { m: t, n: d, k: t },
                MatMut::rows(dqb, d),
                Mat::rows(&ds, t),
                Mat::rows(kb, d),
                Accumulate::Overwrite,
                Tiles::Serial,
            );
            gemm_into(
                GemmShape { m: t, n: d, k: t },
                MatMut::rows(dkb, d),
                Mat::transposed(&ds, t),
                Mat::rows(qb, d),
                Accumulate::Overwrite,
                Tiles::Serial,
            );
        });
}
