//! [`CudaHooks`]: dlpack-core's [`DeviceHooks`] for CUDA, and the driver-independent logic
//! behind them.

use core::fmt;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use dlpack_core::protocol::StreamRequest;
use dlpack_core::{Device, DeviceHooks, DeviceType, Error, MemoryKind, PointerInfo};

use crate::driver::{
    CudaDriver, Driver, PointerAttributes, Queue, STREAM_LEGACY, STREAM_PER_THREAD, cuda_driver,
    memory_type, runtime_error,
};

/// Whether `device_type` is one of the three CUDA memory types DLPack names.
pub(crate) const fn is_cuda(device_type: DeviceType) -> bool {
    matches!(
        device_type,
        DeviceType::CUDA | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED
    )
}

/// A stream handle with the null stream written as the legacy default stream it stands for (the
/// driver API's null stream is the legacy one).
const fn normalise(handle: usize) -> usize {
    if handle == 0 { STREAM_LEGACY } else { handle }
}

/// Turns what `cuPointerGetAttributes` reported for `address` into a [`PointerInfo`].
///
/// Managed memory is reported as [`MemoryKind::Managed`] on `cuda:<ordinal>`, device memory as
/// [`MemoryKind::Device`] on `cuda:<ordinal>`, page-locked host memory as
/// [`MemoryKind::HostPinned`] on `cuda_host:0` (DLPack numbers pinned memory 0). A pointer the
/// driver does not know (memory type 0: pageable host memory, or no memory at all) is
/// [`Error::UnknownPointer`]; a CUDA array is a runtime error, since it is not linear memory.
pub(crate) fn classify(
    claimed: Device,
    address: usize,
    attributes: PointerAttributes,
) -> Result<PointerInfo, Error> {
    let kind = match attributes.memory_type {
        memory_type::UNKNOWN => return Err(Error::UnknownPointer { claimed, address }),
        _ if attributes.is_managed => MemoryKind::Managed,
        memory_type::HOST => MemoryKind::HostPinned,
        memory_type::DEVICE => MemoryKind::Device,
        memory_type::UNIFIED => MemoryKind::Managed,
        memory_type::ARRAY => {
            return Err(runtime_error(format!(
                "the driver reports {address:#x} (claimed as {claimed}) as a CUDA array, which is opaque, not linear memory; expected device, pinned host or managed memory"
            )));
        }
        other => {
            return Err(runtime_error(format!(
                "cuPointerGetAttributes reports memory type {other} for {address:#x} (claimed as {claimed}); expected 1 (host), 2 (device) or 4 (unified)"
            )));
        }
    };
    let device = match kind {
        MemoryKind::HostPinned | MemoryKind::Host => Device::new(DeviceType::CUDA_HOST, 0),
        MemoryKind::Device | MemoryKind::Managed => Device::cuda(attributes.ordinal),
    };
    let allocation = (attributes.range_size > 0).then(|| {
        attributes.range_start..attributes.range_start.saturating_add(attributes.range_size)
    });
    Ok(PointerInfo {
        device,
        kind,
        allocation,
    })
}

/// The hook logic over any [`Driver`]: [`CudaHooks`] over the real driver, the tests over a
/// fake one.
pub(crate) struct HookLogic<D: Driver> {
    driver: D,
    /// At most one per device ordinal; the first also serves pinned and managed memory.
    streams: Vec<D::Stream>,
}

impl<D: Driver> HookLogic<D> {
    pub(crate) fn new(driver: D) -> Self {
        HookLogic {
            driver,
            streams: Vec::new(),
        }
    }

    pub(crate) fn driver(&self) -> &D {
        &self.driver
    }

    /// Adds the stream of one more device.
    pub(crate) fn add_stream(&mut self, stream: D::Stream) -> Result<(), Error> {
        let ordinal = self.driver.stream_ordinal(&stream);
        if self.driver.stream_handle(&stream) == STREAM_PER_THREAD {
            // The driver reads the handle as the *calling* thread's per-thread stream, and the
            // hooks run on whichever thread exports, imports or deletes a tensor: they would
            // order work on a stream the producer never used.
            return Err(runtime_error(format!(
                "the per-thread default stream (handle 0x2, cudarc's per_thread_stream()) of \
                 cuda:{ordinal} cannot be the hooks' stream: the driver takes it to mean the \
                 calling thread's own stream, and the hooks run on whichever thread exports, \
                 imports or deletes a tensor; use default_stream() or a stream of new_stream()"
            )));
        }
        if self
            .streams
            .iter()
            .any(|s| self.driver.stream_ordinal(s) == ordinal)
        {
            return Err(runtime_error(format!(
                "a stream for cuda:{ordinal} is already configured; expected at most one stream per device"
            )));
        }
        self.streams.push(stream);
        Ok(())
    }

