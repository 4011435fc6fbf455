//! The CUDA part of the test module (feature `cuda`): Rust CUDA tensors for Python, and the CUDA
//! importer of `dlpack_pyo3::cuda`, reporting what it received. Run by
//! `dlpack-pyo3/tests/python-gpu` (against PyTorch and CuPy, behind `DLPACK_TEST_CUDA=1`) and
//! `dlpack-pyo3/tests/python-stand-in` (through the libcuda stand-in, on any machine).

use std::sync::{Arc, OnceLock};

use dlpack_core::{DataType, ManagedTensor};
use dlpack_cuda::{CudaBuffer, CudaHooks, CudaTensor, open_device};
use dlpack_pyo3::{DLPackTensor, to_py_err};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The hooks every function here uses: the legacy default stream of each device. The driver
/// is loaded once; its absence is kept as the error message.
fn hooks() -> PyResult<Arc<CudaHooks>> {
    static HOOKS: OnceLock<Result<Arc<CudaHooks>, String>> = OnceLock::new();
    HOOKS
        .get_or_init(|| {
            CudaHooks::on_default_streams()
                .map(Arc::new)
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(PyBufferError::new_err)
}

/// `None` when the CUDA driver loads, else why not (a message starting with `CUDA driver: `).
#[pyfunction]
fn cuda_driver_error() -> Option<String> {
    dlpack_cuda::load_driver().err().map(|e| e.to_string())
}

/// `values` uploaded to device 0 as a float32 tensor of `shape` (row-major), for Python:
/// `(tensor, device address of its first element)`.
#[pyfunction]
fn cuda_f32(values: Vec<f32>, shape: Vec<usize>) -> PyResult<(DLPackTensor, usize)> {
    let hooks = hooks()?;
    let stream = open_device(0).map_err(to_py_err)?.default_stream();
    let slice = stream
        .clone_htod(&values)
        .map_err(|e| PyBufferError::new_err(format!("upload: {e:?}")))?;
    let buffer = CudaBuffer::new(slice);
    let address = buffer.device_address();
    let tensor = CudaTensor::new(buffer, &shape).map_err(to_py_err)?;
    let tensor = ManagedTensor::export(tensor).map_err(to_py_err)?;
    Ok((DLPackTensor::with_hooks(tensor, hooks), address))
}

/// Imports `obj` with `dlpack_pyo3::cuda::from_dlpack_cuda` and reports what it received:
/// device, memory kind, data pointer (of the first element), shape, strides, dtype and, for
/// float32, the values in row-major order (copied to the host).
#[pyfunction]
fn cuda_import_report<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let py = obj.py();
    let hooks = hooks()?;
    let import = dlpack_pyo3::cuda::from_dlpack_cuda(obj, &hooks)?;
    let t = import.tensor();
    let d = PyDict::new(py);
    let device = t.device();
    d.set_item("device", (device.device_type.0, device.device_id))?;
    d.set_item("kind", import.memory_kind().map(|k| format!("{k:?}")))?;
    let first = t
        .data_ptr()
        .addr()
        .wrapping_add(usize::try_from(t.byte_offset()).unwrap_or(usize::MAX));
    d.set_item("data_ptr", first)?;
    d.set_item("shape", t.shape().to_vec())?;
    d.set_item("strides", t.strides().to_vec())?;
    d.set_item("dtype", t.dtype().to_string())?;
    if t.dtype() == DataType::F32 {
        d.set_item(
            "values",
            import.to_host_vec::<f32>(&*hooks).map_err(to_py_err)?,
        )?;
    }
    Ok(d)
}

/// Imports `obj` as [`cuda_import_report`] does and returns only the address of its first
/// element: the import's own cost, for `bench_cuda.py`.
#[pyfunction]
fn cuda_import_address(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    let hooks = hooks()?;
    let import = dlpack_pyo3::cuda::from_dlpack_cuda(obj, &hooks)?;
    let t = import.tensor();
    Ok(t.data_ptr()
        .addr()
        .wrapping_add(usize::try_from(t.byte_offset()).unwrap_or(usize::MAX)))
}

/// Adds the CUDA functions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cuda_driver_error, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_f32, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_import_report, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_import_address, m)?)?;
    Ok(())
}
