//! Owned matrices both ways: the types [`into_dlpack`](crate::into_dlpack) moves out and
//! [`into_owned`] takes back ([`OwnedMatrix`]), and the copies of [`to_owned`].

use dlpack_core::{
    CheckedTensor, CopyMode, CopyReason, Element, Error, Export, ManagedTensor, Refused, Transfer,
};
use nalgebra::{Const, Dim, Matrix, RawStorageMut, SMatrix, Scalar, VecStorage};

use crate::export::{MatrixProducer, SMatrixProducer, ndim_of};
use crate::import::{COLUMN_MAJOR, Layout};

/// An owned nalgebra matrix type: what [`into_dlpack`](crate::into_dlpack) moves into a tensor
/// without a copy, and what [`into_owned`] and [`to_owned`] make of a tensor.
///
/// Implemented for every matrix with a `VecStorage` (`DMatrix`, `DVector`, `RowDVector`,
/// `Matrix3xX`, `OMatrix<T, Dyn, U3>`, ..., through [`MatrixProducer`]) and for `SMatrix` (and
/// so `SVector`, `Matrix2x3`, ..., through [`SMatrixProducer`]), of every dlpack-core
/// [`Element`]. Sealed: this crate implements it for nalgebra's types and nobody else does.
///
/// How a type meets a tensor:
///
/// - a column vector type (one column at the type level: `DVector`, `SVector`) is a 1-d tensor
///   of shape `[rows]`; it imports from 1-d tensors only;
/// - every other type is a 2-d tensor `[rows, cols]`, even with one row or column; it imports
///   from 2-d tensors and from 1-d ones, which are columns (`n x 1`);
/// - rows or columns that the type fixes (`Const<N>`) must match the tensor's, or the import is
///   [`Error::ShapeMismatch`].
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_nalgebra::OwnedMatrix;
/// use nalgebra::Matrix2;
///
/// // The producer type, for ManagedTensor::export_legacy, which old consumers need.
/// let m = Matrix2::new(1.0f32, 2.0, 3.0, 4.0);
/// let tensor = ManagedTensor::export_legacy(m.into_producer())?;
/// assert!(tensor.is_legacy());
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub trait OwnedMatrix: crate::sealed::OwnedMatrix {
    /// The producer the matrix moves into; [`ManagedTensor::reclaim`] with this type gives the
    /// matrix back.
    type Producer: Export;

    /// Wraps the matrix in its producer.
    fn into_producer(self) -> Self::Producer;

    /// The matrix inside a producer.
    fn from_producer(producer: Self::Producer) -> Self;
}

impl<T, R, C> crate::sealed::OwnedMatrix for Matrix<T, R, C, VecStorage<T, R, C>>
where
    T: Element + Scalar,
    R: Dim,
    C: Dim,
    VecStorage<T, R, C>: RawStorageMut<T, R, C> + Default,
{
    type Elem = T;
    const TAKES_VEC: bool = true;

    fn is_vector() -> bool {
        ndim_of::<C>() == 1
    }

    fn fixed_shape() -> (Option<usize>, Option<usize>) {
        (R::try_to_usize(), C::try_to_usize())
    }

    #[inline]
    fn fits_dlpack(&self) -> Result<(), Error> {
        crate::export::fits_dlpack(self.shape(), self.strides())
    }

    fn from_column_major(nrows: usize, ncols: usize, data: Vec<T>) -> Self {
        Matrix::from_data(VecStorage::new(
            R::from_usize(nrows),
            C::from_usize(ncols),
            data,
        ))
    }
}

impl<T, R, C> OwnedMatrix for Matrix<T, R, C, VecStorage<T, R, C>>
where
    T: Element + Scalar,
    R: Dim,
    C: Dim,
    VecStorage<T, R, C>: RawStorageMut<T, R, C> + Default,
{
    type Producer = MatrixProducer<T, R, C>;

    fn into_producer(self) -> Self::Producer {
        MatrixProducer::new(self)
    }

    fn from_producer(producer: Self::Producer) -> Self {
        producer.into_inner()
    }
}

