//! Import: nalgebra views of DLPack tensors, and owned matrices by reclaim or copy.
//!
//! Every view is made from one of dlpack-core's validated typed views ([`TensorView`],
//! [`TensorViewMut`]): dtype, device, alignment, bounds, read-only state and (for mutable views)
//! overlapping strides were checked there, once. This module only maps the tensor's layout onto
//! nalgebra's.
//!
//! # Which layouts become safe views
//!
//! The safe views ([`dmatrix_view`], [`dvector_view`], their `_mut` and `_transposed` forms)
//! take compact column-major layouts only: row stride 1 and column stride equal to the number of
//! rows, the layout of a `DMatrix`'s own storage. To nalgebra, such a view is the same as
//! `DMatrix::as_view()` of a matrix of that shape, so every safe nalgebra operation on it behaves
//! as on a `DMatrix`. nalgebra 0.35 does not handle the other layouts soundly:
//!
//! - The `next_back` of its element iterators (`MatrixIter`, `MatrixIterMut`: `iter().rev()`,
//!   `iter_mut().next_back()`, `rfold`, ...) finds the last remaining element from the front
//!   pointer as if each column began where the previous one ends (column stride = rows x row
//!   stride). On any other layout, once `next` has moved the front into a column, or to the end
//!   of one, `next_back` returns an element from between the columns, from outside the tensor, or
//!   (from `iter_mut`) one it has handed out already: on a `1 x 3` broadcast of one element,
//!   `next` then `next_back` reads past that element; on rows `0..2` of a `3 x 3` column-major
//!   matrix, `iter_mut` hands out element `(0, 2)` twice, as two live `&mut`. No nalgebra issue
//!   reports this (June 2026); the code came with [nalgebra#797], which made these iterators
//!   double-ended, and nalgebra's main branch still has it.
//! - For a row stride other than 1, matrix-vector products (`gemv`, `axpy`) take the length of a
//!   strided column from its bounding box and write past the end of the result
//!   ([nalgebra#1616]); iterators (and everything built on them: `==`, `clone_owned`,
//!   `transpose`, `map`, ...) step the pointer past the end of the allocation ([nalgebra#1562]),
//!   and with a row stride of 0 they read outside the tensor.
//!
//! So column steps, row ranges of column-major data, column broadcasting and overlapping column
//! windows are refused as safe views even though their row stride is 1.
//!
//! What this crate cannot prevent: a safe view here is storage-identical to nalgebra's own
//! `DMatrix::as_view()` (`as_view_mut()`) of a matrix of that shape, and nalgebra's own safe
//! sub-views of it (`rows`, `row`, `rows_range_pair_mut`, `view`, `columns_with_step`, ...) can
//! have the layouts above: `m.rows_mut(0, 2).iter_mut()` with `next`, `next`, `next_back` hands
//! out one element twice, for a view from this crate exactly as for any `DMatrix`. That is
//! nalgebra 0.35's bug, reachable through nalgebra alone; until it is fixed upstream, iterate
//! nalgebra sub-views forward only (or copy them with `clone_owned`, which does).
//!
//! Axes of size 1, and every axis of an empty tensor, never address an element, so their
//! strides (even negative ones) are ignored: a `1 x n` row with column stride 1, and an `n x 1`
//! column with row stride 1, are compact whatever their other stride.
//!
//! Every other layout is refused with [`Error::UnsupportedLayout`], naming the stride, unless the
//! caller asks for another import:
//!
//! | tensor layout (NumPy) | zero-copy safe view | other zero-copy view | copy |
//! |---|---|---|---|
//! | compact column-major: F order, its column ranges `f[:, 1:3]`, a `DMatrix`'s export | [`dmatrix_view`] | | [`to_dmatrix`] |
//! | compact row-major: C order, its row ranges `c[1:3, :]` | refused | [`dmatrix_view_transposed`] (the transpose, which is compact column-major); `unsafe` [`dmatrix_view_strided`] | [`to_dmatrix`], [`dmatrix_cow`] with [`Fallback::Copy`] |
//! | row stride 1 otherwise: column steps `f[:, ::2]`, row ranges `f[1:3, :]`, column broadcast, column windows | refused | `unsafe` [`dmatrix_view_strided`] | as above |
//! | column stride 1 otherwise: row steps `c[::2, :]`, column ranges `c[:, :2]`, row broadcast | refused | `unsafe` [`dmatrix_view_strided`] | as above |
//! | neither stride 1, none negative: `c[::2, ::3]`, scalar broadcast | refused | `unsafe` [`dmatrix_view_strided`] | as above |
//! | a negative stride: `a[::-1]` | refused | none | as above |
//!
//! Vectors follow the same rule: [`dvector_view`] takes stride 1 only.
//!
//! # Dimensions
//!
//! Matrix imports take 1-d and 2-d tensors; a 1-d tensor of length `n` is the `n x 1` column
//! vector (DLPack has no row/column distinction for 1-d data, and nalgebra's vectors are
//! columns). Vector imports take 1-d tensors only. Anything else is [`Error::NdimMismatch`].
//!
//! nalgebra loops over the rows or the columns of a matrix even when it has no elements
//! (`transpose` over each row, `map` over each column), so an empty `i64::MAX x 0` tensor, which
//! DLPack allows and which takes no memory, would make such operations loop 2^63 times. Every
//! import here (views, copies, and owning imports that do not give back an exported matrix)
//! therefore refuses an empty 2-d tensor with more than 2^24 rows or columns, with
//! [`Error::DimOutOfRange`] (at most 2^24 iterations, a fraction of a second in a debug build).
//! nalgebra can still make larger empty matrices itself (`kronecker` of two empty ones, say),
//! as it can from any `DMatrix`. A non-empty tensor needs no such bound: a safe view has no more rows
//! or columns than elements in memory, and a copy fails with [`Error::OutOfMemory`] first.
//!
//! [nalgebra#797]: https://github.com/dimforge/nalgebra/pull/797
//! [nalgebra#1616]: https://github.com/dimforge/nalgebra/issues/1616
//! [nalgebra#1562]: https://github.com/dimforge/nalgebra/pull/1562

