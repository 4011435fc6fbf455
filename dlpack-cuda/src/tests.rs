//! The hook logic against the fake driver: device claims, memory kinds, spans, stream values,
//! the event handshake and strided copies, without a GPU.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dlpack_core::protocol::{StreamRequest, parse_stream};
use dlpack_core::{Device, DeviceHooks, DeviceType, Error, Flags, MemoryKind, PyErrorKind};

use crate::driver::{STREAM_LEGACY, STREAM_PER_THREAD, memory_type};
use crate::fake_driver::{Call, Claim, Fake, FakeStream};
use crate::hooks::HookLogic;
use crate::import::CudaImport;

const CUDA_HOST: Device = Device::new(DeviceType::CUDA_HOST, 0);
const CUDA_MANAGED: Device = Device::new(DeviceType::CUDA_MANAGED, 0);

/// A stream on device 0 and one on device 1.
const STREAM_0: FakeStream = FakeStream {
    ordinal: 0,
    handle: 0x5000,
};
const STREAM_1: FakeStream = FakeStream {
    ordinal: 1,
    handle: 0x5100,
};

fn hooks(fake: &Arc<Fake>, streams: &[FakeStream]) -> HookLogic<Arc<Fake>> {
    let mut hooks = HookLogic::new(fake.clone());
    for &s in streams {
        hooks.add_stream(s).unwrap();
    }
    hooks
}

/// Device memory on `ordinal` holding `values`; returns its address.
fn device_memory<T: dlpack_core::Element>(fake: &Fake, ordinal: i32, values: &[T]) -> usize {
    let address = fake.alloc(size_of_val(values), memory_type::DEVICE, false, ordinal);
    fake.write(address, values);
    address
}

// --- device claims against pointer attributes ------------------------------------------------

#[test]
fn device_memory_on_the_claimed_ordinal_verifies_and_stays_device_only() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let address = device_memory(&fake, 1, &[1.0f32, 2.0, 3.0]);
    let mut tensor = Claim::new::<f32>(fake.pointer(address), Device::cuda(1), &[3]).tensor();
    let info = tensor.verify_device(&hooks).unwrap().unwrap();
    assert_eq!(
        (info.device, info.kind),
        (Device::cuda(1), MemoryKind::Device)
    );
    assert_eq!(info.allocation, Some(address..address + 12));
    assert_eq!(
        tensor.view::<f32>().unwrap_err(),
        Error::NotHostAccessible {
            device: Device::cuda(1)
        }
    );
}

#[test]
fn a_tensor_claiming_another_ordinal_is_a_device_mismatch() {
    let fake = Fake::new();
    let address = device_memory(&fake, 1, &[0u8; 4]);
    let mut tensor = Claim::new::<u8>(fake.pointer(address), Device::cuda(0), &[4]).tensor();
    assert_eq!(
        tensor.verify_device(&hooks(&fake, &[])).unwrap_err(),
        Error::DeviceMismatch {
            claimed: Device::cuda(0),
            actual: Device::cuda(1)
        }
    );
}

#[test]
fn pinned_host_memory_claimed_as_device_memory_is_a_memory_kind_mismatch() {
    let fake = Fake::new();
    let address = fake.alloc(16, memory_type::HOST, false, 0);
    let mut tensor = Claim::new::<u32>(fake.pointer(address), Device::cuda(0), &[4]).tensor();
    let err = tensor.verify_device(&hooks(&fake, &[])).unwrap_err();
    assert_eq!(
        err,
        Error::MemoryKindMismatch {
            claimed: Device::cuda(0),
            actual: MemoryKind::HostPinned
        }
    );
    assert_eq!(
        err.to_string(),
        "the tensor claims device cuda:0, but its memory is pinned host memory"
    );
}

