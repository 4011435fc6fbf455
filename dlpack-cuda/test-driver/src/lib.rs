//! **Test support only**: a stand-in for the NVIDIA driver library (`libcuda.so`) that cudarc's
//! dynamic loading opens like the real one, with host memory standing in for device memory. It
//! is not a device backend and never touches a GPU. It exists so that `dlpack-cuda`'s GPU suite
//! runs, on machines without a GPU, through the code that is otherwise only reached on one:
//! cudarc's loader and safe API, this crate's `CudaDriver`, the real `cuPointerGetAttributes`
//! calling convention, stream-ordered copies and the event handshake.
//!
//! The library's soname is `libcuda.so` (see `build.rs`). A test opens it by its path before the
//! first driver call; cudarc's later `dlopen("libcuda.so")` then finds it already loaded.
//!
//! # What it models, and how faithfully
//!
//! - `DLPACK_CUDA_TEST_DRIVER_DEVICES` devices (default 2, at most 8), each with a primary
//!   context (retained and released with a count) that threads make current. Every call before
//!   `cuInit(0)` fails with `CUDA_ERROR_NOT_INITIALIZED`; allocations, streams and events need a
//!   current context (`CUDA_ERROR_INVALID_CONTEXT`), as on a real driver. The release that
//!   destroys a context while allocations, streams or events of it are alive is refused (the
//!   real driver destroys them with it).
//! - **Device memory the host cannot read.** `cuMemAlloc`/`cuMemAllocAsync` hand out addresses
//!   inside an address range reserved with no access rights, so a host dereference of a device
//!   pointer crashes, as it would on a discrete GPU. The bytes live elsewhere and are only
//!   reached through copies. New memory is filled with `0xA5`, never zeros; device addresses
//!   are never reused, and allocations are 512 bytes apart, so a read past the end or after a
//!   free hits no allocation and is refused. (Freed pinned and managed memory goes back to the
//!   host allocator, which may hand the address out again.)
//! - **Frees in stream order.** `cuMemFreeAsync` frees the bytes when its stream reaches it; a
//!   copy or memset of another stream that reaches them later is refused, the use after free a
//!   real driver would let corrupt reused memory. `cuMemFree` and `cuMemFreeHost` free at once.
//! - Pinned (`cuMemHostAlloc`) and managed (`cuMemAllocManaged`) memory are host memory that the
//!   host reads in place; `cuPointerGetAttributes` reports each kind, its device and its range,
//!   and for a pointer it did not allocate memory type 0 and device ordinal -2, as the real
//!   driver does. With `DLPACK_CUDA_TEST_DRIVER_ATTRIBUTES_NEED_CONTEXT=1` it answers
//!   `CUDA_ERROR_INVALID_CONTEXT` on a thread without a current context, as some drivers do.
//!   With `DLPACK_CUDA_TEST_DRIVER_HOST_RANGES=0` it answers `CUDA_ERROR_INVALID_VALUE` to a
//!   query that asks pinned memory for its range, which the driver API documents only for
//!   device allocations.
//! - **Streams are asynchronous.** Each stream runs its work in order on a thread of its own, so
//!   a missing synchronisation shows up as wrong data or a failed check rather than passing by
//!   luck. An event's recording is a stream position; `cuStreamWaitEvent` makes a stream wait
//!   for the recording that was the event's latest when it was called, across streams and
//!   devices; `cuLaunchHostFunc` runs a host function in stream order. Copies from pageable
//!   host memory are staged when issued and copies to pageable host memory return when done, as
//!   the driver documents; copies to or from pinned and managed memory happen in stream order.
//! - Every copy and memset must lie inside one live allocation (`CUDA_ERROR_INVALID_VALUE`
//!   otherwise); handles are checked against the live objects (`CUDA_ERROR_INVALID_HANDLE`); a
//!   second free of the same memory is refused, and so is an event recorded on another device's
//!   stream.
//! - Default streams: each device has one legacy default stream (handle 0 or 1), and each thread
//!   a per-thread default stream (handle 2) per device. Simplified: the legacy stream does not
//!   synchronise with other streams. Code that relied on that implicit synchronisation would
//!   fail here, not pass; `dlpack-cuda` orders work with events only.
//! - Not modelled: the range a memory pool may report for its allocations (see dlpack-cuda's
//!   limits), kernels, and more than what the functions below do.
//!
//! Every refused call is counted and printed on stderr with its reason. Three extra exports
//! serve the tests: [`dlpack_cuda_test_driver_live`] counts live objects and refusals (leak and
//! double-free checks), [`dlpack_cuda_test_driver_calls`] counts event records, stream waits and
//! context synchronisations (a handshake happened, no device-wide synchronisation did), and
//! [`dlpack_cuda_test_driver_settle`] waits until every stream has run its work.
//!
//! The library exports only the driver functions `dlpack-cuda` needs (its `REQUIRED_SYMBOLS`)
//! and the two the GPU suite calls itself (`cuLaunchHostFunc`, `cuEventQuery`); a unit test of
//! dlpack-cuda keeps the two lists equal. When cudarc reaches for any other symbol it panics
//! naming it, which is how a gap in `REQUIRED_SYMBOLS` shows up.

#![allow(non_snake_case)] // the driver API's function names

use core::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::alloc::{self, Layout};
use std::cell::Cell;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{JoinHandle, ThreadId};

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUhostFn, CUresult, CUstream,
};

/// The result codes this library returns.
use CUresult::{
    CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_READY,
    CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN, CUDA_SUCCESS,
};

/// Alignment and spacing of device allocations (the real driver aligns to at least 256).
const DEVICE_ALIGN: usize = 512;
/// Alignment of pinned and managed allocations (a page, as the real driver gives).
const HOST_ALIGN: usize = 4096;
/// The sizes tried, largest first, for the address range reserved for device memory (address
/// space only; valgrind, for one, grants less than 64 GiB).
const DEVICE_RANGES: [usize; 4] = [1 << 36, 1 << 34, 1 << 32, 1 << 30];
/// The largest single allocation this library makes.
const MAX_ALLOCATION: usize = 1 << 32;
/// The primary context of device `n` has the handle `CONTEXT_BASE + n * CONTEXT_STEP`.
const CONTEXT_BASE: usize = 0xc0_0000;
const CONTEXT_STEP: usize = 0x100;
/// Stream and event handles are counted up from here (never 0, 1 or 2, which are the default
/// streams).
const FIRST_HANDLE: usize = 0x5_0000;

// `CUpointer_attribute` values.
const ATTRIBUTE_CONTEXT: u32 = 1;
const ATTRIBUTE_MEMORY_TYPE: u32 = 2;
const ATTRIBUTE_DEVICE_POINTER: u32 = 3;
const ATTRIBUTE_IS_MANAGED: u32 = 8;
const ATTRIBUTE_DEVICE_ORDINAL: u32 = 9;
const ATTRIBUTE_RANGE_START_ADDR: u32 = 11;
const ATTRIBUTE_RANGE_SIZE: u32 = 12;

