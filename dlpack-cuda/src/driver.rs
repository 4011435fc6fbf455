//! The CUDA driver calls this crate makes, behind a small trait, and the guarded loading of
//! libcuda.
//!
//! Everything the hooks decide (which memory kind a pointer is, which stream waits on which,
//! when an event is destroyed) is written against [`Driver`]. [`CudaDriver`] implements it over
//! cudarc's raw `sys` bindings; the tests implement it over host memory, so the decisions are
//! checked on machines without a GPU.
//!
//! # Loading without panicking
//!
//! cudarc 0.19 with `dynamic-loading` opens libcuda on the first driver call and panics when
//! the library is missing (`sys::culib`), and panics again when a symbol is missing (each
//! function's loader). This crate never lets either happen: [`cuda_driver`] first asks
//! `sys::is_culib_present` (which only tries to open the library), then looks up every symbol
//! that this crate or the cudarc calls it makes can reach ([`REQUIRED_SYMBOLS`]), then calls
//! `cuInit`. Only when all three succeed is any other driver function called, so both panics are
//! unreachable without a `catch_unwind`. The outcome is cached for the life of the process.
//!
//! One cudarc panic depends on the driver's state rather than on loading: `upgrade_device_ptr`
//! unwraps the creation of two events. [`upgrade_device_ptr`] (this crate's) asks for an event
//! first, so the usual failure comes back as an error value, and catches the panic of the rare
//! race that remains (another thread recording an error in the context in between). Under
//! `panic = "abort"` that race aborts.

use core::ffi::c_void;
use core::ptr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError};
use cudarc::driver::{result, sys};
use dlpack_core::Error;

/// The `runtime` named in [`Error::Runtime`] by this crate.
pub(crate) const RUNTIME: &str = "CUDA driver";

/// `CU_STREAM_LEGACY`: the legacy default stream of the current context.
pub(crate) const STREAM_LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD`: the per-thread default stream of the current context.
pub(crate) const STREAM_PER_THREAD: usize = 0x2;

/// `CUmemorytype` values, read as plain integers: the driver may report values (0 for a pointer
/// it does not know) that cudarc's Rust enum does not have.
pub(crate) mod memory_type {
    /// The driver does not know the pointer (pageable host memory, or garbage).
    pub(crate) const UNKNOWN: u32 = 0;
    /// `CU_MEMORYTYPE_HOST`: page-locked host memory.
    pub(crate) const HOST: u32 = 1;
    /// `CU_MEMORYTYPE_DEVICE`.
    pub(crate) const DEVICE: u32 = 2;
    /// `CU_MEMORYTYPE_ARRAY`: an opaque CUDA array, not linear memory.
    pub(crate) const ARRAY: u32 = 3;
    /// `CU_MEMORYTYPE_UNIFIED`.
    pub(crate) const UNIFIED: u32 = 4;
}

/// What `cuPointerGetAttributes` says about one address.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct PointerAttributes {
    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` ([`memory_type`]).
    pub(crate) memory_type: u32,
    /// `CU_POINTER_ATTRIBUTE_IS_MANAGED`.
    pub(crate) is_managed: bool,
    /// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`.
    pub(crate) ordinal: i32,
    /// `CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`: the allocation's first byte.
    pub(crate) range_start: usize,
    /// `CU_POINTER_ATTRIBUTE_RANGE_SIZE`: the allocation's size in bytes (0: unknown).
    pub(crate) range_size: usize,
}

/// Where work is queued: a stream, or (`stream: None`) the legacy default stream of device
/// `ordinal`'s primary context.
pub(crate) struct Queue<'a, S> {
    /// The device whose context the calls run in.
    pub(crate) ordinal: i32,
    /// The stream, if one is configured for the device.
    pub(crate) stream: Option<&'a S>,
}

impl<S> Clone for Queue<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Queue<'_, S> {}

/// The driver operations the hooks are written against.
pub(crate) trait Driver: Send + Sync {
    /// A stream this side queues its work on.
    type Stream: Send + Sync;
    /// An event handle.
    type Event: Copy;

