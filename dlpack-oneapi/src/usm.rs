//! [`UsmBuffer`]: a typed USM allocation, the producer type of this crate.

use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr::NonNull;

use dlpack_core::{Buffer, CheckedTensor, Device, Element, Error};

use crate::api::{check, runtime_error};
use crate::context::ContextCore;
use crate::leaks;
use crate::sys;
use crate::{Context, ZeDevice};

/// The three kinds of unified shared memory. All three export as `kDLOneAPI`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum UsmKind {
    /// Device memory (`zeMemAllocDevice`): only the device reads it; the host copies.
    Device,
    /// Shared memory (`zeMemAllocShared`): migrates between the host and a device; both read
    /// it in place. Reported to the core as [`dlpack_core::MemoryKind::Managed`].
    Shared,
    /// Host memory (`zeMemAllocHost`): pinned host memory every device of the context reads.
    /// Reported to the core as [`dlpack_core::MemoryKind::HostPinned`].
    Host,
}

impl UsmKind {
    /// Whether the host reads and writes this memory in place.
    pub const fn is_host_accessible(self) -> bool {
        !matches!(self, UsmKind::Device)
    }

    /// The memory kind the core's hooks speak of.
    pub const fn memory_kind(self) -> dlpack_core::MemoryKind {
        match self {
            UsmKind::Device => dlpack_core::MemoryKind::Device,
            UsmKind::Shared => dlpack_core::MemoryKind::Managed,
            UsmKind::Host => dlpack_core::MemoryKind::HostPinned,
        }
    }
}

impl fmt::Display for UsmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UsmKind::Device => "device USM",
            UsmKind::Shared => "shared USM",
            UsmKind::Host => "host USM",
        })
    }
}

/// The alignment of every allocation: DLPack's recommended 256 bytes.
const ALIGNMENT: usize = 256;

/// `len` initialised elements of `T` in one USM allocation of a [`Context`]: the buffer type
/// of this crate.
///
/// It implements [`dlpack_core::Buffer`], so it exports as a one-dimensional `kDLOneAPI`
/// tensor (`ManagedTensor::export(buffer)`), zero-copy, kept alive by the managed tensor, with
/// the DLPack device number of its device ([`crate::DeviceNumbering`]); and a struct whose data
/// field is a `UsmBuffer` exports any layout over it through the safe
/// [`ShapedBuffer`](dlpack_core::ShapedBuffer), or with `#[derive(DLPack)]`. The memory is freed (`zeMemFree`) when the
/// buffer is dropped, i.e. when the consumer deletes the tensor.
///
/// Every constructor writes every element, and every method that writes the memory waits for
/// the write, so no device work on the buffer is pending while the host can see it.
///
/// ```
/// use dlpack_core::{Device, ManagedTensor};
/// use dlpack_oneapi::{Context, LevelZero, UsmBuffer, UsmKind};
///
/// # fn main() -> Result<(), dlpack_core::Error> {
/// let Ok(ze) = LevelZero::load() else { return Ok(()) }; // no Level Zero driver here
/// let context = Context::new(&ze.drivers()?[0])?;
/// let gpu = &context.devices()[0];
/// let buffer = UsmBuffer::from_slice(&context, gpu, UsmKind::Device, &[1.0f32, 2.0, 3.0])?;
/// let tensor = ManagedTensor::export(buffer)?;
/// assert_eq!(tensor.device(), Device::oneapi(0));
/// assert_eq!(tensor.to_host_vec::<f32>(&context.hooks())?, [1.0, 2.0, 3.0]);
/// # Ok(())
/// # }
/// ```
pub struct UsmBuffer<T: Element> {
    context: Context,
    ptr: NonNull<T>,
    len: usize,
    kind: UsmKind,
    /// The DLPack device it exports as.
    device: Device,
    /// The device it was allocated for.
    ze_device: ZeDevice,
    _owns: PhantomData<T>,
}