// `CUmemorytype` values.
const MEMORY_TYPE_HOST: u32 = 1;
const MEMORY_TYPE_DEVICE: u32 = 2;

// `CUdevice_attribute` values.
const DEVICE_UNIFIED_ADDRESSING: c_int = 41;
const DEVICE_MANAGED_MEMORY: c_int = 83;
const DEVICE_CONCURRENT_MANAGED_ACCESS: c_int = 89;
const DEVICE_MEMORY_POOLS_SUPPORTED: c_int = 115;

/// A refused call: the code returned and why (printed on stderr).
struct Refusal {
    code: CUresult,
    why: String,
}

type Outcome = Result<(), Refusal>;

fn refuse(code: CUresult, why: impl Into<String>) -> Refusal {
    Refusal {
        code,
        why: why.into(),
    }
}

fn invalid(why: impl Into<String>) -> Refusal {
    refuse(CUDA_ERROR_INVALID_VALUE, why)
}

/// Runs an entry point: its refusal becomes the returned code, counted and printed; a panic
/// inside this library becomes `CUDA_ERROR_UNKNOWN` instead of unwinding into C.
fn entry(name: &str, body: impl FnOnce() -> Outcome) -> CUresult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(refusal)) => {
            driver().refused.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "dlpack-cuda test driver: {name} refused with {:?}: {}",
                refusal.code, refusal.why
            );
            refusal.code
        }
        Err(_) => {
            driver().refused.fetch_add(1, Ordering::Relaxed);
            eprintln!("dlpack-cuda test driver: {name} panicked (a bug in the test driver)");
            CUDA_ERROR_UNKNOWN
        }
    }
}

/// Writes through an out-pointer the caller passed, refusing NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> Outcome {
    if out.is_null() {
        return Err(invalid("a NULL output pointer"));
    }
    // SAFETY: non-NULL, and valid for writes by the caller's contract.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// Memory that backs an allocation: a zero-copy home for its bytes, freed when the last user
/// (the allocation table or a queued copy) lets go.
struct Backing {
    ptr: NonNull<u8>,
    layout: Layout,
    /// Freed by the program: set when `cuMemFree` is called, or when the freeing stream reaches
    /// a `cuMemFreeAsync`. Work that reaches the bytes after that is refused (a use after free
    /// that the real driver would let corrupt reused memory).
    freed: AtomicBool,
}

// SAFETY: the bytes are plain memory; who writes when is ordered by the streams, as on a GPU.
unsafe impl Send for Backing {}
// SAFETY: as above.
unsafe impl Sync for Backing {}

impl Backing {
    fn new(size: usize, align: usize) -> Result<Arc<Backing>, Refusal> {
        let layout = Layout::from_size_align(size.max(1), align)
            .map_err(|_| refuse(CUDA_ERROR_OUT_OF_MEMORY, format!("{size} bytes")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc::alloc(layout) })
            .ok_or_else(|| refuse(CUDA_ERROR_OUT_OF_MEMORY, format!("{size} bytes")))?;
        // SAFETY: freshly allocated for `layout.size()` bytes. Not zeros: code that reads memory
        // it never wrote sees 0xA5 bytes.
        unsafe { ptr.as_ptr().write_bytes(0xa5, layout.size()) };
        Ok(Arc::new(Backing {
            ptr,
            layout,
            freed: AtomicBool::new(false),
        }))
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Device memory: its address is in the reserved range, its bytes in the backing.
    Device,
    /// Pinned host memory: its address is its backing's.
    Pinned,
    /// Managed memory: its address is its backing's.
    Managed,
}

struct Allocation {
    kind: Kind,
    ordinal: i32,
    size: usize,
    backing: Arc<Backing>,
}

/// Bytes an operation reads or writes: inside an allocation, or caller-owned host memory.
#[derive(Clone)]
enum Place {
    /// `offset` bytes into an allocation's backing (kept alive by the queued operation).
    Memory(Arc<Backing>, usize),
    /// Pageable host memory the caller owns.
    Host(usize),
}

impl Place {
    fn is_freed(&self) -> bool {
        matches!(self, Place::Memory(backing, _) if backing.freed.load(Ordering::Acquire))
    }

