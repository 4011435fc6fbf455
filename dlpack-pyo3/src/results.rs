//! Rust tensors as `#[pyfunction]` results: Python gets a [`DLPackTensor`] over the Rust memory,
//! which `numpy.from_dlpack`, `torch.from_dlpack`, `jax.numpy.from_dlpack` and
//! `tvm_ffi.from_dlpack` take without a copy.
//!
//! ```
//! use dlpack_pyo3::{Exported, HostArray, PyTensor, to_py_err};
//! use pyo3::prelude::*;
//!
//! /// `arange(n)`: a Rust `Vec`, handed over as it is (one dimension).
//! #[pyfunction]
//! fn arange(n: u32) -> Exported<Vec<f32>> {
//!     Exported((0..n).map(|i| i as f32).collect())
//! }
//!
//! /// `scale(x, factor)`: a new tensor of `x`'s shape, 64-byte aligned so that JAX too takes
//! /// it in place.
//! #[pyfunction]
//! fn scale(x: PyTensor<f32>, factor: f32) -> PyResult<HostArray<f32>> {
//!     HostArray::map(&x.view(), |v| v * factor).map_err(to_py_err)
//! }
//! # Python::attach(|py| -> PyResult<()> {
//! #     let object = arange(4).into_pyobject(py)?;
//! #     let doubled = scale(object.extract()?, 2.0)?.into_pyobject(py)?;
//! #     let back = dlpack_pyo3::from_dlpack(doubled.as_any())?;
//! #     assert_eq!(back.to_vec::<f32>().map_err(to_py_err)?, [0.0, 2.0, 4.0, 6.0]);
//! #     Ok(())
//! # })?;
//! # Ok::<(), PyErr>(())
//! ```
//!
//! - [`Exported`] wraps any [`Export`] producer: `Vec<T>` and `Box<[T]>` (one dimension), a
//!   [`ShapedBuffer`](dlpack_core::ShapedBuffer) or `#[derive(DLPack)]` struct (any shape), a [`ManagedTensor`] (what the adapters of the
//!   workspace make of ndarray arrays, nalgebra matrices and candle tensors). The orphan rule
//!   keeps this crate from giving those types pyo3's `IntoPyObject` themselves; the newtype
//!   does it.
//! - [`HostArray`] is a row-major host array of any shape whose first element is 64-byte
//!   aligned: JAX's CPU backend takes only such data without a copy (it copies a `Vec`, whose
//!   allocator aligns less).
//! - [`DLPackTensor`] itself is a `#[pyclass]`: return `DLPackTensor::new(tensor)` for a
//!   [`ManagedTensor`] (one allocation fewer than `Exported(tensor)`), or
//!   [`DLPackTensor::with_hooks`] for device memory.
//!
//! An export that fails (a description dlpack-core refuses) raises the exception
//! [`to_py_err`] gives, `BufferError` for most.

use core::mem::size_of;

use dlpack_core::__private::{describe_buffer, try_vec_with_capacity};
use dlpack_core::{Dims, Element, Error, Export, ExportDesc, ManagedTensor, TensorView};
use pyo3::prelude::*;

use crate::{DLPackTensor, to_py_err};

