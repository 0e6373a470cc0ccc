//! CPU reference kernels: the SwiGLU activation of the experts, forward and backward.
//!
//! Shapes: `R` rows (expert slots, or tokens for shared experts), `F` expert width;
//! `h, dh [R, 2F]` (gate then up), `out, dout [R, F]`. One row block per work item, no
//! reductions. In f32 the rows go through `expf` below (its own exponential, vectorised, the
//! same bits on every CPU); in f64 (the gradient checks) through the generic loops.
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
                    expf::swiglu_fwd_row(orow, g, u);
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
                    expf::swiglu_bwd_row(dg, du, &dout[n * f..(n + 1) * f], g, u);
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

mod expf {
    //! The f32 exponential of the CPU backend, and the SwiGLU rows built on it: the same bits
    //! on every CPU, whether the AVX2 loop or the scalar one computes them.
    //!
    //! `exp(x)` = `2^n * e^r` with `n = round_ties_even(x log2 e)` and `r = x - n ln 2` (ln 2
    //! split in a high part exact in a few bits and a low part, each subtracted with one fma),
    //! `e^r` by the Cephes polynomial in Horner form with fmas (relative error about 1e-7 on
    //! `|r| <= ln2 / 2`), and `2^n` built in the exponent bits. x is clamped to `[-87, 88]`
    //! first so that `2^n` stays a normal float (`exp(-87)` is 1.6e-38, `exp(88)` 1.65e38);
    //! NaN stays NaN. Every step is an IEEE operation that rounds the same way everywhere
    //! (`mul_add` is one fma on every CPU), so the AVX2 path, computing 8 lanes of exactly this
    //! sequence, and the scalar path agree bitwise (tested). glibc's `expf`, used before, is not
    //! specified to the bit and could differ between C libraries.
    //!
    //! Not here: the f64 path (gradient checks keep the platform's `exp`), other activations.

    #[cfg(target_arch = "x86_64")]
    use super::super::gemm::Kernel;

    const HI: f32 = 88.0;
    const LO: f32 = -87.0;
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// ln 2 = LN2_HI + LN2_LO; LN2_HI has 9 significant bits, so `n * LN2_HI` is exact.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    /// Cephes `expf` coefficients, highest degree first: `e^r ~ 1 + r + r^2 P(r)`.
    const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5, // Cephes' 5.0000001201e-1 rounds to exactly 0.5 in f32
    ];

    /// `e^x` (see the module doc for the exact sequence).
    #[inline]
    pub fn exp(x: f32) -> f32 {
        // min/max written as the x86 instructions define them, so NaN propagates in both paths.
        let t = if HI < x { HI } else { x };
        let t = if LO > t { LO } else { t };
        let n = (t * LOG2E).round_ties_even();
        let r = (-n).mul_add(LN2_HI, t);
        let r = (-n).mul_add(LN2_LO, r);
        let mut p = P[0];
        for &c in &P[1..] {
            p = p.mul_add(r, c);
        }
        let y = p.mul_add(r * r, r) + 1.0;
        // n is an integer in [-126, 127] (NaN gives 0 here; y is NaN then anyway).
        y * f32::from_bits((((n as i32) + 127) << 23) as u32)
    }

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

        use super::{HI, LN2_HI, LN2_LO, LO, LOG2E, P};

        /// 8 lanes of [`super::exp`]: `_mm256_min_ps(a, b)` is `a < b ? a : b` and `max` is
        /// `a > b ? a : b`, the scalar code's comparisons.
        ///
        /// # Safety
        /// The CPU must support AVX2 and FMA.
        #[target_feature(enable = "avx2,fma")]
        // The intrinsics are unsafe to call before Rust 1.87 (our MSRV is 1.85), safe after.
        #[allow(unused_unsafe)]
        unsafe fn exp8(x: __m256) -> __m256 {
            // SAFETY: value-only intrinsics; the CPU has AVX2 and FMA (caller's contract).
            unsafe {
                let t = _mm256_min_ps(_mm256_set1_ps(HI), x);
                let t = _mm256_max_ps(_mm256_set1_ps(LO), t);
                let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm256_mul_ps(t, _mm256_set1_ps(LOG2E)),
                );
                let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), t);
                let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
                let mut p = _mm256_set1_ps(P[0]);
                for &c in &P[1..] {
                    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
                }
                let y = _mm256_add_ps(
                    _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
                    _mm256_set1_ps(1.0),
                );
                let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
                    _mm256_cvtps_epi32(n),
                    _mm256_set1_epi32(127),
                ));
                _mm256_mul_ps(y, _mm256_castsi256_ps(e))
            }
        }

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

        /// Inputs over the whole useful range plus the clamp edges, ties and specials.
        fn inputs() -> Vec<f32> {
            let mut v: Vec<f32> = (-20_000..=20_000).map(|i| i as f32 * 0.0045).collect();
            v.extend([
                0.0,
                -0.0,
                1e-30,
                -1e-30,
                87.9,
                88.0,
                88.5,
                200.0,
                -86.9,
                -87.0,
                -87.5,
                -300.0,
                0.346_573_6,
                -0.346_573_6,
            ]);
            v
        }

        #[test]
        fn exp_is_within_two_ulp_of_f64_exp_in_range() {
            for x in inputs() {
                if !(-87.0..=88.0).contains(&x) {
                    continue;
                }
                let want = (x as f64).exp();
                let got = exp(x) as f64;
                let rel = ((got - want) / want).abs();
                assert!(rel < 2.5e-7, "exp({x}) = {got}, want {want} (rel {rel:e})");
            }
            assert_eq!(exp(0.0), 1.0);
            assert!(exp(f32::NAN).is_nan());
            assert_eq!(exp(1000.0), exp(88.0));
            assert!(exp(-1000.0) > 0.0 && exp(-1000.0) < 2e-38);
        }

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