use core::fmt;

use dlpack_core::{Element, Error, ManagedTensor, TensorView, TensorViewMut};
use nalgebra::{
    DMatrix, DMatrixView, DMatrixViewMut, DVector, DVectorView, DVectorViewMut, Dyn, Matrix,
    SMatrix, Scalar, U1, ViewStorage, ViewStorageMut,
};

use crate::export::{DMatrixProducer, DVectorProducer, SMatrixProducer, column_major_vec};

/// Why [`Error::UnsupportedLayout`] refuses a negative stride.
const NEGATIVE: &str = "nalgebra strides are unsigned, so a view cannot step backwards (copy instead: to_dmatrix, or Fallback::Copy)";
/// ... a matrix layout that is not compact column-major.
const COLUMN_MAJOR: &str = "a safe nalgebra view needs compact column-major strides, row stride 1 and column stride equal to the number of rows (nalgebra 0.35's iterators leave other layouts); for row-major data use dmatrix_view_transposed, otherwise the unsafe dmatrix_view_strided or a copy (to_dmatrix, Fallback::Copy)";
/// ... a matrix layout that is not compact row-major, for a transposed view.
const ROW_MAJOR: &str = "a safe transposed view needs compact row-major strides, column stride 1 and row stride equal to the number of columns (nalgebra 0.35's iterators leave other layouts); for column-major data use dmatrix_view, otherwise the unsafe dmatrix_view_strided or a copy (to_dmatrix)";
/// ... a vector stride other than 1.
const VECTOR_STRIDE: &str = "a safe nalgebra vector view needs stride 1 (nalgebra 0.35 mishandles other strides); use the unsafe dvector_view_strided or a copy (to_dvector, Fallback::Copy)";

