//! Export: moving a producer value into a DLPack managed tensor with one allocation.
//!
//! A producer implements [`Export`]. [`ManagedTensor::export`](crate::ManagedTensor::export)
//! then allocates one heap block that holds, in this order, the `DLManagedTensorVersioned` (or
//! legacy `DLManagedTensor`) header, a pointer to a static table for this producer type, the
//! producer itself, and the `i64` shape and strides arrays. The header's deleter drops the
//! producer and frees exactly that block. Nothing else is allocated, whatever the tensor's size.
//!
//! Because the block records the producer's type, a tensor that comes back to this crate can
//! give its producer back without a copy ([`ManagedTensor::reclaim`](crate::ManagedTensor::reclaim)).
//! A producer that owns its elements as a `Vec` can also hand that `Vec` over, through
//! [`Export::give_vec`] and a [`VecSlot`].

use core::alloc::Layout;
use core::any::{Any, TypeId};
use core::ffi::c_void;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ptr::{self, NonNull};

use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLTensor};
use crate::{DataType, Device, Element, Error, Flags, Refused, Version};
use core::ops::Range;

/// What a producer says about its tensor, besides shape and strides.
#[derive(Clone, Debug)]
pub struct ExportDesc {
    /// The data pointer (`DLTensor::data`). May be NULL only if the tensor has no elements.
    pub data: *mut c_void,
    /// Bytes from `data` to the first element. On a device whose data pointers are addresses
    /// ([`DeviceType::has_address_pointers`](crate::DeviceType::has_address_pointers): the CPU,
    /// CUDA, ROCm, oneAPI USM) the export adds it to `data` and writes `byte_offset` 0, as NumPy
    /// and PyTorch export: some consumers mishandle a non-zero offset. Imports accept any.
    pub byte_offset: u64,
    /// The element type.
    pub dtype: DataType,
    /// Where the memory lives.
    pub device: Device,
    /// [`Flags::READ_ONLY`], [`Flags::IS_COPIED`], [`Flags::IS_SUBBYTE_TYPE_PADDED`].
    pub flags: Flags,
    /// The address range of the allocation the data lies in, when the producer knows it. The
    /// export constructor then refuses a description that reaches outside it
    /// ([`Error::SpanOutsideAllocation`]), so a producer that builds its layout from
    /// user-supplied sizes cannot describe memory it does not own.
    pub allocation: Option<Range<usize>>,
}

impl ExportDesc {
    /// A description of writable host memory holding `T`s at `data`.
    pub fn host<T: Element>(data: *mut T) -> Self {
        ExportDesc {
            data: data.cast(),
            byte_offset: 0,
            dtype: T::DTYPE,
            device: Device::CPU,
            flags: Flags::empty(),
            allocation: None,
        }
    }

    /// The same description, read-only.
    #[must_use]
    pub fn read_only(mut self) -> Self {
        self.flags |= Flags::READ_ONLY;
        self
    }
}

