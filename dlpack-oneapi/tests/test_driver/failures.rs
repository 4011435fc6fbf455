//! Device failures. The driver fails a named entry point on request (`DriverSupport::fail`), as a
//! real driver does when the device is lost, and holds a device's command lists so that a copy is
//! certainly still pending when the host wait for it fails. The crate must then return the error,
//! panic nowhere, and release or reuse nothing that the pending work may still touch: the driver
//! refuses and counts such releases (the misuse check after every case), and a pending copy runs
//! once the hold ends, into memory that must still be there.

use dlpack_core::protocol::StreamRequest;
use dlpack_core::{Device, DeviceHooks, Error, ManagedTensor};
use dlpack_oneapi::{Queue, UsmBuffer, UsmKind, sys};

use crate::Fixture;
use crate::common::{Failure, Misuses};
use crate::helpers::{LOST, Leaked, append_copy, assert_runtime_error, context, f32s, root};
use crate::queues::handshake;

pub(crate) fn the_test_driver_refuses_to_release_what_unfinished_work_uses_and_injects_failures(
    fx: &Fixture,
) {
    // What makes the misuse check after every case meaningful.
    let ctx = context(fx);
    let ze = fx.driver.level_zero();
    let api = ze.api();
    let host = sys::ze_host_mem_alloc_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC,
        pNext: core::ptr::null(),
        flags: 0,
    };
    let list_desc = sys::ze_command_queue_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
        pNext: core::ptr::null(),
        ordinal: 0,
        index: 0,
        flags: 0,
        mode: sys::ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
        priority: sys::ZE_COMMAND_QUEUE_PRIORITY_NORMAL,
    };
    let pool_desc = sys::ze_event_pool_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
        pNext: core::ptr::null(),
        flags: sys::ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
        count: 1,
    };
    let event_desc = sys::ze_event_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_EVENT_DESC,
        pNext: core::ptr::null(),
        index: 0,
        signal: sys::ZE_EVENT_SCOPE_FLAG_HOST,
        wait: sys::ZE_EVENT_SCOPE_FLAG_HOST,
    };
    let (mut usm, mut list, mut pool, mut event) = (
        core::ptr::null_mut(),
        core::ptr::null_mut(),
        core::ptr::null_mut(),
        core::ptr::null_mut(),
    );
    let source = [7u8; 64];
    let ok = sys::ZE_RESULT_SUCCESS;
    let in_use = sys::ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
    let before = fx.support.misuses();
    // SAFETY: raw calls with live handles, valid descriptors and out-pointers; `source` and the
    // allocation outlive the copy (the list is drained before they go), and every object is
    // released below.
    unsafe {
        assert_eq!((api.zeMemAllocHost)(ctx.raw(), &host, 64, 64, &mut usm), ok);
        let device = root(&ctx, 0).raw();
        let created = (api.zeCommandListCreateImmediate)(ctx.raw(), device, &list_desc, &mut list);
        assert_eq!(created, ok);
        let no_devices = core::ptr::null_mut();
        let pooled = (api.zeEventPoolCreate)(ctx.raw(), &pool_desc, 0, no_devices, &mut pool);
        assert_eq!(pooled, ok);
        assert_eq!((api.zeEventCreate)(pool, &event_desc, &mut event), ok);
        let held = fx.support.hold(0);
        let copy = (api.zeCommandListAppendMemoryCopy)(
            list,
            usm,
            source.as_ptr().cast(),
            64,
            event,
            0,
            core::ptr::null_mut(),
        );
        assert_eq!(copy, ok);
        // A second copy behind the pending one with no barrier between: counted (on real
        // hardware the two may run at once).
        let unordered = (api.zeCommandListAppendMemoryCopy)(
            list,
            usm,
            source.as_ptr().cast(),
            64,
            core::ptr::null_mut(),
            0,
            core::ptr::null_mut(),
        );
        assert_eq!(unordered, ok);
        // The copy is pending: none of what it uses may go.
        assert_eq!((api.zeMemFree)(ctx.raw(), usm), in_use);
        assert_eq!((api.zeEventHostReset)(event), in_use);
        assert_eq!((api.zeEventDestroy)(event), in_use);
        assert_eq!((api.zeCommandListDestroy)(list), in_use);
        // A failure armed for the next host wait is returned once, without waiting.
        fx.support
            .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
        assert_eq!((api.zeEventHostSynchronize)(event, u64::MAX), LOST);
        assert_eq!((api.zeEventQueryStatus)(event), sys::ZE_RESULT_NOT_READY);
        drop(held);
        assert_eq!((api.zeEventHostSynchronize)(event, u64::MAX), ok);
        assert_eq!(core::slice::from_raw_parts(usm.cast::<u8>(), 64), source);
        // Signalling an event that is still signalled: counted.
        let no_waits = core::ptr::null_mut();
        assert_eq!(
            (api.zeCommandListAppendBarrier)(list, event, 0, no_waits),
            ok
        );
        // (A host wait would return at once, the event being signalled: settle instead.)
        fx.support.settle();
        // A failure after the call: the reset happens, the error is returned.
        fx.support
            .fail("zeEventHostReset", 0, 1, LOST, Failure::After);
        assert_eq!((api.zeEventHostReset)(event), LOST);
        assert_eq!((api.zeEventQueryStatus)(event), sys::ZE_RESULT_NOT_READY);
        // Skipped calls run; armed failures that no call returned are reported.
        fx.support
            .fail("zeEventQueryStatus", 1, 2, LOST, Failure::Instead);
        assert_eq!((api.zeEventQueryStatus)(event), sys::ZE_RESULT_NOT_READY);
        assert_eq!((api.zeEventQueryStatus)(event), LOST);
        assert_eq!(fx.support.clear_failures(), 1);
        assert_eq!((api.zeEventQueryStatus)(event), sys::ZE_RESULT_NOT_READY);
        assert_eq!((api.zeEventDestroy)(event), ok);
        assert_eq!((api.zeEventPoolDestroy)(pool), ok);
        assert_eq!((api.zeCommandListDestroy)(list), ok);
        assert_eq!((api.zeMemFree)(ctx.raw(), usm), ok);
    }
    // Only known entry points, real errors and known flags can be armed.
    let bad = sys::ZE_RESULT_ERROR_INVALID_ARGUMENT;
    assert_eq!(fx.support.arm("zeEventHostSync", 0, 1, LOST, 0), bad);
    assert_eq!(
        fx.support.arm("zeMemFree", 0, 1, sys::ZE_RESULT_SUCCESS, 0),
        bad
    );
    assert_eq!(fx.support.arm("zeMemFree", 0, 1, LOST, 2), bad);
    let misuses = Misuses {
        frees_in_use: 1,
        event_resets_in_use: 1,
        event_destroys_in_use: 1,
        list_destroys_in_use: 1,
        signalled_signal_events: 1,
        unordered_copies: 1,
    };
    let after = fx.support.misuses();
    assert_eq!(
        (
            after.frees_in_use - before.frees_in_use,
            after.event_resets_in_use - before.event_resets_in_use,
            after.event_destroys_in_use - before.event_destroys_in_use,
            after.list_destroys_in_use - before.list_destroys_in_use,
            after.signalled_signal_events - before.signalled_signal_events,
            after.unordered_copies - before.unordered_copies,
        ),
        (1, 1, 1, 1, 1, 1)
    );
    *fx.allowed_misuses.lock().unwrap() = misuses;
}

