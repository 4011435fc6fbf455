//! The driver's state: devices and their primary contexts, the live allocations, streams and
//! events, the call counts, and each thread's current context.

use core::ffi::c_int;
use std::cell::Cell;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::ThreadId;

use cudarc::driver::sys::CUresult::{
    CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_NOT_INITIALIZED,
};
use cudarc::driver::sys::{CUevent, CUstream};

use crate::entry::{Outcome, Refusal, refuse};
use crate::memory::Allocation;
use crate::streams::{Completion, Event, Stream, StreamKind, Work};

/// The primary context of device `n` has the handle `CONTEXT_BASE + n * CONTEXT_STEP`.
pub(crate) const CONTEXT_BASE: usize = 0xc0_0000;
pub(crate) const CONTEXT_STEP: usize = 0x100;
/// Stream and event handles are counted up from here (never 0, 1 or 2, which are the default
/// streams).
const FIRST_HANDLE: usize = 0x5_0000;

#[derive(Default)]
pub(crate) struct DeviceState {
    pub(crate) retained: u32,
    legacy: Option<Arc<Stream>>,
    /// The per-thread default stream of each thread that used one (kept, with its worker
    /// thread, for the life of the process: a test process uses few threads).
    per_thread: HashMap<ThreadId, Arc<Stream>>,
    /// The last recording of each blocking stream destroyed with work still queued, which the
    /// legacy stream still waits for (dropped once reached).
    pub(crate) retired: Vec<Arc<Completion>>,
}

pub(crate) struct State {
    pub(crate) initialised: bool,
    pub(crate) devices: Vec<DeviceState>,
    pub(crate) memory_pools: bool,
    /// Live allocations by first address.
    pub(crate) allocations: BTreeMap<usize, Allocation>,
    pub(crate) streams: HashMap<usize, Arc<Stream>>,
    pub(crate) events: HashMap<usize, Arc<Event>>,
    next_handle: usize,
    /// The reserved device address range and the next address to hand out.
    pub(crate) device_range: (usize, usize),
    pub(crate) next_device_address: usize,
    /// Pointer queries need a current context (`DLPACK_CUDA_TEST_DRIVER_ATTRIBUTES_NEED_CONTEXT`
    /// is `1`), as on some drivers.
    pub(crate) attributes_need_context: bool,
    /// Pointer queries that ask pinned memory for its range fail with
    /// `CUDA_ERROR_INVALID_VALUE` (`DLPACK_CUDA_TEST_DRIVER_HOST_RANGES` is `0`): the driver API
    /// documents the range attributes for device allocations only.
    pub(crate) host_ranges_refused: bool,
    /// Destroyed streams whose threads `settle` has not joined yet.
    pub(crate) closed: Vec<Arc<Stream>>,
}

/// Counts of calls that leave no live object behind, for tests that check a call was made.
#[derive(Default)]
pub(crate) struct Calls {
    pub(crate) event_records: AtomicU64,
    pub(crate) stream_waits: AtomicU64,
    pub(crate) context_synchronizations: AtomicU64,
    pub(crate) context_less_pointer_queries: AtomicU64,
    pub(crate) host_range_refusals: AtomicU64,
}

pub(crate) struct Driver {
    pub(crate) state: Mutex<State>,
    pub(crate) refused: AtomicU64,
    pub(crate) calls: Calls,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn env_number(name: &str, default: usize, max: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| (1..=max).contains(n))
        .unwrap_or(default)
}

pub(crate) fn driver() -> &'static Driver {
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
    pub(crate) static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The driver's state, once `cuInit` has run.
pub(crate) fn state() -> Result<MutexGuard<'static, State>, Refusal> {
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
    pub(crate) fn device(&self, ordinal: c_int) -> Result<usize, Refusal> {
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
    pub(crate) fn context_device(&self, handle: usize) -> Option<usize> {
        let offset = handle.checked_sub(CONTEXT_BASE)?;
        (offset % CONTEXT_STEP == 0 && offset / CONTEXT_STEP < self.devices.len())
            .then_some(offset / CONTEXT_STEP)
    }

    /// The device of this thread's current context, which must be retained.
    pub(crate) fn current(&self) -> Result<usize, Refusal> {
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

    pub(crate) fn handle(&mut self) -> usize {
        let handle = self.next_handle;
        self.next_handle += 0x10;
        handle
    }

    /// A stream by handle: 0 and 1 are the current context's legacy default stream, 2 the
    /// calling thread's per-thread default stream of the current context.
    pub(crate) fn stream(&mut self, handle: CUstream) -> Result<Arc<Stream>, Refusal> {
        let handle = handle.addr();
        if handle <= 2 {
            let device = self.current()?;
            let state = &mut self.devices[device];
            let stream = if handle == 2 {
                match state.per_thread.entry(std::thread::current().id()) {
                    Entry::Occupied(slot) => slot.get().clone(),
                    Entry::Vacant(slot) => slot
                        .insert(Stream::new(device as i32, StreamKind::Blocking)?)
                        .clone(),
                }
            } else {
                match &state.legacy {
                    Some(stream) => stream.clone(),
                    None => state
                        .legacy
                        .insert(Stream::new(device as i32, StreamKind::Legacy)?)
                        .clone(),
                }
            };
            return Ok(stream);
        }
        self.streams
            .get(&handle)
            .cloned()
            .ok_or_else(|| refuse(CUDA_ERROR_INVALID_HANDLE, format!("stream {handle:#x}")))
    }

    /// Queues `work` on `stream`, ordered first as the driver orders the legacy default
    /// stream: on the legacy stream, after the work queued so far on every blocking stream of
    /// its device (per-thread default streams, streams created with flags 0, and those
    /// destroyed with work still queued); on a blocking stream, after the work queued so far on
    /// the legacy stream. Non-blocking streams are independent of it. The caller holds the
    /// state, so that no other call is queued between the ordering and the work, and calls
    /// this once its arguments are checked: a refused call queues nothing.
    pub(crate) fn queue(&mut self, stream: &Stream, work: Work) -> Outcome {
        let ordinal = stream.ordinal as usize;
        let mut before = Vec::new();
        match stream.kind {
            StreamKind::NonBlocking => {}
            StreamKind::Blocking => {
                if let Some(legacy) = &self.devices[ordinal].legacy {
                    before.push(legacy.marker()?);
                }
            }
            StreamKind::Legacy => {
                let device = &mut self.devices[ordinal];
                device.retired.retain(|last| !last.is_reached());
                before.extend(device.retired.iter().cloned());
                let blocking = device.per_thread.values().chain(
                    self.streams
                        .values()
                        .filter(|s| s.kind == StreamKind::Blocking && s.ordinal == stream.ordinal),
                );
                for other in blocking {
                    before.push(other.marker()?);
                }
            }
        }
        if !before.is_empty() {
            stream.push(Box::new(move || before.iter().for_each(|m| m.wait())))?;
        }
        stream.push(work)
    }

    pub(crate) fn event(&self, handle: CUevent) -> Result<Arc<Event>, Refusal> {
        self.events.get(&handle.addr()).cloned().ok_or_else(|| {
            refuse(
                CUDA_ERROR_INVALID_HANDLE,
                format!("event {:#x}", handle.addr()),
            )
        })
    }

    /// Every live stream, default streams included.
    pub(crate) fn all_streams(&self) -> Vec<Arc<Stream>> {
        let defaults = self
            .devices
            .iter()
            .flat_map(|d| d.legacy.iter().chain(d.per_thread.values()))
            .cloned();
        defaults.chain(self.streams.values().cloned()).collect()
    }
}
