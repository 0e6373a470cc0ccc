//! CPU reference kernels: the SwiGLU activation of the experts, forward and backward.
//!
//! Shapes: `R` rows (expert slots, or tokens for shared experts), `F` expert width;
//! `h, dh [R, 2F]` (gate then up), `out, dout [R, F]`. One row block per work item, no
//! reductions. In f32 the rows go through `rows` below (on the backend's own exponential,
//! [`super::expf`]: vectorised, the same bits on every CPU); in f64 (the gradient checks)
//! through the generic loops.
//! Not here: the expert matmuls (grouped `linear`, [`super::gemm`]).

use rayon::prelude::*;

use super::ROW_BLOCK;
use crate::scalar::Real;

/// `silu(g) = g * sigmoid(g)`.
#[inline]
fn sigmoid<F: Real>(g: F) -> F {
    F::ONE / (F::ONE + (-g).exp())
}

/// Forward SwiGLU: `out[r, i] = silu(h[r, i]) * h[r, F + i]`; h `[R, 2F]`, out `[R, F]`.
pub fn swiglu_fwd<F: Real>(out: &mut [F], h: &[F], f: usize) {
    if let (Some(out), Some(h)) = (F::as_f32_mut(out), F::as_f32(h)) {
        out.par_chunks_mut(f * ROW_BLOCK)
            .enumerate()
            .for_each(|(blk, o)| {
                for (r, orow) in o.chunks_mut(f).enumerate() {
                    let n = blk * ROW_BLOCK + r;
                    let (g, u) = h[n * 2 * f..(n + 1) * 2 * f].split_at(f);
                    rows::swiglu_fwd_row(orow, g, u);
                }
            });
        return;
    }
    out.par_chunks_mut(f * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, o)| {
            for (r, orow) in o.chunks_mut(f).enumerate() {
                let n = blk * ROW_BLOCK + r;
                let hr = &h[n * 2 * f..(n + 1) * 2 * f];
                for i in 0..f {
                    let g = hr[i];
                    orow[i] = g * sigmoid(g) * hr[f + i];
                }
            }
        });
}

/// Backward SwiGLU: with `sg = sigmoid(g)`, `dg = dout * u * sg * (1 + g (1 - sg))`,
/// `du = dout * g * sg`. Overwrites dh `[R, 2F]`.
pub fn swiglu_bwd<F: Real>(dh: &mut [F], dout: &[F], h: &[F], f: usize) {
    if let (Some(dh), Some(dout), Some(h)) = (F::as_f32_mut(dh), F::as_f32(dout), F::as_f32(h)) {
        dh.par_chunks_mut(2 * f * ROW_BLOCK)
            .enumerate()
            .for_each(|(blk, d)| {
                for (r, drow) in d.chunks_mut(2 * f).enumerate() {
                    let n = blk * ROW_BLOCK + r;
                    let (g, u) = h[n * 2 * f..(n + 1) * 2 * f].split_at(f);
                    let (dg, du) = drow.split_at_mut(f);
                    rows::swiglu_bwd_row(dg, du, &dout[n * f..(n + 1) * f], g, u);
                }
            });
        return;
    }
    dh.par_chunks_mut(2 * f * ROW_BLOCK)
        .enumerate()
        .for_each(|(blk, d)| {
            for (r, drow) in d.chunks_mut(2 * f).enumerate() {
                let n = blk * ROW_BLOCK + r;
                let hr = &h[n * 2 * f..(n + 1) * 2 * f];
                let dr = &dout[n * f..(n + 1) * f];
                for i in 0..f {
                    let (g, u) = (hr[i], hr[f + i]);
                    let sg = sigmoid(g);
                    drow[i] = dr[i] * u * sg * (F::ONE + g * (F::ONE - sg));
                    drow[f + i] = dr[i] * g * sg;
                }
            }
        });
}

mod rows {
    //! The f32 SwiGLU rows, on the backend's own exponential ([`super::super::expf`]): the
    //! same bits on every CPU, whether the AVX2 loop or the scalar one computes them.

    #[cfg(target_arch = "x86_64")]
    use super::super::gemm::Kernel;
    use crate::backend::cpu::expf::exp;

    /// `1 / (1 + e^-g)`.
    #[inline]
    fn sigmoid(g: f32) -> f32 {
        1.0 / (1.0 + exp(-g))
    }

    /// SwiGLU forward of one row: `out[i] = g[i] * sigmoid(g[i]) * u[i]` (left to right).
    pub fn swiglu_fwd_row(out: &mut [f32], g: &[f32], u: &[f32]) {
        let n = out.len();
        assert!(g.len() == n && u.len() == n, "swiglu: row lengths differ");
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if Kernel::best().has_avx2_fma() {
            // SAFETY: checked just above that the CPU has AVX2 and FMA; the lengths are equal.
            done = unsafe { x86::swiglu_fwd(out, g, u) };
        }
        for i in done..n {
            out[i] = g[i] * sigmoid(g[i]) * u[i];
        }
    }

