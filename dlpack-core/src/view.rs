//! Typed views: [`TensorView`] and [`TensorViewMut`], strided windows onto host memory.

use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;

use crate::layout::{Offsets, is_row_major, offset_of};
use crate::{Element, Error};

/// An empty `Vec` with room for exactly `len` elements, for copies whose size a foreign tensor
/// decides (a broadcast tensor describes far more elements than its memory holds).
///
/// ```
/// use dlpack_core::__private::try_vec_with_capacity;
/// use dlpack_core::Error;
///
/// assert!(try_vec_with_capacity::<f32>(4)?.capacity() >= 4);
/// assert_eq!(
///     try_vec_with_capacity::<f32>(1 << 62).unwrap_err(),
///     Error::OutOfMemory { bytes: 4 << 62 }
/// );
/// # Ok::<(), Error>(())
/// ```
///
/// # Errors
///
/// [`Error::OutOfMemory`] where `Vec::with_capacity` would panic or abort: the size overflows
/// or the allocation fails.
pub fn try_vec_with_capacity<T>(len: usize) -> Result<Vec<T>, Error> {
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| Error::OutOfMemory {
        bytes: len as u128 * core::mem::size_of::<T>() as u128,
    })?;
    Ok(out)
}

/// Shared state of both view kinds.
struct Raw<'a, T> {
    ptr: *mut T,
    shape: &'a [i64],
    strides: &'a [i64],
    len: usize,
}

impl<T> Clone for Raw<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Raw<'_, T> {}

impl<'a, T: Element> Raw<'a, T> {
    /// # Safety
    /// `ptr` is aligned, and every element reachable from it through `shape` and `strides` is
    /// readable initialised memory for `'a` (when `len > 0`); `len` is the product of `shape`.
    #[inline]
    unsafe fn new(
        ptr: *mut T,
        shape: &'a [i64],
        strides: &'a [i64],
        len: usize,
    ) -> Result<Self, Error> {
        let raw = Raw {
            ptr,
            shape,
            strides,
            len,
        };
        // SAFETY: every reachable element is readable (caller), and validation bounded every
        // offset within isize.
        unsafe { crate::valid::check_values(ptr.cast_const(), shape, strides, len) }?;
        Ok(raw)
    }

    fn contiguous(&self) -> bool {
        is_row_major(self.shape, self.strides)
    }

    #[inline]
    fn element(&self, index: &[usize]) -> Option<*mut T> {
        let offset = offset_of(self.shape, self.strides, index)?;
        // SAFETY: `offset` is the offset of an in-bounds index, so the result is a reachable
        // element inside the allocation (`new`'s contract).
        Some(unsafe { self.ptr.offset(offset) })
    }

    /// Gathers every element, row-major, into `dst` (exactly `len` slots).
    fn gather_into(&self, dst: &mut [MaybeUninit<T>]) {
        debug_assert_eq!(dst.len(), self.len);
        let shape: Vec<usize> = self.shape.iter().map(|&d| d as usize).collect();
        let strides: Vec<isize> = self.strides.iter().map(|&s| s as isize).collect();
        // SAFETY: `dst` has `len` = product(shape) slots; every element reachable from `ptr` is
        // readable, initialised and aligned (`new`'s contract), and validation bounded every
        // offset within isize.
        unsafe { crate::copy::gather(self.ptr.cast_const(), &shape, &strides, dst) };
    }

    /// The elements in a new row-major `Vec`, or [`Error::OutOfMemory`] where the allocation
    /// fails: a broadcast tensor (stride 0) describes far more elements than its memory holds.
    fn try_collect_vec(&self) -> Result<Vec<T>, Error> {
        Ok(self.gather_vec(try_vec_with_capacity(self.len)?))
    }

    /// Gathers every element into `out`, an empty `Vec` with room for `len` of them.
    fn gather_vec(&self, mut out: Vec<T>) -> Vec<T> {
        self.gather_into(&mut out.spare_capacity_mut()[..self.len]);
        // SAFETY: `gather_into` initialised the first `len` elements.
        unsafe { out.set_len(self.len) };
        out
    }

