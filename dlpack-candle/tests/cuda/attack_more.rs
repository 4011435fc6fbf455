//! A second round of adversarial cases against the CUDA paths (run after `attack.rs`'s, as one
//! suite): every candle dtype crossed with higher-rank, flipped, offset, broadcast and size-1
//! layouts, checked bit for bit (NaN payloads, -0.0, subnormals); `float8_e8m0fnu` on the GPU;
//! DLPack dtypes candle lacks; the copy modes on moved buffers of every dtype; round trips
//! repeated until a leak would show; and the exchange stream's handshake with every kind of
//! consumer stream, with candle's work still pending and with producers that only used the
//! handshake.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

use candle_core::cuda_backend::CudaStorageSlice;
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaStream, DevicePtr, DeviceRepr, result, sys,
};
use candle_core::{DType, Device, Storage, Tensor, WithDType};
use dlpack_candle::{CandleError, CandleExport, Float8E8M0};
use dlpack_core::protocol::parse_stream;
use dlpack_core::{
    CopyMode, CopyReason, DataType, DataTypeCode, DeviceHooks, Element, Error, Flags,
    ManagedTensor, Transfer,
};
use dlpack_cuda::{CudaBuffer, CudaHooks, CudaTensor, open_device};
use dlpack_testing::harness::{Case, cases};

use crate::attack::{deletes, has_device, iota, raw_cuda, release_later, still_blocked, upload};
use crate::common::finishes;
use crate::gpu::{arange, block, hooks, host_values_of};

pub(crate) const CASES: &[Case<Device>] = cases![Device;
    // dtypes crossed with layouts, bit for bit.
    every_dtype_imports_high_rank_flipped_broadcast_layouts_bit_for_bit,
    every_dtype_exports_candle_views_bit_for_bit_lent_and_copied,
    byte_offsets_and_interior_pointers_of_narrow_dtypes_are_honoured,
    misaligned_pointers_of_wide_dtypes_are_copied_or_refused_never_misread,
    float8_e8m0_cuda_tensors_go_both_ways,
    dlpack_dtypes_candle_lacks_are_refused_on_cuda_whatever_the_mode,
    // Copy modes and buffers.
    copy_modes_on_moved_buffers_of_every_candle_dtype,
    a_buffer_inside_a_cuda_tensor_is_copied_never_moved,
    // Round trips and lifetimes.
    round_trips_repeated_many_times_keep_one_storage_and_leak_nothing,
    exports_nobody_reads_are_released,
    a_reclaimed_export_re_exports_as_itself,
    cuda_exports_refused_by_host_imports_come_back_reclaimable,
    // The exchange stream.
    make_ready_orders_every_kind_of_consumer_stream_after_pending_work,
    stream_values_the_protocol_refuses_or_skips,
    to_dlpack_of_pending_strided_work_has_no_host_wait_and_orders_the_consumer,
    an_own_stream_device_shared_by_threads_orders_exports_and_reclaims,
    imports_ready_on_the_exchange_stream_only_are_ordered_in_an_own_stream_device,
    a_moved_buffer_written_behind_cudarcs_back_waits_for_the_exchange_stream,
    a_consumers_write_to_a_copy_made_ready_on_the_exchange_stream_is_seen_after_reclaim,
    pending_copies_and_moved_buffers_dropped_on_other_threads_are_freed_after_candles_work,
    buffers_of_default_per_thread_and_candles_own_streams_move_and_free_cleanly,
];

// ---------------------------------------------------------------------------------------
// Helpers (those of attack.rs are private to it: the few needed are repeated here).