/// Any [`Export`] producer as a `#[pyfunction]` result: Python gets a [`DLPackTensor`] over
/// its memory, exported when pyo3 converts the result.
///
/// ```
/// use dlpack_core::{ManagedTensor, ShapedBuffer};
/// use dlpack_pyo3::{Exported, to_py_err};
/// use pyo3::prelude::*;
///
/// /// A row-major square matrix: a buffer and a layout over it (`ShapedBuffer`, a safe trait,
/// /// or `#[derive(DLPack)]`) make an `Export` producer.
/// struct Square {
///     data: Vec<f64>,
///     n: usize,
/// }
///
/// impl ShapedBuffer for Square {
///     type Buffer = Vec<f64>;
///     fn buffer(&mut self) -> &mut Vec<f64> {
///         &mut self.data
///     }
///     fn ndim(&self) -> usize {
///         2
///     }
///     fn shape(&self, shape: &mut [i64]) {
///         shape.fill(self.n as i64);
///     }
/// }
///
/// /// `eye(n)`: the identity matrix.
/// #[pyfunction]
/// fn eye(n: usize) -> Exported<Square> {
///     let data = (0..n * n).map(|i| if i % (n + 1) == 0 { 1.0 } else { 0.0 }).collect();
///     Exported(Square { data, n })
/// }
///
/// /// An adapter's tensor: `dlpack_ndarray::into_dlpack(array)` gives a `ManagedTensor`
/// /// the same way.
/// #[pyfunction]
/// fn boxed(n: u8) -> PyResult<Exported<ManagedTensor>> {
///     let values: Box<[u8]> = (0..n).collect();
///     Ok(Exported(ManagedTensor::export(values).map_err(to_py_err)?))
/// }
/// # Python::attach(|py| -> PyResult<()> {
/// #     let m = eye(3).into_pyobject(py)?;
/// #     assert_eq!(m.getattr("shape")?.extract::<Vec<i64>>()?, [3, 3]);
/// #     let b = boxed(4)?.into_pyobject(py)?;
/// #     assert_eq!(b.getattr("shape")?.extract::<Vec<i64>>()?, [4]);
/// #     Ok(())
/// # })?;
/// # Ok::<(), PyErr>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Exported<P>(pub P);

impl<P> From<P> for Exported<P> {
    fn from(producer: P) -> Self {
        Exported(producer)
    }
}

impl<'py, P: Export> IntoPyObject<'py> for Exported<P> {
    type Target = DLPackTensor;
    type Output = Bound<'py, DLPackTensor>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, DLPackTensor>> {
        let tensor = ManagedTensor::export(self.0).map_err(to_py_err)?;
        Bound::new(py, DLPackTensor::new(tensor))
    }
}

/// The alignment of a [`HostArray`]'s first element, in bytes: JAX's CPU backend's minimum for
/// taking host memory without a copy, and a cache line.
const ALIGN: usize = 64;

/// A row-major host array of `T`s of any shape whose first element is 64-byte aligned (for an
/// element type whose size divides 64, as every built-in one's does), as a `#[pyfunction]`
/// result or an [`Export`] producer.
///
/// JAX's CPU backend takes host memory in place only at that alignment and copies anything
/// else (a `Vec<f32>` from the global allocator, say); NumPy, PyTorch and tvm-ffi take any
/// aligned-for-the-element memory. The elements live in a `Vec` with up to 63 bytes of room in
/// front.
///
/// ```
/// use dlpack_pyo3::HostArray;
///
/// let a = HostArray::from_fn([2usize, 3], |i| i as f32)?;
/// assert_eq!(a.shape(), &[2, 3]);
/// assert_eq!(a.as_slice(), &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
/// assert_eq!(a.as_slice().as_ptr() as usize % 64, 0);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct HostArray<T> {
    /// `start` elements of room, then the array's elements, row-major.
    data: Vec<T>,
    /// The index in `data` of the first element.
    start: usize,
    /// The sizes, each at least 0, whose product is the number of elements.
    shape: Vec<i64>,
}

impl<T: Element> HostArray<T> {
    /// An array of the given shape whose element at row-major position `i` is `f(i)`; `f` is
    /// called for `0, 1, 2, ...` in order.
    ///
    /// # Errors
    ///
    /// [`Error::NegativeDim`] for a negative size, [`Error::Overflow`] when the number of
    /// elements overflows `usize`, [`Error::OutOfMemory`] when they do not fit in memory.
    pub fn from_fn<S: Dims>(shape: S, f: impl FnMut(usize) -> T) -> Result<Self, Error> {
        let mut sizes = vec![0; shape.ndim()];
        shape.write_dims(&mut sizes);
        let len = element_count(&sizes)?;
        Self::build(sizes, len, (0..len).map(f))
    }

