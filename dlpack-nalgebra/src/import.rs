//! Import: nalgebra views of DLPack tensors, and owned matrices by reclaim or copy.
//!
//! Every view is made from one of dlpack-core's validated typed views ([`TensorView`],
//! [`TensorViewMut`]): dtype, device, alignment, bounds, read-only state and (for mutable views)
//! overlapping strides were checked there, once. This module only maps the tensor's layout onto
//! nalgebra's.
//!
//! # Which layouts become safe views
//!
//! nalgebra strides are unsigned, so a negative stride (NumPy's `a[::-1]`) cannot be viewed at
//! all. Beyond that, nalgebra 0.35 handles only views whose row stride is 1 soundly: for any
//! other row stride its safe API goes out of bounds. Matrix-vector products (`gemv`, `axpy`)
//! take the length of a strided column from its bounding box and write past the end of the
//! result ([nalgebra#1616]); iterators (and everything built on them: `==`, `clone_owned`,
//! `transpose`, `map`, ...) step the pointer past the end of the allocation ([nalgebra#1562]),
//! and with a row stride of 0 they read outside the tensor. nalgebra's own
//! `DMatrixView::from_slice_with_strides` and `rows_with_step` views have the same holes; Miri
//! reports each of them.
//!
//! So the safe views here have nalgebra's default strides type, `(U1, Dyn)`: row stride 1,
//! any column stride >= 0. That covers column-major (Fortran-order) tensors, column slices with
//! steps, row ranges, and broadcasting along columns (column stride 0, read-only views only:
//! core refuses mutable views whose elements overlap). Axes of size 1, and every axis of an
//! empty tensor, never address an element, so their strides (even negative ones) are ignored.
//!
//! Every other layout is refused with [`Error::UnsupportedLayout`], naming the stride, unless the
//! caller asks for another import:
//!
//! | tensor layout (NumPy) | zero-copy safe view | other zero-copy view | copy |
//! |---|---|---|---|
//! | row stride 1: F order, column steps `f[1:4, ::2]`, column broadcast, column windows | [`dmatrix_view`] | | [`to_dmatrix`] |
//! | column stride 1: C order, its row steps `c[::2, :]`, row broadcast | refused | [`dmatrix_view_transposed`] (the transpose, whose row stride is 1); `unsafe` [`dmatrix_view_strided`] | [`to_dmatrix`], [`dmatrix_cow`] with [`Fallback::Copy`] |
//! | neither stride 1, none negative: `c[::2, ::3]`, scalar broadcast | refused | `unsafe` [`dmatrix_view_strided`] | as above |
//! | a negative stride: `a[::-1]` | refused | none | as above |
//!
//! # Dimensions
//!
//! Matrix imports take 1-d and 2-d tensors; a 1-d tensor of length `n` is the `n x 1` column
//! vector (DLPack has no row/column distinction for 1-d data, and nalgebra's vectors are
//! columns). Vector imports take 1-d tensors only. Anything else is [`Error::NdimMismatch`].
//!
//! [nalgebra#1616]: https://github.com/dimforge/nalgebra/issues/1616
//! [nalgebra#1562]: https://github.com/dimforge/nalgebra/pull/1562

use core::fmt;

use dlpack_core::{Element, Error, ManagedTensor, TensorView, TensorViewMut};
use nalgebra::{
    DMatrix, DMatrixView, DMatrixViewMut, DVector, DVectorView, DVectorViewMut, Dyn, Matrix,
    SMatrix, Scalar, U1, ViewStorage, ViewStorageMut,
};

use crate::export::{DMatrixProducer, DVectorProducer, SMatrixProducer};

/// Why [`Error::UnsupportedLayout`] refuses a negative stride.
const NEGATIVE: &str = "nalgebra strides are unsigned, so a view cannot step backwards (copy instead: to_dmatrix, or Fallback::Copy)";
/// ... a matrix row stride other than 1.
const ROW_STRIDE: &str = "a safe nalgebra view needs row stride 1 (nalgebra 0.35 mishandles other row strides); for row-major data use dmatrix_view_transposed, the unsafe dmatrix_view_strided, or a copy";
/// ... a tensor column stride other than 1, for a transposed view.
const TRANSPOSED_STRIDE: &str = "a safe transposed view needs row stride 1, and its rows step by the tensor's column stride (nalgebra 0.35 mishandles other row strides); use dmatrix_view or a copy";
/// ... a vector stride other than 1.
const VECTOR_STRIDE: &str = "a safe nalgebra vector view needs stride 1 (nalgebra 0.35 mishandles other strides); use the unsafe dvector_view_strided or a copy";

/// A 1-d or 2-d tensor's layout as an `nrows x ncols` nalgebra matrix.
#[derive(Clone, Copy, Debug)]
struct Layout {
    nrows: usize,
    ncols: usize,
    /// Element strides of the rows and columns. On axes of size 1, and on both axes of an empty
    /// tensor, the tensor's stride is replaced by the compact column-major one: such a stride
    /// never addresses an element, so any value describes the same elements.
    rs: i64,
    cs: i64,
    /// The tensor axes whose strides `rs` and `cs` are, for error messages.
    axes: (usize, usize),
}

