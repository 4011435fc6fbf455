//! Typed access to a [`CheckedTensor`]'s elements: views, copies, and the checks they make.

use core::ptr::NonNull;

use crate::view::{TensorView, TensorViewMut};
use crate::{DataType, DeviceHooks, Element, Error};

use super::CheckedTensor;
#[cfg(doc)] // for the docs' links
use super::ManagedTensor;

impl CheckedTensor {
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
        let mut staging: Vec<core::mem::MaybeUninit<T>> =
            crate::view::try_vec_with_capacity(count)?;
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

    /// A typed mutable view; the caller holds the owner exclusively. `header` is the address
    /// range of the struct that holds the `DLTensor` (the managed tensor, or the `DLTensor`
    /// itself when it stands alone).
    pub(super) fn view_mut<T: Element>(
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

    /// Whether the memory may be handed to Rust code as owned values ([`ManagedTensor::reclaim`],
    /// [`ManagedTensor::into_vec`]): no one outside Rust may still write it, and a `bool`
    /// tensor holds only 0s and 1s (a consumer of a writable export may have written others).
    #[inline]
    pub(super) fn can_be_owned(&self) -> bool {
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
}
