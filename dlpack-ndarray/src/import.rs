//! Import: DLPack tensors as ndarray views and arrays.
//!
//! Every view here is made from dlpack-core's validated views ([`CheckedTensor::view`],
//! [`ManagedTensor::view_mut`]), which have already checked the dtype, the device, the alignment,
//! the span of every reachable byte and, for mutable access, the read-only flag, overlapping
//! strides and data over the tensor's own description. What is left is ndarray's own form: a pointer to the lowest address with
//! non-negative strides, then [`invert_axis`](ndarray::ArrayBase::invert_axis) for every axis
//! that runs backwards.

use core::fmt;

use dlpack_core::{
    BorrowedTensor, CheckedTensor, Element, Error, ManagedTensor, TensorView, TensorViewMut,
};
use ndarray::{
    Array, ArrayView, ArrayViewMut, Axis, Dimension, Ix0, Ix1, Ix2, Ix3, Ix4, Ix5, Ix6, IxDyn,
    RawArrayView, RawArrayViewMut, ShapeBuilder,
};

use crate::{OwnedArray, SharedArray};

/// Refuses an ndim that `D` cannot hold.
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
                .ok_or_else(|| Error::Overflow {
                    what: format!(
                        "shape {shape:?} has more than isize::MAX elements along its non-empty axes, more than ndarray can index"
                    ),
                })?;
        }
        *slot = d;
    }
    Ok(dim)
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
    let found = vec![i64::try_from(elements.len()).unwrap_or(i64::MAX)];
    let expected = shape_of(&dim);
    Array::from_shape_vec(dim, elements).map_err(|_| Error::ShapeMismatch { found, expected })
}

/// How a validated core view maps onto an ndarray raw view.
///
/// ndarray builds views from a pointer to the lowest-addressed element and non-negative
/// strides; an axis whose DLPack stride is negative is then inverted, which moves the pointer
/// back to the first element and makes the stride negative again. Every other tensor gets its
/// own strides (their magnitudes), row-major ones included: building them from the tensor is
/// cheaper than ndarray's computing its default strides for an `IxDyn` and than asking whether
/// the tensor is row-major first (5-10% of a view import's instructions, `docs/benchmarks.md`).
/// An empty tensor gets ndarray's default layout for its shape: its strides reach nothing.
struct NdLayout<D> {
    dim: D,
    /// The magnitude of every stride, in elements; `None` for ndarray's default layout (an
    /// empty tensor).
    strides: Option<D>,
    /// Elements from the first element (index `[0, 0, ...]`) to the lowest-addressed one.
    lowest: isize,
    /// 1 for every axis to invert afterwards, 0 for the others; `None` when no stride is
    /// negative (the common case, which then builds one `D` less).
    inverted: Option<D>,
}

impl<D: Dimension> NdLayout<D> {
    /// The layout of a core view with this shape, these strides and `len` elements.
    fn of(shape: &[i64], strides: &[i64], len: usize) -> Result<Self, Error> {
        let dim = dim_of::<D>(shape)?;
        let mut inverted: Option<D> = None;
        let mut lowest: isize = 0;
        if len == 0 {
            return Ok(NdLayout {
                dim,
                strides: None,
                lowest,
                inverted,
            });
        }
        let mut magnitudes = D::zeros(shape.len());
        // One slice for all the writes, as in `dim_of`.
        let slots = magnitudes.slice_mut();
        for (axis, ((&size, &stride), slot)) in
            shape.iter().zip(strides).zip(slots.iter_mut()).enumerate()
        {
            // Validation bounded (size - 1) * |stride| elements by the tensor's span, at most
            // isize::MAX bytes, so on an axis longer than 1 the magnitude fits isize. An axis of
            // size 1 never moves the pointer: any stride serves it equally.
            let magnitude = isize::try_from(stride.unsigned_abs()).unwrap_or(isize::MAX);
            *slot = magnitude.unsigned_abs();
            if stride < 0 {
                inverted.get_or_insert_with(|| D::zeros(shape.len()))[axis] = 1;
                // The backward reach of this axis: one term of the validated span.
                lowest = (size - 1)
                    .checked_mul(stride)
                    .and_then(|step| isize::try_from(step).ok())
                    .and_then(|step| lowest.checked_add(step))
                    .ok_or_else(|| Error::Overflow {
                        what: format!(
                            "the backward reach of strides {strides:?} for shape {shape:?}"
                        ),
                    })?;
            }
        }
        Ok(NdLayout {
            dim,
            strides: Some(magnitudes),
            lowest,
            inverted,
        })
    }

