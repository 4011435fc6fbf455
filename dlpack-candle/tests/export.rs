//! Exporting candle CPU tensors: lent without a copy (real layouts, read-only) or copied into
//! memory the export owns; every dtype.

mod common;

use candle_core::{DType, Device, IndexOp, Tensor, WithDType};
use common::{lend, storage_address};
use dlpack_candle::{CandleError, Float8E8M0, into_dlpack, into_owned, to_dlpack};
use dlpack_core::{
    CopyMode, DataType, DataTypeCode, Element, Error, Flags, ManagedTensor, Transfer,
};

type Result = std::result::Result<(), Box<dyn std::error::Error>>;

fn grid(dtype: DType) -> candle_core::Result<Tensor> {
    Tensor::arange(0f32, 24., &Device::Cpu)?
        .reshape((2, 3, 4))?
        .to_dtype(dtype)
}

#[test]
fn a_lent_export_points_at_candle_storage_without_a_copy() -> Result {
    let t = grid(DType::F32)?;
    let dl = lend(&t)?;
    assert_eq!(dl.data_ptr().addr(), storage_address(&t));
    assert_eq!(dl.view::<f32>()?.as_ptr().addr(), storage_address(&t));
    assert_eq!(
        (dl.shape(), dl.strides()),
        (&[2i64, 3, 4][..], &[12i64, 4, 1][..])
    );
    assert_eq!((dl.byte_offset(), dl.dtype()), (0, DataType::F32));
    Ok(())
}

#[test]
fn a_lent_export_is_read_only_because_candle_shares_storage() -> Result {
    let t = grid(DType::F32)?;
    let mut dl = lend(&t)?;
    assert!(dl.is_read_only());
    assert_eq!(dl.view_mut::<f32>().unwrap_err(), Error::ReadOnly);
    // The legacy struct cannot say "read-only", so the export refuses to become one.
    assert_eq!(
        dl.into_raw_legacy().unwrap_err().error,
        Error::LegacyReadOnly
    );
    Ok(())
}

/// The DLPack view of a (possibly strided) candle tensor holds the same elements, in the same
/// order, as candle's own gather of that tensor, and it reads candle's storage in place.
fn same_elements<T: Element + WithDType + PartialEq + std::fmt::Debug>(t: &Tensor) -> Result {
    let dl = lend(t)?;
    let layout = t.layout();
    let strides: Vec<i64> = layout.stride().iter().map(|&s| s as i64).collect();
    let dims: Vec<i64> = t.dims().iter().map(|&d| d as i64).collect();
    assert_eq!(dl.shape(), &dims[..]);
    assert_eq!(dl.strides(), &strides[..]);
    let offset = layout.start_offset() * std::mem::size_of::<T>();
    // The start offset is folded into the data pointer, as NumPy and PyTorch export.
    assert_eq!(dl.byte_offset(), 0);
    assert_eq!(dl.data_ptr().addr(), storage_address(t) + offset);
    let view = dl.view::<T>()?;
    if !view.is_empty() {
        assert_eq!(view.as_ptr().addr(), storage_address(t) + offset);
    }
    // (Compared as values, not through `WithDType::to_f64`, which recurses forever for F8E4M3
    // in candle 0.11.1.)
    let candle = t.flatten_all()?.to_vec1::<T>()?;
    assert_eq!(
        view.to_vec().unwrap(),
        candle,
        "{:?} {:?}",
        t.dtype(),
        t.layout()
    );
    // The copy: the same elements, row-major, in memory the export owns.
    let copy = to_dlpack(t)?;
    assert_eq!(copy.shape(), &dims[..]);
    assert!(copy.is_row_major_contiguous(), "{:?}", copy.strides());
    assert_eq!(copy.byte_offset(), 0);
    assert_eq!(copy.flags(), Flags::IS_COPIED);
    assert_eq!(
        copy.view::<T>()?.to_vec().unwrap(),
        candle,
        "copy of {:?}",
        t.layout()
    );
    Ok(())
}

