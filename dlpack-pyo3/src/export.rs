//! The producer side: `__dlpack__` and `__dlpack_device__` for Rust tensors.
//!
//! [`to_capsule`] serves one `__dlpack__` call for a tensor you own; [`Exporter`] serves any
//! number of them for a tensor that a Python object keeps (the state a `#[pyclass]` holds and
//! delegates to); [`DLPackTensor`] is a ready-made `#[pyclass]` around an [`Exporter`] that also
//! offers the DLPack C exchange API.
//!
//! Every decision (which struct, whether to copy or relabel, what the stream means, which
//! exception) is dlpack-core's [`ExportArgs::decide`]; this module carries it out:
//!
//! 1. synchronise as [`SyncAction`] says, through the [`DeviceHooks`] (CUDA stream waits and the
//!    like; nothing on the CPU);
//! 2. export as is, relabel pinned or managed memory to the CPU, or copy: a host copy of
//!    host-readable memory, or of device memory read through
//!    [`DeviceHooks::copy_to_host`]; the copy carries `IS_COPIED`;
//! 3. build the versioned or the legacy struct and wrap it in a capsule whose destructor deletes
//!    it only while unused.

use core::ffi::c_void;
use core::ops::Range;
use std::sync::Arc;

use dlpack_core::ffi::DLTensor;
use dlpack_core::protocol::{ExportArgs, ExportPlan, ExportStruct, StreamRequest, SyncAction};
use dlpack_core::{
    BorrowedTensor, CheckedTensor, DataType, DataTypeCode, Device, DeviceHooks, DeviceType, Error,
    Export, ExportDesc, Flags, ManagedTensor, MemoryKind, PyErrorKind, Version,
};
use pyo3::PyClass;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyCapsule, PyDict, PyInt, PyString, PyTuple};

use crate::capsule::{RawTensor, new_capsule};
use crate::entry::Entry;
use crate::exceptions::{stream_error, to_py_err};

/// Converts `__dlpack__`'s keyword arguments, as pyo3 extracts them, into dlpack-core's
/// [`ExportArgs`].
///
/// Declare them in your method as `#[pyo3(signature = (*, stream=None, max_version=None,
/// dl_device=None, copy=None))]` with the types below: pyo3 then raises `TypeError` for values
/// of the wrong Python type (a `max_version` that is not a 2-tuple, a float `stream`), as the
/// protocol asks.
///
/// ```
/// use dlpack_core::{Device, DeviceType, Version};
/// let args = dlpack_pyo3::export_args(None, Some((1, 0)), Some((1, 0)), Some(true));
/// assert_eq!(args.max_version, Some(Version::new(1, 0)));
/// assert_eq!(args.dl_device, Some(Device::new(DeviceType::CPU, 0)));
/// assert_eq!(args.copy, Some(true));
/// ```
pub fn export_args(
    stream: Option<i64>,
    max_version: Option<(u32, u32)>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> ExportArgs {
    ExportArgs {
        stream,
        max_version: max_version.map(|(major, minor)| Version::new(major, minor)),
        dl_device: dl_device.map(|(device_type, id)| Device::new(DeviceType(device_type), id)),
        copy,
    }
}

/// The ints 0 to 3, made once: the values of `max_version` and `dl_device` that consumers pass
/// (DLPack 1.0 to 1.3, `kDLCPU`, device 0), recognised by identity.
static SMALL_INTS: PyOnceLock<[Py<PyInt>; 4]> = PyOnceLock::new();

/// `value` as a pair of C longs when it is exactly a tuple of two exact ints that fit them, as
/// consumers pass `max_version` and `dl_device`: an exact type test, and for each item an
/// identity test with [`SMALL_INTS`] or a `PyLong_AsLong` call, instead of pyo3's general
/// extraction (a subclass check, owned items, an error value per step). An int is immutable,
/// so an item that *is* one of the ints made here has its value, however the interpreter
/// caches ints (CPython shares one object for each small int, so the test usually hits).
/// `None` for anything else, which the general extraction then decides, with its errors.
///
/// # Safety
/// The thread is attached, no exception is set, and `value` is a live object borrowed for the
/// call.
unsafe fn exact_int_pair(
    py: Python<'_>,
    value: *mut pyo3::ffi::PyObject,
) -> Option<(core::ffi::c_long, core::ffi::c_long)> {
    use pyo3::ffi;
    let small = SMALL_INTS.get_or_init(py, || [0, 1, 2, 3].map(|n| PyInt::new(py, n).unbind()));
    // SAFETY: `value` is live (caller), so its type is readable; the type objects are statics.
    if unsafe { ffi::Py_TYPE(value) != &raw mut ffi::PyTuple_Type } {
        return None;
    }
    // SAFETY: `value` is an exact tuple, for which PyTuple_Size does not fail.
    if unsafe { ffi::PyTuple_Size(value) } != 2 {
        return None;
    }
    let int = |index| -> Option<core::ffi::c_long> {
        // SAFETY: `index` < 2, the tuple's size: GetItem returns a borrowed item without
        // raising.
        let item = unsafe { ffi::PyTuple_GetItem(value, index) };
        if let Some(n) = small.iter().position(|int| int.as_ptr() == item) {
            return Some(n as core::ffi::c_long);
        }
        // SAFETY: `item` is a live object held by the tuple.
        if unsafe { ffi::Py_TYPE(item) != &raw mut ffi::PyLong_Type } {
            return None;
        }
        // SAFETY: the thread is attached (caller) and `item` is a live exact int.
        let n = unsafe { ffi::PyLong_AsLong(item) };
        // SAFETY: as above. No exception was set before the call (caller), so one set now is
        // the overflow of this one, which the general extraction raises again with its message.
        if n == -1 && unsafe { !ffi::PyErr_Occurred().is_null() } {
            // SAFETY: the thread is attached; this drops the overflow error just checked.
            unsafe { ffi::PyErr_Clear() };
            return None;
        }
        Some(n)
    };
    Some((int(0)?, int(1)?))
}

/// A pair of C longs as a pair of `A` and `B`, when both fit.
fn narrow_pair<A: TryFrom<core::ffi::c_long>, B: TryFrom<core::ffi::c_long>>(
    (a, b): (core::ffi::c_long, core::ffi::c_long),
) -> Option<(A, B)> {
    Some((A::try_from(a).ok()?, B::try_from(b).ok()?))
}

/// The keyword names of `__dlpack__`, in the order [`set_keyword`] numbers them.
const KEYWORDS: [&str; 4] = ["stream", "max_version", "dl_device", "copy"];

/// [`KEYWORDS`] as interned Python strings.
static INTERNED_KEYWORDS: PyOnceLock<[Py<PyString>; 4]> = PyOnceLock::new();

/// The `TypeError` CPython raises when a Python function of `__dlpack__`'s signature (only
/// `self` by position) is given `positional` more arguments by position.
fn positional_error(positional: usize) -> PyErr {
    PyTypeError::new_err(format!(
        "__dlpack__() takes 1 positional argument but {} were given",
        positional + 1
    ))
}

/// [`KEYWORDS`] as interned Python strings, made on first use.
fn interned_keywords(py: Python<'_>) -> &[Py<PyString>; 4] {
    INTERNED_KEYWORDS.get_or_init(py, || KEYWORDS.map(|n| PyString::intern(py, n).unbind()))
}

/// Sets the keyword argument `key=value` of a `__dlpack__` call in `parsed` when that takes no
/// general work, as for the arguments consumers pass: a name that is one of the `names`
/// ([`interned_keywords`]) itself, and a value that is `None`, a bool for `copy`, or an exact
/// tuple of two exact ints that fit for `max_version` and `dl_device`. Returns `false`, having
/// set nothing, for anything else, which [`set_keyword`] then decides with its errors.
///
/// # Safety
/// The thread is attached, no exception is set, and `key` and `value` are live objects
/// borrowed for the call.
unsafe fn set_keyword_fast(
    py: Python<'_>,
    parsed: &mut ExportArgs,
    names: &[Py<PyString>; 4],
    key: *mut pyo3::ffi::PyObject,
    value: *mut pyo3::ffi::PyObject,
) -> bool {
    use pyo3::ffi;
    let Some(slot) = names.iter().position(|name| name.as_ptr() == key) else {
        return false;
    };
    // SAFETY: None, True and False are immortal singletons; only their addresses are compared.
    let (none, true_, false_) = unsafe { (ffi::Py_None(), ffi::Py_True(), ffi::Py_False()) };
    if value == none {
        return true;
    }
    // SAFETY: forwarded contract (attached, no exception, `value` live).
    let pair = || unsafe { exact_int_pair(py, value) };
    match slot {
        1 => match pair().and_then(narrow_pair::<u32, u32>) {
            Some((major, minor)) => parsed.max_version = Some(Version::new(major, minor)),
            None => return false,
        },
        2 => match pair().and_then(narrow_pair::<i32, i32>) {
            Some((device_type, id)) => {
                parsed.dl_device = Some(Device::new(DeviceType(device_type), id));
            }
            None => return false,
        },
        3 if value == true_ => parsed.copy = Some(true),
        3 if value == false_ => parsed.copy = Some(false),
        _ => return false,
    }
    true
}

/// Sets the keyword argument `key=value` of a `__dlpack__` call in `parsed`, with the
/// `TypeError`s CPython raises for a Python function of the standard's signature
/// `(self, *, stream=None, max_version=None, dl_device=None, copy=None)`, and for values of
/// the wrong type (`max_version` and `dl_device` must be 2-tuples of ints, `stream` an int;
/// `None` is always allowed); `copy` is read by its truth value, as NumPy reads it. A pair of ints that does not fit (`max_version`:
/// two unsigned 32-bit ints; `dl_device`: two signed 32-bit ints) is an `OverflowError`, as
/// CPython raises for an int argument out of a C type's range, and NumPy here.
///
/// Names are matched by identity with interned strings first (CPython interns the keyword
/// names written in source code), and by value only for names made at run time.
fn set_keyword(
    parsed: &mut ExportArgs,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let slot = match interned_keywords(key.py())
        .iter()
        .position(|name| key.is(name))
    {
        Some(slot) => slot,
        None => {
            let name = key.cast::<PyString>()?.to_cow()?;
            KEYWORDS.iter().position(|&n| n == name).ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "__dlpack__() got an unexpected keyword argument '{name}'"
                ))
            })?
        }
    };
    if value.is_none() {
        return Ok(());
    }
    let wrong_type = |expected: &str| {
        let found = value
            .repr()
            .map_or_else(|_| "an object without a repr".to_owned(), |r| r.to_string());
        PyTypeError::new_err(format!(
            "__dlpack__() argument '{}' must be {expected} or None, not {found}",
            KEYWORDS[slot]
        ))
    };
    let pair_error = |expected: &str, range: &str| {
        let ints = value
            .cast::<PyTuple>()
            .is_ok_and(|t| t.len() == 2 && t.iter().all(|v| v.is_instance_of::<PyInt>()));
        if ints {
            PyOverflowError::new_err(format!(
                "__dlpack__() argument '{}' = {value} is out of range: expected {range}",
                KEYWORDS[slot]
            ))
        } else {
            wrong_type(expected)
        }
    };
    match slot {
        0 => {
            parsed.stream = Some(value.extract().map_err(|_| {
                if value.is_instance_of::<PyInt>() {
                    // An int, but none that a stream handle (a pointer) can be.
                    stream_error(
                        value.py(),
                        &Error::Protocol {
                            kind: PyErrorKind::ValueError,
                            message: format!(
                                "stream={value} does not fit a 64-bit stream handle; expected None, -1, 1, 2 or a handle"
                            ),
                        },
                    )
                } else {
                    wrong_type("an int")
                }
            })?)
        }
        1 => {
            let (major, minor) = value.extract().map_err(|_| {
                pair_error(
                    "a tuple of two ints",
                    "a major and a minor version in 0..2**32",
                )
            })?;
            parsed.max_version = Some(Version::new(major, minor));
        }
        2 => {
            let (device_type, id) = value.extract().map_err(|_| {
                pair_error(
                    "a tuple of two ints",
                    "a device type and a device id in -2**31..2**31",
                )
            })?;
            parsed.dl_device = Some(Device::new(DeviceType(device_type), id));
        }
        _ => parsed.copy = Some(copy_flag(value)?),
    }
    Ok(())
}