    /// The configured stream for `device`: the one of its ordinal for `kDLCUDA`, the first one
    /// for pinned and managed memory (which DLPack numbers 0 whatever device wrote it).
    pub(crate) fn stream(&self, device: Device) -> Option<&D::Stream> {
        if device.device_type == DeviceType::CUDA {
            self.streams
                .iter()
                .find(|s| self.driver.stream_ordinal(s) == device.device_id)
        } else {
            self.streams.first()
        }
    }

    /// Where work for `device` is queued: its stream, else the legacy default stream of its
    /// primary context (device 0 for pinned and managed memory without a stream).
    pub(crate) fn queue(&self, device: Device) -> Queue<'_, D::Stream> {
        match self.stream(device) {
            Some(stream) => Queue {
                ordinal: self.driver.stream_ordinal(stream),
                stream: Some(stream),
            },
            None => Queue {
                ordinal: if device.device_type == DeviceType::CUDA {
                    device.device_id
                } else {
                    0
                },
                stream: None,
            },
        }
    }

    /// The queue's stream handle, the null stream written as the legacy one.
    fn handle(&self, queue: Queue<'_, D::Stream>) -> usize {
        queue
            .stream
            .map_or(STREAM_LEGACY, |s| normalise(self.driver.stream_handle(s)))
    }

    /// The `stream=` value this side passes to a producer's `__dlpack__` for a tensor on
    /// `device`: its stream for that device (1 for the legacy default stream), or 1 when none
    /// is configured. (A per-thread default stream is never configured: `add_stream`.)
    pub(crate) fn consumer_stream(&self, device: Device) -> Result<i64, Error> {
        match self.handle(self.queue(device)) {
            STREAM_LEGACY => Ok(1),
            handle => i64::try_from(handle).map_err(|_| Error::Overflow {
                what: format!(
                    "the stream handle {handle:#x} does not fit a Python int stream argument (i64)"
                ),
            }),
        }
    }

    /// Makes this side's stream for `device` wait for the work queued so far on `producer`, a
    /// raw stream handle (0 and 1: the legacy default stream, 2: the calling thread's
    /// per-thread one): nothing when that is this side's stream.
    ///
    /// # Safety
    /// `producer` is 0, 1, 2, or a live stream of the context of the device whose queue
    /// [`HookLogic::queue`] picks for `device` (for pinned and managed memory: the first
    /// configured stream's device, else device 0).
    pub(crate) unsafe fn wait_for(&self, device: Device, producer: usize) -> Result<(), Error> {
        self.check_handled(device)?;
        let queue = self.queue(device);
        // SAFETY: the caller's contract.
        unsafe { self.order(queue, normalise(producer), self.handle(queue)) }
    }

    /// Orders `consumer`'s later work after what is queued on `producer` so far: nothing when
    /// they are one stream (its own order does it), else an event created in the queue's
    /// context, recorded on `producer` and waited on by `consumer`, then destroyed (a wait
    /// already queued keeps it alive in the driver until it is over). Both are normalised
    /// handles (the null stream written as 1).
    ///
    /// # Safety
    /// `producer` is 1, 2, or a live stream of the queue's context.
    unsafe fn order(
        &self,
        queue: Queue<'_, D::Stream>,
        producer: usize,
        consumer: usize,
    ) -> Result<(), Error> {
        if producer == consumer {
            return Ok(());
        }
        let event = self.driver.create_event(queue)?;
        // SAFETY: the caller's contract.
        let ordered = unsafe { self.driver.record_event(queue, producer, event) }
            .and_then(|()| self.driver.wait_event(queue, consumer, event));
        // Destroyed whatever happened.
        let destroyed = self.driver.destroy_event(queue, event);
        ordered.and(destroyed)
    }

    fn check_handled(&self, device: Device) -> Result<(), Error> {
        if is_cuda(device.device_type) {
            Ok(())
        } else {
            Err(Error::NoHook { device })
        }
    }
}

// SAFETY: `resolve` reports what the driver's `cuPointerGetAttributes` says (`classify`):
// a host-accessible kind only for memory the driver reports as host (pinned) or managed
// memory, which the host reads and writes in place, and the allocation range the driver reports
// for the pointer. `copy_from_host` copies exactly `src.len()` bytes to `dst` through the driver.
// `Driver` is crate-private: its implementations are the real driver and the unit tests' fake,
// whose "device" allocations are all host memory it owns.
unsafe impl<D: Driver> DeviceHooks for HookLogic<D> {
    fn handles(&self, device_type: DeviceType) -> bool {
        is_cuda(device_type)
    }

