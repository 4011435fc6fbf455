//! Adversarial cases against the CUDA paths (run with the cases of `tests/cuda.rs`, as one
//! suite): each asserts what the crate's docs claim, on inputs and orders the plain cases do not
//! try: exports dropped on threads without a CUDA context, views outliving their base, candle
//! devices of one GPU that must not be mixed up, device 1, empty, 0-d, broadcast and malformed
//! layouts, spans past their allocation, pending work on other streams, several threads at once,
//! and writes through a copy.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use candle_core::cuda_backend::cudarc::driver::{CudaContext, CudaSlice, CudaStream, result, sys};
use candle_core::{DType, Device, Tensor};
use dlpack_candle::CandleError;
use dlpack_core::protocol::parse_stream;
use dlpack_core::testing::{Data, Foreign};
use dlpack_core::{
    CopyMode, CopyReason, DataType, DeviceHooks, Element, Error, Flags, ManagedTensor, Transfer,
};
use dlpack_cuda::{CudaBuffer, CudaImport, CudaTensor, PinnedBuffer, open_device};
use dlpack_testing::harness::{Case, cases};

use crate::common::finishes;
use crate::gpu::{arange, block, hooks, host_values_of, storage_address};

pub(crate) const CASES: &[Case<Device>] = cases![Device;
    // Threads and contexts.
    a_lent_export_dropped_on_a_thread_without_a_context_is_freed_after_candles_reads,
    a_copied_export_dropped_on_a_thread_without_a_context_is_freed,
    a_deleter_thread_keeps_the_context_it_had,
    a_reclaimed_tensor_dropped_on_another_thread_is_freed,
    control_a_plain_candle_tensor_dropped_on_another_thread_is_freed,
    an_export_reclaimed_and_read_on_another_thread_sees_candles_pending_work,
    // Lifetimes.
    a_lent_view_outlives_its_base,
    a_copy_outlives_its_source,
    // Candle devices and GPUs.
    an_export_of_another_candle_device_of_the_same_gpu_is_copied_not_reclaimed,
    copy_mode_always_copies_own_exports_and_buffers,
    device_1_tensors_are_refused_by_a_device_0_candle_device,
    a_device_claim_the_driver_contradicts_is_refused,
    candle_on_device_1_goes_both_ways,
    pinned_host_memory_is_not_taken_as_device_memory,
    // Layouts.
    zero_dim_tensors_go_both_ways,
    empty_tensors_go_both_ways,
    empty_foreign_tensors_import_as_empty_candle_tensors,
    to_dlpack_copies_an_empty_candle_tensor,
    broadcast_candle_tensors_export_with_stride_zero,
    layouts_ending_at_the_allocations_end_are_read_exactly,
    size_one_dims_with_absurd_strides_read_only_their_elements,
    spans_past_the_allocation_are_refused_without_a_read,
    an_empty_shape_past_usize_is_overflow_whatever_the_mode,
    a_foreign_broadcast_too_large_to_copy_is_refused_before_the_driver,
    to_dlpack_of_a_candle_broadcast_too_large_to_copy_is_an_error,
    a_misaligned_foreign_pointer_is_copied_or_refused_never_misread,
    // Streams.
    a_moved_buffer_waits_for_the_pending_write_on_its_own_stream,
    a_moved_buffer_is_freed_after_the_pending_read_on_its_own_stream,
    // Threads at once.
    the_exchange_stream_is_one_per_candle_device_under_a_race,
    concurrent_exports_and_imports_from_several_threads,
    // Writes and refusals.
    a_copy_is_writable_without_touching_the_original,
    refusals_give_the_tensor_back_usable,
];

// ---------------------------------------------------------------------------------------
// Helpers.

pub(crate) fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

/// A fresh device slice on device `ordinal` holding `values`, uploaded and synchronised.
pub(crate) fn upload<T: candle_core::cuda_backend::cudarc::driver::DeviceRepr>(
    ordinal: usize,
    values: &[T],
) -> CudaSlice<T> {
    let stream = open_device(ordinal).expect("device").default_stream();
    let slice = stream.clone_htod(values).expect("upload");
    stream.synchronize().expect("uploaded");
    slice
}

/// A foreign tensor on device `ordinal` over a fresh slice holding 0..n (f32), with the
/// layout `layout` gives; ready before the hand-over (as `foreign` in cuda.rs).
fn foreign_on(
    ordinal: usize,
    n: usize,
    layout: impl FnOnce(CudaBuffer<f32>) -> CudaTensor<CudaBuffer<f32>>,
) -> ManagedTensor {
    let slice = upload(ordinal, &iota(n));
    ManagedTensor::export(layout(CudaBuffer::new(slice))).expect("export")
}

/// Releases a [`block`] from another thread after `ms` milliseconds.
pub(crate) fn release_later(release: Sender<()>, ms: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(ms));
        let _ = release.send(());
    })
}

/// Whether work queued on `stream` so far has not all run yet (an event query, no wait).
pub(crate) fn still_blocked(stream: &CudaStream) -> bool {
    let marker = stream.record_event(None).expect("event");
    // SAFETY: a live event of `stream`'s context.
    let status = unsafe { sys::cuEventQuery(marker.cu_event()) };
    status == sys::CUresult::CUDA_ERROR_NOT_READY
}

/// The context current on this thread, as an address (0: none).
fn current_context() -> usize {
    result::ctx::get_current()
        .expect("cuCtxGetCurrent")
        .map_or(0, |c| c.addr())
}

/// Makes a consumer candle device's exchange stream wait for what a producer candle device
/// exported: the DLPack handshake between two candle devices of one process.
fn hand_over(tensor: &ManagedTensor, producer: &Device, consumer: &Device) {
    let stream = hooks(consumer)
        .consumer_stream(tensor.device())
        .expect("consumer stream");
    hooks(producer)
        .make_ready(
            tensor.device(),
            parse_stream(tensor.device(), Some(stream)).expect("stream value"),
        )
        .expect("handshake");
}

/// A foreign `kDLCUDA` tensor over device memory this test keeps alive, with any shape,
/// strides, byte offset and device claim (malformed ones included): the managed tensor, or
/// the refusal of the import of its raw form (dlpack-core's validation).
pub(crate) fn raw_cuda(
    address: usize,
    dtype: DataType,
    shape: &[i64],
    strides: &[i64],
    byte_offset: u64,
    device: dlpack_core::Device,
) -> (
    Result<ManagedTensor, Error>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let built = Foreign::new(dtype, shape)
        .with_strides(strides)
        .data(Data::Fake(address))
        .byte_offset(byte_offset)
        .device(device)
        .build();
    let deletes = built.counter();
    // SAFETY: a fresh fixture, handed over once; its data pointer is never dereferenced by
    // the host (it is device memory, or no memory at all).
    let tensor = unsafe { ManagedTensor::from_raw(built.ptr) };
    (tensor, deletes)
}

pub(crate) fn deletes(counter: &Arc<std::sync::atomic::AtomicUsize>) -> usize {
    counter.load(std::sync::atomic::Ordering::SeqCst)
}

/// Whether the driver counts a device `ordinal` (asked by count, not by opening it: a failed
/// `cuDeviceGet` is an API error compute-sanitizer reports).
pub(crate) fn has_device(ordinal: usize) -> bool {
    let count = CudaContext::device_count().expect("cuDeviceGetCount");
    if usize::try_from(count).is_ok_and(|count| ordinal < count) {
        true
    } else {
        println!("    (no CUDA device {ordinal}: the part that needs it is skipped)");
        false
    }
}

// ---------------------------------------------------------------------------------------
// Threads and contexts.

fn a_lent_export_dropped_on_a_thread_without_a_context_is_freed_after_candles_reads(
    device: &Device,
) {
    // The export's tensor is the only handle on its storage; candle still has a read of it
    // queued (behind a block) when the export is dropped on a thread that never touched
    // CUDA. The free must be ordered after that read: the stand-in refuses the kernel's
    // read of freed memory, and the values would be wrong.
    const N: usize = 1 << 16;
    let stream = device.as_cuda_device().expect("cuda").cuda_stream();
    let input = arange(N, device);
    input.affine(2.0, 0.0).expect("kernel loaded");
    device.synchronize().expect("ready");
    let release = block(&stream);
    let doubled = input.affine(2.0, 0.0).expect("queued read of `input`");
    // SAFETY: `input` is the only handle on its storage, and moves into the export.
    let dl = unsafe { dlpack_candle::into_dlpack(input) }.expect("export");
    let context_there = finishes("drop on a context-less thread", move || {
        let before = current_context();
        drop(dl);
        (before, current_context())
    });
    assert_eq!(context_there.0, 0, "a fresh thread has no current context");
    assert!(
        still_blocked(&stream),
        "candle's read was no longer pending when the export was dropped (a host wait?)"
    );
    release.send(()).expect("release");
    let values = doubled.to_vec1::<f32>().expect("values");
    assert!(
        values.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32),
        "candle's pending read saw the memory the export freed"
    );
}

