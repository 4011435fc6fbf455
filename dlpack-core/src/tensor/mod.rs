//! Import: [`ManagedTensor`], the owner of a managed DLPack tensor, and [`CheckedTensor`], the
//! validated description every view is made from.

use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use crate::export::{self, Export};
use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLTensor};
use crate::layout::{self, Extent, Span, is_row_major, strides_are_disjoint};
use crate::view::{TensorView, TensorViewMut};
use crate::{DataType, Device, DeviceHooks, Element, Error, Flags, PointerInfo, Refused, Version};

/// A DLPack tensor whose fields passed validation: the one thing views are made from.
///
/// You get a `&CheckedTensor` from a [`ManagedTensor`] or a [`BorrowedTensor`] (both dereference
/// to it). Validation ran once, when that owner was made; every accessor here is cheap.
///
/// What was checked: `ndim` in `0..=MAX_NDIM`; shape present (unless `ndim == 0`), aligned and
/// non-negative; strides present and aligned, or NULL where DLPack allows it (then compact
/// row-major strides are used); a known dtype with a width DLPack defines; unknown flag bits
/// refused; data non-NULL unless the tensor is empty; every reachable byte address computed with
/// checked arithmetic, fitting the address space and spanning at most `isize::MAX` bytes. Typed
/// access additionally checks the dtype, the device, alignment and (for `bool`) every value.
pub struct CheckedTensor {
    tensor: NonNull<DLTensor>,
    version: Version,
    flags: Flags,
    elements: usize,
    span: Span,
    /// Compact row-major strides, when the producer sent NULL.
    own_strides: Option<Box<[i64]>>,
    /// Whether views may read the memory in place.
    host_accessible: bool,
    /// Whether code outside Rust's borrow rules may write the memory while views of it live
    /// ([`ManagedTensor::into_externally_writable`]).
    externally_writable: bool,
}

impl CheckedTensor {
    /// Validates a `DLTensor`.
    ///
    /// # Safety
    /// `tensor` points to a `DLTensor` that stays valid and unmodified while the result lives,
    /// whose `shape` and `strides` (when not NULL) point to `ndim` readable `i64`s (for any
    /// `ndim` in `0..=MAX_NDIM`), and whose data (when the tensor has elements) is an allocation
    /// holding every element the fields describe.
    #[inline]
    pub(crate) unsafe fn new(
        tensor: NonNull<DLTensor>,
        version: Version,
        flags: Flags,
    ) -> Result<Self, Error> {
        // SAFETY: forwarded contract.
        match unsafe { Self::new_fast(tensor, version, flags) } {
            Some(checked) => Ok(checked),
            // SAFETY: forwarded contract.
            None => unsafe { Self::new_full(tensor, version, flags) },
        }
    }

    /// The common case in one pass and without building errors: a byte-sized dtype, shape and
    /// strides present, no arithmetic overflow anywhere. It accepts only tensors that
    /// [`CheckedTensor::new_full`] accepts, with the same result (a test compares the two over
    /// a grid of edge cases), and leaves everything else, valid or not, to it.
    ///
    /// # Safety
    /// As for [`CheckedTensor::new`].
    #[inline(always)]
    unsafe fn new_fast(tensor: NonNull<DLTensor>, version: Version, flags: Flags) -> Option<Self> {
        // SAFETY: the caller guarantees `tensor` is valid for reads.
        let t = unsafe { tensor.as_ref() };
        let dtype = t.dtype;
        let ndim = usize::try_from(t.ndim).ok()?;
        if flags.unknown_bits() != 0 || ndim > crate::MAX_NDIM || !dtype.is_valid_byte_sized() {
            return None;
        }
        // Non-NULL and 8-aligned, both at once (NULL is aligned, hence the second test).
        let arrays_ok = (t.shape.addr() | t.strides.addr()) & 7 == 0
            && !t.shape.is_null()
            && !t.strides.is_null();
        if ndim > 0 && !arrays_ok {
            return None;
        }
        let (shape, strides) = if ndim == 0 {
            (&[][..], &[][..])
        } else {
            // SAFETY: non-NULL and aligned (checked); the caller guarantees `ndim` readable
            // i64s behind each when they are not NULL.
            unsafe {
                (
                    core::slice::from_raw_parts(t.shape, ndim),
                    core::slice::from_raw_parts(t.strides, ndim),
                )
            }
        };
        let (elements, Extent { lo, hi }) = layout::count_and_extent(shape, strides).ok()?;
        let span = if elements == 0 {
            let start = t.data.addr();
            Span { start, end: start }
        } else {
            if t.data.is_null() {
                return None;
            }
            let elem = dtype.element_bytes() as i64;
            let lo = lo.checked_mul(elem)?;
            let hi = hi.checked_add(1)?.checked_mul(elem)?;
            let base = t
                .data
                .addr()
                .checked_add(usize::try_from(t.byte_offset).ok()?)?;
            let start = base.checked_add_signed(isize::try_from(lo).ok()?)?;
            let end = base.checked_add_signed(isize::try_from(hi).ok()?)?;
            if end - start > isize::MAX as usize {
                return None;
            }
            Span { start, end }
        };
        Some(CheckedTensor {
            tensor,
            version,
            flags,
            elements,
            span,
            own_strides: None,
            host_accessible: t.device.device_type.is_host_accessible(),
            externally_writable: false,
        })
    }

    /// Every check, with a precise error for each failure.
    ///
    /// # Safety
    /// As for [`CheckedTensor::new`].
    #[cold]
    #[inline(never)]
    unsafe fn new_full(
        tensor: NonNull<DLTensor>,
        version: Version,
        flags: Flags,
    ) -> Result<Self, Error> {
        // SAFETY: the caller guarantees `tensor` is valid for reads.
        let t = unsafe { tensor.as_ref() };
        if flags.unknown_bits() != 0 {
            return Err(Error::UnknownFlags { flags });
        }
        let ndim = usize::try_from(t.ndim)
            .ok()
            .filter(|&n| n <= crate::MAX_NDIM)
            .ok_or(Error::BadNdim {
                ndim: t.ndim.into(),
            })?;
        t.dtype.validate()?;
        // SAFETY: the caller guarantees shape points to ndim i64s when not NULL.
        let shape = unsafe { read_array(t.shape, ndim, "shape")? };
        if let Some((axis, &value)) = shape.iter().enumerate().find(|(_, d)| **d < 0) {
            return Err(Error::NegativeDim { axis, value });
        }
        let own_strides = if t.strides.is_null() && ndim > 0 {
            if !version.allows_null_strides() {
                return Err(Error::NullStrides { ndim, version });
            }
            Some(layout::row_major_strides(shape))
        } else {
            None
        };
        let strides = match &own_strides {
            Some(s) => s,
            // SAFETY: as for shape.
            None => unsafe { read_array(t.strides, ndim, "strides")? },
        };
        let elements = element_count(shape)?;
        let span = if elements == 0 {
            let start = t.data.addr();
            Span { start, end: start }
        } else {
            if t.data.is_null() {
                return Err(Error::NullData {
                    elements: elements as u128,
                });
            }
            reach(t, shape, strides, flags)?
        };
        Ok(CheckedTensor {
            tensor,
            version,
            flags,
            elements,
            span,
            own_strides,
            host_accessible: t.device.device_type.is_host_accessible(),
            externally_writable: false,
        })
    }

    /// Whether every reachable byte lies in `allocation`, when one is named.
    #[inline(always)]
    fn fits(&self, allocation: &Option<core::ops::Range<usize>>) -> bool {
        let span = self.span;
        match allocation {
            None => true,
            Some(alloc) => {
                span.start == span.end || (alloc.start <= span.start && span.end <= alloc.end)
            }
        }
    }

    /// Refuses a description whose reachable bytes leave `allocation`, when one is named.
    fn within(self, allocation: Option<core::ops::Range<usize>>) -> Result<Self, Error> {
        if self.fits(&allocation) {
            return Ok(self);
        }
        let (span, alloc) = (self.span, allocation.unwrap_or(0..0));
        Err(Error::SpanOutsideAllocation {
            start: span.start,
            end: span.end,
            alloc_start: alloc.start,
            alloc_end: alloc.end,
        })
    }

    #[inline]
    fn raw(&self) -> &DLTensor {
        // SAFETY: `new`'s caller guaranteed the DLTensor outlives `self` unmodified.
        unsafe { self.tensor.as_ref() }
    }

    /// The raw `DLTensor`, for passing on to C. Do not modify it.
    #[inline]
    pub fn as_dl_tensor(&self) -> &DLTensor {
        self.raw()
    }

    /// The DLPack version the producer wrote (`0.0` for a legacy tensor, which has none).
    #[inline]
    pub fn version(&self) -> Version {
        self.version
    }

    /// The flags (legacy tensors have none, see [`ManagedTensor::from_raw_legacy`]).
    #[inline]
    pub fn flags(&self) -> Flags {
        self.flags
    }

    /// Whether the producer forbids writes.
    #[inline]
    pub fn is_read_only(&self) -> bool {
        self.flags.contains(Flags::READ_ONLY)
    }

    /// The device the tensor claims to live on.
    #[inline]
    pub fn device(&self) -> Device {
        self.raw().device
    }

    /// The element type.
    #[inline]
    pub fn dtype(&self) -> DataType {
        self.raw().dtype
    }

    /// The number of dimensions.
    #[inline]
    pub fn ndim(&self) -> usize {
        // Validated: 0..=MAX_NDIM.
        self.raw().ndim as usize
    }

    /// The shape (every size is >= 0).
    #[inline]
    pub fn shape(&self) -> &[i64] {
        let ndim = self.ndim();
        if ndim == 0 {
            return &[];
        }
        // SAFETY: validated in `new`: with ndim > 0 the shape is non-NULL and aligned, and its
        // ndim i64s stay valid and unmodified while self lives.
        unsafe { core::slice::from_raw_parts(self.raw().shape, ndim) }
    }

    /// The strides in elements; compact row-major ones when the producer sent NULL.
    #[inline]
    pub fn strides(&self) -> &[i64] {
        match &self.own_strides {
            Some(s) => s,
            None => {
                let ndim = self.ndim();
                if ndim == 0 {
                    return &[];
                }
                // SAFETY: validated in `new`: with ndim > 0 and no strides of our own, the
                // strides are non-NULL and aligned, and valid and unmodified while self lives.
                unsafe { core::slice::from_raw_parts(self.raw().strides, ndim) }
            }
        }
    }

