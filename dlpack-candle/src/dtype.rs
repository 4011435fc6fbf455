//! candle dtypes <-> DLPack dtypes, and [`Float8E8M0`], the element type of candle's `F8E8M0`
//! storage.
//!
//! | candle | DLPack | code, bits |
//! |---|---|---|
//! | `U8` | `uint8` | 1, 8 |
//! | `U32` | `uint32` | 1, 32 |
//! | `I16` | `int16` | 0, 16 |
//! | `I32` | `int32` | 0, 32 |
//! | `I64` | `int64` | 0, 64 |
//! | `BF16` | `bfloat16` | 4, 16 |
//! | `F16` | `float16` | 2, 16 |
//! | `F32` | `float32` | 2, 32 |
//! | `F64` | `float64` | 2, 64 |
//! | `F8E4M3` | `float8_e4m3fn` | 10, 8 |
//! | `F8E8M0` | `float8_e8m0fnu` | 14, 8 |
//! | `F6E2M3`, `F6E3M2`, `F4` | refused: see [`PLACEHOLDER_REASON`] | |
//!
//! candle's `F8E4M3` is the `float8` crate's type, whose bytes decode the OCP way: no
//! infinities, only `0x7F` and `0xFF` are NaN, `0x7E` is 448 (the crate names that byte
//! `INFINITY`, but converts it to 448). That is DLPack's `float8_e4m3fn` (code 10), not
//! `float8_e4m3` (code 8, with infinities).
//!
//! candle's `F8E8M0` storage holds one byte per element, the OCP MX E8M0 scale (`2^(b - 127)`,
//! `0xFF` is NaN): DLPack's `float8_e8m0fnu` (code 14). DLPack dtypes candle has no dtype for
//! (bool, int8, uint16, uint64, complex, the other float8s, vector dtypes) are refused with
//! the nearest candle dtype named in the error.

use candle_core::DType;
use dlpack_core::{DataType, DataTypeCode, Element};

use crate::CandleError;

/// Why candle's `F6E2M3`, `F6E3M2` and `F4` are refused both ways.
pub const PLACEHOLDER_REASON: &str = "candle's F6E2M3, F6E3M2 and F4 are placeholder dtypes: \
their CPU storage is the raw packed bytes of a safetensors file (n * bits / 8 bytes for n \
elements) in a bit order that neither candle nor safetensors defines, and candle's layouts \
count offsets and strides in elements while indexing those bytes one per element, so a \
narrowed or strided tensor does not address its elements; DLPack's float6/float4 dtypes are \
packed little-bit-endian in compact row-major order, which candle's layout cannot be shown \
to follow";

/// One element of candle's `F8E8M0` storage: an OCP MX E8M0 scale, the value `2^(bits - 127)`
/// (`0xFF` is NaN). DLPack calls it `float8_e8m0fnu` (code 14).
///
/// candle keeps this dtype's elements as plain bytes (its own `candle_core::F8E8M0` is a
/// zero-sized marker), so this type gives them an [`Element`] of the right DLPack dtype: a
/// `Vec<Float8E8M0>` moves into a candle `F8E8M0` tensor without a copy, and typed views of an
/// exported candle `F8E8M0` tensor read `Float8E8M0`s.
///
/// ```
/// use dlpack_candle::Float8E8M0;
/// assert_eq!(Float8E8M0(127).to_f32(), 1.0);
/// assert_eq!(Float8E8M0(130).to_f32(), 8.0);
/// assert!(Float8E8M0(0xFF).to_f32().is_nan());
/// ```
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Float8E8M0(pub u8);

impl Float8E8M0 {
    /// The value as an `f32`: `2^(bits - 127)`, NaN for `0xFF`. Exact, since `f32` holds every
    /// power of two from `2^-127` (subnormal) to `2^127`.
    pub fn to_f32(self) -> f32 {
        if self.0 == 0xFF {
            return f32::NAN;
        }
        if self.0 == 0 {
            // 2^-127 is below f32's normal range: its subnormal bit pattern.
            return f32::from_bits(1 << 22);
        }
        f32::from_bits(u32::from(self.0) << 23)
    }
}

// SAFETY: `Float8E8M0` is `repr(transparent)` over `u8`: one byte, no padding, no interior
// mutability, every bit pattern valid (all 256 bytes are E8M0 values, 0xFF being NaN). Its DTYPE
// is float8_e8m0fnu with 8 bits and 1 lane, which validates and means exactly these values.
unsafe impl Element for Float8E8M0 {
    const DTYPE: DataType = DataType::new(DataTypeCode::FLOAT8_E8M0FNU, 8, 1);
}

/// The DLPack dtype of a candle dtype.
///
/// ```
/// use candle_core::DType;
/// use dlpack_core::{DataType, DataTypeCode};
///
/// assert_eq!(dlpack_candle::dlpack_dtype(DType::BF16)?, DataType::BF16);
/// assert_eq!(dlpack_candle::dlpack_dtype(DType::F8E4M3)?.code, DataTypeCode::FLOAT8_E4M3FN);
/// assert!(dlpack_candle::dlpack_dtype(DType::F4).is_err()); // a placeholder: refused
/// # Ok::<(), dlpack_candle::CandleError>(())
/// ```
///
/// # Errors
///
/// [`CandleError::CandleDType`] for `F6E2M3`, `F6E3M2` and `F4` ([`PLACEHOLDER_REASON`]) and for
/// dtypes newer than this crate.
pub fn dlpack_dtype(dtype: DType) -> Result<DataType, CandleError> {
    Ok(match dtype {
        DType::U8 => DataType::U8,
        DType::U32 => DataType::U32,
        DType::I16 => DataType::I16,
        DType::I32 => DataType::I32,
        DType::I64 => DataType::I64,
        DType::BF16 => DataType::BF16,
        DType::F16 => DataType::F16,
        DType::F32 => DataType::F32,
        DType::F64 => DataType::F64,
        DType::F8E4M3 => DataType::F8_E4M3FN,
        DType::F8E8M0 => <Float8E8M0 as Element>::DTYPE,
        DType::F6E2M3 | DType::F6E3M2 | DType::F4 => {
            return Err(CandleError::CandleDType {
                dtype,
                reason: PLACEHOLDER_REASON,
            });
        }
        _ => {
            return Err(CandleError::CandleDType {
                dtype,
                reason: "this candle dtype is newer than dlpack-candle, which does not know its DLPack counterpart",
            });
        }
    })
}

