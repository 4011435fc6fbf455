//! Test support for the workspace (not published): a "foreign producer" that builds managed
//! DLPack tensors the way a C library would, without going through dlpack-core's export path,
//! so that every crate's tests can hand its importers well-formed and malformed tensors alike
//! and count deleter calls.
//!
//! Each tensor is one `Box`-allocated `#[repr(C)]` block whose first field is the managed header
//! (`DLManagedTensorVersioned` or legacy `DLManagedTensor`), followed by what the producer owns:
//! an 8-aligned data buffer (`Vec<u64>`), the shape and strides arrays and a deleter counter.
//! The `extern "C"` deleters count the call and free the whole block. Every field can be set to
//! anything, including values a well-behaved producer would never write.
//!
//! Pointers are always derived from real allocations (`wrapping_byte_add`) or made with
//! `ptr::without_provenance_mut` for fake addresses that must never be dereferenced, so the
//! fixture runs under Miri with `-Zmiri-strict-provenance`.
//!
//! [`StridedVec`] exports any layout over a `Vec` through dlpack-core's own export path, for
//! adapters' tests of layouts no array library produces; [`DropCounter`] counts a producer's
//! drops.
//!
//! [`import_check`] holds the import invariant that dlpack-core's property test and the fuzz
//! target check on every foreign tensor they draw; [`c_layout`] the checks of Rust bindings
//! against a C header that dlpack-core's `dlpack.h` test and dlpack-oneapi's Level Zero test
//! share.
#![allow(clippy::missing_errors_doc)] // test support (not published): its errors fail tests

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLTensor};
use dlpack_core::{DataType, Device, DeviceType, Element, MAX_NDIM, Version};

pub mod c_layout;
pub mod harness;
mod strided;

pub use strided::StridedVec;

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

pub mod import_check {
    //! The import invariant that dlpack-core's property test (`tests/property.rs`) and the
    //! cargo-fuzz target (`fuzz/fuzz_targets/import.rs`) check on every foreign tensor they
    //! draw; the two differ only in how they draw an [`Input`] and in how they report a failure.
    //!
    //! [`check`] builds the tensor with [`Foreign`], imports it with
    //! `ManagedTensor::from_raw` or `from_raw_legacy`, and checks that:
    //! - a refused tensor's deleter ran exactly once (never, for a NULL deleter);
    //! - an accepted tensor whose fields describe memory inside the buffer (computed here in
    //!   `i128`, independently of dlpack-core) has a `byte_span()` inside the buffer, equal to
    //!   that reach for byte-sized (or padded sub-byte) dtypes; every element a typed view
    //!   yields lies inside the span, the view has `len()` elements and `to_vec` returns the
    //!   same values, bit for bit;
    //! - an accepted tensor without elements has an empty span and views reach nothing;
    //! - an accepted tensor's deleter runs exactly once on drop.

    use std::ops::Range;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use dlpack_core::{DataType, Device, Element, Error, Flags, MAX_NDIM, ManagedTensor};

    use crate::{Array, Built, Data, Foreign, Pointers, row_major};

    /// The most elements a typed view is walked for.
    const WALK_LIMIT: usize = 1 << 12;

    /// How a `shape` or `strides` field of an [`Input`] is filled.
    #[derive(Clone, Debug)]
    pub enum ArrayChoice {
        /// Real values (padded with 1s by the fixture up to `ndim`).
        Values(Vec<i64>),
        /// NULL.
        Null,
        /// A real array 4 bytes off its alignment (filled with 1s).
        Misaligned,
        /// For strides: the compact row-major strides of the shape.
        RowMajor,
    }

    /// Every field of one foreign tensor.
    #[derive(Clone, Debug)]
    pub struct Input {
        /// A legacy `DLManagedTensor` rather than a `DLManagedTensorVersioned`.
        pub legacy: bool,
        /// The version written (major, minor); ignored for legacy tensors.
        pub version: (u32, u32),
        /// The raw flags; ignored for legacy tensors.
        pub flags: u64,
        /// `ndim`; `None`: the shape's length (2 for a misaligned shape, 0 for NULL).
        pub ndim: Option<i32>,
        /// The shape field.
        pub shape: ArrayChoice,
        /// The strides field.
        pub strides: ArrayChoice,
        /// The dtype.
        pub dtype: DataType,
        /// The device.
        pub device: Device,
        /// What the data pointer points to.
        pub data: Data,
        /// `byte_offset`.
        pub byte_offset: u64,
        /// The buffer's contents (zero-padded to whole 8-byte words by the fixture).
        pub buffer: Vec<u8>,
        /// A real deleter (`false`: NULL, and [`check`] frees the block itself).
        pub deleter: bool,
    }

