//! [`Queue`]: an immediate command list with the events that order work on it, and the
//! producer/consumer event handshake that stands in for DLPack's `stream` argument.

use core::fmt;
use std::sync::{Arc, Mutex};

use dlpack_core::Error;

use crate::api::{check, runtime_error};
use crate::context::{ContextCore, lock};
use crate::sys::{
    self, ze_command_list_handle_t, ze_event_handle_t, ze_event_pool_handle_t, ze_result_t,
};
use crate::{Context, ZeDevice};

/// Events are made in pools of this many.
const EVENTS_PER_POOL: u32 = 32;

/// A Level Zero immediate command list on one device, with a pool of host-visible events: the
/// oneAPI counterpart of a CUDA stream.
///
/// Commands run in the order they are appended. Every method here that reads or writes host
/// memory waits for its command before returning; [`Queue::make_ready_for`] orders another
/// queue after this one without blocking the host.
///
/// A queue's `stream` number ([`Queue::stream`]) is what a consumer passes as `stream` to a
/// producer's `__dlpack__`, so that the producer's [`crate::OneApiHooks`]
/// ([`make_ready`](dlpack_core::DeviceHooks::make_ready)) can find the queue again. Cloning is
/// cheap (an `Arc`); the command list is destroyed with the last clone.
///
/// Lists are created on command queue group ordinal 0 (on Intel GPUs the compute engines, which
/// also copy).
#[derive(Clone)]
pub struct Queue {
    inner: Arc<QueueInner>,
}

pub(crate) struct QueueInner {
    core: Arc<ContextCore>,
    device: ZeDevice,
    list: ze_command_list_handle_t,
    /// Whether this queue created the list (and destroys it).
    owned: bool,
    /// Serialises appends to the list (Level Zero command lists are not thread-safe) and owns
    /// the events.
    state: Mutex<Events>,
}

// SAFETY: the command list is only appended to while `state` is locked (Level Zero allows one
// thread at a time per command list); every other call on the handles is free-threaded.
unsafe impl Send for QueueInner {}
// SAFETY: as above.
unsafe impl Sync for QueueInner {}

#[derive(Default)]
struct Events {
    pools: Vec<ze_event_pool_handle_t>,
    /// Events not signalled and not referenced by any pending command.
    free: Vec<ze_event_handle_t>,
    /// `(ready, consumed)` pairs of handshakes whose consumer side may not have run yet.
    handshakes: Vec<(ze_event_handle_t, ze_event_handle_t)>,
}

impl Queue {
    /// A new asynchronous immediate command list on `device` (a root or sub-device of the
    /// context's driver), registered with the context so that its [`Queue::stream`] number
    /// can be resolved.
    pub fn new(context: &Context, device: &ZeDevice) -> Result<Self, Error> {
        let core = context.core();
        core.root_index(device)?;
        let desc = sys::ze_command_queue_desc_t {
            stype: sys::ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
            pNext: core::ptr::null(),
            ordinal: 0,
            index: 0,
            flags: 0,
            mode: sys::ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
            priority: sys::ZE_COMMAND_QUEUE_PRIORITY_NORMAL,
        };
        let mut list: ze_command_list_handle_t = core::ptr::null_mut();
        check(
            // SAFETY: live context and device handles, a valid tagged descriptor and out-pointer.
            unsafe {
                (core.ze.api().zeCommandListCreateImmediate)(
                    core.handle,
                    device.raw(),
                    &desc,
                    &mut list,
                )
            },
            "zeCommandListCreateImmediate",
        )?;
        if list.is_null() {
            return Err(runtime_error(
                "zeCommandListCreateImmediate returned success with a NULL list; expected a \
                 handle",
            ));
        }
        Ok(Self::register(core, device, list, true))
    }

    /// Adopts a command list someone else made (a SYCL queue's native Level Zero list, say), so
    /// that a producer can order it after its own work; the list is not destroyed when the
    /// last clone is dropped. Adopting a list that already has a live queue returns that queue.
    ///
    /// # Safety
    ///
    /// `list` must be an immediate command list of `context` on `device` that stays alive
    /// while the returned queue (or a clone) lives, and nobody else may append to it while a
    /// method of the queue runs.
    pub unsafe fn from_raw(
        context: &Context,
        device: &ZeDevice,
        list: ze_command_list_handle_t,
    ) -> Result<Self, Error> {
        let core = context.core();
        core.root_index(device)?;
        if list.is_null() {
            return Err(Error::NullPointer {
                what: "command list",
            });
        }
        if let Some(q) = context.queue_by_handle(list.addr()) {
            return Ok(q);
        }
        Ok(Self::register(core, device, list, false))
    }

    fn register(
        core: &Arc<ContextCore>,
        device: &ZeDevice,
        list: ze_command_list_handle_t,
        owned: bool,
    ) -> Self {
        let inner = Arc::new(QueueInner {
            core: core.clone(),
            device: device.clone(),
            list,
            owned,
            state: Mutex::new(Events::default()),
        });
        lock(&core.queues).insert(list.addr(), Arc::downgrade(&inner));
        Queue { inner }
    }

