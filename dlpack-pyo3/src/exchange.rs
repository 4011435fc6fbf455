//! The DLPack 1.3 C exchange API: a static table of C functions that a Python tensor *type*
//! offers as `__dlpack_c_exchange_api__` (a capsule named `"dlpack_exchange_api"`), so that C
//! and Rust consumers skip the Python-level `__dlpack__` call.
//!
//! Producer side: [`DLPackTensor`] offers [`exchange_api`], whose functions are
//!
//! | function | what it does here |
//! |---|---|
//! | `managed_tensor_allocator` | a zero-filled compact host tensor like the prototype (CPU only) |
//! | `managed_tensor_from_py_object_no_sync` | a new versioned export of a [`DLPackTensor`]'s tensor, as is (see below for device tensors) |
//! | `managed_tensor_to_py_object_no_sync` | takes an owned tensor and wraps it in a new [`DLPackTensor`] |
//! | `dltensor_from_py_object_no_sync` | the [`DLPackTensor`]'s `DLTensor`, valid while the object lives; a `BufferError` for a tensor whose flags a `DLTensor` cannot carry (read-only, or padded sub-byte) |
//! | `current_work_stream` | NULL (the default stream) for every device |
//!
//! As the API requires, none of them synchronises with the consumer's stream; they return 0, or
//! -1 with a Python exception set (the allocator reports through its `set_error` callback
//! instead). The consumer orders its work after the stream `current_work_stream` names, the
//! default stream. So that this is true of a device tensor whose hooks queue work on a stream of
//! their own, the two `from_py_object` functions first make the default stream wait for that
//! stream through the hooks (an event and a stream wait on the device, as `__dlpack__()` without
//! a stream does; nothing for hooks on the default stream or for host tensors). For such a
//! tensor that is device work on every `dltensor_from_py_object_no_sync`, which TVM-FFI calls
//! per kernel argument: give tensors that are passed to kernels often hooks on the default
//! stream.
//!
//! A device tensor without hooks cannot be ordered that way: the two `from_py_object` functions
//! refuse it, as `__dlpack__()` does.
//!
//! Consumer side: [`crate::from_dlpack`] (for host tensors) and `cuda::from_dlpack_cuda` (for
//! CUDA tensors) use the table of the object's type when it has a valid one of DLPack major
//! version 1, and `__dlpack__` otherwise, or when the table would not give what `__dlpack__`
//! gives:
//!
//! - for a subclass that overrides `__dlpack__` below the class offering the table (the table
//!   knows nothing of the override), or `__torch_function__` (PyTorch's `Tensor.__dlpack__`
//!   hands itself to it first);
//! - while a PyTorch `TorchFunctionMode` is active, which `Tensor.__dlpack__` hands itself to
//!   first too (one call of `torch._C._is_torch_function_mode_enabled()` per import);
//! - for an object with one of PyTorch's tensor flags set (`requires_grad`, `is_conj()`): PyTorch
//!   2.11's table exports such a tensor as if no flag were set (a conjugate view with the values
//!   unconjugated), where its `__dlpack__` refuses it;
//! - when the table's function fails: PyTorch 2.11's fails with its C++ converter's
//!   `RuntimeError` for a sparse, quantized or nested tensor, which its `__dlpack__` refuses with
//!   a `BufferError`.
//!
//! A PyTorch tensor with its negative bit set (`is_neg()`) is refused with a `BufferError`, on
//! every route: its memory holds the values negated, and both PyTorch's table and its
//! `__dlpack__` export it without saying so (PyTorch's own `torch.from_dlpack` of one gives the
//! values negated). The one exception is an import with `copy=True` from a producer that takes
//! the keyword ([`crate::from_dlpack_with`]): PyTorch's copy holds the values themselves.

use core::ffi::{CStr, c_int, c_void};
use core::ptr::{self, NonNull};
use std::ffi::CString;
use std::sync::{Arc, Mutex};

use dlpack_core::ffi::{
    CAPSULE_EXCHANGE_API, DLManagedTensorVersioned, DLPackExchangeAPI, DLPackExchangeAPIHeader,
    DLPackSetError, DLTensor,
};
use dlpack_core::{
    CheckedTensor, Device, DeviceType, Error, Flags, ManagedTensor, PyErrorKind, Version,
};
use pyo3::exceptions::{PyBufferError, PyException, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyString, PyType, PyWeakrefMethods, PyWeakrefReference};

