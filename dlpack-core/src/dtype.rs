//! What a tensor's elements are: [`DataTypeCode`] and [`DataType`].

use core::fmt;

use crate::error::Error;

/// A DLPack data type code (`DLDataTypeCode`), a `u8` in [`DataType`].
///
/// An integer newtype, not a Rust `enum`, for the same reason as [`crate::DeviceType`]: foreign
/// memory may hold values this crate does not know.
///
/// ```
/// use dlpack_core::DataTypeCode;
/// assert_eq!(DataTypeCode::FLOAT8_E4M3FN.0, 10);
/// assert_eq!(DataTypeCode::BFLOAT.to_string(), "bfloat");
/// ```
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct DataTypeCode(pub u8);

macro_rules! dtype_codes {
    ($( $(#[$doc:meta])* $name:ident = $value:literal, $c:literal, $display:literal, $bits:expr; )*) => {
        impl DataTypeCode {
            $(
                $(#[$doc])*
                #[doc = concat!("\n\nC name: `", $c, "` (", stringify!($value), ").")]
                pub const $name: DataTypeCode = DataTypeCode($value);
            )*

            /// Every data type code defined by DLPack 1.3, in header order.
            pub const ALL: &'static [DataTypeCode] = &[$(DataTypeCode::$name),*];

            /// The name used by the C header (`kDLFloat`), or `None` for an unknown code.
            pub const fn c_name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($c),)*
                    _ => None,
                }
            }

            /// The lower-case stem used by [`DataType`]'s `Display` (`float`, `float8_e4m3fn`),
            /// or `None` for an unknown code.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($display),)*
                    _ => None,
                }
            }

            /// The bit widths DLPack (and this crate) accept for one lane of this code, or `None`
            /// for an unknown code. [`DataTypeCode::OPAQUE_HANDLE`] accepts any whole number of
            /// bytes and answers `&[]`.
            pub const fn allowed_bits(self) -> Option<&'static [u8]> {
                match self.0 {
                    $($value => Some($bits),)*
                    _ => None,
                }
            }
        }
    };
}

dtype_codes! {
    /// Signed two's-complement integer.
    INT = 0, "kDLInt", "int", &[8, 16, 32, 64];
    /// Unsigned integer.
    UINT = 1, "kDLUInt", "uint", &[8, 16, 32, 64];
    /// IEEE 754 binary floating point.
    FLOAT = 2, "kDLFloat", "float", &[16, 32, 64];
    /// An opaque handle (for example a pointer); any whole number of bytes.
    OPAQUE_HANDLE = 3, "kDLOpaqueHandle", "opaque_handle", &[];
    /// bfloat16.
    BFLOAT = 4, "kDLBfloat", "bfloat", &[16];
    /// Complex number: two IEEE floats of half the width (`complex64` is two `f32`).
    COMPLEX = 5, "kDLComplex", "complex", &[32, 64, 128];
    /// Boolean stored in one byte, 0 or 1.
    BOOL = 6, "kDLBool", "bool", &[8];
    /// 8-bit float, 3 exponent and 4 mantissa bits.
    FLOAT8_E3M4 = 7, "kDLFloat8_e3m4", "float8_e3m4", &[8];
    /// 8-bit float, 4 exponent and 3 mantissa bits, with infinities.
    FLOAT8_E4M3 = 8, "kDLFloat8_e4m3", "float8_e4m3", &[8];
    /// 8-bit float, e4m3 with exponent bias 11, finite, no negative zero (Graphcore).
    FLOAT8_E4M3B11FNUZ = 9, "kDLFloat8_e4m3b11fnuz", "float8_e4m3b11fnuz", &[8];
    /// 8-bit float, e4m3, finite (OCP FP8 E4M3; candle's and PyTorch's `float8_e4m3fn`).
    FLOAT8_E4M3FN = 10, "kDLFloat8_e4m3fn", "float8_e4m3fn", &[8];
    /// 8-bit float, e4m3, finite, no negative zero.
    FLOAT8_E4M3FNUZ = 11, "kDLFloat8_e4m3fnuz", "float8_e4m3fnuz", &[8];
    /// 8-bit float, 5 exponent and 2 mantissa bits (OCP FP8 E5M2).
    FLOAT8_E5M2 = 12, "kDLFloat8_e5m2", "float8_e5m2", &[8];
    /// 8-bit float, e5m2, finite, no negative zero.
    FLOAT8_E5M2FNUZ = 13, "kDLFloat8_e5m2fnuz", "float8_e5m2fnuz", &[8];
    /// 8-bit exponent-only scale type (OCP MX E8M0).
    FLOAT8_E8M0FNU = 14, "kDLFloat8_e8m0fnu", "float8_e8m0fnu", &[8];
    /// 6-bit float, 2 exponent and 3 mantissa bits (OCP MX FP6).
    FLOAT6_E2M3FN = 15, "kDLFloat6_e2m3fn", "float6_e2m3fn", &[6];
    /// 6-bit float, 3 exponent and 2 mantissa bits (OCP MX FP6).
    FLOAT6_E3M2FN = 16, "kDLFloat6_e3m2fn", "float6_e3m2fn", &[6];
    /// 4-bit float, 2 exponent and 1 mantissa bit (OCP MX FP4).
    FLOAT4_E2M1FN = 17, "kDLFloat4_e2m1fn", "float4_e2m1fn", &[4];
}

