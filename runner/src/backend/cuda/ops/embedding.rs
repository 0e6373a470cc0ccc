//! CUDA launchers of `kernels/embedding.cu`: token embedding, forward and backward.
//!
//! Shapes: `N` tokens, `C` channels, `V` vocab. The backward gives each thread one element
//! `dwte[v, c]` and walks the tokens in order (no float atomics), as the kernel's design note
//! explains. Not here: the lm_head (a cuBLAS matmul, [`super::gemm`]).

use cudarc::driver::LaunchConfig;

use super::super::device::{BLOCK, CudaBackend, CudaBuf, CudaIds, grid_for, launch};

/// The launcher of [`Backend::embedding_fwd`](crate::backend::Backend::embedding_fwd).
pub(super) fn embedding_fwd(
    be: &CudaBackend,
    out: &mut CudaBuf,
    wte: &CudaBuf,
    tokens: &CudaIds,
    c: usize,
) {
    let (n, ci) = (tokens.len as i32, c as i32);
    be.op("embedding_fwd", || {
        launch!(
            be,
            "embedding_fwd_f32",
            grid_for(tokens.len * c),
            [out.get_mut()?, wte.get()?, tokens.get()?, &n, &ci]
        )?;
        Ok(())
    });
}

/// The launcher of [`Backend::embedding_bwd`](crate::backend::Backend::embedding_bwd).
pub(super) fn embedding_bwd(
    be: &CudaBackend,
    dwte: &mut CudaBuf,
    dout: &CudaBuf,
    tokens: &CudaIds,
    c: usize,
) {
    let (n, ci) = (tokens.len as i32, c as i32);
    let v = (dwte.len / c.max(1)) as u32;
    be.op("embedding_bwd", || {
        let cfg = LaunchConfig {
            grid_dim: ((c as u32).div_ceil(BLOCK), v, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // Grid (ceil(C/256), V).
        launch!(
            be,
            "embedding_bwd_f32",
            cfg,
            [dwte.get_mut()?, dout.get()?, tokens.get()?, &n, &ci]
        )?;
        Ok(())
    });
}