/// The device address of a candle CUDA tensor's storage slice, for every candle dtype.
fn address_of(tensor: &Tensor) -> usize {
    let (storage, _) = tensor.storage_and_layout();
    let Storage::Cuda(cuda) = &*storage else {
        panic!("not a CUDA tensor")
    };
    let stream = cuda.device.cuda_stream();
    let address = match &cuda.slice {
        CudaStorageSlice::U8(s)
        | CudaStorageSlice::F8E8M0(s)
        | CudaStorageSlice::F6E2M3(s)
        | CudaStorageSlice::F6E3M2(s)
        | CudaStorageSlice::F4(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::U32(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::I16(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::I32(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::I64(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::BF16(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::F16(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::F32(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::F64(s) => s.device_ptr(&stream).0,
        CudaStorageSlice::F8E4M3(s) => s.device_ptr(&stream).0,
    };
    address as usize
}

/// An element type of the cases, compared by its bits (NaN payloads, -0.0, subnormals).
trait Bits: Element + DeviceRepr + WithDType + Copy + Debug + Send + Sync + 'static {
    /// Values that a copy through another float type, or a conversion, would change.
    const SPECIALS: &'static [u64];
    fn from_bits64(bits: u64) -> Self;
    fn bits64(self) -> u64;
}

macro_rules! bits_int {
    ($($t:ty as $u:ty: [$($s:expr),*];)*) => {$(
        impl Bits for $t {
            const SPECIALS: &'static [u64] = &[$($s),*];
            fn from_bits64(bits: u64) -> Self {
                bits as $u as $t
            }
            fn bits64(self) -> u64 {
                self as $u as u64
            }
        }
    )*};
}
bits_int! {
    u8 as u8: [0xFF, 0x80, 0];
    u32 as u32: [0xFFFF_FFFF, 0x8000_0000, 0x7F80_0001];
    i16 as u16: [0x8000, 0xFFFF, 0x7C01];
    i32 as u32: [0x8000_0000, 0xFFFF_FFFF, 0x7F80_0001];
    i64 as u64: [0x8000_0000_0000_0000, u64::MAX, 0x7FF0_0000_0000_0001];
}

macro_rules! bits_float {
    ($($t:ty, $u:ty: [$($s:expr),*];)*) => {$(
        impl Bits for $t {
            const SPECIALS: &'static [u64] = &[$($s),*];
            fn from_bits64(bits: u64) -> Self {
                <$t>::from_bits(bits as $u)
            }
            fn bits64(self) -> u64 {
                u64::from(self.to_bits())
            }
        }
    )*};
}
bits_float! {
    // -0.0, a signalling NaN with a payload, a negative quiet NaN with a payload, the least
    // subnormal, the greatest subnormal, -inf.
    f32, u32: [0x8000_0000, 0x7F80_0001, 0xFFC1_2345, 0x0000_0001, 0x007F_FFFF, 0xFF80_0000];
    f64, u64: [
        0x8000_0000_0000_0000, 0x7FF0_0000_0000_0001, 0xFFF8_1234_5678_9ABC, 1,
        0x000F_FFFF_FFFF_FFFF, 0xFFF0_0000_0000_0000
    ];
    half::f16, u16: [0x8000, 0x7C01, 0xFE5A, 0x0001, 0x03FF, 0xFC00];
    half::bf16, u16: [0x8000, 0x7F81, 0xFFC5, 0x0001, 0x007F, 0xFF80];
    float8::F8E4M3, u8: [0x80, 0x7F, 0xFF, 0x01, 0x07, 0x7E];
}

/// `n` values of `T` whose bits are all over the place (NaNs with payloads included), the
/// type's specials first; the low byte differs between any two of the first 256 (an odd
/// multiplier is a bijection modulo 256), so a misplaced element shows.
fn patterned<T: Bits>(n: usize) -> Vec<T> {
    let width = 8 * size_of::<T>() as u32;
    (0..n)
        .map(|i| {
            if let Some(&s) = T::SPECIALS.get(i) {
                return T::from_bits64(s);
            }
            let low = (i as u64).wrapping_mul(167).wrapping_add(13) & 0xFF;
            let high = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let bits = (high << 8) | low;
            T::from_bits64(if width == 64 {
                bits
            } else {
                bits & ((1u64 << width) - 1)
            })
        })
        .collect()
}

fn bits_of<T: Bits>(values: &[T]) -> Vec<u64> {
    values.iter().map(|v| v.bits64()).collect()
}

/// Whether a layout is compact row-major (a size-1 axis's stride reaches nothing, so it does
/// not count).
fn compact(shape: &[usize], strides: &[isize]) -> bool {
    let mut step = 1isize;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != step {
            return false;
        }
        step *= d as isize;
    }
    true
}

/// The elements of a layout over `values`, in row-major order (what a copy must hold).
fn gather<T: Copy>(values: &[T], shape: &[usize], strides: &[isize], offset: usize) -> Vec<T> {
    let total: usize = shape.iter().product();
    (0..total)
        .map(|mut i| {
            let mut at = offset as isize;
            for (&d, &s) in shape.iter().zip(strides).rev() {
                at += (i % d) as isize * s;
                i /= d;
            }
            values[usize::try_from(at).expect("inside")]
        })
        .collect()
}

/// The elements of a candle CUDA tensor of `T`, read back by dlpack-cuda through a lent
/// export (no candle kernel).
fn read_back<T: Element>(t: &Tensor, device: &Device) -> Vec<T> {
    // SAFETY: nothing writes `t`'s storage while the export lives (it is read and dropped
    // here).
    let dl = unsafe { dlpack_candle::into_dlpack(t.clone()) }.expect("lent export");
    host_values_of::<T>(dl, device)
}

/// Runs `f` for every candle dtype that has a Rust element type on the device.
macro_rules! for_every_dtype {
    ($f:ident($($arg:expr),*)) => {{
        $f::<u8>($($arg),*);
        $f::<u32>($($arg),*);
        $f::<i16>($($arg),*);
        $f::<i32>($($arg),*);
        $f::<i64>($($arg),*);
        $f::<half::bf16>($($arg),*);
        $f::<half::f16>($($arg),*);
        $f::<f32>($($arg),*);
        $f::<f64>($($arg),*);
        $f::<float8::F8E4M3>($($arg),*);
    }};
}

/// Collects failures so that one case reports all of them.
#[derive(Default)]
struct Failures(std::sync::Mutex<Vec<String>>);

impl Failures {
    fn push(&self, what: String) {
        println!("    FAILED: {what}");
        self.0.lock().expect("lock").push(what);
    }
    fn check(self, what: &str) {
        let failures = self.0.into_inner().expect("lock");
        assert!(failures.is_empty(), "{what}: {failures:#?}");
    }
}

// ---------------------------------------------------------------------------------------
// dtypes crossed with layouts.

/// (name, elements of the buffer, shape, strides, element offset)
type Layout = (
    &'static str,
    usize,
    &'static [usize],
    &'static [isize],
    usize,
);

const LAYOUTS: &[Layout] = &[
    ("3-d permuted (2, 0, 1)", 24, &[4, 2, 3], &[1, 12, 4], 0),
    ("3-d flipped on two axes", 24, &[2, 3, 4], &[-12, 4, -1], 15),
    ("broadcast middle axis", 6, &[3, 5, 2], &[2, 0, 1], 0),
    (
        "size-1 axes with odd strides, offset",
        14,
        &[1, 4, 1, 3],
        &[999, 3, -7, 1],
        2,
    ),
    (
        "6-d permutation with a flipped axis",
        64,
        &[2, 2, 2, 2, 2, 2],
        &[1, 4, -16, 32, 8, 2],
        16,
    ),
    ("every other, both axes, offset", 40, &[3, 4], &[16, 2], 1),
    ("0-d at an offset", 6, &[], &[], 5),
    ("a column of a wide matrix, last", 320, &[5], &[64], 63),
    ("compact tail (offset only)", 10, &[2, 3], &[3, 1], 4),
    (
        "broadcast of one element, 3-d",
        3,
        &[2, 3, 4],
        &[0, 0, 0],
        2,
    ),
    ("flipped and broadcast", 8, &[4, 3, 2], &[-2, 0, 1], 6),
];

fn every_dtype_imports_high_rank_flipped_broadcast_layouts_bit_for_bit(device: &Device) {
    fn run<T: Bits>(device: &Device, failures: &Failures) {
        let name = std::any::type_name::<T>();
        for &(what, n, shape, strides, offset) in LAYOUTS {
            let values = patterned::<T>(n);
            let expected = bits_of(&gather(&values, shape, strides, offset));
            for mode in [CopyMode::IfNeeded, CopyMode::Always, CopyMode::Never] {
                let buffer = CudaBuffer::new(upload(0, &values));
                let view = match CudaTensor::strided(buffer, shape, strides, offset) {
                    Ok(view) => view,
                    Err(e) => {
                        failures.push(format!("{name} {what}: CudaTensor refused: {e}"));
                        continue;
                    }
                };
                let dl = match ManagedTensor::export(view) {
                    Ok(dl) => dl,
                    Err(e) => {
                        failures.push(format!("{name} {what}: export refused: {e}"));
                        continue;
                    }
                };
                // `to_owned_on` first, of the tensor kept.
                if mode == CopyMode::IfNeeded {
                    match dlpack_candle::to_owned_on(&dl, device) {
                        Ok(t) => {
                            if t.dims() != shape
                                || t.dtype() != <T as WithDType>::DTYPE
                                || !t.is_contiguous()
                            {
                                failures.push(format!(
                                    "{name} {what}: to_owned_on made {:?} {:?}",
                                    t.dims(),
                                    t.dtype()
                                ));
                            } else if bits_of(&read_back::<T>(&t, device)) != expected {
                                failures.push(format!("{name} {what}: to_owned_on: wrong bits"));
                            }
                        }
                        Err(e) => failures.push(format!("{name} {what}: to_owned_on: {e}")),
                    }
                }
                match dlpack_candle::into_owned_on(dl, device, mode) {
                    Ok((t, transfer)) => {
                        if mode == CopyMode::Never {
                            failures.push(format!(
                                "{name} {what}: taken under Never ({transfer:?}): a CudaTensor is \
                                 not candle's to own"
                            ));
                        }
                        let want = if mode == CopyMode::Always {
                            Transfer::Copied(CopyReason::Requested)
                        } else if compact(shape, strides) {
                            // Compact row-major (size-1 axes' strides do not count), only not
                            // from the allocation's start or not candle's.
                            Transfer::Copied(CopyReason::NotOwned)
                        } else {
                            Transfer::Copied(CopyReason::Layout)
                        };
                        if transfer != want {
                            failures.push(format!(
                                "{name} {what} {mode:?}: {transfer:?}, expected {want:?}"
                            ));
                        }
                        if t.dims() != shape
                            || t.dtype() != <T as WithDType>::DTYPE
                            || !t.is_contiguous()
                        {
                            failures.push(format!(
                                "{name} {what} {mode:?}: made {:?} {:?}",
                                t.dims(),
                                t.dtype()
                            ));
                            continue;
                        }
                        let found = bits_of(&read_back::<T>(&t, device));
                        if found != expected {
                            failures.push(format!(
                                "{name} {what} {mode:?}: wrong bits: {:x?} for {:x?}",
                                &found[..found.len().min(8)],
                                &expected[..expected.len().min(8)]
                            ));
                        }
                    }
                    Err(refused) => {
                        let fine = mode == CopyMode::Never
                            && matches!(
                                refused.error,
                                CandleError::DLPack(Error::CopyRefused { .. })
                            );
                        if !fine {
                            failures.push(format!("{name} {what} {mode:?}: {}", refused.error));
                        }
                        // Given back: still readable, still the same elements.
                        let back = host_values_of::<T>(refused.value, device);
                        if bits_of(&back) != expected {
                            failures.push(format!("{name} {what}: given back changed"));
                        }
                    }
                }
            }
        }
    }
    let failures = Failures::default();
    for_every_dtype!(run(device, &failures));
    failures.check("imports");
}

fn every_dtype_exports_candle_views_bit_for_bit_lent_and_copied(device: &Device) {
    /// (name, view of a [2, 3, 4] tensor)
    type View = (&'static str, fn(&Tensor) -> candle_core::Result<Tensor>);
    const VIEWS: &[View] = &[
        ("permute (2, 0, 1)", |t| t.permute((2, 0, 1))),
        ("permute (1, 2, 0) of a narrow", |t| {
            t.narrow(2, 1, 3)?.permute((1, 2, 0))
        }),
        ("narrow with an offset, transposed", |t| {
            t.narrow(1, 1, 2)?.transpose(0, 2)
        }),
        ("one element picked (0-d, offset)", |t| {
            t.get(1)?.get(2)?.get(3)
        }),
        ("a row with an offset", |t| t.get(1)?.get(1)),
        ("size-1 axes around a column", |t| {
            t.narrow(2, 3, 1)?.unsqueeze(0)?.unsqueeze(3)
        }),
        ("broadcast over a new leading axis, permuted", |t| {
            t.broadcast_as((3, 2, 3, 4))?.permute((3, 0, 2, 1))
        }),
        ("broadcast of a narrowed column", |t| {
            t.narrow(2, 2, 1)?.broadcast_as((2, 3, 5))
        }),
        ("5-d: reshape, then permute", |t| {
            t.reshape((2, 3, 2, 2, 1))?.permute((4, 3, 1, 0, 2))
        }),
    ];
    fn run<T: Bits>(device: &Device, failures: &Failures) {
        let name = std::any::type_name::<T>();
        let values = patterned::<T>(24);
        let gpu = Tensor::from_vec(values.clone(), (2, 3, 4), device).expect("upload");
        let cpu = Tensor::from_vec(values, (2, 3, 4), &Device::Cpu).expect("host");
        let size = size_of::<T>();
        for &(what, view) in VIEWS {
            let (v, c) = (view(&gpu).expect("view"), view(&cpu).expect("view"));
            let expected = bits_of(
                &c.flatten_all()
                    .and_then(|c| c.to_vec1::<T>())
                    .expect("candle on the host"),
            );
            let dims: Vec<i64> = v.dims().iter().map(|&d| d as i64).collect();
            // Lent: candle's memory, its strides and offset.
            // SAFETY: nothing writes `gpu`'s storage in this case.
            match unsafe { dlpack_candle::into_dlpack(v.clone()) } {
                Ok(dl) => {
                    let strides: Vec<i64> = v.stride().iter().map(|&s| s as i64).collect();
                    let start = address_of(&gpu) + v.layout().start_offset() * size;
                    if dl.data_ptr().addr() + dl.byte_offset() as usize != start {
                        failures.push(format!("{name} {what}: lent at the wrong address"));
                    }
                    if dl.shape() != dims
                        || (dims.iter().product::<i64>() > 1 && dl.strides() != strides)
                    {
                        failures.push(format!(
                            "{name} {what}: lent as {:?} {:?}, candle has {dims:?} {strides:?}",
                            dl.shape(),
                            dl.strides()
                        ));
                    }
                    if bits_of(&host_values_of::<T>(dl, device)) != expected {
                        failures.push(format!("{name} {what}: lent: wrong bits"));
                    }
                }
                Err(r) => failures.push(format!("{name} {what}: into_dlpack: {}", r.error)),
            }
            // Copied: compact row-major, its own memory, bit for bit.
            match dlpack_candle::to_dlpack(&v) {
                Ok(copy) => {
                    if copy.shape() != dims || !copy.flags().contains(Flags::IS_COPIED) {
                        failures.push(format!(
                            "{name} {what}: copy is {:?} {:?}",
                            copy.shape(),
                            copy.flags()
                        ));
                    }
                    let compact = {
                        let mut step = 1i64;
                        let mut ok = true;
                        for (&d, &s) in copy.shape().iter().zip(copy.strides()).rev() {
                            ok &= d == 1 || s == step;
                            step *= d;
                        }
                        ok
                    };
                    if !compact {
                        failures.push(format!(
                            "{name} {what}: copy not compact row-major: {:?} {:?}",
                            copy.shape(),
                            copy.strides()
                        ));
                    }
                    let found = bits_of(&host_values_of::<T>(copy, device));
                    if found != expected {
                        failures.push(format!(
                            "{name} {what}: copy: wrong bits {:x?} for {:x?}",
                            &found[..found.len().min(6)],
                            &expected[..expected.len().min(6)]
                        ));
                    }
                }
                Err(e) => failures.push(format!("{name} {what}: to_dlpack: {e}")),
            }
        }
    }
    let failures = Failures::default();
    for_every_dtype!(run(device, &failures));
    failures.check("exports");
}

fn byte_offsets_and_interior_pointers_of_narrow_dtypes_are_honoured(device: &Device) {
    // DLPack's byte_offset and an interior data pointer, each on its own and together, with
    // negative strides reaching back before the data pointer (inside the allocation).
    fn run<T: Bits>(device: &Device, failures: &Failures) {
        let name = std::any::type_name::<T>();
        let size = size_of::<T>();
        let values = patterned::<T>(16);
        let buffer = CudaBuffer::new(upload(0, &values));
        let at = buffer.device_address();
        // (what, data pointer element, byte_offset element, shape, strides)
        type Claim = (&'static str, usize, usize, &'static [i64], &'static [i64]);
        let claims: &[Claim] = &[
            ("byte offset only", 0, 5, &[4], &[2]),
            ("interior pointer only", 5, 0, &[4], &[2]),
            ("both, flipped back to the start", 6, 3, &[10], &[-1]),
            ("both, 2-d flipped", 4, 11, &[3, 4], &[-4, -1]),
            ("both, broadcast", 1, 1, &[3, 2], &[0, -1]),
        ];
        for &(what, pointer, offset, shape, strides) in claims {
            let (tensor, counter) = raw_cuda(
                at + pointer * size,
                <T as Element>::DTYPE,
                shape,
                strides,
                (offset * size) as u64,
                dlpack_core::Device::cuda(0),
            );
            let tensor = match tensor {
                Ok(t) => t,
                Err(e) => {
                    failures.push(format!("{name} {what}: refused by dlpack-core: {e}"));
                    continue;
                }
            };
            let ushape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            let istrides: Vec<isize> = strides.iter().map(|&s| s as isize).collect();
            let expected = bits_of(&gather(&values, &ushape, &istrides, pointer + offset));
            match dlpack_candle::to_owned_on(&tensor, device) {
                Ok(t) if bits_of(&read_back::<T>(&t, device)) == expected => {}
                Ok(_) => failures.push(format!("{name} {what}: to_owned_on: wrong bits")),
                Err(e) => failures.push(format!("{name} {what}: to_owned_on: {e}")),
            }
            match dlpack_candle::into_owned_on(tensor, device, CopyMode::IfNeeded) {
                Ok((t, _)) => {
                    if deletes(&counter) != 1 {
                        failures.push(format!("{name} {what}: not released after the copy"));
                    }
                    if t.dims() != ushape {
                        failures.push(format!("{name} {what}: dims {:?}", t.dims()));
                    } else if bits_of(&read_back::<T>(&t, device)) != expected {
                        failures.push(format!("{name} {what}: wrong bits"));
                    }
                }
                Err(r) => failures.push(format!("{name} {what}: {}", r.error)),
            }
        }
        drop(buffer);
    }
    let failures = Failures::default();
    for_every_dtype!(run(device, &failures));
    failures.check("byte offsets");
}

fn misaligned_pointers_of_wide_dtypes_are_copied_or_refused_never_misread(device: &Device) {
    // attack.rs tried f32 one byte off; here every wider dtype, off by every amount below its
    // width, compact and strided. A copy must hold the bytes that are there; a refusal gives
    // the tensor back.
    fn run<T: Bits>(device: &Device, failures: &Failures) {
        let name = std::any::type_name::<T>();
        let size = size_of::<T>();
        if size == 1 {
            return;
        }
        let bytes: Vec<u8> = (0..16 * size).map(|i| (i * 7 + 3) as u8).collect();
        let buffer = CudaBuffer::new(upload(0, &bytes));
        let at = buffer.device_address();
        let decode = |from: usize| {
            let mut raw = [0u8; 8];
            raw[..size].copy_from_slice(&bytes[from..from + size]);
            u64::from_ne_bytes(raw)
        };
        for shift in 1..size {
            for (shape, stride) in [(3i64, 1i64), (3, 2), (3, -1)] {
                let start = if stride < 0 { 2 * size + shift } else { shift };
                let (tensor, counter) = raw_cuda(
                    at + start,
                    <T as Element>::DTYPE,
                    &[shape],
                    &[stride],
                    0,
                    dlpack_core::Device::cuda(0),
                );
                let Ok(tensor) = tensor else {
                    continue;
                };
                let expected: Vec<u64> = (0..3)
                    .map(|i| decode((start as i64 + i * stride * size as i64) as usize))
                    .collect();
                match dlpack_candle::into_owned_on(tensor, device, CopyMode::IfNeeded) {
                    Ok((t, _)) => {
                        let found = bits_of(&read_back::<T>(&t, device));
                        if found != expected {
                            failures.push(format!(
                                "{name} +{shift} stride {stride}: misread {found:x?} for \
                                 {expected:x?}"
                            ));
                        }
                    }
                    Err(refused) => {
                        if deletes(&counter) != 0 {
                            failures.push(format!("{name} +{shift}: refused but deleted"));
                        }
                        drop(refused);
                    }
                }
            }
        }
        drop(buffer);
    }
    let failures = Failures::default();
    for_every_dtype!(run(device, &failures));
    failures.check("misaligned");
}

const E8M0: DataType = DataType::new(DataTypeCode::FLOAT8_E8M0FNU, 8, 1);

fn float8_e8m0_cuda_tensors_go_both_ways(device: &Device) {
    // The crate's dtype table has candle's F8E8M0 as DLPack float8_e8m0fnu, "every candle
    // dtype goes both ways", and the cuda module gathers "the float8 types" through an
    // integer type of the same width. candle's CUDA backend has F8E8M0 storage (raw bytes) but
    // hardly any kernel for it, so the crate must do its own byte copies. Each step is tried;
    // the failures are listed together.
    let failures = Failures::default();
    let bytes: Vec<u8> = (0..12u8).map(|i| i * 21 + 1).chain([0xFF, 0x7F]).collect();
    let buffer = CudaBuffer::new(upload(0, &bytes));
    let at = buffer.device_address();
    let as_e8m0 = |v: Vec<Float8E8M0>| v.into_iter().map(|e| e.0).collect::<Vec<u8>>();
    let cuda0 = dlpack_core::Device::cuda(0);
    // Compact, 14 elements: copied.
    let (tensor, _) = raw_cuda(at, E8M0, &[2, 7], &[7, 1], 0, cuda0);
    let imported = match dlpack_candle::into_owned_on(
        tensor.expect("well-formed"),
        device,
        CopyMode::IfNeeded,
    ) {
        Ok((t, transfer)) => {
            if t.dtype() != DType::F8E8M0 || t.dims() != [2, 7] {
                failures.push(format!("compact import: {:?} {:?}", t.dtype(), t.dims()));
            }
            if transfer != Transfer::Copied(CopyReason::NotOwned) {
                failures.push(format!("compact import: {transfer:?}"));
            }
            Some(t)
        }
        Err(r) => {
            failures.push(format!("compact import: {}", r.error));
            None
        }
    };
    // Transposed (a gather).
    let (tensor, _) = raw_cuda(at, E8M0, &[7, 2], &[1, 7], 0, cuda0);
    let transposed: Vec<u8> = gather(&bytes, &[7, 2], &[1, 7], 0);
    match dlpack_candle::into_owned_on(tensor.expect("well-formed"), device, CopyMode::IfNeeded) {
        Ok((t, transfer)) => {
            if transfer != Transfer::Copied(CopyReason::Layout) {
                failures.push(format!("strided import: {transfer:?}"));
            }
            let found = as_e8m0(read_back::<Float8E8M0>(&t, device));
            if found != transposed {
                failures.push(format!("strided import: {found:?} for {transposed:?}"));
            }
        }
        Err(r) => failures.push(format!("strided import: {}", r.error)),
    }
    // Flipped, with a byte offset, by `to_owned_on`.
    let (tensor, _) = raw_cuda(at, E8M0, &[5], &[-2], 13, cuda0);
    let tensor = tensor.expect("well-formed");
    match dlpack_candle::to_owned_on(&tensor, device) {
        Ok(t) => {
            let found = as_e8m0(read_back::<Float8E8M0>(&t, device));
            let want = gather(&bytes, &[5], &[-2], 13);
            if found != want {
                failures.push(format!("flipped to_owned_on: {found:?} for {want:?}"));
            }
        }
        Err(e) => failures.push(format!("flipped to_owned_on: {e}")),
    }
    drop(tensor);
    if let Some(t) = imported {
        // Lent out again: candle's memory, the bytes as they were.
        let found = as_e8m0(read_back::<Float8E8M0>(&t, device));
        if found != bytes {
            failures.push(format!("lent export: {found:?}"));
        }
        // Copied out, compact and through a view (candle has no F8E8M0 copy kernel on CUDA).
        match dlpack_candle::to_dlpack(&t) {
            Ok(copy) => {
                if copy.dtype() != E8M0 {
                    failures.push(format!("copy dtype {}", copy.dtype()));
                }
                let found = as_e8m0(host_values_of::<Float8E8M0>(copy, device));
                if found != bytes {
                    failures.push(format!("compact to_dlpack: {found:?}"));
                }
            }
            Err(e) => failures.push(format!("compact to_dlpack: {e}")),
        }
        match t.t().map(|v| dlpack_candle::to_dlpack(&v)) {
            Ok(Ok(copy)) => {
                let found = as_e8m0(host_values_of::<Float8E8M0>(copy, device));
                let want = gather(&bytes, &[7, 2], &[1, 7], 0);
                if found != want {
                    failures.push(format!("transposed to_dlpack: {found:?} for {want:?}"));
                }
            }
            Ok(Err(e)) => failures.push(format!("transposed to_dlpack: {e}")),
            Err(e) => failures.push(format!("t(): {e}")),
        }
        // And back: the lent view reclaimed.
        // SAFETY: nothing writes `t`'s storage.
        let dl = unsafe { dlpack_candle::into_dlpack(t.narrow(1, 2, 3).expect("narrow")) }
            .expect("lent");
        match dlpack_candle::into_owned_on(dl, device, CopyMode::Never) {
            Ok((_, Transfer::Reclaimed)) => {}
            Ok((_, other)) => failures.push(format!("reclaim: {other:?}")),
            Err(r) => failures.push(format!("reclaim: {}", r.error)),
        }
    }
    drop(buffer);
    failures.check("float8_e8m0fnu on CUDA");
}

fn dlpack_dtypes_candle_lacks_are_refused_on_cuda_whatever_the_mode(device: &Device) {
    // Real device memory, claimed as each dtype candle has no dtype for: refused with
    // NoCandleDType under every mode (before any driver copy), given back untouched, then
    // deleted once; `to_owned_on` likewise.
    let bytes: Vec<u8> = (0..64).collect();
    let buffer = CudaBuffer::new(upload(0, &bytes));
    let at = buffer.device_address();
    let dtypes = [
        DataType::BOOL,
        DataType::I8,
        DataType::U16,
        DataType::U64,
        DataType::C64,
        DataType::C128,
        DataType::new(DataTypeCode::COMPLEX, 32, 1),
        DataType::F8_E5M2,
        DataType::new(DataTypeCode::FLOAT8_E4M3, 8, 1),
        DataType::new(DataTypeCode::FLOAT8_E3M4, 8, 1),
        DataType::new(DataTypeCode::FLOAT8_E4M3FNUZ, 8, 1),
        DataType::new(DataTypeCode::FLOAT8_E5M2FNUZ, 8, 1),
        DataType::new(DataTypeCode::FLOAT8_E4M3B11FNUZ, 8, 1),
        DataType::new(DataTypeCode::FLOAT6_E2M3FN, 6, 1),
        DataType::new(DataTypeCode::FLOAT6_E3M2FN, 6, 1),
        DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 1),
        DataType::new(DataTypeCode::OPAQUE_HANDLE, 64, 1),
        // Vector dtypes of candle element types.
        DataType::new(DataTypeCode::FLOAT, 32, 4),
        DataType::new(DataTypeCode::FLOAT, 16, 2),
        DataType::new(DataTypeCode::UINT, 8, 4),
        DataType::new(DataTypeCode::BFLOAT, 16, 2),
        DataType::new(DataTypeCode::FLOAT8_E4M3FN, 8, 2),
    ];
    let failures = Failures::default();
    let cuda0 = dlpack_core::Device::cuda(0);
    for dtype in dtypes {
        // Two elements, compact; and a transposed 2x2 (for sub-byte dtypes, what dlpack-core
        // accepts).
        for (shape, strides) in [(&[2i64][..], &[1i64][..]), (&[2, 2][..], &[1, 2][..])] {
            for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
                let (tensor, counter) = raw_cuda(at, dtype, shape, strides, 0, cuda0);
                let tensor = match tensor {
                    Ok(t) => t,
                    Err(e) => {
                        println!("    ({dtype} {shape:?}: refused by dlpack-core: {e})");
                        continue;
                    }
                };
                if let Err(e) =
                    dlpack_candle::to_owned_on(&tensor, device).map(|t| t.dims().to_vec())
                {
                    if !matches!(e, CandleError::NoCandleDType { .. }) {
                        failures.push(format!("{dtype} {shape:?}: to_owned_on: {e}"));
                    }
                } else {
                    failures.push(format!("{dtype} {shape:?}: to_owned_on made a tensor"));
                }
                match dlpack_candle::into_owned_on(tensor, device, mode) {
                    Ok((t, transfer)) => failures.push(format!(
                        "{dtype} {shape:?} {mode:?}: taken as {:?} ({transfer:?})",
                        t.dtype()
                    )),
                    Err(refused) => {
                        if !matches!(refused.error, CandleError::NoCandleDType { .. }) {
                            failures.push(format!("{dtype} {shape:?} {mode:?}: {}", refused.error));
                        }
                        if deletes(&counter) != 0 {
                            failures.push(format!("{dtype} {shape:?} {mode:?}: not given back"));
                        }
                        let back = refused.value;
                        if back.dtype() != dtype || back.data_ptr().addr() != at {
                            failures.push(format!("{dtype} {shape:?} {mode:?}: changed"));
                        }
                        drop(back);
                        if deletes(&counter) != 1 {
                            failures.push(format!("{dtype} {shape:?} {mode:?}: deletes"));
                        }
                    }
                }
            }
        }
    }
    drop(buffer);
    failures.check("dtypes candle lacks");
}

// ---------------------------------------------------------------------------------------
// Copy modes and buffers.

fn copy_modes_on_moved_buffers_of_every_candle_dtype(device: &Device) {
    fn run<T: Bits>(device: &Device, failures: &Failures) {
        let name = std::any::type_name::<T>();
        let values = patterned::<T>(37);
        let expected = bits_of(&values);
        for gpu in [
            device.clone(),
            Device::new_cuda_with_stream(0).expect("own stream"),
        ] {
            for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
                let buffer = CudaBuffer::new(upload(0, &values));
                let address = buffer.device_address();
                let dl = ManagedTensor::export(buffer).expect("export");
                match dlpack_candle::into_owned_on(dl, &gpu, mode) {
                    Ok((t, transfer)) => {
                        let moved = transfer == Transfer::Moved;
                        let want = if mode == CopyMode::Always {
                            Transfer::Copied(CopyReason::Requested)
                        } else {
                            Transfer::Moved
                        };
                        if transfer != want {
                            failures.push(format!("{name} {mode:?}: {transfer:?}"));
                        }
                        if moved != (address_of(&t) == address) {
                            failures.push(format!(
                                "{name} {mode:?}: {transfer:?} but the address says otherwise"
                            ));
                        }
                        if t.dtype() != <T as WithDType>::DTYPE || t.dims() != [37] {
                            failures.push(format!("{name} {mode:?}: {:?}", t.dtype()));
                        }
                        // candle's own read (a device-to-host copy) and dlpack-cuda's.
                        let candle = t.to_vec1::<T>().map(|v| bits_of(&v));
                        if candle.as_ref().ok() != Some(&expected) {
                            failures.push(format!("{name} {mode:?}: candle reads {candle:?}"));
                        }
                        if bits_of(&read_back::<T>(&t, &gpu)) != expected {
                            failures.push(format!("{name} {mode:?}: wrong bits"));
                        }
                        // A view of the moved tensor goes out and back.
                        let view = t.narrow(0, 3, 30).expect("narrow");
                        // SAFETY: nothing writes `t`'s storage.
                        let dl = unsafe { dlpack_candle::into_dlpack(view) }.expect("lent");
                        match dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Never) {
                            Ok((back, Transfer::Reclaimed)) => {
                                if back.layout().start_offset() != 3 {
                                    failures.push(format!("{name}: reclaimed view moved"));
                                }
                            }
                            Ok((_, other)) => failures.push(format!("{name}: {other:?}")),
                            Err(r) => failures.push(format!("{name}: reclaim: {}", r.error)),
                        }
                        drop(t);
                    }
                    Err(r) => failures.push(format!("{name} {mode:?}: {}", r.error)),
                }
            }
            gpu.synchronize().expect("synchronize");
        }
    }
    let failures = Failures::default();
    for_every_dtype!(run(device, &failures));
    failures.check("copy modes on moved buffers");
}

fn a_buffer_inside_a_cuda_tensor_is_copied_never_moved(device: &Device) {
    // Documented: a *bare* CudaBuffer is moved; any other tensor is copied, or refused under
    // Never with the tensor given back. A CudaTensor over all of a buffer, compact, from its
    // start, is the closest thing to a bare buffer that is not one.
    let failures = Failures::default();
    type Make = fn(CudaBuffer<f32>) -> CudaTensor<CudaBuffer<f32>>;
    let makes: &[(&str, Make, &[usize])] = &[
        (
            "new, 1-d, whole",
            (|b| CudaTensor::new(b, &[6]).expect("1-d")) as Make,
            &[6],
        ),
        (
            "new, 2-d, whole",
            |b| CudaTensor::new(b, &[2, 3]).expect("2-d"),
            &[2, 3],
        ),
        (
            "strided, compact strides, whole",
            |b| CudaTensor::strided(b, &[3, 2], &[2, 1], 0).expect("compact"),
            &[3, 2],
        ),
        (
            "new, empty over a non-empty buffer",
            |b| CudaTensor::new(b, &[0]).expect("empty"),
            &[0],
        ),
        (
            "strided, empty 2-d",
            |b| CudaTensor::strided(b, &[2, 0], &[1, 1], 3).expect("empty"),
            &[2, 0],
        ),
        (
            "a prefix",
            |b| CudaTensor::new(b, &[4]).expect("prefix"),
            &[4],
        ),
    ];
    for &(what, make, dims) in makes {
        for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
            let buffer = CudaBuffer::new(upload(0, &iota(6)));
            let address = buffer.device_address();
            let dl = match ManagedTensor::export(make(buffer)) {
                Ok(dl) => dl,
                Err(e) => {
                    failures.push(format!("{what}: export: {e}"));
                    continue;
                }
            };
            let elements: usize = dims.iter().product();
            match dlpack_candle::into_owned_on(dl, device, mode) {
                Ok((t, transfer)) => {
                    if t.dims() != dims {
                        failures.push(format!("{what} {mode:?}: dims {:?}", t.dims()));
                    }
                    if transfer == Transfer::Moved {
                        failures.push(format!(
                            "{what} {mode:?}: Moved, but the docs move bare CudaBuffers only"
                        ));
                    }
                    if mode == CopyMode::Never && elements > 0 {
                        failures.push(format!("{what}: taken under Never ({transfer:?})"));
                    }
                    if elements > 0 {
                        if address_of(&t) == address {
                            failures.push(format!("{what} {mode:?}: the buffer's memory"));
                        }
                        let found = t.flatten_all().and_then(|t| t.to_vec1::<f32>());
                        if found.as_deref().ok() != Some(&iota(6)[..elements]) {
                            failures.push(format!("{what} {mode:?}: {found:?}"));
                        }
                    }
                }
                Err(refused) => {
                    let ok = mode == CopyMode::Never
                        && matches!(
                            refused.error,
                            CandleError::DLPack(Error::CopyRefused {
                                reason: CopyReason::NotOwned
                            })
                        );
                    if !ok {
                        failures.push(format!("{what} {mode:?}: {}", refused.error));
                    }
                    // Given back as the CudaTensor it was.
                    match refused.value.reclaim::<CudaTensor<CudaBuffer<f32>>>() {
                        Ok(back) => {
                            if back.buffer().device_address() != address {
                                failures.push(format!("{what}: given back changed"));
                            }
                        }
                        Err(_) => failures.push(format!("{what}: not the CudaTensor any more")),
                    }
                }
            }
        }
    }
    failures.check("CudaTensor over a CudaBuffer");
}

// ---------------------------------------------------------------------------------------
// Round trips and lifetimes.

fn round_trips_repeated_many_times_keep_one_storage_and_leak_nothing(device: &Device) {
    for gpu in [
        device.clone(),
        Device::new_cuda_with_stream(0).expect("own stream"),
    ] {
        let t = arange(24, &gpu).reshape((2, 3, 4)).expect("reshape");
        let address = address_of(&t);
        let mut view = t
            .permute((2, 0, 1))
            .expect("permute")
            .narrow(0, 1, 2)
            .expect("narrow");
        drop(t);
        let (dims, stride, offset) = (
            view.dims().to_vec(),
            view.stride().to_vec(),
            view.layout().start_offset(),
        );
        for round in 0..200 {
            // SAFETY: nothing writes the storage; `view` moves into the export.
            let dl = unsafe { dlpack_candle::into_dlpack(view) }.expect("lent");
            assert_eq!(
                dl.data_ptr().addr() + dl.byte_offset() as usize,
                address + offset * 4
            );
            let (back, transfer) = if round % 2 == 0 {
                dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Never)
                    .unwrap_or_else(|r| panic!("round {round}: {}", r.error))
            } else {
                let export = dl
                    .reclaim::<CandleExport>()
                    .unwrap_or_else(|_| panic!("round {round}: not a CandleExport"));
                (export.into_tensor(), Transfer::Reclaimed)
            };
            assert_eq!(transfer, Transfer::Reclaimed, "round {round}");
            assert_eq!(
                address_of(&back),
                address,
                "round {round}: the same storage"
            );
            assert_eq!(
                (back.dims(), back.stride(), back.layout().start_offset()),
                (&dims[..], &stride[..], offset),
                "round {round}: the same layout"
            );
            view = back;
        }
        // Copies: made, reclaimed, lent, reclaimed, again and again.
        let mut copy_address = 0;
        for round in 0..100 {
            let copy = dlpack_candle::to_dlpack(&view).expect("copy");
            let at = copy.data_ptr().addr();
            let (owned, transfer) = dlpack_candle::into_owned_on(copy, &gpu, CopyMode::Never)
                .unwrap_or_else(|r| panic!("round {round}: {}", r.error));
            assert_eq!(transfer, Transfer::Reclaimed);
            assert_eq!(address_of(&owned), at);
            // SAFETY: `owned` is the only handle on the copy's storage.
            let lent = unsafe { dlpack_candle::into_dlpack(owned) }.expect("lent");
            assert_eq!(
                lent.data_ptr().addr(),
                at,
                "round {round}: a lent copy, not a new one"
            );
            let (owned, _) = dlpack_candle::into_owned_on(lent, &gpu, CopyMode::Never)
                .unwrap_or_else(|r| panic!("round {round}: {}", r.error));
            copy_address = address_of(&owned);
            if round == 99 {
                assert_eq!(
                    owned.to_vec3::<f32>().expect("values"),
                    view.to_vec3::<f32>().expect("values")
                );
            }
        }
        assert_ne!(copy_address, address);
        // view[i][b][c] = t[b][c][i + 1] = 12 b + 4 c + i + 1.
        assert_eq!(
            view.to_vec3::<f32>().expect("values")[1][1],
            [14.0, 18.0, 22.0],
            "the view's values after 300 trips"
        );
        gpu.synchronize().expect("synchronize");
    }
}

fn exports_nobody_reads_are_released(device: &Device) {
    // Exports dropped at once, on this thread and on threads without a context, lent and
    // copied, of views and of fresh results: the stand-in's counts must come back.
    for gpu in [
        device.clone(),
        Device::new_cuda_with_stream(0).expect("own stream"),
    ] {
        let base = arange(64, &gpu).reshape((8, 8)).expect("reshape");
        let mut elsewhere = Vec::new();
        for round in 0..64 {
            let fresh = base.affine(1.0, round as f64).expect("candle op");
            // SAFETY: `fresh` is the only handle on its new storage.
            let lent = unsafe { dlpack_candle::into_dlpack(fresh) }.expect("lent");
            let copied = dlpack_candle::to_dlpack(&base.t().expect("t")).expect("copy");
            // SAFETY: nothing writes `base`'s storage.
            let view = unsafe { dlpack_candle::into_dlpack(base.narrow(0, 1, 3).expect("n")) }
                .expect("lent view");
            if round % 3 == 0 {
                elsewhere.push((lent, copied, view));
            } else {
                drop((copied, lent, view));
            }
        }
        finishes("drops on a context-less thread", move || drop(elsewhere));
        drop(base);
        gpu.synchronize().expect("synchronize");
    }
}

fn a_reclaimed_export_re_exports_as_itself(device: &Device) {
    // A lent view, reclaimed, lends the same memory with the same layout; a reclaimed copy
    // lends the copy's memory (no second copy); each reclaim path (into_owned_on and
    // CandleExport) gives the same tensor.
    let base = arange(60, device).reshape((3, 4, 5)).expect("reshape");
    let view = base
        .narrow(2, 1, 3)
        .and_then(|v| v.permute((2, 0, 1)))
        .and_then(|v| v.narrow(1, 1, 2))
        .expect("view");
    // SAFETY: nothing writes `base`'s storage.
    let first = unsafe { dlpack_candle::into_dlpack(view.clone()) }.expect("lent");
    let (first_ptr, first_shape, first_strides) = (
        first.data_ptr().addr() + first.byte_offset() as usize,
        first.shape().to_vec(),
        first.strides().to_vec(),
    );
    let back = first
        .reclaim::<CandleExport>()
        .unwrap_or_else(|_| panic!("not a CandleExport"))
        .into_tensor();
    // SAFETY: as above.
    let second = unsafe { dlpack_candle::into_dlpack(back) }.expect("lent again");
    assert_eq!(
        (
            second.data_ptr().addr() + second.byte_offset() as usize,
            second.shape(),
            second.strides()
        ),
        (first_ptr, &first_shape[..], &first_strides[..]),
        "a re-export of a reclaimed view describes what the first did"
    );
    assert!(second.is_read_only());
    let expected = view
        .flatten_all()
        .and_then(|v| v.to_vec1::<f32>())
        .expect("values");
    assert_eq!(host_values_of::<f32>(second, device), expected);
    // A copy: reclaimed, lent, reclaimed under Always (a copy of a copy), lent again.
    let copy = dlpack_candle::to_dlpack(&view).expect("copy");
    let copy_at = copy.data_ptr().addr();
    let (owned, _) =
        dlpack_candle::into_owned_on(copy, device, CopyMode::Never).expect("reclaim copy");
    // SAFETY: `owned` is the only handle on the copy's storage.
    let lent = unsafe { dlpack_candle::into_dlpack(owned) }.expect("lent");
    assert_eq!(lent.data_ptr().addr(), copy_at);
    assert!(
        lent.is_read_only(),
        "a lent tensor is read-only, even the copy's"
    );
    assert!(
        !lent.flags().contains(Flags::IS_COPIED),
        "a lent export of a reclaimed copy is not a fresh copy"
    );
    let (again, transfer) =
        dlpack_candle::into_owned_on(lent, device, CopyMode::Always).expect("copy of a copy");
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_ne!(address_of(&again), copy_at);
    assert_eq!(
        again
            .flatten_all()
            .and_then(|v| v.to_vec1::<f32>())
            .expect("values"),
        expected
    );
    drop(base);
}

fn cuda_exports_refused_by_host_imports_come_back_reclaimable(device: &Device) {
    // A candle CUDA export handed to the CPU imports: refused (the host cannot read it),
    // given back, and still candle's own tensor for the GPU import. And the other way round.
    let t = arange(6, device).reshape((2, 3)).expect("reshape");
    let address = address_of(&t);
    for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
        for flavour in ["lent", "copied"] {
            let dl = if flavour == "lent" {
                // SAFETY: nothing writes `t`'s storage.
                unsafe { dlpack_candle::into_dlpack(t.t().expect("t")) }.expect("lent")
            } else {
                dlpack_candle::to_dlpack(&t.t().expect("t")).expect("copy")
            };
            let at = dl.data_ptr().addr();
            assert!(dlpack_candle::to_owned(&dl).is_err(), "{flavour}: to_owned");
            assert!(
                dlpack_candle::to_owned_on(&dl, &Device::Cpu).is_err(),
                "{flavour}: to_owned_on the CPU"
            );
            let refused = dlpack_candle::into_owned(dl, mode)
                .err()
                .unwrap_or_else(|| panic!("{flavour} {mode:?}: a CUDA export made a CPU tensor"));
            assert!(
                matches!(refused.error, CandleError::DLPack(_)),
                "{flavour} {mode:?}: {}",
                refused.error
            );
            let refused = dlpack_candle::into_owned_on(refused.value, &Device::Cpu, mode)
                .err()
                .unwrap_or_else(|| panic!("{flavour} {mode:?}: onto the CPU"));
            let (back, transfer) =
                dlpack_candle::into_owned_on(refused.value, device, CopyMode::Never)
                    .unwrap_or_else(|r| panic!("{flavour} {mode:?}: {}", r.error));
            assert_eq!(transfer, Transfer::Reclaimed, "{flavour} {mode:?}");
            if flavour == "lent" {
                assert_eq!(address_of(&back), address);
            } else {
                assert_eq!(address_of(&back), at);
            }
            assert_eq!(
                back.to_vec2::<f32>().expect("values"),
                [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
            );
        }
    }
    // A candle CPU export onto the GPU: a device mismatch, given back, reclaimed by the CPU.
    let host = Tensor::arange(0u32, 4, &Device::Cpu).expect("host");
    // SAFETY: nothing writes `host`'s storage.
    let dl = unsafe { dlpack_candle::into_dlpack(host.clone()) }.expect("lent");
    let refused = dlpack_candle::into_owned_on(dl, device, CopyMode::IfNeeded)
        .expect_err("a CPU tensor onto a CUDA device");
    assert!(
        matches!(refused.error, CandleError::DeviceMismatch { .. }),
        "{}",
        refused.error
    );
    let (back, transfer) =
        dlpack_candle::into_owned(refused.value, CopyMode::Never).expect("reclaim on the CPU");
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(back.to_vec1::<u32>().expect("values"), [0, 1, 2, 3]);
}

// ---------------------------------------------------------------------------------------
// The exchange stream.

/// A candle tensor of 2*i (n of them) whose computation is queued on `gpu`'s stream behind a
/// block, and the release. The kernel is loaded and the exchange stream made first.
fn pending_doubled(gpu: &Device, n: usize) -> (Tensor, Sender<()>) {
    let stream = gpu.as_cuda_device().expect("cuda").cuda_stream();
    hooks(gpu);
    let input = arange(n, gpu);
    input.affine(2.0, 0.0).expect("kernel loaded");
    let _ = dlpack_candle::to_dlpack(&input.reshape((2, n / 2)).and_then(|t| t.t()).expect("t"))
        .expect("ucopy loaded");
    gpu.synchronize().expect("ready");
    let release = block(&stream);
    let doubled = input.affine(2.0, 0.0).expect("queued");
    (doubled, release)
}

fn make_ready_orders_every_kind_of_consumer_stream_after_pending_work(device: &Device) {
    // The hooks' make_ready with each kind of stream a consumer may name: the legacy default
    // stream (1, and None), the per-thread default stream (2) of another thread, a stream of
    // its own, a stream of device 1. Each must wait for candle's blocked work.
    const N: usize = 1 << 12;
    let failures = Failures::default();
    for gpu in [
        Device::new_cuda_with_stream(0).expect("own stream"),
        device.clone(),
    ] {
        // Everything that may wait on the host comes before the block: cudarc's `new_stream`
        // synchronises the context when its handle has no other stream alive.
        let context = open_device(0).expect("device 0");
        let own = context.new_stream().expect("stream");
        let device_1 = has_device(1).then(|| {
            let one = open_device(1).expect("device 1");
            let other = one.new_stream().expect("stream of device 1");
            context.bind_to_thread().expect("device 0 current again");
            other
        });
        let (doubled, release) = pending_doubled(&gpu, N);
        let lifter = release_later(release, 3000);
        let blocked_at = std::time::Instant::now();
        let kind = if gpu.same_device(device) {
            "per-thread candle device"
        } else {
            "own-stream candle device"
        };
        let ms = move || blocked_at.elapsed().as_millis();
        // SAFETY: `doubled` is the only handle on its new storage.
        let dl = unsafe { dlpack_candle::into_dlpack(doubled) }.expect("export");
        let exchange = hooks(&gpu);
        let at = dl.device();
        // The legacy default stream, named 1 and None.
        for value in [Some(1), None] {
            exchange
                .make_ready(at, parse_stream(at, value).expect("stream value"))
                .expect("handshake");
            if !still_blocked(&context.default_stream()) {
                failures.push(format!(
                    "{kind}, {value:?}: the legacy default stream does not wait for candle's \
                     work ({} ms after the block)",
                    ms()
                ));
            }
        }
        // A stream of its own.
        exchange
            .make_ready(
                at,
                parse_stream(at, Some(own.cu_stream() as i64)).expect("value"),
            )
            .expect("handshake");
        if !still_blocked(&own) {
            failures.push(format!(
                "{kind}: a consumer's own stream does not wait ({} ms after the block)",
                ms()
            ));
        }
        // The per-thread default stream of another thread.
        let (hooks2, context2) = (exchange.clone(), context.clone());
        let pending = finishes("per-thread consumer", move || {
            hooks2
                .make_ready(at, parse_stream(at, Some(2)).expect("value"))
                .expect("handshake");
            still_blocked(&context2.per_thread_stream())
        });
        if !pending {
            failures.push(format!(
                "{kind}: another thread's per-thread stream (2) does not wait ({} ms after the \
                 block)",
                ms()
            ));
        }
        // A stream of device 1 (a consumer on another GPU of the process asks for a device-0
        // tensor on its own stream).
        if let Some(other) = &device_1 {
            match parse_stream(at, Some(other.cu_stream() as i64))
                .and_then(|request| exchange.make_ready(at, request))
            {
                Ok(()) => {
                    if !still_blocked(other) {
                        failures.push(format!(
                            "{kind}: a device-1 stream does not wait ({} ms after the block)",
                            ms()
                        ));
                    }
                }
                Err(e) => println!("    (a device-1 stream for a device-0 tensor: {e})"),
            }
            context.bind_to_thread().expect("device 0 current again");
        }
        lifter.join().expect("lifter");
        let values = host_values_of::<f32>(dl, &gpu);
        if !values.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32) {
            failures.push("wrong values".into());
        }
        context
            .default_stream()
            .synchronize()
            .expect("legacy stream");
        own.synchronize().expect("own stream");
        if let Some(other) = device_1 {
            other.synchronize().expect("device-1 stream");
            context.bind_to_thread().expect("device 0 current again");
        }
        gpu.synchronize().expect("synchronize");
    }
    failures.check("make_ready");
}

fn stream_values_the_protocol_refuses_or_skips(device: &Device) {
    // `0` is refused by parse_stream (documented); `-1` asks for no synchronisation, which
    // must not fail nor leave anything behind. And hooks for a non-CUDA device: refused.
    let dl = dlpack_candle::to_dlpack(&arange(4, device)).expect("copy");
    let at = dl.device();
    assert!(parse_stream(at, Some(0)).is_err(), "stream 0 is refused");
    let exchange = hooks(device);
    exchange
        .make_ready(at, parse_stream(at, Some(-1)).expect("-1"))
        .expect("no synchronisation asked");
    let consumer = exchange.consumer_stream(at).expect("consumer stream");
    assert!(consumer > 2, "its own stream: {consumer}");
    // Its own stream as the consumer: nothing to order (one stream), nothing to fail.
    exchange
        .make_ready(at, parse_stream(at, Some(consumer)).expect("value"))
        .expect("its own stream");
    assert_eq!(host_values_of::<f32>(dl, device), [0.0, 1.0, 2.0, 3.0]);
    match dlpack_candle::cuda::hooks(&Device::Cpu) {
        Err(CandleError::Device { .. }) => {}
        Err(e) => panic!("hooks of the CPU: {e}"),
        Ok(_) => panic!("hooks of the CPU device"),
    }
    // Each candle device keeps its own exchange stream, the same on every thread.
    let other = Device::new_cuda_with_stream(0).expect("own stream");
    let mine = hooks(&other).consumer_stream(at).expect("stream");
    assert_ne!(mine, consumer, "two candle devices, one exchange stream");
    let there = finishes("hooks elsewhere", move || {
        hooks(&other).consumer_stream(at).expect("stream")
    });
    assert_eq!(there, mine);
}

fn to_dlpack_of_pending_strided_work_has_no_host_wait_and_orders_the_consumer(device: &Device) {
    // "None of this waits on the host": a copy of a strided view of pending work is queued,
    // not waited for, and a consumer that makes its stream ready waits for it.
    const N: usize = 1 << 12;
    for gpu in [
        device.clone(),
        Device::new_cuda_with_stream(0).expect("own stream"),
    ] {
        let stream = gpu.as_cuda_device().expect("cuda").cuda_stream();
        let consumer = open_device(0)
            .expect("device 0")
            .new_stream()
            .expect("consumer");
        let (doubled, release) = pending_doubled(&gpu, N);
        let lifter = release_later(release, 1500);
        let view = doubled
            .reshape((64, N / 64))
            .and_then(|t| t.t())
            .and_then(|t| t.narrow(0, 1, 8))
            .expect("view");
        let started = std::time::Instant::now();
        let copy = dlpack_candle::to_dlpack(&view).expect("copy");
        assert!(
            still_blocked(&stream) && started.elapsed() < Duration::from_millis(1000),
            "to_dlpack waited on the host for candle's blocked stream"
        );
        drop((view, doubled));
        let at = copy.device();
        hooks(&gpu)
            .make_ready(
                at,
                parse_stream(at, Some(consumer.cu_stream() as i64)).expect("v"),
            )
            .expect("handshake");
        assert!(
            still_blocked(&consumer),
            "the consumer does not wait for the copy"
        );
        lifter.join().expect("lifter");
        let values = host_values_of::<f32>(copy, &gpu);
        let expected: Vec<f32> = (0..8)
            .flat_map(|r| (0..64).map(move |c| 2.0 * (c * (N / 64) + 1 + r) as f32))
            .collect();
        assert_eq!(values, expected);
        consumer.synchronize().expect("consumer");
        gpu.synchronize().expect("synchronize");
    }
}

fn an_own_stream_device_shared_by_threads_orders_exports_and_reclaims(_device: &Device) {
    // A candle device on a stream of its own means the same stream on every thread: work
    // queued on one thread, exported on another, handed to a consumer there and reclaimed on
    // a third, is ordered by the exchange stream alone.
    const N: usize = 1 << 12;
    let gpu = Device::new_cuda_with_stream(0).expect("own stream");
    // Made before the block (cudarc's `new_stream` may synchronise the context).
    let consumer = open_device(0)
        .expect("device 0")
        .new_stream()
        .expect("consumer");
    let (doubled, release) = {
        let gpu = gpu.clone();
        finishes("queue on thread B", move || {
            let (t, r) = pending_doubled(&gpu, N);
            (t, r)
        })
    };
    let lifter = release_later(release, 1500);
    let gpu_a = gpu.clone();
    let (dl, waited) = finishes("export on thread A", move || {
        let view = doubled
            .reshape((2, N / 2))
            .and_then(|t| t.t())
            .expect("view");
        // SAFETY: `doubled`'s storage is reachable only through `view`, which moves in.
        let dl = unsafe { dlpack_candle::into_dlpack(view) }.expect("export");
        let at = dl.device();
        hooks(&gpu_a)
            .make_ready(
                at,
                parse_stream(at, Some(consumer.cu_stream() as i64)).expect("v"),
            )
            .expect("handshake");
        let waited = still_blocked(&consumer);
        consumer.synchronize().expect("consumer");
        (dl, waited)
    });
    assert!(
        waited,
        "a consumer on thread A does not wait for thread B's work"
    );
    let gpu_c = gpu.clone();
    let values = finishes("reclaim on thread C", move || {
        let (t, transfer) = dlpack_candle::into_owned_on(dl, &gpu_c, CopyMode::Never)
            .unwrap_or_else(|r| panic!("reclaim: {}", r.error));
        assert_eq!(transfer, Transfer::Reclaimed);
        t.contiguous()
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .expect("values")
    });
    lifter.join().expect("lifter");
    let expected: Vec<f32> = (0..N / 2)
        .flat_map(|c| [2.0 * c as f32, 2.0 * (N / 2 + c) as f32])
        .collect();
    assert_eq!(values, expected);
    gpu.synchronize().expect("synchronize");
}

/// A raw driver copy of `values` to device address `target` (no cudarc event tracking on the
/// target), queued on `producer` behind a block; the source (to keep until the producer's
/// stream is synchronised) and the release. The write is visible to nobody but through a
/// handshake on `producer`.
fn pending_raw_write<T: DeviceRepr + Copy>(
    producer: &Arc<CudaStream>,
    target: usize,
    values: &[T],
) -> (CudaSlice<T>, Sender<()>) {
    let source = producer.clone_htod(values).expect("source");
    producer.synchronize().expect("uploaded");
    let release = block(producer);
    let (src, guard) = source.device_ptr(producer);
    // SAFETY: the target is a live allocation of at least the source's bytes that the caller
    // keeps until the copy ran; the source is returned to be kept as long.
    unsafe {
        result::memcpy_dtod_async(
            target as sys::CUdeviceptr,
            src,
            std::mem::size_of_val(values),
            producer.cu_stream(),
        )
    }
    .expect("queued raw write");
    drop(guard);
    (source, release)
}

fn imports_ready_on_the_exchange_stream_only_are_ordered_in_an_own_stream_device(_device: &Device) {
    // The producer writes behind cudarc's back (a raw copy on its own stream, behind a block)
    // and only makes the write ready on the consumer's exchange stream, as the handshake has
    // it. The import into a candle device with its own stream must see the write, whatever
    // layout makes it copy, gather or gather through another type.
    const N: usize = 1 << 12;
    let gpu = Device::new_cuda_with_stream(0).expect("own stream");
    let exchange = hooks(&gpu);
    let context = open_device(0).expect("device 0");
    let producer = context.new_stream().expect("producer");
    // Kernels loaded, everything that may wait on the host done.
    for dtype in [DType::F32, DType::I16] {
        let t = Tensor::zeros((4, 2), dtype, &gpu).expect("zeros");
        let _ = dlpack_candle::to_dlpack(&t.t().expect("t")).expect("warm");
        // SAFETY: nothing writes `t`.
        let dl = unsafe { dlpack_candle::into_dlpack(t.t().expect("t")) }.expect("lent");
        let _ = dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Always).expect("warm gather");
    }
    gpu.synchronize().expect("ready");
    fn handshake(tensor: &ManagedTensor, exchange: &CudaHooks, producer: &Arc<CudaStream>) {
        let value = exchange
            .consumer_stream(tensor.device())
            .expect("consumer stream");
        CudaHooks::new(producer.clone())
            .expect("producer hooks")
            .make_ready(
                tensor.device(),
                parse_stream(tensor.device(), Some(value)).expect("value"),
            )
            .expect("handshake");
    }
    // f32: compact and transposed.
    let values = iota(N);
    for (what, shape, strides) in [
        ("compact", [N / 4, 4], [4isize, 1]),
        ("transposed", [4, N / 4], [1, 4]),
    ] {
        let target = producer.alloc_zeros::<f32>(N).expect("zeroed");
        producer.synchronize().expect("zeroed");
        let buffer = CudaBuffer::new(target);
        let (source, release) = pending_raw_write(&producer, buffer.device_address(), &values);
        let tensor = ManagedTensor::export(
            CudaTensor::strided(buffer, &shape, &strides, 0).expect("layout"),
        )
        .expect("export");
        handshake(&tensor, &exchange, &producer);
        let lifter = release_later(release, 300);
        let (t, _) = dlpack_candle::into_owned_on(tensor, &gpu, CopyMode::IfNeeded)
            .unwrap_or_else(|r| panic!("{what}: {}", r.error));
        lifter.join().expect("lifter");
        let found = t
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .expect("values");
        let expected = gather(&values, &shape, &strides, 0);
        assert!(
            found == expected,
            "{what}: the import did not wait for the exchange stream (first: {:?})",
            &found[..4]
        );
        producer.synchronize().expect("producer");
        drop(source);
    }
    // i16, transposed: gathered through a same-width type.
    let values: Vec<i16> = (0..N as i16).map(|i| i.wrapping_mul(7) - 3).collect();
    let target = producer.alloc_zeros::<i16>(N).expect("zeroed");
    producer.synchronize().expect("zeroed");
    let buffer = CudaBuffer::new(target);
    let (source, release) = pending_raw_write(&producer, buffer.device_address(), &values);
    let tensor = ManagedTensor::export(
        CudaTensor::strided(buffer, &[4, N / 4], &[1, 4], 0).expect("layout"),
    )
    .expect("export");
    handshake(&tensor, &exchange, &producer);
    let lifter = release_later(release, 300);
    let (t, _) = dlpack_candle::into_owned_on(tensor, &gpu, CopyMode::IfNeeded)
        .unwrap_or_else(|r| panic!("i16: {}", r.error));
    lifter.join().expect("lifter");
    let found = read_back::<i16>(&t, &gpu);
    assert!(
        found == gather(&values, &[4, N / 4], &[1, 4], 0),
        "i16: the import did not wait for the exchange stream (first: {:?})",
        &found[..4]
    );
    producer.synchronize().expect("producer");
    drop(source);
    gpu.synchronize().expect("synchronize");
}

