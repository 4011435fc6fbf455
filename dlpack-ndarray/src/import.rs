//! Import: DLPack tensors as ndarray views and arrays.
//!
//! Every view here is made from dlpack-core's validated views ([`CheckedTensor::view`],
//! [`ManagedTensor::view_mut`]), which have already checked the dtype, the device, the alignment,
//! the span of every reachable byte and, for mutable access, the read-only flag, overlapping
//! strides and data over the tensor's own description. What is left is ndarray's own form: a
//! pointer to the lowest address with non-negative strides, then
//! [`invert_axis`](ndarray::ArrayBase::invert_axis) for every axis that runs backwards.

use core::fmt;

use dlpack_core::{
    CheckedTensor, CopyMode, CopyReason, Element, Error, ManagedTensor, Refused, TensorMut,
    TensorView, TensorViewMut, Transfer,
};
use ndarray::{
    Array, ArrayView, ArrayViewMut, Axis, Dimension, Ix0, Ix1, Ix2, Ix3, Ix4, Ix5, Ix6, IxDyn,
    RawArrayView, RawArrayViewMut, ShapeBuilder, StrideShape,
};

use crate::{OwnedArray, SharedArray};

/// Refuses an ndim that `D` cannot hold.
#[inline]
fn check_ndim<D: Dimension>(found: usize) -> Result<(), Error> {
    match D::NDIM {
        Some(expected) if expected != found => Err(Error::NdimMismatch { found, expected }),
        _ => Ok(()),
    }
}

/// A tensor's shape as an ndarray dimension, checked against what ndarray can index: every size
/// must fit `usize` and the product of the non-zero sizes must not exceed `isize::MAX` (a
/// broadcast or empty tensor can describe more elements than memory holds).
fn dim_of<D: Dimension>(shape: &[i64]) -> Result<D, Error> {
    check_ndim::<D>(shape.len())?;
    let mut dim = D::zeros(shape.len());
    let mut product: usize = 1;
    // One slice for all the writes (indexing an `IxDyn` checks its storage every time).
    let sizes = dim.slice_mut();
    for (axis, (&size, slot)) in shape.iter().zip(sizes.iter_mut()).enumerate() {
        let d = usize::try_from(size).map_err(|_| Error::DimOutOfRange {
            axis,
            value: size,
            target: "usize",
        })?;
        if d != 0 {
            product = product
                .checked_mul(d)
                .filter(|&p| isize::try_from(p).is_ok())
                .ok_or_else(|| too_many_elements(shape))?;
        }
        *slot = d;
    }
    Ok(dim)
}

/// The error for a shape of more elements along its non-empty axes than ndarray can index.
#[cold]
fn too_many_elements(shape: &[i64]) -> Error {
    Error::Overflow {
        what: format!(
            "shape {shape:?} has more than isize::MAX elements along its non-empty axes, more than ndarray can index"
        ),
    }
}

/// The sizes of `dim`, as a DLPack shape (for error messages).
fn shape_of<D: Dimension>(dim: &D) -> Vec<i64> {
    (0..dim.ndim())
        .map(|axis| i64::try_from(dim[axis]).unwrap_or(i64::MAX))
        .collect()
}

/// Builds an array of shape `dim` from row-major elements.
fn array_from_vec<T: Element, D: Dimension>(
    dim: D,
    elements: Vec<T>,
) -> Result<Array<T, D>, Error> {
    if elements.len() != dim.size() {
        let found = vec![i64::try_from(elements.len()).unwrap_or(i64::MAX)];
        return Err(Error::ShapeMismatch {
            found,
            expected: shape_of(&dim),
        });
    }
    // SAFETY: `elements` holds exactly as many elements as `dim` has (checked above), whose
    // product `dim_of` kept within isize::MAX, in row-major order, as a standard-layout array of
    // this shape reads them.
    Ok(unsafe { Array::from_shape_vec_unchecked(dim, elements) })
}

/// The four ndarray view types an imported tensor becomes, built from ndarray's form of a layout:
/// a pointer to the lowest-addressed element and non-negative strides, then
/// [`invert_axis`](ndarray::ArrayBase::invert_axis) for every axis that runs backwards.
trait NdView<T, D: Dimension>: Sized {
    /// ndarray's `from_shape_ptr` of this type.
    ///
    /// # Safety
    ///
    /// That of ndarray's `from_shape_ptr` of this type.
    unsafe fn from_shape_ptr(shape: StrideShape<D>, lowest: *mut T) -> Self;

