//! Nothing leaks: the memory of a candle tensor is freed once both the tensor and every export
//! of it are gone, and a copy's memory once the copy (or the tensor reclaimed from it) is. One test in this binary, so that the allocation counter sees nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_candle::{into_dlpack, into_owned, to_dlpack};
use dlpack_core::{CopyMode, ManagedTensor, Transfer};

/// Counts the bytes currently allocated.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::SeqCst);
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The tensor's size in bytes: 4 MiB, or 64 KiB under Miri (which is slow to fill memory). Far
/// larger than anything else allocated meanwhile either way.
const SIZE: usize = if cfg!(miri) { 1 << 16 } else { 1 << 22 };

fn live() -> usize {
    LIVE.load(Ordering::SeqCst)
}

#[test]
fn the_storage_is_freed_once_the_tensor_and_every_export_are_gone()
-> Result<(), Box<dyn std::error::Error>> {
    let before = live();
    // SIZE bytes of f32, moved into candle, lent twice (reclaimed once) and copied once.
    let data = vec![1.0f32; SIZE / 4];
    let (t, transfer) = into_owned(ManagedTensor::export(data)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    // SAFETY: nothing writes to `t`'s storage in this test.
    let first = unsafe { into_dlpack(t.clone()) }?;
    // SAFETY: as above.
    let second = unsafe { into_dlpack(t.reshape((SIZE / 64, 16))?.t()?) }?;
    let copy = to_dlpack(&t)?;
    assert!(live() >= before + 2 * SIZE);
    drop(t);
    assert!(live() >= before + 2 * SIZE, "the exports keep the storage");
    drop(first);
    let (back, transfer) = into_owned(second, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert!(live() >= before + 2 * SIZE, "the reclaimed tensor keeps it");
    drop(back);
    assert!(live() >= before + SIZE, "the copy keeps its memory");
    let (copy, transfer) = into_owned(copy, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    drop(copy);
    // Small allocations of candle's or the test harness may come and go; the tensor must be gone.
    assert!(
        live() < before + SIZE / 4,
        "{} bytes still live",
        live().saturating_sub(before)
    );
    Ok(())
}