/// A shape entry as a `usize`.
fn size(axis: usize, value: i64) -> Result<usize, Error> {
    usize::try_from(value).map_err(|_| Error::DimOutOfRange {
        axis,
        value,
        target: "usize",
    })
}

impl Layout {
    /// The layout of a validated 1-d tensor as a column (`n x 1`) or a 2-d tensor as is.
    fn matrix(shape: &[i64], strides: &[i64]) -> Result<Self, Error> {
        match (shape, strides) {
            (&[n], &[s]) => Self::new((n, 1), (s, n), (0, 0)),
            (&[r, c], &[rs, cs]) => Self::new((r, c), (rs, cs), (0, 1)),
            _ => Err(Error::NdimMismatch {
                found: shape.len(),
                expected: 2,
            }),
        }
    }

    /// The layout of a validated 1-d tensor as a column vector.
    fn vector(shape: &[i64], strides: &[i64]) -> Result<Self, Error> {
        match (shape, strides) {
            (&[n], &[s]) => Self::new((n, 1), (s, n), (0, 0)),
            _ => Err(Error::NdimMismatch {
                found: shape.len(),
                expected: 1,
            }),
        }
    }

    fn new((r, c): (i64, i64), (rs, cs): (i64, i64), axes: (usize, usize)) -> Result<Self, Error> {
        let (nrows, ncols) = (size(axes.0, r)?, size(axes.1, c)?);
        let empty = nrows == 0 || ncols == 0;
        Ok(Layout {
            nrows,
            ncols,
            rs: if empty || nrows == 1 { 1 } else { rs },
            cs: if empty || ncols == 1 { r } else { cs },
            axes,
        })
    }

    /// The layout of the transposed matrix (`ncols x nrows`; a `1 x n` row for a 1-d tensor).
    fn transposed(self) -> Self {
        let empty = self.nrows == 0 || self.ncols == 0;
        // Re-normalised: the new row axis may be of size 1.
        Layout {
            nrows: self.ncols,
            ncols: self.nrows,
            rs: if empty || self.ncols == 1 { 1 } else { self.cs },
            cs: if empty || self.nrows == 1 {
                self.ncols as i64
            } else {
                self.rs
            },
            axes: (self.axes.1, self.axes.0),
        }
    }

    /// Refuses negative strides.
    fn non_negative(&self) -> Result<(usize, usize), Error> {
        let stride = |axis, stride: i64| {
            usize::try_from(stride).map_err(|_| Error::UnsupportedLayout {
                axis,
                stride,
                reason: NEGATIVE,
            })
        };
        Ok((stride(self.axes.0, self.rs)?, stride(self.axes.1, self.cs)?))
    }

    /// The column stride of a layout with row stride 1, which nalgebra handles soundly.
    fn unit_rows(&self, reason: &'static str) -> Result<usize, Error> {
        let (rs, cs) = self.non_negative()?;
        if rs != 1 {
            return Err(Error::UnsupportedLayout {
                axis: self.axes.0,
                stride: self.rs,
                reason,
            });
        }
        Ok(cs)
    }

    fn is_vector_like(&self) -> bool {
        self.nrows <= 1 || self.ncols <= 1
    }
}

// Soundness of the views (cited as "SOUNDNESS" by the `// SAFETY:` comments below).
//
// Core's typed views carry the validated tensor's guarantees for their lifetime `'a`
// (`CheckedTensor::view`, `ManagedTensor::view_mut` and `ManagedTensor::from_raw`'s contract):
// `as_ptr()` is aligned for `T` (non-NULL; dangling for an empty tensor), and for every in-bounds
// index the element at `as_ptr()` plus the index's dot product with the strides is an
// initialised `T` inside one live allocation, which nobody writes while a `TensorView` exists and
// nobody but the holder accesses while a `TensorViewMut` exists (whose strides never make two
// indices share an element, and whose memory is writable). A nalgebra view `(nrows, ncols)` with
// strides `(rs, cs)` addresses element `(i, j)` at `ptr + i * rs + j * cs`, which is exactly the
// tensor's element `[i, j]` (or `[j, i]` for a transposed layout): a `Layout`'s strides differ
// from the tensor's only on axes whose index is always 0. With `rs == 1`, every other address
// nalgebra 0.35 computes (column ends `ptr + j * cs + nrows` in its iterators, the slices of
// storages it finds contiguous and of column vectors in its BLAS routines) stays within the
// tensor's reachable bytes or one past them, so within the allocation.

/// A read-only nalgebra view with row stride 1.
///
/// # Safety
/// `ptr` and `layout` come from a core view that lives for `'a` (see SOUNDNESS), and
/// `cs == layout.unit_rows(..)?`.
unsafe fn matrix_view_parts<'a, T: Scalar>(
    ptr: *const T,
    layout: &Layout,
    cs: usize,
) -> DMatrixView<'a, T> {
    // SAFETY: see SOUNDNESS: every element the view addresses is an initialised, aligned
    // `T` that nobody writes for `'a`, and with row stride 1 nalgebra stays in bounds.
    let storage = unsafe {
        ViewStorage::from_raw_parts(ptr, (Dyn(layout.nrows), Dyn(layout.ncols)), (U1, Dyn(cs)))
    };
    Matrix::from_data(storage)
}