pub(crate) fn a_copy_whose_host_wait_fails_keeps_its_event_staging_buffer_and_source(fx: &Fixture) {
    let ctx = context(fx);
    let data = f32s(1000);
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 0), UsmKind::Device, &data).unwrap();
    let address = buffer.as_ptr().addr();
    let leaks = dlpack_oneapi::leaks();
    let held = fx.support.hold(0);
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    let err = buffer.to_vec().unwrap_err();
    assert_runtime_error(
        &err,
        &[
            "zeEventHostSynchronize returned ZE_RESULT_ERROR_DEVICE_LOST",
            "cannot confirm that the copy finished, so it may still be running",
            "leaked rather than reused or freed",
        ],
    );
    // The copy is still held: its event and the staging Vec it will write are kept.
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            host_bytes: 4000,
            ..Leaked::default()
        }
    );
    drop(held);
    fx.support.settle();
    // The copy ran (into the leaked Vec); the queue and the buffer go on working.
    assert_eq!(buffer.to_vec().unwrap(), data);
    drop(buffer);
    // The copy read the buffer while Level Zero could not tell: its allocation is kept.
    assert!(ctx.allocation_of(address).unwrap().is_some());
    drop(ctx);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            event_pools: 1,
            allocations: 1,
            contexts: 1,
            host_bytes: 4000,
            ..Leaked::default()
        }
    );
}