    /// The device a stream belongs to.
    fn stream_ordinal(&self, stream: &Self::Stream) -> i32;
    /// The raw `CUstream` value of a stream (0 is the null stream).
    fn stream_handle(&self, stream: &Self::Stream) -> usize;
    /// `cuPointerGetAttributes` for `address`.
    fn pointer_attributes(&self, address: usize) -> Result<PointerAttributes, Error>;
    /// `cuEventCreate` (timing disabled) in the queue's context.
    fn create_event(&self, queue: Queue<'_, Self::Stream>) -> Result<Self::Event, Error>;
    /// `cuEventRecord` on `stream` (a raw handle: the queue's own, or a producer's; 1 and 2
    /// mean the default streams of the queue's context, which is current for the call).
    ///
    /// # Safety
    /// `stream` is 1, 2, or a live stream of the queue's context.
    unsafe fn record_event(
        &self,
        queue: Queue<'_, Self::Stream>,
        stream: usize,
        event: Self::Event,
    ) -> Result<(), Error>;
    /// `cuStreamWaitEvent(consumer, event)`, with the queue's context current (so that the
    /// consumer values 1 and 2 mean that device's default streams).
    fn wait_event(
        &self,
        queue: Queue<'_, Self::Stream>,
        consumer: usize,
        event: Self::Event,
    ) -> Result<(), Error>;
    /// `cuEventDestroy`; a pending wait on the event stays in force.
    fn destroy_event(
        &self,
        queue: Queue<'_, Self::Stream>,
        event: Self::Event,
    ) -> Result<(), Error>;
    /// `cuStreamSynchronize` on the queue.
    fn synchronize(&self, queue: Queue<'_, Self::Stream>) -> Result<(), Error>;
    /// Copies `dst.len()` bytes from `src` on the queue and waits for the copy.
    ///
    /// # Safety
    /// `src..src + dst.len()` is memory the driver knows, valid for reads during the call.
    unsafe fn copy_to_host(
        &self,
        queue: Queue<'_, Self::Stream>,
        src: usize,
        dst: &mut [u8],
    ) -> Result<(), Error>;
    /// Copies `src` to `dst` on the queue and waits for the copy.
    ///
    /// # Safety
    /// `dst..dst + src.len()` is memory the driver knows, valid for writes and used by no one
    /// else during the call.
    unsafe fn copy_from_host(
        &self,
        queue: Queue<'_, Self::Stream>,
        src: &[u8],
        dst: usize,
    ) -> Result<(), Error>;
    /// Copies `bytes` bytes from `src` to `dst`, both memory the driver knows, on the queue, and
    /// waits for the copy.
    ///
    /// # Safety
    /// `src..src + bytes` is valid for reads and `dst..dst + bytes` valid for writes and used by
    /// no one else during the call; the two do not overlap.
    unsafe fn copy_on_device(
        &self,
        queue: Queue<'_, Self::Stream>,
        src: usize,
        dst: usize,
        bytes: usize,
    ) -> Result<(), Error>;
}

/// An [`Error::Runtime`] of the CUDA driver.
pub(crate) fn runtime_error(message: impl Into<String>) -> Error {
    Error::Runtime {
        runtime: RUNTIME,
        message: message.into(),
    }
}

/// An [`Error::Runtime`] for a failed driver call: `"{call} failed: CUDA_ERROR_X (text)"`.
pub(crate) fn driver_error(call: &str, error: DriverError) -> Error {
    let text = match error.error_string() {
        Ok(text) => text.to_string_lossy().into_owned(),
        Err(_) => "no description".to_owned(),
    };
    runtime_error(format!("{call} failed: {:?} ({text})", error.0))
}

/// `CUresult` to `Result`, naming the call in the error.
fn check(result: sys::CUresult, call: &str) -> Result<(), Error> {
    result.result().map_err(|e| driver_error(call, e))
}

/// Every libcuda symbol this crate calls, directly or through the cudarc functions it uses
/// (context, stream, event and allocation management). All exist in every driver since CUDA
/// 11.4, the oldest version cudarc supports.
pub(crate) const REQUIRED_SYMBOLS: &[&str] = &[
    "cuGetErrorString",
    "cuGetErrorName",
    "cuInit",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuPointerGetAttributes",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuStreamCreate",
    "cuStreamWaitEvent",
    "cuStreamSynchronize",
    "cuStreamDestroy_v2",
    "cuMemAlloc_v2",
    "cuMemAllocAsync",
    "cuMemFree_v2",
    "cuMemFreeAsync",
    "cuMemAllocManaged",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemsetD8Async",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
];

/// How [`load`] reaches libcuda; a trait so that tests can stand in a missing library.
pub(crate) trait Library {
    /// Whether the shared library can be opened.
    fn present(&self) -> bool;
    /// Whether the (present) library exports `symbol`.
    fn has_symbol(&self, symbol: &str) -> bool;
    /// `cuInit(0)`.
    fn init(&self) -> Result<(), Error>;
    /// The file names searched for the library, for the error message.
    fn candidates(&self) -> Vec<String>;
}

/// The real libcuda, through cudarc's loader.
struct SystemLibrary;

/// With cudarc opening libcuda at run time (this crate's default).
#[cfg(not(feature = "dynamic-linking"))]
impl Library for SystemLibrary {
    fn present(&self) -> bool {
        // SAFETY: opening libcuda runs the NVIDIA driver's library initialisers, which are made
        // to run in any process; the handle is closed again at once. This is the check cudarc
        // itself offers for this purpose.
        unsafe { sys::is_culib_present() }
    }

    fn has_symbol(&self, symbol: &str) -> bool {
        // SAFETY: `present` returned true, so `culib` finds the library instead of panicking
        // (it searches the same names). Looking a symbol up only reads the library's symbol
        // table; the pointer type is never used to call anything.
        unsafe { sys::culib().get::<*const c_void>(symbol).is_ok() }
    }

    fn init(&self) -> Result<(), Error> {
        // SAFETY: the library and the `cuInit` symbol are present (checked before `init` is
        // called); `cuInit` takes only a flags word, which must be 0.
        check(unsafe { sys::cuInit(0) }, "cuInit")
    }

    fn candidates(&self) -> Vec<String> {
        cudarc::get_lib_name_candidates("cuda")
    }
}

/// With libcuda linked into the program (feature `dynamic-linking`): the dynamic linker loaded
/// it, and resolved every driver function the program calls, before `main` ran (Rust links
/// with `-z now`; a missing library or symbol stops the program from starting), so only
/// `cuInit` can still fail.
#[cfg(feature = "dynamic-linking")]
impl Library for SystemLibrary {
    fn present(&self) -> bool {
        true
    }

    fn has_symbol(&self, _symbol: &str) -> bool {
        true
    }

    fn init(&self) -> Result<(), Error> {
        // SAFETY: libcuda is linked into the program; `cuInit` takes only a flags word, which
        // must be 0.
        check(unsafe { sys::cuInit(0) }, "cuInit")
    }

    fn candidates(&self) -> Vec<String> {
        vec!["libcuda.so.1 (linked into the program)".to_owned()]
    }
}

/// Checks that libcuda can be opened, has every symbol in [`REQUIRED_SYMBOLS`] and
/// initialises. Until this succeeded no other driver function may be called.
pub(crate) fn load(library: &dyn Library) -> Result<(), Error> {
    if !library.present() {
        let mut names = library.candidates();
        let mut seen = std::collections::HashSet::new();
        names.retain(|name| seen.insert(name.clone()));
        return Err(runtime_error(format!(
            "libcuda could not be loaded (searched {} names: {}); expected an NVIDIA driver installed where the dynamic linker finds it (LD_LIBRARY_PATH)",
            names.len(),
            names.join(", ")
        )));
    }
    if let Some(missing) = REQUIRED_SYMBOLS
        .iter()
        .find(|symbol| !library.has_symbol(symbol))
    {
        return Err(runtime_error(format!(
            "libcuda lacks the symbol {missing}; expected a driver for CUDA 11.4 or newer"
        )));
    }
    library.init()
}

/// The process-wide driver, loaded on first use; an error value (the same one every time) if
/// libcuda is missing, incomplete or finds no device.
pub(crate) fn cuda_driver() -> Result<&'static CudaDriver, Error> {
    static DRIVER: OnceLock<Result<CudaDriver, Error>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            load(&SystemLibrary).map(|()| CudaDriver {
                contexts: Mutex::new(Vec::new()),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The loaded CUDA driver. Exists only once [`load`] succeeded.
#[derive(Debug)]
pub(crate) struct CudaDriver {
    /// The primary contexts this crate has retained, by ordinal (kept for the process's life).
    contexts: Mutex<Vec<Option<Arc<CudaContext>>>>,
}

impl CudaDriver {
    /// The primary context of device `ordinal`, retained on first use.
    pub(crate) fn context(&self, ordinal: usize) -> Result<Arc<CudaContext>, Error> {
        let mut contexts = self.contexts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(Some(context)) = contexts.get(ordinal) {
            return Ok(context.clone());
        }
        // cudarc passes the ordinal to cuDeviceGet as an `int`; refuse what does not fit
        // rather than let it wrap to another device.
        if i32::try_from(ordinal).is_err() {
            return Err(runtime_error(format!(
                "device ordinal {ordinal} does not fit a CUDA device index (i32)"
            )));
        }
        // cudarc makes the new context current on this thread; put back the thread's own.
        let previous =
            result::ctx::get_current().map_err(|e| driver_error("cuCtxGetCurrent", e))?;
        let context = CudaContext::new(ordinal).map_err(|e| {
            driver_error(
                &format!("opening device {ordinal} (cuDeviceGet, cuDevicePrimaryCtxRetain)"),
                e,
            )
        });
        // SAFETY: `previous` is NULL or the context that was current on this thread a moment
        // ago, which this thread still holds.
        unsafe { result::ctx::set_current(previous.unwrap_or(ptr::null_mut())) }
            .map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        let context = context?;
        // Only reached for an ordinal the driver accepted, so the table stays small.
        if contexts.len() <= ordinal {
            contexts.resize(ordinal + 1, None);
        }
        contexts[ordinal] = Some(context.clone());
        Ok(context)
    }

    /// Makes the queue's context current on this thread until the returned scope ends.
    fn bind(&self, queue: Queue<'_, Arc<CudaStream>>) -> Result<ContextScope, Error> {
        let context = match queue.stream {
            Some(stream) => stream.context().clone(),
            None => {
                let ordinal = usize::try_from(queue.ordinal).map_err(|_| {
                    runtime_error(format!(
                        "device ordinal {} is negative; expected a CUDA device index >= 0",
                        queue.ordinal
                    ))
                })?;
                self.context(ordinal)?
            }
        };
        ContextScope::enter(&context).map_err(|e| {
            driver_error(
                "making the context current (cuCtxGetCurrent, cuCtxSetCurrent)",
                e,
            )
        })
    }

    /// The raw stream of a queue.
    fn raw_stream(queue: Queue<'_, Arc<CudaStream>>) -> sys::CUstream {
        match queue.stream {
            Some(stream) => stream.cu_stream(),
            None => stream_from_handle(STREAM_LEGACY),
        }
    }

    /// Asks the driver what `address` is: its memory type, whether it is managed, its device
    /// and, with `range`, the allocation holding it (otherwise reported as unknown, size 0).
    fn query_attributes(address: usize, range: bool) -> (sys::CUresult, PointerAttributes) {
        use sys::CUpointer_attribute::{
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_IS_MANAGED,
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        };
        // Each slot is at least as large as what the driver writes for its attribute
        // (CUmemorytype: 4 bytes, IS_MANAGED: a boolean of 1 or 4 bytes, the ordinal: an int,
        // the range: a CUdeviceptr and a size_t), zeroed so that a partial write of a boolean
        // still reads as non-zero exactly when it is true.
        let mut memory_type: u32 = 0;
        let mut is_managed: u64 = 0;
        let mut ordinal: i32 = -1;
        let mut range_start: sys::CUdeviceptr = 0;
        let mut range_size: usize = 0;
        let mut attributes = [
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            CU_POINTER_ATTRIBUTE_IS_MANAGED,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        ];
        let mut data: [*mut c_void; 5] = [
            ptr::addr_of_mut!(memory_type).cast(),
            ptr::addr_of_mut!(is_managed).cast(),
            ptr::addr_of_mut!(ordinal).cast(),
            ptr::addr_of_mut!(range_start).cast(),
            ptr::addr_of_mut!(range_size).cast(),
        ];
        // The range attributes come last, so that asking for the first three leaves them out.
        let count = if range { 5 } else { 3 };
        // SAFETY: the driver is loaded (a `CudaDriver` exists only after `load`); both arrays
        // hold 5 entries, of which `count` are passed, and each data pointer points to a live
        // local large enough for its attribute (see above). The address is only looked up,
        // never dereferenced.
        let result = unsafe {
            sys::cuPointerGetAttributes(
                count,
                attributes.as_mut_ptr(),
                data.as_mut_ptr(),
                address as sys::CUdeviceptr,
            )
        };
        let attributes = PointerAttributes {
            memory_type,
            is_managed: is_managed != 0,
            ordinal,
            // A 64-bit target is required (lib.rs), so a CUdeviceptr fits usize.
            range_start: range_start as usize,
            range_size,
        };
        (result, attributes)
    }
}

/// A context made current on this thread for a while: the previous one (or none) is current
/// again when the scope ends.
///
/// ```no_run
/// use dlpack_cuda::{ContextScope, open_device};
///
/// let context = open_device(0)?;
/// {
///     let _scope = ContextScope::enter(&context).expect("cuCtxSetCurrent");
///     // ... raw driver calls that use the current context ...
/// } // the thread's own context (or none) is current again
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// The driver calls of this crate run on whatever thread asks: a consumer's thread in
/// `__dlpack__`, and for the free of a [`CudaBuffer`](crate::CudaBuffer) the thread that runs the
/// DLPack deleter, which DLPack lets be any thread. So the calls need their context current
/// there, and must leave the thread's own choice of context (the CUDA runtime of PyTorch or
/// CuPy reads it) as they found it. Not `Send`: it restores on the thread that entered it.
#[derive(Debug)]
pub struct ContextScope {
    /// The context to make current again when the scope ends (NULL: none), if this scope
    /// changed it.
    restore: Option<sys::CUcontext>,
}

impl ContextScope {
    /// Makes `context` current on this thread, if it is not already.
    ///
    /// # Errors
    ///
    /// The driver's error from `cuCtxGetCurrent` or `cuCtxSetCurrent`.
    pub fn enter(context: &CudaContext) -> Result<ContextScope, DriverError> {
        let target = context.cu_ctx();
        let previous = result::ctx::get_current()?;
        if previous == Some(target) {
            return Ok(ContextScope { restore: None });
        }
        // SAFETY: `target` is the context of a live `CudaContext`, which holds it retained.
        unsafe { result::ctx::set_current(target) }?;
        Ok(ContextScope {
            restore: Some(previous.unwrap_or(ptr::null_mut())),
        })
    }

    /// Keeps this thread's current context (or none): whatever the scope's calls make current,
    /// this one is current again when the scope ends.
    ///
    /// # Errors
    ///
    /// The driver's error from `cuCtxGetCurrent`.
    pub fn preserve() -> Result<ContextScope, DriverError> {
        let previous = result::ctx::get_current()?;
        Ok(ContextScope {
            restore: Some(previous.unwrap_or(ptr::null_mut())),
        })
    }
}

impl Drop for ContextScope {
    fn drop(&mut self) {
        if let Some(previous) = self.restore {
            // SAFETY: `previous` is NULL or the context that was current on this thread when the
            // scope began, which this thread still holds (the scope is not `Send`). A failure
            // leaves the scope's context current, which is what cudarc itself leaves behind.
            let _ = unsafe { result::ctx::set_current(previous) };
        }
    }
}

/// cudarc's `upgrade_device_ptr` (a `CudaSlice<T>` over `len` elements at `address`, on
/// `stream`), with its panic turned into an error value: with event tracking on, it unwraps the
/// creation of the slice's two events, which fails while the context holds an error that cudarc
/// recorded (a failed free, say) or when the driver has no resources left.
///
/// # Errors
///
/// [`Error::Runtime`] when the events cannot be made; nothing is allocated or freed then.
///
/// # Safety
///
/// As for `upgrade_device_ptr`: `address` is a live allocation of the stream's context with
/// room for `len` elements of `T`, whose ownership the caller settles (the slice frees it when
/// dropped unless it is leaked).
pub unsafe fn upgrade_device_ptr<T>(
    stream: &Arc<CudaStream>,
    address: sys::CUdeviceptr,
    len: usize,
) -> Result<CudaSlice<T>, Error> {
    let context = stream.context();
    if context.is_event_tracking() {
        // Asking first returns the usual failure (a recorded error) as the driver's own code.
        let probe = context
            .new_event(None)
            .map_err(|e| driver_error("creating the slice's events (cuEventCreate)", e))?;
        drop(probe);
    }
    // Another thread may record an error between the probe and cudarc's unwrap: the panic,
    // if any, stops here (the event made before it is dropped while unwinding).
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        unsafe { stream.upgrade_device_ptr::<T>(address, len) }
    }))
    .map_err(|_| {
        runtime_error(
            "creating the slice's events (cuEventCreate) failed inside cudarc, which panicked",
        )
    })
}

/// A raw stream handle as the driver takes it. Stream handles are opaque values that the driver
/// never lets Rust dereference, so they carry no provenance.
fn stream_from_handle(handle: usize) -> sys::CUstream {
    ptr::without_provenance_mut(handle)
}

impl Driver for &'static CudaDriver {
    type Stream = Arc<CudaStream>;
    type Event = sys::CUevent;

