//! Queues and the event handshake: a consumer queue that waits for the producer, host waits,
//! and stream values that are not queues of the context.

use dlpack_core::protocol::StreamRequest;
use dlpack_core::{Device, DeviceHooks, PyErrorKind};
use dlpack_oneapi::{Context, LevelZero, Queue, UsmBuffer, UsmKind};

use crate::Fixture;
use crate::helpers::{append_copy, context, root};

/// The producer/consumer set-up of the queue cases: producer data in host memory, device USM on
/// device 0 that the producer's default queue copies it into, and a consumer queue on device 1.
pub(crate) struct Handshake {
    ctx: Context,
    ze: LevelZero,
    source: Vec<u8>,
    target: UsmBuffer<u8>,
    pub(crate) producer: Queue,
    pub(crate) consumer: Queue,
}

pub(crate) fn handshake(fx: &Fixture) -> Handshake {
    let ctx = context(fx);
    let target = UsmBuffer::<u8>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Device, 4096).unwrap();
    Handshake {
        producer: ctx.queue(&root(&ctx, 0)).unwrap(),
        consumer: Queue::new(&ctx, &root(&ctx, 1)).unwrap(),
        ze: fx.driver.level_zero().clone(),
        source: vec![7u8; 4096],
        target,
        ctx,
    }
}

pub(crate) fn without_a_handshake_a_consumer_reads_before_the_producer_writes(fx: &Fixture) {
    // The control experiment: the driver really runs the two queues independently, so the next
    // case's data check can only pass through the handshake.
    let h = handshake(fx);
    let mut out = vec![0xEEu8; 4096];
    let held = fx.support.hold(0);
    // SAFETY: source, target and `out` outlive both copies (both queues are synchronised
    // below, before `out` is read).
    unsafe {
        append_copy(
            &h.producer,
            &h.ze,
            h.target.as_ptr().cast_mut(),
            h.source.as_ptr(),
            4096,
        );
        append_copy(
            &h.consumer,
            &h.ze,
            out.as_mut_ptr(),
            h.target.as_ptr(),
            4096,
        );
    }
    fx.support.settle();
    drop(held);
    h.consumer.synchronize().unwrap();
    h.producer.synchronize().unwrap();
    assert_eq!(
        out,
        vec![0u8; 4096],
        "the consumer ran before the producer's copy"
    );
    assert_eq!(h.target.to_vec().unwrap(), h.source);
}

pub(crate) fn a_consumer_queue_waits_for_the_producer_through_the_event_handshake(fx: &Fixture) {
    let h = handshake(fx);
    let hooks = h.ctx.hooks();
    let mut out = vec![0xEEu8; 4096];
    let held = fx.support.hold(0);
    // SAFETY: source and target outlive the copy (the producer is synchronised below).
    unsafe {
        append_copy(
            &h.producer,
            &h.ze,
            h.target.as_ptr().cast_mut(),
            h.source.as_ptr(),
            4096,
        )
    };
    // `__dlpack__(stream=consumer)` on the producer's side, then the consumer's read:
    let stream = usize::try_from(h.consumer.stream()).unwrap();
    hooks
        .make_ready(Device::oneapi(0), StreamRequest::Handle(stream))
        .unwrap();
    // SAFETY: target and `out` outlive the copy (the consumer is synchronised below).
    unsafe {
        append_copy(
            &h.consumer,
            &h.ze,
            out.as_mut_ptr(),
            h.target.as_ptr(),
            4096,
        )
    };
    // Everything that can run has run: without the handshake the consumer would have read by
    // now (see the previous case).
    fx.support.settle();
    drop(held);
    h.consumer.synchronize().unwrap();
    assert_eq!(out, h.source, "the consumer read the producer's data");
    // Asking again reuses the handshake events once the consumer has passed them.
    for _ in 0..40 {
        hooks
            .make_ready(Device::oneapi(0), StreamRequest::Handle(stream))
            .unwrap();
    }
    h.consumer.synchronize().unwrap();
}

pub(crate) fn waiting_on_the_host_returns_after_the_producer_work(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let shared = UsmBuffer::<u8>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Shared, 1024).unwrap();
    let source = vec![3u8; 1024];
    let producer = ctx.queue(&root(&ctx, 0)).unwrap();
    let ze = fx.driver.level_zero().clone();
    let held = fx.support.hold(0);
    // SAFETY: source and the shared buffer outlive the copy (waited for below).
    unsafe {
        append_copy(
            &producer,
            &ze,
            shared.as_ptr().cast_mut(),
            source.as_ptr(),
            1024,
        )
    };
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            hooks.wait_host(Device::oneapi(0)).unwrap();
            // Shared USM is read in place: the copy must be complete.
            shared.as_slice().unwrap().to_vec()
        });
        // Release the producer only once the waiter blocks in Level Zero (or, if wait_host
        // did not wait, has already read).
        while fx.support.host_waiters() == 0 && !waiter.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(held);
        assert_eq!(waiter.join().unwrap(), source);
    });
}

pub(crate) fn stream_values_that_are_not_queues_of_the_context_are_refused(fx: &Fixture) {
    let ctx = context(fx);
    let other = context(fx);
    let hooks = ctx.hooks();
    let foreign_queue = Queue::new(&other, &root(&other, 0)).unwrap();
    assert_eq!(
        hooks.make_ready(Device::oneapi(0), StreamRequest::NoSync),
        Ok(())
    );
    for request in [
        StreamRequest::Handle(0xdead_beef),
        StreamRequest::Handle(usize::try_from(foreign_queue.stream()).unwrap()),
        StreamRequest::LegacyDefault,
        StreamRequest::PerThreadDefault,
    ] {
        let err = hooks.make_ready(Device::oneapi(0), request).unwrap_err();
        assert_eq!(err.py_kind(), PyErrorKind::ValueError, "{request:?}: {err}");
    }
    let err = hooks
        .make_ready(Device::oneapi(0), StreamRequest::Handle(0xdead_beef))
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("stream=0xdeadbeef is not the command list of a live queue"),
        "{err}"
    );
    // A device the context does not have.
    let queue = Queue::new(&ctx, &root(&ctx, 1)).unwrap();
    let stream = usize::try_from(queue.stream()).unwrap();
    assert!(
        hooks
            .make_ready(Device::oneapi(2), StreamRequest::Handle(stream))
            .is_err()
    );
    assert!(hooks.wait_host(Device::oneapi(2)).is_err());
    // An adopted list resolves to the same queue, and is not destroyed twice.
    // SAFETY: the list of `queue`, alive while `queue` is.
    let adopted = unsafe { Queue::from_raw(&ctx, &root(&ctx, 1), queue.raw()) }.unwrap();
    assert_eq!(adopted.raw(), queue.raw());
    hooks
        .make_ready(Device::oneapi(0), StreamRequest::Handle(stream))
        .unwrap();
    queue.synchronize().unwrap();
}