#[test]
fn device_memory_claimed_as_pinned_or_managed_is_a_memory_kind_mismatch() {
    let fake = Fake::new();
    let address = device_memory(&fake, 0, &[0u16; 4]);
    for claim in [CUDA_HOST, CUDA_MANAGED] {
        let mut tensor = Claim::new::<u16>(fake.pointer(address), claim, &[4]).tensor();
        assert_eq!(
            tensor.verify_device(&hooks(&fake, &[])).unwrap_err(),
            Error::MemoryKindMismatch {
                claimed: claim,
                actual: MemoryKind::Device
            }
        );
    }
}

#[test]
fn pageable_host_memory_the_driver_does_not_know_is_an_unknown_pointer() {
    let fake = Fake::new();
    let mut pageable = vec![0f64; 4];
    let address = pageable.as_mut_ptr().addr();
    for claim in [Device::cuda(0), CUDA_HOST, CUDA_MANAGED] {
        let mut tensor = Claim::new::<f64>(pageable.as_mut_ptr().cast(), claim, &[4]).tensor();
        assert_eq!(
            tensor.verify_device(&hooks(&fake, &[])).unwrap_err(),
            Error::UnknownPointer {
                claimed: claim,
                address
            }
        );
    }
}

#[test]
fn a_span_beyond_the_allocation_is_refused() {
    let fake = Fake::new();
    let address = device_memory(&fake, 0, &[0f32; 6]);
    // 2 x 4 floats with row stride 4 reach 32 bytes of a 24-byte allocation.
    let mut tensor = Claim::new::<f32>(fake.pointer(address), Device::cuda(0), &[2, 4]).tensor();
    assert_eq!(
        tensor.verify_device(&hooks(&fake, &[])).unwrap_err(),
        Error::SpanOutsideAllocation {
            start: address,
            end: address + 32,
            alloc_start: address,
            alloc_end: address + 24
        }
    );
}

#[test]
fn a_negative_stride_reaching_below_the_allocation_is_refused() {
    let fake = Fake::new();
    let address = device_memory(&fake, 0, &[0i32; 4]);
    let mut claim = Claim::new::<i32>(fake.pointer(address), Device::cuda(0), &[4]).strided(&[-1]);
    claim.byte_offset = 8; // the first element is element 2: elements 2, 1, 0, -1
    let mut tensor = claim.tensor();
    // dlpack-core asks about the lowest reachable byte, which is not CUDA memory here.
    assert_eq!(
        tensor.verify_device(&hooks(&fake, &[])).unwrap_err(),
        Error::UnknownPointer {
            claimed: Device::cuda(0),
            address: address - 4
        }
    );
}

#[test]
fn managed_memory_verifies_as_cuda_managed_and_becomes_host_readable() {
    let fake = Fake::new();
    let address = fake.alloc(12, memory_type::DEVICE, true, 0);
    fake.write(address, &[7i32, 8, 9]);
    let mut tensor = Claim::new::<i32>(fake.pointer(address), CUDA_MANAGED, &[3]).tensor();
    let info = tensor.verify_device(&hooks(&fake, &[])).unwrap().unwrap();
    assert_eq!(info.kind, MemoryKind::Managed);
    assert_eq!(tensor.view::<i32>().unwrap().to_vec().unwrap(), [7, 8, 9]);
}

#[test]
fn managed_memory_reported_as_host_memory_is_still_managed() {
    // Drivers differ in the memory type they report for managed memory (device on most systems,
    // host on some: open-mpi/ompi#6799, intel/llvm#4181); IS_MANAGED decides.
    let fake = Fake::new();
    let address = fake.alloc(8, memory_type::HOST, true, 0);
    let mut tensor = Claim::new::<u8>(fake.pointer(address), CUDA_MANAGED, &[8]).tensor();
    let info = tensor.verify_device(&hooks(&fake, &[])).unwrap().unwrap();
    assert_eq!(info.kind, MemoryKind::Managed);
    assert!(tensor.is_host_accessible());
}

