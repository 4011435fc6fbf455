//! The test-support exports of the workspace's libcuda stand-in (`dlpack-cuda/test-driver`),
//! for the suites that run on it: dlpack-cuda's (which opens the stand-in by its path) and
//! dlpack-candle's CUDA suite (which finds it preloaded). After each case a suite compares the
//! stand-in's live objects and refusals with what they were before it.

use core::ffi::{CStr, c_int, c_void};

/// `LiveObjects` of the stand-in (test-driver/src/support.rs): live objects, and the calls it
/// refused since it was loaded.
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

/// `CallCounts` of the stand-in: calls that leave no object behind.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// `cuEventRecord` calls that queued a recording.
    pub event_records: u64,
    /// `cuStreamWaitEvent` calls that succeeded.
    pub stream_waits: u64,
    /// `cuCtxSynchronize` calls.
    pub context_synchronizations: u64,
    /// Pointer queries refused for want of a current context.
    pub context_less_pointer_queries: u64,
    /// Pointer queries refused because they asked pinned memory for its range.
    pub host_range_refusals: u64,
}

/// The stand-in's three test-support functions.
#[derive(Clone, Copy, Debug)]
pub struct Support {
    live: unsafe extern "C" fn(*mut LiveObjects, usize) -> c_int,
    calls: unsafe extern "C" fn(*mut CallCounts, usize) -> c_int,
    settle: extern "C" fn(),
}

impl Support {
    /// The functions, looked up by `lookup` (a symbol's address, or `None`): `None` when any is
    /// missing, so no stand-in is loaded where `lookup` looks.
    ///
    /// # Safety
    ///
    /// An address `lookup` returns for one of these names is that function of the stand-in
    /// (the workspace's test driver), loaded for as long as the value is used.
    pub unsafe fn find(lookup: impl Fn(&CStr) -> Option<*const c_void>) -> Option<Support> {
        let live = lookup(c"dlpack_cuda_test_driver_live")?;
        let calls = lookup(c"dlpack_cuda_test_driver_calls")?;
        let settle = lookup(c"dlpack_cuda_test_driver_settle")?;
        // SAFETY: the stand-in's functions, of these types (test-driver/src/support.rs), by the
        // caller's contract.
        unsafe {
            Some(Support {
                live: core::mem::transmute::<
                    *const c_void,
                    unsafe extern "C" fn(*mut LiveObjects, usize) -> c_int,
                >(live),
                calls: core::mem::transmute::<
                    *const c_void,
                    unsafe extern "C" fn(*mut CallCounts, usize) -> c_int,
                >(calls),
                settle: core::mem::transmute::<*const c_void, extern "C" fn()>(settle),
            })
        }
    }

    /// Once every stream has run the work queued so far: the live objects and refusals.
    ///
    /// # Panics
    ///
    /// If the stand-in's `LiveObjects` has another size than this one.
    pub fn settled(&self) -> LiveObjects {
        (self.settle)();
        let mut live = LiveObjects::default();
        // SAFETY: `live` is valid for a write of its size, which is passed along.
        let status = unsafe { (self.live)(&mut live, size_of::<LiveObjects>()) };
        assert_eq!(
            status, 0,
            "the stand-in's LiveObjects has another size than this one"
        );
        live
    }

    /// The call counts so far.
    ///
    /// # Panics
    ///
    /// If the stand-in's `CallCounts` has another size than this one.
    pub fn calls(&self) -> CallCounts {
        let mut calls = CallCounts::default();
        // SAFETY: `calls` is valid for a write of its size, which is passed along.
        let status = unsafe { (self.calls)(&mut calls, size_of::<CallCounts>()) };
        assert_eq!(
            status, 0,
            "the stand-in's CallCounts has another size than this one"
        );
        calls
    }
}