fn a_moved_buffer_written_behind_cudarcs_back_waits_for_the_exchange_stream(device: &Device) {
    // A bare CudaBuffer (moved, no host wait) whose pending write is on a stream other than
    // its own, unknown to cudarc's event tracking, made ready on the exchange stream by the
    // handshake: candle's first use of the moved memory must come after it ("an import ...
    // makes the candle device's stream wait for it first, whatever it then does").
    const N: usize = 1 << 12;
    for gpu in [
        device.clone(),
        Device::new_cuda_with_stream(0).expect("own stream"),
    ] {
        let exchange = hooks(&gpu);
        arange(4, &gpu).affine(2.0, 0.0).expect("kernel loaded");
        gpu.synchronize().expect("ready");
        let context = open_device(0).expect("device 0");
        let home = context.new_stream().expect("the buffer's own stream");
        let writer = context.new_stream().expect("the producer's writing stream");
        let target = home.alloc_zeros::<f32>(N).expect("zeroed");
        home.synchronize().expect("zeroed");
        let values = iota(N);
        let buffer = CudaBuffer::new(target);
        let (source, release) = pending_raw_write(&writer, buffer.device_address(), &values);
        let dl = ManagedTensor::export(buffer).expect("export");
        let value = exchange
            .consumer_stream(dl.device())
            .expect("consumer stream");
        CudaHooks::new(writer.clone())
            .expect("writer hooks")
            .make_ready(
                dl.device(),
                parse_stream(dl.device(), Some(value)).expect("v"),
            )
            .expect("handshake");
        let lifter = release_later(release, 500);
        let (t, transfer) = dlpack_candle::into_owned_on(dl, &gpu, CopyMode::Never)
            .unwrap_or_else(|r| panic!("{}", r.error));
        assert_eq!(transfer, Transfer::Moved);
        let doubled = t.affine(2.0, 0.0).expect("candle reads the moved memory");
        let found = doubled.to_vec1::<f32>().expect("values");
        lifter.join().expect("lifter");
        assert!(
            found.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32),
            "candle read the moved memory before the write made ready on the exchange stream \
             (first: {:?})",
            &found[..4]
        );
        writer.synchronize().expect("writer");
        drop(source);
        drop(t);
        gpu.synchronize().expect("synchronize");
    }
}

