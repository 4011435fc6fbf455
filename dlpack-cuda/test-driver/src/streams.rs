//! Streams and events: each stream runs its work in order on a thread of its own; an event's
//! recording is a position in a stream (`cuStream*`, `cuEvent*`, `cuLaunchHostFunc`).

use core::ffi::{c_uint, c_void};
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use cudarc::driver::sys::CUresult::{
    CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_NOT_READY, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN,
    CUDA_SUCCESS,
};
use cudarc::driver::sys::{CUevent, CUhostFn, CUresult, CUstream};

use crate::entry::{Outcome, Refusal, entry, invalid, put, refuse};
use crate::state::{driver, lock, state};

/// Work queued on a stream.
pub(crate) type Work = Box<dyn FnOnce() + Send>;

/// How a stream takes part in the legacy default stream's implicit synchronisation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum StreamKind {
    /// The legacy default stream (handles 0 and 1) of a device's primary context.
    Legacy,
    /// Synchronises with the legacy default stream: a stream created with flags 0, and a
    /// per-thread default stream (handle 2).
    Blocking,
    /// Independent of the legacy default stream (`CU_STREAM_NON_BLOCKING`).
    NonBlocking,
}

/// A stream: its work runs in order on a thread of its own.
pub(crate) struct Stream {
    pub(crate) ordinal: i32,
    pub(crate) kind: StreamKind,
    queue: Mutex<Option<Sender<Work>>>,
    /// The worker thread, joined by `settle` once the stream is destroyed.
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Stream {
    pub(crate) fn new(ordinal: i32, kind: StreamKind) -> Result<Arc<Stream>, Refusal> {
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
            kind,
            queue: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
        }))
    }

    pub(crate) fn push(&self, work: Work) -> Outcome {
        let queue = lock(&self.queue);
        match queue.as_ref() {
            Some(sender) if sender.send(work).is_ok() => Ok(()),
            _ => Err(refuse(CUDA_ERROR_INVALID_HANDLE, "a destroyed stream")),
        }
    }

    /// A completion reached once everything queued so far has run.
    pub(crate) fn marker(&self) -> Result<Arc<Completion>, Refusal> {
        let marker = Arc::new(Completion::default());
        let reached = marker.clone();
        self.push(Box::new(move || reached.reach()))?;
        Ok(marker)
    }

    /// Waits until everything queued so far has run.
    pub(crate) fn finish(&self) -> Outcome {
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
    pub(crate) fn join(&self) {
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

/// One recording of an event: reached when its stream gets to it.
#[derive(Default)]
pub(crate) struct Completion {
    reached: Mutex<bool>,
    signal: Condvar,
}

impl Completion {
    fn reach(&self) {
        *lock(&self.reached) = true;
        self.signal.notify_all();
    }

    pub(crate) fn is_reached(&self) -> bool {
        *lock(&self.reached)
    }

    pub(crate) fn wait(&self) {
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
pub(crate) struct Event {
    pub(crate) ordinal: i32,
    latest: Mutex<Option<Arc<Completion>>>,
}

impl Event {
    fn latest(&self) -> Option<Arc<Completion>> {
        lock(&self.latest).clone()
    }
}

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
        let kind = if flags == 0 {
            StreamKind::Blocking
        } else {
            StreamKind::NonBlocking
        };
        let created = Stream::new(device as i32, kind)?;
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
        if stream.kind == StreamKind::Blocking {
            // Its queued work stays ordered before the legacy stream's later work.
            let last = stream.marker()?;
            state.devices[stream.ordinal as usize].retired.push(last);
        }
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
        let mut state = state()?;
        let (stream, event) = (state.stream(stream)?, state.event(event)?);
        // An event never recorded is complete: nothing to wait for.
        if let Some(recording) = event.latest() {
            state.queue(&stream, Box::new(move || recording.wait()))?;
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
        let mut state = state()?;
        let stream = state.stream(stream)?;
        let data = data.expose_provenance();
        state.queue(
            &stream,
            Box::new(move || {
                // SAFETY: the caller hands `data` to `function` in stream order, as the driver
                // does.
                unsafe { function(ptr::with_exposed_provenance_mut(data)) }
            }),
        )
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
        let mut state = state()?;
        let (stream, event) = (state.stream(stream)?, state.event(event)?);
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
        state.queue(&stream, Box::new(move || reached.reach()))?;
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc::Receiver;
    use std::time::Duration;

    use cudarc::driver::sys::CUcontext;

    use super::*;
    use crate::device::{cuCtxSetCurrent, cuDevicePrimaryCtxRetain, cuInit};

    const LEGACY: usize = 1;

    fn handle(value: usize) -> CUstream {
        ptr::without_provenance_mut(value)
    }

    /// Device 0's primary context, current on this thread.
    fn device_0() -> CUcontext {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        let mut context: CUcontext = ptr::null_mut();
        assert_eq!(
            // SAFETY: a valid place for the handle.
            unsafe { cuDevicePrimaryCtxRetain(&mut context, 0) },
            CUDA_SUCCESS
        );
        assert_eq!(cuCtxSetCurrent(context), CUDA_SUCCESS);
        context
    }

    /// A host function that blocks its stream until the sender of `data` sends or is dropped.
    ///
    /// # Safety
    /// `data` is a `Box<Receiver<()>>` leaked for this call alone.
    unsafe extern "C" fn wait_for_release(data: *mut c_void) {
        // SAFETY: the Box<Receiver<()>> leaked by `block`, taken back once, here.
        let receiver = unsafe { Box::from_raw(data.cast::<Receiver<()>>()) };
        let _ = receiver.recv_timeout(Duration::from_secs(30));
    }

    /// A host function that sets a flag.
    ///
    /// # Safety
    /// `flag` points to an `AtomicBool` that outlives the call.
    unsafe extern "C" fn set(flag: *mut c_void) {
        // SAFETY: a `&'static AtomicBool` (the test's).
        unsafe { &*flag.cast::<AtomicBool>() }.store(true, Ordering::SeqCst);
    }

    /// A host function that copies the first flag of a pair into the second.
    ///
    /// # Safety
    /// `cell` points to a `(&AtomicBool, &AtomicBool)` that outlives the call.
    unsafe extern "C" fn observe(cell: *mut c_void) {
        // SAFETY: the test's pair of flags: what is observed, and where it is written.
        let (seen, out) = unsafe { *cell.cast::<(&AtomicBool, &AtomicBool)>() };
        out.store(seen.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    fn block(stream: CUstream) -> Sender<()> {
        let (release, wait) = channel::<()>();
        let data = Box::into_raw(Box::new(wait)).cast::<c_void>();
        assert_eq!(
            cuLaunchHostFunc(stream, Some(wait_for_release), data),
            CUDA_SUCCESS
        );
        release
    }

    #[test]
    fn the_legacy_stream_waits_for_destroyed_streams_and_refused_calls_queue_nothing() {
        static DONE: AtomicBool = AtomicBool::new(false);
        static SEEN: AtomicBool = AtomicBool::new(false);
        let context = device_0();

        // A blocking stream destroyed with work still queued: the legacy stream's later work
        // comes after that work, as after a live blocking stream's.
        let mut blocking: CUstream = ptr::null_mut();
        // SAFETY: a valid place for the handle.
        assert_eq!(unsafe { cuStreamCreate(&mut blocking, 0) }, CUDA_SUCCESS);
        let release = block(blocking);
        let done = (&DONE as *const AtomicBool).cast_mut().cast::<c_void>();
        assert_eq!(cuLaunchHostFunc(blocking, Some(set), done), CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
        let pair: &'static (&AtomicBool, &AtomicBool) = Box::leak(Box::new((&DONE, &SEEN)));
        let pair = (pair as *const (&AtomicBool, &AtomicBool))
            .cast_mut()
            .cast::<c_void>();
        assert_eq!(
            cuLaunchHostFunc(handle(LEGACY), Some(observe), pair),
            CUDA_SUCCESS
        );
        std::thread::sleep(Duration::from_millis(50));
        release.send(()).expect("release");
        assert_eq!(cuStreamSynchronize(handle(LEGACY)), CUDA_SUCCESS);
        assert!(
            SEEN.load(Ordering::SeqCst),
            "the legacy stream ran before the destroyed stream's work"
        );

        // A refused call on the legacy stream queues nothing, not even the wait for a blocked
        // blocking stream: the legacy stream stays free.
        // SAFETY: a valid place for the handle.
        assert_eq!(unsafe { cuStreamCreate(&mut blocking, 0) }, CUDA_SUCCESS);
        let release = block(blocking);
        let refused = cuEventRecord(ptr::without_provenance_mut(0xdead0), handle(LEGACY));
        assert_eq!(refused, CUDA_ERROR_INVALID_HANDLE);
        let (finished, synchronised) = channel();
        let context = context.addr();
        std::thread::spawn(move || {
            assert_eq!(
                cuCtxSetCurrent(ptr::without_provenance_mut(context)),
                CUDA_SUCCESS
            );
            let _ = finished.send(cuStreamSynchronize(handle(LEGACY)));
        });
        let status = synchronised.recv_timeout(Duration::from_secs(10));
        release.send(()).expect("release");
        assert_eq!(
            status,
            Ok(CUDA_SUCCESS),
            "the refused call made the legacy stream wait for a blocked stream"
        );
        assert_eq!(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
    }
}
