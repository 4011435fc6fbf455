//! The CUDA suite: real allocations, the driver's pointer attributes, copies and the stream
//! handshake, through cudarc and `dlpack-cuda`'s driver calls. Shared by two runners:
//! `tests/gpu.rs` runs it on a real GPU (`DLPACK_TEST_CUDA=1`), `tests/test_driver.rs` on any
//! machine through the workspace's libcuda stand-in (`dlpack-cuda/test-driver`).

use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use dlpack_core::protocol::{StreamRequest, parse_stream};
use dlpack_core::{
    Buffer, DLPack, DataType, Device, DeviceHooks, DeviceType, Element, Error, Export, ExportDesc,
    Flags, ManagedTensor, MemoryKind,
};
use dlpack_cuda::cudarc::driver::{CudaContext, CudaStream, result, sys};
use dlpack_cuda::{
    CudaBuffer, CudaHooks, CudaImport, CudaTensor, ManagedBuffer, PinnedBuffer, open_device,
};

use dlpack_testing::harness::{Case, cases};

const CUDA_HOST: Device = Device::new(DeviceType::CUDA_HOST, 0);
const CUDA_MANAGED: Device = Device::new(DeviceType::CUDA_MANAGED, 0);

/// Every case of the suite, each taking device 0's primary context.
pub(crate) const CASES: &[Case<Arc<CudaContext>>] = cases![Arc<CudaContext>;
    every_element_type_round_trips_through_device_memory,
    managed_memory_exports_as_cuda_managed_and_the_driver_agrees,
    pinned_memory_exports_as_cuda_host_and_the_driver_agrees,
    false_device_claims_are_refused_by_the_real_driver,
    a_transposed_device_tensor_imports_and_is_written_in_row_major_order,
    a_foreign_slice_reads_through_cudarc_and_never_frees,
    a_consumer_stream_waits_for_the_producer_stream,
    a_consumer_stream_waits_for_the_stream_a_producer_names,
    every_stream_value_is_served_on_a_real_device,
    a_deleter_on_a_thread_without_a_current_context_frees_and_leaves_none,
    a_derived_struct_with_a_device_buffer_exports_and_imports,
    two_devices_keep_their_own_contexts_streams_and_claims,
    a_slice_swapped_through_slice_mut_is_exported_at_its_own_address,
    a_cudarc_slice_is_refused_for_gaps_of_bool_and_in_a_context_with_an_error,
    pinned_memory_is_copied_after_the_producers_pending_write,
    a_write_into_memory_holding_the_tensors_own_strides_is_refused,
    the_per_thread_default_stream_cannot_serve_as_the_hooks_stream,
    a_per_thread_stream_slice_is_read_after_its_write_on_other_threads,
    the_legacy_default_stream_synchronises_with_blocking_streams_only,
];

/// The bytes of some elements, to compare values of any element type.
fn bytes<T: Element>(values: &[T]) -> Vec<u8> {
    // SAFETY: Element types have no padding, so every byte is initialised.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values)).to_vec()
    }
}

/// Gives a tensor away as a raw pointer and takes it back, as a foreign consumer would.
fn through_c(tensor: ManagedTensor) -> ManagedTensor {
    let raw = tensor.into_raw().expect("into_raw");
    // SAFETY: `raw` is a live tensor we own, made by dlpack-core.
    unsafe { ManagedTensor::from_raw(raw) }.expect("from_raw")
}

fn round_trip<T: Element>(context: &Arc<CudaContext>, values: Vec<T>) {
    let name = T::DTYPE;
    let hooks = CudaHooks::new(context.default_stream()).expect("hooks");
    let host = ManagedTensor::export(values.clone()).expect("host tensor");
    let buffer = CudaBuffer::<T>::copy_from_tensor(&host).expect("host -> device");
    let address = buffer.device_address();
    let tensor = through_c(ManagedTensor::export(buffer).expect("export"));
    assert_eq!(
        (tensor.device(), tensor.dtype()),
        (Device::cuda(0), T::DTYPE),
        "{name}"
    );
    let import = CudaImport::new(tensor, &hooks).expect("import");
    // An empty tensor has no byte to ask the driver about (and its data pointer is a dangling
    // one, as DLPack allows).
    let empty = values.is_empty();
    let kind = (!empty).then_some(MemoryKind::Device);
    assert_eq!(import.memory_kind(), kind, "{name}");
    let view = import.device_view::<T>().expect("device view");
    if !empty {
        assert_eq!(view.device_ptr(), address as u64, "{name}: zero copy");
    }
    let back = import.to_host_vec::<T>(&hooks).expect("device -> host");
    assert_eq!(bytes(&back), bytes(&values), "{name}");
    // Device to device.
    let copy = CudaBuffer::<T>::copy_from_tensor(import.tensor()).expect("device -> device");
    assert_ne!(copy.device_address(), address, "{name}: a new allocation");
    let copy = ManagedTensor::export(copy).expect("export the copy");
    assert_eq!(
        bytes(&copy.to_host_vec::<T>(&hooks).expect("copy -> host")),
        bytes(&values),
        "{name}"
    );
    // The exported buffer comes back without a copy.
    let buffer: CudaBuffer<T> = import
        .into_tensor()
        .reclaim()
        .unwrap_or_else(|_| panic!("{name}: exported from a CudaBuffer"));
    assert_eq!(buffer.device_address(), address, "{name}");
}

