//! dlpack-pyo3's argument and result types (`PyTensor`, `PyTensorMut`, `Imported`, `Exported`,
//! `HostArray`) in `#[pyfunction]`s, as an extension's author writes them, for
//! `dlpack-pyo3/tests/python/test_args_results.py`.

use dlpack_core::ManagedTensor;
use dlpack_pyo3::{
    Exported, HostArray, Imported, PyTensor, PyTensor1, PyTensor2, PyTensorMut, PyTensorMut2,
    to_py_err,
};
use pyo3::prelude::*;

/// The sum of any float32 tensor, read in place.
#[pyfunction]
fn sum_f32(x: PyTensor<f32>) -> f64 {
    x.view().iter().map(|&v| f64::from(v)).sum()
}

/// The address of the first element of a float32 tensor as Rust sees it.
#[pyfunction]
fn address_f32(x: PyTensor<f32>) -> usize {
    x.view().as_ptr() as usize
}

/// The shape of a float64 matrix, from `dims`.
#[pyfunction]
fn matrix_dims(m: PyTensor2<f64>) -> (usize, usize) {
    let [rows, cols] = m.dims();
    (rows, cols)
}

/// Two arguments of different types, so that a refusal names the one that did not fit.
#[pyfunction]
fn pair(a: PyTensor1<f32>, b: PyTensor1<i64>) -> (usize, usize) {
    (a.len(), b.len())
}

/// The sum of a float64 tensor, computed with the interpreter released.
#[pyfunction]
fn sum_detached(py: Python<'_>, x: PyTensor<f64>) -> f64 {
    py.detach(|| x.view().iter().sum())
}

/// Multiplies a float32 tensor in place.
#[pyfunction]
fn scale_in_place(mut x: PyTensorMut<f32>, factor: f32) {
    // SAFETY: the tests pass arrays no other argument, import or thread uses during the call,
    // and this function calls no Python code while the view lives.
    let mut view = unsafe { x.view_mut() };
    view.iter_mut().for_each(|v| *v *= factor);
}

/// Writes `10 * i + j` at `[i, j]` of an int32 matrix, whatever its strides.
#[pyfunction]
fn fill_matrix(mut m: PyTensorMut2<i32>) -> PyResult<()> {
    let [rows, cols] = m.dims();
    // SAFETY: as for `scale_in_place`.
    let mut view = unsafe { m.view_mut() };
    for i in 0..rows {
        for j in 0..cols {
            let value = i32::try_from(10 * i + j).map_err(|_| {
                pyo3::exceptions::PyValueError::new_err("the matrix is too large for int32")
            })?;
            if let Some(slot) = view.get_mut(&[i, j]) {
                *slot = value;
            }
        }
    }
    Ok(())
}

/// The dtype of any tensor, by name.
#[pyfunction]
fn dtype_name(x: Imported) -> String {
    x.dtype().to_string()
}

/// The number of `True`s of a bool tensor, from a checked copy (the one way to read `bool`s of
/// memory Python may write).
#[pyfunction]
fn count_true(x: Imported) -> PyResult<usize> {
    let values = x.to_vec::<bool>().map_err(to_py_err)?;
    Ok(values.into_iter().filter(|&b| b).count())
}

/// `[0, 1, ..., n - 1]` as a Rust `Vec`, and the address of its first element.
#[pyfunction]
fn vec_result(n: u16) -> (Exported<Vec<f32>>, usize) {
    let data: Vec<f32> = (0..n).map(f32::from).collect();
    let address = data.as_ptr() as usize;
    (Exported(data), address)
}

/// `[0, 1, ..., n - 1]` as a Rust `Box<[i32]>`, and the address of its first element.
#[pyfunction]
fn boxed_result(n: u16) -> (Exported<Box<[i32]>>, usize) {
    let data: Box<[i32]> = (0..n).map(i32::from).collect();
    let address = data.as_ptr() as usize;
    (Exported(data), address)
}

/// Any tensor handed back to Python as a Rust `ManagedTensor` (the import itself).
#[pyfunction]
fn managed_result(x: Imported) -> Exported<ManagedTensor> {
    Exported(x.into_inner())
}

/// A `rows x cols` float32 array holding `0, 1, 2, ...`, and the address of its first element.
#[pyfunction]
fn host_array(rows: usize, cols: usize) -> PyResult<(HostArray<f32>, usize)> {
    let array = HostArray::from_fn([rows, cols], |i| i as f32).map_err(to_py_err)?;
    let address = array.as_slice().as_ptr() as usize;
    Ok((array, address))
}

/// `x * factor`, a new array of `x`'s shape, and the address of its first element.
#[pyfunction]
fn scaled(x: PyTensor<f32>, factor: f32) -> PyResult<(HostArray<f32>, usize)> {
    let array = HostArray::map(&x.view(), |v| v * factor).map_err(to_py_err)?;
    let address = array.as_slice().as_ptr() as usize;
    Ok((array, address))
}

/// Adds the functions to the test module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sum_f32, m)?)?;
    m.add_function(wrap_pyfunction!(address_f32, m)?)?;
    m.add_function(wrap_pyfunction!(matrix_dims, m)?)?;
    m.add_function(wrap_pyfunction!(pair, m)?)?;
    m.add_function(wrap_pyfunction!(sum_detached, m)?)?;
    m.add_function(wrap_pyfunction!(scale_in_place, m)?)?;
    m.add_function(wrap_pyfunction!(fill_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_name, m)?)?;
    m.add_function(wrap_pyfunction!(count_true, m)?)?;
    m.add_function(wrap_pyfunction!(vec_result, m)?)?;
    m.add_function(wrap_pyfunction!(boxed_result, m)?)?;
    m.add_function(wrap_pyfunction!(managed_result, m)?)?;
    m.add_function(wrap_pyfunction!(host_array, m)?)?;
    m.add_function(wrap_pyfunction!(scaled, m)?)?;
    Ok(())
}
