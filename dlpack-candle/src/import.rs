//! Import: a DLPack tensor as a candle CPU tensor, without a copy whenever candle's storage
//! model allows, and saying which way it went.

use core::fmt;
use core::mem::ManuallyDrop;

use candle_core::op::BackpropOp;
use candle_core::{CpuStorage, DType, Shape, Storage, Tensor};
use dlpack_core::{CheckedTensor, Element, ManagedTensor};

use crate::shape::candle_shape;
use crate::{CandleError, CandleExport, Float8E8M0, candle_dtype};

/// Whether [`import`] may copy.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum CopyMode {
    /// Move the memory in when possible, copy otherwise (Python's `copy=None`).
    #[default]
    IfNeeded,
    /// Move the memory in, or fail with [`CandleError::CopyRefused`] (`copy=False`).
    Never,
    /// Always copy into fresh candle storage (`copy=True`).
    Always,
}

/// How an imported tensor got its memory.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transfer {
    /// The tensor had been exported by this crate: it is the candle tensor that
    /// [`into_dlpack`](crate::into_dlpack) lent (the same storage, the same layout), or the copy
    /// that [`to_dlpack`](crate::to_dlpack) made, which becomes candle's storage as it is.
    Reclaimed,
    /// The producer handed its `Vec` over (a `Vec`, a `Box<[T]>`, an owned standard-layout
    /// ndarray `Array`, ...): candle owns the very same memory now.
    Moved,
    /// The elements were copied (a strided gather) into new candle storage.
    Copied(CopyReason),
}

impl Transfer {
    /// Whether the elements were copied.
    pub fn is_copy(self) -> bool {
        matches!(self, Transfer::Copied(_))
    }
}

/// Why an import copied (or, with [`CopyMode::Never`], would have to).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CopyReason {
    /// [`CopyMode::Always`] asked for a copy.
    Requested,
    /// The strides are not compact row-major, and candle's storage must own exactly the
    /// tensor's elements in order.
    NotContiguous,
    /// The producer does not hand its elements over as a `Vec` that is (nearly) exactly the
    /// tensor: a foreign tensor (NumPy, PyTorch, ...), a view, shared memory (`Arc<[T]>`), an
    /// array with an offset, an owned array or `Vec` of which the tensor is a small part (after
    /// slicing; handing it over would keep the rest alive), or memory that is not plain host
    /// memory.
    NotOwned,
}

impl fmt::Display for CopyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CopyReason::Requested => "a copy was requested",
            CopyReason::NotContiguous => {
                "the strides are not compact row-major, and candle storage must hold the elements in row-major order"
            }
            CopyReason::NotOwned => {
                "the producer does not hand its elements over as a Vec that is (nearly) exactly the tensor (a foreign tensor, a view, shared memory, non-host memory, or an owned array or Vec of which the tensor is a small part, as after slicing), and candle storage must own such a Vec"
            }
        })
    }
}

/// A candle tensor made from a DLPack tensor, and how it got its memory.
#[derive(Debug)]
pub struct Imported {
    /// The candle tensor (always on the CPU).
    pub tensor: Tensor,
    /// Whether its memory was reclaimed, moved or copied.
    pub transfer: Transfer,
}

