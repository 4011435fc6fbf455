//! Import: nalgebra views of DLPack tensors.
//!
//! Every view is made from one of dlpack-core's validated typed views ([`TensorView`],
//! [`TensorViewMut`]): dtype, device, alignment, bounds, read-only state and (for mutable views)
//! overlapping strides were checked there, once. This module only maps the tensor's layout onto
//! nalgebra's.
//!
//! # Which layouts become safe views
//!
//! The safe views ([`view`], [`view_mut`], [`view_transposed`], [`view_transposed_mut`]) take
//! compact column-major layouts only: row stride 1 and column stride equal to the number of
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
//! | compact column-major: F order, its column ranges `f[:, 1:3]`, a `DMatrix`'s export | [`view`] | | [`to_owned`], [`into_owned`] |
//! | compact row-major: C order, its row ranges `c[1:3, :]` | refused | [`view_transposed`] (the transpose, which is compact column-major); `unsafe` [`view_strided`] | [`to_owned`], [`into_owned`], [`view_or_copy`] |
//! | row stride 1 otherwise: column steps `f[:, ::2]`, row ranges `f[1:3, :]`, column broadcast, column windows | refused | `unsafe` [`view_strided`] | as above |
//! | column stride 1 otherwise: row steps `c[::2, :]`, column ranges `c[:, :2]`, row broadcast | refused | `unsafe` [`view_strided`] | as above |
//! | neither stride 1, none negative: `c[::2, ::3]`, scalar broadcast | refused | `unsafe` [`view_strided`] | as above |
//! | a negative stride: `a[::-1]` | refused | none | as above |
//!
//! Vectors follow the same rule: a `DVectorView` takes stride 1 only.
//!
//! # Dimensions
//!
//! Matrix views take 1-d and 2-d tensors; a 1-d tensor of length `n` is the `n x 1` column
//! vector (DLPack has no row/column distinction for 1-d data, and nalgebra's vectors are
//! columns). Vector views take 1-d tensors only. Anything else is [`Error::NdimMismatch`]. The
//! owned matrices of [`into_owned`] and [`to_owned`] follow the same rule
//! ([`OwnedMatrix`](crate::OwnedMatrix)).
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
//! [`to_owned`]: crate::to_owned
//! [`into_owned`]: crate::into_owned

use core::fmt;

use dlpack_core::{
    CheckedTensor, CopyMode, CopyReason, Element, Error, TensorMut, TensorView, TensorViewMut,
};
use nalgebra::{
    DMatrix, DMatrixView, DMatrixViewMut, DVector, DVectorView, DVectorViewMut, Dyn, Matrix,
    Scalar, U1, ViewStorage, ViewStorageMut,
};

use crate::export::column_major_vec;

/// Why [`Error::UnsupportedLayout`] refuses a negative stride.
const NEGATIVE: &str = "nalgebra strides are unsigned, so a view cannot step backwards (copy instead: to_owned, into_owned or view_or_copy)";
/// ... a matrix layout that is not compact column-major.
pub(crate) const COLUMN_MAJOR: &str = "a safe nalgebra view needs compact column-major strides, row stride 1 and column stride equal to the number of rows (nalgebra 0.35's iterators leave other layouts); for row-major data use view_transposed, otherwise the unsafe view_strided or a copy (to_owned, into_owned or view_or_copy)";
/// ... a matrix layout that is not compact row-major, for a transposed view.
const ROW_MAJOR: &str = "a safe transposed view needs compact row-major strides, column stride 1 and row stride equal to the number of columns (nalgebra 0.35's iterators leave other layouts); for column-major data use view, otherwise the unsafe view_strided or a copy (to_owned, into_owned or view_or_copy)";
/// ... a vector stride other than 1.
const VECTOR_STRIDE: &str = "a safe nalgebra vector view needs stride 1 (nalgebra 0.35 mishandles other strides); use the unsafe view_strided or a copy (to_owned, into_owned or view_or_copy)";

/// The most rows or columns an empty matrix import may have (see the module docs).
const MAX_EMPTY_DIM: i64 = 1 << 24;
/// Why [`Error::DimOutOfRange`] refuses a larger one.
const EMPTY_DIM: &str = "the rows or columns of an empty nalgebra matrix, at most 2^24 (nalgebra loops over each of them even when there are no elements)";

