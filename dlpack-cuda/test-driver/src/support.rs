//! The test-support exports: live objects and refusals (leak and double-free checks), call
//! counts, and waiting until every stream has run its work.

use core::ffi::c_int;
use std::sync::atomic::Ordering;

use crate::memory::Kind;
use crate::state::{driver, lock};

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