#[test]
fn managed_memory_may_be_claimed_as_cuda_device_memory() {
    let fake = Fake::new();
    let address = fake.alloc(8, memory_type::UNIFIED, false, 2);
    let mut tensor = Claim::new::<u8>(fake.pointer(address), Device::cuda(2), &[8]).tensor();
    let info = tensor.verify_device(&hooks(&fake, &[])).unwrap().unwrap();
    assert_eq!(
        (info.device, info.kind),
        (Device::cuda(2), MemoryKind::Managed)
    );
    // Host-readable now, although kDLCUDA alone would not say so.
    assert!(tensor.is_host_accessible());
}

#[test]
fn pinned_memory_verifies_as_cuda_host() {
    let fake = Fake::new();
    let address = fake.alloc(4, memory_type::HOST, false, 3);
    fake.write(address, &[true, false, true, true]);
    let mut tensor = Claim::new::<bool>(fake.pointer(address), CUDA_HOST, &[4]).tensor();
    let info = tensor.verify_device(&hooks(&fake, &[])).unwrap().unwrap();
    assert_eq!(
        (info.device, info.kind),
        (CUDA_HOST, MemoryKind::HostPinned)
    );
    assert_eq!(
        tensor.view::<bool>().unwrap().to_vec().unwrap(),
        [true, false, true, true]
    );
}

#[test]
fn a_cuda_array_or_an_unknown_memory_type_is_a_runtime_error() {
    let fake = Fake::new();
    for (kind, needle) in [(memory_type::ARRAY, "CUDA array"), (9, "memory type 9")] {
        let address = fake.alloc(4, kind, false, 0);
        let mut tensor = Claim::new::<u8>(fake.pointer(address), Device::cuda(0), &[4]).tensor();
        let err = tensor.verify_device(&hooks(&fake, &[])).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Runtime {
                    runtime: "CUDA driver",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains(needle), "{err}");
    }
}

#[test]
fn a_failing_attribute_query_is_passed_on() {
    let fake = Fake::new();
    let address = device_memory(&fake, 0, &[0u8; 4]);
    let mut tensor = Claim::new::<u8>(fake.pointer(address), Device::cuda(0), &[4]).tensor();
    fake.fail("attributes");
    let err = tensor.verify_device(&hooks(&fake, &[])).unwrap_err();
    assert!(err.to_string().contains("attributes failed"), "{err}");
}

#[test]
fn the_hooks_handle_only_the_three_cuda_device_types() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    for t in DeviceType::ALL {
        let cuda = matches!(
            *t,
            DeviceType::CUDA | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED
        );
        assert_eq!(hooks.handles(*t), cuda, "{t}");
        if !cuda {
            let device = Device::new(*t, 0);
            let refused = Err(Error::NoHook { device });
            assert_eq!(hooks.resolve(device, 0x1000).map(|_| ()), refused);
            assert_eq!(hooks.make_ready(device, StreamRequest::Default), refused);
            assert_eq!(hooks.wait_host(device), refused);
        }
    }
    assert!(fake.take_calls().is_empty(), "refusals make no driver call");
}

#[test]
fn a_tensor_without_elements_needs_no_driver_call() {
    let fake = Fake::new();
    let mut tensor = Claim::new::<f32>(core::ptr::null_mut(), Device::cuda(0), &[0, 3]).tensor();
    assert_eq!(tensor.verify_device(&hooks(&fake, &[])), Ok(None));
    assert!(fake.take_calls().is_empty());
}

// --- streams and the handshake ------------------------------------------------------------

/// The calls of one handshake from `stream` (on device `ordinal`) to `consumer`.
fn handshake(ordinal: i32, stream: usize, consumer: usize, event: usize) -> Vec<Call> {
    vec![
        Call::CreateEvent { ordinal, event },
        Call::Record { stream, event },
        Call::Wait {
            ordinal,
            consumer,
            event,
        },
        Call::Destroy { event },
    ]
}