    fn copy_to_slice(&self, dst: &mut [T]) -> Result<(), Error> {
        if dst.len() != self.len {
            return Err(Error::ShapeMismatch {
                found: vec![self.len as i64],
                expected: vec![dst.len() as i64],
            });
        }
        // SAFETY: `[T]` and `[MaybeUninit<T>]` have the same layout, and only valid `T`s (copies
        // of the view's elements) are written through it.
        let dst = unsafe { &mut *(dst as *mut [T] as *mut [MaybeUninit<T>]) };
        self.gather_into(dst);
        Ok(())
    }
}

macro_rules! shared_methods {
    () => {
        /// The shape.
        pub fn shape(&self) -> &'a [i64] {
            self.raw.shape
        }

        /// The strides, in elements.
        pub fn strides(&self) -> &'a [i64] {
            self.raw.strides
        }

        /// The number of dimensions.
        pub fn ndim(&self) -> usize {
            self.raw.shape.len()
        }

        /// The number of elements.
        pub fn len(&self) -> usize {
            self.raw.len
        }

        /// Whether the view has no elements.
        pub fn is_empty(&self) -> bool {
            self.raw.len == 0
        }

        /// Whether the elements are compact and in row-major order (size-1 axes ignored), so
        /// that the view is also a slice.
        pub fn is_row_major_contiguous(&self) -> bool {
            self.raw.contiguous()
        }

        /// The address of the first element (index `[0, 0, ...]`); dangling for an empty view.
        pub fn as_ptr(&self) -> *const T {
            self.raw.ptr
        }

        /// Copies the elements into a new row-major `Vec`. Contiguous runs are copied with
        /// `memcpy`; transposed layouts in cache-sized tiles.
        ///
        /// # Errors
        ///
        /// [`Error::OutOfMemory`] when the elements do not fit in memory: a broadcast view
        /// (stride 0) can describe far more elements than its memory holds.
        pub fn to_vec(&self) -> Result<Vec<T>, Error> {
            self.raw.try_collect_vec()
        }

        /// Copies the elements, row-major, into `dst`, which must hold exactly `len()` of them.
        /// The same gather as [`Self::to_vec`], into a buffer the caller already has.
        ///
        /// # Errors
        ///
        /// [`Error::ShapeMismatch`] when `dst.len()` is not `len()`; nothing is written then.
        pub fn copy_to_slice(&self, dst: &mut [T]) -> Result<(), Error> {
            self.raw.copy_to_slice(dst)
        }
    };
}

/// A read-only typed view of a tensor's host memory, borrowed from its owner.
///
/// Obtained from [`CheckedTensor::view`](crate::CheckedTensor::view). Indices are checked;
/// strides may be negative or zero.
pub struct TensorView<'a, T> {
    raw: Raw<'a, T>,
    _marker: PhantomData<&'a [T]>,
}

impl<'a, T: Element> TensorView<'a, T> {
    /// # Safety
    /// `ptr` is aligned for `T`, and for `'a` every element reachable from it through `shape` and
    /// `strides` is readable, initialised memory of `T`'s dtype that nobody writes.
    #[inline]
    pub(crate) unsafe fn new(
        ptr: *const T,
        shape: &'a [i64],
        strides: &'a [i64],
        len: usize,
    ) -> Result<Self, Error> {
        // SAFETY: forwarded contract.
        let raw = unsafe { Raw::new(ptr.cast_mut(), shape, strides, len)? };
        Ok(TensorView {
            raw,
            _marker: PhantomData,
        })
    }

    shared_methods!();

