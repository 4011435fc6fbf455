//! The consumer side: any Python tensor, or a bare DLPack capsule, into a [`ManagedTensor`].
//!
//! [`from_dlpack`] follows the consumer sequence dlpack-core documents
//! ([`CONSUMER_MAX_VERSION`]):
//!
//! 1. a bare capsule is taken as it is (renamed to its used name);
//! 2. an object whose *type* offers the DLPack C exchange API (`__dlpack_c_exchange_api__`) is
//!    exported through it, skipping the Python-level call, when no `dl_device`, `copy` or
//!    `stream` is asked and the tensor is on the CPU (the C API never synchronises streams, so
//!    a device tensor goes the `__dlpack__` way, where the producer does, and a `stream` is
//!    always passed to the producer's `__dlpack__`), and when the table gives what `__dlpack__`
//!    would (not for a subclass that overrides `__dlpack__` or `__torch_function__`, while a
//!    PyTorch `TorchFunctionMode` is active, for a PyTorch tensor that requires grad or has its
//!    conjugate bit set, or when the table's function fails: see the `exchange` module);
//! 3. otherwise `x.__dlpack__(max_version=(1, 3), ...)` is called, and on `TypeError` (a producer
//!    older than the keywords) `x.__dlpack__()` (with `stream` alone if one was given); a
//!    `dl_device` or `copy` request that such a producer could not see is then served here, as
//!    dlpack-core's [`plan_export`] says, when the host can do it.
//!
//! A PyTorch tensor with its negative bit set (`is_neg()`) is refused with a `BufferError` on
//! every route, before anything is exported: its memory holds the values negated, and PyTorch's
//! exports (its table and its `__dlpack__`) hand that memory over as is. The exception is
//! `copy=True` to a producer that takes the keyword: PyTorch's copy holds the values. (A bare
//! capsule of such a view says nothing of the bit: it is taken as it is.)
//!
//! A capsule's tensor is validated, and checked against the request, before the capsule is
//! renamed: a capsule refused here is left as it was (its destructor deletes the tensor, or
//! another consumer takes it), as NumPy and PyTorch leave one they refuse. The exception is a
//! versioned tensor of another major version, whose deleter a consumer must call (the DLPack
//! header says so): it is deleted before the error is returned. The tensor is validated once
//! (dlpack-core's [`ManagedTensor::from_raw_if`], which takes it only when the check agrees).
//! A local copy that `dl_device` / `copy` asks for is made from the validated tensor before the
//! capsule is renamed too, so a copy that memory cannot hold (`MemoryError`) also leaves the
//! capsule as it was.
//!
//! A `stream` names the consumer's stream on the device it receives the data on. The CPU has no
//! streams (the array API standard allows only `None` there; NumPy's `__dlpack__` refuses
//! anything else, PyTorch's anything but `-1`, and this crate's as NumPy's), so a `stream` with
//! a tensor received on the CPU is refused on every route: with the producer's own exception
//! when it refuses it, and with `DLPackStreamError` (dlpack-core's [`parse_stream`], as this
//! crate's producer raises it) when the producer accepted it, skipped it (the routes without a
//! `__dlpack__` call are not taken with a `stream`) or never saw it (a bare capsule).
//!
//! The result owns the tensor (the producer's deleter runs when it is dropped) and shares its
//! memory. Python code can still reach that memory through the producer, and other imports of
//! the same object share it too, so [`from_dlpack`] makes the tensor read-only in Rust;
//! [`from_dlpack_writable`] keeps the producer's writability for callers that can promise
//! exclusive access.
//!
//! # Python may write what Rust reads
//!
//! A read-only import stops Rust from writing, not Python: `arr[0] = 5` on the NumPy array
//! changes the memory a Rust view of its import reads. Rust cannot see such writes coming,
//! so the contract is the one rust-numpy states for its arrays: Python code is unchecked code,
//! and its author makes sure it does not write an array while Rust code reads it (under the GIL
//! Python runs only when the Rust code calls into Python or releases the GIL). Within that
//! contract, no Python write can make a safe Rust path undefined behaviour:
//!
//! - every import is [externally writable](ManagedTensor::into_externally_writable): a view of
//!   `bool`, the element type with invalid bit patterns, is refused, and `to_vec::<bool>()`
//!   copies the bytes and checks each in the copy (a byte Python set to 2 is an
//!   `InvalidValue` error, not a `bool` holding 2); integer and float views read whatever the
//!   memory holds;
//! - a view borrows the [`ManagedTensor`], which owns the producer's tensor: the memory stays
//!   allocated while any view lives, whatever Python does with the producer object.
//!
//! rust-numpy also keeps a dynamic borrow flag per array, shared by the Rust extensions of one
//! process, to refuse a mutable borrow while another extension reads. This crate does not: its
//! safe imports are read-only, so there is no mutable borrow to refuse, and the writers that
//! matter (Python code, NumPy, PyTorch) take no flag. Writable imports are `unsafe`
//! ([`from_dlpack_writable`]) and put the exclusivity on the caller.