fn every_layout<T: Element + WithDType + PartialEq + std::fmt::Debug>() -> Result {
    let t = grid(<T as WithDType>::DTYPE)?;
    assert_eq!(lend(&t)?.dtype(), <T as Element>::DTYPE);
    same_elements::<T>(&t)?; // contiguous
    same_elements::<T>(&t.narrow(2, 1, 2)?)?; // offset, gaps
    same_elements::<T>(&t.transpose(0, 2)?)?; // permuted strides
    same_elements::<T>(&t.i((1, 1.., ..3))?)?; // offset and fewer dims
    same_elements::<T>(&t.i((.., 2))?.t()?)?; // offset, transposed
    same_elements::<T>(&t.i((0, 0))?.broadcast_as((3, 4))?)?; // stride 0
    same_elements::<T>(&t.i((1, 2, 3))?)?; // 0-d, offset 23
    same_elements::<T>(&t.narrow(1, 1, 0)?)?; // no elements
    Ok(())
}

#[test]
fn every_candle_dtype_exports_its_values_in_every_layout() -> Result {
    every_layout::<u8>()?;
    every_layout::<u32>()?;
    every_layout::<i16>()?;
    every_layout::<i32>()?;
    every_layout::<i64>()?;
    every_layout::<half::bf16>()?;
    every_layout::<half::f16>()?;
    every_layout::<f32>()?;
    every_layout::<f64>()?;
    every_layout::<float8::F8E4M3>()?;
    Ok(())
}

#[test]
fn candle_dtypes_export_with_their_dlpack_codes() -> Result {
    let cases = [
        (DType::U8, DataTypeCode::UINT, 8),
        (DType::U32, DataTypeCode::UINT, 32),
        (DType::I16, DataTypeCode::INT, 16),
        (DType::I32, DataTypeCode::INT, 32),
        (DType::I64, DataTypeCode::INT, 64),
        (DType::BF16, DataTypeCode::BFLOAT, 16),
        (DType::F16, DataTypeCode::FLOAT, 16),
        (DType::F32, DataTypeCode::FLOAT, 32),
        (DType::F64, DataTypeCode::FLOAT, 64),
        (DType::F8E4M3, DataTypeCode(10), 8),
    ];
    for (dtype, code, bits) in cases {
        let dl = lend(&grid(dtype)?)?;
        assert_eq!(dl.dtype(), DataType::new(code, bits, 1), "{dtype:?}");
    }
    Ok(())
}

#[test]
fn f8e4m3_is_float8_e4m3fn_without_infinities() -> Result {
    // 0x7E is 448 in e4m3fn (the largest finite value); e4m3 with infinities would differ.
    let bytes: Vec<float8::F8E4M3> = [0x7E, 0x38, 0x7F]
        .into_iter()
        .map(float8::F8E4M3::from_bits)
        .collect();
    let t = Tensor::from_vec(bytes, 3, &Device::Cpu)?;
    let dl = lend(&t)?;
    assert_eq!(dl.dtype().code, DataTypeCode::FLOAT8_E4M3FN);
    let view = dl.view::<float8::F8E4M3>()?;
    let values: Vec<f32> = view.iter().map(|v| v.to_f32()).collect();
    assert_eq!(values[..2], [448.0, 1.0]);
    assert!(values[2].is_nan());
    assert_eq!(t.to_dtype(DType::F32)?.to_vec1::<f32>()?[..2], [448.0, 1.0]);
    Ok(())
}