    /// The layout of a core view.
    fn of_view<T: Element>(view: &TensorView<'_, T>) -> Result<Self, Error> {
        Self::of(view.shape(), view.strides(), view.len())
    }

    /// Inverts the axes that run backwards.
    fn invert<S: ndarray::RawData>(inverted: Option<&D>, array: &mut ndarray::ArrayBase<S, D>) {
        let Some(inverted) = inverted else {
            return;
        };
        for axis in 0..inverted.ndim() {
            if inverted[axis] == 1 {
                array.invert_axis(Axis(axis));
            }
        }
    }

    /// A read-only raw view of the elements.
    ///
    /// # Safety
    ///
    /// `first` is the first element of a core view with the shape and strides this layout was
    /// made from: aligned for `T`, and every element the view reaches lies in one allocation
    /// (or, for an empty view, `first` is any aligned non-NULL pointer).
    unsafe fn raw_view<T>(self, first: *const T) -> RawArrayView<T, D> {
        let lowest = first.wrapping_offset(self.lowest);
        // SAFETY: `lowest` is the view's lowest-addressed element (or `first`, aligned and
        // non-NULL, when the view is empty), so it is non-NULL and aligned. Moving from it along
        // the non-negative strides reaches exactly the view's elements, all in one allocation
        // whose span core checked to be at most isize::MAX bytes (so no offset overflows); the
        // product of the non-zero sizes was checked against isize::MAX by `dim_of`. An empty
        // view gets ndarray's default layout for an empty shape: no element, no pointer moves.
        let mut raw = unsafe {
            match self.strides {
                Some(strides) => RawArrayView::from_shape_ptr(self.dim.strides(strides), lowest),
                None => RawArrayView::from_shape_ptr(self.dim, lowest),
            }
        };
        Self::invert(self.inverted.as_ref(), &mut raw);
        raw
    }

    /// A mutable raw view of the elements.
    ///
    /// # Safety
    ///
    /// As for [`NdLayout::raw_view`], and the view's strides make distinct indices reach
    /// distinct elements.
    unsafe fn raw_view_mut<T>(self, first: *mut T) -> RawArrayViewMut<T, D> {
        let lowest = first.wrapping_offset(self.lowest);
        // SAFETY: as in `raw_view`; the strides do not overlap (caller), which is what ndarray's
        // mutable raw view adds to the conditions (an empty view has no two elements at all).
        let mut raw = unsafe {
            match self.strides {
                Some(strides) => RawArrayViewMut::from_shape_ptr(self.dim.strides(strides), lowest),
                None => RawArrayViewMut::from_shape_ptr(self.dim, lowest),
            }
        };
        Self::invert(self.inverted.as_ref(), &mut raw);
        raw
    }
}

/// The ndarray form of a core read-only view, for the same lifetime.
fn array_view<'a, T: Element, D: Dimension>(
    view: TensorView<'a, T>,
) -> Result<ArrayView<'a, T, D>, Error> {
    let layout = NdLayout::<D>::of_view(&view)?;
    // SAFETY: the pointer and layout are those of `view`, which core validated: aligned, every
    // element inside one allocation.
    let raw = unsafe { layout.raw_view(view.as_ptr()) };
    // SAFETY: the raw view reaches exactly `view`'s elements, which `TensorView<'a, T>`
    // guarantees to be readable, initialised, valid `T`s that nobody writes for `'a`.
    Ok(unsafe { raw.deref_into_view() })
}

/// The ndarray form of a core mutable view, for the same lifetime.
fn array_view_mut<'a, T: Element, D: Dimension>(
    mut view: TensorViewMut<'a, T>,
) -> Result<ArrayViewMut<'a, T, D>, Error> {
    let layout = NdLayout::<D>::of_view(&view.as_view())?;
    // SAFETY: as in `array_view`; core's mutable view also guarantees that distinct indices
    // reach distinct elements.
    let raw = unsafe { layout.raw_view_mut(view.as_mut_ptr()) };
    // SAFETY: the raw view reaches exactly `view`'s elements, which `TensorViewMut<'a, T>`
    // guarantees to be valid `T`s, writable, and accessed by nobody else for `'a`; `view`
    // itself is dropped here, so the ndarray view is the only way to them.
    Ok(unsafe { raw.deref_into_view_mut() })
}