    /// What became of one [`Input`].
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Outcome {
        /// Refused (the deleter ran, if there was one).
        Refused,
        /// Accepted, but the fields do not describe memory inside the buffer (fake or NULL data,
        /// no elements, or a layout reaching outside it): nothing is read.
        AcceptedElsewhere,
        /// Accepted over the buffer.
        AcceptedInside {
            /// Whether a typed view was walked (the dtype is one of the walked element types:
            /// the scalars, and f16, bf16, complex and float8 with this crate's features; the
            /// data is aligned and valid for it and there are at most 4096 elements).
            walked: bool,
        },
    }

    /// Builds `input` as a foreign tensor, imports it and checks the invariant described in
    /// the [module documentation](self); the block is freed here when its deleter is NULL.
    ///
    /// # Errors
    /// A message saying which part of the invariant failed, for the caller to turn into a test
    /// failure or a panic. The first failure ends the check: the tensor is dropped and a block
    /// with a NULL deleter is still freed, but the later checks do not run.
    pub fn check(input: &Input) -> Result<Outcome, String> {
        let described = input.described_bytes();
        if input.legacy {
            let built = input.foreign().build_legacy();
            // SAFETY: the fixture owns a live block whose arrays hold `min(ndim, MAX_NDIM)`
            // readable i64s; its data pointer is either fake/NULL (then the tensor is only read
            // when accepted and `described` says it lies in the buffer, which it does not) or
            // inside the buffer. Ownership passes to the importer.
            let imported = unsafe { ManagedTensor::from_raw_legacy(built.ptr) };
            finish(built, imported, input.deleter, described)
        } else {
            let built = input.foreign().build();
            // SAFETY: as above, for the versioned block.
            let imported = unsafe { ManagedTensor::from_raw(built.ptr) };
            finish(built, imported, input.deleter, described)
        }
    }

    /// Judges the import of `built`, then frees the block if its deleter is NULL.
    fn finish<H>(
        built: Built<H>,
        imported: Result<ManagedTensor, Error>,
        deleter: bool,
        described: Option<Range<i128>>,
    ) -> Result<Outcome, String> {
        let deletes = built.counter();
        let expected = usize::from(deleter);
        let outcome = judge(imported, &deletes, expected, &built.pointers, described);
        if !deleter {
            // SAFETY: a block with a NULL deleter, which the importer never frees; the
            // importer's result, the only other user of the pointer, was dropped in `judge`.
            unsafe { built.free() };
        }
        outcome
    }

    /// Returns `Err(message)` from the enclosing function unless `cond` holds.
    macro_rules! ensure {
        ($cond:expr, $($message:tt)+) => {
            if !$cond {
                return Err(format!($($message)+));
            }
        };
    }

    /// Returns `Err` from the enclosing function unless the two values are equal.
    macro_rules! ensure_eq {
        ($left:expr, $right:expr, $what:literal) => {{
            let (left, right) = (&$left, &$right);
            ensure!(left == right, "{}: {left:?} != {right:?}", $what);
        }};
    }