/// The most rows or columns an empty matrix import may have (see the module docs).
const MAX_EMPTY_DIM: i64 = 1 << 24;
/// Why [`Error::DimOutOfRange`] refuses a larger one.
const EMPTY_DIM: &str = "the rows or columns of an empty nalgebra matrix, at most 2^24 (nalgebra loops over each of them even when there are no elements)";

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

    /// Refuses an empty matrix with more than [`MAX_EMPTY_DIM`] rows or columns, which
    /// nalgebra would loop over (a 1-d tensor's column count 1 is no tensor axis).
    fn new((r, c): (i64, i64), (rs, cs): (i64, i64), axes: (usize, usize)) -> Result<Self, Error> {
        let (nrows, ncols) = (size(axes.0, r)?, size(axes.1, c)?);
        let empty = nrows == 0 || ncols == 0;
        if empty {
            for (axis, value) in [(axes.0, r), (axes.1, c)] {
                if value > MAX_EMPTY_DIM {
                    return Err(Error::DimOutOfRange {
                        axis,
                        value,
                        target: EMPTY_DIM,
                    });
                }
            }
        }
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

    /// Accepts the compact column-major layout (row stride 1, column stride `nrows`), the only
    /// one nalgebra 0.35 handles soundly (see SOUNDNESS); refuses any other, naming the first
    /// stride that differs with `reason`.
    fn compact(&self, reason: &'static str) -> Result<Compact, Error> {
        let (rs, cs) = self.non_negative()?;
        let refuse = |axis, stride| Error::UnsupportedLayout {
            axis,
            stride,
            reason,
        };
        if rs != 1 {
            return Err(refuse(self.axes.0, self.rs));
        }
        if cs != self.nrows {
            return Err(refuse(self.axes.1, self.cs));
        }
        Ok(Compact {
            nrows: self.nrows,
            ncols: self.ncols,
        })
    }

    fn is_vector_like(&self) -> bool {
        self.nrows <= 1 || self.ncols <= 1
    }
}

/// The shape of a layout that [`Layout::compact`] accepted: strides `(1, nrows)`.
#[derive(Clone, Copy, Debug)]
struct Compact {
    nrows: usize,
    ncols: usize,
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
// from the tensor's only on axes whose index is always 0.
//
// The safe views are compact (`Layout::compact`): strides `(1, nrows)`. Their elements are then
// the `nrows * ncols` consecutive `T`s from `ptr`, each addressed by one index only, which is how
// a `DMatrix` stores its elements: to nalgebra such a view is `DMatrix::as_view()` of one. Every
// address nalgebra 0.35 computes for it is one of those elements or one past the last, so inside
// the allocation: its iterators' column ends `ptr + (j + 1) * nrows`; the front pointer, which
// after the last element of a column is that column's end, the next column's start; the element
// `MatrixIter::next_back` returns for the `k`-th element after the front, `front + (k / nrows) *
// cs + (k % nrows) * rs`, which is `front + k`, that element, exactly when `(rs, cs) = (1,
// nrows)` (on any other layout it is not, hence the rule: it lies between the columns, outside
// the tensor, or on an element handed out already); the slices `as_slice` and the BLAS routines
// take of a contiguous storage, `nrows * ncols` long. With a row stride other than 1 nalgebra
// leaves the allocation in more places (iterators' column ends, BLAS). An empty view's
// dimensions are at most `MAX_EMPTY_DIM` (`Layout::new`), so nalgebra's loops over its rows and
// columns end.

/// A read-only nalgebra view of a compact layout.
///
/// # Safety
/// `ptr` comes from a core view that lives for `'a`, and `compact` from [`Layout::compact`] of
/// that view's layout (or of its transpose) (see SOUNDNESS).
unsafe fn matrix_view_parts<'a, T: Scalar>(ptr: *const T, compact: Compact) -> DMatrixView<'a, T> {
    // SAFETY: see SOUNDNESS: every element the view addresses is an initialised, aligned `T`
    // that nobody writes for `'a`, and for a compact layout nalgebra stays in bounds.
    let storage = unsafe {
        ViewStorage::from_raw_parts(
            ptr,
            (Dyn(compact.nrows), Dyn(compact.ncols)),
            (U1, Dyn(compact.nrows)),
        )
    };
    Matrix::from_data(storage)
}

/// A zero-copy read-only view of a compact column-major 1-d or 2-d tensor as a `DMatrixView`
/// (strides `(1, nrows)`, as a `DMatrix`'s own).
///
/// Accepts row stride 1 and column stride equal to the number of rows (F order, column ranges
/// of it, a `DMatrix`'s export); strides of axes of size 1 do not matter. A 1-d tensor is a
/// column (`n x 1`).
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
/// [`Error::UnsupportedLayout`] for any other layout (row-major, steps, ranges of rows,
/// broadcasting, negative strides: see the [module docs](self) for why and for the
/// alternatives), [`Error::NdimMismatch`] for a tensor that is neither 1-d nor 2-d,
/// [`Error::DimOutOfRange`] for an empty tensor with more than 2^24 rows or columns.
pub fn dmatrix_view<T: Element + Scalar>(
    view: TensorView<'_, T>,
) -> Result<DMatrixView<'_, T>, Error> {
    let compact = Layout::matrix(view.shape(), view.strides())?.compact(COLUMN_MAJOR)?;
    // SAFETY: `view` is a core view living for the returned lifetime; `compact` from its layout.
    Ok(unsafe { matrix_view_parts(view.as_ptr(), compact) })
}