fn every_element_type_round_trips_through_device_memory(context: &Arc<CudaContext>) {
    round_trip(context, vec![true, false, false, true, true]);
    round_trip(context, vec![i8::MIN, -1, 0, 1, i8::MAX]);
    round_trip(context, vec![i16::MIN, -1, 0, 1, i16::MAX]);
    round_trip(context, vec![i32::MIN, -1, 0, 1, i32::MAX]);
    round_trip(context, vec![i64::MIN, -1, 0, 1, i64::MAX]);
    round_trip(context, vec![0u8, 1, 127, 128, 255]);
    round_trip(context, vec![0u16, 1, u16::MAX]);
    round_trip(context, vec![0u32, 1, u32::MAX]);
    round_trip(context, vec![0u64, 1, u64::MAX]);
    round_trip(context, vec![-1.5f32, 0.0, f32::MAX, f32::MIN_POSITIVE]);
    round_trip(context, vec![-1.5f64, 0.0, f64::MAX, f64::MIN_POSITIVE]);
    round_trip::<f32>(context, Vec::new());
    #[cfg(feature = "half")]
    {
        round_trip(context, vec![half::f16::from_f32(1.5), half::f16::MAX]);
        round_trip(context, vec![half::bf16::from_f32(-2.25), half::bf16::MIN]);
    }
    #[cfg(feature = "num-complex")]
    {
        round_trip(context, vec![num_complex::Complex::new(1.0f32, -2.0)]);
        round_trip(context, vec![num_complex::Complex::new(1.0f64, -2.0)]);
    }
    #[cfg(feature = "float8")]
    {
        round_trip(context, vec![float8::F8E4M3::from_f32(1.5)]);
        round_trip(context, vec![float8::F8E5M2::from_f32(-0.25)]);
    }
}