/// A zero-copy read-only view of a 1-d or 2-d tensor as a `DMatrixView` (column-major view
/// strides, row stride 1).
///
/// Accepts row stride 1 and any column stride >= 0 (column-major data, column steps, column
/// broadcasting). A 1-d tensor is a column (`n x 1`).
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use nalgebra::{DMatrix, DVector};
///
/// let m = DMatrix::from_fn(3, 2, |i, j| (i + 10 * j) as f64);
/// let tensor = dlpack_nalgebra::export(m.clone())?;
/// let view = dlpack_nalgebra::dmatrix_view(tensor.view::<f64>()?)?;
/// assert_eq!(view, m);
/// assert_eq!(view * DVector::from_element(2, 1.0), DVector::from_vec(vec![10.0, 12.0, 14.0]));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::UnsupportedLayout`] for a row-major tensor, row steps, row broadcasting and negative
/// strides (see the [module docs](self) for why and for the alternatives),
/// [`Error::NdimMismatch`] for a tensor that is neither 1-d nor 2-d.
pub fn dmatrix_view<T: Element + Scalar>(
    view: TensorView<'_, T>,
) -> Result<DMatrixView<'_, T>, Error> {
    let layout = Layout::matrix(view.shape(), view.strides())?;
    let cs = layout.unit_rows(ROW_STRIDE)?;
    // SAFETY: `view` is a core view living for the returned lifetime; `cs` from `unit_rows`.
    Ok(unsafe { matrix_view_parts(view.as_ptr(), &layout, cs) })
}

/// A zero-copy read-only view of the transpose of a 2-d tensor: an `ncols x nrows`
/// `DMatrixView`. This is how a row-major (C-order) tensor becomes a safe nalgebra view without a
/// copy: its transpose is column-major.
///
/// Accepts column stride 1 and any row stride >= 0 (the mirror of [`dmatrix_view`]); a 1-d
/// tensor gives a `1 x n` row.
///
/// ```
/// # use dlpack_core::{Export, ExportDesc, ManagedTensor};
/// # struct RowMajor(Vec<f32>);
/// # // SAFETY: a 2 x 3 row-major layout over the Vec's 6 elements.
/// # unsafe impl Export for RowMajor {
/// #     fn ndim(&self) -> usize { 2 }
/// #     fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
/// #         shape.copy_from_slice(&[2, 3]);
/// #         strides.copy_from_slice(&[3, 1]);
/// #         ExportDesc::host(self.0.as_mut_ptr())
/// #     }
/// # }
/// // A row-major 2 x 3 tensor, as NumPy or ndarray export one.
/// let tensor = ManagedTensor::export(RowMajor(vec![0.0f32, 1.0, 2.0, 10.0, 11.0, 12.0]))?;
/// assert_eq!(tensor.strides(), &[3, 1]);
/// assert!(dlpack_nalgebra::dmatrix_view(tensor.view::<f32>()?).is_err());
///
/// let t = dlpack_nalgebra::dmatrix_view_transposed(tensor.view::<f32>()?)?;
/// assert_eq!(t.shape(), (3, 2));
/// assert_eq!(t[(2, 1)], 12.0); // element [1, 2] of the tensor
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::UnsupportedLayout`] for a column stride other than 1 and for negative strides,
/// [`Error::NdimMismatch`] for a tensor that is neither 1-d nor 2-d.
pub fn dmatrix_view_transposed<T: Element + Scalar>(
    view: TensorView<'_, T>,
) -> Result<DMatrixView<'_, T>, Error> {
    let layout = Layout::matrix(view.shape(), view.strides())?.transposed();
    let cs = layout.unit_rows(TRANSPOSED_STRIDE)?;
    // SAFETY: `view` is a core view living for the returned lifetime; the transposed layout
    // addresses element (i, j) at the tensor's element [j, i]; `cs` from `unit_rows`.
    Ok(unsafe { matrix_view_parts(view.as_ptr(), &layout, cs) })
}

/// A mutable nalgebra view with row stride 1.
///
/// # Safety
/// `ptr` and `layout` come from a core mutable view that lives for `'a` and is not used again
/// (see SOUNDNESS), and `cs == layout.unit_rows(..)?`.
unsafe fn matrix_view_mut_parts<'a, T: Scalar>(
    ptr: *mut T,
    layout: &Layout,
    cs: usize,
) -> DMatrixViewMut<'a, T> {
    // SAFETY: see SOUNDNESS: every element the view addresses is an initialised, aligned,
    // writable `T`, distinct indices address distinct elements, and nobody else accesses them
    // for `'a` (the core view that held that right is consumed); with row stride 1 nalgebra
    // stays in bounds.
    let storage = unsafe {
        ViewStorageMut::from_raw_parts(ptr, (Dyn(layout.nrows), Dyn(layout.ncols)), (U1, Dyn(cs)))
    };
    Matrix::from_data(storage)
}