    fn ptr(&self) -> *mut u8 {
        match self {
            // SAFETY: the offset lies inside the backing (checked when the place was found).
            Place::Memory(backing, offset) => unsafe { backing.ptr.as_ptr().add(*offset) },
            Place::Host(address) => ptr::with_exposed_provenance_mut(*address),
        }
    }
}

/// Work queued on a stream.
type Work = Box<dyn FnOnce() + Send>;

/// A stream: its work runs in order on a thread of its own.
struct Stream {
    ordinal: i32,
    queue: Mutex<Option<Sender<Work>>>,
    /// The worker thread, joined by `settle` once the stream is destroyed.
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Stream {
    fn new(ordinal: i32) -> Result<Arc<Stream>, Refusal> {
        let (sender, receiver) = channel::<Work>();
        let thread = std::thread::Builder::new()
            .name(format!("cuda-test-stream-{ordinal}"))
            .spawn(move || {
                for work in receiver {
                    work();
                }
            })
            .map_err(|e| refuse(CUDA_ERROR_OUT_OF_MEMORY, format!("no stream thread: {e}")))?;
        Ok(Arc::new(Stream {
            ordinal,
            queue: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
        }))
    }

    fn push(&self, work: Work) -> Outcome {
        let queue = lock(&self.queue);
        match queue.as_ref() {
            Some(sender) if sender.send(work).is_ok() => Ok(()),
            _ => Err(refuse(CUDA_ERROR_INVALID_HANDLE, "a destroyed stream")),
        }
    }

    /// Waits until everything queued so far has run.
    fn finish(&self) -> Outcome {
        let (done, wait) = channel::<()>();
        self.push(Box::new(move || {
            let _ = done.send(());
        }))?;
        wait.recv()
            .map_err(|_| refuse(CUDA_ERROR_UNKNOWN, "the stream thread ended"))
    }

    /// Ends the stream: queued work still runs, then its thread ends.
    fn close(&self) {
        lock(&self.queue).take();
    }

    /// Waits for a closed stream's queued work and its thread.
    fn join(&self) {
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

/// One recording of an event: reached when its stream gets to it.
#[derive(Default)]
struct Completion {
    reached: Mutex<bool>,
    signal: Condvar,
}

impl Completion {
    fn reach(&self) {
        *lock(&self.reached) = true;
        self.signal.notify_all();
    }

    fn is_reached(&self) -> bool {
        *lock(&self.reached)
    }

    fn wait(&self) {
        let mut reached = lock(&self.reached);
        while !*reached {
            reached = self
                .signal
                .wait(reached)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// An event: its latest recording (none before the first, which counts as reached, as on the
/// driver). A wait or query concerns the recording that was latest when it was asked, whatever
/// is recorded later.
struct Event {
    ordinal: i32,
    latest: Mutex<Option<Arc<Completion>>>,
}

impl Event {
    fn latest(&self) -> Option<Arc<Completion>> {
        lock(&self.latest).clone()
    }
}

#[derive(Default)]
struct DeviceState {
    retained: u32,
    legacy: Option<Arc<Stream>>,
    /// The per-thread default stream of each thread that used one (kept, with its worker
    /// thread, for the life of the process: a test process uses few threads).
    per_thread: HashMap<ThreadId, Arc<Stream>>,
}

struct State {
    initialised: bool,
    devices: Vec<DeviceState>,
    memory_pools: bool,
    /// Live allocations by first address.
    allocations: BTreeMap<usize, Allocation>,
    streams: HashMap<usize, Arc<Stream>>,
    events: HashMap<usize, Arc<Event>>,
    next_handle: usize,
    /// The reserved device address range and the next address to hand out.
    device_range: (usize, usize),
    next_device_address: usize,
    /// Pointer queries need a current context (`DLPACK_CUDA_TEST_DRIVER_ATTRIBUTES_NEED_CONTEXT`
    /// is `1`), as on some drivers.
    attributes_need_context: bool,
    /// Pointer queries that ask pinned memory for its range fail with
    /// `CUDA_ERROR_INVALID_VALUE` (`DLPACK_CUDA_TEST_DRIVER_HOST_RANGES` is `0`): the driver API
    /// documents the range attributes for device allocations only.
    host_ranges_refused: bool,
    /// Destroyed streams whose threads `settle` has not joined yet.
    closed: Vec<Arc<Stream>>,
}

/// Counts of calls that leave no live object behind, for tests that check a call was made.
#[derive(Default)]
struct Calls {
    event_records: AtomicU64,
    stream_waits: AtomicU64,
    context_synchronizations: AtomicU64,
    context_less_pointer_queries: AtomicU64,
    host_range_refusals: AtomicU64,
}

struct Driver {
    state: Mutex<State>,
    refused: AtomicU64,
    calls: Calls,
}

/// Counts a refusal that happens where no call can return it (on a stream's thread, say).
fn refuse_later(why: &str) {
    driver().refused.fetch_add(1, Ordering::Relaxed);
    eprintln!("dlpack-cuda test driver: refused on a stream: {why}");
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn env_number(name: &str, default: usize, max: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| (1..=max).contains(n))
        .unwrap_or(default)
}

fn driver() -> &'static Driver {
    static DRIVER: OnceLock<Driver> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let devices = env_number("DLPACK_CUDA_TEST_DRIVER_DEVICES", 2, 8);
        let memory_pools = std::env::var("DLPACK_CUDA_TEST_DRIVER_POOLS").as_deref() != Ok("0");
        Driver {
            state: Mutex::new(State {
                initialised: false,
                devices: (0..devices).map(|_| DeviceState::default()).collect(),
                memory_pools,
                allocations: BTreeMap::new(),
                streams: HashMap::new(),
                events: HashMap::new(),
                next_handle: FIRST_HANDLE,
                device_range: (0, 0),
                next_device_address: 0,
                attributes_need_context: std::env::var(
                    "DLPACK_CUDA_TEST_DRIVER_ATTRIBUTES_NEED_CONTEXT",
                )
                .as_deref()
                    == Ok("1"),
                host_ranges_refused: std::env::var("DLPACK_CUDA_TEST_DRIVER_HOST_RANGES")
                    .as_deref()
                    == Ok("0"),
                closed: Vec::new(),
            }),
            refused: AtomicU64::new(0),
            calls: Calls::default(),
        }
    })
}

thread_local! {
    /// The handle of this thread's current context (0: none).
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The driver's state, once `cuInit` has run.
fn state() -> Result<MutexGuard<'static, State>, Refusal> {
    let state = lock(&driver().state);
    if state.initialised {
        Ok(state)
    } else {
        Err(refuse(
            CUDA_ERROR_NOT_INITIALIZED,
            "called before cuInit(0)",
        ))
    }
}

impl State {
    fn device(&self, ordinal: c_int) -> Result<usize, Refusal> {
        usize::try_from(ordinal)
            .ok()
            .filter(|&n| n < self.devices.len())
            .ok_or_else(|| {
                refuse(
                    CUDA_ERROR_INVALID_DEVICE,
                    format!("device {ordinal} (there are {})", self.devices.len()),
                )
            })
    }

    /// The device of a context handle.
    fn context_device(&self, handle: usize) -> Option<usize> {
        let offset = handle.checked_sub(CONTEXT_BASE)?;
        (offset % CONTEXT_STEP == 0 && offset / CONTEXT_STEP < self.devices.len())
            .then_some(offset / CONTEXT_STEP)
    }

    /// The device of this thread's current context, which must be retained.
    fn current(&self) -> Result<usize, Refusal> {
        let handle = CURRENT.with(Cell::get);
        match self.context_device(handle) {
            Some(device) if self.devices[device].retained > 0 => Ok(device),
            Some(device) => Err(refuse(
                CUDA_ERROR_INVALID_CONTEXT,
                format!("the current context (device {device}'s primary) has been released"),
            )),
            None => Err(refuse(CUDA_ERROR_INVALID_CONTEXT, "no current context")),
        }
    }

    fn handle(&mut self) -> usize {
        let handle = self.next_handle;
        self.next_handle += 0x10;
        handle
    }

    /// A stream by handle: 0 and 1 are the current context's legacy default stream, 2 the
    /// calling thread's per-thread default stream of the current context.
    fn stream(&mut self, handle: CUstream) -> Result<Arc<Stream>, Refusal> {
        let handle = handle.addr();
        if handle <= 2 {
            let device = self.current()?;
            let state = &mut self.devices[device];
            let stream = if handle == 2 {
                match state.per_thread.entry(std::thread::current().id()) {
                    Entry::Occupied(slot) => slot.get().clone(),
                    Entry::Vacant(slot) => slot.insert(Stream::new(device as i32)?).clone(),
                }
            } else {
                match &state.legacy {
                    Some(stream) => stream.clone(),
                    None => state.legacy.insert(Stream::new(device as i32)?).clone(),
                }
            };
            return Ok(stream);
        }
        self.streams
            .get(&handle)
            .cloned()
            .ok_or_else(|| refuse(CUDA_ERROR_INVALID_HANDLE, format!("stream {handle:#x}")))
    }

    fn event(&self, handle: CUevent) -> Result<Arc<Event>, Refusal> {
        self.events.get(&handle.addr()).cloned().ok_or_else(|| {
            refuse(
                CUDA_ERROR_INVALID_HANDLE,
                format!("event {:#x}", handle.addr()),
            )
        })
    }

    /// The allocation holding `address`, and its first address.
    fn allocation_at(&self, address: usize) -> Option<(usize, &Allocation)> {
        let (&start, allocation) = self.allocations.range(..=address).next_back()?;
        (address - start < allocation.size).then_some((start, allocation))
    }

    /// The place of `len` bytes at `address`, which must lie inside one live allocation.
    fn memory(&self, address: CUdeviceptr, len: usize) -> Result<Place, Refusal> {
        let address = address as usize;
        let (start, allocation) = self.allocation_at(address).ok_or_else(|| {
            invalid(format!(
                "{address:#x} is not inside a live allocation of this driver"
            ))
        })?;
        let offset = address - start;
        if len > allocation.size - offset {
            return Err(invalid(format!(
                "{len} bytes at {address:#x} run past the end of the {}-byte allocation at {start:#x}",
                allocation.size
            )));
        }
        Ok(Place::Memory(allocation.backing.clone(), offset))
    }

    /// Host memory at `address`: inside a pinned or managed allocation (`Some`, reached in
    /// stream order), or pageable memory the caller owns (`None`).
    fn host(&self, address: usize, len: usize) -> Result<Option<Place>, Refusal> {
        match self.allocation_at(address) {
            Some((_, allocation)) if allocation.kind == Kind::Device => Err(invalid(format!(
                "{address:#x} is device memory, passed as a host pointer"
            ))),
            Some(_) => self.memory(address as CUdeviceptr, len).map(Some),
            None if (self.device_range.0..self.device_range.1).contains(&address) => {
                Err(invalid(format!(
                    "{address:#x} is in the device address range but no live allocation (freed device memory?), passed as a host pointer"
                )))
            }
            None => Ok(None),
        }
    }

    /// Reserves device addresses for `size` bytes.
    fn device_address(&mut self, size: usize) -> Result<usize, Refusal> {
        if self.device_range.0 == 0 {
            let reserved = DEVICE_RANGES.iter().find_map(|&size| {
                // SAFETY: an anonymous private mapping with no access rights: address space only.
                let base = unsafe {
                    libc::mmap(
                        ptr::null_mut(),
                        size,
                        libc::PROT_NONE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                (base != libc::MAP_FAILED).then(|| (base.addr(), size))
            });
            let (base, size) = reserved.ok_or_else(|| {
                refuse(
                    CUDA_ERROR_OUT_OF_MEMORY,
                    "cannot reserve an address range for device memory",
                )
            })?;
            self.device_range = (base, base + size);
            self.next_device_address = base.next_multiple_of(DEVICE_ALIGN);
        }
        let address = self.next_device_address;
        // One spare block after each allocation, so that a read past its end finds nothing.
        let next = size
            .checked_next_multiple_of(DEVICE_ALIGN)
            .and_then(|s| address.checked_add(s + DEVICE_ALIGN))
            .filter(|&next| next <= self.device_range.1)
            .ok_or_else(|| refuse(CUDA_ERROR_OUT_OF_MEMORY, "device address range used up"))?;
        self.next_device_address = next;
        Ok(address)
    }

    /// Allocates `size` bytes of `kind` on device `ordinal` (`None`: the current context's).
    fn allocate(
        &mut self,
        kind: Kind,
        size: usize,
        ordinal: Option<i32>,
    ) -> Result<usize, Refusal> {
        if size == 0 {
            return Err(invalid("an allocation of 0 bytes"));
        }
        if size > MAX_ALLOCATION {
            return Err(refuse(
                CUDA_ERROR_OUT_OF_MEMORY,
                format!("{size} bytes is more than this test driver allocates"),
            ));
        }
        let ordinal = match ordinal {
            Some(ordinal) => ordinal,
            None => self.current()? as i32,
        };
        let (backing, address) = match kind {
            Kind::Device => (Backing::new(size, 16)?, self.device_address(size)?),
            Kind::Pinned | Kind::Managed => {
                let backing = Backing::new(size, HOST_ALIGN)?;
                let address = backing.ptr.as_ptr().expose_provenance();
                (backing, address)
            }
        };
        self.allocations.insert(
            address,
            Allocation {
                kind,
                ordinal,
                size,
                backing,
            },
        );
        Ok(address)
    }

    /// Takes the allocation at `address` out of the table: the address is invalid for any
    /// later call. Its bytes stay until work queued earlier lets go of them; `freed` is for the
    /// caller to set, now or in stream order.
    fn free(&mut self, address: usize, kinds: &[Kind]) -> Result<Arc<Backing>, Refusal> {
        match self.allocations.get(&address) {
            Some(allocation) if kinds.contains(&allocation.kind) => {
                let allocation = self.allocations.remove(&address).expect("just found");
                Ok(allocation.backing)
            }
            Some(allocation) => Err(invalid(format!(
                "{address:#x} is {:?} memory, freed with the call for {kinds:?} memory",
                allocation.kind
            ))),
            None => Err(invalid(format!(
                "{address:#x} is not the start of a live allocation (freed twice, or never allocated)"
            ))),
        }
    }

    /// Every live stream, default streams included.
    fn all_streams(&self) -> Vec<Arc<Stream>> {
        let defaults = self
            .devices
            .iter()
            .flat_map(|d| d.legacy.iter().chain(d.per_thread.values()))
            .cloned();
        defaults.chain(self.streams.values().cloned()).collect()
    }
}

/// Queues `len` bytes from `src` to `dst` on `stream`.
fn queue_copy(stream: &Stream, src: Place, dst: Place, len: usize) -> Outcome {
    stream.push(Box::new(move || {
        if src.is_freed() || dst.is_freed() {
            refuse_later(&format!(
                "a copy of {len} bytes reached memory freed before the stream got to it"
            ));
            return;
        }
        // SAFETY: both places hold `len` bytes (checked when they were found; pageable host
        // memory by the caller's contract); allocations are kept alive by the places.
        unsafe { ptr::copy(src.ptr(), dst.ptr(), len) };
    }))
}

/// Allocates `bytes` of `kind` on device `ordinal` (`None`: the current context's) and writes
/// what `value` makes of its address through `out`.
/// Nothing is allocated when `out` is NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn allocate_into<T>(
    kind: Kind,
    bytes: usize,
    ordinal: Option<i32>,
    out: *mut T,
    value: impl FnOnce(usize) -> T,
) -> Outcome {
    if out.is_null() {
        return Err(invalid("a NULL output pointer"));
    }
    let at = state()?.allocate(kind, bytes, ordinal)?;
    // SAFETY: `out` is not NULL, and valid for a write (the caller's contract).
    unsafe { put(out, value(at)) }
}

// ---------------------------------------------------------------------------------------------
// Initialisation, errors, devices and contexts.

/// `cuInit`.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(flags: c_uint) -> CUresult {
    entry("cuInit", || {
        if flags != 0 {
            return Err(invalid(format!("flags {flags}; expected 0")));
        }
        lock(&driver().state).initialised = true;
        Ok(())
    })
}

fn error_text(code: c_uint) -> Option<(&'static CStr, &'static CStr)> {
    let (name, text): (&CStr, &CStr) = match code {
        0 => (c"CUDA_SUCCESS", c"no error"),
        1 => (c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
        2 => (c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
        3 => (c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
        101 => (c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
        201 => (c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
        400 => (c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
        600 => (c"CUDA_ERROR_NOT_READY", c"device not ready"),
        801 => (c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
        999 => (c"CUDA_ERROR_UNKNOWN", c"unknown error"),
        _ => return None,
    };
    Some((name, text))
}

/// `cuGetErrorString`.
///
/// # Safety
/// `text` is valid for a write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(error: c_uint, text: *mut *const c_char) -> CUresult {
    let found = error_text(error);
    // SAFETY: the caller's contract.
    unsafe { put(text, found.map_or(ptr::null(), |(_, t)| t.as_ptr())) }.map_or(
        CUDA_ERROR_INVALID_VALUE,
        |()| match found {
            Some(_) => CUDA_SUCCESS,
            None => CUDA_ERROR_INVALID_VALUE,
        },
    )
}

/// `cuGetErrorName`.
///
/// # Safety
/// `name` is valid for a write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(error: c_uint, name: *mut *const c_char) -> CUresult {
    let found = error_text(error);
    // SAFETY: the caller's contract.
    unsafe { put(name, found.map_or(ptr::null(), |(n, _)| n.as_ptr())) }.map_or(
        CUDA_ERROR_INVALID_VALUE,
        |()| match found {
            Some(_) => CUDA_SUCCESS,
            None => CUDA_ERROR_INVALID_VALUE,
        },
    )
}

/// `cuDeviceGetCount`.
///
/// # Safety
/// `count` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    entry("cuDeviceGetCount", || {
        let devices = state()?.devices.len() as c_int;
        // SAFETY: the caller's contract.
        unsafe { put(count, devices) }
    })
}

/// `cuDeviceGet`: device `n` is `n`.
///
/// # Safety
/// `device` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    entry("cuDeviceGet", || {
        state()?.device(ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { put(device, ordinal) }
    })
}

/// `cuDeviceGetAttribute`, for the attributes cudarc asks about; any other is refused, so that
/// a new question shows up.
///
/// # Safety
/// `value` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    device: CUdevice,
) -> CUresult {
    entry("cuDeviceGetAttribute", || {
        let state = state()?;
        state.device(device)?;
        let answer = match attribute {
            DEVICE_UNIFIED_ADDRESSING
            | DEVICE_MANAGED_MEMORY
            | DEVICE_CONCURRENT_MANAGED_ACCESS => 1,
            DEVICE_MEMORY_POOLS_SUPPORTED => c_int::from(state.memory_pools),
            other => return Err(invalid(format!("device attribute {other} is not modelled"))),
        };
        // SAFETY: the caller's contract.
        unsafe { put(value, answer) }
    })
}

/// `cuDevicePrimaryCtxRetain`.
///
/// # Safety
/// `context` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(
    context: *mut CUcontext,
    device: CUdevice,
) -> CUresult {
    entry("cuDevicePrimaryCtxRetain", || {
        let mut state = state()?;
        let n = state.device(device)?;
        let handle = ptr::without_provenance_mut(CONTEXT_BASE + n * CONTEXT_STEP);
        // SAFETY: the caller's contract.
        unsafe { put(context, handle) }?;
        state.devices[n].retained += 1;
        Ok(())
    })
}

/// `cuDevicePrimaryCtxRelease_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> CUresult {
    entry("cuDevicePrimaryCtxRelease_v2", || {
        let mut state = state()?;
        let n = state.device(device)?;
        let retained = &mut state.devices[n].retained;
        if *retained == 0 {
            return Err(refuse(
                CUDA_ERROR_INVALID_CONTEXT,
                format!("device {n}'s primary context released more often than retained"),
            ));
        }
        if *retained > 1 {
            *retained -= 1;
            return Ok(());
        }
        // The last release destroys the context, and with it everything made in it: refused,
        // changing nothing, while any of that is alive.
        let ordinal = n as i32;
        let allocations = state
            .allocations
            .values()
            .filter(|a| a.ordinal == ordinal)
            .count();
        let streams = state
            .streams
            .values()
            .filter(|s| s.ordinal == ordinal)
            .count();
        let events = state
            .events
            .values()
            .filter(|e| e.ordinal == ordinal)
            .count();
        if allocations + streams + events > 0 {
            return Err(refuse(
                CUDA_ERROR_INVALID_CONTEXT,
                format!(
                    "device {n}'s primary context destroyed by its last release with {allocations} allocations, {streams} streams and {events} events of it still alive"
                ),
            ));
        }
        state.devices[n].retained = 0;
        Ok(())
    })
}

/// `cuCtxGetCurrent`.
///
/// # Safety
/// `context` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(context: *mut CUcontext) -> CUresult {
    entry("cuCtxGetCurrent", || {
        drop(state()?);
        let handle = ptr::without_provenance_mut(CURRENT.with(Cell::get));
        // SAFETY: the caller's contract.
        unsafe { put(context, handle) }
    })
}