fn managed_memory_exports_as_cuda_managed_and_the_driver_agrees(context: &Arc<CudaContext>) {
    let hooks = CudaHooks::on_default_streams().expect("hooks");
    // cudarc's `alloc_unified` allocates in the thread's current context, whichever it is.
    context.bind_to_thread().expect("cuCtxSetCurrent");
    // SAFETY: written below before it is read.
    let mut slice = unsafe { context.alloc_unified::<f32>(4, true) }.expect("managed memory");
    slice
        .as_mut_slice()
        .expect("host access")
        .copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
    let buffer = ManagedBuffer::new(slice).expect("wrap");
    let address = buffer.as_slice().as_ptr().addr();
    // Detected from the pointer alone.
    let info = hooks.resolve(CUDA_MANAGED, address).expect("resolve");
    assert_eq!(info.kind, MemoryKind::Managed);
    assert!(
        info.allocation
            .as_ref()
            .is_some_and(|a| a.contains(&address)),
        "{info:?}"
    );
    let tensor = through_c(ManagedTensor::export(buffer).expect("export"));
    assert_eq!(tensor.device(), CUDA_MANAGED);
    let import = CudaImport::new(tensor, &hooks).expect("import");
    assert_eq!(import.memory_kind(), Some(MemoryKind::Managed));
    let view = import.host_view::<f32>(&hooks).expect("host view");
    assert_eq!(view.as_ptr().addr(), address, "read in place");
    assert_eq!(view.to_vec().unwrap(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        import.to_host_vec::<f32>(&hooks).expect("copy"),
        [1.0, 2.0, 3.0, 4.0]
    );
    // Managed memory may also be claimed as plain device memory of its device.
    let buffer: ManagedBuffer<f32> = import
        .into_tensor()
        .reclaim()
        .unwrap_or_else(|_| panic!("exported from a ManagedBuffer"));
    let relabelled = Lie::over(buffer, address, Device::cuda(0), f32::DTYPE, &[4], &[1]);
    let mut relabelled = ManagedTensor::export(relabelled).expect("export");
    let info = relabelled
        .verify_device(&hooks)
        .expect("verify")
        .expect("info");
    assert_eq!(
        (info.device, info.kind),
        (Device::cuda(0), MemoryKind::Managed)
    );
}

fn pinned_memory_exports_as_cuda_host_and_the_driver_agrees(context: &Arc<CudaContext>) {
    let hooks = CudaHooks::on_default_streams().expect("hooks");
    // SAFETY: written below before it is read.
    let mut slice = unsafe { context.alloc_pinned::<u16>(4) }.expect("pinned memory");
    slice
        .as_mut_slice()
        .expect("host access")
        .copy_from_slice(&[7, 8, 9, 10]);
    let buffer = PinnedBuffer::new(slice).expect("wrap");
    let address = buffer.as_slice().as_ptr().addr();
    // Detected from the pointer alone; pageable memory is unknown to the driver.
    let info = hooks.resolve(CUDA_HOST, address).expect("resolve");
    assert_eq!(
        (info.device, info.kind),
        (CUDA_HOST, MemoryKind::HostPinned)
    );
    let pageable = [0u16; 4];
    assert!(matches!(
        hooks.resolve(CUDA_HOST, pageable.as_ptr().addr()),
        Err(Error::UnknownPointer { .. })
    ));
    let tensor = through_c(ManagedTensor::export(buffer).expect("export"));
    assert_eq!(tensor.device(), CUDA_HOST);
    let import = CudaImport::new(tensor, &hooks).expect("import");
    assert_eq!(import.memory_kind(), Some(MemoryKind::HostPinned));
    assert_eq!(
        import
            .host_view::<u16>(&hooks)
            .expect("view")
            .to_vec()
            .unwrap(),
        [7, 8, 9, 10]
    );
    // Into a pinned buffer from a device tensor.
    let device = CudaBuffer::<u16>::copy_from_tensor(import.tensor()).expect("to device");
    let device = ManagedTensor::export(device).expect("export");
    let pinned = PinnedBuffer::<u16>::copy_from_tensor(&device).expect("to pinned");
    assert_eq!(pinned.as_slice(), [7, 8, 9, 10]);
}

/// A producer that describes memory it keeps alive as whatever tensor it is told to.
struct Lie {
    _keep: Box<dyn Any + Send>,
    data: usize,
    device: Device,
    dtype: DataType,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

impl Lie {
    fn over(
        keep: impl Any + Send,
        data: usize,
        device: Device,
        dtype: DataType,
        shape: &[i64],
        strides: &[i64],
    ) -> Self {
        Lie {
            _keep: Box::new(keep),
            data,
            device,
            dtype,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        }
    }
}

// SAFETY: the described memory is kept alive by `_keep`; only the import-side checks run on
// these tensors, and lies reaching past `_keep` are refused before any data is read.
unsafe impl Export for Lie {
    fn ndim(&self) -> usize {
        self.shape.len()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&self.shape);
        strides.copy_from_slice(&self.strides);
        ExportDesc {
            data: std::ptr::without_provenance_mut(self.data),
            byte_offset: 0,
            dtype: self.dtype,
            device: self.device,
            flags: Flags::empty(),
            allocation: None,
        }
    }
}

fn false_device_claims_are_refused_by_the_real_driver(context: &Arc<CudaContext>) {
    let hooks = CudaHooks::on_default_streams().expect("hooks");
    let stream = context.default_stream();
    let slice = stream.clone_htod(&[0f32; 256]).expect("upload");
    let buffer = Arc::new(CudaBuffer::new(slice));
    let address = buffer.device_address();
    let claim = |device: Device, shape: &[i64], strides: &[i64]| {
        let lie = Lie::over(buffer.clone(), address, device, f32::DTYPE, shape, strides);
        ManagedTensor::export(lie)
            .expect("export")
            .verify_device(&hooks)
            .map(|_| ())
    };
    assert_eq!(claim(Device::cuda(0), &[256], &[1]), Ok(()));
    assert_eq!(
        claim(Device::cuda(1), &[256], &[1]),
        Err(Error::DeviceMismatch {
            claimed: Device::cuda(1),
            actual: Device::cuda(0)
        })
    );
    for claimed in [CUDA_HOST, CUDA_MANAGED] {
        assert_eq!(
            claim(claimed, &[256], &[1]),
            Err(Error::MemoryKindMismatch {
                claimed,
                actual: MemoryKind::Device
            })
        );
    }
    // Two elements 1 TiB apart: beyond the 1 KiB allocation, and beyond the range the driver
    // may report for memory of the stream-ordered allocator (its pool's reservation rather than
    // the allocation: the range is documented as "the mappable address range").
    let err = claim(Device::cuda(0), &[2], &[1 << 38]).unwrap_err();
    assert!(
        matches!(err, Error::SpanOutsideAllocation { .. }),
        "{err:?}"
    );
    // The same question from a thread that never used CUDA (no current context there, which
    // some drivers refuse pointer queries for).
    let elsewhere = std::thread::scope(|scope| {
        scope
            .spawn(|| hooks.resolve(Device::cuda(0), address))
            .join()
            .expect("the querying thread")
    })
    .expect("resolve on a fresh thread");
    assert_eq!(
        (elsewhere.device, elsewhere.kind),
        (Device::cuda(0), MemoryKind::Device)
    );
    // Pageable host memory claimed as device memory.
    let pageable = vec![0f32; 4];
    let at = pageable.as_ptr().addr();
    let lie = Lie::over(pageable, at, Device::cuda(0), f32::DTYPE, &[4], &[1]);
    let mut tensor = ManagedTensor::export(lie).expect("export");
    assert_eq!(
        tensor.verify_device(&hooks),
        Err(Error::UnknownPointer {
            claimed: Device::cuda(0),
            address: at
        })
    );
}

fn a_transposed_device_tensor_imports_and_is_written_in_row_major_order(
    context: &Arc<CudaContext>,
) {
    let stream = context.default_stream();
    let hooks = CudaHooks::new(stream.clone()).expect("hooks");
    let slice = stream.clone_htod(&[0u32, 1, 2, 3, 4, 5]).expect("upload");
    // The 3x2 transpose of a row-major 2x3 matrix.
    let transposed =
        CudaTensor::strided(CudaBuffer::new(slice), &[3, 2], &[1, 3], 0).expect("layout");
    let tensor = through_c(ManagedTensor::export(transposed).expect("export"));
    assert_eq!(tensor.strides(), &[1, 3]);
    let mut import = CudaImport::new(tensor, &hooks).expect("import");
    assert_eq!(
        import.to_host_vec::<u32>(&hooks).expect("copy"),
        [0, 3, 1, 4, 2, 5]
    );
    import
        .copy_from_host(&hooks, &[10u32, 13, 11, 14, 12, 15])
        .expect("write");
    let back: CudaTensor<CudaBuffer<u32>> = import
        .into_tensor()
        .reclaim()
        .unwrap_or_else(|_| panic!("exported from a CudaTensor"));
    let memory = stream.clone_dtoh(back.buffer().slice()).expect("download");
    assert_eq!(memory, [10, 11, 12, 13, 14, 15]);
}

fn a_foreign_slice_reads_through_cudarc_and_never_frees(context: &Arc<CudaContext>) {
    let stream = context.default_stream();
    let hooks = CudaHooks::new(stream.clone()).expect("hooks");
    let slice = stream.clone_htod(&[1i64, 2, 3, 4]).expect("upload");
    let reversed = CudaTensor::strided(CudaBuffer::new(slice), &[4], &[-1], 3).expect("layout");
    let import = CudaImport::new(
        through_c(ManagedTensor::export(reversed).expect("export")),
        &hooks,
    )
    .expect("import");
    let view = import.device_view::<i64>().expect("view");
    let span_start = view.byte_span().start;
    {
        let foreign = view.cudarc_slice(&stream).expect("cudarc slice");
        assert_eq!(foreign.first_index(), 3);
        assert_eq!(stream.clone_dtoh(&*foreign).expect("read"), [1, 2, 3, 4]);
    }
    // Making and dropping the cudarc slice leaves the thread's context alone (here: none).
    // SAFETY: NULL makes no context current.
    unsafe { result::ctx::set_current(std::ptr::null_mut()) }.expect("cuCtxSetCurrent");
    drop(view.cudarc_slice(&stream).expect("cudarc slice"));
    let left = current_context();
    context.bind_to_thread().expect("cuCtxSetCurrent");
    assert_eq!(
        left, None,
        "making or dropping the slice left a context current"
    );
    // The memory is still allocated and still holds the data.
    let info = hooks
        .resolve(Device::cuda(0), span_start)
        .expect("still known");
    assert_eq!(info.kind, MemoryKind::Device);
    assert_eq!(
        import.to_host_vec::<i64>(&hooks).expect("copy"),
        [4, 3, 2, 1]
    );
    drop(import);
    context.check_err().expect("no double free recorded");
}

/// A host function that blocks its stream until the sender is used or dropped.
unsafe extern "C" fn wait_for_release(data: *mut c_void) {
    // SAFETY: `data` is the Box<Receiver<()>> leaked by the test, taken back once, here.
    let receiver = unsafe { Box::from_raw(data.cast::<Receiver<()>>()) };
    let _ = receiver.recv_timeout(Duration::from_secs(30));
}

/// Blocks `stream` with a host function until the returned sender is used or dropped.
fn block(stream: sys::CUstream) -> Sender<()> {
    let (release, wait) = channel::<()>();
    let wait = Box::into_raw(Box::new(wait)).cast::<c_void>();
    // SAFETY: the host function takes back the box it is given and makes no CUDA call.
    unsafe { result::stream::launch_host_function(stream, wait_for_release, wait) }
        .expect("cuLaunchHostFunc");
    release
}

fn a_consumer_stream_waits_for_the_producer_stream(context: &Arc<CudaContext>) {
    // The consumer names its stream; the producer makes the data ready on it.
    read_behind_a_blocked_producer(context, |tensor, producer_stream, consumer| {
        let producer = CudaHooks::new(producer_stream.clone()).expect("producer hooks");
        let argument = consumer
            .consumer_stream(tensor.device())
            .expect("stream argument");
        assert!(argument > 2, "a stream of its own: {argument}");
        let request = parse_stream(tensor.device(), Some(argument)).expect("stream value");
        producer
            .make_ready(tensor.device(), request)
            .expect("handshake");
    });
}

fn a_consumer_stream_waits_for_the_stream_a_producer_names(context: &Arc<CudaContext>) {
    // The producer names its stream (as the C exchange API's `current_work_stream` does); the
    // consumer orders its own after it.
    read_behind_a_blocked_producer(context, |tensor, producer_stream, consumer| {
        let handle = producer_stream.cu_stream() as usize;
        // SAFETY: a live stream of the tensor's device, in its primary context.
        unsafe { consumer.wait_for_stream(tensor.device(), handle) }.expect("handshake");
    });
}

/// A producer writes a tensor on its stream behind a block, `handshake` orders the consumer's
/// stream after that write, and the consumer's asynchronous read must not finish until the
/// block is lifted, and then reads what was written.
fn read_behind_a_blocked_producer(
    context: &Arc<CudaContext>,
    handshake: impl FnOnce(&ManagedTensor, &Arc<CudaStream>, &CudaHooks),
) {
    const N: usize = 1 << 20;
    let producer_stream = context.new_stream().expect("stream A");
    let consumer_stream = context.new_stream().expect("stream B");
    // Everything that might block the host is done before stream A is blocked.
    // SAFETY: written before use.
    let mut source = unsafe { context.alloc_pinned::<u32>(N) }.expect("pinned source");
    let values: Vec<u32> = (0..N as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    source
        .as_mut_slice()
        .expect("host access")
        .copy_from_slice(&values);
    // SAFETY: the consumer's copy writes it before it is read.
    let mut destination = unsafe { context.alloc_pinned::<u32>(N) }.expect("pinned destination");
    let destination_ptr = destination.as_mut_ptr().expect("host access");
    let mut slice = producer_stream
        .alloc_zeros::<u32>(N)
        .expect("device memory");
    producer_stream.synchronize().expect("zeroed");

    // Block stream A, then queue the producer's write behind the block.
    let release = block(producer_stream.cu_stream());
    producer_stream
        .memcpy_htod(&source, &mut slice)
        .expect("queue the write");
    let tensor = ManagedTensor::export(CudaBuffer::new(slice)).expect("export");

    let consumer = CudaHooks::new(consumer_stream.clone()).expect("consumer hooks");
    handshake(&tensor, &producer_stream, &consumer);

    // The consumer reads on its stream, asynchronously.
    let import = CudaImport::new(through_c(tensor), &consumer).expect("import");
    let src = import.device_view::<u32>().expect("view").device_ptr();
    // SAFETY: both ranges hold N u32s; the destination stays alive until the event below has
    // completed.
    unsafe {
        sys::cuMemcpyDtoHAsync_v2(
            destination_ptr.cast(),
            src,
            N * size_of::<u32>(),
            consumer_stream.cu_stream(),
        )
    }
    .result()
    .expect("queue the read");
    let read = consumer_stream.record_event(None).expect("event");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !read.is_complete(),
        "the consumer's read finished while the producer's stream was still blocked"
    );
    release.send(()).expect("release stream A");
    read.synchronize().expect("wait for the read");
    let destination = destination.as_slice().expect("host access");
    assert!(
        destination == values.as_slice(),
        "the consumer read what the producer wrote"
    );
}

fn every_stream_value_is_served_on_a_real_device(context: &Arc<CudaContext>) {
    let stream = context.new_stream().expect("stream");
    let other = context.new_stream().expect("another stream");
    let hooks = CudaHooks::new(stream.clone()).expect("hooks");
    let device = Device::cuda(0);
    let handle = other.cu_stream().addr() as i64;
    for value in [None, Some(-1), Some(1), Some(2), Some(handle)] {
        let request = parse_stream(device, value).expect("a valid stream value");
        hooks.make_ready(device, request).expect("make_ready");
    }
    hooks
        .make_ready(device, StreamRequest::Handle(stream.cu_stream().addr()))
        .expect("our own stream");
    hooks.wait_host(device).expect("wait_host");
    assert!(
        CudaHooks::new(stream.clone())
            .expect("hooks")
            .with_stream(other.clone())
            .is_err(),
        "two streams for one device"
    );
    other.synchronize().expect("the other stream");
}

fn the_per_thread_default_stream_cannot_serve_as_the_hooks_stream(context: &Arc<CudaContext>) {
    let err = CudaHooks::new(context.per_thread_stream()).expect_err("per-thread hooks refused");
    assert!(matches!(err, Error::Runtime { .. }), "{err:?}");
    assert!(
        err.to_string().contains("per-thread default stream"),
        "{err}"
    );
    let err = CudaHooks::on_default_streams()
        .expect("hooks")
        .with_stream(context.per_thread_stream())
        .expect_err("refused by with_stream too");
    assert!(
        err.to_string().contains("per-thread default stream"),
        "{err}"
    );
}

/// A slice of a producer thread's per-thread default stream, its write still pending when it is
/// wrapped: wrapping waits for it, so a consumer on another thread (which cannot name that
/// stream) reads the write, and the free on the deleter's thread comes after it.
fn a_per_thread_stream_slice_is_read_after_its_write_on_other_threads(context: &Arc<CudaContext>) {
    // Made before any stream is blocked: cudarc's first `new_stream` synchronises the context.
    let consumer_stream = context.new_stream().expect("consumer stream");
    let producer_context = context.clone();
    let (tensor, waited) = std::thread::spawn(move || {
        let stream = producer_context.per_thread_stream();
        let mut slice = stream.clone_htod(&[0u32; 4]).expect("upload zeros");
        stream.synchronize().expect("zeros written");
        // Block this thread's stream for 200 ms, then queue the producer's write behind it.
        let (release, wait) = channel::<()>();
        let wait = Box::into_raw(Box::new(wait)).cast::<c_void>();
        // SAFETY: the host function takes back the box it is given and makes no CUDA call.
        unsafe { result::stream::launch_host_function(stream.cu_stream(), wait_for_release, wait) }
            .expect("cuLaunchHostFunc");
        stream
            .memcpy_htod(&[7u32; 4], &mut slice)
            .expect("queue the write");
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let _ = release.send(());
        });
        let start = std::time::Instant::now();
        let buffer = CudaBuffer::new(slice);
        let waited = start.elapsed();
        releaser.join().expect("releaser");
        let tensor = ManagedTensor::export(buffer).expect("export");
        (tensor, waited)
    })
    .join()
    .expect("producer thread");
    // Not a timing assertion on the code under test: the wrap must have outlasted the block, or
    // it returned before the pending write it exists to wait for.
    assert!(
        waited >= Duration::from_millis(100),
        "CudaBuffer::new returned after {waited:?}, before the producer's stream was released"
    );
    // This thread reads through hooks on the legacy default stream, and through its own stream
    // after the handshake.
    let hooks = CudaHooks::on_default_streams().expect("hooks");
    assert_eq!(tensor.to_host_vec::<u32>(&hooks).expect("to host"), [7; 4]);
    let handle = consumer_stream.cu_stream().addr();
    hooks
        .make_ready(tensor.device(), StreamRequest::Handle(handle))
        .expect("handshake");
    let mut seen = [0u32; 4];
    // SAFETY: 16 bytes of the tensor's live device memory into a live host array; a copy to
    // pageable memory returns when it is done.
    unsafe {
        sys::cuMemcpyDtoHAsync_v2(
            seen.as_mut_ptr().cast(),
            tensor.data_ptr().addr() as sys::CUdeviceptr,
            16,
            consumer_stream.cu_stream(),
        )
    }
    .result()
    .expect("consumer read");
    consumer_stream.synchronize().expect("consumer stream");
    assert_eq!(seen, [7; 4]);
    // Freed here, on this thread's per-thread stream: after the write, which has completed.
    drop(tensor);
    context.default_stream().synchronize().expect("freed");
}

