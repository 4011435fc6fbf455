//! [`Error`]: the one error type of the workspace, and [`PyErrorKind`], how it maps onto Python.

use core::fmt;

use crate::{DataType, Device, Flags, MemoryKind, Version};

/// Everything that can go wrong when exporting, importing, viewing or moving a tensor.
///
/// Messages say what was found and what was expected. The enum is `#[non_exhaustive]`: new
/// checks may add variants.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Error {
    /// A pointer that must not be NULL was NULL.
    NullPointer {
        /// Which pointer (`"managed tensor"`, `"shape"`, `"data"`, ...).
        what: &'static str,
    },
    /// The tensor's major version differs from this crate's: only its deleter may be called
    /// ([`ManagedTensor::from_raw`](crate::ManagedTensor::from_raw) has called it).
    IncompatibleVersion {
        /// The version the producer wrote.
        found: Version,
    },
    /// The flags hold bits DLPack 1.3 does not define.
    UnknownFlags {
        /// The whole flags field.
        flags: Flags,
    },
    /// `ndim` is negative or larger than [`crate::MAX_NDIM`].
    BadNdim {
        /// The value found.
        ndim: i64,
    },
    /// A dimension of the shape is negative.
    NegativeDim {
        /// The axis.
        axis: usize,
        /// The value found.
        value: i64,
    },
    /// `strides` is NULL for a tensor with dimensions, which DLPack forbids since 1.2.
    NullStrides {
        /// The tensor's number of dimensions.
        ndim: usize,
        /// The version the producer wrote.
        version: Version,
    },
    /// A `shape` or `strides` pointer is not aligned for `i64`.
    MisalignedArray {
        /// `"shape"` or `"strides"`.
        what: &'static str,
        /// The address found.
        address: usize,
    },
    /// The data pointer is NULL but the tensor has elements.
    NullData {
        /// The number of elements.
        elements: u128,
    },
    /// The dtype code is not one DLPack 1.3 defines.
    UnknownDataTypeCode {
        /// The code found.
        code: u8,
    },
    /// The dtype has zero lanes.
    ZeroLanes {
        /// The dtype found.
        dtype: DataType,
    },
    /// The dtype's bit width is not one DLPack defines for its code.
    UnsupportedBits {
        /// The dtype found.
        dtype: DataType,
        /// The widths allowed for the code (empty: any whole number of bytes).
        allowed: &'static [u8],
    },
    /// A packed sub-byte dtype (fp4, fp6) with a layout that is not compact row-major, which
    /// DLPack does not define.
    StridedSubByte {
        /// The dtype found.
        dtype: DataType,
    },
    /// An address or size computed from the tensor's fields overflows.
    Overflow {
        /// What was being computed, with the values involved.
        what: String,
    },
    /// The element type asked for does not match the tensor's dtype.
    DataTypeMismatch {
        /// The tensor's dtype.
        found: DataType,
        /// The dtype of the Rust element type asked for.
        expected: DataType,
    },
    /// The first element's address is not aligned for the element type.
    Misaligned {
        /// The address of the first element (`data + byte_offset`).
        address: usize,
        /// The alignment the element type needs.
        align: usize,
    },
    /// The memory cannot be read by the host without a copy.
    NotHostAccessible {
        /// The tensor's device.
        device: Device,
    },
    /// Mutable access was asked for a read-only tensor.
    ReadOnly,
    /// Mutable access was asked for a tensor whose strides make elements share memory.
    OverlappingStrides {
        /// The tensor's shape.
        shape: Vec<i64>,
        /// The tensor's strides, in elements.
        strides: Vec<i64>,
    },
    /// Mutable access was asked for a tensor whose data overlaps its own description (the
    /// managed struct, the `DLTensor`, or the shape or strides array): a write through the view
    /// would change the layout the view relies on.
    DataOverlapsDescription {
        /// What the data overlaps (`"managed tensor struct"`, `"shape array"`, ...).
        what: &'static str,
        /// First byte the tensor reaches.
        start: usize,
        /// One past the last byte the tensor reaches.
        end: usize,
    },
    /// A typed view whose every element must be checked (a `bool` view) was asked for a layout
    /// that cannot be shown to reach each element once and has more than 2^30 indices: strides
    /// that overlap irregularly (2 and 3 over the same bytes, say), so that checking every index
    /// would take unbounded time. Regular overlaps (broadcasts, sliding windows) are checked
    /// element by element, whatever their size; the bytes of this one can still be viewed as
    /// `u8` ([`CheckedTensor::view_bytes`](crate::CheckedTensor::view_bytes)).
    IrregularOverlap {
        /// The tensor's shape.
        shape: Vec<i64>,
        /// The tensor's strides, in elements.
        strides: Vec<i64>,
    },
    /// Memory for a copy of the tensor could not be allocated.
    OutOfMemory {
        /// The number of bytes asked for (more than the address space holds, when it overflows).
        bytes: u128,
    },
    /// A value that is not a valid bit pattern for the element type (a `bool` byte other than
    /// 0 or 1).
    InvalidValue {
        /// The element type.
        dtype: DataType,
        /// The row-major index of the first bad element; where strides (other than broadcast
        /// ones) make indices share elements, of one index that reaches a bad element.
        index: usize,
        /// The bad byte (for an element type of several bytes, a user's [`Element`], the
        /// element's first byte).
        ///
        /// [`Element`]: crate::Element
        byte: u8,
    },
    /// A typed view of an element type that not every bit pattern is valid for (`bool`) was
    /// asked of memory that code outside Rust may write while the view lives (a tensor imported
    /// from Python, [`ManagedTensor::into_externally_writable`]): such a write could put an
    /// invalid value under a Rust reference. Copy the elements instead (`to_vec` checks each as
    /// it copies) or view their bytes (`view_bytes`).
    ///
    /// [`ManagedTensor::into_externally_writable`]: crate::ManagedTensor::into_externally_writable
    ExternallyWritable {
        /// The element type asked for.
        dtype: DataType,
    },
    /// The number of dimensions differs from the one asked for.
    NdimMismatch {
        /// The tensor's ndim.
        found: usize,
        /// The ndim asked for.
        expected: usize,
    },
    /// A dimension size or stride does not fit the Rust type asked to hold it (a negative
    /// stride for `usize`, say).
    DimOutOfRange {
        /// The position in the list.
        axis: usize,
        /// The value found.
        value: i64,
        /// The Rust type asked for.
        target: &'static str,
    },
    /// A stride the type asked to hold the tensor cannot express without a copy (nalgebra's
    /// views step forward only, with row stride 1, say). The tensor itself is valid.
    UnsupportedLayout {
        /// The tensor axis whose stride it is.
        axis: usize,
        /// That stride, in elements.
        stride: i64,
        /// Why, and what to do instead.
        reason: &'static str,
    },
    /// The shape differs from the one asked for.
    ShapeMismatch {
        /// The tensor's shape.
        found: Vec<i64>,
        /// The shape asked for.
        expected: Vec<i64>,
    },
    /// A read-only tensor cannot be exported as a legacy `DLManagedTensor`, which has no flag to
    /// say so (NumPy refuses it the same way).
    LegacyReadOnly,
    /// A tensor of padded sub-byte elements (`IS_SUBBYTE_TYPE_PADDED`) cannot be exported as a
    /// legacy `DLManagedTensor`, which has no flag to say so: a consumer would read it packed.
    LegacyPaddedSubByte,
    /// The device the tensor claims is not the one its memory belongs to.
    DeviceMismatch {
        /// The device in the tensor.
        claimed: Device,
        /// The device the runtime reports for the data pointer.
        actual: Device,
    },
    /// The memory is of a kind the tensor's device type cannot describe (host memory claimed as
    /// CUDA device memory, say).
    MemoryKindMismatch {
        /// The device in the tensor.
        claimed: Device,
        /// The kind the runtime reports.
        actual: MemoryKind,
    },
    /// The runtime does not know the data pointer (not allocated by it, or in another context).
    UnknownPointer {
        /// The device in the tensor.
        claimed: Device,
        /// The address asked about.
        address: usize,
    },
    /// The bytes the tensor reaches are not all inside the allocation the runtime reports.
    SpanOutsideAllocation {
        /// First reachable byte.
        start: usize,
        /// One past the last reachable byte.
        end: usize,
        /// First byte of the allocation.
        alloc_start: usize,
        /// One past the last byte of the allocation.
        alloc_end: usize,
    },
    /// A device runtime (CUDA driver, Level Zero loader) is missing or failed.
    Runtime {
        /// The runtime (`"CUDA driver"`, `"Level Zero"`).
        runtime: &'static str,
        /// What it said.
        message: String,
    },
    /// A device copy whose completion the runtime could not confirm (a lost device's failed
    /// wait): the device may still write its destination, which was therefore leaked rather
    /// than freed (see [`DeviceHooks::copy_to_host`](crate::DeviceHooks::copy_to_host)).
    CopyInFlight {
        /// The runtime (`"Level Zero"`, `"CUDA driver"`).
        runtime: &'static str,
        /// What it said.
        message: String,
    },
    /// [`CopyMode::Never`](crate::CopyMode::Never) was asked for, but only a copy can give the
    /// target type this tensor. The methods that refuse so give the tensor back
    /// ([`Refused`]).
    CopyRefused {
        /// Why a copy would be needed.
        reason: crate::CopyReason,
    },
    /// No device hook handles this device type.
    NoHook {
        /// The device asked about.
        device: Device,
    },
    /// A Python `__dlpack__` / `from_dlpack` request that cannot be honoured; see
    /// [`crate::protocol`].
    Protocol {
        /// The Python exception this maps to.
        kind: PyErrorKind,
        /// The message.
        message: String,
    },
}

