//! Deterministic strided GEMM for the CPU backend, on top of the `gemm` crate.
//!
//! `C[m, n] (+)= A[m, k] B[k, n]` with arbitrary element strides for A and B and a row-major C.
//! The output is cut into fixed tiles of [`TILE_M`] x [`TILE_N`] (a function of the shape
//! only, never of the thread count); each tile is one single-threaded `gemm` call
//! (`Parallelism::None`), and tiles run in parallel on the current rayon pool. A tile's
//! arithmetic (its k-blocking, its microkernel) depends only on the tile's shape, and no two
//! tiles share an output element, so the result is bitwise the same for 1 or 64 threads.
//!
//! The model's (grouped) linear layers are built on it here: group `g` multiplies the next
//! `rows[g]` rows by weight matrix `first + g` of a `[G, out, in]` tensor, one `gemm_into` per
//! group, tiles of a group in parallel.
//!
//! This is not a general BLAS: no alpha/beta beyond "overwrite or accumulate", row-major C only.

use gemm::Parallelism;
use rayon::prelude::*;

use crate::backend::{Accumulate, Groups};
use crate::scalar::Real;

/// Output rows per tile.
pub const TILE_M: usize = 64;
/// Output columns per tile.
pub const TILE_N: usize = 256;

/// A strided read-only matrix operand: element `(i, j)` is at `data[i * rs + j * cs]`.
#[derive(Debug, Clone, Copy)]
pub struct Mat<'a, F> {
    /// Backing storage.
    pub data: &'a [F],
    /// Row stride in elements.
    pub rs: usize,
    /// Column stride in elements.
    pub cs: usize,
}

impl<'a, F> Mat<'a, F> {
    /// Row-major `[rows, cols]` stored contiguously (`cols` is the row stride).
    pub fn rows(data: &'a [F], cols: usize) -> Self {
        Self {
            data,
            rs: cols,
            cs: 1,
        }
    }
    /// The transpose of a row-major `[rows, cols]` matrix, seen as `[cols, rows]`.
    pub fn transposed(data: &'a [F], cols: usize) -> Self {
        Self {
            data,
            rs: 1,
            cs: cols,
        }
    }
    fn max_index(&self, rows: usize, cols: usize) -> usize {
        (rows - 1) * self.rs + (cols - 1) * self.cs
    }
}

/// The row-major output `C`: element `(i, j)` is at `data[i * ld + j]`.
#[derive(Debug)]
pub struct MatMut<'a, F> {
    /// Backing storage (from `C[0, 0]` on).
    pub data: &'a mut [F],
    /// Row stride in elements (`ldc`).
    pub ld: usize,
}

impl<'a, F> MatMut<'a, F> {
    /// Row-major storage with row stride `ld`.
    pub fn rows(data: &'a mut [F], ld: usize) -> Self {
        Self { data, ld }
    }
}

/// The product's shape: `C[m, n] (+)= A[m, k] B[k, n]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B (the summed dimension).
    pub k: usize,
}

/// Where a product's tiles run (the result is the same either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiles {
    /// In parallel on the current rayon pool (the model's linear layers).
    Parallel,
    /// One after another on this thread (inside an already parallel loop, e.g. attention's
    /// per-head products).
    Serial,
}

/// A raw output pointer shared by tiles that write disjoint elements.
#[derive(Clone, Copy)]
struct OutPtr<F>(*mut F);
// SAFETY: tiles write disjoint index sets of one live `&mut [F]` (see `gemm_into`), so sending
// the pointer to worker threads cannot create overlapping writes.
unsafe impl<F: Send> Send for OutPtr<F> {}
unsafe impl<F: Send> Sync for OutPtr<F> {}

