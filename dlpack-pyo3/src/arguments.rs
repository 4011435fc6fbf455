//! Tensors as `#[pyfunction]` arguments: any `__dlpack__` producer, checked against a Rust
//! element type (and a number of dimensions) when pyo3 extracts the argument.
//!
//! ```
//! use dlpack_pyo3::{PyTensor, PyTensor2};
//! use pyo3::prelude::*;
//!
//! /// `total(x)`: any float32 tensor of any shape (NumPy, JAX, PyTorch, CuPy on the host,
//! /// tvm-ffi, a bare DLPack capsule), read in place.
//! #[pyfunction]
//! fn total(x: PyTensor<f32>) -> f32 {
//!     x.view().iter().sum()
//! }
//!
//! /// `trace(m)`: a float64 matrix; anything else is a `TypeError`.
//! #[pyfunction]
//! fn trace(m: PyTensor2<f64>) -> f64 {
//!     let [rows, cols] = m.dims();
//!     let view = m.view();
//!     (0..rows.min(cols)).filter_map(|i| view.get(&[i, i])).sum()
//! }
//! # Python::attach(|py| -> PyResult<()> {
//! #     let data = dlpack_core::ManagedTensor::export(vec![1.0f32, 2.0, 3.5]).map_err(dlpack_pyo3::to_py_err)?;
//! #     let object = Bound::new(py, dlpack_pyo3::DLPackTensor::new(data))?;
//! #     assert_eq!(total(object.extract()?), 6.5);
//! #     let err = object.extract::<PyTensor2<f64>>().unwrap_err();
//! #     assert!(err.is_instance_of::<pyo3::exceptions::PyTypeError>(py));
//! #     let _ = trace;
//! #     Ok(())
//! # })?;
//! # Ok::<(), PyErr>(())
//! ```
//!
//! Extraction imports the object as [`from_dlpack`] does (read-only, zero copy) and checks it
//! once; the accessors of [`PyTensor`] then cannot fail. What a Python caller gets for an
//! argument that does not fit:
//!
//! | the argument | exception |
//! |---|---|
//! | has no `__dlpack__` and is no DLPack capsule | `TypeError` (from [`from_dlpack`]) |
//! | holds another dtype, or another number of dimensions than [`Ndim<N>`] asks | `TypeError`, naming what was expected and what was found |
//! | lives on another device than the CPU (a CUDA tensor, say) | `BufferError`, naming the device |
//! | starts at an address not aligned for the element type | `BufferError` |
//! | is read-only (JAX arrays, read-only NumPy arrays), for [`PyTensorMut`] | `BufferError` |
//! | its producer refuses to export it | the producer's exception |
//!
//! For a `#[pyfunction]` argument, pyo3 adds a note to the exception that names the argument
//! (`while processing 'x'`, shown in the traceback, on Python 3.11 and later).
//!
//! # Element types with checked values
//!
//! Python code may write the memory of an imported tensor while Rust holds it (see the crate's
//! aliasing contract, [`from_dlpack`]). For `bool`, the element type whose views check every
//! byte, such a write could turn a checked `&bool` into an invalid one, so [`PyTensor`] and
//! [`PyTensorMut`] take only element types every bit pattern of which is a valid value
//! ([`Element::ANY_BIT_PATTERN`]); `PyTensor<bool>` does not compile:
//!
//! ```compile_fail
//! use dlpack_pyo3::PyTensor;
//! use pyo3::prelude::*;
//!
//! fn count(x: &Bound<'_, PyAny>) -> PyResult<usize> {
//!     let mask: PyTensor<bool> = x.extract()?; // error: bool views check every element
//!     Ok(mask.len())
//! }
//! # Python::attach(|py| count(py.None().bind(py)).ok());
//! ```
//!
//! Read a `bool` tensor with [`Imported`] (or [`from_dlpack`]) and
//! [`CheckedTensor::to_vec`](dlpack_core::CheckedTensor::to_vec), which copies the bytes and
//! checks each in the copy, or as bytes with
//! [`CheckedTensor::view_bytes`](dlpack_core::CheckedTensor::view_bytes).
//!
//! # Threads
//!
//! The argument types own the imported tensor and hold no Python reference: they are `Send` and
//! `Sync`, so the work can run with the interpreter released (`py.detach(|| ...)`). Other Python
//! threads can then run and write the memory: the aliasing contract puts that on the Python
//! code, as it does for a view held across a call into Python.

