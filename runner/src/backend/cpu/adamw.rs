//! CPU reference kernel: one AdamW update, elementwise.
//!
//! Work is split into blocks of [`NORM_BLOCK`] elements; every element's update is independent.
//! Not here: the schedule, weight-decay choice per tensor or clipping (the trainer).

use rayon::prelude::*;

use super::NORM_BLOCK;
use crate::backend::AdamW;
use crate::scalar::Real;

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