/// A 1-d or 2-d tensor's layout as an `nrows x ncols` nalgebra matrix.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub(crate) nrows: usize,
    pub(crate) ncols: usize,
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
    pub(crate) fn matrix(shape: &[i64], strides: &[i64]) -> Result<Self, Error> {
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
    pub(crate) fn vector(shape: &[i64], strides: &[i64]) -> Result<Self, Error> {
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
    pub(crate) fn compact(&self, reason: &'static str) -> Result<Compact, Error> {
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

    /// Whether the matrix has at most one row or column, where column-major order is row-major
    /// order.
    pub(crate) fn is_vector_like(&self) -> bool {
        self.nrows <= 1 || self.ncols <= 1
    }
}

/// The shape of a layout that [`Layout::compact`] accepted: strides `(1, nrows)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Compact {
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

// --- the traits behind the generic functions ---------------------------------------------------

/// A nalgebra view type that [`view`] and [`view_or_copy`] make of a tensor, for every
/// dlpack-core [`Element`] `T`: `DMatrixView<'a, T>` (of a 1-d or 2-d tensor; a 1-d one is a
/// column) and `DVectorView<'a, T>` (of a 1-d tensor). Both have nalgebra's compact strides,
/// `(1, nrows)`. Sealed: implemented for these types only.
pub trait ViewTarget<'a>: crate::sealed::ViewTarget<'a> {
    /// What [`view_or_copy`] returns: [`CowMatrix`] for a `DMatrixView`, [`CowVector`] for a
    /// `DVectorView`.
    type Cow;
}

/// A mutable nalgebra view type that [`view_mut`] makes of a tensor, for every dlpack-core
/// [`Element`] `T`: `DMatrixViewMut<'a, T>` (of a 1-d or 2-d tensor) and `DVectorViewMut<'a, T>`
/// (of a 1-d tensor). Sealed: implemented for these types only.
pub trait ViewMutTarget<'a>: crate::sealed::ViewMutTarget<'a> {}

/// A nalgebra view type with run-time strides that the `unsafe` [`view_strided`] makes of a
/// tensor, for every dlpack-core [`Element`] `T`: `DMatrixView<'a, T, Dyn, Dyn>` (of a 1-d or
/// 2-d tensor) and `DVectorView<'a, T, Dyn, Dyn>` (of a 1-d tensor). Sealed.
pub trait StridedViewTarget<'a>: crate::sealed::StridedViewTarget<'a> {}

/// A mutable nalgebra view type with run-time strides that the `unsafe` [`view_strided_mut`]
/// makes of a tensor: `DMatrixViewMut<'a, T, Dyn, Dyn>` and `DVectorViewMut<'a, T, Dyn, Dyn>`.
/// Sealed.
pub trait StridedViewMutTarget<'a>: crate::sealed::StridedViewMutTarget<'a> {}

// --- safe views --------------------------------------------------------------------------------

/// A zero-copy view of a compact column-major tensor in a nalgebra view type, which the type
/// argument picks: `DMatrixView<'_, T>` for a 1-d or 2-d tensor (a 1-d one is a column), or
/// `DVectorView<'_, T>` for a 1-d one ([`ViewTarget`]).
///
/// Accepts row stride 1 and column stride equal to the number of rows (F order, column ranges
/// of it, a `DMatrix`'s export, any 1-d tensor of stride 1); strides of axes of size 1 do not
/// matter. A `ManagedTensor` or a `BorrowedTensor` is passed as is: both are a
/// [`CheckedTensor`].
///
/// ```
/// use nalgebra::{DMatrix, DMatrixView, DVector, DVectorView};
///
/// let m = DMatrix::from_fn(3, 2, |i, j| (i + 10 * j) as f64);
/// let tensor = dlpack_nalgebra::into_dlpack(m.clone())?;
/// let view = dlpack_nalgebra::view::<DMatrixView<'_, f64>>(&tensor)?;
/// assert_eq!(view, m);
/// assert_eq!(view * DVector::from_element(2, 1.0), DVector::from_vec(vec![10.0, 12.0, 14.0]));
///
/// let tensor = dlpack_core::ManagedTensor::export(vec![1.0f64, 2.0, 3.0])?;
/// let v: DVectorView<'_, f64> = dlpack_nalgebra::view(&tensor)?;
/// assert_eq!(v.norm_squared(), 14.0);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// Those of [`CheckedTensor::view`] (dtype, device, alignment), [`Error::UnsupportedLayout`] for
/// any other layout (row-major, steps, ranges of rows, broadcasting, negative strides: see the
/// [module docs](self) for why and for the alternatives), [`Error::NdimMismatch`] for a tensor
/// that is neither 1-d nor 2-d (not 1-d, for a vector view), [`Error::DimOutOfRange`] for an
/// empty tensor with more than 2^24 rows or columns.
// Always inlined, as the core view and layout check it is made of were before they had one
// entry point: called from two places, it was kept out of line, a few ns per view.
#[inline(always)]
pub fn view<'a, V: ViewTarget<'a>>(tensor: &'a CheckedTensor) -> Result<V, Error> {
    V::view(tensor.view::<V::Elem>()?)
}

/// A zero-copy mutable view of a compact column-major tensor in a nalgebra view type, which the
/// type argument picks: `DMatrixViewMut<'_, T>` or `DVectorViewMut<'_, T>`
/// ([`ViewMutTarget`]). Writes land in the tensor's memory.
///
/// Core's [`ManagedTensor::view_mut`](dlpack_core::ManagedTensor::view_mut) (or [`BorrowedTensor::view_mut`](dlpack_core::BorrowedTensor::view_mut)) has already refused
/// read-only tensors and overlapping strides; the layouts are then those of [`view`]. A layout
/// that cannot be viewed is always refused: writes to a copy would be lost.
///
/// ```
/// use nalgebra::{DMatrix, DMatrixViewMut};
///
/// let mut tensor = dlpack_nalgebra::into_dlpack(DMatrix::<i64>::zeros(2, 2))?;
/// let mut view = dlpack_nalgebra::view_mut::<DMatrixViewMut<'_, i64>>(&mut tensor)?;
/// view[(1, 0)] = 7;
/// assert_eq!(tensor.view::<i64>()?.get(&[1, 0]), Some(&7));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// Those of [`ManagedTensor::view_mut`](dlpack_core::ManagedTensor::view_mut) ([`Error::ReadOnly`], [`Error::OverlappingStrides`],
/// ...), and those of [`view`].
#[inline]
pub fn view_mut<'a, V: ViewMutTarget<'a>>(tensor: &'a mut impl TensorMut) -> Result<V, Error> {
    V::view_mut(tensor.view_mut::<V::Elem>()?)
}

/// A zero-copy view of the transpose of a compact row-major 1-d or 2-d tensor: an
/// `ncols x nrows` `DMatrixView`. This is how a row-major (C-order) tensor becomes a safe
/// nalgebra view without a copy: its transpose is compact column-major.
///
/// Accepts column stride 1 and row stride equal to the number of columns (C order, row ranges of
/// it: the mirror of [`view`]); a 1-d tensor of stride 1 gives a `1 x n` row.
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
/// use nalgebra::DMatrixView;
///
/// // A row-major 2 x 3 tensor, as NumPy or ndarray export one.
/// let tensor = ManagedTensor::export(RowMajor(vec![0.0f32, 1.0, 2.0, 10.0, 11.0, 12.0]))?;
/// assert_eq!(tensor.strides(), &[3, 1]);
/// assert!(dlpack_nalgebra::view::<DMatrixView<'_, f32>>(&tensor).is_err());
///
/// let t = dlpack_nalgebra::view_transposed::<f32>(&tensor)?;
/// assert_eq!(t.shape(), (3, 2));
/// assert_eq!(t[(2, 1)], 12.0); // element [1, 2] of the tensor
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// Those of [`CheckedTensor::view`], [`Error::UnsupportedLayout`] for any other layout
/// (column-major, steps, ranges of columns, broadcasting, negative strides),
/// [`Error::NdimMismatch`] for a tensor that is neither 1-d nor 2-d, [`Error::DimOutOfRange`]
/// for an empty tensor with more than 2^24 rows or columns.
#[inline]
pub fn view_transposed<T: Element + Scalar>(
    tensor: &CheckedTensor,
) -> Result<DMatrixView<'_, T>, Error> {
    let view = tensor.view::<T>()?;
    let compact = Layout::matrix(view.shape(), view.strides())?
        .transposed()
        .compact(ROW_MAJOR)?;
    // SAFETY: `view` is a core view living as long as the returned one; `compact` from its
    // transposed layout, which addresses element (i, j) at the tensor's element [j, i].
    Ok(unsafe { matrix_view_parts(view.as_ptr(), compact) })
}

/// A zero-copy mutable view of the transpose of a compact row-major 1-d or 2-d tensor: the
/// mutable [`view_transposed`]. Writes land in the tensor's memory.
///
/// ```
/// # use dlpack_core::{Export, ExportDesc, ManagedTensor};
/// # struct RowMajor(Vec<i32>);
/// # // SAFETY: a 2 x 2 row-major layout over the Vec's 4 elements.
/// # unsafe impl Export for RowMajor {
/// #     fn ndim(&self) -> usize { 2 }
/// #     fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
/// #         shape.copy_from_slice(&[2, 2]);
/// #         strides.copy_from_slice(&[2, 1]);
/// #         ExportDesc::host(self.0.as_mut_ptr())
/// #     }
/// # }
/// let mut tensor = ManagedTensor::export(RowMajor(vec![1, 2, 3, 4]))?;
/// let mut t = dlpack_nalgebra::view_transposed_mut::<i32>(&mut tensor)?;
/// t[(1, 0)] = 20; // element [0, 1] of the tensor
/// assert_eq!(tensor.view::<i32>()?.to_vec()?, [1, 20, 3, 4]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// Those of [`ManagedTensor::view_mut`](dlpack_core::ManagedTensor::view_mut), and those of [`view_transposed`].
#[inline]
pub fn view_transposed_mut<T: Element + Scalar>(
    tensor: &mut impl TensorMut,
) -> Result<DMatrixViewMut<'_, T>, Error> {
    let mut view = tensor.view_mut::<T>()?;
    let compact = Layout::matrix(view.shape(), view.strides())?
        .transposed()
        .compact(ROW_MAJOR)?;
    let ptr = view.as_mut_ptr();
    // SAFETY: `view` is a core mutable view living as long as the returned one, consumed here;
    // `compact` from its transposed layout, which addresses element (i, j) at the tensor's
    // element [j, i].
    Ok(unsafe { matrix_view_mut_parts(ptr, compact) })
}

