//! A kit for testing code that imports DLPack tensors: a builder for managed tensors with any
//! field values, well-formed or not, as a foreign (C) producer would hand them over, with a
//! deleter that counts its calls. Behind the `testing` feature.
//!
//! Adapters and consumers are only as safe as their answer to malformed input. [`Foreign`]
//! builds a `DLManagedTensorVersioned` (or, with [`Foreign::build_legacy`], a legacy
//! `DLManagedTensor`) whose version, flags, ndim, shape, strides, dtype, device, data pointer,
//! byte offset and deleter are whatever the test says; [`Built::deletes`] then tells whether the
//! consumer called the deleter exactly once.
//!
//! ```
//! use dlpack_core::testing::{Array, Foreign};
//! use dlpack_core::{Error, ManagedTensor};
//!
//! // A well-formed 2 x 3 f32 tensor, transposed by its strides.
//! let built = Foreign::of(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).with_strides(&[1, 3]).build();
//! let deletes = built.counter();
//! // SAFETY: a fresh fixture, handed over once.
//! let t = unsafe { ManagedTensor::from_raw(built.ptr) }?;
//! assert_eq!(t.to_vec::<f32>()?, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
//! drop(t);
//! assert_eq!(deletes.load(std::sync::atomic::Ordering::SeqCst), 1);
//!
//! // A malformed one: a negative dimension. Refused, and deleted once.
//! let built = Foreign::of(&[1u8, 2, 3], &[3]).shape(Array::Values(vec![-3])).build();
//! // SAFETY: as above.
//! let err = unsafe { ManagedTensor::from_raw(built.ptr) }.unwrap_err();
//! assert_eq!(err, Error::NegativeDim { axis: 0, value: -3 });
//! assert_eq!(built.deletes(), 1);
//! # Ok::<(), Error>(())
//! ```
//!
//! Each tensor is one `Box`-allocated `#[repr(C)]` block whose first field is the managed
//! header, followed by what the producer owns: an 8-aligned data buffer, the shape and strides
//! arrays and the deleter counter. The `extern "C"` deleters count the call and free the whole
//! block. Pointers are always derived from real allocations or made with
//! `ptr::without_provenance_mut` for fake addresses that must never be dereferenced, so the
//! kit runs under Miri with `-Zmiri-strict-provenance`.
//!
//! A [`Built`] tensor that nobody imports is not freed on drop: hand it to an importer, or free
//! it with [`Built::free`].

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLTensor};
use crate::{DataType, Device, DeviceType, Element, MAX_NDIM, Version};

/// Adds one to a shared count when dropped: a field of a test producer (or of a derived struct)
/// that shows when, and how often, a tensor's deleter drops the producer.
#[derive(Debug)]
pub struct DropCounter(Arc<AtomicUsize>);

impl DropCounter {
    /// A value that counts its drop into `count`.
    pub fn new(count: &Arc<AtomicUsize>) -> Self {
        DropCounter(Arc::clone(count))
    }
}

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// How a `shape` or `strides` field is filled.
#[derive(Clone, Debug)]
pub enum Array {
    /// A real array holding these values, padded with 1s so that `ndim` entries can be read
    /// (up to `MAX_NDIM`: beyond that the importer must refuse before reading anything).
    Values(Vec<i64>),
    /// NULL.
    Null,
    /// A real array holding these values at an address 4 bytes past an 8-aligned one.
    Misaligned(Vec<i64>),
}

/// What `DLTensor::data` points to.
#[derive(Clone, Copy, Debug)]
pub enum Data {
    /// The fixture's buffer, this many bytes past its start.
    Buffer {
        /// Bytes from the buffer's start.
        offset: usize,
    },
    /// NULL.
    Null,
    /// An address with no memory behind it (a fake device pointer); never dereferenced.
    Fake(usize),
}

/// Native-endian bytes of a scalar, to fill a fixture buffer without `unsafe`.
pub trait NeBytes: Element {
    /// Appends the value's bytes to `out`.
    fn put(self, out: &mut Vec<u8>);
}

