//! How dlpack-core's [`Error`]s become Python exceptions.
//!
//! Every error maps to the class its [`PyErrorKind`] names (`BufferError`, `ValueError`,
//! `TypeError`, `MemoryError`), with the core's message. Two situations get a class that also derives from
//! the exception NumPy raises there, so code written against either catches it:
//!
//! | situation | the core's kind | NumPy 2.x raises | raised here |
//! |---|---|---|---|
//! | a `stream` the device does not accept (any stream but `None` on the CPU) | `ValueError` | `RuntimeError` | [`stream_error_type`]: `DLPackStreamError(ValueError, RuntimeError)` |
//! | a capsule that is not a DLPack tensor, or `__dlpack__` returning no capsule | `TypeError` | `ValueError` | [`capsule_error_type`]: `DLPackCapsuleError(TypeError, ValueError)` |
//!
//! Both classes live in the module `dlpack_pyo3`; [`crate::register`] adds them to an extension
//! module so that Python code can name them.

use dlpack_core::{Error, PyErrorKind};
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

/// Turns a dlpack-core error into the Python exception its [`PyErrorKind`] names, carrying the
/// error's message.
///
/// ```
/// use dlpack_core::{Device, protocol::ExportArgs};
/// use pyo3::prelude::*;
/// use pyo3::exceptions::PyBufferError;
///
/// Python::attach(|py| {
///     let args = ExportArgs { dl_device: Some(Device::cuda(0)), ..ExportArgs::default() };
///     let err = dlpack_pyo3::to_py_err(args.decide(Device::CPU).unwrap_err());
///     assert!(err.is_instance_of::<PyBufferError>(py));
/// });
/// ```
pub fn to_py_err(err: impl Into<Error>) -> PyErr {
    let err: Error = err.into();
    let message = err.to_string();
    match err.py_kind() {
        PyErrorKind::ValueError => PyValueError::new_err(message),
        PyErrorKind::TypeError => PyTypeError::new_err(message),
        PyErrorKind::MemoryError => PyMemoryError::new_err(message),
        // BufferError, and any kind a later dlpack-core adds: the protocol's default.
        _ => PyBufferError::new_err(message),
    }
}

static STREAM_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CAPSULE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `dlpack_pyo3.DLPackStreamError`, a subclass of both `ValueError` (what the array API standard
/// and dlpack-core ask for) and `RuntimeError` (what NumPy raises), for a `stream` argument that
/// the exported device does not accept.
///
/// # Errors
///
/// The exception Python raises when it cannot make the class (once made, the class is kept for
/// the process).
pub fn stream_error_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    compat_type(
        py,
        &STREAM_ERROR,
        "DLPackStreamError",
        (
            py.get_type::<PyValueError>(),
            py.get_type::<PyRuntimeError>(),
        ),
        "A `stream` that __dlpack__ cannot accept for the device: a ValueError as the array API \
         standard asks, and a RuntimeError as NumPy raises.",
    )
}

/// `dlpack_pyo3.DLPackCapsuleError`, a subclass of both `TypeError` (what dlpack-core asks for:
/// the wrong kind of object) and `ValueError` (what NumPy raises), for an object that is not a
/// DLPack tensor capsule where one is expected.
///
/// # Errors
///
/// As for [`stream_error_type`].
pub fn capsule_error_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    compat_type(
        py,
        &CAPSULE_ERROR,
        "DLPackCapsuleError",
        (py.get_type::<PyTypeError>(), py.get_type::<PyValueError>()),
        "An object that is not a \"dltensor\" or \"dltensor_versioned\" capsule: a TypeError as \
         dlpack-core decides, and a ValueError as NumPy raises.",
    )
}

/// The `__module__` of the classes until [`crate::register`] adds them to a module.
const UNREGISTERED: &str = "dlpack_pyo3";

