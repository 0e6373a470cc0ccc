//! CPU reference kernels of the MoE block: router scores, router z-loss, top-k routing with a
//! balancing bias, the stable sort by expert with an optional capacity, dispatch and combine.
//!
//! Shapes: `N` tokens, `E` experts, `K` choices per token, `C` channels, `S` kept slots.
//! Dispatch is dropless by default: every assignment gets a row of the sorted buffer, so the
//! grouped matmuls see exactly the tokens routed to each expert. Combine gathers each token's
//! K slots and sums them in the order j = 0..K — no scatter, no float atomics.
//! Not here: the expert matmuls (grouped `linear`) and the balancing policy (the trainer).

use rayon::prelude::*;

use super::norm::ROW_BLOCK;
use crate::backend::{Accumulate, DROPPED, ScoreKind};
use crate::scalar::Real;

/// Forward scores: softmax over each row of `logits [N, E]`, or sigmoid elementwise.
pub fn router_scores_fwd<F: Real>(scores: &mut [F], logits: &[F], e: usize, kind: ScoreKind) {
    scores
        .par_chunks_mut(e * ROW_BLOCK)
        .zip(logits.par_chunks(e * ROW_BLOCK))
        .for_each(|(sb, lb)| {
            for (s, l) in sb.chunks_mut(e).zip(lb.chunks(e)) {
                match kind {
                    ScoreKind::Softmax => {
                        let mx = l.iter().fold(l[0], |a, &b| a.max(b));
                        let mut sum = F::ZERO;
                        for (si, &li) in s.iter_mut().zip(l) {
                            *si = (li - mx).exp();
                            sum += *si;
                        }
                        let inv = F::ONE / sum;
                        for si in s.iter_mut() {
                            *si *= inv;
                        }
                    }
                    ScoreKind::Sigmoid => {
                        for (si, &li) in s.iter_mut().zip(l) {
                            *si = F::ONE / (F::ONE + (-li).exp());
                        }
                    }
                }
            }
        });
}

/// Backward scores (overwrites): softmax `dl_i = s_i (ds_i - sum_j ds_j s_j)`;
/// sigmoid `dl_i = ds_i s_i (1 - s_i)`.
pub fn router_scores_bwd<F: Real>(
    dlogits: &mut [F],
    dscores: &[F],
    scores: &[F],
    e: usize,
    kind: ScoreKind,
) {
    for ((dl, ds), s) in dlogits
        .chunks_mut(e)
        .zip(dscores.chunks(e))
        .zip(scores.chunks(e))
    {
        match kind {
            ScoreKind::Softmax => {
                let mut dot = F::ZERO;
                for i in 0..e {
                    dot += ds[i] * s[i];
                }
                for i in 0..e {
                    dl[i] = s[i] * (ds[i] - dot);
                }
            }
            ScoreKind::Sigmoid => {
                for i in 0..e {
                    dl[i] = ds[i] * s[i] * (F::ONE - s[i]);
                }
            }
        }
    }
}

/// Router z-loss: returns `sum_n lse_n^2` with `lse_n = logsumexp(logits[n, :])`, and adds
/// `coef * 2 lse_n softmax(logits[n])` to `dlogits` when given. The sum is taken over rows in
/// ascending order (per-row values first, then one serial sum).
pub fn router_z_loss<F: Real>(dlogits: Option<&mut [F]>, logits: &[F], e: usize, coef: f64) -> f64 {
    let lse: Vec<f64> = logits
        .par_chunks(e)
        .map(|l| {
            let mx = l.iter().fold(l[0], |a, &b| a.max(b));
            let mut sum = F::ZERO;
            for &li in l {
                sum += (li - mx).exp();
            }
            (mx + sum.ln()).to_f64()
        })
        .collect();
    if let Some(dl) = dlogits {
        for ((d, l), &z) in dl.chunks_mut(e).zip(logits.chunks(e)).zip(&lse) {
            let zf = F::from_f64(z);
            let g = F::from_f64(2.0 * coef * z);
            for i in 0..e {
                d[i] += g * (l[i] - zf).exp();
            }
        }
    }
    lse.iter().map(|z| z * z).sum()
}