/// Viewing and copying an imported tensor as an ndarray array.
///
/// Implemented for [`CheckedTensor`], so available on [`ManagedTensor`] and [`BorrowedTensor`]
/// (both dereference to it).
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_ndarray::AsArray;
/// use ndarray::{ArrayViewD, Ix2};
///
/// let tensor = ManagedTensor::export(vec![1u8, 2, 3, 4, 5, 6])?; // a 1-d tensor
/// let flat: ArrayViewD<u8> = tensor.as_array_view()?;
/// assert_eq!(flat.shape(), &[6]);
/// let err = tensor.as_array_view::<u8, Ix2>().unwrap_err();
/// assert_eq!(err, dlpack_core::Error::NdimMismatch { found: 1, expected: 2 });
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub trait AsArray {
    /// A read-only view of the tensor's memory, without a copy.
    ///
    /// Negative strides give an ndarray view with negative strides over the same memory; zero
    /// strides (broadcast) a view with zero strides.
    ///
    /// # Errors
    ///
    /// [`Error::NdimMismatch`] if `D` is a fixed dimensionality other than the tensor's;
    /// everything [`CheckedTensor::view`] checks: [`Error::DataTypeMismatch`] if the dtype is not
    /// `T`'s, [`Error::NotHostAccessible`] if the host cannot read the memory,
    /// [`Error::Misaligned`] if the first element is not aligned (and, for `bool`, the values);
    /// [`Error::Overflow`] for a shape of more than `isize::MAX` elements along its non-empty
    /// axes, which ndarray cannot index (a broadcast tensor can describe that many).
    fn as_array_view<T: Element, D: Dimension>(&self) -> Result<ArrayView<'_, T, D>, Error>;

    /// Copies the elements into a new standard-layout (C order) array.
    ///
    /// # Errors
    ///
    /// As for [`AsArray::as_array_view`], and [`Error::OutOfMemory`] when the copy does not fit
    /// in memory (a broadcast tensor can describe far more elements than it holds).
    fn to_array<T: Element, D: Dimension>(&self) -> Result<Array<T, D>, Error>;
}

impl AsArray for CheckedTensor {
    fn as_array_view<T: Element, D: Dimension>(&self) -> Result<ArrayView<'_, T, D>, Error> {
        check_ndim::<D>(self.ndim())?;
        array_view(self.view::<T>()?)
    }

    fn to_array<T: Element, D: Dimension>(&self) -> Result<Array<T, D>, Error> {
        let dim = dim_of::<D>(self.shape())?;
        array_from_vec(dim, self.to_vec::<T>()?)
    }
}

/// Viewing an imported tensor as a mutable ndarray array.
///
/// Implemented for [`ManagedTensor`] and [`BorrowedTensor`], the owners that can lend their
/// memory exclusively.
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_ndarray::AsArrayMut;
/// use ndarray::ArrayViewMut1;
///
/// let mut tensor = ManagedTensor::export(vec![1i32, 2, 3])?;
/// let mut view: ArrayViewMut1<i32> = tensor.as_array_view_mut()?;
/// view *= 10;
/// assert_eq!(tensor.to_vec::<i32>()?, [10, 20, 30]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub trait AsArrayMut {
    /// A mutable view of the tensor's memory, without a copy.
    ///
    /// # Errors
    ///
    /// As for [`AsArray::as_array_view`], and [`Error::ReadOnly`] for a read-only tensor,
    /// [`Error::OverlappingStrides`] for strides under which two indices reach the same element
    /// (a broadcast tensor, say), [`Error::DataOverlapsDescription`] for data that overlaps the
    /// tensor's own struct, shape or strides.
    fn as_array_view_mut<T: Element, D: Dimension>(
        &mut self,
    ) -> Result<ArrayViewMut<'_, T, D>, Error>;
}

