//! The floating-point element type the kernels compute in: `f32` for training, `f64` for the
//! finite-difference gradient checks (the same kernel code runs in both).
//!
//! This is a closed trait (sealed): only `f32` and `f64` implement it, because the GEMM
//! (`backend::cpu::gemm`) dispatches on exactly those two types. It is not a general
//! numeric-tower abstraction.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// `f32` or `f64`.
pub trait Real:
    sealed::Sealed
    + 'static
    + Copy
    + Send
    + Sync
    + Debug
    + Default
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
{
    /// Name as used in checkpoint headers (`F32`, `F64`).
    const DTYPE: &'static str;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// Convert from `f64` (rounding to nearest for `f32`).
    fn from_f64(x: f64) -> Self;
    /// Widen to `f64`.
    fn to_f64(self) -> f64;
    /// `e^x`.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// `self * a + b` rounded once (a fused multiply-add, IEEE 754 `fusedMultiplyAdd`): the
    /// same bits on every CPU, with or without an FMA instruction.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Larger of two (NaN-propagating is not required: callers check finiteness separately).
    fn max(self, other: Self) -> Self;
    /// Whether the value is neither NaN nor infinite.
    fn is_finite(self) -> bool;
    /// Little-endian bytes, for checkpoints and parameter hashes.
    fn write_le(self, out: &mut Vec<u8>);
    /// Read from little-endian bytes (`bytes.len() == size_of::<Self>()`).
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! impl_real {
    ($t:ty, $name:literal) => {
        impl Real for $t {
            const DTYPE: &'static str = $name;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn mul_add(self, a: Self, b: Self) -> Self {
                <$t>::mul_add(self, a, b)
            }
            #[inline]
            fn max(self, other: Self) -> Self {
                <$t>::max(self, other)
            }
            #[inline]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                b.copy_from_slice(&bytes[..std::mem::size_of::<$t>()]);
                <$t>::from_le_bytes(b)
            }
        }
    };
}

impl_real!(f32, "F32");
impl_real!(f64, "F64");