/// Host form of a routing decision (see [`crate::backend::Routing`] for each field).
#[derive(Debug, Clone, PartialEq)]
pub struct RouteHost<F> {
    /// `[N*K]` chosen experts.
    pub token_expert: Vec<u32>,
    /// `[N*K]` slot per choice or [`DROPPED`].
    pub token_slot: Vec<u32>,
    /// `[S]` assignment per slot.
    pub slot_assignment: Vec<u32>,
    /// `[N*K]` combine weights.
    pub weights: Vec<F>,
    /// Kept rows per expert.
    pub expert_rows: Vec<usize>,
    /// Assignments per expert before capacity.
    pub expert_load: Vec<u64>,
    /// Dropped assignments.
    pub dropped: u64,
}

/// Top-k on `scores + bias`, combine weights from the unbiased scores, stable counting sort by
/// expert, capacity. Ties in the biased score go to the lower expert index.
pub fn route<F: Real>(
    scores: &[F],
    bias: &[f64],
    e: usize,
    k: usize,
    combine_scale: f64,
    capacity: Option<usize>,
) -> RouteHost<F> {
    let n = scores.len() / e;
    let mut token_expert = vec![0u32; n * k];
    let mut weights = vec![F::ZERO; n * k];
    let scale = F::from_f64(combine_scale);
    let bias_f: Vec<F> = bias.iter().map(|&b| F::from_f64(b)).collect();
    token_expert
        .par_chunks_mut(k * ROW_BLOCK)
        .zip(weights.par_chunks_mut(k * ROW_BLOCK))
        .enumerate()
        .for_each(|(blk, (te, w))| {
            let mut taken = vec![false; e];
            for (r, (ter, wr)) in te.chunks_mut(k).zip(w.chunks_mut(k)).enumerate() {
                let t = blk * ROW_BLOCK + r;
                let s = &scores[t * e..(t + 1) * e];
                taken.fill(false);
                let mut z = F::ZERO;
                for j in 0..k {
                    let mut best = usize::MAX;
                    for i in 0..e {
                        if taken[i] {
                            continue;
                        }
                        // Strict `>` keeps the lower index on ties.
                        if best == usize::MAX || s[i] + bias_f[i] > s[best] + bias_f[best] {
                            best = i;
                        }
                    }
                    taken[best] = true;
                    ter[j] = best as u32;
                    wr[j] = s[best];
                    z += s[best];
                }
                // Scores are positive (softmax/sigmoid); the floor only guards underflow.
                let z = z.max(F::from_f64(1e-30));
                for wj in wr.iter_mut() {
                    *wj = *wj / z * scale;
                }
            }
        });
    // Stable counting sort by expert over assignments a = n*K + j in ascending order.
    let mut expert_load = vec![0u64; e];
    for &x in &token_expert {
        expert_load[x as usize] += 1;
    }
    let cap = capacity.unwrap_or(usize::MAX);
    let expert_rows: Vec<usize> = expert_load.iter().map(|&l| (l as usize).min(cap)).collect();
    let mut offset = vec![0usize; e];
    for i in 1..e {
        offset[i] = offset[i - 1] + expert_rows[i - 1];
    }
    let total: usize = expert_rows.iter().sum();
    let mut slot_assignment = vec![0u32; total];
    let mut token_slot = vec![DROPPED; n * k];
    let mut seen = vec![0usize; e];
    let mut dropped = 0u64;
    for (a, &x) in token_expert.iter().enumerate() {
        let x = x as usize;
        if seen[x] < expert_rows[x] {
            let slot = offset[x] + seen[x];
            slot_assignment[slot] = a as u32;
            token_slot[a] = slot as u32;
        } else {
            dropped += 1;
        }
        seen[x] += 1;
    }
    RouteHost {
        token_expert,
        token_slot,
        slot_assignment,
        weights,
        expert_rows,
        expert_load,
        dropped,
    }
}

/// Backward through the renormalised weights `w_j = scale s_j / Z`, `Z = sum_j s_j`:
/// `ds_i += scale (dw_i / Z - sum_j dw_j s_j / Z^2)` for each chosen expert i.
pub fn route_weights_bwd<F: Real>(
    dscores: &mut [F],
    dweights: &[F],
    scores: &[F],
    token_expert: &[u32],
    e: usize,
    k: usize,
    combine_scale: f64,
) {
    let scale = F::from_f64(combine_scale);
    dscores
        .par_chunks_mut(e * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, db)| {
            for (r, ds) in db.chunks_mut(e).enumerate() {
                let t = blk * ROW_BLOCK + r;
                let s = &scores[t * e..(t + 1) * e];
                let (te, dw) = (
                    &token_expert[t * k..(t + 1) * k],
                    &dweights[t * k..(t + 1) * k],
                );
                let mut z = F::ZERO;
                let mut dot = F::ZERO;
                for j in 0..k {
                    let sj = s[te[j] as usize];
                    z += sj;
                    dot += dw[j] * sj;
                }
                let z = z.max(F::from_f64(1e-30));
                for j in 0..k {
                    ds[te[j] as usize] += scale * (dw[j] / z - dot / (z * z));
                }
            }
        });
}

