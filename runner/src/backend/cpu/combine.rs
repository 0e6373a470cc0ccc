//! CPU reference kernels: the MoE combine (each token's K expert outputs summed with the routing
//! weights), forward and backward.
//!
//! Shapes: `N` tokens, `K` choices, `S` slots, `C` channels; `y, dy [S, C]`, `out, dout [N, C]`,
//! `weights, dweights [N*K]`. Combine gathers each token's K slots and sums them in the order
//! j = 0..K — no scatter, no float atomics. Not here: dispatch ([`super::permute`]).

use rayon::prelude::*;

use super::{CpuBackend, ROW_BLOCK};
use crate::backend::{Accumulate, DROPPED, Routing};
use crate::scalar::Real;

/// Combine: `out[n, :] (+)= sum_{j=0..K} w[n*K+j] y[token_slot[n*K+j], :]`, j ascending.
pub fn combine_fwd<F: Real>(
    out: &mut [F],
    y: &[F],
    routing: &Routing<CpuBackend<F>>,
    c: usize,
    accumulate: Accumulate,
) {
    let (weights, token_slot, k) = (&routing.weights, &routing.token_slot, routing.top_k);
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
pub fn combine_bwd<F: Real>(
    dy: &mut [F],
    dweights: &mut [F],
    dout: &[F],
    y: &[F],
    routing: &Routing<CpuBackend<F>>,
    c: usize,
) {
    let (weights, k) = (&routing.weights, routing.top_k);
    let (slot_assignment, token_slot) = (&routing.slot_assignment, &routing.token_slot);
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