/// `cuCtxSetCurrent` (NULL: none).
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(context: CUcontext) -> CUresult {
    entry("cuCtxSetCurrent", || {
        let state = state()?;
        let handle = context.addr();
        if handle != 0 && state.context_device(handle).is_none() {
            return Err(refuse(
                CUDA_ERROR_INVALID_CONTEXT,
                format!("context {handle:#x}"),
            ));
        }
        CURRENT.with(|current| current.set(handle));
        Ok(())
    })
}

/// `cuCtxSynchronize`: waits for every stream of the current context's device.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    entry("cuCtxSynchronize", || {
        let streams = {
            let state = state()?;
            let device = state.current()? as i32;
            driver()
                .calls
                .context_synchronizations
                .fetch_add(1, Ordering::Relaxed);
            state
                .all_streams()
                .into_iter()
                .filter(|s| s.ordinal == device)
                .collect::<Vec<_>>()
        };
        streams.iter().try_for_each(|s| s.finish())
    })
}

// ---------------------------------------------------------------------------------------------
// Pointer attributes.

/// A pointer attribute's value, in the C type the driver writes for it.
enum Answer {
    /// `CUmemorytype`, and the `IS_MANAGED` boolean (an `unsigned int`).
    U32(u32),
    /// The device ordinal.
    Int(c_int),
    /// A context handle.
    Handle(usize),
    /// A `CUdeviceptr`.
    Address(CUdeviceptr),
    /// A `size_t`.
    Size(usize),
}