/// A value that owns (or shares) tensor memory and can hand it to DLPack consumers.
///
/// A type that keeps its elements in a [`Buffer`](crate::Buffer) (a `Vec`, say) need not
/// implement this unsafe trait: it implements the safe [`ShapedBuffer`](crate::ShapedBuffer),
/// which implements `Export` for it. Implement `Export` itself for memory no `Buffer` owns
/// (foreign memory, a view, a library's own array type).
///
/// The export constructor moves the value into the managed tensor's heap block, then calls
/// [`Export::describe`] on it there: the value does not move again until the consumer calls the
/// deleter (or the tensor is reclaimed), so a producer may describe memory it holds inline.
///
/// The value is dropped by the tensor's deleter, an `extern "C"` function that C consumers
/// call, also when the owner is dropped in Rust: a `Drop` of the value that panics there aborts
/// the process (a panic never unwinds into C). A panic in [`Export::check`],
/// [`Export::ndim`] or [`Export::describe`] unwinds normally, dropping the value once and
/// freeing the block.
///
/// ```
/// use dlpack_core::{Device, Element, Export, ExportDesc, ManagedTensor};
///
/// /// A 2-d row-major matrix.
/// struct Matrix { rows: usize, cols: usize, data: Vec<f32> }
///
/// // SAFETY: `describe` reports the Vec's own buffer, which holds rows * cols initialised f32s,
/// // is valid for reads and writes, and neither moves nor is freed while `self` is alive.
/// unsafe impl Export for Matrix {
///     fn ndim(&self) -> usize { 2 }
///     fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
///         shape.copy_from_slice(&[self.rows as i64, self.cols as i64]);
///         strides.copy_from_slice(&[self.cols as i64, 1]);
///         ExportDesc::host(self.data.as_mut_ptr())
///     }
/// }
///
/// let m = Matrix { rows: 2, cols: 3, data: vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0] };
/// let data = m.data.as_ptr();
/// let tensor = ManagedTensor::export(m)?;
/// assert_eq!(tensor.shape(), &[2, 3]);
/// let view = tensor.view::<f32>()?;
/// assert_eq!(view.as_ptr(), data); // zero copy
/// assert_eq!(view.get(&[1, 2]), Some(&5.0));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Safety
///
/// Consumers, including this crate's safe views, read (and unless [`Flags::READ_ONLY`] is set,
/// write) the memory that [`Export::describe`] reports. An implementation must guarantee:
/// - `describe` writes exactly `ndim()` sizes and strides (in elements) into the slices it is
///   given, and `ndim()` returns the same value every time;
/// - every element the description reaches (`data + byte_offset + sum(i_k * strides[k]) *
///   element size` for in-bounds indices) lies in one allocation that holds initialised values of
///   `dtype` on `device`, stays valid and in place until `self` is dropped, and is not accessed by
///   anyone else meanwhile except through this tensor (shared read-only access is fine when the
///   description is read-only);
/// - unless the description is read-only, that memory is valid for writes;
/// - if [`Export::GIVES_VEC`] is `true`, none of that memory lies inside the value itself (it is
///   on the heap, say): [`Export::give_vec`] borrows the value mutably, which invalidates
///   pointers into the value, and the tensor is read through its data pointer again when
///   `give_vec` gives nothing;
/// - the description is one this crate's importer accepts ([`CheckedTensor`](crate::CheckedTensor)
///   lists the checks: a known dtype, non-negative sizes, a span that fits in the address
///   space, ...). [`ManagedTensor::export`](crate::ManagedTensor::export) checks it anyway and
///   fails with a typed error; [`ManagedTensor::export_raw`](crate::ManagedTensor::export_raw)
///   trusts it and hands it to C as is.
///
/// When the description names its [`ExportDesc::allocation`], the second point is asked of that
/// range instead (it holds initialised values, stays valid, ...), and the reached elements need
/// not be vouched for: the export constructor computes them and refuses any outside the range.
pub unsafe trait Export: Send + 'static {
    /// Whether [`Export::give_vec`] may hand over a `Vec`; `false` (the default) means it is
    /// never called. Set it only for producers whose elements live outside the value itself
    /// (on the heap): calling `give_vec` borrows the value mutably, which would invalidate a
    /// pointer to elements held inline, in the value (a requirement of the trait's `# Safety`
    /// section).
    const GIVES_VEC: bool = false;

    /// The number of dimensions; called once, before the value moves into the tensor.
    fn ndim(&self) -> usize;

    /// Checks, before the value moves, anything its description depends on that can be wrong
    /// (fields that disagree with each other, say). Called once, before [`Export::ndim`]. The
    /// default accepts everything.
    ///
    /// # Errors
    ///
    /// The producer's own typed error; the export then returns it and drops the value (call
    /// `check` yourself first to keep the value on failure). `#[derive(DLPack)]` returns
    /// [`Error::NdimMismatch`] for strides and shape of different lengths and
    /// [`Error::DeviceMismatch`] for a device (field or attribute) of another device type than
    /// the buffer's.
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Describes the tensor, writing `ndim()` sizes into `shape` and `ndim()` strides (in
    /// elements) into `strides`. Called once, on the value at its final address.
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc;

    /// Hands the elements over as a `Vec`, if this producer owns them as one laid out as
    /// described: row-major, from the `Vec`'s first element, in host memory. The tensor may be
    /// the whole `Vec` or its first elements: [`ManagedTensor::into_vec`] keeps exactly the
    /// tensor's (it truncates the `Vec`).
    ///
    /// `slot` is a [`VecSlot<T>`](crate::VecSlot) (as `dyn Any`) for the element type `T` the
    /// caller wants. If `T` is this producer's element type, it can give its `Vec` up, and the
    /// slot [takes](crate::VecSlot::takes) a `Vec` of that capacity, move the `Vec` into the
    /// slot ([`VecSlot::fill`](crate::VecSlot::fill)); the producer is then dropped right after,
    /// without its memory being used again. Otherwise leave everything as it is. The default does nothing. (Memory given away
    /// any other way would break the promise, below, that it stays valid while `self` lives.)
    ///
    /// This is how a consumer that must own a `Vec` (candle's CPU storage, say) takes the memory
    /// of any producer without knowing its type: [`ManagedTensor::into_vec`]. It is called only
    /// when [`Export::GIVES_VEC`] is `true`.
    ///
    /// [`ManagedTensor::into_vec`]: crate::ManagedTensor::into_vec
    fn give_vec(&mut self, slot: &mut dyn Any) {
        let _ = slot;
    }
}

