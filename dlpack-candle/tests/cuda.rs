//! candle CUDA tensors in and out of DLPack (the feature `cuda`).
//!
//! It runs only when built with the feature `cuda` and `DLPACK_TEST_CUDA=1` is set: on a GPU
//! through `scripts/gpu-kit` (which builds it with the CUDA toolkit of `scripts/cuda-toolkit`),
//! or without one on the workspace's libcuda stand-in (`DLPACK_TEST_CANDLE_CUDA_STAND_IN=1
//! scripts/test`, which preloads it). Otherwise it prints one line saying why it did not run and
//! passes; with the switch set where device 0 cannot be opened, it fails. It has its own runner
//! (`harness = false`) so that line is always shown. Names given after `--` select cases as
//! with libtest.
//!
//! On the stand-in, each case must leave its allocations, events and refused calls as it found
//! them (after every stream ran its work): a leak, a double free, a kernel reaching past its
//! memory or any call the stand-in refuses fails the case.

use std::process::ExitCode;

const SUITE: &str = "dlpack-candle CUDA suite";

#[cfg(not(feature = "cuda"))]
fn main() -> ExitCode {
    println!(
        "{SUITE}: did not run (built without the feature `cuda`, which needs a CUDA toolkit to build: scripts/gpu-kit builds and runs it on a GPU, DLPACK_TEST_CANDLE_CUDA_STAND_IN=1 scripts/test on the libcuda stand-in)"
    );
    ExitCode::SUCCESS
}

#[cfg(feature = "cuda")]
fn main() -> ExitCode {
    use dlpack_testing::harness::{run_cases, test_args};

    let switch = std::env::var("DLPACK_TEST_CUDA").unwrap_or_default();
    if switch != "1" {
        println!(
            "{SUITE}: did not run ({} tests skipped; DLPACK_TEST_CUDA is {}); set DLPACK_TEST_CUDA=1 on a machine with an NVIDIA GPU, or with the libcuda stand-in preloaded (scripts/steps/candle-cuda.check.sh), to run it",
            gpu::CASES.len() + attack::CASES.len() + attack_more::CASES.len(),
            if switch.is_empty() {
                "unset".to_owned()
            } else {
                format!("{switch:?}")
            }
        );
        return ExitCode::SUCCESS;
    }
    let device = match candle_core::Device::new_cuda(0) {
        Ok(device) => device,
        Err(e) => {
            eprintln!(
                "{SUITE}: DLPACK_TEST_CUDA is set, but candle cannot open CUDA device 0: {e}"
            );
            return ExitCode::FAILURE;
        }
    };
    // SAFETY: a lookup in the symbols loaded so far; the stand-in's support functions where it
    // is preloaded, which it stays for the process.
    let stand_in = unsafe {
        dlpack_testing::cuda_stand_in::Support::find(|name| {
            let address = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
            (!address.is_null()).then_some(address.cast_const())
        })
    };
    let cases: Vec<_> = gpu::CASES
        .iter()
        .chain(attack::CASES)
        .chain(attack_more::CASES)
        .copied()
        .collect();
    let Some(support) = stand_in else {
        let outcome = run_cases(SUITE, &device, &cases, &test_args(), |name, case| {
            no_block_timed_out(name, case)
        });
        return outcome.report(SUITE);
    };
    let suite = format!("{SUITE} on the libcuda stand-in");
    // What lives for the process is made before the first count: the exchange stream of
    // `device`, and dlpack-cuda's retain of device 0's primary context.
    dlpack_candle::cuda::hooks(&device).expect("exchange hooks");
    dlpack_cuda::open_device(0).expect("device 0");
    let outcome = run_cases(&suite, &device, &cases, &test_args(), |name, case| {
        let before = support.settled();
        no_block_timed_out(name, case);
        let after = support.settled();
        // Streams and context retains are left out: a candle device that a case makes keeps
        // its exchange stream, and with it its context, for the process.
        let kept = |live: LiveObjects| LiveObjects {
            streams: 0,
            context_retains: 0,
            ..live
        };
        assert_eq!(
            kept(after),
            kept(before),
            "{name}: the stand-in's live objects or refusals changed; expected every \
             allocation and event to be released and no call refused (refusals are printed above)"
        );
    });
    outcome.report(&suite)
}

