//! Edge cases: layouts that safe candle code can build but that reach past their storage, dtype
//! tables, read-only owners, candle writable again after every failure path, and pointer
//! identity of the zero-copy claims. (From a review of the crate; each test asserts the documented
//! behaviour.)

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::op::BackpropOp;
use candle_core::{CpuStorage, DType, Device, IndexOp, Storage, Tensor};
use common::{Counted, Drops, finishes, lend, storage_address};
use dlpack_candle::{CandleError, Float8E8M0, candle_dtype, into_owned, to_dlpack, to_owned};
use dlpack_core::ffi::{DLManagedTensorVersioned, DLTensor};
use dlpack_core::{
    BorrowedTensor, CopyMode, CopyReason, DataType, DataTypeCode, Error, Flags, ManagedTensor,
    Transfer, Version,
};

type Result = std::result::Result<(), Box<dyn std::error::Error>>;

/// `t` can be written in place: `zero_set` finishes (nothing holds candle's lock on it).
fn writable_again(t: &Tensor) {
    let t = t.clone();
    finishes("zero_set (is candle's lock still held?)", move || {
        t.zero_set()
    })
    .expect("zero_set failed");
}

// ---------------------------------------------------------------------------------------------
// Export: candle layouts that safe candle code can build but that do not fit their storage.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_tensor_whose_shape_outruns_its_storage_is_refused_not_read_out_of_bounds() -> Result {
    // `Tensor::from_storage` is safe and public; candle trusts the caller ("Ensure the shape is
    // compatible"). The export names the storage Vec as its allocation, so it must refuse.
    for dtype in [DType::F32, DType::U8, DType::F8E8M0] {
        let storage = match dtype {
            DType::F32 => CpuStorage::F32(vec![1.0, 2.0]),
            DType::U8 => CpuStorage::U8(vec![1, 2]),
            _ => CpuStorage::F8E8M0(vec![127, 128]),
        };
        let t = Tensor::from_storage(Storage::Cpu(storage), (2, 4), BackpropOp::none(), false);
        let err = lend(&t).expect_err("a layout past the storage must be refused");
        assert!(matches!(err, CandleError::DLPack(_)), "{dtype:?}: {err}");
        // The copy reads through the same description, and is refused the same way.
        let err = to_dlpack(&t).expect_err("a layout past the storage cannot be copied");
        assert!(matches!(err, CandleError::DLPack(_)), "{dtype:?}: {err}");
        assert!(lend(&t).is_err());
    }
    Ok(())
}

#[test]
fn unfold_with_a_zero_step_is_refused_cleanly() -> Result {
    // candle's `unfold` divides by the step in f32: a zero step makes a size of usize::MAX
    // (stride 0), which does not fit DLPack's i64.
    let t = Tensor::arange(0f32, 4., &Device::Cpu)?;
    let u = t.unfold(0, 2, 0)?;
    let err = lend(&u).expect_err("a size of usize::MAX cannot be exported");
    assert!(
        matches!(err, CandleError::DLPack(Error::Overflow { .. })),
        "{err}"
    );
    writable_again(&t);
    Ok(())
}

