//! Import: a DLPack tensor as a candle CPU tensor, without a copy whenever candle's storage
//! model allows, and saying which way it went.

use core::mem::ManuallyDrop;

use candle_core::op::BackpropOp;
use candle_core::{CpuStorage, DType, Shape, Storage, Tensor};
use dlpack_core::{
    CheckedTensor, CopyMode, CopyReason, DeviceType, Element, ManagedTensor, Refused, Transfer,
};

use crate::shape::candle_shape;
use crate::{CandleError, CandleExport, Float8E8M0, candle_dtype};

/// Takes a DLPack tensor over as a candle CPU tensor, without a copy when it can, and says how
/// ([`Transfer`]):
///
/// 1. a tensor this crate exported from candle comes back as that candle tensor
///    ([`Transfer::Reclaimed`]): the tensor [`into_dlpack`](crate::into_dlpack) lent, with its
///    storage and layout, or the copy [`to_dlpack`](crate::to_dlpack) made, as candle storage;
/// 2. a tensor whose producer owns its elements as a `Vec` of a candle dtype, in compact
///    row-major order, moves that `Vec` into candle's storage ([`Transfer::Moved`]): a `Vec`, a
///    `Box<[T]>`, an owned standard-layout ndarray `Array` exported by `dlpack-ndarray`;
/// 3. anything else is copied, with a strided gather, into new candle storage
///    ([`Transfer::Copied`], with [`CopyReason::Layout`] for strides that are not compact
///    row-major and [`CopyReason::NotOwned`] otherwise), unless `mode` is [`CopyMode::Never`].
///
/// [`CopyMode::Always`] copies every tensor, also one the first two steps would take over
/// ([`CopyReason::Requested`]).
///
/// ```
/// use dlpack_core::{CopyMode, CopyReason, Error, ManagedTensor, Transfer};
///
/// let data = vec![1.0f32, 2.0, 3.0];
/// let address = data.as_ptr();
/// let (t, transfer) = dlpack_candle::into_owned(ManagedTensor::export(data)?, CopyMode::Never)?;
/// assert_eq!(transfer, Transfer::Moved);
/// assert_eq!(t.to_vec1::<f32>()?, [1.0, 2.0, 3.0]);
/// let (storage, _) = t.storage_and_layout();
/// let candle_core::Storage::Cpu(cpu) = &*storage else { unreachable!() };
/// assert_eq!(cpu.as_slice::<f32>()?.as_ptr(), address); // the same memory
///
/// // Shared memory cannot be moved: refused under `Never`, with the tensor given back ...
/// let shared: std::sync::Arc<[f32]> = vec![4.0f32, 5.0].into();
/// let refused = dlpack_candle::into_owned(ManagedTensor::export(shared)?, CopyMode::Never)
///     .unwrap_err();
/// assert!(matches!(
///     refused.error,
///     dlpack_candle::CandleError::DLPack(Error::CopyRefused { reason: CopyReason::NotOwned })
/// ));
/// // ... and copied when a copy is allowed.
/// let (t, transfer) = dlpack_candle::into_owned(refused.value, CopyMode::IfNeeded)?;
/// assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
/// assert_eq!(t.to_vec1::<f32>()?, [4.0, 5.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// Every error gives the tensor back, untouched, in the [`Refused`] (`?` turns it into its
/// [`CandleError`] and drops the tensor):
///
/// - [`CandleError::NoCandleDType`] for a dtype candle lacks, whatever the mode;
/// - [`dlpack_core::Error::Overflow`] (as [`CandleError::DLPack`], whatever the mode) for a
///   shape candle cannot hold: one without elements whose non-zero sizes multiply past
///   `usize::MAX`, such as `[2^62, 2^62, 0]`;
/// - [`dlpack_core::Error::CopyRefused`] (as [`CandleError::DLPack`]) when `mode` is
///   [`CopyMode::Never`] and only a copy would do;
/// - [`CandleError::DLPack`] when the copy cannot read the tensor (device memory, say) or does
///   not fit in memory.
pub fn into_owned(
    tensor: ManagedTensor,
    mode: CopyMode,
) -> Result<(Tensor, Transfer), Refused<ManagedTensor, CandleError>> {
    into_owned_on(tensor, &candle_core::Device::Cpu, mode)
}