#[cfg(feature = "cuda")]
use dlpack_testing::cuda_stand_in::LiveObjects;

/// Runs `case` and fails it if one of its stream blocks was lifted by the timeout rather than
/// by the case (see [`gpu::BLOCKS_TIMED_OUT`]).
#[cfg(feature = "cuda")]
fn no_block_timed_out(name: &str, case: impl FnOnce()) {
    use std::sync::atomic::Ordering;
    let before = gpu::BLOCKS_TIMED_OUT.load(Ordering::SeqCst);
    case();
    assert_eq!(
        gpu::BLOCKS_TIMED_OUT.load(Ordering::SeqCst),
        before,
        "{name}: a stream block was lifted by its 30 s timeout, not by the case: the case \
         waited on the host for work queued behind its own block"
    );
}

#[cfg(feature = "cuda")]
#[path = "cuda/attack.rs"]
mod attack;
#[cfg(feature = "cuda")]
#[path = "cuda/attack_more.rs"]
mod attack_more;
#[cfg(feature = "cuda")]
mod common;

#[cfg(feature = "cuda")]
mod gpu {
    use std::ffi::c_void;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
    use std::time::Duration;

    use candle_core::cuda_backend::CudaStorageSlice;
    use candle_core::cuda_backend::cudarc::driver::{
        CudaStream, DevicePtr, DeviceRepr, result, sys,
    };
    use candle_core::{Device, Storage, Tensor};
    use dlpack_candle::CandleError;
    use dlpack_core::protocol::parse_stream;
    use dlpack_core::{
        CopyMode, CopyReason, DeviceHooks, Element, Error, Flags, ManagedTensor, Transfer,
    };
    use dlpack_cuda::{CudaBuffer, CudaHooks, CudaImport, CudaTensor, open_device};
    use dlpack_testing::harness::{Case, cases};

    use crate::common::{Drops, Raw};

    pub(crate) const CASES: &[Case<Device>] = cases![Device;
        an_export_lends_candle_device_memory_as_kdlcuda,
        strided_and_offset_views_export_as_candle_lays_them_out,
        an_export_comes_back_as_the_same_candle_tensor,
        a_copy_is_made_on_the_device_and_owned_by_the_export,
        a_cuda_buffer_moves_its_slice_into_candle,
        foreign_tensors_are_copied_on_the_device_in_every_layout,
        every_candle_dtype_imports_and_exports_strided_tensors,
        the_import_copy_waits_for_the_producers_pending_write,
        a_consumer_waits_for_candles_pending_work_without_a_host_wait,
        refusals_give_the_tensor_back,
    ];

    /// The device address of a candle CUDA tensor's storage slice (the dtypes the cases use).
    pub(crate) fn storage_address(tensor: &Tensor) -> usize {
        let (storage, _) = tensor.storage_and_layout();
        let Storage::Cuda(cuda) = &*storage else {
            panic!("not a CUDA tensor")
        };
        let stream = cuda.device.cuda_stream();
        let address = match &cuda.slice {
            CudaStorageSlice::U8(s) => s.device_ptr(&stream).0,
            CudaStorageSlice::U32(s) => s.device_ptr(&stream).0,
            CudaStorageSlice::I64(s) => s.device_ptr(&stream).0,
            CudaStorageSlice::F32(s) => s.device_ptr(&stream).0,
            CudaStorageSlice::F64(s) => s.device_ptr(&stream).0,
            _ => panic!("a dtype these cases do not use"),
        };
        address as usize
    }

