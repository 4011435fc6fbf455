//! Export: cudarc memory as DLPack buffers. [`CudaBuffer`] (device memory, `kDLCUDA`),
//! [`PinnedBuffer`] (`kDLCUDAHost`), [`ManagedBuffer`] (`kDLCUDAManaged`), and
//! [`CudaTensor`], any of them with a shape, strides and an offset.

use core::fmt;
use core::mem::{ManuallyDrop, size_of};
use core::ptr::{self, NonNull};
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtrMut, DeviceRepr, DriverError, PinnedHostSlice,
    UnifiedSlice, ValidAsZeroBits,
};
use dlpack_core::__private::describe_buffer;
use dlpack_core::{
    Buffer, CheckedTensor, Device, DeviceHooks, DeviceType, Element, Error, Export, ExportDesc,
};

use crate::driver::{
    ContextScope, Driver, STREAM_PER_THREAD, cuda_driver, driver_error, runtime_error,
    upgrade_device_ptr,
};
use crate::hooks::HookLogic;

/// A cudarc device allocation as a DLPack buffer: `kDLCUDA` on the slice's device.
///
/// cudarc's `CudaSlice<T>` cannot implement dlpack-core's traits itself (the orphan rule), so
/// this wrapper does. It exports by itself as a 1-d tensor (every [`Buffer`] does), with a
/// layout through [`CudaTensor`], and as the data field of your own tensor struct (what
/// `#[derive(DLPack)]` builds on). The managed tensor owns the slice: the consumer's deleter
/// drops it, which frees the memory on the slice's stream.
///
/// Every [`Element`] type works, `bool`, `f16` and complex numbers included: memory is moved
/// as bytes, so cudarc's `DeviceRepr` is not needed.
///
/// Importing into a `CudaBuffer` ([`Buffer::copy_from_tensor`], the fallback of derived
/// imports) copies: host-readable tensors (`kDLCPU`, `kDLCUDAHost`, `kDLCUDAManaged`) go to
/// device 0, `kDLCUDA` tensors to their own device, device to device. Other devices are
/// refused with [`Error::NoHook`].
///
/// ```no_run
/// use dlpack_core::{Device, ManagedTensor};
/// use dlpack_cuda::{CudaBuffer, open_device};
///
/// let stream = open_device(0)?.default_stream();
/// let slice = stream.clone_htod(&[1.0f32, 2.0, 3.0]).expect("upload");
/// let tensor = ManagedTensor::export(CudaBuffer::new(slice))?;
/// assert_eq!(tensor.device(), Device::cuda(0));
/// // ... hand `tensor.into_raw()?` to a consumer, or take the slice back:
/// let buffer: CudaBuffer<f32> = tensor.reclaim().expect("exported from a CudaBuffer<f32>");
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// A struct holding a `CudaBuffer` exports any layout inside it through the safe
/// [`ShapedBuffer`](dlpack_core::ShapedBuffer) (the export checks the layout against the
/// buffer), or with `#[derive(DLPack)]` on a `#[dlpack(data)]` field of this type:
///
/// ```no_run
/// use dlpack_core::{ManagedTensor, ShapedBuffer};
/// use dlpack_cuda::{CudaBuffer, open_device};
///
/// struct Image { pixels: CudaBuffer<u8>, hw: [usize; 2] }
///
/// impl ShapedBuffer for Image {
///     type Buffer = CudaBuffer<u8>;
///     fn buffer(&mut self) -> &mut CudaBuffer<u8> { &mut self.pixels }
///     fn ndim(&self) -> usize { 2 }
///     fn shape(&self, shape: &mut [i64]) {
///         shape.copy_from_slice(&[self.hw[0] as i64, self.hw[1] as i64]);
///     }
/// }
///
/// let stream = open_device(0)?.default_stream();
/// let pixels = CudaBuffer::new(stream.alloc_zeros::<u8>(6).expect("alloc"));
/// let tensor = ManagedTensor::export(Image { pixels, hw: [2, 3] })?;
/// assert_eq!(tensor.shape(), &[2, 3]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub struct CudaBuffer<T> {
    /// Dropped in [`Drop`], with its context current.
    slice: ManuallyDrop<CudaSlice<T>>,
    /// The device address of the first element (fixed for the slice's life), as of the last
    /// [`settle`].
    address: usize,
    /// Whether `address` is the slice's: false from [`CudaBuffer::slice_mut`] until its guard
    /// drops, and until the next export when the guard was leaked instead.
    settled: bool,
}

