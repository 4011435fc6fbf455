//! The candle-on-CUDA part of the test module (feature `candle-cuda`): candle CUDA tensors lent
//! to Python through dlpack-candle, and Python CUDA tensors taken into candle, reporting how.
//! Run by `dlpack-pyo3/tests/python-gpu/test_candle_cuda.py` (against PyTorch and CuPy, behind
//! `DLPACK_TEST_CUDA=1`) and timed by `bench_cuda.py`.

use std::sync::{Arc, OnceLock};

use candle_core::cuda_backend::CudaStorageSlice;
use candle_core::cuda_backend::cudarc::driver::DevicePtr;
use candle_core::{Device, Storage, Tensor};
use dlpack_core::CopyMode;
use dlpack_cuda::CudaHooks;
use dlpack_pyo3::{DLPackTensor, to_py_err};
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn candle_err(e: impl std::fmt::Display) -> PyErr {
    PyBufferError::new_err(e.to_string())
}

/// candle's CUDA device 0 (its per-thread default stream, as `Device::new_cuda` gives), and the
/// hooks on dlpack-candle's exchange stream for it; made once.
fn gpu() -> PyResult<&'static (Device, Arc<CudaHooks>)> {
    static GPU: OnceLock<Result<(Device, Arc<CudaHooks>), String>> = OnceLock::new();
    GPU.get_or_init(|| {
        let device = Device::new_cuda(0).map_err(|e| e.to_string())?;
        let hooks = dlpack_candle::cuda::hooks(&device).map_err(|e| e.to_string())?;
        Ok((device, hooks))
    })
    .as_ref()
    .map_err(|e| PyBufferError::new_err(e.clone()))
}

/// The device address of a candle CUDA float32 tensor's storage, and of its first element.
fn addresses(tensor: &Tensor) -> PyResult<(usize, usize)> {
    let (storage, layout) = tensor.storage_and_layout();
    let Storage::Cuda(cuda) = &*storage else {
        return Err(PyValueError::new_err("not a CUDA tensor"));
    };
    let CudaStorageSlice::F32(slice) = &cuda.slice else {
        return Err(PyValueError::new_err("not a float32 tensor"));
    };
    let stream = cuda.device.cuda_stream();
    let (address, _read) = slice.device_ptr(&stream);
    let address = address as usize;
    Ok((address, address + layout.start_offset() * size_of::<f32>()))
}

/// `values` on candle's CUDA device 0 as a float32 tensor of `shape`, seen through `view`
/// (`"none"`, `"t"`: the last two axes swapped, `"narrow"`: axis 0 from 1 on), lent to Python
/// by `dlpack_candle::into_dlpack`: `(tensor, device address of its first element)`.
#[pyfunction]
fn candle_cuda_f32(
    values: Vec<f32>,
    shape: Vec<usize>,
    view: &str,
) -> PyResult<(DLPackTensor, usize)> {
    let (device, hooks) = gpu()?;
    let base = Tensor::from_vec(values, shape, device).map_err(candle_err)?;
    let tensor = match view {
        "none" => base,
        "t" => base.t().map_err(candle_err)?,
        "narrow" => {
            let rows = base.dim(0).map_err(candle_err)?;
            base.narrow(0, 1, rows.saturating_sub(1))
                .map_err(candle_err)?
        }
        other => return Err(PyValueError::new_err(format!("unknown view {other:?}"))),
    };
    let (_, address) = addresses(&tensor)?;
    // SAFETY: `tensor` (a view of `base`, dropped) is the only handle on its storage.
    let dl = unsafe { dlpack_candle::into_dlpack(tensor) }.map_err(candle_err)?;
    Ok((DLPackTensor::with_hooks(dl, hooks.clone()), address))
}

/// A candle CUDA tensor of 1024 float32 zeros, made once and lent to Python anew on each call:
/// the cost of an export, for `bench_cuda.py`.
#[pyfunction]
fn candle_cuda_lend() -> PyResult<DLPackTensor> {
    static KEPT: OnceLock<Tensor> = OnceLock::new();
    let (device, hooks) = gpu()?;
    let kept = match KEPT.get() {
        Some(kept) => kept,
        None => {
            let zeros = Tensor::zeros(1024, candle_core::DType::F32, device).map_err(candle_err)?;
            KEPT.get_or_init(|| zeros)
        }
    };
    // SAFETY: nothing ever writes to the kept tensor's storage.
    let dl = unsafe { dlpack_candle::into_dlpack(kept.clone()) }.map_err(candle_err)?;
    Ok(DLPackTensor::with_hooks(dl, hooks.clone()))
}

/// Takes `obj` (a PyTorch or CuPy CUDA tensor, or a tensor from `candle_cuda_f32`) into candle's
/// CUDA device 0: `dlpack_pyo3::cuda::from_dlpack_cuda` with the exchange stream's hooks, then
/// `dlpack_candle::into_owned_on` with `mode` (`"if_needed"`, `"never"`, `"always"`). Reports
/// the transfer (`Transfer`'s Debug form), the candle tensor's shape, its storage's device
/// address and its values (float32, row-major).
#[pyfunction]
fn candle_cuda_import<'py>(obj: &Bound<'py, PyAny>, mode: &str) -> PyResult<Bound<'py, PyDict>> {
    let py = obj.py();
    let mode = match mode {
        "if_needed" => CopyMode::IfNeeded,
        "never" => CopyMode::Never,
        "always" => CopyMode::Always,
        other => return Err(PyValueError::new_err(format!("unknown mode {other:?}"))),
    };
    let (device, hooks) = gpu()?;
    let import = dlpack_pyo3::cuda::from_dlpack_cuda(obj, hooks)?;
    let (tensor, transfer) = dlpack_candle::into_owned_on(import.into_tensor(), device, mode)
        .map_err(|refused| {
            // The tensor comes back in the refusal; dropping it here deletes it.
            match refused.error {
                dlpack_candle::CandleError::DLPack(e) => to_py_err(e),
                other => candle_err(other),
            }
        })?;
    let d = PyDict::new(py);
    d.set_item("transfer", format!("{transfer:?}"))?;
    d.set_item("shape", tensor.dims().to_vec())?;
    d.set_item("address", addresses(&tensor)?.0)?;
    let values = tensor
        .flatten_all()
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(candle_err)?;
    d.set_item("values", values)?;
    Ok(d)
}

/// Adds the candle CUDA functions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(candle_cuda_f32, m)?)?;
    m.add_function(wrap_pyfunction!(candle_cuda_lend, m)?)?;
    m.add_function(wrap_pyfunction!(candle_cuda_import, m)?)?;
    Ok(())
}