#[test]
fn unfold_sliding_windows_export_their_overlapping_layout() -> Result {
    let t = Tensor::arange(0i64, 10, &Device::Cpu)?;
    let windows = t.unfold(0, 4, 3)?; // [[0..4], [3..7], [6..10]]
    let dl = lend(&windows)?;
    assert_eq!((dl.shape(), dl.strides()), (&[3i64, 4][..], &[3i64, 1][..]));
    assert_eq!(
        dl.view::<i64>()?.to_vec().unwrap(),
        windows.flatten_all()?.to_vec1::<i64>()?
    );
    let (copied, _) = into_owned(dl, CopyMode::Always)?;
    assert_eq!(
        copied.to_vec2::<i64>()?,
        [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    );
    Ok(())
}

#[test]
#[cfg_attr(miri, ignore = "16 MiB of u8, too slow for Miri")]
fn unfold_rounding_past_the_storage_is_refused_not_read_out_of_bounds() -> Result {
    // candle computes the window count in f32; at 2^24 + 3 elements it rounds up past the
    // storage. Whatever candle makes, an export must never reach outside the storage Vec: it
    // either describes elements inside it or fails.
    let n = (1usize << 24) + 3;
    let t = Tensor::from_vec(vec![7u8; n], n, &Device::Cpu)?;
    let u = t.unfold(0, 1, 1)?;
    let (dims, strides, offset) = (
        u.dims().to_vec(),
        u.stride().to_vec(),
        u.layout().start_offset(),
    );
    let reach = offset + (dims[0].max(1) - 1) * strides[0] + (dims[1].max(1) - 1) * strides[1];
    eprintln!("unfold: dims {dims:?} strides {strides:?} offset {offset}, reach {reach} of {n}");
    match lend(&u) {
        Ok(dl) => {
            assert!(
                reach < n,
                "exported {dims:?}/{strides:?} reaching element {reach} of {n}"
            );
            drop(dl);
        }
        Err(err) => {
            assert!(reach >= n, "refused an in-bounds layout: {err}");
            assert!(matches!(err, CandleError::DLPack(_)), "{err}");
        }
    }
    writable_again(&t);
    Ok(())
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot fail a 16 TiB allocation")]
fn a_broadcast_too_large_to_copy_fails_cleanly() -> Result {
    // 2^42 f32 elements on one stored element: exportable, but no copy fits in memory.
    let base = Tensor::new(&[1.5f32], &Device::Cpu)?;
    let huge = base.broadcast_as((1usize << 40, 4))?;
    let dl = lend(&huge)?;
    assert_eq!(dl.strides(), &[0, 0]);
    assert_eq!(dl.view::<f32>()?.get(&[(1 << 40) - 1, 3]), Some(&1.5));
    let refused = into_owned(dl, CopyMode::Always).expect_err("16 TiB cannot be allocated");
    assert!(
        matches!(
            refused.error,
            CandleError::DLPack(Error::OutOfMemory { .. })
        ),
        "{refused}"
    );
    assert_eq!(
        refused.value.shape(),
        [1 << 40, 4],
        "the failed copy gives it back"
    );
    drop(refused);
    let err = to_dlpack(&huge).expect_err("16 TiB cannot be allocated");
    assert!(
        matches!(err, CandleError::DLPack(Error::OutOfMemory { .. })),
        "{err}"
    );
    writable_again(&base);
    // Reclaimed, it is the same broadcast candle tensor.
    let (back, transfer) = into_owned(lend(&huge)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(back.layout(), huge.layout());
    Ok(())
}

#[test]
fn a_broadcast_whose_element_count_overflows_is_refused_without_a_panic() -> Result {
    let base = Tensor::new(2u32, &Device::Cpu)?;
    let huge = base.broadcast_as((1usize << 62, 1usize << 62))?;
    for export in [lend, to_dlpack] {
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| export(&huge).map(|_| ())));
        let result = result.expect("export panicked");
        let err = result.expect_err("2^124 elements cannot be described");
        assert!(matches!(err, CandleError::DLPack(_)), "{err}");
    }
    writable_again(&base);
    Ok(())
}

#[test]
fn empty_and_zero_d_views_at_the_very_end_of_the_storage() -> Result {
    let t = Tensor::arange(0f64, 6., &Device::Cpu)?;
    // No elements, offset == the storage length.
    let end = t.narrow(0, 6, 0)?;
    let dl = lend(&end)?;
    // The start offset is folded into the data pointer, as NumPy and PyTorch export.
    assert_eq!((dl.shape(), dl.byte_offset()), (&[0i64][..], 0));
    assert_eq!(dl.data_ptr().addr(), storage_address(&t) + 48);
    assert!(dl.view::<f64>()?.to_vec().unwrap().is_empty());
    let (copied, _) = into_owned(dl, CopyMode::Always)?;
    assert_eq!(copied.dims(), &[0]);
    // 0-d, the last element.
    let last = t.i(5)?;
    let dl = lend(&last)?;
    assert_eq!((dl.shape(), dl.byte_offset()), (&[] as &[i64], 0));
    assert_eq!(dl.data_ptr().addr(), storage_address(&t) + 40);
    assert_eq!(dl.view::<f64>()?.get(&[]), Some(&5.0));
    let (copied, transfer) = into_owned(dl, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(copied.to_scalar::<f64>()?, 5.0);
    let (copied, _) = into_owned(lend(&last)?, CopyMode::Always)?;
    assert_eq!(copied.dims(), &[] as &[usize]);
    assert_eq!(copied.to_scalar::<f64>()?, 5.0);
    // A tensor with no storage at all.
    let none = Tensor::zeros((0, 3), DType::BF16, &Device::Cpu)?;
    let dl = lend(&none)?;
    assert_eq!(dl.shape(), &[0, 3]);
    let (copied, _) = into_owned(dl, CopyMode::Always)?;
    assert_eq!(copied.dims(), &[0, 3]);
    writable_again(&t);
    Ok(())
}

#[test]
fn unsqueezed_and_size_one_axes_with_large_strides_export_and_copy() -> Result {
    let t = Tensor::arange(0u32, 12, &Device::Cpu)?.reshape((3, 4))?;
    for v in [
        t.i((2.., ..))?,                // (1, 4) at offset 8
        t.i((.., 3..))?,                // (3, 1) at offset 3
        t.i((2.., 3..))?.unsqueeze(0)?, // (1, 1, 1) at offset 11
        t.t()?.unsqueeze(1)?,           // (4, 1, 3)
    ] {
        let dl = lend(&v)?;
        assert_eq!(
            dl.view::<u32>()?.to_vec().unwrap(),
            v.flatten_all()?.to_vec1::<u32>()?,
            "{:?}",
            v.layout()
        );
        let (copied, _) = into_owned(lend(&v)?, CopyMode::Always)?;
        assert_eq!(
            copied.flatten_all()?.to_vec1::<u32>()?,
            v.flatten_all()?.to_vec1::<u32>()?
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// dtypes: the value tables behind the DLPack codes.
// ---------------------------------------------------------------------------------------------

/// DLPack's float8_e4m3fn (OCP FN): bias 7, no infinities, only S.1111.111 is NaN.
fn e4m3fn(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((b >> 3) & 0xF);
    let man = f32::from(b & 7);
    if exp == 15 && b & 7 == 7 {
        return f32::NAN;
    }
    // 2^k built from its bits, exact (`powi` may round, and does under Miri).
    let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    if exp == 0 {
        return sign * man / 8.0 * pow2(-6);
    }
    sign * (1.0 + man / 8.0) * pow2(exp - 7)
}

#[test]
fn every_f8e4m3_byte_means_the_same_in_candle_and_in_float8_e4m3fn() -> Result {
    let bytes: Vec<float8::F8E4M3> = (0..=255u8).map(float8::F8E4M3::from_bits).collect();
    let t = Tensor::from_vec(bytes, 256, &Device::Cpu)?;
    let candle_values = t.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    let dl = lend(&t)?;
    assert_eq!(dl.dtype(), DataType::F8_E4M3FN);
    let view = dl.view::<float8::F8E4M3>()?;
    for b in 0..=255u8 {
        let want = e4m3fn(b);
        let through_dlpack = view.get(&[b as usize]).unwrap().to_bits();
        assert_eq!(through_dlpack, b);
        let got = candle_values[b as usize];
        assert!(
            (want.is_nan() && got.is_nan()) || want == got,
            "byte {b:#04x}: candle reads {got}, float8_e4m3fn means {want}"
        );
    }
    Ok(())
}

#[test]
fn every_e8m0_byte_is_its_power_of_two() {
    for b in 0..=255u8 {
        let got = Float8E8M0(b).to_f32();
        if b == 0xFF {
            assert!(got.is_nan());
        } else {
            let want = 2f64.powi(i32::from(b) - 127) as f32;
            assert_eq!(got, want, "byte {b}");
        }
    }
}

#[test]
fn a_malformed_float8_dtype_is_not_called_an_opaque_handle() {
    // float8_e4m3fn with 16 bits is not candle's F8E4M3; the message must not claim the code is
    // unknown to DLPack.
    let err = candle_dtype(DataType::new(DataTypeCode::FLOAT8_E4M3FN, 16, 1)).unwrap_err();
    assert!(
        matches!(
            err,
            CandleError::DLPack(dlpack_core::Error::UnsupportedBits { .. })
        ),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Import: moves, legacy owners, read-only owners.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_0_d_vec_producer_moves_into_a_candle_scalar() -> Result {
    let drops = Drops::default();
    let mut producer = Counted::new(vec![4.25f32], &drops);
    producer.shape = vec![];
    let address = producer.data.as_ptr().addr();
    let (imported, transfer) = into_owned(ManagedTensor::export(producer)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(imported.dims(), &[] as &[usize]);
    assert_eq!(storage_address(&imported), address);
    assert_eq!(imported.to_scalar::<f32>()?, 4.25);
    assert_eq!(drops.count(), 1);
    Ok(())
}

#[test]
fn size_one_axes_with_any_stride_still_move() -> Result {
    let drops = Drops::default();
    let mut producer = Counted::new(vec![1i64, 2, 3], &drops);
    producer.shape = vec![1, 3, 1];
    producer.strides = Some(vec![99, 1, 7]);
    let address = producer.data.as_ptr().addr();
    let (imported, transfer) = into_owned(ManagedTensor::export(producer)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(storage_address(&imported), address);
    assert_eq!(imported.dims(), &[1, 3, 1]);
    assert_eq!(imported.flatten_all()?.to_vec1::<i64>()?, [1, 2, 3]);
    Ok(())
}

#[test]
fn a_legacy_export_of_a_vec_moves_without_a_copy() -> Result {
    let data: Vec<half::f16> = (0..4).map(|i| half::f16::from_f32(i as f32)).collect();
    let address = data.as_ptr().addr();
    let raw = ManagedTensor::export(data)?.into_raw_legacy()?;
    // SAFETY: just exported, owned here.
    let dl = unsafe { ManagedTensor::from_raw_legacy(raw)? };
    let (imported, transfer) = into_owned(dl, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(storage_address(&imported), address);
    Ok(())
}

#[test]
fn a_read_only_owner_is_copied_never_moved() -> Result {
    let drops = Drops::default();
    let producer = Counted::new(vec![1.0f32, 2.0, 3.0], &drops);
    let address = producer.data.as_ptr().addr();
    let ro = ManagedTensor::export(producer)?.into_read_only();
    let refused = into_owned(ro, CopyMode::Never).unwrap_err();
    assert!(
        matches!(
            refused.error,
            CandleError::DLPack(Error::CopyRefused {
                reason: CopyReason::NotOwned
            })
        ),
        "{refused}"
    );
    let (imported, transfer) = into_owned(refused.value, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_ne!(storage_address(&imported), address);
    assert_eq!(drops.count(), 1);
    Ok(())
}

static RO_DELETES: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn ro_deleter(t: *mut DLManagedTensorVersioned) {
    RO_DELETES.fetch_add(1, Ordering::SeqCst);
    // SAFETY: made by `Box::into_raw` below.
    drop(unsafe { Box::from_raw(t) });
}

#[test]
fn a_read_only_foreign_tensor_is_copied_and_candle_writes_do_not_reach_it() -> Result {
    // Foreign read-only memory, owned by the test and outliving the tensor, which the import
    // below consumes (the deleter frees only the struct).
    let mut data = [1.0f32, 2.0, 3.0, 4.0];
    let mut shape = [4i64];
    let mut strides = [1i64];
    let managed = Box::new(DLManagedTensorVersioned {
        version: Version::CURRENT,
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(ro_deleter),
        flags: Flags::READ_ONLY.0,
        dl_tensor: DLTensor {
            data: data.as_mut_ptr().cast(),
            device: dlpack_core::Device::CPU,
            ndim: 1,
            dtype: DataType::F32,
            shape: shape.as_mut_ptr(),
            strides: strides.as_mut_ptr(),
            byte_offset: 0,
        },
    });
    let address = data.as_ptr().addr();
    // SAFETY: a well-formed tensor whose memory outlives it (it is consumed by `into_owned` below,
    // before `data`, `shape` and `strides` go).
    let dl = unsafe { ManagedTensor::from_raw(Box::into_raw(managed))? };
    assert!(dl.is_read_only());
    let (imported, transfer) = into_owned(dl, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_eq!(RO_DELETES.load(Ordering::SeqCst), 1);
    assert_ne!(storage_address(&imported), address);
    imported.one_set()?;
    assert_eq!(
        data,
        [1.0, 2.0, 3.0, 4.0],
        "candle wrote to read-only memory"
    );
    Ok(())
}

#[test]
fn a_lent_read_only_tensor_is_copied_and_candle_writes_do_not_reach_it() -> Result {
    let mut data = [1i32, 2, 3, 4, 5, 6];
    let mut shape = [2i64, 3];
    let mut strides = [3i64, 1];
    let t = DLTensor {
        data: data.as_mut_ptr().cast(),
        device: dlpack_core::Device::CPU,
        ndim: 2,
        dtype: DataType::I32,
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: 0,
    };
    // SAFETY: every pointer refers to a local that outlives the borrow.
    let lent = unsafe { BorrowedTensor::new(&t, Version::CURRENT, Flags::READ_ONLY)? };
    let copy = to_owned(&lent)?;
    drop(lent);
    copy.zero_set()?;
    assert_eq!(data, [1, 2, 3, 4, 5, 6]);
    Ok(())
}

#[test]
fn into_vec_never_takes_candle_storage() -> Result {
    let t = Tensor::arange(0f32, 4., &Device::Cpu)?;
    let address = storage_address(&t);
    let dl = lend(&t)?;
    let dl = dl
        .into_vec::<f32>()
        .expect_err("a candle export must not give its storage away");
    assert_eq!(dl.view::<f32>()?.to_vec().unwrap(), [0.0, 1.0, 2.0, 3.0]);
    drop(dl);
    assert_eq!(storage_address(&t), address);
    writable_again(&t);
    assert_eq!(t.to_vec1::<f32>()?, [0.0; 4]);
    Ok(())
}

#[test]
fn a_wrapped_candle_export_is_copied_not_reclaimed() -> Result {
    let base = Tensor::arange(0f32, 12., &Device::Cpu)?.reshape((3, 4))?;
    let strided = base.i((.., 1..3))?.t()?;
    let want = strided.flatten_all()?.to_vec1::<f32>()?;
    // Wrapped in another owner, candle's export is no longer reclaimable: a copy.
    let wrapped = ManagedTensor::export(lend(&strided)?)?;
    assert!(wrapped.is_read_only());
    let (imported, transfer) = into_owned(wrapped, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
    assert_eq!(imported.flatten_all()?.to_vec1::<f32>()?, want);
    writable_again(&base);
    // Refused, given back, dropped.
    let wrapped = ManagedTensor::export(lend(&base)?)?;
    let refused = into_owned(wrapped, CopyMode::Never).unwrap_err();
    let back = refused.value;
    assert_eq!(back.shape(), [3, 4]);
    drop(back);
    writable_again(&base);
    Ok(())
}

#[test]
fn an_export_reclaimed_on_another_thread_is_the_same_tensor() -> Result {
    let t = Tensor::arange(0i64, 6, &Device::Cpu)?;
    let dl = lend(&t)?;
    let (back, transfer) = std::thread::spawn(move || into_owned(dl, CopyMode::Never))
        .join()
        .expect("into_owned thread panicked")?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(storage_address(&back), storage_address(&t));
    drop(back);
    writable_again(&t);
    let copy = to_dlpack(&t)?;
    let address = copy.data_ptr().addr();
    let (back, transfer) = std::thread::spawn(move || into_owned(copy, CopyMode::Never))
        .join()
        .expect("into_owned thread panicked")?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(storage_address(&back), address);
    assert_eq!(back.to_vec1::<i64>()?, [0; 6]);
    Ok(())
}

#[test]
fn every_candle_dtype_round_trips_moved_exported_and_reclaimed_by_address() -> Result {
    fn round_trip<T>(values: Vec<T>) -> Result
    where
        T: dlpack_core::Element + candle_core::WithDType + PartialEq + std::fmt::Debug,
    {
        let address = values.as_ptr().addr();
        let want = values.clone();
        let (moved, transfer) = into_owned(ManagedTensor::export(values)?, CopyMode::Never)?;
        assert_eq!(transfer, Transfer::Moved);
        let t = moved.reshape((2, 2))?.t()?;
        let dl = lend(&t)?;
        assert_eq!(dl.data_ptr().addr(), address);
        assert_eq!(dl.view::<T>()?.as_ptr().addr(), address);
        let (back, transfer) = into_owned(dl, CopyMode::Never)?;
        assert_eq!(transfer, Transfer::Reclaimed);
        assert_eq!(storage_address(&back), address);
        let (copied, _) = into_owned(lend(&back)?, CopyMode::Always)?;
        assert_eq!(
            copied.flatten_all()?.to_vec1::<T>()?,
            [want[0], want[2], want[1], want[3]]
        );
        writable_again(&back);
        Ok(())
    }
    round_trip(vec![1u8, 2, 3, 4])?;
    round_trip(vec![1u32, 2, 3, 4])?;
    round_trip(vec![1i16, 2, 3, 4])?;
    round_trip(vec![1i32, 2, 3, 4])?;
    round_trip(vec![1i64, 2, 3, 4])?;
    round_trip([1.0f32, 2.0, 3.0, 4.0].map(half::bf16::from_f32).to_vec())?;
    round_trip([1.0f32, 2.0, 3.0, 4.0].map(half::f16::from_f32).to_vec())?;
    round_trip(vec![1.0f32, 2.0, 3.0, 4.0])?;
    round_trip(vec![1.0f64, 2.0, 3.0, 4.0])?;
    round_trip(
        [0x38u8, 0x40, 0x44, 0x48]
            .map(float8::F8E4M3::from_bits)
            .to_vec(),
    )?;
    Ok(())
}

#[test]
fn cuda_is_refused_before_any_storage_is_touched() {
    // Without candle's `cuda` feature no CUDA tensor can exist; the device constructor fails
    // cleanly and nothing in dlpack-candle is reached.
    assert!(Device::new_cuda(0).is_err());
}

#[test]
fn ranks_up_to_dlpacks_limit_export_and_a_higher_rank_is_refused() -> Result {
    let t = Tensor::new(&[9i32], &Device::Cpu)?;
    let high = t.reshape(vec![1usize; dlpack_core::MAX_NDIM])?;
    let dl = lend(&high)?;
    assert_eq!(dl.ndim(), dlpack_core::MAX_NDIM);
    let (copied, _) = into_owned(dl, CopyMode::Always)?;
    assert_eq!(copied.dims().len(), dlpack_core::MAX_NDIM);
    assert_eq!(copied.flatten_all()?.to_vec1::<i32>()?, [9]);
    let too_high = t.reshape(vec![1usize; dlpack_core::MAX_NDIM + 1])?;
    for export in [lend, to_dlpack] {
        let err = export(&too_high).expect_err("more dimensions than DLPack allows");
        assert!(
            matches!(err, CandleError::DLPack(Error::BadNdim { .. })),
            "{err}"
        );
    }
    writable_again(&t);
    Ok(())
}

#[test]
fn a_producer_that_gives_too_long_a_vec_moves_just_the_tensors_elements() -> Result {
    // A give_vec that hands over its whole Vec for a tensor over a prefix of it: into_vec keeps
    // exactly the tensor's elements (the Vec truncated), so candle takes them, at their address.
    let drops = Drops::default();
    let mut producer = Counted::new(vec![1u8, 2, 3], &drops);
    producer.shape = vec![2];
    let address = producer.data.as_ptr().addr();
    let (imported, transfer) = into_owned(ManagedTensor::export(producer)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(storage_address(&imported), address);
    assert_eq!(imported.to_vec1::<u8>()?, [1, 2]);
    assert_eq!(drops.count(), 1);
    Ok(())
}

/// A reporter that prints an error and then its sources (anyhow's `{:#}`) shows each message
/// once: the wrapped errors' messages are already part of `CandleError`'s own.
#[test]
fn wrapped_errors_are_transparent_in_the_source_chain() {
    use std::error::Error as _;
    let errors = [
        CandleError::from(Error::ReadOnly),
        CandleError::Candle(candle_core::Error::Msg("no such op".into()).context("in a test")),
    ];
    for error in errors {
        let shown = error.to_string();
        let mut source = error.source();
        while let Some(s) = source {
            let message = s.to_string();
            assert!(
                !shown.contains(&message),
                "'{message}' is shown again by the source chain of '{shown}'"
            );
            source = s.source();
        }
        assert!(
            shown.starts_with("DLPack: ") || shown.starts_with("candle: "),
            "{shown}"
        );
    }
}
