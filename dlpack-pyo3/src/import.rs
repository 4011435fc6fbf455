//! The consumer side: any Python tensor, or a bare DLPack capsule, into a [`ManagedTensor`].
//!
//! [`from_dlpack`] follows the consumer sequence dlpack-core documents
//! ([`CONSUMER_MAX_VERSION`]):
//!
//! 1. a bare capsule is taken as it is (renamed to its used name);
//! 2. an object whose *type* offers the DLPack C exchange API (`__dlpack_c_exchange_api__`) is
//!    exported through it, skipping the Python-level call, when no `dl_device` or `copy` is
//!    asked and the tensor is on the CPU (the C API never synchronises streams, so a device
//!    tensor goes the `__dlpack__` way, where the producer does);
//! 3. otherwise `x.__dlpack__(max_version=(1, 3), ...)` is called, and on `TypeError` (a producer
//!    older than the keywords) `x.__dlpack__()` (with `stream` alone if one was given); a
//!    `dl_device` or `copy` request that such a producer could not see is then served here, as
//!    dlpack-core's [`plan_export`] says, when the host can do it.
//!
//! The result owns the tensor (the producer's deleter runs when it is dropped) and shares its
//! memory. Python code can still reach that memory through the producer, and other imports of
//! the same object share it too, so [`from_dlpack`] makes the tensor read-only in Rust;
//! [`from_dlpack_writable`] keeps the producer's writability for callers that can promise
//! exclusive access.

use dlpack_core::protocol::{CONSUMER_MAX_VERSION, ExportPlan, plan_export};
use dlpack_core::{Device, DeviceType, Error, Flags, ManagedTensor, PyErrorKind};
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict, PyTuple};

use crate::capsule::{RawTensor, take_capsule};
use crate::exceptions::to_py_err;
use crate::export::{Reexport, host_copy};

/// What a consumer asks of the producer, as `from_dlpack(x, device=..., copy=...)` does.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ImportOptions {
    /// `dl_device`: the device to receive the data on (`None`: the tensor's own). Producers must
    /// serve `(kDLCPU, 0)`.
    pub dl_device: Option<Device>,
    /// `copy`: `Some(true)` always a fresh copy, `Some(false)` never a copy, `None` a copy only
    /// if needed.
    pub copy: Option<bool>,
    /// `stream`: the consumer's stream on the tensor's device (`None` for the CPU and for the
    /// default stream; see [`dlpack_core::protocol::parse_stream`]).
    pub stream: Option<i64>,
}

/// Takes any Python tensor (an object with `__dlpack__`) or a bare DLPack capsule into Rust,
/// without a copy, read-only.
///
/// Errors: `TypeError` for an object that is neither; the producer's own exception when
/// `__dlpack__` fails; `DLPackCapsuleError` (a `TypeError` and a `ValueError`) when it returns
/// something that is not a DLPack capsule; `ValueError` for a capsule already consumed;
/// `BufferError` for a tensor that fails dlpack-core's validation (it is deleted then).
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_pyo3::DLPackTensor;
/// use pyo3::prelude::*;
///
/// Python::attach(|py| -> PyResult<()> {
///     let data = vec![1.0f32, 2.0, 3.0];
///     let address = data.as_ptr() as usize;
///     let tensor = ManagedTensor::export(data).map_err(dlpack_pyo3::to_py_err)?;
///     let object = Bound::new(py, DLPackTensor::new(tensor))?;
///     let back = dlpack_pyo3::from_dlpack(object.as_any())?;
///     assert_eq!(back.data_ptr() as usize, address); // the same memory
///     assert!(back.is_read_only());
///     let view = back.view::<f32>().map_err(dlpack_pyo3::to_py_err)?;
///     assert_eq!(view.to_vec(), [1.0, 2.0, 3.0]);
///     Ok(())
/// })?;
/// # Ok::<(), pyo3::PyErr>(())
/// ```
pub fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<ManagedTensor> {
    from_dlpack_with(obj, &ImportOptions::default())
}

/// [`from_dlpack`] with a `dl_device`, `copy` or `stream` request.
pub fn from_dlpack_with(
    obj: &Bound<'_, PyAny>,
    options: &ImportOptions,
) -> PyResult<ManagedTensor> {
    // SAFETY: `writable == false`: the result is read-only, so the only promise needed is the
    // producer's own (its memory stays valid and initialised until the deleter runs).
    unsafe { import(obj, options, false) }
}

/// [`from_dlpack_with`], keeping the producer's writability: the tensor is writable unless the
/// producer marked it read-only (a legacy capsule from another library counts as read-only, as
/// in NumPy).
///
/// # Safety
///
/// While the result (or a view of it) lives, nothing else accesses the memory, other than by
/// reading it while no mutable view exists: not Python code through the producer or another of
/// its exports, and not another import of the same object.
pub unsafe fn from_dlpack_writable(
    obj: &Bound<'_, PyAny>,
    options: &ImportOptions,
) -> PyResult<ManagedTensor> {
    // SAFETY: forwarded contract.
    unsafe { import(obj, options, true) }
}