/// Dispatch: `xs[s, :] = x[slot_assignment[s] / K, :]`.
pub fn dispatch_fwd<F: Real>(xs: &mut [F], x: &[F], slot_assignment: &[u32], k: usize, c: usize) {
    xs.par_chunks_mut(c * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, xb)| {
            for (r, row) in xb.chunks_mut(c).enumerate() {
                let t = slot_assignment[blk * ROW_BLOCK + r] as usize / k;
                row.copy_from_slice(&x[t * c..(t + 1) * c]);
            }
        });
}

/// Dispatch backward: `dx[n, :] += sum_{j=0..K} dxs[token_slot[n*K+j], :]`, j ascending,
/// dropped choices skipped.
pub fn dispatch_bwd<F: Real>(dx: &mut [F], dxs: &[F], token_slot: &[u32], k: usize, c: usize) {
    dx.par_chunks_mut(c * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, db)| {
            for (r, row) in db.chunks_mut(c).enumerate() {
                let t = blk * ROW_BLOCK + r;
                for &slot in &token_slot[t * k..(t + 1) * k] {
                    if slot == DROPPED {
                        continue;
                    }
                    let src = &dxs[slot as usize * c..(slot as usize + 1) * c];
                    for (d, s) in row.iter_mut().zip(src) {
                        *d += *s;
                    }
                }
            }
        });
}

/// Combine: `out[n, :] (+)= sum_{j=0..K} w[n*K+j] y[token_slot[n*K+j], :]`, j ascending.
pub fn combine_fwd<F: Real>(
    out: &mut [F],
    y: &[F],
    weights: &[F],
    token_slot: &[u32],
    k: usize,
    c: usize,
    accumulate: Accumulate,
) {
    out.par_chunks_mut(c * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, ob)| {
            for (r, row) in ob.chunks_mut(c).enumerate() {
                let t = blk * ROW_BLOCK + r;
                if accumulate == Accumulate::Overwrite {
                    row.fill(F::ZERO);
                }
                for j in 0..k {
                    let slot = token_slot[t * k + j];
                    if slot == DROPPED {
                        continue;
                    }
                    let w = weights[t * k + j];
                    let src = &y[slot as usize * c..(slot as usize + 1) * c];
                    for (d, s) in row.iter_mut().zip(src) {
                        *d += w * *s;
                    }
                }
            }
        });
}

/// Combine backward (overwrites): `dy[slot] = w dout[n]`, `dw[n*K+j] = dout[n] . y[slot]`;
/// dropped choices get `dw = 0`.
#[allow(clippy::too_many_arguments)]
pub fn combine_bwd<F: Real>(
    dy: &mut [F],
    dweights: &mut [F],
    dout: &[F],
    y: &[F],
    weights: &[F],
    slot_assignment: &[u32],
    token_slot: &[u32],
    k: usize,
    c: usize,
) {
    dy.par_chunks_mut(c * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, db)| {
            for (r, row) in db.chunks_mut(c).enumerate() {
                let a = slot_assignment[blk * ROW_BLOCK + r] as usize;
                let t = a / k;
                let w = weights[a];
                for (d, g) in row.iter_mut().zip(&dout[t * c..(t + 1) * c]) {
                    *d = w * *g;
                }
            }
        });
    dweights
        .par_chunks_mut(k * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, wb)| {
            for (r, wrow) in wb.chunks_mut(k).enumerate() {
                let t = blk * ROW_BLOCK + r;
                let g = &dout[t * c..(t + 1) * c];
                for (j, dw) in wrow.iter_mut().enumerate() {
                    let slot = token_slot[t * k + j];
                    *dw = if slot == DROPPED {
                        F::ZERO
                    } else {
                        let yr = &y[slot as usize * c..(slot as usize + 1) * c];
                        let mut dot = F::ZERO;
                        for i in 0..c {
                            dot += g[i] * yr[i];
                        }
                        dot
                    };
                }
            }
        });
}
