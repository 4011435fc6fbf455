//! candle CUDA tensors in and out of DLPack (feature `cuda`): `kDLCUDA`, with the stream
//! handshake of dlpack-cuda.
//!
//! The crate's four functions take CUDA tensors as they take CPU ones:
//!
//! - [`into_dlpack`](crate::into_dlpack) lends a candle CUDA tensor as `kDLCUDA` on its GPU,
//!   zero-copy: the data pointer is the storage's device address (the layout's start offset is
//!   the byte offset), with the tensor's shape and strides, read-only, the tensor kept alive by
//!   the export;
//! - [`to_dlpack`](crate::to_dlpack) copies it on the device into a compact row-major tensor
//!   the export owns (writable);
//! - [`into_owned_on`](crate::into_owned_on) takes a `kDLCUDA` tensor into a candle CUDA
//!   device: a tensor exported from that candle device comes back as itself
//!   ([`Transfer::Reclaimed`]), a bare dlpack-cuda [`CudaBuffer`] of a candle dtype hands its
//!   memory to candle's storage ([`Transfer::Moved`]), and any other tensor (PyTorch's, CuPy's,
//!   JAX's, or one exported from another candle device of the same GPU) is copied on the device
//!   ([`Transfer::Copied`]), or refused under [`CopyMode::Never`]. A candle export handed to
//!   Python (a `dlpack_pyo3::DLPackTensor`) and imported back from there is copied too: the
//!   Python object keeps the export and may lend it again, so the import cannot take it over;
//! - [`to_owned_on`](crate::to_owned_on) copies a tensor the caller keeps.
//!
//! # Why foreign memory is copied, not wrapped
//!
//! candle 0.11 can wrap device memory it did not allocate (`CudaStream::upgrade_device_ptr`,
//! `CudaStorage::wrap_cuda_slice`, `Tensor::from_storage`), but the `CudaSlice` it wraps frees
//! the memory when candle drops the storage, candle offers no way to take the slice back out,
//! and nothing tells a caller when the storage is dropped. A wrapped PyTorch tensor would be
//! freed by candle behind PyTorch's caching allocator, which hands the same memory out again:
//! a double free and a use after free. Keeping the DLPack owner alive "for the storage's whole
//! life" has no hook to hang on. So a tensor candle cannot own is copied on the device, once
//! (cuMemcpyDtoDAsync), and the DLPack owner is released only after the copy has run. A layout
//! that is not compact row-major is copied as the whole span of memory it reaches (a column of
//! a large matrix copies the matrix) and gathered in row-major order by candle's
//! `index_select` (with an 8-byte index per element); for i16, i32 and the float8 types, for
//! which candle-kernels has no such gather, through an integer type of the same width and one
//! more copy. Memory candle can own is taken without a copy: candle's own exports, and a
//! `CudaBuffer`'s allocation, which a slice on candle's stream takes over, so that candle
//! orders its uses and its free like those of its own storage.
//!
//! # Streams
//!
//! A candle CUDA device queues its work on one stream: the per-thread default stream for
//! `Device::new_cuda` (the stream of whichever thread calls), a stream of its own for
//! `Device::new_cuda_with_stream`. DLPack's handshake needs a stream that means the same on
//! every thread, so this crate keeps one stream per candle device for it, the *exchange
//! stream*, and [`hooks`] are dlpack-cuda's [`CudaHooks`] on it:
//!
//! - an export makes the exchange stream wait (with an event) for the work candle has queued,
//!   as seen from the exporting thread, and for the storage's last write that cudarc recorded;
//!   a consumer's `__dlpack__(stream=s)`, through the hooks'
//!   [`make_ready`](dlpack_core::DeviceHooks::make_ready), makes its stream `s` wait for the
//!   exchange stream. For a device on the per-thread stream, export on the thread that queued
//!   the tensor's computation, or after `Device::synchronize`: candle records a kernel's
//!   output as read, not written, so another thread's stream is not waited for;
//! - an import expects the tensor ready on the exchange stream (what
//!   `dlpack_pyo3::cuda::from_dlpack_cuda(x, &hooks)` arranges with the producer) and makes the
//!   candle device's stream wait for it first, whatever it then does; a moved `CudaBuffer` is
//!   also waited for on its own stream.
//!
//! None of this waits on the host, but for two things: the first exchange of a candle device
//! makes its stream, and cudarc synchronises the device's context once then (it switches the
//! context to tracking reads and writes with events); and the copy of a foreign tensor is
//! waited for before the tensor goes back to its producer, which may reuse the memory at once
//! (PyTorch's allocator does) on a stream candle's work is not ordered before.
//!
//! ```no_run
//! use candle_core::{Device, Tensor};
//! use dlpack_core::{CopyMode, DeviceHooks, Transfer};
//! use dlpack_core::protocol::parse_stream;
//!
//! let gpu = Device::new_cuda(0)?;
//! let t = Tensor::arange(0f32, 6., &gpu)?.reshape((2, 3))?;
//!
//! // candle -> DLPack: candle's own device memory, read-only.
//! // SAFETY: `t.t()?` shares `t`'s storage, which nothing writes while the export lives.
//! let dl = unsafe { dlpack_candle::into_dlpack(t.t()?) }?;
//! assert_eq!(dl.device(), dlpack_core::Device::cuda(0));
//! // A consumer on the legacy default stream asks for the tensor: an event, no host wait.
//! let hooks = dlpack_candle::cuda::hooks(&gpu)?;
//! hooks.make_ready(dl.device(), parse_stream(dl.device(), Some(1))?)?;
//!
//! // ... and back, without a copy.
//! let (back, transfer) = dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Never)?;
//! assert_eq!(transfer, Transfer::Reclaimed);
//! assert_eq!(back.to_vec2::<f32>()?, [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Building
//!
//! The feature turns on candle-core's `cuda`, whose kernels nvcc compiles, and links the CUDA
//! libraries candle uses (libcuda, libcublas, libcublasLt, libcurand, libnvrtc): see
//! CONTRIBUTING.md ("candle on CUDA") for a build on a machine without a GPU or a CUDA
//! installation.