/// `copy=value` read as NumPy reads it: a string is a `ValueError`, anything else is taken by
/// its truth value (`1` and `np.True_` are true, a one-element array is its element, and a
/// larger array raises NumPy's own `ValueError`).
fn copy_flag(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(flag.is_true());
    }
    if value.is_instance_of::<PyString>() {
        return Err(PyValueError::new_err(
            "strings are not allowed for 'copy' keyword. Use True/False/None instead.",
        ));
    }
    value.is_truthy()
}

/// A `#[pyclass]` whose `__dlpack__` an [`Exporter`] serves, through [`dlpack_method`].
///
/// The class must be `frozen` (its exporter is read without a borrow flag) and `Sync`.
pub trait PyExporter: PyClass<Frozen = True> + Sync {
    /// The exporter that serves `__dlpack__`.
    fn exporter(&self) -> &Exporter;
}

/// `__dlpack__` for the class `T`, as a method descriptor to return from a `#[classattr]`
/// named `__dlpack__`: the fastest way to give a `#[pyclass]` the protocol.
///
/// The method has the array API standard's signature, `__dlpack__(self, *, stream=None,
/// max_version=None, dl_device=None, copy=None)` (what `inspect.signature` shows), raises
/// `TypeError` for arguments CPython would refuse for a Python function of that signature,
/// and otherwise does what [`Exporter::to_capsule`] does.
///
/// Why not a `#[pymethods]` method with that signature ([`Exporter::dlpack`] serves one): built
/// for the stable ABI (`abi3-py39`), such a method decodes every keyword name it is called with
/// into a new `bytes` object before matching it, and `np.from_dlpack(x)` passes three; that made
/// the call several times slower than NumPy's own `__dlpack__`. The method made here is a plain
/// CPython method, as NumPy's is: on CPython >= 3.10 it takes its arguments in an array and
/// the keyword names in a tuple (`METH_FASTCALL | METH_KEYWORDS`, in the stable ABI from
/// 3.10), before that in a tuple and a dict, and matches keyword names by identity with
/// interned strings.
///
/// The method table is allocated once per call of this function and never freed (CPython
/// keeps a pointer to it for the life of the descriptor): call it only from the class
/// attribute, which pyo3 evaluates once, when it creates the type.
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_pyo3::{Exporter, PyExporter};
/// use pyo3::prelude::*;
///
/// #[pyclass(frozen)]
/// struct Image {
///     pixels: Exporter,
/// }
///
/// impl PyExporter for Image {
///     fn exporter(&self) -> &Exporter {
///         &self.pixels
///     }
/// }
///
/// #[pymethods]
/// impl Image {
///     #[classattr]
///     fn __dlpack__(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
///         dlpack_pyo3::dlpack_method::<Image>(py)
///     }
///
///     fn __dlpack_device__(&self) -> (i32, i32) {
///         self.pixels.dlpack_device()
///     }
/// }
///
/// Python::attach(|py| -> PyResult<()> {
///     let tensor = ManagedTensor::export(vec![0u8; 12]).map_err(dlpack_pyo3::to_py_err)?;
///     let image = Bound::new(py, Image { pixels: Exporter::new(tensor) })?;
///     let back = dlpack_pyo3::from_dlpack(image.as_any())?; // through __dlpack__
///     assert_eq!(back.shape(), &[12]);
///     // Arguments are checked as CPython checks a Python function's.
///     let err = image.call_method1("__dlpack__", (1,)).unwrap_err();
///     assert!(err.is_instance_of::<pyo3::exceptions::PyTypeError>(py));
///     Ok(())
/// })?;
/// # Ok::<(), pyo3::PyErr>(())
/// ```
///
/// # Errors
///
/// The exception Python raises when `sys.implementation` cannot be read or the method
/// descriptor cannot be made (`PyDescr_NewMethod`).
pub fn dlpack_method<T: PyExporter>(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    // The fast calling convention (arguments in an array, keyword names in a tuple, no dict)
    // is in the stable ABI from CPython 3.10; before, and on other interpreters, the classic
    // one (a tuple and a dict).
    let fast = py.version_info() >= (3, 10)
        && py
            .import("sys")?
            .getattr("implementation")?
            .getattr("name")?
            .eq("cpython")?;
    let (meth, flags) = if fast {
        (
            // SAFETY: CPython calls `ml_meth` with the signature its flags name (here
            // METH_FASTCALL | METH_KEYWORDS, whose function type `raw_dlpack_fast` has); the
            // union field only stores the pointer, as C code casts it to `PyCFunction`.
            unsafe {
                core::mem::transmute::<FastMethod, pyo3::ffi::PyCFunctionWithKeywords>(
                    raw_dlpack_fast::<T>,
                )
            },
            METH_FASTCALL | pyo3::ffi::METH_KEYWORDS,
        )
    } else {
        (
            raw_dlpack_varargs::<T> as pyo3::ffi::PyCFunctionWithKeywords,
            pyo3::ffi::METH_VARARGS | pyo3::ffi::METH_KEYWORDS,
        )
    };
    let def: &'static mut pyo3::ffi::PyMethodDef = Box::leak(Box::new(pyo3::ffi::PyMethodDef {
        ml_name: c"__dlpack__".as_ptr(),
        ml_meth: pyo3::ffi::PyMethodDefPointer {
            PyCFunctionWithKeywords: meth,
        },
        ml_flags: flags,
        ml_doc: DLPACK_DOC.as_ptr(),
    }));
    let ty = py.get_type::<T>();
    // SAFETY: `ty` is a live type object; `def` is a valid method table that lives for ever
    // (leaked), whose function has the signature its flags name. The descriptor checks that
    // `self` is an instance of `ty` before it calls the function.
    let descriptor = unsafe { pyo3::ffi::PyDescr_NewMethod(ty.as_type_ptr(), def) };
    // SAFETY: PyDescr_NewMethod returns a new reference, or NULL with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, descriptor) }
}