/// The current context of this thread, if any.
fn current_context() -> Option<sys::CUcontext> {
    result::ctx::get_current().expect("cuCtxGetCurrent")
}

fn a_deleter_on_a_thread_without_a_current_context_frees_and_leaves_none(
    context: &Arc<CudaContext>,
) {
    let stream = context.default_stream();
    let device = CudaBuffer::new(stream.clone_htod(&[7u8; 300]).expect("upload"));
    let device = ManagedTensor::export(device).expect("export");
    // SAFETY: written below before it is read.
    let mut pinned = unsafe { context.alloc_pinned::<u8>(300) }.expect("pinned memory");
    pinned
        .as_mut_slice()
        .expect("host access")
        .copy_from_slice(&[7; 300]);
    let pinned = ManagedTensor::export(PinnedBuffer::new(pinned).expect("wrap")).expect("export");
    context.bind_to_thread().expect("cuCtxSetCurrent");
    // SAFETY: written below before it is read.
    let mut managed = unsafe { context.alloc_unified::<u8>(300, true) }.expect("managed memory");
    managed
        .as_mut_slice()
        .expect("host access")
        .copy_from_slice(&[7; 300]);
    let managed =
        ManagedTensor::export(ManagedBuffer::new(managed).expect("wrap")).expect("export");
    // A consumer's thread that never used CUDA runs the deleters (dropping a ManagedTensor is
    // calling its deleter).
    std::thread::spawn(move || {
        assert_eq!(current_context(), None, "a fresh thread");
        drop(device);
        drop(pinned);
        drop(managed);
        assert_eq!(
            current_context(),
            None,
            "the deleters left a context current on the consumer's thread"
        );
    })
    .join()
    .expect("the deleting thread");
    stream.synchronize().expect("the frees");
    context
        .check_err()
        .expect("the frees failed (cudarc recorded the driver's error)");
}

