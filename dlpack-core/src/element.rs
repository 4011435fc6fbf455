//! [`Element`]: Rust scalar types that DLPack tensors can hold.

use crate::DataType;

/// A Rust type whose values are exactly one element of a DLPack dtype, so that tensor memory of
/// that dtype can be viewed as `[Self]`.
///
/// Implemented for `bool`, `i8`..`i64`, `u8`..`u64`, `f32`, `f64`, and behind features for
/// `half::{f16, bf16}` (`half`), `num_complex::Complex<f32 | f64>` (`num-complex`) and
/// `float8::{F8E4M3, F8E5M2}` (`float8`; F8E4M3 is OCP E4M3, DLPack code 10 `float8_e4m3fn`).
///
/// ```
/// use dlpack_core::{DataType, Element};
/// assert_eq!(<f32 as Element>::DTYPE, DataType::F32);
/// assert_eq!(<bool as Element>::DTYPE.to_string(), "bool");
/// ```
///
/// # Safety
///
/// Views hand out `&[Self]` and `&mut [Self]` over memory described only by [`Self::DTYPE`], so
/// an implementation must guarantee:
/// - `size_of::<Self>() * 8 == DTYPE.bits * DTYPE.lanes`, and `Self` has no padding bytes;
/// - `Self` has no interior mutability;
/// - if [`Self::ANY_BIT_PATTERN`] is true, every bit pattern of `size_of::<Self>()` bytes is a
///   valid `Self`; otherwise [`Self::is_valid_bits`] returns true only for valid patterns;
/// - `DTYPE` passes [`DataType::validate`] and means the same values as `Self`.
pub unsafe trait Element: Copy + Send + Sync + 'static {
    /// The DLPack dtype of one element.
    const DTYPE: DataType;

    /// Whether every bit pattern is a valid value. `bool` is the one built-in type for which it
    /// is not: its views check every byte once, when the view is made.
    const ANY_BIT_PATTERN: bool = true;

    /// Whether `bytes` (exactly `size_of::<Self>()` of them) hold a valid value. Only called when
    /// [`Self::ANY_BIT_PATTERN`] is false.
    fn is_valid_bits(bytes: &[u8]) -> bool {
        let _ = bytes;
        true
    }
}

/// `unsafe impl Element` for primitive number types, with a compile-time check of each size.
/// A leading `#[cfg(...)]` applies to every item (and shows as a feature badge in the docs).
macro_rules! element {
    (#[cfg($cfg:meta)] $($ty:ty => $dtype:expr),* $(,)?) => {
        $(
            // SAFETY: a primitive number type with no padding, no interior mutability, every bit
            // pattern valid, and the size `$dtype` names (checked below at compile time).
            #[cfg($cfg)]
            unsafe impl Element for $ty {
                const DTYPE: DataType = $dtype;
            }
            #[cfg($cfg)]
            const _: () = assert!(
                core::mem::size_of::<$ty>() * 8 == <$ty as Element>::DTYPE.element_bits() as usize
            );
        )*
    };
    ($($ty:ty => $dtype:expr),* $(,)?) => {
        element! { #[cfg(all())] $($ty => $dtype),* }
    };
}

element! {
    i8 => DataType::I8,
    i16 => DataType::I16,
    i32 => DataType::I32,
    i64 => DataType::I64,
    u8 => DataType::U8,
    u16 => DataType::U16,
    u32 => DataType::U32,
    u64 => DataType::U64,
    f32 => DataType::F32,
    f64 => DataType::F64,
}

element! {
    #[cfg(feature = "half")]
    half::f16 => DataType::F16,
    half::bf16 => DataType::BF16,
}

element! {
    #[cfg(feature = "num-complex")]
    num_complex::Complex<f32> => DataType::C64,
    num_complex::Complex<f64> => DataType::C128,
}

element! {
    #[cfg(feature = "float8")]
    float8::F8E4M3 => DataType::F8_E4M3FN,
    float8::F8E5M2 => DataType::F8_E5M2,
}

// SAFETY: `bool` is one byte without padding or interior mutability, and DLPack's bool is one
// byte (`(kDLBool, 8, 1)`). Not every byte is a valid bool, so ANY_BIT_PATTERN is false and
// is_valid_bits accepts exactly 0 and 1, the two valid bit patterns.
unsafe impl Element for bool {
    const DTYPE: DataType = DataType::BOOL;
    const ANY_BIT_PATTERN: bool = false;
    fn is_valid_bits(bytes: &[u8]) -> bool {
        matches!(bytes, [0 | 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_dtype_validates() {
        fn check<T: Element>() {
            assert_eq!(T::DTYPE.validate(), Ok(()));
            assert_eq!(core::mem::size_of::<T>(), T::DTYPE.element_bytes());
        }
        check::<bool>();
        check::<i8>();
        check::<i64>();
        check::<u16>();
        check::<f64>();
        #[cfg(feature = "half")]
        {
            check::<half::f16>();
            check::<half::bf16>();
        }
        #[cfg(feature = "num-complex")]
        check::<num_complex::Complex<f64>>();
        #[cfg(feature = "float8")]
        {
            check::<float8::F8E4M3>();
            assert_eq!(<float8::F8E4M3 as Element>::DTYPE.code.0, 10);
            assert_eq!(<float8::F8E5M2 as Element>::DTYPE.code.0, 12);
        }
    }

    #[test]
    fn bool_accepts_only_zero_and_one() {
        assert!(bool::is_valid_bits(&[0]));
        assert!(bool::is_valid_bits(&[1]));
        assert!(!bool::is_valid_bits(&[2]));
        assert!(!bool::is_valid_bits(&[0xff]));
    }
}