macro_rules! ne_bytes {
    ($($ty:ty),*) => {
        $(
            impl NeBytes for $ty {
                fn put(self, out: &mut Vec<u8>) {
                    out.extend_from_slice(&self.to_ne_bytes());
                }
            }
        )*
    };
}

ne_bytes!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

#[cfg(feature = "half")]
ne_bytes!(half::f16, half::bf16);

#[cfg(feature = "num-complex")]
impl<T: NeBytes> NeBytes for num_complex::Complex<T>
where
    num_complex::Complex<T>: Element,
{
    fn put(self, out: &mut Vec<u8>) {
        self.re.put(out);
        self.im.put(out);
    }
}

#[cfg(feature = "float8")]
impl NeBytes for float8::F8E4M3 {
    fn put(self, out: &mut Vec<u8>) {
        out.push(self.to_bits());
    }
}

#[cfg(feature = "float8")]
impl NeBytes for float8::F8E5M2 {
    fn put(self, out: &mut Vec<u8>) {
        out.push(self.to_bits());
    }
}

impl NeBytes for bool {
    fn put(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
}

/// The bytes of `values`, in order.
pub fn bytes_of<T: NeBytes>(values: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(std::mem::size_of_val(values));
    for &v in values {
        v.put(&mut out);
    }
    out
}

/// Packs bytes into 8-aligned words (zero-padded), native-endian.
fn words_of(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks(8)
        .map(|chunk| {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            u64::from_ne_bytes(word)
        })
        .collect()
}

/// Compact row-major strides for `shape` (size-0 and size-1 axes counted as 1).
pub fn row_major(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![0i64; shape.len()];
    let mut step = 1i64;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = step;
        step = step.saturating_mul(d.max(1));
    }
    strides
}

/// A builder for one foreign managed tensor. Every field of the header can be set.
#[derive(Clone, Debug)]
pub struct Foreign {
    version: Version,
    flags: u64,
    ndim: Option<i32>,
    shape: Array,
    strides: Array,
    dtype: DataType,
    device: Device,
    data: Data,
    buffer: Vec<u64>,
    byte_offset: u64,
    deleter: bool,
    garbage: bool,
}

impl Foreign {
    /// A well-formed DLPack 1.3 CPU tensor of `dtype` and `shape` with compact row-major strides
    /// and a zeroed buffer just large enough for it (none for a size-0 shape).
    pub fn new(dtype: DataType, shape: &[i64]) -> Self {
        // Absurd shapes (negative, overflowing, huge) get a small buffer: the tests that use
        // them expect a refusal before any element is read, or set the buffer themselves.
        let elements = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
            .unwrap_or(0)
            .min(4096);
        let bits = elements * dtype.element_bits() as usize;
        Foreign {
            version: Version::CURRENT,
            flags: 0,
            ndim: None,
            shape: Array::Values(shape.to_vec()),
            strides: Array::Values(row_major(shape)),
            dtype,
            device: Device::CPU,
            data: Data::Buffer { offset: 0 },
            buffer: vec![0; bits.div_ceil(64)],
            byte_offset: 0,
            deleter: true,
            garbage: false,
        }
    }

    /// A well-formed DLPack 1.3 CPU tensor holding `values` (row-major) with `shape`.
    pub fn of<T: NeBytes>(values: &[T], shape: &[i64]) -> Self {
        Foreign::new(T::DTYPE, shape).bytes(&bytes_of(values))
    }

    /// The buffer's contents (zero-padded to whole 8-byte words).
    pub fn bytes(mut self, bytes: &[u8]) -> Self {
        self.buffer = words_of(bytes);
        self
    }

    /// A zeroed buffer of `words` 8-byte words.
    pub fn buffer_words(mut self, words: usize) -> Self {
        self.buffer = vec![0; words];
        self
    }

