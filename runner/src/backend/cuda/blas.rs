//! Row-major matmuls on cuBLAS (column-major): the model's (grouped) linear layers and
//! attention's per-head strided-batched products.
//!
//! The transpose trick: a row-major `[r, c]` matrix in memory *is* the column-major `[c, r]`
//! matrix, its transpose, with leading dimension `c`. So a row-major product
//! `C[m, n] = A[m, k] B[k, n]` is computed as the column-major `C^T = B^T A^T`: call cuBLAS with
//! the operands swapped (B first), `m' = n`, `n' = m`, and each operand's row length as its
//! leading dimension. A row-major operand used transposed (`W^T` in `x W^T`) becomes
//! `CUBLAS_OP_T` on the swapped call. Every builder below states its row-major meaning and the
//! column-major call it becomes.
//!
//! Linear layers are lists of [`Problem`]s (one per non-empty group) run by [`run`]: one
//! `cublasGemmEx` for a dense layer; for grouped (expert) layers one
//! `cublasGemmGroupedBatchedEx` call for all experts (CUDA >= 12.5), or one `cublasGemmEx` per
//! expert where the grouped call refuses the types (it is tried once per operand type and the
//! answer kept, [`Grouped::describe`]). Operands are f32 or bf16 ([`InType`]); outputs and
//! accumulation are always f32 (`CUBLAS_COMPUTE_32F`). The math mode is the handle's
//! (`device.rs`: pedantic f32, or f32 reductions for bf16). Not here: the kernels between
//! matmuls, or making the bf16 copies of operands (`ops/gemm.rs`).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::sys::{
    self as cb, cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cublasStatus_t,
    cudaDataType,
};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice};

use crate::backend::{Accumulate, AttnDims, Groups, WeightLayout};

const N: cublasOperation_t = CUBLAS_OP_N;
const T: cublasOperation_t = CUBLAS_OP_T;

fn i(x: usize) -> Result<i32, String> {
    i32::try_from(x).map_err(|_| format!("matrix dimension {x} exceeds cuBLAS's i32 range"))
}

/// The builders read weights as trained (`[G, out, in]`); this backend's
/// [`crate::backend::Backend::decode_layout`] is that one too, so no other layout reaches them.
fn trained_layout(g: &Groups) -> Result<(), String> {
    match g.layout {
        WeightLayout::OutIn => Ok(()),
        WeightLayout::Panels => Err(
            "the CUDA backend's linear layers read [out, in] weights (layout OutIn), not Panels"
                .into(),
        ),
    }
}

/// Element type of a product's A and B operands (C is always f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InType {
    /// f32 operands.
    F32,
    /// bf16 operands (copies made for the product), f32 accumulation.
    Bf16,
}

impl InType {
    fn cuda(self) -> cudaDataType {
        match self {
            InType::F32 => cudaDataType::CUDA_R_32F,
            InType::Bf16 => cudaDataType::CUDA_R_16BF,
        }
    }

    fn index(self) -> usize {
        match self {
            InType::F32 => 0,
            InType::Bf16 => 1,
        }
    }
}

/// A matmul operand in device memory: `base` is the address of logical element `first` (so a
/// bf16 copy of a sub-range keeps the buffer's element numbering), `bytes` per element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operand {
    /// Device address of element `first`.
    pub base: u64,
    /// Logical index of the element at `base`.
    pub first: usize,
    /// Bytes per element.
    pub bytes: u64,
}

impl Operand {
    /// Address of logical element `idx` (at or after `first`).
    fn at(&self, idx: usize) -> u64 {
        self.base + (idx - self.first) as u64 * self.bytes
    }
}

/// One column-major product `C = op(A) op(B) + beta C` (alpha 1) on device addresses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Problem {
    transa: cublasOperation_t,
    transb: cublasOperation_t,
    m: i32,
    n: i32,
    k: i32,
    a: u64,
    lda: i32,
    b: u64,
    ldb: i32,
    c: u64,
    ldc: i32,
    beta: f32,
}