    /// Reverses an axis: the view's pointer moves to the axis' other end, its stride changes
    /// sign.
    fn invert_axis(&mut self, axis: Axis);
}

impl<'a, T, D: Dimension> NdView<T, D> for ArrayView<'a, T, D> {
    #[inline(always)]
    unsafe fn from_shape_ptr(shape: StrideShape<D>, lowest: *mut T) -> Self {
        // SAFETY: the caller's.
        unsafe { ArrayView::from_shape_ptr(shape, lowest) }
    }
    #[inline]
    fn invert_axis(&mut self, axis: Axis) {
        ndarray::ArrayBase::invert_axis(self, axis);
    }
}

impl<'a, T, D: Dimension> NdView<T, D> for ArrayViewMut<'a, T, D> {
    #[inline(always)]
    unsafe fn from_shape_ptr(shape: StrideShape<D>, lowest: *mut T) -> Self {
        // SAFETY: the caller's.
        unsafe { ArrayViewMut::from_shape_ptr(shape, lowest) }
    }
    #[inline]
    fn invert_axis(&mut self, axis: Axis) {
        ndarray::ArrayBase::invert_axis(self, axis);
    }
}

impl<T, D: Dimension> NdView<T, D> for RawArrayView<T, D> {
    #[inline(always)]
    unsafe fn from_shape_ptr(shape: StrideShape<D>, lowest: *mut T) -> Self {
        // SAFETY: the caller's.
        unsafe { RawArrayView::from_shape_ptr(shape, lowest) }
    }
    #[inline]
    fn invert_axis(&mut self, axis: Axis) {
        ndarray::ArrayBase::invert_axis(self, axis);
    }
}

impl<T, D: Dimension> NdView<T, D> for RawArrayViewMut<T, D> {
    #[inline(always)]
    unsafe fn from_shape_ptr(shape: StrideShape<D>, lowest: *mut T) -> Self {
        // SAFETY: the caller's.
        unsafe { RawArrayViewMut::from_shape_ptr(shape, lowest) }
    }
    #[inline]
    fn invert_axis(&mut self, axis: Axis) {
        ndarray::ArrayBase::invert_axis(self, axis);
    }
}

/// The ndarray view `V` of a validated core view: its first element, shape, strides and number
/// of elements.
///
/// Every non-empty tensor gets its own strides (their magnitudes), row-major ones included:
/// building them from the tensor is cheaper than ndarray's computing its default strides for an
/// `IxDyn` and than asking whether the tensor is row-major first. The dimension values are built
/// once, in place, and go straight into the view: this is the whole cost of a view beyond core's
/// (`docs/benchmarks.md`, the ndarray view import).
///
/// # Safety
///
/// `first`, `shape` and `strides` are those of a core view that has `len` elements: `first` is
/// aligned for `T` and every element the view reaches lies in one allocation whose span is at
/// most `isize::MAX` bytes (for an empty view, `first` is any aligned non-NULL pointer); the
/// caller may use those elements as `V` does (read them for a read-only view; read and write
/// them, with no two indices on one element, for a mutable one) for `V`'s lifetime.
#[inline(always)]
unsafe fn nd_view<T, D: Dimension, V: NdView<T, D>>(
    first: *mut T,
    shape: &[i64],
    strides: &[i64],
    len: usize,
) -> Result<V, Error> {
    check_ndim::<D>(shape.len())?;
    if len == 0 {
        // SAFETY: the caller's.
        return unsafe { empty_view(first, shape) };
    }
    // Every size is at least 1, so the product of the non-zero sizes is `len`, and every size is
    // at most `len`: one comparison checks what ndarray needs of the shape.
    if isize::try_from(len).is_err() {
        return Err(too_many_elements(shape));
    }
    let mut dim = D::zeros(shape.len());
    // A clone of the zeros is cheaper than building them again (an `IxDyn` copies them in).
    let mut magnitudes = dim.clone();
    let mut negative = false;
    // One slice for each (indexing an `IxDyn` checks its storage every time).
    for (((&size, &stride), d), m) in shape
        .iter()
        .zip(strides)
        .zip(dim.slice_mut())
        .zip(magnitudes.slice_mut())
    {
        // Core validated every size as non-negative; here each is between 1 and `len`.
        *d = size as usize;
        // Validation bounded (size - 1) * |stride| elements by the tensor's span, at most
        // isize::MAX bytes, so on an axis longer than 1 the magnitude fits isize. An axis of
        // size 1 never moves the pointer: any stride serves it equally, and the cap keeps it a
        // non-negative isize.
        *m = isize::try_from(stride.unsigned_abs())
            .unwrap_or(isize::MAX)
            .unsigned_abs();
        negative |= stride < 0;
    }
    if negative {
        // SAFETY: the caller's; `dim` and `magnitudes` are the shape and the strides' magnitudes.
        return unsafe { reversed_view(first, dim, magnitudes, shape, strides) };
    }
    // SAFETY: with no negative stride, `first` is the lowest-addressed element: non-NULL and
    // aligned. Moving from it along the strides reaches exactly the view's elements, all in one
    // allocation whose span is at most isize::MAX bytes (so no offset overflows), and the product
    // of the sizes is `len`, at most isize::MAX (checked above). The caller vouches for the
    // access `V` makes.
    Ok(unsafe { V::from_shape_ptr(dim.strides(magnitudes), first) })
}