    /// The data pointer as the producer sent it (the first element is at `byte_offset` from it).
    #[inline]
    pub fn data_ptr(&self) -> *mut core::ffi::c_void {
        self.raw().data
    }

    /// Bytes from [`CheckedTensor::data_ptr`] to the first element.
    #[inline]
    pub fn byte_offset(&self) -> u64 {
        self.raw().byte_offset
    }

    /// The number of elements (the product of the shape).
    #[inline]
    pub fn len(&self) -> usize {
        self.elements
    }

    /// Whether the tensor has no elements.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.elements == 0
    }

    /// The address range of every byte the tensor can reach (empty when it has no elements).
    pub fn byte_span(&self) -> core::ops::Range<usize> {
        self.span.start..self.span.end
    }

    /// The offset, in elements from the first element, of every index in row-major order
    /// (the order of [`CheckedTensor::to_vec`]): what a device copy or a custom gather walks.
    pub fn element_offsets(&self) -> crate::layout::Offsets<'_> {
        crate::layout::Offsets::new(self.shape(), self.strides(), self.len())
    }

    /// Whether the strides are the compact row-major ones for the shape (size-1 axes ignored).
    pub fn is_row_major_contiguous(&self) -> bool {
        is_row_major(self.shape(), self.strides())
    }

    /// Whether the host can read the memory in place: the device type is CPU, CUDA/ROCm pinned
    /// or CUDA managed memory, or a device hook said so in [`ManagedTensor::verify_device`].
    #[inline]
    pub fn is_host_accessible(&self) -> bool {
        self.host_accessible
    }

    /// Whether code outside Rust's borrow rules may write the memory while views of it live
    /// ([`ManagedTensor::into_externally_writable`]): typed views of element types that not
    /// every bit pattern is valid for (`bool`) are refused then, and copies are checked.
    #[inline]
    pub fn is_externally_writable(&self) -> bool {
        self.externally_writable
    }

    /// Whether the memory may be handed to Rust code as owned values ([`ManagedTensor::reclaim`],
    /// [`ManagedTensor::into_vec`]): no one outside Rust may still write it, and a `bool`
    /// tensor holds only 0s and 1s (a consumer of a writable export may have written others).
    #[inline]
    fn can_be_owned(&self) -> bool {
        !self.externally_writable && (self.dtype() != DataType::BOOL || self.holds_only_bools())
    }

    /// Whether a `bool` tensor's bytes are all 0 or 1 (or the host cannot read them: device
    /// memory is no Rust value).
    #[cold]
    #[inline(never)]
    fn holds_only_bools(&self) -> bool {
        if !self.host_accessible {
            return true;
        }
        match self.typed_base::<bool>() {
            // SAFETY: as for `view`; the view checks every element's byte and is dropped at
            // once.
            Ok(base) => unsafe {
                TensorView::<bool>::new(base, self.shape(), self.strides(), self.elements)
            }
            .is_ok(),
            Err(_) => false,
        }
    }

    /// A typed read-only view.
    ///
    /// # Errors
    ///
    /// [`Error::DataTypeMismatch`] if `T`'s dtype is not the tensor's,
    /// [`Error::NotHostAccessible`] if the host cannot read the memory, [`Error::Misaligned`] if
    /// the first element is not aligned for `T`. For `bool` (an [`Element`] whose values are
    /// checked), [`Error::InvalidValue`] if an element is neither 0 nor 1,
    /// [`Error::IrregularOverlap`] for strides too irregular to check every element, and
    /// [`Error::ExternallyWritable`] when code outside Rust may write the memory meanwhile
    /// ([`ManagedTensor::into_externally_writable`]; [`CheckedTensor::to_vec`] copies such a
    /// tensor, checking every element).
    #[inline]
    pub fn view<T: Element>(&self) -> Result<TensorView<'_, T>, Error> {
        let base = self.typed_base::<T>()?;
        if !T::ANY_BIT_PATTERN && self.externally_writable {
            return Err(Error::ExternallyWritable { dtype: T::DTYPE });
        }
        // SAFETY: `typed_base` checked dtype, host access and alignment; validation in `new`
        // established that every reachable element lies in the producer's allocation, which
        // stays valid and unmodified (except through this tensor) while `self` is borrowed.
        unsafe { TensorView::new(base, self.shape(), self.strides(), self.elements) }
    }

    /// A read-only view of the elements' bytes, for a tensor whose elements are one byte wide
    /// (`bool`, `int8`, `uint8`, the float8 types, ...): the same shape and strides, as `u8`.
    ///
    /// Every bit pattern is a valid `u8`, so nothing is checked element by element: this is
    /// the way to read a `bool` tensor whose bytes may not all be 0 or 1, or whose strides
    /// overlap too irregularly for [`CheckedTensor::view`] to check ([`Error::IrregularOverlap`]).
    ///
    /// ```
    /// use dlpack_core::{Error, ManagedTensor};
    ///
    /// let t = ManagedTensor::export(vec![true, false, true])?;
    /// assert_eq!(t.view_bytes()?.to_vec()?, [1, 0, 1]);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::DataTypeMismatch`] (expecting `uint8`) for elements wider or narrower than one
    /// byte, or with more than one lane; [`Error::NotHostAccessible`] if the host cannot read the
    /// memory.
    pub fn view_bytes(&self) -> Result<TensorView<'_, u8>, Error> {
        let dtype = self.dtype();
        if dtype.bits != 8 || dtype.lanes != 1 {
            return Err(Error::DataTypeMismatch {
                found: dtype,
                expected: DataType::U8,
            });
        }
        let base = self.host_base::<u8>()?;
        // SAFETY: as for `view`: one-byte elements, so the strides in elements are the strides
        // in `u8`s; validation established that every reachable byte lies in the producer's
        // initialised allocation, which stays valid and unmodified (except through this tensor)
        // while `self` is borrowed; and every byte is a valid `u8`.
        unsafe { TensorView::new(base, self.shape(), self.strides(), self.elements) }
    }

    /// Copies the elements into a new row-major `Vec` (the strided gather; a single `memcpy` for
    /// contiguous data).
    ///
    /// Of memory that code outside Rust may write ([`ManagedTensor::into_externally_writable`]),
    /// `bool`s are copied as bytes and checked in the copy, where no one else can change them.
    ///
    /// # Errors
    ///
    /// Those of [`CheckedTensor::view`] (but [`Error::ExternallyWritable`] for a one-byte
    /// type), and [`Error::OutOfMemory`] if the elements do not fit in memory (a broadcast
    /// tensor can describe far more elements than its memory holds).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, Error> {
        if !T::ANY_BIT_PATTERN && self.externally_writable {
            return self.to_vec_checked::<T>();
        }
        self.view::<T>()?.to_vec()
    }

    /// [`CheckedTensor::to_vec`] of memory that others may write, for an element type whose
    /// values are checked: the bytes are copied first, into memory only this copy owns, and
    /// checked there, so no reference to an element is ever made of the shared memory.
    #[cold]
    fn to_vec_checked<T: Element>(&self) -> Result<Vec<T>, Error> {
        self.check_dtype::<T>()?;
        if core::mem::size_of::<T>() != 1 || core::mem::align_of::<T>() != 1 {
            // Only one-byte types (bool) have a byte view to copy through.
            return Err(Error::ExternallyWritable { dtype: T::DTYPE });
        }
        let bytes = self.view_bytes()?.to_vec()?;
        if let Some(index) = bytes
            .iter()
            .position(|b| !T::is_valid_bits(core::slice::from_ref(b)))
        {
            return Err(Error::InvalidValue {
                dtype: T::DTYPE,
                index,
                byte: bytes[index],
            });
        }
        let mut bytes = core::mem::ManuallyDrop::new(bytes);
        let (ptr, len, capacity) = (bytes.as_mut_ptr(), bytes.len(), bytes.capacity());
        // SAFETY: `T` is one byte wide with alignment 1 (checked above), so the allocation of a
        // `Vec<u8>` of this capacity is one of a `Vec<T>` of the same capacity (same size and
        // alignment); its `len` bytes are initialised, each a valid `T` (checked just above);
        // the `Vec<u8>` is forgotten, so the allocation has one owner.
        Ok(unsafe { Vec::from_raw_parts(ptr.cast::<T>(), len, capacity) })
    }

    /// Copies the elements into a new row-major `Vec`, through `hooks` when the memory is not
    /// host-accessible (device memory is copied to the host as one block, then gathered).
    ///
    /// The block is the tensor's whole byte span ([`CheckedTensor::byte_span`]), so a sparse
    /// tensor (a column of a large matrix, say) stages more than its elements.
    ///
    /// # Errors
    ///
    /// For host-accessible memory, those of [`CheckedTensor::to_vec`]. Otherwise
    /// [`Error::DataTypeMismatch`], [`Error::NoHook`] if `hooks` does not handle the tensor's
    /// device type, [`Error::Misaligned`], [`Error::OutOfMemory`] if the block or the result
    /// does not fit in memory, the hook's errors ([`DeviceHooks::copy_to_host`]), and for `bool`
    /// [`Error::InvalidValue`] or [`Error::IrregularOverlap`]. After the hook's
    /// [`Error::CopyInFlight`] (a copy the runtime could not see finish) the staging block is
    /// leaked, since the device may still write it.
    pub fn to_host_vec<T: Element>(&self, hooks: &dyn DeviceHooks) -> Result<Vec<T>, Error> {
        if self.host_accessible {
            return self.to_vec();
        }
        self.check_dtype::<T>()?;
        let device = self.device();
        if !hooks.handles(device.device_type) {
            return Err(Error::NoHook { device });
        }
        if self.elements == 0 {
            return Ok(Vec::new());
        }
        let first = self.first_element_address()?;
        if !first.is_multiple_of(core::mem::align_of::<T>()) {
            return Err(Error::Misaligned {
                address: first,
                align: core::mem::align_of::<T>(),
            });
        }
        let size = core::mem::size_of::<T>();
        let count = (self.span.end - self.span.start) / size;
        let mut staging: Vec<core::mem::MaybeUninit<T>> = crate::try_vec_with_capacity(count)?;
        // SAFETY: the capacity is `count` elements; zero bytes are written before the buffer is
        // seen as bytes, so the `&mut [u8]` below covers initialised memory.
        let bytes = unsafe {
            core::ptr::write_bytes(staging.as_mut_ptr(), 0, count);
            core::slice::from_raw_parts_mut(staging.as_mut_ptr().cast::<u8>(), count * size)
        };
        // SAFETY: validation established that span.start..span.end is the tensor's reachable
        // memory on `device`, which stays valid while `self` is borrowed.
        match unsafe { hooks.copy_to_host(device, self.span.start, bytes) } {
            Ok(()) => {}
            Err(err @ Error::CopyInFlight { .. }) => {
                // The device may still write the staging buffer: never free it (the hook's
                // contract).
                core::mem::forget(staging);
                return Err(err);
            }
            Err(err) => return Err(err),
        }
        // SAFETY: `count` elements were initialised (zeroed, then overwritten by the copy).
        unsafe { staging.set_len(count) };
        // Element offsets relative to the first element; the first element sits at
        // `first - span.start` bytes into the staging buffer, a multiple of `size`.
        let base_index = (first - self.span.start) / size;
        let base = staging.as_ptr().cast::<T>().wrapping_add(base_index);
        // SAFETY: the staging buffer is an aligned host copy of the whole span, so every element
        // offset from `base` that validation allowed lies inside it; bool values are checked by
        // `TensorView::new`. The view's lifetime comes from `self`'s arrays, not from `staging`:
        // only the owned copy below may leave this function, never a reference from the view.
        let view = unsafe { TensorView::new(base, self.shape(), self.strides(), self.elements)? };
        view.to_vec()
    }

    #[inline]
    fn check_dtype<T: Element>(&self) -> Result<(), Error> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DataTypeMismatch {
                found: self.dtype(),
                expected: T::DTYPE,
            });
        }
        Ok(())
    }

    #[inline]
    fn first_element_address(&self) -> Result<usize, Error> {
        let t = self.raw();
        (t.data.addr())
            .checked_add(usize::try_from(t.byte_offset).unwrap_or(usize::MAX))
            .ok_or_else(|| Error::Overflow {
                what: "data + byte_offset".into(),
            })
    }

    /// The first element as a `*const T`, after the checks every typed view needs.
    #[inline]
    fn typed_base<T: Element>(&self) -> Result<*const T, Error> {
        self.check_dtype::<T>()?;
        self.host_base::<T>()
    }

    /// The address of the first element as a `*const T`, for a host-accessible tensor whose
    /// first element is aligned for `T` (dangling for an empty tensor). The dtype is the
    /// caller's to check.
    #[inline]
    fn host_base<T>(&self) -> Result<*const T, Error> {
        if !self.host_accessible {
            return Err(Error::NotHostAccessible {
                device: self.device(),
            });
        }
        if self.elements == 0 {
            return Ok(NonNull::<T>::dangling().as_ptr());
        }
        let address = self.first_element_address()?;
        if !address.is_multiple_of(core::mem::align_of::<T>()) {
            return Err(Error::Misaligned {
                address,
                align: core::mem::align_of::<T>(),
            });
        }
        // Validation checked that data + byte_offset does not overflow and lies in the span.
        Ok(self
            .raw()
            .data
            .cast::<u8>()
            .wrapping_add(self.raw().byte_offset as usize)
            .cast::<T>())
    }

    /// A typed mutable view; the caller holds the owner exclusively. `header` is the address
    /// range of the struct that holds the `DLTensor` (the managed tensor, or the `DLTensor`
    /// itself when it stands alone).
    fn view_mut<T: Element>(
        &self,
        header: core::ops::Range<usize>,
    ) -> Result<TensorViewMut<'_, T>, Error> {
        self.check_writable(header)?;
        let base = self.typed_base::<T>()?.cast_mut();
        if !T::ANY_BIT_PATTERN && self.externally_writable {
            return Err(Error::ExternallyWritable { dtype: T::DTYPE });
        }
        // SAFETY: as for `view`, plus: the tensor is writable (not READ_ONLY, and its producer
        // promised writable memory), no two indices share memory, no element lies in the
        // struct, shape or strides this view reads its layout from (checked just above), and the
        // caller borrows the owner mutably for the view's lifetime, so no other view of this
        // tensor exists.
        unsafe { TensorViewMut::new(base, self.shape(), self.strides(), self.elements) }
    }

    /// What writing every element in place needs, whoever writes (a view, a device copy): the
    /// tensor is writable, no two indices share memory, and no element lies in the tensor's own
    /// description.
    fn check_writable(&self, header: core::ops::Range<usize>) -> Result<(), Error> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        if !strides_are_disjoint(self.shape(), self.strides()) {
            return Err(Error::OverlappingStrides {
                shape: self.shape().to_vec(),
                strides: self.strides().to_vec(),
            });
        }
        self.check_disjoint_from_description(header)
    }

    /// Refuses a data span (every byte from the lowest element to the highest, so the gaps of a
    /// strided tensor count too: conservative) that overlaps the memory the tensor's layout is
    /// read from: the struct
    /// (`header`), the shape array, or the producer's strides array. Reading such a tensor is
    /// harmless, but a write through a mutable view would change `ndim`, the shape, the strides
    /// (or even the deleter), and with them the bounds the view relies on.
    fn check_disjoint_from_description(
        &self,
        header: core::ops::Range<usize>,
    ) -> Result<(), Error> {
        let Span { start, end } = self.span;
        if start == end {
            return Ok(());
        }
        let array = |ptr: *const i64| {
            let first = ptr.addr();
            first..first.saturating_add(self.ndim() * core::mem::size_of::<i64>())
        };
        let t = self.raw();
        let strides = if self.own_strides.is_none() {
            array(t.strides)
        } else {
            0..0
        };
        for (what, range) in [
            ("managed tensor struct", header),
            ("shape array", array(t.shape)),
            ("strides array", strides),
        ] {
            // Half-open ranges; an empty one (no array for ndim 0) overlaps nothing.
            if range.start < range.end && range.start < end && start < range.end {
                return Err(Error::DataOverlapsDescription { what, start, end });
            }
        }
        Ok(())
    }

    fn verify_device(&mut self, hooks: &dyn DeviceHooks) -> Result<Option<PointerInfo>, Error> {
        let info = self.check_device(hooks)?;
        if info.as_ref().is_some_and(|i| i.kind.is_host_accessible()) {
            self.host_accessible = true;
        }
        Ok(info)
    }

    /// Asks a device hook where the data really lives and checks the tensor's claim, as
    /// [`ManagedTensor::verify_device`] does, without recording the answer (typed views stay as
    /// they were): for a producer deciding how to serve a tensor, say.
    ///
    /// Returns what the hook reported, or `None` for a tensor without elements.
    ///
    /// # Errors
    ///
    /// [`Error::NoHook`] if `hooks` does not handle the tensor's device type, the errors of the
    /// hook's [`DeviceHooks::resolve`] ([`Error::UnknownPointer`], say), and where its answer
    /// contradicts the tensor: [`Error::MemoryKindMismatch`] for memory the device type cannot
    /// describe, [`Error::DeviceMismatch`] for device memory of another device,
    /// [`Error::SpanOutsideAllocation`] for reachable bytes outside the reported allocation.
    pub fn check_device(&self, hooks: &dyn DeviceHooks) -> Result<Option<PointerInfo>, Error> {
        let claimed = self.device();
        if !hooks.handles(claimed.device_type) {
            return Err(Error::NoHook { device: claimed });
        }
        if self.elements == 0 {
            return Ok(None);
        }
        let info = hooks.resolve(claimed, self.span.start)?;
        if !info.kind.fits(claimed.device_type) {
            return Err(Error::MemoryKindMismatch {
                claimed,
                actual: info.kind,
            });
        }
        if !claimed.device_type.is_host_accessible() && info.device != claimed {
            return Err(Error::DeviceMismatch {
                claimed,
                actual: info.device,
            });
        }
        if let Some(range) = &info.allocation
            && (self.span.start < range.start || self.span.end > range.end)
        {
            return Err(Error::SpanOutsideAllocation {
                start: self.span.start,
                end: self.span.end,
                alloc_start: range.start,
                alloc_end: range.end,
            });
        }
        Ok(Some(info))
    }
}