use crate::capsule::RawTensor;
use crate::entry::Entry;
use crate::exceptions::to_py_err;
use crate::export::producers::HostCopy;
use crate::tensor::DLPackTensor;

/// The table, in a static (it must live as long as the process).
struct Table(DLPackExchangeAPI);

// SAFETY: the table is never written after compile time; its only pointer field (`prev_api`) is
// NULL, and its function pointers may be called from any thread (each one that touches Python
// objects requires, as the API does, a thread attached to the interpreter).
unsafe impl Sync for Table {}

static API: Table = Table(DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: Version::CURRENT,
        prev_api: ptr::null_mut(),
    },
    managed_tensor_allocator: Some(allocate),
    managed_tensor_from_py_object_no_sync: Some(from_py_object),
    managed_tensor_to_py_object_no_sync: Some(to_py_object),
    dltensor_from_py_object_no_sync: Some(dltensor_from_py_object),
    current_work_stream: Some(current_work_stream),
});

/// The C exchange API table of [`DLPackTensor`] (DLPack version 1.3, no older table chained).
pub fn exchange_api() -> &'static DLPackExchangeAPI {
    &API.0
}

/// The `__dlpack_c_exchange_api__` capsule: [`exchange_api`], named `"dlpack_exchange_api"`.
pub(crate) fn api_capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    let pointer = NonNull::from(&API.0).cast::<c_void>();
    // SAFETY: the pointer is to a static that lives as long as the process and is never written
    // (consumers only read the table), so no destructor is needed.
    unsafe { PyCapsule::new_with_pointer(py, pointer, CAPSULE_EXCHANGE_API) }
}

/// Writes `value` through an out-pointer, or fails if the pointer is NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn write_out<T>(out: *mut T, value: T, what: &'static str) -> Result<(), Error> {
    if out.is_null() {
        return Err(Error::NullPointer { what });
    }
    // SAFETY: non-NULL, and valid for writes (caller).
    unsafe { out.write(value) };
    Ok(())
}

/// The exception kind's name, as the allocator's `set_error` takes it.
fn kind_name(kind: PyErrorKind) -> &'static CStr {
    match kind {
        PyErrorKind::ValueError => c"ValueError",
        PyErrorKind::TypeError => c"TypeError",
        PyErrorKind::MemoryError => c"MemoryError",
        // BufferError, and any kind a later dlpack-core adds: the protocol's default.
        _ => c"BufferError",
    }
}

/// `managed_tensor_allocator`: a zero-filled, compact row-major host tensor with the prototype's
/// dtype, ndim and shape. Any device but the CPU is refused: this producer owns no device memory.
///
/// It needs no Python (tvm-ffi calls it without the GIL). An error, or a panic, which must not
/// unwind into C, goes to `set_error` ([`report_to`]).
///
/// # Safety
/// The API's contract: `prototype` is NULL or a readable `DLTensor` whose `shape` points to
/// `ndim` readable `i64`s (or is NULL when `ndim` is 0); `out` is NULL or writable;
/// `set_error` is NULL or a callback that takes `error_ctx`.
unsafe extern "C" fn allocate(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: DLPackSetError,
) -> c_int {
    // SAFETY: the callback and its context go together (contract); the body's pointers are the
    // caller's (forwarded contract).
    unsafe { report_to(set_error, error_ctx, || allocate_like(prototype, out)) }
}

/// The body of [`allocate`]: a zero-filled host tensor like `prototype`, written to `out`.
///
/// # Safety
/// As for [`allocate`]: `prototype` is NULL or a readable `DLTensor` whose `shape` points to
/// `ndim` readable `i64`s (or is NULL when `ndim` is 0); `out` is NULL or writable.
unsafe fn allocate_like(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
) -> Result<(), Error> {
    // SAFETY: NULL or readable (contract).
    let proto = unsafe { prototype.as_ref() }.ok_or(Error::NullPointer { what: "prototype" })?;
    if proto.device != Device::CPU {
        return Err(Error::Protocol {
            kind: PyErrorKind::BufferError,
            message: format!(
                "this allocator makes host memory only: the prototype is on {}, expected cpu:0",
                proto.device
            ),
        });
    }
    let ndim = usize::try_from(proto.ndim)
        .ok()
        .filter(|&n| n <= dlpack_core::MAX_NDIM)
        .ok_or(Error::BadNdim {
            ndim: proto.ndim.into(),
        })?;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else if proto.shape.is_null() {
        return Err(Error::NullPointer { what: "shape" });
    } else if !proto.shape.is_aligned() {
        return Err(Error::MisalignedArray {
            what: "shape",
            address: proto.shape.addr(),
        });
    } else {
        // SAFETY: non-NULL, aligned, `ndim` readable i64s (contract).
        unsafe { core::slice::from_raw_parts(proto.shape, ndim) }
    };
    if let Some((axis, &value)) = shape.iter().enumerate().find(|(_, d)| **d < 0) {
        return Err(Error::NegativeDim { axis, value });
    }
    let tensor = ManagedTensor::export(HostCopy::zeroed(shape, proto.dtype)?)?;
    let raw = tensor.into_raw()?;
    // SAFETY: NULL or writable (contract).
    if let Err(e) = unsafe { write_out(out, raw, "out") } {
        // SAFETY: nobody received the fresh tensor: we still own it.
        drop(unsafe { ManagedTensor::from_raw(raw) });
        return Err(e);
    }
    Ok(())
}

