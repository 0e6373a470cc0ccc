//! The f32 exponential of the CPU backend: the same bits on every CPU, whether the AVX2 loop
//! or the scalar one computes it. SwiGLU's sigmoid ([`super::swiglu`]) and attention's softmax
//! ([`super::attention`]) use it in f32.
//!
//! `exp(x)` = `2^n * e^r` with `n = round_ties_even(x log2 e)` and `r = x - n ln 2` (ln 2
//! split in a high part exact in a few bits and a low part, each subtracted with one fma),
//! `e^r` by the Cephes polynomial in Horner form with fmas (relative error about 1e-7 on
//! `|r| <= ln2 / 2`), and `2^n` built in the exponent bits. x is clamped to `[-87, 88]`
//! first so that `2^n` stays a normal float (`exp(-87)` is 1.6e-38, `exp(88)` 1.65e38);
//! NaN stays NaN. Every step is an IEEE operation that rounds the same way everywhere
//! (`mul_add` is one fma on every CPU), so the AVX2 path, computing 8 lanes of exactly this
//! sequence, and the scalar path agree bitwise (tested). glibc's `expf`, used before, is not
//! specified to the bit, picks a variant per CPU and could differ between C libraries.
//!
//! Not here: the f64 path (gradient checks keep the platform's `exp`), the activations and
//! the softmax themselves.

#[cfg(target_arch = "x86_64")]
use super::gemm::Kernel;

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

/// `row[j] = exp(row[j] * scale - shift)` for every j: the softmax numerators of one
/// attention row (`shift` is the row's scaled maximum). The product and the difference are
/// two roundings, as written, in both paths.
pub fn exp_scaled_shifted(row: &mut [f32], scale: f32, shift: f32) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if Kernel::best().has_avx2_fma() {
        // SAFETY: checked just above that the CPU has AVX2 and FMA.
        done = unsafe { x86::exp_scaled_shifted(row, scale, shift) };
    }
    for x in &mut row[done..] {
        *x = exp(*x * scale - shift);
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    //! 8 lanes at a time (AVX2+FMA). Not here: the remainders (the scalar loops finish them).

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
    pub(in crate::backend::cpu) unsafe fn exp8(x: __m256) -> __m256 {
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

    /// Whole 8-lane chunks of [`super::exp_scaled_shifted`]; returns how many elements it did.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_scaled_shifted(row: &mut [f32], scale: f32, shift: f32) -> usize {
        let n = row.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: i + 8 <= n <= the row's length; AVX2 and FMA (caller's contract).
            unsafe {
                let x = _mm256_loadu_ps(row.as_ptr().add(i));
                let a = _mm256_sub_ps(
                    _mm256_mul_ps(x, _mm256_set1_ps(scale)),
                    _mm256_set1_ps(shift),
                );
                _mm256_storeu_ps(row.as_mut_ptr().add(i), exp8(a));
            }
        }
        n
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Inputs over the whole useful range plus the clamp edges, ties and specials.
    pub(in crate::backend::cpu) fn inputs() -> Vec<f32> {
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

    #[test]
    fn the_shifted_row_bitwise_equals_the_scalar_sequence() {
        let xs = inputs();
        let mut row = xs.clone(); // not a multiple of 8 long
        exp_scaled_shifted(&mut row, 0.176_776_7, 3.5);
        for (x, got) in xs.iter().zip(&row) {
            let want = exp(x * 0.176_776_7 - 3.5);
            assert_eq!(got.to_bits(), want.to_bits(), "at x = {x}");
        }
    }
}
