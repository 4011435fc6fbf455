//! Export: ndarray arrays as DLPack tensors.
//!
//! An owned [`Array`] moves into the managed tensor ([`into_dlpack`]), wrapped in
//! [`OwnedArray`], the [`Export`] producer this crate defines for it (the orphan rule keeps
//! `Array` itself from implementing a foreign trait). An [`ArcArray`] moves in the same way,
//! wrapped in [`SharedArray`], and is flagged read-only. Any other array or view is copied
//! ([`to_dlpack`]), or lent without a copy through the `unsafe` [`export_view`] and
//! [`export_view_mut`], whose callers vouch for the borrow that the tensor cannot carry.
//!
//! Shapes and strides go out exactly as ndarray holds them: strides in elements, negative ones
//! included (DLPack allows them), and the data pointer is the array's first element
//! (`byte_offset` 0).

use core::any::Any;
use core::fmt;

use dlpack_core::{Element, Error, Export, ExportDesc, Flags, ManagedTensor, Refused, VecSlot};
use ndarray::{ArcArray, Array, Array1, ArrayBase, Data, DataMut, Dimension, s};

/// Writes an ndarray layout into the shape and strides arrays of a tensor being exported.
///
/// Sizes and strides always fit `i64`: ndarray keeps every non-zero size and every byte offset
/// within `isize`. Should one not fit anyway, `i64::MAX` is written, which the export
/// constructor refuses as an overflow rather than describing memory wrongly.
///
/// An empty array's strides reach nothing, and ndarray sets them all to zero; the tensor gets
/// row-major strides instead (each the product of the later sizes, zeros included), the ones
/// dlpack-core's contiguity test expects, so that [`ManagedTensor::into_vec`] and consumers
/// looking for a contiguous layout see one.
fn write_layout(
    dim: impl ExactSizeIterator<Item = usize> + Clone,
    strides: impl Iterator<Item = isize>,
    shape_out: &mut [i64],
    strides_out: &mut [i64],
) {
    for (out, d) in shape_out.iter_mut().zip(dim.clone()) {
        *out = i64::try_from(d).unwrap_or(i64::MAX);
    }
    if dim.clone().any(|d| d == 0) {
        let mut step: i64 = 1;
        for (out, &d) in strides_out.iter_mut().zip(shape_out.iter()).rev() {
            *out = step;
            step = step.saturating_mul(d);
        }
        return;
    }
    for (out, s) in strides_out.iter_mut().zip(strides) {
        *out = i64::try_from(s).unwrap_or(i64::MAX);
    }
}

/// An owned ndarray [`Array`] inside a DLPack tensor: the [`Export`] producer behind
/// [`into_dlpack`], and what [`ManagedTensor::reclaim`] gives back.
///
/// The array keeps its memory layout (C, Fortran, sliced, negative strides): the tensor describes
/// it exactly, and [`OwnedArray::into_inner`] returns the very array that went in.
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_ndarray::OwnedArray;
/// use ndarray::{Array2, ShapeBuilder};
///
/// let a = Array2::<f64>::zeros((2, 3).f()); // column-major
/// let address = a.as_ptr();
/// let tensor = ManagedTensor::export(OwnedArray::new(a))?;
/// assert_eq!(tensor.strides(), &[1, 2]);
/// let a = tensor.reclaim::<OwnedArray<f64, ndarray::Ix2>>().unwrap().into_inner();
/// assert_eq!((a.as_ptr(), a.strides()), (address, &[1, 2][..]));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// When the array is in standard (C) layout and starts at its `Vec`'s first element (all of it,
/// or a prefix), [`ManagedTensor::into_vec`] takes that `Vec` without a copy
/// ([`Export::give_vec`]); this is
/// how a consumer that must own a `Vec` (candle's CPU storage) takes an ndarray's memory.
pub struct OwnedArray<T, D> {
    array: Array<T, D>,
    /// Whether the array is a copy made for the export (DLPack's `IS_COPIED` flag).
    copied: bool,
}

impl<T: Element, D: Dimension + 'static> OwnedArray<T, D> {
    /// Wraps an array for export.
    pub fn new(array: Array<T, D>) -> Self {
        OwnedArray {
            array,
            copied: false,
        }
    }

    /// The array.
    pub fn as_array(&self) -> &Array<T, D> {
        &self.array
    }

    /// The array, unchanged.
    pub fn into_inner(self) -> Array<T, D> {
        self.array
    }
}