    fn stream_ordinal(&self, stream: &Arc<CudaStream>) -> i32 {
        // cudarc opened this device with `ordinal as i32`, and `context` refuses ordinals that
        // do not fit, so this is the device the stream runs on.
        stream.context().ordinal() as i32
    }

    fn stream_handle(&self, stream: &Arc<CudaStream>) -> usize {
        stream.cu_stream().addr()
    }

    fn pointer_attributes(&self, address: usize) -> Result<PointerAttributes, Error> {
        let (mut result, mut attributes) = CudaDriver::query_attributes(address, true);
        // The query wants a current context on some drivers: use device 0's and retry.
        let _current = if result == sys::CUresult::CUDA_ERROR_INVALID_CONTEXT {
            let current = self.bind(Queue {
                ordinal: 0,
                stream: None,
            })?;
            (result, attributes) = CudaDriver::query_attributes(address, true);
            Some(current)
        } else {
            None
        };
        if result != sys::CUresult::CUDA_SUCCESS {
            // The range attributes are documented for device allocations; a driver that
            // refuses them for other memory (page-locked host memory, say) still tells its
            // kind. The allocation is then unknown, and the span is checked against nothing.
            let (kind_result, kind) = CudaDriver::query_attributes(address, false);
            if kind_result == sys::CUresult::CUDA_SUCCESS {
                return Ok(kind);
            }
        }
        check(result, "cuPointerGetAttributes").map(|()| attributes)
    }

