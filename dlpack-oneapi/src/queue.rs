//! [`Queue`]: an immediate command list with the events that order work on it, and the
//! producer/consumer event handshake that stands in for DLPack's `stream` argument.

use core::fmt;
use core::ops::Range;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use dlpack_core::Error;

use crate::api::{check, runtime_error};
use crate::context::{ContextCore, lock};
use crate::leaks::{self, LEAKED, span};
use crate::sys::{
    self, describe_result, ze_command_list_handle_t, ze_event_handle_t, ze_event_pool_handle_t,
    ze_result_t,
};
use crate::{Context, ZeDevice};

/// Events are made in pools of this many.
const EVENTS_PER_POOL: u32 = 32;

/// A Level Zero immediate command list on one device, with a pool of host-visible events: the
/// oneAPI counterpart of a CUDA stream.
///
/// Level Zero starts a list's commands in the order they are appended but does not promise that
/// they finish in that order (its programming guide, "Execution Barriers"): only a barrier
/// orders what follows it after what came before. So every copy this crate appends comes after
/// a barrier, and sees everything appended before it, work appended through [`Queue::raw`]
/// included; such work must put its own barrier (or wait events) before what depends on
/// earlier commands. Every method here that reads or writes host memory waits for its command
/// before returning; [`Queue::make_ready_for`] orders another queue after this one without
/// blocking the host.
///
/// When that wait fails (a lost device) and the command's event is not signalled, Level Zero
/// cannot confirm that the command finished: its event is then never reset, reused or destroyed,
/// and the memory it touches is never freed (see [`crate::Leaks`]), so that work the device may
/// still do cannot write anything that was handed back.
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
    /// The pool of each event (its index in `pools`), by event handle address.
    pool_of: HashMap<usize, usize>,
    /// Events not signalled and not referenced by any pending command.
    free: Vec<ze_event_handle_t>,
    /// `(ready, consumed)` pairs of handshakes whose consumer side may not have run yet.
    handshakes: Vec<(ze_event_handle_t, ze_event_handle_t)>,
    /// Events that device work may still signal or wait on (a host wait for them failed), or
    /// that may still be signalled (a reset failed): never reset, reused or destroyed, nor their
    /// pools ([`crate::Leaks`]).
    retired: Vec<ze_event_handle_t>,
}

/// A command that failed, and how far it got.
pub(crate) struct Failed {
    pub(crate) error: Error,
    pub(crate) stage: Stage,
}

/// How far a failed command got.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Stage {
    /// It was never appended (no event, or the append failed): it does not run.
    NotAppended,
    /// Level Zero could not confirm that it finished (its host wait failed and its event is not
    /// signalled): the device may still read and write what it names, so none of that may be
    /// freed or reused.
    Unfinished,
    /// It finished; what failed came after (the wait reported an error although the event is
    /// signalled, or the event could not be reset).
    Finished,
}

impl Failed {
    /// Whether the device may still run the command.
    pub(crate) fn unfinished(&self) -> bool {
        self.stage == Stage::Unfinished
    }
}

impl Queue {
    /// A new asynchronous immediate command list on `device` (a root or sub-device of the
    /// context's driver), registered with the context so that its [`Queue::stream`] number
    /// can be resolved.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] if `device` is not a device of the context's driver, or
    /// `zeCommandListCreateImmediate` fails.
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
    /// The handshake orders work on this one list. A runtime that spreads one queue's work over
    /// several lists is not ordered by it. SYCL does: an out-of-order queue (the default
    /// `sycl::queue`) uses several lists, and even an in-order queue
    /// (`sycl::property::queue::in_order`) sends its copies (`memcpy`) to a copy-engine list of
    /// their own by default in Intel's Level Zero adapter (`UR_L0_USE_COPY_ENGINE_FOR_IN_ORDER_QUEUE`,
    /// default 1, ordered by the adapter's own events). So adopt an in-order queue's list, and
    /// set `UR_L0_USE_COPY_ENGINE_FOR_IN_ORDER_QUEUE=0` (before the SYCL runtime starts) so that
    /// its copies run on that list too; or wait for the queue's work yourself before the
    /// consumer reads.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] if `device` is not a device of the context's driver,
    /// [`Error::NullPointer`] for a NULL `list`.
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
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when a Level Zero call fails. When Level Zero cannot confirm that the
    /// work has run (the host wait fails and the barrier's event is not signalled), the message
    /// says that it "may still be running", and the barrier's event is leaked rather than reused
    /// ([`crate::Leaks`]).
    pub fn synchronize(&self) -> Result<(), Error> {
        self.inner.synchronize().map_err(|f| f.error)
    }