/// [`nd_view`] of a tensor without elements: ndarray's default layout for its shape (its strides
/// reach nothing).
///
/// # Safety
///
/// `first` is aligned for `T` and non-NULL.
#[cold]
#[inline(never)]
unsafe fn empty_view<T, D: Dimension, V: NdView<T, D>>(
    first: *mut T,
    shape: &[i64],
) -> Result<V, Error> {
    let dim = dim_of::<D>(shape)?;
    // SAFETY: no element, no pointer moves; `first` is non-NULL and aligned, and `dim_of`
    // checked the product of the non-zero sizes against isize::MAX.
    Ok(unsafe { V::from_shape_ptr(dim.into(), first) })
}

/// [`nd_view`] of a tensor with negative strides: the view starts at the lowest-addressed
/// element with the strides' magnitudes, and the axes that run backwards are inverted.
///
/// # Safety
///
/// That of [`nd_view`], for a non-empty tensor of at most isize::MAX elements whose sizes are
/// `dim` and the magnitudes of whose strides are `magnitudes`.
#[cold]
#[inline(never)]
unsafe fn reversed_view<T, D: Dimension, V: NdView<T, D>>(
    first: *mut T,
    dim: D,
    magnitudes: D,
    shape: &[i64],
    strides: &[i64],
) -> Result<V, Error> {
    // Elements from the first element to the lowest-addressed one: the sum of
    // `(size - 1) * stride` over the axes that run backwards, one term of the validated span.
    let mut lowest: isize = 0;
    for (&size, &stride) in shape.iter().zip(strides) {
        if stride < 0 {
            lowest = (size - 1)
                .checked_mul(stride)
                .and_then(|step| isize::try_from(step).ok())
                .and_then(|step| lowest.checked_add(step))
                .ok_or_else(|| Error::Overflow {
                    what: format!("the backward reach of strides {strides:?} for shape {shape:?}"),
                })?;
        }
    }
    let lowest_ptr = first.wrapping_offset(lowest);
    // SAFETY: `lowest_ptr` is the view's lowest-addressed element, inside the allocation, so
    // non-NULL and aligned; moving from it along the strides' magnitudes reaches exactly the
    // view's elements (as in `nd_view`).
    let mut view = unsafe { V::from_shape_ptr(dim.strides(magnitudes), lowest_ptr) };
    for (axis, &stride) in strides.iter().enumerate() {
        if stride < 0 {
            view.invert_axis(Axis(axis));
        }
    }
    Ok(view)
}

/// The ndarray form of a core read-only view, for the same lifetime.
#[inline(always)]
fn array_view<'a, T: Element, D: Dimension>(
    view: TensorView<'a, T>,
) -> Result<ArrayView<'a, T, D>, Error> {
    // SAFETY: the parts of a core view, which core validated (aligned, every element inside one
    // allocation of at most isize::MAX bytes); `TensorView<'a, T>` guarantees its elements to be
    // readable, initialised, valid `T`s that nobody writes for `'a`.
    unsafe {
        nd_view(
            view.as_ptr().cast_mut(),
            view.shape(),
            view.strides(),
            view.len(),
        )
    }
}

/// The ndarray form of a core mutable view, for the same lifetime.
#[inline(always)]
fn array_view_mut<'a, T: Element, D: Dimension>(
    mut view: TensorViewMut<'a, T>,
) -> Result<ArrayViewMut<'a, T, D>, Error> {
    let first = view.as_mut_ptr();
    // SAFETY: as in `array_view`; `TensorViewMut<'a, T>` also guarantees its elements to be
    // writable, accessed by nobody else for `'a`, and no two indices to share one; `view`
    // itself is dropped here, so the ndarray view is the only way to them.
    unsafe { nd_view(first, view.shape(), view.strides(), view.len()) }
}