impl<T: Element> CudaBuffer<T> {
    /// Wraps a slice. Pending cudarc work on it from other streams is ordered into the slice's
    /// own stream ([`CudaSlice::stream`]).
    ///
    /// Consumers are made to wait for the stream of the [`CudaHooks`](crate::CudaHooks) that
    /// serve the tensor ([`DeviceHooks::make_ready`] records its event there), so queue later
    /// writes on that stream, or order them before it: `CudaHooks::new(slice.stream().clone())`
    /// makes the slice's own stream that stream.
    ///
    /// A slice of the per-thread default stream (cudarc's `per_thread_stream()`) is the one
    /// exception: that handle names the calling thread's own stream, which no other thread
    /// (a consumer's, the deleter's, where the slice is freed) can order work after. So its
    /// pending work is waited for here, on the host: wrap such a slice on the thread that
    /// queued that work. ([`CudaBuffer::slice_mut`]'s guard waits again when it drops.)
    pub fn new(mut slice: CudaSlice<T>) -> Self {
        let address = settle(&mut slice);
        CudaBuffer {
            slice: ManuallyDrop::new(slice),
            address,
            settled: true,
        }
    }

    /// The slice.
    pub fn slice(&self) -> &CudaSlice<T> {
        &self.slice
    }

    /// The slice, mutably, for cudarc calls that write it (`&mut *buffer.slice_mut()`). When the
    /// guard drops, the buffer takes the slice's address again and orders pending work on it
    /// into its stream, as [`CudaBuffer::new`] does: even a slice swapped in through the guard
    /// (`std::mem::replace`) is described as it is.
    pub fn slice_mut(&mut self) -> SliceMut<'_, T> {
        // Until the guard drops, or the next export if it never does (`mem::forget`).
        self.settled = false;
        SliceMut { buffer: self }
    }

    /// Unwraps the slice.
    pub fn into_slice(self) -> CudaSlice<T> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped or used again, so the slice is taken exactly once.
        unsafe { ManuallyDrop::take(&mut this.slice) }
    }

    /// The stream the slice was allocated on (and is freed on).
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.slice.stream()
    }

    /// The device address of the first element. (After a [`SliceMut`] guard that was leaked
    /// rather than dropped, the address before it, until the next export takes the slice's.)
    pub fn device_address(&self) -> usize {
        self.address
    }
}

/// Orders cudarc's pending work on `slice` from other streams into its own stream, and returns
/// the address of its first element. A slice of the per-thread default stream is waited for
/// instead (see [`CudaBuffer::new`]).
fn settle<T>(slice: &mut CudaSlice<T>) -> usize {
    // cudarc binds the slice's context for the wait below; the thread keeps its own.
    let _keep = ContextScope::preserve();
    let stream = slice.stream().clone();
    // With cudarc's event tracking this makes `stream` wait for earlier reads and writes of the
    // slice on other streams; the returned guard records a write event when dropped.
    let (address, record) = slice.device_ptr_mut(&stream);
    drop(record);
    if stream.cu_stream().addr() == STREAM_PER_THREAD {
        // The handle names this thread's stream only; no other thread can order work after
        // it. A failure is kept in the context, where cudarc reports it at its next call.
        stream.context().record_err(stream.synchronize());
    }
    // 64-bit targets only (lib.rs): a CUdeviceptr fits usize.
    address as usize
}

/// Mutable access to a [`CudaBuffer`]'s slice ([`CudaBuffer::slice_mut`]); dereferences to the
/// `CudaSlice<T>`.
pub struct SliceMut<'a, T: Element> {
    buffer: &'a mut CudaBuffer<T>,
}

impl<T: Element> core::ops::Deref for SliceMut<'_, T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.buffer.slice
    }
}

impl<T: Element> core::ops::DerefMut for SliceMut<'_, T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.buffer.slice
    }
}

impl<T: Element> Drop for SliceMut<'_, T> {
    fn drop(&mut self) {
        self.buffer.address = settle(&mut self.buffer.slice);
        self.buffer.settled = true;
    }
}

impl<T: Element> fmt::Debug for SliceMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SliceMut").field(&*self.buffer).finish()
    }
}

impl<T> fmt::Debug for CudaBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaBuffer")
            .field("device", &format_args!("cuda:{}", self.slice.ordinal()))
            .field("address", &format_args!("{:#x}", self.address))
            .field("len", &self.slice.len())
            .finish()
    }
}

