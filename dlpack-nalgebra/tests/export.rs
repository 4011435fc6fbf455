//! Export: owned matrices move into tensors without a copy, with nalgebra's column-major strides;
//! `into_owned`, reclaim and `into_vec` give the memory back; views export only by copy or
//! through the `unsafe` functions. Leaks and double frees are Miri's to find: the suite runs under
//! `-Zmiri-strict-provenance`.

mod common;

use std::any::Any;

use dlpack_core::{CopyMode, CopyReason, DataType, Device, Error, Export, ManagedTensor, Transfer};
use dlpack_nalgebra::{
    DMatrixProducer, DVectorProducer, MatrixProducer, OwnedMatrix, SMatrixProducer, export_view,
    export_view_mut, into_dlpack, into_owned, to_dlpack,
};
use nalgebra::{DMatrix, DVector, Matrix2x3, Matrix3xX, RowDVector, SMatrix, SVector};

/// Takes a tensor over as an `M`, copying if needed, which must succeed.
#[track_caller]
fn owned<M: OwnedMatrix>(tensor: ManagedTensor) -> (M, Transfer) {
    into_owned::<M>(tensor, CopyMode::IfNeeded).unwrap_or_else(|r| panic!("{}", r.error))
}

/// m[i, j] = 10 i + j
fn sample(rows: usize, cols: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |i, j| (10 * i + j) as f64)
}

// --- layout ------------------------------------------------------------------------------------

#[test]
fn dmatrix_exports_column_major_without_copying() {
    let m = sample(2, 3);
    let data = m.as_ptr();
    let tensor = into_dlpack(m).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 3][..], &[1, 2][..])
    );
    assert_eq!(
        (tensor.dtype(), tensor.device()),
        (DataType::F64, Device::CPU)
    );
    assert_eq!(tensor.byte_offset(), 0);
    assert!(!tensor.is_read_only(), "an owned matrix exports writable");
    assert_eq!(tensor.data_ptr().cast_const().cast::<f64>(), data);
}

#[test]
fn exported_matrix_reads_row_major_through_core_views() {
    let tensor = into_dlpack(sample(2, 3)).unwrap();
    let view = tensor.view::<f64>().unwrap();
    assert_eq!(view.get(&[1, 2]), Some(&12.0));
    assert_eq!(view.to_vec().unwrap(), [0.0, 1.0, 2.0, 10.0, 11.0, 12.0]);
}

#[test]
fn column_vector_types_export_one_dimensional() {
    let tensor = into_dlpack(DVector::from_vec(vec![1i32, 2, 3])).unwrap();
    assert_eq!((tensor.shape(), tensor.strides()), (&[3][..], &[1][..]));
    let tensor = into_dlpack(SVector::<u8, 4>::new(1, 2, 3, 4)).unwrap();
    assert_eq!((tensor.shape(), tensor.strides()), (&[4][..], &[1][..]));
    assert_eq!(tensor.view::<u8>().unwrap().to_vec().unwrap(), [1, 2, 3, 4]);
}

#[test]
fn other_matrix_types_export_two_dimensional_even_with_one_row_or_column() {
    let tensor = into_dlpack(RowDVector::from_vec(vec![1.0f32, 2.0])).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[1, 2][..], &[1, 1][..])
    );
    let tensor = into_dlpack(DMatrix::from_vec(3, 1, vec![1.0f32, 2.0, 3.0])).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[3, 1][..], &[1, 3][..])
    );
    let tensor = into_dlpack(Matrix3xX::from_fn(2, |i, j| (i + 3 * j) as i16)).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[3, 2][..], &[1, 3][..])
    );
}

#[test]
fn smatrix_exports_its_inline_array_column_major() {
    let m = Matrix2x3::new(1u16, 2, 3, 4, 5, 6); // row by row
    let tensor = into_dlpack(m).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 3][..], &[1, 2][..])
    );
    assert!(!tensor.is_read_only());
    assert_eq!(
        tensor.view::<u16>().unwrap().to_vec().unwrap(),
        [1, 2, 3, 4, 5, 6]
    );
}

#[test]
fn empty_matrices_export_with_their_shape() {
    for (rows, cols) in [(0, 3), (3, 0), (0, 0)] {
        let tensor = into_dlpack(DMatrix::<f32>::zeros(rows, cols)).unwrap();
        assert_eq!(tensor.shape(), &[rows as i64, cols as i64]);
        assert!(tensor.is_empty());
        let (m, transfer) = owned::<DMatrix<f32>>(tensor);
        assert_eq!((m.shape(), transfer), ((rows, cols), Transfer::Reclaimed));
    }
    let tensor = into_dlpack(SMatrix::<f64, 0, 2>::zeros()).unwrap();
    assert_eq!(tensor.shape(), &[0, 2]);
}