    fn create_event(&self, queue: Queue<'_, Arc<CudaStream>>) -> Result<sys::CUevent, Error> {
        let _current = self.bind(queue)?;
        let mut event: sys::CUevent = ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: a context is current; `event` is a valid place for the handle.
        let result = unsafe { sys::cuEventCreate(&mut event, flags) };
        check(result, "cuEventCreate")?;
        Ok(event)
    }

    unsafe fn record_event(
        &self,
        queue: Queue<'_, Arc<CudaStream>>,
        stream: usize,
        event: sys::CUevent,
    ) -> Result<(), Error> {
        let _current = self.bind(queue)?;
        // SAFETY: `event` is live (created by `create_event` in this queue's context, not yet
        // destroyed); `stream` is a default stream of that context, now current, or a live
        // stream of it (the caller's contract).
        let result = unsafe { sys::cuEventRecord(event, stream_from_handle(stream)) };
        check(result, "cuEventRecord")
    }

    fn wait_event(
        &self,
        queue: Queue<'_, Arc<CudaStream>>,
        consumer: usize,
        event: sys::CUevent,
    ) -> Result<(), Error> {
        let _current = self.bind(queue)?;
        // SAFETY: `event` is live. `consumer` is the stream the consumer named: 1 and 2 are the
        // current context's default streams, anything else is a stream handle that the
        // consumer vouches for, as the DLPack protocol has it (the driver may wait on an event
        // of another context or device).
        let result = unsafe { sys::cuStreamWaitEvent(stream_from_handle(consumer), event, 0) };
        check(result, "cuStreamWaitEvent")
    }