/// Frees the memory on the slice's stream with its context current on this thread, whichever
/// thread that is (a DLPack deleter may run on any): cudarc frees a slice of the default stream
/// on the *current* context's stream, which fails, leaking the memory and recording an error
/// that stops every later call in the context, on a thread where no context is current. The
/// thread's own current context is restored afterwards.
impl<T> Drop for CudaBuffer<T> {
    fn drop(&mut self) {
        let scope = ContextScope::enter(self.slice.context());
        // SAFETY: this is the owner's `Drop`, which runs once; the slice is not used after it.
        unsafe { drop_within(&mut self.slice, scope) };
    }
}

/// Drops `slice` inside `scope`, which restores the thread's context afterwards. Without a scope
/// (the driver refused `cuCtxGetCurrent` or `cuCtxSetCurrent`) the slice is dropped anyway, and
/// cudarc records the driver's error in the context.
///
/// # Safety
/// Called once per slice, from its owner's `Drop`; the slice is not used afterwards.
unsafe fn drop_within<S>(slice: &mut ManuallyDrop<S>, scope: Result<ContextScope, DriverError>) {
    let _scope = scope;
    // SAFETY: the caller's contract.
    unsafe { ManuallyDrop::drop(slice) };
}

// SAFETY: a CudaSlice is one device allocation of `len` elements (cudarc allocates whole slices;
// its safe constructors initialise them, its unsafe `alloc` makes that the caller's promise),
// aligned to at least 256 bytes, that does not move while the slice lives and that only this
// wrapper's owner uses. For an empty slice the pointer is a dangling, aligned, non-NULL one,
// which is all DLPack asks of a tensor without elements. The device is the slice's context's.
unsafe impl<T: Element> Buffer for CudaBuffer<T> {
    type Elem = T;

    fn as_mut_ptr(&mut self) -> *mut T {
        if !self.settled {
            // A `SliceMut` guard was leaked: the slice may have been swapped since.
            self.address = settle(&mut self.slice);
            self.settled = true;
        }
        if self.slice.is_empty() || self.address == 0 {
            NonNull::dangling().as_ptr()
        } else {
            // A device address: never dereferenced by the host, so it carries no provenance.
            ptr::without_provenance_mut(self.address)
        }
    }

    fn len(&self) -> usize {
        self.slice.len()
    }

    fn device(&self) -> Device {
        // cudarc opened the device with `ordinal as i32`: this is the device it runs on.
        Device::cuda(self.slice.ordinal() as i32)
    }

    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        check_dtype::<T>(tensor)?;
        let ordinal = target_ordinal(tensor.device())?;
        let driver = cuda_driver()?;
        // cudarc binds contexts to allocate and copy; the thread keeps its own.
        let _keep = ContextScope::preserve();
        let context = driver.context(ordinal)?;
        let stream = context.default_stream();
        let slice = alloc_elements::<T>(&stream, tensor.len())?;
        let buffer = CudaBuffer::new(slice);
        let hooks = HookLogic::new(driver);
        let destination = Device::cuda(ordinal as i32);
        let dst = buffer.address;
        if tensor.is_host_accessible() {
            let host = read_in_place::<T, _>(tensor, &hooks)?;
            // SAFETY: `dst` is the fresh allocation of `host.len()` elements made above, which
            // nothing else uses yet.
            unsafe { hooks.copy_from_host(destination, as_bytes(&host), dst)? };
        } else if tensor.is_row_major_contiguous() && !tensor.is_empty() {
            let src = tensor.byte_span().start;
            let bytes = tensor.byte_span().len();
            // SAFETY: the source is the tensor's whole reachable span, device memory that its
            // owner keeps valid while `tensor` is borrowed (import contract); for a compact
            // row-major tensor it holds exactly `len` elements, which the fresh allocation at
            // `dst` has room for. The two do not overlap (the destination is new).
            unsafe {
                hooks
                    .driver()
                    .copy_on_device(hooks.queue(destination), src, dst, bytes)?;
            }
        } else {
            let host = tensor.to_host_vec::<T>(&hooks)?;
            // SAFETY: as in the first branch.
            unsafe { hooks.copy_from_host(destination, as_bytes(&host), dst)? };
        }
        Ok(buffer)
    }
}

/// Page-locked host memory allocated through cudarc, as a DLPack buffer: `kDLCUDAHost`
/// (device id 0, as DLPack asks). Host code reads it in place; the GPU reads it over the bus.
///
/// Wrapping waits for cudarc's pending copies into or out of the slice. Imports into a
/// `PinnedBuffer` copy, on the primary context of device 0 (of the tensor's device for
/// `kDLCUDA`). An empty buffer keeps a one-element allocation.
pub struct PinnedBuffer<T> {
    /// Its slice is dropped in [`Drop`], with its context current.
    memory: HostMemory<PinnedHostSlice<T>, T>,
}