#[test]
fn exported_matrix_is_writable_through_core() {
    let mut tensor = into_dlpack(sample(2, 2)).unwrap();
    tensor
        .view_mut::<f64>()
        .unwrap()
        .copy_from_slice(&[1.0, 2.0, 3.0, 4.0])
        .unwrap();
    let (m, _) = owned::<DMatrix<f64>>(tensor);
    assert_eq!(m, DMatrix::from_row_slice(2, 2, &[1.0, 2.0, 3.0, 4.0]));
}

#[test]
fn legacy_export_of_a_matrix_works_for_old_consumers() {
    let m = sample(3, 2);
    let data = m.as_ptr();
    let raw = ManagedTensor::export_legacy(MatrixProducer::new(m))
        .unwrap()
        .into_raw_legacy()
        .unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let tensor = unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap();
    assert_eq!(tensor.strides(), &[1, 3]);
    let back = tensor
        .reclaim::<DMatrixProducer<f64>>()
        .unwrap()
        .into_inner();
    assert_eq!(back.as_ptr(), data);
}

// --- reclaim -----------------------------------------------------------------------------------

#[test]
fn reclaim_gives_the_same_dmatrix_back_after_a_trip_through_c() {
    let m = sample(4, 5);
    let data = m.as_ptr();
    let raw = into_dlpack(m).unwrap().into_raw().unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let back = tensor.reclaim::<DMatrixProducer<f64>>().unwrap();
    assert_eq!(back.matrix(), &sample(4, 5));
    assert_eq!(back.into_inner().as_ptr(), data);
}

#[test]
fn a_c_consumer_calling_the_deleter_frees_the_matrix() {
    let raw = into_dlpack(sample(3, 3)).unwrap().into_raw().unwrap();
    // SAFETY: `raw` is a live tensor that we own; its deleter is called once, as a C consumer
    // would, and the pointer is not used again. Miri reports a leak or a double free.
    unsafe {
        let deleter = (*raw).deleter.expect("exported tensors have a deleter");
        deleter(raw);
    }
}

#[test]
fn reclaim_with_another_producer_type_returns_the_tensor_untouched() {
    let tensor = into_dlpack(sample(2, 2)).unwrap();
    let tensor = tensor.reclaim::<DMatrixProducer<f32>>().unwrap_err();
    let tensor = tensor.reclaim::<DVectorProducer<f64>>().unwrap_err();
    let tensor = tensor.reclaim::<SMatrixProducer<f64, 2, 2>>().unwrap_err();
    assert_eq!(tensor.view::<f64>().unwrap().get(&[1, 1]), Some(&11.0));
    assert!(tensor.reclaim::<DMatrixProducer<f64>>().is_ok());
}

#[test]
fn into_owned_reclaims_a_dmatrix_without_copying() {
    let m = sample(3, 3);
    let data = m.as_ptr();
    let (back, transfer) = owned::<DMatrix<f64>>(into_dlpack(m).unwrap());
    assert_eq!((back.as_ptr(), transfer), (data, Transfer::Reclaimed));
    assert_eq!(back, sample(3, 3));
}

#[test]
fn into_owned_takes_a_dvectors_storage_as_a_dmatrix_column_without_copying() {
    let v = DVector::from_vec(vec![1u32, 2, 3]);
    let data = v.as_ptr();
    let (m, transfer) = owned::<DMatrix<u32>>(into_dlpack(v).unwrap());
    assert_eq!(m.shape(), (3, 1));
    assert_eq!((m.as_ptr(), transfer), (data, Transfer::Moved));
}

#[test]
fn into_owned_reclaims_a_dvector_or_takes_any_producers_vec_without_copying() {
    let v = DVector::from_vec(vec![1.5f32, 2.5]);
    let data = v.as_ptr();
    let (v, transfer) = owned::<DVector<f32>>(into_dlpack(v).unwrap());
    assert_eq!((v.as_ptr(), transfer), (data, Transfer::Reclaimed));

    let boxed: Box<[f32]> = vec![1.0, 2.0, 3.0].into_boxed_slice();
    let data = boxed.as_ptr();
    let (v, transfer) = owned::<DVector<f32>>(ManagedTensor::export(boxed).unwrap());
    assert_eq!((v.as_ptr(), transfer), (data, Transfer::Moved));
}

#[test]
fn into_owned_takes_a_vec_producers_memory_for_a_one_dimensional_tensor() {
    let vec = vec![7i8, 8, 9];
    let data = vec.as_ptr();
    let (m, transfer) = owned::<DMatrix<i8>>(ManagedTensor::export(vec).unwrap());
    assert_eq!((m.shape(), m.as_ptr()), ((3, 1), data));
    assert_eq!(transfer, Transfer::Moved);
}