/// `METH_FASTCALL` (CPython's `methodobject.h`), which pyo3-ffi names only for the stable ABI
/// of CPython >= 3.10; [`dlpack_method`] uses it only there.
const METH_FASTCALL: core::ffi::c_int = 0x0080;

/// The C type of a `METH_FASTCALL | METH_KEYWORDS` function.
type FastMethod = unsafe extern "C" fn(
    *mut pyo3::ffi::PyObject,
    *const *mut pyo3::ffi::PyObject,
    pyo3::ffi::Py_ssize_t,
    *mut pyo3::ffi::PyObject,
) -> *mut pyo3::ffi::PyObject;

/// The docstring of [`dlpack_method`]'s `__dlpack__`; its first line is the signature
/// CPython shows (`__text_signature__`).
const DLPACK_DOC: &core::ffi::CStr =
    c"__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)
--

Exports the tensor as a DLPack capsule (the array API standard's __dlpack__).";

/// [`dlpack_method`]'s function under the classic convention (`METH_VARARGS |
/// METH_KEYWORDS`): the positional arguments in a tuple, the keyword ones in a dict.
///
/// # Safety
/// Called by CPython only, through the descriptor made by [`dlpack_method::<T>`]: with the
/// thread attached, `slf` an instance of `T`, `args` a tuple and `kwargs` a dict or NULL, all
/// borrowed for the call.
unsafe extern "C" fn raw_dlpack_varargs<T: PyExporter>(
    slf: *mut pyo3::ffi::PyObject,
    args: *mut pyo3::ffi::PyObject,
    kwargs: *mut pyo3::ffi::PyObject,
) -> *mut pyo3::ffi::PyObject {
    // SAFETY: CPython calls methods with the thread attached (the function's contract).
    let entry = unsafe { Entry::assume() };
    let py = entry.py();
    method_body(&entry, || {
        // SAFETY: `args` is a borrowed reference valid for this call.
        let args = unsafe { pyo3::Borrowed::from_ptr(py, args) };
        let positional = args.cast::<PyTuple>()?.len();
        if positional != 0 {
            return Err(positional_error(positional));
        }
        let mut parsed = ExportArgs::default();
        if !kwargs.is_null() {
            // SAFETY: a non-NULL `kwargs` is a borrowed reference valid for this call.
            let kwargs = unsafe { pyo3::Borrowed::from_ptr(py, kwargs) };
            let names = interned_keywords(py);
            for (key, value) in kwargs.cast::<PyDict>()?.iter() {
                // SAFETY: attached, no exception set (a failed step returned), and both objects
                // are held by this loop.
                if !unsafe {
                    set_keyword_fast(py, &mut parsed, names, key.as_ptr(), value.as_ptr())
                } {
                    set_keyword(&mut parsed, &key, &value)?;
                }
            }
        }
        // SAFETY: `slf` is a borrowed reference valid for this call.
        let slf = unsafe { pyo3::Borrowed::from_ptr(py, slf) };
        // This convention also serves interpreters other than CPython: the type is checked here
        // rather than trusted to their method descriptors.
        slf.cast::<T>()?.get().exporter().to_capsule(py, &parsed)
    })
}

/// [`dlpack_method`]'s function under the fast convention (`METH_FASTCALL | METH_KEYWORDS`):
/// `nargsf` positional arguments at `args`, followed by one value per name in `kwnames`.
///
/// # Safety
/// Called by CPython >= 3.10 only, through the descriptor made by [`dlpack_method::<T>`]: with
/// the thread attached, `slf` an instance of `T`, `args` an array of the positional then the
/// keyword values, `nargsf` the count of positional ones (with CPython's offset flag bit),
/// `kwnames` NULL or a tuple of strings, all borrowed for the call.
unsafe extern "C" fn raw_dlpack_fast<T: PyExporter>(
    slf: *mut pyo3::ffi::PyObject,
    args: *const *mut pyo3::ffi::PyObject,
    nargsf: pyo3::ffi::Py_ssize_t,
    kwnames: *mut pyo3::ffi::PyObject,
) -> *mut pyo3::ffi::PyObject {
    // SAFETY: CPython calls methods with the thread attached (the function's contract).
    let entry = unsafe { Entry::assume() };
    let py = entry.py();
    method_body(&entry, || {
        // The count without PY_VECTORCALL_ARGUMENTS_OFFSET, the top bit (CPython's
        // `PyVectorcall_NARGS`).
        let positional = (nargsf as usize) & !(1 << (usize::BITS - 1));
        if positional != 0 {
            return Err(positional_error(positional));
        }
        let mut parsed = ExportArgs::default();
        if !kwnames.is_null() {
            let names = interned_keywords(py);
            // SAFETY: a non-NULL `kwnames` is a tuple of strings borrowed for this call
            // (CPython's calling convention), for which PyTuple_Size does not fail.
            let count = unsafe { pyo3::ffi::PyTuple_Size(kwnames) };
            for i in 0..count {
                // SAFETY: `i` < the tuple's size: GetItem returns a borrowed name without
                // raising. `args` holds `positional` (0) values and then one per keyword name,
                // each borrowed for this call.
                let (key, value) = unsafe {
                    (
                        pyo3::ffi::PyTuple_GetItem(kwnames, i),
                        *args.add(positional + i as usize),
                    )
                };
                // SAFETY: attached, no exception set (a failed step returned), both objects
                // live for the call.
                if !unsafe { set_keyword_fast(py, &mut parsed, names, key, value) } {
                    // SAFETY: as above.
                    let (key, value) = unsafe {
                        (
                            pyo3::Borrowed::from_ptr(py, key),
                            pyo3::Borrowed::from_ptr(py, value),
                        )
                    };
                    set_keyword(&mut parsed, &key, &value)?;
                }
            }
        }
        // SAFETY: `slf` is a borrowed reference valid for this call, to an instance of `T`:
        // CPython's method descriptor checks that before every call (`descr_check`, also for a
        // call through the type, `T.__dlpack__(other)`), and raises TypeError for anything
        // else; this function serves CPython only.
        unsafe { export_from::<T>(pyo3::Borrowed::from_ptr(py, slf), &parsed) }
    })
}

/// The export of [`dlpack_method`]'s functions, once the arguments are parsed.
///
/// # Safety
/// `slf` is an instance of `T` (or of a subclass).
unsafe fn export_from<'py, T: PyExporter>(
    slf: pyo3::Borrowed<'_, 'py, PyAny>,
    args: &ExportArgs,
) -> PyResult<Bound<'py, PyCapsule>> {
    // SAFETY: an instance of `T` (caller).
    let slf = unsafe { slf.cast_unchecked::<T>() };
    slf.get().exporter().to_capsule(slf.py(), args)
}