// SAFETY: the PinnedHostSlice is Send (cudarc) and `data` points into it, used only through the
// wrapper's owner.
unsafe impl<T: Send> Send for PinnedBuffer<T> {}
// SAFETY: shared access only reads: the elements (`as_slice`, as `&[T]`, hence `T: Sync`) and
// the slice's own metadata; the PinnedHostSlice is Sync (cudarc).
unsafe impl<T: Sync> Sync for PinnedBuffer<T> {}

impl<T: Element + DeviceRepr + ValidAsZeroBits> PinnedBuffer<T> {
    /// Wraps a pinned slice, after waiting for cudarc's pending work on it.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the wait fails (`cuEventSynchronize`) or cudarc gives a NULL host
    /// pointer.
    pub fn new(slice: PinnedHostSlice<T>) -> Result<Self, Error> {
        let len = slice.len();
        HostMemory::with_len(slice, len).map(|memory| PinnedBuffer { memory })
    }

    /// The elements.
    pub fn as_slice(&self) -> &[T] {
        self.memory.as_slice()
    }

    /// Unwraps the pinned slice.
    pub fn into_inner(self) -> PinnedHostSlice<T> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped or used again, so the slice is taken exactly once.
        unsafe { ManuallyDrop::take(&mut this.memory.slice) }
    }
}

impl<T> fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.memory.debug("PinnedBuffer", f)
    }
}

/// Frees the pinned memory with its context current on this thread, as [`CudaBuffer`] does,
/// and restores the thread's own context afterwards (cudarc would leave its context current).
impl<T> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        let scope = ContextScope::enter(self.memory.slice.context());
        // SAFETY: this is the owner's `Drop`, which runs once; the slice is not used after it.
        unsafe { drop_within(&mut self.memory.slice, scope) };
    }
}

// SAFETY: `data` points to the pinned allocation, which holds at least `len` elements
// (initialised: cudarc's allocation is the caller's promise, ours are written before use), does
// not move while the slice lives, and is used only through this wrapper's owner. The pointer
// came from cudarc with its provenance. Pinned memory is `kDLCUDAHost` device 0.
unsafe impl<T: Element + DeviceRepr + ValidAsZeroBits> Buffer for PinnedBuffer<T> {
    type Elem = T;

    fn as_mut_ptr(&mut self) -> *mut T {
        self.memory.data.as_ptr()
    }

    fn len(&self) -> usize {
        self.memory.len
    }

    fn device(&self) -> Device {
        Device::new(DeviceType::CUDA_HOST, 0)
    }

    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        HostMemory::copy_from_tensor(tensor).map(|memory| PinnedBuffer { memory })
    }
}

/// CUDA managed (unified) memory allocated through cudarc, as a DLPack buffer:
/// `kDLCUDAManaged` (device id 0). Host code and every GPU read it in place.
///
/// Wrapping waits for cudarc's pending work on the slice. Imports into a `ManagedBuffer` copy,
/// allocating with `CU_MEM_ATTACH_GLOBAL` on device 0 (on the tensor's device for `kDLCUDA`).
/// An empty buffer keeps a one-element allocation.
///
/// cudarc 0.19's `CudaContext::alloc_unified` allocates in the thread's *current* context, not
/// necessarily its own: make the context current first (`bind_to_thread`, or [`open_device`](
/// crate::open_device) on this thread), or the memory belongs to another device.
pub struct ManagedBuffer<T> {
    /// Its slice is dropped in [`Drop`], keeping the thread's context.
    memory: HostMemory<UnifiedSlice<T>, T>,
}

// SAFETY: the UnifiedSlice is Send (cudarc) and `data` points into it, used only through the
// wrapper's owner.
unsafe impl<T: Send> Send for ManagedBuffer<T> {}
// SAFETY: shared access only reads: the elements (`as_slice`, as `&[T]`, hence `T: Sync`) and
// the slice's own metadata; the UnifiedSlice is Sync (cudarc).
unsafe impl<T: Sync> Sync for ManagedBuffer<T> {}

impl<T: Element + DeviceRepr + ValidAsZeroBits> ManagedBuffer<T> {
    /// Wraps a managed slice, after waiting for cudarc's pending work on it.
    ///
    /// # Errors
    ///
    /// As for [`PinnedBuffer::new`].
    pub fn new(slice: UnifiedSlice<T>) -> Result<Self, Error> {
        let len = slice.len();
        HostMemory::with_len(slice, len).map(|memory| ManagedBuffer { memory })
    }

