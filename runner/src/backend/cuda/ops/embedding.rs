//! CUDA launchers of `kernels/embedding.cu`: token embedding, forward and backward.
//!
//! Shapes: `N` tokens, `C` channels, `V` vocab. The backward sorts token positions by id
//! (stable radix passes) and lets one block add each run of equal ids, in position order, into
//! its row: no float atomics, no vocab-sized grid, `O(N C)` work, bitwise the CPU reference's
//! sums (the kernel's design note). Not here: the lm_head (a cuBLAS matmul, [`super::gemm`]).

use cudarc::driver::LaunchConfig;

use super::super::device::{BLOCK, CudaBackend, CudaBuf, CudaIds, blocks_of, grid_for, launch};

/// Positions per chunk of a radix pass (the kernels' `chunk`).
const SORT_CHUNK: usize = 1024;
/// Digit values per pass (8 bits; the kernels' `EMB_BINS`).
const BINS: usize = 256;

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

/// The launcher of [`Backend::embedding_bwd`](crate::backend::Backend::embedding_bwd): sort
/// the positions by token id (stable radix passes of 8 bits), then one block per sorted
/// position, the first of each run of equal ids adding the run into its row.
pub(super) fn embedding_bwd(
    be: &CudaBackend,
    dwte: &mut CudaBuf,
    dout: &CudaBuf,
    tokens: &CudaIds,
    c: usize,
) {
    let n = tokens.len;
    if n == 0 {
        return;
    }
    let v = dwte.len / c.max(1);
    let passes = radix_passes(v);
    let nchunks = n.div_ceil(SORT_CHUNK);
    let mut perm = [be.scratch::<u32>(n), be.scratch::<u32>(n)];
    let mut counts = be.scratch::<u32>(nchunks * BINS);
    let mut chunk_start = be.scratch::<u32>(nchunks * BINS);
    let (n32, ci, chunk, nc) = (n as u32, c as i32, SORT_CHUNK as u32, nchunks as i32);
    be.op("embedding_bwd", || {
        launch!(
            be,
            "embedding_sort_init",
            grid_for(n),
            [perm[0].get_mut()?, &n32]
        )?;
        for pass in 0..passes {
            let shift = 8 * pass as i32;
            // Passes alternate between the two permutation buffers.
            let [p0, p1] = &mut perm;
            let (pin, pout) = if pass % 2 == 0 {
                (&*p0, p1)
            } else {
                (&*p1, p0)
            };
            // One 256-thread block per chunk of positions.
            launch!(
                be,
                "embedding_digit_count",
                blocks_of(nchunks, 256),
                [
                    counts.get_mut()?,
                    tokens.get()?,
                    pin.get()?,
                    &n32,
                    &shift,
                    &chunk
                ]
            )?;
            // One block, a thread per digit.
            launch!(
                be,
                "embedding_digit_scan",
                blocks_of(1, BINS as u32),
                [chunk_start.get_mut()?, counts.get()?, &nc]
            )?;
            // One block per chunk; its thread 0 walks the chunk in order.
            launch!(
                be,
                "embedding_digit_scatter",
                blocks_of(nchunks, 256),
                [
                    pout.get_mut()?,
                    pin.get()?,
                    tokens.get()?,
                    chunk_start.get()?,
                    &n32,
                    &shift,
                    &chunk
                ]
            )?;
        }
        let sorted = &perm[passes % 2];
        // Grid N: one block per sorted position, threads over the C columns.
        launch!(
            be,
            "embedding_bwd_runs",
            LaunchConfig {
                grid_dim: (n32, 1, 1),
                block_dim: (BLOCK.min((c as u32).next_power_of_two().max(32)), 1, 1),
                shared_mem_bytes: 0,
            },
            [
                dwte.get_mut()?,
                dout.get()?,
                tokens.get()?,
                sorted.get()?,
                &n32,
                &ci
            ]
        )?;
        Ok(())
    });
}

/// Radix-sort passes (8 bits of the id each) that order ids `0..v`.
fn radix_passes(v: usize) -> usize {
    let max_id = v.saturating_sub(1) as u64;
    let bits = 64 - max_id.leading_zeros() as usize;
    bits.div_ceil(8).max(1)
}

#[cfg(test)]
mod tests {
    use super::radix_passes;

    #[test]
    fn passes_cover_every_bit_of_the_largest_id() {
        assert_eq!(radix_passes(1), 1);
        assert_eq!(radix_passes(256), 1, "bytes: ids 0..=255, one pass");
        assert_eq!(radix_passes(257), 2);
        assert_eq!(radix_passes(65_536), 2);
        assert_eq!(radix_passes(70_000), 3);
        assert_eq!(radix_passes(1 << 24), 3);
        assert_eq!(radix_passes((1 << 24) + 1), 4);
    }
}