/// Runs a C method's body: its result as a new reference, or NULL with the error (or a
/// `PanicException` for a panic, which must not unwind into C) set as the Python exception
/// ([`Entry::raise`]).
fn method_body<'py>(
    entry: &'py Entry,
    body: impl FnOnce() -> PyResult<Bound<'py, PyCapsule>>,
) -> *mut pyo3::ffi::PyObject {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(capsule)) => capsule.into_ptr(),
        Ok(Err(err)) => {
            entry.raise(err);
            core::ptr::null_mut()
        }
        Err(payload) => {
            entry.raise(panic_error(payload));
            core::ptr::null_mut()
        }
    }
}

/// A caught panic as the `PanicException` pyo3 raises for a panic in a Python method.
pub(crate) fn panic_error(payload: Box<dyn std::any::Any + Send>) -> PyErr {
    pyo3::panic::PanicException::new_err(panic_message(&*payload))
}

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// `__dlpack_device__()`'s answer for `device`: `(device_type, device_id)`.
pub fn dlpack_device(device: Device) -> (i32, i32) {
    (device.device_type.0, device.device_id)
}

/// Serves one `__dlpack__` call: exports `tensor` as `args` ask and wraps it in a capsule.
///
/// `hooks` synchronise and copy device memory; a CPU tensor needs none.
///
/// When the host must wait for the device (an export to the CPU, or pinned or managed memory
/// asked for with `stream=None`) the wait, and a copy from the device, run detached from the
/// interpreter (`py.detach`), since the work waited for may need a Python thread. So this call,
/// and every `__dlpack__` this crate serves, may let other Python threads run: do not hold a
/// lock across it that those threads take while attached.
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use pyo3::prelude::*;
///
/// Python::attach(|py| -> PyResult<()> {
///     let tensor = ManagedTensor::export(vec![1i32, 2, 3]).map_err(dlpack_pyo3::to_py_err)?;
///     let args = dlpack_pyo3::export_args(None, Some((1, 0)), None, None);
///     let capsule = dlpack_pyo3::to_capsule(py, tensor, &args, None)?;
///     assert_eq!(capsule.repr()?.to_string().split('"').nth(1), Some("dltensor_versioned"));
///     Ok(())
/// })?;
/// # Ok::<(), pyo3::PyErr>(())
/// ```
///
/// # Errors
///
/// The Python exceptions dlpack-core decides on ([`to_py_err`]): `BufferError` for a
/// `dl_device` / `copy` request that cannot be served (or a read-only tensor asked for as a
/// legacy struct, as NumPy does), for a device tensor that needs `hooks` and has none, and for
/// a hook that fails; `DLPackStreamError` (a `ValueError` and a `RuntimeError`) for a stream
/// the device does not take; `MemoryError` for a copy that memory cannot hold.
pub fn to_capsule<'py>(
    py: Python<'py>,
    tensor: ManagedTensor,
    args: &ExportArgs,
    hooks: Option<&dyn DeviceHooks>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let raw = serve(py, Source::Owned(tensor), args, hooks)?;
    // SAFETY: `serve` hands over a fresh tensor that we own.
    unsafe { new_capsule(py, raw) }
}

/// A tensor that a Python object keeps and exports any number of times: the state a
/// `#[pyclass]` holds to implement `__dlpack__` and `__dlpack_device__` by delegation.
///
/// Every export shares the tensor (one more heap block per export, no copy of the data); the
/// tensor is deleted when the `Exporter` and every export of it are gone. Exports are writable
/// unless the tensor is read-only, and, as with NumPy arrays, all consumers see the same
/// memory; this crate's importer ([`crate::from_dlpack`]) takes such memory read-only.
///
/// The example below delegates from a `#[pymethods]` method, the simplest way. Under the stable
/// ABI such a method pays pyo3's keyword handling on every call (several hundred nanoseconds
/// for the three keywords `np.from_dlpack` passes); for NumPy-like speed implement
/// [`PyExporter`] and return [`dlpack_method`] from a `#[classattr]` instead.
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_pyo3::Exporter;
/// use pyo3::prelude::*;
/// use pyo3::types::PyCapsule;
///
/// #[pyclass(frozen)]
/// struct Image {
///     pixels: Exporter,
/// }
///
/// #[pymethods]
/// impl Image {
///     #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
///     fn __dlpack__<'py>(
///         &self,
///         py: Python<'py>,
///         stream: Option<i64>,
///         max_version: Option<(u32, u32)>,
///         dl_device: Option<(i32, i32)>,
///         copy: Option<bool>,
///     ) -> PyResult<Bound<'py, PyCapsule>> {
///         self.pixels.dlpack(py, stream, max_version, dl_device, copy)
///     }
///
///     fn __dlpack_device__(&self) -> (i32, i32) {
///         self.pixels.dlpack_device()
///     }
/// }
///
/// Python::attach(|py| -> PyResult<()> {
///     let tensor = ManagedTensor::export(vec![0u8; 12]).map_err(dlpack_pyo3::to_py_err)?;
///     let image = Bound::new(py, Image { pixels: Exporter::new(tensor) })?;
///     let back = dlpack_pyo3::from_dlpack(image.as_any())?; // through __dlpack__
///     assert_eq!(back.shape(), &[12]);
///     Ok(())
/// })?;
/// # Ok::<(), pyo3::PyErr>(())
/// ```
#[derive(Clone)]
pub struct Exporter {
    tensor: Arc<ManagedTensor>,
    hooks: Option<Arc<dyn DeviceHooks>>,
}