/// What [`ManagedTensor::into_vec`](crate::ManagedTensor::into_vec) asks a producer for through
/// [`Export::give_vec`] (as `&mut dyn Any`): a `Vec<T>` that starts at the tensor's first
/// element, whose first [`VecSlot::len`] elements are the tensor, with little room to spare.
///
/// A producer checks [`VecSlot::takes`] with its `Vec`'s start and capacity *before* giving
/// the `Vec` up, and keeps it when the answer is no: a tensor that starts inside its `Vec` (a
/// producer that describes a byte offset, say) is not the `Vec`, and a tensor that is a small
/// part of a large `Vec` (the first row of a large matrix, say) is then copied by the consumer,
/// instead of the consumer keeping the whole allocation alive for a few elements.
///
/// ```
/// use dlpack_core::ManagedTensor;
///
/// let mut big = Vec::with_capacity(1_000_000);
/// big.extend([1.0f64, 2.0]);
/// // Two elements in a million-element allocation: not handed over.
/// let t = ManagedTensor::export(big)?;
/// let t = t.into_vec::<f64>().unwrap_err();
/// assert_eq!(t.to_vec::<f64>()?, [1.0, 2.0]); // copy instead
/// # Ok::<(), dlpack_core::Error>(())
/// ```
#[derive(Debug)]
pub struct VecSlot<T> {
    first: usize,
    len: usize,
    vec: Option<Vec<T>>,
}

impl<T> VecSlot<T> {
    /// An empty slot for a tensor of `len` elements whose first element is at `first`.
    pub fn new(first: *const T, len: usize) -> Self {
        VecSlot {
            first: first.addr(),
            len,
            vec: None,
        }
    }

    /// The number of elements the tensor has: the `Vec`'s first `len` elements are the tensor.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a `Vec` whose elements start at `start`, with this capacity, is taken: when it
    /// starts at the tensor's first element (any `Vec` will do for a tensor without elements)
    /// and the room it has beyond the tensor's elements is at most the tensor's own size, or
    /// less than 4 KiB. (A `Vec` grown by `push` has up to twice the room its elements need, so
    /// every such `Vec` is taken whole.)
    pub fn takes(&self, start: *const T, capacity: usize) -> bool {
        if self.len > 0 && start.addr() != self.first {
            return false;
        }
        let spare = capacity.saturating_sub(self.len);
        let element = core::mem::size_of::<T>().max(1);
        spare <= self.len || spare.saturating_mul(element) < 4096
    }

    /// Puts the producer's `Vec` in the slot. Give only a `Vec` that [`VecSlot::takes`] (one it
    /// does not take is refused by [`ManagedTensor::into_vec`](crate::ManagedTensor::into_vec)
    /// after all, or cut and shrunk), whose first [`VecSlot::len`] elements are the tensor's,
    /// in row-major order.
    pub fn fill(&mut self, vec: Vec<T>) {
        self.vec = Some(vec);
    }

    /// The `Vec` given, if any, leaving the slot empty.
    pub fn take(&mut self) -> Option<Vec<T>> {
        self.vec.take()
    }
}

