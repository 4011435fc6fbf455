//! Taking a tensor's memory over as Rust values: [`ManagedTensor::reclaim`] gives the producer
//! back, [`ManagedTensor::into_vec`] takes the elements as a `Vec`.

use crate::export::{self, Export};
use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use crate::{Device, Element, Error, Refused};

#[cfg(doc)] // for the docs' links
use super::CheckedTensor;
use super::managed::{ManagedTensor, Raw};

impl ManagedTensor {
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
        self.request_give_vec(&mut slot);
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

    /// Asks the producer of a tensor this crate exported for its `Vec` ([`Export::give_vec`]),
    /// when the memory may be owned. Once the slot is filled, the data must not be read again:
    /// only deleting is left.
    pub(super) fn request_give_vec(&mut self, slot: &mut dyn core::any::Any) {
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
                export::give_vec_of_block::<DLManagedTensorVersioned>(p, slot)
            },
            // SAFETY: see above.
            Raw::Legacy(p) if export::is_ours(unsafe { p.as_ref().manager_ctx }) => unsafe {
                export::give_vec_of_block::<DLManagedTensor>(p, slot)
            },
            _ => {}
        }
    }
}