    pub(crate) fn from_inner(inner: Arc<QueueInner>) -> Self {
        Queue { inner }
    }

    /// The raw command list handle.
    pub fn raw(&self) -> ze_command_list_handle_t {
        self.inner.list
    }

    /// The device the queue runs on.
    pub fn device(&self) -> &ZeDevice {
        &self.inner.device
    }

    /// The number a consumer passes as `stream` to name this queue: the command list handle as
    /// an integer. (User-space addresses fit an `i64`; a handle that did not would come out
    /// negative, which [`dlpack_core::protocol::parse_stream`] refuses.)
    pub fn stream(&self) -> i64 {
        self.inner.list.addr() as i64
    }

    /// Blocks the host until everything appended so far has run.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.inner.synchronize()
    }

    /// Makes `consumer` wait, on the device, for everything appended to this queue so far,
    /// without blocking the host: a barrier here signals an event, and a barrier on `consumer`
    /// waits on it (then signals a second event, which tells this queue when the first may be
    /// reused). Nothing happens when `consumer` is this queue.
    ///
    /// Both queues must belong to the same context.
    pub fn make_ready_for(&self, consumer: &Queue) -> Result<(), Error> {
        if Arc::ptr_eq(&self.inner, &consumer.inner) || self.inner.list == consumer.inner.list {
            return Ok(());
        }
        if !Arc::ptr_eq(&self.inner.core, &consumer.inner.core) {
            return Err(runtime_error(
                "the consumer queue belongs to another context; an event handshake needs both \
                 queues in one context",
            ));
        }
        let api = self.inner.core.ze.api();
        let (ready, consumed) = {
            let mut events = lock(&self.inner.state);
            let ready = self.inner.take_event(&mut events)?;
            let consumed = match self.inner.take_event(&mut events) {
                Ok(e) => e,
                Err(err) => {
                    events.free.push(ready);
                    return Err(err);
                }
            };
            // SAFETY: live list (appends serialised by `state`), a live event of this context.
            let r = unsafe {
                (api.zeCommandListAppendBarrier)(self.inner.list, ready, 0, core::ptr::null_mut())
            };
            if let Err(err) = check(r, "zeCommandListAppendBarrier") {
                events.free.extend([ready, consumed]);
                return Err(err);
            }
            (ready, consumed)
        };
        let appended = {
            let _consumer = lock(&consumer.inner.state);
            let mut wait = [ready];
            // SAFETY: live consumer list (appends serialised by its `state`), live events; the
            // wait list has one entry.
            let r = unsafe {
                (api.zeCommandListAppendBarrier)(
                    consumer.inner.list,
                    consumed,
                    1,
                    wait.as_mut_ptr(),
                )
            };
            check(r, "zeCommandListAppendBarrier")
        };
        let mut events = lock(&self.inner.state);
        match appended {
            Ok(()) => {
                events.handshakes.push((ready, consumed));
                Ok(())
            }
            Err(err) => {
                // Nothing waits on `ready`; let it be signalled, then reuse both.
                // SAFETY: live event of this queue's pool.
                let _ = unsafe { (api.zeEventHostSynchronize)(ready, u64::MAX) };
                self.inner.recycle(&mut events, &[ready, consumed]);
                Err(err)
            }
        }
    }

    /// Copies `bytes` bytes from `src` to `dst` on this queue and waits for the copy.
    ///
    /// # Safety
    ///
    /// `src..src + bytes` must be readable and `dst..dst + bytes` writable by this queue's
    /// device (host memory, USM of this context the device can reach), not overlapping, and
    /// nobody else may access `dst` during the call.
    pub unsafe fn copy(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<(), Error> {
        if bytes == 0 {
            return Ok(());
        }
        let api = self.inner.core.ze.api();
        self.inner
            .run_and_wait("zeCommandListAppendMemoryCopy", |list, event| {
                // SAFETY: live list and event; the ranges are valid for the copy (caller).
                unsafe {
                    (api.zeCommandListAppendMemoryCopy)(
                        list,
                        dst.cast(),
                        src.cast(),
                        bytes,
                        event,
                        0,
                        core::ptr::null_mut(),
                    )
                }
            })
    }
}

impl QueueInner {
    fn synchronize(&self) -> Result<(), Error> {
        let api = self.core.ze.api();
        self.run_and_wait("zeCommandListAppendBarrier", |list, event| {
            // SAFETY: live list and event.
            unsafe { (api.zeCommandListAppendBarrier)(list, event, 0, core::ptr::null_mut()) }
        })
    }

