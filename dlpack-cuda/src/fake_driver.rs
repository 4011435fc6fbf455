//! A fake CUDA driver over host memory, and a test producer that claims any device: the hook
//! logic runs against them on machines without a GPU (and under Miri).

use core::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use dlpack_core::{DataType, Device, Element, Error, Export, ExportDesc, Flags, ManagedTensor};

use crate::driver::{Driver, PointerAttributes, Queue, STREAM_LEGACY, runtime_error};

/// A stream of the fake driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FakeStream {
    pub(crate) ordinal: i32,
    pub(crate) handle: usize,
}

/// One driver call, as the fake saw it. `stream` is the raw handle used (`STREAM_LEGACY` when
/// the queue had no stream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    Attributes {
        address: usize,
    },
    CreateEvent {
        ordinal: i32,
        event: usize,
    },
    Record {
        stream: usize,
        event: usize,
    },
    Wait {
        ordinal: i32,
        consumer: usize,
        event: usize,
    },
    Destroy {
        event: usize,
    },
    Synchronize {
        ordinal: i32,
        stream: usize,
    },
    ToHost {
        stream: usize,
        src: usize,
        bytes: usize,
    },
    FromHost {
        stream: usize,
        dst: usize,
        bytes: usize,
    },
    OnDevice {
        stream: usize,
        src: usize,
        dst: usize,
        bytes: usize,
    },
}

struct Allocation {
    /// Made by `Box::into_raw` of a `Box<[u64]>` (u64s keep it aligned for every element type).
    words: NonNull<[u64]>,
    attributes: PointerAttributes,
}

impl Allocation {
    fn start(&self) -> usize {
        self.words.cast::<u8>().as_ptr().addr()
    }
    fn contains(&self, address: usize, bytes: usize) -> bool {
        let start = self.start();
        address >= start
            && address
                .checked_add(bytes)
                .is_some_and(|end| end <= start + self.words.len() * 8)
    }
    /// A pointer (with the allocation's provenance) to `address`.
    fn pointer(&self, address: usize) -> *mut u8 {
        self.words
            .cast::<u8>()
            .as_ptr()
            .wrapping_add(address - self.start())
    }
}

#[derive(Default)]
struct State {
    allocations: Vec<Allocation>,
    calls: Vec<Call>,
    fail: Option<&'static str>,
    next_event: usize,
    live_events: usize,
}

/// The fake driver: "device" memory is host memory it allocates and describes as asked.
#[derive(Default)]
pub(crate) struct Fake {
    state: Mutex<State>,
}

// SAFETY: the allocations' pointers are owned by the fake (freed only in Drop) and every access
// goes through the Mutex.
unsafe impl Send for Fake {}
// SAFETY: see above.
unsafe impl Sync for Fake {}

impl Drop for Fake {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for allocation in state.allocations.drain(..) {
            // SAFETY: made by `Box::into_raw` of a `Box<[u64]>` in `alloc`, freed once, here.
            drop(unsafe { Box::from_raw(allocation.words.as_ptr()) });
        }
    }
}

