//! The adapter vocabulary, verb by verb, as every adapter crate speaks it: `into_dlpack`,
//! `to_dlpack`, `export_view`, `export_view_mut`, `view`, `view_mut` and `into_owned` (each
//! `Transfer` it reports, and each refusal, which gives the tensor back), then this crate's
//! extras: `view_transposed`, `view_transposed_mut`, `view_or_copy`, `to_owned`, `view_strided`
//! and `view_strided_mut`. Small tensors only: Miri runs this file.

mod common;

use common::{Built, Foreign, import, strided};
use dlpack_core::ffi::{DLManagedTensorVersioned, DLTensor};
use dlpack_core::{
    BorrowedTensor, CopyMode, CopyReason, DataType, Device, Error, Flags, ManagedTensor, Transfer,
    Version,
};
use dlpack_nalgebra::{
    CowMatrix, CowVector, export_view, export_view_mut, into_dlpack, into_owned, to_dlpack,
    to_owned, view, view_mut, view_or_copy, view_strided, view_strided_mut, view_transposed,
    view_transposed_mut,
};
use nalgebra::{
    DMatrix, DMatrixView, DMatrixViewMut, DVector, DVectorView, DVectorViewMut, Dyn, Matrix2x3,
    RowDVector, SMatrix, SVector,
};

/// m[i, j] = 10 i + j
fn sample(rows: usize, cols: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |i, j| (10 * i + j) as f64)
}

/// The 2 x 3 sample in row-major (C) order, as a foreign tensor: `[[0, 1, 2], [10, 11, 12]]`.
fn row_major_2x3() -> Built<DLManagedTensorVersioned> {
    strided(&[0.0f64, 1.0, 2.0, 10.0, 11.0, 12.0], &[2, 3], &[3, 1], 0).build()
}

/// The 2 x 3 sample in column-major (F) order, as a foreign tensor.
fn column_major_2x3() -> Built<DLManagedTensorVersioned> {
    strided(&[0.0f64, 10.0, 1.0, 11.0, 2.0, 12.0], &[2, 3], &[1, 2], 0).build()
}

// --- into_dlpack -------------------------------------------------------------------------------

#[test]
fn into_dlpack_moves_each_owned_matrix_type_out_without_a_copy() {
    let m = sample(2, 3);
    let data = m.as_ptr();
    let tensor = into_dlpack(m).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2, 3][..], &[1, 2][..])
    );
    assert_eq!(tensor.data_ptr().cast_const().cast::<f64>(), data);
    assert!(!tensor.is_read_only());

    let v = DVector::from_vec(vec![1i32, 2, 3]);
    let data = v.as_ptr();
    let tensor = into_dlpack(v).unwrap();
    assert_eq!((tensor.shape(), tensor.strides()), (&[3][..], &[1][..]));
    assert_eq!(tensor.data_ptr().cast_const().cast::<i32>(), data);

    let tensor = into_dlpack(Matrix2x3::new(1u8, 2, 3, 4, 5, 6)).unwrap();
    assert_eq!(tensor.to_vec::<u8>().unwrap(), [1, 2, 3, 4, 5, 6]);
}

#[test]
fn into_dlpack_gives_back_a_matrix_dlpack_cannot_describe() {
    // An empty matrix whose row count does not fit DLPack's i64 shape: nalgebra makes it, no
    // tensor can describe it, and the refusal holds the matrix itself.
    let m = DMatrix::<f64>::from_vec(usize::MAX, 0, Vec::new());
    let refused = into_dlpack(m).unwrap_err();
    assert!(
        matches!(refused.error, Error::Overflow { .. }),
        "{:?}",
        refused.error
    );
    assert_eq!(refused.value.shape(), (usize::MAX, 0));
}

// --- to_dlpack ---------------------------------------------------------------------------------

#[test]
fn to_dlpack_copies_a_strided_view_into_a_tensor_that_owns_the_copy() {
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
    drop(m); // the tensor owns its elements
    assert_eq!(
        tensor.to_vec::<f64>().unwrap(),
        [11.0, 12.0, 13.0, 21.0, 22.0, 23.0]
    );
    // What it owns is a DMatrix: it comes back without a copy.
    let (back, transfer) = into_owned::<DMatrix<f64>>(tensor, CopyMode::Never).unwrap();
    assert_eq!((back[(1, 2)], transfer), (23.0, Transfer::Reclaimed));
}