/// A read-only ndarray view of an imported tensor's memory, without a copy.
///
/// `tensor` is a [`CheckedTensor`]: a [`ManagedTensor`] or a [`BorrowedTensor`](dlpack_core::BorrowedTensor) (both
/// dereference to it). `D` is any ndarray dimensionality: fixed (`Ix0` ... `Ix6`, where the
/// tensor's ndim must match) or `IxDyn`. Negative strides (NumPy's `a[::-1]`) give an ndarray
/// view with negative strides over the same memory; zero strides (broadcast) a view with zero
/// strides.
///
/// ```
/// use dlpack_core::{Error, ManagedTensor};
/// use dlpack_ndarray::view;
/// use ndarray::{ArrayView2, ArrayViewD, Ix2};
///
/// let tensor = ManagedTensor::export(vec![1u8, 2, 3, 4, 5, 6])?; // a 1-d tensor
/// let flat: ArrayViewD<u8> = view(&tensor)?;
/// assert_eq!(flat.shape(), &[6]);
/// let err = view::<u8, Ix2>(&tensor).unwrap_err();
/// assert_eq!(err, Error::NdimMismatch { found: 1, expected: 2 });
/// # Ok::<(), Error>(())
/// ```
///
/// # Errors
///
/// [`Error::NdimMismatch`] if `D` is a fixed dimensionality other than the tensor's; everything
/// [`CheckedTensor::view`] checks: [`Error::DataTypeMismatch`] if the dtype is not `T`'s,
/// [`Error::NotHostAccessible`] if the host cannot read the memory, [`Error::Misaligned`] if the
/// first element is not aligned (and, for `bool`, the values); [`Error::Overflow`] for a shape of
/// more than `isize::MAX` elements along its non-empty axes, which ndarray cannot index (a
/// broadcast tensor can describe that many).
#[inline]
pub fn view<T: Element, D: Dimension>(
    tensor: &CheckedTensor,
) -> Result<ArrayView<'_, T, D>, Error> {
    check_ndim::<D>(tensor.ndim())?;
    array_view(tensor.view::<T>()?)
}

/// A mutable ndarray view of an imported tensor's memory, without a copy.
///
/// `tensor` is a [`ManagedTensor`] or a [`BorrowedTensor`](dlpack_core::BorrowedTensor), borrowed mutably for the view's
/// life; `D` as for [`view`].
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_ndarray::view_mut;
/// use ndarray::Ix1;
///
/// let mut tensor = ManagedTensor::export(vec![1i32, 2, 3])?;
/// let mut v = view_mut::<i32, Ix1>(&mut tensor)?;
/// v *= 10;
/// assert_eq!(tensor.to_vec::<i32>()?, [10, 20, 30]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// As for [`view`], and [`Error::ReadOnly`] for a read-only tensor,
/// [`Error::OverlappingStrides`] for strides under which two indices reach the same element (a
/// broadcast tensor, say), [`Error::DataOverlapsDescription`] for data that overlaps the
/// tensor's own struct, shape or strides.
#[inline]
pub fn view_mut<T: Element, D: Dimension>(
    tensor: &mut impl TensorMut,
) -> Result<ArrayViewMut<'_, T, D>, Error> {
    check_ndim::<D>(tensor.ndim())?;
    array_view_mut(tensor.view_mut::<T>()?)
}

/// Copies an imported tensor's elements into a new standard-layout (C order) array.
///
/// For a tensor held by reference, a [`BorrowedTensor`](dlpack_core::BorrowedTensor) in particular; a [`ManagedTensor`] that
/// is no longer needed goes to [`into_owned`], which takes its memory over without a copy when
/// it can. Unlike `view(tensor)?.to_owned()`, the copy's allocation may fail without aborting
/// (a broadcast tensor can describe far more elements than memory holds), and a `bool` tensor
/// that code outside Rust may write is copied, then checked.
///
/// ```
/// use dlpack_ndarray::to_owned;
/// use ndarray::{Array2, array};
///
/// let tensor = dlpack_ndarray::into_dlpack(array![[1u8, 2], [3, 4]])?;
/// let copy: Array2<u8> = to_owned(&tensor)?;
/// assert_ne!(copy.as_ptr(), tensor.view::<u8>()?.as_ptr());
/// assert_eq!(copy, array![[1, 2], [3, 4]]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// As for [`view`], and [`Error::OutOfMemory`] when the copy does not fit in memory.
pub fn to_owned<T: Element, D: Dimension>(tensor: &CheckedTensor) -> Result<Array<T, D>, Error> {
    let dim = dim_of::<D>(tensor.shape())?;
    array_from_vec(dim, tensor.to_vec::<T>()?)
}

