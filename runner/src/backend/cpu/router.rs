//! CPU reference kernels of the MoE router: scores (softmax or sigmoid), the router z-loss,
//! the backward of the renormalised combine weights, and the per-layer router statistics.
//!
//! Shapes: `N` tokens, `E` experts, `K` choices per token; `logits, scores, dscores,
//! dlogits [N, E]`, `dweights [N*K]`. Each row's E experts are visited serially; the z-loss's
//! scalar is summed over rows in ascending order.
//! Not here: the top-k choice ([`super::topk`]), the sort by expert ([`super::permute`]) and the
//! balancing policy (the trainer).

use rayon::prelude::*;

use super::{CpuBackend, ROW_BLOCK};
use crate::backend::{RouterStats, Routing, ScoreKind};
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

/// Backward through the renormalised weights `w_j = scale s_j / Z`, `Z = sum_j s_j`:
/// `ds_i += scale (dw_i / Z - sum_j dw_j s_j / Z^2)` for each chosen expert i.
pub fn route_weights_bwd<F: Real>(
    dscores: &mut [F],
    dweights: &[F],
    scores: &[F],
    routing: &Routing<CpuBackend<F>>,
    combine_scale: f64,
) {
    let (token_expert, k) = (&routing.token_expert, routing.top_k);
    let e = routing.expert_rows.len();
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

/// Router statistics of `scores [N, E]` (`E = bias.len()`), rows in ascending order, in f64:
/// the mean score per expert `P_i`, the mean entropy (nats) of each row's normalised scores,
/// and, when `quantile`, each expert's quantile offset: with `threshold_n` the K-th largest
/// biased score `s + bias` of row n, the value of `s + bias - threshold` with `round(N K / E)`
/// rows above it (the midpoint of the two sorted values around that rank, so a balanced
/// expert has offset ~0).
pub fn router_stats<F: Real>(scores: &[F], bias: &[f64], k: usize, quantile: bool) -> RouterStats {
    let e = bias.len().max(1);
    let n = scores.len() / e;
    let mut p_mean = vec![0.0f64; e];
    let mut entropy = 0.0;
    let mut offsets: Vec<Vec<f64>> = if quantile {
        vec![Vec::with_capacity(n); e]
    } else {
        Vec::new()
    };
    let mut biased = vec![0.0f64; e];
    for row in scores.chunks(e) {
        let z: f64 = row.iter().map(|s| s.to_f64()).sum::<f64>().max(1e-30);
        for i in 0..e {
            let s = row[i].to_f64();
            p_mean[i] += s;
            let p = s / z;
            if p > 0.0 {
                entropy -= p * p.ln();
            }
            biased[i] = s + bias[i];
        }
        if quantile {
            let mut sorted = biased.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let threshold = sorted[k - 1];
            for i in 0..e {
                offsets[i].push(biased[i] - threshold);
            }
        }
    }
    for p in &mut p_mean {
        *p /= n as f64;
    }
    let want = ((n * k) as f64 / e as f64).round() as usize;
    let quantile_offset = quantile.then(|| {
        offsets
            .into_iter()
            .map(|mut col| {
                col.sort_by(|a, b| a.total_cmp(b));
                let hi = n.saturating_sub(want).min(n - 1);
                if hi == 0 {
                    col[0]
                } else {
                    0.5 * (col[hi - 1] + col[hi])
                }
            })
            .collect()
    });
    RouterStats {
        p_mean,
        entropy_mean: entropy / n as f64,
        quantile_offset,
    }
}
