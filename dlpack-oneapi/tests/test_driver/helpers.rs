//! What the cases share: a context and its root devices, test data, `dlpack_oneapi::leaks()`
//! readings, foreign tensors as a C producer makes them, and raw copies appended to a queue.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::ffi::{DLManagedTensorVersioned, DLTensor};
use dlpack_core::{DataType, Device, Error, ManagedTensor, Version};
use dlpack_oneapi::{Context, LevelZero, Queue, ZeDevice, sys};

use crate::Fixture;

pub(crate) fn context(fx: &Fixture) -> Context {
    Context::new(&fx.driver).expect("zeContextCreate")
}

pub(crate) fn root(ctx: &Context, i: usize) -> ZeDevice {
    ctx.devices()[i].clone()
}

pub(crate) fn f32s(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

/// What `dlpack_oneapi::leaks()` counted since an earlier reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Leaked {
    pub(crate) events: u64,
    pub(crate) event_pools: u64,
    pub(crate) command_lists: u64,
    pub(crate) allocations: u64,
    pub(crate) contexts: u64,
    pub(crate) host_bytes: u64,
}

impl Leaked {
    pub(crate) fn since(before: &dlpack_oneapi::Leaks) -> Self {
        let now = dlpack_oneapi::leaks();
        Leaked {
            events: now.events - before.events,
            event_pools: now.event_pools - before.event_pools,
            command_lists: now.command_lists - before.command_lists,
            allocations: now.allocations - before.allocations,
            contexts: now.contexts - before.contexts,
            host_bytes: now.host_bytes - before.host_bytes,
        }
    }
}

/// The error a lost device gives.
pub(crate) const LOST: sys::ze_result_t = sys::ZE_RESULT_ERROR_DEVICE_LOST;

/// Asserts that `err` is a Level Zero runtime error whose message contains every one of `parts`.
pub(crate) fn assert_runtime_error(err: &Error, parts: &[&str]) {
    let Error::Runtime { runtime, message } = err else {
        panic!("expected a Level Zero runtime error, got {err:?}");
    };
    assert_eq!(*runtime, "Level Zero");
    for part in parts {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
}

/// Deleter calls of [`foreign`] tensors.
static FOREIGN_DELETES: AtomicUsize = AtomicUsize::new(0);

/// A foreign tensor: a managed struct and its arrays in one heap block, as a C producer would
/// make it. Its deleter frees the block (not the data) and counts.
#[repr(C)]
struct Foreign {
    managed: DLManagedTensorVersioned,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

unsafe extern "C" fn delete_foreign(t: *mut DLManagedTensorVersioned) {
    // SAFETY: every tensor with this deleter is a `Box<Foreign>` (managed is its first field)
    // deleted once, by the owner that imported it.
    drop(unsafe { Box::from_raw(t.cast::<Foreign>()) });
    FOREIGN_DELETES.fetch_add(1, Ordering::SeqCst);
}

pub(crate) fn foreign(
    data: *const c_void,
    device: Device,
    dtype: DataType,
    shape: &[i64],
    strides: &[i64],
    byte_offset: u64,
) -> *mut DLManagedTensorVersioned {
    let mut block = Box::new(Foreign {
        managed: DLManagedTensorVersioned {
            version: Version::CURRENT,
            manager_ctx: core::ptr::null_mut(),
            deleter: Some(delete_foreign),
            flags: 0,
            dl_tensor: DLTensor {
                data: data.cast_mut(),
                device,
                ndim: shape.len() as i32,
                dtype,
                shape: core::ptr::null_mut(),
                strides: core::ptr::null_mut(),
                byte_offset,
            },
        },
        shape: shape.to_vec(),
        strides: strides.to_vec(),
    });
    block.managed.dl_tensor.shape = block.shape.as_mut_ptr();
    block.managed.dl_tensor.strides = block.strides.as_mut_ptr();
    Box::into_raw(block).cast()
}

/// Imports a foreign tensor, checking that the deleter runs exactly once by the end of `f`.
pub(crate) fn with_foreign<R>(
    raw: *mut DLManagedTensorVersioned,
    f: impl FnOnce(ManagedTensor) -> R,
) -> R {
    let before = FOREIGN_DELETES.load(Ordering::SeqCst);
    // SAFETY: `raw` is a fresh foreign tensor whose fields describe memory that the caller keeps
    // alive (or, for the refusals tested, that is never read: verification only asks the
    // driver about addresses).
    let tensor = unsafe { ManagedTensor::from_raw(raw) }.expect("a well-formed tensor imports");
    let r = f(tensor);
    assert_eq!(
        FOREIGN_DELETES.load(Ordering::SeqCst),
        before + 1,
        "the foreign deleter must run exactly once"
    );
    r
}

/// Appends a copy to `queue` without waiting (the crate's own copies always wait).
///
/// # Safety
/// The ranges stay valid until the queue has run the copy.
pub(crate) unsafe fn append_copy(
    queue: &Queue,
    ze: &LevelZero,
    dst: *mut u8,
    src: *const u8,
    n: usize,
) {
    // SAFETY: a live list of this test; valid ranges (caller); no events.
    let r = unsafe {
        (ze.api().zeCommandListAppendMemoryCopy)(
            queue.raw(),
            dst.cast(),
            src.cast(),
            n,
            core::ptr::null_mut(),
            0,
            core::ptr::null_mut(),
        )
    };
    assert_eq!(r, sys::ZE_RESULT_SUCCESS);
}
