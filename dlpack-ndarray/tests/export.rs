//! Export: ndarray arrays and views as DLPack tensors, and getting them back.

use dlpack_core::{CopyMode, DataType, Device, Flags, ManagedTensor, Transfer};
use dlpack_ndarray::{
    OwnedArray, SharedArray, export_view, export_view_mut, into_dlpack, into_owned, to_dlpack,
};
use ndarray::{
    ArcArray, Array, Array0, Array1, Array2, Array3, ArrayD, Ix1, Ix2, Ix3, ShapeBuilder, arr0,
    array, s,
};

/// 0, 1, 2, ... as f32, in the shape asked for (C order).
fn counting(shape: (usize, usize)) -> Array2<f32> {
    Array::from_iter((0..shape.0 * shape.1).map(|i| i as f32))
        .into_shape_with_order(shape)
        .unwrap()
}

#[test]
fn an_owned_array_moves_into_the_tensor_without_a_copy() {
    let a = counting((2, 3));
    let address = a.as_ptr();
    let tensor = into_dlpack(a).unwrap();
    assert_eq!(tensor.shape(), &[2, 3]);
    assert_eq!(tensor.strides(), &[3, 1]);
    assert_eq!(
        (tensor.dtype(), tensor.device()),
        (DataType::F32, Device::CPU)
    );
    assert_eq!(tensor.byte_offset(), 0);
    assert!(!tensor.is_read_only());
    assert!(!tensor.flags().contains(Flags::IS_COPIED));
    assert_eq!(tensor.data_ptr().cast::<f32>().cast_const(), address);
    assert_eq!(
        tensor.to_vec::<f32>().unwrap(),
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    );
}

#[test]
fn a_fortran_array_exports_column_major_strides() {
    let a = Array::from_shape_vec((2, 3).f(), vec![0u8, 1, 2, 3, 4, 5]).unwrap();
    let tensor = into_dlpack(a).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 3][..], &[1, 2][..])
    );
    assert_eq!(tensor.to_vec::<u8>().unwrap(), [0, 2, 4, 1, 3, 5]);
}

#[test]
fn a_sliced_array_exports_its_steps_and_first_element() {
    let a = counting((4, 6)).slice_move(s![1..;2, 1..;3]);
    let first = a.as_ptr();
    let tensor = into_dlpack(a).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 2][..], &[12, 3][..])
    );
    assert_eq!(tensor.data_ptr().cast::<f32>().cast_const(), first);
    assert_eq!(tensor.to_vec::<f32>().unwrap(), [7.0, 10.0, 19.0, 22.0]);
}

#[test]
fn negative_strides_export_as_they_are() {
    let a = counting((2, 3)).slice_move(s![..;-1, ..;-2]);
    let first = a.as_ptr();
    let tensor = into_dlpack(a).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 2][..], &[-3, -2][..])
    );
    assert_eq!(tensor.data_ptr().cast::<f32>().cast_const(), first);
    assert_eq!(tensor.byte_offset(), 0);
    assert_eq!(tensor.to_vec::<f32>().unwrap(), [5.0, 3.0, 2.0, 0.0]);
}

#[test]
fn zero_d_and_empty_arrays_export() {
    let scalar = into_dlpack(arr0(7i64)).unwrap();
    assert_eq!((scalar.ndim(), scalar.len()), (0, 1));
    assert_eq!(scalar.to_vec::<i64>().unwrap(), [7]);

    let empty = into_dlpack(Array2::<u32>::zeros((0, 3))).unwrap();
    assert_eq!((empty.shape(), empty.len()), (&[0, 3][..], 0));
    assert_eq!(empty.to_vec::<u32>().unwrap(), Vec::<u32>::new());
}

#[test]
fn reclaim_gives_back_the_same_array_with_its_layout() {
    let a = counting((3, 4)).slice_move(s![..;-1, 1..;2]);
    let (address, strides, expected) = (a.as_ptr(), a.strides().to_vec(), a.clone());
    let raw = into_dlpack(a).unwrap().into_raw().unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let back = tensor
        .reclaim::<OwnedArray<f32, Ix2>>()
        .unwrap()
        .into_inner();
    assert_eq!((back.as_ptr(), back.strides()), (address, &strides[..]));
    assert_eq!(back, expected);
}

