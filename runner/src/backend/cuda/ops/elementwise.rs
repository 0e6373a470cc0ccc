//! CUDA launchers of `kernels/elementwise.cu`: `a += b` and the row broadcast add.
//!
//! One thread per element (1-D grid of 256-thread blocks), no reductions: every result is
//! bitwise the CPU reference's (`cpu/elementwise.rs`). Not here: sums across elements
//! ([`super::reduce`]).

use super::super::device::{CudaBackend, CudaBuf, grid_for, launch};
use crate::backend::Backend;

/// The launcher of [`Backend::add_assign`].
pub(super) fn add_assign(be: &CudaBackend, a: &mut CudaBuf, b: &CudaBuf) {
    let n = a.len as u64;
    be.op("add_assign", || {
        launch!(
            be,
            "add_assign_f32",
            grid_for(n as usize),
            [a.get_mut()?, b.get()?, &n]
        )?;
        Ok(())
    });
}

/// The launcher of [`Backend::add_row_broadcast`].
pub(super) fn add_row_broadcast(be: &CudaBackend, buf: &mut CudaBuf, row: &[f32]) {
    let rowb = be.upload(row);
    let (n, w) = (buf.len as u64, row.len() as i32);
    be.op("add_row_broadcast", || {
        launch!(
            be,
            "add_row_broadcast_f32",
            grid_for(n as usize),
            [buf.get_mut()?, rowb.get()?, &n, &w]
        )?;
        Ok(())
    });
}