/// [`into_owned`] onto a given candle device: `Device::Cpu` (what [`into_owned`] does), or with
/// the feature `cuda` a candle CUDA device, for a `kDLCUDA` tensor on its GPU (the module
/// `dlpack_candle::cuda` says how: a candle export comes back as itself, a bare dlpack-cuda
/// `CudaBuffer` hands its memory to candle, anything else is copied on the device).
///
/// ```
/// use candle_core::Device;
/// use dlpack_core::{CopyMode, ManagedTensor, Transfer};
///
/// let (t, transfer) = dlpack_candle::into_owned_on(
///     ManagedTensor::export(vec![1u32, 2, 3])?,
///     &Device::Cpu,
///     CopyMode::IfNeeded,
/// )?;
/// assert_eq!((t.to_vec1::<u32>()?, transfer), (vec![1, 2, 3], Transfer::Moved));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// Those of [`into_owned`], each giving the tensor back; and [`CandleError::Device`] for a
/// candle device this build cannot reach (Metal; CUDA without the feature `cuda`),
/// [`CandleError::DeviceMismatch`] for a tensor that is not on the CUDA device asked for,
/// [`CandleError::DLPack`] when the driver contradicts its device claim, and
/// [`CandleError::Candle`] when a CUDA call fails.
pub fn into_owned_on(
    tensor: ManagedTensor,
    device: &candle_core::Device,
    mode: CopyMode,
) -> Result<(Tensor, Transfer), Refused<ManagedTensor, CandleError>> {
    let dtype = match candle_dtype(tensor.dtype()) {
        Ok(dtype) => dtype,
        Err(error) => return refuse(error, tensor),
    };
    match device {
        candle_core::Device::Cpu => {}
        #[cfg(feature = "cuda")]
        candle_core::Device::Cuda(cuda) => {
            let shape = match candle_shape(tensor.shape()) {
                Ok(shape) => shape,
                Err(error) => return refuse(error, tensor),
            };
            return crate::cuda::into_owned(tensor, device, cuda, dtype, shape, mode);
        }
        #[allow(unreachable_patterns)] // CUDA is matched above with the feature `cuda`
        other => {
            let location = other.location();
            return refuse(CandleError::Device { location }, tensor);
        }
    }
    let mut tensor = tensor;
    // A candle export on the CPU comes back as itself; one on a GPU is not a CPU tensor.
    if mode != CopyMode::Always && tensor.device().device_type == DeviceType::CPU {
        tensor = match tensor.reclaim::<CandleExport>() {
            Ok(export) => return Ok((export.into_tensor(), Transfer::Reclaimed)),
            Err(tensor) => tensor,
        };
    }
    // Neither a move nor a copy can give candle a shape it cannot hold.
    let shape = match candle_shape(tensor.shape()) {
        Ok(shape) => shape,
        Err(error) => return refuse(error, tensor),
    };
    if mode != CopyMode::Always {
        tensor = match move_in(tensor, dtype, &shape) {
            Ok(moved) => return Ok((moved, Transfer::Moved)),
            Err(tensor) => tensor,
        };
    }
    let transfer = match copy_transfer(&tensor, mode) {
        Ok(transfer) => transfer,
        Err(error) => return refuse(error, tensor),
    };
    match copy_to_storage(&tensor, dtype) {
        Ok(storage) => Ok((candle_tensor(storage, shape), transfer)),
        Err(error) => refuse(error, tensor),
    }
}

/// What a copy of `tensor`, which `mode` has not let candle take over without one, is:
/// [`CopyReason::Requested`] under [`CopyMode::Always`], else [`CopyReason::NotOwned`] for a
/// compact row-major tensor and [`CopyReason::Layout`] for another layout; or the refusal of
/// [`CopyMode::Never`]. The CPU and CUDA paths of [`into_owned_on`] share it.
pub(crate) fn copy_transfer(
    tensor: &CheckedTensor,
    mode: CopyMode,
) -> Result<Transfer, dlpack_core::Error> {
    let reason = if mode == CopyMode::Always {
        CopyReason::Requested
    } else if tensor.is_row_major_contiguous() {
        CopyReason::NotOwned
    } else {
        CopyReason::Layout
    };
    mode.copy(reason)
}