/// A zero-copy read-only view of the transpose of a compact row-major 1-d or 2-d tensor: an
/// `ncols x nrows` `DMatrixView`. This is how a row-major (C-order) tensor becomes a safe
/// nalgebra view without a copy: its transpose is compact column-major.
///
/// Accepts column stride 1 and row stride equal to the number of columns (C order, row ranges of
/// it: the mirror of [`dmatrix_view`]); a 1-d tensor of stride 1 gives a `1 x n` row.
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
/// [`Error::UnsupportedLayout`] for any other layout (column-major, steps, ranges of columns,
/// broadcasting, negative strides), [`Error::NdimMismatch`] for a tensor that is neither 1-d nor
/// 2-d, [`Error::DimOutOfRange`] for an empty tensor with more than 2^24 rows or columns.
pub fn dmatrix_view_transposed<T: Element + Scalar>(
    view: TensorView<'_, T>,
) -> Result<DMatrixView<'_, T>, Error> {
    let compact = Layout::matrix(view.shape(), view.strides())?
        .transposed()
        .compact(ROW_MAJOR)?;
    // SAFETY: `view` is a core view living for the returned lifetime; `compact` from its
    // transposed layout, which addresses element (i, j) at the tensor's element [j, i].
    Ok(unsafe { matrix_view_parts(view.as_ptr(), compact) })
}

/// A mutable nalgebra view of a compact layout.
///
/// # Safety
/// `ptr` comes from a core mutable view that lives for `'a` and is not used again, and `compact`
/// from [`Layout::compact`] of that view's layout (or of its transpose) (see SOUNDNESS).
unsafe fn matrix_view_mut_parts<'a, T: Scalar>(
    ptr: *mut T,
    compact: Compact,
) -> DMatrixViewMut<'a, T> {
    // SAFETY: see SOUNDNESS: every element the view addresses is an initialised, aligned,
    // writable `T`, distinct indices address distinct elements, and nobody else accesses them
    // for `'a` (the core view that held that right is consumed); for a compact layout nalgebra
    // stays in bounds and its iterators hand out each element once.
    let storage = unsafe {
        ViewStorageMut::from_raw_parts(
            ptr,
            (Dyn(compact.nrows), Dyn(compact.ncols)),
            (U1, Dyn(compact.nrows)),
        )
    };
    Matrix::from_data(storage)
}

/// A zero-copy mutable view of a compact column-major 1-d or 2-d tensor as a
/// `DMatrixViewMut`: the mutable [`dmatrix_view`]. Writes land in the tensor's memory.
///
/// Core's [`ManagedTensor::view_mut`] has already refused read-only tensors and overlapping
/// strides; the layouts are then those of [`dmatrix_view`].
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
    let compact = Layout::matrix(view.shape(), view.strides())?.compact(COLUMN_MAJOR)?;
    let ptr = view.as_mut_ptr();
    // SAFETY: `view` is a core mutable view living for the returned lifetime, consumed here;
    // `compact` from its layout.
    Ok(unsafe { matrix_view_mut_parts(ptr, compact) })
}

/// A zero-copy mutable view of the transpose of a compact row-major 1-d or 2-d tensor: the
/// mutable [`dmatrix_view_transposed`]. Writes land in the tensor's memory.
///
/// # Errors
///
/// As for [`dmatrix_view_transposed`].
pub fn dmatrix_view_transposed_mut<T: Element + Scalar>(
    mut view: TensorViewMut<'_, T>,
) -> Result<DMatrixViewMut<'_, T>, Error> {
    let compact = Layout::matrix(view.shape(), view.strides())?
        .transposed()
        .compact(ROW_MAJOR)?;
    let ptr = view.as_mut_ptr();
    // SAFETY: as in `dmatrix_view_mut`, for the transposed layout, which addresses element
    // (i, j) at the tensor's element [j, i].
    Ok(unsafe { matrix_view_mut_parts(ptr, compact) })
}