    /// The elements. Call [`DeviceHooks::wait_host`] first if a GPU may still be writing them.
    pub fn as_slice(&self) -> &[T] {
        self.memory.as_slice()
    }

    /// Unwraps the managed slice.
    pub fn into_inner(self) -> UnifiedSlice<T> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped or used again, so the slice is taken exactly once.
        unsafe { ManuallyDrop::take(&mut this.memory.slice) }
    }
}

impl<T> fmt::Debug for ManagedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.memory.debug("ManagedBuffer", f)
    }
}

/// Frees the managed memory and restores the thread's own context afterwards: cudarc makes the
/// slice's context current to free it (and would leave it current on the deleter's thread).
impl<T> Drop for ManagedBuffer<T> {
    fn drop(&mut self) {
        let scope = ContextScope::preserve();
        // SAFETY: this is the owner's `Drop`, which runs once; the slice is not used after it.
        unsafe { drop_within(&mut self.memory.slice, scope) };
    }
}

// SAFETY: as for PinnedBuffer: `data` points to at least `len` initialised elements of the managed
// allocation, which stays in place while the slice lives and is used only through this wrapper's
// owner; host and device may both access managed memory. Managed memory is `kDLCUDAManaged` 0.
unsafe impl<T: Element + DeviceRepr + ValidAsZeroBits> Buffer for ManagedBuffer<T> {
    type Elem = T;

    fn as_mut_ptr(&mut self) -> *mut T {
        self.memory.data.as_ptr()
    }

    fn len(&self) -> usize {
        self.memory.len
    }

    fn device(&self) -> Device {
        Device::new(DeviceType::CUDA_MANAGED, 0)
    }

    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        HostMemory::copy_from_tensor(tensor).map(|memory| ManagedBuffer { memory })
    }
}

/// What [`PinnedBuffer`] and [`ManagedBuffer`] share: a cudarc slice of host-accessible memory
/// (`S`, a [`HostSlice`]) and the host address of its elements.
///
/// It never frees the slice itself: its wrapper's `Drop` does, in the context scope that kind of
/// memory needs. So every `HostMemory` is put in its wrapper as soon as it is made.
struct HostMemory<S, T> {
    /// Dropped by the wrapper's `Drop`.
    slice: ManuallyDrop<S>,
    data: NonNull<T>,
    /// The elements in use: `slice` may hold more (an empty buffer keeps one element).
    len: usize,
}

impl<S: HostSlice<T>, T: Element> HostMemory<S, T> {
    /// Wraps the first `len` elements of a slice, after waiting for cudarc's pending work on it.
    fn with_len(mut slice: S, len: usize) -> Result<Self, Error> {
        // cudarc binds the slice's context to wait for it; the thread keeps its own.
        let _keep = ContextScope::preserve();
        let data = slice.host_ptr()?;
        Ok(HostMemory {
            slice: ManuallyDrop::new(slice),
            data,
            len,
        })
    }

    /// A copy of `tensor` in new memory of this kind (imports into `S`'s wrapper).
    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        check_dtype::<T>(tensor)?;
        let (context, host) = host_copy::<T>(tensor)?;
        let _scope = S::alloc_scope(&context)?;
        let room = host.len().max(1);
        room.checked_mul(size_of::<T>())
            .ok_or_else(|| too_large(room))?;
        // SAFETY: the memory is written below before anyone reads it.
        let slice = unsafe { S::alloc(&context, room) }?;
        let memory = Self::with_len(slice, host.len())?;
        // SAFETY: `data` points to at least `host.len()` elements that only `memory` uses.
        unsafe { core::slice::from_raw_parts_mut(memory.data.as_ptr(), host.len()) }
            .copy_from_slice(&host);
        Ok(memory)
    }

    /// The elements.
    fn as_slice(&self) -> &[T] {
        // SAFETY: `data` points to the slice's `len` (or more) initialised elements, which live
        // as long as `self`; host reads of pinned and of managed memory are valid, and this
        // crate's own writes go through `&mut self`, so none happens while `&self` is borrowed.
        unsafe { core::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }
}

impl<S, T> HostMemory<S, T> {
    /// The wrapper's `Debug`, under its `name`.
    fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("address", &self.data)
            .field("len", &self.len)
            .finish()
    }
}

/// What tells pinned memory ([`PinnedHostSlice`]) and managed memory ([`UnifiedSlice`]) apart in
/// a [`HostMemory`]: how to reach the elements from the host, and how to allocate.
trait HostSlice<T>: Sized {
    /// The host address of the first element, after waiting for cudarc's pending work on the
    /// slice.
    fn host_ptr(&mut self) -> Result<NonNull<T>, Error>;