pub(crate) fn filling_device_memory_whose_host_wait_fails_keeps_the_allocation(fx: &Fixture) {
    let ctx = context(fx);
    let mut target = UsmBuffer::<f32>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Device, 8).unwrap();
    let target_address = target.as_ptr().addr();
    let data = f32s(256);
    let eights = [8.0f32; 8];
    let allocations = fx.support.live().allocations;
    let leaks = dlpack_oneapi::leaks();
    let held = [fx.support.hold(0), fx.support.hold(1)];
    let host_wait = "zeEventHostSynchronize";
    // A new buffer filled from the host: the allocation the held copy will write stays.
    fx.support.fail(host_wait, 0, 1, LOST, Failure::Instead);
    let err = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &data).unwrap_err();
    assert_runtime_error(
        &err,
        &["ZE_RESULT_ERROR_DEVICE_LOST", "may still be running"],
    );
    assert_eq!(fx.support.live().allocations, allocations + 1);
    // A zeroed one: the allocation and the zeros the held copy will read stay.
    fx.support.fail(host_wait, 0, 1, LOST, Failure::Instead);
    let err = UsmBuffer::<u32>::zeroed(&ctx, &root(&ctx, 1), UsmKind::Device, 64).unwrap_err();
    assert_runtime_error(&err, &["may still be running"]);
    assert_eq!(fx.support.live().allocations, allocations + 2);
    // An existing buffer overwritten from the host: kept when dropped.
    fx.support.fail(host_wait, 0, 1, LOST, Failure::Instead);
    let err = target.copy_from_host(&eights).unwrap_err();
    assert_runtime_error(&err, &["may still be running"]);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 3,
            allocations: 2,
            host_bytes: 256,
            ..Leaked::default()
        }
    );
    drop(held);
    fx.support.settle();
    // The held copies ran (`data` and `eights` are still here for them to read).
    assert_eq!(target.to_vec().unwrap(), eights);
    drop(target);
    assert!(ctx.allocation_of(target_address).unwrap().is_some());
    drop(ctx);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 3,
            event_pools: 2,
            allocations: 3,
            contexts: 1,
            host_bytes: 256,
            ..Leaked::default()
        }
    );
}

pub(crate) fn a_copy_hook_whose_host_wait_fails_leaves_the_callers_memory_to_the_copy(
    fx: &Fixture,
) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 0), UsmKind::Device, &[9u8; 64]).unwrap();
    let address = buffer.as_ptr().addr();
    let leaks = dlpack_oneapi::leaks();
    // What `copy_to_host`'s contract asks after a `CopyInFlight`: the destination is leaked.
    let out: &'static mut [u8] = Box::leak(vec![0xEEu8; 64].into_boxed_slice());
    let held = fx.support.hold(0);
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    // SAFETY: the buffer is live USM of device 0 that nothing writes during the call; `out` is
    // leaked, as the contract asks after a `CopyInFlight`.
    let err = unsafe { hooks.copy_to_host(Device::oneapi(0), address, out) }.unwrap_err();
    let Error::CopyInFlight { runtime, message } = &err else {
        panic!("expected CopyInFlight, got {err:?}");
    };
    assert_eq!(*runtime, "Level Zero");
    assert!(message.contains("ZE_RESULT_ERROR_DEVICE_LOST"), "{message}");
    assert!(err.to_string().contains("destination was leaked"), "{err}");
    drop(held);
    fx.support.settle();
    assert_eq!(
        out, [9; 64],
        "the copy ran after the error, into the leaked memory"
    );
    // Through the tensor API: an error, not a panic, and dlpack-core leaks its staging buffer
    // (freed, the copy that runs after the error would write freed memory).
    let tensor = ManagedTensor::export(buffer).unwrap();
    let held = fx.support.hold(0);
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    let err = tensor.to_host_vec::<u8>(&hooks).unwrap_err();
    assert!(matches!(err, Error::CopyInFlight { .. }), "{err:?}");
    drop(held);
    fx.support.settle();
    // Into device memory: the destination is kept.
    let ones = [1u8; 64];
    let held = fx.support.hold(0);
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    // SAFETY: the tensor's memory is live USM of device 0 that nobody else accesses meanwhile.
    let err = unsafe { hooks.copy_from_host(Device::oneapi(0), &ones, address) }.unwrap_err();
    assert_runtime_error(&err, &["may still be running"]);
    drop(held);
    fx.support.settle();
    assert_eq!(tensor.to_host_vec::<u8>(&hooks).unwrap(), ones);
    drop(tensor);
    assert!(ctx.allocation_of(address).unwrap().is_some());
    drop((hooks, ctx));
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 3,
            event_pools: 1,
            allocations: 1,
            contexts: 1,
            ..Leaked::default()
        }
    );
}