#[test]
fn python_stream_values_become_the_consumer_streams_the_producer_waits_for() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    let cuda0 = Device::cuda(0);
    #[rustfmt::skip]
    let table: &[(Option<i64>, usize)] = &[
        (None, STREAM_LEGACY),     // None: the legacy default stream
        (Some(1), STREAM_LEGACY),  // 1: the legacy default stream
        (Some(2), STREAM_PER_THREAD), // 2: the per-thread default stream
        (Some(0x7f00), 0x7f00),    // > 2: a cudaStream_t
    ];
    for (n, &(value, consumer)) in table.iter().enumerate() {
        let request = parse_stream(cuda0, value).unwrap();
        hooks.make_ready(cuda0, request).unwrap();
        assert_eq!(
            fake.take_calls(),
            handshake(0, STREAM_0.handle, consumer, n + 1),
            "stream={value:?}"
        );
    }
    assert_eq!(fake.live_events(), 0, "every event is destroyed");
}

#[test]
fn stream_minus_one_asks_for_no_synchronisation_and_makes_no_driver_call() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    let request = parse_stream(Device::cuda(0), Some(-1)).unwrap();
    assert_eq!(request, StreamRequest::NoSync);
    hooks.make_ready(Device::cuda(0), request).unwrap();
    assert!(fake.take_calls().is_empty());
}

#[test]
fn stream_zero_and_other_values_below_minus_one_are_refused_before_the_hooks() {
    for value in [0, -2, i64::MIN] {
        for device in [Device::cuda(0), CUDA_HOST, CUDA_MANAGED] {
            let err = parse_stream(device, Some(value)).unwrap_err();
            assert_eq!(err.py_kind(), PyErrorKind::ValueError, "stream={value}");
            assert!(
                err.to_string().contains(&format!("stream={value}")),
                "{err}"
            );
        }
    }
}

#[test]
fn a_consumer_on_the_producer_stream_needs_no_event() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    hooks
        .make_ready(Device::cuda(0), StreamRequest::Handle(STREAM_0.handle))
        .unwrap();
    // The null stream is the legacy default stream.
    let null = hooks_on(
        &fake,
        FakeStream {
            ordinal: 0,
            handle: 0,
        },
    );
    null.make_ready(Device::cuda(0), StreamRequest::LegacyDefault)
        .unwrap();
    null.make_ready(Device::cuda(0), StreamRequest::Default)
        .unwrap();
    assert!(fake.take_calls().is_empty());
}

fn hooks_on(fake: &Arc<Fake>, stream: FakeStream) -> HookLogic<Arc<Fake>> {
    hooks(fake, &[stream])
}

#[test]
fn without_a_stream_the_producer_side_is_the_legacy_default_stream() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    hooks
        .make_ready(Device::cuda(3), StreamRequest::PerThreadDefault)
        .unwrap();
    assert_eq!(
        fake.take_calls(),
        handshake(3, STREAM_LEGACY, STREAM_PER_THREAD, 1)
    );
    // Legacy to legacy: one stream, nothing to do.
    hooks
        .make_ready(Device::cuda(3), StreamRequest::LegacyDefault)
        .unwrap();
    assert!(fake.take_calls().is_empty());
}

#[test]
fn each_device_uses_its_own_stream_and_pinned_or_managed_memory_the_first() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_1, STREAM_0]);
    hooks
        .make_ready(Device::cuda(0), StreamRequest::Handle(0x9000))
        .unwrap();
    assert_eq!(fake.take_calls(), handshake(0, STREAM_0.handle, 0x9000, 1));
    for (n, device) in [CUDA_HOST, CUDA_MANAGED].into_iter().enumerate() {
        hooks
            .make_ready(device, StreamRequest::Handle(0x9000))
            .unwrap();
        assert_eq!(
            fake.take_calls(),
            handshake(1, STREAM_1.handle, 0x9000, n + 2),
            "{device}"
        );
    }
}

/// `HookLogic::wait_for` over the fake, which dereferences no stream handle.
fn wait_for(hooks: &HookLogic<Arc<Fake>>, device: Device, producer: usize) -> Result<(), Error> {
    // SAFETY: the fake driver only records the handle.
    unsafe { hooks.wait_for(device, producer) }
}

