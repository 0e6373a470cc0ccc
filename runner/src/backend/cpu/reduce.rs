//! CPU reference kernel: the squared norm of a buffer (grad and parameter norms, clipping).
//!
//! Summed in f64 over fixed blocks of [`NORM_BLOCK`] elements, the block sums added in block
//! order, so the result does not depend on the thread count. Not here: the clipping policy
//! (the trainer).

use rayon::prelude::*;

use super::NORM_BLOCK;
use crate::scalar::Real;

/// `sum(x^2)` in f64 over fixed blocks, partial sums added in block order.
pub fn sum_squares<F: Real>(x: &[F]) -> f64 {
    let partials: Vec<f64> = x
        .par_chunks(NORM_BLOCK)
        .map(|b| b.iter().map(|v| v.to_f64() * v.to_f64()).sum::<f64>())
        .collect();
    partials.iter().sum()
}