/// A user's tensor struct whose data lives in device memory.
#[derive(DLPack)]
struct DeviceImage {
    #[dlpack(data)]
    pixels: CudaBuffer<u16>,
    #[dlpack(shape)]
    size: [usize; 2],
    label: String,
}

/// The same on the host, as another producer.
#[derive(DLPack)]
struct HostImage {
    #[dlpack(data)]
    pixels: Vec<u16>,
    #[dlpack(shape)]
    size: [usize; 2],
}

fn a_derived_struct_with_a_device_buffer_exports_and_imports(context: &Arc<CudaContext>) {
    let stream = context.default_stream();
    let hooks = CudaHooks::new(stream.clone()).expect("hooks");
    let pixels = CudaBuffer::new(stream.clone_htod(&[1u16, 2, 3, 4, 5, 6]).expect("upload"));
    let address = pixels.device_address();
    let image = DeviceImage {
        pixels,
        size: [2, 3],
        label: "six".into(),
    };
    let tensor = through_c(ManagedTensor::export(image).expect("export"));
    assert_eq!(
        (tensor.device(), tensor.shape(), tensor.dtype()),
        (Device::cuda(0), &[2, 3][..], u16::DTYPE)
    );
    assert_eq!(
        tensor.to_host_vec::<u16>(&hooks).expect("copy"),
        [1, 2, 3, 4, 5, 6]
    );
    // Its own export comes back as the same struct, without a copy.
    let image = DeviceImage::try_from(tensor).expect("reclaim");
    assert_eq!(
        (image.pixels.device_address(), image.label.as_str()),
        (address, "six")
    );

    // Another producer's tensors are copied to the device: a host one, and a transposed device
    // one (gathered into row-major order).
    let host = ManagedTensor::export(HostImage {
        pixels: vec![10, 11, 12, 13, 14, 15],
        size: [3, 2],
    })
    .expect("export");
    let copied = DeviceImage::try_from(host).expect("host -> device");
    assert_eq!((copied.size, copied.label.as_str()), ([3, 2], ""));
    let back = ManagedTensor::export(copied).expect("export");
    assert_eq!(
        back.to_host_vec::<u16>(&hooks).expect("copy"),
        [10, 11, 12, 13, 14, 15]
    );
    let transposed = CudaTensor::strided(image.pixels, &[3, 2], &[1, 3], 0).expect("layout");
    let copied = DeviceImage::try_from(through_c(
        ManagedTensor::export(transposed).expect("export"),
    ))
    .expect("device -> device");
    assert_ne!(copied.pixels.device_address(), address, "a copy");
    let back = ManagedTensor::export(copied).expect("export");
    assert_eq!(
        back.to_host_vec::<u16>(&hooks).expect("copy"),
        [1, 4, 2, 5, 3, 6]
    );
}

