//! CUDA launchers of `kernels/permute.cu`: the deterministic counting sort of routing
//! assignments by expert (three launches: count per chunk, scan, scatter), and dispatch,
//! forward and backward.
//!
//! Shapes: `A = N K` assignments, `E` experts, `S` kept slots, `C` channels. The host reads
//! back only each expert's load and kept rows (the grouped matmuls' shapes).
//! Not here: the top-k choice ([`super::topk`]) and the combine ([`super::combine`]).

use cudarc::driver::LaunchConfig;

use super::super::device::{CudaBackend, CudaBuf, CudaIds, blocks_of, grid_for, launch};
use crate::backend::Routing;

/// Assignments per chunk of the counting sort (the kernel's `chunk`).
const SORT_CHUNK: usize = 1024;

/// Assignments in expert order (see [`crate::backend::Routing`] for each field).
pub(super) struct Sorted {
    /// `[A]` slot per choice or `DROPPED`.
    pub token_slot: CudaIds,
    /// `[S]` assignment per slot.
    pub slot_assignment: CudaIds,
    /// Kept rows per expert.
    pub expert_rows: Vec<usize>,
    /// Assignments per expert before capacity.
    pub expert_load: Vec<u64>,
    /// Dropped assignments.
    pub dropped: u64,
}

/// The stable counting sort of `token_expert [A]` by expert over `e_` experts, with an
/// optional per-expert `capacity`; reads back each expert's load and kept rows.
pub(super) fn sort_by_expert(
    be: &CudaBackend,
    token_expert: &CudaIds,
    e_: usize,
    capacity: Option<usize>,
) -> Sorted {
    let a = token_expert.len;
    let nchunks = a.div_ceil(SORT_CHUNK).max(1);
    let mut counts = be.scratch::<u32>(nchunks * e_);
    let mut chunk_start = be.scratch::<u32>(nchunks * e_);
    // load | rows | offset, one buffer so the host reads load and rows in one copy.
    let mut meta = be.scratch::<u32>(3 * e_);
    let mut token_slot = be.scratch::<u32>(a);
    let mut slot_assignment = be.scratch::<u32>(a);
    let cap = capacity.map_or(u32::MAX, |c| c.min(u32::MAX as usize) as u32);
    let ei = e_ as i32;
    let (a32, chunk, nc) = (a as u32, SORT_CHUNK as u32, nchunks as i32);
    be.op("permute", || {
        let shared_bytes = (4 * e_) as u32;
        let cfg = LaunchConfig {
            shared_mem_bytes: shared_bytes,
            ..blocks_of(nchunks, 256)
        };
        // E u32 counters in shared memory.
        launch!(
            be,
            "expert_count_chunks",
            cfg,
            [counts.get_mut()?, token_expert.get()?, &a32, &ei, &chunk]
        )?;
        {
            let m = meta.get_mut()?;
            let (mut load, mut rest) = m.split_at_mut(e_);
            let (mut rows, mut offset) = rest.split_at_mut(e_);
            // One block.
            launch!(
                be,
                "expert_scan",
                blocks_of(1, 256),
                [
                    chunk_start.get_mut()?,
                    &mut load,
                    &mut rows,
                    &mut offset,
                    counts.get()?,
                    &nc,
                    &ei,
                    &cap
                ]
            )?;
        }
        let m = meta.get()?;
        let (rows, offset) = (m.slice(e_..2 * e_), m.slice(2 * e_..3 * e_));
        let cfg = LaunchConfig {
            shared_mem_bytes: shared_bytes,
            ..blocks_of(nchunks, 1)
        };
        // One serial thread per chunk.
        launch!(
            be,
            "expert_scatter",
            cfg,
            [
                token_slot.get_mut()?,
                slot_assignment.get_mut()?,
                token_expert.get()?,
                chunk_start.get()?,
                &rows,
                &offset,
                &a32,
                &ei,
                &chunk
            ]
        )?;
        Ok(())
    });
    let host = be.download_any(&meta);
    let expert_load: Vec<u64> = host.iter().take(e_).map(|&x| x as u64).collect();
    let expert_rows: Vec<usize> = host.iter().skip(e_).take(e_).map(|&x| x as usize).collect();
    let kept: usize = expert_rows.iter().sum();
    slot_assignment.len = kept.min(a);
    Sorted {
        token_slot,
        slot_assignment,
        expert_rows,
        expert_load,
        dropped: (a - kept.min(a)) as u64,
    }
}

/// The launcher of [`Backend::dispatch_fwd`](crate::backend::Backend::dispatch_fwd).
pub(super) fn dispatch_fwd(
    be: &CudaBackend,
    xs: &mut CudaBuf,
    x: &CudaBuf,
    routing: &Routing<CudaBackend>,
    c: usize,
) {
    let slots = routing.slot_assignment.len as u64;
    let (ki, ci) = (routing.top_k as i32, c as i32);
    be.op("dispatch_fwd", || {
        if slots == 0 {
            return Ok(());
        }
        launch!(
            be,
            "dispatch_fwd_f32",
            grid_for(slots as usize * c),
            [
                xs.get_mut()?,
                x.get()?,
                routing.slot_assignment.get()?,
                &slots,
                &ki,
                &ci
            ]
        )?;
        Ok(())
    });
}

/// The launcher of [`Backend::dispatch_bwd`](crate::backend::Backend::dispatch_bwd).
pub(super) fn dispatch_bwd(
    be: &CudaBackend,
    dx: &mut CudaBuf,
    dxs: &CudaBuf,
    routing: &Routing<CudaBackend>,
    c: usize,
) {
    let n = dx.len / c.max(1);
    let (ni, ki, ci, total) = (n as i32, routing.top_k as i32, c as i32, dx.len);
    be.op("dispatch_bwd", || {
        launch!(
            be,
            "dispatch_bwd_f32",
            grid_for(total),
            [
                dx.get_mut()?,
                dxs.get()?,
                routing.token_slot.get()?,
                &ni,
                &ki,
                &ci
            ]
        )?;
        Ok(())
    });
}
