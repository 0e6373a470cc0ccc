//! CPU reference kernels: the token embedding, forward and backward.
//!
//! Shapes: `N` tokens, `C` channels, `V` vocab; `wte [V, C]`, `out, dout [N, C]`,
//! `tokens [N]`. Not here: the lm_head (a `linear` layer, untied from `wte`).

use rayon::prelude::*;

use super::ROW_BLOCK;
use crate::scalar::Real;

/// Forward: `out[n, :] = wte[tokens[n], :]`. Tokens were checked `< V` by the data pipeline.
pub fn embedding_fwd<F: Real>(out: &mut [F], wte: &[F], tokens: &[u32], c: usize) {
    out.par_chunks_mut(c * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, o)| {
            for (r, row) in o.chunks_mut(c).enumerate() {
                let t = tokens[blk * ROW_BLOCK + r] as usize;
                row.copy_from_slice(&wte[t * c..(t + 1) * c]);
            }
        });
}

/// Backward: `dwte[tokens[n], :] += dout[n, :]`, n ascending (a scatter-add done serially so
/// repeated tokens always sum in the same order; it is O(N C), small next to the matmuls).
pub fn embedding_bwd<F: Real>(dwte: &mut [F], dout: &[F], tokens: &[u32], c: usize) {
    for (n, &t) in tokens.iter().enumerate() {
        let t = t as usize;
        let src = &dout[n * c..(n + 1) * c];
        for (d, s) in dwte[t * c..(t + 1) * c].iter_mut().zip(src) {
            *d += *s;
        }
    }
}