/// [`into_owned_on`]'s refusal: the error, and the tensor back.
pub(crate) fn refuse<T>(
    error: impl Into<CandleError>,
    tensor: ManagedTensor,
) -> Result<T, Refused<ManagedTensor, CandleError>> {
    Err(Refused {
        error: error.into(),
        value: tensor,
    })
}

/// Copies any host-readable DLPack tensor of a candle dtype into a new candle CPU tensor, in
/// compact row-major order, whatever its strides (the strided gather of
/// [`CheckedTensor::to_vec`]): the copy [`into_owned`] makes, for a tensor that is only lent,
/// such as a [`dlpack_core::BorrowedTensor`] or a [`ManagedTensor`] the caller keeps.
///
/// ```
/// use candle_core::{Device, Tensor};
///
/// let t = Tensor::arange(0u32, 6, &Device::Cpu)?.reshape((2, 3))?;
/// let lent = dlpack_candle::to_dlpack(&t.t()?)?;
/// let copy = dlpack_candle::to_owned(&lent)?;
/// assert_eq!(copy.to_vec2::<u32>()?, [[0, 3], [1, 4], [2, 5]]);
/// assert!(copy.is_contiguous());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`CandleError::NoCandleDType`] for a dtype candle lacks, [`CandleError::DLPack`] when the
/// host cannot read the tensor or the copy does not fit in memory, and
/// [`dlpack_core::Error::Overflow`] (as [`CandleError::DLPack`]) for a shape without elements
/// whose non-zero sizes multiply past `usize::MAX`, which candle cannot hold.
pub fn to_owned(tensor: &CheckedTensor) -> Result<Tensor, CandleError> {
    to_owned_on(tensor, &candle_core::Device::Cpu)
}

/// [`to_owned`] onto a given candle device: `Device::Cpu` (what [`to_owned`] does), or with the
/// feature `cuda` a candle CUDA device, for a `kDLCUDA` tensor on its GPU, copied on the device
/// after the driver has checked its device claim (the module `dlpack_candle::cuda`).
///
/// ```
/// use candle_core::Device;
/// use dlpack_core::ManagedTensor;
///
/// let kept = ManagedTensor::export(vec![1.5f64, 2.5])?;
/// let copy = dlpack_candle::to_owned_on(&kept, &Device::Cpu)?;
/// assert_eq!(copy.to_vec1::<f64>()?, [1.5, 2.5]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// Those of [`to_owned`]; and [`CandleError::Device`], [`CandleError::DeviceMismatch`],
/// [`CandleError::DLPack`] and [`CandleError::Candle`] as for [`into_owned_on`].
pub fn to_owned_on(
    tensor: &CheckedTensor,
    device: &candle_core::Device,
) -> Result<Tensor, CandleError> {
    let dtype = candle_dtype(tensor.dtype())?;
    let shape = candle_shape(tensor.shape())?;
    match device {
        candle_core::Device::Cpu => Ok(candle_tensor(copy_to_storage(tensor, dtype)?, shape)),
        #[cfg(feature = "cuda")]
        candle_core::Device::Cuda(cuda) => {
            crate::cuda::to_owned(tensor, device, cuda, dtype, shape)
        }
        #[allow(unreachable_patterns)] // CUDA is matched above with the feature `cuda`
        other => Err(CandleError::Device {
            location: other.location(),
        }),
    }
}

/// The elements of a host-readable DLPack tensor of candle dtype `dtype` (the one
/// [`candle_dtype`] gives for the tensor's), gathered in row-major order into new candle CPU
/// storage (allocated fallibly).
pub(crate) fn copy_to_storage(
    tensor: &CheckedTensor,
    dtype: DType,
) -> Result<CpuStorage, CandleError> {
    fn copy<T: CandleElement>(tensor: &CheckedTensor) -> Result<CpuStorage, CandleError> {
        Ok(T::into_storage(tensor.to_vec::<T>()?))
    }
    match dtype {
        DType::U8 => copy::<u8>(tensor),
        DType::U32 => copy::<u32>(tensor),
        DType::I16 => copy::<i16>(tensor),
        DType::I32 => copy::<i32>(tensor),
        DType::I64 => copy::<i64>(tensor),
        DType::BF16 => copy::<half::bf16>(tensor),
        DType::F16 => copy::<half::f16>(tensor),
        DType::F32 => copy::<f32>(tensor),
        DType::F64 => copy::<f64>(tensor),
        DType::F8E4M3 => copy::<float8::F8E4M3>(tensor),
        DType::F8E8M0 => copy::<Float8E8M0>(tensor),
        other => Err(unsupported(other)),
    }
}