/// A zero-copy mutable view of a 1-d or 2-d tensor as a `DMatrixViewMut`: the mutable
/// [`dmatrix_view`]. Writes land in the tensor's memory.
///
/// Core's [`ManagedTensor::view_mut`] has already refused read-only tensors and overlapping
/// strides (so column broadcasting too); the layouts are then those of [`dmatrix_view`].
///
/// ```
/// use nalgebra::DMatrix;
///
/// let mut tensor = dlpack_nalgebra::export(DMatrix::<i64>::zeros(2, 2))?;
/// let mut view = dlpack_nalgebra::dmatrix_view_mut(tensor.view_mut::<i64>()?)?;
/// view[(1, 0)] = 7;
/// assert_eq!(tensor.view::<i64>()?.get(&[1, 0]), Some(&7));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// As for [`dmatrix_view`].
pub fn dmatrix_view_mut<T: Element + Scalar>(
    mut view: TensorViewMut<'_, T>,
) -> Result<DMatrixViewMut<'_, T>, Error> {
    let layout = Layout::matrix(view.shape(), view.strides())?;
    let cs = layout.unit_rows(ROW_STRIDE)?;
    let ptr = view.as_mut_ptr();
    // SAFETY: `view` is a core mutable view living for the returned lifetime, consumed here;
    // `cs` from `unit_rows`.
    Ok(unsafe { matrix_view_mut_parts(ptr, &layout, cs) })
}

/// A zero-copy mutable view of the transpose of a 2-d tensor: the mutable
/// [`dmatrix_view_transposed`], for row-major tensors. Writes land in the tensor's memory.
///
/// # Errors
///
/// As for [`dmatrix_view_transposed`].
pub fn dmatrix_view_transposed_mut<T: Element + Scalar>(
    mut view: TensorViewMut<'_, T>,
) -> Result<DMatrixViewMut<'_, T>, Error> {
    let layout = Layout::matrix(view.shape(), view.strides())?.transposed();
    let cs = layout.unit_rows(TRANSPOSED_STRIDE)?;
    let ptr = view.as_mut_ptr();
    // SAFETY: as in `dmatrix_view_mut`, for the transposed layout, which addresses element
    // (i, j) at the tensor's element [j, i].
    Ok(unsafe { matrix_view_mut_parts(ptr, &layout, cs) })
}

/// A zero-copy read-only view of a 1-d tensor as a `DVectorView` (stride 1).
///
/// ```
/// let tensor = dlpack_core::ManagedTensor::export(vec![1.0f64, 2.0, 3.0])?;
/// let v = dlpack_nalgebra::dvector_view(tensor.view::<f64>()?)?;
/// assert_eq!(v.norm_squared(), 14.0);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::UnsupportedLayout`] for a stride other than 1 (see the [module docs](self)),
/// [`Error::NdimMismatch`] for a tensor that is not 1-d.
pub fn dvector_view<T: Element + Scalar>(
    view: TensorView<'_, T>,
) -> Result<DVectorView<'_, T>, Error> {
    let layout = Layout::vector(view.shape(), view.strides())?;
    layout.unit_rows(VECTOR_STRIDE)?;
    // SAFETY: see SOUNDNESS: `view` is a core view living for the returned lifetime and the
    // layout's stride is 1 (checked); the column stride of a one-column view addresses nothing.
    let storage = unsafe {
        ViewStorage::from_raw_parts(
            view.as_ptr(),
            (Dyn(layout.nrows), U1),
            (U1, Dyn(layout.nrows)),
        )
    };
    Ok(Matrix::from_data(storage))
}

/// A zero-copy mutable view of a 1-d tensor as a `DVectorViewMut`: the mutable
/// [`dvector_view`].
///
/// # Errors
///
/// As for [`dvector_view`].
pub fn dvector_view_mut<T: Element + Scalar>(
    mut view: TensorViewMut<'_, T>,
) -> Result<DVectorViewMut<'_, T>, Error> {
    let layout = Layout::vector(view.shape(), view.strides())?;
    layout.unit_rows(VECTOR_STRIDE)?;
    let ptr = view.as_mut_ptr();
    // SAFETY: as in `dvector_view`, for the consumed core mutable view (exclusive, writable).
    let storage = unsafe {
        ViewStorageMut::from_raw_parts(ptr, (Dyn(layout.nrows), U1), (U1, Dyn(layout.nrows)))
    };
    Ok(Matrix::from_data(storage))
}

/// What the `_cow` imports do with a layout that cannot be a safe zero-copy view (negative
/// strides, a row stride other than 1: see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// Return the view's error. The default: an import never copies unless asked to.
    #[default]
    Fail,
    /// Copy the elements into an owned matrix (any strides, negative and zero included).
    Copy,
}