    fn resolve(&self, claimed: Device, address: usize) -> Result<PointerInfo, Error> {
        self.check_handled(claimed)?;
        let attributes = self.driver.pointer_attributes(address)?;
        classify(claimed, address, attributes)
    }

    fn make_ready(&self, device: Device, stream: StreamRequest) -> Result<(), Error> {
        self.check_handled(device)?;
        let consumer = match stream {
            StreamRequest::NoSync => return Ok(()),
            StreamRequest::Default | StreamRequest::LegacyDefault => STREAM_LEGACY,
            StreamRequest::PerThreadDefault => STREAM_PER_THREAD,
            StreamRequest::Handle(handle) => normalise(handle),
        };
        let queue = self.queue(device);
        // SAFETY: the queue's own stream, alive while `queue` borrows it (1 for none).
        unsafe { self.order(queue, self.handle(queue), consumer) }
    }

    fn wait_host(&self, device: Device) -> Result<(), Error> {
        self.check_handled(device)?;
        self.driver.synchronize(self.queue(device))
    }

    unsafe fn copy_to_host(&self, device: Device, src: usize, dst: &mut [u8]) -> Result<(), Error> {
        self.check_handled(device)?;
        // SAFETY: forwarded contract: `src..src + dst.len()` is readable memory of `device`.
        unsafe { self.driver.copy_to_host(self.queue(device), src, dst) }
    }

    unsafe fn copy_from_host(&self, device: Device, src: &[u8], dst: usize) -> Result<(), Error> {
        self.check_handled(device)?;
        // SAFETY: forwarded contract: `dst..dst + src.len()` is writable memory of `device` that
        // no one else uses meanwhile.
        unsafe { self.driver.copy_from_host(self.queue(device), src, dst) }
    }
}

/// dlpack-core's [`DeviceHooks`] for CUDA: resolves pointers with `cuPointerGetAttributes`,
/// makes data ready on a consumer's stream with an event, and copies between device and host.
///
/// The hooks know the streams this side works on, at most one per device ([`CudaHooks::new`],
/// [`CudaHooks::with_stream`]); a device without one uses the legacy default stream of its
/// primary context ([`CudaHooks::on_default_streams`] configures none). That stream plays two
/// parts:
///
/// - **Producing** (a Rust tensor handed to PyTorch, CuPy, ...): the pending writes to exported
///   memory must be queued on it. [`DeviceHooks::make_ready`] records an event there and makes
///   the consumer's stream wait on it: no host blocking, no `cuCtxSynchronize`. The stream
///   numbers follow the Python protocol ([`dlpack_core::protocol::parse_stream`] reads them):
///   `-1` no synchronisation, `None` and `1` the legacy default stream, `2` the per-thread
///   default stream, larger values a `cudaStream_t`; `0` is refused by `parse_stream`. Pinned
///   and managed memory asked for with `None` (which a CPU consumer may read in place) and any
///   export to `dl_device=(kDLCPU, 0)` get [`DeviceHooks::wait_host`] instead: the host waits
///   for this stream.
/// - **Consuming** (a foreign tensor imported): pass [`CudaHooks::consumer_stream`] as the
///   `stream=` argument of the producer's `__dlpack__`, so the producer makes the data ready on
///   it; the copies of [`DeviceHooks::copy_to_host`] and [`DeviceHooks::copy_from_host`] run on
///   it (and wait for it), and [`DeviceHooks::wait_host`] synchronises it.
///
/// Pinned (`kDLCUDAHost`) and managed (`kDLCUDAManaged`) tensors carry device id 0 whatever
/// device wrote them; they use the first configured stream, or with none configured the legacy
/// default stream of device 0. So when such memory is written on another device, configure that
/// device's stream first (`CudaHooks::new(its stream)`): waiting on device 0 does not order work
/// queued on device 1.
///
/// ```
/// use dlpack_core::{Device, DeviceHooks, DeviceType};
/// use dlpack_cuda::CudaHooks;
///
/// match CudaHooks::on_default_streams() {
///     Ok(hooks) => {
///         assert!(hooks.handles(DeviceType::CUDA_MANAGED));
///         assert_eq!(hooks.consumer_stream(Device::cuda(0))?, 1); // the legacy default stream
///     }
///     // No libcuda (or no device) on this machine: an error value, never a panic.
///     Err(e) => assert!(e.to_string().starts_with("CUDA driver: ")),
/// }
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub struct CudaHooks {
    logic: HookLogic<&'static CudaDriver>,
}

impl CudaHooks {
    /// Hooks whose work on `stream`'s device runs on `stream`.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] if the CUDA driver cannot be loaded ([`crate::load_driver`]), or if
    /// `stream` is the per-thread default stream ([`CudaHooks::with_stream`]).
    pub fn new(stream: Arc<CudaStream>) -> Result<Self, Error> {
        Self::on_default_streams()?.with_stream(stream)
    }

