//! Importing DLPack tensors into candle: moved, reclaimed or copied, and said so.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{DType, Device, IndexOp, Tensor, WithDType};
use common::{Counted, Drops, Raw, lend, storage_address};
use dlpack_candle::{CandleError, Float8E8M0, into_owned, to_owned};
use dlpack_core::ffi::{DLManagedTensorVersioned, DLTensor};
use dlpack_core::{
    BorrowedTensor, CopyMode, CopyReason, DataType, DataTypeCode, Element, Error, Flags,
    ManagedTensor, Refused, Transfer, Version,
};

type Result = std::result::Result<(), Box<dyn std::error::Error>>;

/// `n` values 0, 1, 2, ... of `T`.
fn ramp<T: WithDType>(n: usize) -> Vec<T> {
    (0..n).map(|i| T::from_f64(i as f64)).collect()
}

fn moves_without_a_copy<T: Element + WithDType + PartialEq + std::fmt::Debug>() -> Result {
    let drops = Drops::default();
    let data = ramp::<T>(24);
    let address = data.as_ptr().addr();
    let mut producer = Counted::new(data, &drops);
    producer.shape = vec![2, 3, 4];
    let (t, transfer) = into_owned(ManagedTensor::export(producer)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(drops.count(), 1, "the emptied producer is dropped once");
    assert_eq!(
        (t.dtype(), t.dims()),
        (<T as WithDType>::DTYPE, &[2, 3, 4][..])
    );
    assert_eq!(
        storage_address(&t),
        address,
        "candle owns the producer's memory"
    );
    assert_eq!(t.flatten_all()?.to_vec1::<T>()?, ramp::<T>(24));
    Ok(())
}

#[test]
fn a_vec_of_every_candle_dtype_moves_into_candle_without_a_copy() -> Result {
    moves_without_a_copy::<u8>()?;
    moves_without_a_copy::<u32>()?;
    moves_without_a_copy::<i16>()?;
    moves_without_a_copy::<i32>()?;
    moves_without_a_copy::<i64>()?;
    moves_without_a_copy::<half::bf16>()?;
    moves_without_a_copy::<half::f16>()?;
    moves_without_a_copy::<f32>()?;
    moves_without_a_copy::<f64>()?;
    moves_without_a_copy::<float8::F8E4M3>()?;
    Ok(())
}

/// A strided candle export copied back into candle: a row-major gather with the same values.
fn copies_strided<T: Element + WithDType + PartialEq + std::fmt::Debug>() -> Result {
    let t = Tensor::from_vec(ramp::<T>(24), (2, 3, 4), &Device::Cpu)?
        .narrow(2, 1, 3)?
        .transpose(0, 1)?;
    let (copied, transfer) = into_owned(lend(&t)?, CopyMode::Always)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert!(copied.is_contiguous());
    assert_eq!(copied.dims(), t.dims());
    assert_eq!(
        copied.flatten_all()?.to_vec1::<T>()?,
        t.flatten_all()?.to_vec1::<T>()?
    );
    Ok(())
}

#[test]
fn a_strided_tensor_of_every_candle_dtype_copies_with_its_values() -> Result {
    copies_strided::<u8>()?;
    copies_strided::<u32>()?;
    copies_strided::<i16>()?;
    copies_strided::<i32>()?;
    copies_strided::<i64>()?;
    copies_strided::<half::bf16>()?;
    copies_strided::<half::f16>()?;
    copies_strided::<f32>()?;
    copies_strided::<f64>()?;
    copies_strided::<float8::F8E4M3>()?;
    Ok(())
}

#[test]
fn a_boxed_slice_moves_into_candle_without_a_copy() -> Result {
    let data: Box<[i32]> = vec![5, 6, 7].into_boxed_slice();
    let address = data.as_ptr().addr();
    let (imported, transfer) = into_owned(ManagedTensor::export(data)?, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(storage_address(&imported), address);
    assert_eq!(imported.to_vec1::<i32>()?, [5, 6, 7]);
    Ok(())
}

#[test]
fn float8_e8m0_bytes_move_into_a_candle_f8e8m0_tensor() -> Result {
    let data: Vec<Float8E8M0> = (125..131).map(Float8E8M0).collect();
    let address = data.as_ptr().addr();
    let (imported, transfer) = into_owned(ManagedTensor::export(data)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    let t = imported.reshape((2, 3))?;
    assert_eq!(t.dtype(), DType::F8E8M0);
    assert_eq!(storage_address(&t), address);
    // Back out through DLPack, transposed: the same bytes.
    let dl = lend(&t.t()?)?;
    let values: Vec<f32> = dl
        .view::<Float8E8M0>()?
        .iter()
        .map(|v| v.to_f32())
        .collect();
    assert_eq!(values, [0.25, 2.0, 0.5, 4.0, 1.0, 8.0]);
    // ... and copied back in, gathered into row-major order.
    let (copied, transfer) = into_owned(dl, CopyMode::Always)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_eq!(copied.dtype(), DType::F8E8M0);
    assert!(copied.is_contiguous());
    let dl = lend(&copied)?;
    let bytes: Vec<u8> = dl.view::<Float8E8M0>()?.iter().map(|v| v.0).collect();
    assert_eq!(bytes, [125, 128, 126, 129, 127, 130]);
    Ok(())
}

#[test]
fn a_tensor_exported_from_candle_comes_back_as_the_same_tensor() -> Result {
    let base = Tensor::arange(0i64, 24, &Device::Cpu)?.reshape((2, 3, 4))?;
    let strided = base.i((.., 1.., ..))?.transpose(0, 2)?;
    let raw = lend(&strided)?.into_raw()?; // as a C consumer would receive it
    // SAFETY: `raw` was just exported and is owned here.
    let dl = unsafe { ManagedTensor::from_raw(raw)? };
    let (t, transfer) = into_owned(dl, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert!(t.is_contiguous() == strided.is_contiguous());
    assert_eq!(t.layout(), strided.layout());
    assert_eq!(storage_address(&t), storage_address(&base));
    assert_eq!(
        t.flatten_all()?.to_vec1::<i64>()?,
        strided.flatten_all()?.to_vec1::<i64>()?
    );
    // Reclaimed, the export is over: candle may write in place again.
    base.zero_set()?;
    Ok(())
}

#[test]
fn shared_memory_is_copied_and_the_reason_is_reported() -> Result {
    let shared: Arc<[f64]> = vec![1.5, 2.5, 3.5].into();
    let (imported, transfer) =
        into_owned(ManagedTensor::export(shared.clone())?, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_ne!(storage_address(&imported), shared.as_ptr().addr());
    assert_eq!(imported.to_vec1::<f64>()?, [1.5, 2.5, 3.5]);
    assert_eq!(
        Arc::strong_count(&shared),
        1,
        "the exported clone was dropped"
    );
    Ok(())
}

#[test]
fn a_strided_tensor_is_gathered_into_row_major_candle_storage() -> Result {
    let drops = Drops::default();
    // A 3 x 2 transposed view of [[0, 1, 2], [3, 4, 5]]: [[0, 3], [1, 4], [2, 5]].
    let mut producer = Counted::new(vec![0u32, 1, 2, 3, 4, 5], &drops);
    producer.shape = vec![3, 2];
    producer.strides = Some(vec![1, 3]);
    let (imported, transfer) = into_owned(ManagedTensor::export(producer)?, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
    assert_eq!(drops.count(), 1);
    assert!(imported.is_contiguous());
    assert_eq!(imported.to_vec2::<u32>()?, [[0, 3], [1, 4], [2, 5]]);
    Ok(())
}

#[test]
fn a_producer_that_keeps_its_vec_is_copied() -> Result {
    let drops = Drops::default();
    let mut producer = Counted::new(vec![1i16, 2, 3, 4], &drops);
    producer.gives = false;
    let address = producer.data.as_ptr().addr();
    let (imported, transfer) = into_owned(ManagedTensor::export(producer)?, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_ne!(storage_address(&imported), address);
    assert_eq!(imported.to_vec1::<i16>()?, [1, 2, 3, 4]);
    assert_eq!(
        drops.count(),
        1,
        "the producer is deleted once, after the copy"
    );
    Ok(())
}

#[test]
fn always_copies_even_a_vec_that_could_move() -> Result {
    let drops = Drops::default();
    let producer = Counted::new(vec![1.0f32, 2.0], &drops);
    let address = producer.data.as_ptr().addr();
    let (imported, transfer) = into_owned(ManagedTensor::export(producer)?, CopyMode::Always)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert!(transfer.is_copy());
    assert_ne!(storage_address(&imported), address);
    assert_eq!(imported.to_vec1::<f32>()?, [1.0, 2.0]);
    assert_eq!(drops.count(), 1);

    // A candle export is copied too, not reclaimed.
    let t = Tensor::new(&[7u8, 8, 9], &Device::Cpu)?;
    let (copied, transfer) = into_owned(lend(&t)?, CopyMode::Always)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_ne!(storage_address(&copied), storage_address(&t));
    assert_eq!(copied.to_vec1::<u8>()?, [7, 8, 9]);
    Ok(())
}

#[test]
fn never_refuses_a_copy_and_gives_the_tensor_back() -> Result {
    let drops = Drops::default();
    let mut producer = Counted::new(vec![1i64, 2, 3, 4], &drops);
    producer.shape = vec![2, 2];
    producer.strides = Some(vec![1, 2]);
    let refused = into_owned(ManagedTensor::export(producer)?, CopyMode::Never).unwrap_err();
    assert!(matches!(
        refused.error,
        CandleError::DLPack(Error::CopyRefused {
            reason: CopyReason::Layout
        })
    ));
    assert_eq!(
        refused.to_string(),
        "DLPack: no-copy import refused (copy=False / CopyMode::Never): the tensor's strides are not a memory order the target type can own; pass CopyMode::IfNeeded to allow a copy"
    );
    assert_eq!(drops.count(), 0, "the refused tensor is still alive");
    let (t, transfer) = into_owned(refused.value, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
    assert_eq!(t.to_vec2::<i64>()?, [[1, 3], [2, 4]]);
    assert_eq!(drops.count(), 1);
    Ok(())
}

#[test]
fn a_refused_tensor_is_deleted_once_when_the_refusal_is_dropped() -> Result {
    let drops = Drops::default();
    let mut producer = Counted::new(vec![1u8, 2], &drops);
    producer.gives = false;
    let refused = into_owned(ManagedTensor::export(producer)?, CopyMode::Never).unwrap_err();
    assert!(matches!(
        refused.error,
        CandleError::DLPack(Error::CopyRefused {
            reason: CopyReason::NotOwned
        })
    ));
    assert_eq!(drops.count(), 0);
    drop(refused);
    assert_eq!(drops.count(), 1);
    Ok(())
}

#[test]
fn dlpack_dtypes_candle_lacks_are_refused_naming_the_nearest_candle_dtype() -> Result {
    let cases: [(DataType, usize, &str); 8] = [
        (
            DataType::BOOL,
            1,
            "DLPack dtype bool has no candle dtype; the nearest is u8",
        ),
        (
            DataType::I8,
            1,
            "DLPack dtype int8 has no candle dtype; the nearest is i16",
        ),
        (
            DataType::U16,
            2,
            "DLPack dtype uint16 has no candle dtype; the nearest is u32",
        ),
        (
            DataType::U64,
            8,
            "DLPack dtype uint64 has no candle dtype; the nearest is i64",
        ),
        (
            DataType::C64,
            8,
            "DLPack dtype complex64 has no candle dtype; the nearest is f32",
        ),
        (
            DataType::C128,
            16,
            "DLPack dtype complex128 has no candle dtype; the nearest is f64",
        ),
        (
            DataType::F8_E5M2,
            1,
            "DLPack dtype float8_e5m2 has no candle dtype; the nearest is f16",
        ),
        (
            DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 2),
            1,
            "DLPack dtype float4_e2m1fnx2 has no candle dtype; the nearest is f16",
        ),
    ];
    for (dtype, size, message) in cases {
        for mode in [CopyMode::IfNeeded, CopyMode::Never, CopyMode::Always] {
            let drops = Drops::default();
            let raw = Raw {
                bytes: vec![0; 2 * size],
                shape: vec![2],
                dtype,
                device: dlpack_core::Device::CPU,
                drops: drops.clone(),
            };
            let refused = into_owned(ManagedTensor::export(raw)?, mode).unwrap_err();
            let err = &refused.error;
            assert!(
                matches!(err, CandleError::NoCandleDType { dtype: d, .. } if *d == dtype),
                "{err}"
            );
            assert!(err.to_string().starts_with(message), "{err}");
            // Reported before the copy mode is looked at, and the tensor comes back.
            assert_eq!(refused.value.dtype(), dtype);
            assert_eq!(drops.count(), 0, "{dtype}: given back, not deleted");
            drop(refused);
            assert_eq!(drops.count(), 1, "{dtype}: deleted once with the refusal");
        }
    }
    Ok(())
}

#[test]
fn a_tensor_the_host_cannot_read_fails_the_copy_naming_the_device() -> Result {
    let drops = Drops::default();
    let raw = Raw {
        bytes: vec![0; 16],
        shape: vec![4],
        dtype: DataType::F32,
        device: dlpack_core::Device::cuda(0),
        drops: drops.clone(),
    };
    let refused = into_owned(ManagedTensor::export(raw)?, CopyMode::IfNeeded).unwrap_err();
    assert!(matches!(
        refused.error,
        CandleError::DLPack(Error::NotHostAccessible { device }) if device == dlpack_core::Device::cuda(0)
    ));
    assert!(refused.to_string().contains("cuda:0"), "{refused}");
    assert_eq!(drops.count(), 0, "the failed copy gives the tensor back");
    assert_eq!(refused.value.device(), dlpack_core::Device::cuda(0));
    drop(refused);
    assert_eq!(drops.count(), 1);
    Ok(())
}

static FOREIGN_DELETES: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn foreign_deleter(t: *mut DLManagedTensorVersioned) {
    FOREIGN_DELETES.fetch_add(1, Ordering::SeqCst);
    // SAFETY: `t` came from `Box::into_raw` in the test below; its context is the boxed data.
    unsafe {
        let t = Box::from_raw(t);
        drop(Box::from_raw(t.manager_ctx.cast::<Foreign>()));
    }
}

/// What a foreign producer (NumPy, say) keeps alive for its tensor.
struct Foreign {
    data: Vec<f32>,
    shape: [i64; 2],
    strides: [i64; 2],
}

#[test]
fn a_foreign_tensor_is_copied_and_its_deleter_runs_once() -> Result {
    let ctx = Box::into_raw(Box::new(Foreign {
        data: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        shape: [2, 3],
        strides: [3, 1],
    }));
    // SAFETY: `ctx` is a live, exclusively owned box; the pointers stay valid until the deleter
    // frees it.
    let dl_tensor = unsafe {
        DLTensor {
            data: (*ctx).data.as_mut_ptr().cast(),
            device: dlpack_core::Device::CPU,
            ndim: 2,
            dtype: DataType::F32,
            shape: (*ctx).shape.as_mut_ptr(),
            strides: (*ctx).strides.as_mut_ptr(),
            byte_offset: 0,
        }
    };
    let managed = Box::new(DLManagedTensorVersioned {
        version: Version::CURRENT,
        manager_ctx: ctx.cast(),
        deleter: Some(foreign_deleter),
        flags: Flags::empty().0,
        dl_tensor,
    });
    // SAFETY: a well-formed tensor whose memory lives until its deleter runs.
    let dl = unsafe { ManagedTensor::from_raw(Box::into_raw(managed))? };
    let (imported, transfer) = into_owned(dl, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_eq!(FOREIGN_DELETES.load(Ordering::SeqCst), 1);
    assert_eq!(
        imported.to_vec2::<f32>()?,
        [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    );
    Ok(())
}

#[test]
fn a_lent_tensor_is_copied_into_candle() -> Result {
    let mut data = [10u8, 20, 30, 40];
    let mut shape = [2i64, 2];
    let mut strides = [1i64, 2];
    let t = DLTensor {
        data: data.as_mut_ptr().cast(),
        device: dlpack_core::Device::CPU,
        ndim: 2,
        dtype: DataType::U8,
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: 0,
    };
    // SAFETY: every pointer refers to a local that outlives the borrow.
    let lent = unsafe { BorrowedTensor::new(&t, Version::CURRENT, Flags::READ_ONLY)? };
    let copy = to_owned(&lent)?;
    assert_eq!(copy.to_vec2::<u8>()?, [[10, 30], [20, 40]]);
    Ok(())
}

#[test]
fn scalars_and_empty_tensors_move_and_copy() -> Result {
    let empty: Vec<f32> = Vec::new();
    let (imported, transfer) = into_owned(ManagedTensor::export(empty)?, CopyMode::Never)?;
    assert_eq!((transfer, imported.dims()), (Transfer::Moved, &[0][..]));

    let scalar = Tensor::new(3.5f64, &Device::Cpu)?;
    let (copied, transfer) = into_owned(lend(&scalar)?, CopyMode::Always)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_eq!(copied.dims(), &[] as &[usize]);
    assert_eq!(copied.to_scalar::<f64>()?, 3.5);
    let (back, transfer) = into_owned(lend(&scalar)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(back.to_scalar::<f64>()?, 3.5);
    Ok(())
}

#[test]
fn a_moved_tensor_is_an_ordinary_candle_tensor() -> Result {
    let (t, _) = into_owned(
        ManagedTensor::export(vec![1.0f32, 2.0, 3.0, 4.0])?,
        CopyMode::Never,
    )?;
    let t = t.reshape((2, 2))?;
    let sum = (&t + &t.t()?)?;
    assert_eq!(sum.to_vec2::<f32>()?, [[2.0, 5.0], [5.0, 8.0]]);
    assert_eq!(t.sum_all()?.to_scalar::<f32>()?, 10.0);
    t.zero_set()?; // it owns its storage: in-place writes work
    assert_eq!(t.to_vec2::<f32>()?, [[0.0, 0.0], [0.0, 0.0]]);
    Ok(())
}

#[test]
fn an_empty_tensor_whose_sizes_overflow_candles_strides_is_an_error() -> Result {
    // No elements and no bytes, so DLPack accepts it; candle would multiply 2^62 by 2^62.
    for (gives, mode) in [
        (true, CopyMode::IfNeeded),
        (false, CopyMode::IfNeeded),
        (true, CopyMode::Always),
    ] {
        let drops = Drops::default();
        let mut producer = Counted::new(Vec::<f32>::new(), &drops);
        producer.shape = vec![0, 1 << 62, 1 << 62];
        producer.strides = Some(vec![1, 1, 1]);
        producer.gives = gives;
        let tensor = ManagedTensor::export(producer)?;
        let refused = into_owned(tensor, mode).unwrap_err();
        let err = &refused.error;
        assert!(
            matches!(err, CandleError::DLPack(Error::Overflow { .. })),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("multiply past usize::MAX once the zeros are left out"),
            "{err}"
        );
        assert_eq!(refused.value.shape(), [0, 1 << 62, 1 << 62], "given back");
        assert_eq!(drops.count(), 0);
        drop(refused);
        assert_eq!(drops.count(), 1, "the producer is dropped once");
    }
    Ok(())
}

/// What `into_owned` returns.
type Owned = std::result::Result<(Tensor, Transfer), Refused<ManagedTensor, CandleError>>;

/// A foreign tensor of `shape` with no elements, taken over with `mode`: the result, and the
/// tensor's deleter count.
fn import_empty_foreign(shape: &[i64], mode: CopyMode) -> (Owned, Arc<AtomicUsize>) {
    let built = dlpack_testing::Foreign::new(DataType::F32, shape).build();
    let deletes = built.counter();
    // SAFETY: the fixture built a live tensor that nobody else owns.
    let tensor = unsafe { ManagedTensor::from_raw(built.ptr) }.expect("a valid empty tensor");
    (into_owned(tensor, mode), deletes)
}

#[test]
fn a_zero_element_shape_whose_sizes_overflow_in_any_order_is_refused_without_a_panic() {
    // No elements, so DLPack accepts any sizes. candle multiplies them unchecked: the element
    // count from the first (2^62 * 2^62 before the 0), contiguous strides from the last, and
    // products over any axes (`mean` over axes 0 and 2 of the middle shape). Whatever the
    // order, a shape whose non-zero sizes multiply past usize::MAX never reaches candle.
    for shape in [
        [1i64 << 62, 1 << 62, 0],
        [1 << 62, 0, 1 << 62],
        [0, 1 << 62, 1 << 62],
    ] {
        for mode in [CopyMode::IfNeeded, CopyMode::Always, CopyMode::Never] {
            let (result, deletes) = std::panic::catch_unwind(|| import_empty_foreign(&shape, mode))
                .unwrap_or_else(|_| panic!("importing {shape:?} ({mode:?}) panicked"));
            let refused = result.expect_err("candle cannot hold this shape");
            let err = &refused.error;
            assert!(
                matches!(err, CandleError::DLPack(Error::Overflow { .. })),
                "{shape:?} {mode:?}: {err}"
            );
            assert!(
                err.to_string()
                    .contains("multiply past usize::MAX once the zeros are left out"),
                "{err}"
            );
            assert_eq!(refused.value.shape(), shape, "given back");
            assert_eq!(deletes.load(Ordering::SeqCst), 0);
            drop(refused);
            assert_eq!(deletes.load(Ordering::SeqCst), 1, "deleted once");
        }
    }
}

#[test]
fn a_zero_element_shape_whose_non_zero_sizes_fit_usize_becomes_a_candle_tensor() -> Result {
    // 2^31 * 2^31 = 2^62: every product candle forms of these sizes fits usize.
    let (result, deletes) = import_empty_foreign(&[0, 1 << 31, 1 << 31], CopyMode::IfNeeded);
    let (t, transfer) = result?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_eq!(t.dims(), &[0, 1 << 31, 1 << 31]);
    assert_eq!(t.elem_count(), 0);
    assert_eq!(t.stride(), &[1 << 62, 1 << 31, 1]);
    assert_eq!(t.sum_keepdim(2)?.dims(), &[0, 1 << 31, 1]);
    assert_eq!(t.flatten_all()?.dims(), &[0]);
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        1,
        "the copy left the producer behind"
    );
    Ok(())
}