    /// What must be current to allocate in `context`: held while the new memory is allocated,
    /// wrapped and written, then restores the thread's own context.
    fn alloc_scope(context: &CudaContext) -> Result<Option<ContextScope>, Error>;

    /// A new slice of `len` elements in `context`, inside [`HostSlice::alloc_scope`].
    ///
    /// # Safety
    /// The elements are unset: the caller writes them before anyone reads them.
    unsafe fn alloc(context: &Arc<CudaContext>, len: usize) -> Result<Self, Error>;
}

impl<T: DeviceRepr + ValidAsZeroBits> HostSlice<T> for PinnedHostSlice<T> {
    fn host_ptr(&mut self) -> Result<NonNull<T>, Error> {
        let data = self
            .as_mut_ptr()
            .map_err(|e| driver_error("waiting for the pinned slice (cuEventSynchronize)", e))?;
        NonNull::new(data)
            .ok_or_else(|| runtime_error("cudarc returned a NULL pinned host pointer"))
    }

    fn alloc_scope(_: &CudaContext) -> Result<Option<ContextScope>, Error> {
        // cudarc binds the context to allocate; the thread keeps its own.
        Ok(ContextScope::preserve().ok())
    }

    unsafe fn alloc(context: &Arc<CudaContext>, len: usize) -> Result<Self, Error> {
        // Portable (pinned for every context, as `kDLCUDAHost` memory numbered 0 is used), and
        // not write-combined, which cudarc's `alloc_pinned` asks for: the host reads this memory
        // in place, and reads of write-combined memory are very slow.
        // SAFETY: the caller's contract: the memory is written before anyone reads it.
        unsafe {
            context.alloc_pinned_with_flags::<T>(len, cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE)
        }
        .map_err(|e| driver_error("cuMemHostAlloc", e))
    }
}

impl<T: DeviceRepr + ValidAsZeroBits> HostSlice<T> for UnifiedSlice<T> {
    fn host_ptr(&mut self) -> Result<NonNull<T>, Error> {
        let data = self
            .as_mut_slice()
            .map_err(|e| driver_error("waiting for the managed slice (cuEventSynchronize)", e))?
            .as_mut_ptr();
        NonNull::new(data).ok_or_else(|| runtime_error("cudarc returned a NULL managed pointer"))
    }

    fn alloc_scope(context: &CudaContext) -> Result<Option<ContextScope>, Error> {
        // cudarc's `alloc_unified` allocates in the thread's current context without making its
        // own current: make it current here, and give the thread its own back afterwards.
        ContextScope::enter(context)
            .map(Some)
            .map_err(|e| driver_error("making the context current (cuCtxSetCurrent)", e))
    }

    unsafe fn alloc(context: &Arc<CudaContext>, len: usize) -> Result<Self, Error> {
        // SAFETY: the caller's contract: the memory is written before anyone reads it.
        unsafe { context.alloc_unified::<T>(len, true) }
            .map_err(|e| driver_error("cuMemAllocManaged", e))
    }
}

/// A CUDA buffer with a layout: any shape, strides (in elements, negative and zero included)
/// and element offset, checked at export against the buffer's allocation.
///
/// This is how a transposed or sliced device tensor is exported without a copy.
///
/// ```no_run
/// use dlpack_core::ManagedTensor;
/// use dlpack_cuda::{CudaBuffer, CudaTensor, open_device};
///
/// let stream = open_device(0)?.default_stream();
/// let slice = stream.clone_htod(&[0u8, 1, 2, 3, 4, 5]).expect("upload");
/// // The 3x2 transpose of a row-major 2x3 matrix: same memory, swapped strides.
/// let t = CudaTensor::strided(CudaBuffer::new(slice), &[3, 2], &[1, 3], 0)?;
/// let tensor = ManagedTensor::export(t)?;
/// assert_eq!(tensor.strides(), &[1, 3]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
#[derive(Debug)]
pub struct CudaTensor<B> {
    buffer: B,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
}

impl<B: Buffer> CudaTensor<B> {
    /// A compact row-major tensor of `shape` over the start of `buffer`.
    ///
    /// # Errors
    ///
    /// [`Error::Overflow`] for a size that does not fit `i64`. (A shape that does not fit the
    /// buffer is refused at export: [`Error::SpanOutsideAllocation`].)
    pub fn new(buffer: B, shape: &[usize]) -> Result<Self, Error> {
        Ok(CudaTensor {
            buffer,
            shape: to_i64(shape)?,
            strides: None,
            byte_offset: 0,
        })
    }