impl fmt::Debug for CheckedTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckedTensor")
            .field("device", &format_args!("{}", self.device()))
            .field("dtype", &format_args!("{}", self.dtype()))
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("byte_offset", &self.byte_offset())
            .field("flags", &self.flags)
            .field("version", &format_args!("{}", self.version))
            .finish()
    }
}

/// Reads an `i64` array field.
///
/// # Safety
/// When `ptr` is non-NULL, aligned and `len > 0`, it points to `len` readable `i64`s that stay
/// valid for `'a`.
unsafe fn read_array<'a>(
    ptr: *const i64,
    len: usize,
    what: &'static str,
) -> Result<&'a [i64], Error> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::NullPointer { what });
    }
    if !ptr.addr().is_multiple_of(core::mem::align_of::<i64>()) {
        return Err(Error::MisalignedArray {
            what,
            address: ptr.addr(),
        });
    }
    // SAFETY: non-NULL and aligned (checked), `len` readable i64s (caller).
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// The flags a legacy managed tensor is validated with: none for one this crate exported (it
/// keeps its writability), `READ_ONLY` for a foreign one, since nothing says its memory may be
/// written (as in NumPy).
///
/// # Safety
/// `ptr` points to a readable `DLManagedTensor`.
unsafe fn legacy_flags(ptr: *const DLManagedTensor) -> Flags {
    // SAFETY: readable (caller).
    if export::is_ours(unsafe { (*ptr).manager_ctx }) {
        Flags::empty()
    } else {
        Flags::READ_ONLY
    }
}

/// The number of elements of `shape` (whose sizes are not negative).
fn element_count(shape: &[i64]) -> Result<usize, Error> {
    layout::element_count(shape).ok_or_else(|| Error::Overflow {
        what: format!("the element count of shape {shape:?} exceeds usize"),
    })
}