/// Runs the allocator's `body` and reports its outcome the way the API asks of the allocator:
/// 0, or -1 after passing the error's exception kind and message to `set_error` (when there is
/// one). A panic, which must not unwind into C, is reported as a `RuntimeError` naming the
/// function.
///
/// # Safety
/// `set_error` is NULL or a callback that takes `error_ctx`.
unsafe fn report_to(
    set_error: DLPackSetError,
    error_ctx: *mut c_void,
    body: impl FnOnce() -> Result<(), Error>,
) -> c_int {
    let (kind, message) = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => return 0,
        Ok(Err(err)) => (kind_name(err.py_kind()), err.to_string()),
        Err(payload) => (
            c"RuntimeError",
            format!(
                "the DLPack exchange API's managed_tensor_allocator panicked: {}",
                crate::entry::panic_message(&*payload)
            ),
        ),
    };
    if let Some(set_error) = set_error {
        let message = CString::new(message.replace('\0', " "))
            .unwrap_or_else(|_| CString::from(c"allocation failed"));
        // SAFETY: the callback and its context go together (caller); both strings are valid,
        // NUL-terminated, and live for the call.
        unsafe { set_error(error_ctx, kind.as_ptr(), message.as_ptr()) };
    }
    -1
}

/// Runs the body of one of the API's Python-object functions: 0 when it succeeds; -1 with its
/// error, or a `PanicException` for a panic (in a user's device hook, say), which must not
/// unwind into C, set as the Python exception ([`Entry::raise`]), as pyo3 reports a panic in a
/// Python method.
fn guarded<'py>(entry: &'py Entry, body: impl FnOnce(Python<'py>) -> PyResult<()>) -> c_int {
    let py = entry.py();
    let err = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(py))) {
        Ok(Ok(())) => return 0,
        Ok(Err(err)) => err,
        Err(payload) => crate::entry::panic_error(payload),
    };
    entry.raise(err);
    -1
}

/// The [`DLPackTensor`] behind a `PyObject*`, or a `TypeError`.
///
/// # Safety
/// `py_object` is NULL or a live Python object, and the thread is attached to the interpreter.
unsafe fn our_tensor<'py>(
    py: Python<'py>,
    py_object: *mut c_void,
) -> PyResult<Bound<'py, DLPackTensor>> {
    if py_object.is_null() {
        return Err(PyValueError::new_err(
            "the exchange API was given a NULL Python object",
        ));
    }
    // SAFETY: a live object (contract); this takes a new strong reference to it.
    let obj = unsafe { Bound::from_borrowed_ptr(py, py_object.cast()) };
    obj.cast_into::<DLPackTensor>().map_err(|e| {
        PyTypeError::new_err(format!(
            "this DLPack exchange API serves dlpack_pyo3.DLPackTensor objects, found {e}"
        ))
    })
}

/// `managed_tensor_from_py_object_no_sync`: a new versioned export of a [`DLPackTensor`], as is.
///
/// # Safety
/// The API's contract: the thread is attached to the interpreter, `py_object` is a live Python
/// object, `out` is writable.
unsafe extern "C" fn from_py_object(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    // SAFETY: the API is called from a thread attached to the interpreter (contract).
    let entry = unsafe { Entry::assume() };
    guarded(&entry, |py| {
        // SAFETY: a live object (contract).
        let tensor = unsafe { our_tensor(py, py_object) }?;
        let raw = tensor
            .get()
            .exporter()
            .export_no_sync()
            .map_err(to_py_err)?;
        let raw = raw.as_ptr();
        // SAFETY: NULL or writable (contract).
        unsafe { write_out(out, raw, "out") }.map_err(|e| {
            // SAFETY: nobody received the fresh export: we still own it.
            drop(unsafe { ManagedTensor::from_raw(raw) });
            to_py_err(e)
        })
    })
}

