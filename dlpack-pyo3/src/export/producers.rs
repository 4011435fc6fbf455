//! The producers behind every export: [`Shared`] (one export of an
//! [`Exporter`](super::Exporter)'s tensor), [`Reexport`] (pinned or managed memory relabelled to
//! the CPU) and [`HostCopy`] (a compact host copy of any tensor, made by [`host_copy`]).

use core::ffi::c_void;
use core::ops::Range;
use std::sync::Arc;

use dlpack_core::ffi::DLTensor;
#[cfg(doc)]
use dlpack_core::protocol::ExportPlan;
use dlpack_core::{
    BorrowedTensor, CheckedTensor, DataType, DataTypeCode, Device, DeviceHooks, DeviceType, Error,
    Export, ExportDesc, Flags, ManagedTensor, Version,
};

/// An export of another tensor's memory on another device: pinned or managed memory (or host
/// and shared USM) relabelled to the CPU.
pub(crate) struct Reexport {
    inner: ManagedTensor,
    device: Device,
}

impl Reexport {
    /// `inner`'s memory on `device`, with `inner`'s flags (dlpack-core's
    /// [`ExportPlan::Relabel`]).
    pub(crate) fn relabel(inner: ManagedTensor, device: Device) -> Self {
        Reexport { inner, device }
    }
}

// SAFETY: describes exactly the memory of the tensor it owns, which stays valid until `inner` is
// dropped with `self` (the import and export contracts), with its own shape and strides (so
// `ndim` is stable). The device differs from the inner one only for relabelling pinned or
// managed memory to the CPU, which the host reads and writes in place (dlpack-core's
// `ExportPlan::Relabel`); the flags are the inner tensor's.
unsafe impl Export for Reexport {
    fn ndim(&self) -> usize {
        self.inner.ndim()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(self.inner.shape());
        strides.copy_from_slice(self.inner.strides());
        ExportDesc {
            data: self.inner.data_ptr(),
            byte_offset: self.inner.byte_offset(),
            dtype: self.inner.dtype(),
            device: self.device,
            flags: self.inner.flags(),
            allocation: None,
        }
    }
}

/// One export of an [`Exporter`](super::Exporter)'s tensor.
pub(crate) struct Shared(pub(crate) Arc<ManagedTensor>);

// SAFETY: describes the memory of the tensor the Arc keeps, valid while any export holds the Arc
// (the import and export contracts of that tensor), with its own shape and strides. Several
// exports describe the same memory: they leave this crate only as raw tensors for foreign
// consumers (capsules and the C exchange API, never as a safe `ManagedTensor`), among which the
// sharing is the Python protocol's own, as NumPy shares an array's memory among all its exports;
// this crate's safe importer makes what it takes from Python read-only. IS_COPIED is cleared:
// no consumer owns shared memory alone.
unsafe impl Export for Shared {
    fn ndim(&self) -> usize {
        self.0.ndim()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        // One loop for both arrays: for the few dimensions of a tensor, cheaper than the two
        // `memcpy` calls `copy_from_slice` makes. Both arrays have `ndim()` entries.
        debug_assert_eq!(shape.len(), self.0.ndim());
        let source = self.0.shape().iter().zip(self.0.strides());
        for ((n, s), (&from_n, &from_s)) in shape.iter_mut().zip(strides.iter_mut()).zip(source) {
            *n = from_n;
            *s = from_s;
        }
        ExportDesc {
            data: self.0.data_ptr(),
            byte_offset: self.0.byte_offset(),
            dtype: self.0.dtype(),
            device: self.0.device(),
            flags: self.0.flags().with(Flags::IS_COPIED, false),
            allocation: None,
        }
    }
}

/// A compact row-major host copy of a tensor, of any dtype.
pub(crate) struct HostCopy {
    words: Words,
    shape: Box<[i64]>,
    dtype: DataType,
    flags: Flags,
}

/// The copied bytes, as the unsigned integers they were gathered as (for their alignment).
enum Words {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
}

impl Words {
    fn as_mut_ptr(&mut self) -> *mut c_void {
        match self {
            Words::U8(v) => v.as_mut_ptr().cast(),
            Words::U16(v) => v.as_mut_ptr().cast(),
            Words::U32(v) => v.as_mut_ptr().cast(),
            Words::U64(v) => v.as_mut_ptr().cast(),
        }
    }

    fn byte_len(&self) -> usize {
        match self {
            Words::U8(v) => v.len(),
            Words::U16(v) => v.len() * 2,
            Words::U32(v) => v.len() * 4,
            Words::U64(v) => v.len() * 8,
        }
    }
}

impl HostCopy {
    /// A zero-filled compact tensor of `shape` and `dtype` in host memory (the C exchange API's
    /// allocator).
    pub(crate) fn zeroed(shape: &[i64], dtype: DataType) -> Result<Self, Error> {
        dtype.validate()?;
        let elements = shape.iter().try_fold(1u64, |n, &d| {
            u64::try_from(d).ok().and_then(|d| n.checked_mul(d))
        });
        let bytes = elements
            .and_then(|n| n.checked_mul(u64::from(dtype.element_bits())))
            .map(|bits| bits.div_ceil(8))
            .and_then(|b| usize::try_from(b).ok())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| Error::Overflow {
                what: format!(
                    "a tensor of shape {shape:?} and dtype {dtype} does not fit in memory"
                ),
            })?;
        Ok(HostCopy {
            words: Words::U64(zeroed_words(bytes.div_ceil(8))?),
            shape: shape.into(),
            dtype,
            flags: Flags::empty(),
        })
    }
}

