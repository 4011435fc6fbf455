//! Export: owned matrices move into tensors without a copy, with nalgebra's column-major strides;
//! reclaim and `into_vec` give the memory back; views export only by copy or through the
//! `unsafe` functions. Leaks and double frees are Miri's to find: the suite runs under
//! `-Zmiri-strict-provenance`.

mod common;

use std::any::Any;

use dlpack_core::{DataType, Device, Error, Export, ManagedTensor};
use dlpack_nalgebra::{
    DMatrixProducer, DVectorProducer, MatrixProducer, SMatrixProducer, export, export_copy,
    export_view, export_view_mut, into_dmatrix, into_dvector, into_smatrix,
};
use nalgebra::{DMatrix, DVector, Matrix2x3, Matrix3xX, RowDVector, SMatrix, SVector};

/// m[i, j] = 10 i + j
fn sample(rows: usize, cols: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |i, j| (10 * i + j) as f64)
}

// --- layout ------------------------------------------------------------------------------------

#[test]
fn dmatrix_exports_column_major_without_copying() {
    let m = sample(2, 3);
    let data = m.as_ptr();
    let tensor = export(m).unwrap();
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
    let tensor = export(sample(2, 3)).unwrap();
    let view = tensor.view::<f64>().unwrap();
    assert_eq!(view.get(&[1, 2]), Some(&12.0));
    assert_eq!(view.to_vec().unwrap(), [0.0, 1.0, 2.0, 10.0, 11.0, 12.0]);
}

#[test]
fn column_vector_types_export_one_dimensional() {
    let tensor = export(DVector::from_vec(vec![1i32, 2, 3])).unwrap();
    assert_eq!((tensor.shape(), tensor.strides()), (&[3][..], &[1][..]));
    let tensor = export(SVector::<u8, 4>::new(1, 2, 3, 4)).unwrap();
    assert_eq!((tensor.shape(), tensor.strides()), (&[4][..], &[1][..]));
    assert_eq!(tensor.view::<u8>().unwrap().to_vec().unwrap(), [1, 2, 3, 4]);
}

#[test]
fn other_matrix_types_export_two_dimensional_even_with_one_row_or_column() {
    let tensor = export(RowDVector::from_vec(vec![1.0f32, 2.0])).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[1, 2][..], &[1, 1][..])
    );
    let tensor = export(DMatrix::from_vec(3, 1, vec![1.0f32, 2.0, 3.0])).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[3, 1][..], &[1, 3][..])
    );
    let tensor = export(Matrix3xX::from_fn(2, |i, j| (i + 3 * j) as i16)).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[3, 2][..], &[1, 3][..])
    );
}

#[test]
fn smatrix_exports_its_inline_array_column_major() {
    let m = Matrix2x3::new(1u16, 2, 3, 4, 5, 6); // row by row
    let tensor = export(m).unwrap();
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
        let tensor = export(DMatrix::<f32>::zeros(rows, cols)).unwrap();
        assert_eq!(tensor.shape(), &[rows as i64, cols as i64]);
        assert!(tensor.is_empty());
        assert_eq!(into_dmatrix::<f32>(tensor).unwrap().shape(), (rows, cols));
    }
    let tensor = export(SMatrix::<f64, 0, 2>::zeros()).unwrap();
    assert_eq!(tensor.shape(), &[0, 2]);
}

#[test]
fn exported_matrix_is_writable_through_core() {
    let mut tensor = export(sample(2, 2)).unwrap();
    tensor
        .view_mut::<f64>()
        .unwrap()
        .copy_from_slice(&[1.0, 2.0, 3.0, 4.0])
        .unwrap();
    let m = into_dmatrix::<f64>(tensor).unwrap();
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
    let raw = export(m).unwrap().into_raw().unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let back = tensor.reclaim::<DMatrixProducer<f64>>().unwrap();
    assert_eq!(back.matrix(), &sample(4, 5));
    assert_eq!(back.into_inner().as_ptr(), data);
}

#[test]
fn a_c_consumer_calling_the_deleter_frees_the_matrix() {
    let raw = export(sample(3, 3)).unwrap().into_raw().unwrap();
    // SAFETY: `raw` is a live tensor that we own; its deleter is called once, as a C consumer
    // would, and the pointer is not used again. Miri reports a leak or a double free.
    unsafe {
        let deleter = (*raw).deleter.expect("exported tensors have a deleter");
        deleter(raw);
    }
}

#[test]
fn reclaim_with_another_producer_type_returns_the_tensor_untouched() {
    let tensor = export(sample(2, 2)).unwrap();
    let tensor = tensor.reclaim::<DMatrixProducer<f32>>().unwrap_err();
    let tensor = tensor.reclaim::<DVectorProducer<f64>>().unwrap_err();
    let tensor = tensor.reclaim::<SMatrixProducer<f64, 2, 2>>().unwrap_err();
    assert_eq!(tensor.view::<f64>().unwrap().get(&[1, 1]), Some(&11.0));
    assert!(tensor.reclaim::<DMatrixProducer<f64>>().is_ok());
}