/// The two managed headers a block can start with.
pub(crate) trait Header: Sized + 'static {
    /// Writes the header of a fresh block.
    ///
    /// # Safety
    /// `this` is valid for writes of `Self`.
    unsafe fn init(this: *mut Self, tensor: DLTensor, flags: Flags) -> Result<(), Error>;
}

impl Header for DLManagedTensorVersioned {
    unsafe fn init(this: *mut Self, tensor: DLTensor, flags: Flags) -> Result<(), Error> {
        let header = DLManagedTensorVersioned {
            version: Version::CURRENT,
            manager_ctx: block_tag(),
            deleter: Some(delete_versioned),
            flags: flags.0,
            dl_tensor: tensor,
        };
        // SAFETY: the caller guarantees `this` is valid for writes.
        unsafe { this.write(header) };
        Ok(())
    }
}

impl Header for DLManagedTensor {
    unsafe fn init(this: *mut Self, tensor: DLTensor, flags: Flags) -> Result<(), Error> {
        if flags.contains(Flags::READ_ONLY) {
            return Err(Error::LegacyReadOnly);
        }
        if flags.contains(Flags::IS_SUBBYTE_TYPE_PADDED) {
            return Err(Error::LegacyPaddedSubByte);
        }
        let header = DLManagedTensor {
            dl_tensor: tensor,
            manager_ctx: block_tag(),
            deleter: Some(delete_legacy),
        };
        // SAFETY: the caller guarantees `this` is valid for writes.
        unsafe { this.write(header) };
        Ok(())
    }
}

/// What every block of a given header type starts with, whatever its producer type.
#[repr(C)]
pub(crate) struct Prefix<H> {
    header: H,
    vtable: &'static VTable,
    ndim: usize,
}

/// A whole block. `repr(C)` puts `prefix` first, so a pointer to the block is a pointer to its
/// header and to its prefix; the shape and strides arrays follow the struct.
#[repr(C)]
struct Block<H, P> {
    prefix: Prefix<H>,
    producer: ManuallyDrop<P>,
}

/// Per-(header, producer) facts a block needs once its static type is forgotten.
pub(crate) struct VTable {
    /// `TypeId::of::<P>`.
    type_id: fn() -> TypeId,
    /// Frees a block, dropping the producer first if asked.
    release: unsafe fn(block: *mut u8, drop_producer: bool),
    /// Asks the producer for its `Vec` ([`Export::give_vec`]); `None` when it never gives one.
    give_vec: Option<unsafe fn(block: *mut u8, slot: &mut dyn Any)>,
}

impl<H: Header, P: Export> Block<H, P> {
    const VTABLE: VTable = VTable {
        type_id: TypeId::of::<P>,
        release: release::<H, P>,
        give_vec: if P::GIVES_VEC {
            Some(give_vec::<H, P>)
        } else {
            None
        },
    };

    /// The byte offset of the shape array: the block struct, padded to `i64` alignment. The
    /// strides array follows the shape array.
    const ARRAYS_OFFSET: usize = size_of::<Self>().next_multiple_of(align_of::<i64>());

    /// The block's alignment: the struct's, and at least that of the `i64` arrays.
    const ALIGN: usize = if align_of::<Self>() > align_of::<i64>() {
        align_of::<Self>()
    } else {
        align_of::<i64>()
    };

    /// The block's size for `ndim <= MAX_NDIM` dimensions (which keeps the sum far from
    /// overflowing: a type's size is at most `isize::MAX`), a multiple of [`Self::ALIGN`].
    #[inline]
    fn size(ndim: usize) -> usize {
        debug_assert!(ndim <= crate::MAX_NDIM);
        (Self::ARRAYS_OFFSET + 2 * ndim * size_of::<i64>()).next_multiple_of(Self::ALIGN)
    }

    /// The block's layout for `ndim <= MAX_NDIM` dimensions.
    #[inline]
    fn layout(ndim: usize) -> Result<Layout, Error> {
        Layout::from_size_align(Self::size(ndim), Self::ALIGN).map_err(|_| Error::Overflow {
            what: format!("the export block for {ndim} dimensions is too large"),
        })
    }
}

