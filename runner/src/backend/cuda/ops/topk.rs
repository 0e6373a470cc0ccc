//! CUDA launcher of `kernels/topk.cu`: the top-k expert choice on biased scores, with the
//! renormalised combine weights from the unbiased scores.
//!
//! Shapes: `N` tokens, `E` experts, `K` choices. The bias (f64 on the host) is converted to
//! f32 as the CPU reference does. Not here: the sort by expert ([`super::permute`]).

use super::super::device::{CudaBackend, CudaBuf, CudaIds, grid_for, launch};
use crate::backend::Backend;

/// Each token's K choices (see [`crate::backend::Routing`] for the fields).
pub(super) struct Choices {
    /// `[N*K]` chosen experts, best first.
    pub token_expert: CudaIds,
    /// `[N*K]` combine weights.
    pub weights: CudaBuf,
}

/// Top-k of `scores + bias` per token and the renormalised combine weights, one thread per
/// token.
pub(super) fn topk_bias(
    be: &CudaBackend,
    scores: &CudaBuf,
    bias: &[f64],
    top_k: usize,
    combine_scale: f64,
) -> Choices {
    let e_ = bias.len().max(1);
    let n = scores.len / e_;
    let a = n * top_k;
    let bias_f: Vec<f32> = bias.iter().map(|&b| b as f32).collect();
    let bias_d = be.upload(&bias_f);
    let mut token_expert = be.scratch::<u32>(a);
    let mut weights = be.scratch::<f32>(a);
    let (ni, ei, ki, scale) = (n as i32, e_ as i32, top_k as i32, combine_scale as f32);
    be.op("topk", || {
        // One thread per token.
        launch!(
            be,
            "topk_bias_f32",
            grid_for(n),
            [
                token_expert.get_mut()?,
                weights.get_mut()?,
                scores.get()?,
                bias_d.get()?,
                &ni,
                &ei,
                &ki,
                &scale
            ]
        )?;
        Ok(())
    });
    Choices {
        token_expert,
        weights,
    }
}
