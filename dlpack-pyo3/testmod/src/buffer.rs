//! The buffer protocol from C, for `tests/python/test_buffer.py`: `buffer_info` asks any object
//! for a buffer with exact PEP 3118 request flags (which Python 3.11 code cannot choose) and
//! reports what it was given; `ExporterTensor` is a `PyExporter` class of its own, whose
//! `__getbuffer__` and `__array__` are dlpack-pyo3's, as any extension's would be.

use std::ffi::{CStr, c_int};

use dlpack_pyo3::{DLPackTensor, Exporter, PyExporter};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Asks `obj` for a buffer with the request `flags` (`PyObject_GetBuffer`) and returns what
/// the buffer says: `buf`, `len`, `itemsize`, `readonly`, `ndim`, `format` (or None), `shape`
/// and `strides` (lists, or None), whether `suboffsets` is NULL, whether `obj` is the object,
/// and CPython's own verdicts on its contiguity (`c_contiguous`, `f_contiguous`). The buffer is
/// released before the call returns.
#[pyfunction]
fn buffer_info<'py>(obj: &Bound<'py, PyAny>, flags: c_int) -> PyResult<Bound<'py, PyDict>> {
    let py = obj.py();
    let mut view = ffi::Py_buffer::new();
    // SAFETY: `obj` is a live object and `view` a buffer struct to fill; the thread is attached.
    if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut view, flags) } != 0 {
        return Err(PyErr::fetch(py));
    }
    /// Releases the buffer however the report ends.
    struct Release(ffi::Py_buffer);
    impl Drop for Release {
        fn drop(&mut self) {
            // SAFETY: the buffer was filled by a successful PyObject_GetBuffer and is released
            // once, here.
            unsafe { ffi::PyBuffer_Release(&mut self.0) };
        }
    }
    let view = Release(view);
    let v = &view.0;
    let ndim = usize::try_from(v.ndim).unwrap_or(0);
    let list = |ptr: *mut ffi::Py_ssize_t| {
        // SAFETY: a non-NULL shape or strides array of a buffer holds `ndim` entries, valid
        // while the buffer is held.
        (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr, ndim) }.to_vec())
    };
    let format = (!v.format.is_null()).then(|| {
        // SAFETY: a non-NULL format is a NUL-terminated string, valid while the buffer is held.
        unsafe { CStr::from_ptr(v.format) }
            .to_string_lossy()
            .into_owned()
    });
    let report = PyDict::new(py);
    report.set_item("buf", v.buf as usize)?;
    report.set_item("len", v.len)?;
    report.set_item("itemsize", v.itemsize)?;
    report.set_item("readonly", v.readonly != 0)?;
    report.set_item("ndim", v.ndim)?;
    report.set_item("format", format)?;
    report.set_item("shape", list(v.shape))?;
    report.set_item("strides", list(v.strides))?;
    report.set_item("suboffsets_null", v.suboffsets.is_null())?;
    report.set_item("obj_is_object", v.obj == obj.as_ptr())?;
    // SAFETY: `v` is a filled buffer, held.
    let (c, f) = unsafe {
        (
            ffi::PyBuffer_IsContiguous(v, b'C' as _),
            ffi::PyBuffer_IsContiguous(v, b'F' as _),
        )
    };
    report.set_item("c_contiguous", c != 0)?;
    report.set_item("f_contiguous", f != 0)?;
    Ok(report)
}

/// A class of the test module's own around an [`Exporter`] (a share of a `DLPackTensor`'s),
/// with `__dlpack__`, `__dlpack_device__`, the buffer protocol and `__array__` from
/// dlpack-pyo3's generic functions.
#[pyclass(frozen)]
struct ExporterTensor {
    exporter: Exporter,
}

impl PyExporter for ExporterTensor {
    fn exporter(&self) -> &Exporter {
        &self.exporter
    }
}

#[pymethods]
impl ExporterTensor {
    /// A share of `tensor`'s exporter: both objects export the same tensor.
    #[new]
    fn new(tensor: &Bound<'_, DLPackTensor>) -> Self {
        ExporterTensor {
            exporter: tensor.get().exporter().clone(),
        }
    }

    #[classattr]
    fn __dlpack__(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        dlpack_pyo3::dlpack_method::<ExporterTensor>(py)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        self.exporter.dlpack_device()
    }

    unsafe fn __getbuffer__(
        slf: &Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        // SAFETY: CPython passes a view to fill, valid for writes.
        unsafe { dlpack_pyo3::get_buffer(slf, view, flags) }
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: CPython passes a view that `__getbuffer__` filled, and releases it once.
        unsafe { dlpack_pyo3::release_buffer(view) }
    }

    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        dlpack_pyo3::numpy_array(slf.as_any(), dtype, copy)
    }
}

/// Adds the functions and the class to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(buffer_info, m)?)?;
    m.add_class::<ExporterTensor>()?;
    Ok(())
}