    /// The version the producer writes (ignored by [`Foreign::build_legacy`]).
    pub fn version(mut self, major: u32, minor: u32) -> Self {
        self.version = Version::new(major, minor);
        self
    }

    /// The raw flags field (ignored by [`Foreign::build_legacy`]).
    pub fn flags(mut self, flags: u64) -> Self {
        self.flags = flags;
        self
    }

    /// `ndim`, independent of the arrays' lengths (default: the shape's length, or 0).
    pub fn ndim(mut self, ndim: i32) -> Self {
        self.ndim = Some(ndim);
        self
    }

    /// The shape field.
    pub fn shape(mut self, shape: Array) -> Self {
        self.shape = shape;
        self
    }

    /// The strides field.
    pub fn strides(mut self, strides: Array) -> Self {
        self.strides = strides;
        self
    }

    /// Shorthand for `strides(Array::Values(strides))`.
    pub fn with_strides(self, strides: &[i64]) -> Self {
        self.strides(Array::Values(strides.to_vec()))
    }

    /// The dtype.
    pub fn dtype(mut self, dtype: DataType) -> Self {
        self.dtype = dtype;
        self
    }

    /// The device.
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Shorthand for a device of `device_type` with id `id`.
    pub fn on(self, device_type: DeviceType, id: i32) -> Self {
        self.device(Device::new(device_type, id))
    }

    /// What the data pointer points to.
    pub fn data(mut self, data: Data) -> Self {
        self.data = data;
        self
    }

    /// `byte_offset`.
    pub fn byte_offset(mut self, byte_offset: u64) -> Self {
        self.byte_offset = byte_offset;
        self
    }

    /// A NULL deleter: the test frees the block itself with [`Built::free`].
    pub fn no_deleter(mut self) -> Self {
        self.deleter = false;
        self
    }

    /// Everything but `version` and `deleter` is garbage: `manager_ctx`, every `DLTensor` field
    /// (shape, strides and data point nowhere: reading them is undefined behaviour under Miri
    /// and a crash natively). The flags get unknown high bits too, so an importer that judged
    /// them before the version would report the wrong error.
    pub fn garbage_tensor(mut self) -> Self {
        self.garbage = true;
        self
    }

    /// The `DLTensor` for this description, whose arrays and buffer are moved into `owned`.
    fn describe(&self, owned: &mut Owned) -> (DLTensor, Pointers) {
        if self.garbage {
            let tensor = DLTensor {
                data: ptr::without_provenance_mut(0xdead_bee0),
                device: Device::new(DeviceType(0x7777), -9),
                ndim: 3,
                dtype: DataType::F32,
                shape: ptr::without_provenance_mut(0x10),
                strides: ptr::without_provenance_mut(0x18),
                byte_offset: u64::MAX,
            };
            return (tensor, Pointers::default());
        }
        let ndim = self.ndim.unwrap_or(match &self.shape {
            Array::Values(v) | Array::Misaligned(v) => v.len() as i32,
            Array::Null => 0,
        });
        // Entries the importer may read: `ndim`, but never more than MAX_NDIM (beyond that it
        // must refuse first; Miri reports an out-of-bounds read if it does not).
        let readable = usize::try_from(ndim).unwrap_or(0).min(MAX_NDIM);
        owned.buffer = self.buffer.clone();
        let shape = fill(&self.shape, &mut owned.shape, readable);
        let strides = fill(&self.strides, &mut owned.strides, readable);
        let buffer = owned.buffer.as_mut_ptr().cast::<u8>();
        let data = match self.data {
            Data::Buffer { offset } => buffer.wrapping_add(offset).cast::<c_void>(),
            Data::Null => ptr::null_mut(),
            Data::Fake(address) => ptr::without_provenance_mut(address),
        };
        let tensor = DLTensor {
            data,
            device: self.device,
            ndim,
            dtype: self.dtype,
            shape,
            strides,
            byte_offset: self.byte_offset,
        };
        let pointers = Pointers {
            buffer,
            buffer_len: owned.buffer.len() * 8,
            data,
            shape,
            strides,
        };
        (tensor, pointers)
    }

