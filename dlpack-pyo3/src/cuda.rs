//! CUDA tensors across the Python boundary (feature `cuda`): PyTorch, CuPy or JAX GPU tensors
//! into Rust with the stream handshake and the driver's check of their device claim, and Rust
//! CUDA tensors out to them.
//!
//! Into Rust, [`from_dlpack_cuda`] does what the protocol asks of a CUDA consumer:
//!
//! 1. asks the object where its tensor lives (`__dlpack_device__`);
//! 2. calls `__dlpack__(stream=s)` with `s` the consumer stream of the [`CudaHooks`] for that
//!    device ([`CudaHooks::consumer_stream`]: the configured stream's handle, or `1` for the
//!    legacy default stream), so that the producer makes its pending writes visible on that
//!    stream (with an event, not a device-wide synchronisation);
//! 3. checks the tensor's device claim with the driver ([`CudaImport::new`]: memory kind,
//!    ordinal, and every reachable byte inside the allocation); a tensor that fails is deleted.
//!
//! A type that offers the DLPack C exchange API (`__dlpack_c_exchange_api__`: PyTorch 2.11's
//! tensors do) is served without Python calls. Its table hands the tensor over unsynchronised,
//! the device claim is checked as above, and for a `kDLCUDA` tensor the hooks' stream is made
//! to wait for the stream the table names as the producer's current one (`current_work_stream`,
//! through [`CudaHooks::wait_for_stream`]: an event, or nothing when that is the hooks' stream).
//! The stream ordering is the one `__dlpack__(stream=s)` gives, without its cost: most of the
//! `__dlpack__` route's time is PyTorch's own `__dlpack_device__` and `__dlpack__(stream=1)`
//! (docs/benchmarks.md has the figures).
//!
//! The `__dlpack__` route is still taken where the table would not give what `__dlpack__`
//! gives:
//!
//! - a pinned or managed tensor from the table is deleted and taken again through `__dlpack__`,
//!   which serves a stream for those too;
//! - a subclass that overrides `__dlpack__` or `__torch_function__` is asked through
//!   `__dlpack__`, and so is any PyTorch tensor while a `TorchFunctionMode` is active;
//! - a PyTorch tensor that requires grad or has its conjugate bit set is asked through
//!   `__dlpack__`, which refuses it: PyTorch's table exports such a tensor as if no flag were
//!   set;
//! - when the table's function fails (PyTorch's, for a sparse tensor), `__dlpack__` is asked,
//!   and its answer stands.
//!
//! A PyTorch tensor with its negative bit set is refused (`BufferError`) on either route, before
//! anything is exported: its memory holds the values negated, and neither PyTorch's table nor
//! its `__dlpack__` says so.
//!
//! Out to Python, a Rust CUDA tensor is a [`DLPackTensor`] with the hooks attached
//! ([`DLPackTensor::with_hooks`]): its `__dlpack__(stream=s)` then records an event on the
//! tensor's stream and makes the consumer's stream `s` wait on it.
//!
//! ```no_run
//! use std::sync::Arc;
//! use dlpack_core::ManagedTensor;
//! use dlpack_cuda::{CudaBuffer, CudaHooks, open_device};
//! use dlpack_pyo3::{DLPackTensor, to_py_err};
//! use pyo3::prelude::*;
//!
//! Python::attach(|py| -> PyResult<()> {
//!     let stream = open_device(0).map_err(to_py_err)?.default_stream();
//!     let hooks = Arc::new(CudaHooks::new(stream.clone()).map_err(to_py_err)?);
//!
//!     // Rust -> Python: torch.from_dlpack(tensor) sees the same device memory.
//!     let slice = stream.clone_htod(&[1.0f32, 2.0, 3.0]).expect("upload");
//!     let tensor = ManagedTensor::export(CudaBuffer::new(slice)).map_err(to_py_err)?;
//!     let object = Bound::new(py, DLPackTensor::with_hooks(tensor, hooks.clone()))?;
//!
//!     // Python -> Rust, here our own object back; a torch or CuPy tensor works the same.
//!     let import = dlpack_pyo3::cuda::from_dlpack_cuda(object.as_any(), &hooks)?;
//!     assert_eq!(import.to_host_vec::<f32>(&*hooks).map_err(to_py_err)?, [1.0, 2.0, 3.0]);
//!     Ok(())
//! })?;
//! # Ok::<(), PyErr>(())
//! ```
//!
//! A PyTorch (CuPy, JAX) CUDA tensor into cudarc, without a copy: give the hooks the stream
//! your cudarc work runs on, so that the producer orders its pending writes before that very
//! stream, and make the cudarc slice on it too. The slice is the producer's memory, read-only
//! (`&CudaSlice`) and never freed by cudarc; to write into it, import with
//! [`from_dlpack_cuda_writable`] and use [`CudaImport::copy_from_host`], or hand
//! `DeviceView::device_ptr` to your kernel.
//!
//! ```no_run
//! use dlpack_cuda::{CudaHooks, open_device};
//! use dlpack_pyo3::to_py_err;
//! use pyo3::exceptions::PyRuntimeError;
//! use pyo3::prelude::*;
//!
//! /// A float32 CUDA tensor's memory from its first element on (its elements, for a compact
//! /// row-major tensor), read by cudarc on one stream throughout.
//! fn read_with_cudarc(x: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
//!     let stream = open_device(0).map_err(to_py_err)?.default_stream();
//!     // The producer's writes are ordered before this stream (by the producer, through
//!     // `__dlpack__(stream=...)`, or by the hooks, for a type with the C exchange API) ...
//!     let hooks = CudaHooks::new(stream.clone()).map_err(to_py_err)?;
//!     let import = dlpack_pyo3::cuda::from_dlpack_cuda(x, &hooks)?;
//!     let view = import.device_view::<f32>().map_err(to_py_err)?;
//!     // ... and cudarc reads on the same stream, after the producer's writes.
//!     let slice = view.cudarc_slice(&stream).map_err(to_py_err)?;
//!     // The slice is the reachable span; the tensor's first element is at `first_index`, and
//!     // `view.shape()` / `view.strides()` say where the others are.
//!     let span = stream
//!         .clone_dtoh(&*slice)
//!         .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
//!     Ok(span[slice.first_index()..].to_vec())
//! }
//! # fn main() {}
//! ```
//!
//! Without a CUDA driver no [`CudaHooks`] can be made: [`CudaHooks::on_default_streams`] fails
//! with an error whose message starts with `CUDA driver: ` (a `BufferError` through
//! [`to_py_err`]); nothing panics.