impl<'a, T: Element + Scalar> crate::sealed::ViewTarget<'a> for DMatrixView<'a, T> {
    type Elem = T;

    #[inline]
    fn view(view: TensorView<'a, T>) -> Result<Self, Error> {
        let compact = Layout::matrix(view.shape(), view.strides())?.compact(COLUMN_MAJOR)?;
        // SAFETY: `view` is a core view living for `'a`; `compact` from its layout.
        Ok(unsafe { matrix_view_parts(view.as_ptr(), compact) })
    }

    fn view_or_copy(
        tensor: &'a CheckedTensor,
        mode: CopyMode,
    ) -> Result<<Self as ViewTarget<'a>>::Cow, Error> {
        cow::<Self, DMatrix<T>, _>(tensor, mode, CowMatrix::Borrowed, CowMatrix::Owned)
    }
}

impl<'a, T: Element + Scalar> ViewTarget<'a> for DMatrixView<'a, T> {
    type Cow = CowMatrix<'a, T>;
}

impl<'a, T: Element + Scalar> crate::sealed::ViewTarget<'a> for DVectorView<'a, T> {
    type Elem = T;

    #[inline]
    fn view(view: TensorView<'a, T>) -> Result<Self, Error> {
        let compact = Layout::vector(view.shape(), view.strides())?.compact(VECTOR_STRIDE)?;
        // SAFETY: see SOUNDNESS: `view` is a core view living for `'a` and its layout is
        // compact (`n x 1`, stride 1).
        let storage = unsafe {
            ViewStorage::from_raw_parts(
                view.as_ptr(),
                (Dyn(compact.nrows), U1),
                (U1, Dyn(compact.nrows)),
            )
        };
        Ok(Matrix::from_data(storage))
    }

    fn view_or_copy(
        tensor: &'a CheckedTensor,
        mode: CopyMode,
    ) -> Result<<Self as ViewTarget<'a>>::Cow, Error> {
        cow::<Self, DVector<T>, _>(tensor, mode, CowVector::Borrowed, CowVector::Owned)
    }
}

