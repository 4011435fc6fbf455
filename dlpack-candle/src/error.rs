//! [`CandleError`]: what can go wrong between candle and DLPack.

use core::fmt;

use candle_core::{DType, DeviceLocation};
use dlpack_core::{DataType, ManagedTensor};

use crate::import::CopyReason;

/// Everything that can go wrong moving a tensor between candle and DLPack.
///
/// Messages say what was found and what was expected. The enum is `#[non_exhaustive]`.
#[derive(Debug)]
#[non_exhaustive]
pub enum CandleError {
    /// DLPack refused the tensor: validation, a dtype or device the copy cannot read, ...
    DLPack(dlpack_core::Error),
    /// candle refused an operation.
    Candle(candle_core::Error),
    /// The candle tensor is not in host memory; this crate moves CPU tensors only.
    Device {
        /// Where the tensor lives.
        location: DeviceLocation,
    },
    /// A candle dtype that DLPack cannot carry faithfully.
    CandleDType {
        /// The candle dtype.
        dtype: DType,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A DLPack dtype that candle has no dtype for.
    NoCandleDType {
        /// The DLPack dtype.
        dtype: DataType,
        /// The candle dtype nearest to it, if any, to convert to before the transfer.
        nearest: Option<DType>,
        /// How the nearest dtype relates to it.
        note: &'static str,
    },
    /// [`CopyMode::Never`](crate::CopyMode::Never) was asked for, but only a copy can make this
    /// tensor a candle tensor. The tensor is given back, untouched: [`CandleError::into_tensor`].
    CopyRefused {
        /// Why a copy would be needed.
        reason: CopyReason,
        /// The tensor, still owned (its deleter runs when this error is dropped).
        tensor: ManagedTensor,
    },
    /// A producer handed over a `Vec` whose length is not the tensor's element count (a broken
    /// [`Export::give_vec`](dlpack_core::Export::give_vec)); the `Vec` was dropped.
    VecLength {
        /// The length of the `Vec`.
        found: usize,
        /// The tensor's element count.
        expected: usize,
    },
}

impl CandleError {
    /// The tensor a [`CandleError::CopyRefused`] gives back; `None` for every other error.
    pub fn into_tensor(self) -> Option<ManagedTensor> {
        match self {
            CandleError::CopyRefused { tensor, .. } => Some(tensor),
            _ => None,
        }
    }
}

impl fmt::Display for CandleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CandleError::DLPack(e) => write!(f, "DLPack: {e}"),
            CandleError::Candle(e) => write!(f, "candle: {e}"),
            CandleError::Device { location } => write!(
                f,
                "the candle tensor lives on {}; dlpack-candle moves CPU tensors only (candle's CUDA and Metal storages are not supported): expected DeviceLocation::Cpu",
                location_name(location)
            ),
            CandleError::CandleDType { dtype, reason } => write!(
                f,
                "candle dtype {} cannot be exchanged through DLPack: {reason}",
                dtype.as_str()
            ),
            CandleError::NoCandleDType {
                dtype,
                nearest,
                note,
            } => {
                write!(f, "DLPack dtype {dtype} has no candle dtype")?;
                match nearest {
                    Some(n) => write!(
                        f,
                        "; the nearest is {} ({note}): convert to it before the transfer",
                        n.as_str()
                    ),
                    None => write!(f, " ({note})"),
                }?;
                f.write_str("; candle holds u8, u32, i16, i32, i64, bf16, f16, f32, f64, f8e4m3 (float8_e4m3fn) and f8e8m0 (float8_e8m0fnu)")
            }
            CandleError::CopyRefused { reason, tensor } => write!(
                f,
                "no-copy import refused: {reason}; the {} tensor of shape {:?} would have to be copied into candle (use CopyMode::IfNeeded to allow it)",
                tensor.dtype(),
                tensor.shape()
            ),
            CandleError::VecLength { found, expected } => write!(
                f,
                "the producer handed over a Vec of {found} elements for a tensor of {expected} elements (expected equal lengths)"
            ),
        }
    }
}

/// `cpu`, `cuda:1`, `metal:0`.
fn location_name(location: &DeviceLocation) -> String {
    match location {
        DeviceLocation::Cpu => "cpu".into(),
        DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// The wrapped errors are transparent: their message is part of this one's (`DLPack: ...`,
/// `candle: ...`), so `source` goes on with *their* source, and a reporter that prints the
/// chain (anyhow's `{:#}`, say) shows each message once.
impl std::error::Error for CandleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CandleError::DLPack(e) => std::error::Error::source(e),
            CandleError::Candle(e) => std::error::Error::source(e),
            _ => None,
        }
    }
}

impl<T> From<dlpack_core::Refused<T>> for CandleError {
    /// The refusal's error (the value it gives back is dropped).
    fn from(refused: dlpack_core::Refused<T>) -> Self {
        CandleError::DLPack(refused.error)
    }
}

impl From<dlpack_core::Error> for CandleError {
    fn from(e: dlpack_core::Error) -> Self {
        CandleError::DLPack(e)
    }
}

impl From<candle_core::Error> for CandleError {
    fn from(e: candle_core::Error) -> Self {
        CandleError::Candle(e)
    }
}