impl AsArrayMut for ManagedTensor {
    fn as_array_view_mut<T: Element, D: Dimension>(
        &mut self,
    ) -> Result<ArrayViewMut<'_, T, D>, Error> {
        check_ndim::<D>(self.ndim())?;
        array_view_mut(self.view_mut::<T>()?)
    }
}

impl AsArrayMut for BorrowedTensor<'_> {
    fn as_array_view_mut<T: Element, D: Dimension>(
        &mut self,
    ) -> Result<ArrayViewMut<'_, T, D>, Error> {
        check_ndim::<D>(self.ndim())?;
        array_view_mut(self.view_mut::<T>()?)
    }
}

/// What a reclaim attempt gave: the array, or the tensor back.
type Reclaimed<T, D> = Result<Array<T, D>, ManagedTensor>;

/// Takes back the [`OwnedArray<T, E>`] this crate exported, as an `Array<T, D>` with the same
/// memory and layout, if the tensor holds one; the caller has checked that `D` fits the ndim.
fn reclaim_as<T: Element, D: Dimension + 'static, E: Dimension + 'static>(
    tensor: ManagedTensor,
) -> Result<Reclaimed<T, D>, Error> {
    match tensor.reclaim::<OwnedArray<T, E>>() {
        Ok(producer) => into_dimension(producer.into_inner()).map(Ok),
        Err(tensor) => Ok(Err(tensor)),
    }
}

/// Takes back the [`SharedArray<T, E>`] this crate exported, as an `Array<T, D>`
/// ([`ArcArray::into_owned`](ndarray::ArrayBase::into_owned): the same memory unless other
/// clones share it), if the tensor holds one; the caller has checked that `D` fits the ndim.
fn reclaim_shared_as<T: Element, D: Dimension + 'static, E: Dimension + 'static>(
    tensor: ManagedTensor,
) -> Result<Reclaimed<T, D>, Error> {
    match tensor.reclaim::<SharedArray<T, E>>() {
        Ok(producer) => into_dimension(producer.into_inner().into_owned()).map(Ok),
        Err(tensor) => Ok(Err(tensor)),
    }
}

/// Either of the two, under the dimension type `E`.
fn reclaim_either<T: Element, D: Dimension + 'static, E: Dimension + 'static>(
    tensor: ManagedTensor,
) -> Result<Reclaimed<T, D>, Error> {
    match reclaim_as::<T, D, E>(tensor)? {
        Ok(array) => Ok(Ok(array)),
        Err(tensor) => reclaim_shared_as::<T, D, E>(tensor),
    }
}

/// An array of the tensor's ndim under the dimension type `D` (which the caller checked fits).
fn into_dimension<T, D: Dimension, E: Dimension>(array: Array<T, E>) -> Result<Array<T, D>, Error> {
    let found = array.ndim();
    array
        .into_dimensionality::<D>()
        .map_err(|_| Error::NdimMismatch {
            found,
            expected: D::NDIM.unwrap_or(found),
        })
}

/// Taking an owned array out of an imported tensor: without a copy when possible.
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_ndarray::{IntoArray, IntoDLPack};
/// use ndarray::{Array2, ArrayD, ShapeBuilder};
///
/// // An array exported by this crate comes back as itself, Fortran layout and all.
/// let a = Array2::<f32>::ones((3, 4).f());
/// let address = a.as_ptr();
/// let back: ArrayD<f32> = a.into_dlpack()?.into_array()?; // another dimension type is fine
/// assert_eq!((back.as_ptr(), back.strides()), (address, &[1, 3][..]));
///
/// // A row-major Vec export is taken over as well.
/// let v = vec![1u8, 2, 3, 4];
/// let address = v.as_ptr();
/// let a: ndarray::Array1<u8> = ManagedTensor::export(v)?.into_array()?;
/// assert_eq!(a.as_ptr(), address);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub trait IntoArray {
    /// The tensor's elements as an owned array.
    ///
    /// Without a copy, in this order: an [`Array`] exported by this crate
    /// ([`IntoDLPack`](crate::IntoDLPack)) comes back as itself, with its own layout (also under
    /// another dimension type of the same ndim, `Ix2` <-> `IxDyn`); an [`ArcArray`] export
    /// comes back through [`ArcArray::into_owned`], which copies only if other clones share it
    /// (under another dimension type too);
    /// a compact row-major CPU tensor whose producer owns its elements as a `Vec` (a `Vec` or
    /// `Box<[T]>` export, an ndarray in standard layout) gives that `Vec` up
    /// ([`ManagedTensor::into_vec`]). Anything else is copied into a new standard-layout array.
    ///
    /// # Errors
    ///
    /// As for [`AsArray::to_array`]; the tensor is dropped then (its deleter runs).
    ///
    /// [`ArcArray`]: ndarray::ArcArray
    /// [`ArcArray::into_owned`]: ndarray::ArrayBase::into_owned
    fn into_array<T: Element, D: Dimension + 'static>(self) -> Result<Array<T, D>, Error>;
}

