//! CPU reference kernels: fused softmax cross-entropy with z-loss, the squared norm, AdamW.
//!
//! Shapes: `N` rows, `V` vocab. Losses are per-row values summed serially in row order, and
//! the squared norm is summed over fixed blocks of [`NORM_BLOCK`] elements in block order, so
//! neither depends on the thread count. Not here: the schedule or clipping policy (trainer).

use rayon::prelude::*;

use super::norm::ROW_BLOCK;
use crate::backend::{AdamW, CrossEntropySums};
use crate::scalar::Real;

/// Elements per partial sum of [`sum_squares`].
pub const NORM_BLOCK: usize = 4096;

/// Per row: `lse = logsumexp(x)`, `ce = lse - x[target]`, `z = lse^2`. With `grad_scale = g`,
/// overwrites the row with `g * (p - onehot(target) + z_coef * 2 lse p)`, `p = softmax(x)`.
pub fn cross_entropy<F: Real>(
    logits: &mut [F],
    targets: &[u32],
    v: usize,
    z_coef: f64,
    grad_scale: Option<f64>,
) -> CrossEntropySums {
    let per_row: Vec<(f64, f64)> = logits
        .par_chunks_mut(v * ROW_BLOCK)
        .enumerate()
        .flat_map_iter(|(blk, lb)| {
            let mut out = Vec::with_capacity(ROW_BLOCK);
            for (r, x) in lb.chunks_mut(v).enumerate() {
                let tgt = targets[blk * ROW_BLOCK + r] as usize;
                let mx = x.iter().fold(x[0], |a, &b| a.max(b));
                let mut sum = F::ZERO;
                for &xi in x.iter() {
                    sum += (xi - mx).exp();
                }
                let lse = mx + sum.ln();
                let ce = (lse - x[tgt]).to_f64();
                let l64 = lse.to_f64();
                if let Some(g) = grad_scale {
                    let g = F::from_f64(g);
                    let zc = F::from_f64(2.0 * z_coef * l64);
                    for xi in x.iter_mut() {
                        let p = (*xi - lse).exp();
                        *xi = g * (p + zc * p);
                    }
                    x[tgt] -= g;
                }
                out.push((ce, l64 * l64));
            }
            out
        })
        .collect();
    let mut sums = CrossEntropySums {
        cross_entropy: 0.0,
        z: 0.0,
    };
    for (ce, z) in per_row {
        sums.cross_entropy += ce;
        sums.z += z;
    }
    sums
}

/// `sum(x^2)` in f64 over fixed blocks, partial sums added in block order.
pub fn sum_squares<F: Real>(x: &[F]) -> f64 {
    let partials: Vec<f64> = x
        .par_chunks(NORM_BLOCK)
        .map(|b| b.iter().map(|v| v.to_f64() * v.to_f64()).sum::<f64>())
        .collect();
    partials.iter().sum()
}

/// AdamW, elementwise: `g' = grad_scale g`, `m = b1 m + (1-b1) g'`, `v = b2 v + (1-b2) g'^2`,
/// `p -= lr (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd p)`.
pub fn adamw<F: Real>(p: &mut [F], g: &[F], m: &mut [F], v: &mut [F], hp: &AdamW) {
    let t = hp.step.min(i32::MAX as u64) as i32;
    let bc1 = F::from_f64(1.0 / (1.0 - hp.beta1.powi(t)));
    let bc2 = F::from_f64(1.0 / (1.0 - hp.beta2.powi(t)));
    let (b1, b2) = (F::from_f64(hp.beta1), F::from_f64(hp.beta2));
    let (lr, eps, wd, gs) = (
        F::from_f64(hp.lr),
        F::from_f64(hp.eps),
        F::from_f64(hp.weight_decay),
        F::from_f64(hp.grad_scale),
    );
    p.par_chunks_mut(NORM_BLOCK)
        .zip(g.par_chunks(NORM_BLOCK))
        .zip(m.par_chunks_mut(NORM_BLOCK))
        .zip(v.par_chunks_mut(NORM_BLOCK))
        .for_each(|(((pb, gb), mb), vb)| {
            for i in 0..pb.len() {
                let gi = gb[i] * gs;
                mb[i] = b1 * mb[i] + (F::ONE - b1) * gi;
                vb[i] = b2 * vb[i] + (F::ONE - b2) * gi * gi;
                let mh = mb[i] * bc1;
                let vh = vb[i] * bc2;
                pb[i] -= lr * (mh / (vh.sqrt() + eps) + wd * pb[i]);
            }
        });
}