use core::ffi::c_void;
use core::ptr;
use std::sync::{Arc, Mutex, PoisonError};

use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, result,
};
use candle_core::cuda_backend::{
    CudaDType, CudaDevice, CudaStorage, CudaStorageSlice, DeviceId, WrapErr,
};
use candle_core::op::BackpropOp;
use candle_core::{DType, Shape, Storage, Tensor};
use dlpack_core::{CheckedTensor, CopyMode, Device, ManagedTensor, Refused, Transfer};
use dlpack_cuda::{ContextScope, CudaBuffer, CudaHooks};

use crate::CandleError;
use crate::export::Located;
use crate::import::{copy_transfer, refuse};

/// dlpack-cuda's hooks on the exchange stream of candle device `device` (see the
/// [module](self) docs): what a consumer of this crate's CUDA exports orders its stream after
/// (hand them to `dlpack_pyo3::DLPackTensor::with_hooks`), and what an import into `device`
/// expects its tensor ready on (hand them to `dlpack_pyo3::cuda::from_dlpack_cuda`). One per
/// candle device, made on first use and kept for the process (with its stream).
///
/// ```no_run
/// let gpu = candle_core::Device::new_cuda(0)?;
/// let hooks = dlpack_candle::cuda::hooks(&gpu)?;
/// assert!(hooks.consumer_stream(dlpack_core::Device::cuda(0))? > 2); // its own stream
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`CandleError::Device`] for a device that is not a CUDA one, [`CandleError::DLPack`] when the
/// CUDA driver cannot be loaded, and [`CandleError::Candle`] when the stream cannot be made.
pub fn hooks(device: &candle_core::Device) -> Result<Arc<CudaHooks>, CandleError> {
    match device {
        candle_core::Device::Cuda(cuda) => exchange(cuda),
        other => Err(CandleError::Device {
            location: other.location(),
        }),
    }
}

