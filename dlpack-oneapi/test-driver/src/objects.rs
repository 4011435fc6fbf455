//! The driver's objects: devices (fixed at first use), contexts with their allocations, command
//! lists with a worker thread each, event pools and events. Handles are the addresses of these
//! objects; every handle the loader passes in is looked up in a registry first, so a stale or
//! foreign handle is an error code, never a wild dereference.

use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sys::*;

/// Locks a mutex, ignoring poisoning: a panicking test thread must not wedge the driver.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The environment variable with the number of root devices (default 1, at most 16).
pub(crate) const DEVICES_VAR: &str = "DLPACK_ONEAPI_TEST_DRIVER_DEVICES";
/// The environment variable with the number of sub-devices of each root device (default 0, at
/// most 4).
pub(crate) const SUB_DEVICES_VAR: &str = "DLPACK_ONEAPI_TEST_DRIVER_SUB_DEVICES";
/// The environment variable that makes pointer lookups driver-wide (`1`; default `0`): what
/// Intel's GPU driver does, not the specification (see the crate docs).
pub(crate) const DRIVER_WIDE_VAR: &str = "DLPACK_ONEAPI_TEST_DRIVER_DRIVER_WIDE_LOOKUP";

/// A device or sub-device. Lives as long as the process.
#[derive(Debug)]
pub(crate) struct Device {
    /// Index of the root device (for a sub-device: of its parent).
    pub(crate) root: u32,
    /// `Some(id)` for a sub-device.
    pub(crate) sub: Option<u32>,
    /// Handles of the sub-devices, in order.
    pub(crate) children: OnceLock<Vec<usize>>,
}

impl Device {
    pub(crate) fn handle(&self) -> usize {
        core::ptr::from_ref(self).addr()
    }
}

/// The driver: its devices and the per-root-device holds of the test-support interface.
#[derive(Debug)]
pub(crate) struct Driver {
    /// Root devices, in `zeDeviceGet` order. Never resized after construction, so the
    /// devices' addresses (their handles) are stable.
    pub(crate) roots: Vec<Device>,
    /// Sub-devices of all roots, likewise never resized.
    pub(crate) subs: Vec<Device>,
    /// Per root device: whether its command lists are held (do not execute), and the condvar
    /// that wakes their workers.
    pub(crate) holds: Vec<(Mutex<bool>, Condvar)>,
    /// Whether `zeMemGetAllocProperties`, `zeMemGetAddressRange` and copies resolve a pointer
    /// in every context of the driver, as Intel's driver does ([`DRIVER_WIDE_VAR`]).
    pub(crate) driver_wide: bool,
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

fn count_from_env(var: &str, default: u32, max: u32) -> Result<u32, String> {
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(default),
        Err(e) => Err(format!("{var}: {e}")),
        Ok(s) => match s.trim().parse::<u32>() {
            Ok(n) if n <= max => Ok(n),
            _ => Err(format!("{var}={s:?}: expected a number from 0 to {max}")),
        },
    }
}

fn build_driver() -> Result<Driver, String> {
    let n_roots = count_from_env(DEVICES_VAR, 1, 16)?;
    let n_subs = count_from_env(SUB_DEVICES_VAR, 0, 4)?;
    let roots: Vec<Device> = (0..n_roots)
        .map(|root| Device {
            root,
            sub: None,
            children: OnceLock::new(),
        })
        .collect();
    let subs: Vec<Device> = (0..n_roots)
        .flat_map(|root| {
            (0..n_subs).map(move |sub| Device {
                root,
                sub: Some(sub),
                children: OnceLock::new(),
            })
        })
        .collect();
    // The vectors are final: element addresses (handles) no longer change.
    for root in &roots {
        let children = subs
            .iter()
            .filter(|s| s.root == root.root)
            .map(Device::handle)
            .collect();
        let _ = root.children.set(children);
    }
    for sub in &subs {
        let _ = sub.children.set(Vec::new());
    }
    let holds = (0..n_roots)
        .map(|_| (Mutex::new(false), Condvar::new()))
        .collect();
    let driver_wide = count_from_env(DRIVER_WIDE_VAR, 0, 1)? == 1;
    Ok(Driver {
        roots,
        subs,
        holds,
        driver_wide,
    })
}