// SAFETY: the buffer owns its allocation exclusively; USM pointers are valid on every thread,
// and `zeMemFree` may be called from any thread. `T: Element` is Send.
unsafe impl<T: Element> Send for UsmBuffer<T> {}
// SAFETY: `&UsmBuffer` only reads the memory (host views of host/shared USM, copies out of
// device USM), and no device work writes it while the host can see it (type docs).
unsafe impl<T: Element> Sync for UsmBuffer<T> {}

impl<T: Element> UsmBuffer<T> {
    /// A buffer of `kind` on `device` (a root or sub-device; host USM is labelled with it)
    /// holding a copy of `data`. Device USM is filled by a copy on the context's queue.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] if `device` is not a numbered device of `context`
    /// ([`Context::dlpack_device`]), or Level Zero fails to allocate or to copy. After a copy
    /// that may still be running, the allocation is leaked ([`crate::Leaks`]).
    pub fn from_slice(
        context: &Context,
        device: &ZeDevice,
        kind: UsmKind,
        data: &[T],
    ) -> Result<Self, Error> {
        let mut buffer = Self::allocate(context, device, kind, data.len())?;
        // SAFETY: the buffer is fresh; `write_from` writes all `len` elements.
        unsafe { buffer.write_from(context, data.as_ptr()) }?;
        Ok(buffer)
    }

    /// A buffer of `kind` on `device` with every byte zero.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidValue`] for an element type whose all-zero bytes are not a valid value
    /// (none of dlpack-core's element types), [`Error::Overflow`] when `len` elements do not fit
    /// one allocation, [`Error::OutOfMemory`] when the host's zeros for device USM do not fit in
    /// memory, and [`Error::Runtime`] as for [`UsmBuffer::from_slice`].
    pub fn zeroed(
        context: &Context,
        device: &ZeDevice,
        kind: UsmKind,
        len: usize,
    ) -> Result<Self, Error> {
        let zero = vec![0u8; core::mem::size_of::<T>()];
        if !T::ANY_BIT_PATTERN && !T::is_valid_bits(&zero) {
            return Err(Error::InvalidValue {
                dtype: T::DTYPE,
                index: 0,
                byte: 0,
            });
        }
        let buffer = Self::allocate(context, device, kind, len)?;
        if buffer.len == 0 {
            return Ok(buffer);
        }
        if kind.is_host_accessible() {
            // SAFETY: host-accessible USM of `len` elements owned by this buffer; all-zero
            // bytes are a valid `T` (checked above).
            unsafe { buffer.ptr.as_ptr().write_bytes(0, buffer.len) };
            return Ok(buffer);
        }
        let bytes = buffer.len * core::mem::size_of::<T>();
        let mut zeros = dlpack_core::__private::try_vec_with_capacity::<u8>(bytes)?;
        zeros.resize(bytes, 0);
        let queue = context.queue(&buffer.ze_device)?;
        // SAFETY: `bytes` host bytes into this buffer's fresh device allocation of `bytes`
        // bytes, which nobody else accesses; zero bytes are a valid `T` (checked above). A copy
        // that may still run keeps the allocation (`keep`) and the staging bytes (below).
        let copied = unsafe {
            queue.copy_keeping(
                buffer.ptr.as_ptr().cast(),
                zeros.as_ptr(),
                bytes,
                &[buffer.byte_range()],
            )
        };
        if let Err(failed) = copied {
            if failed.unfinished() {
                // The device may still read it.
                leaks::keep_staging(zeros);
            }
            // Dropping `buffer` leaks its allocation if the copy may still write it.
            return Err(failed.error);
        }
        Ok(buffer)
    }