/// The hooks on the exchange stream of `device`, made on first use: one per candle device
/// (which has a context of its own, `CudaContext::new`), made from that context, so that its
/// context tracks reads and writes with events (cudarc's multi-stream mode) from then on.
fn exchange(device: &CudaDevice) -> Result<Arc<CudaHooks>, CandleError> {
    static HOOKS: Mutex<Vec<(DeviceId, Arc<CudaHooks>)>> = Mutex::new(Vec::new());
    let mut all = HOOKS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, hooks)) = all.iter().find(|(id, _)| *id == device.id()) {
        return Ok(hooks.clone());
    }
    // The first extra stream of a context: cudarc synchronises the context once here.
    let stream = device.cuda_stream().context().new_stream().w()?;
    let hooks = Arc::new(CudaHooks::new(stream)?);
    all.push((device.id(), hooks.clone()));
    Ok(hooks)
}

/// The exchange stream of `device` ([`exchange`]'s hooks' stream).
fn exchange_stream(device: &CudaDevice) -> Result<Arc<CudaStream>, CandleError> {
    let hooks = exchange(device)?;
    // `exchange` made the hooks with a stream of exactly this device's ordinal.
    Ok(hooks
        .stream(dlpack_device(device))
        .cloned()
        .unwrap_or_else(|| device.cuda_stream()))
}

/// Where a candle CUDA tensor's elements are, for an export: the storage slice's device address
/// and length, the storage's dtype, the device. The exchange stream is made to wait for the
/// work candle queued (as seen from this thread) and, through cudarc's event tracking, for the
/// slice's last write.
pub(crate) fn locate(
    device: &CudaDevice,
    storage: &CudaStorage,
) -> Result<(usize, usize, DType), CandleError> {
    let stream = exchange_stream(device)?;
    stream.join(&device.cuda_stream()).w()?;
    macro_rules! address {
        ($slice:expr, $dtype:expr) => {{
            // With event tracking, `stream` waits for the slice's last write, and the guard
            // records a read on `stream` when dropped (here).
            let (address, _read) = $slice.device_ptr(&stream);
            (address as usize, $slice.num_bytes(), $dtype)
        }};
    }
    Ok(match &storage.slice {
        CudaStorageSlice::U8(s) => address!(s, DType::U8),
        CudaStorageSlice::U32(s) => address!(s, DType::U32),
        CudaStorageSlice::I16(s) => address!(s, DType::I16),
        CudaStorageSlice::I32(s) => address!(s, DType::I32),
        CudaStorageSlice::I64(s) => address!(s, DType::I64),
        CudaStorageSlice::BF16(s) => address!(s, DType::BF16),
        CudaStorageSlice::F16(s) => address!(s, DType::F16),
        CudaStorageSlice::F32(s) => address!(s, DType::F32),
        CudaStorageSlice::F64(s) => address!(s, DType::F64),
        CudaStorageSlice::F8E4M3(s) => address!(s, DType::F8E4M3),
        CudaStorageSlice::F6E2M3(s) => address!(s, DType::F6E2M3),
        CudaStorageSlice::F6E3M2(s) => address!(s, DType::F6E3M2),
        CudaStorageSlice::F4(s) => address!(s, DType::F4),
        CudaStorageSlice::F8E8M0(s) => address!(s, DType::F8E8M0),
    })
}

/// The DLPack device of a candle CUDA device.
pub(crate) fn dlpack_device(device: &CudaDevice) -> Device {
    // cudarc opened the device with `ordinal as i32`.
    Device::cuda(device.cuda_stream().context().ordinal() as i32)
}

/// The data pointer of a device address: never dereferenced by the host, so without
/// provenance.
pub(crate) fn device_pointer(address: usize) -> *const c_void {
    ptr::without_provenance(address)
}