impl<T: Element + Scalar, const R: usize, const C: usize> crate::sealed::OwnedMatrix
    for SMatrix<T, R, C>
{
    type Elem = T;
    // An inline array, never a Vec.
    const TAKES_VEC: bool = false;

    fn is_vector() -> bool {
        ndim_of::<Const<C>>() == 1
    }

    fn fixed_shape() -> (Option<usize>, Option<usize>) {
        (Some(R), Some(C))
    }

    #[inline]
    fn fits_dlpack(&self) -> Result<(), Error> {
        // `SMatrix<T, 0, C>` is an empty array for any `C`, `usize::MAX` included.
        crate::export::fits_dlpack(self.shape(), self.strides())
    }

    fn from_column_major(_: usize, _: usize, data: Vec<T>) -> Self {
        SMatrix::from_column_slice(&data)
    }
}

impl<T: Element + Scalar, const R: usize, const C: usize> OwnedMatrix for SMatrix<T, R, C> {
    type Producer = SMatrixProducer<T, R, C>;

    fn into_producer(self) -> Self::Producer {
        SMatrixProducer::new(self)
    }

    fn from_producer(producer: Self::Producer) -> Self {
        producer.into_inner()
    }
}

/// The layout of `tensor` as an `M`: its dtype, number of dimensions and shape checked, in that
/// order (see [`OwnedMatrix`]), and empty tensors bounded ([`Layout::new`]).
fn layout_as<M: OwnedMatrix>(tensor: &CheckedTensor) -> Result<Layout, Error> {
    let expected = <M::Elem as Element>::DTYPE;
    if tensor.dtype() != expected {
        return Err(Error::DataTypeMismatch {
            found: tensor.dtype(),
            expected,
        });
    }
    let layout = if M::is_vector() {
        Layout::vector(tensor.shape(), tensor.strides())?
    } else {
        Layout::matrix(tensor.shape(), tensor.strides())?
    };
    let (rows, cols) = M::fixed_shape();
    if rows.is_some_and(|r| r != layout.nrows) || cols.is_some_and(|c| c != layout.ncols) {
        let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let rows = as_i64(rows.unwrap_or(layout.nrows));
        let expected = if M::is_vector() {
            vec![rows]
        } else {
            vec![rows, as_i64(cols.unwrap_or(layout.ncols))]
        };
        return Err(Error::ShapeMismatch {
            found: tensor.shape().to_vec(),
            expected,
        });
    }
    Ok(layout)
}

/// The elements of a tensor of `layout` in column-major order, in a new `Vec`, whatever the
/// strides (negative, zero and row-major ones included).
fn column_major_copy<T: Element>(tensor: &CheckedTensor, layout: &Layout) -> Result<Vec<T>, Error> {
    let view = tensor.view::<T>()?;
    if layout.is_vector_like() {
        // At most one row or column: row-major order (core's gather) is column-major order.
        return view.to_vec();
    }
    // A 2-d tensor from here on. The Vec is allocated first, so that a tensor too large for
    // memory (a broadcast one describes far more elements than its memory holds) is an error.
    let (nrows, ncols) = (layout.nrows, layout.ncols);
    let mut data = dlpack_core::__private::try_vec_with_capacity::<T>(view.len())?;
    if layout.compact(COLUMN_MAJOR).is_ok() {
        // SAFETY: a compact column-major layout's elements are the `view.len()` consecutive,
        // initialised, aligned `T`s from `as_ptr()` (non-empty here: not vector-like), inside one
        // allocation, which nobody writes while `view` lives (see SOUNDNESS in `import`).
        data.extend_from_slice(unsafe { core::slice::from_raw_parts(view.as_ptr(), view.len()) });
    } else if let Some(rows) = view.as_slice() {
        // Compact row-major: element [i, j] is `rows[i * ncols + j]`.
        for j in 0..ncols {
            data.extend((0..nrows).map(|i| rows[i * ncols + j]));
        }
    } else {
        // Anything else (steps, negative or zero strides): one element at a time, through core's
        // checked indexing, in column-major order (every index here is in bounds).
        for j in 0..ncols {
            data.extend((0..nrows).filter_map(|i| view.get(&[i, j]).copied()));
        }
    }
    Ok(data)
}