    pub(crate) fn hooks(device: &Device) -> Arc<CudaHooks> {
        dlpack_candle::cuda::hooks(device).expect("exchange hooks")
    }

    /// The elements of a DLPack CUDA f32 tensor, gathered on the host by dlpack-cuda after the
    /// driver checked the device claim.
    fn host_values(tensor: ManagedTensor, device: &Device) -> Vec<f32> {
        host_values_of::<f32>(tensor, device)
    }

    /// [`host_values`] of any element type (no candle kernel involved).
    pub(crate) fn host_values_of<T: Element>(tensor: ManagedTensor, device: &Device) -> Vec<T> {
        let hooks = hooks(device);
        let import = CudaImport::new(tensor, &*hooks).expect("the driver confirms the claim");
        import.to_host_vec::<T>(&*hooks).expect("to host")
    }

    pub(crate) fn arange(n: usize, device: &Device) -> Tensor {
        Tensor::arange(0f32, n as f32, device).expect("arange")
    }

    fn an_export_lends_candle_device_memory_as_kdlcuda(device: &Device) {
        let t = arange(6, device).reshape((2, 3)).expect("reshape");
        let address = storage_address(&t);
        // SAFETY: `t` is the only handle on its storage and moves into the export.
        let dl = unsafe { dlpack_candle::into_dlpack(t) }.expect("export");
        assert_eq!(dl.device(), dlpack_core::Device::cuda(0));
        assert_eq!(dl.data_ptr().addr(), address, "candle's own device memory");
        assert_eq!((dl.shape(), dl.strides()), (&[2i64, 3][..], &[3i64, 1][..]));
        assert!(dl.is_read_only());
        assert_eq!(host_values(dl, device), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    fn strided_and_offset_views_export_as_candle_lays_them_out(device: &Device) {
        let base = arange(12, device).reshape((3, 4)).expect("reshape");
        let address = storage_address(&base);
        let view = base
            .narrow(0, 1, 2)
            .and_then(|v| v.t())
            .expect("rows 1..3, transposed");
        // SAFETY: nothing writes to the storage `base` and `view` share.
        let dl = unsafe { dlpack_candle::into_dlpack(view) }.expect("export");
        // dlpack-core folds the start offset into the data pointer, as PyTorch exports.
        assert_eq!(
            dl.data_ptr().addr(),
            address + 4 * 4,
            "row 1, 4 elements in"
        );
        assert_eq!(dl.byte_offset(), 0);
        assert_eq!((dl.shape(), dl.strides()), (&[4i64, 2][..], &[1i64, 4][..]));
        assert_eq!(
            host_values(dl, device),
            [4.0, 8.0, 5.0, 9.0, 6.0, 10.0, 7.0, 11.0]
        );
        drop(base);
    }

    fn an_export_comes_back_as_the_same_candle_tensor(device: &Device) {
        let t = arange(4, device);
        let address = storage_address(&t);
        // SAFETY: the only handle, moved into the export.
        let dl = unsafe { dlpack_candle::into_dlpack(t) }.expect("export");
        let (back, transfer) =
            dlpack_candle::into_owned_on(dl, device, CopyMode::Never).expect("reclaim");
        assert_eq!(transfer, Transfer::Reclaimed);
        assert_eq!(storage_address(&back), address);
        assert_eq!(back.to_vec1::<f32>().expect("values"), [0.0, 1.0, 2.0, 3.0]);
    }

    fn a_copy_is_made_on_the_device_and_owned_by_the_export(device: &Device) {
        let t = arange(6, device).reshape((2, 3)).expect("reshape");
        let dl = dlpack_candle::to_dlpack(&t.t().expect("t")).expect("copy");
        assert!(dl.flags().contains(Flags::IS_COPIED) && !dl.is_read_only());
        assert_eq!((dl.shape(), dl.strides()), (&[3i64, 2][..], &[2i64, 1][..]));
        assert_ne!(dl.data_ptr().addr(), storage_address(&t), "new memory");
        let address = dl.data_ptr().addr();
        // The copy comes back as candle storage, without another copy.
        let (back, transfer) =
            dlpack_candle::into_owned_on(dl, device, CopyMode::Never).expect("reclaim");
        assert_eq!(transfer, Transfer::Reclaimed);
        assert_eq!(storage_address(&back), address);
        assert_eq!(
            back.to_vec2::<f32>().expect("values"),
            [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
        );
    }

    fn a_cuda_buffer_moves_its_slice_into_candle(device: &Device) {
        let stream = open_device(0)
            .expect("device 0")
            .new_stream()
            .expect("stream");
        let slice = stream.clone_htod(&[1.5f32, 2.5, 3.5]).expect("upload");
        let buffer = CudaBuffer::new(slice);
        let address = buffer.device_address();
        let dl = ManagedTensor::export(buffer).expect("export");
        let (t, transfer) =
            dlpack_candle::into_owned_on(dl, device, CopyMode::Never).expect("moved");
        assert_eq!(transfer, Transfer::Moved);
        assert_eq!(storage_address(&t), address, "the slice itself");
        assert_eq!(t.to_vec1::<f32>().expect("values"), [1.5, 2.5, 3.5]);
        // candle computes with it like with its own storage.
        let doubled = (&t * 2.0).expect("candle op");
        assert_eq!(doubled.to_vec1::<f32>().expect("values"), [3.0, 5.0, 7.0]);
    }

    /// A tensor over a fresh device slice holding 0..n, described by `layout`.
    fn foreign(
        n: usize,
        layout: impl FnOnce(CudaBuffer<f32>) -> CudaTensor<CudaBuffer<f32>>,
    ) -> ManagedTensor {
        let stream = open_device(0).expect("device 0").default_stream();
        let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let slice = stream.clone_htod(&values).expect("upload");
        // An import expects its tensor ready on the exchange stream; this producer has no
        // handshake, so its upload is done before the hand-over (the legacy default stream's
        // implicit ordering is not what the import relies on).
        stream.synchronize().expect("uploaded");
        ManagedTensor::export(layout(CudaBuffer::new(slice))).expect("export")
    }

    fn foreign_tensors_are_copied_on_the_device_in_every_layout(device: &Device) {
        // Compact: not candle's to own, so a copy, refused under `Never` with the tensor back.
        let compact = foreign(6, |b| CudaTensor::new(b, &[2, 3]).expect("2x3"));
        let refused = dlpack_candle::into_owned_on(compact, device, CopyMode::Never)
            .expect_err("no copy allowed");
        assert!(matches!(
            refused.error,
            CandleError::DLPack(Error::CopyRefused {
                reason: CopyReason::NotOwned
            })
        ));
        let address = refused.value.data_ptr().addr();
        let (t, transfer) = dlpack_candle::into_owned_on(refused.value, device, CopyMode::IfNeeded)
            .expect("copied");
        assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
        assert_ne!(storage_address(&t), address);
        assert_eq!(
            t.to_vec2::<f32>().expect("values"),
            [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        );

        // (layout, expected row-major values)
        type Layout = Box<dyn FnOnce(CudaBuffer<f32>) -> CudaTensor<CudaBuffer<f32>>>;
        let cases: Vec<(&str, usize, Layout, Vec<Vec<f32>>)> = vec![
            (
                "transposed",
                6,
                Box::new(|b| CudaTensor::strided(b, &[3, 2], &[1, 3], 0).expect("t")),
                vec![vec![0.0, 3.0], vec![1.0, 4.0], vec![2.0, 5.0]],
            ),
            (
                "offset column",
                12,
                Box::new(|b| CudaTensor::strided(b, &[3, 1], &[4, 1], 2).expect("column 2")),
                vec![vec![2.0], vec![6.0], vec![10.0]],
            ),
            (
                "negative strides",
                6,
                Box::new(|b| CudaTensor::strided(b, &[2, 3], &[-3, -1], 5).expect("flipped")),
                vec![vec![5.0, 4.0, 3.0], vec![2.0, 1.0, 0.0]],
            ),
            (
                "broadcast",
                3,
                Box::new(|b| CudaTensor::strided(b, &[2, 3], &[0, 1], 0).expect("stride 0")),
                vec![vec![0.0, 1.0, 2.0], vec![0.0, 1.0, 2.0]],
            ),
        ];
        for (name, n, layout, expected) in cases {
            let (t, transfer) =
                dlpack_candle::into_owned_on(foreign(n, layout), device, CopyMode::IfNeeded)
                    .unwrap_or_else(|r| panic!("{name}: {}", r.error));
            assert_eq!(transfer, Transfer::Copied(CopyReason::Layout), "{name}");
            assert!(t.is_contiguous(), "{name}");
            assert_eq!(t.to_vec2::<f32>().expect("values"), expected, "{name}");
        }

        // A tensor the caller keeps: `to_owned_on`.
        let kept = foreign(4, |b| CudaTensor::new(b, &[4]).expect("1-d"));
        let copy = dlpack_candle::to_owned_on(&kept, device).expect("copy");
        assert_eq!(copy.to_vec1::<f32>().expect("values"), [0.0, 1.0, 2.0, 3.0]);
        drop(kept);
    }

    fn every_candle_dtype_imports_and_exports_strided_tensors(device: &Device) {
        /// A transposed 3x2 view of `values` (a foreign tensor) into candle, read back by
        /// dlpack-cuda; then candle's transposed view of that copied out by `to_dlpack`. Both
        /// gather on the device, through a same-width type where candle-kernels has no gather
        /// or strided copy for the dtype (i16, i32, f8e4m3).
        fn case<T: Element + DeviceRepr + Copy + PartialEq + std::fmt::Debug>(
            device: &Device,
            values: [T; 6],
        ) {
            let name = std::any::type_name::<T>();
            let stream = open_device(0).expect("device 0").default_stream();
            let slice = stream.clone_htod(&values).expect("upload");
            stream.synchronize().expect("uploaded (as in `foreign`)");
            let view = CudaTensor::strided(CudaBuffer::new(slice), &[3, 2], &[1, 3], 0)
                .expect("transposed");
            let tensor = ManagedTensor::export(view).expect("export");
            let (t, transfer) = dlpack_candle::into_owned_on(tensor, device, CopyMode::IfNeeded)
                .unwrap_or_else(|r| panic!("{name}: {}", r.error));
            assert_eq!(transfer, Transfer::Copied(CopyReason::Layout), "{name}");
            let transposed: Vec<T> = [0, 3, 1, 4, 2, 5].iter().map(|&i| values[i]).collect();
            // SAFETY: nothing writes to `t`'s storage while the export lives.
            let lent = unsafe { dlpack_candle::into_dlpack(t.clone()) }.expect("export");
            assert_eq!(host_values_of::<T>(lent, device), transposed, "{name}");
            let copy = dlpack_candle::to_dlpack(&t.t().expect("t"))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                (copy.shape(), copy.strides()),
                (&[2i64, 3][..], &[3i64, 1][..])
            );
            assert_eq!(host_values_of::<T>(copy, device), values, "{name}");
        }
        case::<u8>(device, [1, 2, 3, 4, 5, 6]);
        case::<u32>(device, [1, 2, 3, 4, 5, u32::MAX]);
        case::<i16>(device, [-1, 2, -3, 4, -5, i16::MIN]);
        case::<i32>(device, [-1, 2, -3, 4, -5, i32::MIN]);
        case::<i64>(device, [-1, 2, -3, 4, -5, i64::MIN]);
        let f = |v: f32| half::bf16::from_f32(v);
        case::<half::bf16>(device, [f(0.5), f(1.5), f(-2.0), f(3.0), f(4.0), f(-5.5)]);
        let h = |v: f32| half::f16::from_f32(v);
        case::<half::f16>(device, [h(0.5), h(1.5), h(-2.0), h(3.0), h(4.0), h(-5.5)]);
        case::<f32>(device, [0.5, 1.5, -2.0, 3.0, 4.0, -5.5]);
        case::<f64>(device, [0.5, 1.5, -2.0, 3.0, 4.0, -5.5]);
        let e = |v: f32| float8::F8E4M3::from_f32(v);
        case::<float8::F8E4M3>(device, [e(0.5), e(1.5), e(-2.0), e(3.0), e(4.0), e(-5.5)]);
    }

    /// How many [`block`]s ended by their timeout rather than by their release. The runner
    /// fails a case that makes this grow: the case waited on the host for a stream it had
    /// blocked itself, and only the timeout let it finish.
    pub(crate) static BLOCKS_TIMED_OUT: AtomicUsize = AtomicUsize::new(0);

    /// Blocks `stream` until the returned sender sends (or is dropped), with a host function;
    /// after 30 s the block lifts itself and counts in [`BLOCKS_TIMED_OUT`].
    pub(crate) fn block(stream: &CudaStream) -> Sender<()> {
        unsafe extern "C" fn wait_for_release(data: *mut c_void) {
            // SAFETY: `data` is the Box<Receiver<()>> leaked by `block`, taken back once, here.
            let receiver = unsafe { Box::from_raw(data.cast::<Receiver<()>>()) };
            if let Err(RecvTimeoutError::Timeout) = receiver.recv_timeout(Duration::from_secs(30)) {
                BLOCKS_TIMED_OUT.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (release, wait) = channel::<()>();
        let wait = Box::into_raw(Box::new(wait)).cast::<c_void>();
        // SAFETY: the host function takes back the box it is given and makes no CUDA call.
        unsafe { result::stream::launch_host_function(stream.cu_stream(), wait_for_release, wait) }
            .expect("cuLaunchHostFunc");
        release
    }

    fn the_import_copy_waits_for_the_producers_pending_write(device: &Device) {
        const N: usize = 1 << 20;
        let context = open_device(0).expect("device 0");
        let producer = context.new_stream().expect("producer stream");
        let mut slice = producer.alloc_zeros::<f32>(N).expect("zeroed");
        let values: Vec<f32> = (0..N).map(|i| i as f32).collect();
        let source = producer.clone_htod(&values).expect("source");
        // Everything that may wait on the host is done before the block: the exchange stream
        // exists, the source is uploaded.
        let consumer = hooks(device);
        producer.synchronize().expect("zeroed and uploaded");
        // The producer's write (device to device, asynchronous) waits behind a block, queued
        // before the hand-over.
        let release = block(&producer);
        producer
            .memcpy_dtod(&source, &mut slice)
            .expect("queued write");
        let tensor =
            ManagedTensor::export(CudaTensor::new(CudaBuffer::new(slice), &[N]).expect("1-d"))
                .expect("export");
        // The protocol's handshake: the producer makes its write visible on the stream the
        // consumer (candle's exchange stream) names.
        let argument = consumer.consumer_stream(tensor.device()).expect("stream");
        CudaHooks::new(producer.clone())
            .expect("producer hooks")
            .make_ready(
                tensor.device(),
                parse_stream(tensor.device(), Some(argument)).expect("stream value"),
            )
            .expect("handshake");
        // Lift the block from another thread a moment later: the import's copy (which waits on
        // the host for itself) must come after the write.
        let lifter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let _ = release.send(());
        });
        let (t, transfer) =
            dlpack_candle::into_owned_on(tensor, device, CopyMode::IfNeeded).expect("copy");
        lifter.join().expect("lifter");
        assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
        assert_eq!(
            t.to_vec1::<f32>().expect("values"),
            values,
            "the write, not zeros"
        );
    }

    fn a_consumer_waits_for_candles_pending_work_without_a_host_wait(device: &Device) {
        for gpu in [
            device.clone(),
            Device::new_cuda_with_stream(0).expect("a candle device with its own stream"),
        ] {
            let candle_stream = gpu.as_cuda_device().expect("cuda").cuda_stream();
            // Everything that may wait on the host is done before the block: the exchange
            // stream and the consumer's stream exist (a context's first extra stream
            // synchronises it), the input is uploaded, the kernel is loaded.
            let exchange = hooks(&gpu);
            let consumer = open_device(0)
                .expect("device 0")
                .new_stream()
                .expect("consumer");
            let input = arange(1 << 20, &gpu);
            input.affine(2.0, 0.0).expect("kernel loaded");
            gpu.synchronize().expect("ready");
            let release = block(&candle_stream);
            // Queued behind the block on candle's stream (a compact tensor: no host transfer).
            let doubled = input.affine(2.0, 0.0).expect("candle op");
            // SAFETY: `doubled` is the only handle on its new storage.
            let dl = unsafe { dlpack_candle::into_dlpack(doubled) }.expect("export");
            let request =
                parse_stream(dl.device(), Some(consumer.cu_stream() as i64)).expect("stream value");
            exchange
                .make_ready(dl.device(), request)
                .expect("handshake");
            let marker = consumer.record_event(None).expect("event");
            // SAFETY: a live event of the current context.
            let status = unsafe { sys::cuEventQuery(marker.cu_event()) };
            assert_eq!(
                status,
                sys::CUresult::CUDA_ERROR_NOT_READY,
                "the consumer's stream waits while candle's work is blocked"
            );
            release.send(()).expect("release");
            marker.synchronize().expect("after candle's work");
            let values = host_values(dl, &gpu);
            assert!(values.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32));
        }
    }

    fn refusals_give_the_tensor_back(device: &Device) {
        // A CPU tensor onto the GPU: another device.
        let cpu = ManagedTensor::export(vec![1.0f32, 2.0]).expect("export");
        let refused =
            dlpack_candle::into_owned_on(cpu, device, CopyMode::IfNeeded).expect_err("mismatch");
        assert!(
            matches!(refused.error, CandleError::DeviceMismatch { .. }),
            "{}",
            refused.error
        );
        assert_eq!(
            refused.value.to_vec::<f32>().expect("given back"),
            [1.0, 2.0]
        );

        // A CUDA tensor onto the CPU: not host memory.
        let gpu = foreign(2, |b| CudaTensor::new(b, &[2]).expect("1-d"));
        let refused = dlpack_candle::into_owned(gpu, CopyMode::IfNeeded).expect_err("device");
        assert!(matches!(
            refused.error,
            CandleError::DLPack(Error::NotHostAccessible { .. })
        ));

        // Host memory claimed as CUDA device memory: the driver contradicts it, before any
        // copy, and the tensor comes back (deleted once, with the refusal).
        let drops = Drops::default();
        let fake = Raw {
            bytes: vec![0; 16],
            shape: vec![4],
            dtype: dlpack_core::DataType::F32,
            device: dlpack_core::Device::cuda(0),
            drops: drops.clone(),
        };
        let fake = ManagedTensor::export(fake).expect("export");
        let refused = dlpack_candle::into_owned_on(fake, device, CopyMode::IfNeeded)
            .expect_err("a false claim");
        assert!(
            matches!(
                refused.error,
                CandleError::DLPack(Error::UnknownPointer { .. })
            ),
            "{}",
            refused.error
        );
        assert_eq!(drops.count(), 0, "given back");
        drop(refused);
        assert_eq!(drops.count(), 1, "deleted once");
    }
}