/// Needs two devices: on a machine with one it prints that it did not run (the libcuda stand-in
/// has two).
fn two_devices_keep_their_own_contexts_streams_and_claims(context: &Arc<CudaContext>) {
    let devices = CudaContext::device_count().expect("cuDeviceGetCount");
    if devices < 2 {
        println!("    (one CUDA device: this two-device case did not run)");
        return;
    }
    let second = open_device(1).expect("device 1");
    let (s0, s1) = (
        context.new_stream().expect("stream on 0"),
        second.new_stream().expect("stream on 1"),
    );
    let hooks = CudaHooks::new(s0.clone())
        .and_then(|h| h.with_stream(s1.clone()))
        .expect("hooks for two devices");
    assert_eq!(
        hooks.consumer_stream(Device::cuda(1)),
        Ok(s1.cu_stream().addr() as i64)
    );
    assert_eq!(
        hooks.consumer_stream(Device::cuda(0)),
        Ok(s0.cu_stream().addr() as i64)
    );

    let buffer = CudaBuffer::new(s1.clone_htod(&[1.5f32, 2.5, 3.5]).expect("upload on 1"));
    let address = buffer.device_address();
    let tensor = through_c(ManagedTensor::export(buffer).expect("export"));
    assert_eq!(tensor.device(), Device::cuda(1));
    // The producer side of a handshake on device 1: its event is made and recorded in device
    // 1's context (the driver refuses an event recorded on another device's stream).
    let consumer = second.new_stream().expect("a consumer stream on 1");
    hooks
        .make_ready(
            Device::cuda(1),
            StreamRequest::Handle(consumer.cu_stream().addr()),
        )
        .expect("make_ready on device 1");
    let import = CudaImport::new(tensor, &hooks).expect("import on 1");
    assert_eq!(
        import.to_host_vec::<f32>(&hooks).expect("copy from 1"),
        [1.5, 2.5, 3.5]
    );
    // A copy of a device-1 tensor goes to device 1, and the copies leave this thread's context
    // (device 0's, as a consumer's thread might have it) as they found it.
    context.bind_to_thread().expect("cuCtxSetCurrent");
    let before = current_context();
    let copy = CudaBuffer::<f32>::copy_from_tensor(import.tensor()).expect("copy on 1");
    assert_eq!(
        (copy.slice().ordinal(), copy.device()),
        (1, Device::cuda(1))
    );
    assert_ne!(copy.device_address(), address);
    let pinned = PinnedBuffer::<f32>::copy_from_tensor(import.tensor()).expect("pinned copy");
    let managed = ManagedBuffer::<f32>::copy_from_tensor(import.tensor()).expect("managed copy");
    assert_eq!(
        (pinned.as_slice(), managed.as_slice()),
        (&[1.5, 2.5, 3.5][..], &[1.5, 2.5, 3.5][..])
    );
    // The managed copy belongs to the source's device, although device 0's context is current
    // here (cudarc's `alloc_unified` would take the current one).
    let owner = hooks
        .resolve(Device::cuda(1), managed.as_slice().as_ptr().addr())
        .expect("resolve the managed copy");
    assert_eq!(
        (owner.device, owner.kind),
        (Device::cuda(1), MemoryKind::Managed)
    );
    drop((pinned, managed));
    assert_eq!(
        current_context(),
        before,
        "a copy changed the thread's current context"
    );

    // Device 1's memory claimed as device 0's.
    let keep = import.into_tensor();
    let lie = Lie::over(keep, address, Device::cuda(0), f32::DTYPE, &[3], &[1]);
    assert_eq!(
        ManagedTensor::export(lie)
            .expect("export")
            .verify_device(&hooks)
            .map(|_| ()),
        Err(Error::DeviceMismatch {
            claimed: Device::cuda(0),
            actual: Device::cuda(1)
        })
    );
    consumer.synchronize().expect("the consumer stream");
    // `open_device(1)` made device 1's context current here; the other cases expect device 0's.
    context.bind_to_thread().expect("cuCtxSetCurrent");
}