/// A compact row-major copy of a candle CUDA tensor, made on its device, and where its elements
/// are: what [`to_dlpack`](crate::to_dlpack) exports.
pub(crate) fn copy_for_export(
    tensor: &Tensor,
    device: &CudaDevice,
) -> Result<(Tensor, Located), CandleError> {
    let dtype = tensor.dtype();
    // candle 0.11's CUDA build has no strided-copy kernel for i16, i32 and f8e4m3 (it asks for
    // `ucopy_i16`, `ucopy_i32`, `ucopy_f8e4m3`; candle-kernels defines no i16 or i32 one, and
    // names its f8e4m3 kernels `*_f8_e4m3`: huggingface/candle#3886, for f8e4m3 only; the i16
    // and i32 gap has no upstream issue yet), and refuses to allocate f8e8m0: those are
    // gathered by this crate instead, from a read-only export of the tensor itself.
    let own_gather = dtype == DType::F8E8M0
        || (!tensor.is_contiguous() && matches!(dtype, DType::I16 | DType::I32 | DType::F8E4M3));
    copy_fits(tensor.elem_count(), dtype.size_in_bytes())?;
    let copy = if tensor.elem_count() == 0 {
        // Nothing to copy, and no zero-byte allocation (which the driver refuses): an empty
        // tensor over a one-element slice.
        copy_span(device, dtype, 0, 0)?.reshape(tensor.shape())?
    } else if own_gather {
        // SAFETY: the lent export reads `tensor`'s storage only until `copy` has waited for its
        // gather (before it returns), and nothing in this function writes to it.
        let lent = unsafe { crate::into_dlpack(tensor.clone()) }.map_err(|r| r.error)?;
        let target = candle_core::Device::Cuda(device.clone());
        let shape = crate::shape::candle_shape(lent.shape())?;
        copy(&lent, &target, device, dtype, shape)?
    } else {
        // Always a new storage (also for a tensor that is compact already), that only `copy`
        // reaches.
        tensor.force_contiguous()?
    };
    let located = {
        let (storage, _) = copy.storage_and_layout();
        let Storage::Cuda(cuda) = &*storage else {
            return Err(CandleError::Device {
                location: copy.device().location(),
            });
        };
        let (address, bytes, _) = locate(device, cuda)?;
        Located {
            data: device_pointer(address),
            bytes,
            byte_offset: 0,
            dtype: crate::dlpack_dtype(copy.dtype())?,
            device: dlpack_device(device),
        }
    };
    Ok((copy, located))
}

/// Drops a held CUDA tensor with its context current on this thread (a DLPack deleter runs on
/// any thread, where no context may be current: cudarc frees a slice on its stream without
/// making the context current when event tracking is off).
pub(crate) fn drop_in_context(tensor: Tensor) {
    let scope = match tensor.device() {
        candle_core::Device::Cuda(device) => ContextScope::enter(device.cuda_stream().context()),
        _ => return drop(tensor),
    };
    // Without a scope (the driver refused), the tensor is dropped anyway and cudarc records the
    // driver's error in the context.
    let _scope = scope;
    drop(tensor);
}

