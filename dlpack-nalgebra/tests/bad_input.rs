//! Bad input from a foreign producer, through every nalgebra import: each is a typed
//! [`Error`] whose message says what was found and what was expected, and the tensor's deleter
//! runs exactly once, whether the tensor is refused by a view (and dropped later) or consumed by
//! an owning import (`into_dmatrix`, `into_dvector`, `into_smatrix`), which drops it at once.

mod common;

use common::{Built, Data, Foreign, import, strided};
use dlpack_core::ffi::DLManagedTensorVersioned;
use dlpack_core::{DataType, Device, DeviceType, Error, Flags, ManagedTensor};
use dlpack_nalgebra::{
    Fallback, dmatrix_cow, dmatrix_view, dmatrix_view_mut, dmatrix_view_transposed_mut,
    dvector_view, dvector_view_mut, into_dmatrix, into_dvector, into_smatrix, to_dmatrix,
};

/// Drops an imported tensor and checks that its deleter ran exactly once.
#[track_caller]
fn drop_once(tensor: ManagedTensor, built: &Built<DLManagedTensorVersioned>) {
    drop(tensor);
    assert_eq!(built.deletes(), 1, "the deleter runs exactly once");
}

/// Passes a fresh import of `foreign` to an owning import, which must fail with `expected` and
/// have deleted the tensor exactly once by the time it returns.
#[track_caller]
fn consumed_with_error<T: std::fmt::Debug>(
    foreign: &Foreign,
    owning_import: impl FnOnce(ManagedTensor) -> Result<T, Error>,
    expected: &Error,
) {
    let built = foreign.clone().build();
    let err = owning_import(import(&built)).expect_err("the import must fail");
    assert_eq!(&err, expected);
    assert_eq!(
        built.deletes(),
        1,
        "a consumed tensor is deleted exactly once ({err})"
    );
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
    let err = tensor.view::<f64>().and_then(dmatrix_view).unwrap_err();
    assert_eq!(err, expected);
    says(&err, &["float32", "expected float64"]);
    assert_eq!(
        tensor
            .view_mut::<f64>()
            .and_then(dmatrix_view_mut)
            .unwrap_err(),
        expected
    );
    // The right type still works afterwards.
    assert_eq!(
        dmatrix_view(tensor.view::<f32>().unwrap()).unwrap()[(1, 2)],
        6.0
    );
    drop_once(tensor, &built);

    consumed_with_error(&f32_matrix(), into_dmatrix::<f64>, &expected);
    consumed_with_error(&f32_matrix(), into_smatrix::<f64, 2, 3>, &expected);
    let vector = Foreign::of(&[1.0f32, 2.0], &[2]);
    consumed_with_error(&vector, into_dvector::<f64>, &expected);
}

#[test]
fn dtype_mismatch_between_matrix_producers_is_refused_not_reinterpreted() {
    // An exported DMatrix<i32> asked for as f32 (the same size): a typed error, no reclaim.
    let tensor = dlpack_nalgebra::export(nalgebra::DMatrix::<i32>::zeros(2, 2)).unwrap();
    assert_eq!(
        into_dmatrix::<f32>(tensor).unwrap_err(),
        Error::DataTypeMismatch {
            found: DataType::I32,
            expected: DataType::F32
        }
    );
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
    let err = dmatrix_view(tensor.view::<f64>().unwrap()).unwrap_err();
    assert_eq!(err, matrix);
    says(&err, &["3 dimensions", "expected 2"]);
    assert_eq!(
        dmatrix_view_mut(tensor.view_mut::<f64>().unwrap()).unwrap_err(),
        matrix
    );
    assert_eq!(
        dmatrix_cow(tensor.view::<f64>().unwrap(), Fallback::Copy).unwrap_err(),
        matrix
    );
    assert_eq!(
        to_dmatrix(tensor.view::<f64>().unwrap()).unwrap_err(),
        matrix
    );
    let vector = Error::NdimMismatch {
        found: 3,
        expected: 1,
    };
    assert_eq!(
        dvector_view(tensor.view::<f64>().unwrap()).unwrap_err(),
        vector
    );
    assert_eq!(
        dvector_view_mut(tensor.view_mut::<f64>().unwrap()).unwrap_err(),
        vector
    );
    drop_once(tensor, &built);

    consumed_with_error(&cube, into_dmatrix::<f64>, &matrix);
    consumed_with_error(&cube, into_smatrix::<f64, 2, 2>, &matrix);
    consumed_with_error(&cube, into_dvector::<f64>, &vector);
    let scalar = Foreign::of(&[1.0f64], &[]);
    consumed_with_error(
        &scalar,
        into_dmatrix::<f64>,
        &Error::NdimMismatch {
            found: 0,
            expected: 2,
        },
    );
    let matrix_2d = Foreign::new(DataType::F64, &[2, 2]);
    consumed_with_error(
        &matrix_2d,
        into_dvector::<f64>,
        &Error::NdimMismatch {
            found: 2,
            expected: 1,
        },
    );
}