impl<'a, T: Element + Scalar> ViewTarget<'a> for DVectorView<'a, T> {
    type Cow = CowVector<'a, T>;
}

impl<'a, T: Element + Scalar> crate::sealed::ViewMutTarget<'a> for DMatrixViewMut<'a, T> {
    type Elem = T;

    #[inline]
    fn view_mut(mut view: TensorViewMut<'a, T>) -> Result<Self, Error> {
        let compact = Layout::matrix(view.shape(), view.strides())?.compact(COLUMN_MAJOR)?;
        let ptr = view.as_mut_ptr();
        // SAFETY: `view` is a core mutable view living for `'a`, consumed here; `compact` from
        // its layout.
        Ok(unsafe { matrix_view_mut_parts(ptr, compact) })
    }
}

impl<'a, T: Element + Scalar> ViewMutTarget<'a> for DMatrixViewMut<'a, T> {}

impl<'a, T: Element + Scalar> crate::sealed::ViewMutTarget<'a> for DVectorViewMut<'a, T> {
    type Elem = T;

    #[inline]
    fn view_mut(mut view: TensorViewMut<'a, T>) -> Result<Self, Error> {
        let compact = Layout::vector(view.shape(), view.strides())?.compact(VECTOR_STRIDE)?;
        let ptr = view.as_mut_ptr();
        // SAFETY: see SOUNDNESS: the consumed core mutable view gave exclusive, writable access
        // to distinct elements for `'a`, and the layout is compact (`n x 1`, stride 1).
        let storage = unsafe {
            ViewStorageMut::from_raw_parts(ptr, (Dyn(compact.nrows), U1), (U1, Dyn(compact.nrows)))
        };
        Ok(Matrix::from_data(storage))
    }
}