macro_rules! cow {
    ($(#[$doc:meta])* $name:ident, $view:ident, $owned:ident) => {
        $(#[$doc])*
        pub enum $name<'a, T: Scalar> {
            /// A zero-copy view of the tensor.
            Borrowed($view<'a, T>),
            /// A copy, made because the tensor's layout cannot be viewed and the caller chose
            /// [`Fallback::Copy`].
            Owned($owned<T>),
        }

        impl<'a, T: Scalar> $name<'a, T> {
            /// A view of the elements, whichever variant holds them.
            pub fn view(&self) -> $view<'_, T> {
                match self {
                    Self::Borrowed(view) => view.clone(),
                    Self::Owned(owned) => owned.as_view(),
                }
            }

            /// Whether this is a zero-copy view.
            pub fn is_borrowed(&self) -> bool {
                matches!(self, Self::Borrowed(_))
            }

            /// The elements in an owned matrix (copied from a view).
            pub fn into_owned(self) -> $owned<T> {
                match self {
                    Self::Borrowed(view) => view.clone_owned(),
                    Self::Owned(owned) => owned,
                }
            }
        }

        impl<T: Scalar> fmt::Debug for $name<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    Self::Borrowed(view) => f.debug_tuple("Borrowed").field(view).finish(),
                    Self::Owned(owned) => f.debug_tuple("Owned").field(owned).finish(),
                }
            }
        }
    };
}

cow!(
    /// A matrix import that is a zero-copy view when it can be and a copy when the caller
    /// accepts one: what [`dmatrix_cow`] returns.
    CowMatrix,
    DMatrixView,
    DMatrix
);

cow!(
    /// A vector import that is a zero-copy view when it can be and a copy when the caller
    /// accepts one: what [`dvector_cow`] returns.
    CowVector,
    DVectorView,
    DVector
);

/// [`dmatrix_view`], with the caller's choice for layouts it refuses: [`Fallback::Fail`] (the
/// default) returns its error, [`Fallback::Copy`] copies (as [`to_dmatrix`]).
///
/// Mutable views have no such choice: writes to a copy would be silently lost, so
/// [`dmatrix_view_mut`] always fails instead.
///
/// ```
/// use dlpack_nalgebra::{dmatrix_cow, Fallback};
///
/// // A reversed vector, like NumPy's a[::-1]: nalgebra strides cannot be negative.
/// # let tensor = {
/// #     use dlpack_core::{Export, ExportDesc, ManagedTensor};
/// #     struct Reversed(Vec<i32>);
/// #     // SAFETY: 3 elements from the last one backwards, inside the Vec.
/// #     unsafe impl Export for Reversed {
/// #         fn ndim(&self) -> usize { 1 }
/// #         fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
/// #             shape.copy_from_slice(&[3]);
/// #             strides.copy_from_slice(&[-1]);
/// #             ExportDesc { byte_offset: 8, ..ExportDesc::host(self.0.as_mut_ptr()) }
/// #         }
/// #     }
/// #     ManagedTensor::export(Reversed(vec![1, 2, 3]))?
/// # };
/// assert_eq!(tensor.strides(), &[-1]);
/// assert!(dmatrix_cow(tensor.view::<i32>()?, Fallback::default()).is_err());
///
/// let m = dmatrix_cow(tensor.view::<i32>()?, Fallback::Copy)?;
/// assert!(!m.is_borrowed());
/// assert_eq!(m.into_owned().as_slice(), &[3, 2, 1]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::NdimMismatch`] for a tensor that is neither 1-d nor 2-d, whatever the fallback.
/// With [`Fallback::Fail`], [`Error::UnsupportedLayout`] for a layout [`dmatrix_view`] refuses;
/// with [`Fallback::Copy`], [`Error::OutOfMemory`] when the copy does not fit in memory.
pub fn dmatrix_cow<T: Element + Scalar>(
    view: TensorView<'_, T>,
    fallback: Fallback,
) -> Result<CowMatrix<'_, T>, Error> {
    match dmatrix_view(view) {
        Ok(view) => Ok(CowMatrix::Borrowed(view)),
        Err(Error::UnsupportedLayout { .. }) if fallback == Fallback::Copy => {
            to_dmatrix(view).map(CowMatrix::Owned)
        }
        Err(e) => Err(e),
    }
}

/// [`dvector_view`], with the caller's choice for strides it refuses, as [`dmatrix_cow`]:
/// [`Fallback::Fail`] (the default) returns the error, [`Fallback::Copy`] copies.
///
/// # Errors
///
/// [`Error::NdimMismatch`] for a tensor that is not 1-d, whatever the fallback. With
/// [`Fallback::Fail`], [`Error::UnsupportedLayout`] for a stride other than 1; with
/// [`Fallback::Copy`], [`Error::OutOfMemory`] when the copy does not fit in memory.
pub fn dvector_cow<T: Element + Scalar>(
    view: TensorView<'_, T>,
    fallback: Fallback,
) -> Result<CowVector<'_, T>, Error> {
    match dvector_view(view) {
        Ok(view) => Ok(CowVector::Borrowed(view)),
        Err(Error::UnsupportedLayout { .. }) if fallback == Fallback::Copy => {
            to_dvector(view).map(CowVector::Owned)
        }
        Err(e) => Err(e),
    }
}