use dlpack_core::protocol::{CONSUMER_MAX_VERSION, ExportPlan, parse_stream, plan_export};
use dlpack_core::{CheckedTensor, Device, DeviceType, Error, Flags, ManagedTensor, PyErrorKind};
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict, PyTuple};

use crate::capsule::{RawTensor, import_capsule};
use crate::exceptions::{stream_error, to_py_err};
use crate::export::producers::{HostCopy, Reexport, host_copy};
use crate::tensor::DLPackTensor;

/// What a consumer asks of the producer, as `from_dlpack(x, device=..., copy=...)` does.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ImportOptions {
    /// `dl_device`: the device to receive the data on (`None`: the tensor's own). Producers must
    /// serve `(kDLCPU, 0)`.
    pub dl_device: Option<Device>,
    /// `copy`: `Some(true)` always a fresh copy, `Some(false)` never a copy, `None` a copy only
    /// if needed.
    pub copy: Option<bool>,
    /// `stream`: the consumer's stream on the device it receives the data on (`None` for the
    /// default stream; see [`dlpack_core::protocol::parse_stream`]). Only `None` is valid for
    /// a tensor received on the CPU: anything else is a `DLPackStreamError`, whatever the
    /// route. A bare capsule was exported before the import, without the stream: for it the
    /// value is only checked.
    pub stream: Option<i64>,
}

/// Takes any Python tensor (an object with `__dlpack__`) or a bare DLPack capsule into Rust,
/// without a copy, read-only.
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
///     assert_eq!(view.to_vec().map_err(dlpack_pyo3::to_py_err)?, [1.0, 2.0, 3.0]);
///     Ok(())
/// })?;
/// # Ok::<(), pyo3::PyErr>(())
/// ```
///
/// # Errors
///
/// `TypeError` for an object that is neither; the producer's own exception when `__dlpack__`
/// fails; `DLPackCapsuleError` (a `TypeError` and a `ValueError`) when it returns something that
/// is not a DLPack capsule; `ValueError` for a capsule already consumed; `BufferError` for a
/// tensor that fails dlpack-core's validation. A refused capsule keeps its name and its tensor,
/// which its destructor deletes (or another consumer takes), except a versioned tensor of
/// another major version, which is deleted, as DLPack requires. `BufferError` for a PyTorch
/// tensor with its negative bit set (its memory holds the values negated, and PyTorch's exports
/// do not say so). A C exchange API table (`__dlpack_c_exchange_api__`) whose function fails
/// sends the import to `__dlpack__`, whose answer stands.
pub fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<ManagedTensor> {
    from_dlpack_with(obj, &ImportOptions::default())
}

/// [`from_dlpack`] with a `dl_device`, `copy` or `stream` request.
///
/// # Errors
///
/// Those of [`from_dlpack`], and `BufferError` for a `dl_device` / `copy` request that cannot be
/// served, `MemoryError` for a local copy that memory cannot hold, `DLPackStreamError` (a
/// `ValueError` and a `RuntimeError`) for a `stream` with a tensor received on the CPU. A
/// capsule refused for any of them is left as it was. A PyTorch tensor with its negative bit
/// set is refused with any request but `copy=True`, and with that too when the producer did not
/// take the keyword (its capsule is left to its destructor).
pub fn from_dlpack_with(
    obj: &Bound<'_, PyAny>,
    options: &ImportOptions,
) -> PyResult<ManagedTensor> {
    // SAFETY: `writable == false`: the result is read-only, so the only promise needed is the
    // producer's own (its memory stays valid and initialised until the deleter runs). Python
    // code may still write the memory through the producer: the result is marked so, and
    // dlpack-core makes no view whose values such a write could make invalid (`bool`).
    unsafe { import(obj, options, false) }.map(ManagedTensor::into_externally_writable)
}