impl core::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Exporter")
            .field("tensor", &*self.tensor)
            .field("hooks", &self.hooks.is_some())
            .finish()
    }
}

impl Exporter {
    /// An exporter for a tensor that needs no device hooks (host memory).
    pub fn new(tensor: ManagedTensor) -> Self {
        Exporter {
            tensor: Arc::new(tensor.into_externally_writable()),
            hooks: None,
        }
    }

    /// An exporter whose device work (stream synchronisation, copies to the host) goes through
    /// `hooks`: the seam a device crate such as dlpack-cuda plugs into.
    pub fn with_hooks(tensor: ManagedTensor, hooks: Arc<dyn DeviceHooks>) -> Self {
        Exporter {
            tensor: Arc::new(tensor.into_externally_writable()),
            hooks: Some(hooks),
        }
    }

    /// The tensor. Python code that imported it (writable, unless it is read-only) may write
    /// its memory while Rust reads it, so it is
    /// [externally writable](ManagedTensor::into_externally_writable): a `bool` view of it is
    /// refused, and its `to_vec` is a checked copy.
    pub fn tensor(&self) -> &CheckedTensor {
        &self.tensor
    }

    /// The device hooks, if any.
    pub fn hooks(&self) -> Option<&dyn DeviceHooks> {
        self.hooks.as_deref()
    }

    /// `__dlpack_device__()`: the tensor's `(device_type, device_id)`.
    pub fn dlpack_device(&self) -> (i32, i32) {
        dlpack_device(self.tensor.device())
    }

    /// `__dlpack__(*, stream, max_version, dl_device, copy)`, with the arguments as pyo3
    /// extracts them (see [`export_args`]).
    ///
    /// # Errors
    ///
    /// As for [`to_capsule`](fn@to_capsule).
    pub fn dlpack<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let args = export_args(stream, max_version, dl_device, copy);
        self.to_capsule(py, &args)
    }

    /// `__dlpack__` with arguments already converted. Like [`to_capsule`](fn@to_capsule), it may
    /// detach from the interpreter while the host waits for the device.
    ///
    /// # Errors
    ///
    /// As for [`to_capsule`](fn@to_capsule).
    pub fn to_capsule<'py>(
        &self,
        py: Python<'py>,
        args: &ExportArgs,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let raw = serve(
            py,
            Source::Shared(self.tensor.clone()),
            args,
            self.hooks.as_deref(),
        )?;
        // SAFETY: `serve` hands over a fresh tensor that we own.
        unsafe { new_capsule(py, raw) }
    }

    /// A new versioned export of the tensor as is, without synchronisation with the consumer:
    /// the C exchange API's `managed_tensor_from_py_object_no_sync`, after
    /// [`order_before_default_stream`](Self::order_before_default_stream).
    pub(crate) fn export_no_sync(
        &self,
    ) -> Result<core::ptr::NonNull<dlpack_core::ffi::DLManagedTensorVersioned>, Error> {
        self.order_before_default_stream()?;
        self.export_unordered()
    }

    /// A new versioned export of the tensor as is, with no stream ordering at all: for this
    /// crate's own consumer, which takes host tensors this way and device tensors through
    /// `__dlpack__` with its stream.
    #[inline]
    pub(crate) fn export_unordered(
        &self,
    ) -> Result<core::ptr::NonNull<dlpack_core::ffi::DLManagedTensorVersioned>, Error> {
        Ok(ManagedTensor::export_raw(Shared(self.tensor.clone()))?)
    }

    /// Through the hooks, orders the producer's pending work on the tensor before its device's
    /// default stream: what `__dlpack__()` without a stream asks.
    ///
    /// The C exchange API hands tensors over without synchronising with the consumer, who
    /// instead waits on the stream that `current_work_stream` names, which for this type is the
    /// default stream. Hooks that queue work on a stream of their own (dlpack-cuda's
    /// `CudaHooks::new`, say) must therefore make the default stream wait for it first, or the
    /// consumer could read before the writes land. For CUDA this is stream ordering on the
    /// device (an event and a wait), never a host synchronisation, and nothing at all for hooks
    /// on the default stream and for host tensors. A tensor without hooks that `__dlpack__()`
    /// would have to order is refused, as `__dlpack__()` refuses it. A device whose
    /// `__dlpack__()` does not synchronise (oneAPI, where `stream=None` means no
    /// synchronisation, as in dpctl) has no default stream for the consumer to wait on, and
    /// `current_work_stream` names none: there the hooks make the data ready for the host
    /// (`StreamRequest::Default`; dlpack-oneapi waits for the producer's queue).
    pub(crate) fn order_before_default_stream(&self) -> Result<(), Error> {
        let device = self.tensor.device();
        let sync = ExportArgs::default().decide(device)?.sync;
        let Some(hooks) = self.hooks.as_deref() else {
            // As `__dlpack__()` does: a tensor it would order on a stream, or wait for, is not
            // handed over without the hooks that do it.
            return match sync {
                SyncAction::Nothing => Ok(()),
                SyncAction::Stream(_) | SyncAction::Host => Err(Error::NoHook { device }),
            };
        };
        match sync {
            SyncAction::Stream(request) => hooks.make_ready(device, request),
            // Pinned and managed memory: `__dlpack__()` waits on the host for it (a CPU reader
            // may take it in place), but this API's consumer waits on the default stream, so
            // ordering before that stream is what it needs, as for device memory.
            SyncAction::Host => hooks.make_ready(device, StreamRequest::Default),
            SyncAction::Nothing if device.device_type != DeviceType::CPU => {
                hooks.make_ready(device, StreamRequest::Default)
            }
            SyncAction::Nothing => Ok(()),
        }
    }
}

/// What a `__dlpack__` call exports from.
enum Source {
    /// A tensor the call owns outright.
    Owned(ManagedTensor),
    /// A tensor an [`Exporter`] keeps.
    Shared(Arc<ManagedTensor>),
}

impl Source {
    fn tensor(&self) -> &ManagedTensor {
        match self {
            Source::Owned(t) => t,
            Source::Shared(t) => t,
        }
    }

    /// The tensor as is, in the struct asked for; one heap block for a shared tensor, none for
    /// an owned one in its own struct.
    fn export_as(self, format: ExportStruct) -> Result<RawTensor, Error> {
        match (self, format) {
            (Source::Owned(t), format) => raw_of(t, format),
            // The shared tensor was validated when it was made; its description is copied.
            (Source::Shared(t), ExportStruct::Versioned) => {
                Ok(RawTensor::Versioned(ManagedTensor::export_raw(Shared(t))?))
            }
            (Source::Shared(t), ExportStruct::Legacy) => {
                ManagedTensor::export_raw_legacy(Shared(t))
                    .map(RawTensor::Legacy)
                    .map_err(dlpack_core::Error::from)
            }
        }
    }

    fn into_managed(self) -> Result<ManagedTensor, Error> {
        match self {
            Source::Owned(t) => Ok(t),
            Source::Shared(t) => Ok(ManagedTensor::export(Shared(t))?),
        }
    }
}

