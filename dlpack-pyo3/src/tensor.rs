//! [`DLPackTensor`], the ready-made `#[pyclass]` around an [`Exporter`].

use std::sync::Arc;

use dlpack_core::{DeviceHooks, ManagedTensor};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::export::{Exporter, PyExporter, dlpack_method};

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
            exporter: Exporter::shared(tensor),
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

    /// `__array__(dtype=None, copy=None)`: a NumPy array of the tensor, with NumPy 2's meaning
    /// of `copy` ([`numpy_array`](crate::numpy_array)).
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::numpy_array(slf.as_any(), dtype, copy)
    }

    /// The buffer protocol for host tensors ([`get_buffer`](crate::get_buffer)).
    #[cfg(any(not(Py_LIMITED_API), Py_3_11))]
    unsafe fn __getbuffer__(
        slf: &Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: core::ffi::c_int,
    ) -> PyResult<()> {
        // SAFETY: CPython passes a view to fill, valid for writes.
        unsafe { crate::get_buffer(slf, view, flags) }
    }

    /// Frees what [`get_buffer`](crate::get_buffer) allocated for `view`.
    #[cfg(any(not(Py_LIMITED_API), Py_3_11))]
    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        // SAFETY: CPython passes a view that `__getbuffer__` filled, and releases it once.
        unsafe { crate::release_buffer(view) }
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