/// [`from_dlpack_with`], keeping the producer's writability: the tensor is writable unless the
/// producer marked it read-only (a legacy capsule from another library counts as read-only, as
/// in NumPy).
///
/// # Errors
///
/// As for [`from_dlpack_with`].
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
    let plain = *options == ImportOptions::default();
    if obj.is_instance_of::<PyCapsule>() {
        if plain {
            // SAFETY: the capsule's producer promised a well-formed tensor whose memory lives
            // until the deleter; writability as the caller promised.
            return unsafe { import_capsule(obj, writable, |_| Ok(())) };
        }
        let mut local = Local::AsIs;
        // SAFETY: the capsule's producer promised a well-formed tensor whose memory lives until
        // the deleter; writability as the caller promised.
        let tensor = unsafe {
            import_capsule(obj, writable, |t| {
                local = check_request(py, t, options, false)?;
                Ok(())
            })
        }?;
        return serve_locally(tensor, local);
    }
    // The routes without a `__dlpack__` call serve no request: a `dl_device` or `copy` needs
    // the producer, and so does a `stream` (for a device tensor the producer orders its work
    // on it; for a CPU tensor it refuses it, with its own exception).
    // A PyTorch tensor with its negative bit set is refused on every route (`table_for` does for
    // a plain import), unless a producer that takes `copy=True` copies its values.
    let mut negative = false;
    if plain {
        if let Ok(ours) = obj.cast_exact::<DLPackTensor>() {
            // This crate's own type: what its exchange table would hand out, without the C
            // call, and without the table's ordering of a device tensor before the default
            // stream (a device tensor goes the `__dlpack__` way below, with our stream).
            let exporter = ours.get().exporter();
            if exporter.tensor().device().device_type == DeviceType::CPU {
                let raw = RawTensor::Versioned(exporter.export_unordered().map_err(to_py_err)?);
                // SAFETY: a fresh export of the object's tensor, which we own; writability as
                // the caller promised.
                return unsafe { raw.into_managed(writable) };
            }
        } else if let Some(api) = crate::exchange::table_for(obj)?
            && let Some(raw) = crate::exchange::export_through(obj, api)?
        {
            // SAFETY: the exchange API handed us an owned, well-formed versioned tensor;
            // writability as the caller promised.
            let tensor = unsafe { raw.into_managed(writable) }?;
            if tensor.device().device_type == DeviceType::CPU {
                return Ok(tensor);
            }
            // Not synchronised with our stream: take it again through __dlpack__, where the
            // producer is.
            drop(tensor);
        }
    } else if crate::exchange::has_negative_bit(obj) {
        if options.copy != Some(true) {
            return Err(crate::exchange::negative_bit_refusal());
        }
        negative = true;
    }
    let (capsule, keywords_seen) = match vectorcall_method() {
        Some(call) if plain => call_dlpack_fast(obj, call)?,
        _ => {
            let method = obj
                .getattr(intern!(py, "__dlpack__"))
                .map_err(|err| missing(obj, err))?;
            call_dlpack(&method, options)?
        }
    };
    if negative && !keywords_seen {
        // The producer never saw `copy=True`: its capsule (left to its destructor) shares the
        // negated memory.
        return Err(crate::exchange::negative_bit_refusal());
    }
    if plain {
        // SAFETY: as for a bare capsule.
        return unsafe { import_capsule(&capsule, writable, |_| Ok(())) };
    }
    let mut local = Local::AsIs;
    // SAFETY: as for a bare capsule.
    let tensor = unsafe {
        import_capsule(&capsule, writable, |t| {
            let served = keywords_seen && served(t.device(), options);
            local = check_request(py, t, options, served)?;
            Ok(())
        })
    }?;
    serve_locally(tensor, local)
}

/// Whether the request in `options` can be met for `tensor`, decided, and a local copy made,
/// before a capsule is taken, so that a refusal (or a copy that memory cannot hold) leaves it as
/// it was: a `stream` is refused for a tensor the consumer receives on the CPU (`dl_device`, or
/// the tensor's own device) with the `DLPackStreamError` a CPU producer here raises
/// ([`parse_stream`]'s message), since the CPU has no streams and a producer that accepted one
/// anyway (or a bare capsule, which never saw it) must not make the request look served; and,
/// unless the producer served it, the `dl_device` / `copy` request must be one this importer can
/// serve ([`local_plan`]). Returns what is left to do once the tensor is taken, for
/// [`serve_locally`].
fn check_request(
    py: Python<'_>,
    tensor: &CheckedTensor,
    options: &ImportOptions,
    served_by_producer: bool,
) -> PyResult<Local> {
    let device = tensor.device();
    let target = options.dl_device.unwrap_or(device);
    if options.stream.is_some() && target.device_type == DeviceType::CPU {
        parse_stream(target, options.stream).map_err(|err| stream_error(py, &err))?;
    }
    if served_by_producer {
        return Ok(Local::AsIs);
    }
    Ok(match local_plan(device, options)? {
        None | Some(ExportPlan::AsIs) => Local::AsIs,
        Some(ExportPlan::Relabel(target)) => Local::Relabel(target),
        Some(ExportPlan::CopyTo(target)) => {
            debug_assert_eq!(target, Device::CPU);
            Local::Copy(host_copy(tensor, None, Flags::IS_COPIED).map_err(to_py_err)?)
        }
    })
}