impl Fake {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Fake::default())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Allocates `bytes` zeroed bytes (8-aligned) that the driver reports with `memory_type`,
    /// `is_managed` and `ordinal`; returns the address.
    pub(crate) fn alloc(
        &self,
        bytes: usize,
        memory_type: u32,
        is_managed: bool,
        ordinal: i32,
    ) -> usize {
        let words = vec![0u64; bytes.div_ceil(8)].into_boxed_slice();
        let words = NonNull::from(Box::leak(words));
        let start = words.cast::<u8>().as_ptr().addr();
        self.state().allocations.push(Allocation {
            words,
            attributes: PointerAttributes {
                memory_type,
                is_managed,
                ordinal,
                range_start: start,
                range_size: bytes,
            },
        });
        start
    }

    /// A pointer with provenance to `address` inside one of the allocations.
    pub(crate) fn pointer(&self, address: usize) -> *mut u8 {
        let state = self.state();
        let allocation = state
            .allocations
            .iter()
            .find(|a| a.contains(address, 0))
            .expect("an address inside a fake allocation");
        allocation.pointer(address)
    }

    /// Writes `values` at `address`.
    pub(crate) fn write<T: Element>(&self, address: usize, values: &[T]) {
        let bytes = crate::export::as_bytes(values);
        let state = self.state();
        let allocation = state
            .allocations
            .iter()
            .find(|a| a.contains(address, bytes.len()))
            .expect("a range inside a fake allocation");
        // SAFETY: the range lies inside the allocation (checked), which the fake owns; the
        // Mutex serialises access.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), allocation.pointer(address), bytes.len())
        };
    }

    /// Reads `count` elements at `address`.
    pub(crate) fn read<T: Element>(&self, address: usize, count: usize) -> Vec<T> {
        let state = self.state();
        let bytes = count * size_of::<T>();
        let allocation = state
            .allocations
            .iter()
            .find(|a| a.contains(address, bytes))
            .expect("a range inside a fake allocation");
        let mut out = Vec::<T>::with_capacity(count);
        // SAFETY: the range lies inside the allocation (checked) and holds `count` valid
        // elements (tests write only valid values); `out` has room for them.
        unsafe {
            core::ptr::copy_nonoverlapping(
                allocation.pointer(address).cast_const(),
                out.as_mut_ptr().cast::<u8>(),
                bytes,
            );
            out.set_len(count);
        }
        out
    }

    /// Makes the next call named `call` fail (`"attributes"`, `"record"`, `"wait"`, `"to_host"`).
    pub(crate) fn fail(&self, call: &'static str) {
        self.state().fail = Some(call);
    }

    /// The calls so far, and forgets them.
    pub(crate) fn take_calls(&self) -> Vec<Call> {
        core::mem::take(&mut self.state().calls)
    }

    /// Events created and not destroyed.
    pub(crate) fn live_events(&self) -> usize {
        self.state().live_events
    }

    fn failing(state: &mut State, call: &'static str) -> Result<(), Error> {
        if state.fail == Some(call) {
            state.fail = None;
            return Err(runtime_error(format!(
                "{call} failed: CUDA_ERROR_UNKNOWN (fake)"
            )));
        }
        Ok(())
    }

    fn handle(queue: Queue<'_, FakeStream>) -> usize {
        queue.stream.map_or(STREAM_LEGACY, |s| s.handle)
    }

    /// A pointer to `bytes` bytes at `address` inside an allocation, or the driver's error.
    fn find(state: &State, address: usize, bytes: usize) -> Result<*mut u8, Error> {
        state
            .allocations
            .iter()
            .find(|a| a.contains(address, bytes))
            .map(|a| a.pointer(address))
            .ok_or_else(|| {
                runtime_error(format!(
                    "cuMemcpy failed: CUDA_ERROR_INVALID_VALUE (fake: {bytes} bytes at {address:#x} are not allocated)"
                ))
            })
    }
}

impl Driver for Arc<Fake> {
    type Stream = FakeStream;
    type Event = usize;

    fn stream_ordinal(&self, stream: &FakeStream) -> i32 {
        stream.ordinal
    }

    fn stream_handle(&self, stream: &FakeStream) -> usize {
        stream.handle
    }

    fn pointer_attributes(&self, address: usize) -> Result<PointerAttributes, Error> {
        let mut state = self.state();
        state.calls.push(Call::Attributes { address });
        Fake::failing(&mut state, "attributes")?;
        Ok(state
            .allocations
            .iter()
            .find(|a| a.contains(address, 1))
            .map(|a| a.attributes)
            .unwrap_or_default())
    }

    fn create_event(&self, queue: Queue<'_, FakeStream>) -> Result<usize, Error> {
        let mut state = self.state();
        state.next_event += 1;
        let event = state.next_event;
        state.live_events += 1;
        state.calls.push(Call::CreateEvent {
            ordinal: queue.ordinal,
            event,
        });
        Ok(event)
    }

    unsafe fn record_event(
        &self,
        _queue: Queue<'_, FakeStream>,
        stream: usize,
        event: usize,
    ) -> Result<(), Error> {
        let mut state = self.state();
        state.calls.push(Call::Record { stream, event });
        Fake::failing(&mut state, "record")
    }

    fn wait_event(
        &self,
        queue: Queue<'_, FakeStream>,
        consumer: usize,
        event: usize,
    ) -> Result<(), Error> {
        let mut state = self.state();
        state.calls.push(Call::Wait {
            ordinal: queue.ordinal,
            consumer,
            event,
        });
        Fake::failing(&mut state, "wait")
    }

    fn destroy_event(&self, _queue: Queue<'_, FakeStream>, event: usize) -> Result<(), Error> {
        let mut state = self.state();
        state.live_events -= 1;
        state.calls.push(Call::Destroy { event });
        Ok(())
    }