#[test]
fn a_consumer_stream_waits_for_the_stream_a_producer_names() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    wait_for(&hooks, Device::cuda(0), 0x7f00).unwrap();
    assert_eq!(fake.take_calls(), handshake(0, 0x7f00, STREAM_0.handle, 1));
    // The consumer's own stream, or (for a device without one) the legacy default stream,
    // named 0 or 1: one stream, nothing to order.
    wait_for(&hooks, Device::cuda(0), STREAM_0.handle).unwrap();
    wait_for(&hooks, Device::cuda(3), 0).unwrap();
    wait_for(&hooks, Device::cuda(3), STREAM_LEGACY).unwrap();
    assert!(fake.take_calls().is_empty());
    // A device without a stream: its legacy default stream waits, in its own context.
    wait_for(&hooks, Device::cuda(3), STREAM_PER_THREAD).unwrap();
    assert_eq!(
        fake.take_calls(),
        handshake(3, STREAM_PER_THREAD, STREAM_LEGACY, 2)
    );
    // Pinned and managed memory: the first stream waits; the null stream is the legacy one.
    for (n, device) in [CUDA_HOST, CUDA_MANAGED].into_iter().enumerate() {
        wait_for(&hooks, device, 0).unwrap();
        assert_eq!(
            fake.take_calls(),
            handshake(0, STREAM_LEGACY, STREAM_0.handle, n + 3),
            "{device}"
        );
    }
    assert_eq!(fake.live_events(), 0, "every event is destroyed");
    let cpu = Device::new(DeviceType::CPU, 0);
    assert_eq!(
        wait_for(&hooks, cpu, 0x7f00),
        Err(Error::NoHook { device: cpu })
    );
    assert!(
        fake.take_calls().is_empty(),
        "a refusal makes no driver call"
    );
}

#[test]
fn a_failed_record_or_wait_on_a_producer_stream_still_destroys_the_event() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    for (n, call) in ["record", "wait"].into_iter().enumerate() {
        fake.fail(call);
        let err = wait_for(&hooks, Device::cuda(0), 0x7f00).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("CUDA driver: {call} failed")),
            "{err}"
        );
        let calls = fake.take_calls();
        assert_eq!(
            calls.last(),
            Some(&Call::Destroy { event: n + 1 }),
            "{call}"
        );
        assert_eq!(fake.live_events(), 0, "{call}");
    }
}

