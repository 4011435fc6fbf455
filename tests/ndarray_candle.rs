//! ndarray <-> candle through DLPack, with no copy wherever candle's storage model allows one,
//! and the copy reported exactly where it does not. The two adapters never see each other: the
//! user composes them through dlpack-core's `ManagedTensor`.

use candle_core::{DType, Device, IndexOp, Storage, Tensor};
use dlpack_candle::CandleError;
use dlpack_core::{CopyMode, CopyReason, Error, Transfer};
use dlpack_ndarray::ImportedArray;
use ndarray::{Array, Array2, ArrayView2, ArrayViewD, Ix2, ShapeBuilder, array, s};

type Result = std::result::Result<(), Box<dyn std::error::Error>>;

/// The address of the first element of a candle CPU tensor's storage `Vec`.
fn storage_address<T: candle_core::WithDType>(t: &Tensor) -> usize {
    let (storage, _) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        panic!("not a CPU tensor")
    };
    cpu.as_slice::<T>().expect("storage of T").as_ptr().addr()
}

#[test]
fn an_owned_array_moves_into_candle_without_a_copy() -> Result {
    let a: Array2<f32> = Array::from_shape_fn((3, 4), |(i, j)| (4 * i + j) as f32);
    let address = a.as_ptr().addr();
    let (t, transfer) =
        dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(a)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(t.dims(), &[3, 4]);
    assert_eq!(storage_address::<f32>(&t), address);
    assert_eq!(t.i((2, 3))?.to_scalar::<f32>()?, 11.0);
    Ok(())
}

#[test]
fn a_small_slice_of_a_large_array_is_copied_into_candle_not_kept_with_the_rest() -> Result {
    // The first row of a 100 000 x 10 f64 array is a prefix of its 8 MB Vec: handing the Vec
    // over would keep 8 MB alive in candle for 80 bytes. It is copied, and said so.
    let mut a = Array2::<f64>::zeros((100_000, 10));
    a.row_mut(0)
        .assign(&ndarray::Array1::from_iter((0..10).map(f64::from)));
    a.slice_collapse(s![0..1, ..]);
    let (t, transfer) =
        dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(a)?, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_eq!(t.dims(), &[1, 10]);
    let (storage, _) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        panic!("not a CPU tensor")
    };
    assert_eq!(cpu.as_slice::<f64>()?.len(), 10);
    drop(storage);
    assert_eq!(t.i((0, 9))?.to_scalar::<f64>()?, 9.0);
    // Most of a Vec is still moved.
    let mut a = Array2::<f64>::zeros((10, 10));
    a.slice_collapse(s![0..9, ..]);
    let address = a.as_ptr().addr();
    let (t, transfer) =
        dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(a)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(storage_address::<f64>(&t), address);
    Ok(())
}

#[test]
fn arrays_of_every_shared_dtype_move_into_candle() -> Result {
    fn moves<T: dlpack_core::Element + candle_core::WithDType + PartialEq + std::fmt::Debug>(
        values: Vec<T>,
    ) -> Result {
        let a = Array::from_shape_vec((2, values.len() / 2), values.clone())?;
        let address = a.as_ptr().addr();
        let (t, transfer) =
            dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(a)?, CopyMode::Never)?;
        assert_eq!(transfer, Transfer::Moved);
        assert_eq!(storage_address::<T>(&t), address);
        assert_eq!(t.flatten_all()?.to_vec1::<T>()?, values);
        Ok(())
    }
    moves::<u8>(vec![1, 2, 3, 4])?;
    moves::<u32>(vec![1, 2, 3, 4])?;
    moves::<i16>(vec![-1, 2, -3, 4])?;
    moves::<i32>(vec![-1, 2, -3, 4])?;
    moves::<i64>(vec![-1, 2, -3, 4])?;
    moves::<half::bf16>([1.0, 2.0, 3.0, 4.0].map(half::bf16::from_f32).to_vec())?;
    moves::<half::f16>([1.0, 2.0, 3.0, 4.0].map(half::f16::from_f32).to_vec())?;
    moves::<f32>(vec![1.5, 2.5, 3.5, 4.5])?;
    moves::<f64>(vec![1.5, 2.5, 3.5, 4.5])?;
    moves::<float8::F8E4M3>([1.0, 2.0, 3.0, 4.0].map(float8::F8E4M3::from_f32).to_vec())?;
    Ok(())
}

#[test]
fn a_candle_tensor_is_an_ndarray_view_of_the_same_memory() -> Result {
    let t = Tensor::arange(0f32, 12., &Device::Cpu)?.reshape((3, 4))?;
    // SAFETY: nothing writes to `t`'s storage in this test.
    let dl = unsafe { dlpack_candle::into_dlpack(t.clone()) }?;
    let view: ArrayView2<f32> = dlpack_ndarray::view(&dl)?;
    assert_eq!(view.as_ptr().addr(), storage_address::<f32>(&t));
    assert_eq!(
        view,
        array![[0., 1., 2., 3.], [4., 5., 6., 7.], [8., 9., 10., 11.]]
    );
    Ok(())
}