/// Copies a 1-d or 2-d tensor of any layout (negative, zero and row-major strides included) into
/// a new matrix of type `M`, leaving the tensor as it is: the way to own the elements of a
/// tensor one only borrows ([`BorrowedTensor`](dlpack_core::BorrowedTensor)) or keeps.
///
/// ```
/// use nalgebra::{DMatrix, DVector, Matrix3x1};
///
/// let tensor = dlpack_core::ManagedTensor::export(vec![1u16, 2, 3])?;
/// let m = dlpack_nalgebra::to_owned::<DMatrix<u16>>(&tensor)?;
/// assert_eq!(m.shape(), (3, 1)); // a 1-d tensor is a column
/// let v = dlpack_nalgebra::to_owned::<DVector<u16>>(&tensor)?;
/// let s = dlpack_nalgebra::to_owned::<Matrix3x1<u16>>(&tensor)?;
/// assert_eq!((v.as_slice(), s.as_slice()), (&[1, 2, 3][..], &[1, 2, 3][..]));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::DataTypeMismatch`] for another element type, [`Error::NdimMismatch`] for a tensor
/// that is neither 1-d nor 2-d (not 1-d, for a column vector type), [`Error::ShapeMismatch`] when
/// `M` fixes rows or columns the tensor does not have, [`Error::DimOutOfRange`] for an empty
/// tensor with more than 2^24 rows or columns (see the [`import`](crate::import) module docs),
/// those of [`CheckedTensor::view`] (device, alignment), and [`Error::OutOfMemory`] when the copy
/// does not fit in memory (a broadcast tensor can describe far more elements than its memory
/// holds).
pub fn to_owned<M: OwnedMatrix>(tensor: &CheckedTensor) -> Result<M, Error> {
    let layout = layout_as::<M>(tensor)?;
    let data = column_major_copy(tensor, &layout)?;
    Ok(M::from_column_major(layout.nrows, layout.ncols, data))
}

