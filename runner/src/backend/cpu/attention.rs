//! CPU reference kernels: QKV split with RoPE, causal softmax attention, head merge.
//!
//! Shapes: `B` batch, `T` positions, `H` heads, `D` head size, `C = H D`. Activations are
//! head-major `[B, H, T, D]` so each (b, h) is one contiguous block and the work splits over
//! (b, h) with no shared outputs. RoPE rotates pairs `(i, i + D/2)` (the GPT-NeoX layout) by
//! angle `t * theta^(-2i/D)`; the tables `cos, sin [T, D/2]` come from the model.
//! Attention computes the full `T x T` score matrix per (b, h) with GEMMs and masks the upper
//! triangle (simple, twice the needed FLOPs for scores; the cost model counts it the same way).
//! Not here: the projections (they are `linear` layers in the model).

use rayon::prelude::*;

use super::gemm::{GemmShape, Mat, MatMut, Tiles, gemm_into};
use crate::backend::{Accumulate, AttnDims, Qkv, RopeTables};
use crate::scalar::Real;

/// Forward: `q, k, v [B,H,T,D]` from `qkv [B,T,3C]` (q at columns `0..C`, k at `C..2C`, v at
/// `2C..3C`, head h at `h*D..(h+1)*D` within each); q and k rotated by RoPE.
pub fn qkv_rope_fwd<F: Real>(
    out: Qkv<&mut [F]>,
    qkv: &[F],
    rope: RopeTables<&[F]>,
    dims: AttnDims,
) {
    let Qkv { q, k, v } = out;
    let RopeTables { cos, sin } = rope;
    let AttnDims { t, h, d, .. } = dims;
    let c = h * d;
    let half = d / 2;
    q.par_chunks_mut(t * d)
        .zip(k.par_chunks_mut(t * d))
        .zip(v.par_chunks_mut(t * d))
        .enumerate()
        .for_each(|(bh, ((qb, kb), vb))| {
            let (b, hh) = (bh / h, bh % h);
            for tt in 0..t {
                let row = &qkv[(b * t + tt) * 3 * c..(b * t + tt + 1) * 3 * c];
                let (qs, ks, vs) = (
                    &row[hh * d..(hh + 1) * d],
                    &row[c + hh * d..c + (hh + 1) * d],
                    &row[2 * c + hh * d..2 * c + (hh + 1) * d],
                );
                let (cs, sn) = (
                    &cos[tt * half..(tt + 1) * half],
                    &sin[tt * half..(tt + 1) * half],
                );
                let o = tt * d;
                for i in 0..half {
                    // y1 = x1 cos - x2 sin ; y2 = x1 sin + x2 cos
                    qb[o + i] = qs[i] * cs[i] - qs[half + i] * sn[i];
                    qb[o + half + i] = qs[i] * sn[i] + qs[half + i] * cs[i];
                    kb[o + i] = ks[i] * cs[i] - ks[half + i] * sn[i];
                    kb[o + half + i] = ks[i] * sn[i] + ks[half + i] * cs[i];
                }
                vb[o..o + d].copy_from_slice(vs);
            }
        });
}

/// Backward of [`qkv_rope_fwd`]: the inverse rotation (`dx1 = dy1 cos + dy2 sin`,
/// `dx2 = -dy1 sin + dy2 cos`) scattered back into `dqkv [B,T,3C]` (overwrites).
pub fn qkv_rope_bwd<F: Real>(dqkv: &mut [F], d: Qkv<&[F]>, rope: RopeTables<&[F]>, dims: AttnDims) {
    let Qkv {
        q: dq,
        k: dk,
        v: dv,
    } = d;
    let RopeTables { cos, sin } = rope;
    let AttnDims { t, h, d, .. } = dims;
    let c = h * d;
    let half = d / 2;
    // Parallel over token rows of dqkv: each row gathers from every head.
    dqkv.par_chunks_mut(3 * c)
        .enumerate()
        .for_each(|(bt, row)| {
            let (b, tt) = (bt / t, bt % t);
            let (cs, sn) = (
                &cos[tt * half..(tt + 1) * half],
                &sin[tt * half..(tt + 1) * half],
            );
            for hh in 0..h {
                let o = ((b * h + hh) * t + tt) * d;
                let (gq, gk, gv) = (&dq[o..o + d], &dk[o..o + d], &dv[o..o + d]);
                for i in 0..half {
                    row[hh * d + i] = gq[i] * cs[i] + gq[half + i] * sn[i];
                    row[hh * d + half + i] = -gq[i] * sn[i] + gq[half + i] * cs[i];
                    row[c + hh * d + i] = gk[i] * cs[i] + gk[half + i] * sn[i];
                    row[c + hh * d + half + i] = -gk[i] * sn[i] + gk[half + i] * cs[i];
                }
                row[2 * c + hh * d..2 * c + (hh + 1) * d].copy_from_slice(gv);
            }
        });
}

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

/// `[B,H,T,D] -> [B,T,C]`.
pub fn merge_heads_fwd<F: Real>(out: &mut [F], y: &[F], dims: AttnDims) {
    let AttnDims { t, h, d, .. } = dims;
    let c = h * d;
    out.par_chunks_mut(c).enumerate().for_each(|(bt, row)| {
        let (b, tt) = (bt / t, bt % t);
        for hh in 0..h {
            let o = ((b * h + hh) * t + tt) * d;
            row[hh * d..(hh + 1) * d].copy_from_slice(&y[o..o + d]);
        }
    });
}

/// `[B,T,C] -> [B,H,T,D]` (the backward of [`merge_heads_fwd`]).
pub fn merge_heads_bwd<F: Real>(dy: &mut [F], dout: &[F], dims: AttnDims) {
    let AttnDims { t, h, d, .. } = dims;
    let c = h * d;
    dy.par_chunks_mut(t * d).enumerate().for_each(|(bh, blk)| {
        let (b, hh) = (bh / h, bh % h);
        for tt in 0..t {
            let src = &dout[(b * t + tt) * c + hh * d..(b * t + tt) * c + (hh + 1) * d];
            blk[tt * d..(tt + 1) * d].copy_from_slice(src);
        }
    });
}