    /// A buffer holding the elements of `tensor` (any layout, read in row-major order), copied
    /// to a new allocation of `kind` on `device`.
    ///
    /// The tensor may be host memory or memory of `context` (device USM is copied to the host
    /// through the context's hooks, which check that it is USM of this context first). This is
    /// the import path for foreign tensors: [`Buffer::copy_from_tensor`] has no context to
    /// allocate in.
    ///
    /// # Errors
    ///
    /// Those of [`CheckedTensor::to_host_vec`] with the context's hooks
    /// ([`Error::DataTypeMismatch`], [`Error::NoHook`] for device memory of another device type,
    /// [`Error::UnknownPointer`] for device USM of another context, [`Error::OutOfMemory`], the
    /// copy's [`Error::Runtime`] or [`Error::CopyInFlight`], ...), then those of
    /// [`UsmBuffer::from_slice`].
    pub fn from_tensor(
        context: &Context,
        device: &ZeDevice,
        kind: UsmKind,
        tensor: &CheckedTensor,
    ) -> Result<Self, Error> {
        let host: Vec<T> = tensor.to_host_vec(&context.hooks())?;
        Self::from_slice(context, device, kind, &host)
    }

    /// Allocates `len` elements without initialising them.
    fn allocate(
        context: &Context,
        device: &ZeDevice,
        kind: UsmKind,
        len: usize,
    ) -> Result<Self, Error> {
        let core = context.core();
        let dl_device = context.dlpack_device(device)?;
        let bytes = len
            .checked_mul(core::mem::size_of::<T>())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| Error::Overflow {
                what: format!(
                    "{len} elements of {} bytes do not fit one allocation",
                    core::mem::size_of::<T>()
                ),
            })?;
        let align = ALIGNMENT.max(core::mem::align_of::<T>());
        let ptr = if bytes == 0 {
            NonNull::dangling()
        } else {
            let raw = allocate_raw(core, device, kind, bytes, align)?;
            match NonNull::new(raw.cast::<T>()) {
                Some(p) if p.as_ptr().is_aligned() => p,
                _ => {
                    // SAFETY: `raw` was just allocated in this context (NULL is refused by
                    // zeMemFree with an error, which is ignored).
                    let _ = unsafe { (core.ze.api().zeMemFree)(core.handle, raw) };
                    return Err(runtime_error(format!(
                        "zeMemAlloc returned {raw:p} for {bytes} bytes aligned to {align}; \
                         expected a non-NULL pointer with that alignment"
                    )));
                }
            }
        };
        Ok(UsmBuffer {
            context: context.clone(),
            ptr,
            len,
            kind,
            device: dl_device,
            ze_device: device.clone(),
            _owns: PhantomData,
        })
    }

    /// Writes all `len` elements from `src`.
    ///
    /// # Safety
    /// `src` points to `len` readable elements that do not overlap the buffer.
    unsafe fn write_from(&mut self, context: &Context, src: *const T) -> Result<(), Error> {
        if self.len == 0 {
            return Ok(());
        }
        if self.kind.is_host_accessible() {
            // SAFETY: host-accessible USM of `len` elements owned by this buffer; `src` holds
            // `len` elements elsewhere (caller).
            unsafe { core::ptr::copy_nonoverlapping(src, self.ptr.as_ptr(), self.len) };
            return Ok(());
        }
        let queue = context.queue(&self.ze_device)?;
        // SAFETY: the destination is this buffer's device allocation of `len` elements, which
        // no one else accesses (`&mut self`), and which a copy that may still run keeps
        // (`keep`: the buffer then leaks its allocation); the source is `len` host elements
        // (caller), which such a copy may still read into the kept allocation only.
        unsafe {
            queue.copy_keeping(
                self.ptr.as_ptr().cast(),
                src.cast(),
                self.len * core::mem::size_of::<T>(),
                &[self.byte_range()],
            )
        }
        .map_err(|f| f.error)
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The kind of USM.
    pub fn kind(&self) -> UsmKind {
        self.kind
    }

    /// The device the buffer was allocated for (for host USM: the device it is labelled with).
    pub fn ze_device(&self) -> &ZeDevice {
        &self.ze_device
    }

    /// The DLPack device it exports as: `(kDLOneAPI, n)` with its root device's number.
    pub fn dlpack_device(&self) -> Device {
        self.device
    }

    /// The first element's address (dangling for an empty buffer).
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    /// The bytes of the allocation, as addresses (empty for an empty buffer).
    fn byte_range(&self) -> core::ops::Range<usize> {
        leaks::span(self.ptr.addr().get(), self.len * core::mem::size_of::<T>())
    }

    /// The elements in place, for host and shared USM; `None` for device USM.
    pub fn as_slice(&self) -> Option<&[T]> {
        // SAFETY: host-accessible memory holding `len` initialised elements, owned by this
        // buffer and not written while `self` is borrowed (no pending device work, type docs).
        self.kind
            .is_host_accessible()
            .then(|| unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) })
    }

    /// The elements in place, writable, for host and shared USM; `None` for device USM.
    pub fn as_mut_slice(&mut self) -> Option<&mut [T]> {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        self.kind
            .is_host_accessible()
            .then(|| unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// Copies the elements to a new host `Vec` (device USM: on the context's default queue of
    /// the buffer's device).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfMemory`] when the copy does not fit in host memory, [`Error::Runtime`] when
    /// Level Zero fails to copy. When it cannot confirm that the copy finished (its host wait
    /// fails, see [`crate::Leaks`]), the staging `Vec` the device may still write is leaked, and
    /// so is this buffer's allocation when it is dropped.
    pub fn to_vec(&self) -> Result<Vec<T>, Error> {
        if let Some(s) = self.as_slice() {
            let mut out = dlpack_core::__private::try_vec_with_capacity::<T>(s.len())?;
            out.extend_from_slice(s);
            return Ok(out);
        }
        let mut out = dlpack_core::__private::try_vec_with_capacity::<MaybeUninit<T>>(self.len)?;
        let queue = self.queue()?;
        // SAFETY: the source is this buffer's `len` initialised elements, which a copy that may
        // still run keeps (`keep`); the destination is the Vec's spare capacity of `len`
        // elements, which nobody else sees, and which such a copy leaks (below).
        let copied = unsafe {
            queue.copy_keeping(
                out.as_mut_ptr().cast(),
                self.ptr.as_ptr().cast(),
                self.len * core::mem::size_of::<T>(),
                &[self.byte_range()],
            )
        };
        if let Err(failed) = copied {
            if failed.unfinished() {
                // The device may still write it.
                leaks::keep_staging(out);
            }
            return Err(failed.error);
        }
        // SAFETY: the copy initialised `len` elements with values of `T` (the buffer holds
        // initialised values of `T`).
        unsafe { out.set_len(self.len) };
        // SAFETY: `MaybeUninit<T>` and `T` have the same layout, and every element is
        // initialised.
        Ok(out
            .into_iter()
            .map(|e| unsafe { e.assume_init() })
            .collect())
    }

    /// Overwrites the elements with `src`, which must have exactly [`UsmBuffer::len`]
    /// elements.
    ///
    /// # Errors
    ///
    /// [`Error::ShapeMismatch`] when `src.len()` is not [`UsmBuffer::len`], [`Error::Runtime`]
    /// when Level Zero fails to copy into device USM. After a copy that may still be running,
    /// the buffer leaks its allocation when it is dropped ([`crate::Leaks`]).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<(), Error> {
        if src.len() != self.len {
            return Err(Error::ShapeMismatch {
                found: vec![src.len() as i64],
                expected: vec![self.len as i64],
            });
        }
        if let Some(dst) = self.as_mut_slice() {
            dst.copy_from_slice(src);
            return Ok(());
        }
        let queue = self.queue()?;
        // SAFETY: `len` elements from a host slice into this buffer's device allocation, which
        // `&mut self` makes exclusive, and which a copy that may still run keeps (`keep`: the
        // buffer then leaks its allocation); such a copy may still read `src`, into the kept
        // allocation only.
        unsafe {
            queue.copy_keeping(
                self.ptr.as_ptr().cast(),
                src.as_ptr().cast(),
                self.len * core::mem::size_of::<T>(),
                &[self.byte_range()],
            )
        }
        .map_err(|f| f.error)
    }

    /// The context's default queue of the buffer's device.
    fn queue(&self) -> Result<crate::Queue, Error> {
        self.context.queue(&self.ze_device)
    }

    /// The context the buffer was allocated in.
    pub fn context(&self) -> &Context {
        &self.context
    }
}