    /// An array of `view`'s shape whose elements are `f` of `view`'s, in row-major order (the
    /// strides of `view` are not kept).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] when the elements do not fit in memory (a broadcast view can
    /// describe far more elements than its memory holds).
    pub fn map<U: Element>(
        view: &TensorView<'_, U>,
        mut f: impl FnMut(U) -> T,
    ) -> Result<Self, Error> {
        Self::build(
            view.shape().to_vec(),
            view.len(),
            view.iter().map(|&v| f(v)),
        )
    }

    /// Fills a new array from `values`, which yields `len` elements (the product of `shape`);
    /// an iterator that yields another number is an [`Error::ShapeMismatch`] (which says how
    /// many elements it gave, counting up to `len + 1`), never an array of another size than
    /// its shape.
    fn build(
        shape: Vec<i64>,
        len: usize,
        mut values: impl Iterator<Item = T>,
    ) -> Result<Self, Error> {
        let mismatch = |found: usize, shape: Vec<i64>| Error::ShapeMismatch {
            found: vec![i64::try_from(found).unwrap_or(i64::MAX)],
            expected: shape,
        };
        let Some(first) = values.next() else {
            if len != 0 {
                return Err(mismatch(0, shape));
            }
            return Ok(HostArray {
                data: Vec::new(),
                start: 0,
                shape,
            });
        };
        // Room for the first element to reach a 64-byte boundary: fewer than 64 / size
        // elements when the element size is a power of two.
        let room = (ALIGN / size_of::<T>().max(1)).saturating_sub(1);
        let capacity = len.checked_add(room).ok_or_else(|| Error::Overflow {
            what: format!("{len} elements and {room} of alignment room"),
        })?;
        let mut data = try_vec_with_capacity::<T>(capacity)?;
        let start = match data.as_ptr().align_offset(ALIGN) {
            // The capacity is allocated (it holds at least `first`), so its address is real.
            offset if offset <= room => offset,
            // An element size that does not divide 64: left where the allocator put it.
            _ => 0,
        };
        // The room holds copies of the first element: a `Buffer`'s elements are all
        // initialised. `data` never grows past its capacity, so it never moves.
        data.extend(core::iter::repeat_n(first, start + 1));
        data.extend(values.by_ref().take(len.saturating_sub(1)));
        if data.len() != start + len {
            return Err(mismatch(data.len() - start, shape));
        }
        if values.next().is_some() {
            return Err(mismatch(len.saturating_add(1), shape));
        }
        Ok(HostArray { data, start, shape })
    }

    /// The shape.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len() - self.start
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements in row-major order.
    pub fn as_slice(&self) -> &[T] {
        &self.data[self.start..]
    }

    /// The elements in row-major order, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.data[self.start..]
    }
}

/// The product of `sizes`, each of which must be at least 0.
fn element_count(sizes: &[i64]) -> Result<usize, Error> {
    sizes
        .iter()
        .enumerate()
        .try_fold(1usize, |count, (axis, &size)| {
            let size =
                usize::try_from(size).map_err(|_| Error::NegativeDim { axis, value: size })?;
            count.checked_mul(size).ok_or_else(|| Error::Overflow {
                what: format!("the number of elements of shape {sizes:?}"),
            })
        })
}

// SAFETY: the description is `describe_buffer`'s over the `Vec` `data`: it names the Vec's
// elements as the allocation, and the export refuses a layout that reaches outside it. The
// layout is `shape` (row-major) from the element at `start`, which `build` made the first of
// exactly `product(shape)` elements at the end of `data`. `ndim` is `shape.len()`, which
// nothing changes once the array is made.
unsafe impl<T: Element> Export for HostArray<T> {
    fn ndim(&self) -> usize {
        self.shape.len()
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        // `start * size_of::<T>()` is within the allocation, so it fits `usize` and `u64`.
        let byte_offset = (self.start * size_of::<T>()) as u64;
        describe_buffer(
            &mut self.data,
            &self.shape,
            None::<&Vec<i64>>,
            byte_offset,
            shape,
            strides,
        )
    }
}