pub(crate) fn a_failed_host_wait_is_unfinished_only_while_the_event_is_not_seen_signalled(
    fx: &Fixture,
) {
    let ctx = context(fx);
    let data: Vec<u16> = (0..100).collect();
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &data).unwrap();
    let queue = ctx.queue(&root(&ctx, 1)).unwrap();
    let leaks = dlpack_oneapi::leaks();
    // The wait fails after the copy has finished: the event is signalled, so nothing is kept;
    // the driver's error is still returned.
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::After);
    let err = buffer.to_vec().unwrap_err();
    assert_runtime_error(
        &err,
        &["zeEventHostSynchronize returned ZE_RESULT_ERROR_DEVICE_LOST"],
    );
    assert!(!err.to_string().contains("may still be running"), "{err}");
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::After);
    assert!(queue.synchronize().is_err());
    assert_eq!(Leaked::since(&leaks), Leaked::default());
    assert_eq!(buffer.to_vec().unwrap(), data);
    // When the event cannot be queried either, finished or not, nothing tells: kept.
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    fx.support
        .fail("zeEventQueryStatus", 0, 1, LOST, Failure::Instead);
    let err = buffer.to_vec().unwrap_err();
    assert_runtime_error(&err, &["may still be running"]);
    fx.support.settle();
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            host_bytes: 200,
            ..Leaked::default()
        }
    );
    drop((buffer, queue, ctx));
}

pub(crate) fn an_event_whose_reset_fails_is_retired_not_reused(fx: &Fixture) {
    let ctx = context(fx);
    let data = f32s(16);
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 0), UsmKind::Device, &data).unwrap();
    let leaks = dlpack_oneapi::leaks();
    // The copy finished, but its event stays signalled: an error, and the event is retired.
    fx.support
        .fail("zeEventHostReset", 0, 1, LOST, Failure::Instead);
    let err = buffer.to_vec().unwrap_err();
    assert_runtime_error(
        &err,
        &[
            "zeEventHostReset returned ZE_RESULT_ERROR_DEVICE_LOST",
            "leaked rather than reused",
        ],
    );
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            ..Leaked::default()
        },
        "the copy finished: no memory is kept"
    );
    // The next copy gets another event and really waits for it: the still signalled one would
    // let the host go on before the copy has run.
    let held = fx.support.hold(0);
    std::thread::scope(|s| {
        let reader = s.spawn(|| buffer.to_vec());
        while fx.support.host_waiters() == 0 && !reader.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!reader.is_finished(), "the copy returned before it ran");
        drop(held);
        assert_eq!(reader.join().unwrap().unwrap(), data);
    });
    // A handshake's events whose reset fails when they are reclaimed are retired as well; the
    // handshake takes others. The producer's pool has 31 usable events (one is retired): 15
    // handshakes leave one free, so the next handshake's second event is a reclaimed one.
    let producer = ctx.queue(&root(&ctx, 0)).unwrap();
    let consumer = Queue::new(&ctx, &root(&ctx, 1)).unwrap();
    for _ in 0..15 {
        producer.make_ready_for(&consumer).unwrap();
    }
    consumer.synchronize().unwrap();
    fx.support
        .fail("zeEventHostReset", 0, 1, LOST, Failure::Instead);
    for _ in 0..20 {
        producer.make_ready_for(&consumer).unwrap();
    }
    consumer.synchronize().unwrap();
    assert_eq!(buffer.to_vec().unwrap(), data);
    drop((producer, consumer, buffer, ctx));
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 2,
            event_pools: 1,
            contexts: 1,
            ..Leaked::default()
        }
    );
}

pub(crate) fn a_synchronize_whose_host_wait_fails_retires_its_barrier_event(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let ze = fx.driver.level_zero().clone();
    let target = UsmBuffer::<u8>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Shared, 512).unwrap();
    let source = vec![5u8; 512];
    let queue = ctx.queue(&root(&ctx, 0)).unwrap();
    let leaks = dlpack_oneapi::leaks();
    let held = fx.support.hold(0);
    // SAFETY: source and target outlive the copy (the queue is synchronised below).
    unsafe {
        append_copy(
            &queue,
            &ze,
            target.as_ptr().cast_mut(),
            source.as_ptr(),
            512,
        )
    };
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    let err = queue.synchronize().unwrap_err();
    assert_runtime_error(
        &err,
        &[
            "ZE_RESULT_ERROR_DEVICE_LOST",
            "cannot confirm that the work appended to the queue finished",
            "the event of the barrier that waits for it is leaked",
        ],
    );
    // The protocol's host wait (`__dlpack__(stream=None)` on the consumer's side).
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    let err = hooks.wait_host(Device::oneapi(0)).unwrap_err();
    assert_runtime_error(&err, &["may still be running"]);
    drop(held);
    // With no failure armed, the wait succeeds, after the copy.
    hooks
        .make_ready(Device::oneapi(0), StreamRequest::Default)
        .unwrap();
    assert_eq!(target.as_slice().unwrap(), source);
    drop((queue, hooks, target, ctx));
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 2,
            event_pools: 1,
            contexts: 1,
            ..Leaked::default()
        }
    );
}