/// `vec![0u64; len]` (one zeroed allocation, which the OS may hand out as untouched zero pages),
/// with [`Error::OutOfMemory`] instead of an abort when it cannot be had.
fn zeroed_words(len: usize) -> Result<Vec<u64>, Error> {
    let out_of_memory = || Error::OutOfMemory {
        bytes: len as u128 * 8,
    };
    if len == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u64>(len).map_err(|_| out_of_memory())?;
    // SAFETY: the layout's size is non-zero (len > 0).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
    if ptr.is_null() {
        return Err(out_of_memory());
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `[u64; len]`, and
    // its `len` elements are initialised (all-zero bytes are a valid u64).
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

// SAFETY: describes the copy's own buffer: compact row-major strides over `shape`, whose
// elements (`prod(shape) * bits / 8` bytes, rounded up) the buffer holds, initialised, owned
// and in place while `self` lives; the allocation is named, so the export constructor checks the
// layout against it. `ndim` is the length of the boxed shape, which never changes.
unsafe impl Export for HostCopy {
    fn ndim(&self) -> usize {
        self.shape.len()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&self.shape);
        let mut step = 1i64;
        for (s, &d) in strides.iter_mut().zip(self.shape.iter()).rev() {
            *s = step;
            step = step.saturating_mul(d.max(1));
        }
        let data = self.words.as_mut_ptr();
        let start = data.addr();
        ExportDesc {
            data,
            byte_offset: 0,
            dtype: self.dtype,
            device: Device::CPU,
            flags: self.flags,
            allocation: Some(Range {
                start,
                end: start + self.words.byte_len(),
            }),
        }
    }
}

/// Copies `tensor`'s elements, of any dtype, into a compact row-major host buffer, reading
/// device memory through `hooks` when the host cannot read it.
///
/// dlpack-core's typed gathers ([`CheckedTensor::to_vec`], [`CheckedTensor::to_host_vec`]) do
/// the work: the tensor is viewed as unsigned integers of the widest width (8, 4, 2 or 1 bytes)
/// that divides its element size and the first element's address, with one more axis of
/// `element size / width` words when an element holds several (complex128, lanes > 1). Packed
/// sub-byte tensors (fp4, fp6), which DLPack defines only as compact, are copied as their bytes.
pub(crate) fn host_copy(
    tensor: &CheckedTensor,
    hooks: Option<&dyn DeviceHooks>,
    flags: Flags,
) -> Result<HostCopy, Error> {
    let dtype = tensor.dtype();
    let padded = tensor.flags().contains(Flags::IS_SUBBYTE_TYPE_PADDED);
    let source = tensor.as_dl_tensor();
    let first = source
        .data
        .addr()
        .wrapping_add(usize::try_from(source.byte_offset).unwrap_or(usize::MAX));
    let (width, mut shape, mut strides): (usize, Vec<i64>, Vec<i64>) =
        if !dtype.is_byte_sized() && !padded {
            // Packed: validation allowed only the compact row-major layout.
            let bits = (tensor.len() as u64) * u64::from(dtype.element_bits());
            let bytes = i64::try_from(bits.div_ceil(8)).map_err(|_| Error::Overflow {
                what: format!("{bits} bits of packed {dtype} data"),
            })?;
            (1, vec![bytes], vec![1])
        } else {
            let size = if padded {
                dtype.element_bits().div_ceil(8) as usize
            } else {
                dtype.element_bytes()
            };
            let width = [8usize, 4, 2, 1]
                .into_iter()
                .find(|w| size.is_multiple_of(*w) && first.is_multiple_of(*w))
                .unwrap_or(1);
            let words = (size / width) as i64;
            let mut strides = Vec::with_capacity(tensor.ndim() + 1);
            for &s in tensor.strides() {
                strides.push(s.checked_mul(words).ok_or_else(|| Error::Overflow {
                    what: format!("stride {s} times {words} words per element"),
                })?);
            }
            let mut shape = tensor.shape().to_vec();
            if words > 1 {
                shape.push(words);
                strides.push(1);
            }
            (width, shape, strides)
        };
    let word_type = DataType::new(DataTypeCode::UINT, (width * 8) as u8, 1);
    let view = DLTensor {
        data: source.data,
        // A tensor the host can read is read in place, whatever its device type says.
        device: if tensor.is_host_accessible() {
            Device::CPU
        } else {
            tensor.device()
        },
        ndim: shape.len() as i32,
        dtype: word_type,
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: source.byte_offset,
    };
    // SAFETY: `view` describes exactly the bytes of `tensor`'s elements (the same addresses, as
    // words), which `tensor` keeps valid and initialised while it is borrowed here; every
    // element of the view lies within those bytes (same span), `shape` and `strides` live until
    // the end of this function, and nothing writes the data meanwhile (we only read).
    let words = unsafe { BorrowedTensor::new(&view, Version::CURRENT, Flags::empty()) }?;
    let hooks_or_none: &dyn DeviceHooks = match hooks {
        Some(h) => h,
        None => &NoHooks,
    };
    let words = match width {
        8 => Words::U64(words.to_host_vec(hooks_or_none)?),
        4 => Words::U32(words.to_host_vec(hooks_or_none)?),
        2 => Words::U16(words.to_host_vec(hooks_or_none)?),
        _ => Words::U8(words.to_host_vec(hooks_or_none)?),
    };
    Ok(HostCopy {
        words,
        shape: tensor.shape().into(),
        dtype,
        flags: flags.with(Flags::IS_SUBBYTE_TYPE_PADDED, padded),
    })
}

/// The hooks of a producer that has none: they handle no device.
struct NoHooks;

// SAFETY: every method keeps its default: nothing is handled, resolved or copied.
unsafe impl DeviceHooks for NoHooks {
    fn handles(&self, _device_type: DeviceType) -> bool {
        false
    }
}
