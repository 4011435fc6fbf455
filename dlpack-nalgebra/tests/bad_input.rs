//! Bad input from a foreign producer, through every nalgebra import: each is a typed
//! [`Error`] whose message says what was found and what was expected, and the tensor's deleter
//! runs exactly once, whether the tensor is refused by a view (and dropped later) or by
//! `into_owned`, which gives it back untouched (and the caller drops it).

mod common;

use common::{Built, Data, Foreign, import, strided};
use dlpack_core::ffi::DLManagedTensorVersioned;
use dlpack_core::{CopyMode, DataType, Device, DeviceType, Error, Flags, ManagedTensor};
use dlpack_nalgebra::{
    OwnedMatrix, into_owned, to_owned, view, view_mut, view_or_copy, view_transposed_mut,
};
use nalgebra::{
    DMatrix, DMatrixView, DMatrixViewMut, DVector, DVectorView, DVectorViewMut, SMatrix,
};

/// Drops an imported tensor and checks that its deleter ran exactly once.
#[track_caller]
fn drop_once(tensor: ManagedTensor, built: &Built<DLManagedTensorVersioned>) {
    drop(tensor);
    assert_eq!(built.deletes(), 1, "the deleter runs exactly once");
}

/// Passes a fresh import of `foreign` to `into_owned::<M>` under every copy mode, which must
/// fail with `expected` and give the tensor back undeleted; dropping it then deletes it once.
#[track_caller]
fn refused_with_error<M: OwnedMatrix + std::fmt::Debug>(foreign: &Foreign, expected: &Error) {
    for mode in [CopyMode::IfNeeded, CopyMode::Never, CopyMode::Always] {
        assert_eq!(&refusal::<M>(foreign, mode), expected, "{mode:?}");
    }
}

/// As [`refused_with_error`], for an error that only the copy meets (device, memory): under
/// `CopyMode::Never`, the refusal is that of the copy.
#[track_caller]
fn copy_fails_with<M: OwnedMatrix + std::fmt::Debug>(foreign: &Foreign, expected: &Error) {
    for mode in [CopyMode::IfNeeded, CopyMode::Always] {
        assert_eq!(&refusal::<M>(foreign, mode), expected, "{mode:?}");
    }
    let never = refusal::<M>(foreign, CopyMode::Never);
    assert!(matches!(never, Error::CopyRefused { .. }), "{never:?}");
}

/// The error of `into_owned::<M>` of a fresh import of `foreign` under `mode`, which must give
/// the tensor back undeleted; dropping it then deletes it once.
#[track_caller]
fn refusal<M: OwnedMatrix + std::fmt::Debug>(foreign: &Foreign, mode: CopyMode) -> Error {
    let built = foreign.clone().build();
    let refused = into_owned::<M>(import(&built), mode).expect_err("the import must fail");
    assert_eq!(built.deletes(), 0, "a refused tensor comes back ({mode:?})");
    drop_once(refused.value, &built);
    refused.error
}

/// Checks that an error's message contains every fragment.
#[track_caller]
fn says(err: &Error, fragments: &[&str]) {
    let message = err.to_string();
    for fragment in fragments {
        assert!(message.contains(fragment), "{message:?} lacks {fragment:?}");
    }
}

fn f32_matrix() -> Foreign {
    Foreign::of(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).with_strides(&[1, 2])
}

// --- dtype ---------------------------------------------------------------------------------------