fn a_copied_export_dropped_on_a_thread_without_a_context_is_freed(device: &Device) {
    for gpu in [
        device.clone(),
        Device::new_cuda_with_stream(0).expect("own stream"),
    ] {
        let t = arange(12, &gpu).reshape((3, 4)).expect("reshape");
        let copy = dlpack_candle::to_dlpack(&t.t().expect("t")).expect("copy");
        assert!(copy.flags().contains(Flags::IS_COPIED));
        finishes("drop of a copy on a context-less thread", move || {
            assert_eq!(current_context(), 0);
            drop(copy);
        });
        // The lent flavour too, through a view.
        let view = t.narrow(1, 1, 2).expect("narrow");
        // SAFETY: nothing writes to `t`'s storage while the export lives.
        let lent = unsafe { dlpack_candle::into_dlpack(view) }.expect("export");
        drop(t);
        finishes("drop of a lent view on a context-less thread", move || {
            drop(lent);
        });
        gpu.synchronize().expect("synchronize");
    }
}

fn a_deleter_thread_keeps_the_context_it_had(device: &Device) {
    // A DLPack deleter runs on the consumer's thread. That thread had no context, or another
    // device's: it should find it as it was (dlpack-cuda's `ContextScope` exists for this).
    let t = arange(4, device);
    // SAFETY: the only handle, moved into the export.
    let lent = unsafe { dlpack_candle::into_dlpack(t) }.expect("export");
    let copy = dlpack_candle::to_dlpack(&arange(4, device)).expect("copy");
    let (none_before, none_after) = finishes("deleters on a context-less thread", move || {
        let before = current_context();
        drop(lent);
        drop(copy);
        (before, current_context())
    });
    assert_eq!(none_before, 0);
    assert_eq!(
        none_after, 0,
        "the deleter left a context current on a thread that had none"
    );
    if has_device(1) {
        let t = arange(4, device);
        // SAFETY: the only handle, moved into the export.
        let lent = unsafe { dlpack_candle::into_dlpack(t) }.expect("export");
        let (expected, found) = finishes("deleter on a device-1 thread", move || {
            let one = open_device(1).expect("device 1");
            one.bind_to_thread().expect("device 1 current");
            let expected = one.cu_ctx().addr();
            drop(lent);
            (expected, current_context())
        });
        assert_eq!(
            found, expected,
            "the deleter of a device-0 export switched the thread's device-1 context"
        );
    }
}

fn a_reclaimed_tensor_dropped_on_another_thread_is_freed(device: &Device) {
    const N: usize = 1 << 16;
    let stream = device.as_cuda_device().expect("cuda").cuda_stream();
    let input = arange(N, device);
    input.affine(2.0, 0.0).expect("kernel loaded");
    device.synchronize().expect("ready");
    // SAFETY: the only handle, moved into the export.
    let dl = unsafe { dlpack_candle::into_dlpack(input) }.expect("export");
    let (back, transfer) =
        dlpack_candle::into_owned_on(dl, device, CopyMode::Never).expect("reclaim");
    assert_eq!(transfer, Transfer::Reclaimed);
    let release = block(&stream);
    let doubled = back.affine(2.0, 0.0).expect("queued read");
    finishes("drop of a reclaimed tensor elsewhere", move || drop(back));
    release.send(()).expect("release");
    let values = doubled.to_vec1::<f32>().expect("values");
    assert!(values.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32));
    // And a reclaimed copy.
    let copy = dlpack_candle::to_dlpack(&arange(8, device)).expect("copy");
    let (back, transfer) =
        dlpack_candle::into_owned_on(copy, device, CopyMode::Never).expect("reclaim");
    assert_eq!(transfer, Transfer::Reclaimed);
    finishes("drop of a reclaimed copy elsewhere", move || drop(back));
}

/// Not a claim of dlpack-candle: candle alone, to tell its behaviour from the crate's when
/// the case above fails.
fn control_a_plain_candle_tensor_dropped_on_another_thread_is_freed(device: &Device) {
    const N: usize = 1 << 16;
    let stream = device.as_cuda_device().expect("cuda").cuda_stream();
    let input = arange(N, device);
    input.affine(2.0, 0.0).expect("kernel loaded");
    device.synchronize().expect("ready");
    let release = block(&stream);
    let doubled = input.affine(2.0, 0.0).expect("queued read");
    finishes("drop of a candle tensor elsewhere", move || drop(input));
    release.send(()).expect("release");
    let values = doubled.to_vec1::<f32>().expect("values");
    assert!(values.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32));
}

fn an_export_reclaimed_and_read_on_another_thread_sees_candles_pending_work(device: &Device) {
    // `device` queues on the per-thread default stream: this thread's work is invisible to
    // another thread's stream but through the exchange stream. The docs: export on the
    // thread that queued the computation; an import (a reclaim included) makes the candle
    // device's stream (the importing thread's) wait for the exchange stream.
    const N: usize = 1 << 16;
    let stream = device.as_cuda_device().expect("cuda").cuda_stream();
    let input = arange(N, device);
    input.affine(2.0, 0.0).expect("kernel loaded");
    device.synchronize().expect("ready");
    let release = block(&stream);
    let doubled = input.affine(2.0, 0.0).expect("queued");
    let tripled = input.affine(3.0, 0.0).expect("queued");
    // SAFETY: `doubled` is the only handle on its new storage.
    let lent = unsafe { dlpack_candle::into_dlpack(doubled) }.expect("export");
    let copy = dlpack_candle::to_dlpack(&tripled).expect("copy (queued, no host wait)");
    drop(tripled);
    let gpu = device.clone();
    let reader = std::thread::spawn(move || {
        let (a, ta) = dlpack_candle::into_owned_on(lent, &gpu, CopyMode::Never)
            .unwrap_or_else(|r| panic!("reclaim: {}", r.error));
        let (b, tb) = dlpack_candle::into_owned_on(copy, &gpu, CopyMode::Never)
            .unwrap_or_else(|r| panic!("reclaim: {}", r.error));
        assert_eq!((ta, tb), (Transfer::Reclaimed, Transfer::Reclaimed));
        (
            a.to_vec1::<f32>().expect("values"),
            b.to_vec1::<f32>().expect("values"),
        )
    });
    let lifter = release_later(release, 200);
    let (a, b) = reader.join().expect("reader thread");
    lifter.join().expect("lifter");
    drop(input);
    assert!(
        a.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32),
        "the lent export, read on another thread, is not what candle computed (first: {:?})",
        &a[..4]
    );
    assert!(
        b.iter().enumerate().all(|(i, &v)| v == 3.0 * i as f32),
        "the copy, read on another thread, is not what candle computed (first: {:?})",
        &b[..4]
    );
}

// ---------------------------------------------------------------------------------------
// Lifetimes.

fn a_lent_view_outlives_its_base(device: &Device) {
    let base = arange(12, device).reshape((3, 4)).expect("reshape");
    let view = base.narrow(0, 1, 2).and_then(|v| v.t()).expect("view");
    // SAFETY: nothing writes to the storage `base` and `view` share.
    let dl = unsafe { dlpack_candle::into_dlpack(view) }.expect("export");
    drop(base);
    device.synchronize().expect("synchronize");
    assert_eq!(
        host_values_of::<f32>(dl, device),
        [4.0, 8.0, 5.0, 9.0, 6.0, 10.0, 7.0, 11.0]
    );
    // Reclaimed after the base is gone: the view itself, still on live memory.
    let base = arange(12, device).reshape((3, 4)).expect("reshape");
    let view = base.narrow(1, 2, 2).expect("columns 2..4");
    // SAFETY: as above.
    let dl = unsafe { dlpack_candle::into_dlpack(view) }.expect("export");
    drop(base);
    let (back, transfer) =
        dlpack_candle::into_owned_on(dl, device, CopyMode::Never).expect("reclaim");
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(
        back.to_vec2::<f32>().expect("values"),
        [[2.0, 3.0], [6.0, 7.0], [10.0, 11.0]]
    );
}

fn a_copy_outlives_its_source(device: &Device) {
    let base = arange(12, device).reshape((3, 4)).expect("reshape");
    let copy = dlpack_candle::to_dlpack(&base.narrow(1, 1, 2).expect("narrow")).expect("copy");
    drop(base);
    assert_eq!(
        (copy.shape(), copy.strides()),
        (&[3i64, 2][..], &[2i64, 1][..])
    );
    assert_eq!(
        host_values_of::<f32>(copy, device),
        [1.0, 2.0, 5.0, 6.0, 9.0, 10.0]
    );
}

// ---------------------------------------------------------------------------------------
// Candle devices and GPUs.