impl DataTypeCode {
    /// Whether DLPack 1.3 defines this code.
    pub const fn is_known(self) -> bool {
        self.c_name().is_some()
    }
}

impl fmt::Display for DataTypeCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "code({})", self.0),
        }
    }
}

/// The type of a tensor's elements (`DLDataType`): a code, the bits of one lane and the number
/// of lanes. The layout is the C struct's.
///
/// `Display` gives the names NumPy and PyTorch users know, with `xN` for vector types:
///
/// ```
/// use dlpack_core::{DataType, DataTypeCode};
/// assert_eq!(DataType::F32.to_string(), "float32");
/// assert_eq!(DataType::BF16.to_string(), "bfloat16");
/// assert_eq!(DataType::BOOL.to_string(), "bool");
/// assert_eq!(DataType::C128.to_string(), "complex128");
/// assert_eq!(DataType::new(DataTypeCode::FLOAT8_E4M3FN, 8, 1).to_string(), "float8_e4m3fn");
/// assert_eq!(DataType::new(DataTypeCode::BFLOAT, 16, 4).to_string(), "bfloat16x4");
/// ```
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct DataType {
    /// The type code.
    pub code: DataTypeCode,
    /// Bits of one lane.
    pub bits: u8,
    /// Number of lanes; more than one for vector types.
    pub lanes: u16,
}

impl DataType {
    /// A data type from its parts; nothing is checked (see [`DataType::validate`]).
    pub const fn new(code: DataTypeCode, bits: u8, lanes: u16) -> Self {
        DataType { code, bits, lanes }
    }

    /// `bool` (one byte).
    pub const BOOL: DataType = DataType::new(DataTypeCode::BOOL, 8, 1);
    /// `int8`.
    pub const I8: DataType = DataType::new(DataTypeCode::INT, 8, 1);
    /// `int16`.
    pub const I16: DataType = DataType::new(DataTypeCode::INT, 16, 1);
    /// `int32`.
    pub const I32: DataType = DataType::new(DataTypeCode::INT, 32, 1);
    /// `int64`.
    pub const I64: DataType = DataType::new(DataTypeCode::INT, 64, 1);
    /// `uint8`.
    pub const U8: DataType = DataType::new(DataTypeCode::UINT, 8, 1);
    /// `uint16`.
    pub const U16: DataType = DataType::new(DataTypeCode::UINT, 16, 1);
    /// `uint32`.
    pub const U32: DataType = DataType::new(DataTypeCode::UINT, 32, 1);
    /// `uint64`.
    pub const U64: DataType = DataType::new(DataTypeCode::UINT, 64, 1);
    /// `float16` (IEEE half).
    pub const F16: DataType = DataType::new(DataTypeCode::FLOAT, 16, 1);
    /// `float32`.
    pub const F32: DataType = DataType::new(DataTypeCode::FLOAT, 32, 1);
    /// `float64`.
    pub const F64: DataType = DataType::new(DataTypeCode::FLOAT, 64, 1);
    /// `bfloat16`.
    pub const BF16: DataType = DataType::new(DataTypeCode::BFLOAT, 16, 1);
    /// `complex64` (two `float32`).
    pub const C64: DataType = DataType::new(DataTypeCode::COMPLEX, 64, 1);
    /// `complex128` (two `float64`).
    pub const C128: DataType = DataType::new(DataTypeCode::COMPLEX, 128, 1);
    /// `float8_e4m3fn` (OCP FP8 E4M3, code 10).
    pub const F8_E4M3FN: DataType = DataType::new(DataTypeCode::FLOAT8_E4M3FN, 8, 1);
    /// `float8_e5m2` (OCP FP8 E5M2, code 12).
    pub const F8_E5M2: DataType = DataType::new(DataTypeCode::FLOAT8_E5M2, 8, 1);

    /// Bits of one element, all lanes together (`bits * lanes`).
    pub const fn element_bits(self) -> u32 {
        self.bits as u32 * self.lanes as u32
    }