/// A zero-copy read-only view of a 1-d or 2-d tensor with its own strides, whatever they are
/// unless negative: a row-major tensor becomes a view with strides `(ncols, 1)`.
///
/// ```
/// # use dlpack_core::{Export, ExportDesc, ManagedTensor};
/// # struct RowMajor(Vec<f64>);
/// # // SAFETY: a 2 x 3 row-major layout over the Vec's 6 elements.
/// # unsafe impl Export for RowMajor {
/// #     fn ndim(&self) -> usize { 2 }
/// #     fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
/// #         shape.copy_from_slice(&[2, 3]);
/// #         strides.copy_from_slice(&[3, 1]);
/// #         ExportDesc::host(self.0.as_mut_ptr())
/// #     }
/// # }
/// # let tensor = ManagedTensor::export(RowMajor(vec![0.0, 1.0, 2.0, 10.0, 11.0, 12.0]))?;
/// assert_eq!((tensor.shape(), tensor.strides()), (&[2, 3][..], &[3, 1][..]));
/// // SAFETY: the view is only indexed, never iterated, compared or multiplied.
/// let m = unsafe { dlpack_nalgebra::dmatrix_view_strided(tensor.view::<f64>()?)? };
/// assert_eq!((m.shape(), m.strides()), ((2, 3), (3, 1)));
/// assert_eq!(m[(1, 2)], 12.0);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::UnsupportedLayout`] for a negative stride, [`Error::NdimMismatch`] for a tensor that
/// is neither 1-d nor 2-d.
///
/// # Safety
///
/// nalgebra 0.35 is unsound for views whose row stride is not 1 (see the [module docs](self)):
/// its iterators, and the operations built on them (`iter`, `==`, `clone_owned`, `transpose`,
/// `map`, `sum`, ...), compute pointers outside the allocation and, for a row stride of 0, read
/// outside it; its BLAS-style routines (`axpy`, `gemv`, `gemm` and the `*` operators built on
/// them) write outside their output. Unless the returned view's row stride is 1, the caller must
/// not apply nalgebra operations that iterate over the view or pass it to those routines,
/// directly or through views derived from it. Element access by index (`m[(i, j)]`, `get`) is
/// sound. Prefer [`dmatrix_view`], [`dmatrix_view_transposed`] or a copy.
pub unsafe fn dmatrix_view_strided<T: Element + Scalar>(
    view: TensorView<'_, T>,
) -> Result<DMatrixView<'_, T, Dyn, Dyn>, Error> {
    let layout = Layout::matrix(view.shape(), view.strides())?;
    let (rs, cs) = layout.non_negative()?;
    // SAFETY: see SOUNDNESS: every element the view addresses is an initialised, aligned
    // `T` that nobody writes for the view's lifetime; the caller keeps nalgebra's out-of-bounds
    // routines away from it (this function's contract).
    let storage = unsafe {
        ViewStorage::from_raw_parts(
            view.as_ptr(),
            (Dyn(layout.nrows), Dyn(layout.ncols)),
            (Dyn(rs), Dyn(cs)),
        )
    };
    Ok(Matrix::from_data(storage))
}

/// A zero-copy mutable view of a 1-d or 2-d tensor with its own strides (except negative ones):
/// the mutable [`dmatrix_view_strided`]. Writes land in the tensor's memory.
///
/// # Errors
///
/// As for [`dmatrix_view_strided`].
///
/// # Safety
///
/// As for [`dmatrix_view_strided`]: unless the view's row stride is 1, the caller must not apply
/// nalgebra operations that iterate over it or feed it to nalgebra's BLAS-style routines, which
/// for such views read and write outside the tensor.
pub unsafe fn dmatrix_view_strided_mut<T: Element + Scalar>(
    mut view: TensorViewMut<'_, T>,
) -> Result<DMatrixViewMut<'_, T, Dyn, Dyn>, Error> {
    let layout = Layout::matrix(view.shape(), view.strides())?;
    let (rs, cs) = layout.non_negative()?;
    let ptr = view.as_mut_ptr();
    // SAFETY: see SOUNDNESS: the consumed core mutable view gave exclusive, writable access
    // to distinct elements for the view's lifetime; the caller keeps nalgebra's out-of-bounds
    // routines away from the view (this function's contract).
    let storage = unsafe {
        ViewStorageMut::from_raw_parts(
            ptr,
            (Dyn(layout.nrows), Dyn(layout.ncols)),
            (Dyn(rs), Dyn(cs)),
        )
    };
    Ok(Matrix::from_data(storage))
}