// --- export_view, export_view_mut --------------------------------------------------------------

#[test]
fn export_view_lends_a_view_read_only_and_export_view_mut_writably() {
    let mut m = sample(3, 4);
    {
        // SAFETY: the tensor is dropped at the end of this block; `m` is neither written nor
        // dropped meanwhile.
        let mut tensor = unsafe { export_view(m.view((1, 0), (2, 4))) }.unwrap();
        assert!(tensor.is_read_only());
        assert_eq!(
            (tensor.shape(), tensor.strides()),
            (&[2, 4][..], &[1, 3][..])
        );
        assert_eq!(
            tensor.view::<f64>().unwrap().as_ptr(),
            &m[(1, 0)] as *const f64
        );
        assert_eq!(tensor.view_mut::<f64>().unwrap_err(), Error::ReadOnly);
    }
    {
        // SAFETY: `m` is not used until the tensor is dropped at the end of this block.
        let mut tensor = unsafe { export_view_mut(m.column_mut(2)) }.unwrap();
        assert_eq!(tensor.shape(), &[3]);
        view_mut::<DVectorViewMut<'_, f64>>(&mut tensor)
            .unwrap()
            .fill(-1.0);
    }
    assert_eq!(m.column(2).as_slice(), &[-1.0, -1.0, -1.0]);
    assert_eq!(m[(2, 3)], 23.0);
}

// --- view, view_mut ----------------------------------------------------------------------------

#[test]
fn view_and_view_mut_of_a_managed_tensor_are_in_place() {
    let built = column_major_2x3();
    let mut tensor = import(&built);
    let m = view::<DMatrixView<'_, f64>>(&tensor).unwrap();
    assert_eq!(m.as_ptr().addr(), built.buffer_addr());
    assert_eq!(m, sample(2, 3));
    assert_eq!(m.iter().next_back(), Some(&12.0));

    let mut m = view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap();
    m[(1, 0)] = 100.0;
    assert_eq!(tensor.view::<f64>().unwrap().get(&[1, 0]), Some(&100.0));

    // The target type picks the shape: a 2-d tensor is no vector.
    assert_eq!(
        view::<DVectorView<'_, f64>>(&tensor).unwrap_err(),
        Error::NdimMismatch {
            found: 2,
            expected: 1
        }
    );
    drop(tensor);
    assert_eq!(built.deletes(), 1);

    let tensor = ManagedTensor::export(vec![3.0f32, 4.0]).unwrap();
    let v: DVectorView<'_, f32> = view(&tensor).unwrap();
    assert_eq!(v.norm(), 5.0);
    let column = view::<DMatrixView<'_, f32>>(&tensor).unwrap();
    assert_eq!(column.shape(), (2, 1));
}

#[test]
fn view_and_view_mut_of_a_borrowed_tensor_are_in_place() {
    // A tensor lent for a call, as the C exchange API lends one: column-major 2 x 2.
    let mut data = [1.0f64, 2.0, 3.0, 4.0];
    let mut shape = [2i64, 2];
    let mut strides = [1i64, 2];
    let lent = DLTensor {
        data: data.as_mut_ptr().cast(),
        device: Device::CPU,
        ndim: 2,
        dtype: DataType::F64,
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: 0,
    };
    {
        // SAFETY: `lent` describes `data` through `shape` and `strides`, which outlive the
        // borrowed tensor and nothing else uses meanwhile.
        let mut tensor =
            unsafe { BorrowedTensor::new(&lent, Version::CURRENT, Flags::empty()) }.unwrap();
        assert_eq!(view::<DMatrixView<'_, f64>>(&tensor).unwrap()[(1, 1)], 4.0);
        view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap()[(0, 1)] = 30.0;
        view_transposed_mut::<f64>(&mut tensor).unwrap_err();
        assert_eq!(
            to_owned::<DMatrix<f64>>(&tensor).unwrap(),
            DMatrix::from_row_slice(2, 2, &[1.0, 30.0, 2.0, 4.0])
        );
    }
    assert_eq!(data, [1.0, 2.0, 30.0, 4.0]);
}

#[test]
fn view_refuses_a_layout_nalgebra_mishandles_and_view_mut_a_read_only_tensor() {
    let built = row_major_2x3();
    let mut tensor = import(&built);
    let err = view::<DMatrixView<'_, f64>>(&tensor).unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnsupportedLayout {
                axis: 0,
                stride: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("view_transposed"), "{err}");
    let err = view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap_err();
    assert!(matches!(err, Error::UnsupportedLayout { .. }), "{err:?}");
    drop(tensor);

    let read_only = into_dlpack(sample(2, 2)).unwrap().into_read_only();
    let mut read_only = read_only;
    assert_eq!(
        view_mut::<DMatrixViewMut<'_, f64>>(&mut read_only).unwrap_err(),
        Error::ReadOnly
    );
    assert_eq!(
        view::<DMatrixView<'_, f64>>(&read_only).unwrap()[(1, 1)],
        11.0
    );
}