use core::fmt;
use core::marker::PhantomData;
use core::ops::Deref;

use dlpack_core::{DeviceType, Element, ManagedTensor, TensorView, TensorViewMut};
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;

use crate::import::{ImportOptions, from_dlpack, from_dlpack_writable};
use crate::to_py_err;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::AnyNdim {}
    impl<const N: usize> Sealed for super::Ndim<N> {}
}

/// How many dimensions an argument type takes: [`AnyNdim`] or [`Ndim<N>`]. Sealed.
pub trait NdimSpec: sealed::Sealed + Send + Sync + 'static {
    /// `Some(n)` for exactly `n` dimensions, `None` for any number.
    const NDIM: Option<usize>;
}

/// Any number of dimensions: the default of [`PyTensor`] and [`PyTensorMut`].
#[derive(Debug)]
pub enum AnyNdim {}

impl NdimSpec for AnyNdim {
    const NDIM: Option<usize> = None;
}

/// Exactly `N` dimensions (`Ndim<0>` for a scalar tensor).
#[derive(Debug)]
pub enum Ndim<const N: usize> {}

impl<const N: usize> NdimSpec for Ndim<N> {
    const NDIM: Option<usize> = Some(N);
}

/// A read-only Python tensor of `T`s as a `#[pyfunction]` argument: any object with
/// `__dlpack__`, or a bare DLPack capsule, imported without a copy and checked to hold `T`s in
/// CPU memory (and, with `D =` [`Ndim<N>`], to have `N` dimensions).
///
/// ```
/// use dlpack_pyo3::PyTensor;
/// use pyo3::prelude::*;
///
/// /// `mean(x)`: the mean of any float64 tensor, computed with the interpreter released.
/// #[pyfunction]
/// fn mean(py: Python<'_>, x: PyTensor<f64>) -> f64 {
///     py.detach(|| x.view().iter().sum::<f64>() / x.len().max(1) as f64)
/// }
/// # Python::attach(|py| -> PyResult<()> {
/// #     let data = dlpack_core::ManagedTensor::export(vec![1.0f64, 2.0]).map_err(dlpack_pyo3::to_py_err)?;
/// #     let object = Bound::new(py, dlpack_pyo3::DLPackTensor::new(data))?;
/// #     assert_eq!(mean(py, object.extract()?), 1.5);
/// #     Ok(())
/// # })?;
/// # Ok::<(), PyErr>(())
/// ```
///
/// The tensor stays borrowed from its producer until the `PyTensor` is dropped: its views
/// cannot outlive it. Python code may still write the memory through the producer; the crate's
/// aliasing contract ([`from_dlpack`]) says when that is the Python code's to avoid. The module
/// docs list the exceptions a caller gets for an argument that does not fit.
pub struct PyTensor<T, D = AnyNdim> {
    tensor: ManagedTensor,
    _element: PhantomData<(T, D)>,
}

/// A [`PyTensor`] with one dimension.
pub type PyTensor1<T> = PyTensor<T, Ndim<1>>;
/// A [`PyTensor`] with two dimensions.
pub type PyTensor2<T> = PyTensor<T, Ndim<2>>;
/// A [`PyTensor`] with three dimensions.
pub type PyTensor3<T> = PyTensor<T, Ndim<3>>;

impl<T: Element, D: NdimSpec> PyTensor<T, D> {
    /// Imports `obj` read-only ([`from_dlpack`]) and checks it as the extraction does.
    ///
    /// # Errors
    ///
    /// Those the module docs list.
    pub fn from_object(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        const {
            assert!(
                T::ANY_BIT_PATTERN,
                "PyTensor takes element types every bit pattern of which is valid: read bool tensors with dlpack_pyo3::Imported and to_vec::<bool>()"
            )
        };
        let tensor = from_dlpack(obj)?;
        check_type::<T, D>(&tensor)?;
        check_cpu(&tensor)?;
        // Alignment: what `view` needs besides the dtype and host access. The tensor's
        // description does not change after the import, so `view` succeeds from now on.
        tensor.view::<T>().map_err(to_py_err)?;
        Ok(PyTensor {
            tensor,
            _element: PhantomData,
        })
    }

