//! Row-major matmuls on cuBLAS (column-major): the model's (grouped) linear layers and
//! attention's per-head strided-batched products.
//!
//! The transpose trick: a row-major `[r, c]` matrix in memory *is* the column-major `[c, r]`
//! matrix, its transpose, with leading dimension `c`. So a row-major product
//! `C[m, n] = A[m, k] B[k, n]` is computed as the column-major `C^T = B^T A^T`: call cuBLAS with
//! the operands swapped (B first), `m' = n`, `n' = m`, and each operand's row length as its
//! leading dimension. A row-major operand used transposed (`W^T` in `x W^T`) becomes
//! `CUBLAS_OP_T` on the swapped call. Every call below states its row-major meaning and the
//! column-major call it becomes.
//!
//! f32 in, f32 accumulate, default math mode (no TF32), so results are true-f32 products like
//! the CPU reference's. Not here: the kernels between matmuls.

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::CudaSlice;

use crate::backend::{Accumulate, AttnDims, Groups};

const N: cudarc::cublas::sys::cublasOperation_t = CUBLAS_OP_N;
const T: cudarc::cublas::sys::cublasOperation_t = CUBLAS_OP_T;

fn i(x: usize) -> Result<i32, String> {
    i32::try_from(x).map_err(|_| format!("matrix dimension {x} exceeds cuBLAS's i32 range"))
}

/// `out[rows_g, :] = inp[rows_g, :] @ W[first+g]^T` per group; inp `[R, I]`, W `[G, O, I]`,
/// out `[R, O]`. Column-major per group: `out^T[O, r] = op_T(W^T_cm[I, O]) inp^T_cm[I, r]`, i.e.
/// `gemm(T, N, m=O, n=r, k=I, A=W lda=I, B=inp ldb=I, C=out ldc=O)`.
pub fn linear_fwd(
    blas: &CudaBlas,
    out: &mut CudaSlice<f32>,
    inp: &CudaSlice<f32>,
    w: &CudaSlice<f32>,
    g: &Groups,
) -> Result<(), String> {
    let (id, od) = (g.in_dim, g.out_dim);
    let mut r0 = 0;
    for (gi, &rows) in g.rows.iter().enumerate() {
        if rows > 0 {
            let wo = (g.first + gi) * od * id;
            let cfg = GemmConfig {
                transa: T,
                transb: N,
                m: i(od)?,
                n: i(rows)?,
                k: i(id)?,
                alpha: 1.0f32,
                lda: i(id)?,
                ldb: i(id)?,
                beta: 0.0f32,
                ldc: i(od)?,
            };
            let a = w.slice(wo..wo + od * id);
            let b = inp.slice(r0 * id..(r0 + rows) * id);
            let mut c = out.slice_mut(r0 * od..(r0 + rows) * od);
            // SAFETY: the views cover exactly the m x k, k x n and m x n operands above.
            unsafe { blas.gemm(cfg, &a, &b, &mut c) }.map_err(|e| format!("cublasSgemm: {e:?}"))?;
        }
        r0 += rows;
    }
    Ok(())
}

/// `dinp[rows_g, :] (+)= dout[rows_g, :] @ W[first+g]`; dout `[R, O]`, dinp `[R, I]`.
/// Column-major: `dinp^T[I, r] = W^T_cm[I, O] dout^T_cm[O, r]`, i.e.
/// `gemm(N, N, m=I, n=r, k=O, A=W lda=I, B=dout ldb=O, C=dinp ldc=I, beta=accumulate)`.
pub fn linear_bwd_data(
    blas: &CudaBlas,
    dinp: &mut CudaSlice<f32>,
    dout: &CudaSlice<f32>,
    w: &CudaSlice<f32>,
    g: &Groups,
    accumulate: Accumulate,
) -> Result<(), String> {
    let (id, od) = (g.in_dim, g.out_dim);
    let mut r0 = 0;
    for (gi, &rows) in g.rows.iter().enumerate() {
        if rows > 0 {
            let wo = (g.first + gi) * od * id;
            let cfg = GemmConfig {
                transa: N,
                transb: N,
                m: i(id)?,
                n: i(rows)?,
                k: i(od)?,
                alpha: 1.0f32,
                lda: i(id)?,
                ldb: i(od)?,
                beta: match accumulate {
                    Accumulate::Overwrite => 0.0,
                    Accumulate::Add => 1.0,
                },
                ldc: i(id)?,
            };
            let a = w.slice(wo..wo + od * id);
            let b = dout.slice(r0 * od..(r0 + rows) * od);
            let mut c = dinp.slice_mut(r0 * id..(r0 + rows) * id);
            // SAFETY: views sized exactly as the operands.
            unsafe { blas.gemm(cfg, &a, &b, &mut c) }.map_err(|e| format!("cublasSgemm: {e:?}"))?;
        }
        r0 += rows;
    }
    Ok(())
}