/// Hands a tensor over to C in the struct asked for (wrapping it if it is in the other one).
fn raw_of(tensor: ManagedTensor, format: ExportStruct) -> Result<RawTensor, Error> {
    let nonnull = |what| Error::NullPointer { what };
    Ok(match format {
        ExportStruct::Versioned => RawTensor::Versioned(
            core::ptr::NonNull::new(tensor.into_raw()?).ok_or_else(|| nonnull("managed tensor"))?,
        ),
        ExportStruct::Legacy => RawTensor::Legacy(
            core::ptr::NonNull::new(tensor.into_raw_legacy()?)
                .ok_or_else(|| nonnull("managed tensor"))?,
        ),
    })
}

/// What the hooks say the tensor's memory is, when that can change the decision: a request for
/// the CPU (`dl_device=(1, 0)`) of a `kDLOneAPI` tensor, the one device type whose memory may be
/// device, host or shared USM (host and shared USM are then relabelled instead of copied; every
/// other device type says what its memory is). The hooks check the whole claim
/// ([`CheckedTensor::check_device`]), so a relabel never hands the host memory outside a
/// host-readable allocation. `None` otherwise, and when the check fails (the copy then reports
/// why).
fn resolved_kind(
    tensor: &CheckedTensor,
    args: &ExportArgs,
    hooks: Option<&dyn DeviceHooks>,
) -> Option<MemoryKind> {
    if args.dl_device != Some(Device::CPU) || tensor.device().device_type != DeviceType::ONEAPI {
        return None;
    }
    match tensor.check_device(hooks?) {
        Ok(Some(info)) => Some(info.kind),
        // No elements (nothing to read), or a claim the hooks refute: the general decision.
        Ok(None) | Err(_) => None,
    }
}

/// Carries out dlpack-core's decision for one `__dlpack__` call.
fn serve(
    py: Python<'_>,
    source: Source,
    args: &ExportArgs,
    hooks: Option<&dyn DeviceHooks>,
) -> PyResult<RawTensor> {
    let device = source.tensor().device();
    let decision = match resolved_kind(source.tensor(), args, hooks) {
        Some(memory) => args.decide_for_memory(device, memory),
        None => args.decide(device),
    };
    let decision = decision.map_err(|err| match err.py_kind() {
        // `decide` refuses only stream values with ValueError (dlpack-core's docs).
        PyErrorKind::ValueError => stream_error(py, &err),
        _ => to_py_err(err),
    })?;
    let hook = || hooks.ok_or(Error::NoHook { device });
    match decision.sync {
        SyncAction::Nothing => Ok(()),
        SyncAction::Stream(request) => hook().and_then(|h| h.make_ready(device, request)),
        // Detached from the interpreter while the host waits: the device work waited for may
        // itself need a Python thread (a Python host function on the stream, as CuPy's
        // `launch_host_func` queues), and other threads need not stall meanwhile.
        SyncAction::Host => hook().and_then(|h| py.detach(|| h.wait_host(device))),
    }
    .map_err(to_py_err)?;
    let exported = match decision.plan {
        ExportPlan::AsIs => source.export_as(decision.format),
        ExportPlan::Relabel(target) => source
            .into_managed()
            .and_then(|t| Ok(ManagedTensor::export(Reexport::relabel(t, target))?))
            .and_then(|t| raw_of(t, decision.format)),
        ExportPlan::CopyTo(target) if target == Device::CPU => {
            let flags = Flags::empty().with(Flags::IS_COPIED, decision.sets_is_copied());
            // A copy from a device waits for it, detached as above.
            let tensor = source.tensor();
            let copy = if device.device_type == DeviceType::CPU {
                host_copy(tensor, hooks, flags)
            } else {
                py.detach(|| host_copy(tensor, hooks, flags))
            };
            copy.and_then(|copy| Ok(ManagedTensor::export(copy)?))
                .and_then(|copy| raw_of(copy, decision.format))
        }
        ExportPlan::CopyTo(target) => Err(Error::Protocol {
            kind: PyErrorKind::BufferError,
            message: format!(
                "copy=True asks for a new copy of a tensor on {device} on {target}, which needs a device allocation that no device hook offers yet; expected copy=None or False, or dl_device=(1, 0) for a copy in host memory"
            ),
        }),
    };
    exported.map_err(to_py_err)
}

/// An export of another tensor's memory on another device: pinned or managed memory (or host
/// and shared USM) relabelled to the CPU.
pub(crate) struct Reexport {
    inner: ManagedTensor,
    device: Device,
}

impl Reexport {
    /// `inner`'s memory on `device`, with `inner`'s flags (dlpack-core's
    /// [`ExportPlan::Relabel`]).
    pub(crate) fn relabel(inner: ManagedTensor, device: Device) -> Self {
        Reexport { inner, device }
    }
}

// SAFETY: describes exactly the memory of the tensor it owns, which stays valid until `inner` is
// dropped with `self` (the import and export contracts), with its own shape and strides (so
// `ndim` is stable). The device differs from the inner one only for relabelling pinned or
// managed memory to the CPU, which the host reads and writes in place (dlpack-core's
// `ExportPlan::Relabel`); the flags are the inner tensor's.
unsafe impl Export for Reexport {
    fn ndim(&self) -> usize {
        self.inner.ndim()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(self.inner.shape());
        strides.copy_from_slice(self.inner.strides());
        ExportDesc {
            data: self.inner.data_ptr(),
            byte_offset: self.inner.byte_offset(),
            dtype: self.inner.dtype(),
            device: self.device,
            flags: self.inner.flags(),
            allocation: None,
        }
    }
}

/// One export of an [`Exporter`]'s tensor.
struct Shared(Arc<ManagedTensor>);

// SAFETY: describes the memory of the tensor the Arc keeps, valid while any export holds the Arc
// (the import and export contracts of that tensor), with its own shape and strides. Several
// exports describe the same memory: they leave this crate only as raw tensors for foreign
// consumers (capsules and the C exchange API, never as a safe `ManagedTensor`), among which the
// sharing is the Python protocol's own, as NumPy shares an array's memory among all its exports;
// this crate's safe importer makes what it takes from Python read-only. IS_COPIED is cleared:
// no consumer owns shared memory alone.
unsafe impl Export for Shared {
    fn ndim(&self) -> usize {
        self.0.ndim()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        // One loop for both arrays: for the few dimensions of a tensor, cheaper than the two
        // `memcpy` calls `copy_from_slice` makes. Both arrays have `ndim()` entries.
        debug_assert_eq!(shape.len(), self.0.ndim());
        let source = self.0.shape().iter().zip(self.0.strides());
        for ((n, s), (&from_n, &from_s)) in shape.iter_mut().zip(strides.iter_mut()).zip(source) {
            *n = from_n;
            *s = from_s;
        }
        ExportDesc {
            data: self.0.data_ptr(),
            byte_offset: self.0.byte_offset(),
            dtype: self.0.dtype(),
            device: self.0.device(),
            flags: self.0.flags().with(Flags::IS_COPIED, false),
            allocation: None,
        }
    }
}

/// A compact row-major host copy of a tensor, of any dtype.
pub(crate) struct HostCopy {
    words: Words,
    shape: Box<[i64]>,
    dtype: DataType,
    flags: Flags,
}

/// The copied bytes, as the unsigned integers they were gathered as (for their alignment).
enum Words {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
}

