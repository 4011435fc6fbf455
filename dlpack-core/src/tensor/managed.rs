//! [`ManagedTensor`]: the owner of a managed DLPack tensor. Import, mutable access, hand-over to
//! C, and the one call of the deleter.

use core::fmt;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use crate::export;
use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLTensor};
use crate::view::TensorViewMut;
#[cfg(doc)] // for the docs' links
use crate::{DataType, Export};
use crate::{DeviceHooks, Element, Error, Flags, PointerInfo, Refused, Version};

use super::{CheckedTensor, byte_range};

/// The managed struct an owner holds.
#[derive(Clone, Copy)]
pub(super) enum Raw {
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
    pub(super) raw: Raw,
    pub(super) checked: ManuallyDrop<CheckedTensor>,
}

// SAFETY: DLPack allows the deleter to run on any thread, and `Export` producers are `Send`.
unsafe impl Send for ManagedTensor {}

// SAFETY: through `&ManagedTensor` only the tensor's fields and its memory are read; the
// producer's memory is not written by anyone else while the tensor lives (export and import
// contracts), so concurrent reads are race-free.
unsafe impl Sync for ManagedTensor {}

impl ManagedTensor {
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
    pub(super) fn header(&self) -> core::ops::Range<usize> {
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
    pub(super) fn restricted(&self) -> bool {
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

    /// Forgets the raw tensor without deleting it, dropping only the owner's own data.
    #[inline(always)]
    pub(super) fn forget(self) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used again and its Drop does not run.
        unsafe { ManuallyDrop::drop(&mut this.checked) };
    }
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