use core::ffi::c_void;
use core::ptr;

use dlpack_core::{Device, DeviceType};
pub use dlpack_cuda::{CudaHooks, CudaImport};
use pyo3::prelude::*;

#[cfg(doc)]
use crate::DLPackTensor;
use crate::import::producer_device;
use crate::{ImportOptions, from_dlpack_with, from_dlpack_writable, to_py_err};

/// Takes a Python CUDA tensor (a PyTorch, CuPy or JAX GPU array, or any object with
/// `__dlpack__`, or a bare capsule) into Rust without a copy, read-only, after the stream
/// handshake and the driver's check of its device claim (see the [module](self) docs).
///
/// # Errors
///
/// Those of [`crate::from_dlpack`], and an exception for a `__dlpack_device__` that fails or
/// answers with something other than a pair of `int`s; `BufferError` for a tensor that is not
/// on a CUDA device type (`kDLCUDA`, `kDLCUDAHost`, `kDLCUDAManaged`), whose claim the driver
/// contradicts (it is deleted then), or when a driver call fails; `BufferError` for a PyTorch
/// tensor with its negative bit set (see the [module](self) docs). Through a C exchange API
/// table: the exception its `current_work_stream` set (a `SystemError` if it set none).
pub fn from_dlpack_cuda(obj: &Bound<'_, PyAny>, hooks: &CudaHooks) -> PyResult<CudaImport> {
    // SAFETY: read-only.
    if let Some(import) = unsafe { through_exchange_api(obj, hooks, false) }? {
        return Ok(import);
    }
    let options = options_for(obj, hooks)?;
    let tensor = from_dlpack_with(obj, &options)?;
    CudaImport::new(tensor, hooks).map_err(to_py_err)
}