    /// SwiGLU backward of one row, with `s = sigmoid(g)`: `dg[i] = d * u * s * (1 + g (1 - s))`,
    /// `du[i] = d * g * s` (each left to right).
    pub fn swiglu_bwd_row(dg: &mut [f32], du: &mut [f32], dout: &[f32], g: &[f32], u: &[f32]) {
        let n = dg.len();
        assert!(
            du.len() == n && dout.len() == n && g.len() == n && u.len() == n,
            "swiglu: row lengths differ"
        );
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if Kernel::best().has_avx2_fma() {
            // SAFETY: as in `swiglu_fwd_row`.
            done = unsafe { x86::swiglu_bwd(dg, du, dout, g, u) };
        }
        for i in done..n {
            let s = sigmoid(g[i]);
            dg[i] = dout[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
            du[i] = dout[i] * g[i] * s;
        }
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        //! The same sequences, 8 lanes at a time (AVX2+FMA). Not here: the remainders (the scalar
        //! loops of the parent finish them).

        use std::arch::x86_64::*;

        use crate::backend::cpu::expf::x86::exp8;

        /// 8 lanes of `1 / (1 + e^-g)`.
        ///
        /// # Safety
        /// The CPU must support AVX2 and FMA.
        #[target_feature(enable = "avx2,fma")]
        #[allow(unused_unsafe)]
        unsafe fn sigmoid8(g: __m256) -> __m256 {
            // SAFETY: as in `exp8`.
            unsafe {
                let one = _mm256_set1_ps(1.0);
                let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
                _mm256_div_ps(one, _mm256_add_ps(one, e))
            }
        }

        /// Whole 8-lane chunks of `swiglu_fwd_row`; returns how many elements it did.
        ///
        /// # Safety
        /// The CPU must support AVX2 and FMA; the slices must have equal lengths.
        #[target_feature(enable = "avx2,fma")]
        pub(super) unsafe fn swiglu_fwd(out: &mut [f32], g: &[f32], u: &[f32]) -> usize {
            let n = out.len() / 8 * 8;
            for i in (0..n).step_by(8) {
                // SAFETY: i + 8 <= n <= every slice's length.
                unsafe {
                    let gv = _mm256_loadu_ps(g.as_ptr().add(i));
                    let uv = _mm256_loadu_ps(u.as_ptr().add(i));
                    let o = _mm256_mul_ps(_mm256_mul_ps(gv, sigmoid8(gv)), uv);
                    _mm256_storeu_ps(out.as_mut_ptr().add(i), o);
                }
            }
            n
        }

        /// Whole 8-lane chunks of `swiglu_bwd_row`; returns how many elements it did.
        ///
        /// # Safety
        /// The CPU must support AVX2 and FMA; the slices must have equal lengths.
        #[target_feature(enable = "avx2,fma")]
        pub(super) unsafe fn swiglu_bwd(
            dg: &mut [f32],
            du: &mut [f32],
            dout: &[f32],
            g: &[f32],
            u: &[f32],
        ) -> usize {
            let n = dg.len() / 8 * 8;
            for i in (0..n).step_by(8) {
                // SAFETY: i + 8 <= n <= every slice's length; AVX2 and FMA (caller's contract).
                unsafe {
                    let one = _mm256_set1_ps(1.0);
                    let gv = _mm256_loadu_ps(g.as_ptr().add(i));
                    let uv = _mm256_loadu_ps(u.as_ptr().add(i));
                    let d = _mm256_loadu_ps(dout.as_ptr().add(i));
                    let s = sigmoid8(gv);
                    let tail = _mm256_add_ps(one, _mm256_mul_ps(gv, _mm256_sub_ps(one, s)));
                    let dgv = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(d, uv), s), tail);
                    let duv = _mm256_mul_ps(_mm256_mul_ps(d, gv), s);
                    _mm256_storeu_ps(dg.as_mut_ptr().add(i), dgv);
                    _mm256_storeu_ps(du.as_mut_ptr().add(i), duv);
                }
            }
            n
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::backend::cpu::expf::tests::inputs;

        /// Runs the rows on lengths that leave remainders for the scalar loop, and compares every
        /// element with the scalar formula applied one by one.
        #[test]
        fn swiglu_rows_bitwise_equal_the_scalar_sequence() {
            let xs = inputs();
            let n = xs.len(); // not a multiple of 8
            let g: Vec<f32> = xs.iter().map(|x| x * 0.25).collect();
            let u: Vec<f32> = xs.iter().rev().copied().collect();
            let d: Vec<f32> = xs.iter().map(|x| 1.0 - x * 0.01).collect();
            let mut out = vec![0f32; n];
            swiglu_fwd_row(&mut out, &g, &u);
            let (mut dg, mut du) = (vec![0f32; n], vec![0f32; n]);
            swiglu_bwd_row(&mut dg, &mut du, &d, &g, &u);
            for i in 0..n {
                let s = sigmoid(g[i]);
                let want = g[i] * s * u[i];
                assert_eq!(out[i].to_bits(), want.to_bits(), "fwd at {i} (g {})", g[i]);
                let want_dg = d[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
                assert_eq!(dg[i].to_bits(), want_dg.to_bits(), "dg at {i}");
                assert_eq!(du[i].to_bits(), (d[i] * g[i] * s).to_bits(), "du at {i}");
            }
        }
    }
}