fn an_export_of_another_candle_device_of_the_same_gpu_is_copied_not_reclaimed(device: &Device) {
    // Documented: "any other tensor (..., or one exported from another candle device of the
    // same GPU) is copied on the device, or refused under `CopyMode::Never`".
    let others = [
        (
            "new_cuda_with_stream",
            Device::new_cuda_with_stream(0).expect("own stream"),
        ),
        (
            "a second new_cuda",
            Device::new_cuda(0).expect("second device"),
        ),
    ];
    for (name, other) in &others {
        assert!(!other.same_device(device), "{name}: another candle device");
        let lent = {
            // SAFETY: the only handle, moved into the export.
            unsafe { dlpack_candle::into_dlpack(arange(4, other)) }.expect("export")
        };
        let copied = dlpack_candle::to_dlpack(&arange(4, other)).expect("copy");
        for (flavour, dl) in [("lent", lent), ("copied", copied)] {
            hand_over(&dl, other, device);
            let refused = dlpack_candle::into_owned_on(dl, device, CopyMode::Never)
                .err()
                .unwrap_or_else(|| {
                    panic!(
                        "{name} {flavour}: taken over by the wrong candle device without a \
                         copy under Never"
                    )
                });
            assert!(
                matches!(
                    refused.error,
                    CandleError::DLPack(Error::CopyRefused { .. })
                ),
                "{name} {flavour}: {}",
                refused.error
            );
            let (t, transfer) =
                dlpack_candle::into_owned_on(refused.value, device, CopyMode::IfNeeded)
                    .unwrap_or_else(|r| panic!("{name} {flavour}: {}", r.error));
            assert!(
                matches!(transfer, Transfer::Copied(_)),
                "{name} {flavour}: {transfer:?}"
            );
            assert!(
                t.device().same_device(device),
                "{name} {flavour}: a tensor on the wrong candle device"
            );
            // candle mixes it with `device`'s tensors (it refuses two devices).
            let sum = (&t + &arange(4, device)).unwrap_or_else(|e| panic!("{name} {flavour}: {e}"));
            assert_eq!(sum.to_vec1::<f32>().expect("values"), [0.0, 2.0, 4.0, 6.0]);
        }
        // And `device`'s exports into the other device: copied as well.
        // SAFETY: the only handle, moved into the export.
        let dl = unsafe { dlpack_candle::into_dlpack(arange(3, device)) }.expect("export");
        hand_over(&dl, device, other);
        let (t, transfer) = dlpack_candle::into_owned_on(dl, other, CopyMode::IfNeeded)
            .unwrap_or_else(|r| panic!("{name} back: {}", r.error));
        assert!(
            matches!(transfer, Transfer::Copied(_)),
            "{name}: {transfer:?}"
        );
        assert!(t.device().same_device(other), "{name}");
        assert_eq!(t.to_vec1::<f32>().expect("values"), [0.0, 1.0, 2.0]);
        other.synchronize().expect("synchronize");
    }
}