impl<'py, T: Element> IntoPyObject<'py> for HostArray<T> {
    type Target = DLPackTensor;
    type Output = Bound<'py, DLPackTensor>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, DLPackTensor>> {
        Exported(self).into_pyobject(py)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlpack_core::DataType;

    fn is_aligned<T>(slice: &[T]) -> bool {
        (slice.as_ptr() as usize).is_multiple_of(ALIGN)
    }

    #[test]
    fn every_element_size_starts_on_a_64_byte_boundary() {
        let bytes = HostArray::from_fn([3usize, 5], |i| i as u8).unwrap();
        let halves = HostArray::from_fn([7usize], |i| i as i16).unwrap();
        let floats = HostArray::from_fn(vec![2i64, 2, 2], |i| i as f32).unwrap();
        let doubles = HostArray::from_fn([9u32], |i| i as f64).unwrap();
        assert!(is_aligned(bytes.as_slice()) && is_aligned(halves.as_slice()));
        assert!(is_aligned(floats.as_slice()) && is_aligned(doubles.as_slice()));
        assert_eq!(bytes.as_slice(), (0..15).collect::<Vec<u8>>());
        assert_eq!(floats.shape(), &[2, 2, 2]);
        assert_eq!(doubles.len(), 9);
    }

    #[test]
    fn from_fn_calls_in_row_major_order_once_each() {
        let mut calls = Vec::new();
        let a = HostArray::from_fn([2usize, 3], |i| {
            calls.push(i);
            i as i32 * 10
        })
        .unwrap();
        assert_eq!(calls, [0, 1, 2, 3, 4, 5]);
        assert_eq!(a.as_slice(), [0, 10, 20, 30, 40, 50]);
    }

    #[test]
    fn map_keeps_the_shape_and_drops_the_strides() {
        let t =
            ManagedTensor::export(HostArray::from_fn([2usize, 3], |i| i as f32).unwrap()).unwrap();
        let doubled = HostArray::map(&t.view::<f32>().unwrap(), |v| f64::from(v) * 2.0).unwrap();
        assert_eq!(doubled.shape(), &[2, 3]);
        assert_eq!(doubled.as_slice(), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    }

    #[test]
    fn export_describes_the_aligned_elements_in_place() {
        let mut a = HostArray::from_fn([4usize, 2], |i| i as u16).unwrap();
        a.as_mut_slice()[7] = 70;
        let first = a.as_slice().as_ptr();
        let t = ManagedTensor::export(a).unwrap();
        assert_eq!((t.shape(), t.strides()), (&[4, 2][..], &[2, 1][..]));
        assert_eq!(t.dtype(), DataType::U16);
        let view = t.view::<u16>().unwrap();
        assert_eq!(view.as_ptr(), first);
        assert_eq!(view.get(&[3, 1]), Some(&70));
        assert!(!t.is_read_only());
    }

    #[test]
    fn empty_and_scalar_arrays() {
        let empty = HostArray::<f32>::from_fn([0usize, 5], |_| 1.0).unwrap();
        assert!(empty.is_empty() && empty.as_slice().is_empty());
        let t = ManagedTensor::export(empty).unwrap();
        assert_eq!((t.shape(), t.len()), (&[0, 5][..], 0));
        let scalar = HostArray::from_fn([0usize; 0], |_| 7i64).unwrap();
        assert_eq!((scalar.shape(), scalar.as_slice()), (&[][..], &[7][..]));
        assert_eq!(
            ManagedTensor::export(scalar)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            [7]
        );
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert_eq!(
            HostArray::from_fn(vec![2i64, -1], |_| 0u8).unwrap_err(),
            Error::NegativeDim { axis: 1, value: -1 }
        );
        assert!(matches!(
            HostArray::from_fn([usize::MAX, 2], |_| 0u8),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            HostArray::from_fn([usize::MAX / 2], |_| 0u64),
            Err(Error::OutOfMemory { .. })
        ));
    }
}