fn a_slice_swapped_through_slice_mut_is_exported_at_its_own_address(context: &Arc<CudaContext>) {
    use dlpack_cuda::cudarc::driver::DevicePtr;
    let stream = context.default_stream();
    let hooks = CudaHooks::new(stream.clone()).expect("hooks");
    let mut buffer = CudaBuffer::new(stream.clone_htod(&[1.0f32, 2.0]).expect("upload"));
    let old = std::mem::replace(
        &mut *buffer.slice_mut(),
        stream.clone_htod(&[5.0f32; 3]).expect("upload"),
    );
    drop(old);
    let live = buffer.slice().device_ptr(&stream).0 as usize;
    assert_eq!(
        buffer.device_address(),
        live,
        "the guard took the new address"
    );
    let tensor = ManagedTensor::export(buffer).expect("export");
    assert_eq!((tensor.data_ptr().addr(), tensor.shape()), (live, &[3][..]));
    assert_eq!(tensor.to_host_vec::<f32>(&hooks).expect("copy"), [5.0; 3]);

    // The same with the guard leaked, so that its drop never runs: the export still describes
    // the slice swapped in, never the freed one.
    let mut buffer = CudaBuffer::new(stream.clone_htod(&[1.0f32, 2.0]).expect("upload"));
    let mut guard = buffer.slice_mut();
    let old = std::mem::replace(
        &mut *guard,
        stream.clone_htod(&[7.0f32; 4]).expect("upload"),
    );
    std::mem::forget(guard);
    drop(old);
    let live = buffer.slice().device_ptr(&stream).0 as usize;
    let tensor = ManagedTensor::export(buffer).expect("export");
    assert_eq!((tensor.data_ptr().addr(), tensor.shape()), (live, &[4][..]));
    assert_eq!(tensor.to_host_vec::<f32>(&hooks).expect("copy"), [7.0; 4]);
}

fn a_cudarc_slice_is_refused_for_gaps_of_bool_and_in_a_context_with_an_error(
    context: &Arc<CudaContext>,
) {
    let stream = context.default_stream();
    let hooks = CudaHooks::new(stream.clone()).expect("hooks");
    // Every other byte of [1, 7, 1] is a bool element; the 7 between them is not one.
    let memory = CudaBuffer::new(stream.clone_htod(&[1u8, 7, 1]).expect("upload"));
    let data = memory.device_address();
    let lie = Lie::over(memory, data, Device::cuda(0), bool::DTYPE, &[2], &[2]);
    let import = CudaImport::new(
        through_c(ManagedTensor::export(lie).expect("export")),
        &hooks,
    )
    .expect("import");
    assert_eq!(
        import.to_host_vec::<bool>(&hooks).expect("copy"),
        [true, true]
    );
    let view = import.device_view::<bool>().expect("view");
    let err = view.cudarc_slice(&stream).unwrap_err();
    assert!(err.to_string().contains("take it as u8"), "{err}");

    // A context in which cudarc has recorded an error: cudarc would panic making the slice.
    let ints = CudaBuffer::new(stream.clone_htod(&[1u32, 2]).expect("upload"));
    let import = CudaImport::new(
        through_c(ManagedTensor::export(ints).expect("export")),
        &hooks,
    )
    .expect("import");
    let view = import.device_view::<u32>().expect("view");
    context.record_err::<()>(Err(dlpack_cuda::cudarc::driver::DriverError(
        sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE,
    )));
    let err = view.cudarc_slice(&stream).unwrap_err();
    assert!(
        err.to_string().contains("CUDA_ERROR_INVALID_VALUE"),
        "{err}"
    );
    // The error was reported, and the context works again.
    assert_eq!(view.cudarc_slice(&stream).expect("slice").len(), 2);
}

fn pinned_memory_is_copied_after_the_producers_pending_write(context: &Arc<CudaContext>) {
    use dlpack_cuda::cudarc::driver::DevicePtr;
    let legacy = context.default_stream();
    let source = legacy.clone_htod(&[1u32, 2, 3, 4]).expect("upload");
    legacy.synchronize().expect("uploaded");
    // SAFETY: written before use.
    let mut pinned = unsafe { context.alloc_pinned::<u32>(4) }.expect("pinned");
    pinned
        .as_mut_slice()
        .expect("host access")
        .copy_from_slice(&[0; 4]);
    let buffer = PinnedBuffer::new(pinned).expect("wrap");
    let destination = buffer.as_slice().as_ptr();
    let tensor = ManagedTensor::export(buffer).expect("export");
    // The producer's write into the pinned memory, pending on the legacy default stream (the
    // stream a consumer names by default) behind a block.
    let (release, wait) = channel::<()>();
    let wait = Box::into_raw(Box::new(wait)).cast::<c_void>();
    // SAFETY: the host function takes back the box it is given and makes no CUDA call.
    unsafe { result::stream::launch_host_function(legacy.cu_stream(), wait_for_release, wait) }
        .expect("cuLaunchHostFunc");
    let src = source.device_ptr(&legacy).0;
    // SAFETY: 16 bytes from a live device allocation into live pinned memory, which the tensor
    // keeps until the stream has run the copy (it is synchronised below).
    unsafe {
        sys::cuMemcpyDtoHAsync_v2(destination.cast_mut().cast(), src, 16, legacy.cu_stream())
    }
    .result()
    .expect("queue the write");
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let _ = release.send(());
    });
    let pinned_copy = PinnedBuffer::<u32>::copy_from_tensor(&tensor).expect("copy to pinned");
    let device_copy = CudaBuffer::<u32>::copy_from_tensor(&tensor).expect("copy to device");
    releaser.join().expect("releaser");
    legacy.synchronize().expect("done");
    assert_eq!(pinned_copy.as_slice(), [1, 2, 3, 4], "read after the write");
    let device_values = legacy.clone_dtoh(device_copy.slice()).expect("download");
    assert_eq!(device_values, [1, 2, 3, 4], "read after the write");
}