    /// Checks one import's result: `deletes` counts the deleter's calls, `buffer` is where the
    /// fixture's buffer lies and `described` the bytes (relative to it) the fields describe.
    fn judge(
        imported: Result<ManagedTensor, Error>,
        deletes: &AtomicUsize,
        expected_deletes: usize,
        buffer: &Pointers,
        described: Option<Range<i128>>,
    ) -> Result<Outcome, String> {
        let t = match imported {
            Err(e) => {
                ensure!(!e.to_string().is_empty(), "a refusal with an empty message");
                let n = deletes.load(Ordering::SeqCst);
                ensure!(
                    n == expected_deletes,
                    "refused ({e}): the deleter ran {n} times, not {expected_deletes}"
                );
                return Ok(Outcome::Refused);
            }
            Ok(t) => t,
        };
        ensure_eq!(
            deletes.load(Ordering::SeqCst),
            0,
            "deleter calls before drop"
        );
        let span = t.byte_span();
        let (buf, buffer_len) = (buffer.buffer.addr(), buffer.buffer_len);
        let inside = described
            .as_ref()
            .is_some_and(|bytes| bytes.start >= 0 && bytes.end <= buffer_len as i128);
        let outcome = if inside {
            ensure!(
                buf <= span.start && span.end <= buf + buffer_len && !span.is_empty(),
                "span {span:x?} outside the buffer {buf:#x}+{buffer_len}"
            );
            // Packed sub-byte tensors span fewer bytes than the strided superset.
            if t.dtype().is_byte_sized() || t.flags().contains(Flags::IS_SUBBYTE_TYPE_PADDED) {
                let bytes = described.unwrap_or(0..0);
                ensure_eq!(span.start as i128 - buf as i128, bytes.start, "span start");
                ensure_eq!(span.end as i128 - buf as i128, bytes.end, "span end");
            }
            let walked = walk::<u8>(&t, &span)?
                | walk::<i8>(&t, &span)?
                | walk::<bool>(&t, &span)?
                | walk::<i16>(&t, &span)?
                | walk::<u16>(&t, &span)?
                | walk::<i32>(&t, &span)?
                | walk::<u32>(&t, &span)?
                | walk::<f32>(&t, &span)?
                | walk::<i64>(&t, &span)?
                | walk::<u64>(&t, &span)?
                | walk::<f64>(&t, &span)?
                | walk_feature_types(&t, &span)?;
            judge_bool(&t, buffer)?;
            Outcome::AcceptedInside { walked }
        } else {
            if t.is_empty() {
                // No element: a view exists but reaches nothing.
                ensure!(span.is_empty(), "no elements but the span {span:x?}");
                if let Ok(view) = t.view::<u8>() {
                    ensure_eq!(
                        view.iter().count(),
                        0,
                        "elements a view of no elements yields"
                    );
                }
            }
            Outcome::AcceptedElsewhere
        };
        drop(t);
        ensure_eq!(
            deletes.load(Ordering::SeqCst),
            expected_deletes,
            "deleter calls after drop"
        );
        Ok(outcome)
    }

    /// For a `bool` tensor over the buffer, checks the view's verdict against the bytes, read
    /// here one index at a time: a view exists exactly when every reachable byte is 0 or 1, and
    /// a refusal names an index that reaches a bad byte, holding the byte it reports (the first
    /// bad index when no two indices share a byte). Overlapping and broadcast layouts, which
    /// the view checks once per element rather than once per index, are the point.
    fn judge_bool(t: &ManagedTensor, buffer: &Pointers) -> Result<(), String> {
        if t.dtype() != DataType::BOOL || !t.is_host_accessible() || t.len() > WALK_LIMIT {
            return Ok(());
        }
        // The first element's position in the buffer (the span lies inside it: checked above).
        let first = (t.data_ptr().addr() + t.byte_offset() as usize) - buffer.buffer.addr();
        let bytes: Vec<u8> = t
            .element_offsets()
            .map(|offset| {
                // SAFETY: every element of an accepted tensor lies in its span, which lies in
                // the fixture's live buffer; the pointer keeps the buffer's provenance.
                unsafe { *buffer.buffer.add(first.wrapping_add_signed(offset)) }
            })
            .collect();
        let first_bad = bytes.iter().position(|&b| b > 1);
        match (t.view::<bool>(), first_bad) {
            (Ok(_), None) => Ok(()),
            (Err(Error::InvalidValue { index, byte, .. }), Some(first_bad)) => {
                ensure!(
                    byte > 1 && bytes.get(index) == Some(&byte),
                    "bool view refused naming index {index} and byte {byte:#x}, but that index holds {:?}",
                    bytes.get(index)
                );
                let mut distinct = t.element_offsets().collect::<Vec<_>>();
                distinct.sort_unstable();
                distinct.dedup();
                let shared = t
                    .shape()
                    .iter()
                    .zip(t.strides())
                    .any(|(&d, &s)| s == 0 && d > 1)
                    || distinct.len() < bytes.len();
                ensure!(
                    shared || index == first_bad,
                    "bool view named index {index}, but the first bad one is {first_bad}"
                );
                Ok(())
            }
            (verdict, first_bad) => Err(format!(
                "bool view: {verdict:?}, but the first bad index by brute force is {first_bad:?}"
            )),
        }
    }