/// [`crate::into_owned_on`] for a candle CUDA device.
pub(crate) fn into_owned(
    tensor: ManagedTensor,
    target: &candle_core::Device,
    device: &CudaDevice,
    dtype: DType,
    shape: Shape,
    mode: CopyMode,
) -> Result<(Tensor, Transfer), Refused<ManagedTensor, CandleError>> {
    if tensor.device() != dlpack_device(device) {
        return refuse(mismatch(tensor.device(), target), tensor);
    }
    // Whatever happens next reads the tensor on candle's stream, after the exchange stream,
    // which the producer's handshake made wait for its writes.
    let ordered = exchange_stream(device)
        .and_then(|exchange| device.cuda_stream().join(&exchange).w().map_err(Into::into));
    if let Err(error) = ordered {
        return refuse(error, tensor);
    }
    let mut tensor = tensor;
    if mode != CopyMode::Always {
        tensor = match tensor.reclaim::<crate::CandleExport>() {
            // Exported from this very candle device: the tensor itself.
            Ok(export) if export.is_on(target) => {
                return Ok((export.into_tensor(), Transfer::Reclaimed));
            }
            // From another candle device of this GPU (another context and stream, which candle
            // does not mix): described again, and copied below like any tensor.
            Ok(export) => ManagedTensor::export(export)
                .expect("a candle tensor that was exported once exports again"),
            Err(tensor) => tensor,
        };
        tensor = match move_slice(tensor, device, dtype, &shape) {
            Ok(Ok(moved)) => return Ok((moved, Transfer::Moved)),
            Ok(Err((error, value))) => return Err(Refused { error, value }),
            Err(tensor) => tensor,
        };
    }
    let transfer = match copy_transfer(&tensor, mode) {
        Ok(transfer) => transfer,
        Err(error) => return refuse(error, tensor),
    };
    match copy(&tensor, target, device, dtype, shape) {
        Ok(copied) => Ok((copied, transfer)),
        Err(error) => refuse(error, tensor),
    }
}

/// [`crate::to_owned_on`] for a candle CUDA device.
pub(crate) fn to_owned(
    tensor: &CheckedTensor,
    target: &candle_core::Device,
    device: &CudaDevice,
    dtype: DType,
    shape: Shape,
) -> Result<Tensor, CandleError> {
    if tensor.device() != dlpack_device(device) {
        return Err(mismatch(tensor.device(), target));
    }
    let exchange = exchange_stream(device)?;
    device.cuda_stream().join(&exchange).w()?;
    copy(tensor, target, device, dtype, shape)
}

/// The refusal of a tensor on another device than the candle device asked for.
fn mismatch(found: Device, target: &candle_core::Device) -> CandleError {
    CandleError::DeviceMismatch {
        found,
        target: target.location(),
    }
}

/// What [`move_slice`] did with the buffer it took: a candle tensor, or the error of a driver
/// call, with the buffer back as a tensor.
type Moved = Result<Tensor, (CandleError, ManagedTensor)>;

/// Moves the memory of a bare [`CudaBuffer`] of `dtype`'s element type into candle storage on
/// `device`, or gives the tensor back untouched (`Err`) when it is not one.
fn move_slice(
    tensor: ManagedTensor,
    device: &CudaDevice,
    dtype: DType,
    shape: &Shape,
) -> Result<Moved, ManagedTensor> {
    fn take<T: dlpack_core::Element + CudaDType + DeviceRepr>(
        tensor: ManagedTensor,
        device: &CudaDevice,
        shape: &Shape,
    ) -> Result<Moved, ManagedTensor> {
        let buffer = tensor.reclaim::<CudaBuffer<T>>()?;
        // A bare buffer is described as its whole slice, 1-d, on the slice's device (checked
        // equal to `device`'s by the caller).
        let address = buffer.device_address();
        let slice = buffer.into_slice();
        let stream = device.cuda_stream();
        // candle's stream waits for the work queued on the slice's own stream, and a slice on
        // candle's stream takes the memory over: candle then orders its use and its free like
        // those of its own storage (cudarc frees a slice on the slice's stream, after the reads
        // that slice's context recorded, which the buffer's stream knows nothing of).
        let taken = stream.join(slice.stream()).w().and_then(|()| {
            // SAFETY: `address` is the live allocation of `slice.len()` elements of `T` that
            // `slice` owns, in this GPU's primary context (candle's); its ownership passes to
            // the new slice when `slice` is leaked below, before anything can drop either.
            unsafe { dlpack_cuda::upgrade_device_ptr::<T>(&stream, address as u64, slice.len()) }
                .map_err(|e| candle_core::Error::Msg(e.to_string()))
        });
        match taken {
            Ok(owner) => {
                // The memory is `owner`'s now: `leak` releases the old slice's hold (after
                // ordering its recorded uses into its stream) without freeing it.
                let _ = slice.leak();
                let storage = T::wrap_cuda_slice(owner, device.clone());
                Ok(Ok(candle_tensor(storage, shape.clone())))
            }
            Err(error) => {
                // The buffer goes back as the tensor it was (same memory, same description).
                let tensor = ManagedTensor::export(CudaBuffer::new(slice))
                    .expect("a CudaBuffer that was exported once exports again");
                Ok(Err((error.into(), tensor)))
            }
        }
    }
    match dtype {
        DType::U8 => take::<u8>(tensor, device, shape),
        DType::U32 => take::<u32>(tensor, device, shape),
        DType::I16 => take::<i16>(tensor, device, shape),
        DType::I32 => take::<i32>(tensor, device, shape),
        DType::I64 => take::<i64>(tensor, device, shape),
        DType::BF16 => take::<half::bf16>(tensor, device, shape),
        DType::F16 => take::<half::f16>(tensor, device, shape),
        DType::F32 => take::<f32>(tensor, device, shape),
        DType::F64 => take::<f64>(tensor, device, shape),
        DType::F8E4M3 => take::<float8::F8E4M3>(tensor, device, shape),
        // float8_e8m0fnu: candle keeps it as `u8` storage, a dlpack-cuda buffer as its own
        // element type; copied.
        _ => Err(tensor),
    }
}

