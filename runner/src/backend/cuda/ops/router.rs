//! CUDA launchers of `kernels/router.cu`: router scores (softmax or sigmoid), the router
//! z-loss, and the backward of the renormalised combine weights.
//!
//! Shapes: `N` tokens, `E` experts, `K` choices. One thread per token row (E is small); the
//! z-loss's scalar is summed by [`super::reduce`]'s fixed tree.
//! Not here: the top-k choice ([`super::topk`]) and the sort by expert ([`super::permute`]).

use super::super::device::{CudaBackend, CudaBuf, grid_for, launch};
use super::reduce;
use crate::backend::{Routing, ScoreKind};

/// The launcher of [`Backend::router_scores_fwd`](crate::backend::Backend::router_scores_fwd).
pub(super) fn router_scores_fwd(
    be: &CudaBackend,
    scores: &mut CudaBuf,
    logits: &CudaBuf,
    e_: usize,
    kind: ScoreKind,
) {
    let n = logits.len / e_.max(1);
    let (ni, ei, total) = (n as i32, e_ as i32, logits.len as u64);
    be.op("router_scores_fwd", || {
        match kind {
            ScoreKind::Softmax => {
                // One thread per row.
                launch!(
                    be,
                    "router_softmax_fwd_f32",
                    grid_for(n),
                    [scores.get_mut()?, logits.get()?, &ni, &ei]
                )?;
            }
            ScoreKind::Sigmoid => {
                launch!(
                    be,
                    "router_sigmoid_fwd_f32",
                    grid_for(logits.len),
                    [scores.get_mut()?, logits.get()?, &total]
                )?;
            }
        }
        Ok(())
    });
}

/// The launcher of [`Backend::router_scores_bwd`](crate::backend::Backend::router_scores_bwd).
pub(super) fn router_scores_bwd(
    be: &CudaBackend,
    dlogits: &mut CudaBuf,
    dscores: &CudaBuf,
    scores: &CudaBuf,
    e_: usize,
    kind: ScoreKind,
) {
    let n = scores.len / e_.max(1);
    let (ni, ei, total) = (n as i32, e_ as i32, scores.len as u64);
    be.op("router_scores_bwd", || {
        match kind {
            ScoreKind::Softmax => {
                // One thread per row.
                launch!(
                    be,
                    "router_softmax_bwd_f32",
                    grid_for(n),
                    [dlogits.get_mut()?, dscores.get()?, scores.get()?, &ni, &ei]
                )?;
            }
            ScoreKind::Sigmoid => {
                launch!(
                    be,
                    "router_sigmoid_bwd_f32",
                    grid_for(scores.len),
                    [dlogits.get_mut()?, dscores.get()?, scores.get()?, &total]
                )?;
            }
        }
        Ok(())
    });
}

/// The launcher of [`Backend::router_z_loss`](crate::backend::Backend::router_z_loss).
pub(super) fn router_z_loss(
    be: &CudaBackend,
    dlogits: Option<&mut CudaBuf>,
    logits: &CudaBuf,
    e_: usize,
    coef_per_token: f64,
) -> f64 {
    let n = logits.len / e_.max(1);
    let mut lse = be.scratch::<f32>(n);
    let mut sq = be.scratch::<f64>(n);
    let mut out = be.scratch::<f64>(1);
    let (ni, ei, coef) = (n as i32, e_ as i32, coef_per_token as f32);
    be.op("router_z_loss", || {
        // One thread per row.
        launch!(
            be,
            "router_lse_f32",
            grid_for(n),
            [lse.get_mut()?, logits.get()?, &ni, &ei]
        )?;
        reduce::square_to_f64(be, &mut sq, &lse, n)?;
        reduce::sum_f64_into(be, &mut out, 0, &sq, n)?;
        if let Some(dl) = dlogits {
            // One thread per row.
            launch!(
                be,
                "router_z_grad_f32",
                grid_for(n),
                [dl.get_mut()?, logits.get()?, lse.get()?, &ni, &ei, &coef]
            )?;
        }
        Ok(())
    });
    be.download_any(&out).first().copied().unwrap_or(f64::NAN)
}

/// The launcher of [`Backend::route_weights_bwd`](crate::backend::Backend::route_weights_bwd).
pub(super) fn route_weights_bwd(
    be: &CudaBackend,
    dscores: &mut CudaBuf,
    dweights: &CudaBuf,
    scores: &CudaBuf,
    routing: &Routing<CudaBackend>,
    combine_scale: f64,
) {
    let e_ = routing.expert_rows.len().max(1);
    let n = scores.len / e_;
    let (ni, ei, ki, scale) = (
        n as i32,
        e_ as i32,
        routing.top_k as i32,
        combine_scale as f32,
    );
    be.op("route_weights_bwd", || {
        // One thread per token.
        launch!(
            be,
            "route_weights_bwd_f32",
            grid_for(n),
            [
                dscores.get_mut()?,
                dweights.get()?,
                scores.get()?,
                routing.token_expert.get()?,
                &ni,
                &ei,
                &ki,
                &scale
            ]
        )?;
        Ok(())
    });
}