/// `dW[first+g] += dout[rows_g, :]^T @ inp[rows_g, :]`; dW `[O, I]` per group.
/// Column-major: `dW^T[I, O] += inp^T_cm[I, r] op_T(dout^T_cm[O, r])`, i.e.
/// `gemm(N, T, m=I, n=O, k=r, A=inp lda=I, B=dout ldb=O, C=dW ldc=I, beta=1)`.
pub fn linear_bwd_weight(
    blas: &CudaBlas,
    dw: &mut CudaSlice<f32>,
    dout: &CudaSlice<f32>,
    inp: &CudaSlice<f32>,
    g: &Groups,
) -> Result<(), String> {
    let (id, od) = (g.in_dim, g.out_dim);
    let mut r0 = 0;
    for (gi, &rows) in g.rows.iter().enumerate() {
        if rows > 0 {
            let wo = (g.first + gi) * od * id;
            let cfg = GemmConfig {
                transa: N,
                transb: T,
                m: i(id)?,
                n: i(od)?,
                k: i(rows)?,
                alpha: 1.0f32,
                lda: i(id)?,
                ldb: i(od)?,
                beta: 1.0f32,
                ldc: i(id)?,
            };
            let a = inp.slice(r0 * id..(r0 + rows) * id);
            let b = dout.slice(r0 * od..(r0 + rows) * od);
            let mut c = dw.slice_mut(wo..wo + od * id);
            // SAFETY: views sized exactly as the operands.
            unsafe { blas.gemm(cfg, &a, &b, &mut c) }.map_err(|e| format!("cublasSgemm: {e:?}"))?;
        }
        r0 += rows;
    }
    Ok(())
}

/// Which operand of a per-head product is used transposed, in row-major terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadProduct {
    /// `C[T, T] = X[T, D] Y[T, D]^T` (scores `q k^T`, `dP = dout v^T`).
    ABt,
    /// `C[T, D] = X[T, T] Y[T, D]` (`out = P v`, `dq = dS k`).
    AB,
    /// `C[T, D] = X[T, T]^T Y[T, D]` (`dv = P^T dout`, `dk = dS^T q`).
    AtB,
}

/// One row-major product per head over the `bh = B H` heads of `dims` stored back to back,
/// with `t` positions and head size `d`; overwrites `c`.
/// - `ABt`: `gemm(T, N, m=t, n=t, k=d, A=y lda=d, B=x ldb=d, C ldc=t)`;
/// - `AB`:  `gemm(N, N, m=d, n=t, k=t, A=y lda=d, B=x ldb=t, C ldc=d)`;
/// - `AtB`: `gemm(N, T, m=d, n=t, k=t, A=y lda=d, B=x ldb=t, C ldc=d)`.
pub fn per_head(
    blas: &CudaBlas,
    kind: HeadProduct,
    c: &mut CudaSlice<f32>,
    x: &CudaSlice<f32>,
    y: &CudaSlice<f32>,
    dims: AttnDims,
) -> Result<(), String> {
    let AttnDims { b, t, h, d } = dims;
    let bh = b * h;
    let (tt, dd) = (i(t)?, i(d)?);
    let (transa, transb, m, n, k, lda, ldb, ldc, sx, sy, sc) = match kind {
        HeadProduct::ABt => (T, N, tt, tt, dd, dd, dd, tt, t * d, t * d, t * t),
        HeadProduct::AB => (N, N, dd, tt, tt, dd, tt, dd, t * t, t * d, t * d),
        HeadProduct::AtB => (N, T, dd, tt, tt, dd, tt, dd, t * t, t * d, t * d),
    };
    let cfg = StridedBatchedConfig {
        gemm: GemmConfig {
            transa,
            transb,
            m,
            n,
            k,
            alpha: 1.0f32,
            lda,
            ldb,
            beta: 0.0f32,
            ldc,
        },
        batch_size: i(bh)?,
        stride_a: sy as i64,
        stride_b: sx as i64,
        stride_c: sc as i64,
    };
    let a = y.slice(0..bh * sy);
    let b = x.slice(0..bh * sx);
    let mut cv = c.slice_mut(0..bh * sc);
    // SAFETY: each view covers `bh` back-to-back operands of the strides above.
    unsafe { blas.gemm_strided_batched(cfg, &a, &b, &mut cv) }
        .map_err(|e| format!("cublasSgemmStridedBatched: {e:?}"))
}