#[test]
fn into_owned_reclaims_an_smatrix_or_copies_a_tensor_of_the_right_shape() {
    let m = Matrix2x3::new(1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0);
    let (back, transfer) = owned::<Matrix2x3<f64>>(into_dlpack(m).unwrap());
    assert_eq!((back, transfer), (m, Transfer::Reclaimed));
    // A DMatrix export of the same shape: copied.
    let d = DMatrix::from_row_slice(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let (back, transfer) = owned::<Matrix2x3<f64>>(into_dlpack(d).unwrap());
    assert_eq!(
        (back, transfer),
        (m, Transfer::Copied(CopyReason::NotOwned))
    );
    // A 1-d tensor is a column vector; a Vec's memory cannot become an inline array.
    let (v, transfer) =
        owned::<SVector<f64, 3>>(ManagedTensor::export(vec![1.0, 2.0, 3.0]).unwrap());
    assert_eq!(v, SVector::<f64, 3>::new(1.0, 2.0, 3.0));
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
}

#[test]
fn into_owned_of_an_smatrix_of_another_shape_is_a_shape_mismatch_that_gives_the_tensor_back() {
    let refused =
        into_owned::<SMatrix<f64, 3, 2>>(into_dlpack(sample(2, 3)).unwrap(), CopyMode::IfNeeded)
            .unwrap_err();
    assert_eq!(
        refused.error,
        Error::ShapeMismatch {
            found: vec![2, 3],
            expected: vec![3, 2]
        }
    );
    let (back, transfer) = owned::<DMatrix<f64>>(refused.value);
    assert_eq!((back, transfer), (sample(2, 3), Transfer::Reclaimed));
}

// --- into_vec ----------------------------------------------------------------------------------

#[test]
fn into_vec_takes_a_dvectors_vec_without_copying() {
    let v = DVector::from_vec(vec![1u64, 2, 3]);
    let data = v.as_ptr();
    let vec = into_dlpack(v).unwrap().into_vec::<u64>().unwrap();
    assert_eq!((vec.as_ptr(), vec), (data, vec![1, 2, 3]));
}

#[test]
fn into_vec_takes_a_single_row_or_column_dmatrixs_vec_which_is_also_row_major() {
    for m in [sample(1, 4), sample(4, 1)] {
        let data = m.as_ptr();
        let expected: Vec<f64> = m.iter().copied().collect();
        let vec = into_dlpack(m).unwrap().into_vec::<f64>().unwrap();
        assert_eq!(vec.as_ptr(), data);
        assert_eq!(vec, expected);
    }
}

#[test]
fn into_vec_refuses_a_general_dmatrix_which_is_not_row_major() {
    let tensor = into_dlpack(sample(2, 3)).unwrap();
    let tensor = tensor.into_vec::<f64>().unwrap_err();
    // Untouched: the matrix is still there.
    assert_eq!(tensor.view::<f64>().unwrap().get(&[1, 2]), Some(&12.0));
}

#[test]
fn give_vec_keeps_the_vec_of_a_general_matrix_even_when_asked_directly() {
    let mut producer = MatrixProducer::new(sample(2, 3));
    let mut slot = dlpack_core::VecSlot::<f64>::new(core::ptr::null(), 6);
    producer.give_vec(&mut slot as &mut dyn Any);
    assert_eq!(slot.take(), None);
    assert_eq!(producer.into_inner(), sample(2, 3));
}

#[test]
fn give_vec_ignores_a_slot_of_another_element_type() {
    let mut producer = MatrixProducer::new(DVector::from_vec(vec![1.0f64]));
    let mut slot = dlpack_core::VecSlot::<f32>::new(core::ptr::null(), 1);
    producer.give_vec(&mut slot as &mut dyn Any);
    assert_eq!(slot.take(), None);
    assert_eq!(producer.matrix().len(), 1);
}

#[test]
fn smatrix_has_no_vec_to_give_and_its_data_survives_being_asked() {
    // Core borrows the producer mutably to ask for a Vec. Under Miri this read after the request
    // fails if the elements lived inside the producer (as an SMatrix's do) instead of on the heap.
    let tensor = into_dlpack(SVector::<f32, 2>::new(1.0, 2.0)).unwrap();
    let tensor = tensor.into_vec::<f32>().unwrap_err();
    assert_eq!(tensor.view::<f32>().unwrap().to_vec().unwrap(), [1.0, 2.0]);
}

// --- views -------------------------------------------------------------------------------------

#[test]
fn to_dlpack_copies_a_view_into_a_new_tensor() {
    let m = sample(4, 5);
    let tensor = to_dlpack(&m.view((1, 1), (2, 3))).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 3][..], &[1, 2][..])
    );
    assert_ne!(
        tensor.data_ptr().cast_const().cast::<f64>(),
        &m[(1, 1)] as *const f64
    );
    assert_eq!(
        tensor.view::<f64>().unwrap().to_vec().unwrap(),
        [11.0, 12.0, 13.0, 21.0, 22.0, 23.0]
    );
    let column = to_dlpack(&m.column(2)).unwrap();
    assert_eq!(column.shape(), &[4]);
    assert_eq!(
        column.view::<f64>().unwrap().to_vec().unwrap(),
        [2.0, 12.0, 22.0, 32.0]
    );
}

