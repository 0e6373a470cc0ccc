//! CPU reference kernels: the QKV split with rotary position embedding (RoPE), and the head
//! merge, forward and backward.
//!
//! Shapes: `B` batch, `T` positions, `H` heads, `D` head size, `C = H D`; `qkv [B, T, 3C]`;
//! `q, k, v [B, H, T, D]` (head-major, so each (b, h) is one contiguous block for attention).
//! RoPE rotates pairs `(i, i + D/2)` (the GPT-NeoX layout) by angle `t * theta^(-2i/D)`; the
//! tables `cos, sin [T, D/2]` come from the model. Pure permutations and 2x2 rotations: no
//! reductions. Not here: the projections (`linear` layers) and attention itself
//! ([`super::attention`]).

use rayon::prelude::*;

use crate::backend::{AttnDims, Qkv, RopeTables};
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
