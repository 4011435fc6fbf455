//! [`CheckedTensor`]: validation of a `DLTensor`, once, and the accessors, write checks and
//! device checks of the validated description.

use core::fmt;
use core::ptr::NonNull;

use crate::ffi::DLTensor;
use crate::layout::{self, Extent, Span, is_row_major, strides_are_disjoint};
use crate::{DataType, Device, DeviceHooks, Error, Flags, PointerInfo, Version};

#[cfg(doc)] // for the docs' links
use super::{BorrowedTensor, ManagedTensor};

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
    pub(super) tensor: NonNull<DLTensor>,
    version: Version,
    pub(super) flags: Flags,
    pub(super) elements: usize,
    pub(super) span: Span,
    /// Compact row-major strides, when the producer sent NULL.
    own_strides: Option<Box<[i64]>>,
    /// Whether views may read the memory in place.
    pub(super) host_accessible: bool,
    /// Whether code outside Rust's borrow rules may write the memory while views of it live
    /// ([`ManagedTensor::into_externally_writable`]).
    pub(super) externally_writable: bool,
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
    pub(super) unsafe fn new_fast(
        tensor: NonNull<DLTensor>,
        version: Version,
        flags: Flags,
    ) -> Option<Self> {
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
    pub(super) unsafe fn new_full(
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
    pub(super) fn fits(&self, allocation: &Option<core::ops::Range<usize>>) -> bool {
        let span = self.span;
        match allocation {
            None => true,
            Some(alloc) => {
                span.start == span.end || (alloc.start <= span.start && span.end <= alloc.end)
            }
        }
    }

    /// Refuses a description whose reachable bytes leave `allocation`, when one is named.
    pub(super) fn within(self, allocation: Option<core::ops::Range<usize>>) -> Result<Self, Error> {
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
    pub(super) fn raw(&self) -> &DLTensor {
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

    /// What writing every element in place needs, whoever writes (a view, a device copy): the
    /// tensor is writable, no two indices share memory, and no element lies in the tensor's own
    /// description.
    pub(super) fn check_writable(&self, header: core::ops::Range<usize>) -> Result<(), Error> {
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
    pub(super) fn check_disjoint_from_description(
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

    pub(super) fn verify_device(
        &mut self,
        hooks: &dyn DeviceHooks,
    ) -> Result<Option<PointerInfo>, Error> {
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
                layout::Overflow::Term => match layout::overflowing_term(shape, strides) {
                    Some(axis) => {
                        let (d, s) = (shape[axis], strides[axis]);
                        overflow(format!(
                            "(shape[{axis}] - 1) * strides[{axis}] = ({d} - 1) * {s} overflows: the strides {strides:?} of shape {shape:?} reach too far"
                        ))
                    }
                    None => too_far(),
                },
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