/// `out[rows_g, :] = inp[rows_g, :] @ W[first+g]^T` per group; inp `[R, I]`, W `[G, O, I]`,
/// out `[R, O]` (f32). Column-major per group: `out^T[O, r] = op_T(W^T_cm[I, O]) inp^T_cm[I, r]`,
/// i.e. `gemm(T, N, m=O, n=r, k=I, A=W lda=I, B=inp ldb=I, C=out ldc=O)`.
pub fn linear_fwd_problems(
    g: &Groups,
    inp: Operand,
    w: Operand,
    out: Operand,
) -> Result<Vec<Problem>, String> {
    trained_layout(g)?;
    let (id, od) = (g.in_dim, g.out_dim);
    let mut v = Vec::with_capacity(g.rows.len());
    let mut r0 = 0;
    for (gi, &rows) in g.rows.iter().enumerate() {
        if rows > 0 {
            v.push(Problem {
                transa: T,
                transb: N,
                m: i(od)?,
                n: i(rows)?,
                k: i(id)?,
                a: w.at((g.first + gi) * od * id),
                lda: i(id)?,
                b: inp.at(r0 * id),
                ldb: i(id)?,
                c: out.at(r0 * od),
                ldc: i(od)?,
                beta: 0.0,
            });
        }
        r0 += rows;
    }
    Ok(v)
}

/// `dinp[rows_g, :] (+)= dout[rows_g, :] @ W[first+g]`; dout `[R, O]`, dinp `[R, I]` (f32).
/// Column-major: `dinp^T[I, r] = W^T_cm[I, O] dout^T_cm[O, r]`, i.e.
/// `gemm(N, N, m=I, n=r, k=O, A=W lda=I, B=dout ldb=O, C=dinp ldc=I, beta=accumulate)`.
pub fn linear_bwd_data_problems(
    g: &Groups,
    dout: Operand,
    w: Operand,
    dinp: Operand,
    accumulate: Accumulate,
) -> Result<Vec<Problem>, String> {
    trained_layout(g)?;
    let (id, od) = (g.in_dim, g.out_dim);
    let beta = match accumulate {
        Accumulate::Overwrite => 0.0,
        Accumulate::Add => 1.0,
    };
    let mut v = Vec::with_capacity(g.rows.len());
    let mut r0 = 0;
    for (gi, &rows) in g.rows.iter().enumerate() {
        if rows > 0 {
            v.push(Problem {
                transa: N,
                transb: N,
                m: i(id)?,
                n: i(rows)?,
                k: i(od)?,
                a: w.at((g.first + gi) * od * id),
                lda: i(id)?,
                b: dout.at(r0 * od),
                ldb: i(od)?,
                c: dinp.at(r0 * id),
                ldc: i(id)?,
                beta,
            });
        }
        r0 += rows;
    }
    Ok(v)
}

/// `dW[first+g] += dout[rows_g, :]^T @ inp[rows_g, :]`; dW `[O, I]` per group (f32).
/// Column-major: `dW^T[I, O] += inp^T_cm[I, r] op_T(dout^T_cm[O, r])`, i.e.
/// `gemm(N, T, m=I, n=O, k=r, A=inp lda=I, B=dout ldb=O, C=dW ldc=I, beta=1)`.
pub fn linear_bwd_weight_problems(
    g: &Groups,
    dout: Operand,
    inp: Operand,
    dw: Operand,
) -> Result<Vec<Problem>, String> {
    trained_layout(g)?;
    let (id, od) = (g.in_dim, g.out_dim);
    let mut v = Vec::with_capacity(g.rows.len());
    let mut r0 = 0;
    for (gi, &rows) in g.rows.iter().enumerate() {
        if rows > 0 {
            v.push(Problem {
                transa: N,
                transb: T,
                m: i(id)?,
                n: i(od)?,
                k: i(rows)?,
                a: inp.at(r0 * id),
                lda: i(id)?,
                b: dout.at(r0 * od),
                ldb: i(od)?,
                c: dw.at((g.first + gi) * od * id),
                ldc: i(id)?,
                beta: 1.0,
            });
        }
        r0 += rows;
    }
    Ok(v)
}

/// One `cublasGemmEx`: `ty` operands, f32 output, f32 compute.
fn gemm_ex(blas: &CudaBlas, p: &Problem, ty: InType) -> Result<(), String> {
    let alpha = 1.0f32;
    // SAFETY: the addresses come from live device buffers covering each operand (the builders
    // above derive them from the layer's shapes), the handle is on the backend's stream.
    let r = unsafe {
        cb::cublasGemmEx(
            *blas.handle(),
            p.transa,
            p.transb,
            p.m,
            p.n,
            p.k,
            &alpha as *const f32 as *const c_void,
            p.a as *const c_void,
            ty.cuda(),
            p.lda,
            p.b as *const c_void,
            ty.cuda(),
            p.ldb,
            &p.beta as *const f32 as *const c_void,
            p.c as *mut c_void,
            cudaDataType::CUDA_R_32F,
            p.ldc,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
        )
    };
    if r == cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!(
            "cublasGemmEx({ty:?}, m={} n={} k={}): {r:?}",
            p.m, p.n, p.k
        ))
    }
}