/// Computes the reachable byte span of a tensor with elements, with checked arithmetic.
fn reach(t: &DLTensor, shape: &[i64], strides: &[i64], flags: Flags) -> Result<Span, Error> {
    let overflow = |what: String| Error::Overflow { what };
    let too_far = || {
        overflow(format!(
            "the strides {strides:?} of shape {shape:?} reach too far"
        ))
    };
    let dtype = t.dtype;
    // Byte offsets of the lowest reachable byte and one past the highest, relative to
    // data + byte_offset. Any intermediate value beyond i64 means a span no address space holds,
    // so i64 arithmetic (checked) is exact for every tensor that can be valid.
    let (lo, hi): (i64, i64) = if !dtype.is_byte_sized()
        && !flags.contains(Flags::IS_SUBBYTE_TYPE_PADDED)
    {
        // Packed sub-byte elements: only the compact row-major layout is defined.
        if !is_row_major(shape, strides) {
            return Err(Error::StridedSubByte { dtype });
        }
        let bits = (element_count(shape)? as u64)
            .checked_mul(u64::from(dtype.element_bits()))
            .and_then(|b| i64::try_from(b.div_ceil(8)).ok())
            .ok_or_else(too_far)?;
        (0, bits)
    } else {
        // The count cannot overflow: the caller counted the elements already.
        let (_, Extent { lo, hi }) =
            layout::count_and_extent(shape, strides).map_err(|stop| match stop {
                layout::Overflow::Term { axis } => {
                    let (d, s) = (shape[axis], strides[axis]);
                    overflow(format!(
                        "(shape[{axis}] - 1) * strides[{axis}] = ({d} - 1) * {s} overflows: the strides {strides:?} of shape {shape:?} reach too far"
                    ))
                }
                layout::Overflow::Sum | layout::Overflow::Count => too_far(),
            })?;
        let elem = dtype.element_bytes() as i64;
        let lo = lo.checked_mul(elem);
        let hi = hi.checked_add(1).and_then(|h| h.checked_mul(elem));
        (lo.ok_or_else(too_far)?, hi.ok_or_else(too_far)?)
    };
    // Address arithmetic in i128 (additions only): data and byte_offset are each below 2^64.
    let base = t.data.addr() as i128 + i128::from(t.byte_offset);
    let (start, end) = (base + i128::from(lo), base + i128::from(hi));
    let fits = start >= 0 && end <= usize::MAX as i128 && end - start <= isize::MAX as i128;
    if !fits {
        return Err(overflow(format!(
            "data {:#x} + byte_offset {} with strides {strides:?} and shape {shape:?} reaches bytes {start:#x}..{end:#x}, which leaves the address space or spans more than isize::MAX bytes",
            t.data.addr(),
            t.byte_offset
        )));
    }
    Ok(Span {
        start: start as usize,
        end: end as usize,
    })
}

#[derive(Clone, Copy)]
enum Raw {
    Versioned(NonNull<DLManagedTensorVersioned>),
    Legacy(NonNull<DLManagedTensor>),
}

/// The owner of a managed DLPack tensor: it calls the tensor's deleter exactly once, on drop.
///
/// Made by exporting a producer ([`ManagedTensor::export`]) or by importing a raw pointer
/// ([`ManagedTensor::from_raw`], [`ManagedTensor::from_raw_legacy`]). It dereferences to
/// [`CheckedTensor`] for the tensor's fields, typed views and copies, and hands itself to C with
/// [`ManagedTensor::into_raw`].
///
/// ```
/// use dlpack_core::ManagedTensor;
///
/// let data = vec![1.0f32, 2.0, 3.0];
/// let ptr = data.as_ptr();
/// let tensor = ManagedTensor::export(data)?;          // one allocation, no copy
/// let raw = tensor.into_raw()?;                       // a DLManagedTensorVersioned* for C
/// // ... a consumer receives `raw` ...
/// let tensor = unsafe { ManagedTensor::from_raw(raw)? }; // validated once
/// assert_eq!(tensor.view::<f32>()?.as_ptr(), ptr);
/// let back: Vec<f32> = tensor.reclaim().expect("exported from a Vec<f32>");
/// assert_eq!(back.as_ptr(), ptr);                      // the same buffer, never copied
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// `ManagedTensor` is `Send` (DLPack lets the deleter run on any thread) and `Sync` (shared
/// access only reads the tensor).
pub struct ManagedTensor {
    raw: Raw,
    checked: ManuallyDrop<CheckedTensor>,
}

// SAFETY: DLPack allows the deleter to run on any thread, and `Export` producers are `Send`.
unsafe impl Send for ManagedTensor {}
// SAFETY: through `&ManagedTensor` only the tensor's fields and its memory are read; the
// producer's memory is not written by anyone else while the tensor lives (export and import
// contracts), so concurrent reads are race-free.
unsafe impl Sync for ManagedTensor {}

impl ManagedTensor {
    /// Moves `producer` into a new versioned managed tensor: one allocation, no copy.
    ///
    /// # Errors
    ///
    /// The producer's own [`Export::check`] error, [`Error::BadNdim`] for more than
    /// [`crate::MAX_NDIM`] dimensions; for a description the importer would refuse, the error of
    /// the import check it fails ([`Error::UnknownFlags`], those of [`DataType::validate`],
    /// [`Error::NegativeDim`], [`Error::NullData`], [`Error::StridedSubByte`],
    /// [`Error::Overflow`]); [`Error::SpanOutsideAllocation`] for one that reaches outside the
    /// allocation it names. Every error comes with the producer, unchanged ([`Refused`]; `?`
    /// turns it into the [`Error`], dropping the producer).
    pub fn export<P: Export>(producer: P) -> Result<Self, Refused<P>> {
        let (raw, allocation) = export::export::<DLManagedTensorVersioned, P>(producer)?;
        // SAFETY: a block fresh from `export` is a live versioned managed tensor with this
        // crate's deleter and a producer of type `P`, owned here and by no one else.
        unsafe { Self::adopt(raw, allocation) }
    }

