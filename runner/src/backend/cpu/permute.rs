//! CPU reference kernels: the stable sort of routing assignments by expert (with an optional
//! capacity), and dispatch (gather tokens into expert order), forward and backward.
//!
//! Shapes: `N` tokens, `K` choices, `A = N*K` assignments (`a = n*K + j`), `E` experts, `S` kept
//! slots, `C` channels; `token_expert, token_slot [A]`, `slot_assignment [S]`, `x, dx [N, C]`,
//! `xs, dxs [S, C]`. Dispatch is dropless by default: every assignment gets a row of the sorted
//! buffer, so the grouped matmuls see exactly the tokens routed to each expert.
//! Not here: the choice of experts ([`super::topk`]) and the weighted sum back ([`super::combine`]).

use rayon::prelude::*;

use super::{CpuBackend, ROW_BLOCK};
use crate::backend::{DROPPED, Routing};
use crate::scalar::Real;

/// Assignments in expert order (see [`crate::backend::Routing`] for each field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sorted {
    /// `[A]` slot per choice or [`DROPPED`].
    pub token_slot: Vec<u32>,
    /// `[S]` assignment per slot.
    pub slot_assignment: Vec<u32>,
    /// Kept rows per expert.
    pub expert_rows: Vec<usize>,
    /// Assignments per expert before capacity.
    pub expert_load: Vec<u64>,
    /// Dropped assignments.
    pub dropped: u64,
}

/// Stable counting sort of the assignments `a = n*K + j` by expert (ascending `a` within an
/// expert), keeping at most `capacity` per expert (later assignments in token order drop).
pub fn sort_by_expert(token_expert: &[u32], e: usize, capacity: Option<usize>) -> Sorted {
    // Stable counting sort by expert over assignments a = n*K + j in ascending order.
    let mut expert_load = vec![0u64; e];
    for &x in token_expert {
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
    let mut token_slot = vec![DROPPED; token_expert.len()];
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
    Sorted {
        token_slot,
        slot_assignment,
        expert_rows,
        expert_load,
        dropped,
    }
}

/// Dispatch: `xs[s, :] = x[slot_assignment[s] / K, :]`.
pub fn dispatch_fwd<F: Real>(xs: &mut [F], x: &[F], routing: &Routing<CpuBackend<F>>, c: usize) {
    let (slot_assignment, k) = (&routing.slot_assignment, routing.top_k);
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
pub fn dispatch_bwd<F: Real>(dx: &mut [F], dxs: &[F], routing: &Routing<CpuBackend<F>>, c: usize) {
    let (token_slot, k) = (&routing.token_slot, routing.top_k);
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