/// A zero-copy read-only view of a 1-d tensor with its own stride, whatever it is unless
/// negative.
///
/// # Errors
///
/// [`Error::UnsupportedLayout`] for a negative stride, [`Error::NdimMismatch`] for a tensor that
/// is not 1-d.
///
/// # Safety
///
/// As for [`dmatrix_view_strided`]: unless the stride is 1, the caller must not apply nalgebra
/// operations that iterate over the view or pass it to nalgebra's BLAS-style routines (`axpy`,
/// `gemv`, ...), which for such views read and write outside the tensor. Element access by index
/// is sound.
pub unsafe fn dvector_view_strided<T: Element + Scalar>(
    view: TensorView<'_, T>,
) -> Result<DVectorView<'_, T, Dyn, Dyn>, Error> {
    let layout = Layout::vector(view.shape(), view.strides())?;
    let (rs, cs) = layout.non_negative()?;
    // SAFETY: as in `dmatrix_view_strided`, for a one-column layout.
    let storage = unsafe {
        ViewStorage::from_raw_parts(view.as_ptr(), (Dyn(layout.nrows), U1), (Dyn(rs), Dyn(cs)))
    };
    Ok(Matrix::from_data(storage))
}

/// A zero-copy mutable view of a 1-d tensor with its own stride (except negative): the mutable
/// [`dvector_view_strided`].
///
/// # Errors
///
/// As for [`dvector_view_strided`].
///
/// # Safety
///
/// As for [`dvector_view_strided`].
pub unsafe fn dvector_view_strided_mut<T: Element + Scalar>(
    mut view: TensorViewMut<'_, T>,
) -> Result<DVectorViewMut<'_, T, Dyn, Dyn>, Error> {
    let layout = Layout::vector(view.shape(), view.strides())?;
    let (rs, cs) = layout.non_negative()?;
    let ptr = view.as_mut_ptr();
    // SAFETY: as in `dmatrix_view_strided_mut`, for a one-column layout.
    let storage =
        unsafe { ViewStorageMut::from_raw_parts(ptr, (Dyn(layout.nrows), U1), (Dyn(rs), Dyn(cs))) };
    Ok(Matrix::from_data(storage))
}

/// Copies a 1-d or 2-d tensor of any layout (negative, zero and row-major strides included)
/// into a new `DMatrix`. A 1-d tensor becomes a column.
///
/// ```
/// let tensor = dlpack_core::ManagedTensor::export(vec![1u16, 2, 3])?;
/// let m = dlpack_nalgebra::to_dmatrix(tensor.view::<u16>()?)?;
/// assert_eq!(m.shape(), (3, 1));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::NdimMismatch`] for a tensor that is neither 1-d nor 2-d, [`Error::OutOfMemory`]
/// when the copy does not fit in memory (a broadcast tensor can describe far more elements than
/// its memory holds).
pub fn to_dmatrix<T: Element + Scalar>(view: TensorView<'_, T>) -> Result<DMatrix<T>, Error> {
    let layout = Layout::matrix(view.shape(), view.strides())?;
    let (nrows, ncols) = (layout.nrows, layout.ncols);
    if layout.is_vector_like() {
        // At most one row or column: row-major order (core's gather) is column-major order.
        return Ok(DMatrix::from_vec(nrows, ncols, view.try_to_vec()?));
    }
    // nalgebra allocates the copies below itself, and aborts if it cannot: make sure first
    // that it can (a broadcast tensor describes far more elements than its memory holds).
    drop(dlpack_core::try_vec_with_capacity::<T>(view.len())?);
    if let Ok(cs) = layout.unit_rows(ROW_STRIDE) {
        // SAFETY: `view` is a core view that outlives this call; `cs` from `unit_rows`.
        return Ok(unsafe { matrix_view_parts(view.as_ptr(), &layout, cs) }.clone_owned());
    }
    let transposed = layout.transposed();
    if let Ok(cs) = transposed.unit_rows(TRANSPOSED_STRIDE) {
        // SAFETY: as above, for the transposed layout (element (i, j) is the tensor's [j, i]).
        return Ok(unsafe { matrix_view_parts(view.as_ptr(), &transposed, cs) }.transpose());
    }
    // Anything else (negative or zero strides, steps on both axes): one element at a time, in
    // core's row-major order.
    Ok(DMatrix::from_row_iterator(
        nrows,
        ncols,
        view.iter().copied(),
    ))
}

/// Copies a 1-d tensor of any stride (negative and zero included) into a new `DVector`.
///
/// # Errors
///
/// [`Error::NdimMismatch`] for a tensor that is not 1-d, [`Error::OutOfMemory`] when the copy
/// does not fit in memory.
pub fn to_dvector<T: Element + Scalar>(view: TensorView<'_, T>) -> Result<DVector<T>, Error> {
    Layout::vector(view.shape(), view.strides())?;
    Ok(DVector::from_vec(view.try_to_vec()?))
}