    /// Moves `producer` into a new legacy `DLManagedTensor` (no version, no flags), for consumers
    /// that only know the pre-1.0 struct.
    ///
    /// ```
    /// use dlpack_core::{Error, ManagedTensor};
    /// use std::sync::Arc;
    ///
    /// // An Arc is shared, so it exports read-only: the legacy struct cannot say so.
    /// let shared: Arc<[f32]> = Arc::from(vec![1.0, 2.0]);
    /// let refused = ManagedTensor::export_legacy(shared).unwrap_err();
    /// assert_eq!(refused.error, Error::LegacyReadOnly);
    /// let tensor = ManagedTensor::export(refused.value)?; // the versioned struct can
    /// assert!(tensor.is_read_only());
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`ManagedTensor::export`], and [`Error::LegacyReadOnly`] for a read-only producer,
    /// [`Error::LegacyPaddedSubByte`] for padded sub-byte elements: the legacy struct can say
    /// neither. Every error comes with the producer, unchanged ([`Refused`]).
    pub fn export_legacy<P: Export>(producer: P) -> Result<Self, Refused<P>> {
        let (raw, allocation) = export::export::<DLManagedTensor, P>(producer)?;
        // SAFETY: as in `export`, for a legacy block.
        unsafe { Self::adopt(raw, allocation) }
    }

    /// Moves `producer` into a new versioned managed tensor and gives it straight to C, as
    /// `ManagedTensor::export(producer)?.into_raw()` does, without building the validated owner
    /// in between: the fast path of a `__dlpack__` that hands a fresh export to a consumer. The
    /// receiver must call the deleter once.
    ///
    /// A producer that names its [`ExportDesc::allocation`](crate::ExportDesc::allocation) is
    /// validated as by [`ManagedTensor::export`] (its layout is checked against that range);
    /// any other is trusted to describe a valid tensor, as [`Export`]'s safety contract
    /// promises, and is not validated again. Every consumer validates on import anyway, this
    /// crate's included.
    ///
    /// ```
    /// use dlpack_core::ManagedTensor;
    ///
    /// let raw = ManagedTensor::export_raw(vec![1.0f32, 2.0])?;
    /// // ... a C consumer takes `raw`; here this crate takes it back:
    /// // SAFETY: `raw` is a live tensor we own and hand over.
    /// let tensor = unsafe { ManagedTensor::from_raw(raw.as_ptr())? };
    /// assert_eq!(tensor.view::<f32>()?.to_vec()?, [1.0, 2.0]);
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The producer's own [`Export::check`] error, [`Error::BadNdim`] for more than
    /// [`crate::MAX_NDIM`] dimensions, and for a producer that names its allocation the rest of
    /// [`ManagedTensor::export`]'s errors. Every error comes with the producer, unchanged
    /// ([`Refused`]).
    #[inline]
    pub fn export_raw<P: Export>(
        producer: P,
    ) -> Result<NonNull<DLManagedTensorVersioned>, Refused<P>> {
        let (raw, allocation) = export::export::<DLManagedTensorVersioned, P>(producer)?;
        if allocation.is_none() {
            return Ok(raw);
        }
        // SAFETY: as in `export`. Once validated, the owner is forgotten: `raw` goes to C.
        unsafe { Self::adopt::<_, P>(raw, allocation) }?.forget();
        Ok(raw)
    }

    /// [`ManagedTensor::export_raw`] for the legacy `DLManagedTensor`.
    ///
    /// # Errors
    ///
    /// As for [`ManagedTensor::export_raw`], and, as for [`ManagedTensor::export_legacy`],
    /// [`Error::LegacyReadOnly`] for a read-only producer and [`Error::LegacyPaddedSubByte`] for
    /// padded sub-byte elements. Every error comes with the producer, unchanged ([`Refused`]).
    pub fn export_raw_legacy<P: Export>(
        producer: P,
    ) -> Result<NonNull<DLManagedTensor>, Refused<P>> {
        let (raw, allocation) = export::export::<DLManagedTensor, P>(producer)?;
        if allocation.is_none() {
            return Ok(raw);
        }
        // SAFETY: as in `export_legacy`. Once validated, the owner is forgotten: `raw` goes to C.
        unsafe { Self::adopt::<_, P>(raw, allocation) }?.forget();
        Ok(raw)
    }

    /// Validates a block fresh from [`export::export`] and takes ownership of it; when its
    /// description is invalid or its reachable bytes leave the allocation the producer named,
    /// frees the block and gives the producer back.
    ///
    /// These are the import path's checks ([`ManagedTensor::from_raw`]) less the two that
    /// cannot fail here: the block's version is this crate's, and a legacy block of ours is
    /// writable. Validating inline, in one function with the export, rather than through
    /// `from_raw` and a second `Result` makes an export and its drop about twice as fast
    /// (`docs/benchmarks.md`). The common case is answered by [`CheckedTensor::new_fast`]; the
    /// rest goes to the out-of-line [`ManagedTensor::adopt_slow`].
    ///
    /// # Safety
    /// `raw` is a live block made by `export::export::<H, P>`, owned by the caller and by no one
    /// else, whose producer's `Export` contract holds (so validation, which computes with the
    /// fields and never reads the data, may run after the block was made).
    #[inline(always)]
    unsafe fn adopt<H: ExportHeader, P: Export>(
        raw: NonNull<H>,
        allocation: Option<core::ops::Range<usize>>,
    ) -> Result<Self, Refused<P>> {
        // SAFETY: the block is live and owned (caller); its DLTensor and arrays stay in place
        // and unmodified while the owner made here lives.
        let (tensor, version, flags) = unsafe { H::facts(raw) };
        // SAFETY: as above.
        if let Some(checked) = unsafe { CheckedTensor::new_fast(tensor, version, flags) }
            && checked.fits(&allocation)
        {
            return Ok(ManagedTensor {
                raw: H::wrap(raw),
                checked: ManuallyDrop::new(checked),
            });
        }
        // SAFETY: forwarded contract.
        unsafe { Self::adopt_slow(raw, tensor, version, flags, allocation) }
    }

    /// [`ManagedTensor::adopt`] for everything its fast path leaves: every check, with a
    /// precise error, and the producer given back on refusal.
    ///
    /// # Safety
    /// As for [`ManagedTensor::adopt`]; `tensor`, `version` and `flags` are the block's.
    #[cold]
    #[inline(never)]
    unsafe fn adopt_slow<H: ExportHeader, P: Export>(
        raw: NonNull<H>,
        tensor: NonNull<DLTensor>,
        version: Version,
        flags: Flags,
        allocation: Option<core::ops::Range<usize>>,
    ) -> Result<Self, Refused<P>> {
        // SAFETY: forwarded contract.
        let checked = unsafe { CheckedTensor::new_full(tensor, version, flags) }
            .and_then(|c| c.within(allocation));
        match checked {
            Ok(checked) => Ok(ManagedTensor {
                raw: H::wrap(raw),
                checked: ManuallyDrop::new(checked),
            }),
            Err(error) => {
                // SAFETY: a live block made by `export::export::<H, P>`, owned here and by no
                // one else: its producer has type `P`, so it comes out, and the block is freed.
                match unsafe { export::take_producer::<H, P>(raw) } {
                    Some(value) => Err(Refused { error, value }),
                    // Not reached (the block's type is `P`); were it, the block is deleted as
                    // any refused tensor is, and the refusal has nothing to give back.
                    None => unreachable!("a block made by export::<H, P> holds a P"),
                }
            }
        }
    }

    /// Validates the `DLTensor` of `raw` and takes ownership of `raw`; refuses (and deletes)
    /// it when its description is invalid or reaches outside `allocation`, when one is named.
    ///
    /// The common case is answered by [`CheckedTensor::new_fast`] and builds the owner right in
    /// the result; everything else, valid or not, goes to the out-of-line slow path.
    ///
    /// # Safety
    /// The caller owns `raw`, a live managed tensor whose `DLTensor` is `tensor` and meets
    /// [`CheckedTensor::new`]'s conditions while the owner made here lives.
    #[inline(always)]
    unsafe fn validate(
        raw: Raw,
        tensor: NonNull<DLTensor>,
        version: Version,
        flags: Flags,
        allocation: Option<core::ops::Range<usize>>,
    ) -> Result<Self, Error> {
        // SAFETY: forwarded contract.
        if let Some(checked) = unsafe { CheckedTensor::new_fast(tensor, version, flags) }
            && checked.fits(&allocation)
        {
            return Ok(ManagedTensor {
                raw,
                checked: ManuallyDrop::new(checked),
            });
        }
        // SAFETY: forwarded contract.
        unsafe { Self::validate_slow(raw, tensor, version, flags, allocation) }
    }

    /// [`ManagedTensor::validate`] for everything its fast path leaves: every check, with a
    /// precise error, and the deleter called on refusal.
    ///
    /// # Safety
    /// As for [`ManagedTensor::validate`].
    #[cold]
    #[inline(never)]
    unsafe fn validate_slow(
        raw: Raw,
        tensor: NonNull<DLTensor>,
        version: Version,
        flags: Flags,
        allocation: Option<core::ops::Range<usize>>,
    ) -> Result<Self, Error> {
        // SAFETY: forwarded contract.
        let checked = unsafe { CheckedTensor::new_full(tensor, version, flags) };
        Self::finish(raw, checked.and_then(|c| c.within(allocation)))
    }

    /// Takes ownership of a versioned managed tensor and validates it.
    ///
    /// On success the owner calls the deleter exactly once, when dropped.
    ///
    /// # Errors
    ///
    /// [`Error::NullPointer`] for a NULL `ptr`; [`Error::IncompatibleVersion`] for a major
    /// version other than 1 (the tensor is only deleted, never read further); otherwise the
    /// error of the first check the tensor fails (each is listed at [`CheckedTensor`]):
    /// [`Error::UnknownFlags`], [`Error::BadNdim`], those of [`DataType::validate`],
    /// [`Error::NullPointer`] or [`Error::MisalignedArray`] for the shape or strides array,
    /// [`Error::NegativeDim`], [`Error::NullStrides`], [`Error::NullData`],
    /// [`Error::StridedSubByte`], [`Error::Overflow`]. On every error but a NULL `ptr` the
    /// deleter has already been called.
    ///
    /// # Safety
    ///
    /// - `ptr` is NULL or points to a `DLManagedTensorVersioned` that the caller owns (it is not
    ///   deleted or used by anyone else afterwards);
    /// - its `version` and `deleter` are readable, and if the major version is 1: its `shape`
    ///   and `strides` point to `ndim` readable `i64`s when not NULL (for any `ndim` up to
    ///   [`crate::MAX_NDIM`]), and, if the tensor has elements, every byte its fields reach lies
    ///   in one allocation that holds initialised data of its dtype and stays valid until the
    ///   deleter runs;
    /// - no one modifies the struct or its arrays while this owner lives, and no one else writes
    ///   the data while a view of it exists (or at all, if it is read-only);
    /// - the deleter (if any) may be called from any thread;
    /// - the struct is not a copy of one this crate exported: this crate knows its own exports
    ///   (to give their producer back, [`ManagedTensor::reclaim`]) by their `manager_ctx`, so
    ///   a foreign struct that carries the `manager_ctx` of one of this crate's tensors would be
    ///   taken for it. Like a deleter that frees the wrong memory, this is beyond what any
    ///   validation of the fields can catch.
    pub unsafe fn from_raw(ptr: *mut DLManagedTensorVersioned) -> Result<Self, Error> {
        let Some(nn) = NonNull::new(ptr) else {
            return Err(Error::NullPointer {
                what: "managed tensor",
            });
        };
        let raw = Raw::Versioned(nn);
        // SAFETY: the version is readable (caller); this reads the field alone, through a raw
        // place.
        let version = unsafe { (*ptr).version };
        if !version.is_compatible() {
            // SAFETY: the caller owns the tensor; deleting it is the only legal action.
            unsafe { delete(raw) };
            return Err(Error::IncompatibleVersion { found: version });
        }
        // SAFETY: a 1.x struct, whole and readable (caller).
        let flags = unsafe { Flags((*ptr).flags) };
        // SAFETY: `dl_tensor` is inside the live struct, which the caller owns; the caller's
        // guarantees are those CheckedTensor::new needs, for as long as this owner lives.
        unsafe { Self::validate(raw, NonNull::from(&(*ptr).dl_tensor), version, flags, None) }
    }

    /// Takes ownership of a legacy (pre-1.0) managed tensor and validates it.
    ///
    /// The legacy struct has no flags. A foreign legacy tensor imports as read-only, as NumPy
    /// does, since nothing says its memory may be written; a legacy tensor exported by this
    /// crate keeps its writability. NULL strides mean compact row-major.
    ///
    /// # Errors
    ///
    /// As for [`ManagedTensor::from_raw`], less [`Error::IncompatibleVersion`],
    /// [`Error::UnknownFlags`] and [`Error::NullStrides`]: the legacy struct has no version and no
    /// flags, and allows NULL strides.
    ///
    /// # Safety
    ///
    /// As for [`ManagedTensor::from_raw`], for a `DLManagedTensor`.
    pub unsafe fn from_raw_legacy(ptr: *mut DLManagedTensor) -> Result<Self, Error> {
        let Some(nn) = NonNull::new(ptr) else {
            return Err(Error::NullPointer {
                what: "managed tensor",
            });
        };
        // SAFETY: the struct is readable (caller).
        let flags = unsafe { legacy_flags(ptr) };
        // SAFETY: as in `from_raw`.
        unsafe {
            let tensor = NonNull::from(&(*ptr).dl_tensor);
            Self::validate(Raw::Legacy(nn), tensor, Version::new(0, 0), flags, None)
        }
    }

    /// Validates a versioned managed tensor without taking it, and takes it only if `accept`
    /// agrees: what a consumer that may still refuse a tensor needs (a Python consumer leaves a
    /// capsule it refuses untouched, for its destructor or another consumer).
    ///
    /// Ownership passes to the returned owner exactly when this returns `Ok`: after `accept`
    /// returned `Ok` (the place to mark the tensor taken, such as renaming its capsule). The
    /// checks are [`ManagedTensor::from_raw`]'s, made once.
    ///
    /// ```
    /// use dlpack_core::{Error, ManagedTensor};
    ///
    /// let raw = ManagedTensor::export_raw(vec![1.0f32, 2.0, 3.0])?.as_ptr();
    /// // A consumer that wants two dimensions declines: the tensor is still ours.
    /// // SAFETY: `raw` is a live tensor we own; it stays ours when declined.
    /// let declined = unsafe {
    ///     ManagedTensor::from_raw_if(raw, |t| match t.ndim() {
    ///         2 => Ok(()),
    ///         found => Err(Error::NdimMismatch { found, expected: 2 }),
    ///     })
    /// };
    /// assert!(matches!(declined, Err(Error::NdimMismatch { found: 1, .. })));
    /// // One that takes any shape owns it from here on, and deletes it when dropped.
    /// // SAFETY: still ours (declined above); handed over now.
    /// let tensor = unsafe { ManagedTensor::from_raw_if(raw, |_| Ok::<(), Error>(())) }?;
    /// assert_eq!(tensor.to_vec::<f32>()?, [1.0, 2.0, 3.0]);
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ManagedTensor::from_raw`]'s errors, converted by `E::from`, and `accept`'s own. On any
    /// error nothing is deleted (after [`Error::IncompatibleVersion`] too) and the caller still
    /// owns the tensor.
    ///
    /// # Safety
    ///
    /// As for [`ManagedTensor::from_raw`], except that the caller keeps the tensor, and with it
    /// the duty to delete it (once), whenever this returns an error; the struct and its arrays
    /// are not modified, and the tensor is not deleted or given to anyone else, while `accept`
    /// runs (an `accept` that runs foreign code, which could hand the tensor on, must read
    /// nothing of the tensor after it and find out whether it still may take it).
    #[inline]
    pub unsafe fn from_raw_if<E: From<Error>>(
        ptr: *mut DLManagedTensorVersioned,
        accept: impl FnOnce(&CheckedTensor) -> Result<(), E>,
    ) -> Result<Self, E> {
        let Some(nn) = NonNull::new(ptr) else {
            return Err(E::from(Error::NullPointer {
                what: "managed tensor",
            }));
        };
        // SAFETY: the version is readable (caller); this reads the field alone, through a raw
        // place.
        let version = unsafe { (*ptr).version };
        if !version.is_compatible() {
            return Err(E::from(Error::IncompatibleVersion { found: version }));
        }
        // SAFETY: a 1.x struct, whole and readable (caller); the caller's guarantees are those
        // CheckedTensor needs, for as long as the owner made here lives.
        let checked = unsafe {
            let flags = Flags((*ptr).flags);
            Self::check_only(NonNull::from(&(*ptr).dl_tensor), version, flags)
        }?;
        accept(&checked)?;
        Ok(ManagedTensor {
            raw: Raw::Versioned(nn),
            checked: ManuallyDrop::new(checked),
        })
    }

    /// [`ManagedTensor::from_raw_if`] for a legacy (pre-1.0) managed tensor, with
    /// [`ManagedTensor::from_raw_legacy`]'s checks and read-only rule.
    ///
    /// # Errors
    ///
    /// [`ManagedTensor::from_raw_legacy`]'s errors, converted by `E::from`, and `accept`'s own.
    /// On any error nothing is deleted and the caller still owns the tensor.
    ///
    /// # Safety
    ///
    /// As for [`ManagedTensor::from_raw_if`], for a `DLManagedTensor`.
    #[inline]
    pub unsafe fn from_raw_legacy_if<E: From<Error>>(
        ptr: *mut DLManagedTensor,
        accept: impl FnOnce(&CheckedTensor) -> Result<(), E>,
    ) -> Result<Self, E> {
        let Some(nn) = NonNull::new(ptr) else {
            return Err(E::from(Error::NullPointer {
                what: "managed tensor",
            }));
        };
        // SAFETY: the struct is readable (caller).
        let flags = unsafe { legacy_flags(ptr) };
        // SAFETY: as in `from_raw_if`.
        let checked = unsafe {
            Self::check_only(NonNull::from(&(*ptr).dl_tensor), Version::new(0, 0), flags)
        }?;
        accept(&checked)?;
        Ok(ManagedTensor {
            raw: Raw::Legacy(nn),
            checked: ManuallyDrop::new(checked),
        })
    }

    /// [`ManagedTensor::validate`]'s checks, deleting nothing.
    ///
    /// # Safety
    /// `tensor` meets [`CheckedTensor::new`]'s conditions while the result lives.
    #[inline(always)]
    unsafe fn check_only(
        tensor: NonNull<DLTensor>,
        version: Version,
        flags: Flags,
    ) -> Result<CheckedTensor, Error> {
        // SAFETY: forwarded contract.
        match unsafe { CheckedTensor::new_fast(tensor, version, flags) } {
            Some(checked) => Ok(checked),
            // SAFETY: forwarded contract.
            None => unsafe { CheckedTensor::new_full(tensor, version, flags) },
        }
    }

    fn finish(raw: Raw, checked: Result<CheckedTensor, Error>) -> Result<Self, Error> {
        match checked {
            Ok(checked) => Ok(ManagedTensor {
                raw,
                checked: ManuallyDrop::new(checked),
            }),
            Err(e) => {
                // SAFETY: the caller of from_raw* owns the tensor and gave it to us.
                unsafe { delete(raw) };
                Err(e)
            }
        }
    }

    /// Whether this is a legacy `DLManagedTensor`.
    pub fn is_legacy(&self) -> bool {
        matches!(self.raw, Raw::Legacy(_))
    }

    /// A typed mutable view.
    ///
    /// # Errors
    ///
    /// [`Error::ReadOnly`] for a read-only tensor, [`Error::OverlappingStrides`] for strides that
    /// make distinct indices share memory (zero strides, say), [`Error::DataOverlapsDescription`]
    /// for data that overlaps the tensor's own struct, shape or strides, and those of
    /// [`CheckedTensor::view`].
    pub fn view_mut<T: Element>(&mut self) -> Result<TensorViewMut<'_, T>, Error> {
        let header = self.header();
        self.checked.view_mut(header)
    }

    /// Checks what writing the elements in place needs, for code that writes them some other
    /// way than through [`ManagedTensor::view_mut`] (a device copy into an imported tensor,
    /// say). `view_mut` makes the same checks.
    ///
    /// ```
    /// use dlpack_core::{Error, ManagedTensor};
    ///
    /// let t = ManagedTensor::export(vec![1u8, 2])?;
    /// assert_eq!(t.check_writable(), Ok(()));
    /// let t = t.into_read_only();
    /// assert_eq!(t.check_writable(), Err(Error::ReadOnly));
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ReadOnly`] for a read-only tensor, [`Error::OverlappingStrides`] when two
    /// indices share memory, [`Error::DataOverlapsDescription`] when an element lies in the
    /// tensor's own struct, shape or strides (a write there would change the layout the writer
    /// walks).
    pub fn check_writable(&self) -> Result<(), Error> {
        self.checked.check_writable(self.header())
    }

    /// The address range of the managed struct.
    fn header(&self) -> core::ops::Range<usize> {
        match self.raw {
            Raw::Versioned(p) => byte_range(p),
            Raw::Legacy(p) => byte_range(p),
        }
    }

    /// Makes this owner read-only whatever the producer said: views of it are read-only from now
    /// on, and so is every tensor handed on from it: [`ManagedTensor::into_raw`] wraps it in a
    /// read-only versioned struct (one allocation) when its own struct says otherwise,
    /// [`ManagedTensor::into_raw_legacy`] refuses it ([`Error::LegacyReadOnly`]) unless the
    /// legacy struct is read-only already, and [`ManagedTensor::reclaim`] and
    /// [`ManagedTensor::into_vec`] give it back untouched. Nothing is written into the
    /// producer's struct.
    ///
    /// For a consumer that lets others keep reading the memory (a shared import, as NumPy's
    /// `from_dlpack` makes).
    ///
    /// ```
    /// use dlpack_core::{Error, ManagedTensor};
    ///
    /// let mut t = ManagedTensor::export(vec![1i32, 2, 3])?.into_read_only();
    /// assert!(t.is_read_only());
    /// assert_eq!(t.view_mut::<i32>().unwrap_err(), Error::ReadOnly);
    /// let t = t.into_vec::<i32>().unwrap_err(); // its Vec is not handed out either
    /// let raw = t.into_raw()?;
    /// // SAFETY: `raw` is a live tensor we own and hand over.
    /// let back = unsafe { ManagedTensor::from_raw(raw) }?;
    /// assert!(back.is_read_only());
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    pub fn into_read_only(mut self) -> Self {
        self.checked.flags |= Flags::READ_ONLY;
        self
    }

    /// Marks the memory as writable by code outside Rust's borrow rules while this owner lives:
    /// Python code holding the producer's array, a C library. Rust cannot stop such writes, so
    /// what it can check changes:
    ///
    /// - a typed view of an element type that every bit pattern is valid for (integers,
    ///   floats) still works: a write meanwhile changes the values it reads, as a write by
    ///   another thread to the memory of a `&[AtomicU8]` would, and the code that writes is
    ///   responsible for doing so only while no Rust code is reading;
    /// - a view of `bool` (whose other bit patterns would be undefined behaviour to read) is
    ///   refused with [`Error::ExternallyWritable`]; [`CheckedTensor::to_vec`] copies it,
    ///   checking every element in the copy, and [`CheckedTensor::view_bytes`] reads its bytes.
    ///
    /// dlpack-pyo3 marks every tensor it imports from Python, and every tensor it exports to
    /// Python writable.
    ///
    /// ```
    /// use dlpack_core::{Error, ManagedTensor};
    ///
    /// let t = ManagedTensor::export(vec![true, false])?.into_externally_writable();
    /// assert_eq!(t.view::<bool>().unwrap_err(), Error::ExternallyWritable { dtype: dlpack_core::DataType::BOOL });
    /// assert_eq!(t.to_vec::<bool>()?, [true, false]); // a checked copy
    /// assert_eq!(t.view_bytes()?.to_vec()?, [1, 0]);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn into_externally_writable(mut self) -> Self {
        self.checked.externally_writable = true;
        self
    }

    /// Whether this owner is read-only through [`ManagedTensor::into_read_only`] alone, while
    /// its struct lets a consumer write: a versioned struct without `READ_ONLY`, or a legacy
    /// struct this crate exported (which imports writable).
    fn restricted(&self) -> bool {
        if !self.is_read_only() {
            return false;
        }
        match self.raw {
            Raw::Versioned(p) => {
                // SAFETY: the live struct, validated as 1.x (whole and readable), held by this
                // owner.
                let flags = unsafe { (*p.as_ptr()).flags };
                flags & Flags::READ_ONLY.0 == 0
            }
            // SAFETY: the live struct, readable (import contract).
            Raw::Legacy(p) => export::is_ours(unsafe { (*p.as_ptr()).manager_ctx }),
        }
    }

    /// Asks a device hook where the data really lives and checks the tensor's claim: the memory
    /// kind must fit the device type, the device must match (for device memory), and every
    /// reachable byte must lie inside the allocation. When the hook reports host-accessible
    /// memory (CUDA managed, oneAPI shared or host USM), typed views become available.
    ///
    /// Returns what the hook reported, or `None` for a tensor without elements (no byte to
    /// check).
    ///
    /// # Errors
    ///
    /// As for [`CheckedTensor::check_device`]; the tensor is left as it was.
    pub fn verify_device(&mut self, hooks: &dyn DeviceHooks) -> Result<Option<PointerInfo>, Error> {
        self.checked.verify_device(hooks)
    }

    /// Gives ownership to C as a `DLManagedTensorVersioned*`; the receiver must call its deleter
    /// once. A legacy tensor is first wrapped in a versioned one (one allocation).
    ///
    /// # Errors
    ///
    /// Only those of the wrapping export ([`Error::BadNdim`], [`Error::Overflow`] of the block
    /// size), which a validated tensor does not meet: none in practice.
    pub fn into_raw(self) -> Result<*mut DLManagedTensorVersioned, Error> {
        match self.raw {
            Raw::Versioned(p) if !self.restricted() => {
                self.forget();
                Ok(p.as_ptr())
            }
            // A legacy struct, or one whose flags let a consumer write what this owner may not:
            // wrapped, with this owner's flags.
            _ => Ok(export::export::<DLManagedTensorVersioned, _>(self)?
                .0
                .as_ptr()),
        }
    }

    /// Gives ownership to C as a legacy `DLManagedTensor*`; the receiver must call its deleter
    /// once. A versioned tensor is first wrapped in a legacy one (one allocation).
    ///
    /// # Errors
    ///
    /// [`Error::LegacyReadOnly`] for a read-only tensor, unless its own struct is a legacy one
    /// that imports read-only anyway (see [`ManagedTensor::into_read_only`]); a versioned tensor
    /// whose data overlaps its own struct, shape or strides counts as read-only.
    /// [`Error::LegacyPaddedSubByte`] for padded sub-byte elements. The legacy struct can say
    /// neither. Every error comes with the tensor, unchanged ([`Refused`]): hand it on as a
    /// versioned struct ([`ManagedTensor::into_raw`]) instead.
    pub fn into_raw_legacy(self) -> Result<*mut DLManagedTensor, Refused<Self>> {
        match self.raw {
            Raw::Legacy(p) if !self.restricted() => {
                self.forget();
                Ok(p.as_ptr())
            }
            // A legacy struct has no flags, so a restricted one of ours (which imports
            // writable) cannot be handed on as legacy.
            Raw::Legacy(_) => Err(Refused {
                error: Error::LegacyReadOnly,
                value: self,
            }),
            Raw::Versioned(_) => {
                export::export::<DLManagedTensor, _>(self).map(|(raw, _)| raw.as_ptr())
            }
        }
    }

    /// Gives back the producer this tensor was exported from, without a copy.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dlpack_core::ManagedTensor;
    ///
    /// let t = ManagedTensor::export(vec![1u8, 2, 3])?;
    /// let t = t.reclaim::<Arc<[u8]>>().unwrap_err(); // wrong type: the tensor comes back
    /// let v: Vec<u8> = t.reclaim().unwrap();
    /// assert_eq!(v, [1, 2, 3]);
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The tensor itself, untouched, unless it was exported by this crate from a `P`. Also when
    /// it was made read-only by [`ManagedTensor::into_read_only`] or externally writable by
    /// [`ManagedTensor::into_externally_writable`] (others may still use the memory), and for a
    /// `bool` tensor holding a byte other than 0 or 1 (a consumer wrote it).
    pub fn reclaim<P: Export>(self) -> Result<P, Self> {
        if self.restricted() || !self.checked.can_be_owned() {
            // Made read-only by this owner (others may still be reading the memory), written by
            // others, or holding bytes that are no `bool`.
            return Err(self);
        }
        // In both arms: the live struct is readable, its `manager_ctx` marks it as a block made
        // by `export` (only such blocks carry that tag), and this owner holds it exclusively.
        let taken = match self.raw {
            // SAFETY: see above.
            Raw::Versioned(p) if export::is_ours(unsafe { p.as_ref().manager_ctx }) => unsafe {
                export::take_producer::<DLManagedTensorVersioned, P>(p)
            },
            // SAFETY: see above.
            Raw::Legacy(p) if export::is_ours(unsafe { p.as_ref().manager_ctx }) => unsafe {
                export::take_producer::<DLManagedTensor, P>(p)
            },
            _ => None,
        };
        match taken {
            Some(producer) => {
                // The block is gone: drop the checked description, not the tensor.
                self.forget();
                Ok(producer)
            }
            None => Err(self),
        }
    }

    /// Takes the elements as a `Vec<T>` without a copy, if this tensor was exported by this
    /// workspace from a producer that owns them as one (a `Vec`, a `Box<[T]>`, an owned
    /// standard-layout ndarray `Array`, ...) and the tensor is (nearly) all of that `Vec`.
    ///
    /// Unlike [`ManagedTensor::reclaim`], the caller need not know the producer's type: this is
    /// how candle, whose CPU storage must own a `Vec`, takes an ndarray's memory. The `Vec`
    /// holds exactly the tensor's elements. A `Vec` with much more room than the tensor needs
    /// (a tensor that is the first row of a large matrix, say) stays with its producer, so the
    /// caller copies the few elements instead of keeping the whole allocation alive
    /// ([`VecSlot::takes`] says how much room is too much).
    ///
    /// ```
    /// use dlpack_core::ManagedTensor;
    ///
    /// let boxed: Box<[f32]> = vec![1.0, 2.0].into_boxed_slice();
    /// let address = boxed.as_ptr();
    /// let t = ManagedTensor::export(boxed)?;
    /// let t = t.into_vec::<u8>().unwrap_err(); // another element type: the tensor comes back
    /// let v: Vec<f32> = t.into_vec().unwrap();
    /// assert_eq!(v.as_ptr(), address);
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The tensor itself, untouched, unless it is a CPU tensor of `T` in compact row-major order
    /// with `byte_offset` 0 whose producer gives its `Vec` up (it checks the rest: that the
    /// tensor starts at its `Vec`'s first element and that the `Vec` has little spare room,
    /// [`Export::give_vec`]); also when it was made read-only by
    /// [`ManagedTensor::into_read_only`] or externally writable by
    /// [`ManagedTensor::into_externally_writable`], and for a `bool` tensor holding a byte other
    /// than 0 or 1.
    ///
    /// [`VecSlot::takes`]: crate::VecSlot::takes
    pub fn into_vec<T: Element>(mut self) -> Result<Vec<T>, Self> {
        if self.dtype() != T::DTYPE
            || self.device() != Device::CPU
            || self.byte_offset() != 0
            || !self.is_row_major_contiguous()
        {
            return Err(self);
        }
        let first = self
            .data_ptr()
            .cast::<u8>()
            .wrapping_add(self.byte_offset() as usize)
            .cast::<T>();
        let mut slot = crate::VecSlot::<T>::new(first, self.len());
        self.ask_for_vec(&mut slot);
        match slot.take() {
            Some(mut v) => {
                // Exactly the tensor's elements: the tensor is the Vec or its first elements
                // (`give_vec`'s contract), also for a producer whose shape answers otherwise
                // when asked again (the derive's `Dims` is a safe trait).
                v.truncate(self.len());
                if !slot.takes(v.as_ptr(), v.capacity()) {
                    // A producer that gave more room than asked for: the spare is returned to
                    // the allocator (which may move the elements).
                    v.shrink_to_fit();
                }
                // The producer gave its memory up: deleting the tensor now drops only what is
                // left of it, and frees the block.
                drop(self);
                Ok(v)
            }
            None => Err(self),
        }
    }

    /// The elements as a `Vec<T>`, moved out when [`ManagedTensor::into_vec`] can, copied
    /// otherwise as `mode` allows, and which of the two it was: the adapters' `into_owned` for a
    /// plain `Vec`.
    ///
    /// ```
    /// use dlpack_core::{CopyMode, CopyReason, ManagedTensor, Transfer};
    ///
    /// let v = vec![1u16, 2, 3];
    /// let address = v.as_ptr();
    /// let (back, transfer) = ManagedTensor::export(v)?.into_vec_with::<u16>(CopyMode::IfNeeded)?;
    /// assert_eq!((back.as_ptr(), transfer), (address, Transfer::Moved));
    ///
    /// let (copy, transfer) = ManagedTensor::export(back)?.into_vec_with::<u16>(CopyMode::Always)?;
    /// assert_ne!(copy.as_ptr(), address);
    /// assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The tensor comes back, untouched, with the reason: [`Error::DataTypeMismatch`] for
    /// another dtype, [`Error::CopyRefused`] when only a copy would do and `mode` is
    /// [`CopyMode::Never`](crate::CopyMode::Never), and those of [`CheckedTensor::to_vec`]
    /// when the copy fails (memory the host cannot read, an allocation that fails).
    pub fn into_vec_with<T: Element>(
        self,
        mode: crate::CopyMode,
    ) -> Result<(Vec<T>, crate::Transfer), Refused<Self>> {
        use crate::{CopyMode, CopyReason, Transfer};
        if self.dtype() != T::DTYPE {
            let error = Error::DataTypeMismatch {
                found: self.dtype(),
                expected: T::DTYPE,
            };
            return Err(Refused { error, value: self });
        }
        let reason = if mode == CopyMode::Always {
            CopyReason::Requested
        } else {
            match self.into_vec::<T>() {
                Ok(v) => return Ok((v, Transfer::Moved)),
                Err(tensor) if tensor.is_row_major_contiguous() => {
                    return tensor.copy_as(mode, CopyReason::NotOwned);
                }
                Err(tensor) => return tensor.copy_as(mode, CopyReason::Layout),
            }
        };
        self.copy_as(mode, reason)
    }

    /// The copy of [`ManagedTensor::into_vec_with`], for `reason`, as `mode` allows.
    fn copy_as<T: Element>(
        self,
        mode: crate::CopyMode,
        reason: crate::CopyReason,
    ) -> Result<(Vec<T>, crate::Transfer), Refused<Self>> {
        let copied = mode
            .copy(reason)
            .and_then(|transfer| Ok((self.to_vec::<T>()?, transfer)));
        match copied {
            Ok(done) => Ok(done),
            Err(error) => Err(Refused { error, value: self }),
        }
    }

    /// Asks the producer of a tensor this crate exported for its `Vec` ([`Export::give_vec`]).
    /// Once the slot is filled, the data must not be read again: only deleting is left.
    fn ask_for_vec(&mut self, slot: &mut dyn core::any::Any) {
        if self.restricted() || !self.checked.can_be_owned() {
            // Made read-only by this owner (others may still be reading the memory), written by
            // others, or holding bytes that are no `bool`.
            return;
        }
        // In both arms: the live struct is readable, its `manager_ctx` marks it as a block made
        // by `export`, and this owner holds it exclusively (`&mut self`) and reads no data
        // meanwhile.
        match self.raw {
            // SAFETY: see above.
            Raw::Versioned(p) if export::is_ours(unsafe { p.as_ref().manager_ctx }) => unsafe {
                export::take_vec::<DLManagedTensorVersioned>(p, slot)
            },
            // SAFETY: see above.
            Raw::Legacy(p) if export::is_ours(unsafe { p.as_ref().manager_ctx }) => unsafe {
                export::take_vec::<DLManagedTensor>(p, slot)
            },
            _ => {}
        }
    }

    /// Forgets the raw tensor without deleting it, dropping only the owner's own data.
    #[inline(always)]
    fn forget(self) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used again and its Drop does not run.
        unsafe { ManuallyDrop::drop(&mut this.checked) };
    }
}