#[test]
fn strided_candle_tensors_are_strided_ndarray_views() -> Result {
    let t = Tensor::arange(0i64, 24, &Device::Cpu)?.reshape((2, 3, 4))?;
    let base = storage_address::<i64>(&t);
    let full: Array<i64, _> = Array::from_shape_vec((2, 3, 4), (0..24).collect())?;
    let cases = [
        (
            t.narrow(2, 1, 2)?,
            full.slice(s![.., .., 1..3]).into_dyn().to_owned(),
        ),
        (
            t.transpose(0, 2)?,
            full.view().permuted_axes([2, 1, 0]).into_dyn().to_owned(),
        ),
        (
            t.i((1, 1.., ..))?,
            full.slice(s![1, 1.., ..]).into_dyn().to_owned(),
        ),
        (
            t.i((0, 0))?.broadcast_as((3, 4))?,
            full.slice(s![0, 0, ..])
                .broadcast((3, 4))
                .expect("broadcast")
                .into_dyn()
                .to_owned(),
        ),
    ];
    for (candle, expected) in cases {
        // SAFETY: nothing writes to `t`'s storage in this test.
        let dl = unsafe { dlpack_candle::into_dlpack(candle.clone()) }?;
        let view: ArrayViewD<i64> = dlpack_ndarray::view(&dl)?;
        let offset = candle.layout().start_offset() * 8;
        assert_eq!(view.as_ptr().addr(), base + offset, "{:?}", candle.layout());
        let strides: Vec<isize> = candle.stride().iter().map(|&s| s as isize).collect();
        assert_eq!(view.strides(), &strides[..]);
        assert_eq!(view, expected);
    }
    Ok(())
}

#[test]
fn an_ndarray_view_of_a_candle_tensor_is_read_only() -> Result {
    let t = Tensor::zeros((2, 2), DType::F64, &Device::Cpu)?;
    // SAFETY: nothing writes to `t`'s storage in this test.
    let mut dl = unsafe { dlpack_candle::into_dlpack(t.clone()) }?;
    let err = dlpack_ndarray::view_mut::<f64, Ix2>(&mut dl).unwrap_err();
    assert_eq!(err, Error::ReadOnly);
    let mut kept = ImportedArray::<f64, Ix2>::new(dl)?;
    assert_eq!(kept.view_mut().unwrap_err(), Error::ReadOnly);
    assert_eq!(kept.view().sum(), 0.0);
    Ok(())
}

#[test]
fn ndarray_to_candle_to_ndarray_never_copies() -> Result {
    let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let address = a.as_ptr().addr();
    let (t, _) = dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(a)?, CopyMode::Never)?;
    let doubled = (&t * 2.0)?; // candle computes into new storage
    // SAFETY: nothing writes to `t`'s storage in this test.
    let dl = unsafe { dlpack_candle::into_dlpack(t.t()?) }?;
    let view: ArrayView2<f32> = dlpack_ndarray::view(&dl)?;
    assert_eq!(view.as_ptr().addr(), address, "the original array's memory");
    assert_eq!(view, array![[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]);
    assert_eq!(
        doubled.to_vec2::<f32>()?,
        [[2.0, 4.0, 6.0], [8.0, 10.0, 12.0]]
    );
    Ok(())
}

#[test]
fn arrays_candle_cannot_own_are_copied_and_the_reason_is_reported() -> Result {
    // Column-major: the strides are not row-major.
    let f: Array2<f32> = Array::from_shape_vec((2, 3).f(), vec![1., 4., 2., 5., 3., 6.])?;
    let (t, transfer) =
        dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(f)?, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
    assert_eq!(t.to_vec2::<f32>()?, [[1., 2., 3.], [4., 5., 6.]]);

    // A sliced array: row-major, but only part of its Vec, after its start.
    let sliced = array![[1u32, 2], [3, 4], [5, 6]].slice_move(s![1.., ..]);
    let (t, transfer) =
        dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(sliced)?, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_eq!(t.to_vec2::<u32>()?, [[3, 4], [5, 6]]);

    // Sliced to a prefix of its Vec: the Vec, truncated, moves.
    let prefix = array![[1u32, 2], [3, 4], [5, 6]].slice_move(s![..2, ..]);
    let address = prefix.as_ptr().addr();
    let (t, transfer) =
        dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(prefix)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(storage_address::<u32>(&t), address);
    assert_eq!(t.to_vec2::<u32>()?, [[1, 2], [3, 4]]);

    // A shared array: other clones still read its memory.
    let shared = array![1i32, 2, 3].into_shared();
    let refused = dlpack_candle::into_owned(
        dlpack_ndarray::into_dlpack(shared.clone())?,
        CopyMode::Never,
    )
    .unwrap_err();
    assert!(matches!(
        refused.error,
        CandleError::DLPack(Error::CopyRefused {
            reason: CopyReason::NotOwned
        })
    ));
    let (t, transfer) = dlpack_candle::into_owned(refused.value, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_ne!(storage_address::<i32>(&t), shared.as_ptr().addr());
    Ok(())
}

#[test]
fn an_array_of_a_dtype_candle_lacks_names_the_nearest_one() -> Result {
    let refused = dlpack_candle::into_owned(
        dlpack_ndarray::into_dlpack(array![1i8, 2])?,
        CopyMode::IfNeeded,
    )
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("DLPack dtype int8 has no candle dtype; the nearest is i16"),
        "{refused}"
    );
    // The array comes back, as a tensor, and can go elsewhere.
    assert_eq!(refused.value.to_vec::<i8>()?, [1, 2]);
    Ok(())
}