/// Takes an imported tensor over as an owned [`Array`], without a copy when it can and as `mode`
/// allows otherwise, and says which it was ([`Transfer`]).
///
/// With [`CopyMode::IfNeeded`] or [`CopyMode::Never`], in this order:
/// - an [`Array`] this crate exported ([`into_dlpack`](crate::into_dlpack)) comes back as
///   itself, with its own memory layout, also under another dimension type of the same ndim
///   (`Ix2` <-> `IxDyn`): [`Transfer::Reclaimed`];
/// - an [`ArcArray`](ndarray::ArcArray) this crate exported comes back through
///   [`ArcArray::into_owned`](ndarray::ArrayBase::into_owned): [`Transfer::Reclaimed`] when no
///   other clone shares its memory; when one does, that is a copy,
///   [`Transfer::Copied`]`(`[`CopyReason::NotOwned`]`)`;
/// - a compact row-major CPU tensor whose producer owns its elements as a `Vec` (a `Vec` or
///   `Box<[T]>` export, a `#[derive(DLPack)]` struct over a `Vec`, ...) hands that `Vec` over
///   ([`ManagedTensor::into_vec`]): [`Transfer::Moved`];
/// - anything else is copied into a new standard-layout array: [`CopyReason::Layout`] for a
///   tensor that is not compact row-major, [`CopyReason::NotOwned`] for one whose producer does
///   not hand its memory over (a NumPy or PyTorch tensor, a view, shared memory).
///
/// [`CopyMode::Never`] refuses every copy with [`Error::CopyRefused`]; [`CopyMode::Always`]
/// copies even a tensor that could be taken over ([`CopyReason::Requested`]).
///
/// ```
/// use dlpack_core::{CopyMode, CopyReason, Error, Transfer};
/// use dlpack_ndarray::{export_view, into_dlpack, into_owned};
/// use ndarray::{Array2, ShapeBuilder, array};
///
/// // An array exported by this crate comes back as itself, Fortran layout and all.
/// let a = Array2::<f32>::ones((3, 4).f());
/// let address = a.as_ptr();
/// let (back, transfer) = into_owned::<f32, ndarray::IxDyn>(into_dlpack(a)?, CopyMode::Never)?;
/// assert_eq!((back.as_ptr(), back.strides(), transfer), (address, &[1, 3][..], Transfer::Reclaimed));
///
/// // A transposed view lent by another array cannot be taken over: copied, or refused under
/// // `Never`, which gives the tensor back.
/// let v = array![[1u8, 2], [3, 4]];
/// // SAFETY: the tensor is dropped (by the copy below) before `v`, which nobody writes.
/// let tensor = unsafe { export_view(&v.t())? };
/// let refused = into_owned::<u8, ndarray::Ix2>(tensor, CopyMode::Never).unwrap_err();
/// assert_eq!(refused.error, Error::CopyRefused { reason: CopyReason::Layout });
/// let (copy, transfer) = into_owned::<u8, ndarray::Ix2>(refused.value, CopyMode::IfNeeded)?;
/// assert_eq!((copy, transfer), (array![[1, 3], [2, 4]], Transfer::Copied(CopyReason::Layout)));
/// # Ok::<(), Error>(())
/// ```
///
/// # Errors
///
/// The tensor comes back, untouched, in the [`Refused`], with the reason: those of [`view`] for
/// the tensor's description ([`Error::NdimMismatch`], [`Error::DataTypeMismatch`],
/// [`Error::Overflow`], [`Error::DimOutOfRange`]), checked before anything else;
/// [`Error::CopyRefused`] when only a copy would do and `mode` is [`CopyMode::Never`]; those of
/// [`CheckedTensor::to_vec`] when the copy fails ([`Error::NotHostAccessible`],
/// [`Error::OutOfMemory`], ...). An [`ArcArray`](ndarray::ArcArray) export refused under
/// [`CopyMode::Never`] because another clone shares it comes back in a new tensor over the same
/// array, with the same description (read-only).
pub fn into_owned<T: Element, D: Dimension + 'static>(
    tensor: ManagedTensor,
    mode: CopyMode,
) -> Result<(Array<T, D>, Transfer), Refused<ManagedTensor>> {
    let dim = match check_owned::<T, D>(&tensor) {
        Ok(dim) => dim,
        Err(error) => {
            return Err(Refused {
                error,
                value: tensor,
            });
        }
    };
    if mode == CopyMode::Always {
        return copy_owned(tensor, dim, mode, CopyReason::Requested);
    }
    let tensor = match reclaim::<T, D>(tensor, mode)? {
        Ok(taken) => return Ok(taken),
        Err(tensor) => tensor,
    };
    let reason = if tensor.is_row_major_contiguous() {
        CopyReason::NotOwned
    } else {
        CopyReason::Layout
    };
    match tensor.into_vec::<T>() {
        Ok(elements) => {
            // `into_vec` gives exactly the tensor's `len()` elements, the product of its shape,
            // which is `dim`'s size: this cannot fail (and the tensor is gone already).
            let array = Array::from_shape_vec(dim, elements)
                .expect("ManagedTensor::into_vec gives exactly the tensor's elements");
            Ok((array, Transfer::Moved))
        }
        Err(tensor) => copy_owned(tensor, dim, mode, reason),
    }
}

