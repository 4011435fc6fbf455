//! [`CandleError`]: what can go wrong between candle and DLPack.

use core::fmt;

use candle_core::{DType, DeviceLocation};
use dlpack_core::{DataType, Refused};

/// Everything that can go wrong moving a tensor between candle and DLPack.
///
/// Messages say what was found and what was expected. The enum is `#[non_exhaustive]`.
/// [`into_owned`](crate::into_owned) and [`into_dlpack`](crate::into_dlpack) refuse with a
/// [`Refused`] that holds this error and gives their argument back; `?` turns it into this
/// error (dropping the value) in a function that returns `CandleError`.
///
/// ```
/// use dlpack_candle::CandleError;
/// use dlpack_core::{CopyMode, CopyReason, ManagedTensor};
///
/// fn strict(tensor: ManagedTensor) -> Result<candle_core::Tensor, CandleError> {
///     let (tensor, _) = dlpack_candle::into_owned(tensor, CopyMode::Never)?;
///     Ok(tensor)
/// }
///
/// let shared: std::sync::Arc<[f32]> = vec![1.0f32, 2.0].into();
/// let error = strict(ManagedTensor::export(shared)?).unwrap_err();
/// assert!(matches!(
///     error,
///     CandleError::DLPack(dlpack_core::Error::CopyRefused { reason: CopyReason::NotOwned })
/// ));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum CandleError {
    /// DLPack refused the tensor: validation, a dtype or device the copy cannot read, ...
    DLPack(dlpack_core::Error),
    /// candle refused an operation.
    Candle(candle_core::Error),
    /// A candle device this build cannot exchange tensors with: Metal, or CUDA without the
    /// feature `cuda`.
    Device {
        /// Where the tensor lives, or the device asked for.
        location: DeviceLocation,
    },
    /// A DLPack tensor on another device than the candle device it was asked onto.
    DeviceMismatch {
        /// Where the DLPack tensor lives.
        found: dlpack_core::Device,
        /// The candle device asked for.
        target: DeviceLocation,
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
}

impl fmt::Display for CandleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CandleError::DLPack(e) => write!(f, "DLPack: {e}"),
            CandleError::Candle(e) => write!(f, "candle: {e}"),
            CandleError::Device { location } => write!(
                f,
                "the candle tensor lives on {}, which dlpack-candle cannot exchange: {}",
                location_name(location),
                if cfg!(feature = "cuda") {
                    "expected the CPU or a CUDA device (Metal storage is not supported)"
                } else {
                    "expected the CPU (CUDA needs the feature `cuda`; Metal storage is not supported)"
                }
            ),
            CandleError::DeviceMismatch { found, target } => write!(
                f,
                "the DLPack tensor lives on {found}, not on the candle device asked for ({}): expected a tensor on that device; copy it there first",
                location_name(target)
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

impl<T> From<Refused<T>> for CandleError {
    /// The refusal's error (the value it gives back is dropped).
    fn from(refused: Refused<T>) -> Self {
        CandleError::DLPack(refused.error)
    }
}

impl<T> From<Refused<T, CandleError>> for CandleError {
    /// The refusal's error (the value it gives back is dropped).
    fn from(refused: Refused<T, CandleError>) -> Self {
        refused.error
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
