//! The adapter vocabulary, verb by verb, as every adapter crate speaks it: `into_dlpack`,
//! `to_dlpack`, `export_view`, `export_view_mut`, `view`, `view_mut` and `into_owned` (each
//! `Transfer` it reports, and each refusal, which gives the value back), then this crate's
//! extras: `to_owned` and `ImportedArray`. Small arrays only: Miri runs this file.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Data, Foreign};
use dlpack_core::{
    BorrowedTensor, CopyMode, CopyReason, DataType, Device, DeviceType, Error, Flags,
    ManagedTensor, Transfer, Version,
};
use dlpack_ndarray::{
    ImportedArray, export_view, export_view_mut, into_dlpack, into_owned, to_dlpack, to_owned,
    view, view_mut,
};
use ndarray::{
    ArcArray, Array1, Array2, ArrayD, ArrayView1, ArrayView2, ArrayViewD, Ix1, Ix2, IxDyn,
    ShapeBuilder, array, s,
};

/// a[i, j] = 10 i + j, in C order.
fn sample(rows: usize, cols: usize) -> Array2<f64> {
    Array2::from_shape_fn((rows, cols), |(i, j)| (10 * i + j) as f64)
}

/// Imports a foreign tensor (one whose producer this workspace does not know), with the count
/// of its deleter's calls.
fn foreign(foreign: Foreign) -> (ManagedTensor, Arc<AtomicUsize>) {
    let built = foreign.build();
    let deletes = built.counter();
    // SAFETY: the fixture built a live tensor that nobody else owns.
    let tensor = unsafe { ManagedTensor::from_raw(built.ptr) }.unwrap();
    (tensor, deletes)
}

/// The 2 x 3 sample as a foreign row-major tensor.
fn foreign_row_major() -> (ManagedTensor, Arc<AtomicUsize>) {
    foreign(Foreign::of(&[0.0f64, 1.0, 2.0, 10.0, 11.0, 12.0], &[2, 3]))
}

/// The 2 x 3 sample as a foreign column-major tensor.
fn foreign_column_major() -> (ManagedTensor, Arc<AtomicUsize>) {
    foreign(Foreign::of(&[0.0f64, 10.0, 1.0, 11.0, 2.0, 12.0], &[2, 3]).with_strides(&[1, 2]))
}

// --- into_dlpack -------------------------------------------------------------------------------

#[test]
fn into_dlpack_moves_an_array_out_writable_and_an_arc_array_read_only() {
    let a = Array2::from_shape_vec((2, 3).f(), vec![0u16, 10, 1, 11, 2, 12]).unwrap();
    let address = a.as_ptr();
    let tensor = into_dlpack(a).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 3][..], &[1, 2][..])
    );
    assert_eq!(tensor.data_ptr().cast_const().cast::<u16>(), address);
    assert!(!tensor.is_read_only());
    assert!(!tensor.flags().contains(Flags::IS_COPIED));

    let shared = ArcArray::from_vec(vec![1i32, 2, 3]);
    let tensor = into_dlpack(shared.clone()).unwrap();
    assert_eq!(
        tensor.data_ptr().cast_const().cast::<i32>(),
        shared.as_ptr()
    );
    assert!(tensor.is_read_only());
    assert_eq!(tensor.to_vec::<i32>().unwrap(), [1, 2, 3]);
}

#[test]
fn into_dlpack_refuses_what_dlpack_cannot_describe_and_gives_the_array_back() {
    let a = ArrayD::<u8>::zeros(IxDyn(&[1; dlpack_core::MAX_NDIM + 1]));
    let address = a.as_ptr();
    let refused = into_dlpack(a).unwrap_err();
    assert!(matches!(refused.error, Error::BadNdim { .. }));
    assert_eq!(refused.value.as_ptr(), address);
    assert_eq!(refused.value.ndim(), dlpack_core::MAX_NDIM + 1);

    let shared = ArcArray::<u8, IxDyn>::zeros(IxDyn(&[1; dlpack_core::MAX_NDIM + 1]));
    let refused = into_dlpack(shared.clone()).unwrap_err();
    assert!(matches!(refused.error, Error::BadNdim { .. }));
    assert_eq!(refused.value.as_ptr(), shared.as_ptr());
}

// --- to_dlpack ---------------------------------------------------------------------------------

