//! `__array__` with NumPy 2's semantics for any object with `__dlpack__`: [`numpy_array`],
//! through NumPy's own `from_dlpack`.

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `__array__(self, dtype=None, copy=None)` for `obj`, an object with `__dlpack__` and
/// `__dlpack_device__` (a [`DLPackTensor`](crate::DLPackTensor), or any class that delegates
/// them to an [`Exporter`](crate::Exporter)): a NumPy array of its data, made by
/// `numpy.from_dlpack`, with NumPy 2's meaning of `copy`:
///
/// - `copy=None`: the array shares the tensor's memory when the host reads it in place, and is
///   a host copy otherwise (device memory, through the tensor's device hooks);
/// - `copy=False`: the array always shares the memory, or a `ValueError` says why it cannot;
/// - `copy=True`: the array is always a new copy.
///
/// `dtype` converts: NumPy's `astype`, a copy unless the dtype is already the array's (and so a
/// `ValueError` with `copy=False`).
///
/// NumPy is imported when this is called, never before, so an extension module that offers
/// `__array__` does not need NumPy to import. `from_dlpack` is passed `device="cpu"` and
/// `copy` only when needed (a tensor off the CPU, a `copy` other than `None`): NumPy's
/// `from_dlpack` takes them from NumPy 2.1.
///
/// A class that delegates `__dlpack__` to an [`Exporter`](crate::Exporter) gets `__array__` in
/// one line (NumPy then reads it with `np.asarray(image, dtype=..., copy=...)`):
///
/// ```no_run
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
///
///     #[pyo3(signature = (dtype=None, copy=None))]
///     fn __array__<'py>(
///         slf: &Bound<'py, Self>,
///         dtype: Option<&Bound<'py, PyAny>>,
///         copy: Option<bool>,
///     ) -> PyResult<Bound<'py, PyAny>> {
///         dlpack_pyo3::numpy_array(slf.as_any(), dtype, copy)
///     }
/// }
/// # fn main() {}
/// ```
///
/// # Errors
///
/// `ImportError` without NumPy; `ValueError` for `copy=False` when a copy is needed (device
/// memory, or a `dtype` other than the tensor's); whatever `from_dlpack`, `__dlpack__` or
/// `astype` raise otherwise (`BufferError` for a device tensor without device hooks to copy
/// it, `TypeError` for a `dtype` NumPy does not know).
pub fn numpy_array<'py>(
    obj: &Bound<'py, PyAny>,
    dtype: Option<&Bound<'py, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let numpy = py.import("numpy")?;
    let kwargs = PyDict::new(py);
    let (device_type, _) = obj
        .call_method0("__dlpack_device__")?
        .extract::<(i32, i32)>()?;
    if device_type != dlpack_core::DeviceType::CPU.0 {
        kwargs.set_item("device", "cpu")?;
    }
    // With a dtype, a copy is astype's (one copy in all), not from_dlpack's.
    let share_first = dtype.is_some() && copy == Some(true);
    if let Some(copy) = copy.filter(|_| !share_first) {
        kwargs.set_item("copy", copy)?;
    }
    let array = numpy
        .call_method("from_dlpack", (obj,), Some(&kwargs))
        .map_err(|err| {
            if copy == Some(false) && err.is_instance_of::<PyBufferError>(py) {
                // NumPy 2's exception for a copy=False that needs a copy.
                let refused = PyValueError::new_err(format!(
                    "__array__(copy=False): the tensor cannot be shared without a copy: {err}"
                ));
                refused.set_cause(py, Some(err));
                refused
            } else {
                err
            }
        })?;
    let Some(dtype) = dtype else {
        return Ok(array);
    };
    let dtype = numpy.getattr("dtype")?.call1((dtype,))?;
    if copy == Some(false) && !array.getattr("dtype")?.eq(&dtype)? {
        return Err(PyValueError::new_err(format!(
            "__array__(dtype={dtype}, copy=False): the tensor's dtype is {}, and a conversion \
             is a copy",
            array.getattr("dtype")?
        )));
    }
    let astype = PyDict::new(py);
    astype.set_item("copy", share_first)?;
    array.call_method("astype", (dtype,), Some(&astype))
}