#[test]
fn a_second_stream_for_the_same_device_is_refused() {
    let fake = Fake::new();
    let mut hooks = hooks(&fake, &[STREAM_0]);
    let err = hooks
        .add_stream(FakeStream {
            ordinal: 0,
            handle: 0x6000,
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("cuda:0 is already configured"),
        "{err}"
    );
}

#[test]
fn the_per_thread_default_stream_is_refused_as_the_hooks_stream() {
    // The driver reads handle 2 as the calling thread's own stream, and hooks run on any
    // thread: a consumer thread's make_ready would record its event on an empty stream.
    let fake = Fake::new();
    let mut hooks = HookLogic::new(fake.clone());
    let err = hooks
        .add_stream(FakeStream {
            ordinal: 0,
            handle: STREAM_PER_THREAD,
        })
        .unwrap_err();
    assert!(matches!(err, Error::Runtime { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("per-thread default stream") && message.contains("new_stream()"),
        "{message}"
    );
    // Nothing was configured: device 0 is served on the legacy default stream, and a consumer
    // asking for its own per-thread stream (stream=2, on its thread) gets the event.
    assert_eq!(hooks.consumer_stream(Device::cuda(0)), Ok(1));
    hooks
        .make_ready(Device::cuda(0), StreamRequest::PerThreadDefault)
        .unwrap();
    assert_eq!(
        fake.take_calls(),
        handshake(0, STREAM_LEGACY, STREAM_PER_THREAD, 1)
    );
}

#[test]
fn the_event_is_destroyed_even_when_recording_or_waiting_fails() {
    for failing in ["record", "wait"] {
        let fake = Fake::new();
        let hooks = hooks(&fake, &[STREAM_0]);
        fake.fail(failing);
        let err = hooks
            .make_ready(Device::cuda(0), StreamRequest::Handle(0x9000))
            .unwrap_err();
        assert!(
            err.to_string().contains(&format!("{failing} failed")),
            "{err}"
        );
        assert_eq!(fake.live_events(), 0, "{failing}");
        assert_eq!(
            fake.take_calls().last(),
            Some(&Call::Destroy { event: 1 }),
            "{failing}"
        );
    }
}

#[test]
fn wait_host_synchronises_the_stream_of_the_device() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    hooks.wait_host(Device::cuda(0)).unwrap();
    hooks.wait_host(CUDA_MANAGED).unwrap();
    hooks.wait_host(Device::cuda(2)).unwrap();
    assert_eq!(
        fake.take_calls(),
        [
            Call::Synchronize {
                ordinal: 0,
                stream: STREAM_0.handle
            },
            Call::Synchronize {
                ordinal: 0,
                stream: STREAM_0.handle
            },
            Call::Synchronize {
                ordinal: 2,
                stream: STREAM_LEGACY
            },
        ]
    );
}

#[test]
fn the_consumer_stream_argument_names_our_stream() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    assert_eq!(hooks.consumer_stream(Device::cuda(0)), Ok(0x5000));
    assert_eq!(hooks.consumer_stream(Device::cuda(1)), Ok(1));
    let null = hooks_on(
        &fake,
        FakeStream {
            ordinal: 0,
            handle: 0,
        },
    );
    assert_eq!(null.consumer_stream(Device::cuda(0)), Ok(1));
}

// --- copies ---------------------------------------------------------------------------------

#[test]
fn a_device_tensor_comes_to_the_host_with_one_copy_on_our_stream() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    let values: Vec<u64> = (0..6).collect();
    let address = device_memory(&fake, 0, &values);
    let tensor = Claim::new::<u64>(fake.pointer(address), Device::cuda(0), &[2, 3]).tensor();
    assert_eq!(tensor.to_host_vec::<u64>(&hooks).unwrap(), values);
    assert_eq!(
        fake.take_calls(),
        [Call::ToHost {
            stream: STREAM_0.handle,
            src: address,
            bytes: 48
        }]
    );
}

#[test]
fn a_transposed_device_tensor_comes_back_in_row_major_order() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let address = device_memory(&fake, 0, &[0i16, 1, 2, 3, 4, 5]); // a row-major 2x3 matrix
    let tensor = Claim::new::<i16>(fake.pointer(address), Device::cuda(0), &[3, 2])
        .strided(&[1, 3])
        .tensor();
    assert_eq!(
        tensor.to_host_vec::<i16>(&hooks).unwrap(),
        [0, 3, 1, 4, 2, 5]
    );
}

#[test]
fn a_failing_copy_is_an_error_not_garbage() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let address = device_memory(&fake, 0, &[1u8, 2]);
    let tensor = Claim::new::<u8>(fake.pointer(address), Device::cuda(0), &[2]).tensor();
    fake.fail("to_host");
    let err = tensor.to_host_vec::<u8>(&hooks).unwrap_err();
    assert!(err.to_string().contains("to_host failed"), "{err}");
}

/// A verified import of `T`s of `shape` and `strides` at `address` (+ `byte_offset`) on cuda:0.
fn verified_import<T: dlpack_core::Element>(
    fake: &Arc<Fake>,
    hooks: &HookLogic<Arc<Fake>>,
    address: usize,
    byte_offset: u64,
    shape: &[i64],
    strides: &[i64],
) -> CudaImport {
    let mut claim = Claim::new::<T>(fake.pointer(address), Device::cuda(0), shape).strided(strides);
    claim.byte_offset = byte_offset;
    CudaImport::new(claim.tensor(), hooks).unwrap()
}