    fn owned(&self) -> Owned {
        Owned {
            deletes: Arc::new(AtomicUsize::new(0)),
            buffer: Vec::new(),
            shape: Vec::new(),
            strides: Vec::new(),
        }
    }

    /// A `DLManagedTensorVersioned*` the caller owns.
    pub fn build(self) -> Built<DLManagedTensorVersioned> {
        let owned = self.owned();
        let deletes = Arc::clone(&owned.deletes);
        let block = Box::new(VersionedBlock {
            header: DLManagedTensorVersioned {
                version: self.version,
                manager_ctx: ptr::null_mut(),
                deleter: self.deleter.then_some(delete_versioned as _),
                flags: self.flags,
                dl_tensor: EMPTY,
            },
            owned,
        });
        let raw = Box::into_raw(block);
        // SAFETY: `raw` is a live, aligned, exclusively owned block fresh from `Box::into_raw`;
        // the `&mut` to its `owned` field ends before the header is written below.
        let (tensor, pointers) = self.describe(unsafe { &mut (*raw).owned });
        let (manager_ctx, flags) = if self.garbage {
            (
                ptr::without_provenance_mut(0xbad_c0de),
                0xffff_0000_0000_0000 | self.flags,
            )
        } else {
            (raw.cast::<c_void>(), self.flags)
        };
        let header = DLManagedTensorVersioned {
            version: self.version,
            manager_ctx,
            deleter: self.deleter.then_some(delete_versioned as _),
            flags,
            dl_tensor: tensor,
        };
        // SAFETY: as above; the header field is valid for writes and nothing borrows it.
        unsafe { (*raw).header = header };
        Built {
            ptr: raw.cast(),
            deletes,
            pointers,
            free: free_versioned,
        }
    }

    /// A legacy `DLManagedTensor*` the caller owns (version and flags are not written).
    pub fn build_legacy(self) -> Built<DLManagedTensor> {
        let owned = self.owned();
        let deletes = Arc::clone(&owned.deletes);
        let block = Box::new(LegacyBlock {
            header: DLManagedTensor {
                dl_tensor: EMPTY,
                manager_ctx: ptr::null_mut(),
                deleter: self.deleter.then_some(delete_legacy as _),
            },
            owned,
        });
        let raw = Box::into_raw(block);
        // SAFETY: as in `build`.
        let (tensor, pointers) = self.describe(unsafe { &mut (*raw).owned });
        let header = DLManagedTensor {
            dl_tensor: tensor,
            manager_ctx: raw.cast(),
            deleter: self.deleter.then_some(delete_legacy as _),
        };
        // SAFETY: as in `build`.
        unsafe { (*raw).header = header };
        Built {
            ptr: raw.cast(),
            deletes,
            pointers,
            free: free_legacy,
        }
    }
}

/// Fills an array field, returning the pointer the header gets.
fn fill(array: &Array, storage: &mut Vec<i64>, readable: usize) -> *mut i64 {
    match array {
        Array::Null => ptr::null_mut(),
        Array::Values(values) => {
            *storage = values.clone();
            if storage.len() < readable {
                storage.resize(readable, 1);
            }
            storage.as_mut_ptr()
        }
        Array::Misaligned(values) => {
            // One more i64 so that the shifted array still lies inside the allocation.
            *storage = vec![1; values.len().max(readable) + 1];
            storage.as_mut_ptr().wrapping_byte_add(4)
        }
    }
}

const EMPTY: DLTensor = DLTensor {
    data: ptr::null_mut(),
    device: Device::CPU,
    ndim: 0,
    dtype: DataType::U8,
    shape: ptr::null_mut(),
    strides: ptr::null_mut(),
    byte_offset: 0,
};