    /// Whether one element fills a whole number of bytes, so that element strides can be turned
    /// into byte strides. False for packed fp4 and fp6 with an odd lane count.
    pub const fn is_byte_sized(self) -> bool {
        self.element_bits().is_multiple_of(8)
    }

    /// Bytes of one element when [`DataType::is_byte_sized`], rounded up otherwise
    /// (`ceil(bits * lanes / 8)`, the header's storage-size rule).
    pub const fn element_bytes(self) -> usize {
        self.element_bits().div_ceil(8) as usize
    }

    /// Checks that the code is known, that `lanes` is at least one and that `bits` is a width
    /// DLPack defines for the code (fp6 must be 6 bits and fp4 4 bits: the header tells
    /// consumers to stop importing otherwise).
    ///
    /// ```
    /// use dlpack_core::{DataType, DataTypeCode};
    /// assert!(DataType::F32.validate().is_ok());
    /// let bad_fp4 = DataType::new(DataTypeCode::FLOAT4_E2M1FN, 8, 1);
    /// assert_eq!(
    ///     bad_fp4.validate().unwrap_err().to_string(),
    ///     "dtype float4_e2m1fn has bits = 8, expected one of [4]"
    /// );
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::UnknownDataTypeCode`] for a code DLPack 1.3 does not define,
    /// [`Error::ZeroLanes`] for `lanes == 0`, [`Error::UnsupportedBits`] for a width DLPack does
    /// not define for the code.
    pub fn validate(self) -> Result<(), Error> {
        if self.is_valid_byte_sized() {
            return Ok(());
        }
        self.validate_slow()
    }

    /// Whether [`DataType::validate`] accepts this dtype and its elements are whole bytes: the
    /// common case, answered with one table lookup and without building an error. It answers
    /// `false` for sub-byte lanes packed into whole bytes (fp4 x 2), which the full check
    /// handles; a unit test checks it against the full rules for every code and width.
    #[inline]
    pub(crate) fn is_valid_byte_sized(self) -> bool {
        /// Per code 0..=17: bit `k` is set when `bits == 8 * k` is allowed (fp6 and fp4 are
        /// never byte-sized on their own; opaque handles take any whole number of bytes).
        const BYTE_WIDTHS: [u32; 18] = {
            let mut table = [0u32; 18];
            let mut code = 0;
            while code < 18 {
                if code == DataTypeCode::OPAQUE_HANDLE.0 as usize {
                    table[code] = !1; // 8..=248 bits
                } else if let Some(allowed) = DataTypeCode(code as u8).allowed_bits() {
                    let mut i = 0;
                    while i < allowed.len() {
                        if allowed[i] % 8 == 0 {
                            table[code] |= 1 << (allowed[i] / 8);
                        }
                        i += 1;
                    }
                }
                code += 1;
            }
            table
        };
        let code = self.code.0 as usize;
        code < BYTE_WIDTHS.len()
            && self.bits.is_multiple_of(8)
            && (BYTE_WIDTHS[code] >> (self.bits / 8)) & 1 == 1
            && self.lanes != 0
    }

    #[cold]
    fn validate_slow(self) -> Result<(), Error> {
        let Some(allowed) = self.code.allowed_bits() else {
            return Err(Error::UnknownDataTypeCode { code: self.code.0 });
        };
        if self.lanes == 0 {
            return Err(Error::ZeroLanes { dtype: self });
        }
        let bits_ok = if self.code == DataTypeCode::OPAQUE_HANDLE {
            self.bits != 0 && self.bits.is_multiple_of(8)
        } else {
            allowed.contains(&self.bits)
        };
        if !bits_ok {
            return Err(Error::UnsupportedBits {
                dtype: self,
                allowed,
            });
        }
        Ok(())
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code;
        match code.name() {
            None => write!(
                f,
                "dtype(code={}, bits={}, lanes={})",
                code.0, self.bits, self.lanes
            )?,
            // bool and the small floats carry their width in their names already.
            Some(name) if code == DataTypeCode::BOOL && self.bits == 8 => f.write_str(name)?,
            Some(name) if code.0 >= DataTypeCode::FLOAT8_E3M4.0 => {
                let implied = code.allowed_bits().and_then(|b| b.first().copied());
                if implied == Some(self.bits) {
                    f.write_str(name)?
                } else {
                    write!(f, "{name}(bits={})", self.bits)?
                }
            }
            Some(name) => write!(f, "{name}{}", self.bits)?,
        }
        if self.lanes != 1 {
            write!(f, "x{}", self.lanes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_named_and_has_widths() {
        assert_eq!(DataTypeCode::ALL.len(), 18);
        for (i, &c) in DataTypeCode::ALL.iter().enumerate() {
            assert_eq!(c.0 as usize, i, "codes are 0..=17 in order");
            assert!(c.c_name().unwrap().starts_with("kDL"));
            assert!(c.allowed_bits().is_some());
        }
        assert!(!DataTypeCode(18).is_known());
    }

    #[test]
    fn display_names_match_numpy_and_pytorch() {
        let cases = [
            (DataType::BOOL, "bool"),
            (DataType::I8, "int8"),
            (DataType::U64, "uint64"),
            (DataType::F16, "float16"),
            (DataType::F64, "float64"),
            (DataType::BF16, "bfloat16"),
            (DataType::C64, "complex64"),
            (DataType::F8_E5M2, "float8_e5m2"),
            (
                DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 2),
                "float4_e2m1fnx2",
            ),
            (
                DataType::new(DataTypeCode::FLOAT6_E3M2FN, 8, 1),
                "float6_e3m2fn(bits=8)",
            ),
            (DataType::new(DataTypeCode::FLOAT, 32, 4), "float32x4"),
            (
                DataType::new(DataTypeCode::OPAQUE_HANDLE, 64, 1),
                "opaque_handle64",
            ),
            (
                DataType::new(DataTypeCode(200), 8, 1),
                "dtype(code=200, bits=8, lanes=1)",
            ),
        ];
        for (dtype, name) in cases {
            assert_eq!(dtype.to_string(), name);
        }
    }

    #[test]
    fn the_byte_sized_fast_check_agrees_with_the_full_rules() {
        // Every code and width natively. Under Miri, where these 393 216 cases took five
        // minutes (the check has no unsafe code to exercise), every known code and one past
        // them, with the widths around each allowed one.
        let (codes, widths): (Vec<u8>, Vec<u8>) = if cfg!(miri) {
            (
                (0..=18).chain([255]).collect(),
                vec![
                    0, 1, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 32, 63, 64, 65, 128, 248, 255,
                ],
            )
        } else {
            ((0..=255).collect(), (0..=255).collect())
        };
        for &code in &codes {
            for &bits in &widths {
                for lanes in [0u16, 1, 2, 3, 4, 16] {
                    let dt = DataType::new(DataTypeCode(code), bits, lanes);
                    let full = dt.validate_slow().is_ok() && dt.is_byte_sized();
                    let fast = dt.is_valid_byte_sized();
                    // The fast check never accepts what the rules refuse, and it misses only
                    // sub-byte lanes packed into whole bytes (fp4 x 2), left to the full check.
                    assert!(!fast || full, "{dt:?} accepted");
                    assert!(fast || !full || bits % 8 != 0, "{dt:?} missed");
                }
            }
        }
    }

    #[test]
    fn validate_accepts_defined_widths_and_rejects_the_rest() {
        for dt in [
            DataType::BOOL,
            DataType::I64,
            DataType::F16,
            DataType::BF16,
            DataType::C128,
            DataType::new(DataTypeCode::FLOAT6_E2M3FN, 6, 1),
            DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 2),
            DataType::new(DataTypeCode::OPAQUE_HANDLE, 64, 1),
            DataType::new(DataTypeCode(5), 32, 1),
        ] {
            assert_eq!(dt.validate(), Ok(()), "{dt}");
        }
        let bad = [
            DataType::new(DataTypeCode::FLOAT, 8, 1),
            DataType::new(DataTypeCode::INT, 7, 1),
            DataType::new(DataTypeCode::BOOL, 1, 1),
            DataType::new(DataTypeCode::FLOAT6_E3M2FN, 8, 1),
            DataType::new(DataTypeCode::FLOAT4_E2M1FN, 8, 1),
            DataType::new(DataTypeCode::OPAQUE_HANDLE, 12, 1),
            DataType::new(DataTypeCode::FLOAT, 32, 0),
            DataType::new(DataTypeCode(18), 8, 1),
        ];
        for dt in bad {
            assert!(dt.validate().is_err(), "{dt} must be refused");
        }
    }

    #[test]
    fn element_size_follows_the_header_rule() {
        assert_eq!(DataType::F32.element_bytes(), 4);
        assert_eq!(
            DataType::new(DataTypeCode::FLOAT, 32, 4).element_bytes(),
            16
        );
        let fp4x2 = DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 2);
        assert!(fp4x2.is_byte_sized());
        assert_eq!(fp4x2.element_bytes(), 1);
        let fp4 = DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 1);
        assert!(!fp4.is_byte_sized());
        assert_eq!(fp4.element_bytes(), 1);
    }
}