    /// A tensor of `shape` with `strides` (in elements) whose first element is element `offset`
    /// of `buffer`. Export refuses a layout that reaches outside the buffer
    /// ([`Error::SpanOutsideAllocation`]).
    ///
    /// # Errors
    ///
    /// [`Error::NdimMismatch`] when `strides` and `shape` differ in length, [`Error::Overflow`]
    /// for a size that does not fit `i64` or an offset whose byte count does not fit `u64`.
    pub fn strided(
        buffer: B,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> Result<Self, Error> {
        if strides.len() != shape.len() {
            return Err(Error::NdimMismatch {
                found: strides.len(),
                expected: shape.len(),
            });
        }
        let byte_offset = offset
            .checked_mul(size_of::<B::Elem>())
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| Error::Overflow {
                what: format!("the element offset {offset} in bytes"),
            })?;
        Ok(CudaTensor {
            buffer,
            shape: to_i64(shape)?,
            strides: Some(to_i64(strides)?),
            byte_offset,
        })
    }

    /// The buffer.
    pub fn buffer(&self) -> &B {
        &self.buffer
    }

    /// Unwraps the buffer.
    pub fn into_buffer(self) -> B {
        self.buffer
    }

    /// The shape.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }
}

// SAFETY: `describe_buffer` describes memory inside the buffer only and names the buffer's
// allocation, which the export constructor checks the layout against; the Buffer contract
// covers the memory itself. `ndim` is the shape's length, which never changes.
unsafe impl<B: Buffer> Export for CudaTensor<B> {
    fn ndim(&self) -> usize {
        self.shape.len()
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        describe_buffer(
            &mut self.buffer,
            &self.shape,
            self.strides.as_ref(),
            self.byte_offset,
            shape,
            strides,
        )
    }
}

fn to_i64<I>(dims: &[I]) -> Result<Vec<i64>, Error>
where
    i64: TryFrom<I>,
    I: Copy + fmt::Display,
{
    dims.iter()
        .map(|&d| {
            i64::try_from(d).map_err(|_| Error::Overflow {
                what: format!("the dimension {d} does not fit i64"),
            })
        })
        .collect()
}

/// The tensor's dtype must be `T`'s.
fn check_dtype<T: Element>(tensor: &CheckedTensor) -> Result<(), Error> {
    if tensor.dtype() == T::DTYPE {
        Ok(())
    } else {
        Err(Error::DataTypeMismatch {
            found: tensor.dtype(),
            expected: T::DTYPE,
        })
    }
}

/// The device a copy of a tensor on `source` goes to: its own for `kDLCUDA`, 0 for host-readable
/// memory; other devices are refused before the driver is touched.
pub(crate) fn target_ordinal(source: Device) -> Result<usize, Error> {
    match source.device_type {
        DeviceType::CPU | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED => Ok(0),
        DeviceType::CUDA => usize::try_from(source.device_id).map_err(|_| {
            runtime_error(format!(
                "the tensor claims {source}, a negative device index; expected a CUDA device >= 0"
            ))
        }),
        _ => Err(Error::NoHook { device: source }),
    }
}

/// The tensor's elements in a host `Vec`, and the context to allocate their copy in.
fn host_copy<T: Element>(tensor: &CheckedTensor) -> Result<(Arc<CudaContext>, Vec<T>), Error> {
    let ordinal = target_ordinal(tensor.device())?;
    let driver = cuda_driver()?;
    let context = driver.context(ordinal)?;
    let hooks = HookLogic::new(driver);
    let host = if tensor.is_host_accessible() {
        read_in_place::<T, _>(tensor, &hooks)?
    } else {
        tensor.to_host_vec::<T>(&hooks)?
    };
    Ok((context, host))
}

/// The elements of a host-accessible tensor, read in place. Pinned and managed CUDA memory is
/// read after the host waits for the legacy default stream of its device (`hooks` have no
/// stream of their own): the stream a consumer names by default (`1`), on which the producer
/// made the data ready.
fn read_in_place<T: Element, D: Driver>(
    tensor: &CheckedTensor,
    hooks: &HookLogic<D>,
) -> Result<Vec<T>, Error> {
    let device = tensor.device();
    if hooks.handles(device.device_type) && !tensor.is_empty() {
        hooks.wait_host(device)?;
    }
    tensor.to_vec::<T>()
}