#[test]
fn dtype_mismatch_is_refused_by_views_and_owning_imports() {
    let expected = Error::DataTypeMismatch {
        found: DataType::F32,
        expected: DataType::F64,
    };
    let built = f32_matrix().build();
    let mut tensor = import(&built);
    let err = view::<DMatrixView<'_, f64>>(&tensor).unwrap_err();
    assert_eq!(err, expected);
    says(&err, &["float32", "expected float64"]);
    assert_eq!(
        view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap_err(),
        expected
    );
    // The right type still works afterwards.
    assert_eq!(view::<DMatrixView<'_, f32>>(&tensor).unwrap()[(1, 2)], 6.0);
    drop_once(tensor, &built);

    refused_with_error::<DMatrix<f64>>(&f32_matrix(), &expected);
    refused_with_error::<SMatrix<f64, 2, 3>>(&f32_matrix(), &expected);
    let vector = Foreign::of(&[1.0f32, 2.0], &[2]);
    refused_with_error::<DVector<f64>>(&vector, &expected);
}

#[test]
fn dtype_mismatch_between_matrix_producers_is_refused_not_reinterpreted() {
    // An exported DMatrix<i32> asked for as f32 (the same size): a typed error, no reclaim.
    let tensor = dlpack_nalgebra::into_dlpack(DMatrix::<i32>::zeros(2, 2)).unwrap();
    let refused = into_owned::<DMatrix<f32>>(tensor, CopyMode::Never).unwrap_err();
    assert_eq!(
        refused.error,
        Error::DataTypeMismatch {
            found: DataType::I32,
            expected: DataType::F32
        }
    );
    let (back, _) = into_owned::<DMatrix<i32>>(refused.value, CopyMode::Never).unwrap();
    assert_eq!(back, DMatrix::zeros(2, 2));
}

// --- ndim ----------------------------------------------------------------------------------------

#[test]
fn ndim_mismatch_is_refused_by_views_and_owning_imports() {
    let cube = Foreign::new(DataType::F64, &[2, 2, 2]);
    let built = cube.clone().build();
    let mut tensor = import(&built);
    let matrix = Error::NdimMismatch {
        found: 3,
        expected: 2,
    };
    let err = view::<DMatrixView<'_, f64>>(&tensor).unwrap_err();
    assert_eq!(err, matrix);
    says(&err, &["3 dimensions", "expected 2"]);
    assert_eq!(
        view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap_err(),
        matrix
    );
    assert_eq!(
        view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap_err(),
        matrix
    );
    assert_eq!(to_owned::<DMatrix<f64>>(&tensor).unwrap_err(), matrix);
    let vector = Error::NdimMismatch {
        found: 3,
        expected: 1,
    };
    assert_eq!(view::<DVectorView<'_, f64>>(&tensor).unwrap_err(), vector);
    assert_eq!(
        view_mut::<DVectorViewMut<'_, f64>>(&mut tensor).unwrap_err(),
        vector
    );
    drop_once(tensor, &built);

    refused_with_error::<DMatrix<f64>>(&cube, &matrix);
    refused_with_error::<SMatrix<f64, 2, 2>>(&cube, &matrix);
    refused_with_error::<DVector<f64>>(&cube, &vector);
    let scalar = Foreign::of(&[1.0f64], &[]);
    refused_with_error::<DMatrix<f64>>(
        &scalar,
        &Error::NdimMismatch {
            found: 0,
            expected: 2,
        },
    );
    let matrix_2d = Foreign::new(DataType::F64, &[2, 2]);
    refused_with_error::<DVector<f64>>(
        &matrix_2d,
        &Error::NdimMismatch {
            found: 2,
            expected: 1,
        },
    );
}

#[test]
fn shape_mismatch_for_a_static_matrix_is_refused_and_the_tensor_deleted_once() {
    refused_with_error::<SMatrix<f32, 3, 2>>(
        &f32_matrix(),
        &Error::ShapeMismatch {
            found: vec![2, 3],
            expected: vec![3, 2],
        },
    );
}

// --- device --------------------------------------------------------------------------------------

#[test]
fn non_host_device_is_refused_by_views_and_owning_imports() {
    // A CUDA tensor: the data pointer is a device address with no host memory behind it.
    let cuda = Foreign::new(DataType::F32, &[2, 3])
        .on(DeviceType::CUDA, 1)
        .data(Data::Fake(0x7000_0000));
    let expected = Error::NotHostAccessible {
        device: Device::cuda(1),
    };
    let built = cuda.clone().build();
    let mut tensor = import(&built);
    let err = view::<DMatrixView<'_, f32>>(&tensor).unwrap_err();
    assert_eq!(err, expected);
    says(&err, &["cuda:1"]);
    assert_eq!(
        view_mut::<DMatrixViewMut<'_, f32>>(&mut tensor).unwrap_err(),
        expected
    );
    drop_once(tensor, &built);

    copy_fails_with::<DMatrix<f32>>(&cuda, &expected);
    let cuda_vector = Foreign::new(DataType::F32, &[4])
        .on(DeviceType::CUDA, 1)
        .data(Data::Fake(0x7000_0000));
    copy_fails_with::<DVector<f32>>(&cuda_vector, &expected);
}

// --- alignment -----------------------------------------------------------------------------------

#[test]
fn misaligned_data_is_refused_by_views_and_owning_imports() {
    let values: Vec<f64> = (0..7).map(f64::from).collect();
    // Four bytes into an f64 buffer: no f64 can start there.
    let misaligned = strided(&values, &[2, 3], &[1, 2], 0).byte_offset(4);
    let built = misaligned.clone().build();
    let address = built.buffer_addr() + 4;
    let expected = Error::Misaligned { address, align: 8 };
    let mut tensor = import(&built);
    let err = view::<DMatrixView<'_, f64>>(&tensor).unwrap_err();
    assert_eq!(err, expected);
    says(&err, &[&format!("{address:#x}"), "8 bytes"]);
    assert_eq!(
        view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap_err(),
        expected
    );
    drop_once(tensor, &built);

    let built = misaligned.build();
    let refused = into_owned::<DMatrix<f64>>(import(&built), CopyMode::IfNeeded).unwrap_err();
    assert!(
        matches!(refused.error, Error::Misaligned { align: 8, .. }),
        "{:?}",
        refused.error
    );
    drop_once(refused.value, &built);
}

// --- mutable access ------------------------------------------------------------------------------

#[test]
fn read_only_tensor_is_refused_mutably_but_viewed_and_copied() {
    let read_only = f32_matrix().flags(Flags::READ_ONLY.0);
    let built = read_only.clone().build();
    let mut tensor = import(&built);
    let err = view_mut::<DMatrixViewMut<'_, f32>>(&mut tensor).unwrap_err();
    assert_eq!(err, Error::ReadOnly);
    says(&err, &["read-only"]);
    assert_eq!(
        view_transposed_mut::<f32>(&mut tensor).unwrap_err(),
        Error::ReadOnly
    );
    let view = view::<DMatrixView<'_, f32>>(&tensor).unwrap();
    assert_eq!(view[(0, 1)], 3.0);
    drop_once(tensor, &built);

    // An owning import of a foreign tensor copies: allowed for read-only data.
    let built = read_only.build();
    let (m, _) = into_owned::<DMatrix<f32>>(import(&built), CopyMode::IfNeeded).unwrap();
    assert_eq!(built.deletes(), 1);
    assert_eq!(m[(1, 2)], 6.0);
}

#[test]
fn foreign_legacy_tensor_is_read_only_so_refused_mutably() {
    let built = f32_matrix().build_legacy();
    // SAFETY: the fixture's legacy block is live, well-formed and handed over once.
    let mut tensor = unsafe { ManagedTensor::from_raw_legacy(built.ptr) }.unwrap();
    let err = view_mut::<DMatrixViewMut<'_, f32>>(&mut tensor).unwrap_err();
    assert_eq!(err, Error::ReadOnly);
    assert_eq!(view::<DMatrixView<'_, f32>>(&tensor).unwrap()[(1, 0)], 2.0);
    drop(tensor);
    assert_eq!(built.deletes(), 1);
}

#[test]
fn overlapping_strides_are_refused_mutably() {
    for (shape, strides, len) in [
        // A sliding window (np.lib.stride_tricks.as_strided): element (i, j) = buffer[i + j].
        (&[3i64, 3][..], &[1i64, 1][..], 5),
        // Column broadcasting.
        (&[3, 4], &[1, 0], 3),
        // A broadcast vector.
        (&[4], &[0], 1),
    ] {
        let values: Vec<f64> = (0..len).map(f64::from).collect();
        let built = strided(&values, shape, strides, 0).build();
        let mut tensor = import(&built);
        let err = view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap_err();
        assert_eq!(
            err,
            Error::OverlappingStrides {
                shape: shape.to_vec(),
                strides: strides.to_vec()
            }
        );
        says(&err, &[&format!("{strides:?}"), "share memory"]);
        // Read-only, the elements are there, but overlapping layouts are not compact, so no
        // safe nalgebra view either: a copy.
        let err = view::<DMatrixView<'_, f64>>(&tensor).unwrap_err();
        assert!(matches!(err, Error::UnsupportedLayout { .. }), "{err:?}");
        let copy = to_owned::<DMatrix<f64>>(&tensor).unwrap();
        assert_eq!(copy.nrows(), shape[0] as usize);
        drop_once(tensor, &built);
    }
}

// --- layouts nalgebra cannot view ----------------------------------------------------------------

#[test]
fn refused_strides_say_which_stride_and_what_was_expected() {
    let values: Vec<f64> = (0..12).map(f64::from).collect();
    let built = strided(&values, &[3, 4], &[4, 1], 0).build();
    let tensor = import(&built);
    let err = view::<DMatrixView<'_, f64>>(&tensor).unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnsupportedLayout {
                axis: 0,
                stride: 4,
                ..
            }
        ),
        "{err:?}"
    );
    says(
        &err,
        &["stride 4 of axis 0", "row stride 1", "view_transposed"],
    );
    drop_once(tensor, &built);

    let built = strided(&values, &[3, 4], &[-1, 3], 2).build();
    let tensor = import(&built);
    let err = view::<DMatrixView<'_, f64>>(&tensor).unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnsupportedLayout {
                axis: 0,
                stride: -1,
                ..
            }
        ),
        "{err:?}"
    );
    says(
        &err,
        &["stride -1 of axis 0", "cannot step backwards", "to_owned"],
    );
    drop_once(tensor, &built);
}