#[test]
fn to_dlpack_copies_any_array_or_view_in_c_order() {
    let a = sample(2, 3);
    let tensor = to_dlpack(&a.slice(s![.., ..;-2])).unwrap();
    assert!(tensor.flags().contains(Flags::IS_COPIED));
    assert!(!tensor.is_read_only());
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 2][..], &[2, 1][..])
    );
    assert_ne!(tensor.data_ptr().cast_const().cast::<f64>(), a.as_ptr());
    assert_eq!(tensor.to_vec::<f64>().unwrap(), [2.0, 0.0, 12.0, 10.0]);
}

// --- export_view, export_view_mut --------------------------------------------------------------

#[test]
fn export_view_lends_an_array_read_only_without_a_copy() {
    let a = sample(3, 2);
    // SAFETY: the tensor is dropped at the end of this block, before `a`, which nobody writes
    // meanwhile.
    unsafe {
        let tensor = export_view(&a.t()).unwrap();
        assert!(tensor.is_read_only());
        assert_eq!(
            (tensor.shape(), tensor.strides()),
            (&[2, 3][..], &[1, 2][..])
        );
        assert_eq!(tensor.data_ptr().cast_const().cast::<f64>(), a.as_ptr());
        assert_eq!(view::<f64, Ix2>(&tensor).unwrap(), a.t());
    }
}

#[test]
fn export_view_mut_lends_an_array_writable_without_a_copy() {
    let mut a = sample(2, 2);
    // SAFETY: the tensor is dropped at the end of this block, before `a` is used again.
    unsafe {
        let mut tensor = export_view_mut(&mut a.column_mut(1)).unwrap();
        assert!(!tensor.is_read_only());
        view_mut::<f64, Ix1>(&mut tensor).unwrap().fill(-1.0);
    }
    assert_eq!(a, array![[0.0, -1.0], [10.0, -1.0]]);
}

// --- view, view_mut ----------------------------------------------------------------------------

#[test]
fn view_lends_an_ndarray_view_of_the_same_memory() {
    let (tensor, _) = foreign_column_major();
    let v: ArrayView2<f64> = view(&tensor).unwrap();
    assert_eq!(v.as_ptr(), tensor.data_ptr().cast_const().cast::<f64>());
    assert_eq!(v.strides(), &[1, 2]);
    assert_eq!(v, sample(2, 3));
    let dynamic: ArrayViewD<f64> = view(&tensor).unwrap();
    assert_eq!(dynamic.shape(), &[2, 3]);

    // Negative strides: a view that runs backwards over the same memory.
    let a = Array1::from_vec(vec![1u8, 2, 3, 4]).slice_move(s![..;-1]);
    let address = a.as_ptr();
    let tensor = into_dlpack(a).unwrap();
    let v: ArrayView1<u8> = view(&tensor).unwrap();
    assert_eq!((v.as_ptr(), v.strides()), (address, &[-1][..]));
    assert_eq!(v, array![4, 3, 2, 1]);
}

#[test]
fn view_refuses_another_ndim_or_dtype() {
    let (tensor, _) = foreign_row_major();
    assert_eq!(
        view::<f64, Ix1>(&tensor).unwrap_err(),
        Error::NdimMismatch {
            found: 2,
            expected: 1
        }
    );
    assert_eq!(
        view::<f32, Ix2>(&tensor).unwrap_err(),
        Error::DataTypeMismatch {
            found: DataType::F64,
            expected: DataType::F32
        }
    );
}

#[test]
fn view_mut_writes_through_a_managed_or_a_borrowed_tensor() {
    let (mut tensor, _) = foreign_row_major();
    view_mut::<f64, Ix2>(&mut tensor).unwrap()[[1, 2]] = -12.0;
    assert_eq!(tensor.to_vec::<f64>().unwrap()[5], -12.0);

    let mut values = [1i16, 2, 3, 4];
    let (shape, strides) = ([2i64, 2], [1i64, 2]);
    let dl = dlpack_core::ffi::DLTensor {
        data: values.as_mut_ptr().cast(),
        device: Device::CPU,
        ndim: 2,
        dtype: DataType::I16,
        shape: shape.as_ptr().cast_mut(),
        strides: strides.as_ptr().cast_mut(),
        byte_offset: 0,
    };
    // SAFETY: `dl` describes `values`, which outlive the borrowed tensor and are reached only
    // through it while it lives.
    let mut borrowed =
        unsafe { BorrowedTensor::new(&dl, Version::CURRENT, Flags::empty()) }.unwrap();
    view_mut::<i16, Ix2>(&mut borrowed).unwrap()[[0, 1]] = 30;
    assert_eq!(
        view::<i16, Ix2>(&borrowed).unwrap(),
        array![[1, 30], [2, 4]]
    );
    drop(borrowed);
    assert_eq!(values, [1, 2, 30, 4]);
}