fn candle_tensor(storage: CudaStorage, shape: Shape) -> Tensor {
    Tensor::from_storage(Storage::Cuda(storage), shape, BackpropOp::none(), false)
}

/// Copies a `kDLCUDA` tensor of candle dtype `dtype` on `device`'s GPU into new candle storage
/// on `device`, compact row-major, after checking its device claim with the driver. Returns
/// only when the copy has run (or the context is lost), so the tensor may be released at once.
fn copy(
    tensor: &CheckedTensor,
    target: &candle_core::Device,
    device: &CudaDevice,
    dtype: DType,
    shape: Shape,
) -> Result<Tensor, CandleError> {
    copy_fits(tensor.len(), dtype.size_in_bytes())?;
    if !tensor.is_empty() {
        // Memory kind (device memory), ordinal, and every reachable byte inside one allocation
        // of this context; the copy below reads only those bytes.
        let info = tensor.check_device(&*exchange(device)?)?;
        if info.is_none_or(|info| info.allocation.is_none()) {
            return Err(CandleError::DLPack(dlpack_core::Error::Runtime {
                runtime: "CUDA driver",
                message: "the driver reported no allocation range for the tensor's memory, so the bytes a copy would read cannot be checked".into(),
            }));
        }
    }
    let stream = device.cuda_stream();
    let copied = gathered(tensor, target, device, dtype, shape);
    // Whether the copy worked or failed after it was queued, it may still be reading the
    // tensor: wait for it before the tensor can go back to its producer.
    let waited = stream
        .record_event(None)
        .and_then(|event| event.synchronize())
        .or_else(|_| stream.synchronize());
    let copied = copied?;
    waited.w()?;
    Ok(copied)
}

/// Refuses a device copy of `elements` elements of `size` bytes (and, for a layout that is not
/// compact, an `i64` index per element) whose bytes the address space cannot hold, with
/// [`dlpack_core::Error::OutOfMemory`], before candle or cudarc is asked for it: both multiply
/// sizes unchecked (cudarc 0.19's `CudaStream::alloc` computes `len * size_of::<T>()` as is), so
/// a product that wraps would allocate too little for the kernel that then fills it.
fn copy_fits(elements: usize, size: usize) -> Result<(), CandleError> {
    let per_element = size.max(size_of::<i64>());
    match elements.checked_mul(per_element) {
        Some(bytes) if isize::try_from(bytes).is_ok() => Ok(()),
        _ => Err(CandleError::DLPack(dlpack_core::Error::OutOfMemory {
            bytes: elements as u128 * per_element as u128,
        })),
    }
}