impl IntoArray for ManagedTensor {
    fn into_array<T: Element, D: Dimension + 'static>(self) -> Result<Array<T, D>, Error> {
        check_ndim::<D>(self.ndim())?;
        let tensor = match reclaim_either::<T, D, D>(self)? {
            Ok(array) => return Ok(array),
            Err(tensor) => tensor,
        };
        // The same array under another dimension type (exported as Array2, asked as ArrayD).
        let tensor = match tensor.ndim() {
            0 => reclaim_either::<T, D, Ix0>(tensor)?,
            1 => reclaim_either::<T, D, Ix1>(tensor)?,
            2 => reclaim_either::<T, D, Ix2>(tensor)?,
            3 => reclaim_either::<T, D, Ix3>(tensor)?,
            4 => reclaim_either::<T, D, Ix4>(tensor)?,
            5 => reclaim_either::<T, D, Ix5>(tensor)?,
            6 => reclaim_either::<T, D, Ix6>(tensor)?,
            _ => Err(tensor),
        };
        let tensor = match tensor {
            Ok(array) => return Ok(array),
            Err(tensor) => tensor,
        };
        let tensor = match reclaim_either::<T, D, IxDyn>(tensor)? {
            Ok(array) => return Ok(array),
            Err(tensor) => tensor,
        };
        let dim = dim_of::<D>(tensor.shape())?;
        match tensor.into_vec::<T>() {
            Ok(elements) => array_from_vec(dim, elements),
            Err(tensor) => array_from_vec(dim, tensor.to_vec::<T>()?),
        }
    }
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
/// use dlpack_ndarray::{ImportedArray, IntoDLPack};
/// use ndarray::{array, Ix2};
///
/// fn import(raw: *mut dlpack_core::ffi::DLManagedTensorVersioned) -> Result<ImportedArray<f64, Ix2>, Error> {
///     // SAFETY: the caller passes a live tensor it owns (here: one exported just below).
///     let tensor = unsafe { ManagedTensor::from_raw(raw)? };
///     ImportedArray::new(tensor)
/// }
///
/// let raw = array![[1.0, 2.0], [3.0, 4.0]].into_dlpack()?.into_raw()?;
/// let mut imported = import(raw)?;
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
    /// As for [`AsArray::as_array_view`]; the tensor is dropped then (its deleter runs).
    pub fn new(mut tensor: ManagedTensor) -> Result<Self, Error> {
        check_ndim::<D>(tensor.ndim())?;
        let (first, layout) = {
            let view = tensor.view::<T>()?;
            (view.as_ptr(), NdLayout::<D>::of_view(&view)?)
        };
        let access = match tensor.view_mut::<T>() {
            // SAFETY: the layout is that of the read-only view above, which has the same shape
            // and strides (same tensor); the pointer is that of a mutable view core validated
            // (aligned, in one allocation, no two indices on one element).
            Ok(mut view) => Access::Writable(unsafe { layout.raw_view_mut(view.as_mut_ptr()) }),
            // SAFETY: the pointer and layout are those of a read-only view core validated.
            Err(why) => Access::ReadOnly(unsafe { layout.raw_view(first) }, why),
        };
        Ok(ImportedArray { access, tensor })
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

    /// The elements as an owned array: without a copy when possible ([`IntoArray::into_array`]).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] when a copy does not fit in memory: [`ImportedArray::new`] made
    /// the other checks of [`IntoArray::into_array`] already. The tensor is dropped then.
    pub fn into_array(self) -> Result<Array<T, D>, Error> {
        self.tensor.into_array()
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