// --- invalid values ------------------------------------------------------------------------------

#[test]
fn invalid_bool_bytes_are_refused_before_any_view_exists() {
    let built = Foreign::new(DataType::BOOL, &[2, 2])
        .with_strides(&[1, 2])
        .bytes(&[1, 0, 2, 1])
        .build();
    let tensor = import(&built);
    let err = view::<DMatrixView<'_, bool>>(&tensor).unwrap_err();
    assert_eq!(
        err,
        Error::InvalidValue {
            dtype: DataType::BOOL,
            index: 1,
            byte: 2
        }
    );
    drop_once(tensor, &built);
}

#[test]
fn copying_a_broadcast_tensor_too_large_for_memory_is_an_error() {
    // Valid and viewable (a 4-byte span), but no copy of 2^62 (or 2^31 x 2^31) elements fits.
    let expected = Error::OutOfMemory { bytes: 4 << 62 };
    let column = Foreign::of(&[1.0f32], &[1 << 62]).with_strides(&[0]);
    copy_fails_with::<DVector<f32>>(&column, &expected);
    copy_fails_with::<DMatrix<f32>>(&column, &expected);
    let square = Foreign::of(&[1.0f32], &[1 << 31, 1 << 31]).with_strides(&[0, 0]);
    copy_fails_with::<DMatrix<f32>>(&square, &expected);
    let built = square.build();
    let tensor = import(&built);
    assert_eq!(to_owned::<DMatrix<f32>>(&tensor).unwrap_err(), expected);
    drop_once(tensor, &built);
}