/// Makes `module` the home of `ty` (its `__module__`), unless another module already is.
pub(crate) fn adopt(ty: &Bound<'_, PyType>, module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = ty.py();
    let current = ty.getattr(intern!(py, "__module__"))?;
    if current.eq(UNREGISTERED)? {
        ty.setattr(intern!(py, "__module__"), module.name()?)?;
    }
    Ok(())
}

fn compat_type<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    bases: (Bound<'py, PyType>, Bound<'py, PyType>),
    doc: &str,
) -> PyResult<&'py Bound<'py, PyType>> {
    let ty = cell.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        let namespace = PyDict::new(py);
        namespace.set_item("__module__", UNREGISTERED)?;
        namespace.set_item("__doc__", doc)?;
        let ty = py
            .get_type::<PyType>()
            .call1((name, bases, namespace))?
            .cast_into::<PyType>()?;
        Ok(ty.unbind())
    })?;
    Ok(ty.bind(py))
}

/// The stream error: [`stream_error_type`] with the core's message, or a plain `ValueError` if
/// the class could not be made.
pub(crate) fn stream_error(py: Python<'_>, err: &Error) -> PyErr {
    compat_err(
        py,
        stream_error_type(py),
        err.to_string(),
        PyValueError::new_err,
    )
}

/// The capsule error: [`capsule_error_type`] with `message`, or a plain `TypeError` if the class
/// could not be made.
pub(crate) fn capsule_error(py: Python<'_>, message: String) -> PyErr {
    compat_err(py, capsule_error_type(py), message, PyTypeError::new_err)
}

fn compat_err(
    _py: Python<'_>,
    ty: PyResult<&Bound<'_, PyType>>,
    message: String,
    fallback: fn(String) -> PyErr,
) -> PyErr {
    match ty {
        Ok(ty) => PyErr::from_type(ty.clone(), message),
        Err(_) => fallback(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlpack_core::protocol::{ExportArgs, accept_capsule_name};
    use dlpack_core::{Device, Version};

    #[test]
    fn kinds_map_to_their_python_classes() {
        Python::attach(|py| {
            let buffer = ExportArgs {
                dl_device: Some(Device::cuda(0)),
                ..ExportArgs::default()
            }
            .decide(Device::CPU)
            .unwrap_err();
            let value = accept_capsule_name(c"used_dltensor").unwrap_err();
            let type_ = accept_capsule_name(c"other").unwrap_err();
            let message = buffer.to_string();
            let err = to_py_err(buffer);
            assert!(err.is_instance_of::<PyBufferError>(py));
            assert_eq!(err.value(py).to_string(), message);
            assert!(to_py_err(value).is_instance_of::<PyValueError>(py));
            assert!(to_py_err(type_).is_instance_of::<PyTypeError>(py));
        });
    }

    #[test]
    fn stream_errors_are_value_and_runtime_errors() {
        Python::attach(|py| {
            let args = ExportArgs {
                stream: Some(1),
                max_version: Some(Version::new(1, 0)),
                ..ExportArgs::default()
            };
            let core = args.decide(Device::CPU).unwrap_err();
            let err = stream_error(py, &core);
            assert!(err.is_instance_of::<PyValueError>(py));
            assert!(err.is_instance_of::<PyRuntimeError>(py));
            assert!(err.value(py).to_string().contains("stream=1"));
            let ty = err.get_type(py);
            assert_eq!(ty.name().unwrap().to_string(), "DLPackStreamError");
            // One class per process, not one per error.
            assert!(ty.is(stream_error_type(py).unwrap()));
        });
    }

    #[test]
    fn capsule_errors_are_type_and_value_errors() {
        Python::attach(|py| {
            let err = capsule_error(py, "not a capsule".into());
            assert!(err.is_instance_of::<PyTypeError>(py));
            assert!(err.is_instance_of::<PyValueError>(py));
            assert!(!err.is_instance_of::<PyRuntimeError>(py));
        });
    }
}