fn copy_mode_always_copies_own_exports_and_buffers(device: &Device) {
    let t = arange(6, device).reshape((2, 3)).expect("reshape");
    let address = storage_address(&t);
    // A lent view.
    // SAFETY: the only handle on `t`'s storage besides `t`, which nothing writes.
    let lent = unsafe { dlpack_candle::into_dlpack(t.t().expect("t")) }.expect("export");
    let (copy, transfer) =
        dlpack_candle::into_owned_on(lent, device, CopyMode::Always).expect("copy");
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_ne!(storage_address(&copy), address, "new memory");
    assert!(copy.is_contiguous());
    assert_eq!(
        copy.to_vec2::<f32>().expect("values"),
        [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    );
    // A `to_dlpack` copy.
    let owned = dlpack_candle::to_dlpack(&t).expect("copy");
    let owned_address = owned.data_ptr().addr();
    let (copy, transfer) =
        dlpack_candle::into_owned_on(owned, device, CopyMode::Always).expect("copy");
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_ne!(storage_address(&copy), owned_address);
    assert_eq!(
        copy.to_vec2::<f32>().expect("values"),
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    );
    // A bare CudaBuffer.
    let buffer = CudaBuffer::new(upload(0, &[7.0f32, 8.0, 9.0]));
    let buffer_address = buffer.device_address();
    let dl = ManagedTensor::export(buffer).expect("export");
    let (copy, transfer) =
        dlpack_candle::into_owned_on(dl, device, CopyMode::Always).expect("copy");
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_ne!(storage_address(&copy), buffer_address);
    assert_eq!(copy.to_vec1::<f32>().expect("values"), [7.0, 8.0, 9.0]);
    // `to_owned_on` of an export the caller keeps: a copy, the export intact after it.
    // SAFETY: as above.
    let kept = unsafe { dlpack_candle::into_dlpack(t.clone()) }.expect("export");
    let copy = dlpack_candle::to_owned_on(&kept, device).expect("copy");
    assert_ne!(storage_address(&copy), address);
    let (back, transfer) =
        dlpack_candle::into_owned_on(kept, device, CopyMode::Never).expect("reclaim");
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(storage_address(&back), address);
    assert_eq!(
        copy.to_vec2::<f32>().expect("v"),
        back.to_vec2::<f32>().expect("v")
    );
}

fn device_1_tensors_are_refused_by_a_device_0_candle_device(device: &Device) {
    if !has_device(1) {
        return;
    }
    let gpu1 = Device::new_cuda(1).expect("candle on device 1");
    // A bare CudaBuffer on device 1: not movable into device 0's candle device.
    for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
        let buffer = CudaBuffer::new(upload(1, &[1.0f32, 2.0, 3.0]));
        let dl = ManagedTensor::export(buffer).expect("export");
        assert_eq!(dl.device(), dlpack_core::Device::cuda(1));
        let refused = dlpack_candle::into_owned_on(dl, device, mode)
            .err()
            .unwrap_or_else(|| panic!("{mode:?}: a device-1 buffer taken by device 0"));
        assert!(
            matches!(refused.error, CandleError::DeviceMismatch { .. }),
            "{mode:?}: {}",
            refused.error
        );
        // Given back untouched: still the CudaBuffer, still readable on device 1.
        let buffer: CudaBuffer<f32> = refused
            .value
            .reclaim()
            .unwrap_or_else(|_| panic!("{mode:?}: not the CudaBuffer any more"));
        let dl = ManagedTensor::export(buffer).expect("export");
        assert_eq!(
            host_values_of::<f32>(dl, &gpu1),
            [1.0, 2.0, 3.0],
            "{mode:?}"
        );
    }
    // A strided foreign tensor on device 1, and `to_owned_on`.
    let t = foreign_on(1, 6, |b| {
        CudaTensor::strided(b, &[3, 2], &[1, 3], 0).expect("t")
    });
    let refused = dlpack_candle::to_owned_on(&t, device).expect_err("device 1");
    assert!(
        matches!(refused, CandleError::DeviceMismatch { .. }),
        "{refused}"
    );
    let refused =
        dlpack_candle::into_owned_on(t, device, CopyMode::IfNeeded).expect_err("device 1");
    assert!(matches!(refused.error, CandleError::DeviceMismatch { .. }));
    assert_eq!(
        host_values_of::<f32>(refused.value, &gpu1),
        [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    );
    // candle's own export from device 1: not reclaimed by device 0.
    // SAFETY: the only handle, moved into the export.
    let dl = unsafe { dlpack_candle::into_dlpack(arange(4, &gpu1)) }.expect("export");
    let refused = dlpack_candle::into_owned_on(dl, device, CopyMode::IfNeeded)
        .expect_err("a device-1 candle export is not device 0's");
    assert!(matches!(refused.error, CandleError::DeviceMismatch { .. }));
    let (back, transfer) =
        dlpack_candle::into_owned_on(refused.value, &gpu1, CopyMode::Never).expect("reclaim");
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(back.to_vec1::<f32>().expect("values"), [0.0, 1.0, 2.0, 3.0]);
    gpu1.synchronize().expect("synchronize");
}

fn a_device_claim_the_driver_contradicts_is_refused(device: &Device) {
    if !has_device(1) {
        return;
    }
    // Device-1 memory claimed as device 0: the driver says otherwise, before any copy.
    let slice = upload(1, &[1.0f32, 2.0, 3.0, 4.0]);
    let address = CudaBuffer::new(slice);
    let at = address.device_address();
    for mode in [CopyMode::IfNeeded, CopyMode::Always] {
        let (tensor, counter) = raw_cuda(
            at,
            DataType::F32,
            &[4],
            &[1],
            0,
            dlpack_core::Device::cuda(0),
        );
        let tensor = tensor.expect("well-formed");
        let refused = dlpack_candle::into_owned_on(tensor, device, mode)
            .err()
            .unwrap_or_else(|| panic!("{mode:?}: a false device claim was believed"));
        assert!(
            matches!(refused.error, CandleError::DLPack(_)),
            "{mode:?}: {}",
            refused.error
        );
        assert_eq!(deletes(&counter), 0, "given back");
        let kept = refused.value;
        let refused = dlpack_candle::to_owned_on(&kept, device).expect_err("false claim");
        assert!(matches!(refused, CandleError::DLPack(_)), "{refused}");
        drop(kept);
        assert_eq!(deletes(&counter), 1, "deleted once");
    }
    // The true claim is copied into a candle device on device 1.
    let gpu1 = Device::new_cuda(1).expect("candle on device 1");
    let (tensor, counter) = raw_cuda(
        at,
        DataType::F32,
        &[2, 2],
        &[1, 2],
        0,
        dlpack_core::Device::cuda(1),
    );
    let (t, transfer) =
        dlpack_candle::into_owned_on(tensor.expect("well-formed"), &gpu1, CopyMode::IfNeeded)
            .unwrap_or_else(|r| panic!("{}", r.error));
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
    assert_eq!(deletes(&counter), 1, "released after the copy");
    assert_eq!(
        t.to_vec2::<f32>().expect("values"),
        [[1.0, 3.0], [2.0, 4.0]]
    );
    drop(address);
    gpu1.synchronize().expect("synchronize");
}

fn candle_on_device_1_goes_both_ways(_device: &Device) {
    if !has_device(1) {
        return;
    }
    let gpu1 = Device::new_cuda(1).expect("candle on device 1");
    for gpu in [
        gpu1.clone(),
        Device::new_cuda_with_stream(1).expect("own stream"),
    ] {
        let t = arange(6, &gpu).reshape((2, 3)).expect("reshape");
        let address = storage_address(&t);
        // SAFETY: nothing writes to `t`'s storage while the export lives.
        let dl = unsafe { dlpack_candle::into_dlpack(t.t().expect("t")) }.expect("export");
        assert_eq!(dl.device(), dlpack_core::Device::cuda(1));
        assert_eq!(dl.data_ptr().addr(), address);
        let (back, transfer) =
            dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Never).expect("reclaim");
        assert_eq!(transfer, Transfer::Reclaimed);
        assert_eq!(
            back.to_vec2::<f32>().expect("values"),
            [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
        );
        let copy = dlpack_candle::to_dlpack(&back).expect("copy");
        assert_eq!(copy.device(), dlpack_core::Device::cuda(1));
        assert_eq!(
            host_values_of::<f32>(copy, &gpu),
            [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
        );
        // Foreign tensors of device 1: copied (strided) and moved (a bare buffer).
        let f = foreign_on(1, 6, |b| {
            CudaTensor::strided(b, &[2, 3], &[-3, -1], 5).expect("flipped")
        });
        let (t, transfer) = dlpack_candle::into_owned_on(f, &gpu, CopyMode::IfNeeded)
            .unwrap_or_else(|r| panic!("{}", r.error));
        assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
        assert_eq!(
            t.to_vec2::<f32>().expect("values"),
            [[5.0, 4.0, 3.0], [2.0, 1.0, 0.0]]
        );
        let buffer = CudaBuffer::new(upload(1, &[2.5f32, 3.5]));
        let dl = ManagedTensor::export(buffer).expect("export");
        let (t, transfer) = dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Never).expect("moved");
        assert_eq!(transfer, Transfer::Moved);
        let doubled = t.affine(2.0, 0.0).expect("candle op on device 1");
        assert_eq!(doubled.to_vec1::<f32>().expect("values"), [5.0, 7.0]);
        // Dropped on a thread without a context.
        // SAFETY: the only handle, moved into the export.
        let dl = unsafe { dlpack_candle::into_dlpack(doubled) }.expect("export");
        finishes("drop of a device-1 export elsewhere", move || drop(dl));
        gpu.synchronize().expect("synchronize");
    }
}

fn pinned_host_memory_is_not_taken_as_device_memory(device: &Device) {
    let context = open_device(0).expect("device 0");
    // SAFETY: written below before it is read.
    let mut slice = unsafe { context.alloc_pinned::<f32>(4) }.expect("pinned memory");
    slice
        .as_mut_slice()
        .expect("host access")
        .copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
    let buffer = PinnedBuffer::new(slice).expect("wrap");
    let dl = ManagedTensor::export(buffer).expect("export");
    assert_eq!(dl.device().device_type, dlpack_core::DeviceType::CUDA_HOST);
    // `into_owned_on` onto a CUDA device takes `kDLCUDA` tensors on its GPU.
    match dlpack_candle::into_owned_on(dl, device, CopyMode::IfNeeded) {
        Ok((t, transfer)) => {
            // A copy would be sound too; it must be one, with the values.
            assert!(matches!(transfer, Transfer::Copied(_)), "{transfer:?}");
            assert_eq!(t.to_vec1::<f32>().expect("values"), [1.0, 2.0, 3.0, 4.0]);
        }
        Err(refused) => {
            assert!(
                matches!(
                    refused.error,
                    CandleError::DeviceMismatch { .. } | CandleError::DLPack(_)
                ),
                "{}",
                refused.error
            );
            assert_eq!(
                refused
                    .value
                    .to_vec::<f32>()
                    .expect("host memory, given back"),
                [1.0, 2.0, 3.0, 4.0]
            );
        }
    }
    // Pinned memory claimed as `kDLCUDA`: the driver says it is host memory.
    // SAFETY: never read; only its address is claimed below.
    let keep = unsafe { context.alloc_pinned::<f32>(4) }.expect("pinned memory");
    let at = PinnedBuffer::new(keep).expect("wrap");
    let claimed = at.as_slice().as_ptr().addr();
    let (tensor, counter) = raw_cuda(
        claimed,
        DataType::F32,
        &[4],
        &[1],
        0,
        dlpack_core::Device::cuda(0),
    );
    let refused =
        dlpack_candle::into_owned_on(tensor.expect("well-formed"), device, CopyMode::IfNeeded)
            .expect_err("pinned host memory claimed as device memory");
    assert!(
        matches!(refused.error, CandleError::DLPack(_)),
        "{}",
        refused.error
    );
    drop(refused);
    assert_eq!(deletes(&counter), 1);
    drop(at);
}

// ---------------------------------------------------------------------------------------
// Layouts.

fn zero_dim_tensors_go_both_ways(device: &Device) {
    let scalar = Tensor::new(3.5f32, device).expect("0-d");
    assert_eq!(scalar.rank(), 0);
    // SAFETY: the only handle besides `scalar`, which nothing writes.
    let dl = unsafe { dlpack_candle::into_dlpack(scalar.clone()) }.expect("export");
    assert_eq!((dl.shape(), dl.strides()), (&[][..], &[][..]));
    assert_eq!(host_values_of::<f32>(dl, device), [3.5]);
    let copy = dlpack_candle::to_dlpack(&scalar).expect("copy");
    assert_eq!(copy.shape(), &[] as &[i64]);
    let (back, transfer) =
        dlpack_candle::into_owned_on(copy, device, CopyMode::Never).expect("reclaim");
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(back.to_scalar::<f32>().expect("value"), 3.5);
    // A 0-d element picked out of a vector by candle (`i`), with an offset.
    let picked = arange(5, device).get(3).expect("element 3");
    // SAFETY: nothing writes the shared storage.
    let dl = unsafe { dlpack_candle::into_dlpack(picked) }.expect("export");
    assert_eq!(host_values_of::<f32>(dl, device), [3.0]);
    // A foreign 0-d tensor at an element offset.
    let f = foreign_on(0, 5, |b| CudaTensor::strided(b, &[], &[], 4).expect("0-d"));
    let (t, transfer) = dlpack_candle::into_owned_on(f, device, CopyMode::IfNeeded)
        .unwrap_or_else(|r| panic!("{}", r.error));
    assert!(matches!(transfer, Transfer::Copied(_)), "{transfer:?}");
    assert_eq!(t.rank(), 0);
    assert_eq!(t.to_scalar::<f32>().expect("value"), 4.0);
    // A 0-d bare buffer of one element: moved.
    let b = CudaBuffer::new(upload(0, &[6.0f32]));
    let dl = ManagedTensor::export(CudaTensor::new(b, &[]).expect("0-d")).expect("export");
    let (t, _) = dlpack_candle::into_owned_on(dl, device, CopyMode::IfNeeded)
        .unwrap_or_else(|r| panic!("{}", r.error));
    assert_eq!(t.rank(), 0);
    assert_eq!(t.to_scalar::<f32>().expect("value"), 6.0);
}

fn empty_tensors_go_both_ways(device: &Device) {
    // candle's own empty tensor: a narrow to nothing, and a zero-size tensor.
    let base = arange(12, device).reshape((3, 4)).expect("reshape");
    let nothing = base.narrow(1, 4, 0).expect("no columns");
    assert_eq!(nothing.dims(), [3, 0]);
    // SAFETY: nothing writes `base`'s storage.
    let dl = unsafe { dlpack_candle::into_dlpack(nothing.clone()) }.expect("export");
    assert_eq!(dl.shape(), &[3, 0]);
    let (back, transfer) =
        dlpack_candle::into_owned_on(dl, device, CopyMode::Never).expect("reclaim");
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(back.dims(), [3, 0]);
    drop(nothing);
    drop(base);
}

fn empty_foreign_tensors_import_as_empty_candle_tensors(device: &Device) {
    // Foreign empty tensors, one with an absurd stride on its empty axis: no element is
    // read, so nothing is out of bounds, and candle holds empty tensors. Every attempt is
    // made; the failures are listed together.
    let mut failures = Vec::new();
    let f = foreign_on(0, 1, |b| {
        CudaTensor::strided(b, &[0, 4], &[1 << 40, 1], 0).expect("empty")
    });
    match dlpack_candle::into_owned_on(f, device, CopyMode::IfNeeded) {
        Ok((t, _)) => assert_eq!(t.dims(), [0, 4]),
        Err(r) => failures.push(format!("[0, 4] with an absurd stride: {}", r.error)),
    }
    let f = foreign_on(0, 2, |b| CudaTensor::new(b, &[2, 0, 3]).expect("empty"));
    match dlpack_candle::to_owned_on(&f, device) {
        Ok(copy) => assert_eq!(copy.dims(), [2, 0, 3]),
        Err(e) => failures.push(format!("to_owned_on of [2, 0, 3]: {e}")),
    }
    match dlpack_candle::into_owned_on(f, device, CopyMode::IfNeeded) {
        Ok((t, _)) => assert_eq!(t.dims(), [2, 0, 3]),
        Err(r) => failures.push(format!("into_owned_on of [2, 0, 3]: {}", r.error)),
    }
    // An empty foreign tensor with a NULL or fake pointer (PyTorch hands out NULL for
    // empty CUDA tensors): its claim has no byte to check; taken as an empty tensor, or
    // refused with the tensor given back.
    for address in [0usize, 0x10] {
        let (tensor, counter) = raw_cuda(
            address,
            DataType::F32,
            &[0],
            &[1],
            0,
            dlpack_core::Device::cuda(0),
        );
        match tensor {
            Err(e) => {
                println!("    (an empty tensor at {address:#x}: refused by dlpack-core: {e})")
            }
            Ok(tensor) => match dlpack_candle::into_owned_on(tensor, device, CopyMode::IfNeeded) {
                Ok((t, _)) => assert_eq!(t.dims(), [0]),
                Err(refused) => {
                    failures.push(format!("[0] at {address:#x}: {}", refused.error));
                    assert_eq!(deletes(&counter), 0, "given back");
                }
            },
        }
        assert!(deletes(&counter) <= 1);
    }
    assert!(
        failures.is_empty(),
        "empty foreign tensors refused: {failures:#?}"
    );
}

fn to_dlpack_copies_an_empty_candle_tensor(device: &Device) {
    // `to_dlpack` copies any tensor into one the export owns; an empty one has nothing to
    // copy (the CPU path makes an empty Vec). On CUDA, a zero-byte allocation is what the
    // driver refuses (cuMemAlloc documents CUDA_ERROR_INVALID_VALUE for 0 bytes).
    let base = arange(12, device).reshape((3, 4)).expect("reshape");
    for (what, nothing) in [
        (
            "a narrow to no columns",
            base.narrow(1, 4, 0).expect("no columns"),
        ),
        (
            "a narrow to no rows",
            base.narrow(0, 1, 0).expect("no rows"),
        ),
    ] {
        let copy = dlpack_candle::to_dlpack(&nothing)
            .unwrap_or_else(|e| panic!("{what}: copy of nothing: {e}"));
        assert_eq!(
            copy.shape(),
            nothing.dims().iter().map(|&d| d as i64).collect::<Vec<_>>()
        );
        let (back, _) = dlpack_candle::into_owned_on(copy, device, CopyMode::IfNeeded)
            .unwrap_or_else(|r| panic!("{what}: {}", r.error));
        assert_eq!(back.dims(), nothing.dims(), "{what}");
    }
}

fn broadcast_candle_tensors_export_with_stride_zero(device: &Device) {
    let row = arange(3, device);
    let wide = row.broadcast_as((4, 3)).expect("broadcast");
    // SAFETY: nothing writes `row`'s storage.
    let dl = unsafe { dlpack_candle::into_dlpack(wide.clone()) }.expect("export");
    assert_eq!((dl.shape(), dl.strides()), (&[4i64, 3][..], &[0i64, 1][..]));
    assert!(dl.is_read_only());
    assert_eq!(host_values_of::<f32>(dl, device), [0.0, 1.0, 2.0].repeat(4));
    // Reclaimed with its layout; copied into a compact tensor.
    // SAFETY: as above.
    let dl = unsafe { dlpack_candle::into_dlpack(wide.clone()) }.expect("export");
    let (back, transfer) =
        dlpack_candle::into_owned_on(dl, device, CopyMode::Never).expect("reclaim");
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(
        back.to_vec2::<f32>().expect("values"),
        vec![vec![0.0, 1.0, 2.0]; 4]
    );
    let copy = dlpack_candle::to_dlpack(&wide).expect("copy");
    assert_eq!(
        (copy.shape(), copy.strides()),
        (&[4i64, 3][..], &[3i64, 1][..])
    );
    assert_eq!(
        host_values_of::<f32>(copy, device),
        [0.0, 1.0, 2.0].repeat(4)
    );
    // A column broadcast over rows after a transpose: stride 0 last.
    let col = arange(2, device).reshape((2, 1)).expect("column");
    let tall = col.broadcast_as((2, 5)).expect("broadcast");
    // SAFETY: nothing writes `col`'s storage.
    let dl = unsafe { dlpack_candle::into_dlpack(tall.clone()) }.expect("export");
    assert_eq!(dl.strides()[1], 0);
    let (t, transfer) = dlpack_candle::into_owned_on(dl, device, CopyMode::Always)
        .unwrap_or_else(|r| panic!("{}", r.error));
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert!(t.is_contiguous());
    assert_eq!(t.to_vec2::<f32>().expect("values"), [[0.0; 5], [1.0; 5]]);
}

fn layouts_ending_at_the_allocations_end_are_read_exactly(device: &Device) {
    // Each layout's last reachable element is the allocation's last: a copy of "the whole
    // span it reaches" one element too long is refused by the stand-in.
    type Layout = (
        &'static str,
        usize,
        &'static [usize],
        &'static [isize],
        usize,
    );
    let layouts: &[Layout] = &[
        ("every 4th from 3", 12, &[3], &[4], 3),
        ("a column, last", 12, &[3, 1], &[4, 1], 3),
        ("flipped, offset to the end", 7, &[3], &[-3], 6),
        ("flipped 2-d", 12, &[3, 2], &[-4, -1], 11),
        ("tail rows transposed", 12, &[4, 2], &[1, 4], 4),
        ("broadcast of the last", 5, &[2, 3], &[0, 0], 4),
    ];
    fn expected(n: usize, shape: &[usize], strides: &[isize], offset: usize) -> Vec<i64> {
        let total: usize = shape.iter().product();
        (0..total)
            .map(|mut i| {
                let mut at = offset as isize;
                for (&d, &s) in shape.iter().zip(strides).rev() {
                    at += (i % d) as isize * s;
                    i /= d;
                }
                assert!((0..n as isize).contains(&at));
                at as i64
            })
            .collect()
    }
    fn run<T>(
        device: &Device,
        layouts: &[Layout],
        make: impl Fn(i64) -> T,
        read: impl Fn(&Tensor) -> Vec<i64>,
    ) where
        T: Element + candle_core::cuda_backend::cudarc::driver::DeviceRepr + Copy,
    {
        let name = std::any::type_name::<T>();
        for &(what, n, shape, strides, offset) in layouts {
            let values: Vec<T> = (0..n as i64).map(&make).collect();
            let buffer = CudaBuffer::new(upload(0, &values));
            let view = CudaTensor::strided(buffer, shape, strides, offset).expect("layout");
            let dl = ManagedTensor::export(view).expect("inside its buffer");
            let (t, _) = dlpack_candle::into_owned_on(dl, device, CopyMode::IfNeeded)
                .unwrap_or_else(|r| panic!("{name} {what}: {}", r.error));
            assert_eq!(t.dims(), shape, "{name} {what}");
            assert_eq!(
                read(&t),
                expected(n, shape, strides, offset),
                "{name} {what}"
            );
        }
    }
    fn flat(t: &Tensor) -> Tensor {
        t.flatten_all().expect("flatten")
    }
    run(
        device,
        layouts,
        |i| i as f32,
        |t| {
            flat(t)
                .to_vec1::<f32>()
                .expect("v")
                .iter()
                .map(|&v| v as i64)
                .collect()
        },
    );
    run(
        device,
        layouts,
        |i| i as u8,
        |t| {
            flat(t)
                .to_vec1::<u8>()
                .expect("v")
                .iter()
                .map(|&v| v as i64)
                .collect()
        },
    );
    run(
        device,
        layouts,
        |i| i,
        |t| flat(t).to_vec1::<i64>().expect("v"),
    );
    // The dtypes gathered through another type of the same width (no candle kernel of
    // their own), read back through dlpack-cuda (no candle kernel either).
    fn host<T: Element>(t: &Tensor, device: &Device) -> Vec<T> {
        // SAFETY: nothing writes `t`'s storage while the export lives.
        let dl = unsafe { dlpack_candle::into_dlpack(t.clone()) }.expect("export");
        host_values_of::<T>(dl, device)
    }
    run(
        device,
        layouts,
        |i| i as i16,
        |t| host::<i16>(t, device).iter().map(|&v| v as i64).collect(),
    );
    run(
        device,
        layouts,
        |i| i as i32,
        |t| host::<i32>(t, device).iter().map(|&v| v as i64).collect(),
    );
    run(
        device,
        layouts,
        |i| float8::F8E4M3::from_f32(i as f32),
        |t| {
            host::<float8::F8E4M3>(t, device)
                .iter()
                .map(|&v| v.to_f32() as i64)
                .collect()
        },
    );
    run(
        device,
        layouts,
        |i| half::f16::from_f32(i as f32),
        |t| {
            host::<half::f16>(t, device)
                .iter()
                .map(|&v| v.to_f32() as i64)
                .collect()
        },
    );
}

fn size_one_dims_with_absurd_strides_read_only_their_elements(device: &Device) {
    // A size-1 axis is never stepped along: its stride, however large, reaches nothing.
    let values: Vec<f32> = iota(3);
    let buffer = CudaBuffer::new(upload(0, &values));
    let at = buffer.device_address();
    for (shape, strides) in [
        (&[3i64, 1][..], &[1i64, 1 << 40][..]),
        (&[1, 3][..], &[-(1 << 40), 1][..]),
        (&[1, 3, 1][..], &[i64::MAX, 1, i64::MIN + 1][..]),
    ] {
        let (tensor, counter) = raw_cuda(
            at,
            DataType::F32,
            shape,
            strides,
            0,
            dlpack_core::Device::cuda(0),
        );
        match tensor {
            Err(e) => println!("    ({shape:?} {strides:?}: refused by dlpack-core: {e})"),
            Ok(tensor) => {
                let (t, _) = dlpack_candle::into_owned_on(tensor, device, CopyMode::IfNeeded)
                    .unwrap_or_else(|r| panic!("{shape:?} {strides:?}: {}", r.error));
                assert_eq!(deletes(&counter), 1);
                assert_eq!(
                    t.flatten_all()
                        .and_then(|t| t.to_vec1::<f32>())
                        .expect("values"),
                    values,
                    "{shape:?} {strides:?}"
                );
            }
        }
    }
    drop(buffer);
}

fn spans_past_the_allocation_are_refused_without_a_read(device: &Device) {
    // 8 f32 of device memory; hand-made claims that reach outside it. Each must be refused
    // (by dlpack-core, dlpack-cuda's driver check or dlpack-candle) before any copy reads
    // it: the stand-in refuses, and counts, a copy or kernel outside an allocation.
    let buffer = CudaBuffer::new(upload(0, &iota(8)));
    let at = buffer.device_address();
    let cuda0 = dlpack_core::Device::cuda(0);
    type Claim = (&'static str, usize, &'static [i64], &'static [i64], u64);
    let claims: &[Claim] = &[
        ("one element too many", 0, &[9], &[1], 0),
        ("rows past the end", 0, &[3, 3], &[3, 1], 0),
        (
            "a byte offset to the last element, two long",
            0,
            &[2],
            &[1],
            28,
        ),
        ("a byte offset past the end", 0, &[1], &[1], 32),
        ("a stride past the end", 0, &[2], &[8], 0),
        ("a negative stride before the start", 0, &[2], &[-1], 0),
        (
            "a negative stride from the middle, too far",
            8,
            &[4],
            &[-1],
            0,
        ),
        ("transposed, one column too wide", 0, &[3, 3], &[1, 3], 0),
        ("past the end, no allocation there", 4096, &[2], &[1], 0),
        ("a huge byte offset", 0, &[1], &[1], 1 << 62),
        (
            "a byte offset that wraps the address",
            0,
            &[1],
            &[1],
            u64::MAX - 3,
        ),
        ("a huge stride", 0, &[2], &[1 << 61], 0),
        ("a huge negative stride", 0, &[2], &[-(1 << 61)], 0),
    ];
    for &(what, shift, shape, strides, byte_offset) in claims {
        for mode in [CopyMode::IfNeeded, CopyMode::Always] {
            let (tensor, counter) = raw_cuda(
                at.wrapping_add(shift),
                DataType::F32,
                shape,
                strides,
                byte_offset,
                cuda0,
            );
            let tensor = match tensor {
                Err(e) => {
                    // Refused by dlpack-core's validation: fine, and deleted.
                    assert_eq!(deletes(&counter), 1, "{what}: {e}");
                    continue;
                }
                Ok(tensor) => tensor,
            };
            let kept = dlpack_candle::to_owned_on(&tensor, device);
            assert!(
                kept.is_err(),
                "{what}: to_owned_on copied a span past its allocation"
            );
            match dlpack_candle::into_owned_on(tensor, device, mode) {
                Ok((t, transfer)) => panic!(
                    "{what} ({mode:?}): taken ({transfer:?}, dims {:?}) though it reaches \
                     past its allocation",
                    t.dims()
                ),
                Err(refused) => {
                    assert!(
                        matches!(refused.error, CandleError::DLPack(_)),
                        "{what}: {}",
                        refused.error
                    );
                    assert_eq!(deletes(&counter), 0, "{what}: given back");
                }
            }
            assert_eq!(deletes(&counter), 1, "{what}: deleted once");
        }
    }
    // The exact span, for contrast: accepted, with the right values.
    let (tensor, _) = raw_cuda(at + 4, DataType::F32, &[7], &[1], 0, cuda0);
    let (t, _) = dlpack_candle::into_owned_on(tensor.expect("ok"), device, CopyMode::IfNeeded)
        .unwrap_or_else(|r| panic!("{}", r.error));
    assert_eq!(t.to_vec1::<f32>().expect("values"), iota(8)[1..]);
    let (tensor, _) = raw_cuda(at + 28, DataType::F32, &[8], &[-1], 0, cuda0);
    let (t, _) = dlpack_candle::into_owned_on(tensor.expect("ok"), device, CopyMode::IfNeeded)
        .unwrap_or_else(|r| panic!("{}", r.error));
    assert_eq!(
        t.to_vec1::<f32>().expect("values"),
        iota(8).into_iter().rev().collect::<Vec<_>>()
    );
    drop(buffer);
}

fn an_empty_shape_past_usize_is_overflow_whatever_the_mode(device: &Device) {
    // Documented for `into_owned_on`/`to_owned_on`: a shape without elements whose non-zero
    // sizes multiply past usize::MAX is `Overflow`, whatever the mode.
    let buffer = CudaBuffer::new(upload(0, &[1.0f32]));
    let at = buffer.device_address();
    let cuda0 = dlpack_core::Device::cuda(0);
    for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
        let (tensor, counter) = raw_cuda(
            at,
            DataType::F32,
            &[1 << 62, 1 << 62, 0],
            &[0, 0, 1],
            0,
            cuda0,
        );
        let Ok(tensor) = tensor else {
            assert_eq!(deletes(&counter), 1);
            continue;
        };
        let refused = dlpack_candle::into_owned_on(tensor, device, mode)
            .err()
            .unwrap_or_else(|| panic!("{mode:?}: an empty shape candle cannot hold"));
        assert!(
            matches!(refused.error, CandleError::DLPack(Error::Overflow { .. })),
            "{mode:?}: {}",
            refused.error
        );
    }
    drop(buffer);
}

fn a_foreign_broadcast_too_large_to_copy_is_refused_before_the_driver(device: &Device) {
    // A broadcast of one element standing for 2^62 f32 (2^64 bytes, past usize), and one of
    // 2^62 + 1 f32, whose byte count wraps to 4 (and whose i64 index count to 8 bytes): the
    // copy cannot be made, and must be refused (Overflow, OutOfMemory) before a byte count
    // wraps into a small allocation that a gather then writes far past. Asking the driver
    // for the memory first fails this case on the stand-in (it counts the refusal).
    let buffer = CudaBuffer::new(upload(0, &[1.0f32]));
    let at = buffer.device_address();
    let cuda0 = dlpack_core::Device::cuda(0);
    let mut failures = Vec::new();
    for (what, shape, strides) in [
        ("2^31 x 2^31", &[1i64 << 31, 1 << 31][..], &[0i64, 0][..]),
        ("2^62 + 1", &[(1i64 << 62) + 1][..], &[0i64][..]),
    ] {
        let (tensor, _) = raw_cuda(at, DataType::F32, shape, strides, 0, cuda0);
        let Ok(tensor) = tensor else {
            continue;
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            dlpack_candle::into_owned_on(tensor, device, CopyMode::IfNeeded)
        }));
        match outcome {
            Err(_) => failures.push(format!("{what}: a panic (printed above)")),
            Ok(Ok(_)) => failures.push(format!("{what}: more than 2^64 bytes copied?")),
            Ok(Err(refused)) => {
                if !matches!(
                    refused.error,
                    CandleError::DLPack(Error::OutOfMemory { .. } | Error::Overflow { .. })
                ) {
                    failures.push(format!("{what}: {}", refused.error));
                }
            }
        }
    }
    drop(buffer);
    assert!(
        failures.is_empty(),
        "not refused before the driver: {failures:#?}"
    );
}