    /// The elements, in place: a typed, bounds-checked view that borrows this argument.
    pub fn view(&self) -> TensorView<'_, T> {
        match self.tensor.view::<T>() {
            Ok(view) => view,
            // `from_object` made this very view of this tensor, whose description (dtype,
            // device, data pointer) is fixed for its life; `T`'s values are not checked
            // (ANY_BIT_PATTERN), so the memory's contents cannot make it fail either.
            Err(err) => unreachable!("a view checked at extraction failed: {err}"),
        }
    }

    /// The elements as one slice in row-major order, if they are row-major contiguous (a
    /// transposed or sliced NumPy array is not).
    pub fn as_slice(&self) -> Option<&[T]> {
        self.view().as_slice()
    }

    /// The shape.
    pub fn shape(&self) -> &[i64] {
        self.tensor.shape()
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[i64] {
        self.tensor.strides()
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        self.tensor.ndim()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.tensor.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.tensor.is_empty()
    }

    /// The imported tensor (read-only, and marked as memory Python may write).
    pub fn tensor(&self) -> &ManagedTensor {
        &self.tensor
    }

    /// The imported tensor, to keep or to hand to an adapter (dlpack-ndarray, dlpack-nalgebra,
    /// dlpack-candle).
    pub fn into_inner(self) -> ManagedTensor {
        self.tensor
    }
}

impl<T: Element, const N: usize> PyTensor<T, Ndim<N>> {
    /// The shape as `N` sizes: `let [rows, cols] = m.dims();`. A size beyond `usize` (only
    /// possible on a 32-bit target, for a tensor with a zero-size axis) reads as `usize::MAX`.
    pub fn dims(&self) -> [usize; N] {
        dims(self.tensor.shape())
    }
}

impl<'py, T: Element, D: NdimSpec> FromPyObject<'_, 'py> for PyTensor<T, D> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        Self::from_object(&obj)
    }
}

impl<T: Element, D: NdimSpec> fmt::Debug for PyTensor<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PyTensor").field(&self.tensor).finish()
    }
}

/// A writable Python tensor of `T`s as a `#[pyfunction]` argument, for functions whose callers
/// can promise exclusive access: [`PyTensor`]'s checks, and a producer that lets its consumers
/// write (not JAX, nor a read-only NumPy array), distinct elements at distinct addresses (no
/// broadcast strides), and no element inside the tensor's own description.
///
/// Taking one is safe; writing is not, because nothing in Rust can see whether other code
/// accesses the same memory meanwhile: a caller that passes one NumPy array for two arguments,
/// Python code on another thread, an import of the same object. [`PyTensorMut::view_mut`] is
/// therefore `unsafe`, with [`from_dlpack_writable`]'s contract, and is the one way to write
/// through it.
///
/// ```
/// use dlpack_pyo3::PyTensorMut;
/// use pyo3::prelude::*;
///
/// /// `scale_in_place(x, factor)`: multiplies a float32 tensor in place. Python callers must
/// /// not pass an array that another argument or thread uses meanwhile.
/// #[pyfunction]
/// fn scale_in_place(mut x: PyTensorMut<f32>, factor: f32) {
///     // SAFETY: `x` is this function's only tensor, it calls no Python code while the view
///     // lives, and its docs ask callers not to share the array with another thread meanwhile.
///     let mut view = unsafe { x.view_mut() };
///     view.iter_mut().for_each(|v| *v *= factor);
/// }
/// # Python::attach(|py| -> PyResult<()> {
/// #     let data = dlpack_core::ManagedTensor::export(vec![1.0f32, 2.0]).map_err(dlpack_pyo3::to_py_err)?;
/// #     let object = Bound::new(py, dlpack_pyo3::DLPackTensor::new(data))?;
/// #     scale_in_place(object.extract()?, 3.0);
/// #     let back = dlpack_pyo3::from_dlpack(object.as_any())?;
/// #     assert_eq!(back.to_vec::<f32>().map_err(dlpack_pyo3::to_py_err)?, [3.0, 6.0]);
/// #     Ok(())
/// # })?;
/// # Ok::<(), PyErr>(())
/// ```
///
/// Until [`PyTensorMut::view_mut`] is called, a `PyTensorMut` lets safe code do what a
/// [`PyTensor`] does: read through [`PyTensorMut::view`], of element types every bit pattern of
/// which is valid.
pub struct PyTensorMut<T, D = AnyNdim> {
    tensor: ManagedTensor,
    _element: PhantomData<(T, D)>,
}