    fn destroy_event(
        &self,
        queue: Queue<'_, Arc<CudaStream>>,
        event: sys::CUevent,
    ) -> Result<(), Error> {
        let _current = self.bind(queue)?;
        // SAFETY: `event` is live and destroyed once; the driver keeps the resources of an
        // event that a stream still waits on until the wait is over.
        let result = unsafe { sys::cuEventDestroy_v2(event) };
        check(result, "cuEventDestroy")
    }

    fn synchronize(&self, queue: Queue<'_, Arc<CudaStream>>) -> Result<(), Error> {
        let _current = self.bind(queue)?;
        sync_stream(CudaDriver::raw_stream(queue))
    }

    unsafe fn copy_to_host(
        &self,
        queue: Queue<'_, Arc<CudaStream>>,
        src: usize,
        dst: &mut [u8],
    ) -> Result<(), Error> {
        if dst.is_empty() {
            return Ok(());
        }
        let _current = self.bind(queue)?;
        let stream = CudaDriver::raw_stream(queue);
        let (to, bytes) = (dst.as_mut_ptr().cast(), dst.len());
        // SAFETY: `dst` is valid for writes of its length; the source is readable memory the
        // driver knows (caller); the stream is synchronised before `dst` is released.
        let result =
            unsafe { sys::cuMemcpyDtoHAsync_v2(to, src as sys::CUdeviceptr, bytes, stream) };
        check(result, "cuMemcpyDtoHAsync")?;
        sync_stream(stream)
    }