/// What a foreign block owns besides its header.
struct Owned {
    deletes: Arc<AtomicUsize>,
    buffer: Vec<u64>,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

#[repr(C)]
struct VersionedBlock {
    header: DLManagedTensorVersioned,
    owned: Owned,
}

#[repr(C)]
struct LegacyBlock {
    header: DLManagedTensor,
    owned: Owned,
}

/// Counts the call, then frees the whole block.
///
/// # Safety
/// `tensor` was built by [`Foreign::build`] and has not been freed.
unsafe extern "C" fn delete_versioned(tensor: *mut DLManagedTensorVersioned) {
    // SAFETY: the header is the first field of a `#[repr(C)]` `VersionedBlock` that came from
    // `Box::into_raw` and is freed only here (once, by the contract).
    let block = unsafe { Box::from_raw(tensor.cast::<VersionedBlock>()) };
    block.owned.deletes.fetch_add(1, Ordering::SeqCst);
}

/// Counts the call, then frees the whole block.
///
/// # Safety
/// `tensor` was built by [`Foreign::build_legacy`] and has not been freed.
unsafe extern "C" fn delete_legacy(tensor: *mut DLManagedTensor) {
    // SAFETY: as in `delete_versioned`, for a `LegacyBlock`.
    let block = unsafe { Box::from_raw(tensor.cast::<LegacyBlock>()) };
    block.owned.deletes.fetch_add(1, Ordering::SeqCst);
}

/// Frees a versioned block without counting.
///
/// # Safety
/// As for `delete_versioned`.
unsafe fn free_versioned(tensor: *mut DLManagedTensorVersioned) {
    // SAFETY: forwarded contract.
    drop(unsafe { Box::from_raw(tensor.cast::<VersionedBlock>()) });
}

/// Frees a legacy block without counting.
///
/// # Safety
/// As for `delete_legacy`.
unsafe fn free_legacy(tensor: *mut DLManagedTensor) {
    // SAFETY: forwarded contract.
    drop(unsafe { Box::from_raw(tensor.cast::<LegacyBlock>()) });
}

/// Where the fixture put things (NULL where nothing real was allocated).
#[derive(Clone, Copy, Debug)]
pub struct Pointers {
    /// Start of the data buffer.
    pub buffer: *mut u8,
    /// Its length in bytes.
    pub buffer_len: usize,
    /// `DLTensor::data` as written.
    pub data: *mut c_void,
    /// `DLTensor::shape` as written.
    pub shape: *mut i64,
    /// `DLTensor::strides` as written.
    pub strides: *mut i64,
}

impl Default for Pointers {
    fn default() -> Self {
        Pointers {
            buffer: ptr::null_mut(),
            buffer_len: 0,
            data: ptr::null_mut(),
            shape: ptr::null_mut(),
            strides: ptr::null_mut(),
        }
    }
}

/// A built foreign tensor: the raw pointer to hand to the importer, and what the test needs to
/// check afterwards.
#[derive(Debug)]
pub struct Built<H> {
    /// The managed tensor; ownership passes to whoever imports it.
    pub ptr: *mut H,
    deletes: Arc<AtomicUsize>,
    /// Where the fields point.
    pub pointers: Pointers,
    free: unsafe fn(*mut H),
}

impl<H> Built<H> {
    /// How many times the deleter has run.
    pub fn deletes(&self) -> usize {
        self.deletes.load(Ordering::SeqCst)
    }

    /// The deleter counter, to check after `self` has moved elsewhere.
    pub fn counter(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.deletes)
    }

    /// The address of the data buffer's first byte.
    pub fn buffer_addr(&self) -> usize {
        self.pointers.buffer.addr()
    }

    /// Frees the block without calling (or counting) the deleter, for tensors built with
    /// [`Foreign::no_deleter`], which the importer never frees.
    ///
    /// # Safety
    /// Nobody freed the block, and nobody uses `self.ptr` afterwards.
    pub unsafe fn free(self) {
        // SAFETY: forwarded contract; `free` matches the block type of `ptr`.
        unsafe { (self.free)(self.ptr) }
    }
}