fn to_dlpack_of_a_candle_broadcast_too_large_to_copy_is_an_error(device: &Device) {
    // Documented for `to_dlpack`: OutOfMemory when the copy does not fit ("a broadcast can
    // stand for far more elements than its storage holds"), Overflow for sizes candle's
    // usize arithmetic cannot hold. Not a panic, and not a wrapped allocation (2^62 + 1
    // f32 is 4 bytes modulo 2^64).
    let one = Tensor::new(&[1.0f32], device).expect("one");
    let mut failures = Vec::new();
    for (what, dims) in [
        ("2^31 x 2^31", (1usize << 31, 1usize << 31)),
        ("2^62 + 1", (1usize, (1usize << 62) + 1)),
    ] {
        let huge = one
            .reshape((1, 1))
            .and_then(|t| t.broadcast_as(dims))
            .expect("broadcast");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            dlpack_candle::to_dlpack(&huge)
        }));
        match outcome {
            Err(_) => failures.push(format!("{what}: a panic (printed above)")),
            Ok(Ok(_)) => failures.push(format!("{what}: copied 2^64 bytes?")),
            Ok(Err(refused)) => {
                if !matches!(
                    refused,
                    CandleError::DLPack(Error::OutOfMemory { .. } | Error::Overflow { .. })
                ) {
                    failures.push(format!("{what}: {refused}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "not the documented error: {failures:#?}"
    );
}

fn a_misaligned_foreign_pointer_is_copied_or_refused_never_misread(device: &Device) {
    let bytes: Vec<u8> = (0..32).collect();
    let buffer = CudaBuffer::new(upload(0, &bytes));
    let at = buffer.device_address();
    let decode = |from: usize| f32::from_ne_bytes(bytes[from..from + 4].try_into().expect("4"));
    for (shape, strides) in [(&[3i64][..], &[1i64][..]), (&[3][..], &[2][..])] {
        let (tensor, counter) = raw_cuda(
            at + 1,
            DataType::F32,
            shape,
            strides,
            0,
            dlpack_core::Device::cuda(0),
        );
        let Ok(tensor) = tensor else {
            continue;
        };
        match dlpack_candle::into_owned_on(tensor, device, CopyMode::IfNeeded) {
            Ok((t, _)) => {
                let step = strides[0] as usize * 4;
                let expected: Vec<f32> = (0..3).map(|i| decode(1 + i * step)).collect();
                let found = t.to_vec1::<f32>().expect("values");
                assert_eq!(
                    found.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    expected.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{strides:?}: misread"
                );
            }
            Err(refused) => {
                assert!(
                    matches!(refused.error, CandleError::DLPack(_)),
                    "{}",
                    refused.error
                );
                drop(refused);
                assert_eq!(deletes(&counter), 1);
            }
        }
    }
    drop(buffer);
}

// ---------------------------------------------------------------------------------------
// Streams.

fn a_moved_buffer_waits_for_the_pending_write_on_its_own_stream(device: &Device) {
    // Documented: "a moved `CudaBuffer` is also waited for on its own stream". No handshake
    // here: the write is queued on the buffer's own stream, behind a block.
    const N: usize = 1 << 16;
    for gpu in [
        device.clone(),
        Device::new_cuda_with_stream(0).expect("own stream"),
    ] {
        let context = open_device(0).expect("device 0");
        let producer = context.new_stream().expect("producer stream");
        let mut slice = producer.alloc_zeros::<f32>(N).expect("zeroed");
        let values = iota(N);
        let source = producer.clone_htod(&values).expect("source");
        hooks(&gpu);
        arange(4, &gpu).affine(2.0, 0.0).expect("kernel loaded");
        gpu.synchronize().expect("ready");
        producer.synchronize().expect("zeroed and uploaded");
        let release = block(&producer);
        producer
            .memcpy_dtod(&source, &mut slice)
            .expect("queued write");
        drop(source);
        let dl = ManagedTensor::export(CudaBuffer::new(slice)).expect("export");
        // Released 500 ms from now, whatever happens here (a host wait would end then).
        let lifter = release_later(release, 500);
        let (t, transfer) = dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Never).expect("moved");
        assert_eq!(transfer, Transfer::Moved);
        let doubled = t.affine(2.0, 0.0).expect("candle reads the moved memory");
        drop(t);
        assert!(
            still_blocked(&producer),
            "the move waited on the host for the producer's stream"
        );
        let found = doubled.to_vec1::<f32>().expect("values");
        lifter.join().expect("lifter");
        assert!(
            found.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32),
            "candle read the moved memory before its producer's write (first: {:?})",
            &found[..4]
        );
        producer.synchronize().expect("producer done");
        gpu.synchronize().expect("synchronize");
    }
}

fn a_moved_buffer_is_freed_after_the_pending_read_on_its_own_stream(device: &Device) {
    // The producer still reads the buffer (behind a block) when it hands it over; candle
    // drops the moved tensor at once. The free must wait for that read: the stand-in
    // refuses a copy from freed memory.
    const N: usize = 1 << 16;
    for gpu in [
        device.clone(),
        Device::new_cuda_with_stream(0).expect("own stream"),
    ] {
        let context = open_device(0).expect("device 0");
        let producer = context.new_stream().expect("producer stream");
        let values = iota(N);
        let slice = producer.clone_htod(&values).expect("upload");
        let mut out = producer.alloc_zeros::<f32>(N).expect("zeroed");
        hooks(&gpu);
        producer.synchronize().expect("ready");
        let release = block(&producer);
        producer.memcpy_dtod(&slice, &mut out).expect("queued read");
        let dl = ManagedTensor::export(CudaBuffer::new(slice)).expect("export");
        let (t, transfer) = dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Never).expect("moved");
        assert_eq!(transfer, Transfer::Moved);
        drop(t);
        // The block is lifted while candle's stream is being waited for: if the free waits for
        // the read, the wait ends only then.
        let lifter = release_later(release, 100);
        gpu.synchronize().expect("candle's stream");
        lifter.join().expect("lifter");
        let found = producer.clone_dtoh(&out).expect("read back");
        assert!(
            found == values,
            "the producer's pending read saw freed memory"
        );
        drop(out);
        producer.synchronize().expect("producer done");
    }
}

// ---------------------------------------------------------------------------------------
// Threads at once.

fn the_exchange_stream_is_one_per_candle_device_under_a_race(_device: &Device) {
    // "One per candle device, made on first use": eight threads ask for a fresh device's
    // hooks at the same moment.
    for _ in 0..4 {
        let fresh = Device::new_cuda_with_stream(0).expect("fresh device");
        let start = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (fresh, start) = (fresh.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let hooks = dlpack_candle::cuda::hooks(&fresh).expect("hooks");
                    hooks
                        .consumer_stream(dlpack_core::Device::cuda(0))
                        .expect("stream")
                })
            })
            .collect();
        let streams: Vec<i64> = threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .collect();
        assert!(
            streams.iter().all(|&s| s == streams[0]),
            "several exchange streams for one candle device: {streams:?}"
        );
        assert_eq!(
            hooks(&fresh)
                .consumer_stream(dlpack_core::Device::cuda(0))
                .expect("stream"),
            streams[0]
        );
    }
}