impl Words {
    fn as_mut_ptr(&mut self) -> *mut c_void {
        match self {
            Words::U8(v) => v.as_mut_ptr().cast(),
            Words::U16(v) => v.as_mut_ptr().cast(),
            Words::U32(v) => v.as_mut_ptr().cast(),
            Words::U64(v) => v.as_mut_ptr().cast(),
        }
    }

    fn byte_len(&self) -> usize {
        match self {
            Words::U8(v) => v.len(),
            Words::U16(v) => v.len() * 2,
            Words::U32(v) => v.len() * 4,
            Words::U64(v) => v.len() * 8,
        }
    }
}

impl HostCopy {
    /// A zero-filled compact tensor of `shape` and `dtype` in host memory (the C exchange API's
    /// allocator).
    pub(crate) fn zeroed(shape: &[i64], dtype: DataType) -> Result<Self, Error> {
        dtype.validate()?;
        let elements = shape.iter().try_fold(1u64, |n, &d| {
            u64::try_from(d).ok().and_then(|d| n.checked_mul(d))
        });
        let bytes = elements
            .and_then(|n| n.checked_mul(u64::from(dtype.element_bits())))
            .map(|bits| bits.div_ceil(8))
            .and_then(|b| usize::try_from(b).ok())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| Error::Overflow {
                what: format!(
                    "a tensor of shape {shape:?} and dtype {dtype} does not fit in memory"
                ),
            })?;
        Ok(HostCopy {
            words: Words::U64(zeroed_words(bytes.div_ceil(8))?),
            shape: shape.into(),
            dtype,
            flags: Flags::empty(),
        })
    }
}