impl<'a, T: Element + Scalar> ViewMutTarget<'a> for DVectorViewMut<'a, T> {}

// --- view or copy ------------------------------------------------------------------------------

/// A view of `tensor` as `V`, or a copy of it as `O` where `mode` allows one: the body of
/// [`view_or_copy`], with the constructors of the view type's `Cow`.
fn cow<'a, V, O, C>(
    tensor: &'a CheckedTensor,
    mode: CopyMode,
    borrowed: impl FnOnce(V) -> C,
    owned: impl FnOnce(O) -> C,
) -> Result<C, Error>
where
    V: crate::sealed::ViewTarget<'a>,
    O: crate::OwnedMatrix,
{
    if mode != CopyMode::Always {
        match V::view(tensor.view::<V::Elem>()?) {
            Ok(view) => return Ok(borrowed(view)),
            Err(Error::UnsupportedLayout { .. }) => {
                mode.copy(CopyReason::Layout)?;
            }
            Err(e) => return Err(e),
        }
    }
    crate::to_owned::<O>(tensor).map(owned)
}

/// [`view`], or a copy where it refuses the layout and `mode` allows one: a [`CowMatrix`] for
/// `V = DMatrixView<'_, T>`, a [`CowVector`] for `V = DVectorView<'_, T>`.
///
/// - [`CopyMode::IfNeeded`] (the default): the view, or a copy of a layout the view refuses
///   (steps, ranges of rows, broadcasting, negative strides, row-major order);
/// - [`CopyMode::Never`]: the view, or [`Error::CopyRefused`] with [`CopyReason::Layout`]
///   ([`view`] says which stride);
/// - [`CopyMode::Always`]: a copy.
///
/// Mutable views have no such choice: writes to a copy would be silently lost, so
/// [`view_mut`] always fails instead.
///
/// ```
/// use dlpack_core::{CopyMode, CopyReason, Error};
/// use nalgebra::DMatrixView;
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
/// let never = dlpack_nalgebra::view_or_copy::<DMatrixView<'_, i32>>(&tensor, CopyMode::Never);
/// assert_eq!(never.unwrap_err(), Error::CopyRefused { reason: CopyReason::Layout });
///
/// let m = dlpack_nalgebra::view_or_copy::<DMatrixView<'_, i32>>(&tensor, CopyMode::IfNeeded)?;
/// assert!(!m.is_borrowed());
/// assert_eq!(m.into_owned()?.as_slice(), &[3, 2, 1]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// Those of [`view`] but [`Error::UnsupportedLayout`], whatever the mode; with
/// [`CopyMode::Never`], [`Error::CopyRefused`] where [`view`] refuses the layout; when copying,
/// those of [`to_owned`](crate::to_owned), such as [`Error::OutOfMemory`] when the copy does not
/// fit in memory (a broadcast tensor).
pub fn view_or_copy<'a, V: ViewTarget<'a>>(
    tensor: &'a CheckedTensor,
    mode: CopyMode,
) -> Result<V::Cow, Error> {
    V::view_or_copy(tensor, mode)
}

