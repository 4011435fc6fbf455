//! The keyword arguments of `__dlpack__`: [`export_args`] for values pyo3 extracted, and the
//! parsing of the raw C method ([`super::method`]), which matches keyword names by identity
//! with interned strings and raises the `TypeError`s CPython raises for a Python function of
//! the standard's signature. A `stream` that is a SYCL queue (dpctl's convention for oneAPI)
//! is kept as [`Keywords`] until the tensor's device decides what it means.

use dlpack_core::protocol::ExportArgs;
use dlpack_core::{Device, DeviceType, Error, PyErrorKind, Version};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyString, PyTuple};

use crate::exceptions::stream_error;

/// The keyword arguments of one `__dlpack__` call, as [`set_keyword`] parses them.
#[derive(Default)]
pub(super) struct Keywords<'py> {
    /// Every argument but a SYCL queue given as `stream`.
    pub(super) args: ExportArgs,
    /// `stream`, when it is a SYCL queue ([`is_sycl_queue`]) rather than an int.
    sycl_queue: Option<Bound<'py, PyAny>>,
}

impl Keywords<'_> {
    /// The arguments for a tensor on `device`. A SYCL queue given as `stream` becomes the
    /// handle of its Level Zero command list, which the tensor's oneAPI hooks look up among the
    /// queues of their context (dlpack-oneapi's `Queue::from_raw` adopts one), as for an int
    /// `stream`. It is refused on a device that is not oneAPI (the stream error, whose message
    /// says what that device takes), and for a queue that has no such list: a queue on another
    /// backend (OpenCL, CUDA, HIP: `BufferError` naming it), a build without the `oneapi`
    /// feature (`BufferError`).
    pub(super) fn for_device(&self, py: Python<'_>, device: Device) -> PyResult<ExportArgs> {
        let Some(queue) = &self.sycl_queue else {
            return Ok(self.args);
        };
        let what = format!(
            "stream={}",
            queue
                .repr()
                .map_or_else(|_| "an object without a repr".to_owned(), |r| r.to_string())
        );
        if device.device_type != DeviceType::ONEAPI {
            let expected = if device.device_type == DeviceType::CPU {
                "expected None: the array API standard accepts only None on the CPU"
            } else {
                "expected None or a stream of that device"
            };
            return Err(stream_error(
                py,
                &Error::Protocol {
                    kind: PyErrorKind::ValueError,
                    message: format!(
                        "{what} is a SYCL queue, which orders only oneAPI tensors, and this one \
                         is on {device}; {expected}"
                    ),
                },
            ));
        }
        #[cfg(feature = "oneapi")]
        {
            let list = crate::oneapi::sycl::command_list_of(queue, &what)?;
            let stream = i64::try_from(list).map_err(|_| {
                pyo3::exceptions::PyBufferError::new_err(format!(
                    "{what} is a SYCL queue whose native command list {list:#x} does not fit a \
                     64-bit stream handle"
                ))
            })?;
            Ok(ExportArgs {
                stream: Some(stream),
                ..self.args
            })
        }
        #[cfg(not(feature = "oneapi"))]
        Err(pyo3::exceptions::PyBufferError::new_err(format!(
            "{what} is a SYCL queue, whose Level Zero command list only a build of dlpack-pyo3 \
             with its `oneapi` feature reads"
        )))
    }
}

/// The name of dpctl's queue capsules, whose pointer is a `sycl::queue *` (dpctl's
/// `DPCTLSyclQueueRef`) that the capsule's destructor deletes.
pub(crate) const SYCL_QUEUE_CAPSULE: &core::ffi::CStr = c"SyclQueueRef";

/// Whether `value` is a SYCL queue in dpctl's shape: a [`SYCL_QUEUE_CAPSULE`] capsule, or an
/// object with a `backend` and a `_get_capsule` method, as a `dpctl.SyclQueue` has (dpctl is
/// not imported: its classes are recognised by what they offer).
pub(crate) fn is_sycl_queue(value: &Bound<'_, PyAny>) -> bool {
    // SAFETY: the thread is attached and `value` is live; IsValid only reads the object.
    let capsule =
        unsafe { pyo3::ffi::PyCapsule_IsValid(value.as_ptr(), SYCL_QUEUE_CAPSULE.as_ptr()) == 1 };
    let py = value.py();
    capsule
        || (value
            .hasattr(pyo3::intern!(py, "_get_capsule"))
            .unwrap_or(false)
            && value.hasattr(pyo3::intern!(py, "backend")).unwrap_or(false))
}

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
pub(super) fn positional_error(positional: usize) -> PyErr {
    PyTypeError::new_err(format!(
        "__dlpack__() takes 1 positional argument but {} were given",
        positional + 1
    ))
}

/// [`KEYWORDS`] as interned Python strings, made on first use.
pub(super) fn interned_keywords(py: Python<'_>) -> &[Py<PyString>; 4] {
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
pub(super) unsafe fn set_keyword_fast(
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
/// the wrong type (`max_version` and `dl_device` must be 2-tuples of ints, `stream` an int or
/// a SYCL queue, kept for [`Keywords::for_device`]; `None` is always allowed); `copy` is read
/// by its truth value, as NumPy reads it. A pair of ints that does not fit (`max_version`: two
/// unsigned 32-bit ints; `dl_device`: two signed 32-bit ints) is an `OverflowError`, as CPython
/// raises for an int argument out of a C type's range, and NumPy here.
///
/// Names are matched by identity with interned strings first (CPython interns the keyword
/// names written in source code), and by value only for names made at run time.
pub(super) fn set_keyword<'py>(
    parsed: &mut Keywords<'py>,
    key: &Bound<'py, PyAny>,
    value: &Bound<'py, PyAny>,
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
        0 if !value.is_instance_of::<PyInt>() && is_sycl_queue(value) => {
            parsed.args.stream = None;
            parsed.sycl_queue = Some(value.clone());
        }
        0 => {
            parsed.sycl_queue = None;
            parsed.args.stream = Some(value.extract().map_err(|_| {
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
                    wrong_type("an int, a SYCL queue (dpctl.SyclQueue)")
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
            parsed.args.max_version = Some(Version::new(major, minor));
        }
        2 => {
            let (device_type, id) = value.extract().map_err(|_| {
                pair_error(
                    "a tuple of two ints",
                    "a device type and a device id in -2**31..2**31",
                )
            })?;
            parsed.args.dl_device = Some(Device::new(DeviceType(device_type), id));
        }
        _ => parsed.args.copy = Some(copy_flag(value)?),
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