/// The two headers an export block can start with, as [`ManagedTensor::adopt`] reads them.
trait ExportHeader: export::Header {
    /// The block's `DLTensor`, version and flags.
    ///
    /// # Safety
    /// `raw` is a live block made by [`export::export`].
    unsafe fn facts(raw: NonNull<Self>) -> (NonNull<DLTensor>, Version, Flags);
    /// The owner's handle of the block.
    fn wrap(raw: NonNull<Self>) -> Raw;
}

impl ExportHeader for DLManagedTensorVersioned {
    #[inline(always)]
    unsafe fn facts(raw: NonNull<Self>) -> (NonNull<DLTensor>, Version, Flags) {
        let p = raw.as_ptr();
        // SAFETY: a live, initialised block (caller); only field places are taken.
        unsafe {
            (
                NonNull::from(&(*p).dl_tensor),
                Version::CURRENT,
                Flags((*p).flags),
            )
        }
    }
    #[inline(always)]
    fn wrap(raw: NonNull<Self>) -> Raw {
        Raw::Versioned(raw)
    }
}

impl ExportHeader for DLManagedTensor {
    #[inline(always)]
    unsafe fn facts(raw: NonNull<Self>) -> (NonNull<DLTensor>, Version, Flags) {
        // SAFETY: a live, initialised block (caller); only a field place is taken. A legacy
        // block of ours imports writable, without flags.
        let tensor = unsafe { NonNull::from(&(*raw.as_ptr()).dl_tensor) };
        (tensor, Version::new(0, 0), Flags::empty())
    }
    #[inline(always)]
    fn wrap(raw: NonNull<Self>) -> Raw {
        Raw::Legacy(raw)
    }
}