macro_rules! cow {
    ($(#[$doc:meta])* $name:ident, $view:ident, $owned:ident) => {
        $(#[$doc])*
        pub enum $name<'a, T: Scalar> {
            /// A zero-copy view of the tensor.
            Borrowed($view<'a, T>),
            /// A copy, made because the tensor's layout cannot be viewed or the caller asked for
            /// one ([`CopyMode::Always`]).
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
    /// A matrix import that is a zero-copy view when it can be and a copy when it must or the
    /// caller asks for one: what [`view_or_copy`] returns for a `DMatrixView`.
    CowMatrix,
    DMatrixView,
    DMatrix
);

cow!(
    /// A vector import that is a zero-copy view when it can be and a copy when it must or the
    /// caller asks for one: what [`view_or_copy`] returns for a `DVectorView`.
    CowVector,
    DVectorView,
    DVector
);

// --- strided views -----------------------------------------------------------------------------

/// A zero-copy view of a tensor with its own strides, whatever they are unless negative, in a
/// nalgebra view type with run-time strides, which the type argument picks:
/// `DMatrixView<'_, T, Dyn, Dyn>` for a 1-d or 2-d tensor, `DVectorView<'_, T, Dyn, Dyn>` for a
/// 1-d one ([`StridedViewTarget`]). A row-major tensor becomes a view with strides `(ncols, 1)`.
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
/// use nalgebra::{DMatrixView, Dyn};
///
/// assert_eq!((tensor.shape(), tensor.strides()), (&[2, 3][..], &[3, 1][..]));
/// // SAFETY: the view is only indexed, never iterated, compared or multiplied.
/// let m = unsafe { dlpack_nalgebra::view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor)? };
/// assert_eq!((m.shape(), m.strides()), ((2, 3), (3, 1)));
/// assert_eq!(m[(1, 2)], 12.0);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// Those of [`CheckedTensor::view`], [`Error::UnsupportedLayout`] for a negative stride,
/// [`Error::NdimMismatch`] for a tensor that is neither 1-d nor 2-d (not 1-d, for a vector view),
/// [`Error::DimOutOfRange`] for an empty tensor with more than 2^24 rows or columns.
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
/// Element access by index (`m[(i, j)]`, `get`) is always sound. Prefer [`view`],
/// [`view_transposed`] or a copy.
#[inline]
pub unsafe fn view_strided<'a, V: StridedViewTarget<'a>>(
    tensor: &'a CheckedTensor,
) -> Result<V, Error> {
    let view = tensor.view::<V::Elem>()?;
    // SAFETY: forwarded contract (this function's).
    unsafe { V::view_strided(view) }
}

/// A zero-copy mutable view of a tensor with its own strides (except negative ones): the
/// mutable [`view_strided`], as `DMatrixViewMut<'_, T, Dyn, Dyn>` or
/// `DVectorViewMut<'_, T, Dyn, Dyn>` ([`StridedViewMutTarget`]). Writes land in the tensor's
/// memory.
///
/// # Errors
///
/// Those of [`ManagedTensor::view_mut`](dlpack_core::ManagedTensor::view_mut) ([`Error::ReadOnly`], [`Error::OverlappingStrides`],
/// ...), and those of [`view_strided`].
///
/// # Safety
///
/// As for [`view_strided`]: unless the view's strides are `(1, nrows)`, the caller must not
/// iterate it from the back (`iter_mut().next_back()` may hand out one element twice), and
/// unless its row stride is 1, must not iterate it, nor feed it to nalgebra's BLAS-style
/// routines, which for such views read and write outside the tensor.
#[inline]
pub unsafe fn view_strided_mut<'a, V: StridedViewMutTarget<'a>>(
    tensor: &'a mut impl TensorMut,
) -> Result<V, Error> {
    let view = tensor.view_mut::<V::Elem>()?;
    // SAFETY: forwarded contract (this function's).
    unsafe { V::view_strided_mut(view) }
}

impl<'a, T: Element + Scalar> crate::sealed::StridedViewTarget<'a>
    for DMatrixView<'a, T, Dyn, Dyn>
{
    type Elem = T;

    unsafe fn view_strided(view: TensorView<'a, T>) -> Result<Self, Error> {
        let layout = Layout::matrix(view.shape(), view.strides())?;
        let (rs, cs) = layout.non_negative()?;
        // SAFETY: see SOUNDNESS: every element the view addresses is an initialised, aligned
        // `T` that nobody writes for `'a`; the caller keeps the view away from what nalgebra
        // 0.35 mishandles on its layout (`view_strided`'s contract).
        let storage = unsafe {
            ViewStorage::from_raw_parts(
                view.as_ptr(),
                (Dyn(layout.nrows), Dyn(layout.ncols)),
                (Dyn(rs), Dyn(cs)),
            )
        };
        Ok(Matrix::from_data(storage))
    }
}

impl<'a, T: Element + Scalar> StridedViewTarget<'a> for DMatrixView<'a, T, Dyn, Dyn> {}

impl<'a, T: Element + Scalar> crate::sealed::StridedViewTarget<'a>
    for DVectorView<'a, T, Dyn, Dyn>
{
    type Elem = T;

    unsafe fn view_strided(view: TensorView<'a, T>) -> Result<Self, Error> {
        let layout = Layout::vector(view.shape(), view.strides())?;
        let (rs, cs) = layout.non_negative()?;
        // SAFETY: as for the matrix view, for a one-column layout.
        let storage = unsafe {
            ViewStorage::from_raw_parts(view.as_ptr(), (Dyn(layout.nrows), U1), (Dyn(rs), Dyn(cs)))
        };
        Ok(Matrix::from_data(storage))
    }
}

impl<'a, T: Element + Scalar> StridedViewTarget<'a> for DVectorView<'a, T, Dyn, Dyn> {}

impl<'a, T: Element + Scalar> crate::sealed::StridedViewMutTarget<'a>
    for DMatrixViewMut<'a, T, Dyn, Dyn>
{
    type Elem = T;

    unsafe fn view_strided_mut(mut view: TensorViewMut<'a, T>) -> Result<Self, Error> {
        let layout = Layout::matrix(view.shape(), view.strides())?;
        let (rs, cs) = layout.non_negative()?;
        let ptr = view.as_mut_ptr();
        // SAFETY: see SOUNDNESS: the consumed core mutable view gave exclusive, writable access
        // to distinct elements for `'a`; the caller keeps the view away from what nalgebra 0.35
        // mishandles on its layout (`view_strided_mut`'s contract).
        let storage = unsafe {
            ViewStorageMut::from_raw_parts(
                ptr,
                (Dyn(layout.nrows), Dyn(layout.ncols)),
                (Dyn(rs), Dyn(cs)),
            )
        };
        Ok(Matrix::from_data(storage))
    }
}

impl<'a, T: Element + Scalar> StridedViewMutTarget<'a> for DMatrixViewMut<'a, T, Dyn, Dyn> {}

impl<'a, T: Element + Scalar> crate::sealed::StridedViewMutTarget<'a>
    for DVectorViewMut<'a, T, Dyn, Dyn>
{
    type Elem = T;

    unsafe fn view_strided_mut(mut view: TensorViewMut<'a, T>) -> Result<Self, Error> {
        let layout = Layout::vector(view.shape(), view.strides())?;
        let (rs, cs) = layout.non_negative()?;
        let ptr = view.as_mut_ptr();
        // SAFETY: as for the mutable matrix view, for a one-column layout.
        let storage = unsafe {
            ViewStorageMut::from_raw_parts(ptr, (Dyn(layout.nrows), U1), (Dyn(rs), Dyn(cs)))
        };
        Ok(Matrix::from_data(storage))
    }
}

impl<'a, T: Element + Scalar> StridedViewMutTarget<'a> for DVectorViewMut<'a, T, Dyn, Dyn> {}