/// A zero-copy read-only view of a 1-d tensor of stride 1 as a `DVectorView`.
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
    let compact = Layout::vector(view.shape(), view.strides())?.compact(VECTOR_STRIDE)?;
    // SAFETY: see SOUNDNESS: `view` is a core view living for the returned lifetime and its
    // layout is compact (`n x 1`, stride 1).
    let storage = unsafe {
        ViewStorage::from_raw_parts(
            view.as_ptr(),
            (Dyn(compact.nrows), U1),
            (U1, Dyn(compact.nrows)),
        )
    };
    Ok(Matrix::from_data(storage))
}

/// A zero-copy mutable view of a 1-d tensor of stride 1 as a `DVectorViewMut`: the mutable
/// [`dvector_view`].
///
/// # Errors
///
/// As for [`dvector_view`].
pub fn dvector_view_mut<T: Element + Scalar>(
    mut view: TensorViewMut<'_, T>,
) -> Result<DVectorViewMut<'_, T>, Error> {
    let compact = Layout::vector(view.shape(), view.strides())?.compact(VECTOR_STRIDE)?;
    let ptr = view.as_mut_ptr();
    // SAFETY: as in `dvector_view`, for the consumed core mutable view (exclusive, writable).
    let storage = unsafe {
        ViewStorageMut::from_raw_parts(ptr, (Dyn(compact.nrows), U1), (U1, Dyn(compact.nrows)))
    };
    Ok(Matrix::from_data(storage))
}