/// A [`PyTensorMut`] with one dimension.
pub type PyTensorMut1<T> = PyTensorMut<T, Ndim<1>>;
/// A [`PyTensorMut`] with two dimensions.
pub type PyTensorMut2<T> = PyTensorMut<T, Ndim<2>>;
/// A [`PyTensorMut`] with three dimensions.
pub type PyTensorMut3<T> = PyTensorMut<T, Ndim<3>>;

impl<T: Element, D: NdimSpec> PyTensorMut<T, D> {
    /// Imports `obj` keeping the producer's writability, and checks it as the extraction does.
    ///
    /// # Errors
    ///
    /// Those the module docs list.
    pub fn from_object(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        const {
            assert!(
                T::ANY_BIT_PATTERN,
                "PyTensorMut takes element types every bit pattern of which is valid: read bool tensors with dlpack_pyo3::Imported and to_vec::<bool>()"
            )
        };
        // SAFETY: `from_dlpack_writable`'s promise guards what its result lets safe code do
        // that a read-only import does not: write the memory (`ManagedTensor::view_mut`), view
        // `bool`s checked only once, take the memory over as owned values. A `PyTensorMut`
        // hands none of these to safe code: the tensor stays private, `view_mut` and
        // `into_inner` are `unsafe` with that promise, and the safe reads (`view`) are of
        // element types every bit pattern of which is valid (the assertion above), as the
        // views of a read-only import are. Until then the tensor is used as `from_dlpack`'s
        // results are, and Python writes meanwhile are what the crate's aliasing contract
        // covers.
        let tensor = unsafe { from_dlpack_writable(obj, &ImportOptions::default()) }?;
        check_type::<T, D>(&tensor)?;
        check_cpu(&tensor)?;
        // What `view_mut` needs: dtype and host access (checked), alignment, and a writable
        // layout. The description does not change after the import, so `view` and `view_mut`
        // succeed from now on.
        tensor.view::<T>().map_err(to_py_err)?;
        tensor.check_writable().map_err(to_py_err)?;
        Ok(PyTensorMut {
            tensor,
            _element: PhantomData,
        })
    }

    /// The elements, read-only, in place.
    pub fn view(&self) -> TensorView<'_, T> {
        match self.tensor.view::<T>() {
            Ok(view) => view,
            // As for `PyTensor::view`: checked at extraction, on a description that is fixed.
            Err(err) => unreachable!("a view checked at extraction failed: {err}"),
        }
    }

    /// The elements, writable, in place.
    ///
    /// # Safety
    ///
    /// While the view lives, nothing else reads or writes the memory: not Python code (through
    /// the producer, another of its exports or a view of it, on any thread), not another
    /// argument or import of the same object (a caller may pass one array twice), and not
    /// another thread of the extension. This is [`from_dlpack_writable`]'s contract, for the
    /// view's life.
    pub unsafe fn view_mut(&mut self) -> TensorViewMut<'_, T> {
        match self.tensor.view_mut::<T>() {
            Ok(view) => view,
            // `from_object` checked the dtype, host access, alignment and writability of this
            // description, which is fixed; `T`'s values are not checked (ANY_BIT_PATTERN).
            Err(err) => unreachable!("a writable view checked at extraction failed: {err}"),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[i64] {
        self.tensor.shape()
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[i64] {
        self.tensor.strides()
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        self.tensor.ndim()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.tensor.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.tensor.is_empty()
    }

    /// The writable imported tensor.
    ///
    /// # Safety
    ///
    /// [`from_dlpack_writable`]'s contract, for as long as the result (or a view of it) lives.
    pub unsafe fn into_inner(self) -> ManagedTensor {
        self.tensor
    }
}

impl<T: Element, const N: usize> PyTensorMut<T, Ndim<N>> {
    /// The shape as `N` sizes, as [`PyTensor::dims`].
    pub fn dims(&self) -> [usize; N] {
        dims(self.tensor.shape())
    }
}

impl<'py, T: Element, D: NdimSpec> FromPyObject<'_, 'py> for PyTensorMut<T, D> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        Self::from_object(&obj)
    }
}

