//! The C-level `__dlpack__` method: [`dlpack_method`] makes a plain CPython method descriptor
//! for any [`PyExporter`] class, with the fast calling convention where the stable ABI has it.

use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::types::{PyCapsule, PyDict, PyTuple};

use super::args::{Keywords, interned_keywords, positional_error, set_keyword, set_keyword_fast};
use super::exporter::Exporter;
use crate::entry::{Entry, panic_error};

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
        let mut parsed = Keywords::default();
        if !kwargs.is_null() {
            // SAFETY: a non-NULL `kwargs` is a borrowed reference valid for this call.
            let kwargs = unsafe { pyo3::Borrowed::from_ptr(py, kwargs) };
            let names = interned_keywords(py);
            for (key, value) in kwargs.cast::<PyDict>()?.iter() {
                // SAFETY: attached, no exception set (a failed step returned), and both objects
                // are held by this loop.
                if !unsafe {
                    set_keyword_fast(py, &mut parsed.args, names, key.as_ptr(), value.as_ptr())
                } {
                    set_keyword(&mut parsed, &key, &value)?;
                }
            }
        }
        // SAFETY: `slf` is a borrowed reference valid for this call.
        let slf = unsafe { pyo3::Borrowed::from_ptr(py, slf) };
        // This convention also serves interpreters other than CPython: the type is checked here
        // rather than trusted to their method descriptors.
        let exporter = slf.cast::<T>()?.get().exporter();
        let args = parsed.for_device(py, exporter.tensor().device())?;
        exporter.to_capsule(py, &args)
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
        let mut parsed = Keywords::default();
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
                if !unsafe { set_keyword_fast(py, &mut parsed.args, names, key, value) } {
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
    parsed: &Keywords<'_>,
) -> PyResult<Bound<'py, PyCapsule>> {
    // SAFETY: an instance of `T` (caller).
    let slf = unsafe { slf.cast_unchecked::<T>() };
    let exporter = slf.get().exporter();
    let args = parsed.for_device(slf.py(), exporter.tensor().device())?;
    exporter.to_capsule(slf.py(), &args)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::to_py_err;
    use dlpack_core::ManagedTensor;
    use pyo3::exceptions::{PyTypeError, PyValueError};
    use pyo3::ffi;

    /// The smallest class the method serves.
    #[pyclass(frozen)]
    struct Probe {
        exporter: Exporter,
    }

    impl PyExporter for Probe {
        fn exporter(&self) -> &Exporter {
            &self.exporter
        }
    }

    /// Calls `__dlpack__` of a fresh `Probe` through one of the two C functions, with
    /// `positional` None arguments and the keyword arguments `kwargs`; returns the capsule's
    /// name or the error.
    fn call(
        fast: bool,
        positional: usize,
        kwargs: &[(&str, Bound<'_, PyAny>)],
    ) -> PyResult<String> {
        Python::attach(|py| {
            let tensor = ManagedTensor::export(vec![1.0f32, 2.0]).map_err(to_py_err)?;
            let object = Bound::new(
                py,
                Probe {
                    exporter: Exporter::new(tensor),
                },
            )?;
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
                    raw_dlpack_fast::<Probe>(
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
                unsafe { raw_dlpack_varargs::<Probe>(slf, args.as_ptr(), dict_ptr) }
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

    #[test]
    fn a_sycl_queue_on_a_cpu_tensor_is_the_stream_error_without_inviting_an_int() {
        Python::attach(|py| {
            // dpctl.SyclQueue's shape: a `backend` and a `_get_capsule` method.
            let queue = py
                .eval(
                    c"type('SyclQueue', (), {'backend': 'level_zero', '_get_capsule': lambda s: None})()",
                    None,
                    None,
                )
                .unwrap();
            for fast in [false, true] {
                let err = call(fast, 0, &[("stream", queue.clone())]).unwrap_err();
                assert!(err.is_instance_of::<PyValueError>(py), "{err}");
                assert!(
                    err.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py),
                    "{err}"
                );
                let message = err.value(py).to_string();
                assert!(message.contains("is a SYCL queue"), "{message}");
                assert!(message.contains("expected None"), "{message}");
                assert!(!message.contains("int"), "{message}");
                // Neither an int nor a queue: the TypeError names both.
                let float = 1.5f64.into_pyobject(py).unwrap().into_any();
                let err = call(fast, 0, &[("stream", float)]).unwrap_err();
                assert!(err.is_instance_of::<PyTypeError>(py), "{err}");
                assert!(err.to_string().contains("SYCL queue"), "{err}");
            }
        });
    }
}
