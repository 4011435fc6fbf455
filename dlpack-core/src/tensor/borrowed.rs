//! [`BorrowedTensor`]: a validated `DLTensor` that someone else owns.

use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::ffi::DLTensor;
use crate::view::TensorViewMut;
use crate::{Element, Error, Flags, Version};

#[cfg(doc)] // for the docs' links
use super::ManagedTensor;
use super::{CheckedTensor, byte_range};

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