#[test]
fn view_mut_refuses_a_read_only_tensor() {
    let mut tensor = into_dlpack(ArcArray::from_vec(vec![1.0f32, 2.0])).unwrap();
    assert_eq!(
        view_mut::<f32, Ix1>(&mut tensor).unwrap_err(),
        Error::ReadOnly
    );
}

// --- into_owned: each Transfer -----------------------------------------------------------------

#[test]
fn into_owned_reclaims_an_exported_array_under_any_dimension_type() {
    let a = sample(2, 3).reversed_axes(); // Fortran layout
    let address = a.as_ptr();
    let (back, transfer) =
        into_owned::<f64, IxDyn>(into_dlpack(a).unwrap(), CopyMode::Never).unwrap();
    assert_eq!(
        (back.as_ptr(), back.strides(), transfer),
        (address, &[1, 3][..], Transfer::Reclaimed)
    );
    let (back, transfer) =
        into_owned::<f64, Ix2>(into_dlpack(back).unwrap(), CopyMode::IfNeeded).unwrap();
    assert_eq!((back.as_ptr(), transfer), (address, Transfer::Reclaimed));
}

#[test]
fn into_owned_reclaims_a_unique_arc_array_and_copies_a_shared_one() {
    let shared = ArcArray::from_shape_vec((2, 2), vec![1i64, 2, 3, 4]).unwrap();
    let address = shared.as_ptr();
    let (back, transfer) =
        into_owned::<i64, Ix2>(into_dlpack(shared).unwrap(), CopyMode::Never).unwrap();
    assert_eq!((back.as_ptr(), transfer), (address, Transfer::Reclaimed));

    let shared = back.into_shared();
    let (copy, transfer) =
        into_owned::<i64, Ix2>(into_dlpack(shared.clone()).unwrap(), CopyMode::IfNeeded).unwrap();
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_ne!(copy.as_ptr(), shared.as_ptr());
    assert_eq!(copy, shared);
}

#[test]
fn into_owned_moves_a_producers_vec_in() {
    let v = vec![1u32, 2, 3, 4, 5, 6];
    let address = v.as_ptr();
    let tensor = ManagedTensor::export(v).unwrap();
    let (a, transfer) = into_owned::<u32, Ix1>(tensor, CopyMode::Never).unwrap();
    assert_eq!((a.as_ptr(), transfer), (address, Transfer::Moved));
    assert_eq!(a, array![1, 2, 3, 4, 5, 6]);
}