/// What the `_cow` imports do with a layout that cannot be a safe zero-copy view (any layout but
/// compact column-major: see the [module docs](self)).
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

            /// The elements in an owned matrix: the copy itself, or a new copy of the view.
            ///
            /// # Errors
            ///
            /// [`Error::OutOfMemory`] when the view's elements do not fit in memory (a view
            /// made by nalgebra itself can broadcast a few elements over far more indices).
            pub fn into_owned(self) -> Result<$owned<T>, Error> {
                match self {
                    Self::Borrowed(view) => {
                        let (nrows, ncols) = view.shape_generic();
                        let data = column_major_vec(&view)?;
                        Ok($owned::from_vec_generic(nrows, ncols, data))
                    }
                    Self::Owned(owned) => Ok(owned),
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
/// assert_eq!(m.into_owned()?.as_slice(), &[3, 2, 1]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::NdimMismatch`] for a tensor that is neither 1-d nor 2-d, and
/// [`Error::DimOutOfRange`] for an empty one with more than 2^24 rows or columns, whatever the
/// fallback. With [`Fallback::Fail`], [`Error::UnsupportedLayout`] for a layout [`dmatrix_view`]
/// refuses; with [`Fallback::Copy`], [`Error::OutOfMemory`] when the copy does not fit in memory
/// (a broadcast tensor).
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
/// is neither 1-d nor 2-d, [`Error::DimOutOfRange`] for an empty tensor with more than 2^24 rows
/// or columns.
///
/// # Safety
///
/// nalgebra 0.35 is sound only for compact column-major views, strides `(1, nrows)` (see the
/// [module docs](self)); the caller must keep the returned view, and views derived from it, away
/// from what goes wrong on its layout:
///
/// - Unless its strides are `(1, nrows)` (size-1 axes aside), do not iterate it from the back:
///   no `next_back`, `rev`, `nth_back`, `rfold`, `rfind`, `rposition` on `iter()` (or
///   `iter_mut()`). `MatrixIter::next_back` assumes that each column begins where the previous
///   one ends, and otherwise, once `next` has been called, returns elements outside the view
///   (reading outside the tensor) and, from `iter_mut`, hands out one element twice.
/// - Unless its row stride is 1, do not iterate it at all, nor apply the operations built on
///   iterators (`==`, `clone_owned`, `transpose`, `map`, `sum`, ...), which compute pointers
///   outside the allocation and, for a row stride of 0, read outside it, nor pass it to the
///   BLAS-style routines (`axpy`, `gemv`, `gemm` and the `*` operators built on them), which
///   write outside their output.
///
/// Element access by index (`m[(i, j)]`, `get`) is always sound. Prefer [`dmatrix_view`],
/// [`dmatrix_view_transposed`] or a copy.
pub unsafe fn dmatrix_view_strided<T: Element + Scalar>(
    view: TensorView<'_, T>,
) -> Result<DMatrixView<'_, T, Dyn, Dyn>, Error> {
    let layout = Layout::matrix(view.shape(), view.strides())?;
    let (rs, cs) = layout.non_negative()?;
    // SAFETY: see SOUNDNESS: every element the view addresses is an initialised, aligned
    // `T` that nobody writes for the view's lifetime; the caller keeps the view away from what
    // nalgebra 0.35 mishandles on its layout (this function's contract).
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
/// As for [`dmatrix_view_strided`]: unless the view's strides are `(1, nrows)`, the caller must
/// not iterate it from the back (`iter_mut().next_back()` may hand out one element twice), and
/// unless its row stride is 1, must not iterate it, nor feed it to nalgebra's BLAS-style
/// routines, which for such views read and write outside the tensor.
pub unsafe fn dmatrix_view_strided_mut<T: Element + Scalar>(
    mut view: TensorViewMut<'_, T>,
) -> Result<DMatrixViewMut<'_, T, Dyn, Dyn>, Error> {
    let layout = Layout::matrix(view.shape(), view.strides())?;
    let (rs, cs) = layout.non_negative()?;
    let ptr = view.as_mut_ptr();
    // SAFETY: see SOUNDNESS: the consumed core mutable view gave exclusive, writable access
    // to distinct elements for the view's lifetime; the caller keeps the view away from what
    // nalgebra 0.35 mishandles on its layout (this function's contract).
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
/// As for [`dmatrix_view_strided`]: unless the stride is 1, the caller must not iterate over the
/// view (from either end), nor apply the nalgebra operations built on iterators, nor pass it to
/// nalgebra's BLAS-style routines (`axpy`, `gemv`, ...), which for such views read and write
/// outside the tensor. Element access by index is sound.
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
/// its memory holds), [`Error::DimOutOfRange`] for an empty tensor with more than 2^24 rows or
/// columns (see the [module docs](self)).
pub fn to_dmatrix<T: Element + Scalar>(view: TensorView<'_, T>) -> Result<DMatrix<T>, Error> {
    let layout = Layout::matrix(view.shape(), view.strides())?;
    let (nrows, ncols) = (layout.nrows, layout.ncols);
    if layout.is_vector_like() {
        // At most one row or column: row-major order (core's gather) is column-major order.
        return Ok(DMatrix::from_vec(nrows, ncols, view.to_vec()?));
    }
    // A 2-d tensor from here on. The Vec is allocated first, so that a tensor too large for
    // memory (a broadcast one describes far more elements than its memory holds) is an error.
    let mut data = dlpack_core::try_vec_with_capacity::<T>(view.len())?;
    if layout.compact(COLUMN_MAJOR).is_ok() {
        // SAFETY: see SOUNDNESS: a compact column-major layout's elements are the `view.len()`
        // consecutive, initialised, aligned `T`s from `as_ptr()` (non-empty here), inside one
        // allocation, which nobody writes while `view` lives.
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
    Ok(DMatrix::from_vec(nrows, ncols, data))
}

/// Copies a 1-d tensor of any stride (negative and zero included) into a new `DVector`.
///
/// # Errors
///
/// [`Error::NdimMismatch`] for a tensor that is not 1-d, [`Error::OutOfMemory`] when the copy
/// does not fit in memory.
pub fn to_dvector<T: Element + Scalar>(view: TensorView<'_, T>) -> Result<DVector<T>, Error> {
    Layout::vector(view.shape(), view.strides())?;
    Ok(DVector::from_vec(view.to_vec()?))
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
/// [`Error::OutOfMemory`] when a copy does not fit in memory (a broadcast tensor),
/// [`Error::DimOutOfRange`] for an empty tensor with more than 2^24 rows or columns that is not
/// an exported `DMatrix` coming back. The tensor is consumed: on error it is dropped, so its
/// deleter has run.
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