    fn synchronize(&self, queue: Queue<'_, FakeStream>) -> Result<(), Error> {
        self.state().calls.push(Call::Synchronize {
            ordinal: queue.ordinal,
            stream: Fake::handle(queue),
        });
        Ok(())
    }

    unsafe fn copy_to_host(
        &self,
        queue: Queue<'_, FakeStream>,
        src: usize,
        dst: &mut [u8],
    ) -> Result<(), Error> {
        let mut state = self.state();
        state.calls.push(Call::ToHost {
            stream: Fake::handle(queue),
            src,
            bytes: dst.len(),
        });
        Fake::failing(&mut state, "to_host")?;
        let from = Fake::find(&state, src, dst.len())?;
        // SAFETY: `from` points to `dst.len()` bytes inside a fake allocation (checked), which
        // does not overlap the caller's host buffer.
        unsafe { core::ptr::copy_nonoverlapping(from.cast_const(), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    unsafe fn copy_from_host(
        &self,
        queue: Queue<'_, FakeStream>,
        src: &[u8],
        dst: usize,
    ) -> Result<(), Error> {
        let mut state = self.state();
        state.calls.push(Call::FromHost {
            stream: Fake::handle(queue),
            dst,
            bytes: src.len(),
        });
        let to = Fake::find(&state, dst, src.len())?;
        // SAFETY: `to` points to `src.len()` bytes inside a fake allocation (checked).
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), to, src.len()) };
        Ok(())
    }

    unsafe fn copy_on_device(
        &self,
        queue: Queue<'_, FakeStream>,
        src: usize,
        dst: usize,
        bytes: usize,
    ) -> Result<(), Error> {
        let mut state = self.state();
        state.calls.push(Call::OnDevice {
            stream: Fake::handle(queue),
            src,
            dst,
            bytes,
        });
        let from = Fake::find(&state, src, bytes)?;
        let to = Fake::find(&state, dst, bytes)?;
        // SAFETY: both ranges lie inside fake allocations (checked); the caller guarantees that
        // they do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(from.cast_const(), to, bytes) };
        Ok(())
    }
}

/// A producer that describes memory at `data` as a tensor on any device; counts its drops.
pub(crate) struct Claim {
    pub(crate) data: *mut u8,
    pub(crate) byte_offset: u64,
    pub(crate) dtype: DataType,
    pub(crate) device: Device,
    pub(crate) shape: Vec<i64>,
    pub(crate) strides: Vec<i64>,
    pub(crate) flags: Flags,
    pub(crate) drops: Arc<AtomicUsize>,
}

// SAFETY: `data` is only handed on as an address; the memory belongs to the fake driver or the
// test, which outlive the tensor.
unsafe impl Send for Claim {}

impl Claim {
    /// A compact row-major claim of `T`s of `shape` at `data` on `device`.
    pub(crate) fn new<T: Element>(data: *mut u8, device: Device, shape: &[i64]) -> Self {
        let mut strides = vec![0; shape.len()];
        let mut step = 1;
        for (s, &d) in strides.iter_mut().zip(shape).rev() {
            *s = step;
            step *= d.max(1);
        }
        Claim {
            data,
            byte_offset: 0,
            dtype: T::DTYPE,
            device,
            shape: shape.to_vec(),
            strides,
            flags: Flags::empty(),
            drops: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The same claim with other strides.
    pub(crate) fn strided(mut self, strides: &[i64]) -> Self {
        self.strides = strides.to_vec();
        self
    }

    /// The tensor (export, then validation: the path a foreign tensor takes too).
    pub(crate) fn tensor(self) -> ManagedTensor {
        ManagedTensor::export(self).expect("a well-formed claim")
    }

    pub(crate) fn drop_counter(&self) -> Arc<AtomicUsize> {
        self.drops.clone()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: tests build claims over memory that outlives the tensor (fake allocations or test
// buffers) and of the described size; `ndim` is the shape's length, which never changes.
unsafe impl Export for Claim {
    fn ndim(&self) -> usize {
        self.shape.len()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&self.shape);
        strides.copy_from_slice(&self.strides);
        ExportDesc {
            data: self.data.cast(),
            byte_offset: self.byte_offset,
            dtype: self.dtype,
            device: self.device,
            flags: self.flags,
            allocation: None,
        }
    }
}