/// `managed_tensor_to_py_object_no_sync`: takes ownership of `tensor` and wraps it in a new
/// [`DLPackTensor`].
///
/// Ownership passes only on success: on -1 (a NULL out pointer, a tensor that fails
/// validation, one of another major version, no memory for the object) the tensor is left to
/// the caller, untouched, as the header's users read it (tvm-ffi, and the PyTorch table it
/// ships, call the deleter themselves when the conversion fails; deleting it here too would
/// free it twice).
///
/// # Safety
/// The API's contract: the thread is attached to the interpreter; `tensor` is NULL or an owned,
/// well-formed managed tensor handed over (as for [`ManagedTensor::from_raw`]); `out_py_object`
/// is writable.
unsafe extern "C" fn to_py_object(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    // SAFETY: attached (contract).
    let entry = unsafe { Entry::assume() };
    guarded(&entry, |py| {
        if out_py_object.is_null() {
            return Err(PyValueError::new_err(
                "managed_tensor_to_py_object_no_sync got a NULL out pointer",
            ));
        }
        // SAFETY: an owned, well-formed tensor handed over (contract); a refused one stays the
        // caller's.
        let managed = unsafe { ManagedTensor::from_raw_if(tensor, |_| Ok::<(), Error>(())) }
            .map_err(to_py_err)?;
        // Python code that receives the object may import it writable and write the memory
        // while Rust code reads it through the object's exporter.
        let managed = Arc::new(managed.into_externally_writable());
        match Bound::new(py, DLPackTensor::shared(managed.clone())) {
            Ok(obj) => {
                // SAFETY: non-NULL and writable (contract); the new strong reference goes to the
                // caller.
                unsafe { out_py_object.write(obj.into_ptr().cast()) };
                Ok(())
            }
            Err(e) => {
                // The object was not made, and dropped its reference: the tensor goes back to
                // the caller as the very struct it handed over (a versioned tensor imported
                // as is is given back without a wrapper).
                if let Ok(managed) = Arc::try_unwrap(managed) {
                    let back = managed.into_raw();
                    debug_assert_eq!(back.ok(), Some(tensor));
                }
                Err(e)
            }
        }
    })
}

/// `dltensor_from_py_object_no_sync`: the [`DLPackTensor`]'s own `DLTensor` (strides always
/// filled in), valid while the object lives. A tensor that [`flags_fit_a_dltensor`] refuses
/// (a read-only one, say) is a `BufferError`, before any device work.
///
/// # Safety
/// The API's contract: the thread is attached, `py_object` is a live Python object, `out` is
/// writable.
unsafe extern "C" fn dltensor_from_py_object(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    // SAFETY: attached (contract).
    let entry = unsafe { Entry::assume() };
    guarded(&entry, |py| {
        // SAFETY: a live object (contract).
        let tensor = unsafe { our_tensor(py, py_object) }?;
        let exporter = tensor.get().exporter();
        let checked = exporter.tensor();
        flags_fit_a_dltensor(checked).map_err(to_py_err)?;
        exporter.order_before_default_stream().map_err(to_py_err)?;
        let mut dl = *checked.as_dl_tensor();
        if checked.ndim() > 0 {
            // The checked strides: the producer's, or compact ones where it sent NULL. They live
            // in the tensor, which the object keeps.
            dl.strides = checked.strides().as_ptr().cast_mut();
        }
        // SAFETY: NULL or writable (contract).
        unsafe { write_out(out, dl, "out") }.map_err(to_py_err)
    })
}

/// Refuses a tensor that a plain `DLTensor` would misdescribe, since it has no flags: a
/// read-only tensor (a consumer of a `DLTensor` may write it: the C API has no way to tell it
/// not to) and a padded sub-byte tensor (which it would read as packed). A `BufferError`, as
/// NumPy's and this crate's `__dlpack__` raise for a read-only tensor asked for as a legacy
/// `DLManagedTensor`, which has no flags either; `managed_tensor_from_py_object_no_sync`
/// serves both, as a `DLManagedTensorVersioned` with its flags.
fn flags_fit_a_dltensor(tensor: &CheckedTensor) -> Result<(), Error> {
    let lost = [
        (Flags::READ_ONLY, "read-only"),
        (Flags::IS_SUBBYTE_TYPE_PADDED, "a padded sub-byte tensor"),
    ];
    match lost.iter().find(|(flag, _)| tensor.flags().contains(*flag)) {
        None => Ok(()),
        Some((_, what)) => Err(Error::Protocol {
            kind: PyErrorKind::BufferError,
            message: format!(
                "dltensor_from_py_object_no_sync cannot describe this tensor: it is {what}, and a plain DLTensor has no flags to say so; expected a tensor without READ_ONLY and IS_SUBBYTE_TYPE_PADDED, or use managed_tensor_from_py_object_no_sync (a DLManagedTensorVersioned carries the flags)"
            ),
        }),
    }
}