/// The address range of the struct behind `p`.
fn byte_range<T>(p: NonNull<T>) -> core::ops::Range<usize> {
    p.addr().get()..p.addr().get() + core::mem::size_of::<T>()
}

/// Calls a managed tensor's deleter, if it has one.
///
/// # Safety
/// The caller owns the tensor, which is live, and never uses it again.
unsafe fn delete(raw: Raw) {
    match raw {
        Raw::Versioned(p) => {
            // SAFETY: live struct (caller). Only the `deleter` field is read, through a raw
            // place: a struct of another major version guarantees the prefix up to `deleter`,
            // not the whole 1.x struct a reference would assert.
            if let Some(deleter) = unsafe { core::ptr::addr_of!((*p.as_ptr()).deleter).read() } {
                // SAFETY: the owner calls the deleter once with the struct's own pointer.
                unsafe { deleter(p.as_ptr()) }
            }
        }
        Raw::Legacy(p) => {
            // SAFETY: live struct (caller).
            if let Some(deleter) = unsafe { p.as_ref().deleter } {
                // SAFETY: as above.
                unsafe { deleter(p.as_ptr()) }
            }
        }
    }
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        // SAFETY: dropped once; nothing refers to the description afterwards.
        unsafe { ManuallyDrop::drop(&mut self.checked) };
        // SAFETY: this owner owns the tensor and is going away.
        unsafe { delete(self.raw) };
    }
}