/// Turns a tensor into an owned `DMatrix`, without a copy when it can:
///
/// 1. a tensor exported from a `DMatrix<T>` ([`export`](fn@crate::export)) gives it back;
/// 2. one exported from a `DVector<T>` gives its storage back as an `n x 1` matrix;
/// 3. a 1-d tensor, or a 2-d one with at most one row or column, whose producer owns its
///    elements as a `Vec<T>` ([`ManagedTensor::into_vec`]: a `Vec`, a `Box<[T]>`, a standard
///    layout ndarray `Array`, ...) gives that `Vec`;
/// 4. anything else is copied ([`to_dmatrix`]).
///
/// ```
/// use nalgebra::DMatrix;
///
/// let m = DMatrix::from_fn(2, 3, |i, j| (i * j) as f32);
/// let data = m.as_ptr();
/// let raw = dlpack_nalgebra::export(m)?.into_raw()?;
/// // ... a consumer hands the tensor back ...
/// // SAFETY: `raw` is a live tensor that we own.
/// let tensor = unsafe { dlpack_core::ManagedTensor::from_raw(raw)? };
/// let back = dlpack_nalgebra::into_dmatrix::<f32>(tensor)?;
/// assert_eq!(back.as_ptr(), data); // reclaimed, not copied
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::NdimMismatch`] for a tensor that is neither 1-d nor 2-d, those of
/// [`CheckedTensor::view`](dlpack_core::CheckedTensor::view) (dtype, device, alignment), and
/// [`Error::OutOfMemory`] when a copy does not fit in memory (a broadcast tensor). The tensor is
/// consumed: on error it is dropped, so its deleter has run.
pub fn into_dmatrix<T: Element + Scalar>(tensor: ManagedTensor) -> Result<DMatrix<T>, Error> {
    let tensor = match tensor.reclaim::<DMatrixProducer<T>>() {
        Ok(producer) => return Ok(producer.into_inner()),
        Err(tensor) => tensor,
    };
    let tensor = match tensor.reclaim::<DVectorProducer<T>>() {
        Ok(producer) => {
            let vector = producer.into_inner();
            let nrows = vector.nrows();
            return Ok(DMatrix::from_vec(nrows, 1, Vec::from(vector.data)));
        }
        Err(tensor) => tensor,
    };
    let layout = Layout::matrix(tensor.shape(), tensor.strides())?;
    let tensor = if layout.is_vector_like() {
        match tensor.into_vec::<T>() {
            Ok(vec) => return Ok(DMatrix::from_vec(layout.nrows, layout.ncols, vec)),
            Err(tensor) => tensor,
        }
    } else {
        tensor
    };
    to_dmatrix(tensor.view::<T>()?)
}

/// Turns a 1-d tensor into an owned `DVector`, without a copy when it can: a tensor exported
/// from a `DVector<T>` gives it back; a producer that owns its elements as a `Vec<T>` gives that
/// ([`ManagedTensor::into_vec`]); anything else is copied ([`to_dvector`]).
///
/// ```
/// let v = vec![1.0f64, 2.0];
/// let data = v.as_ptr();
/// let tensor = dlpack_core::ManagedTensor::export(v)?;
/// let vector = dlpack_nalgebra::into_dvector::<f64>(tensor)?;
/// assert_eq!(vector.as_ptr(), data); // the Vec's buffer, not a copy
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::NdimMismatch`] for a tensor that is not 1-d, those of
/// [`CheckedTensor::view`](dlpack_core::CheckedTensor::view), and [`Error::OutOfMemory`] when a
/// copy does not fit in memory. The tensor is consumed (dropped on error).
pub fn into_dvector<T: Element + Scalar>(tensor: ManagedTensor) -> Result<DVector<T>, Error> {
    let tensor = match tensor.reclaim::<DVectorProducer<T>>() {
        Ok(producer) => return Ok(producer.into_inner()),
        Err(tensor) => tensor,
    };
    Layout::vector(tensor.shape(), tensor.strides())?;
    let tensor = match tensor.into_vec::<T>() {
        Ok(vec) => return Ok(DVector::from_vec(vec)),
        Err(tensor) => tensor,
    };
    to_dvector(tensor.view::<T>()?)
}

/// Turns a tensor into an `SMatrix<T, R, C>`: a tensor exported from one gives it back without a
/// copy; anything else of shape `[R, C]` (or `[R]` when `C` is 1) is copied.
///
/// ```
/// use nalgebra::Matrix2x3;
///
/// let m = Matrix2x3::new(1u8, 2, 3, 4, 5, 6);
/// let tensor = dlpack_nalgebra::export(m)?;
/// let back: Matrix2x3<u8> = dlpack_nalgebra::into_smatrix(tensor)?;
/// assert_eq!(back, m);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::ShapeMismatch`] for another shape; otherwise as for [`into_dmatrix`].
pub fn into_smatrix<T: Element + Scalar, const R: usize, const C: usize>(
    tensor: ManagedTensor,
) -> Result<SMatrix<T, R, C>, Error> {
    let tensor = match tensor.reclaim::<SMatrixProducer<T, R, C>>() {
        Ok(producer) => return Ok(producer.into_inner()),
        Err(tensor) => tensor,
    };
    let layout = Layout::matrix(tensor.shape(), tensor.strides())?;
    if (layout.nrows, layout.ncols) != (R, C) {
        return Err(Error::ShapeMismatch {
            found: tensor.shape().to_vec(),
            expected: vec![
                i64::try_from(R).unwrap_or(i64::MAX),
                i64::try_from(C).unwrap_or(i64::MAX),
            ],
        });
    }
    let copy = to_dmatrix(tensor.view::<T>()?)?;
    Ok(SMatrix::from_column_slice(copy.as_slice()))
}