impl<T: Element, D: NdimSpec> fmt::Debug for PyTensorMut<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PyTensorMut").field(&self.tensor).finish()
    }
}

/// A Python tensor of any dtype and shape as a `#[pyfunction]` argument: [`from_dlpack`]'s
/// read-only import, for functions that look at the dtype themselves.
///
/// ```
/// use dlpack_core::DataType;
/// use dlpack_pyo3::{Imported, to_py_err};
/// use pyo3::prelude::*;
///
/// /// `total(x)`: the sum of a float32 or float64 tensor, as a float64.
/// #[pyfunction]
/// fn total(x: Imported) -> PyResult<f64> {
///     match x.dtype() {
///         DataType::F32 => Ok(x.view::<f32>().map_err(to_py_err)?.iter().map(|&v| f64::from(v)).sum()),
///         DataType::F64 => Ok(x.view::<f64>().map_err(to_py_err)?.iter().sum()),
///         other => Err(pyo3::exceptions::PyTypeError::new_err(format!(
///             "expected a float32 or float64 tensor, found {other}"
///         ))),
///     }
/// }
/// # Python::attach(|py| -> PyResult<()> {
/// #     let data = dlpack_core::ManagedTensor::export(vec![1.0f32, 2.0]).map_err(to_py_err)?;
/// #     let object = Bound::new(py, dlpack_pyo3::DLPackTensor::new(data))?;
/// #     assert_eq!(total(object.extract()?)?, 3.0);
/// #     Ok(())
/// # })?;
/// # Ok::<(), PyErr>(())
/// ```
///
/// One `Imported` argument imports once, where an enum deriving `FromPyObject` over several
/// [`PyTensor`] types would import once per variant it tries.
#[derive(Debug)]
pub struct Imported(pub ManagedTensor);

impl Imported {
    /// The imported tensor.
    pub fn into_inner(self) -> ManagedTensor {
        self.0
    }
}

impl Deref for Imported {
    type Target = ManagedTensor;

    fn deref(&self) -> &ManagedTensor {
        &self.0
    }
}

impl<'py> FromPyObject<'_, 'py> for Imported {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        from_dlpack(&obj).map(Imported)
    }
}

/// The `TypeError` for a tensor of another dtype or number of dimensions than `T` and `D` ask.
fn check_type<T: Element, D: NdimSpec>(tensor: &ManagedTensor) -> PyResult<()> {
    let dtype_fits = tensor.dtype() == T::DTYPE;
    let ndim_fits = D::NDIM.is_none_or(|ndim| ndim == tensor.ndim());
    if dtype_fits && ndim_fits {
        return Ok(());
    }
    let expected = match D::NDIM {
        None => format!("a {} tensor", T::DTYPE),
        Some(1) => format!("a {} tensor with 1 dimension", T::DTYPE),
        Some(ndim) => format!("a {} tensor with {ndim} dimensions", T::DTYPE),
    };
    Err(PyTypeError::new_err(format!(
        "expected {expected}, found a {} tensor of shape {:?}",
        tensor.dtype(),
        tensor.shape()
    )))
}

/// The `BufferError` for a tensor on another device than the CPU.
///
/// Memory of another device that the host can map (CUDA pinned or managed memory) is refused
/// too: the plain import passes no `stream`, so the producer orders its pending device work
/// before the device's default stream, not before the host's reads.
/// `cuda::from_dlpack_cuda` and `oneapi::from_dlpack_oneapi` (features `cuda`, `oneapi`)
/// import device tensors with the synchronisation they need.
fn check_cpu(tensor: &ManagedTensor) -> PyResult<()> {
    let device = tensor.device();
    if device.device_type == DeviceType::CPU {
        return Ok(());
    }
    Err(PyBufferError::new_err(format!(
        "expected a tensor in CPU memory, found one on {device}; copy it to the host first (tensor.cpu() in PyTorch, jax.device_get(x) in JAX, x.get() in CuPy)"
    )))
}

/// `shape` (of length `N`, checked at extraction) as sizes.
fn dims<const N: usize>(shape: &[i64]) -> [usize; N] {
    core::array::from_fn(|axis| {
        shape
            .get(axis)
            .map_or(0, |&size| usize::try_from(size).unwrap_or(usize::MAX))
    })
}
