//! Import: foreign DLPack tensors as ndarray views, owned arrays and `ImportedArray`s.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Data, Foreign};
use dlpack_core::{
    BorrowedTensor, CopyMode, CopyReason, DataType, Error, Flags, ManagedTensor, Transfer, Version,
};
use dlpack_ndarray::{ImportedArray, into_dlpack, into_owned, to_owned, view, view_mut};
use ndarray::{
    Array1, Array2, ArrayD, ArrayView0, ArrayView1, ArrayView2, ArrayViewD, Ix0, Ix1, Ix2, Ix3,
    Ix4, Ix5, Ix6, IxDyn, array, s,
};

/// Imports a built foreign tensor, returning it with its deleter counter.
fn import(foreign: Foreign) -> (ManagedTensor, Arc<AtomicUsize>) {
    let (tensor, deletes, _) = import_with_buffer(foreign);
    (tensor, deletes)
}

/// Imports a built foreign tensor, returning it with its deleter counter and the start of the
/// fixture's data buffer.
fn import_with_buffer(foreign: Foreign) -> (ManagedTensor, Arc<AtomicUsize>, *const f32) {
    let built = foreign.build();
    let deletes = built.counter();
    let buffer = built.pointers.buffer.cast::<f32>().cast_const();
    // SAFETY: the fixture built a live tensor that nobody else owns.
    let tensor = unsafe { ManagedTensor::from_raw(built.ptr) }.unwrap();
    (tensor, deletes, buffer)
}