/// Allocates `bytes` of `kind` USM in `core`'s context.
fn allocate_raw(
    core: &ContextCore,
    device: &ZeDevice,
    kind: UsmKind,
    bytes: usize,
    align: usize,
) -> Result<*mut core::ffi::c_void, Error> {
    let api = core.ze.api();
    let device_desc = sys::ze_device_mem_alloc_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC,
        pNext: core::ptr::null(),
        flags: 0,
        ordinal: 0,
    };
    let host_desc = sys::ze_host_mem_alloc_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC,
        pNext: core::ptr::null(),
        flags: 0,
    };
    let mut raw: *mut core::ffi::c_void = core::ptr::null_mut();
    // In all three calls: a live context and device, valid tagged descriptors, a non-zero size,
    // a power-of-two alignment and a valid out-pointer.
    let (result, call) = match kind {
        UsmKind::Device => (
            // SAFETY: see above.
            unsafe {
                (api.zeMemAllocDevice)(
                    core.handle,
                    &device_desc,
                    bytes,
                    align,
                    device.raw(),
                    &mut raw,
                )
            },
            "zeMemAllocDevice",
        ),
        UsmKind::Shared => (
            // SAFETY: see above.
            unsafe {
                (api.zeMemAllocShared)(
                    core.handle,
                    &device_desc,
                    &host_desc,
                    bytes,
                    align,
                    device.raw(),
                    &mut raw,
                )
            },
            "zeMemAllocShared",
        ),
        UsmKind::Host => (
            // SAFETY: see above.
            unsafe { (api.zeMemAllocHost)(core.handle, &host_desc, bytes, align, &mut raw) },
            "zeMemAllocHost",
        ),
    };
    check(result, call)?;
    Ok(raw)
}