impl Answer {
    /// Writes the value through `out`.
    ///
    /// # Safety
    /// `out` is NULL or valid for a write of the value's C type.
    unsafe fn write(self, out: *mut c_void) -> Outcome {
        // SAFETY: the caller's contract, for the type each arm writes.
        unsafe {
            match self {
                Answer::U32(v) => put(out.cast::<u32>(), v),
                Answer::Int(v) => put(out.cast::<c_int>(), v),
                Answer::Handle(v) => put(out.cast::<CUcontext>(), ptr::without_provenance_mut(v)),
                Answer::Address(v) => put(out.cast::<CUdeviceptr>(), v),
                Answer::Size(v) => put(out.cast::<usize>(), v),
            }
        }
    }
}

/// `cuPointerGetAttributes`: memory type, managed or not, device, context, device pointer and
/// range of any byte of a live allocation; for an address this driver did not allocate, zeros
/// and the device ordinal -2 (the real driver's answer for pageable memory). Other attributes are refused, so that a new
/// question shows up.
///
/// # Safety
/// `attributes` and `data` hold `count` entries; each data pointer is valid for a write of its
/// attribute's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttributes(
    count: c_uint,
    attributes: *const c_uint,
    data: *const *mut c_void,
    address: CUdeviceptr,
) -> CUresult {
    {
        let state = lock(&driver().state);
        if state.initialised && state.attributes_need_context && state.current().is_err() {
            // A driver's answer, not a misuse: not counted as a refusal.
            driver()
                .calls
                .context_less_pointer_queries
                .fetch_add(1, Ordering::Relaxed);
            return CUDA_ERROR_INVALID_CONTEXT;
        }
        let asks_range = !attributes.is_null()
            && (0..count as usize).any(|i| {
                // SAFETY: `attributes` holds `count` entries (the caller's contract).
                let attribute = unsafe { *attributes.add(i) };
                matches!(attribute, ATTRIBUTE_RANGE_START_ADDR | ATTRIBUTE_RANGE_SIZE)
            });
        if state.initialised
            && state.host_ranges_refused
            && asks_range
            && state
                .allocation_at(address as usize)
                .is_some_and(|(_, a)| a.kind == Kind::Pinned)
        {
            // A driver's answer, not a misuse: not counted as a refusal.
            driver()
                .calls
                .host_range_refusals
                .fetch_add(1, Ordering::Relaxed);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    entry("cuPointerGetAttributes", || {
        if attributes.is_null() || data.is_null() {
            return Err(invalid("NULL attribute or data array"));
        }
        let state = state()?;
        let found = state.allocation_at(address as usize);
        for i in 0..count as usize {
            // SAFETY: both arrays hold `count` entries (the caller's contract).
            let (attribute, out) = unsafe { (*attributes.add(i), *data.add(i)) };
            let answer = match (attribute, found) {
                (ATTRIBUTE_MEMORY_TYPE, found) => Answer::U32(match found.map(|(_, a)| a.kind) {
                    None => 0,
                    Some(Kind::Pinned) => MEMORY_TYPE_HOST,
                    Some(Kind::Device | Kind::Managed) => MEMORY_TYPE_DEVICE,
                }),
                (ATTRIBUTE_IS_MANAGED, found) => Answer::U32(u32::from(
                    found.is_some_and(|(_, a)| a.kind == Kind::Managed),
                )),
                // -2 (CU_DEVICE_INVALID) for an unknown pointer, as the real driver answers
                // (NVIDIA/cuda-python#1336).
                (ATTRIBUTE_DEVICE_ORDINAL, found) => {
                    Answer::Int(found.map_or(-2, |(_, a)| a.ordinal))
                }
                (ATTRIBUTE_CONTEXT, found) => Answer::Handle(
                    found.map_or(0, |(_, a)| CONTEXT_BASE + a.ordinal as usize * CONTEXT_STEP),
                ),
                (ATTRIBUTE_DEVICE_POINTER, found) => Answer::Address(found.map_or(0, |_| address)),
                (ATTRIBUTE_RANGE_START_ADDR, found) => {
                    Answer::Address(found.map_or(0, |(start, _)| start as CUdeviceptr))
                }
                (ATTRIBUTE_RANGE_SIZE, found) => Answer::Size(found.map_or(0, |(_, a)| a.size)),
                (other, _) => {
                    return Err(invalid(format!(
                        "pointer attribute {other} is not modelled"
                    )));
                }
            };
            // SAFETY: `out` is valid for a write of the attribute's type (the caller's
            // contract), which is the type each answer is written as.
            unsafe { answer.write(out) }?;
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Streams and events.

/// `cuStreamCreate` in the current context (flags 0 or `CU_STREAM_NON_BLOCKING`).
///
/// # Safety
/// `stream` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CUresult {
    entry("cuStreamCreate", || {
        if flags > 1 {
            return Err(invalid(format!("stream flags {flags}")));
        }
        let mut state = state()?;
        let device = state.current()?;
        let created = Stream::new(device as i32)?;
        let handle = state.handle();
        // SAFETY: the caller's contract.
        unsafe { put(stream, ptr::without_provenance_mut(handle)) }?;
        state.streams.insert(handle, created);
        Ok(())
    })
}

/// `cuStreamDestroy_v2`: work already queued still runs.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(stream: CUstream) -> CUresult {
    entry("cuStreamDestroy_v2", || {
        let mut state = state()?;
        let stream = state.streams.remove(&stream.addr()).ok_or_else(|| {
            refuse(
                CUDA_ERROR_INVALID_HANDLE,
                format!("stream {:#x}", stream.addr()),
            )
        })?;
        stream.close();
        state.closed.push(stream);
        Ok(())
    })
}

/// `cuStreamSynchronize`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize(stream: CUstream) -> CUresult {
    entry("cuStreamSynchronize", || {
        let stream = state()?.stream(stream)?;
        stream.finish()
    })
}

/// `cuStreamWaitEvent`: later work on `stream` waits for the event's last recording.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint) -> CUresult {
    entry("cuStreamWaitEvent", || {
        if flags != 0 {
            return Err(invalid(format!("wait flags {flags}")));
        }
        let (stream, event) = {
            let mut state = state()?;
            (state.stream(stream)?, state.event(event)?)
        };
        // An event never recorded is complete: nothing to wait for.
        if let Some(recording) = event.latest() {
            stream.push(Box::new(move || recording.wait()))?;
        }
        driver().calls.stream_waits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
}

/// `cuLaunchHostFunc`: runs `function(data)` in stream order.
#[unsafe(no_mangle)]
pub extern "C" fn cuLaunchHostFunc(
    stream: CUstream,
    function: CUhostFn,
    data: *mut c_void,
) -> CUresult {
    entry("cuLaunchHostFunc", || {
        let function = function.ok_or_else(|| invalid("a NULL host function"))?;
        let stream = state()?.stream(stream)?;
        let data = data.expose_provenance();
        stream.push(Box::new(move || {
            // SAFETY: the caller hands `data` to `function` in stream order, as the driver does.
            unsafe { function(ptr::with_exposed_provenance_mut(data)) }
        }))
    })
}

/// `cuEventCreate` in the current context.
///
/// # Safety
/// `event` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CUresult {
    entry("cuEventCreate", || {
        if flags & !0xf != 0 {
            return Err(invalid(format!("event flags {flags:#x}")));
        }
        let mut state = state()?;
        let device = state.current()?;
        let handle = state.handle();
        // SAFETY: the caller's contract.
        unsafe { put(event, ptr::without_provenance_mut(handle)) }?;
        state.events.insert(
            handle,
            Arc::new(Event {
                ordinal: device as i32,
                latest: Mutex::new(None),
            }),
        );
        Ok(())
    })
}

/// `cuEventRecord`: the event and the stream must belong to the same device's context.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord(event: CUevent, stream: CUstream) -> CUresult {
    entry("cuEventRecord", || {
        let (stream, event) = {
            let mut state = state()?;
            (state.stream(stream)?, state.event(event)?)
        };
        if stream.ordinal != event.ordinal {
            return Err(refuse(
                CUDA_ERROR_INVALID_HANDLE,
                format!(
                    "an event of device {} recorded on a stream of device {}",
                    event.ordinal, stream.ordinal
                ),
            ));
        }
        let recording = Arc::new(Completion::default());
        let reached = recording.clone();
        stream.push(Box::new(move || reached.reach()))?;
        // Only a recording that is queued becomes the one waits and queries concern.
        *lock(&event.latest) = Some(recording);
        driver().calls.event_records.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
}

/// `cuEventQuery`: `CUDA_ERROR_NOT_READY` until the last recording is reached.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventQuery(event: CUevent) -> CUresult {
    let event = match state().and_then(|state| state.event(event)) {
        Ok(event) => event,
        Err(refusal) => return entry("cuEventQuery", || Err(refusal)),
    };
    if event
        .latest()
        .is_none_or(|recording| recording.is_reached())
    {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_NOT_READY
    }
}

/// `cuEventSynchronize`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventSynchronize(event: CUevent) -> CUresult {
    entry("cuEventSynchronize", || {
        let event = state()?.event(event)?;
        if let Some(recording) = event.latest() {
            recording.wait();
        }
        Ok(())
    })
}

/// `cuEventDestroy_v2`: waits queued on the event stay in force.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy_v2(event: CUevent) -> CUresult {
    entry("cuEventDestroy_v2", || {
        state()?
            .events
            .remove(&event.addr())
            .map(drop)
            .ok_or_else(|| {
                refuse(
                    CUDA_ERROR_INVALID_HANDLE,
                    format!("event {:#x}", event.addr()),
                )
            })
    })
}

// ---------------------------------------------------------------------------------------------
// Memory.

/// `cuMemAlloc_v2`: device memory of the current context's device.
///
/// # Safety
/// `address` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(address: *mut CUdeviceptr, bytes: usize) -> CUresult {
    entry("cuMemAlloc_v2", || {
        // SAFETY: the caller's contract.
        unsafe { allocate_into(Kind::Device, bytes, None, address, |at| at as CUdeviceptr) }
    })
}