/// The driver, configured from the environment on first use.
pub(crate) fn driver() -> Result<&'static Driver, ze_result_t> {
    match DRIVER.get_or_init(build_driver) {
        Ok(d) => Ok(d),
        Err(message) => {
            eprintln!("dlpack-oneapi-test-driver: {message}");
            Err(ZE_RESULT_ERROR_UNINITIALIZED)
        }
    }
}

impl Driver {
    pub(crate) fn handle(&self) -> usize {
        core::ptr::from_ref(self).addr()
    }

    /// The device with this handle, if it is one of ours.
    pub(crate) fn device(&self, handle: usize) -> Option<&Device> {
        self.roots
            .iter()
            .chain(self.subs.iter())
            .find(|d| d.handle() == handle)
    }

    /// Blocks while root device `root`'s command lists are held.
    fn wait_unheld(&self, root: u32) {
        if let Some((held, cv)) = self.holds.get(root as usize) {
            let mut h = lock(held);
            while *h {
                h = cv.wait(h).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// Whether root device `root`'s command lists are held.
    fn is_held(&self, root: u32) -> bool {
        self.holds
            .get(root as usize)
            .is_some_and(|(held, _)| *lock(held))
    }

    /// Holds or releases root device `root`'s command lists.
    pub(crate) fn set_hold(&self, root: u32, hold: bool) -> bool {
        match self.holds.get(root as usize) {
            Some((held, cv)) => {
                *lock(held) = hold;
                cv.notify_all();
                true
            }
            None => false,
        }
    }
}

/// One USM allocation.
#[derive(Debug)]
pub(crate) struct Allocation {
    /// The pointer `alloc` returned.
    pub(crate) ptr: SendPtr,
    pub(crate) layout: Layout,
    pub(crate) kind: ze_memory_type_t,
    /// The device handle (0 for host memory, or shared memory without a device).
    pub(crate) device: usize,
    pub(crate) id: u64,
}

/// A context and the allocations made in it, keyed by base address.
#[derive(Debug, Default)]
pub(crate) struct Context {
    pub(crate) allocations: Mutex<BTreeMap<usize, Allocation>>,
}

static NEXT_ALLOCATION_ID: AtomicU64 = AtomicU64::new(1);

/// The byte every fresh allocation is filled with, so that a reader of memory nobody wrote sees
/// a recognisable pattern rather than zeros.
pub(crate) const FRESH_BYTE: u8 = 0xA5;

impl Context {
    /// The allocation containing `addr`: `(base, size, kind, device, id)`.
    pub(crate) fn find(&self, addr: usize) -> Option<(usize, usize, ze_memory_type_t, usize, u64)> {
        let allocations = lock(&self.allocations);
        let (&base, a) = allocations.range(..=addr).next_back()?;
        (addr < base + a.layout.size()).then_some((base, a.layout.size(), a.kind, a.device, a.id))
    }

    pub(crate) fn allocate(
        &self,
        size: usize,
        alignment: usize,
        kind: ze_memory_type_t,
        device: usize,
    ) -> Result<*mut u8, ze_result_t> {
        if size == 0 {
            return Err(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
        }
        let align = if alignment == 0 { 64 } else { alignment };
        let layout = Layout::from_size_align(size, align)
            .map_err(|_| ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY);
        }
        // SAFETY: `ptr` is a fresh allocation of `size` bytes.
        unsafe { ptr.write_bytes(FRESH_BYTE, size) };
        let id = NEXT_ALLOCATION_ID.fetch_add(1, Ordering::Relaxed);
        lock(&self.allocations).insert(
            ptr.addr(),
            Allocation {
                ptr: SendPtr(ptr),
                layout,
                kind,
                device,
                id,
            },
        );
        Ok(ptr)
    }

    pub(crate) fn free(&self, ptr: usize) -> Result<(), ze_result_t> {
        // Looked up by address; the pointer with its provenance is the one kept at allocation.
        let a = lock(&self.allocations)
            .remove(&ptr)
            .ok_or(ZE_RESULT_ERROR_INVALID_ARGUMENT)?;
        // SAFETY: `a.ptr` was returned by `alloc` with this layout (only `allocate` inserts into
        // the map) and is removed from the map, so it is freed once.
        unsafe { std::alloc::dealloc(a.ptr.0, a.layout) };
        Ok(())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // `zeContextDestroy` refuses a context that still has allocations, so this only runs on
        // empty maps; free anything left all the same.
        let allocations = std::mem::take(&mut *lock(&self.allocations));
        for a in allocations.into_values() {
            // SAFETY: as in `free`.
            unsafe { std::alloc::dealloc(a.ptr.0, a.layout) };
        }
    }
}

/// An event: a flag the host and command lists signal and wait on.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) pool: Arc<EventPool>,
    pub(crate) index: u32,
    signalled: Mutex<bool>,
    cv: Condvar,
    /// Appended commands that signal or wait on this event and have not finished: while there
    /// are any, resetting or destroying the event is a misuse ([`Misuses`]).
    pub(crate) pending: AtomicUsize,
}

impl Event {
    pub(crate) fn signal(&self) {
        *lock(&self.signalled) = true;
        self.cv.notify_all();
    }

    pub(crate) fn reset(&self) {
        *lock(&self.signalled) = false;
    }

    pub(crate) fn is_signalled(&self) -> bool {
        *lock(&self.signalled)
    }

    /// Waits until signalled or `timeout` passes (`None`: forever). Returns whether signalled.
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut s = lock(&self.signalled);
        while !*s {
            match deadline {
                None => s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return false;
                    }
                    s = self
                        .cv
                        .wait_timeout(s, d - now)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
            }
        }
        true
    }
}