impl<T: fmt::Debug, D: Dimension> fmt::Debug for OwnedArray<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedArray")
            .field("array", &self.array)
            .field("copied", &self.copied)
            .finish()
    }
}

impl<T: Element, D: Dimension + 'static> From<Array<T, D>> for OwnedArray<T, D> {
    fn from(array: Array<T, D>) -> Self {
        OwnedArray::new(array)
    }
}

// SAFETY: `describe` reports the array's own layout: its dimension sizes, its strides (in
// elements, as ndarray stores them) and the address of its first element. ndarray's invariant
// for an owned array is that every element reachable that way lies in the array's `Vec`, holds
// an initialised `T`, and that the Vec's buffer does not move when the array moves. The array is
// owned by this producer alone (nobody else can read or write it), and an owned array's memory
// is writable. `T: Element` makes `T::DTYPE` the dtype of that memory; `ndim()` is the array's
// fixed dimension count. `give_vec` hands the Vec over only when the described tensor starts
// it (standard layout, from the Vec's first element); otherwise it leaves the elements where
// they were (see there).
unsafe impl<T: Element, D: Dimension + 'static> Export for OwnedArray<T, D> {
    // An owned array's elements live in its Vec's heap buffer, never inline.
    const GIVES_VEC: bool = true;

    fn ndim(&self) -> usize {
        self.array.ndim()
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        write_layout(
            self.array.shape().iter().copied(),
            self.array.strides().iter().copied(),
            shape,
            strides,
        );
        let mut desc = ExportDesc::host(self.array.as_mut_ptr());
        if self.copied {
            desc.flags |= Flags::IS_COPIED;
        }
        desc
    }

    fn give_vec(&mut self, slot: &mut dyn Any) {
        let Some(slot) = slot.downcast_mut::<VecSlot<T>>() else {
            return;
        };
        if !self.array.is_standard_layout() {
            return;
        }
        let len = self.array.len();
        let Some(&first) = self.array.first() else {
            // No elements: an empty Vec is all of them.
            slot.fill(Vec::new());
            return;
        };
        // Only `into_raw_vec_and_offset` tells where the elements start in the Vec, and it
        // consumes the array: swap in a placeholder (no elements unless 0-d, where it holds a
        // copy of the one element), look, and put the array back if they do not start it.
        let dim = self.array.raw_dim();
        let placeholder = Array::from_elem(D::zeros(dim.ndim()), first);
        let array = core::mem::replace(&mut self.array, placeholder);
        let (vec, offset) = array.into_raw_vec_and_offset();
        let start = offset.unwrap_or(0);
        if start == 0 && slot.takes(vec.as_ptr(), vec.capacity()) {
            // All of the Vec, or its first `len` elements (an array sliced to a prefix, such as
            // `s![..2, ..]`), which `into_vec` cuts the Vec to: not a byte moves.
            slot.fill(vec);
            return;
        }
        // The elements are a contiguous run inside a larger Vec, after its start (the array was
        // sliced), or a small prefix of a Vec with far more room: only a copy could make a Vec
        // of their own without keeping the rest alive. Rebuild
        // the same array over the same buffer: a 1-d array of the whole Vec, narrowed to the run,
        // reshaped in C order. Not one element moves, so the tensor's description stays true
        // (only the strides of size-1 axes, which address nothing, become the canonical ones).
        let mut flat = Array1::from_vec(vec);
        flat.slice_collapse(s![start..start + len]);
        // A 1-d, stride-1 array of `len` elements always reshapes in C order to a shape of `len`
        // elements (ndarray checks exactly those two things), so this cannot fail. Were it to,
        // the buffer would already be freed: unwinding is then the only sound way out (it drops
        // the tensor, whose producer now holds the placeholder, and nothing reads the memory).
        self.array = flat
            .into_shape_with_order(dim)
            .expect("a contiguous 1-d array reshapes to any shape of as many elements");
    }
}

/// A shared ndarray [`ArcArray`] inside a DLPack tensor, exported read-only: the other clones of
/// the `ArcArray` may still read the memory, and a write through any clone copies first (ndarray's
/// copy-on-write), so the tensor's memory never changes while it lives.
///
/// ```
/// use ndarray::{ArcArray, Ix1};
///
/// let shared = ArcArray::<u8, Ix1>::from_vec(vec![1, 2, 3]);
/// let tensor = dlpack_ndarray::into_dlpack(shared.clone())?;
/// assert!(tensor.is_read_only());
/// assert_eq!(tensor.view::<u8>()?.as_ptr(), shared.as_ptr()); // no copy
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub struct SharedArray<T, D> {
    array: ArcArray<T, D>,
}