/// What [`into_owned`] checks of the tensor's description before anything else: the ndim, the
/// dtype, and a shape ndarray can index, which it returns.
#[inline]
fn check_owned<T: Element, D: Dimension>(tensor: &CheckedTensor) -> Result<D, Error> {
    check_ndim::<D>(tensor.ndim())?;
    if tensor.dtype() != T::DTYPE {
        return Err(Error::DataTypeMismatch {
            found: tensor.dtype(),
            expected: T::DTYPE,
        });
    }
    dim_of::<D>(tensor.shape())
}

/// The copy of [`into_owned`], for `reason`, as `mode` allows; the tensor back on failure.
fn copy_owned<T: Element, D: Dimension>(
    tensor: ManagedTensor,
    dim: D,
    mode: CopyMode,
    reason: CopyReason,
) -> Result<(Array<T, D>, Transfer), Refused<ManagedTensor>> {
    let copied = mode
        .copy(reason)
        .and_then(|transfer| Ok((array_from_vec(dim, tensor.to_vec::<T>()?)?, transfer)));
    match copied {
        Ok(done) => Ok(done),
        Err(error) => Err(Refused {
            error,
            value: tensor,
        }),
    }
}

/// What a reclaim attempt gave: the array and how it came, or the tensor back.
type Taken<T, D> = Result<(Array<T, D>, Transfer), ManagedTensor>;

/// Takes back the [`OwnedArray`] or [`SharedArray`] this crate exported, under the dimension type
/// `D` or any other of the same ndim, if the tensor holds one; the caller has checked that `D`
/// fits the tensor's ndim.
fn reclaim<T: Element, D: Dimension + 'static>(
    tensor: ManagedTensor,
    mode: CopyMode,
) -> Result<Taken<T, D>, Refused<ManagedTensor>> {
    let tensor = match reclaim_as::<T, D, D>(tensor, mode)? {
        Ok(taken) => return Ok(Ok(taken)),
        Err(tensor) => tensor,
    };
    if D::NDIM.is_some() {
        // The same array as an `ArrayD`.
        return reclaim_as::<T, D, IxDyn>(tensor, mode);
    }
    // The same array under its fixed dimension type (exported as Array2, asked as ArrayD).
    match tensor.ndim() {
        0 => reclaim_as::<T, D, Ix0>(tensor, mode),
        1 => reclaim_as::<T, D, Ix1>(tensor, mode),
        2 => reclaim_as::<T, D, Ix2>(tensor, mode),
        3 => reclaim_as::<T, D, Ix3>(tensor, mode),
        4 => reclaim_as::<T, D, Ix4>(tensor, mode),
        5 => reclaim_as::<T, D, Ix5>(tensor, mode),
        6 => reclaim_as::<T, D, Ix6>(tensor, mode),
        _ => Ok(Err(tensor)),
    }
}