    /// Hooks on no stream of their own: every device uses the legacy default stream of its
    /// primary context.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] if the CUDA driver cannot be loaded ([`crate::load_driver`]).
    pub fn on_default_streams() -> Result<Self, Error> {
        Ok(CudaHooks {
            logic: HookLogic::new(cuda_driver()?),
        })
    }

    /// Adds the stream of another device.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] if a stream of that device is already set, or if `stream` is the
    /// per-thread default stream (cudarc's `per_thread_stream()`): the driver reads that handle
    /// as the calling thread's own stream, and hooks run on whichever thread exports, imports or
    /// deletes a tensor. The hooks are dropped then.
    pub fn with_stream(mut self, stream: Arc<CudaStream>) -> Result<Self, Error> {
        self.logic.add_stream(stream)?;
        Ok(self)
    }

    /// The stream configured for `device` (for pinned and managed memory: the first one).
    pub fn stream(&self, device: Device) -> Option<&Arc<CudaStream>> {
        self.logic.stream(device)
    }

    /// The `stream=` argument to pass to a producer's `__dlpack__` when this side imports a
    /// tensor on `device`: the configured stream's handle, or `1` for the legacy default
    /// stream (also when none is configured).
    ///
    /// # Errors
    ///
    /// [`Error::Overflow`] if the configured stream's handle does not fit the `i64` of a Python
    /// `int` stream argument.
    pub fn consumer_stream(&self, device: Device) -> Result<i64, Error> {
        self.logic.consumer_stream(device)
    }

    /// Orders this side's later work on `device` (its configured stream, else the legacy
    /// default stream) after the work queued so far on `producer_stream`, a raw `CUstream`
    /// value: an event recorded there and waited on here, with no host blocking. Nothing is
    /// done when the two are one stream.
    ///
    /// This is the consumer's half of the handshake when the producer names its stream rather
    /// than ordering its work on the consumer's: the `current_work_stream` of the DLPack C
    /// exchange API, which dlpack-pyo3's CUDA importer (`dlpack_pyo3::cuda::from_dlpack_cuda`)
    /// uses for PyTorch tensors. The values follow the driver: `0` and `1` are the legacy default
    /// stream, `2` the calling thread's per-thread default stream.
    ///
    /// # Errors
    ///
    /// [`Error::NoHook`] for a device that is not CUDA; [`Error::Runtime`] when the driver
    /// refuses a call (`cuEventCreate`, `cuEventRecord`, `cuStreamWaitEvent`,
    /// `cuEventDestroy`).
    ///
    /// # Safety
    ///
    /// `producer_stream` is 0, 1, 2, or a live stream of `device`'s context (for pinned and
    /// managed memory, of the device whose stream these hooks use for them: see the type's
    /// docs). The driver may dereference any other value.
    pub unsafe fn wait_for_stream(
        &self,
        device: Device,
        producer_stream: usize,
    ) -> Result<(), Error> {
        // SAFETY: forwarded contract.
        unsafe { self.logic.wait_for(device, producer_stream) }
    }
}

// SAFETY: every method forwards to `HookLogic` over the real driver, whose answers are the
// driver's own (see its impl).
unsafe impl DeviceHooks for CudaHooks {
    fn handles(&self, device_type: DeviceType) -> bool {
        self.logic.handles(device_type)
    }
    fn resolve(&self, claimed: Device, address: usize) -> Result<PointerInfo, Error> {
        self.logic.resolve(claimed, address)
    }
    fn make_ready(&self, device: Device, stream: StreamRequest) -> Result<(), Error> {
        self.logic.make_ready(device, stream)
    }
    fn wait_host(&self, device: Device) -> Result<(), Error> {
        self.logic.wait_host(device)
    }
    unsafe fn copy_to_host(&self, device: Device, src: usize, dst: &mut [u8]) -> Result<(), Error> {
        // SAFETY: forwarded contract.
        unsafe { self.logic.copy_to_host(device, src, dst) }
    }
    unsafe fn copy_from_host(&self, device: Device, src: &[u8], dst: usize) -> Result<(), Error> {
        // SAFETY: forwarded contract.
        unsafe { self.logic.copy_from_host(device, src, dst) }
    }
}

impl fmt::Debug for CudaHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let driver = self.logic.driver();
        let streams: Vec<String> = self
            .logic
            .streams
            .iter()
            .map(|s| {
                format!(
                    "cuda:{} stream {:#x}",
                    driver.stream_ordinal(s),
                    driver.stream_handle(s)
                )
            })
            .collect();
        f.debug_struct("CudaHooks")
            .field("streams", &streams)
            .finish()
    }
}
