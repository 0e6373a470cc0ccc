//! CUDA launchers of `kernels/combine.cu`: the MoE combine, forward and backward.
//!
//! Shapes: `N` tokens, `K` choices, `S` slots, `C` channels. The forward gathers each token's
//! K slots in order j = 0..K (no scatter, no float atomics); the weight gradient is one warp
//! per assignment. Not here: dispatch ([`super::permute`]).

use super::super::device::{CudaBackend, CudaBuf, blocks_of, grid_for, launch};
use crate::backend::{Accumulate, Routing};

/// The launcher of [`Backend::combine_fwd`](crate::backend::Backend::combine_fwd).
pub(super) fn combine_fwd(
    be: &CudaBackend,
    out: &mut CudaBuf,
    y: &CudaBuf,
    routing: &Routing<CudaBackend>,
    c: usize,
    accumulate: Accumulate,
) {
    let n = out.len / c.max(1);
    let acc = (accumulate == Accumulate::Add) as i32;
    let (ni, ki, ci) = (n as i32, routing.top_k as i32, c as i32);
    let total = out.len;
    be.op("combine_fwd", || {
        launch!(
            be,
            "combine_fwd_f32",
            grid_for(total),
            [
                out.get_mut()?,
                y.get()?,
                routing.weights.get()?,
                routing.token_slot.get()?,
                &ni,
                &ki,
                &ci,
                &acc
            ]
        )?;
        Ok(())
    });
}

/// The launcher of [`Backend::combine_bwd`](crate::backend::Backend::combine_bwd).
pub(super) fn combine_bwd(
    be: &CudaBackend,
    dy: &mut CudaBuf,
    dweights: &mut CudaBuf,
    dout: &CudaBuf,
    y: &CudaBuf,
    routing: &Routing<CudaBackend>,
    c: usize,
) {
    let slots = routing.slot_assignment.len as u64;
    let assignments = routing.token_slot.len as u64;
    let (ki, ci) = (routing.top_k as i32, c as i32);
    be.op("combine_bwd", || {
        if slots > 0 {
            launch!(
                be,
                "combine_bwd_dy_f32",
                grid_for(slots as usize * c),
                [
                    dy.get_mut()?,
                    dout.get()?,
                    routing.weights.get()?,
                    routing.slot_assignment.get()?,
                    &slots,
                    &ki,
                    &ci
                ]
            )?;
        }
        // One warp per assignment, 8 warps per block.
        let blocks = (assignments as usize).div_ceil(8);
        // 256 threads = 8 warps per block.
        launch!(
            be,
            "combine_bwd_dw_f32",
            blocks_of(blocks, 256),
            [
                dweights.get_mut()?,
                dout.get()?,
                y.get()?,
                routing.token_slot.get()?,
                &assignments,
                &ki,
                &ci
            ]
        )?;
        Ok(())
    });
}