    /// Makes `consumer` wait, on the device, for everything appended to this queue so far,
    /// without blocking the host: a barrier here signals an event, and a barrier on `consumer`
    /// waits on it (then signals a second event, which tells this queue when the first may be
    /// reused). When `consumer` is this queue, a barrier alone orders what comes next after
    /// what came before.
    ///
    /// Both queues must belong to the same context.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when `consumer` belongs to another context, or a Level Zero call fails
    /// (making an event, appending a barrier).
    pub fn make_ready_for(&self, consumer: &Queue) -> Result<(), Error> {
        if Arc::ptr_eq(&self.inner, &consumer.inner) || self.inner.list == consumer.inner.list {
            let api = self.inner.core.ze.api();
            let _appending = lock(&self.inner.state);
            // SAFETY: live list (appends serialised by `state`); no events.
            let r = unsafe {
                (api.zeCommandListAppendBarrier)(
                    self.inner.list,
                    core::ptr::null_mut(),
                    0,
                    core::ptr::null_mut(),
                )
            };
            return check(r, "zeCommandListAppendBarrier");
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
        match appended {
            Ok(()) => {
                lock(&self.inner.state).handshakes.push((ready, consumed));
                Ok(())
            }
            Err(err) => {
                // Nothing waits on `ready`, which the barrier above signals: reuse it once it is
                // seen signalled, else retire it (the barrier may still signal it). `consumed`
                // was never appended, so it is still free.
                let finished = self.inner.wait_finished(ready);
                let mut events = lock(&self.inner.state);
                events.free.push(consumed);
                if finished {
                    // A reset that fails retires the event; the append's error is the one
                    // returned.
                    let _ = self.inner.recycle(&mut events, &[ready]);
                } else {
                    self.inner.retire(&mut events, &[ready]);
                }
                Err(err)
            }
        }
    }

    /// Copies `bytes` bytes from `src` to `dst` on this queue and waits for the copy.
    ///
    /// # Errors
    ///
    /// A Level Zero error names the call and its result. When the host wait fails and the copy's
    /// event is not signalled, Level Zero cannot confirm that the copy finished, and the message
    /// says that it "may still be running": the device may still read `src` and write `dst`.
    /// This crate then never frees memory of its own in either range (a [`crate::UsmBuffer`]
    /// over it leaks its allocation, see [`crate::Leaks`]), and the caller must not either.
    ///
    /// # Safety
    ///
    /// `src..src + bytes` must be readable and `dst..dst + bytes` writable by this queue's
    /// device (host memory, USM of this context the device can reach), not overlapping, and
    /// nobody else may access `dst` during the call. After an error that says the copy may
    /// still be running, both ranges must stay valid, and `dst` unaccessed, for the rest of the
    /// process (leak them).
    pub unsafe fn copy(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<(), Error> {
        let keep = [span(dst.addr(), bytes), span(src.addr(), bytes)];
        // SAFETY: the caller's contract, which covers a copy that may still be running too.
        unsafe { self.copy_keeping(dst, src, bytes, &keep) }.map_err(|f| f.error)
    }

    /// [`Queue::copy`], saying whether a copy that failed may still be running. Then `keep` (the
    /// ranges of this context's USM that the copy reads or writes) is recorded in the context,
    /// which never frees an allocation that overlaps it.
    ///
    /// # Safety
    ///
    /// As [`Queue::copy`] for the call itself. After a failure with `unfinished` set, the device
    /// may still write `dst` and read `src`: the caller must leak any memory of its own in `dst`
    /// that `keep` does not cover, and never access it again; what the device may still read
    /// from `src` lands only in `dst`.
    pub(crate) unsafe fn copy_keeping(
        &self,
        dst: *mut u8,
        src: *const u8,
        bytes: usize,
        keep: &[Range<usize>],
    ) -> Result<(), Failed> {
        if bytes == 0 {
            return Ok(());
        }
        let api = self.inner.core.ze.api();
        let copied = self.inner.run_and_wait(
            "zeCommandListAppendBarrier, zeCommandListAppendMemoryCopy",
            "the copy",
            "its event, and the memory it reads and writes, are leaked rather than reused or \
             freed",
            |list, event| {
                // A barrier first: the copy must see what the commands before it wrote, and not
                // overwrite what they still read (see the type's docs).
                // SAFETY: live list (appends serialised by the caller); no events.
                let barrier = unsafe {
                    (api.zeCommandListAppendBarrier)(
                        list,
                        core::ptr::null_mut(),
                        0,
                        core::ptr::null_mut(),
                    )
                };
                if barrier != sys::ZE_RESULT_SUCCESS {
                    return barrier;
                }
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
            },
        );
        if let Err(failed) = &copied
            && failed.unfinished()
        {
            leaks::KEPT.keep(keep);
        }
        copied
    }
}

impl QueueInner {
    fn synchronize(&self) -> Result<(), Failed> {
        let api = self.core.ze.api();
        self.run_and_wait(
            "zeCommandListAppendBarrier",
            "the work appended to the queue",
            "the event of the barrier that waits for it is leaked rather than reused",
            |list, event| {
                // SAFETY: live list and event.
                unsafe { (api.zeCommandListAppendBarrier)(list, event, 0, core::ptr::null_mut()) }
            },
        )
    }

    /// Appends a command that signals an event (`append(list, event)`), waits for the event
    /// on the host, and recycles it.
    ///
    /// When the wait fails and the event is not signalled, the command may still run: the
    /// event is retired, and the error, `unfinished`, says that `what` may still be running and
    /// that `kept` (what is leaked).
    fn run_and_wait(
        &self,
        call: &str,
        what: &str,
        kept: &str,
        append: impl FnOnce(ze_command_list_handle_t, ze_event_handle_t) -> ze_result_t,
    ) -> Result<(), Failed> {
        let api = self.core.ze.api();
        let event = {
            let mut events = lock(&self.state);
            let not_appended = |error| Failed {
                error,
                stage: Stage::NotAppended,
            };
            let event = self.take_event(&mut events).map_err(not_appended)?;
            if let Err(err) = check(append(self.list, event), call) {
                events.free.push(event);
                return Err(not_appended(err));
            }
            event
        };
        // SAFETY: a live event of this queue's pool, host-visible.
        let waited = unsafe { (api.zeEventHostSynchronize)(event, u64::MAX) };
        if waited != sys::ZE_RESULT_SUCCESS && !self.is_signalled(event) {
            self.retire(&mut lock(&self.state), &[event]);
            return Err(Failed {
                error: runtime_error(format!(
                    "zeEventHostSynchronize returned {}, expected ZE_RESULT_SUCCESS; Level Zero \
                     cannot confirm that {what} finished, so it may still be running: {kept} \
                     (counted by dlpack_oneapi::leaks)",
                    describe_result(waited)
                )),
                stage: Stage::Unfinished,
            });
        }
        // Waited, or the event is signalled after all: the command has finished.
        let recycled = self.recycle(&mut lock(&self.state), &[event]);
        check(waited, "zeEventHostSynchronize")
            .and(recycled)
            .map_err(|error| Failed {
                error,
                stage: Stage::Finished,
            })
    }

    /// Whether `event` is signalled (`zeEventQueryStatus`); `false` when the query fails.
    fn is_signalled(&self, event: ze_event_handle_t) -> bool {
        // SAFETY: a live event of this queue's pool.
        unsafe { (self.core.ze.api().zeEventQueryStatus)(event) == sys::ZE_RESULT_SUCCESS }
    }

    /// Waits for `event` on the host; whether it is then known to be signalled (the wait
    /// succeeded, or failed but the event is signalled).
    fn wait_finished(&self, event: ze_event_handle_t) -> bool {
        // SAFETY: a live event of this queue's pool, host-visible.
        let waited = unsafe { (self.core.ze.api().zeEventHostSynchronize)(event, u64::MAX) };
        waited == sys::ZE_RESULT_SUCCESS || self.is_signalled(event)
    }

    /// Takes `events` out of use for good: device work may still signal or wait on them, or
    /// they may still be signalled. Counted in [`crate::Leaks`]; the context is then never
    /// destroyed.
    fn retire(&self, events: &mut Events, retired: &[ze_event_handle_t]) {
        events.retired.extend_from_slice(retired);
        leaks::count(&LEAKED.events, retired.len() as u64);
        leaks::KEPT.taint();
    }

    /// Resets signalled events and returns them to the free list. An event whose reset fails
    /// may still be signalled, and a wait on it would return before its next command has run:
    /// it is retired instead, and the first such failure returned.
    fn recycle(&self, events: &mut Events, done: &[ze_event_handle_t]) -> Result<(), Error> {
        let api = self.core.ze.api();
        let mut recycled = Ok(());
        for &e in done {
            // SAFETY: a live event of this queue's pool that no pending command references.
            let reset = unsafe { (api.zeEventHostReset)(e) };
            if reset == sys::ZE_RESULT_SUCCESS {
                events.free.push(e);
                continue;
            }
            self.retire(events, &[e]);
            if recycled.is_ok() {
                recycled = Err(runtime_error(format!(
                    "zeEventHostReset returned {}, expected ZE_RESULT_SUCCESS; the event of a \
                     finished command may still be signalled, so it is leaked rather than \
                     reused (counted by dlpack_oneapi::leaks)",
                    describe_result(reset)
                )));
            }
        }
        recycled
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
        let mut pending = Vec::new();
        let mut done = Vec::new();
        for (ready, consumed) in events.handshakes.drain(..) {
            // `consumed` is signalled after the consumer's barrier has waited on `ready`; a
            // query that fails keeps both.
            if self.is_signalled(consumed) {
                done.extend([ready, consumed]);
            } else {
                pending.push((ready, consumed));
            }
        }
        events.handshakes = pending;
        // An event whose reset fails is retired; the caller takes another one or makes a pool.
        let _ = self.recycle(events, &done);
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
        let pool_index = events.pools.len();
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
            events.pool_of.insert(event.addr(), pool_index);
            events.free.push(event);
        }
        Ok(())
    }
}

impl Drop for QueueInner {
    fn drop(&mut self) {
        let api = self.core.ze.api();
        // Let everything appended run before its events and the list go away: the barrier that
        // `synchronize` appends finishes after everything before it. When it cannot be seen
        // finished, the list is leaked (and the barrier's event retired).
        let idle = !self.owned
            || self
                .synchronize()
                .err()
                .is_none_or(|failed| failed.stage == Stage::Finished);
        let mut events = std::mem::take(&mut *lock(&self.state));
        let mut done = std::mem::take(&mut events.free);
        for (ready, consumed) in std::mem::take(&mut events.handshakes) {
            // The consumer's barrier references both events until it has run, and signals
            // `consumed` when it has.
            if self.wait_finished(consumed) {
                done.extend([ready, consumed]);
            } else {
                self.retire(&mut events, &[ready, consumed]);
            }
        }
        for e in done {
            // SAFETY: a live event that no pending command references any more.
            let _ = unsafe { (api.zeEventDestroy)(e) };
        }
        let busy: HashSet<usize> = events
            .retired
            .iter()
            .filter_map(|e| events.pool_of.get(&e.addr()).copied())
            .collect();
        for (i, &p) in events.pools.iter().enumerate() {
            if busy.contains(&i) {
                // It holds retired events, which device work may still signal.
                leaks::count(&LEAKED.event_pools, 1);
            } else {
                // SAFETY: a live pool whose events are all destroyed.
                let _ = unsafe { (api.zeEventPoolDestroy)(p) };
            }
        }
        if self.owned {
            if idle {
                // SAFETY: the list this queue created, drained above; nothing uses it
                // afterwards.
                let _ = unsafe { (api.zeCommandListDestroy)(self.list) };
            } else {
                // Its commands may still run.
                leaks::count(&LEAKED.command_lists, 1);
                leaks::KEPT.taint();
            }
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