/// An event pool: `count` slots, each free or holding an event.
#[derive(Debug)]
pub(crate) struct EventPool {
    pub(crate) context: usize,
    pub(crate) host_visible: bool,
    pub(crate) slots: Mutex<Vec<bool>>,
}

/// A raw pointer that an allocation record or a command carries across threads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendPtr(pub(crate) *mut u8);

// SAFETY: the pointer is only dereferenced under the Level Zero contract that makes it valid at
// that time (the allocation is live; a copy's ranges stay valid until the command completes),
// whichever thread that happens on.
unsafe impl Send for SendPtr {}
// SAFETY: as above; shared references only read the address.
unsafe impl Sync for SendPtr {}

/// One appended command.
#[derive(Debug)]
pub(crate) enum Op {
    /// Copy `size` bytes from `src` to `dst`.
    Copy {
        dst: SendPtr,
        src: SendPtr,
        size: usize,
    },
    /// Nothing beyond waiting and signalling.
    Barrier,
}

#[derive(Debug)]
pub(crate) struct Command {
    pub(crate) op: Op,
    pub(crate) waits: Vec<Arc<Event>>,
    pub(crate) signal: Option<Arc<Event>>,
    /// Signalled when the command is done, for synchronous lists.
    pub(crate) done: Option<Arc<(Mutex<bool>, Condvar)>>,
    /// Set by [`CommandList::submit`]: the key of a copy's ranges in [`PENDING_COPIES`].
    pub(crate) id: u64,
}

/// An immediate command list: commands run in order on a worker thread.
#[derive(Debug)]
pub(crate) struct CommandList {
    pub(crate) context: usize,
    pub(crate) synchronous: bool,
    pub(crate) progress: Arc<Progress>,
    sender: Mutex<Option<Sender<Command>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Whether the last command appended was a barrier (or none was appended yet): what orders
    /// a copy after the commands before it.
    after_barrier: AtomicBool,
}

/// How far a command list's worker is, for [`settle`].
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Commands submitted and not finished.
    queued: AtomicUsize,
    /// Commands submitted whose work is not done: unlike `queued`, counted down before the
    /// command signals its event, so that a host that saw the event signalled sees the command
    /// finished. Destroying the list while this is not 0 is a misuse ([`Misuses`]).
    pub(crate) unfinished: AtomicUsize,
    /// What the worker waits for before its next command, if anything.
    blocked: Mutex<Option<Blocker>>,
}

/// What a command list's worker waits for.
#[derive(Debug)]
enum Blocker {
    /// The hold of its root device ([`Driver::set_hold`]).
    Hold(u32),
    /// An event to be signalled.
    Event(Arc<Event>),
}