    /// Appends a command that signals an event (`append(list, event)`), waits for the event
    /// on the host, and recycles it.
    fn run_and_wait(
        &self,
        call: &str,
        append: impl FnOnce(ze_command_list_handle_t, ze_event_handle_t) -> ze_result_t,
    ) -> Result<(), Error> {
        let api = self.core.ze.api();
        let event = {
            let mut events = lock(&self.state);
            let event = self.take_event(&mut events)?;
            if let Err(err) = check(append(self.list, event), call) {
                events.free.push(event);
                return Err(err);
            }
            event
        };
        // SAFETY: a live event of this queue's pool, host-visible.
        let waited = unsafe { (api.zeEventHostSynchronize)(event, u64::MAX) };
        let mut events = lock(&self.state);
        self.recycle(&mut events, &[event]);
        check(waited, "zeEventHostSynchronize")
    }

    /// Resets signalled events and returns them to the free list.
    fn recycle(&self, events: &mut Events, done: &[ze_event_handle_t]) {
        let api = self.core.ze.api();
        for &e in done {
            // SAFETY: a live event of this queue's pool that no pending command references.
            let _ = unsafe { (api.zeEventHostReset)(e) };
            events.free.push(e);
        }
    }

    /// A free event: reuses those of finished handshakes first, then makes a new pool.
    fn take_event(&self, events: &mut Events) -> Result<ze_event_handle_t, Error> {
        if events.free.is_empty() {
            self.reclaim_handshakes(events);
        }
        if events.free.is_empty() {
            self.grow(events)?;
        }
        events
            .free
            .pop()
            .ok_or_else(|| runtime_error("no event is free after creating an event pool"))
    }

    /// Frees the events of every handshake whose consumer side has run.
    fn reclaim_handshakes(&self, events: &mut Events) {
        let api = self.core.ze.api();
        let mut pending = Vec::new();
        let mut done = Vec::new();
        for (ready, consumed) in events.handshakes.drain(..) {
            // SAFETY: a live event of this queue's pool.
            if unsafe { (api.zeEventQueryStatus)(consumed) } == sys::ZE_RESULT_SUCCESS {
                done.extend([ready, consumed]);
            } else {
                pending.push((ready, consumed));
            }
        }
        events.handshakes = pending;
        self.recycle(events, &done);
    }

    /// Creates a pool of host-visible events and adds them to the free list.
    fn grow(&self, events: &mut Events) -> Result<(), Error> {
        let api = self.core.ze.api();
        let desc = sys::ze_event_pool_desc_t {
            stype: sys::ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
            pNext: core::ptr::null(),
            flags: sys::ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
            count: EVENTS_PER_POOL,
        };
        let mut pool: ze_event_pool_handle_t = core::ptr::null_mut();
        check(
            // SAFETY: live context, a valid tagged descriptor, no device list (all devices of the
            // context), a valid out-pointer.
            unsafe {
                (api.zeEventPoolCreate)(
                    self.core.handle,
                    &desc,
                    0,
                    core::ptr::null_mut(),
                    &mut pool,
                )
            },
            "zeEventPoolCreate",
        )?;
        events.pools.push(pool);
        for index in 0..EVENTS_PER_POOL {
            let desc = sys::ze_event_desc_t {
                stype: sys::ZE_STRUCTURE_TYPE_EVENT_DESC,
                pNext: core::ptr::null(),
                index,
                signal: sys::ZE_EVENT_SCOPE_FLAG_HOST,
                wait: sys::ZE_EVENT_SCOPE_FLAG_HOST,
            };
            let mut event: ze_event_handle_t = core::ptr::null_mut();
            check(
                // SAFETY: live pool, a valid tagged descriptor with an index inside the pool, a
                // valid out-pointer.
                unsafe { (api.zeEventCreate)(pool, &desc, &mut event) },
                "zeEventCreate",
            )?;
            events.free.push(event);
        }
        Ok(())
    }
}

impl Drop for QueueInner {
    fn drop(&mut self) {
        let api = self.core.ze.api();
        // Let everything appended run before its events go away.
        if self.owned {
            let _ = self.synchronize();
        }
        let events = std::mem::take(&mut *lock(&self.state));
        for &(_, consumed) in &events.handshakes {
            // The consumer's barrier references both events until it has run.
            // SAFETY: a live event of this queue's pool.
            let _ = unsafe { (api.zeEventHostSynchronize)(consumed, u64::MAX) };
        }
        let all = events
            .free
            .iter()
            .copied()
            .chain(events.handshakes.iter().flat_map(|&(a, b)| [a, b]));
        for e in all {
            // SAFETY: a live event that no pending command references any more.
            let _ = unsafe { (api.zeEventDestroy)(e) };
        }
        for p in events.pools {
            // SAFETY: a live pool whose events are all destroyed.
            let _ = unsafe { (api.zeEventPoolDestroy)(p) };
        }
        if self.owned {
            // SAFETY: the list this queue created, drained above; nothing uses it afterwards.
            let _ = unsafe { (api.zeCommandListDestroy)(self.list) };
        }
        let mut queues = lock(&self.core.queues);
        if queues
            .get(&self.list.addr())
            .is_some_and(|w| w.strong_count() == 0)
        {
            queues.remove(&self.list.addr());
        }
    }
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("list", &self.inner.list)
            .field("device", &self.inner.device)
            .field("owned", &self.inner.owned)
            .finish()
    }
}