/// Device pointer arrays of one grouped call may hold this many problems; more run per expert.
const MAX_GROUPED: usize = 1024;
/// Staging slots for pointer arrays: writing a slot waits only for that slot's previous copy,
/// `RING` grouped calls ago, so the host rarely waits at all.
const RING: usize = 16;

/// Whether `cublasGemmGroupedBatchedEx` runs here, per operand type.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GroupedState {
    Untried,
    Works,
    Refused(String),
}

/// What grouped (expert) products need: pinned host staging and device slots for the
/// `A`, `B`, `C` pointer arrays, and what cuBLAS answered when the grouped call was tried.
pub struct Grouped {
    host: Vec<PinnedHostSlice<u64>>,
    dev: Vec<CudaSlice<u64>>,
    next: usize,
    state: [GroupedState; 2],
}

impl std::fmt::Debug for Grouped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grouped")
            .field("state", &self.state)
            .finish()
    }
}

impl Grouped {
    /// Allocates the staging ring on `stream`'s context.
    pub fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Result<Self, String> {
        let mut host = Vec::with_capacity(RING);
        let mut dev = Vec::with_capacity(RING);
        for _ in 0..RING {
            // SAFETY: the contents are written before any copy reads them (`stage`).
            let h = unsafe { ctx.alloc_pinned::<u64>(3 * MAX_GROUPED) }
                .map_err(|e| format!("pinned staging for grouped GEMM: {e:?}"))?;
            host.push(h);
            dev.push(
                stream
                    .alloc_zeros::<u64>(3 * MAX_GROUPED)
                    .map_err(|e| format!("device pointer arrays for grouped GEMM: {e:?}"))?,
            );
        }
        Ok(Self {
            host,
            dev,
            next: 0,
            state: [GroupedState::Untried, GroupedState::Untried],
        })
    }

    /// How grouped layers run, for the run record.
    pub fn describe(&self) -> String {
        let one = |s: &GroupedState| match s {
            GroupedState::Untried => "not used yet".to_string(),
            GroupedState::Works => "one cublasGemmGroupedBatchedEx call".to_string(),
            GroupedState::Refused(why) => format!("one cublasGemmEx per expert ({why})"),
        };
        format!("f32 {}; bf16 {}", one(&self.state[0]), one(&self.state[1]))
    }

    /// Copies the problems' A, B, C addresses into the next slot; returns its device address.
    fn stage(&mut self, stream: &Arc<CudaStream>, probs: &[Problem]) -> Result<u64, String> {
        let slot = self.next;
        self.next = (self.next + 1) % RING;
        let g = probs.len();
        {
            // Waits for this slot's previous copy (RING calls ago) to finish.
            let h = self.host[slot]
                .as_mut_slice()
                .map_err(|e| format!("pinned staging: {e:?}"))?;
            for (j, p) in probs.iter().enumerate() {
                h[j] = p.a;
                h[g + j] = p.b;
                h[2 * g + j] = p.c;
            }
        }
        stream
            .memcpy_htod(&self.host[slot], &mut self.dev[slot])
            .map_err(|e| format!("pointer arrays to the device: {e:?}"))?;
        let (ptr, _sync) = self.dev[slot].device_ptr(stream);
        Ok(ptr)
    }
}