fn a_consumers_write_to_a_copy_made_ready_on_the_exchange_stream_is_seen_after_reclaim(
    device: &Device,
) {
    // A `to_dlpack` copy is writable; its consumer writes it on a stream of its own (behind
    // cudarc's back, behind a block), hands it back with the handshake on the exchange stream
    // (as a producer would), and candle reclaims it: candle's first use, on whatever thread,
    // must come after the write.
    const N: usize = 1 << 12;
    for gpu in [
        device.clone(),
        Device::new_cuda_with_stream(0).expect("own stream"),
    ] {
        let exchange = hooks(&gpu);
        arange(4, &gpu).affine(2.0, 0.0).expect("kernel loaded");
        let t = Tensor::zeros(N, DType::F32, &gpu).expect("zeros");
        let copy = dlpack_candle::to_dlpack(&t).expect("copy");
        gpu.synchronize().expect("ready");
        let writer = open_device(0)
            .expect("device 0")
            .new_stream()
            .expect("writer");
        let values = iota(N);
        let (source, release) = pending_raw_write(&writer, copy.data_ptr().addr(), &values);
        let value = exchange
            .consumer_stream(copy.device())
            .expect("consumer stream");
        CudaHooks::new(writer.clone())
            .expect("writer hooks")
            .make_ready(
                copy.device(),
                parse_stream(copy.device(), Some(value)).expect("v"),
            )
            .expect("handshake");
        let lifter = release_later(release, 500);
        let gpu_there = gpu.clone();
        let found = finishes("reclaim and read on another thread", move || {
            let (back, transfer) = dlpack_candle::into_owned_on(copy, &gpu_there, CopyMode::Never)
                .unwrap_or_else(|r| panic!("reclaim: {}", r.error));
            assert_eq!(transfer, Transfer::Reclaimed);
            back.affine(2.0, 0.0)
                .and_then(|d| d.to_vec1::<f32>())
                .expect("values")
        });
        lifter.join().expect("lifter");
        assert!(
            found.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32),
            "candle read the reclaimed copy before its consumer's write (first: {:?})",
            &found[..4]
        );
        writer.synchronize().expect("writer");
        drop(source);
        gpu.synchronize().expect("synchronize");
    }
}

