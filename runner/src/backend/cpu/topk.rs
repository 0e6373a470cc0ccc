//! CPU reference kernel: the top-k expert choice on biased scores, with the renormalised
//! combine weights from the unbiased scores.
//!
//! Shapes: `N` tokens, `E` experts, `K` choices; `scores [N, E]`, `bias [E]` (the balancing
//! state, f64 on the host, converted to `F` once); `token_expert, weights [N*K]`. Choice j of a
//! token is the greatest biased score not yet taken (ties to the lower index); its weights are
//! summed in the order j = 0..K. Not here: the sort by expert ([`super::permute`]).

use rayon::prelude::*;

use super::ROW_BLOCK;
use crate::scalar::Real;

/// Each token's K choices (see [`crate::backend::Routing`] for the fields).
#[derive(Debug, Clone, PartialEq)]
pub struct Choices<F> {
    /// `[N*K]` chosen experts, best first.
    pub token_expert: Vec<u32>,
    /// `[N*K]` combine weights.
    pub weights: Vec<F>,
}

/// Top-k on `scores + bias`, combine weights from the unbiased scores (renormalised over the K
/// choices, times `combine_scale`). Ties in the biased score go to the lower expert index.
pub fn topk_bias<F: Real>(
    scores: &[F],
    bias: &[f64],
    e: usize,
    k: usize,
    combine_scale: f64,
) -> Choices<F> {
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
    Choices {
        token_expert,
        weights,
    }
}