impl Progress {
    /// Idle, or waiting for something only another party can do: a hold that is still on, an
    /// event that is still not signalled. (A worker whose hold was just released, or whose
    /// event was just signalled, is about to run, so it is not settled even before it wakes.)
    fn is_settled(&self) -> bool {
        if self.queued.load(Ordering::SeqCst) == 0 {
            return true;
        }
        match &*lock(&self.blocked) {
            None => false,
            Some(Blocker::Hold(root)) => driver().is_ok_and(|d| d.is_held(*root)),
            Some(Blocker::Event(e)) => !e.is_signalled(),
        }
    }

    /// Runs `wait` with `blocker` recorded as what the worker waits for.
    fn blocked_on<R>(&self, blocker: Blocker, wait: impl FnOnce() -> R) -> R {
        *lock(&self.blocked) = Some(blocker);
        let r = wait();
        *lock(&self.blocked) = None;
        r
    }
}

/// Frees and destroys of things that did not exist (double frees, stale handles).
pub(crate) static REFUSED_RELEASES: AtomicU64 = AtomicU64::new(0);

/// Calls that would let unfinished device work touch something released or reused, each refused
/// (or, for a signalled event, counted) instead of corrupting memory: see
/// [`crate::Misuses`].
#[derive(Debug, Default)]
pub(crate) struct Misuses {
    pub(crate) frees_in_use: AtomicU64,
    pub(crate) event_resets_in_use: AtomicU64,
    pub(crate) event_destroys_in_use: AtomicU64,
    pub(crate) list_destroys_in_use: AtomicU64,
    pub(crate) signalled_signal_events: AtomicU64,
    pub(crate) unordered_copies: AtomicU64,
}

/// The misuses counted since the driver was loaded.
pub(crate) static MISUSES: Misuses = Misuses {
    frees_in_use: AtomicU64::new(0),
    event_resets_in_use: AtomicU64::new(0),
    event_destroys_in_use: AtomicU64::new(0),
    list_destroys_in_use: AtomicU64::new(0),
    signalled_signal_events: AtomicU64::new(0),
    unordered_copies: AtomicU64::new(0),
};

/// Counts one misuse.
pub(crate) fn misuse(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}

/// The byte ranges `(start, len)` of every copy that is submitted and not finished, by command
/// id, so that freeing memory a pending copy still reads or writes is caught.
static PENDING_COPIES: Mutex<BTreeMap<u64, [(usize, usize); 2]>> = Mutex::new(BTreeMap::new());

static NEXT_COMMAND_ID: AtomicU64 = AtomicU64::new(1);

/// Whether a copy that has not finished reads or writes a byte of `start..start + len`.
pub(crate) fn copies_pending_in(start: usize, len: usize) -> bool {
    lock(&PENDING_COPIES)
        .values()
        .flatten()
        .any(|&range| overlaps(range, (start, len)))
}

/// Whether two `(start, len)` ranges share a byte.
fn overlaps((a, a_len): (usize, usize), (b, b_len): (usize, usize)) -> bool {
    a_len > 0 && b_len > 0 && a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
}

/// Host threads waiting in `zeEventHostSynchronize` for an event not yet signalled.
pub(crate) static HOST_WAITERS: AtomicUsize = AtomicUsize::new(0);