#[test]
fn export_view_is_read_only_zero_copy_with_the_views_strides() {
    let m = sample(4, 5);
    // SAFETY: `m` is neither written nor dropped before the tensor is dropped, below.
    let mut tensor = unsafe { export_view(m.view((1, 1), (2, 3))) }.unwrap();
    assert!(tensor.is_read_only());
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 3][..], &[1, 4][..])
    );
    let view = tensor.view::<f64>().unwrap();
    assert_eq!(view.as_ptr(), &m[(1, 1)] as *const f64);
    assert_eq!(view.to_vec().unwrap(), [11.0, 12.0, 13.0, 21.0, 22.0, 23.0]);
    assert_eq!(tensor.view_mut::<f64>().unwrap_err(), Error::ReadOnly);
    assert_eq!(
        ManagedTensor::into_raw_legacy(tensor).unwrap_err().error,
        Error::LegacyReadOnly
    );
    assert_eq!(m, sample(4, 5));
}

#[test]
fn export_view_of_a_row_has_the_column_stride() {
    let m = sample(3, 4);
    // SAFETY: `m` outlives the tensor and is not written.
    let tensor = unsafe { export_view(m.row(1)) }.unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[1, 4][..], &[1, 3][..])
    );
    assert_eq!(
        tensor.view::<f64>().unwrap().to_vec().unwrap(),
        [10.0, 11.0, 12.0, 13.0]
    );
}

#[test]
fn export_view_mut_writes_land_in_the_matrix() {
    let mut m = DMatrix::<i32>::zeros(3, 3);
    {
        // SAFETY: `m` is not used until the tensor is dropped at the end of this block.
        let mut tensor = unsafe { export_view_mut(m.view_mut((0, 1), (3, 2))) }.unwrap();
        assert!(!tensor.is_read_only());
        assert_eq!(tensor.strides(), &[1, 3]);
        let mut view = tensor.view_mut::<i32>().unwrap();
        view.copy_from_slice(&[1, 2, 3, 4, 5, 6]).unwrap();
    }
    assert_eq!(
        m,
        DMatrix::from_row_slice(3, 3, &[0, 1, 2, 0, 3, 4, 0, 5, 6])
    );
}

#[test]
fn exported_views_are_not_reclaimed_as_matrices() {
    let m = sample(2, 2);
    // SAFETY: `m` outlives the tensor and is not written.
    let tensor = unsafe { export_view(m.view((0, 0), (2, 2))) }.unwrap();
    let (copy, transfer) = owned::<DMatrix<f64>>(tensor);
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_eq!(copy, m);
    assert_ne!(copy.as_ptr(), m.as_ptr());
}

#[test]
fn an_empty_matrix_or_view_larger_than_dlpack_sizes_is_refused_not_truncated() {
    // nalgebra makes empty matrices of any size without memory; DLPack sizes are i64.
    let m = DMatrix::<f32>::from_vec(usize::MAX, 0, Vec::new());
    let refused = into_dlpack(m).unwrap_err();
    assert!(
        matches!(&refused.error, Error::Overflow { what } if what.contains("18446744073709551615")),
        "{:?}",
        refused.error
    );
    assert_eq!(refused.value.shape(), (usize::MAX, 0));

    let empty: [f32; 0] = [];
    let view = nalgebra::DMatrixView::from_slice_generic(
        &empty,
        nalgebra::Dyn(0),
        nalgebra::Dyn(usize::MAX),
    );
    assert!(matches!(
        to_dlpack(&view).unwrap_err(),
        Error::Overflow { .. }
    ));
    // SAFETY: refused, so no tensor outlives `empty`.
    let err = unsafe { export_view(view) }.unwrap_err();
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    // Up to i64::MAX, the shape is exact.
    let m = DMatrix::<f32>::from_vec(i64::MAX as usize, 0, Vec::new());
    assert_eq!(into_dlpack(m).unwrap().shape(), &[i64::MAX, 0]);
}