fn too_large(elements: usize) -> Error {
    Error::Overflow {
        what: format!("{elements} elements do not fit the address space"),
    }
}

/// A new device slice of `len` elements (at least one byte is allocated, since the driver
/// refuses empty allocations), contents unset.
fn alloc_elements<T>(stream: &Arc<CudaStream>, len: usize) -> Result<CudaSlice<T>, Error> {
    let bytes = len
        .checked_mul(size_of::<T>())
        .ok_or_else(|| too_large(len))?
        .max(1);
    // SAFETY: the bytes are left unset; the caller writes every element before the slice is
    // read.
    let raw = unsafe { stream.alloc::<u8>(bytes) }.map_err(|e| driver_error("cuMemAlloc", e))?;
    let address = raw.leak();
    // SAFETY: `address` is a live allocation of `bytes >= len * size_of::<T>()` bytes, aligned
    // to 256 bytes, made in this stream's context; `leak` gave up cudarc's ownership, so the new
    // slice is its only owner and frees it exactly once.
    unsafe { upgrade_device_ptr::<T>(stream, address, len) }.inspect_err(|_| {
        // No slice owns the memory: free it here, in its context, as cudarc would have: on the
        // stream where the device has memory pools, else after the stream (`cuMemFreeAsync`
        // fails without pools, and then nothing was freed).
        use cudarc::driver::result;
        let _scope = ContextScope::enter(stream.context());
        // SAFETY: the allocation made above, which nothing else owns or uses.
        if unsafe { result::free_async(address, stream.cu_stream()) }.is_err() {
            let _ = stream.synchronize();
            // SAFETY: as above; the failed asynchronous free freed nothing.
            let _ = unsafe { result::free_sync(address) };
        }
    })
}

/// The bytes of a slice of elements.
pub(crate) fn as_bytes<T: Element>(values: &[T]) -> &[u8] {
    // SAFETY: `Element` types have no padding bytes, so every byte of the slice is initialised;
    // the length is the slice's size in bytes.
    unsafe { core::slice::from_raw_parts(values.as_ptr().cast(), core::mem::size_of_val(values)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlpack_core::ManagedTensor;

    #[test]
    fn copies_into_cuda_memory_refuse_other_devices_before_touching_the_driver() {
        for device in [Device::oneapi(0), Device::new(DeviceType::ROCM, 0)] {
            assert_eq!(target_ordinal(device), Err(Error::NoHook { device }));
        }
        assert_eq!(target_ordinal(Device::CPU), Ok(0));
        assert_eq!(
            target_ordinal(Device::new(DeviceType::CUDA_MANAGED, 0)),
            Ok(0)
        );
        assert_eq!(target_ordinal(Device::cuda(3)), Ok(3));
        let err = target_ordinal(Device::cuda(-1)).unwrap_err();
        assert!(err.to_string().contains("cuda:-1"), "{err}");
    }

    #[test]
    fn a_cuda_buffer_import_checks_the_dtype_first() {
        let tensor = ManagedTensor::export(vec![1u8, 2, 3]).unwrap();
        let err = CudaBuffer::<f32>::copy_from_tensor(&tensor).unwrap_err();
        assert_eq!(
            err,
            Error::DataTypeMismatch {
                found: u8::DTYPE,
                expected: f32::DTYPE
            }
        );
    }

    #[test]
    fn layouts_refuse_strides_of_another_length() {
        // Any Buffer takes a layout; a host Vec stands in for device memory here.
        let err = CudaTensor::strided(vec![0f32; 6], &[2, 3], &[3], 0).unwrap_err();
        assert_eq!(
            err,
            Error::NdimMismatch {
                found: 1,
                expected: 2
            }
        );
        let err = CudaTensor::strided(vec![0f32; 6], &[2], &[1], usize::MAX).unwrap_err();
        assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    }

    #[test]
    fn a_layout_reaching_outside_its_buffer_is_refused_at_export() {
        let t = CudaTensor::strided(vec![0u16; 6], &[3, 2], &[1, 3], 1).unwrap();
        let err = ManagedTensor::export(t).unwrap_err().error;
        assert!(
            matches!(err, Error::SpanOutsideAllocation { .. }),
            "{err:?}"
        );
        let t = CudaTensor::strided(vec![0u16; 6], &[3, 2], &[1, 3], 0).unwrap();
        let tensor = ManagedTensor::export(t).unwrap();
        assert_eq!(
            (tensor.shape(), tensor.strides()),
            (&[3, 2][..], &[1, 3][..])
        );
        assert_eq!(tensor.to_vec::<u16>().unwrap().len(), 6);
    }
}