    /// The element at `index`, or `None` if the index is out of bounds or has the wrong
    /// number of dimensions. The reference lives as long as the borrow of the tensor, not just
    /// this view (a view is a copyable `&[T]`-like handle).
    #[inline]
    pub fn get(&self, index: &[usize]) -> Option<&'a T> {
        // SAFETY: an in-bounds element, readable and initialised for 'a, which nobody writes
        // while 'a lasts (the view's contract).
        self.raw.element(index).map(|p| unsafe { &*p })
    }

    /// The elements as one slice in row-major order, if they are row-major contiguous; it
    /// lives as long as the borrow of the tensor.
    ///
    /// ```
    /// use dlpack_core::ManagedTensor;
    ///
    /// // The slice outlives the view it came from: it borrows the tensor.
    /// fn floats(t: &ManagedTensor) -> Option<&[f32]> {
    ///     t.view::<f32>().ok()?.as_slice()
    /// }
    ///
    /// let t = ManagedTensor::export(vec![1.0f32, 2.0])?;
    /// assert_eq!(floats(&t), Some(&[1.0, 2.0][..]));
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    pub fn as_slice(&self) -> Option<&'a [T]> {
        if self.raw.len == 0 {
            return Some(&[]);
        }
        if !self.raw.contiguous() {
            return None;
        }
        // SAFETY: row-major contiguous: the `len` elements from the first one are exactly the
        // view's elements, readable, initialised and aligned, and nobody writes them for 'a.
        Some(unsafe { core::slice::from_raw_parts(self.raw.ptr, self.raw.len) })
    }

    /// The elements in row-major order (also what `for x in view` walks).
    pub fn iter(&self) -> ViewIter<'a, T> {
        ViewIter {
            ptr: self.raw.ptr,
            offsets: Offsets::new(self.raw.shape, self.raw.strides, self.raw.len),
            _marker: PhantomData,
        }
    }
}

/// The elements of a [`TensorView`] in row-major order, by reference
/// ([`TensorView::iter`], [`TensorViewMut::iter`]).
pub struct ViewIter<'a, T> {
    ptr: *const T,
    offsets: Offsets<'a>,
    _marker: PhantomData<&'a T>,
}

impl<'a, T> Iterator for ViewIter<'a, T> {
    type Item = &'a T;
    #[inline]
    fn next(&mut self) -> Option<&'a T> {
        let offset = self.offsets.next()?;
        // SAFETY: every offset is that of an in-bounds element of the view this iterator came
        // from, readable and initialised, which nobody writes for 'a (the view's contract).
        Some(unsafe { &*self.ptr.offset(offset) })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.offsets.size_hint()
    }
}

impl<T> ExactSizeIterator for ViewIter<'_, T> {}

impl<T> Clone for ViewIter<'_, T> {
    fn clone(&self) -> Self {
        ViewIter {
            ptr: self.ptr,
            offsets: self.offsets.clone(),
            _marker: PhantomData,
        }
    }
}

impl<T> fmt::Debug for ViewIter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ViewIter")
            .field("ptr", &self.ptr)
            .field("remaining", &self.offsets.len())
            .finish()
    }
}

// SAFETY: an ViewIter hands out shared references to `T`s, like `core::slice::Iter`.
unsafe impl<T: Sync> Send for ViewIter<'_, T> {}
// SAFETY: see above.
unsafe impl<T: Sync> Sync for ViewIter<'_, T> {}

impl<'a, T: Element> IntoIterator for TensorView<'a, T> {
    type Item = &'a T;
    type IntoIter = ViewIter<'a, T>;
    fn into_iter(self) -> ViewIter<'a, T> {
        self.iter()
    }
}

impl<'a, T: Element> IntoIterator for &TensorView<'a, T> {
    type Item = &'a T;
    type IntoIter = ViewIter<'a, T>;
    fn into_iter(self) -> ViewIter<'a, T> {
        self.iter()
    }
}

/// `view[[i, j]]`: the element at an index of the view's rank.
///
/// # Panics
///
/// If the index is out of bounds or has the wrong number of dimensions, as slices do;
/// [`TensorView::get`] returns `None` instead.
impl<T: Element, const N: usize> core::ops::Index<[usize; N]> for TensorView<'_, T> {
    type Output = T;
    fn index(&self, index: [usize; N]) -> &T {
        match self.get(&index) {
            Some(element) => element,
            None => out_of_bounds(&index, self.raw.shape),
        }
    }
}