#[test]
fn shape_mismatch_for_a_static_matrix_is_refused_and_the_tensor_deleted_once() {
    consumed_with_error(
        &f32_matrix(),
        into_smatrix::<f32, 3, 2>,
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
    let err = tensor.view::<f32>().and_then(dmatrix_view).unwrap_err();
    assert_eq!(err, expected);
    says(&err, &["cuda:1"]);
    assert_eq!(
        tensor
            .view_mut::<f32>()
            .and_then(dmatrix_view_mut)
            .unwrap_err(),
        expected
    );
    drop_once(tensor, &built);

    consumed_with_error(&cuda, into_dmatrix::<f32>, &expected);
    let cuda_vector = Foreign::new(DataType::F32, &[4])
        .on(DeviceType::CUDA, 1)
        .data(Data::Fake(0x7000_0000));
    consumed_with_error(&cuda_vector, into_dvector::<f32>, &expected);
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
    let err = tensor.view::<f64>().and_then(dmatrix_view).unwrap_err();
    assert_eq!(err, expected);
    says(&err, &[&format!("{address:#x}"), "8 bytes"]);
    assert_eq!(
        tensor
            .view_mut::<f64>()
            .and_then(dmatrix_view_mut)
            .unwrap_err(),
        expected
    );
    drop_once(tensor, &built);

    let built = misaligned.build();
    let err = into_dmatrix::<f64>(import(&built)).unwrap_err();
    assert!(matches!(err, Error::Misaligned { align: 8, .. }), "{err:?}");
    assert_eq!(built.deletes(), 1);
}

// --- mutable access ------------------------------------------------------------------------------

#[test]
fn read_only_tensor_is_refused_mutably_but_viewed_and_copied() {
    let read_only = f32_matrix().flags(Flags::READ_ONLY.0);
    let built = read_only.clone().build();
    let mut tensor = import(&built);
    let err = tensor
        .view_mut::<f32>()
        .and_then(dmatrix_view_mut)
        .unwrap_err();
    assert_eq!(err, Error::ReadOnly);
    says(&err, &["read-only"]);
    assert_eq!(
        tensor
            .view_mut::<f32>()
            .and_then(dmatrix_view_transposed_mut)
            .unwrap_err(),
        Error::ReadOnly
    );
    let view = dmatrix_view(tensor.view::<f32>().unwrap()).unwrap();
    assert_eq!(view[(0, 1)], 3.0);
    drop_once(tensor, &built);

    // An owning import of a foreign tensor copies: allowed for read-only data.
    let built = read_only.build();
    let m = into_dmatrix::<f32>(import(&built)).unwrap();
    assert_eq!(built.deletes(), 1);
    assert_eq!(m[(1, 2)], 6.0);
}

#[test]
fn foreign_legacy_tensor_is_read_only_so_refused_mutably() {
    let built = f32_matrix().build_legacy();
    // SAFETY: the fixture's legacy block is live, well-formed and handed over once.
    let mut tensor = unsafe { ManagedTensor::from_raw_legacy(built.ptr) }.unwrap();
    let err = tensor
        .view_mut::<f32>()
        .and_then(dmatrix_view_mut)
        .unwrap_err();
    assert_eq!(err, Error::ReadOnly);
    assert_eq!(
        dmatrix_view(tensor.view::<f32>().unwrap()).unwrap()[(1, 0)],
        2.0
    );
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
        let err = tensor
            .view_mut::<f64>()
            .and_then(dmatrix_view_mut)
            .unwrap_err();
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
        let err = dmatrix_view(tensor.view::<f64>().unwrap()).unwrap_err();
        assert!(matches!(err, Error::UnsupportedLayout { .. }), "{err:?}");
        let copy = to_dmatrix(tensor.view::<f64>().unwrap()).unwrap();
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
    let err = dmatrix_view(tensor.view::<f64>().unwrap()).unwrap_err();
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
        &[
            "stride 4 of axis 0",
            "row stride 1",
            "dmatrix_view_transposed",
        ],
    );
    drop_once(tensor, &built);

    let built = strided(&values, &[3, 4], &[-1, 3], 2).build();
    let tensor = import(&built);
    let err = dmatrix_view(tensor.view::<f64>().unwrap()).unwrap_err();
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
        &[
            "stride -1 of axis 0",
            "cannot step backwards",
            "Fallback::Copy",
        ],
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
    let err = tensor.view::<bool>().and_then(dmatrix_view).unwrap_err();
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
    consumed_with_error(&column, into_dvector::<f32>, &expected);
    consumed_with_error(&column, into_dmatrix::<f32>, &expected);
    let square = Foreign::of(&[1.0f32], &[1 << 31, 1 << 31]).with_strides(&[0, 0]);
    consumed_with_error(&square, into_dmatrix::<f32>, &expected);
    let built = square.build();
    let tensor = import(&built);
    assert_eq!(
        to_dmatrix(tensor.view::<f32>().unwrap()).unwrap_err(),
        expected
    );
    drop_once(tensor, &built);
}