impl core::ops::Deref for ManagedTensor {
    type Target = CheckedTensor;
    fn deref(&self) -> &CheckedTensor {
        &self.checked
    }
}

impl fmt::Debug for ManagedTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple(if self.is_legacy() {
            "ManagedTensor(legacy)"
        } else {
            "ManagedTensor"
        })
        .field(&*self.checked)
        .finish()
    }
}

// SAFETY: describes the tensor this owner holds. Its memory is initialised and stays valid until
// the owner is dropped (the import and export contracts); it is writable unless READ_ONLY, which
// the description passes on, and adds when an element lies in this tensor's own struct, shape or
// strides (the wrapper's description is fresh copies, so its checks could not see that a write
// would change the layout this owner was validated with). Shape and strides are copied, so
// `ndim()` is stable.
unsafe impl Export for ManagedTensor {
    // The owner holds a pointer to the tensor, never its elements.
    const GIVES_VEC: bool = true;
    fn ndim(&self) -> usize {
        self.checked.ndim()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> crate::ExportDesc {
        shape.copy_from_slice(self.shape());
        strides.copy_from_slice(self.strides());
        let mut flags = self.flags();
        if self
            .checked
            .check_disjoint_from_description(self.header())
            .is_err()
        {
            // Writing such an element would rewrite this owner's layout behind its back (a
            // foreign tensor may lie over its own shape array: bad input #62).
            flags |= Flags::READ_ONLY;
        }
        crate::ExportDesc {
            data: self.data_ptr(),
            byte_offset: self.byte_offset(),
            dtype: self.dtype(),
            device: self.device(),
            flags,
            allocation: None,
        }
    }
    fn give_vec(&mut self, slot: &mut dyn core::any::Any) {
        // A wrapped tensor of ours passes the request on; the wrapper describes the same
        // layout, so the producer's promise covers it too.
        self.ask_for_vec(slot);
    }
}

/// A validated `DLTensor` that someone else owns: no deleter is ever called.
///
/// This is the consumer side of the C exchange API's `dltensor_from_py_object_no_sync`, which
/// fills a `DLTensor` valid only until control returns to the producer, and of any API that
/// lends a tensor for the duration of a call.
pub struct BorrowedTensor<'a> {
    checked: CheckedTensor,
    _lent: PhantomData<&'a DLTensor>,
}

// SAFETY: as for ManagedTensor: the lender guarantees the memory while 'a lasts, and shared
// access only reads.
unsafe impl Send for BorrowedTensor<'_> {}
// SAFETY: see above.
unsafe impl Sync for BorrowedTensor<'_> {}

impl<'a> BorrowedTensor<'a> {
    /// Validates a lent tensor. `version` is the DLPack version its producer follows (it decides
    /// whether NULL strides are allowed) and `flags` what the lender says about it (READ_ONLY).
    ///
    /// # Errors
    ///
    /// The error of the first check the tensor fails, as for [`ManagedTensor::from_raw`] (less
    /// [`Error::IncompatibleVersion`]: `version` is taken as given). Nothing is deleted.
    ///
    /// # Safety
    ///
    /// `tensor`'s fields, arrays and data satisfy [`ManagedTensor::from_raw`]'s conditions for
    /// all of `'a`.
    pub unsafe fn new(tensor: &'a DLTensor, version: Version, flags: Flags) -> Result<Self, Error> {
        // SAFETY: forwarded contract.
        let checked = unsafe { CheckedTensor::new(NonNull::from(tensor), version, flags)? };
        Ok(BorrowedTensor {
            checked,
            _lent: PhantomData,
        })
    }

    /// A typed mutable view (see [`ManagedTensor::view_mut`]).
    ///
    /// # Errors
    ///
    /// As for [`ManagedTensor::view_mut`], the lent `DLTensor` standing for the struct.
    pub fn view_mut<T: Element>(&mut self) -> Result<TensorViewMut<'_, T>, Error> {
        let header = byte_range(self.checked.tensor);
        self.checked.view_mut(header)
    }

    /// Checks what writing the elements in place needs (see
    /// [`ManagedTensor::check_writable`]).
    ///
    /// # Errors
    ///
    /// As for [`ManagedTensor::check_writable`], the lent `DLTensor` standing for the struct.
    pub fn check_writable(&self) -> Result<(), Error> {
        self.checked.check_writable(byte_range(self.checked.tensor))
    }
}

impl core::ops::Deref for BorrowedTensor<'_> {
    type Target = CheckedTensor;
    fn deref(&self) -> &CheckedTensor {
        &self.checked
    }
}

impl fmt::Debug for BorrowedTensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BorrowedTensor")
            .field(&self.checked)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataTypeCode, DeviceType};

    /// The fast path accepts only what the full validation accepts, with the same result, over
    /// a grid of edge cases for every field it reads.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "120 000 cases is hours under Miri; both paths run under Miri in the other tests"
    )]
    fn the_fast_path_agrees_with_the_full_validation() {
        let dims = [-1i64, 0, 1, 2, 3, 1 << 31, i64::MAX];
        let steps = [i64::MIN, -(1 << 40), -3, -1, 0, 1, 2, 1 << 40, i64::MAX];
        let datas = [0usize, 0x1000, usize::MAX - 64, 3];
        let offsets = [0u64, 4, 1 << 62, u64::MAX];
        let dtypes = [
            DataType::F32,
            DataType::BOOL,
            DataType::C128,
            DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 2),
            DataType::new(DataTypeCode::FLOAT, 8, 1),
            DataType::new(DataTypeCode::INT, 32, 0),
        ];
        let mut fast_accepted = 0usize;
        let mut cases = 0usize;
        // Shapes and strides of up to two dimensions, each from the grids above.
        let mut layouts: Vec<(Vec<i64>, Vec<i64>)> = vec![(vec![], vec![])];
        for &d in &dims {
            for &s in &steps {
                layouts.push((vec![d], vec![s]));
                for &d2 in &[0i64, 2, i64::MAX] {
                    for &s2 in &[-1i64, 1, i64::MAX] {
                        layouts.push((vec![d, d2], vec![s, s2]));
                    }
                }
            }
        }
        for (shape, strides) in &layouts {
            for &data in &datas {
                for &byte_offset in &offsets {
                    for &dtype in &dtypes {
                        for flags in [Flags::empty(), Flags(1 << 40)] {
                            let t = DLTensor {
                                data: core::ptr::without_provenance_mut(data),
                                device: Device::new(DeviceType::CPU, 0),
                                ndim: shape.len() as i32,
                                dtype,
                                shape: shape.as_ptr().cast_mut(),
                                strides: strides.as_ptr().cast_mut(),
                                byte_offset,
                            };
                            let nn = NonNull::from(&t);
                            let v = Version::CURRENT;
                            cases += 1;
                            // SAFETY: the arrays hold ndim i64s; validation never reads data.
                            let fast = unsafe { CheckedTensor::new_fast(nn, v, flags) };
                            // SAFETY: as above.
                            let full = unsafe { CheckedTensor::new_full(nn, v, flags) };
                            if let Some(fast) = fast {
                                fast_accepted += 1;
                                let full = full.unwrap_or_else(|e| {
                                    panic!("fast accepted what full refused ({e}): {t:?}")
                                });
                                assert_eq!(
                                    (fast.elements, fast.span, fast.host_accessible),
                                    (full.elements, full.span, full.host_accessible),
                                    "{t:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
        // The grid exercises both paths.
        assert!(
            fast_accepted > 100 && fast_accepted < cases / 2,
            "{fast_accepted}/{cases}"
        );
    }
}
