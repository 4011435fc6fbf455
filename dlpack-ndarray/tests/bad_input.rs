//! Bad input: every way an imported tensor can be wrong for an ndarray view is a typed error, and
//! the tensor's deleter still runs exactly once, whichever API refused it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Data, Foreign};
use dlpack_core::{CopyMode, DataType, Device, DeviceType, Error, Flags, ManagedTensor};
use dlpack_ndarray::{ImportedArray, into_owned, to_dlpack, to_owned, view, view_mut};
use ndarray::{Array2, ArrayView2, Ix1, Ix2, Ix3, IxDyn};

/// Imports a built foreign tensor, returning it with its deleter counter.
fn import(foreign: Foreign) -> (ManagedTensor, Arc<AtomicUsize>) {
    let built = foreign.build();
    let deletes = built.counter();
    // SAFETY: the fixture built a live tensor that nobody else owns.
    let tensor = unsafe { ManagedTensor::from_raw(built.ptr) }.unwrap();
    (tensor, deletes)
}

/// Asserts that every import API refuses `foreign` (as `T` with dimensionality `D`) with
/// `expected`, and that each tensor is deleted exactly once.
///
/// `mutable_only` says whether the read-only APIs accept the tensor (read-only and overlapping
/// tensors are fine to read).
fn refused_everywhere<T: dlpack_core::Element, D: ndarray::Dimension + 'static>(
    foreign: &Foreign,
    expected: &Error,
    mutable_only: bool,
) {
    refused_everywhere_with::<T, D>(foreign, |e| e == expected, mutable_only);
}

/// [`refused_everywhere`] for errors that differ between builds (they name an address):
/// `is_expected` says whether an error is the right one.
fn refused_everywhere_with<T: dlpack_core::Element, D: ndarray::Dimension + 'static>(
    foreign: &Foreign,
    is_expected: impl Fn(&Error) -> bool,
    mutable_only: bool,
) {
    let check = |api: &str, result: Result<(), Error>| match result {
        Err(e) => assert!(is_expected(&e), "{api}: unexpected error {e:?}"),
        Ok(()) => panic!("{api} accepted a tensor it must refuse"),
    };

    // The read-only view.
    let (tensor, deletes) = import(foreign.clone());
    let result = view::<T, D>(&tensor).map(|_| ());
    if mutable_only {
        assert_eq!(result, Ok(()));
    } else {
        check("view", result);
    }
    drop(tensor);
    assert_eq!(deletes.load(Ordering::SeqCst), 1, "view");

    // The mutable view.
    let (mut tensor, deletes) = import(foreign.clone());
    check("view_mut", view_mut::<T, D>(&mut tensor).map(|_| ()));
    drop(tensor);
    assert_eq!(deletes.load(Ordering::SeqCst), 1, "view_mut");

    // The owning wrapper: refused at once, or (for mutable-only reasons) when asked to write.
    let (tensor, deletes) = import(foreign.clone());
    match ImportedArray::<T, D>::new(tensor) {
        Ok(mut imported) => {
            assert!(
                mutable_only,
                "ImportedArray::new accepted a tensor it must refuse"
            );
            check("ImportedArray::view_mut", imported.view_mut().map(|_| ()));
            assert_eq!(deletes.load(Ordering::SeqCst), 0);
            drop(imported);
        }
        Err(refused) => {
            assert!(
                !mutable_only,
                "ImportedArray::new refused a readable tensor: {}",
                refused.error
            );
            check("ImportedArray::new", Err(refused.error));
            // The tensor came back, not deleted yet.
            assert_eq!(deletes.load(Ordering::SeqCst), 0);
            drop(refused.value);
        }
    }
    assert_eq!(deletes.load(Ordering::SeqCst), 1, "ImportedArray");

    // The copies.
    if !mutable_only {
        let (tensor, deletes) = import(foreign.clone());
        check("to_owned", to_owned::<T, D>(&tensor).map(|_| ()));
        drop(tensor);
        assert_eq!(deletes.load(Ordering::SeqCst), 1, "to_owned");

        for mode in [CopyMode::IfNeeded, CopyMode::Never, CopyMode::Always] {
            let (tensor, deletes) = import(foreign.clone());
            let Err(refused) = into_owned::<T, D>(tensor, mode) else {
                panic!("into_owned accepted a tensor it must refuse");
            };
            match refused.error {
                // Under `Never`, a tensor whose description fits (its dtype and ndim checked
                // first) is refused for the copy it would need before that copy's own checks.
                Error::CopyRefused { .. } if mode == CopyMode::Never => {
                    assert_eq!(refused.value.dtype(), T::DTYPE);
                    assert!(D::NDIM.is_none_or(|ndim| ndim == refused.value.ndim()));
                }
                error => check("into_owned", Err(error)),
            }
            assert_eq!(
                deletes.load(Ordering::SeqCst),
                0,
                "into_owned gives the tensor back"
            );
            drop(refused.value);
            assert_eq!(deletes.load(Ordering::SeqCst), 1, "into_owned");
        }
    }
}