fn a_write_into_memory_holding_the_tensors_own_strides_is_refused(context: &Arc<CudaContext>) {
    use dlpack_core::Version;
    use dlpack_core::ffi::{DLManagedTensorVersioned, DLTensor};
    /// # Safety
    /// `tensor` came from `Box::into_raw` and is deleted once.
    unsafe extern "C" fn free_box(tensor: *mut DLManagedTensorVersioned) {
        // SAFETY: see above.
        drop(unsafe { Box::from_raw(tensor) });
    }
    let hooks = CudaHooks::on_default_streams().expect("hooks");
    // SAFETY: written before use.
    let mut pinned = unsafe { context.alloc_pinned::<i64>(8) }.expect("pinned");
    // Element 0 of the tensor is its own strides[0]; element 7 its shape[0]; 555 a canary
    // just past the span.
    pinned
        .as_mut_slice()
        .expect("host access")
        .copy_from_slice(&[2, 0, 0, 0, 0, 555, 0, 3]);
    let base = pinned.as_mut_ptr().expect("host access");
    let managed = Box::new(DLManagedTensorVersioned {
        version: Version::CURRENT,
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(free_box),
        flags: 0,
        dl_tensor: DLTensor {
            data: base.cast(),
            device: CUDA_HOST,
            ndim: 1,
            dtype: i64::DTYPE,
            // SAFETY: inside the 8-element allocation.
            shape: unsafe { base.add(7) },
            strides: base,
            byte_offset: 0,
        },
    });
    // SAFETY: a well-formed tensor over pinned memory that outlives it, owned here.
    let tensor = unsafe { ManagedTensor::from_raw(Box::into_raw(managed)) }.expect("valid");
    let mut import = CudaImport::new(tensor, &hooks).expect("import");
    let err = import.copy_from_host(&hooks, &[3i64, 11, 99]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DataOverlapsDescription {
                what: "strides array",
                ..
            }
        ),
        "{err:?}"
    );
    drop(import);
    assert_eq!(
        pinned.as_slice().expect("host access"),
        [2, 0, 0, 0, 0, 555, 0, 3],
        "nothing written"
    );
}

/// The legacy default stream's implicit synchronisation, as the driver documents it (and as the
/// stand-in must model it, so that a host wait that would hang on a GPU hangs there too): work
/// queued on the legacy stream waits for the work queued before on every blocking stream
/// (created with flags 0, and the per-thread default stream), work queued on a blocking stream
/// waits for the legacy stream's earlier work, and non-blocking streams (cudarc's `new_stream`)
/// are independent of it.
fn the_legacy_default_stream_synchronises_with_blocking_streams_only(context: &Arc<CudaContext>) {
    /// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`.
    fn default_stream(handle: usize) -> sys::CUstream {
        std::ptr::without_provenance_mut(handle)
    }
    let (legacy, per_thread) = (default_stream(1), default_stream(2));
    let non_blocking = context.new_stream().expect("non-blocking stream");
    let blocking =
        result::stream::create(result::stream::StreamKind::Default).expect("blocking stream");
    // (the stream blocked, the stream an event is then recorded on, whether that event waits)
    let pairs = [
        (
            non_blocking.cu_stream(),
            legacy,
            false,
            "legacy after a non-blocking stream",
        ),
        (blocking, legacy, true, "legacy after a blocking stream"),
        (
            per_thread,
            legacy,
            true,
            "legacy after the per-thread default stream",
        ),
        (legacy, blocking, true, "a blocking stream after legacy"),
        (
            legacy,
            per_thread,
            true,
            "the per-thread default stream after legacy",
        ),
        (
            legacy,
            non_blocking.cu_stream(),
            false,
            "a non-blocking stream after legacy",
        ),
    ];
    for (blocked, recorded_on, waits, what) in pairs {
        let release = block(blocked);
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .expect("cuEventCreate");
        // SAFETY: a live event and a live stream of the current context (device 0's).
        unsafe { result::event::record(event, recorded_on) }.expect("cuEventRecord");
        let query = || {
            // SAFETY: a live event.
            unsafe { sys::cuEventQuery(event) }
        };
        if waits {
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(
                query(),
                sys::CUresult::CUDA_ERROR_NOT_READY,
                "{what}: the event was reached while the first stream was blocked"
            );
        } else {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while query() == sys::CUresult::CUDA_ERROR_NOT_READY
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(
                query(),
                sys::CUresult::CUDA_SUCCESS,
                "{what}: the event waited for the blocked stream"
            );
        }
        release.send(()).expect("release");
        // SAFETY: a live event, destroyed once, after its recording is reached.
        unsafe {
            sys::cuEventSynchronize(event).result().expect("reached");
            result::event::destroy(event).expect("cuEventDestroy");
        }
    }
    // SAFETY: the stream made above, idle, destroyed once.
    unsafe {
        sys::cuStreamSynchronize(blocking).result().expect("idle");
        result::stream::destroy(blocking).expect("cuStreamDestroy");
    }
    non_blocking.synchronize().expect("idle");
}