/// Makes a candle CPU tensor from a DLPack tensor, without a copy when it can:
///
/// 1. a tensor this crate exported from candle comes back as that candle tensor
///    ([`Transfer::Reclaimed`]);
/// 2. a tensor whose producer owns its elements as a `Vec` of a candle dtype, in compact
///    row-major order, moves that `Vec` into candle's storage ([`Transfer::Moved`]): a `Vec`, a
///    `Box<[T]>`, an owned standard-layout ndarray `Array` exported by `dlpack-ndarray`;
/// 3. anything else is copied, with a strided gather ([`Transfer::Copied`], with the reason),
///    unless `mode` is [`CopyMode::Never`].
///
/// ```
/// use dlpack_candle::{CopyMode, CopyReason, Transfer};
/// use dlpack_core::ManagedTensor;
///
/// let data = vec![1.0f32, 2.0, 3.0];
/// let address = data.as_ptr();
/// let imported = dlpack_candle::import(ManagedTensor::export(data)?, CopyMode::Never)?;
/// assert_eq!(imported.transfer, Transfer::Moved);
/// assert_eq!(imported.tensor.to_vec1::<f32>()?, [1.0, 2.0, 3.0]);
/// let (storage, _) = imported.tensor.storage_and_layout();
/// let candle_core::Storage::Cpu(cpu) = &*storage else { unreachable!() };
/// assert_eq!(cpu.as_slice::<f32>()?.as_ptr(), address); // the same memory
///
/// // Shared memory cannot be moved: it is copied, and the reason says why.
/// let shared: std::sync::Arc<[f32]> = vec![4.0f32, 5.0].into();
/// let imported = dlpack_candle::import(ManagedTensor::export(shared.clone())?, CopyMode::IfNeeded)?;
/// assert_eq!(imported.transfer, Transfer::Copied(CopyReason::NotOwned));
/// let refused = dlpack_candle::import(ManagedTensor::export(shared)?, CopyMode::Never);
/// assert!(refused.unwrap_err().to_string().starts_with("no-copy import refused"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`CandleError::NoCandleDType`] for a dtype candle lacks, [`CandleError::CopyRefused`] (which
/// gives the tensor back) when `mode` is [`CopyMode::Never`] and only a copy would do,
/// [`CandleError::DLPack`] when the copy cannot read the tensor (device memory, say) or does
/// not fit in memory, and [`dlpack_core::Error::Overflow`] (as [`CandleError::DLPack`], whatever
/// the mode) for a shape candle cannot hold: one without elements whose non-zero sizes multiply
/// past `usize::MAX`, such as `[2^62, 2^62, 0]`. Except for `CopyRefused`, the tensor is deleted
/// when the import fails.
pub fn import(tensor: ManagedTensor, mode: CopyMode) -> Result<Imported, CandleError> {
    let dtype = candle_dtype(tensor.dtype())?;
    let mut tensor = tensor;
    if mode != CopyMode::Always {
        tensor = match tensor.reclaim::<CandleExport>() {
            Ok(export) => {
                return Ok(Imported {
                    tensor: export.into_tensor(),
                    transfer: Transfer::Reclaimed,
                });
            }
            Err(tensor) => tensor,
        };
    }
    // Neither a move nor a copy can give candle a shape it cannot hold.
    let shape = candle_shape(tensor.shape())?;
    if mode != CopyMode::Always {
        tensor = match move_in(tensor, dtype, &shape)? {
            Ok(moved) => {
                return Ok(Imported {
                    tensor: moved,
                    transfer: Transfer::Moved,
                });
            }
            Err(tensor) => tensor,
        };
    }
    let reason = if mode == CopyMode::Always {
        CopyReason::Requested
    } else if !tensor.is_row_major_contiguous() {
        CopyReason::NotContiguous
    } else {
        CopyReason::NotOwned
    };
    if mode == CopyMode::Never {
        return Err(CandleError::CopyRefused { reason, tensor });
    }
    Ok(Imported {
        tensor: candle_tensor(copy_to_storage(&tensor)?, shape),
        transfer: Transfer::Copied(reason),
    })
}

/// Copies any host-readable DLPack tensor of a candle dtype into a new candle CPU tensor, in
/// row-major order (the strided gather of [`CheckedTensor::to_vec`]). This is the copy path of
/// [`import`], for tensors that are only lent ([`dlpack_core::BorrowedTensor`]).
///
/// # Errors
///
/// [`CandleError::NoCandleDType`] for a dtype candle lacks, [`CandleError::DLPack`] when the
/// host cannot read the tensor or the copy does not fit in memory, and
/// [`dlpack_core::Error::Overflow`] (as [`CandleError::DLPack`]) for a shape without elements
/// whose non-zero sizes multiply past `usize::MAX`, which candle cannot hold.
pub fn copy_to_candle(tensor: &CheckedTensor) -> Result<Tensor, CandleError> {
    let shape = candle_shape(tensor.shape())?;
    Ok(candle_tensor(copy_to_storage(tensor)?, shape))
}

/// The elements of a host-readable DLPack tensor of a candle dtype, gathered in row-major order
/// into new candle CPU storage (allocated fallibly).
pub(crate) fn copy_to_storage(tensor: &CheckedTensor) -> Result<CpuStorage, CandleError> {
    fn copy<T: CandleElement>(tensor: &CheckedTensor) -> Result<CpuStorage, CandleError> {
        Ok(T::into_storage(tensor.to_vec::<T>()?))
    }
    match candle_dtype(tensor.dtype())? {
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

/// Takes the producer's `Vec` into candle storage, or gives the tensor back untouched.
fn move_in(
    tensor: ManagedTensor,
    dtype: DType,
    shape: &Shape,
) -> Result<Result<Tensor, ManagedTensor>, CandleError> {
    fn take<T: CandleElement>(
        tensor: ManagedTensor,
        shape: &Shape,
    ) -> Result<Result<Tensor, ManagedTensor>, CandleError> {
        match tensor.into_vec::<T>() {
            Ok(data) => into_candle(data, shape).map(Ok),
            Err(tensor) => Ok(Err(tensor)),
        }
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
        other => Err(unsupported(other)),
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

/// A row-major `Vec` of `shape`'s elements as a candle CPU tensor, without a copy.
fn into_candle<T: CandleElement>(data: Vec<T>, shape: &Shape) -> Result<Tensor, CandleError> {
    if data.len() != shape.elem_count() {
        return Err(CandleError::VecLength {
            found: data.len(),
            expected: shape.elem_count(),
        });
    }
    Ok(candle_tensor(T::into_storage(data), shape.clone()))
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
