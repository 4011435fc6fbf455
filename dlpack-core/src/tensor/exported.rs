//! [`ManagedTensor::export`] and the other export constructors: a producer moves into a fresh
//! block ([`crate::export`]), which is validated and adopted; and a [`ManagedTensor`] as a
//! producer itself, when it is wrapped in a new struct.

use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use crate::export::{self, Export};
use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLTensor};
#[cfg(doc)] // for the docs' links
use crate::{DataType, Error};
use crate::{Flags, Refused, Version};

use super::CheckedTensor;
use super::managed::{ManagedTensor, Raw};

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
    /// writable. They run inline, in one function with the export, and build the owner right in
    /// the result, with no second `Result` in between: the export path is hot. The common case
    /// is answered by [`CheckedTensor::new_fast`]; the rest goes to the out-of-line
    /// [`ManagedTensor::adopt_slow`].
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
            // foreign tensor may lie over its own shape array).
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
        self.request_give_vec(slot);
    }
}