/// `current_work_stream`: NULL, the default stream, for every device. (For a device without
/// one, such as oneAPI, the tensor is made ready before it is handed over: see
/// `Exporter::order_before_default_stream`.)
///
/// # Safety
/// The API's contract: `out_current_stream` is writable; the thread is attached (for the
/// exception on a NULL out pointer).
unsafe extern "C" fn current_work_stream(
    _device_type: DeviceType,
    _device_id: i32,
    out_current_stream: *mut *mut c_void,
) -> c_int {
    // SAFETY: NULL or writable (contract).
    match unsafe { write_out(out_current_stream, ptr::null_mut(), "out_current_stream") } {
        Ok(()) => 0,
        Err(e) => {
            // SAFETY: attached (contract).
            let entry = unsafe { Entry::assume() };
            entry.raise(to_py_err(e));
            -1
        }
    }
}

/// A type already looked at: its address, a weak reference to it, and what it offers.
///
/// The reference is weak so that a class made at run time can still be freed (with its module
/// and class attributes); the address is compared first, and the weak reference tells whether
/// the type at that address is still the one looked at (a dead one may have been replaced by a
/// new type at the same address).
struct Seen {
    type_address: usize,
    type_ref: Py<PyWeakrefReference>,
    /// The address of the table the consumer may use (0: none).
    api_address: usize,
    /// Whether instances are asked about PyTorch's tensor flags ([`TypeFacts::tensor_flags`]).
    tensor_flags: bool,
}

/// Types already looked at.
static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
/// How many types [`SEEN`] remembers; later ones are looked up every time.
const SEEN_CAPACITY: usize = 32;

/// What a consumer may use of a type ([`type_facts`]): its C exchange API table, and whether
/// its instances carry PyTorch's tensor flags.
#[derive(Clone, Copy)]
struct TypeFacts {
    /// The type's table, unless the type overrides `__dlpack__` or `__torch_function__` below
    /// the class that offers it ([`served_by_the_table_class`]).
    api: Option<&'static DLPackExchangeAPI>,
    /// The type has `requires_grad`, `is_conj` and `is_neg` (PyTorch's `Tensor` does): state
    /// that its `__dlpack__` refuses or resolves, and that its table (in PyTorch 2.11) ignores,
    /// exporting the data as if none were set. [`table_for`] and [`has_negative_bit`] ask each
    /// instance.
    tensor_flags: bool,
}