/// Takes the producer's `Vec` into candle storage of `dtype` (the one [`candle_dtype`] gives
/// for the tensor's), or gives the tensor back untouched.
fn move_in(tensor: ManagedTensor, dtype: DType, shape: &Shape) -> Result<Tensor, ManagedTensor> {
    fn take<T: CandleElement>(
        tensor: ManagedTensor,
        shape: &Shape,
    ) -> Result<Tensor, ManagedTensor> {
        // `into_vec` hands over exactly the tensor's elements, row-major, and `shape` is the
        // tensor's: candle's storage holds exactly `shape`'s elements, as candle requires.
        let data = tensor.into_vec::<T>()?;
        Ok(candle_tensor(T::into_storage(data), shape.clone()))
    }
    match dtype {
        DType::U8 => take::<u8>(tensor, shape),
        DType::U32 => take::<u32>(tensor, shape),
        DType::I16 => take::<i16>(tensor, shape),
        DType::I32 => take::<i32>(tensor, shape),
        DType::I64 => take::<i64>(tensor, shape),
        DType::BF16 => take::<half::bf16>(tensor, shape),
        DType::F16 => take::<half::f16>(tensor, shape),
        DType::F32 => take::<f32>(tensor, shape),
        DType::F64 => take::<f64>(tensor, shape),
        DType::F8E4M3 => take::<float8::F8E4M3>(tensor, shape),
        DType::F8E8M0 => take::<Float8E8M0>(tensor, shape),
        // No other dtype comes from `candle_dtype`; the copy path reports it.
        _ => Err(tensor),
    }
}

/// A candle dtype [`candle_dtype`] never returns (placeholders, dtypes newer than this crate).
fn unsupported(dtype: DType) -> CandleError {
    match crate::dlpack_dtype(dtype) {
        Err(e) => e,
        Ok(_) => CandleError::CandleDType {
            dtype,
            reason: "dlpack-candle has no storage conversion for it",
        },
    }
}

/// CPU storage holding exactly `shape`'s elements in row-major order, as a candle tensor (no
/// copy). `shape` comes from [`candle_shape`], so candle's arithmetic on it cannot overflow.
pub(crate) fn candle_tensor(storage: CpuStorage, shape: Shape) -> Tensor {
    Tensor::from_storage(Storage::Cpu(storage), shape, BackpropOp::none(), false)
}

/// An element type whose `Vec` is the storage of one candle CPU dtype.
pub(crate) trait CandleElement: Element {
    /// Wraps the `Vec` (no copy) as candle CPU storage.
    fn into_storage(data: Vec<Self>) -> CpuStorage;
}

macro_rules! candle_element {
    ($($ty:ty => $variant:ident),* $(,)?) => {$(
        impl CandleElement for $ty {
            fn into_storage(data: Vec<Self>) -> CpuStorage {
                CpuStorage::$variant(data)
            }
        }
    )*};
}

candle_element! {
    u8 => U8,
    u32 => U32,
    i16 => I16,
    i32 => I32,
    i64 => I64,
    half::bf16 => BF16,
    half::f16 => F16,
    f32 => F32,
    f64 => F64,
    float8::F8E4M3 => F8E4M3,
}

impl CandleElement for Float8E8M0 {
    fn into_storage(data: Vec<Self>) -> CpuStorage {
        let mut data = ManuallyDrop::new(data);
        let (ptr, len, capacity) = (data.as_mut_ptr(), data.len(), data.capacity());
        // SAFETY: `Float8E8M0` is `repr(transparent)` over `u8`, so the allocation (made for
        // `capacity` elements of size 1 and alignment 1) has exactly the layout a `Vec<u8>` of
        // that capacity frees, its first `len` bytes are initialised, and every byte is a valid
        // `u8`. The original `Vec` is forgotten, so the buffer has one owner.
        let bytes = unsafe { Vec::from_raw_parts(ptr.cast::<u8>(), len, capacity) };
        CpuStorage::F8E8M0(bytes)
    }
}