/// Takes back the [`OwnedArray<T, E>`] or [`SharedArray<T, E>`] this crate exported, as an
/// `Array<T, D>`, if the tensor holds one.
///
/// A shared array becomes owned through [`ArcArray::into_owned`](ndarray::ArrayBase::into_owned):
/// the same memory when no other clone shares it ([`Transfer::Reclaimed`]), a copy otherwise
/// ([`CopyReason::NotOwned`]), which [`CopyMode::Never`] refuses: the array then goes back into
/// a tensor like the one it came in.
fn reclaim_as<T: Element, D: Dimension + 'static, E: Dimension + 'static>(
    tensor: ManagedTensor,
    mode: CopyMode,
) -> Result<Taken<T, D>, Refused<ManagedTensor>> {
    let tensor = match tensor.reclaim::<OwnedArray<T, E>>() {
        Ok(producer) => {
            return Ok(Ok((
                into_dimension(producer.into_inner()),
                Transfer::Reclaimed,
            )));
        }
        Err(tensor) => tensor,
    };
    let shared = match tensor.reclaim::<SharedArray<T, E>>() {
        Ok(producer) => producer.into_inner(),
        Err(tensor) => return Ok(Err(tensor)),
    };
    // No one can clone the array while the tensor holds it, so a unique array stays unique.
    if shared.is_unique() {
        return Ok(Ok((
            into_dimension(shared.into_owned()),
            Transfer::Reclaimed,
        )));
    }
    match mode.copy(CopyReason::NotOwned) {
        Ok(transfer) => Ok(Ok((into_dimension(shared.into_owned()), transfer))),
        Err(error) => {
            // Back into a tensor like the one that came in: the same description, read-only
            // and versioned (a `SharedArray` never goes out in the legacy struct, which cannot
            // say read-only). It was accepted once, so it is accepted again.
            let value = ManagedTensor::export(SharedArray::new(shared)).unwrap_or_else(|_| {
                unreachable!("a SharedArray this crate exported exports again")
            });
            Err(Refused { error, value })
        }
    }
}

/// The array under the dimension type `D`, which the caller checked fits its ndim (`D` is
/// `IxDyn`, or has the ndim of `E`'s array): this cannot fail.
fn into_dimension<T, D: Dimension, E: Dimension>(array: Array<T, E>) -> Array<T, D> {
    array
        .into_dimensionality::<D>()
        .unwrap_or_else(|_| unreachable!("the caller checked that D fits the array's ndim"))
}

/// How an [`ImportedArray`] lends its memory.
enum Access<T, D> {
    /// Read and write.
    Writable(RawArrayViewMut<T, D>),
    /// Read only, and why not write.
    ReadOnly(RawArrayView<T, D>, Error),
}

/// An imported tensor together with its ndarray form: it owns the [`ManagedTensor`] (so it can be
/// returned from a function and sent to another thread) and lends [`ArrayView`]s and
/// [`ArrayViewMut`]s of it without re-checking anything.
///
/// Everything is checked once, in [`ImportedArray::new`]: the ndim, the dtype, host access,
/// alignment, the values of a `bool` tensor, and whether the tensor may be written (not
/// read-only, no overlapping strides, no data over its own description).
///
/// ```
/// use dlpack_core::{Error, ManagedTensor};
/// use dlpack_ndarray::{ImportedArray, into_dlpack};
/// use ndarray::{array, Ix2};
///
/// /// # Safety
/// ///
/// /// `raw` is a live tensor that the caller owns and gives away.
/// unsafe fn import(
///     raw: *mut dlpack_core::ffi::DLManagedTensorVersioned,
/// ) -> Result<ImportedArray<f64, Ix2>, Error> {
///     // SAFETY: the caller's.
///     let tensor = unsafe { ManagedTensor::from_raw(raw)? };
///     Ok(ImportedArray::new(tensor)?)
/// }
///
/// let raw = into_dlpack(array![[1.0, 2.0], [3.0, 4.0]])?.into_raw()?;
/// // SAFETY: `raw` was exported just above and is given away here.
/// let mut imported = unsafe { import(raw)? };
/// imported.view_mut()?[[0, 0]] = 9.0;
/// assert_eq!(imported.view().sum(), 18.0);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub struct ImportedArray<T, D> {
    access: Access<T, D>,
    tensor: ManagedTensor,
}

// SAFETY: an ImportedArray is a ManagedTensor (Send + Sync) plus raw views of that tensor's
// memory. Through `&self` it only lends read-only views, like `&[T]` (fine to share across
// threads since `T: Element` is `Sync`); through `&mut self` it lends one mutable view at a time,
// like `&mut [T]` (fine to move across threads since `T` is `Send`). `D` is `Send + Sync`.
unsafe impl<T: Element, D: Dimension> Send for ImportedArray<T, D> {}
// SAFETY: see above.
unsafe impl<T: Element, D: Dimension> Sync for ImportedArray<T, D> {}