/// Returns once every command list has run all its commands or waits for a hold or an
/// unsignalled event. Nothing then changes until the host acts (releases a hold, signals).
pub(crate) fn settle() {
    loop {
        let lists: Vec<Arc<Progress>> = objects()
            .lists
            .values()
            .map(|l| l.progress.clone())
            .collect();
        if lists.iter().all(|p| p.is_settled()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl CommandList {
    pub(crate) fn new(context: usize, root: u32, synchronous: bool) -> Result<Self, ze_result_t> {
        let (tx, rx) = mpsc::channel();
        let progress = Arc::new(Progress::default());
        let worker_progress = progress.clone();
        let worker = std::thread::Builder::new()
            .name(format!("ze-test-driver-list-dev{root}"))
            .spawn(move || run_commands(root, rx, &worker_progress))
            .map_err(|_| ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)?;
        Ok(CommandList {
            context,
            synchronous,
            progress,
            sender: Mutex::new(Some(tx)),
            worker: Mutex::new(Some(worker)),
            after_barrier: AtomicBool::new(true),
        })
    }

    pub(crate) fn submit(&self, mut command: Command) -> Result<(), ze_result_t> {
        let done = self
            .synchronous
            .then(|| Arc::new((Mutex::new(false), Condvar::new())));
        command.done = done.clone();
        command.id = NEXT_COMMAND_ID.fetch_add(1, Ordering::Relaxed);
        if command.signal.as_ref().is_some_and(|e| e.is_signalled()) {
            // Signalling an event that is already signalled: it was reused without a reset, so
            // a host wait on it returns before this command has run.
            misuse(&MISUSES.signalled_signal_events);
        }
        // Level Zero starts a list's commands in order but does not promise that they finish in
        // order: only a barrier orders what follows it after what came before. This driver runs
        // them one after the other anyway, so a copy appended behind unfinished work with no
        // barrier between would race on real hardware and is counted.
        let is_barrier = matches!(command.op, Op::Barrier);
        if !is_barrier
            && !self.after_barrier.load(Ordering::SeqCst)
            && self.progress.unfinished.load(Ordering::SeqCst) > 0
        {
            misuse(&MISUSES.unordered_copies);
        }
        self.after_barrier.store(is_barrier, Ordering::SeqCst);
        for e in command.signal.iter().chain(&command.waits) {
            e.pending.fetch_add(1, Ordering::SeqCst);
        }
        if let Op::Copy { dst, src, size } = command.op
            && size > 0
        {
            lock(&PENDING_COPIES).insert(command.id, [(dst.0.addr(), size), (src.0.addr(), size)]);
        }
        self.progress.unfinished.fetch_add(1, Ordering::SeqCst);
        self.progress.queued.fetch_add(1, Ordering::SeqCst);
        let sent = match lock(&self.sender).as_ref() {
            None => Err((command, ZE_RESULT_ERROR_INVALID_NULL_HANDLE)),
            Some(tx) => tx
                .send(command)
                .map_err(|mpsc::SendError(command)| (command, ZE_RESULT_ERROR_DEVICE_LOST)),
        };
        if let Err((command, e)) = sent {
            finish(&command, &self.progress);
            self.progress.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(e);
        }
        if let Some(done) = done {
            let mut d = lock(&done.0);
            while !*d {
                d = done.1.wait(d).unwrap_or_else(|e| e.into_inner());
            }
        }
        Ok(())
    }

    /// Stops accepting commands, lets the worker finish what was appended, and joins it.
    pub(crate) fn shut_down(&self) {
        drop(lock(&self.sender).take());
        if let Some(worker) = lock(&self.worker).take() {
            let _ = worker.join();
        }
    }
}

/// Marks `command` finished (its ranges and events free again); before it signals.
fn finish(command: &Command, progress: &Progress) {
    lock(&PENDING_COPIES).remove(&command.id);
    for e in command.signal.iter().chain(&command.waits) {
        e.pending.fetch_sub(1, Ordering::SeqCst);
    }
    progress.unfinished.fetch_sub(1, Ordering::SeqCst);
}

fn run_commands(root: u32, rx: Receiver<Command>, progress: &Progress) {
    for command in rx {
        if let Ok(driver) = driver() {
            progress.blocked_on(Blocker::Hold(root), || driver.wait_unheld(root));
        }
        for e in &command.waits {
            progress.blocked_on(Blocker::Event(e.clone()), || e.wait(None));
        }
        if let Op::Copy { dst, src, size } = command.op
            && size > 0
        {
            // SAFETY: the application promised (zeCommandListAppendMemoryCopy's contract) that
            // both ranges stay valid until the command completes, and the append checked them
            // against this context's allocations. The regions do not overlap (the API forbids
            // it; `copy` tolerates it anyway).
            unsafe { core::ptr::copy(src.0.cast_const(), dst.0, size) };
        }
        finish(&command, progress);
        if let Some(e) = &command.signal {
            e.signal();
        }
        if let Some(done) = &command.done {
            *lock(&done.0) = true;
            done.1.notify_all();
        }
        progress.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Every live object, by handle.
#[derive(Debug, Default)]
pub(crate) struct Objects {
    pub(crate) contexts: HashMap<usize, Arc<Context>>,
    pub(crate) lists: HashMap<usize, Arc<CommandList>>,
    pub(crate) pools: HashMap<usize, Arc<EventPool>>,
    pub(crate) events: HashMap<usize, Arc<Event>>,
}

static OBJECTS: OnceLock<Mutex<Objects>> = OnceLock::new();

/// The registry of live objects.
pub(crate) fn objects() -> MutexGuard<'static, Objects> {
    lock(OBJECTS.get_or_init(|| Mutex::new(Objects::default())))
}

impl Objects {
    pub(crate) fn context(&self, h: usize) -> Result<Arc<Context>, ze_result_t> {
        self.contexts
            .get(&h)
            .cloned()
            .ok_or(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
    }

    pub(crate) fn list(&self, h: usize) -> Result<Arc<CommandList>, ze_result_t> {
        self.lists
            .get(&h)
            .cloned()
            .ok_or(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
    }

    pub(crate) fn pool(&self, h: usize) -> Result<Arc<EventPool>, ze_result_t> {
        self.pools
            .get(&h)
            .cloned()
            .ok_or(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
    }

    pub(crate) fn event(&self, h: usize) -> Result<Arc<Event>, ze_result_t> {
        self.events
            .get(&h)
            .cloned()
            .ok_or(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
    }

    /// The allocation containing `addr` in any live context: `(base, size, kind, device, id)`.
    pub(crate) fn find_anywhere(
        &self,
        addr: usize,
    ) -> Option<(usize, usize, ze_memory_type_t, usize, u64)> {
        self.contexts.values().find_map(|c| c.find(addr))
    }

    pub(crate) fn new_event(pool: Arc<EventPool>, index: u32) -> Arc<Event> {
        Arc::new(Event {
            pool,
            index,
            signalled: Mutex::new(false),
            cv: Condvar::new(),
            pending: AtomicUsize::new(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allocation_is_found_from_any_byte_inside_it_and_not_past_its_end() {
        let c = Context::default();
        let p = c.allocate(100, 0, ZE_MEMORY_TYPE_DEVICE, 7).unwrap().addr();
        assert_eq!(c.find(p).map(|a| (a.0, a.1)), Some((p, 100)));
        assert_eq!(c.find(p + 99).map(|a| a.0), Some(p));
        assert!(c.find(p + 100).is_none());
        assert!(c.find(p.wrapping_sub(1)).is_none());
        assert_eq!(c.free(p + 1), Err(ZE_RESULT_ERROR_INVALID_ARGUMENT));
        assert_eq!(c.free(p), Ok(()));
        assert_eq!(c.free(p), Err(ZE_RESULT_ERROR_INVALID_ARGUMENT));
    }

    #[test]
    fn fresh_allocations_hold_the_fresh_pattern() {
        let c = Context::default();
        let p = c.allocate(8, 64, ZE_MEMORY_TYPE_HOST, 0).unwrap();
        assert_eq!(p.addr() % 64, 0);
        // SAFETY: 8 bytes were just allocated and filled.
        let bytes = unsafe { core::slice::from_raw_parts(p, 8) };
        assert_eq!(bytes, &[FRESH_BYTE; 8]);
        c.free(p.addr()).unwrap();
    }

    #[test]
    fn byte_ranges_overlap_only_when_they_share_a_byte() {
        assert!(overlaps((10, 5), (14, 1)));
        assert!(overlaps((14, 1), (10, 5)));
        assert!(!overlaps((10, 5), (15, 1)));
        assert!(!overlaps((15, 1), (10, 5)));
        assert!(
            !overlaps((10, 0), (10, 5)),
            "an empty range touches nothing"
        );
        assert!(overlaps((usize::MAX - 1, 1), (usize::MAX - 2, 10)));
    }

    #[test]
    fn zero_sizes_and_bad_alignments_are_refused() {
        let c = Context::default();
        assert_eq!(
            c.allocate(0, 0, ZE_MEMORY_TYPE_HOST, 0),
            Err(ZE_RESULT_ERROR_UNSUPPORTED_SIZE)
        );
        assert_eq!(
            c.allocate(8, 3, ZE_MEMORY_TYPE_HOST, 0),
            Err(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT)
        );
    }
}