impl<T: Element, D: Dimension + 'static> SharedArray<T, D> {
    /// Wraps a shared array for export.
    pub fn new(array: ArcArray<T, D>) -> Self {
        SharedArray { array }
    }

    /// The shared array.
    pub fn as_array(&self) -> &ArcArray<T, D> {
        &self.array
    }

    /// The shared array, unchanged.
    pub fn into_inner(self) -> ArcArray<T, D> {
        self.array
    }
}

impl<T: fmt::Debug, D: Dimension> fmt::Debug for SharedArray<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedArray")
            .field("array", &self.array)
            .finish()
    }
}

impl<T: Element, D: Dimension + 'static> From<ArcArray<T, D>> for SharedArray<T, D> {
    fn from(array: ArcArray<T, D>) -> Self {
        SharedArray::new(array)
    }
}

// SAFETY: as for `OwnedArray`: the description is the array's own layout over memory the
// `ArcArray` keeps alive and in place for as long as this clone lives. The description is
// read-only, since other clones may read the same memory; none of them writes it, because a
// write through an `ArcArray` that is not the only clone copies the data first (and this clone
// keeps the count above one). `as_ptr` is used, not `as_mut_ptr`, which would do that copy.
unsafe impl<T: Element, D: Dimension + 'static> Export for SharedArray<T, D> {
    fn ndim(&self) -> usize {
        self.array.ndim()
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        write_layout(
            self.array.shape().iter().copied(),
            self.array.strides().iter().copied(),
            shape,
            strides,
        );
        ExportDesc::host(self.array.as_ptr().cast_mut()).read_only()
    }
}

/// Strides as ndarray stores them: the bit patterns of `isize` values in a `D` of `usize`.
fn strides_as_dim<D: Dimension>(strides: &[isize]) -> D {
    let mut stored = D::zeros(strides.len());
    for (axis, &s) in strides.iter().enumerate() {
        stored[axis] = s as usize;
    }
    stored
}

/// A borrowed view inside a DLPack tensor; made only by the `unsafe` [`export_view`] and
/// [`export_view_mut`], whose callers vouch for the borrow.
struct BorrowedArray<T, D> {
    first: *mut T,
    dim: D,
    /// ndarray's strides, as it stores them (`isize` bit patterns in a `D`).
    strides: D,
    writable: bool,
}

// SAFETY: the producer only holds the address of memory that the caller of `export_view` /
// `export_view_mut` lent for the tensor's whole life. A read-only tensor gives shared access to
// `T`s, which is fine from any thread because `T: Element` is `Sync`; a writable one gives
// exclusive access (the caller promised that nobody else touches the memory), which may move
// to another thread because `T` is `Send`, as for `&mut [T]`.
unsafe impl<T: Element, D: Dimension> Send for BorrowedArray<T, D> {}

impl<T: Element, D: Dimension + 'static> BorrowedArray<T, D> {
    fn new(first: *mut T, dim: D, strides: &[isize], writable: bool) -> Self {
        BorrowedArray {
            first,
            dim,
            strides: strides_as_dim(strides),
            writable,
        }
    }
}

// SAFETY: the description is the lent view's own layout (sizes, strides in elements, first
// element), which ndarray guarantees to reach only initialised `T`s inside one allocation; the
// callers of `export_view` / `export_view_mut` guarantee that this memory stays valid and in
// place until the tensor is deleted, that nobody writes it meanwhile, and, for a writable
// description (from `export_view_mut` only), that nobody else reads it either and that it is
// writable (it came from an `ArrayViewMut`).
unsafe impl<T: Element, D: Dimension + 'static> Export for BorrowedArray<T, D> {
    fn ndim(&self) -> usize {
        self.dim.ndim()
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        let ndim = self.dim.ndim();
        write_layout(
            (0..ndim).map(|axis| self.dim[axis]),
            // The bit patterns of isize strides, as ndarray stores them.
            (0..ndim).map(|axis| self.strides[axis] as isize),
            shape,
            strides,
        );
        let desc = ExportDesc::host(self.first);
        if self.writable {
            desc
        } else {
            desc.read_only()
        }
    }
}

/// The arrays [`into_dlpack`] moves into a tensor without copying their elements: [`Array`]
/// (exported writable, as an [`OwnedArray`]) and [`ArcArray`] (exported read-only, as a
/// [`SharedArray`]). Sealed: no other type implements it.
pub trait ExportableArray: sealed::Sealed {}