#[test]
fn reclaim_with_another_type_returns_the_tensor_untouched() {
    let tensor = into_dlpack(counting((2, 2))).unwrap();
    let tensor = tensor.reclaim::<OwnedArray<f64, Ix2>>().unwrap_err();
    let tensor = tensor.reclaim::<OwnedArray<f32, Ix3>>().unwrap_err();
    let tensor = tensor.reclaim::<Vec<f32>>().unwrap_err();
    assert_eq!(tensor.to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn into_owned_reclaims_under_the_same_or_another_dimension_type() {
    let a = counting((2, 3)).reversed_axes(); // Fortran layout
    let address = a.as_ptr();
    let (dynamic, transfer): (ArrayD<f32>, _) =
        into_owned(into_dlpack(a).unwrap(), CopyMode::Never).unwrap();
    assert_eq!(
        (dynamic.as_ptr(), dynamic.strides(), transfer),
        (address, &[1, 3][..], Transfer::Reclaimed)
    );
    let (fixed, transfer): (Array2<f32>, _) =
        into_owned(into_dlpack(dynamic).unwrap(), CopyMode::Never).unwrap();
    assert_eq!(
        (fixed.as_ptr(), fixed.strides(), transfer),
        (address, &[1, 3][..], Transfer::Reclaimed)
    );
    assert_eq!(fixed, counting((2, 3)).reversed_axes());
}

#[test]
fn into_vec_takes_the_vec_of_a_standard_layout_array() {
    let a = counting((2, 3));
    let address = a.as_ptr();
    let v = into_dlpack(a).unwrap().into_vec::<f32>().unwrap();
    assert_eq!(v.as_ptr(), address);
    assert_eq!(v, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn into_vec_takes_the_vec_of_a_0d_array() {
    let a: Array0<u16> = arr0(5);
    let address = a.as_ptr();
    let v = into_dlpack(a).unwrap().into_vec::<u16>().unwrap();
    assert_eq!((v.as_ptr(), &v[..]), (address, &[5][..]));
}

#[test]
fn into_vec_of_an_empty_array_is_empty() {
    let a = Array3::<i8>::zeros((2, 0, 4));
    let v = into_dlpack(a).unwrap().into_vec::<i8>().unwrap();
    assert!(v.is_empty());
}

#[test]
fn into_vec_refuses_non_row_major_layouts_and_leaves_the_tensor_intact() {
    for a in [
        counting((2, 3)).reversed_axes(),
        counting((4, 4)).slice_move(s![.., ..;2]),
        counting((2, 3)).slice_move(s![..;-1, ..]),
    ] {
        let (address, expected) = (a.as_ptr(), a.clone());
        let tensor = into_dlpack(a).unwrap();
        let tensor = tensor.into_vec::<f32>().unwrap_err();
        let back = tensor
            .reclaim::<OwnedArray<f32, Ix2>>()
            .unwrap()
            .into_inner();
        assert_eq!((back.as_ptr(), &back), (address, &expected));
    }
}

#[test]
fn into_vec_with_another_element_type_leaves_the_tensor_intact() {
    let tensor = into_dlpack(counting((2, 3))).unwrap();
    let tensor = tensor.into_vec::<i32>().unwrap_err();
    assert_eq!(tensor.to_vec::<f32>().unwrap().len(), 6);
}

/// A standard-layout array that is a part of its Vec after its start (a slice of a bigger
/// array) cannot give the Vec up; asking must leave the array where it was, readable and
/// reclaimable. A prefix can: the Vec, truncated, is exactly its elements.
#[test]
fn into_vec_refuses_a_contiguous_part_of_a_larger_vec_and_the_array_survives() {
    let prefix = Array1::from_iter(0..10u32).slice_move(s![..4]);
    let address = prefix.as_ptr();
    let vec = into_dlpack(prefix).unwrap().into_vec::<u32>().unwrap();
    assert_eq!((vec.as_ptr(), &vec[..]), (address, &[0, 1, 2, 3][..]));

    let leading_gap = Array1::from_iter(0..10u32).slice_move(s![3..]);
    let rows = Array::from_iter(0..12u32)
        .into_shape_with_order((4, 3))
        .unwrap()
        .slice_move(s![1..3, ..]);
    for a in [leading_gap, rows.into_shape_with_order(6).unwrap()] {
        assert!(a.is_standard_layout());
        let (address, expected) = (a.as_ptr(), a.clone());
        let tensor = into_dlpack(a).unwrap();
        let tensor = tensor.into_vec::<u32>().unwrap_err();
        // The tensor still describes live memory holding the same elements ...
        assert_eq!(tensor.data_ptr().cast::<u32>().cast_const(), address);
        assert_eq!(tensor.to_vec::<u32>().unwrap(), expected.to_vec());
        // ... and gives the same array back.
        let back = tensor
            .reclaim::<OwnedArray<u32, Ix1>>()
            .unwrap()
            .into_inner();
        assert_eq!((back.as_ptr(), &back), (address, &expected));
    }
}

#[test]
fn into_vec_refuses_a_2d_block_in_the_middle_of_its_vec_and_it_survives() {
    let a = Array::from_iter(0..12i16)
        .into_shape_with_order((4, 3))
        .unwrap()
        .slice_move(s![1..3, ..]);
    assert!(a.is_standard_layout());
    let (address, expected) = (a.as_ptr(), a.clone());
    let tensor = into_dlpack(a).unwrap().into_vec::<i16>().unwrap_err();
    assert_eq!(tensor.to_vec::<i16>().unwrap(), [3, 4, 5, 6, 7, 8]);
    let (back, transfer): (Array2<i16>, _) = into_owned(tensor, CopyMode::Never).unwrap();
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!((back.as_ptr(), back), (address, expected));
}

#[test]
fn an_arc_array_exports_read_only_without_a_copy() {
    let shared: ArcArray<f64, Ix2> = array![[1.0, 2.0], [3.0, 4.0]].into_shared();
    let mut other = shared.clone();
    let address = shared.as_ptr();
    let mut tensor = into_dlpack(shared).unwrap();
    assert!(tensor.is_read_only());
    assert_eq!(tensor.data_ptr().cast::<f64>().cast_const(), address);
    assert_eq!(
        tensor.view_mut::<f64>().unwrap_err(),
        dlpack_core::Error::ReadOnly
    );
    // A write through another clone copies first: the tensor's memory does not change.
    other[[0, 0]] = 100.0;
    assert_ne!(other.as_ptr(), address);
    assert_eq!(tensor.to_vec::<f64>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn dropping_an_arc_array_export_releases_its_clone_once() {
    let shared: ArcArray<u8, Ix1> = ArcArray::from_vec(vec![1, 2, 3]);
    let tensor = into_dlpack(shared.clone()).unwrap();
    assert!(!shared.is_unique());
    drop(tensor);
    assert!(shared.is_unique());

    // The same through the C deleter.
    let raw = into_dlpack(shared.clone()).unwrap().into_raw().unwrap();
    assert!(!shared.is_unique());
    // SAFETY: `raw` is live and owned here; its deleter is called once and never again.
    unsafe { (*raw).deleter.expect("exported tensors have a deleter")(raw) };
    assert!(shared.is_unique());
}

#[test]
fn an_arc_array_comes_back_by_reclaim() {
    let shared: ArcArray<i32, Ix1> = ArcArray::from_vec(vec![4, 5, 6]);
    let address = shared.as_ptr();
    let tensor = into_dlpack(shared).unwrap();
    let back = tensor
        .reclaim::<SharedArray<i32, Ix1>>()
        .unwrap()
        .into_inner();
    assert_eq!(back.as_ptr(), address);

    // As an owned Array: the only clone gives its memory up without a copy.
    let (back, transfer): (Array1<i32>, _) =
        into_owned(into_dlpack(back).unwrap(), CopyMode::Never).unwrap();
    assert_eq!((back.as_ptr(), transfer), (address, Transfer::Reclaimed));
}

#[test]
fn to_dlpack_copies_any_view_into_c_order_and_flags_the_copy() {
    let a = counting((2, 3));
    let tensor = to_dlpack(&a.t()).unwrap();
    assert!(tensor.flags().contains(Flags::IS_COPIED));
    assert!(!tensor.is_read_only());
    assert_ne!(tensor.data_ptr().cast::<f32>().cast_const(), a.as_ptr());
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[3, 2][..], &[2, 1][..])
    );
    assert_eq!(
        tensor.to_vec::<f32>().unwrap(),
        [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    );
    // The copy is a whole Vec: a consumer can take it without another copy.
    assert_eq!(tensor.into_vec::<f32>().unwrap().len(), 6);
}

#[test]
fn export_view_lends_the_memory_read_only() {
    let a = counting((3, 2));
    // SAFETY: the tensor is dropped at the end of this block, before `a`, which is not
    // written meanwhile.
    unsafe {
        let tensor = export_view(&a.slice(s![..;-1, ..])).unwrap();
        assert!(tensor.is_read_only());
        assert_eq!(
            (tensor.shape(), tensor.strides()),
            (&[3, 2][..], &[-2, 1][..])
        );
        assert_eq!(
            tensor.data_ptr().cast::<f32>().cast_const(),
            a.as_ptr().add(4)
        );
        assert_eq!(
            tensor.to_vec::<f32>().unwrap(),
            [4.0, 5.0, 2.0, 3.0, 0.0, 1.0]
        );
        // A borrowed view is not an OwnedArray.
        assert!(tensor.reclaim::<OwnedArray<f32, Ix2>>().is_err());
    }
}

#[test]
fn export_view_of_a_broadcast_keeps_its_zero_strides() {
    let row = array![1u8, 2, 3];
    // SAFETY: the tensor is dropped at the end of this block, before `row`.
    unsafe {
        let mut tensor = export_view(&row.broadcast((2, 3)).unwrap()).unwrap();
        assert_eq!(
            (tensor.shape(), tensor.strides()),
            (&[2, 3][..], &[0, 1][..])
        );
        assert_eq!(tensor.to_vec::<u8>().unwrap(), [1, 2, 3, 1, 2, 3]);
        assert_eq!(
            tensor.view_mut::<u8>().unwrap_err(),
            dlpack_core::Error::ReadOnly
        );
    }
}

#[test]
fn export_view_mut_lets_the_consumer_write_in_place() {
    let mut a = counting((2, 2));
    // SAFETY: the tensor is dropped at the end of this block, before `a` is used again.
    unsafe {
        let mut tensor = export_view_mut(&mut a.slice_mut(s![.., 1])).unwrap();
        assert!(!tensor.is_read_only());
        tensor
            .view_mut::<f32>()
            .unwrap()
            .copy_from_slice(&[-1.0, -2.0])
            .unwrap();
    }
    assert_eq!(a, array![[0.0, -1.0], [2.0, -2.0]]);
}

#[test]
fn a_legacy_export_of_an_array_works_too() {
    let a = counting((2, 2));
    let address = a.as_ptr();
    let tensor = ManagedTensor::export_legacy(OwnedArray::new(a)).unwrap();
    assert!(tensor.is_legacy());
    let (back, transfer): (Array2<f32>, _) = into_owned(tensor, CopyMode::Never).unwrap();
    assert_eq!((back.as_ptr(), transfer), (address, Transfer::Reclaimed));

    let read_only = ManagedTensor::export_legacy(SharedArray::new(counting((1, 1)).into_shared()));
    assert_eq!(
        read_only.unwrap_err().error,
        dlpack_core::Error::LegacyReadOnly
    );
}

#[test]
fn export_types_are_send() {
    fn send<T: Send>() {}
    send::<OwnedArray<f32, Ix2>>();
    send::<SharedArray<f32, Ix2>>();
}