fn pending_copies_and_moved_buffers_dropped_on_other_threads_are_freed_after_candles_work(
    device: &Device,
) {
    // Memory the crate made or took over, with candle's work on it still queued behind a
    // block, dropped on a thread without a context: a to_dlpack copy whose copy kernel has not
    // run (dropped unread, and reclaimed then dropped), and a moved buffer candle still reads.
    // The free must come after that work: the stand-in refuses a kernel on freed memory.
    const N: usize = 1 << 12;
    for gpu in [
        device.clone(),
        Device::new_cuda_with_stream(0).expect("own stream"),
    ] {
        let stream = gpu.as_cuda_device().expect("cuda").cuda_stream();
        // Uploaded before the block: the upload waits on the host, on the legacy default
        // stream, which also waits for the per-thread stream of candle's default device.
        let buffer = CudaBuffer::new(upload(0, &iota(N)));
        let (doubled, release) = pending_doubled(&gpu, N);
        let view = doubled
            .reshape((2, N / 2))
            .and_then(|t| t.t())
            .expect("view");
        // Unread: the copy kernel (queued) writes memory the drop frees.
        let unread = dlpack_candle::to_dlpack(&view).expect("copy");
        // Reclaimed, then read by candle (queued) and dropped.
        let reclaimed = dlpack_candle::to_dlpack(&view).expect("copy");
        let (reclaimed, _) = dlpack_candle::into_owned_on(reclaimed, &gpu, CopyMode::Never)
            .unwrap_or_else(|r| panic!("reclaim: {}", r.error));
        let from_reclaimed = reclaimed.affine(1.0, 1.0).expect("queued read");
        // A moved buffer that candle reads (queued).
        let (moved, transfer) = dlpack_candle::into_owned_on(
            ManagedTensor::export(buffer).expect("export"),
            &gpu,
            CopyMode::Never,
        )
        .unwrap_or_else(|r| panic!("move: {}", r.error));
        assert_eq!(transfer, Transfer::Moved);
        let from_moved = moved.affine(3.0, 0.0).expect("queued read");
        drop((view, doubled));
        assert!(still_blocked(&stream), "the block was lifted early");
        finishes("drops on a context-less thread", move || {
            drop(unread);
            drop(reclaimed);
            drop(moved);
        });
        assert!(still_blocked(&stream), "a drop waited on the host?");
        release.send(()).expect("release");
        let a = from_reclaimed
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .expect("values");
        let b = from_moved.to_vec1::<f32>().expect("values");
        let expected: Vec<f32> = (0..N / 2)
            .flat_map(|c| [2.0 * c as f32 + 1.0, 2.0 * (N / 2 + c) as f32 + 1.0])
            .collect();
        assert_eq!(
            a, expected,
            "the reclaimed copy was freed before candle read it"
        );
        assert!(
            b.iter().enumerate().all(|(i, &v)| v == 3.0 * i as f32),
            "the moved buffer was freed before candle read it"
        );
        gpu.synchronize().expect("synchronize");
    }
}