/// `cuMemAllocAsync`: device memory of the stream's device, usable at once (stream order is
/// kept by the caller).
///
/// # Safety
/// `address` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(
    address: *mut CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    entry("cuMemAllocAsync", || {
        // From the pool of the stream's device.
        let ordinal = {
            let mut state = state()?;
            if !state.memory_pools {
                return Err(refuse(
                    CUresult::CUDA_ERROR_NOT_SUPPORTED,
                    "memory pools are switched off (DLPACK_CUDA_TEST_DRIVER_POOLS=0)",
                ));
            }
            state.stream(stream)?.ordinal
        };
        // SAFETY: the caller's contract.
        unsafe {
            allocate_into(Kind::Device, bytes, Some(ordinal), address, |at| {
                at as CUdeviceptr
            })
        }
    })
}

/// `cuMemAllocManaged` (flags `CU_MEM_ATTACH_GLOBAL` or `CU_MEM_ATTACH_HOST`).
///
/// # Safety
/// `address` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    address: *mut CUdeviceptr,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    entry("cuMemAllocManaged", || {
        if flags != 1 && flags != 2 {
            return Err(invalid(format!("managed memory flags {flags}")));
        }
        // SAFETY: the caller's contract.
        unsafe { allocate_into(Kind::Managed, bytes, None, address, |at| at as CUdeviceptr) }
    })
}