#[test]
fn copy_from_host_writes_a_contiguous_tensor_with_one_copy() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    let address = device_memory(&fake, 0, &[0f32; 6]);
    let mut import = verified_import::<f32>(&fake, &hooks, address, 0, &[2, 3], &[3, 1]);
    fake.take_calls();
    let values = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    import.copy_from_host(&hooks, &values).unwrap();
    assert_eq!(
        fake.take_calls(),
        [Call::FromHost {
            stream: STREAM_0.handle,
            dst: address,
            bytes: 24
        }]
    );
    assert_eq!(fake.read::<f32>(address, 6), values);
    assert_eq!(import.to_host_vec::<f32>(&hooks).unwrap(), values);
}

#[test]
fn copy_from_host_scatters_into_a_transposed_tensor_with_one_copy() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let address = device_memory(&fake, 0, &[0u8; 6]);
    // A 3x2 view of a row-major 2x3 matrix.
    let mut import = verified_import::<u8>(&fake, &hooks, address, 0, &[3, 2], &[1, 3]);
    fake.take_calls();
    import
        .copy_from_host(&hooks, &[0u8, 3, 1, 4, 2, 5])
        .unwrap();
    assert_eq!(fake.take_calls().len(), 1);
    assert_eq!(fake.read::<u8>(address, 6), [0, 1, 2, 3, 4, 5]);
}

#[test]
fn copy_from_host_handles_negative_strides() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let address = device_memory(&fake, 0, &[0i32; 4]);
    // Reversed: the first element is the last one in memory.
    let mut import = verified_import::<i32>(&fake, &hooks, address, 12, &[4], &[-1]);
    import.copy_from_host(&hooks, &[1i32, 2, 3, 4]).unwrap();
    assert_eq!(fake.read::<i32>(address, 4), [4, 3, 2, 1]);
    assert_eq!(import.to_host_vec::<i32>(&hooks).unwrap(), [1, 2, 3, 4]);
}

#[test]
fn copy_from_host_into_a_tensor_with_gaps_leaves_the_gaps_untouched() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let address = device_memory(&fake, 0, &[9u16; 8]);
    // Rows 0..2, columns 1..3 of a 2x4 matrix: two runs of two elements.
    let mut import = verified_import::<u16>(&fake, &hooks, address, 2, &[2, 2], &[4, 1]);
    fake.take_calls();
    import.copy_from_host(&hooks, &[1u16, 2, 3, 4]).unwrap();
    assert_eq!(fake.take_calls().len(), 2, "one copy per row");
    assert_eq!(fake.read::<u16>(address, 8), [9, 1, 2, 9, 9, 3, 4, 9]);
    // Columns 0 and 2 of the same matrix, transposed: single-element runs.
    let mut import = verified_import::<u16>(&fake, &hooks, address, 0, &[2, 2], &[2, 4]);
    import.copy_from_host(&hooks, &[5u16, 6, 7, 8]).unwrap();
    assert_eq!(fake.read::<u16>(address, 8), [5, 1, 7, 9, 6, 3, 8, 9]);
}

#[test]
fn copy_from_host_refuses_what_it_cannot_write_exactly() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let address = device_memory(&fake, 0, &[0f64; 6]);
    let mut import = verified_import::<f64>(&fake, &hooks, address, 0, &[2, 3], &[3, 1]);
    assert_eq!(
        import.copy_from_host(&hooks, &[1.0f64; 5]),
        Err(Error::ShapeMismatch {
            found: vec![2, 3],
            expected: vec![5]
        })
    );
    assert!(matches!(
        import.copy_from_host(&hooks, &[1.0f32; 6]),
        Err(Error::DataTypeMismatch { .. })
    ));
    let mut broadcast = verified_import::<f64>(&fake, &hooks, address, 0, &[2, 3], &[0, 1]);
    assert!(matches!(
        broadcast.copy_from_host(&hooks, &[1.0f64; 6]),
        Err(Error::OverlappingStrides { .. })
    ));
    let mut claim = Claim::new::<f64>(fake.pointer(address), Device::cuda(0), &[6]);
    claim.flags = Flags::READ_ONLY;
    let mut read_only = CudaImport::new(claim.tensor(), &hooks).unwrap();
    assert_eq!(
        read_only.copy_from_host(&hooks, &[1.0f64; 6]),
        Err(Error::ReadOnly)
    );
    assert_eq!(
        fake.read::<f64>(address, 6),
        [0.0; 6],
        "nothing was written"
    );
}