/// `vec![0u64; len]` (one zeroed allocation, which the OS may hand out as untouched zero pages),
/// with [`Error::OutOfMemory`] instead of an abort when it cannot be had.
fn zeroed_words(len: usize) -> Result<Vec<u64>, Error> {
    let out_of_memory = || Error::OutOfMemory {
        bytes: len as u128 * 8,
    };
    if len == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u64>(len).map_err(|_| out_of_memory())?;
    // SAFETY: the layout's size is non-zero (len > 0).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
    if ptr.is_null() {
        return Err(out_of_memory());
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `[u64; len]`, and
    // its `len` elements are initialised (all-zero bytes are a valid u64).
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

// SAFETY: describes the copy's own buffer: compact row-major strides over `shape`, whose
// elements (`prod(shape) * bits / 8` bytes, rounded up) the buffer holds, initialised, owned
// and in place while `self` lives; the allocation is named, so the export constructor checks the
// layout against it. `ndim` is the length of the boxed shape, which never changes.
unsafe impl Export for HostCopy {
    fn ndim(&self) -> usize {
        self.shape.len()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&self.shape);
        let mut step = 1i64;
        for (s, &d) in strides.iter_mut().zip(self.shape.iter()).rev() {
            *s = step;
            step = step.saturating_mul(d.max(1));
        }
        let data = self.words.as_mut_ptr();
        let start = data.addr();
        ExportDesc {
            data,
            byte_offset: 0,
            dtype: self.dtype,
            device: Device::CPU,
            flags: self.flags,
            allocation: Some(Range {
                start,
                end: start + self.words.byte_len(),
            }),
        }
    }
}

/// Copies `tensor`'s elements, of any dtype, into a compact row-major host buffer, reading
/// device memory through `hooks` when the host cannot read it.
///
/// dlpack-core's typed gathers ([`CheckedTensor::to_vec`], [`CheckedTensor::to_host_vec`]) do
/// the work: the tensor is viewed as unsigned integers of the widest width (8, 4, 2 or 1 bytes)
/// that divides its element size and the first element's address, with one more axis of
/// `element size / width` words when an element holds several (complex128, lanes > 1). Packed
/// sub-byte tensors (fp4, fp6), which DLPack defines only as compact, are copied as their bytes.
pub(crate) fn host_copy(
    tensor: &CheckedTensor,
    hooks: Option<&dyn DeviceHooks>,
    flags: Flags,
) -> Result<HostCopy, Error> {
    let dtype = tensor.dtype();
    let padded = tensor.flags().contains(Flags::IS_SUBBYTE_TYPE_PADDED);
    let source = tensor.as_dl_tensor();
    let first = source
        .data
        .addr()
        .wrapping_add(usize::try_from(source.byte_offset).unwrap_or(usize::MAX));
    let (width, mut shape, mut strides): (usize, Vec<i64>, Vec<i64>) =
        if !dtype.is_byte_sized() && !padded {
            // Packed: validation allowed only the compact row-major layout.
            let bits = (tensor.len() as u64) * u64::from(dtype.element_bits());
            let bytes = i64::try_from(bits.div_ceil(8)).map_err(|_| Error::Overflow {
                what: format!("{bits} bits of packed {dtype} data"),
            })?;
            (1, vec![bytes], vec![1])
        } else {
            let size = if padded {
                dtype.element_bits().div_ceil(8) as usize
            } else {
                dtype.element_bytes()
            };
            let width = [8usize, 4, 2, 1]
                .into_iter()
                .find(|w| size.is_multiple_of(*w) && first.is_multiple_of(*w))
                .unwrap_or(1);
            let words = (size / width) as i64;
            let mut strides = Vec::with_capacity(tensor.ndim() + 1);
            for &s in tensor.strides() {
                strides.push(s.checked_mul(words).ok_or_else(|| Error::Overflow {
                    what: format!("stride {s} times {words} words per element"),
                })?);
            }
            let mut shape = tensor.shape().to_vec();
            if words > 1 {
                shape.push(words);
                strides.push(1);
            }
            (width, shape, strides)
        };
    let word_type = DataType::new(DataTypeCode::UINT, (width * 8) as u8, 1);
    let view = DLTensor {
        data: source.data,
        // A tensor the host can read is read in place, whatever its device type says.
        device: if tensor.is_host_accessible() {
            Device::CPU
        } else {
            tensor.device()
        },
        ndim: shape.len() as i32,
        dtype: word_type,
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: source.byte_offset,
    };
    // SAFETY: `view` describes exactly the bytes of `tensor`'s elements (the same addresses, as
    // words), which `tensor` keeps valid and initialised while it is borrowed here; every
    // element of the view lies within those bytes (same span), `shape` and `strides` live until
    // the end of this function, and nothing writes the data meanwhile (we only read).
    let words = unsafe { BorrowedTensor::new(&view, Version::CURRENT, Flags::empty()) }?;
    let hooks_or_none: &dyn DeviceHooks = match hooks {
        Some(h) => h,
        None => &NoHooks,
    };
    let words = match width {
        8 => Words::U64(words.to_host_vec(hooks_or_none)?),
        4 => Words::U32(words.to_host_vec(hooks_or_none)?),
        2 => Words::U16(words.to_host_vec(hooks_or_none)?),
        _ => Words::U8(words.to_host_vec(hooks_or_none)?),
    };
    Ok(HostCopy {
        words,
        shape: tensor.shape().into(),
        dtype,
        flags: flags.with(Flags::IS_SUBBYTE_TYPE_PADDED, padded),
    })
}

/// The hooks of a producer that has none: they handle no device.
struct NoHooks;

// SAFETY: every method keeps its default: nothing is handled, resolved or copied.
unsafe impl DeviceHooks for NoHooks {
    fn handles(&self, _device_type: DeviceType) -> bool {
        false
    }
}

/// A Rust tensor as a Python object: `__dlpack__`, `__dlpack_device__`, and the DLPack C
/// exchange API (`__dlpack_c_exchange_api__` on the type).
///
/// Return one from a `#[pyfunction]` to hand any [`ManagedTensor`] to `numpy.from_dlpack`,
/// `torch.from_dlpack`, `jax.numpy.from_dlpack` or `tvm_ffi.from_dlpack`:
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_pyo3::DLPackTensor;
/// use pyo3::prelude::*;
///
/// #[pyfunction]
/// fn zeros(n: usize) -> PyResult<DLPackTensor> {
///     let tensor = ManagedTensor::export(vec![0.0f64; n]).map_err(dlpack_pyo3::to_py_err)?;
///     Ok(DLPackTensor::new(tensor))
/// }
/// # Python::attach(|py| {
/// #     let t = Bound::new(py, zeros(3).unwrap()).unwrap();
/// #     assert_eq!(t.getattr("shape").unwrap().extract::<Vec<i64>>().unwrap(), [3]);
/// # });
/// ```
#[pyclass(frozen, module = "dlpack_pyo3", name = "DLPackTensor")]
#[derive(Debug)]
pub struct DLPackTensor {
    exporter: Exporter,
}

impl DLPackTensor {
    /// A Python object for `tensor`, which needs no device hooks (host memory).
    pub fn new(tensor: ManagedTensor) -> Self {
        DLPackTensor {
            exporter: Exporter::new(tensor),
        }
    }

    /// A Python object for `tensor`, whose device work goes through `hooks`.
    pub fn with_hooks(tensor: ManagedTensor, hooks: Arc<dyn DeviceHooks>) -> Self {
        DLPackTensor {
            exporter: Exporter::with_hooks(tensor, hooks),
        }
    }

    /// The exporter behind the object.
    pub fn exporter(&self) -> &Exporter {
        &self.exporter
    }

    /// A Python object for a tensor the caller keeps a reference to, so that it can take the
    /// tensor back if the object cannot be made.
    pub(crate) fn shared(tensor: Arc<ManagedTensor>) -> Self {
        DLPackTensor {
            exporter: Exporter {
                tensor,
                hooks: None,
            },
        }
    }
}

impl PyExporter for DLPackTensor {
    fn exporter(&self) -> &Exporter {
        &self.exporter
    }
}

#[pymethods]
impl DLPackTensor {
    /// `__dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None)`: a
    /// `"dltensor_versioned"` capsule for `max_version >= (1, 0)`, else a `"dltensor"` one
    /// ([`dlpack_method`]).
    #[classattr]
    fn __dlpack__(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        dlpack_method::<DLPackTensor>(py)
    }

    /// `__dlpack_device__()`: `(device_type, device_id)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        self.exporter.dlpack_device()
    }

    /// The DLPack C exchange API table, a capsule named `"dlpack_exchange_api"`.
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
        crate::exchange::api_capsule(py)
    }

    /// The shape.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.exporter.tensor().shape().to_vec()
    }

    /// The strides, in elements.
    #[getter]
    fn strides(&self) -> Vec<i64> {
        self.exporter.tensor().strides().to_vec()
    }

    /// The dtype as `(code, bits, lanes)`.
    #[getter]
    fn dtype(&self) -> (u8, u8, u16) {
        let d = self.exporter.tensor().dtype();
        (d.code.0, d.bits, d.lanes)
    }

    /// The address of the first element (`data + byte_offset`).
    #[getter]
    fn data_ptr(&self) -> usize {
        let t = self.exporter.tensor();
        t.data_ptr()
            .addr()
            .wrapping_add(usize::try_from(t.byte_offset()).unwrap_or(usize::MAX))
    }

    /// Whether consumers must not write the memory.
    #[getter]
    fn read_only(&self) -> bool {
        self.exporter.tensor().is_read_only()
    }

    fn __repr__(&self) -> String {
        let t = self.exporter.tensor();
        format!(
            "DLPackTensor(shape={:?}, dtype={}, device={})",
            t.shape(),
            t.dtype(),
            t.device()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pyo3::exceptions::PyTypeError;
    use pyo3::ffi;

    /// Calls `__dlpack__` of a fresh `DLPackTensor` through one of the two C functions, with
    /// `positional` None arguments and the keyword arguments `kwargs`; returns the capsule's
    /// name or the error.
    fn call(
        fast: bool,
        positional: usize,
        kwargs: &[(&str, Bound<'_, PyAny>)],
    ) -> PyResult<String> {
        Python::attach(|py| {
            let tensor = ManagedTensor::export(vec![1.0f32, 2.0]).map_err(to_py_err)?;
            let object = Bound::new(py, DLPackTensor::new(tensor))?;
            let slf = object.as_ptr();
            let result = if fast {
                let mut values: Vec<*mut ffi::PyObject> = vec![py.None().as_ptr(); positional];
                values.extend(kwargs.iter().map(|(_, v)| v.as_ptr()));
                let names = PyTuple::new(py, kwargs.iter().map(|(k, _)| *k))?;
                let kwnames = if kwargs.is_empty() {
                    core::ptr::null_mut()
                } else {
                    names.as_ptr()
                };
                // SAFETY: the arguments are live objects of the kinds the function expects,
                // borrowed for the call, and the thread is attached.
                unsafe {
                    raw_dlpack_fast::<DLPackTensor>(
                        slf,
                        values.as_ptr(),
                        positional as ffi::Py_ssize_t,
                        kwnames,
                    )
                }
            } else {
                let args = PyTuple::new(py, (0..positional).map(|_| py.None()))?;
                let dict = PyDict::new(py);
                for (k, v) in kwargs {
                    dict.set_item(k, v)?;
                }
                let dict_ptr = if kwargs.is_empty() {
                    core::ptr::null_mut()
                } else {
                    dict.as_ptr()
                };
                // SAFETY: as above.
                unsafe { raw_dlpack_varargs::<DLPackTensor>(slf, args.as_ptr(), dict_ptr) }
            };
            // SAFETY: the function returns a new reference, or NULL with an exception set.
            let capsule = unsafe { Bound::from_owned_ptr_or_err(py, result) }?;
            let repr = capsule.repr()?.to_string();
            Ok(repr.split('"').nth(1).unwrap_or_default().to_owned())
        })
    }

    #[test]
    fn both_calling_conventions_parse_the_same_arguments() {
        Python::attach(|py| {
            let version = (1, 0).into_pyobject(py).unwrap().into_any();
            let none = py.None().into_bound(py);
            let number = 7i64.into_pyobject(py).unwrap().into_any();
            for fast in [false, true] {
                assert_eq!(call(fast, 0, &[]).unwrap(), "dltensor");
                let versioned = [("max_version", version.clone()), ("copy", none.clone())];
                assert_eq!(call(fast, 0, &versioned).unwrap(), "dltensor_versioned");
                for bad in [
                    call(fast, 1, &[]),
                    call(fast, 2, &[("max_version", version.clone())]),
                    call(fast, 0, &[("colour", none.clone())]),
                    call(fast, 0, &[("max_version", number.clone())]),
                ] {
                    let err = bad.unwrap_err();
                    assert!(err.is_instance_of::<PyTypeError>(py), "{err}");
                }
                // `copy` is read by its truth value, as NumPy reads it; a string is refused.
                assert_eq!(
                    call(
                        fast,
                        0,
                        &[("max_version", version.clone()), ("copy", number.clone())]
                    )
                    .unwrap(),
                    "dltensor_versioned"
                );
                let text = "yes".into_pyobject(py).unwrap().into_any();
                let err = call(fast, 0, &[("copy", text)]).unwrap_err();
                assert!(err.is_instance_of::<PyValueError>(py), "{err}");
            }
        });
    }
}