/// The candle dtype of a DLPack dtype.
///
/// ```
/// use candle_core::DType;
/// use dlpack_core::DataType;
///
/// assert_eq!(dlpack_candle::candle_dtype(DataType::F16)?, DType::F16);
/// let err = dlpack_candle::candle_dtype(DataType::I8).unwrap_err();
/// assert!(err.to_string().starts_with("DLPack dtype int8 has no candle dtype; the nearest is i16"));
/// # Ok::<(), dlpack_candle::CandleError>(())
/// ```
///
/// # Errors
///
/// [`CandleError::DLPack`] for a dtype DLPack does not define (a width its code does not allow,
/// say float8 of 16 bits: [`DataType::validate`]); [`CandleError::NoCandleDType`], naming the
/// nearest candle dtype, for every valid DLPack dtype candle cannot hold.
pub fn candle_dtype(dtype: DataType) -> Result<DType, CandleError> {
    dtype.validate()?;
    let none = |nearest: Option<DType>, note: &'static str| CandleError::NoCandleDType {
        dtype,
        nearest,
        note,
    };
    if dtype.lanes != 1 {
        let scalar = DataType::new(dtype.code, dtype.bits, 1);
        let nearest = match candle_dtype(scalar) {
            Ok(d) => Some(d),
            Err(CandleError::NoCandleDType { nearest, .. }) => nearest,
            Err(_) => None,
        };
        return Err(none(
            nearest,
            "candle has no vector dtypes: the nearest candle dtype of one lane, with an extra last axis of the lane count",
        ));
    }
    let code = dtype.code;
    Ok(match (code, dtype.bits) {
        (DataTypeCode::UINT, 8) => DType::U8,
        (DataTypeCode::UINT, 32) => DType::U32,
        (DataTypeCode::INT, 16) => DType::I16,
        (DataTypeCode::INT, 32) => DType::I32,
        (DataTypeCode::INT, 64) => DType::I64,
        (DataTypeCode::BFLOAT, 16) => DType::BF16,
        (DataTypeCode::FLOAT, 16) => DType::F16,
        (DataTypeCode::FLOAT, 32) => DType::F32,
        (DataTypeCode::FLOAT, 64) => DType::F64,
        (DataTypeCode::FLOAT8_E4M3FN, 8) => DType::F8E4M3,
        (DataTypeCode::FLOAT8_E8M0FNU, 8) => DType::F8E8M0,
        (DataTypeCode::BOOL, _) => {
            return Err(none(
                Some(DType::U8),
                "candle's comparisons give u8 masks of 0 and 1",
            ));
        }
        (DataTypeCode::INT, 8) => {
            return Err(none(Some(DType::I16), "holds every int8 value"));
        }
        (DataTypeCode::UINT, 16) => {
            return Err(none(
                Some(DType::U32),
                "holds every uint16 value; candle itself loads safetensors u16 as u32",
            ));
        }
        (DataTypeCode::UINT, 64) => {
            return Err(none(Some(DType::I64), "holds the uint64 values below 2^63"));
        }
        (DataTypeCode::COMPLEX, bits) => {
            let (nearest, note) = match bits {
                32 => (
                    DType::F16,
                    "real and imaginary parts as a last axis of 2 f16s",
                ),
                64 => (
                    DType::F32,
                    "real and imaginary parts as a last axis of 2 f32s",
                ),
                _ => (
                    DType::F64,
                    "real and imaginary parts as a last axis of 2 f64s",
                ),
            };
            return Err(none(Some(nearest), note));
        }
        (
            DataTypeCode::FLOAT8_E3M4
            | DataTypeCode::FLOAT8_E4M3
            | DataTypeCode::FLOAT8_E4M3B11FNUZ
            | DataTypeCode::FLOAT8_E4M3FNUZ
            | DataTypeCode::FLOAT8_E5M2
            | DataTypeCode::FLOAT8_E5M2FNUZ,
            _,
        ) => {
            return Err(none(
                Some(DType::F16),
                "holds every value of this float8 exactly; candle's only float8 with a mantissa is float8_e4m3fn",
            ));
        }
        (
            DataTypeCode::FLOAT6_E2M3FN | DataTypeCode::FLOAT6_E3M2FN | DataTypeCode::FLOAT4_E2M1FN,
            _,
        ) => {
            return Err(none(
                Some(DType::F16),
                "holds every value exactly; candle's F6E2M3, F6E3M2 and F4 are placeholders whose byte layout DLPack's packing cannot be shown to match",
            ));
        }
        _ => {
            return Err(none(
                None,
                "candle has no dtype of this kind (opaque handles have no counterpart)",
            ));
        }
    })
}