/// One grouped call for all `probs`: `Ok(true)` when it ran, `Ok(false)` when cuBLAS refused
/// the arguments (not supported here: the caller runs them one by one).
fn gemm_grouped(
    blas: &CudaBlas,
    stream: &Arc<CudaStream>,
    grouped: &mut Grouped,
    probs: &[Problem],
    ty: InType,
) -> Result<bool, String> {
    let g = probs.len();
    let arrays = grouped.stage(stream, probs)?;
    let transa: Vec<cublasOperation_t> = probs.iter().map(|p| p.transa).collect();
    let transb: Vec<cublasOperation_t> = probs.iter().map(|p| p.transb).collect();
    let (m, n, k): (Vec<i32>, Vec<i32>, Vec<i32>) = (
        probs.iter().map(|p| p.m).collect(),
        probs.iter().map(|p| p.n).collect(),
        probs.iter().map(|p| p.k).collect(),
    );
    let (lda, ldb, ldc): (Vec<i32>, Vec<i32>, Vec<i32>) = (
        probs.iter().map(|p| p.lda).collect(),
        probs.iter().map(|p| p.ldb).collect(),
        probs.iter().map(|p| p.ldc).collect(),
    );
    let alpha = vec![1.0f32; g];
    let beta: Vec<f32> = probs.iter().map(|p| p.beta).collect();
    let sizes = vec![1i32; g];
    let w = 8 * g as u64;
    // SAFETY: every host array has `g` entries; the device pointer arrays (`arrays`: A, then
    // B, then C, `g` each) were copied on this stream just before, from live buffers' addresses.
    let r = unsafe {
        cb::cublasGemmGroupedBatchedEx(
            *blas.handle(),
            transa.as_ptr(),
            transb.as_ptr(),
            m.as_ptr(),
            n.as_ptr(),
            k.as_ptr(),
            alpha.as_ptr() as *const c_void,
            arrays as *const *const c_void,
            ty.cuda(),
            lda.as_ptr(),
            (arrays + w) as *const *const c_void,
            ty.cuda(),
            ldb.as_ptr(),
            beta.as_ptr() as *const c_void,
            (arrays + 2 * w) as *const *mut c_void,
            cudaDataType::CUDA_R_32F,
            ldc.as_ptr(),
            i(g)?,
            sizes.as_ptr(),
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
        )
    };
    match r {
        cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(true),
        cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED
        | cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE => {
            grouped.state[ty.index()] = GroupedState::Refused(format!("grouped call: {r:?}"));
            Ok(false)
        }
        other => Err(format!(
            "cublasGemmGroupedBatchedEx({ty:?}, {g} problems): {other:?}"
        )),
    }
}

/// Runs a linear layer's problems: one product, or a grouped call where it works, else one
/// product per group.
pub fn run(
    blas: &CudaBlas,
    stream: &Arc<CudaStream>,
    grouped: &mut Grouped,
    probs: &[Problem],
    ty: InType,
) -> Result<(), String> {
    if probs.len() > 1
        && probs.len() <= MAX_GROUPED
        && !matches!(grouped.state[ty.index()], GroupedState::Refused(_))
        && gemm_grouped(blas, stream, grouped, probs, ty)?
    {
        grouped.state[ty.index()] = GroupedState::Works;
        return Ok(());
    }
    for p in probs {
        gemm_ex(blas, p, ty)?;
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
/// with `t` positions and head size `d`; overwrites `c`. f32 SGEMM (the handle's math mode).
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

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_at(base: u64) -> Operand {
        Operand {
            base,
            first: 0,
            bytes: 4,
        }
    }

    /// The builders place every group's operands where the row-major layout puts them: a
    /// grouped layer with an empty group and a weight range that starts at `first`.
    #[test]
    fn grouped_problems_address_each_groups_rows_and_weights() {
        let g = Groups {
            rows: vec![3, 0, 5],
            first: 2,
            in_dim: 4,
            out_dim: 6,
            layout: WeightLayout::OutIn,
        };
        // A bf16 copy of W's groups 2..5 only: element 2*6*4 is at its base.
        let w = Operand {
            base: 10_000,
            first: 2 * 24,
            bytes: 2,
        };
        let p = linear_fwd_problems(&g, f32_at(0), w, f32_at(50_000)).unwrap();
        assert_eq!(p.len(), 2, "the empty group has no product");
        assert_eq!((p[0].m, p[0].n, p[0].k), (6, 3, 4));
        assert_eq!(p[0].a, 10_000);
        assert_eq!(p[1].a, 10_000 + 2 * 24 * 2, "group 4 is two weights on");
        assert_eq!(p[1].b, 3 * 4 * 4, "rows 3.. of the input");
        assert_eq!(p[1].c, 50_000 + 3 * 6 * 4);
        let d = linear_bwd_data_problems(&g, f32_at(0), w, f32_at(0), Accumulate::Add).unwrap();
        assert!(d.iter().all(|p| p.beta == 1.0 && p.m == 4 && p.k == 6));
        let wt = linear_bwd_weight_problems(&g, f32_at(0), f32_at(0), f32_at(0)).unwrap();
        assert_eq!((wt[1].m, wt[1].n, wt[1].k), (4, 6, 5));
        assert_eq!(wt[1].c, 4 * 24 * 4);
    }
}
