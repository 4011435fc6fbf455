//! [`CopyMode`], [`Transfer`] and [`CopyReason`]: the words of every adapter's `into_owned`
//! (the crate docs' "One vocabulary" section lists the verbs).

use core::fmt;

/// Whether taking a tensor over may copy its elements: the Python array API's `copy=None`,
/// `copy=False` and `copy=True`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum CopyMode {
    /// Take the memory over when possible, copy otherwise (`copy=None`).
    #[default]
    IfNeeded,
    /// Take the memory over, or refuse with [`Error::CopyRefused`](crate::Error::CopyRefused)
    /// (`copy=False`).
    Never,
    /// Always copy into fresh memory (`copy=True`).
    Always,
}

impl CopyMode {
    /// The mode the Python array API's `copy` argument names: `None` is
    /// [`IfNeeded`](CopyMode::IfNeeded), `Some(false)` [`Never`](CopyMode::Never) and
    /// `Some(true)` [`Always`](CopyMode::Always).
    ///
    /// ```
    /// use dlpack_core::CopyMode;
    /// assert_eq!(CopyMode::from_copy(Some(false)), CopyMode::Never);
    /// ```
    pub const fn from_copy(copy: Option<bool>) -> CopyMode {
        match copy {
            None => CopyMode::IfNeeded,
            Some(false) => CopyMode::Never,
            Some(true) => CopyMode::Always,
        }
    }

    /// The copy that `reason` calls for, under this mode: `Ok(Transfer::Copied(reason))`, or,
    /// for [`CopyMode::Never`], the refusal.
    ///
    /// ```
    /// use dlpack_core::{CopyMode, CopyReason, Error, Transfer};
    /// assert_eq!(
    ///     CopyMode::IfNeeded.copy(CopyReason::Layout),
    ///     Ok(Transfer::Copied(CopyReason::Layout))
    /// );
    /// assert_eq!(
    ///     CopyMode::Never.copy(CopyReason::Layout),
    ///     Err(Error::CopyRefused { reason: CopyReason::Layout })
    /// );
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::CopyRefused`](crate::Error::CopyRefused) when the mode is
    /// [`CopyMode::Never`].
    pub fn copy(self, reason: CopyReason) -> Result<Transfer, crate::Error> {
        match self {
            CopyMode::Never => Err(crate::Error::CopyRefused { reason }),
            CopyMode::IfNeeded | CopyMode::Always => Ok(Transfer::Copied(reason)),
        }
    }
}

/// How a value taken over from a tensor got its memory.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transfer {
    /// The tensor had been exported from a value of the target type, which came back as it was
    /// ([`ManagedTensor::reclaim`](crate::ManagedTensor::reclaim)).
    Reclaimed,
    /// The producer handed its `Vec` over ([`ManagedTensor::into_vec`](crate::ManagedTensor::into_vec)):
    /// the value owns the very same memory now.
    Moved,
    /// The elements were copied into new memory, for this reason.
    Copied(CopyReason),
}

impl Transfer {
    /// Whether the elements were copied.
    ///
    /// ```
    /// use dlpack_core::{CopyReason, Transfer};
    /// assert!(Transfer::Copied(CopyReason::Requested).is_copy());
    /// assert!(!Transfer::Moved.is_copy());
    /// ```
    pub const fn is_copy(self) -> bool {
        matches!(self, Transfer::Copied(_))
    }
}

impl fmt::Display for Transfer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transfer::Reclaimed => f.write_str("reclaimed: the exported value came back"),
            Transfer::Moved => f.write_str("moved: the producer's Vec was handed over"),
            Transfer::Copied(reason) => write!(f, "copied: {reason}"),
        }
    }
}

/// Why taking a tensor over copied its elements (or, with [`CopyMode::Never`], would have to).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum CopyReason {
    /// [`CopyMode::Always`] asked for a copy.
    Requested,
    /// The tensor's strides are not a memory order the target type can own (compact row-major
    /// for a `Vec`, an ndarray `Array` or a candle tensor; compact column-major for a nalgebra
    /// matrix).
    Layout,
    /// The producer does not hand its elements over as a `Vec` that is (nearly) exactly the
    /// tensor: a foreign tensor (NumPy, PyTorch, ...), a view, shared memory (`Arc<[T]>`), an
    /// array with an offset, an owned array or `Vec` of which the tensor is a small part (after
    /// slicing; handing it over would keep the rest alive), or memory that is not plain host
    /// memory.
    NotOwned,
}

impl fmt::Display for CopyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CopyReason::Requested => "a copy was requested",
            CopyReason::Layout => {
                "the tensor's strides are not a memory order the target type can own"
            }
            CopyReason::NotOwned => {
                "the producer does not hand its elements over as a Vec that is (nearly) exactly the tensor (a foreign tensor, a view, shared memory, non-host memory, or an owned array or Vec of which the tensor is a small part, as after slicing)"
            }
        })
    }
}