/// The C exchange API the consumer may use for `obj` (for an import with no `dl_device`,
/// `copy` or `stream`): its type's table ([`type_facts`]), unless `obj` has one of PyTorch's
/// tensor flags set that the table would ignore, or a PyTorch `TorchFunctionMode` is active.
///
/// - The negative bit: a `BufferError`, whether the type has a table or not
///   ([`negative_bit_refusal`]).
/// - `requires_grad` or the conjugate bit, or an active `TorchFunctionMode`
///   ([`torch_function_mode_active`]): `None`, which sends the consumer to `__dlpack__`, whose
///   answer (PyTorch's refusal, or the mode's) then stands.
///
/// A flag that cannot be read sends the consumer to `__dlpack__`.
///
/// # Errors
///
/// `BufferError` for a PyTorch tensor with its negative bit set.
pub(crate) fn table_for(obj: &Bound<'_, PyAny>) -> PyResult<Option<&'static DLPackExchangeAPI>> {
    let facts = type_facts(obj);
    if !facts.tensor_flags {
        return Ok(facts.api);
    }
    match negative_bit(obj) {
        Some(false) => {}
        Some(true) => return Err(negative_bit_refusal()),
        None => return Ok(None),
    }
    let Some(api) = facts.api else {
        return Ok(None);
    };
    let py = obj.py();
    let flagged = |value: PyResult<Bound<'_, PyAny>>| value.and_then(|v| v.is_truthy());
    if torch_function_mode_active(py)
        || flagged(obj.getattr(intern!(py, "requires_grad"))).unwrap_or(true)
        || flagged(obj.call_method0(intern!(py, "is_conj"))).unwrap_or(true)
    {
        return Ok(None);
    }
    Ok(Some(api))
}

/// Whether `obj` is a PyTorch tensor with its negative bit set (`is_neg()`): false for an
/// object whose type lacks PyTorch's tensor flags, and for one whose `is_neg()` fails. For the
/// imports that call `__dlpack__` with a `dl_device`, `copy` or `stream` ([`table_for`] asks
/// for the others).
pub(crate) fn has_negative_bit(obj: &Bound<'_, PyAny>) -> bool {
    type_facts(obj).tensor_flags && negative_bit(obj) == Some(true)
}

/// `obj.is_neg()`, or `None` when it fails.
fn negative_bit(obj: &Bound<'_, PyAny>) -> Option<bool> {
    obj.call_method0(intern!(obj.py(), "is_neg"))
        .and_then(|v| v.is_truthy())
        .ok()
}

/// The refusal of a PyTorch tensor with its negative bit set: a `BufferError`. The tensor's
/// memory holds its values negated, and PyTorch's table and its `__dlpack__` (2.11) export
/// that memory without saying so: PyTorch's own `torch.from_dlpack` of such a view gives the
/// values negated.
pub(crate) fn negative_bit_refusal() -> PyErr {
    PyBufferError::new_err(
        "a PyTorch tensor with its negative bit set (is_neg()) cannot be imported as is: its \
         memory holds its values negated, and PyTorch's DLPack export does not say so; expected \
         a tensor without it: call .resolve_neg() first",
    )
}

/// `torch._C._is_torch_function_mode_enabled`, found once PyTorch is loaded.
static MODE_QUERY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Whether a PyTorch `TorchFunctionMode` is active (`torch._C._is_torch_function_mode_enabled()`,
/// one call of a C function): PyTorch's `Tensor.__dlpack__` hands itself to the mode first,
/// which may refuse, or export another tensor, and the table knows nothing of the mode.
/// `with torch.device(...)` and `torch.set_default_device` are such modes too. True when the
/// call fails; false while PyTorch is not loaded (no mode can be active then) or has no such
/// function.
fn torch_function_mode_active(py: Python<'_>) -> bool {
    let query = MODE_QUERY.get_or_try_init(py, || {
        torch_c(py)?
            .getattr(intern!(py, "_is_torch_function_mode_enabled"))
            .map(Bound::unbind)
    });
    match query {
        Ok(query) => query
            .bind(py)
            .call0()
            .and_then(|v| v.is_truthy())
            .unwrap_or(true),
        Err(_) => false,
    }
}

/// PyTorch's `torch._C` module if it is loaded (`sys.modules`); never imports it.
fn torch_c(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    py.import(intern!(py, "sys"))?
        .getattr(intern!(py, "modules"))?
        .get_item(intern!(py, "torch._C"))
}

/// What the consumer may use of `obj`'s type: the C exchange API it offers — a capsule named
/// `"dlpack_exchange_api"` whose table has DLPack major version 1 and the function consumers
/// need ([`lookup`]), on a type that does not override `__dlpack__` or `__torch_function__`
/// below the class that offers the table ([`served_by_the_table_class`]), or none, and then the
/// consumer uses `__dlpack__` — and whether it has PyTorch's tensor flags.
///
/// The answer is remembered per type (for up to 32 live types), so a type that gains or loses
/// an attribute later is not seen to.
fn type_facts(obj: &Bound<'_, PyAny>) -> TypeFacts {
    let ty = obj.get_type();
    let type_address = ty.as_ptr().addr();
    if let Ok(seen) = SEEN.lock()
        && let Some(entry) = seen.iter().find(|e| e.type_address == type_address)
        && entry
            .type_ref
            .bind(obj.py())
            .upgrade()
            .is_some_and(|live| live.is(&ty))
    {
        let address = entry.api_address;
        return TypeFacts {
            // SAFETY: a nonzero address was read from a valid table capsule below; the API
            // requires the table to live as long as the process, unmodified.
            api: (address != 0).then(|| unsafe { &*(address as *const DLPackExchangeAPI) }),
            tensor_flags: entry.tensor_flags,
        };
    }
    let facts = TypeFacts {
        api: lookup(&ty).filter(|_| served_by_the_table_class(&ty)),
        tensor_flags: has_tensor_flags(&ty),
    };
    if let Ok(type_ref) = PyWeakrefReference::new(&ty)
        && let Ok(mut seen) = SEEN.lock()
    {
        // Forget the types that are gone (and an older entry for this address).
        let py = obj.py();
        seen.retain(|e| e.type_address != type_address && e.type_ref.bind(py).upgrade().is_some());
        if seen.len() < SEEN_CAPACITY {
            seen.push(Seen {
                type_address,
                type_ref: type_ref.unbind(),
                api_address: facts.api.map_or(0, |api| ptr::from_ref(api).addr()),
                tensor_flags: facts.tensor_flags,
            });
        }
    }
    facts
}

/// Whether the table of `ty` gives what its `__dlpack__` gives, as far as the class
/// dictionaries tell: false for a subclass that overrides, below the class that offers the
/// table (or a base of that class),
///
/// - `__dlpack__` (to refuse, to log, or to export otherwise): the table knows nothing of the
///   override;
/// - `__torch_function__`: PyTorch's `Tensor.__dlpack__` hands itself to it first, where the
///   subclass may refuse, or export another tensor. PyTorch's `_disabled_torch_function_impl`
///   (`torch.nn.Parameter`'s), which turns it off, is no override.
///
/// Found by walking `ty.__mro__` for the first class whose own `__dict__` holds one of the
/// names; a failure to read them counts as an override.
fn served_by_the_table_class(ty: &Bound<'_, PyType>) -> bool {
    let py = ty.py();
    let Ok(mro) = ty.getattr(intern!(py, "__mro__")) else {
        return false;
    };
    let Ok(classes) = mro.try_iter() else {
        return false;
    };
    for class in classes {
        let Ok(namespace) = class.and_then(|c| c.getattr(intern!(py, "__dict__"))) else {
            return false;
        };
        let holds = |name: &Bound<'_, PyString>| namespace.contains(name).unwrap_or(false);
        if holds(intern!(py, "__dlpack_c_exchange_api__")) {
            return true;
        }
        if holds(intern!(py, "__dlpack__")) {
            return false;
        }
        if let Ok(torch_function) = namespace.get_item(intern!(py, "__torch_function__"))
            && !is_disabled_torch_function(&torch_function)
        {
            return false;
        }
    }
    false
}

/// Whether `value` is PyTorch's `torch._C._disabled_torch_function_impl`.
fn is_disabled_torch_function(value: &Bound<'_, PyAny>) -> bool {
    let py = value.py();
    torch_c(py)
        .and_then(|c| c.getattr(intern!(py, "_disabled_torch_function_impl")))
        .is_ok_and(|disabled| disabled.is(value))
}

/// Whether instances of `ty` have PyTorch's tensor flags ([`TypeFacts::tensor_flags`]).
fn has_tensor_flags(ty: &Bound<'_, PyType>) -> bool {
    let py = ty.py();
    [
        intern!(py, "requires_grad"),
        intern!(py, "is_conj"),
        intern!(py, "is_neg"),
    ]
    .into_iter()
    .all(|name| ty.hasattr(name).unwrap_or(false))
}

fn lookup(ty: &Bound<'_, PyType>) -> Option<&'static DLPackExchangeAPI> {
    let py = ty.py();
    let attr = ty.getattr(intern!(py, "__dlpack_c_exchange_api__")).ok()?;
    let capsule = attr.cast_into::<PyCapsule>().ok()?;
    let pointer = capsule.pointer_checked(Some(CAPSULE_EXCHANGE_API)).ok()?;
    if !pointer.cast::<DLPackExchangeAPI>().is_aligned() {
        return None;
    }
    // SAFETY: a capsule named "dlpack_exchange_api" holds a DLPackExchangeAPI that, by the API's
    // contract, lives as long as the process and is never modified.
    let api: &'static DLPackExchangeAPI = unsafe { pointer.cast().as_ref() };
    let usable =
        api.header.version.is_compatible() && api.managed_tensor_from_py_object_no_sync.is_some();
    usable.then_some(api)
}

/// Exports `obj` through its type's table (`managed_tensor_from_py_object_no_sync`). The caller
/// owns the result.
///
/// `None` when the function fails with an `Exception` set, or with none: the exception is
/// dropped, and the caller asks `__dlpack__`, whose answer stands. The table is a faster way
/// to what `__dlpack__` gives, and where the two differ on a refusal, `__dlpack__` is the
/// protocol: PyTorch's table (2.11) fails with its C++ converter's `RuntimeError` where its
/// `__dlpack__` raises `BufferError` (a sparse, quantized or nested tensor).
///
/// # Errors
///
/// An exception that is not an `Exception` (`KeyboardInterrupt`), and `BufferError` for a
/// function that succeeded without a tensor.
pub(crate) fn export_through(
    obj: &Bound<'_, PyAny>,
    api: &'static DLPackExchangeAPI,
) -> PyResult<Option<RawTensor>> {
    let py = obj.py();
    let Some(export) = api.managed_tensor_from_py_object_no_sync else {
        return Ok(None);
    };
    let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: the function comes from the table of `obj`'s own type, which the API makes
    // callable with any instance of it while attached (we are); `out` is a valid out-pointer.
    let status = unsafe { export(obj.as_ptr().cast(), &mut out) };
    if status != 0 {
        return match PyErr::take(py) {
            Some(err) if !err.is_instance_of::<PyException>(py) => Err(err),
            _ => Ok(None),
        };
    }
    NonNull::new(out)
        .map(|tensor| Some(RawTensor::Versioned(tensor)))
        .ok_or_else(|| {
            PyBufferError::new_err(
                "managed_tensor_from_py_object_no_sync succeeded but returned a NULL tensor",
            )
        })
}

/// The exception a table function that returned -1 set, or a `SystemError` naming it if it set
/// none (`PyErr::fetch` would panic in a debug build).
#[cfg(feature = "cuda")]
pub(crate) fn failed(py: Python<'_>, function: &str) -> PyErr {
    PyErr::take(py).unwrap_or_else(|| {
        pyo3::exceptions::PySystemError::new_err(format!(
            "the DLPack exchange API's {function} failed without setting an exception"
        ))
    })
}

/// A type's C exchange API, checked as the consumer checks it; for tests and tools that call the
/// table's other functions themselves.
pub fn type_exchange_api(ty: &Bound<'_, PyType>) -> Option<&'static DLPackExchangeAPI> {
    lookup(ty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ffi::c_char;

    /// What a `set_error` callback was given.
    #[derive(Default)]
    struct Reported {
        kind: String,
        message: String,
    }

    /// A `set_error` callback that records into a [`Reported`].
    ///
    /// # Safety
    /// `ctx` is a `Reported`; `kind` and `message` are NUL-terminated strings.
    unsafe extern "C" fn record(ctx: *mut c_void, kind: *const c_char, message: *const c_char) {
        // SAFETY: the context is the `Reported` the test passed; the strings are valid (API).
        unsafe {
            let reported = &mut *ctx.cast::<Reported>();
            reported.kind = CStr::from_ptr(kind).to_string_lossy().into_owned();
            reported.message = CStr::from_ptr(message).to_string_lossy().into_owned();
        }
    }

    #[test]
    fn a_panic_in_the_allocator_is_reported_through_set_error_not_unwound_into_c() {
        let mut reported = Reported::default();
        let ctx = ptr::from_mut(&mut reported).cast::<c_void>();
        // SAFETY: `record` takes a `Reported`, which `ctx` is.
        let status = unsafe { report_to(Some(record), ctx, || panic!("a hook gave up")) };
        assert_eq!(status, -1);
        assert_eq!(reported.kind, "RuntimeError");
        assert!(
            reported
                .message
                .contains("managed_tensor_allocator panicked: a hook gave up"),
            "{}",
            reported.message
        );
    }

    #[test]
    fn the_allocator_reports_an_error_with_its_kind_and_message() {
        let shape = [2i64, -1];
        let mut prototype = DLTensor {
            data: ptr::null_mut(),
            device: Device::CPU,
            ndim: 2,
            dtype: dlpack_core::DataType::F32,
            shape: shape.as_ptr().cast_mut(),
            strides: ptr::null_mut(),
            byte_offset: 0,
        };
        let mut out = ptr::null_mut();
        let mut reported = Reported::default();
        let ctx = ptr::from_mut(&mut reported).cast::<c_void>();
        // SAFETY: a readable prototype whose shape has `ndim` entries, a writable out pointer,
        // and a callback that takes `ctx`.
        let status = unsafe { allocate(&mut prototype, &mut out, ctx, Some(record)) };
        assert_eq!(status, -1);
        assert!(out.is_null());
        assert_eq!(reported.kind, "BufferError", "{}", reported.message);
        assert!(
            reported.message.contains("shape[1] = -1"),
            "{}",
            reported.message
        );
    }
}