/// What the importer does itself with a tensor it has taken: [`check_request`]'s verdict, with
/// anything that can fail (the copy) already done.
enum Local {
    /// Nothing: the tensor is the result.
    AsIs,
    /// The tensor re-exported under another device (host-readable memory, relabelled).
    Relabel(Device),
    /// A copy of the tensor, made before it was taken; the tensor itself is released.
    Copy(HostCopy),
}

/// Whether a producer that took the keywords served the `dl_device` asked for: one that takes
/// them and ignores them (a wrapper's `**kwargs`, say) would otherwise hand over a tensor on
/// another device; such a tensor is served here instead (or refused).
///
/// `copy=True` cannot be checked the same way: `IS_COPIED` is optional (JAX answers with a
/// legacy capsule, which has no flags; PyTorch copies without setting it), so a producer that
/// ignores `copy` goes unnoticed, as it would with NumPy's own `from_dlpack`.
fn served(device: Device, options: &ImportOptions) -> bool {
    options.dl_device.is_none_or(|d| device == d)
}

/// Calls `obj.__dlpack__(max_version=(1, 3))` as [`from_dlpack`] does for a producer without
/// the C exchange API, and returns the result (a DLPack capsule, from any conforming producer)
/// without taking it: the fastest call the interpreter allows (no bound method, no keyword
/// dict, where it exports `PyObject_VectorcallMethod`), and on `TypeError` (a producer older
/// than the keywords) `obj.__dlpack__()`.
///
/// For code that hands capsules on, or measures the `__dlpack__` route against the C exchange
/// API.
///
/// ```
/// use dlpack_pyo3::DLPackTensor;
/// use pyo3::prelude::*;
/// use pyo3::types::PyCapsule;
///
/// Python::attach(|py| -> PyResult<()> {
///     let tensor = dlpack_core::ManagedTensor::export(vec![1u8, 2, 3]).map_err(dlpack_pyo3::to_py_err)?;
///     let object = Bound::new(py, DLPackTensor::new(tensor))?;
///     let capsule = dlpack_pyo3::dlpack_capsule(object.as_any())?;
///     assert!(capsule.is_instance_of::<PyCapsule>());
///     assert_eq!(dlpack_pyo3::from_dlpack(&capsule)?.shape(), &[3]);
///     Ok(())
/// })?;
/// # Ok::<(), pyo3::PyErr>(())
/// ```
///
/// # Errors
///
/// As [`from_dlpack`]'s for the call: `TypeError` for an object without `__dlpack__`, the
/// producer's own exception when `__dlpack__` fails. What it returns is not checked.
pub fn dlpack_capsule<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let (capsule, _) = match vectorcall_method() {
        Some(call) => call_dlpack_fast(obj, call)?,
        None => {
            let method = obj
                .getattr(intern!(py, "__dlpack__"))
                .map_err(|err| missing(obj, err))?;
            call_dlpack(&method, &ImportOptions::default())?
        }
    };
    Ok(capsule)
}

/// The device `obj` says its tensor is on (`__dlpack_device__`), for a device consumer choosing
/// its `stream`; `None` for a bare capsule (its producer has already handed the tensor over)
/// and for an object without `__dlpack_device__` (the import then reports what it lacks).
#[cfg(any(feature = "cuda", feature = "oneapi"))]
pub(crate) fn producer_device(obj: &Bound<'_, PyAny>) -> PyResult<Option<Device>> {
    if obj.is_instance_of::<PyCapsule>() {
        return Ok(None);
    }
    match obj.call_method0(intern!(obj.py(), "__dlpack_device__")) {
        Ok(answer) => {
            let (device_type, id): (i32, i32) = answer.extract()?;
            Ok(Some(Device::new(DeviceType(device_type), id)))
        }
        Err(err) if err.is_instance_of::<PyAttributeError>(obj.py()) => Ok(None),
        Err(err) => Err(err),
    }
}