fn buffers_of_default_per_thread_and_candles_own_streams_move_and_free_cleanly(device: &Device) {
    // Bare buffers whose slices live on the streams a caller is most likely to have at hand:
    // the legacy default stream, this thread's per-thread stream (waited for when wrapped),
    // and candle's own stream of the target device. Each moves (Never), is computed on, lent
    // out and reclaimed, and dropped on a thread without a context: values right, nothing
    // refused or leaked. (candle's in-place writes, `zero_set` and `slice_set`, use kernels
    // the stand-in does not model: const_set_*, copy2d_*.)
    const N: usize = 1 << 10;
    let own = Device::new_cuda_with_stream(0).expect("own stream");
    for gpu in [device.clone(), own] {
        hooks(&gpu);
        let context = open_device(0).expect("device 0");
        let streams: Vec<(&str, Arc<CudaStream>)> = vec![
            ("legacy default", context.default_stream()),
            ("per-thread default", context.per_thread_stream()),
            (
                "candle's own",
                gpu.as_cuda_device().expect("cuda").cuda_stream(),
            ),
        ];
        for (what, stream) in streams {
            let slice = stream.clone_htod(&iota(N)).expect("upload");
            // No synchronisation: the upload is pending on its own stream when wrapped.
            let buffer = CudaBuffer::new(slice);
            let address = buffer.device_address();
            let (t, transfer) = dlpack_candle::into_owned_on(
                ManagedTensor::export(buffer).expect("export"),
                &gpu,
                CopyMode::Never,
            )
            .unwrap_or_else(|r| panic!("{what}: {}", r.error));
            assert_eq!(transfer, Transfer::Moved, "{what}");
            assert_eq!(address_of(&t), address, "{what}");
            let doubled = t.affine(2.0, 0.0).expect("candle op");
            // SAFETY: nothing writes `t`'s storage from here on.
            let lent = unsafe { dlpack_candle::into_dlpack(t) }.expect("lent");
            let (back, transfer) = dlpack_candle::into_owned_on(lent, &gpu, CopyMode::Never)
                .unwrap_or_else(|r| panic!("{what}: {}", r.error));
            assert_eq!(transfer, Transfer::Reclaimed, "{what}");
            let tripled = back.affine(3.0, 0.0).expect("candle op");
            finishes("drop elsewhere", move || drop(back));
            let d = doubled.to_vec1::<f32>().expect("values");
            assert!(
                d.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32),
                "{what}: candle read the moved memory before its upload (first: {:?})",
                &d[..4]
            );
            let t3 = tripled.to_vec1::<f32>().expect("values");
            assert!(
                t3.iter().enumerate().all(|(i, &v)| v == 3.0 * i as f32),
                "{what}: wrong values after the round trip (first: {:?})",
                &t3[..6]
            );
        }
        gpu.synchronize().expect("synchronize");
        context.default_stream().synchronize().expect("legacy");
    }
}