/// `cuMemHostAlloc`: pinned host memory.
///
/// # Safety
/// `address` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(
    address: *mut *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    entry("cuMemHostAlloc", || {
        if flags & !0x7 != 0 {
            return Err(invalid(format!("host allocation flags {flags:#x}")));
        }
        // SAFETY: the caller's contract. The address is the backing's, whose provenance
        // `allocate` exposed.
        unsafe {
            allocate_into(
                Kind::Pinned,
                bytes,
                None,
                address,
                ptr::with_exposed_provenance_mut,
            )
        }
    })
}

/// `cuMemFree_v2`: device or managed memory.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(address: CUdeviceptr) -> CUresult {
    entry("cuMemFree_v2", || {
        let backing = state()?.free(address as usize, &[Kind::Device, Kind::Managed])?;
        backing.freed.store(true, Ordering::Release);
        Ok(())
    })
}

/// `cuMemFreeAsync`: the address is invalid for later calls at once, and the bytes are freed
/// when the stream gets to the free: work of other streams that reaches them after that is
/// refused.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeAsync(address: CUdeviceptr, stream: CUstream) -> CUresult {
    entry("cuMemFreeAsync", || {
        let mut state = state()?;
        let stream = state.stream(stream)?;
        let backing = state.free(address as usize, &[Kind::Device])?;
        stream.push(Box::new(move || {
            backing.freed.store(true, Ordering::Release)
        }))
    })
}

/// `cuMemFreeHost`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeHost(address: *mut c_void) -> CUresult {
    entry("cuMemFreeHost", || {
        let backing = state()?.free(address.addr(), &[Kind::Pinned])?;
        backing.freed.store(true, Ordering::Release);
        Ok(())
    })
}

/// `cuMemsetD8Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8Async(
    address: CUdeviceptr,
    value: u8,
    count: usize,
    stream: CUstream,
) -> CUresult {
    entry("cuMemsetD8Async", || {
        let (stream, place) = {
            let mut state = state()?;
            (state.stream(stream)?, state.memory(address, count)?)
        };
        stream.push(Box::new(move || {
            if place.is_freed() {
                refuse_later(&format!(
                    "a memset of {count} bytes reached memory freed before the stream got to it"
                ));
                return;
            }
            // SAFETY: the place holds `count` bytes (checked above) and is kept alive here.
            unsafe { place.ptr().write_bytes(value, count) }
        }))
    })
}