// --- into_owned: each Transfer -----------------------------------------------------------------

#[test]
fn into_owned_reclaims_an_exported_matrix_of_its_own_type() {
    let m = sample(3, 2);
    let data = m.as_ptr();
    let raw = into_dlpack(m).unwrap().into_raw().unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let (back, transfer) = into_owned::<DMatrix<f64>>(tensor, CopyMode::Never).unwrap();
    assert_eq!((back.as_ptr(), transfer), (data, Transfer::Reclaimed));
    assert_eq!(back, sample(3, 2));

    let s = SVector::<u16, 3>::new(1, 2, 3);
    let (back, transfer) =
        into_owned::<SVector<u16, 3>>(into_dlpack(s).unwrap(), CopyMode::IfNeeded).unwrap();
    assert_eq!((back, transfer), (s, Transfer::Reclaimed));
}

#[test]
fn into_owned_moves_the_vec_of_a_vector_like_tensor() {
    let v = vec![1.0f32, 2.0, 3.0];
    let data = v.as_ptr();
    let tensor = ManagedTensor::export(v).unwrap();
    let (d, transfer) = into_owned::<DVector<f32>>(tensor, CopyMode::Never).unwrap();
    assert_eq!((d.as_ptr(), transfer), (data, Transfer::Moved));

    // A DVector's storage becomes a DMatrix column, and a 1 x n DMatrix's a RowDVector: with at
    // most one row or column, column-major order is the Vec's order.
    let tensor = into_dlpack(d).unwrap();
    let (m, transfer) = into_owned::<DMatrix<f32>>(tensor, CopyMode::Never).unwrap();
    assert_eq!(m.shape(), (3, 1));
    assert_eq!((m.as_ptr(), transfer), (data, Transfer::Moved));
    let tensor = into_dlpack(m.transpose()).unwrap();
    let data = tensor.data_ptr().cast_const().cast::<f32>();
    let (r, transfer) = into_owned::<RowDVector<f32>>(tensor, CopyMode::Never).unwrap();
    assert_eq!((r.as_ptr(), transfer), (data, Transfer::Moved));
    assert_eq!(r.as_slice(), &[1.0, 2.0, 3.0]);

    // An SMatrix's elements are inline: never moved, copied.
    let tensor = ManagedTensor::export(vec![1.0f32, 2.0, 3.0]).unwrap();
    let (s, transfer) = into_owned::<SVector<f32, 3>>(tensor, CopyMode::IfNeeded).unwrap();
    assert_eq!(s, SVector::<f32, 3>::new(1.0, 2.0, 3.0));
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
}

#[test]
fn into_owned_copies_when_asked_even_what_it_could_reclaim() {
    let m = sample(2, 2);
    let data = m.as_ptr();
    let tensor = into_dlpack(m).unwrap();
    let (copy, transfer) = into_owned::<DMatrix<f64>>(tensor, CopyMode::Always).unwrap();
    assert_eq!(transfer, Transfer::Copied(CopyReason::Requested));
    assert_ne!(copy.as_ptr(), data);
    assert_eq!(copy, sample(2, 2));
}

#[test]
fn into_owned_copies_a_layout_it_cannot_own_and_memory_it_cannot_take() {
    // Row-major: not a layout a DMatrix owns.
    let built = row_major_2x3();
    let (m, transfer) = into_owned::<DMatrix<f64>>(import(&built), CopyMode::IfNeeded).unwrap();
    assert_eq!(
        (m, transfer),
        (sample(2, 3), Transfer::Copied(CopyReason::Layout))
    );
    assert_eq!(built.deletes(), 1, "the tensor is dropped once copied");

    // Column-major, but a foreign producer's memory.
    let built = column_major_2x3();
    let (m, transfer) = into_owned::<DMatrix<f64>>(import(&built), CopyMode::IfNeeded).unwrap();
    assert_eq!(
        (m, transfer),
        (sample(2, 3), Transfer::Copied(CopyReason::NotOwned))
    );
    assert_eq!(built.deletes(), 1);
}