#[test]
fn f8e8m0_exports_as_float8_e8m0fnu_bytes_in_any_layout() -> Result {
    let bytes: Vec<u8> = (120..132).collect();
    let t = Tensor::from_raw_buffer(&bytes, DType::F8E8M0, &[3, 4], &Device::Cpu)?;
    let dl = lend(&t)?;
    assert_eq!(
        dl.dtype(),
        DataType::new(DataTypeCode::FLOAT8_E8M0FNU, 8, 1)
    );
    let view = dl.view::<Float8E8M0>()?;
    assert_eq!(view.as_ptr().addr(), storage_address(&t));
    assert_eq!(view.get(&[1, 0]), Some(&Float8E8M0(124)));
    assert_eq!(view.get(&[1, 3]).map(|v| v.to_f32()), Some(1.0)); // 2^(127 - 127)
    // candle cannot gather this dtype itself; the transposed, offset view reads the right bytes.
    let cols = t.i((.., 1..))?.t()?;
    let dl = lend(&cols)?;
    assert_eq!((dl.strides(), dl.byte_offset()), (&[1i64, 4][..], 0));
    assert_eq!(dl.data_ptr().addr(), storage_address(&t) + 1);
    let got: Vec<u8> = dl.view::<Float8E8M0>()?.iter().map(|v| v.0).collect();
    assert_eq!(got, [121, 125, 129, 122, 126, 130, 123, 127, 131]);
    let copy = to_dlpack(&cols)?;
    assert_eq!((copy.strides(), copy.byte_offset()), (&[3i64, 1][..], 0));
    let got: Vec<u8> = copy.view::<Float8E8M0>()?.iter().map(|v| v.0).collect();
    assert_eq!(got, [121, 125, 129, 122, 126, 130, 123, 127, 131]);
    let (back, transfer) = into_owned(copy, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(back.dtype(), DType::F8E8M0);
    Ok(())
}

#[test]
fn placeholder_dtypes_are_refused_with_the_reason() -> Result {
    for dtype in [DType::F4, DType::F6E2M3, DType::F6E3M2] {
        let t = Tensor::from_raw_buffer(&[0x21, 0x43, 0x65], dtype, &[4], &Device::Cpu)?;
        let refused = to_dlpack(&t).unwrap_err();
        assert!(
            matches!(refused, CandleError::CandleDType { .. }),
            "{refused}"
        );
        let err = lend(&t).unwrap_err();
        assert!(
            matches!(err, CandleError::CandleDType { dtype: d, .. } if d == dtype),
            "{err}"
        );
        let message = err.to_string();
        assert!(
            message.starts_with(&format!(
                "candle dtype {} cannot be exchanged through DLPack: candle's F6E2M3, F6E3M2 and F4 are placeholder dtypes",
                dtype.as_str()
            )),
            "{message}"
        );
        assert!(message.contains("bit order"), "{message}");
    }
    Ok(())
}

#[test]
fn a_lent_export_keeps_the_storage_alive_after_candle_drops_the_tensor() -> Result {
    let t = grid(DType::I64)?.narrow(1, 1, 2)?;
    let dl = lend(&t)?;
    drop(t);
    let view = dl.view::<i64>()?;
    assert_eq!(view.get(&[1, 1, 3]), Some(&23));
    Ok(())
}

#[test]
fn exported_tensor_survives_a_trip_through_c() -> Result {
    let t = grid(DType::BF16)?.transpose(1, 2)?;
    let raw = lend(&t)?.into_raw()?;
    // SAFETY: `raw` was just exported and is owned here.
    let dl = unsafe { ManagedTensor::from_raw(raw)? };
    assert_eq!(dl.strides(), &[12, 1, 4]);
    assert_eq!(
        dl.view::<half::bf16>()?.get(&[1, 3, 2]).map(|v| v.to_f32()),
        Some(23.0)
    );
    Ok(())
}

/// Checks that a DLPack tensor lent from candle reads the storage at `address`, holds `want`,
/// and comes back into candle on that storage.
fn lent_at(dl: ManagedTensor, address: usize, want: &[f32]) -> Result {
    assert!(dl.is_read_only());
    assert_eq!(dl.data_ptr().addr(), address);
    assert_eq!(dl.view::<f32>()?.as_ptr().addr(), address);
    assert_eq!(dl.to_vec::<f32>()?, want);
    let (back, transfer) = into_owned(dl, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(storage_address(&back), address);
    Ok(())
}

#[test]
#[cfg_attr(
    miri,
    ignore = "candle's matmul (gemm) casts integers to pointers, which strict provenance refuses"
)]
fn into_dlpack_of_a_matmul_result_lends_the_storage_candle_made_for_it() -> Result {
    let a = grid(DType::F32)?.reshape((4, 6))?;
    let product = a.matmul(&a.t()?)?;
    let (address, want) = (
        storage_address(&product),
        product.flatten_all()?.to_vec1::<f32>()?,
    );
    // SAFETY: `product` is the only handle on the storage candle just made for it.
    let dl = unsafe { into_dlpack(product) }?;
    assert_eq!(dl.shape(), &[4, 4]);
    lent_at(dl, address, &want)
}