/// Drops (if asked) the producer of a block made by [`export`] and frees the block.
///
/// # Safety
/// `block` was returned by `export::<H, P>` (same `H` and `P`), has not been released, and
/// `drop_producer` is false only if the caller has moved the producer out.
#[inline]
unsafe fn release<H: Header, P: Export>(block: *mut u8, drop_producer: bool) {
    let block = block.cast::<Block<H, P>>();
    // SAFETY: the block is live and was fully initialised by `export`; `ndim` is never written
    // after that.
    let ndim = unsafe { (*block).prefix.ndim };
    // SAFETY: `export` made a valid layout from this size and alignment for this `ndim`.
    let layout = unsafe {
        Layout::from_size_align_unchecked(Block::<H, P>::size(ndim), Block::<H, P>::ALIGN)
    };
    // The block is freed last, also when the producer's `Drop` panics (on the paths that
    // release a block from Rust; the C deleter aborts on a panic instead).
    let _free = Dealloc(block.cast(), layout);
    if drop_producer {
        // SAFETY: the producer was initialised by `export` and not dropped or moved out (the
        // caller says so), and nothing references it any more.
        unsafe { ManuallyDrop::drop(&mut (*block).producer) };
    }
}

/// Frees a block when dropped: the last step of [`release`], which an unwinding producer
/// `Drop` must not skip.
struct Dealloc(*mut u8, Layout);

impl Drop for Dealloc {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: made only by `release`, with a block the global allocator allocated with
        // exactly this layout, which nothing uses once the producer is dropped.
        unsafe { std::alloc::dealloc(self.0, self.1) };
    }
}

/// Asks the producer of a block for its `Vec` ([`Export::give_vec`]).
///
/// # Safety
/// `block` was returned by `export::<H, P>` (same `H` and `P`), has not been released, and no
/// one else uses it or its producer during the call.
unsafe fn give_vec<H: Header, P: Export>(block: *mut u8, slot: &mut dyn Any) {
    let typed = block.cast::<Block<H, P>>();
    // SAFETY: the block is live, of this type, with its producer inside, and nothing else
    // references the producer during this call (caller).
    unsafe { Export::give_vec(&mut *(*typed).producer, slot) }
}

/// Asks the producer of `header`, a live block made by [`export`], for its `Vec`
/// ([`Export::give_vec`], through the block's vtable). If the slot is filled, the producer's
/// memory is no longer in use: the caller must delete the block and use neither the tensor's
/// data nor its producer again.
///
/// # Safety
/// `header` is the header of a live block made by [`export`] with header type `H` (the caller
/// checked [`is_ours`] on its `manager_ctx`), which the caller holds exclusively and does not
/// read the data of while this runs.
pub(crate) unsafe fn give_vec_of_block<H: Header>(header: NonNull<H>, slot: &mut dyn Any) {
    let prefix = header.as_ptr().cast::<Prefix<H>>();
    // SAFETY: the caller guarantees this is one of our blocks, which starts with a Prefix<H>.
    let vtable = unsafe { (*prefix).vtable };
    if let Some(give_vec) = vtable.give_vec {
        // SAFETY: the vtable was written by `export` for this block's own (H, P); the block is
        // live and exclusively ours (caller); the producer's elements are not inline (it set
        // GIVES_VEC), so borrowing it mutably leaves the tensor's data pointer valid.
        unsafe { give_vec(header.as_ptr().cast(), slot) }
    }
}

/// A fresh block's header, and the allocation its producer named ([`ExportDesc::allocation`]).
pub(crate) type Fresh<H> = (NonNull<H>, Option<Range<usize>>);