// --- into_owned: each refusal gives the tensor back ---------------------------------------------

#[test]
fn into_owned_under_never_refuses_a_copy_and_gives_the_tensor_back() {
    for (built, reason) in [
        (row_major_2x3(), CopyReason::Layout),
        (column_major_2x3(), CopyReason::NotOwned),
    ] {
        let refused = into_owned::<DMatrix<f64>>(import(&built), CopyMode::Never).unwrap_err();
        assert_eq!(refused.error, Error::CopyRefused { reason });
        assert_eq!(built.deletes(), 0, "the tensor came back");
        assert_eq!(refused.value.data_ptr().addr(), built.buffer_addr());
        // The caller may allow the copy now.
        let (m, transfer) = into_owned::<DMatrix<f64>>(refused.value, CopyMode::IfNeeded).unwrap();
        assert_eq!((m, transfer), (sample(2, 3), Transfer::Copied(reason)));
        assert_eq!(built.deletes(), 1);
    }
}

#[test]
fn into_owned_checks_dtype_ndim_and_shape_before_the_copy_mode() {
    let f32_tensor = || into_dlpack(DMatrix::<f32>::zeros(2, 3)).unwrap();
    for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
        let refused = into_owned::<DMatrix<f64>>(f32_tensor(), mode).unwrap_err();
        assert_eq!(
            refused.error,
            Error::DataTypeMismatch {
                found: DataType::F32,
                expected: DataType::F64
            },
            "{mode:?}"
        );
        let refused = into_owned::<DVector<f32>>(refused.value, mode).unwrap_err();
        assert_eq!(
            refused.error,
            Error::NdimMismatch {
                found: 2,
                expected: 1
            },
            "{mode:?}"
        );
        let refused = into_owned::<SMatrix<f32, 3, 2>>(refused.value, mode).unwrap_err();
        assert_eq!(
            refused.error,
            Error::ShapeMismatch {
                found: vec![2, 3],
                expected: vec![3, 2]
            },
            "{mode:?}"
        );
        // Untouched all along: still the exported matrix.
        let (m, transfer) = into_owned::<DMatrix<f32>>(refused.value, CopyMode::Never).unwrap();
        assert_eq!((m.shape(), transfer), ((2, 3), Transfer::Reclaimed));
    }
}

#[test]
fn into_owned_gives_the_tensor_back_when_the_copy_fails() {
    // Valid, a 16-byte span, but 2^63 f64s as a matrix: no copy fits in memory.
    let built = strided(&[1.0f64, 2.0], &[2, 1 << 62], &[1, 0], 0).build();
    let refused = into_owned::<DMatrix<f64>>(import(&built), CopyMode::IfNeeded).unwrap_err();
    assert_eq!(refused.error, Error::OutOfMemory { bytes: 8 << 63 });
    assert_eq!(built.deletes(), 0);
    assert_eq!(refused.value.shape(), &[2, 1 << 62]);
    drop(refused.value);
    assert_eq!(built.deletes(), 1);

    // And the 2^24 bound on empty dimensions nalgebra would loop over.
    let built = Foreign::new(DataType::F64, &[0, i64::MAX]).build();
    let refused = into_owned::<DMatrix<f64>>(import(&built), CopyMode::IfNeeded).unwrap_err();
    assert!(
        matches!(refused.error, Error::DimOutOfRange { axis: 1, .. }),
        "{:?}",
        refused.error
    );
    assert_eq!(built.deletes(), 0);
}

// --- extras ------------------------------------------------------------------------------------