#[cold]
#[track_caller]
fn out_of_bounds(index: &[usize], shape: &[i64]) -> ! {
    panic!("index {index:?} is out of bounds for a view of shape {shape:?}")
}

impl<T> Clone for TensorView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for TensorView<'_, T> {}

// SAFETY: a TensorView is a shared borrow of `T`s, like `&[T]`.
unsafe impl<T: Sync> Send for TensorView<'_, T> {}
// SAFETY: see above.
unsafe impl<T: Sync> Sync for TensorView<'_, T> {}

/// A mutable typed view of a tensor's host memory, borrowed exclusively from its owner.
///
/// Obtained from [`ManagedTensor::view_mut`](crate::ManagedTensor::view_mut), which refuses
/// read-only tensors, strides under which two indices would share an element, and data that
/// overlaps the tensor's own description.
pub struct TensorViewMut<'a, T> {
    raw: Raw<'a, T>,
    _marker: PhantomData<&'a mut [T]>,
}

impl<'a, T: Element> TensorViewMut<'a, T> {
    /// # Safety
    /// As for [`TensorView::new`], and: the memory is writable, distinct indices reach distinct
    /// elements, and nobody else reads or writes it for `'a`.
    pub(crate) unsafe fn new(
        ptr: *mut T,
        shape: &'a [i64],
        strides: &'a [i64],
        len: usize,
    ) -> Result<Self, Error> {
        // SAFETY: forwarded contract.
        let raw = unsafe { Raw::new(ptr, shape, strides, len)? };
        Ok(TensorViewMut {
            raw,
            _marker: PhantomData,
        })
    }

    shared_methods!();

    /// The element at `index`, or `None` if the index is out of bounds or has the wrong
    /// number of dimensions.
    #[inline]
    pub fn get(&self, index: &[usize]) -> Option<&T> {
        self.as_view().get(index)
    }

    /// The elements as one slice in row-major order, if they are row-major contiguous.
    pub fn as_slice(&self) -> Option<&[T]> {
        self.as_view().as_slice()
    }