/// The `TypeError` for an object that has no `__dlpack__`.
fn no_dlpack(obj: &Bound<'_, PyAny>) -> PyErr {
    let found = obj
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |name| name.to_string());
    PyTypeError::new_err(format!(
        "expected an object with __dlpack__ (a NumPy, JAX, PyTorch, TVM, ... tensor) or a DLPack capsule, found an object of type {found}"
    ))
}

/// CPython's `PyObject_VectorcallMethod(name, args, nargsf, kwnames)`.
type VectorcallMethod = unsafe extern "C" fn(
    name: *mut pyo3::ffi::PyObject,
    args: *const *mut pyo3::ffi::PyObject,
    nargsf: usize,
    kwnames: *mut pyo3::ffi::PyObject,
) -> *mut pyo3::ffi::PyObject;

/// `PyObject_VectorcallMethod` of the running interpreter, looked up once; `None` where it
/// cannot be found (then `__dlpack__` is called through a bound method and a keyword dict).
///
/// It calls a method with keywords without making a bound method object or a dict, which
/// halves the cost of importing from a producer without the C exchange API (NumPy, say). It is
/// a public CPython function since 3.9 and part of the stable ABI since 3.12, but the abi3-py39
/// headers do not declare it, so it is found at run time in the interpreter's global symbols
/// rather than linked: a module built for 3.9 still loads on any interpreter, and uses the
/// function wherever the interpreter exports it.
fn vectorcall_method() -> Option<VectorcallMethod> {
    static FOUND: std::sync::OnceLock<Option<VectorcallMethod>> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        #[cfg(unix)]
        {
            // The program itself and the libraries loaded into its global scope (libpython, or
            // the python executable that exports the C API).
            let program = libloading::os::unix::Library::this();
            // SAFETY: where CPython exports this name (3.9 and later), it is the function of
            // `VectorcallMethod`'s signature; looking it up runs no code.
            let found = unsafe { program.get::<VectorcallMethod>(b"PyObject_VectorcallMethod\0") }
                .ok()
                .map(|symbol| *symbol);
            // The program stays loaded for the life of the process: the pointer stays valid
            // after the handle is closed.
            drop(program);
            found
        }
        #[cfg(not(unix))]
        {
            None
        }
    })
}

/// `obj.__dlpack__(max_version=(1, 3))` through `PyObject_VectorcallMethod`, and on
/// `TypeError` (a producer older than the keywords) `obj.__dlpack__()`, as [`call_dlpack`]
/// does without options; returns the result and whether the producer took the keywords.
fn call_dlpack_fast<'py>(
    obj: &Bound<'py, PyAny>,
    call: VectorcallMethod,
) -> PyResult<(Bound<'py, PyAny>, bool)> {
    let py = obj.py();
    let name = intern!(py, "__dlpack__");
    let max_version = max_version(py)?;
    let kwnames = MAX_VERSION_NAME.get_or_try_init(py, || {
        PyTuple::new(py, [intern!(py, "max_version")]).map(Bound::unbind)
    })?;
    let args = [obj.as_ptr(), max_version.as_ptr()];
    // SAFETY: the thread is attached (`py`); `name` is a str; `args` holds the object (one
    // argument by position, no offset flag) then one value per name in `kwnames`, a tuple of
    // str; all are borrowed and outlive the call.
    let result = unsafe { call(name.as_ptr(), args.as_ptr(), 1, kwnames.as_ptr()) };
    // SAFETY: the call returns a new reference, or NULL with an exception set.
    match unsafe { Bound::from_owned_ptr_or_err(py, result) } {
        Ok(capsule) => Ok((capsule, true)),
        Err(err) if err.is_instance_of::<PyTypeError>(py) => {
            Ok((obj.call_method0(name).map_err(|e| missing(obj, e))?, false))
        }
        Err(err) => Err(missing(obj, err)),
    }
}