// --- imports own the tensor -----------------------------------------------------------------

#[test]
fn a_refused_import_deletes_the_tensor_once() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let address = device_memory(&fake, 1, &[0u8; 4]);
    let claim = Claim::new::<u8>(fake.pointer(address), Device::cuda(0), &[4]);
    let drops = claim.drop_counter();
    let err = CudaImport::new(claim.tensor(), &hooks).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { .. }), "{err:?}");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn an_import_deletes_the_tensor_once_when_dropped_and_never_before() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let address = device_memory(&fake, 0, &[3u32; 2]);
    let claim = Claim::new::<u32>(fake.pointer(address), Device::cuda(0), &[2]);
    let drops = claim.drop_counter();
    let import = CudaImport::new(claim.tensor(), &hooks).unwrap();
    assert_eq!(import.memory_kind(), Some(MemoryKind::Device));
    assert_eq!(import.to_host_vec::<u32>(&hooks).unwrap(), [3, 3]);
    let view = import.device_view::<u32>().unwrap();
    assert_eq!(
        (view.device_ptr(), view.shape()),
        (address as u64, &[2][..])
    );
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(import);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(
        fake.read::<u32>(address, 2),
        [3, 3],
        "the memory itself stays"
    );
}

#[test]
fn imports_refuse_tensors_that_are_not_on_a_cuda_device_type() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let mut host = vec![1u8, 2];
    for device in [Device::CPU, Device::oneapi(0)] {
        let claim = Claim::new::<u8>(host.as_mut_ptr(), device, &[2]);
        let drops = claim.drop_counter();
        assert_eq!(
            CudaImport::new(claim.tensor(), &hooks).unwrap_err(),
            Error::NoHook { device }
        );
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn managed_imports_are_read_in_place_after_waiting_for_our_stream() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[STREAM_0]);
    let address = fake.alloc(8, memory_type::DEVICE, true, 0);
    fake.write(address, &[1.5f32, 2.5]);
    let claim = Claim::new::<f32>(fake.pointer(address), CUDA_MANAGED, &[2]);
    let import = CudaImport::new(claim.tensor(), &hooks).unwrap();
    fake.take_calls();
    assert_eq!(
        import.host_view::<f32>(&hooks).unwrap().to_vec().unwrap(),
        [1.5, 2.5]
    );
    assert_eq!(import.to_host_vec::<f32>(&hooks).unwrap(), [1.5, 2.5]);
    let sync = Call::Synchronize {
        ordinal: 0,
        stream: STREAM_0.handle,
    };
    assert_eq!(
        fake.take_calls(),
        [sync.clone(), sync],
        "no copy, one wait each"
    );
}

#[test]
fn device_imports_have_no_host_view() {
    let fake = Fake::new();
    let hooks = hooks(&fake, &[]);
    let address = device_memory(&fake, 0, &[0u8; 2]);
    let import = verified_import::<u8>(&fake, &hooks, address, 0, &[2], &[1]);
    assert_eq!(
        import.host_view::<u8>(&hooks).unwrap_err(),
        Error::NotHostAccessible {
            device: Device::cuda(0)
        }
    );
    assert!(matches!(
        import.device_view::<i8>(),
        Err(Error::DataTypeMismatch { .. })
    ));
}

#[test]
fn host_buffers_are_send_and_sync_like_the_cudarc_slices_they_wrap() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<crate::PinnedBuffer<f32>>();
    send_sync::<crate::ManagedBuffer<f32>>();
    send_sync::<crate::CudaBuffer<f32>>();
}