    unsafe fn copy_from_host(
        &self,
        queue: Queue<'_, Arc<CudaStream>>,
        src: &[u8],
        dst: usize,
    ) -> Result<(), Error> {
        if src.is_empty() {
            return Ok(());
        }
        let _current = self.bind(queue)?;
        let stream = CudaDriver::raw_stream(queue);
        let (from, bytes) = (src.as_ptr().cast(), src.len());
        // SAFETY: `src` is valid for reads of its length until the synchronisation below; the
        // destination is writable memory the driver knows, used by no one else (caller).
        let result =
            unsafe { sys::cuMemcpyHtoDAsync_v2(dst as sys::CUdeviceptr, from, bytes, stream) };
        check(result, "cuMemcpyHtoDAsync")?;
        sync_stream(stream)
    }

    unsafe fn copy_on_device(
        &self,
        queue: Queue<'_, Arc<CudaStream>>,
        src: usize,
        dst: usize,
        bytes: usize,
    ) -> Result<(), Error> {
        if bytes == 0 {
            return Ok(());
        }
        let _current = self.bind(queue)?;
        let stream = CudaDriver::raw_stream(queue);
        let (to, from) = (dst as sys::CUdeviceptr, src as sys::CUdeviceptr);
        // SAFETY: both ranges are memory the driver knows, readable and writable as the caller
        // guarantees, and do not overlap.
        let result = unsafe { sys::cuMemcpyDtoDAsync_v2(to, from, bytes, stream) };
        check(result, "cuMemcpyDtoDAsync")?;
        sync_stream(stream)
    }
}