fn concurrent_exports_and_imports_from_several_threads(device: &Device) {
    let shared = Device::new_cuda_with_stream(0).expect("own stream");
    hooks(&shared);
    let start = Arc::new(Barrier::new(6));
    let threads: Vec<_> = (0..6)
        .map(|k| {
            let gpu = if k % 2 == 0 {
                device.clone()
            } else {
                shared.clone()
            };
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                for round in 0..8 {
                    let base = (k * 100 + round) as f32;
                    let t = Tensor::arange(base, base + 64.0, &gpu)
                        .and_then(|t| t.affine(2.0, 1.0))
                        .expect("candle op");
                    let expected: Vec<f32> =
                        (0..64).map(|i| 2.0 * (base + i as f32) + 1.0).collect();
                    // Lent and reclaimed.
                    // SAFETY: `t` is the only handle on its new storage.
                    let dl = unsafe { dlpack_candle::into_dlpack(t) }.expect("export");
                    let (t, transfer) = dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Never)
                        .unwrap_or_else(|r| panic!("reclaim: {}", r.error));
                    assert_eq!(transfer, Transfer::Reclaimed);
                    assert_eq!(t.to_vec1::<f32>().expect("values"), expected);
                    // Copied out (a view), reclaimed.
                    let view = t.narrow(0, 8, 16).expect("narrow");
                    let copy = dlpack_candle::to_dlpack(&view).expect("copy");
                    let (c, transfer) = dlpack_candle::into_owned_on(copy, &gpu, CopyMode::Never)
                        .unwrap_or_else(|r| panic!("reclaim copy: {}", r.error));
                    assert_eq!(transfer, Transfer::Reclaimed);
                    assert_eq!(c.to_vec1::<f32>().expect("values"), expected[8..24]);
                    // A foreign strided tensor, copied.
                    let f = foreign_on(0, 12, |b| {
                        CudaTensor::strided(b, &[4, 3], &[1, 4], 0).expect("t")
                    });
                    let (f, _) = dlpack_candle::into_owned_on(f, &gpu, CopyMode::IfNeeded)
                        .unwrap_or_else(|r| panic!("foreign: {}", r.error));
                    assert_eq!(f.to_vec2::<f32>().expect("values")[1], [1.0, 5.0, 9.0]);
                    // A moved buffer, computed on, and its result lent and dropped on
                    // this thread.
                    let b = CudaBuffer::new(upload(0, &[base, base + 1.0]));
                    let dl = ManagedTensor::export(b).expect("export");
                    let (m, transfer) = dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Never)
                        .unwrap_or_else(|r| panic!("move: {}", r.error));
                    assert_eq!(transfer, Transfer::Moved);
                    let m = m.affine(1.0, 1.0).expect("op");
                    assert_eq!(m.to_vec1::<f32>().expect("v"), [base + 1.0, base + 2.0]);
                    // SAFETY: the only handle.
                    let lent = unsafe { dlpack_candle::into_dlpack(m) }.expect("export");
                    drop(lent);
                }
                gpu.synchronize().expect("synchronize");
            })
        })
        .collect();
    for t in threads {
        t.join()
            .expect("a worker thread failed (its panic is printed above)");
    }
}