#[test]
fn into_owned_copies_a_foreign_tensor_for_its_layout_or_because_it_is_not_owned() {
    let (tensor, deletes) = foreign_column_major();
    let (a, transfer) = into_owned::<f64, Ix2>(tensor, CopyMode::IfNeeded).unwrap();
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
    assert_eq!(a, sample(2, 3));
    assert!(a.is_standard_layout());
    assert_eq!(deletes.load(Ordering::SeqCst), 1);

    let (tensor, deletes) = foreign_row_major();
    let (a, transfer) = into_owned::<f64, Ix2>(tensor, CopyMode::IfNeeded).unwrap();
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_eq!(a, sample(2, 3));
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn into_owned_always_copies_when_asked_even_what_it_could_reclaim() {
    let a = sample(2, 2);
    let address = a.as_ptr();
    let (copy, transfer) =
        into_owned::<f64, Ix2>(into_dlpack(a).unwrap(), CopyMode::Always).unwrap();
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_ne!(copy.as_ptr(), address);
    assert_eq!(copy, sample(2, 2));
}

// --- into_owned: refusals give the tensor back -------------------------------------------------

#[test]
fn into_owned_never_refuses_each_copy_and_gives_the_tensor_back() {
    let (tensor, deletes) = foreign_column_major();
    let refused = into_owned::<f64, Ix2>(tensor, CopyMode::Never).unwrap_err();
    assert_eq!(
        refused.error,
        Error::CopyRefused {
            reason: CopyReason::Layout
        }
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    assert_eq!(view::<f64, Ix2>(&refused.value).unwrap(), sample(2, 3));
    drop(refused);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);

    let (tensor, deletes) = foreign_row_major();
    let refused = into_owned::<f64, Ix2>(tensor, CopyMode::Never).unwrap_err();
    assert_eq!(
        refused.error,
        Error::CopyRefused {
            reason: CopyReason::NotOwned
        }
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    let (a, transfer) = into_owned::<f64, Ix2>(refused.value, CopyMode::IfNeeded).unwrap();
    assert_eq!(
        (a, transfer),
        (sample(2, 3), Transfer::Copied(CopyReason::NotOwned))
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn into_owned_never_refuses_a_shared_arc_array_and_gives_a_tensor_of_it_back() {
    let shared = ArcArray::from_vec(vec![1.0f32, 2.0, 3.0]);
    let refused =
        into_owned::<f32, Ix1>(into_dlpack(shared.clone()).unwrap(), CopyMode::Never).unwrap_err();
    assert_eq!(
        refused.error,
        Error::CopyRefused {
            reason: CopyReason::NotOwned
        }
    );
    // The same array, in a tensor like the one that went in.
    let tensor = refused.value;
    assert!(tensor.is_read_only());
    assert_eq!(view::<f32, Ix1>(&tensor).unwrap().as_ptr(), shared.as_ptr());
    // Once the other clone is gone, the array comes back without a copy.
    let address = shared.as_ptr();
    drop(shared);
    let (a, transfer) = into_owned::<f32, Ix1>(tensor, CopyMode::Never).unwrap();
    assert_eq!((a.as_ptr(), transfer), (address, Transfer::Reclaimed));
}

#[test]
fn into_owned_checks_the_description_before_the_copy_mode() {
    for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
        let (tensor, deletes) = foreign_column_major();
        let refused = into_owned::<f32, Ix2>(tensor, mode).unwrap_err();
        assert_eq!(
            refused.error,
            Error::DataTypeMismatch {
                found: DataType::F64,
                expected: DataType::F32
            },
            "{mode:?}"
        );
        let refused = into_owned::<f64, Ix1>(refused.value, mode).unwrap_err();
        assert_eq!(
            refused.error,
            Error::NdimMismatch {
                found: 2,
                expected: 1
            },
            "{mode:?}"
        );
        assert_eq!(deletes.load(Ordering::SeqCst), 0);
        drop(refused);
        assert_eq!(deletes.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn into_owned_gives_the_tensor_back_when_the_copy_fails() {
    let device = Device::new(DeviceType::CUDA, 0);
    let (tensor, deletes) = foreign(
        Foreign::new(DataType::F32, &[2, 2])
            .device(device)
            .data(Data::Fake(0x10_0000)),
    );
    let refused = into_owned::<f32, Ix2>(tensor, CopyMode::IfNeeded).unwrap_err();
    assert_eq!(refused.error, Error::NotHostAccessible { device });
    assert_eq!(refused.value.device(), device);
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    drop(refused);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

// --- the extras: to_owned, ImportedArray -------------------------------------------------------

#[test]
fn to_owned_copies_a_tensor_held_by_reference() {
    let (tensor, deletes) = foreign_column_major();
    let copy: Array2<f64> = to_owned(&tensor).unwrap();
    assert_eq!(copy, sample(2, 3));
    assert!(copy.is_standard_layout());
    assert_ne!(copy.as_ptr(), tensor.data_ptr().cast_const().cast::<f64>());
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    assert_eq!(
        to_owned::<f64, Ix1>(&tensor).unwrap_err(),
        Error::NdimMismatch {
            found: 2,
            expected: 1
        }
    );
}

#[test]
fn an_imported_array_gives_the_tensor_back_when_it_refuses_and_takes_it_over_like_into_owned() {
    let (tensor, deletes) = foreign_row_major();
    let refused = ImportedArray::<u8, Ix2>::new(tensor).unwrap_err();
    assert_eq!(
        refused.error,
        Error::DataTypeMismatch {
            found: DataType::F64,
            expected: DataType::U8
        }
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 0);

    let mut imported = ImportedArray::<f64, Ix2>::new(refused.value).unwrap();
    imported.view_mut().unwrap()[[0, 0]] = -1.0;
    assert_eq!(imported.view()[[0, 0]], -1.0);
    let refused = imported.into_owned(CopyMode::Never).unwrap_err();
    assert_eq!(
        refused.error,
        Error::CopyRefused {
            reason: CopyReason::NotOwned
        }
    );
    let imported = ImportedArray::<f64, Ix2>::new(refused.value).unwrap();
    let (a, transfer) = imported.into_owned(CopyMode::IfNeeded).unwrap();
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_eq!(a[[0, 0]], -1.0);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);

    let a = sample(2, 2);
    let address = a.as_ptr();
    let imported = ImportedArray::<f64, Ix2>::new(into_dlpack(a).unwrap()).unwrap();
    let (back, transfer) = imported.into_owned(CopyMode::Never).unwrap();
    assert_eq!((back.as_ptr(), transfer), (address, Transfer::Reclaimed));
}
