//! CPU reference kernel: fused softmax cross-entropy with z-loss, forward and backward in one
//! pass over the logits (llm.c's in-place trick).
//!
//! Shapes: `N` rows, `V` vocab; `logits [N, V]`, `targets [N]`. Losses are per-row values
//! summed serially in row order, so they do not depend on the thread count.
//! Not here: the router z-loss ([`super::router`]), norms ([`super::reduce`]).

use rayon::prelude::*;

use super::ROW_BLOCK;
use crate::backend::CrossEntropySums;
use crate::scalar::Real;

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