#[test]
fn view_transposed_views_a_row_major_tensor_in_place() {
    let built = row_major_2x3();
    let mut tensor = import(&built);
    let t = view_transposed::<f64>(&tensor).unwrap();
    assert_eq!(t.as_ptr().addr(), built.buffer_addr());
    assert_eq!(t, sample(2, 3).transpose());
    let mut t = view_transposed_mut::<f64>(&mut tensor).unwrap();
    t[(2, 1)] = -12.0; // the tensor's [1, 2]
    assert_eq!(tensor.view::<f64>().unwrap().get(&[1, 2]), Some(&-12.0));
    // Column-major data is the plain view's, not the transposed one's.
    let built = column_major_2x3();
    let tensor = import(&built);
    assert!(matches!(
        view_transposed::<f64>(&tensor),
        Err(Error::UnsupportedLayout { .. })
    ));
}

#[test]
fn view_or_copy_views_when_it_can_and_copies_as_the_mode_allows() {
    let viewable = column_major_2x3();
    let tensor = import(&viewable);
    for (mode, borrowed) in [
        (CopyMode::Never, true),
        (CopyMode::IfNeeded, true),
        (CopyMode::Always, false),
    ] {
        let cow = view_or_copy::<DMatrixView<'_, f64>>(&tensor, mode).unwrap();
        assert_eq!(cow.is_borrowed(), borrowed, "{mode:?}");
        assert_eq!(cow.view(), sample(2, 3));
    }

    let built = row_major_2x3();
    let tensor = import(&built);
    assert_eq!(
        view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::Never).unwrap_err(),
        Error::CopyRefused {
            reason: CopyReason::Layout
        }
    );
    match view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap() {
        CowMatrix::Owned(m) => assert_eq!(m, sample(2, 3)),
        CowMatrix::Borrowed(v) => panic!("a row-major tensor viewed as {v:?}"),
    }

    // Vectors: a step is copied.
    let built = strided(&[0i32, 1, 2, 3, 4], &[3], &[2], 0).build();
    let tensor = import(&built);
    match view_or_copy::<DVectorView<'_, i32>>(&tensor, CopyMode::IfNeeded).unwrap() {
        CowVector::Owned(v) => assert_eq!(v.as_slice(), &[0, 2, 4]),
        CowVector::Borrowed(v) => panic!("a strided vector viewed as {v:?}"),
    }
}

#[test]
fn to_owned_copies_any_layout_and_leaves_the_tensor() {
    let built = strided(&[0.0f64, 1.0, 2.0, 10.0, 11.0, 12.0], &[2, 3], &[-3, 1], 3).build();
    let tensor = import(&built);
    assert_eq!(
        to_owned::<DMatrix<f64>>(&tensor).unwrap(),
        DMatrix::from_row_slice(2, 3, &[10.0, 11.0, 12.0, 0.0, 1.0, 2.0])
    );
    assert_eq!(to_owned::<Matrix2x3<f64>>(&tensor).unwrap()[(0, 2)], 12.0);
    assert_eq!(built.deletes(), 0, "to_owned only borrows the tensor");
    assert_eq!(
        to_owned::<DVector<f64>>(&tensor).unwrap_err(),
        Error::NdimMismatch {
            found: 2,
            expected: 1
        }
    );
}

#[test]
fn view_strided_views_any_non_negative_strides_in_place() {
    let built = row_major_2x3();
    let mut tensor = import(&built);
    // SAFETY: the view is only indexed, as the contract of a non-compact layout requires.
    let m = unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor) }.unwrap();
    assert_eq!((m.strides(), m[(1, 2)]), ((3, 1), 12.0));
    // SAFETY: as above.
    let mut m =
        unsafe { view_strided_mut::<DMatrixViewMut<'_, f64, Dyn, Dyn>>(&mut tensor) }.unwrap();
    m[(0, 1)] = -1.0;
    assert_eq!(tensor.view::<f64>().unwrap().get(&[0, 1]), Some(&-1.0));

    let built = strided(&[0u8, 1, 2, 3, 4, 5], &[3], &[2], 0).build();
    let mut tensor = import(&built);
    // SAFETY: only indexed.
    let v = unsafe { view_strided::<DVectorView<'_, u8, Dyn, Dyn>>(&tensor) }.unwrap();
    assert_eq!((v.strides(), v[2]), ((2, 3), 4));
    // SAFETY: only indexed.
    let mut v =
        unsafe { view_strided_mut::<DVectorViewMut<'_, u8, Dyn, Dyn>>(&mut tensor) }.unwrap();
    v[1] = 20;
    assert_eq!(tensor.to_vec::<u8>().unwrap(), [0, 20, 4]);
}