/// `c[i*ldc + j] (+)= sum_p a(i, p) b(p, j)` for `i < m`, `j < n`, tiled.
pub fn gemm_into<F: Real>(
    shape: GemmShape,
    c: MatMut<'_, F>,
    a: Mat<'_, F>,
    b: Mat<'_, F>,
    accumulate: Accumulate,
    tiles: Tiles,
) {
    let GemmShape { m, n, k } = shape;
    let (c, ldc) = (c.data, c.ld);
    let accumulate = accumulate == Accumulate::Add;
    if m == 0 || n == 0 {
        return;
    }
    assert!((m - 1) * ldc + n <= c.len(), "gemm: C too small");
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                c[i * ldc..i * ldc + n].fill(F::ZERO);
            }
        }
        return;
    }
    assert!(a.max_index(m, k) < a.data.len(), "gemm: A too small");
    assert!(b.max_index(k, n) < b.data.len(), "gemm: B too small");
    let tiles_m = m.div_ceil(TILE_M);
    let tiles_n = n.div_ceil(TILE_N);
    let out = OutPtr(c.as_mut_ptr());
    let tile = move |t: usize| {
        let (ti, tj) = (t / tiles_n, t % tiles_n);
        let (i0, j0) = (ti * TILE_M, tj * TILE_N);
        let (mm, nn) = (TILE_M.min(m - i0), TILE_N.min(n - j0));
        let out = out;
        // SAFETY: all indices were bounds-checked above for the whole product; this tile
        // reads A rows i0..i0+mm, B columns j0..j0+nn and writes only C[i0.., j0..] of its own
        // tile, disjoint from every other tile's.
        unsafe {
            gemm::gemm(
                mm,
                nn,
                k,
                out.0.add(i0 * ldc + j0),
                1,
                ldc as isize,
                accumulate,
                a.data.as_ptr().add(i0 * a.rs),
                a.cs as isize,
                a.rs as isize,
                b.data.as_ptr().add(j0 * b.cs),
                b.cs as isize,
                b.rs as isize,
                F::ONE,
                F::ONE,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    };
    let count = tiles_m * tiles_n;
    if tiles == Tiles::Parallel && count > 1 {
        (0..count).into_par_iter().for_each(tile);
    } else {
        (0..count).for_each(tile);
    }
}

/// Linear forward: `out[rows_g, :] = inp[rows_g, :] @ W[first+g]^T`; inp `[R, in]`,
/// W `[G, out, in]`, out `[R, out]`.
pub fn linear_fwd<F: Real>(out: &mut [F], inp: &[F], w: &[F], g: &Groups) {
    let (ind, outd) = (g.in_dim, g.out_dim);
    let mut r0 = 0;
    for (gi, &rows) in g.rows.iter().enumerate() {
        let wo = (g.first + gi) * outd * ind;
        gemm_into(
            GemmShape {
                m: rows,
                n: outd,
                k: ind,
            },
            MatMut::rows(&mut out[r0 * outd..], outd),
            Mat::rows(&inp[r0 * ind..], ind),
            Mat::transposed(&w[wo..wo + outd * ind], ind),
            Accumulate::Overwrite,
            Tiles::Parallel,
        );
        r0 += rows;
    }
}

/// Linear backward to the input: `dinp[rows_g, :] (+)= dout[rows_g, :] @ W[first+g]`.
pub fn linear_bwd_data<F: Real>(
    dinp: &mut [F],
    dout: &[F],
    w: &[F],
    g: &Groups,
    accumulate: Accumulate,
) {
    let (ind, outd) = (g.in_dim, g.out_dim);
    let mut r0 = 0;
    for (gi, &rows) in g.rows.iter().enumerate() {
        let wo = (g.first + gi) * outd * ind;
        gemm_into(
            GemmShape {
                m: rows,
                n: ind,
                k: outd,
            },
            MatMut::rows(&mut dinp[r0 * ind..], ind),
            Mat::rows(&dout[r0 * outd..], outd),
            Mat::rows(&w[wo..wo + outd * ind], ind),
            accumulate,
            Tiles::Parallel,
        );
        r0 += rows;
    }
}

/// Linear backward to the weights: `dW[first+g] += dout[rows_g, :]^T @ inp[rows_g, :]`
/// (an empty group leaves its matrix as it is).
pub fn linear_bwd_weight<F: Real>(dw: &mut [F], dout: &[F], inp: &[F], g: &Groups) {
    let (ind, outd) = (g.in_dim, g.out_dim);
    let mut r0 = 0;
    for (gi, &rows) in g.rows.iter().enumerate() {
        let wo = (g.first + gi) * outd * ind;
        if rows > 0 {
            gemm_into(
                GemmShape {
                    m: outd,
                    n: ind,
                    k: rows,
                },
                MatMut::rows(&mut dw[wo..wo + outd * ind], ind),
                Mat::transposed(&dout[r0 * outd..r0 * outd + rows * outd], outd),
                Mat::rows(&inp[r0 * ind..r0 * ind + rows * ind], ind),
                Accumulate::Add,
                Tiles::Parallel,
            );
        }
        r0 += rows;
    }
}