/// `cuStreamSynchronize`, with the stream's context current.
fn sync_stream(stream: sys::CUstream) -> Result<(), Error> {
    // SAFETY: the stream is a live stream of the current context (a queue's, alive while
    // borrowed) or its legacy default stream.
    let result = unsafe { sys::cuStreamSynchronize(stream) };
    check(result, "cuStreamSynchronize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A libcuda stand-in: present or not, missing a symbol or not, initialising or not.
    struct StandIn {
        present: bool,
        missing: Option<&'static str>,
        init: Result<(), Error>,
        calls: Cell<usize>,
    }

    impl Library for StandIn {
        fn present(&self) -> bool {
            self.present
        }
        fn has_symbol(&self, symbol: &str) -> bool {
            Some(symbol) != self.missing
        }
        fn init(&self) -> Result<(), Error> {
            self.calls.set(self.calls.get() + 1);
            self.init.clone()
        }
        fn candidates(&self) -> Vec<String> {
            vec!["libcuda.so".into(), "libcuda.so.1".into()]
        }
    }

    fn stand_in(present: bool, missing: Option<&'static str>) -> StandIn {
        StandIn {
            present,
            missing,
            init: Ok(()),
            calls: Cell::new(0),
        }
    }

    #[test]
    fn a_missing_libcuda_is_a_runtime_error_naming_the_searched_files() {
        let library = stand_in(false, None);
        let err = load(&library).unwrap_err();
        let Error::Runtime { runtime, message } = &err else {
            panic!("expected Error::Runtime, got {err:?}");
        };
        assert_eq!(*runtime, "CUDA driver");
        assert!(message.contains("libcuda could not be loaded"), "{message}");
        assert!(message.contains("libcuda.so.1"), "{message}");
        assert_eq!(library.calls.get(), 0, "cuInit must not be called");
    }

    #[test]
    fn a_libcuda_without_a_needed_symbol_is_refused_before_cuinit() {
        let library = stand_in(true, Some("cuStreamWaitEvent"));
        let err = load(&library).unwrap_err();
        assert!(
            err.to_string()
                .contains("lacks the symbol cuStreamWaitEvent"),
            "{err}"
        );
        assert_eq!(library.calls.get(), 0, "cuInit must not be called");
    }

    #[test]
    fn a_failing_cuinit_is_passed_on() {
        let mut library = stand_in(true, None);
        library.init = Err(runtime_error("cuInit failed: CUDA_ERROR_NO_DEVICE"));
        let err = load(&library).unwrap_err();
        assert!(err.to_string().contains("CUDA_ERROR_NO_DEVICE"), "{err}");
        assert_eq!(library.calls.get(), 1);
    }

    /// The libcuda stand-in (`test-driver`) exports exactly the symbols this crate declares it
    /// needs, plus the two the GPU suite calls itself, plus what dlpack-candle's CUDA suite
    /// needs of a driver beyond this crate (modules and kernel launches; cuBLAS and cuRAND
    /// handles). So when the crate starts calling a driver function (directly or through
    /// cudarc) without listing it in [`REQUIRED_SYMBOLS`], the stand-in lacks it too and cudarc
    /// panics in the stand-in suite; and the stand-in cannot grow a function that the lists do
    /// not name. Every module of the stand-in is read: one that its `lib.rs` declares and this
    /// test does not read fails it.
    #[test]
    fn the_stand_in_exports_exactly_the_required_symbols() {
        const SUITE_ONLY: [&str; 2] = ["cuLaunchHostFunc", "cuEventQuery"];
        const CANDLE_SUITE_ONLY: [&str; 11] = [
            "cuModuleLoadData",
            "cuModuleGetFunction",
            "cuModuleUnload",
            "cuLaunchKernel",
            "cublasCreate_v2",
            "cublasSetStream_v2",
            "cublasDestroy_v2",
            "curandCreateGenerator",
            "curandSetPseudoRandomGeneratorSeed",
            "curandSetStream",
            "curandDestroyGenerator",
        ];
        const LIB: &str = include_str!("../test-driver/src/lib.rs");
        const MODULES: [(&str, &str); 9] = [
            ("device", include_str!("../test-driver/src/device.rs")),
            ("entry", include_str!("../test-driver/src/entry.rs")),
            ("kernels", include_str!("../test-driver/src/kernels.rs")),
            ("libraries", include_str!("../test-driver/src/libraries.rs")),
            ("memory", include_str!("../test-driver/src/memory.rs")),
            ("pointers", include_str!("../test-driver/src/pointers.rs")),
            ("state", include_str!("../test-driver/src/state.rs")),
            ("streams", include_str!("../test-driver/src/streams.rs")),
            ("support", include_str!("../test-driver/src/support.rs")),
        ];
        let mut declared: Vec<&str> = LIB
            .lines()
            .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
            .collect();
        declared.sort_unstable();
        let read: Vec<&str> = MODULES.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            declared, read,
            "the stand-in's modules and the ones read here"
        );
        let mut exported: Vec<&str> = core::iter::once(LIB)
            .chain(MODULES.iter().map(|(_, source)| *source))
            .flat_map(|source| source.split("extern \"C\" fn ").skip(1))
            .filter_map(|rest| rest.split('(').next())
            .filter(|name| name.starts_with("cu"))
            .collect();
        exported.sort_unstable();
        let mut expected: Vec<&str> = REQUIRED_SYMBOLS
            .iter()
            .copied()
            .chain(SUITE_ONLY)
            .chain(CANDLE_SUITE_ONLY)
            .collect();
        expected.sort_unstable();
        assert_eq!(exported, expected);
    }

    #[test]
    fn a_complete_libcuda_loads() {
        let library = stand_in(true, None);
        assert_eq!(load(&library), Ok(()));
        assert_eq!(library.calls.get(), 1);
    }
}