fn floats(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

#[test]
fn a_dtype_mismatch_is_refused_with_both_dtypes() {
    let foreign = Foreign::of(&floats(6), &[2, 3]);
    let expected = Error::DataTypeMismatch {
        found: DataType::F32,
        expected: DataType::I32,
    };
    refused_everywhere::<i32, Ix2>(&foreign, &expected, false);
    refused_everywhere::<f64, IxDyn>(
        &foreign,
        &Error::DataTypeMismatch {
            found: DataType::F32,
            expected: DataType::F64,
        },
        false,
    );
}

#[test]
fn an_ndim_mismatch_is_refused_with_both_ndims() {
    let foreign = Foreign::of(&floats(6), &[2, 3]);
    refused_everywhere::<f32, Ix1>(
        &foreign,
        &Error::NdimMismatch {
            found: 2,
            expected: 1,
        },
        false,
    );
    refused_everywhere::<f32, Ix3>(
        &foreign,
        &Error::NdimMismatch {
            found: 2,
            expected: 3,
        },
        false,
    );
}

#[test]
fn a_tensor_on_a_device_the_host_cannot_read_is_refused() {
    let device = Device::new(DeviceType::CUDA, 1);
    let foreign = Foreign::new(DataType::F32, &[2, 2])
        .device(device)
        .data(Data::Fake(0x10_0000));
    refused_everywhere::<f32, Ix2>(&foreign, &Error::NotHostAccessible { device }, false);
}

#[test]
fn misaligned_data_is_refused_with_its_address() {
    // The first f32 sits 2 bytes into an 8-aligned buffer.
    let foreign = Foreign::of(&floats(4), &[2, 2])
        .byte_offset(2)
        .buffer_words(3);
    let built = foreign.clone().build();
    let first = built.buffer_addr() + 2;
    // SAFETY: the fixture built a live tensor that nobody else owns.
    let tensor = unsafe { ManagedTensor::from_raw(built.ptr) }.unwrap();
    assert_eq!(
        view::<f32, Ix2>(&tensor).unwrap_err(),
        Error::Misaligned {
            address: first,
            align: 4
        }
    );
    // Each build has its own buffer: elsewhere, check the alignment the error reports.
    refused_everywhere_with::<f32, Ix2>(
        &foreign,
        |e| matches!(e, Error::Misaligned { align: 4, address } if address % 4 == 2),
        false,
    );
}

#[test]
fn a_read_only_tensor_refuses_mutable_views_only() {
    let foreign = Foreign::of(&floats(4), &[2, 2]).flags(Flags::READ_ONLY.0);
    refused_everywhere::<f32, Ix2>(&foreign, &Error::ReadOnly, true);
}

#[test]
fn overlapping_strides_refuse_mutable_views_only() {
    for strides in [[0, 1], [1, 1], [1, 0]] {
        let foreign = Foreign::of(&floats(4), &[2, 2]).with_strides(&strides);
        let expected = Error::OverlappingStrides {
            shape: vec![2, 2],
            strides: strides.to_vec(),
        };
        refused_everywhere::<f32, Ix2>(&foreign, &expected, true);
    }
}

#[test]
fn an_invalid_bool_is_refused_with_its_index() {
    let foreign = Foreign::new(DataType::BOOL, &[2, 2]).bytes(&[0, 1, 2, 0]);
    let expected = Error::InvalidValue {
        dtype: DataType::BOOL,
        index: 2,
        byte: 2,
    };
    refused_everywhere::<bool, Ix2>(&foreign, &expected, false);
}

/// A broadcast tensor may describe more elements than memory holds; beyond isize::MAX of them
/// ndarray cannot index the view, so it is refused rather than built.
#[test]
fn more_elements_than_ndarray_can_index_are_refused() {
    let huge = 1i64 << 62;
    for (shape, strides) in [
        (vec![huge, 2], vec![0, 0]),       // 2^63 elements: fits usize, not isize
        (vec![0, huge, 4], vec![0, 0, 0]), // empty, but 2^64 along its non-empty axes
    ] {
        let (tensor, deletes) = import(
            Foreign::new(DataType::U8, &shape)
                .with_strides(&strides)
                .buffer_words(1),
        );
        let err = view::<u8, IxDyn>(&tensor).unwrap_err();
        assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
        assert!(err.to_string().contains("isize::MAX"), "{err}");
        let err = to_owned::<u8, IxDyn>(&tensor).unwrap_err();
        assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
        let refused = ImportedArray::<u8, IxDyn>::new(tensor).unwrap_err();
        assert!(
            matches!(refused.error, Error::Overflow { .. }),
            "{:?}",
            refused.error
        );
        let refused = into_owned::<u8, IxDyn>(refused.value, CopyMode::IfNeeded).unwrap_err();
        assert!(
            matches!(refused.error, Error::Overflow { .. }),
            "{:?}",
            refused.error
        );
        assert_eq!(deletes.load(Ordering::SeqCst), 0);
        drop(refused.value);
        assert_eq!(deletes.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn errors_say_what_was_found_and_what_was_expected() {
    let (tensor, _) = import(Foreign::of(&floats(6), &[2, 3]));
    let err = view::<f32, Ix3>(&tensor).unwrap_err();
    assert_eq!(err.to_string(), "the tensor has 2 dimensions, expected 3");
    let err = view::<u8, Ix2>(&tensor).unwrap_err();
    assert_eq!(err.to_string(), "the tensor holds float32, expected uint8");
    let ok: Result<ArrayView2<f32>, _> = view(&tensor);
    assert!(ok.is_ok());
    let copy: Array2<f32> = to_owned(&tensor).unwrap();
    assert_eq!(copy.len(), 6);
}

#[test]
fn copying_a_broadcast_tensor_too_large_for_memory_is_an_error() {
    // One element seen 2^62 times: valid, and viewable, but no copy of it fits in memory.
    let foreign = Foreign::of(&[1.0f32], &[1 << 62]).with_strides(&[0]);
    let (tensor, deletes) = import(foreign.clone());
    assert_eq!(view::<f32, Ix1>(&tensor).unwrap().len(), 1 << 62);
    let expected = Error::OutOfMemory { bytes: 4 << 62 };
    assert_eq!(to_owned::<f32, Ix1>(&tensor).unwrap_err(), expected);
    drop(tensor);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
    let (tensor, deletes) = import(foreign);
    let refused = into_owned::<f32, Ix1>(tensor, CopyMode::IfNeeded).unwrap_err();
    assert_eq!(refused.error, expected);
    drop(refused.value);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn copying_a_broadcast_array_too_large_for_memory_into_a_tensor_is_an_error() {
    // An ndarray view of one element seen 2^62 times: `to_dlpack` copies it, which cannot fit.
    let one = ndarray::arr1(&[1.0f32]);
    let view = one.broadcast(1usize << 62).unwrap();
    assert_eq!(
        to_dlpack(&view).unwrap_err(),
        Error::OutOfMemory { bytes: 4 << 62 }
    );
    // A broadcast that fits is copied in row-major order.
    let row = ndarray::arr1(&[1u8, 2, 3]);
    let tensor = to_dlpack(&row.broadcast((2, 3)).unwrap()).unwrap();
    assert_eq!(tensor.shape(), &[2, 3]);
    assert_eq!(tensor.to_vec::<u8>().unwrap(), [1, 2, 3, 1, 2, 3]);
}