/// `err`, or [`no_dlpack`]'s `TypeError` when `err` is an `AttributeError` because `obj` has
/// no `__dlpack__` (rather than one raised inside it). The `AttributeError` is the
/// `TypeError`'s cause: a `__dlpack__` property whose getter fails with one (a wrapper whose
/// tensor was released, say) also looks like no `__dlpack__`, and its message must not be lost.
fn missing(obj: &Bound<'_, PyAny>, err: PyErr) -> PyErr {
    let py = obj.py();
    if err.is_instance_of::<PyAttributeError>(py)
        && !obj.hasattr(intern!(py, "__dlpack__")).unwrap_or(true)
    {
        let refusal = no_dlpack(obj);
        refusal.set_cause(py, Some(err));
        refusal
    } else {
        err
    }
}

/// `("max_version",)`, made once: the keyword names of [`call_dlpack_fast`].
static MAX_VERSION_NAME: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();

/// [`CONSUMER_MAX_VERSION`] as a Python tuple, made once.
fn max_version(py: Python<'_>) -> PyResult<&Bound<'_, PyTuple>> {
    MAX_VERSION
        .get_or_try_init(py, || {
            PyTuple::new(py, [CONSUMER_MAX_VERSION.major, CONSUMER_MAX_VERSION.minor])
                .map(Bound::unbind)
        })
        .map(|tuple| tuple.bind(py))
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
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "max_version"), max_version(py)?)?;
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

/// How this importer serves a `dl_device` / `copy` request for a tensor on `device` that the
/// producer did not see (a bare capsule, or a producer without the keywords) or did not honour,
/// as dlpack-core's [`plan_export`] decides: `None` when nothing is asked; a relabel of
/// host-readable memory or a host copy; a `BufferError` for what the host cannot do (a copy of
/// device memory needs the producer). Decided before a capsule is taken, so that a refusal
/// leaves it as it was.
fn local_plan(device: Device, options: &ImportOptions) -> PyResult<Option<ExportPlan>> {
    if options.dl_device.is_none() && options.copy.is_none() {
        return Ok(None);
    }
    let plan = plan_export(device, options.dl_device, options.copy).map_err(to_py_err)?;
    match plan {
        ExportPlan::CopyTo(target) if plan.needs_device_runtime(device) => {
            Err(to_py_err(Error::Protocol {
                kind: PyErrorKind::BufferError,
                message: format!(
                    "the producer of this {device} tensor did not take dl_device / copy, and copying it to {target} needs its device runtime; expected a producer that takes the DLPack 2023.12 keywords"
                ),
            }))
        }
        plan => Ok(Some(plan)),
    }
}

/// Carries out what [`check_request`] left to do once `tensor` is taken.
fn serve_locally(tensor: ManagedTensor, local: Local) -> PyResult<ManagedTensor> {
    match local {
        Local::AsIs => Ok(tensor),
        Local::Relabel(target) => {
            ManagedTensor::export(Reexport::relabel(tensor, target)).map_err(to_py_err)
        }
        Local::Copy(copy) => {
            drop(tensor);
            ManagedTensor::export(copy).map_err(to_py_err)
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    /// The fast `__dlpack__` call is found in CPython (here the embedded interpreter; the
    /// Python tests' benchmark shows it in an extension module): without it every import from
    /// a producer without the C exchange API would silently take the slower route.
    #[test]
    fn cpython_exports_pyobject_vectorcallmethod() {
        pyo3::Python::attach(|_| {
            assert!(
                super::vectorcall_method().is_some(),
                "PyObject_VectorcallMethod not found in the running CPython"
            );
        });
    }
}

#[cfg(test)]
mod aliasing_tests {
    use super::*;
    use dlpack_core::DataType;

    #[test]
    fn python_can_write_under_no_bool_reference_of_an_import() {
        Python::attach(|py| {
            let t = ManagedTensor::export(vec![false, true, false, true]).unwrap();
            let object = Bound::new(py, DLPackTensor::new(t)).unwrap();
            let imported = from_dlpack(object.as_any()).unwrap();
            assert!(imported.is_externally_writable());
            // A `&bool` into memory Python code can reach could be made to read 2: none is made.
            assert_eq!(
                imported.view::<bool>().unwrap_err(),
                Error::ExternallyWritable {
                    dtype: DataType::BOOL
                }
            );
            // The copy is checked where only it can change.
            assert_eq!(
                imported.to_vec::<bool>().unwrap(),
                [false, true, false, true]
            );
            // The exporter's own Rust side is in the same position: Python may have a
            // writable import of it.
            let exporter = object.get().exporter();
            assert!(exporter.tensor().view::<bool>().is_err());
            assert_eq!(
                exporter.tensor().view_bytes().unwrap().to_vec().unwrap(),
                [0, 1, 0, 1]
            );
        });
    }
}