/// Takes a tensor over as an owned matrix of type `M` (`DMatrix<T>`, `DVector<T>`,
/// `SMatrix<T, R, C>`, ...: see [`OwnedMatrix`] for the shapes each takes), without a copy when
/// it can, and says how ([`Transfer`]):
///
/// 1. [`Transfer::Reclaimed`]: the tensor was exported from an `M` ([`into_dlpack`](crate::into_dlpack)),
///    which comes back as it was;
/// 2. [`Transfer::Moved`]: the tensor has at most one row or column (where column-major order is
///    row-major order) and its producer hands its `Vec` over ([`ManagedTensor::into_vec`]: a
///    `Vec`, a `Box<[T]>`, an exported `DVector`, an owned standard-layout ndarray `Array`, ...),
///    which becomes the matrix's storage (not for an `SMatrix`, whose elements are inline);
/// 3. [`Transfer::Copied`] otherwise, as `mode` allows, for the reason
///    [`CopyReason::Layout`] when the tensor is not compact column-major (C order, steps,
///    broadcasting, negative strides), [`CopyReason::NotOwned`] when it is but its memory cannot be
///    handed over (a foreign or borrowed tensor, an `SMatrix` export taken as a `DMatrix`, ...).
///
/// [`CopyMode::Never`] allows no copy, [`CopyMode::IfNeeded`] (the default) copies when it must,
/// and [`CopyMode::Always`] copies even a tensor that could be reclaimed
/// ([`CopyReason::Requested`]).
///
/// ```
/// use dlpack_core::{CopyMode, CopyReason, Error, ManagedTensor, Transfer};
/// use nalgebra::{DMatrix, DVector, Matrix2x3};
///
/// let m = DMatrix::from_fn(2, 3, |i, j| (i * j) as f32);
/// let data = m.as_ptr();
/// let raw = dlpack_nalgebra::into_dlpack(m)?.into_raw()?;
/// // ... a consumer hands the tensor back ...
/// // SAFETY: `raw` is a live tensor that we own.
/// let tensor = unsafe { ManagedTensor::from_raw(raw)? };
/// let (m, transfer) = dlpack_nalgebra::into_owned::<DMatrix<f32>>(tensor, CopyMode::Never)?;
/// assert_eq!((m.as_ptr(), transfer), (data, Transfer::Reclaimed));
///
/// // A Vec's memory becomes a DVector's.
/// let v = vec![1.0f64, 2.0];
/// let data = v.as_ptr();
/// let tensor = ManagedTensor::export(v)?;
/// let (v, transfer) = dlpack_nalgebra::into_owned::<DVector<f64>>(tensor, CopyMode::Never)?;
/// assert_eq!((v.as_ptr(), transfer), (data, Transfer::Moved));
///
/// // A matrix of another type needs a copy: refused under Never, the tensor comes back.
/// let tensor = dlpack_nalgebra::into_dlpack(m)?;
/// let refused = dlpack_nalgebra::into_owned::<Matrix2x3<f32>>(tensor, CopyMode::Never).unwrap_err();
/// assert_eq!(refused.error, Error::CopyRefused { reason: CopyReason::NotOwned });
/// let (s, transfer) = dlpack_nalgebra::into_owned::<Matrix2x3<f32>>(refused.value, CopyMode::IfNeeded)?;
/// assert_eq!((s[(1, 2)], transfer), (2.0, Transfer::Copied(CopyReason::NotOwned)));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// The tensor comes back, untouched, in [`Refused::value`], with the reason: those of
/// [`to_owned`] (checked in that order, before the copy mode: a tensor of another element type
/// is [`Error::DataTypeMismatch`] under every mode), and [`Error::CopyRefused`] when only a copy
/// would do and `mode` is [`CopyMode::Never`].
pub fn into_owned<M: OwnedMatrix>(
    tensor: ManagedTensor,
    mode: CopyMode,
) -> Result<(M, Transfer), Refused<ManagedTensor>> {
    let tensor = if mode == CopyMode::Always {
        tensor
    } else {
        match tensor.reclaim::<M::Producer>() {
            Ok(producer) => return Ok((M::from_producer(producer), Transfer::Reclaimed)),
            Err(tensor) => tensor,
        }
    };
    let layout = match layout_as::<M>(&tensor) {
        Ok(layout) => layout,
        Err(error) => {
            return Err(Refused {
                error,
                value: tensor,
            });
        }
    };
    let (tensor, reason) = if mode == CopyMode::Always {
        (tensor, CopyReason::Requested)
    } else {
        let tensor = if M::TAKES_VEC && layout.is_vector_like() {
            match tensor.into_vec::<M::Elem>() {
                Ok(data) => {
                    let m = M::from_column_major(layout.nrows, layout.ncols, data);
                    return Ok((m, Transfer::Moved));
                }
                Err(tensor) => tensor,
            }
        } else {
            tensor
        };
        if layout.compact(COLUMN_MAJOR).is_ok() {
            (tensor, CopyReason::NotOwned)
        } else {
            (tensor, CopyReason::Layout)
        }
    };
    let copied = mode.copy(reason).and_then(|transfer| {
        let data = column_major_copy(&tensor, &layout)?;
        Ok((
            M::from_column_major(layout.nrows, layout.ncols, data),
            transfer,
        ))
    });
    copied.map_err(|error| Refused {
        error,
        value: tensor,
    })
}