#[test]
fn into_dmatrix_reclaims_a_dmatrix_without_copying() {
    let m = sample(3, 3);
    let data = m.as_ptr();
    let back = into_dmatrix::<f64>(export(m).unwrap()).unwrap();
    assert_eq!(back.as_ptr(), data);
    assert_eq!(back, sample(3, 3));
}

#[test]
fn into_dmatrix_takes_a_dvectors_storage_as_a_column_without_copying() {
    let v = DVector::from_vec(vec![1u32, 2, 3]);
    let data = v.as_ptr();
    let m = into_dmatrix::<u32>(export(v).unwrap()).unwrap();
    assert_eq!(m.shape(), (3, 1));
    assert_eq!(m.as_ptr(), data);
}

#[test]
fn into_dvector_reclaims_a_dvector_or_takes_any_producers_vec_without_copying() {
    let v = DVector::from_vec(vec![1.5f32, 2.5]);
    let data = v.as_ptr();
    assert_eq!(
        into_dvector::<f32>(export(v).unwrap()).unwrap().as_ptr(),
        data
    );

    let boxed: Box<[f32]> = vec![1.0, 2.0, 3.0].into_boxed_slice();
    let data = boxed.as_ptr();
    let v = into_dvector::<f32>(ManagedTensor::export(boxed).unwrap()).unwrap();
    assert_eq!(v.as_ptr(), data);
}

#[test]
fn into_dmatrix_takes_a_vec_producers_memory_for_a_one_dimensional_tensor() {
    let vec = vec![7i8, 8, 9];
    let data = vec.as_ptr();
    let m = into_dmatrix::<i8>(ManagedTensor::export(vec).unwrap()).unwrap();
    assert_eq!((m.shape(), m.as_ptr()), ((3, 1), data));
}

#[test]
fn into_smatrix_reclaims_or_copies_a_tensor_of_the_right_shape() {
    let m = Matrix2x3::new(1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0);
    assert_eq!(into_smatrix::<f64, 2, 3>(export(m).unwrap()).unwrap(), m);
    // A DMatrix export of the same shape: copied.
    let d = DMatrix::from_row_slice(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(into_smatrix::<f64, 2, 3>(export(d).unwrap()).unwrap(), m);
    // A 1-d tensor is a column vector.
    let v = into_smatrix::<f64, 3, 1>(ManagedTensor::export(vec![1.0, 2.0, 3.0]).unwrap());
    assert_eq!(v.unwrap(), SVector::<f64, 3>::new(1.0, 2.0, 3.0));
}

#[test]
fn into_smatrix_of_another_shape_is_a_shape_mismatch() {
    let err = into_smatrix::<f64, 3, 2>(export(sample(2, 3)).unwrap()).unwrap_err();
    assert_eq!(
        err,
        Error::ShapeMismatch {
            found: vec![2, 3],
            expected: vec![3, 2]
        }
    );
}

// --- into_vec ----------------------------------------------------------------------------------

#[test]
fn into_vec_takes_a_dvectors_vec_without_copying() {
    let v = DVector::from_vec(vec![1u64, 2, 3]);
    let data = v.as_ptr();
    let vec = export(v).unwrap().into_vec::<u64>().unwrap();
    assert_eq!((vec.as_ptr(), vec), (data, vec![1, 2, 3]));
}

#[test]
fn into_vec_takes_a_single_row_or_column_dmatrixs_vec_which_is_also_row_major() {
    for m in [sample(1, 4), sample(4, 1)] {
        let data = m.as_ptr();
        let expected: Vec<f64> = m.iter().copied().collect();
        let vec = export(m).unwrap().into_vec::<f64>().unwrap();
        assert_eq!(vec.as_ptr(), data);
        assert_eq!(vec, expected);
    }
}

#[test]
fn into_vec_refuses_a_general_dmatrix_which_is_not_row_major() {
    let tensor = export(sample(2, 3)).unwrap();
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
    let tensor = export(SVector::<f32, 2>::new(1.0, 2.0)).unwrap();
    let tensor = tensor.into_vec::<f32>().unwrap_err();
    assert_eq!(tensor.view::<f32>().unwrap().to_vec().unwrap(), [1.0, 2.0]);
}

// --- views -------------------------------------------------------------------------------------

#[test]
fn export_copy_copies_a_view_into_a_new_tensor() {
    let m = sample(4, 5);
    let tensor = export_copy(&m.view((1, 1), (2, 3))).unwrap();
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
    let column = export_copy(&m.column(2)).unwrap();
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
    let copy = into_dmatrix::<f64>(tensor).unwrap();
    assert_eq!(copy, m);
    assert_ne!(copy.as_ptr(), m.as_ptr());
}