// ---------------------------------------------------------------------------------------
// Writes and refusals.

fn a_copy_is_writable_without_touching_the_original(device: &Device) {
    let t = arange(6, device).reshape((2, 3)).expect("reshape");
    let copy = dlpack_candle::to_dlpack(&t.t().expect("t")).expect("copy");
    assert!(!copy.is_read_only());
    let exchange = hooks(device);
    let mut import = CudaImport::new(copy, &*exchange).expect("import");
    let written = [10.0f32, 11.0, 12.0, 13.0, 14.0, 15.0];
    import
        .copy_from_host(&*exchange, &written)
        .expect("a copy is writable");
    // The original is untouched.
    assert_eq!(
        t.to_vec2::<f32>().expect("values"),
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    );
    // The written copy comes back as candle storage, with what was written (the write was
    // queued on the exchange stream, which the reclaim orders candle's stream after).
    let (back, transfer) =
        dlpack_candle::into_owned_on(import.into_tensor(), device, CopyMode::Never)
            .expect("reclaim");
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(
        back.to_vec2::<f32>().expect("values"),
        [[10.0, 11.0], [12.0, 13.0], [14.0, 15.0]]
    );
    // A lent export is read-only: the write is refused.
    // SAFETY: nothing writes `t`'s storage (the write below is refused).
    let lent = unsafe { dlpack_candle::into_dlpack(t.clone()) }.expect("export");
    let mut import = CudaImport::new(lent, &*exchange).expect("import");
    let err = import
        .copy_from_host(&*exchange, &[0.0f32; 6])
        .expect_err("read-only");
    assert!(matches!(err, Error::ReadOnly), "{err}");
    assert_eq!(
        t.to_vec2::<f32>().expect("values"),
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    );
}