impl<T: Element, D: Dimension + 'static> ExportableArray for Array<T, D> {}
impl<T: Element, D: Dimension + 'static> ExportableArray for ArcArray<T, D> {}

mod sealed {
    use dlpack_core::{Element, Export};
    use ndarray::{ArcArray, Array, Dimension};

    use super::{OwnedArray, SharedArray};

    /// The producer an array moves into, and the way back out of it.
    pub trait Sealed: Sized {
        /// The [`Export`] producer that holds the array inside the tensor.
        type Producer: Export;
        /// Wraps the array for export.
        fn wrap(self) -> Self::Producer;
        /// The array, as it went in.
        fn unwrap(producer: Self::Producer) -> Self;
    }

    impl<T: Element, D: Dimension + 'static> Sealed for Array<T, D> {
        type Producer = OwnedArray<T, D>;
        #[inline]
        fn wrap(self) -> OwnedArray<T, D> {
            OwnedArray::new(self)
        }
        #[inline]
        fn unwrap(producer: OwnedArray<T, D>) -> Self {
            producer.into_inner()
        }
    }

    impl<T: Element, D: Dimension + 'static> Sealed for ArcArray<T, D> {
        type Producer = SharedArray<T, D>;
        #[inline]
        fn wrap(self) -> SharedArray<T, D> {
            SharedArray::new(self)
        }
        #[inline]
        fn unwrap(producer: SharedArray<T, D>) -> Self {
            producer.into_inner()
        }
    }
}

/// Moves an owned array into a new DLPack tensor, without copying its elements: one allocation
/// for the tensor's header, shape and strides, none for the data.
///
/// An [`Array`] goes out writable, and [`into_owned`](crate::into_owned) (or
/// [`ManagedTensor::reclaim`] with [`OwnedArray`]) takes it back as it was. An [`ArcArray`] goes
/// out read-only, since its other clones may still read the memory ([`SharedArray`]). Any layout
/// goes out as it is: C or Fortran order, sliced with steps, negative strides.
///
/// ```
/// use dlpack_ndarray::into_dlpack;
/// use ndarray::{Array, s};
///
/// // A reversed, strided slice: exported as it is, negative stride and all.
/// let a = Array::from_iter(0..10i32).slice_move(s![..;-3]);
/// let first = a.as_ptr();
/// let tensor = into_dlpack(a)?;
/// assert_eq!((tensor.shape(), tensor.strides()), (&[4][..], &[-3][..]));
/// assert_eq!(tensor.view::<i32>()?.as_ptr(), first);
/// assert_eq!(tensor.to_vec::<i32>()?, [9, 6, 3, 0]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// Only for arrays DLPack cannot describe: [`Error::BadNdim`] for more than
/// [`dlpack_core::MAX_NDIM`] dimensions. The array comes back, untouched, in the [`Refused`].
#[inline]
pub fn into_dlpack<A: ExportableArray>(array: A) -> Result<ManagedTensor, Refused<A>> {
    ManagedTensor::export(array.wrap()).map_err(|refused| Refused {
        error: refused.error,
        value: A::unwrap(refused.value),
    })
}

/// Copies any array or view into a new DLPack tensor that owns the copy.
///
/// The copy is in standard (C) layout and flagged [`Flags::IS_COPIED`], so that a consumer may
/// write it freely and take it as a `Vec` without another copy ([`ManagedTensor::into_vec`]).
///
/// ```
/// use dlpack_core::Flags;
/// use dlpack_ndarray::to_dlpack;
/// use ndarray::array;
///
/// let a = array![[1u16, 2], [3, 4]];
/// let tensor = to_dlpack(&a.t())?; // a transposed view
/// assert!(tensor.flags().contains(Flags::IS_COPIED));
/// assert_eq!(tensor.to_vec::<u16>()?, [1, 3, 2, 4]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::OutOfMemory`] when the copy does not fit in memory (a broadcast view can stand for
/// far more elements than its memory holds), [`Error::BadNdim`] for more than
/// [`dlpack_core::MAX_NDIM`] dimensions.
pub fn to_dlpack<T, S, D>(array: &ArrayBase<S, D>) -> Result<ManagedTensor, Error>
where
    T: Element,
    S: Data<Elem = T>,
    D: Dimension + 'static,
{
    // Allocated fallibly: a broadcast view may stand for more elements than memory holds.
    let mut data = dlpack_core::__private::try_vec_with_capacity::<T>(array.len())?;
    match array.as_slice() {
        Some(elements) => data.extend_from_slice(elements),
        None => data.extend(array.iter().copied()),
    }
    // SAFETY: `data` holds exactly `len()` elements, the product of the shape's sizes (which
    // ndarray keeps within isize::MAX), in row-major order (`as_slice` is the standard
    // layout's, `iter` walks in logical order), as a standard-layout array of this shape reads
    // them.
    let copy = unsafe { Array::from_shape_vec_unchecked(array.raw_dim(), data) };
    Ok(ManagedTensor::export(OwnedArray {
        array: copy,
        copied: true,
    })?)
}