fn counting(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

#[test]
fn a_c_order_tensor_views_in_place() {
    let (tensor, deletes, buffer) = import_with_buffer(Foreign::of(&counting(6), &[2, 3]));
    let v: ArrayView2<f32> = view(&tensor).unwrap();
    assert_eq!(v, array![[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]);
    assert_eq!(v.as_ptr(), buffer);
    assert_eq!(v.strides(), &[3, 1]);
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    drop(tensor);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn a_fortran_order_tensor_views_with_column_major_strides() {
    let (tensor, _) = import(Foreign::of(&counting(6), &[2, 3]).with_strides(&[1, 2]));
    let v: ArrayView2<f32> = view(&tensor).unwrap();
    assert_eq!(v.strides(), &[1, 2]);
    assert_eq!(v, array![[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]);
    assert!(v.t().is_standard_layout());
}

/// NumPy's `a[::-1]` exports its last element's address (as data or byte_offset) and a negative
/// stride; the ndarray view starts at the same element and runs backwards over the same memory.
#[test]
fn a_reversed_numpy_view_becomes_a_negative_stride_view() {
    let (tensor, _, buffer) = import_with_buffer(
        Foreign::of(&counting(6), &[6])
            .with_strides(&[-1])
            .byte_offset(5 * 4),
    );
    let v: ArrayView1<f32> = view(&tensor).unwrap();
    assert_eq!(v, array![5.0, 4.0, 3.0, 2.0, 1.0, 0.0]);
    assert_eq!(v.strides(), &[-1]);
    assert_eq!(v.as_ptr(), buffer.wrapping_add(5));
    // The ndarray view behaves like any other: reversing it again gives the memory order.
    assert_eq!(v.slice(s![..;-1]).as_slice(), Some(&counting(6)[..]));
}

#[test]
fn negative_strides_on_both_axes_of_a_2d_tensor() {
    // a[::-1, ::-2] of a 3 x 4 C-order array: first element is a[2, 3] (offset 11).
    let (mut tensor, _, buffer) = import_with_buffer(
        Foreign::of(&counting(12), &[3, 2])
            .with_strides(&[-4, -2])
            .data(Data::Buffer { offset: 11 * 4 }),
    );
    let expected = array![[11.0, 9.0], [7.0, 5.0], [3.0, 1.0]];
    let v: ArrayView2<f32> = view(&tensor).unwrap();
    assert_eq!(v, expected);
    assert_eq!(v.strides(), &[-4, -2]);
    assert_eq!(v.as_ptr(), buffer.wrapping_add(11));

    let mut v = view_mut::<f32, Ix2>(&mut tensor).unwrap();
    assert_eq!(v.strides(), &[-4, -2]);
    v[[0, 1]] = -9.0; // a[2, 1]
    // SAFETY: the fixture's buffer holds 12 f32s, alive while `tensor` is; no view is left.
    let memory = unsafe { std::slice::from_raw_parts(buffer, 12) };
    assert_eq!(memory[9], -9.0);
}

#[test]
fn a_broadcast_tensor_views_read_only_with_zero_strides() {
    let (mut tensor, deletes) = import(Foreign::of(&counting(3), &[4, 3]).with_strides(&[0, 1]));
    let v: ArrayView2<f32> = view(&tensor).unwrap();
    assert_eq!(v.strides(), &[0, 1]);
    assert_eq!(v, array![[0.0, 1.0, 2.0]].broadcast((4, 3)).unwrap());
    assert_eq!(
        view_mut::<f32, Ix2>(&mut tensor).unwrap_err(),
        Error::OverlappingStrides {
            shape: vec![4, 3],
            strides: vec![0, 1]
        }
    );
    let copy: Array2<f32> = to_owned(&tensor).unwrap();
    assert!(copy.is_standard_layout());
    assert_eq!(copy.row(3), array![0.0, 1.0, 2.0]);

    let mut imported = ImportedArray::<f32, Ix2>::new(tensor).unwrap();
    assert_eq!(imported.view().strides(), &[0, 1]);
    assert!(matches!(
        imported.view_mut().unwrap_err(),
        Error::OverlappingStrides { .. }
    ));
    drop(imported);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn a_0d_tensor_views_as_ix0_and_ixdyn() {
    let (mut tensor, _) = import(Foreign::of(&[42i32], &[]));
    let v: ArrayView0<i32> = view(&tensor).unwrap();
    assert_eq!(v.into_scalar(), &42);
    let v: ArrayViewD<i32> = view(&tensor).unwrap();
    assert_eq!((v.ndim(), v.len()), (0, 1));
    view_mut::<i32, Ix0>(&mut tensor).unwrap()[()] = 7;
    let (owned, transfer): (ndarray::Array0<i32>, _) =
        into_owned(tensor, CopyMode::IfNeeded).unwrap();
    assert_eq!(owned.into_scalar(), 7);
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
}

#[test]
fn a_size_0_tensor_views_as_an_empty_array() {
    for data in [Data::Null, Data::Buffer { offset: 0 }] {
        let (mut tensor, deletes) = import(Foreign::new(DataType::F64, &[0, 3]).data(data));
        let v: ArrayView2<f64> = view(&tensor).unwrap();
        assert_eq!((v.shape(), v.len()), (&[0, 3][..], 0));
        assert_eq!(v.iter().count(), 0);
        assert_eq!(view_mut::<f64, Ix2>(&mut tensor).unwrap().len(), 0);
        let owned: Array2<f64> = into_owned(tensor, CopyMode::IfNeeded).unwrap().0;
        assert_eq!(owned.shape(), &[0, 3]);
        assert_eq!(deletes.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn every_fixed_dimensionality_and_ixdyn_import() {
    fn check<D: ndarray::Dimension>(shape: &[i64]) {
        let n = shape.iter().product::<i64>() as usize;
        let (tensor, _) = import(Foreign::of(&counting(n), shape));
        let v = view::<f32, D>(&tensor).unwrap();
        let dims: Vec<i64> = v.shape().iter().map(|&d| d as i64).collect();
        assert_eq!(dims, shape);
        assert_eq!(v.iter().copied().collect::<Vec<_>>(), counting(n));
        let dynamic: ArrayViewD<f32> = view(&tensor).unwrap();
        assert_eq!(dynamic.shape(), v.shape());
    }
    check::<Ix0>(&[]);
    check::<Ix1>(&[3]);
    check::<Ix2>(&[2, 3]);
    check::<Ix3>(&[2, 1, 3]);
    check::<Ix4>(&[1, 2, 1, 2]);
    check::<Ix5>(&[2, 1, 1, 2, 1]);
    check::<Ix6>(&[1, 2, 1, 2, 1, 2]);
    check::<IxDyn>(&[1, 2, 1, 2, 1, 2, 2]);
}

#[test]
fn writes_through_a_mutable_view_land_in_the_foreign_memory() {
    let (mut tensor, deletes, buffer) =
        import_with_buffer(Foreign::of(&counting(6), &[3, 2]).with_strides(&[1, 3]));
    {
        let mut v = view_mut::<f32, Ix2>(&mut tensor).unwrap();
        assert_eq!(v.strides(), &[1, 3]);
        v.column_mut(1).fill(-1.0);
    }
    // Memory order: column 0 is elements 0..3, column 1 is elements 3..6.
    // SAFETY: the fixture's buffer holds 6 f32s, alive while `tensor` is; no view is left.
    let memory = unsafe { std::slice::from_raw_parts(buffer, 6) };
    assert_eq!(memory, [0.0, 1.0, 2.0, -1.0, -1.0, -1.0]);
    drop(tensor);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn a_borrowed_tensor_lends_views_too() {
    let mut values = [1i16, 2, 3, 4];
    let shape = [2i64, 2];
    let strides = [2i64, 1];
    let dl = dlpack_core::ffi::DLTensor {
        data: values.as_mut_ptr().cast(),
        device: dlpack_core::Device::CPU,
        ndim: 2,
        dtype: DataType::I16,
        shape: shape.as_ptr().cast_mut(),
        strides: strides.as_ptr().cast_mut(),
        byte_offset: 0,
    };
    // SAFETY: `dl` describes `values`, which outlive the borrowed tensor and are only reached
    // through it while it lives.
    let mut borrowed =
        unsafe { BorrowedTensor::new(&dl, Version::CURRENT, Flags::empty()) }.unwrap();
    view_mut::<i16, Ix2>(&mut borrowed).unwrap()[[1, 0]] = 30;
    let v: ArrayView2<i16> = view(&borrowed).unwrap();
    assert_eq!(v, array![[1, 2], [30, 4]]);
    drop(borrowed);
    assert_eq!(values, [1, 2, 30, 4]);
}

#[test]
fn a_legacy_foreign_tensor_imports_read_only() {
    let built = Foreign::of(&counting(4), &[4]).build_legacy();
    let deletes = built.counter();
    // SAFETY: a live legacy tensor that nobody else owns.
    let mut tensor = unsafe { ManagedTensor::from_raw_legacy(built.ptr) }.unwrap();
    let v: ArrayView1<f32> = view(&tensor).unwrap();
    assert_eq!(v.len(), 4);
    assert_eq!(
        view_mut::<f32, Ix1>(&mut tensor).unwrap_err(),
        Error::ReadOnly
    );
    drop(tensor);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

/// An `ImportedArray` owns its tensor, so a function can return it and another thread can use it.
#[test]
fn an_imported_array_can_be_returned_and_sent_to_another_thread() {
    /// # Safety
    /// `raw` is a live tensor that the caller owns and gives away.
    unsafe fn load(
        raw: *mut dlpack_core::ffi::DLManagedTensorVersioned,
    ) -> Result<ImportedArray<f32, Ix2>, Error> {
        // SAFETY: forwarded contract.
        let tensor = unsafe { ManagedTensor::from_raw(raw) }?;
        Ok(ImportedArray::new(tensor)?)
    }
    let built = Foreign::of(&counting(6), &[2, 3]).build();
    let deletes = built.counter();
    // SAFETY: the fixture built a live tensor that nobody else owns.
    let mut imported = unsafe { load(built.ptr) }.unwrap();
    let address = imported.view().as_ptr() as usize;
    imported.view_mut().unwrap()[[1, 2]] = 50.0;
    let sum = std::thread::spawn(move || {
        assert_eq!(imported.view().as_ptr() as usize, address);
        assert_eq!(imported.tensor().shape(), &[2, 3]);
        imported.view().sum()
    })
    .join()
    .unwrap();
    assert_eq!(sum, 0.0 + 1.0 + 2.0 + 3.0 + 4.0 + 50.0);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn an_imported_array_deletes_its_tensor_once() {
    let (tensor, deletes) = import(Foreign::of(&counting(4), &[2, 2]));
    let imported = ImportedArray::<f32, Ix2>::new(tensor).unwrap();
    let tensor = imported.into_tensor();
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    let imported = ImportedArray::<f32, IxDyn>::new(tensor).unwrap();
    assert_eq!(imported.view().ndim(), 2);
    drop(imported);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn an_imported_read_only_tensor_lends_views_and_says_why_not_mutable_ones() {
    let (tensor, _) = import(Foreign::of(&counting(2), &[2]).flags(Flags::READ_ONLY.0));
    let mut imported = ImportedArray::<f32, Ix1>::new(tensor).unwrap();
    assert_eq!(imported.view(), array![0.0, 1.0]);
    assert_eq!(imported.view_mut().unwrap_err(), Error::ReadOnly);
}

#[test]
fn into_owned_copies_a_foreign_tensor_and_deletes_it_once() {
    let (tensor, deletes, buffer) = import_with_buffer(
        Foreign::of(&counting(6), &[3, 2])
            .with_strides(&[-2, 1])
            .data(Data::Buffer { offset: 4 * 4 }),
    );
    let foreign_address = buffer.wrapping_add(4);
    let (owned, transfer): (Array2<f32>, _) = into_owned(tensor, CopyMode::IfNeeded).unwrap();
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
    assert_ne!(owned.as_ptr(), foreign_address);
    assert!(owned.is_standard_layout());
    assert_eq!(owned, array![[4.0, 5.0], [2.0, 3.0], [0.0, 1.0]]);
}

#[test]
fn to_owned_copies_and_keeps_the_tensor() {
    let (tensor, deletes) = import(Foreign::of(&counting(4), &[2, 2]).with_strides(&[1, 2]));
    let owned: ArrayD<f32> = to_owned(&tensor).unwrap();
    assert_eq!(owned, array![[0.0, 2.0], [1.0, 3.0]].into_dyn());
    assert!(owned.is_standard_layout());
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    drop(tensor);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn into_owned_takes_a_vec_export_without_a_copy() {
    let v = vec![1u64, 2, 3, 4, 5, 6];
    let address = v.as_ptr();
    let tensor = ManagedTensor::export(v).unwrap();
    let (a, transfer): (Array1<u64>, _) = into_owned(tensor, CopyMode::Never).unwrap();
    assert_eq!((a.as_ptr(), transfer), (address, Transfer::Moved));
}

#[test]
fn a_view_of_an_ndarray_export_is_the_array_itself() {
    let a = array![[1u8, 2, 3], [4, 5, 6]].slice_move(s![.., ..;-1]);
    let (address, expected) = (a.as_ptr(), a.clone());
    let raw = into_dlpack(a).unwrap().into_raw().unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let v: ArrayView2<u8> = view(&tensor).unwrap();
    assert_eq!((v.as_ptr(), v.strides()), (address, &[3, -1][..]));
    assert_eq!(v, expected);
}