    /// Bit-exact equality (NaN payloads included), to compare `to_vec` with the view.
    trait Same: Copy {
        /// Whether the two values have the same bits.
        fn same(self, other: Self) -> bool;
    }

    macro_rules! same_by_eq {
        ($($t:ty),*) => { $(impl Same for $t { fn same(self, other: Self) -> bool { self == other } })* };
    }
    same_by_eq!(u8, i8, bool, i16, u16, i32, u32, i64, u64);

    /// Floats compare by their bits (`to_bits`), so that NaN payloads count.
    macro_rules! same_by_bits {
        ($($(#[$cfg:meta])* $t:ty),* $(,)?) => {
            $($(#[$cfg])* impl Same for $t {
                fn same(self, other: Self) -> bool {
                    self.to_bits() == other.to_bits()
                }
            })*
        };
    }
    same_by_bits!(
        f32,
        f64,
        #[cfg(feature = "half")]
        half::f16,
        #[cfg(feature = "half")]
        half::bf16,
        #[cfg(feature = "float8")]
        float8::F8E4M3,
        #[cfg(feature = "float8")]
        float8::F8E5M2,
    );

    #[cfg(feature = "num-complex")]
    impl<T: Same> Same for num_complex::Complex<T> {
        fn same(self, other: Self) -> bool {
            self.re.same(other.re) && self.im.same(other.im)
        }
    }

    /// [`walk`] for the element types of this crate's features (`half`, `num-complex`,
    /// `float8`; the workspace's `cargo test --all-features` turns them on).
    #[allow(unused_variables, unused_mut)] // with none of the features
    fn walk_feature_types(t: &ManagedTensor, span: &Range<usize>) -> Result<bool, String> {
        let mut walked = false;
        #[cfg(feature = "half")]
        {
            walked |= walk::<half::f16>(t, span)? | walk::<half::bf16>(t, span)?;
        }
        #[cfg(feature = "num-complex")]
        {
            walked |= walk::<num_complex::Complex<f32>>(t, span)?
                | walk::<num_complex::Complex<f64>>(t, span)?;
        }
        #[cfg(feature = "float8")]
        {
            walked |= walk::<float8::F8E4M3>(t, span)? | walk::<float8::F8E5M2>(t, span)?;
        }
        Ok(walked)
    }

    /// Walks a typed view when `T` is the tensor's dtype: every element must lie in `span`, the
    /// view must have `len()` elements and `to_vec` must return the same values. `Ok(true)`
    /// when it walked one.
    fn walk<T: Element + Same>(t: &ManagedTensor, span: &Range<usize>) -> Result<bool, String> {
        // Broadcast (stride-0) axes let a few bytes hold billions of elements: walk those only
        // up to WALK_LIMIT elements, enough to reach every byte of a small buffer many times.
        if t.dtype() != T::DTYPE || !t.is_host_accessible() || t.len() > WALK_LIMIT {
            return Ok(false);
        }
        let Ok(view) = t.view::<T>() else {
            // Misaligned data, or (for bool) a byte that is not 0 or 1: `to_vec` refuses too.
            ensure!(t.to_vec::<T>().is_err(), "view refused but to_vec accepted");
            return Ok(false);
        };
        let mut count = 0usize;
        for element in view.iter() {
            let start = std::ptr::from_ref(element).addr();
            ensure!(
                span.start <= start && start + size_of::<T>() <= span.end,
                "element at {start:#x} outside the span {span:x?}"
            );
            count += 1;
        }
        ensure_eq!(count, t.len(), "elements the view yields");
        let copied = t
            .to_vec::<T>()
            .map_err(|e| format!("to_vec refused after a successful view: {e}"))?;
        ensure!(
            copied.len() == t.len() && copied.iter().zip(view.iter()).all(|(a, b)| a.same(*b)),
            "to_vec differs from the view"
        );
        Ok(true)
    }

    impl Input {
        /// The shape values as given (before the fixture pads them).
        fn shape_values(&self) -> Vec<i64> {
            match &self.shape {
                ArrayChoice::Values(v) => v.clone(),
                _ => Vec::new(),
            }
        }

        /// The fixture's array for `choice`.
        fn to_array(&self, choice: &ArrayChoice) -> Array {
            match choice {
                ArrayChoice::Values(v) => Array::Values(v.clone()),
                ArrayChoice::Null => Array::Null,
                ArrayChoice::Misaligned => Array::Misaligned(Vec::new()),
                ArrayChoice::RowMajor => Array::Values(row_major(&self.shape_values())),
            }
        }

        /// The `ndim` the header carries.
        fn header_ndim(&self) -> i32 {
            match (self.ndim, &self.shape) {
                (Some(n), _) => n,
                (None, ArrayChoice::Misaligned) => 2,
                (None, ArrayChoice::Values(v)) => v.len() as i32,
                (None, _) => 0,
            }
        }

        /// The fixture that builds this tensor.
        fn foreign(&self) -> Foreign {
            // The buffer is the input's; U8 keeps the fixture's default buffer small (a wild
            // dtype times a large shape would ask for gigabytes).
            let mut f = Foreign::new(DataType::U8, &self.shape_values())
                .dtype(self.dtype)
                .bytes(&self.buffer)
                .version(self.version.0, self.version.1)
                .flags(self.flags)
                .shape(self.to_array(&self.shape))
                .strides(self.to_array(&self.strides))
                .device(self.device)
                .data(self.data)
                .byte_offset(self.byte_offset)
                .ndim(self.header_ndim());
            if !self.deleter {
                f = f.no_deleter();
            }
            f
        }

        /// The array the importer reads for `choice` (the fixture pads real arrays with 1s and
        /// fills misaligned ones with 1s), or `None` for NULL.
        fn read(&self, choice: &ArrayChoice, ndim: usize) -> Option<Vec<i64>> {
            let mut values = match choice {
                ArrayChoice::Values(v) => v.clone(),
                ArrayChoice::RowMajor => row_major(&self.shape_values()),
                ArrayChoice::Misaligned => Vec::new(),
                ArrayChoice::Null => return None,
            };
            values.resize(values.len().max(ndim), 1);
            values.truncate(ndim);
            Some(values)
        }

        /// The byte range (relative to the buffer's start) that the fields describe, computed
        /// independently of dlpack-core in i128: `Some` only when the data pointer is the
        /// buffer, the tensor has elements and the layout can be read. It is the strided reach
        /// with `ceil(bits * lanes / 8)`-byte elements, a superset of the packed sub-byte
        /// layout.
        fn described_bytes(&self) -> Option<Range<i128>> {
            let Data::Buffer { offset } = self.data else {
                return None;
            };
            let ndim = usize::try_from(self.header_ndim())
                .ok()
                .filter(|&n| n <= MAX_NDIM)?;
            let shape = self.read(&self.shape, ndim)?;
            let strides = self
                .read(&self.strides, ndim)
                .unwrap_or_else(|| row_major(&shape));
            if shape.iter().any(|&d| d <= 0) {
                return None;
            }
            let (mut lo, mut hi) = (0i128, 0i128);
            for (&d, &s) in shape.iter().zip(&strides) {
                // Each term is below 2^126 in magnitude; the sums of up to MAX_NDIM may not fit.
                let term = i128::from(d - 1) * i128::from(s);
                if term < 0 {
                    lo = lo.checked_add(term)?;
                } else {
                    hi = hi.checked_add(term)?;
                }
            }
            let elem = (i128::from(self.dtype.bits) * i128::from(self.dtype.lanes) + 7) / 8;
            let base = offset as i128 + i128::from(self.byte_offset);
            let start = lo.checked_mul(elem)?.checked_add(base)?;
            let end = hi.checked_add(1)?.checked_mul(elem)?.checked_add(base)?;
            Some(start..end)
        }
    }
}