/// [`from_dlpack_cuda`], keeping the producer's writability (for
/// [`CudaImport::copy_from_host`] and writes through the device view).
///
/// # Errors
///
/// As for [`from_dlpack_cuda`].
///
/// # Safety
///
/// As for [`from_dlpack_writable`]: while the result lives, nothing else accesses the memory
/// other than by reading it while Rust does not write it (not Python code through the producer,
/// and not another import of the same object).
pub unsafe fn from_dlpack_cuda_writable(
    obj: &Bound<'_, PyAny>,
    hooks: &CudaHooks,
) -> PyResult<CudaImport> {
    // SAFETY: forwarded contract.
    if let Some(import) = unsafe { through_exchange_api(obj, hooks, true) }? {
        return Ok(import);
    }
    let options = options_for(obj, hooks)?;
    // SAFETY: forwarded contract.
    let tensor = unsafe { from_dlpack_writable(obj, &options) }?;
    CudaImport::new(tensor, hooks).map_err(to_py_err)
}

/// The C exchange API's route, for a `kDLCUDA` tensor of a type that offers the table (such as
/// PyTorch's): the tensor is taken without synchronisation
/// (`managed_tensor_from_py_object_no_sync`), its device claim checked, and the hooks' stream
/// for its device made to wait for the producer's current work stream (`current_work_stream`,
/// [`CudaHooks::wait_for_stream`]). `None` when the type has no usable table for `obj`
/// ([`crate::exchange::table_for`]), when the table's function fails, or when the tensor is
/// pinned or managed memory: it is deleted, and the caller takes the `__dlpack__` route, where
/// the producer serves a stream for those too (and the importer refuses a PyTorch tensor with
/// its negative bit set there as well). A tensor of a device type that is not CUDA's is refused
/// as [`CudaImport::new`] refuses it.
///
/// # Safety
/// With `writable`, the caller makes [`from_dlpack_writable`]'s promise.
unsafe fn through_exchange_api(
    obj: &Bound<'_, PyAny>,
    hooks: &CudaHooks,
    writable: bool,
) -> PyResult<Option<CudaImport>> {
    let Some(api) = crate::exchange::table_for(obj)? else {
        return Ok(None);
    };
    let Some(current_work_stream) = api.current_work_stream else {
        return Ok(None);
    };
    let Some(raw) = crate::exchange::export_through(obj, api)? else {
        return Ok(None);
    };
    // SAFETY: the exchange API handed us an owned, well-formed versioned tensor; writability as
    // the caller promised.
    let tensor = unsafe { raw.into_managed(writable) }?;
    // Python code may still write the memory through the producer, unless the caller promised
    // otherwise (writable): no bool view of it may be made then.
    let tensor = if writable {
        tensor
    } else {
        tensor.into_externally_writable()
    };
    let device = tensor.device();
    if matches!(
        device.device_type,
        DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED
    ) {
        // The producer serves a stream for pinned and managed memory through `__dlpack__`.
        return Ok(None);
    }
    // Refuses a device type that is not CUDA's, as through `__dlpack__`, without asking the
    // producer again; only `kDLCUDA` goes on.
    let import = CudaImport::new(tensor, hooks).map_err(to_py_err)?;
    let mut stream: *mut c_void = ptr::null_mut();
    // SAFETY: a function of the table of `obj`'s type, callable while attached (we are), with a
    // valid out-pointer.
    let status = unsafe { current_work_stream(device.device_type, device.device_id, &mut stream) };
    if status != 0 {
        return Err(crate::exchange::failed(obj.py(), "current_work_stream"));
    }
    // SAFETY: by the API's contract, the producer's current work stream for the tensor's device:
    // NULL (its default stream) or a live stream of that device's context, which the device
    // claim just checked is where the memory is.
    unsafe { hooks.wait_for_stream(device, stream.addr()) }.map_err(to_py_err)?;
    Ok(Some(import))
}

/// The import options of a CUDA consumer: the consumer stream for the object's device, or none
/// for a bare capsule and for a device that is not CUDA (the import then fails in
/// [`CudaImport::new`], which says why).
fn options_for(obj: &Bound<'_, PyAny>, hooks: &CudaHooks) -> PyResult<ImportOptions> {
    let stream = match producer_device(obj)? {
        Some(
            device @ Device {
                device_type: DeviceType::CUDA | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED,
                ..
            },
        ) => Some(hooks.consumer_stream(device).map_err(to_py_err)?),
        _ => None,
    };
    Ok(ImportOptions {
        stream,
        ..ImportOptions::default()
    })
}