/// Lends an array or view to DLPack without copying it: the tensor reads the memory in place and
/// is flagged read-only.
///
/// A [`ManagedTensor`] carries no lifetime (consumers in C or Python hold it as long as they
/// like), so the borrow checker cannot tie it to the borrow; the caller does. Prefer
/// [`into_dlpack`] (the tensor owns the array) or [`to_dlpack`] (a copy) unless the copy matters
/// and the tensor's life is known.
///
/// ```
/// use dlpack_ndarray::export_view;
/// use ndarray::array;
///
/// let a = array![[1.0f32, 2.0], [3.0, 4.0]];
/// // SAFETY: the tensor is dropped below, before `a`, and nothing writes `a` meanwhile.
/// let tensor = unsafe { export_view(&a.t())? };
/// assert!(tensor.is_read_only());
/// assert_eq!(tensor.view::<f32>()?.get(&[0, 1]), Some(&3.0));
/// drop(tensor);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// Only for arrays DLPack cannot describe: [`Error::BadNdim`] for more than
/// [`dlpack_core::MAX_NDIM`] dimensions.
///
/// # Safety
///
/// Until the tensor's deleter has run (the returned [`ManagedTensor`] is dropped, or whoever
/// received it through [`ManagedTensor::into_raw`] or a Python capsule deletes it), the memory
/// `array` reaches must stay valid and in place, and nobody may write it: the array (or the array
/// a view borrows) must outlive the tensor, and must not be written, resized, moved out of or
/// dropped meanwhile. Handing the tensor to a consumer that keeps it (a NumPy array made from
/// it, say) extends this for as long as that consumer keeps it.
pub unsafe fn export_view<T, S, D>(array: &ArrayBase<S, D>) -> Result<ManagedTensor, Error>
where
    T: Element,
    S: Data<Elem = T>,
    D: Dimension + 'static,
{
    let first = array.as_ptr().cast_mut();
    Ok(ManagedTensor::export(BorrowedArray::new(
        first,
        array.raw_dim(),
        array.strides(),
        false,
    ))?)
}

/// Lends an array or mutable view to DLPack without copying it: the tensor's consumer may read
/// and write the memory in place.
///
/// As with [`export_view`], the tensor carries no lifetime, so the caller ties it to the borrow.
/// An [`ArcArray`] shared with other clones is first made unique (ndarray's copy-on-write), so
/// the tensor never writes memory another clone reads.
///
/// ```
/// use dlpack_ndarray::export_view_mut;
/// use ndarray::array;
///
/// let mut a = array![1i64, 2, 3];
/// // SAFETY: the tensor is dropped at the end of the block, before `a` is used again.
/// unsafe {
///     let mut tensor = export_view_mut(&mut a)?;
///     tensor.view_mut::<i64>()?.copy_from_slice(&[7, 8, 9])?;
/// }
/// assert_eq!(a, array![7, 8, 9]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// As for [`export_view`].
///
/// # Safety
///
/// Until the tensor's deleter has run (see [`export_view`]), the memory `array` reaches must stay
/// valid and in place, and nobody but the tensor's holder may read or write it: the array (or the
/// array a view borrows) must outlive the tensor and must not be used in any way meanwhile (no
/// reads, no writes, no other views or clones, not moved out of, resized or dropped).
pub unsafe fn export_view_mut<T, S, D>(array: &mut ArrayBase<S, D>) -> Result<ManagedTensor, Error>
where
    T: Element,
    S: DataMut<Elem = T>,
    D: Dimension + 'static,
{
    let first = array.as_mut_ptr();
    Ok(ManagedTensor::export(BorrowedArray::new(
        first,
        array.raw_dim(),
        array.strides(),
        true,
    ))?)
}
