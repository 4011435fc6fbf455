//! `dlpack_example`: a Python extension module that takes float32 arrays from any library with
//! `__dlpack__` (NumPy, JAX, PyTorch, CuPy on the host, tvm-ffi) and returns Rust arrays that
//! any of them takes, without copying either way.
//!
//! ```python
//! import numpy as np, dlpack_example
//!
//! x = np.arange(6, dtype=np.float32).reshape(2, 3)
//! y = np.from_dlpack(dlpack_example.scale(x, 2.0))  # or jax.numpy.from_dlpack, torch.from_dlpack
//! dlpack_example.total(x)                           # 15.0
//! ```

use dlpack_pyo3::{HostArray, PyTensor, to_py_err};
use pyo3::prelude::*;

/// `scale(x, factor)`: `x * factor` for a float32 array `x` of any shape, as a new Rust array of
/// `x`'s shape (a `dlpack_pyo3.DLPackTensor`: pass it to `numpy.from_dlpack`,
/// `jax.numpy.from_dlpack` or `torch.from_dlpack`, which use its memory in place).
///
/// `x` is read in place; the work runs with the interpreter released.
#[pyfunction]
fn scale(py: Python<'_>, x: PyTensor<f32>, factor: f32) -> PyResult<HostArray<f32>> {
    py.detach(|| HostArray::map(&x.view(), |v| v * factor))
        .map_err(to_py_err)
}

/// `total(x)`: the sum of a float32 array of any shape, in float64; writes nothing.
#[pyfunction]
fn total(py: Python<'_>, x: PyTensor<f32>) -> f64 {
    py.detach(|| x.view().iter().map(|&v| f64::from(v)).sum())
}

/// `data_address(x)`: the address at which this module reads a float32 array's first element:
/// NumPy's `x.ctypes.data`, JAX's `x.unsafe_buffer_pointer()` when nothing was copied.
#[pyfunction]
fn data_address(x: PyTensor<f32>) -> usize {
    x.view().as_ptr() as usize
}

/// The module: the three functions, and `DLPackTensor` with dlpack-pyo3's exception classes.
#[pymodule]
fn dlpack_example(m: &Bound<'_, PyModule>) -> PyResult<()> {
    dlpack_pyo3::register(m)?;
    m.add_function(wrap_pyfunction!(scale, m)?)?;
    m.add_function(wrap_pyfunction!(total, m)?)?;
    m.add_function(wrap_pyfunction!(data_address, m)?)?;
    Ok(())
}