impl<T: Element> Drop for UsmBuffer<T> {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        let core = self.context.core();
        if leaks::KEPT.touches(&self.byte_range()) {
            // A copy that Level Zero could not confirm as finished may still read or write it:
            // leaked rather than freed (see `crate::Leaks`).
            leaks::count(&leaks::LEAKED.allocations, 1);
            return;
        }
        // A destructor cannot report failure; zeMemFree only fails for a pointer the context
        // did not allocate, which cannot happen here.
        // SAFETY: the allocation was made in this context and is freed once, here; no command
        // referencing it is pending (every copy of this crate was waited for, or its memory is
        // kept above; a consumer that deletes the tensor is done with it).
        let _ = unsafe { (core.ze.api().zeMemFree)(core.handle, self.ptr.as_ptr().cast()) };
    }
}

impl<T: Element> fmt::Debug for UsmBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UsmBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("kind", &self.kind)
            .field("device", &format_args!("{}", self.device))
            .field("dtype", &format_args!("{}", T::DTYPE))
            .finish()
    }
}

// SAFETY: `ptr` points to `len` initialised elements of `T` (every constructor writes them all)
// in one USM allocation that this buffer owns exclusively and frees only on drop; it does not
// move with the buffer. `len` and `device` never change, and the buffer is writable.
unsafe impl<T: Element> Buffer for UsmBuffer<T> {
    type Elem = T;

    fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr.as_ptr()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn device(&self) -> Device {
        self.device
    }

    /// Always an error: a USM allocation needs a Level Zero context, which this trait method
    /// does not receive. A tensor that was exported from a `UsmBuffer` comes back without a copy
    /// through `ManagedTensor::reclaim`; any other tensor is copied with
    /// [`UsmBuffer::from_tensor`], which takes the context.
    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        Err(runtime_error(format!(
            "cannot copy a {} tensor into a new UsmBuffer<{}> without a Level Zero context; \
             expected a tensor exported from a UsmBuffer (reclaimed without a copy), or use \
             UsmBuffer::from_tensor(&context, &device, kind, &tensor)",
            tensor.device(),
            T::DTYPE
        )))
    }
}