    /// The elements in row-major order.
    pub fn iter(&self) -> ViewIter<'_, T> {
        self.as_view().iter()
    }

    /// The address of the first element, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.raw.ptr
    }

    /// The element at `index`, mutably.
    pub fn get_mut(&mut self, index: &[usize]) -> Option<&mut T> {
        // SAFETY: an in-bounds element, writable, and exclusively ours while `&mut self` is
        // borrowed.
        self.raw.element(index).map(|p| unsafe { &mut *p })
    }

    /// The elements as one mutable slice, if they are row-major contiguous.
    pub fn as_mut_slice(&mut self) -> Option<&mut [T]> {
        if self.raw.len == 0 {
            return Some(&mut []);
        }
        if !self.raw.contiguous() {
            return None;
        }
        // SAFETY: row-major contiguous elements, writable and exclusively ours.
        Some(unsafe { core::slice::from_raw_parts_mut(self.raw.ptr, self.raw.len) })
    }

    /// The elements in row-major order, mutably.
    pub fn iter_mut(&mut self) -> impl ExactSizeIterator<Item = &mut T> + '_ {
        let ptr = self.raw.ptr;
        Offsets::new(self.raw.shape, self.raw.strides, self.raw.len).map(move |o| {
            // SAFETY: every offset is that of an in-bounds element; distinct indices reach
            // distinct elements (checked when the view was made), so the references never alias.
            unsafe { &mut *ptr.offset(o) }
        })
    }

    /// Writes `values` (row-major, `len()` of them) into the view's elements.
    ///
    /// # Errors
    ///
    /// [`Error::ShapeMismatch`] when `values.len()` is not `len()`; nothing is written then.
    pub fn copy_from_slice(&mut self, values: &[T]) -> Result<(), Error> {
        if values.len() != self.raw.len {
            // `found` is the tensor's, as in `copy_to_slice` (Error::ShapeMismatch).
            return Err(Error::ShapeMismatch {
                found: vec![self.raw.len as i64],
                expected: vec![values.len() as i64],
            });
        }
        if let Some(slice) = self.as_mut_slice() {
            slice.copy_from_slice(values);
        } else {
            for (dst, src) in self.iter_mut().zip(values) {
                *dst = *src;
            }
        }
        Ok(())
    }

    /// A read-only view of the same elements, borrowing this one.
    pub fn as_view(&self) -> TensorView<'_, T> {
        TensorView {
            raw: self.raw,
            _marker: PhantomData,
        }
    }

    /// This view, read-only, for the rest of its lifetime.
    pub fn into_view(self) -> TensorView<'a, T> {
        TensorView {
            raw: self.raw,
            _marker: PhantomData,
        }
    }

    /// The elements as one mutable slice for the rest of the view's lifetime.
    ///
    /// ```
    /// use dlpack_core::ManagedTensor;
    ///
    /// fn floats_mut(t: &mut ManagedTensor) -> Option<&mut [f32]> {
    ///     t.view_mut::<f32>().ok()?.into_slice_mut().ok()
    /// }
    ///
    /// let mut t = ManagedTensor::export(vec![1.0f32, 2.0])?;
    /// floats_mut(&mut t).expect("a contiguous f32 tensor")[1] = 5.0;
    /// assert_eq!(t.to_vec::<f32>()?, [1.0, 5.0]);
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The view itself, when its elements are not row-major contiguous.
    pub fn into_slice_mut(self) -> Result<&'a mut [T], Self> {
        if self.raw.len == 0 {
            return Ok(&mut []);
        }
        if !self.raw.contiguous() {
            return Err(self);
        }
        // SAFETY: row-major contiguous elements, writable, and exclusively this view's for 'a,
        // which the view gives up here.
        Ok(unsafe { core::slice::from_raw_parts_mut(self.raw.ptr, self.raw.len) })
    }
}

/// `view[[i, j]]`: the element at an index of the view's rank.
///
/// # Panics
///
/// If the index is out of bounds or has the wrong number of dimensions, as slices do;
/// [`TensorViewMut::get`] returns `None` instead.
impl<T: Element, const N: usize> core::ops::Index<[usize; N]> for TensorViewMut<'_, T> {
    type Output = T;
    fn index(&self, index: [usize; N]) -> &T {
        match self.get(&index) {
            Some(element) => element,
            None => out_of_bounds(&index, self.raw.shape),
        }
    }
}

/// `view[[i, j]] = x`: the element at an index of the view's rank, mutably.
///
/// # Panics
///
/// As for `Index`; [`TensorViewMut::get_mut`] returns `None` instead.
impl<T: Element, const N: usize> core::ops::IndexMut<[usize; N]> for TensorViewMut<'_, T> {
    fn index_mut(&mut self, index: [usize; N]) -> &mut T {
        match self.raw.element(&index) {
            // SAFETY: an in-bounds element, writable and exclusively ours while `&mut self` is
            // borrowed.
            Some(p) => unsafe { &mut *p },
            None => out_of_bounds(&index, self.raw.shape),
        }
    }
}

// SAFETY: a TensorViewMut is an exclusive borrow of `T`s, like `&mut [T]`.
unsafe impl<T: Send> Send for TensorViewMut<'_, T> {}
// SAFETY: shared access to it only reads, like `&mut [T]`.
unsafe impl<T: Sync> Sync for TensorViewMut<'_, T> {}

impl<T: Element + fmt::Debug> fmt::Debug for TensorView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorView")
            .field("shape", &self.raw.shape)
            .field("strides", &self.raw.strides)
            .field("ptr", &self.raw.ptr)
            .finish()
    }
}

impl<T: Element + fmt::Debug> fmt::Debug for TensorViewMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorViewMut")
            .field("shape", &self.raw.shape)
            .field("strides", &self.raw.strides)
            .field("ptr", &self.raw.ptr)
            .finish()
    }
}