/// Moves `producer` into a new block with header `H`; on refusal, gives it back.
#[inline]
pub(crate) fn export<H: Header, P: Export>(producer: P) -> Result<Fresh<H>, Refused<P>> {
    if let Err(error) = producer.check() {
        return Err(Refused {
            error,
            value: producer,
        });
    }
    let ndim = producer.ndim();
    if ndim > crate::MAX_NDIM || i32::try_from(ndim).is_err() {
        return Err(Refused {
            error: Error::BadNdim {
                ndim: i64::try_from(ndim).unwrap_or(i64::MAX),
            },
            value: producer,
        });
    }
    let layout = match Block::<H, P>::layout(ndim) {
        Ok(layout) => layout,
        Err(error) => {
            return Err(Refused {
                error,
                value: producer,
            });
        }
    };
    let arrays_offset = Block::<H, P>::ARRAYS_OFFSET;
    // SAFETY: the layout's size is non-zero (the header alone is not empty).
    let raw = unsafe { std::alloc::alloc(layout) };
    if raw.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    let block = raw.cast::<Block<H, P>>();
    // SAFETY: `raw` is a fresh allocation of `layout`, which starts with a `Block<H, P>` and has
    // room for 2 * ndim i64s at `arrays_offset` (a multiple of i64's alignment, which the
    // block's alignment is at least). The writes below initialise the prefix's tail fields, the
    // producer and the arrays; the header is written last by `H::init`.
    let (shape, strides) = unsafe {
        ptr::addr_of_mut!((*block).prefix.vtable).write(&Block::<H, P>::VTABLE);
        ptr::addr_of_mut!((*block).prefix.ndim).write(ndim);
        ptr::addr_of_mut!((*block).producer).write(ManuallyDrop::new(producer));
        let shape = raw.add(arrays_offset).cast::<i64>();
        ptr::write_bytes(shape, 0, 2 * ndim);
        (shape, shape.add(ndim))
    };
    // If `describe` panics, the unwinding drops the producer and frees the block.
    let unwinding = ReleaseOnUnwind::<H, P>(raw, PhantomData);
    // SAFETY: the producer is initialised and nothing else references it; the two arrays are
    // initialised, disjoint, and disjoint from the producer. The references end with this call.
    let desc = unsafe {
        let producer: &mut P = &mut (*block).producer;
        producer.describe(
            core::slice::from_raw_parts_mut(shape, ndim),
            core::slice::from_raw_parts_mut(strides, ndim),
        )
    };
    core::mem::forget(unwinding);
    let (data, byte_offset) = fold_byte_offset(&desc);
    let tensor = DLTensor {
        data,
        device: desc.device,
        // Checked above: ndim fits in i32.
        ndim: ndim as i32,
        dtype: desc.dtype,
        shape,
        strides,
        byte_offset,
    };
    // SAFETY: `block` is a live allocation; this only computes a field address.
    let header = unsafe { ptr::addr_of_mut!((*block).prefix.header) };
    // Bits DLPack does not define are refused for both headers: the legacy struct, which has no
    // flags field, would otherwise drop them without a word.
    let init = if desc.flags.unknown_bits() != 0 {
        Err(Error::UnknownFlags { flags: desc.flags })
    } else {
        // SAFETY: `header` is the first field of a live, exclusively owned block, valid for
        // writes.
        unsafe { H::init(header, tensor, desc.flags) }
    };
    if let Err(error) = init {
        // SAFETY: the block came from `export::<H, P>`, its producer is still inside and no
        // longer borrowed; reading it moves it out, and the release does not drop it again.
        let producer = unsafe {
            let producer = ManuallyDrop::into_inner(ptr::read(ptr::addr_of!((*block).producer)));
            release::<H, P>(raw, false);
            producer
        };
        return Err(Refused {
            error,
            value: producer,
        });
    }
    // SAFETY: `raw` is non-null (checked after allocating) and `header` is at offset 0.
    Ok((unsafe { NonNull::new_unchecked(header) }, desc.allocation))
}

/// The data pointer and byte offset an export writes: on a device whose pointers are addresses
/// ([`DeviceType::has_address_pointers`](crate::DeviceType::has_address_pointers)), the data
/// pointer of the first element and offset 0, as NumPy and PyTorch export. Some consumers
/// mishandle a non-zero `byte_offset` (dpnp 0.20 passes it to NumPy as an `__array_interface__`
/// key NumPy ignores, and reads the wrong elements). Elsewhere, and where the sum would not be
/// an address, the description as it is (the import check refuses the latter).
#[inline]
fn fold_byte_offset(desc: &ExportDesc) -> (*mut c_void, u64) {
    if desc.byte_offset == 0 || !desc.device.device_type.has_address_pointers() {
        return (desc.data, desc.byte_offset);
    }
    match usize::try_from(desc.byte_offset)
        .ok()
        .filter(|&offset| desc.data.addr().checked_add(offset).is_some())
    {
        // Only the address changes: the pointer keeps the data's provenance.
        Some(offset) => (desc.data.wrapping_byte_add(offset), 0),
        None => (desc.data, desc.byte_offset),
    }
}