#[test]
fn into_dlpack_of_a_computed_view_lends_the_storage_candle_made_for_it() -> Result {
    let t = grid(DType::F32)?;
    let doubled = ((&t * 2.0)? + 1.0)?.transpose(0, 2)?; // new storage, seen transposed
    let (address, want) = (
        storage_address(&doubled),
        doubled.flatten_all()?.to_vec1::<f32>()?,
    );
    // SAFETY: `doubled` is the only handle on the storage candle just made for it.
    let dl = unsafe { into_dlpack(doubled) }?;
    assert_eq!(
        (dl.shape(), dl.strides()),
        (&[4i64, 3, 2][..], &[1i64, 4, 12][..])
    );
    lent_at(dl, address, &want)
}

#[test]
fn to_dlpack_owns_its_copy_which_a_consumer_may_write_take_as_a_vec_or_give_back() -> Result {
    let t = grid(DType::F32)?;
    let cols = t.i((.., .., 1..3))?.transpose(0, 2)?; // offset, gaps, permuted
    let want = cols.flatten_all()?.to_vec1::<f32>()?;
    // A consumer writes the copy; candle's tensor does not change.
    let mut dl = to_dlpack(&cols)?;
    let address = dl.data_ptr().addr();
    dl.view_mut::<f32>()?.as_mut_slice().expect("contiguous")[0] = -1.0;
    assert_eq!(
        t.flatten_all()?.to_vec1::<f32>()?,
        (0..24).map(|i| i as f32).collect::<Vec<_>>()
    );
    // Given back, it is candle storage as it is: no copy.
    let (back, transfer) = into_owned(dl, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(storage_address(&back), address);
    assert_eq!(back.dims(), cols.dims());
    let mut written = want.clone();
    written[0] = -1.0;
    assert_eq!(back.flatten_all()?.to_vec1::<f32>()?, written);
    // Taken as a Vec: the copy's own memory.
    let dl = to_dlpack(&cols)?;
    let address = dl.data_ptr().addr();
    let v = dl.into_vec::<f32>().expect("a copy gives its Vec");
    assert_eq!((v.as_ptr().addr(), &v[..]), (address, &want[..]));
    Ok(())
}

#[test]
fn the_device_errors_name_the_devices() {
    // A CUDA candle tensor cannot be made without candle's `cuda` feature; the message can.
    let err = CandleError::Device {
        location: candle_core::DeviceLocation::Cuda { gpu_id: 1 },
    };
    let expected = if cfg!(feature = "cuda") {
        "the candle tensor lives on cuda:1, which dlpack-candle cannot exchange: expected the CPU or a CUDA device (Metal storage is not supported)"
    } else {
        "the candle tensor lives on cuda:1, which dlpack-candle cannot exchange: expected the CPU (CUDA needs the feature `cuda`; Metal storage is not supported)"
    };
    assert_eq!(err.to_string(), expected);
    let err = CandleError::DeviceMismatch {
        found: dlpack_core::Device::CPU,
        target: candle_core::DeviceLocation::Cuda { gpu_id: 0 },
    };
    assert_eq!(
        err.to_string(),
        "the DLPack tensor lives on cpu:0, not on the candle device asked for (cuda:0): expected a tensor on that device; copy it there first"
    );
}