/// The Python exception class an [`Error`] maps to under the array API standard's rules:
/// `BufferError` when the data cannot be expressed or handed over, `ValueError` for bad argument
/// values, `TypeError` for arguments of the wrong type; and `MemoryError`, as Python raises it,
/// when a copy cannot be allocated.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum PyErrorKind {
    /// `BufferError`.
    BufferError,
    /// `ValueError`.
    ValueError,
    /// `TypeError`.
    TypeError,
    /// `MemoryError`.
    MemoryError,
}

impl Error {
    /// The Python exception class for this error.
    pub fn py_kind(&self) -> PyErrorKind {
        match self {
            Error::Protocol { kind, .. } => *kind,
            Error::OutOfMemory { .. } => PyErrorKind::MemoryError,
            _ => PyErrorKind::BufferError,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NullPointer { what } => write!(f, "the {what} pointer is NULL"),
            Error::IncompatibleVersion { found } => write!(
                f,
                "DLPack version {found} is not compatible with {} (major versions differ); nothing but its deleter may be read or called",
                Version::CURRENT
            ),
            Error::UnknownFlags { flags } => write!(
                f,
                "flags {:#x} hold bits DLPack {} does not define ({:#x}); expected only READ_ONLY, IS_COPIED and IS_SUBBYTE_TYPE_PADDED",
                flags.0,
                Version::CURRENT,
                flags.unknown_bits()
            ),
            Error::DimOutOfRange { axis, value, target } => write!(
                f,
                "entry {axis} is {value}, which does not fit {target}"
            ),
            Error::BadNdim { ndim } => {
                write!(f, "ndim = {ndim}, expected 0..={}", crate::MAX_NDIM)
            }
            Error::NegativeDim { axis, value } => {
                write!(f, "shape[{axis}] = {value}, expected a size >= 0")
            }
            Error::NullStrides { ndim, version } => write!(
                f,
                "strides is NULL for a {ndim}-d tensor of DLPack {version}; NULL strides are allowed only before 1.2 or for ndim 0"
            ),
            Error::MisalignedArray { what, address } => {
                write!(f, "the {what} array at {address:#x} is not aligned for i64 (8 bytes)")
            }
            Error::NullData { elements } => write!(
                f,
                "the data pointer is NULL but the tensor has {elements} elements; NULL is allowed only for size 0"
            ),
            Error::UnknownDataTypeCode { code } => write!(
                f,
                "dtype code {code} is unknown; expected 0..=17 (DLPack {})",
                Version::CURRENT
            ),
            Error::ZeroLanes { dtype } => {
                write!(f, "dtype {} has lanes = 0, expected at least 1", dtype.code)
            }
            Error::UnsupportedBits { dtype, allowed } => {
                let code = dtype.code;
                let name = code.name().unwrap_or("?");
                if allowed.is_empty() {
                    write!(f, "dtype {name} has bits = {}, expected a positive multiple of 8", dtype.bits)
                } else {
                    write!(f, "dtype {name} has bits = {}, expected one of {allowed:?}", dtype.bits)
                }
            }
            Error::StridedSubByte { dtype } => write!(
                f,
                "dtype {dtype} is packed below one byte per element, so only a compact row-major layout is defined; found other strides"
            ),
            Error::Overflow { what } => write!(f, "overflow: {what}"),
            Error::DataTypeMismatch { found, expected } => {
                write!(f, "the tensor holds {found}, expected {expected}")
            }
            Error::Misaligned { address, align } => write!(
                f,
                "the first element at {address:#x} is not aligned to {align} bytes as the element type needs"
            ),
            Error::NotHostAccessible { device } => write!(
                f,
                "the tensor lives on {device}, which the host cannot read without a copy; expected cpu, cuda_host, rocm_host or cuda_managed memory (or a device hook that says it is host memory); for a copy on the host, import it with dl_device=(1, 0) (the producer copies), or copy it through its device hooks (to_host_vec)"
            ),
            Error::ReadOnly => f.write_str("the tensor is read-only; mutable access refused"),
            Error::OverlappingStrides { shape, strides } => write!(
                f,
                "strides {strides:?} for shape {shape:?} make distinct indices share memory; mutable access refused"
            ),
            Error::DataOverlapsDescription { what, start, end } => write!(
                f,
                "the data (bytes {start:#x}..{end:#x}) overlaps the tensor's own {what}; mutable access refused, since a write would change the tensor's layout"
            ),
            Error::IrregularOverlap { shape, strides } => write!(
                f,
                "strides {strides:?} for shape {shape:?} cannot be shown to reach each element once, and checking every index's value would take too long (more than 2^30 indices); read its bytes as u8 with view_bytes() instead"
            ),
            Error::OutOfMemory { bytes } => {
                write!(f, "cannot allocate {bytes} bytes for a copy of the tensor")
            }
            Error::ExternallyWritable { dtype } => write!(
                f,
                "a {dtype} view of memory that code outside Rust (Python, say) may write could read an invalid {dtype}; copy the elements with to_vec (each is checked as it is copied) or read their bytes with view_bytes"
            ),
            Error::InvalidValue { dtype, index, byte } if *dtype == DataType::BOOL => write!(
                f,
                "element {index} holds byte {byte:#04x}, not a valid {dtype} (expected 0 or 1)"
            ),
            Error::InvalidValue { dtype, index, byte } => write!(
                f,
                "element {index} is not a valid {dtype} value (its first byte is {byte:#04x})"
            ),
            Error::NdimMismatch { found, expected } => {
                write!(f, "the tensor has {found} dimensions, expected {expected}")
            }
            Error::UnsupportedLayout {
                axis,
                stride,
                reason,
            } => write!(
                f,
                "stride {stride} of axis {axis} cannot be viewed without a copy: {reason}"
            ),
            Error::ShapeMismatch { found, expected } => {
                write!(f, "the tensor has shape {found:?}, expected {expected:?}")
            }
            Error::LegacyReadOnly => f.write_str(
                "a read-only tensor cannot be exported as a legacy DLManagedTensor, which has no read-only flag; ask for a versioned tensor (max_version >= (1, 0))",
            ),
            Error::LegacyPaddedSubByte => f.write_str(
                "a padded sub-byte tensor cannot be exported as a legacy DLManagedTensor, which has no flag to say it is padded; ask for a versioned tensor (max_version >= (1, 0))",
            ),
            Error::DeviceMismatch { claimed, actual } => write!(
                f,
                "the tensor claims device {claimed}, but its memory belongs to {actual}"
            ),
            Error::MemoryKindMismatch { claimed, actual } => write!(
                f,
                "the tensor claims device {claimed}, but its memory is {actual}"
            ),
            Error::UnknownPointer { claimed, address } => write!(
                f,
                "the runtime for {claimed} does not know the data pointer {address:#x} (not allocated by it, or in another context)"
            ),
            Error::SpanOutsideAllocation { start, end, alloc_start, alloc_end } => write!(
                f,
                "the tensor reaches bytes {start:#x}..{end:#x}, outside its allocation {alloc_start:#x}..{alloc_end:#x}"
            ),
            Error::Runtime { runtime, message } => write!(f, "{runtime}: {message}"),
            Error::CopyRefused { reason } => write!(
                f,
                "no-copy import refused (copy=False / CopyMode::Never): {reason}; pass CopyMode::IfNeeded to allow a copy"
            ),
            Error::CopyInFlight { runtime, message } => write!(
                f,
                "{runtime}: {message}; the copy may still be running, so its destination was leaked rather than freed"
            ),
            Error::NoHook { device } => write!(
                f,
                "no device hook handles {device}; enable the device crate for it (dlpack-cuda, dlpack-oneapi)"
            ),
            Error::Protocol { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

/// A refusal by a method that consumes its value: the error, and the value itself, unchanged.
///
/// The rule throughout the workspace: a method that takes a value by move and refuses gives it
/// back, so the caller can try something else with it. [`ManagedTensor::reclaim`] and
/// [`ManagedTensor::into_vec`] return the tensor itself (they have nothing to report but "not
/// this"); the methods that refuse for a reason return a `Refused` holding the reason and the
/// value: the exports ([`ManagedTensor::export`], [`ManagedTensor::export_raw`],
/// [`ManagedTensor::export_legacy`], [`ManagedTensor::export_raw_legacy`]) and
/// [`ManagedTensor::into_raw_legacy`].
///
/// `Refused<T>` converts into [`Error`], so `?` works in functions that return `Error` (the value
/// is dropped then). An adapter whose own error type wraps [`Error`] (dlpack-candle's) refuses
/// with `Refused<T, ItsError>` and converts the same way.
///
/// ```
/// use dlpack_core::{Error, ManagedTensor};
///
/// let read_only = ManagedTensor::export(vec![1u8, 2, 3])?.into_read_only();
/// // The legacy struct cannot say "read-only": refused, and the tensor comes back.
/// let refused = read_only.into_raw_legacy().unwrap_err();
/// assert_eq!(refused.error, Error::LegacyReadOnly);
/// // The versioned struct can: the caller falls back to it.
/// let raw = refused.value.into_raw()?;
/// // SAFETY: `raw` is a live tensor we own.
/// let back = unsafe { ManagedTensor::from_raw(raw)? };
/// assert!(back.is_read_only());
/// # Ok::<(), Error>(())
/// ```
///
/// [`ManagedTensor::export`]: crate::ManagedTensor::export
/// [`ManagedTensor::export_raw`]: crate::ManagedTensor::export_raw
/// [`ManagedTensor::reclaim`]: crate::ManagedTensor::reclaim
/// [`ManagedTensor::into_vec`]: crate::ManagedTensor::into_vec
/// [`ManagedTensor::into_raw_legacy`]: crate::ManagedTensor::into_raw_legacy
/// [`ManagedTensor::export_legacy`]: crate::ManagedTensor::export_legacy
/// [`ManagedTensor::export_raw_legacy`]: crate::ManagedTensor::export_raw_legacy
pub struct Refused<T, E = Error> {
    /// Why the value was refused.
    pub error: E,
    /// The value, as it was passed in.
    pub value: T,
}

impl<T, E> Refused<T, E> {
    /// The error and the value.
    pub fn into_parts(self) -> (E, T) {
        (self.error, self.value)
    }

    /// The same refusal with the error converted, for an adapter whose error type wraps
    /// [`Error`].
    pub fn map_err<F>(self, f: impl FnOnce(E) -> F) -> Refused<T, F> {
        Refused {
            error: f(self.error),
            value: self.value,
        }
    }
}

impl<T> From<Refused<T>> for Error {
    fn from(refused: Refused<T>) -> Error {
        refused.error
    }
}

impl<T, E: fmt::Debug> fmt::Debug for Refused<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Refused")
            .field("error", &self.error)
            .field("value", &core::any::type_name::<T>())
            .finish()
    }
}

impl<T, E: fmt::Display> fmt::Display for Refused<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

// The refusal displays as its error, so the error's source is its source.
impl<T, E: std::error::Error> std::error::Error for Refused<T, E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}