/// The elements of the type `dtype` stores, gathered by candle's `index_select` (which
/// candle-kernels offers with `i64` indices for these types only: no i16 or i32 gather, and the
/// f8e4m3 one under a name candle does not ask for, huggingface/candle#3886).
fn gather_dtype(dtype: DType) -> DType {
    match dtype {
        DType::I16 => DType::F16,
        DType::I32 => DType::U32,
        DType::F8E4M3 | DType::F8E8M0 => DType::U8,
        other => other,
    }
}

/// Queues the copy of [`copy`] on candle's stream and returns its result.
fn gathered(
    tensor: &CheckedTensor,
    target: &candle_core::Device,
    device: &CudaDevice,
    dtype: DType,
    shape: Shape,
) -> Result<Tensor, CandleError> {
    let elem = dtype.size_in_bytes();
    let span = tensor.byte_span();
    let compact = tensor.is_empty()
        || (tensor.is_row_major_contiguous() && span.len() == tensor.len() * elem);
    if compact {
        return Ok(copy_span(device, dtype, span.start, span.len() / elem)?.reshape(shape)?);
    }
    // Another layout: the span the tensor reaches, copied as is, then gathered in row-major
    // order on the device, through a type of the same width where candle has no gather kernel
    // for `dtype`, and copied once more into `dtype`'s storage then.
    let first = tensor.data_ptr().addr() + tensor.byte_offset() as usize;
    let via = gather_dtype(dtype);
    let flat = copy_span(device, via, span.start, span.len() / elem)?;
    let result = gather(&flat, target, tensor, (first - span.start) / elem, &shape)?;
    if via == dtype {
        return Ok(result);
    }
    let address = storage_address(&result)?;
    Ok(copy_span(device, dtype, address, tensor.len())?.reshape(shape)?)
}

/// The device address of a candle CUDA tensor's storage.
fn storage_address(tensor: &Tensor) -> Result<usize, CandleError> {
    let (storage, _) = tensor.storage_and_layout();
    let Storage::Cuda(cuda) = &*storage else {
        return Err(CandleError::Device {
            location: tensor.device().location(),
        });
    };
    let candle_core::Device::Cuda(device) = tensor.device() else {
        return Err(CandleError::Device {
            location: tensor.device().location(),
        });
    };
    Ok(locate(device, cuda)?.0)
}

/// A new 1-d candle tensor of `dtype` on `device` holding a copy of the `elements` elements at
/// device address `source`, queued on candle's stream.
fn copy_span(
    device: &CudaDevice,
    dtype: DType,
    source: usize,
    elements: usize,
) -> Result<Tensor, CandleError> {
    let slice = match dtype {
        DType::U8 => CudaStorageSlice::U8(copy_slice(device, source, elements)?),
        DType::U32 => CudaStorageSlice::U32(copy_slice(device, source, elements)?),
        DType::I16 => CudaStorageSlice::I16(copy_slice(device, source, elements)?),
        DType::I32 => CudaStorageSlice::I32(copy_slice(device, source, elements)?),
        DType::I64 => CudaStorageSlice::I64(copy_slice(device, source, elements)?),
        DType::BF16 => CudaStorageSlice::BF16(copy_slice(device, source, elements)?),
        DType::F16 => CudaStorageSlice::F16(copy_slice(device, source, elements)?),
        DType::F32 => CudaStorageSlice::F32(copy_slice(device, source, elements)?),
        DType::F64 => CudaStorageSlice::F64(copy_slice(device, source, elements)?),
        DType::F8E4M3 => CudaStorageSlice::F8E4M3(copy_slice(device, source, elements)?),
        DType::F8E8M0 => CudaStorageSlice::F8E8M0(copy_slice(device, source, elements)?),
        other => {
            return Err(CandleError::CandleDType {
                dtype: other,
                reason: "dlpack-candle has no storage conversion for it",
            });
        }
    };
    let storage = CudaStorage {
        slice,
        device: device.clone(),
    };
    Ok(candle_tensor(storage, Shape::from_dims(&[elements])))
}