/// # Safety
/// With `writable`, the caller makes [`from_dlpack_writable`]'s promise.
unsafe fn import(
    obj: &Bound<'_, PyAny>,
    options: &ImportOptions,
    writable: bool,
) -> PyResult<ManagedTensor> {
    let py = obj.py();
    if obj.is_instance_of::<PyCapsule>() {
        let raw = take_capsule(obj)?;
        // SAFETY: we own the tensor just taken; the capsule's producer promised a well-formed
        // tensor whose memory lives until the deleter; writability as the caller promised.
        let tensor = unsafe { raw.into_managed(writable) }?;
        return serve_locally(tensor, options);
    }
    if options.dl_device.is_none()
        && options.copy.is_none()
        && let Some(api) = crate::exchange::type_api(obj)
    {
        let raw = crate::exchange::export_through(obj, api)?;
        // SAFETY: the exchange API handed us an owned, well-formed versioned tensor;
        // writability as the caller promised.
        let tensor = unsafe { raw.into_managed(writable) }?;
        if tensor.device().device_type == DeviceType::CPU {
            return Ok(tensor);
        }
        // Not synchronised: take it again through __dlpack__, where the producer is.
        drop(tensor);
    }
    let method = match obj.getattr(intern!(py, "__dlpack__")) {
        Ok(method) => method,
        Err(err) if err.is_instance_of::<PyAttributeError>(py) => {
            let found = obj.get_type().name()?;
            return Err(PyTypeError::new_err(format!(
                "expected an object with __dlpack__ (a NumPy, JAX, PyTorch, TVM, ... tensor) or a DLPack capsule, found an object of type {found}"
            )));
        }
        Err(err) => return Err(err),
    };
    let (capsule, keywords_seen) = call_dlpack(&method, options)?;
    let raw: RawTensor = take_capsule(&capsule)?;
    // SAFETY: as for a bare capsule.
    let tensor = unsafe { raw.into_managed(writable) }?;
    if keywords_seen {
        Ok(tensor)
    } else {
        serve_locally(tensor, options)
    }
}

/// `(1, 3)`, made once.
static MAX_VERSION: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();

/// Calls `method` (an object's `__dlpack__`) the recommended way; returns the result and whether
/// the producer took the keywords (`dl_device` and `copy` reached it).
fn call_dlpack<'py>(
    method: &Bound<'py, PyAny>,
    options: &ImportOptions,
) -> PyResult<(Bound<'py, PyAny>, bool)> {
    let py = method.py();
    let max_version = MAX_VERSION.get_or_try_init(py, || {
        PyTuple::new(py, [CONSUMER_MAX_VERSION.major, CONSUMER_MAX_VERSION.minor])
            .map(Bound::unbind)
    })?;
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "max_version"), max_version.bind(py))?;
    if let Some(stream) = options.stream {
        kwargs.set_item(intern!(py, "stream"), stream)?;
    }
    if let Some(device) = options.dl_device {
        kwargs.set_item(
            intern!(py, "dl_device"),
            (device.device_type.0, device.device_id),
        )?;
    }
    if let Some(copy) = options.copy {
        kwargs.set_item(intern!(py, "copy"), copy)?;
    }
    match method.call((), Some(&kwargs)) {
        Ok(capsule) => Ok((capsule, true)),
        Err(err) if err.is_instance_of::<PyTypeError>(py) => {
            // A producer older than the 2023.12 keywords: stream alone, or nothing.
            let capsule = match options.stream {
                Some(stream) => {
                    let kwargs = PyDict::new(py);
                    kwargs.set_item(intern!(py, "stream"), stream)?;
                    method.call((), Some(&kwargs))?
                }
                None => method.call0()?,
            };
            Ok((capsule, false))
        }
        Err(err) => Err(err),
    }
}

/// Serves a `dl_device` / `copy` request that the producer did not see (a bare capsule, or a
/// producer without the keywords), as dlpack-core's [`plan_export`] decides, when the host can:
/// a relabel of host-readable memory or a host copy. A copy of device memory needs the
/// producer, so it is a `BufferError` here.
fn serve_locally(tensor: ManagedTensor, options: &ImportOptions) -> PyResult<ManagedTensor> {
    if options.dl_device.is_none() && options.copy.is_none() {
        return Ok(tensor);
    }
    let device = tensor.device();
    let plan = plan_export(device, options.dl_device, options.copy).map_err(to_py_err)?;
    match plan {
        ExportPlan::AsIs => Ok(tensor),
        ExportPlan::Relabel(target) => {
            ManagedTensor::export(Reexport::relabel(tensor, target)).map_err(to_py_err)
        }
        ExportPlan::CopyTo(target) if !plan.needs_device_runtime(device) => {
            let copy = host_copy(&tensor, None, Flags::IS_COPIED).map_err(to_py_err)?;
            debug_assert_eq!(target, Device::CPU);
            ManagedTensor::export(copy).map_err(to_py_err)
        }
        ExportPlan::CopyTo(target) => Err(to_py_err(Error::Protocol {
            kind: PyErrorKind::BufferError,
            message: format!(
                "the producer of this {device} tensor did not take dl_device / copy, and copying it to {target} needs its device runtime; expected a producer that takes the DLPack 2023.12 keywords"
            ),
        })),
    }
}