fn refusals_give_the_tensor_back_usable(device: &Device) {
    // Under Never, each foreign tensor is refused with the reason, given back, and then
    // copied by `to_owned_on` and `into_owned_on`.
    type Layout = Box<dyn FnOnce(CudaBuffer<f32>) -> CudaTensor<CudaBuffer<f32>>>;
    let cases: Vec<(&str, Layout, CopyReason, Vec<f32>)> = vec![
        (
            "compact",
            Box::new(|b| CudaTensor::new(b, &[2, 3]).expect("2x3")),
            CopyReason::NotOwned,
            iota(6),
        ),
        (
            "transposed",
            Box::new(|b| CudaTensor::strided(b, &[3, 2], &[1, 3], 0).expect("t")),
            CopyReason::Layout,
            vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0],
        ),
        (
            "a compact tail",
            Box::new(|b| CudaTensor::strided(b, &[3], &[1], 3).expect("tail")),
            CopyReason::NotOwned,
            vec![3.0, 4.0, 5.0],
        ),
    ];
    for (name, layout, reason, expected) in cases {
        let tensor = foreign_on(0, 6, layout);
        let address = tensor.data_ptr().addr();
        let refused = dlpack_candle::into_owned_on(tensor, device, CopyMode::Never)
            .err()
            .unwrap_or_else(|| panic!("{name}: taken under Never"));
        assert!(
            matches!(refused.error, CandleError::DLPack(Error::CopyRefused { reason: r }) if r == reason),
            "{name}: {}",
            refused.error
        );
        let back = refused.value;
        assert_eq!(back.data_ptr().addr(), address, "{name}: the same tensor");
        let copy = dlpack_candle::to_owned_on(&back, device).expect("copy");
        assert_eq!(
            copy.flatten_all()
                .and_then(|t| t.to_vec1::<f32>())
                .expect("v"),
            expected,
            "{name}"
        );
        let (t, transfer) = dlpack_candle::into_owned_on(back, device, CopyMode::IfNeeded)
            .unwrap_or_else(|r| panic!("{name}: {}", r.error));
        assert_eq!(transfer, Transfer::Copied(reason), "{name}");
        assert_eq!(
            t.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("v"),
            expected,
            "{name}"
        );
    }
    // CudaBuffers of dtypes candle lacks: refused whatever the mode, given back as the
    // CudaBuffer they were.
    for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
        let buffer = CudaBuffer::new(upload(0, &[-1i8, 2, -3]));
        let address = buffer.device_address();
        let refused = dlpack_candle::into_owned_on(
            ManagedTensor::export(buffer).expect("export"),
            device,
            mode,
        )
        .err()
        .unwrap_or_else(|| panic!("{mode:?}: int8 has no candle dtype"));
        assert!(
            matches!(refused.error, CandleError::NoCandleDType { .. }),
            "{mode:?}: {}",
            refused.error
        );
        let buffer: CudaBuffer<i8> = refused.value.reclaim().expect("still the CudaBuffer");
        assert_eq!(buffer.device_address(), address);
        let dl = ManagedTensor::export(buffer).expect("export");
        assert_eq!(host_values_of::<i8>(dl, device), [-1, 2, -3]);
        let buffer = CudaBuffer::new(upload(0, &[1u16, 2]));
        let refused = dlpack_candle::into_owned_on(
            ManagedTensor::export(buffer).expect("export"),
            device,
            mode,
        )
        .expect_err("uint16 has no candle dtype");
        assert!(matches!(refused.error, CandleError::NoCandleDType { .. }));
        let _: CudaBuffer<u16> = refused.value.reclaim().expect("still the CudaBuffer");
    }
    // A bare buffer refused under Never? No: it moves. A moved buffer of every candle dtype
    // the stand-in computes with.
    let b = CudaBuffer::new(upload(0, &[1u32, 2, 3]));
    let (t, transfer) = dlpack_candle::into_owned_on(
        ManagedTensor::export(b).expect("export"),
        device,
        CopyMode::Never,
    )
    .expect("moved");
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(t.dtype(), DType::U32);
    assert_eq!(t.to_vec1::<u32>().expect("values"), [1, 2, 3]);
}