impl<T: Element, D: Dimension + 'static> ImportedArray<T, D> {
    /// Checks `tensor` as an array of `T` with dimensionality `D`, and keeps it.
    ///
    /// A tensor that cannot be written (read-only, or with overlapping strides) is accepted:
    /// [`ImportedArray::view_mut`] reports why.
    ///
    /// # Errors
    ///
    /// As for [`view`]; the tensor comes back in the [`Refused`].
    pub fn new(mut tensor: ManagedTensor) -> Result<Self, Refused<ManagedTensor>> {
        match Self::access(&mut tensor) {
            Ok(access) => Ok(ImportedArray { access, tensor }),
            Err(error) => Err(Refused {
                error,
                value: tensor,
            }),
        }
    }

    /// The views `tensor` lends, checked once.
    fn access(tensor: &mut ManagedTensor) -> Result<Access<T, D>, Error> {
        check_ndim::<D>(tensor.ndim())?;
        let why = match tensor.view_mut::<T>() {
            Ok(mut view) => {
                let first = view.as_mut_ptr();
                // SAFETY: the parts of a mutable view core validated (aligned, in one
                // allocation, no two indices on one element); a raw view makes no access yet.
                let raw = unsafe { nd_view(first, view.shape(), view.strides(), view.len())? };
                return Ok(Access::Writable(raw));
            }
            Err(why) => why,
        };
        // Not writable: a read-only view, whose checks (dtype, host access, alignment) come
        // before the reason not to write.
        let view = tensor.view::<T>()?;
        let first = view.as_ptr().cast_mut();
        // SAFETY: the parts of a read-only view core validated; a raw view makes no access yet.
        let raw = unsafe { nd_view(first, view.shape(), view.strides(), view.len())? };
        Ok(Access::ReadOnly(raw, why))
    }

    /// A read-only view.
    pub fn view(&self) -> ArrayView<'_, T, D> {
        match &self.access {
            // SAFETY: the raw view was made from a core view of `self.tensor`, which `self`
            // owns and nobody modifies; its elements are valid `T`s, and while `&self` is
            // borrowed nobody writes them (mutable views need `&mut self`).
            Access::Writable(raw) => unsafe { raw.clone().deref_into_view() },
            // SAFETY: as above.
            Access::ReadOnly(raw, _) => unsafe { raw.clone().deref_into_view() },
        }
    }

    /// A mutable view.
    ///
    /// # Errors
    ///
    /// The reason the tensor cannot be written, found by [`ImportedArray::new`]:
    /// [`Error::ReadOnly`], [`Error::OverlappingStrides`] or [`Error::DataOverlapsDescription`].
    pub fn view_mut(&mut self) -> Result<ArrayViewMut<'_, T, D>, Error> {
        match &self.access {
            // SAFETY: the raw view was made from a core mutable view of `self.tensor` (writable,
            // no two indices on one element), which `self` owns; `&mut self` is borrowed for the
            // view's lifetime, so no other view exists meanwhile.
            Access::Writable(raw) => Ok(unsafe { raw.clone().deref_into_view_mut() }),
            Access::ReadOnly(_, why) => Err(why.clone()),
        }
    }

    /// The tensor (its shape, dtype, device, flags).
    pub fn tensor(&self) -> &ManagedTensor {
        &self.tensor
    }

    /// Gives the tensor back.
    pub fn into_tensor(self) -> ManagedTensor {
        self.tensor
    }

    /// The elements as an owned array, without a copy when possible and as `mode` allows
    /// otherwise: [`into_owned`] of the tensor.
    ///
    /// # Errors
    ///
    /// As for [`into_owned`] ([`ImportedArray::new`] made the checks of the description
    /// already): [`Error::CopyRefused`], or a copy that fails. The tensor comes back.
    pub fn into_owned(
        self,
        mode: CopyMode,
    ) -> Result<(Array<T, D>, Transfer), Refused<ManagedTensor>> {
        into_owned(self.tensor, mode)
    }
}

impl<T: Element + fmt::Debug, D: Dimension + 'static> fmt::Debug for ImportedArray<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let writable = match &self.access {
            Access::Writable(_) => Ok(()),
            Access::ReadOnly(_, why) => Err(why),
        };
        f.debug_struct("ImportedArray")
            .field("tensor", &self.tensor)
            .field("writable", &writable)
            .finish()
    }
}
