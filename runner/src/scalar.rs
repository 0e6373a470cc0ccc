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
    /// The slice as `&[f32]` when `Self` is `f32`, else `None` (f32-only fast paths, such as
    /// the vectorised SwiGLU, dispatch on it).
    fn as_f32(x: &[Self]) -> Option<&[f32]>;
    /// [`Real::as_f32`] for a mutable slice.
    fn as_f32_mut(x: &mut [Self]) -> Option<&mut [f32]>;
}

/// `Some(x)` for f32, `None` for f64 (the bodies of `as_f32`, `as_f32_mut`).
macro_rules! f32_view {
    (yes, $x:expr) => {
        Some($x)
    };
    (no, $x:expr) => {{
        let _ = $x;
        None
    }};
}

macro_rules! impl_real {
    ($t:ty, $name:literal, $is_f32:ident) => {
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
            fn as_f32(x: &[Self]) -> Option<&[f32]> {
                f32_view!($is_f32, x)
            }
            fn as_f32_mut(x: &mut [Self]) -> Option<&mut [f32]> {
                f32_view!($is_f32, x)
            }
        }
    };
}

impl_real!(f32, "F32", yes);
impl_real!(f64, "F64", no);