/// `cuMemcpyHtoDAsync_v2`. From pageable memory the bytes are read now (the real driver stages
/// them before it returns); from pinned or managed memory, in stream order.
///
/// # Safety
/// `src` is valid for reads of `bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    entry("cuMemcpyHtoDAsync_v2", || {
        let mut state = state()?;
        let stream = state.stream(stream)?;
        if bytes == 0 {
            return Ok(());
        }
        let to = state.memory(dst, bytes)?;
        let from = match state.host(src.addr(), bytes)? {
            Some(place) => place,
            None => {
                let staged = Backing::new(bytes, 16)?;
                // SAFETY: `staged` holds `bytes` bytes; the source too (the caller's contract).
                unsafe { ptr::copy_nonoverlapping(src.cast::<u8>(), staged.ptr.as_ptr(), bytes) };
                Place::Memory(staged, 0)
            }
        };
        drop(state);
        queue_copy(&stream, from, to, bytes)
    })
}

/// `cuMemcpyDtoHAsync_v2`. To pageable memory it returns when the copy is done (as the real
/// driver does); to pinned or managed memory it is queued.
///
/// # Safety
/// `dst` is valid for writes of `bytes` bytes until the copy is done.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    entry("cuMemcpyDtoHAsync_v2", || {
        let mut state = state()?;
        let stream = state.stream(stream)?;
        if bytes == 0 {
            return Ok(());
        }
        let from = state.memory(src, bytes)?;
        let (to, pageable) = match state.host(dst.addr(), bytes)? {
            Some(place) => (place, false),
            None => (Place::Host(dst.expose_provenance()), true),
        };
        drop(state);
        queue_copy(&stream, from, to, bytes)?;
        if pageable { stream.finish() } else { Ok(()) }
    })
}

/// `cuMemcpyDtoDAsync_v2`: both ranges inside live allocations, not overlapping.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    entry("cuMemcpyDtoDAsync_v2", || {
        state()?.stream(stream)?;
        if bytes == 0 {
            return Ok(());
        }
        let (dst_end, src_end) = (
            dst.saturating_add(bytes as u64),
            src.saturating_add(bytes as u64),
        );
        if dst < src_end && src < dst_end {
            return Err(invalid(format!(
                "overlapping copy of {bytes} bytes from {src:#x} to {dst:#x}"
            )));
        }
        let mut state = state()?;
        let stream = state.stream(stream)?;
        let from = state.memory(src, bytes)?;
        let to = state.memory(dst, bytes)?;
        drop(state);
        queue_copy(&stream, from, to, bytes)
    })
}

// ---------------------------------------------------------------------------------------------
// Test support.

/// What [`dlpack_cuda_test_driver_live`] reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveObjects {
    /// Live device allocations.
    pub device_allocations: u64,
    /// Live pinned host allocations.
    pub pinned_allocations: u64,
    /// Live managed allocations.
    pub managed_allocations: u64,
    /// Streams created and not destroyed (the default streams not counted).
    pub streams: u64,
    /// Events created and not destroyed.
    pub events: u64,
    /// Primary context retains not released, over all devices.
    pub context_retains: u64,
    /// Calls refused since the library was loaded (each printed on stderr).
    pub refused: u64,
}

/// Counts the live objects and the refused calls into `out`, whose size the caller passes (a
/// check that both sides agree on the struct): -1 for a NULL `out` or another size, else 0.
///
/// # Safety
/// `out` is NULL or valid for a write of `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlpack_cuda_test_driver_live(out: *mut LiveObjects, size: usize) -> c_int {
    if out.is_null() || size != size_of::<LiveObjects>() {
        return -1;
    }
    let state = lock(&driver().state);
    let count = |kind| {
        state
            .allocations
            .values()
            .filter(|a| a.kind == kind)
            .count() as u64
    };
    let live = LiveObjects {
        device_allocations: count(Kind::Device),
        pinned_allocations: count(Kind::Pinned),
        managed_allocations: count(Kind::Managed),
        streams: state.streams.len() as u64,
        events: state.events.len() as u64,
        context_retains: state.devices.iter().map(|d| u64::from(d.retained)).sum(),
        refused: driver().refused.load(Ordering::Relaxed),
    };
    // SAFETY: not NULL, and valid for a write of the struct (the caller's contract and the
    // size check).
    unsafe { out.write(live) };
    0
}

/// What [`dlpack_cuda_test_driver_calls`] reports: calls counted since the library was loaded.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// `cuEventRecord` calls that queued a recording.
    pub event_records: u64,
    /// `cuStreamWaitEvent` calls that succeeded.
    pub stream_waits: u64,
    /// `cuCtxSynchronize` calls.
    pub context_synchronizations: u64,
    /// `cuPointerGetAttributes` calls answered `CUDA_ERROR_INVALID_CONTEXT` for want of a
    /// current context (only with `DLPACK_CUDA_TEST_DRIVER_ATTRIBUTES_NEED_CONTEXT=1`).
    pub context_less_pointer_queries: u64,
    /// `cuPointerGetAttributes` calls answered `CUDA_ERROR_INVALID_VALUE` because they asked
    /// pinned memory for its range (only with `DLPACK_CUDA_TEST_DRIVER_HOST_RANGES=0`).
    pub host_range_refusals: u64,
}

/// Counts calls that leave no object behind, into `out` of `size` bytes: -1 for a NULL `out` or
/// another size, else 0.
///
/// # Safety
/// `out` is NULL or valid for a write of `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlpack_cuda_test_driver_calls(out: *mut CallCounts, size: usize) -> c_int {
    if out.is_null() || size != size_of::<CallCounts>() {
        return -1;
    }
    let calls = &driver().calls;
    let counts = CallCounts {
        event_records: calls.event_records.load(Ordering::Relaxed),
        stream_waits: calls.stream_waits.load(Ordering::Relaxed),
        context_synchronizations: calls.context_synchronizations.load(Ordering::Relaxed),
        context_less_pointer_queries: calls.context_less_pointer_queries.load(Ordering::Relaxed),
        host_range_refusals: calls.host_range_refusals.load(Ordering::Relaxed),
    };
    // SAFETY: as in `dlpack_cuda_test_driver_live`.
    unsafe { out.write(counts) };
    0
}

/// Waits until every stream has run the work queued on it so far.
#[unsafe(no_mangle)]
pub extern "C" fn dlpack_cuda_test_driver_settle() {
    let (live, closed) = {
        let mut state = lock(&driver().state);
        (state.all_streams(), std::mem::take(&mut state.closed))
    };
    for stream in live {
        let _ = stream.finish();
    }
    for stream in closed {
        stream.join();
    }
}