/// A new slice of `elements` elements of `T` on candle's stream, holding a copy of the memory at
/// device address `source` (queued, not waited for).
fn copy_slice<T: DeviceRepr>(
    device: &CudaDevice,
    source: usize,
    elements: usize,
) -> Result<CudaSlice<T>, CandleError> {
    let stream = device.cuda_stream();
    // SAFETY: every element of the new slice is written by the copy queued below on the same
    // stream before anything can read it (candle reads the storage on this stream, or, with
    // cudarc's event tracking, after the write event the guard records); if the copy cannot be
    // queued, the slice is dropped unread.
    // At least one element: the driver refuses a zero-byte allocation (`cuMemAlloc` documents
    // CUDA_ERROR_INVALID_VALUE; cudarc passes the size on as it is, chelsea0x3b/cudarc#194). A
    // tensor over the slice describes only the `elements` first ones.
    let mut slice = unsafe { device.alloc::<T>(elements.max(1)) }?;
    if elements > 0 {
        let _scope = ContextScope::enter(stream.context()).w()?;
        let (destination, _write) = slice.device_ptr_mut(&stream);
        // SAFETY: `source` is the start of `elements * size_of::<T>()` bytes of device memory
        // in one live allocation of this GPU's context: a tensor's span that the driver
        // confirmed (`check_device`, with its allocation range), kept alive by the tensor until
        // the copy has run (`copy` waits for it), or candle storage of this crate's own gather;
        // `destination` is the new slice of exactly that size; the two do not overlap.
        unsafe {
            result::memcpy_dtod_async(
                destination,
                source as u64,
                elements * size_of::<T>(),
                stream.cu_stream(),
            )
        }
        .w()?;
    }
    Ok(slice)
}

/// Gathers `tensor`'s elements, in row-major order, from `flat`, a copy of the span it reaches
/// (its first element at index `first`), with candle's `index_select` on the device.
fn gather(
    flat: &Tensor,
    target: &candle_core::Device,
    tensor: &CheckedTensor,
    first: usize,
    shape: &Shape,
) -> Result<Tensor, CandleError> {
    let ndim = tensor.shape().len();
    // The index of element (i0, i1, ...) in `flat` is first + sum(ik * stride_k): one small
    // vector per axis, broadcast together on the device. Every index lies in the span, so in
    // 0..flat.len(), which fits i64 (a span of device memory).
    let mut index: Option<Tensor> = None;
    for (axis, (&size, &stride)) in tensor.shape().iter().zip(tensor.strides()).enumerate() {
        let start = if axis == 0 { first as i64 } else { 0 };
        let mut values: Vec<i64> = Vec::new();
        values.try_reserve_exact(size as usize).map_err(|_| {
            CandleError::DLPack(dlpack_core::Error::OutOfMemory {
                bytes: size as u128 * 8,
            })
        })?;
        values.extend((0..size).map(|i| start + i * stride));
        let mut dims = vec![1usize; ndim];
        dims[axis] = size as usize;
        let part = Tensor::from_vec(values, dims, target)?;
        index = Some(match index {
            None => part,
            Some(sum) => sum.broadcast_add(&part)?,
        });
    }
    let Some(index) = index else {
        // A 0-d tensor is compact: `gathered` copies it directly.
        return Ok(flat.reshape(shape.clone())?);
    };
    let index = index
        .broadcast_as(shape.clone())?
        .flatten_all()?
        .contiguous()?;
    Ok(flat.index_select(&index, 0)?.reshape(shape.clone())?)
}