/// Releases a block whose producer's `describe` is unwinding (forgotten once it returns).
struct ReleaseOnUnwind<H: Header, P: Export>(*mut u8, PhantomData<(H, P)>);

impl<H: Header, P: Export> Drop for ReleaseOnUnwind<H, P> {
    fn drop(&mut self) {
        // SAFETY: alive only while `export` runs `describe` on this block, which `export::<H, P>`
        // allocated with its prefix's `ndim` and its producer initialised; the panic ended the
        // only borrow of the producer, and the block was never handed out.
        unsafe { release::<H, P>(self.0, true) }
    }
}

/// The deleter of every versioned block this crate exports.
///
/// # Safety
/// `tensor` is NULL or was exported by this crate as a versioned block and not deleted yet.
pub(crate) unsafe extern "C" fn delete_versioned(tensor: *mut DLManagedTensorVersioned) {
    // SAFETY: forwarded contract.
    unsafe { delete_block(tensor) }
}

/// The deleter of every legacy block this crate exports.
///
/// # Safety
/// `tensor` is NULL or was exported by this crate as a legacy block and not deleted yet.
pub(crate) unsafe extern "C" fn delete_legacy(tensor: *mut DLManagedTensor) {
    // SAFETY: forwarded contract.
    unsafe { delete_block(tensor) }
}

/// # Safety
/// `header` is NULL or the header of a live block of header type `H` made by [`export`].
unsafe fn delete_block<H>(header: *mut H) {
    if header.is_null() {
        return;
    }
    // SAFETY: a block starts with its `Prefix<H>` (repr(C), first field), fully initialised.
    let vtable = unsafe { (*header.cast::<Prefix<H>>()).vtable };
    // SAFETY: the vtable was written by `export` for this block's own (H, P), the block is live,
    // and its producer is still inside.
    unsafe { (vtable.release)(header.cast(), true) }
}

/// If `header` is a live block of header type `H` made by [`export`] whose producer has type
/// `P`, moves the producer out and frees the block; otherwise returns `None` and touches nothing.
///
/// # Safety
/// `header` is the header of a live block made by [`export`] with header type `H` (the caller
/// checked [`is_ours`] on its `manager_ctx`, which only such blocks carry).
#[inline]
pub(crate) unsafe fn take_producer<H: Header, P: Export>(header: NonNull<H>) -> Option<P> {
    let prefix = header.as_ptr().cast::<Prefix<H>>();
    // SAFETY: the caller guarantees this is one of our blocks, which starts with a Prefix<H>.
    let vtable = unsafe { (*prefix).vtable };
    if (vtable.type_id)() != TypeId::of::<P>() {
        return None;
    }
    let block = header.as_ptr().cast::<Block<H, P>>();
    // SAFETY: the TypeId matches, so the block is a `Block<H, P>` whose producer is initialised;
    // reading it moves it out, and the release below does not drop it again.
    let producer = unsafe { ManuallyDrop::into_inner(ptr::read(ptr::addr_of!((*block).producer))) };
    // SAFETY: the block is live, of this type, and its producer has been moved out.
    unsafe { release::<H, P>(block.cast(), false) };
    Some(producer)
}

/// The `manager_ctx` of every block this crate exports. A static has one address for the whole
/// program (unlike a function, whose address Rust does not promise to be unique or stable), so
/// comparing with it reliably tells this crate's blocks from foreign tensors.
static BLOCK_TAG: u8 = 0;

/// The `manager_ctx` value that marks a block made by [`export`].
fn block_tag() -> *mut c_void {
    ptr::addr_of!(BLOCK_TAG).cast_mut().cast()
}

/// Whether a managed tensor's `manager_ctx` marks it as a block made by [`export`].
pub(crate) fn is_ours(manager_ctx: *mut c_void) -> bool {
    manager_ctx == block_tag()
}