pub(crate) fn a_failed_handshake_retires_the_producer_event_only_while_it_may_be_signalled(
    fx: &Fixture,
) {
    let h = handshake(fx);
    let leaks = dlpack_oneapi::leaks();
    let barrier = "zeCommandListAppendBarrier";
    // The producer's barrier is appended, the consumer's is not; the producer's event is seen
    // signalled, so both events are reused.
    fx.support.fail(barrier, 1, 1, LOST, Failure::Instead);
    let err = h.producer.make_ready_for(&h.consumer).unwrap_err();
    assert_runtime_error(
        &err,
        &["zeCommandListAppendBarrier returned ZE_RESULT_ERROR_DEVICE_LOST"],
    );
    assert_eq!(Leaked::since(&leaks), Leaked::default());
    // Now the producer is held and the wait for its event fails: its barrier may still signal
    // the event, which is retired rather than reset under it.
    let held = fx.support.hold(0);
    fx.support.fail(barrier, 1, 1, LOST, Failure::Instead);
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    let err = h.producer.make_ready_for(&h.consumer).unwrap_err();
    assert_runtime_error(&err, &["zeCommandListAppendBarrier"]);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            ..Leaked::default()
        }
    );
    drop(held);
    fx.support.settle();
    // Handshakes go on with other events.
    for _ in 0..40 {
        h.producer.make_ready_for(&h.consumer).unwrap();
    }
    h.consumer.synchronize().unwrap();
    drop(h);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            event_pools: 1,
            contexts: 1,
            ..Leaked::default()
        }
    );
}

pub(crate) fn a_queue_dropped_while_its_work_cannot_be_waited_for_leaks_its_list_and_events(
    fx: &Fixture,
) {
    let ctx = context(fx);
    let ze = fx.driver.level_zero().clone();
    let lists = fx.support.live().command_lists;
    let leaks = dlpack_oneapi::leaks();
    // A queue with a held copy whose final wait fails: the list, which will still run the copy
    // and the barrier, is not destroyed, nor the barrier's event.
    let queue = Queue::new(&ctx, &root(&ctx, 0)).unwrap();
    let source = vec![1u8; 256];
    let mut sink = vec![0u8; 256];
    let held = fx.support.hold(0);
    // SAFETY: source and sink outlive the copy: they stay until the list has run (settle below).
    unsafe { append_copy(&queue, &ze, sink.as_mut_ptr(), source.as_ptr(), 256) };
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    drop(queue);
    assert_eq!(fx.support.live().command_lists, lists + 1);
    drop(held);
    fx.support.settle();
    assert_eq!(sink, source, "the leaked list ran the copy");
    // A producer dropped while a consumer's barrier that waits on its handshake events is held
    // and the wait for it fails: both events stay for the barrier.
    let producer = Queue::new(&ctx, &root(&ctx, 0)).unwrap();
    let consumer = Queue::new(&ctx, &root(&ctx, 1)).unwrap();
    let held = fx.support.hold(1);
    producer.make_ready_for(&consumer).unwrap();
    // The drop's own synchronisation waits (device 0 runs); the wait for the handshake fails.
    fx.support
        .fail("zeEventHostSynchronize", 1, 1, LOST, Failure::Instead);
    drop(producer);
    drop(held);
    consumer.synchronize().unwrap();
    drop(consumer);
    // A queue whose final barrier is seen finished but whose event cannot be reset: the list is
    // idle and destroyed; only that event, and its pool, stay.
    let queue = Queue::new(&ctx, &root(&ctx, 1)).unwrap();
    fx.support
        .fail("zeEventHostReset", 0, 1, LOST, Failure::Instead);
    drop(queue);
    assert_eq!(fx.support.live().command_lists, lists + 1);
    drop(ctx);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 4,
            event_pools: 3,
            command_lists: 1,
            contexts: 1,
            ..Leaked::default()
        }
    );
}
