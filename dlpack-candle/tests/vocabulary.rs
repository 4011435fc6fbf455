//! The adapter vocabulary, verb by verb: `into_dlpack`, `to_dlpack`, `into_owned` (every
//! `Transfer` it reports, and every refusal giving the tensor back) and `to_owned`, and `?` on
//! a refusal in a function that returns `CandleError`.

mod common;

use std::sync::Arc;

use candle_core::op::BackpropOp;
use candle_core::{CpuStorage, DType, Device, IndexOp, Storage, Tensor};
use common::{Counted, Drops, Raw, storage_address};
use dlpack_candle::{CandleError, into_dlpack, into_owned, to_dlpack, to_owned};
use dlpack_core::ffi::DLTensor;
use dlpack_core::{
    BorrowedTensor, CopyMode, CopyReason, DataType, Error, Flags, ManagedTensor, Transfer, Version,
};

type Result = std::result::Result<(), Box<dyn std::error::Error>>;

/// `[[0, 1, 2], [3, 4, 5]]` as a candle f32 tensor.
fn grid() -> candle_core::Result<Tensor> {
    Tensor::arange(0f32, 6., &Device::Cpu)?.reshape((2, 3))
}

#[test]
fn into_dlpack_lends_candles_memory_and_into_owned_reclaims_it() -> Result {
    let t = grid()?;
    let address = storage_address(&t);
    let cols = t.i((.., 1..))?.t()?; // offset and transposed
    // SAFETY: nothing writes to `t`'s storage in this test.
    let dl = unsafe { into_dlpack(cols.clone()) }?;
    assert!(dl.is_read_only());
    assert_eq!((dl.shape(), dl.strides()), (&[2i64, 2][..], &[1i64, 3][..]));
    assert_eq!(dl.data_ptr().addr(), address + 4, "candle's own memory");
    assert_eq!(dl.to_vec::<f32>()?, [1.0, 4.0, 2.0, 5.0]);
    let (back, transfer) = into_owned(dl, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(storage_address(&back), address);
    assert_eq!(back.layout(), cols.layout());
    Ok(())
}

#[test]
fn into_dlpack_gives_the_tensor_back_when_it_refuses() -> Result {
    // candle's F4 is a placeholder dtype, which DLPack cannot be told about.
    let t = Tensor::from_raw_buffer(&[0x21, 0x43], DType::F4, &[2], &Device::Cpu)?;
    let address = storage_address(&t);
    // SAFETY: nothing writes to `t`'s storage in this test (and the export is refused).
    let refused = unsafe { into_dlpack(t) }.unwrap_err();
    assert!(
        matches!(
            refused.error,
            CandleError::CandleDType {
                dtype: DType::F4,
                ..
            }
        ),
        "{refused}"
    );
    let t = refused.value;
    assert_eq!((t.dtype(), t.dims()), (DType::F4, &[2][..]));
    assert_eq!(storage_address(&t), address, "the very tensor, not a copy");

    // A layout that reaches past its storage (safe candle code can build one): dlpack-core's
    // export refuses it, and the tensor comes back all the same.
    let storage = Storage::Cpu(CpuStorage::F32(vec![1.0, 2.0]));
    let t = Tensor::from_storage(storage, (2, 4), BackpropOp::none(), false);
    let address = storage_address(&t);
    // SAFETY: nothing writes to `t`'s storage in this test (and the export is refused).
    let refused = unsafe { into_dlpack(t) }.unwrap_err();
    assert!(matches!(refused.error, CandleError::DLPack(_)), "{refused}");
    assert_eq!(refused.value.dims(), &[2, 4]);
    assert_eq!(storage_address(&refused.value), address);
    Ok(())
}

#[test]
fn to_dlpack_copies_and_into_owned_reclaims_the_copy() -> Result {
    let t = grid()?;
    let dl = to_dlpack(&t.t()?)?;
    assert!(dl.flags().contains(Flags::IS_COPIED) && !dl.is_read_only());
    assert_eq!((dl.shape(), dl.strides()), (&[3i64, 2][..], &[2i64, 1][..]));
    let address = dl.data_ptr().addr();
    t.zero_set()?; // candle may write in place while the copy lives
    assert_eq!(dl.to_vec::<f32>()?, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let (back, transfer) = into_owned(dl, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(
        storage_address(&back),
        address,
        "the copy's memory, as it is"
    );
    assert_eq!(back.to_vec2::<f32>()?, [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]);
    Ok(())
}

#[test]
fn into_owned_moves_a_producers_vec() -> Result {
    let data = vec![1i64, 2, 3, 4];
    let address = data.as_ptr().addr();
    let (t, transfer) = into_owned(ManagedTensor::export(data)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(storage_address(&t), address);
    assert_eq!(t.to_vec1::<i64>()?, [1, 2, 3, 4]);
    Ok(())
}

#[test]
fn into_owned_copies_when_asked_even_what_it_could_reclaim_or_move() -> Result {
    let t = grid()?;
    // SAFETY: nothing writes to `t`'s storage in this test.
    let dl = unsafe { into_dlpack(t.clone()) }?;
    let (copy, transfer) = into_owned(dl, CopyMode::Always)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_ne!(storage_address(&copy), storage_address(&t));
    assert_eq!(copy.to_vec2::<f32>()?, t.to_vec2::<f32>()?);

    let data = vec![7u8, 8];
    let address = data.as_ptr().addr();
    let (copy, transfer) = into_owned(ManagedTensor::export(data)?, CopyMode::Always)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_ne!(storage_address(&copy), address);
    assert_eq!(copy.to_vec1::<u8>()?, [7, 8]);
    Ok(())
}

#[test]
fn into_owned_copies_a_layout_candle_cannot_own_or_refuses_and_gives_it_back() -> Result {
    let drops = Drops::default();
    // [[1, 2], [3, 4]] stored column-major.
    let mut producer = Counted::new(vec![1u32, 3, 2, 4], &drops);
    producer.shape = vec![2, 2];
    producer.strides = Some(vec![1, 2]);
    let refused = into_owned(ManagedTensor::export(producer)?, CopyMode::Never).unwrap_err();
    assert!(matches!(
        refused.error,
        CandleError::DLPack(Error::CopyRefused {
            reason: CopyReason::Layout
        })
    ));
    assert_eq!(drops.count(), 0, "given back, alive");
    let (t, transfer) = into_owned(refused.value, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
    assert!(t.is_contiguous());
    assert_eq!(t.to_vec2::<u32>()?, [[1, 2], [3, 4]]);
    assert_eq!(drops.count(), 1, "deleted once, after the copy");
    Ok(())
}

#[test]
fn into_owned_copies_memory_it_cannot_own_or_refuses_and_gives_it_back() -> Result {
    let shared: Arc<[f64]> = vec![1.5, 2.5].into();
    let refused = into_owned(ManagedTensor::export(shared.clone())?, CopyMode::Never).unwrap_err();
    assert!(matches!(
        refused.error,
        CandleError::DLPack(Error::CopyRefused {
            reason: CopyReason::NotOwned
        })
    ));
    assert_eq!(refused.value.data_ptr().addr(), shared.as_ptr().addr());
    let (t, transfer) = into_owned(refused.value, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_ne!(storage_address(&t), shared.as_ptr().addr());
    assert_eq!(t.to_vec1::<f64>()?, [1.5, 2.5]);
    assert_eq!(Arc::strong_count(&shared), 1, "the export was deleted");
    Ok(())
}

#[test]
fn into_owned_reports_a_dtype_candle_lacks_before_the_copy_mode_and_gives_the_tensor_back() {
    for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
        let drops = Drops::default();
        let raw = Raw {
            bytes: vec![1, 2],
            shape: vec![2],
            dtype: DataType::I8,
            device: dlpack_core::Device::CPU,
            drops: drops.clone(),
        };
        let tensor = ManagedTensor::export(raw).expect("a valid int8 tensor");
        let refused = into_owned(tensor, mode).unwrap_err();
        assert!(
            matches!(
                refused.error,
                CandleError::NoCandleDType {
                    dtype: DataType::I8,
                    nearest: Some(DType::I16),
                    ..
                }
            ),
            "{mode:?}: {refused}"
        );
        assert_eq!(refused.value.to_vec::<i8>(), Ok(vec![1, 2]));
        assert_eq!(drops.count(), 0);
        drop(refused);
        assert_eq!(drops.count(), 1, "deleted once, with the refusal");
    }
}

#[test]
fn into_owned_gives_the_tensor_back_when_the_copy_fails() -> Result {
    let drops = Drops::default();
    let raw = Raw {
        bytes: vec![0; 8],
        shape: vec![2],
        dtype: DataType::F32,
        device: dlpack_core::Device::cuda(0),
        drops: drops.clone(),
    };
    let refused = into_owned(ManagedTensor::export(raw)?, CopyMode::IfNeeded).unwrap_err();
    assert!(matches!(
        refused.error,
        CandleError::DLPack(Error::NotHostAccessible { .. })
    ));
    assert_eq!(refused.value.device(), dlpack_core::Device::cuda(0));
    assert_eq!(drops.count(), 0);
    Ok(())
}

#[test]
fn to_owned_copies_a_borrowed_tensor_into_candle() -> Result {
    let mut data = [10i16, 20, 30, 40, 50, 60];
    let mut shape = [3i64, 2];
    let mut strides = [1i64, 3]; // the transpose of [[10, 20, 30], [40, 50, 60]]
    let t = DLTensor {
        data: data.as_mut_ptr().cast(),
        device: dlpack_core::Device::CPU,
        ndim: 2,
        dtype: DataType::I16,
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: 0,
    };
    // SAFETY: every pointer refers to a local that outlives the borrow.
    let lent = unsafe { BorrowedTensor::new(&t, Version::CURRENT, Flags::READ_ONLY)? };
    let copy = to_owned(&lent)?;
    drop(lent);
    assert!(copy.is_contiguous());
    assert_eq!(copy.to_vec2::<i16>()?, [[10, 40], [20, 50], [30, 60]]);
    copy.zero_set()?; // candle's own memory: the borrowed elements do not change
    assert_eq!(data, [10, 20, 30, 40, 50, 60]);
    Ok(())
}

#[test]
fn question_mark_turns_either_refusal_into_a_candle_error() {
    fn strict(tensor: ManagedTensor) -> std::result::Result<Tensor, CandleError> {
        Ok(into_owned(tensor, CopyMode::Never)?.0)
    }
    fn lend(t: Tensor) -> std::result::Result<ManagedTensor, CandleError> {
        // SAFETY: nothing writes to the storage of the tensors passed in below.
        Ok(unsafe { into_dlpack(t) }?)
    }
    fn as_legacy(tensor: ManagedTensor) -> std::result::Result<ManagedTensor, CandleError> {
        // dlpack-core's own refusal, `Refused<ManagedTensor, dlpack_core::Error>`.
        let raw = tensor.into_raw_legacy()?;
        // SAFETY: `raw` is the live legacy tensor just made, owned here.
        Ok(unsafe { ManagedTensor::from_raw_legacy(raw) }?)
    }

    let shared: Arc<[f32]> = vec![1.0f32].into();
    let tensor = ManagedTensor::export(shared).expect("an Arc<[f32]> exports");
    assert!(matches!(
        strict(tensor),
        Err(CandleError::DLPack(Error::CopyRefused {
            reason: CopyReason::NotOwned
        }))
    ));
    let f4 = Tensor::from_raw_buffer(&[0], DType::F4, &[1], &Device::Cpu).expect("an F4 tensor");
    assert!(matches!(
        lend(f4),
        Err(CandleError::CandleDType {
            dtype: DType::F4,
            ..
        })
    ));
    let read_only = ManagedTensor::export(vec![1u8])
        .expect("a Vec exports")
        .into_read_only();
    assert!(matches!(
        as_legacy(read_only),
        Err(CandleError::DLPack(Error::LegacyReadOnly))
    ));
}

#[test]
fn into_owned_on_and_to_owned_on_the_cpu_are_into_owned_and_to_owned() -> Result {
    let cpu = candle_core::Device::Cpu;
    // Moved, reclaimed and copied as `into_owned` does.
    let data = vec![1.0f32, 2.0, 3.0];
    let address = data.as_ptr().addr();
    let (t, transfer) =
        dlpack_candle::into_owned_on(ManagedTensor::export(data)?, &cpu, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    // SAFETY: `t` is the only handle on its storage.
    let dl = unsafe { into_dlpack(t) }?;
    assert_eq!(dl.data_ptr().addr(), address);
    let (t, transfer) = dlpack_candle::into_owned_on(dl, &cpu, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    let kept = to_dlpack(&t)?;
    let copy = dlpack_candle::to_owned_on(&kept, &cpu)?;
    assert_eq!(copy.to_vec1::<f32>()?, [1.0, 2.0, 3.0]);
    Ok(())
}
