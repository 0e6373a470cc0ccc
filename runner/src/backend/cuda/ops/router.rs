//! CUDA launchers of `kernels/router.cu`: router scores (softmax or sigmoid), the router
//! z-loss, the backward of the renormalised combine weights, and the router statistics
//! reduced on the device (`E + 1` doubles copied back instead of the `N x E` scores).
//!
//! Shapes: `N` tokens, `E` experts, `K` choices. One thread per token row (E is small); the
//! z-loss's scalar is summed by [`super::reduce`]'s fixed tree.
//! Not here: the top-k choice ([`super::topk`]) and the sort by expert ([`super::permute`]).

use super::super::device::{CudaBackend, CudaBuf, blocks_of, grid_for, launch};
use super::reduce;
use crate::backend::{RouterStats, Routing, ScoreKind, cpu};

/// Rows per block of the statistics kernel (the kernel's `RS_ROWS`).
const RS_ROWS: usize = 256;

/// The launcher of [`Backend::router_stats`](crate::backend::Backend::router_stats): the mean
/// scores and entropy on the device; the quantile offsets (a per-expert sort over the tokens)
/// still on the host, from downloaded scores, when asked for.
pub(super) fn router_stats(
    be: &CudaBackend,
    scores: &CudaBuf,
    bias: &[f64],
    top_k: usize,
    quantile: bool,
) -> RouterStats {
    if quantile {
        return cpu::router::router_stats(&be.download_any(scores), bias, top_k, true);
    }
    let e_ = bias.len().max(1);
    let n = scores.len / e_;
    let nchunks = n.div_ceil(RS_ROWS).max(1);
    let mut part = be.scratch::<f64>(nchunks * (e_ + 1));
    let mut out = be.scratch::<f64>(e_ + 1);
    let (ni, ei, nc) = (n as i32, e_ as i32, nchunks as i32);
    be.op("router_stats", || {
        // One block of RS_ROWS threads per chunk of rows.
        launch!(
            be,
            "router_stats_partial",
            blocks_of(nchunks, RS_ROWS as u32),
            [part.get_mut()?, scores.get()?, &ni, &ei]
        )?;
        // One block: a thread per column.
        launch!(
            be,
            "router_stats_finish",
            blocks_of(1, 256),
            [out.get_mut()?, part.get()?, &nc, &ei]
        )?;
        Ok(())
    });
    let sums = be.download_any(&out);
    let nf = n.max(1) as f64;
    RouterStats {
        p_mean: sums[..e_].iter().map(|s| s / nf).collect(),
        entropy_mean: sums[e_] / nf,
        quantile_offset: None,
    }
}

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
