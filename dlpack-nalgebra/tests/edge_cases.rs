//! Edge cases: nalgebra exports of every owned matrix shape, imports of every layout, the
//! zero-copy claims (pointer identity) and the copies the docs announce.

use dlpack_core::{CopyMode, CopyReason, Error, ManagedTensor, Transfer};
use dlpack_nalgebra::{
    OwnedMatrix, export_view, export_view_mut, into_dlpack, into_owned, to_dlpack, to_owned, view,
    view_mut, view_or_copy, view_strided, view_transposed, view_transposed_mut,
};
use dlpack_testing::StridedVec;
use nalgebra::{
    DMatrix, DMatrixView, DMatrixViewMut, DVector, DVectorView, DVectorViewMut, Dyn, Matrix1,
    Matrix2x3, OMatrix, RowDVector, SMatrix, SVector, U1, U2, U3,
};

/// Takes a tensor over as an `M`, copying if needed, which must succeed.
#[track_caller]
fn owned<M: OwnedMatrix>(tensor: ManagedTensor) -> (M, Transfer) {
    into_owned::<M>(tensor, CopyMode::IfNeeded).unwrap_or_else(|r| panic!("{}", r.error))
}

fn strided(shape: &[i64], strides: &[i64], first: usize) -> ManagedTensor {
    let data = (0..24).map(|i| i as f64).collect::<Vec<f64>>();
    StridedVec::export(data, shape, strides, first).expect("a layout inside the buffer")
}

/// The expected matrix of a layout (a 1-d tensor is a column).
fn expected(shape: &[i64], strides: &[i64], first: usize) -> DMatrix<f64> {
    let (r, c, rs, cs) = match (shape, strides) {
        (&[n], &[s]) => (n, 1, s, 0),
        (&[r, c], &[rs, cs]) => (r, c, rs, cs),
        _ => unreachable!(),
    };
    DMatrix::from_fn(r as usize, c as usize, |i, j| {
        (first as i64 + i as i64 * rs + j as i64 * cs) as f64
    })
}

fn layouts() -> Vec<(&'static str, Vec<i64>, Vec<i64>, usize)> {
    vec![
        ("c", vec![2, 3], vec![3, 1], 0),
        ("f", vec![2, 3], vec![1, 2], 0),
        ("f col steps", vec![3, 3], vec![1, 6], 1),
        ("c row steps", vec![2, 3], vec![6, 1], 0),
        ("both steps", vec![2, 3], vec![6, 2], 0),
        ("neg rows", vec![2, 3], vec![-3, 1], 3),
        ("neg cols", vec![3, 2], vec![1, -3], 3),
        ("broadcast cols", vec![3, 4], vec![1, 0], 2),
        ("broadcast rows", vec![4, 3], vec![0, 1], 2),
        ("scalar", vec![2, 2], vec![0, 0], 5),
        ("row of one, odd stride", vec![1, 4], vec![-9, 2], 0),
        ("column of one, odd stride", vec![4, 1], vec![3, -9], 0),
        ("empty rows", vec![0, 4], vec![-1, 7], 0),
        ("empty cols", vec![4, 0], vec![5, -3], 0),
        ("1-d", vec![5], vec![1], 2),
        ("1-d step", vec![5], vec![3], 2),
        ("1-d reversed", vec![5], vec![-2], 10),
        ("1-d broadcast", vec![5], vec![0], 2),
        ("1-d one", vec![1], vec![i64::MIN], 0),
    ]
}

#[test]
fn every_layout_is_viewed_in_place_or_refused_and_always_copied_right() {
    for (name, shape, strides, first) in layouts() {
        let want = expected(&shape, &strides, first);
        let tensor = strided(&shape, &strides, first);
        let ptr = tensor.view::<f64>().unwrap().as_ptr();
        // The copy is always right.
        assert_eq!(
            to_owned::<DMatrix<f64>>(&tensor).unwrap(),
            want,
            "{name}: to_owned"
        );
        let cow = view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap();
        assert_eq!(cow.view(), want, "{name}: cow");
        // A view, where given, is in place and right.
        match view::<DMatrixView<'_, f64>>(&tensor) {
            Ok(v) => {
                assert_eq!(v, want, "{name}: view");
                assert_eq!(v.clone_owned(), want, "{name}: clone_owned");
                assert_eq!(v.transpose(), want.transpose(), "{name}: transpose");
                if !want.is_empty() {
                    assert_eq!(v.as_ptr(), ptr, "{name}: zero copy");
                }
                assert!(
                    cow.is_borrowed(),
                    "{name}: a cow of a viewable layout borrows"
                );
            }
            Err(e) => {
                assert!(matches!(e, Error::UnsupportedLayout { .. }), "{name}: {e}");
                assert!(!cow.is_borrowed(), "{name}");
            }
        }
        if shape.len() == 2 {
            if let Ok(t) = view_transposed::<f64>(&tensor) {
                assert_eq!(t, want.transpose(), "{name}: transposed");
                assert_eq!(
                    t.clone_owned(),
                    want.transpose(),
                    "{name}: transposed clone"
                );
            }
        } else {
            let want_v = DVector::from_iterator(want.nrows(), want.iter().copied());
            assert_eq!(to_owned::<DVector<f64>>(&tensor).unwrap(), want_v, "{name}");
            let cow = view_or_copy::<DVectorView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap();
            assert_eq!(cow.view(), want_v, "{name}: vector cow");
            if let Ok(v) = view::<DVectorView<'_, f64>>(&tensor) {
                assert_eq!(v, want_v, "{name}: vector view");
            }
        }
        // Owning imports.
        let (taken, transfer) = owned::<DMatrix<f64>>(tensor);
        assert_eq!(taken, want, "{name}: into_owned");
        assert!(
            transfer.is_copy(),
            "{name}: a foreign tensor is copied, {transfer}"
        );
    }
}

#[test]
fn mutable_views_of_every_writable_layout_write_in_place() {
    for (name, shape, strides, first) in layouts() {
        let want = expected(&shape, &strides, first);
        let mut tensor = strided(&shape, &strides, first);
        let overlapping = shape.iter().zip(&strides).any(|(&d, &s)| d > 1 && s == 0);
        let mut wrote = false;
        match view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor) {
            Err(Error::OverlappingStrides { .. }) => assert!(overlapping, "{name}"),
            Err(e) => assert!(
                matches!(e, Error::UnsupportedLayout { .. }) && !overlapping,
                "{name}: {e}"
            ),
            Ok(mut m) => {
                m.iter_mut().for_each(|x| *x += 100.0);
                wrote = true;
            }
        }
        if !wrote
            && shape.len() == 2
            && let Ok(mut m) = view_transposed_mut::<f64>(&mut tensor)
        {
            m.iter_mut().for_each(|x| *x += 100.0);
            wrote = true;
        }
        let after = to_owned::<DMatrix<f64>>(&tensor).unwrap();
        if wrote {
            assert_eq!(after, want.map(|x| x + 100.0), "{name}");
        } else {
            assert_eq!(after, want, "{name}");
        }
    }
}

// --- exports of every owned matrix shape ------------------------------------------------------

#[test]
fn a_row_vector_comes_back_as_a_dmatrix_without_a_copy() {
    let r = RowDVector::from_vec(vec![1.0f32, 2.0, 3.0]);
    let address = r.as_ptr();
    let tensor = into_dlpack(r).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[1, 3][..], &[1, 1][..])
    );
    let (m, transfer) = owned::<DMatrix<f32>>(tensor);
    assert_eq!((m.shape(), transfer), ((1, 3), Transfer::Moved));
    assert_eq!(
        m.as_ptr(),
        address,
        "a 1 x n matrix's Vec is row-major: taken, not copied"
    );
}

#[test]
fn a_matrix_with_static_columns_and_dynamic_rows_exports_and_comes_back() {
    let m: OMatrix<i16, Dyn, U3> = OMatrix::<i16, Dyn, U3>::from_fn(4, |i, j| (10 * i + j) as i16);
    let expected = DMatrix::from_fn(4, 3, |i, j| (10 * i + j) as i16);
    let tensor = into_dlpack(m.clone()).unwrap();
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[4, 3][..], &[1, 4][..])
    );
    assert_eq!(owned::<DMatrix<i16>>(tensor).0, expected);
    // Back as its own type: reclaimed. A DMatrix of that shape becomes one by a copy; one of
    // another number of columns is refused.
    let (back, transfer) = owned::<OMatrix<i16, Dyn, U3>>(into_dlpack(m.clone()).unwrap());
    assert_eq!((back, transfer), (m.clone(), Transfer::Reclaimed));
    let (back, transfer) = owned::<OMatrix<i16, Dyn, U3>>(into_dlpack(expected).unwrap());
    assert_eq!(
        (back, transfer),
        (m, Transfer::Copied(CopyReason::NotOwned))
    );
    let refused = into_owned::<OMatrix<i16, Dyn, U3>>(
        into_dlpack(DMatrix::<i16>::zeros(4, 2)).unwrap(),
        CopyMode::IfNeeded,
    )
    .unwrap_err();
    assert_eq!(
        refused.error,
        Error::ShapeMismatch {
            found: vec![4, 2],
            expected: vec![4, 3]
        }
    );

    let m: OMatrix<i16, U2, Dyn> = OMatrix::<i16, U2, Dyn>::from_fn(1, |i, _| i as i16);
    let tensor = into_dlpack(m).unwrap();
    assert_eq!(tensor.shape(), &[2, 1]);
    let address = tensor.view::<i16>().unwrap().as_ptr();
    let v = tensor.into_vec::<i16>().unwrap();
    assert_eq!((v.as_ptr(), v.len()), (address, 2));
}

#[test]
fn empty_matrices_round_trip_through_every_owning_import() {
    for (r, c) in [(0, 0), (0, 3), (3, 0)] {
        let m = DMatrix::<f64>::zeros(r, c);
        let tensor = into_dlpack(m).unwrap();
        assert_eq!(tensor.shape(), &[r as i64, c as i64]);
        let back = owned::<DMatrix<f64>>(tensor).0;
        assert_eq!(back.shape(), (r, c));
        let tensor = into_dlpack(DMatrix::<f64>::zeros(r, c)).unwrap();
        assert_eq!(tensor.into_vec::<f64>().unwrap(), Vec::<f64>::new());
        let tensor = into_dlpack(DMatrix::<f64>::zeros(r, c)).unwrap();
        let v = view::<DMatrixView<'_, f64>>(&tensor).unwrap();
        assert_eq!(v.shape(), (r, c));
        assert_eq!(v.clone_owned(), DMatrix::<f64>::zeros(r, c));
    }
    let tensor = into_dlpack(SMatrix::<f32, 0, 3>::zeros()).unwrap();
    assert_eq!(tensor.shape(), &[0, 3]);
    let back: SMatrix<f32, 0, 3> = owned(tensor).0;
    assert_eq!(back.shape(), (0, 3));
}

#[test]
fn a_1x1_static_matrix_is_1_d_and_comes_back() {
    let tensor = into_dlpack(Matrix1::new(5u8)).unwrap();
    assert_eq!(tensor.shape(), &[1]);
    let back: Matrix1<u8> = owned(tensor).0;
    assert_eq!(back[(0, 0)], 5);
}

#[test]
fn into_owned_copies_a_dmatrix_of_the_right_shape_into_an_smatrix_in_column_major_order() {
    let m = DMatrix::from_fn(2, 3, |i, j| (10 * i + j) as i32);
    let tensor = into_dlpack(m.clone()).unwrap();
    let s: Matrix2x3<i32> = owned(tensor).0;
    assert_eq!(DMatrix::from_column_slice(2, 3, s.as_slice()), m);
    // A row-major foreign tensor of the same shape.
    let tensor = StridedVec::export(vec![0i32, 1, 2, 10, 11, 12], &[2, 3], &[3, 1], 0).unwrap();
    let s: Matrix2x3<i32> = owned(tensor).0;
    assert_eq!(DMatrix::from_column_slice(2, 3, s.as_slice()), m);
    // A 1-d tensor into an SVector; a 2-d [n, 1] one is refused, as for a DVector.
    let s: SVector<i32, 3> = owned(ManagedTensor::export(vec![1, 2, 3]).unwrap()).0;
    assert_eq!(s, SVector::<i32, 3>::new(1, 2, 3));
    let column = into_dlpack(DMatrix::from_vec(3, 1, vec![1, 2, 3])).unwrap();
    let refused = into_owned::<SVector<i32, 3>>(column, CopyMode::IfNeeded).unwrap_err();
    assert_eq!(
        refused.error,
        Error::NdimMismatch {
            found: 2,
            expected: 1
        }
    );
}

#[test]
fn into_owned_dvector_of_a_vec_export_is_zero_copy_and_of_a_strided_one_a_right_copy() {
    let v = vec![1.0f64, 2.0, 3.0];
    let address = v.as_ptr();
    let (d, transfer) = owned::<DVector<f64>>(ManagedTensor::export(v).unwrap());
    assert_eq!((d.as_ptr(), transfer), (address, Transfer::Moved));
    let (d, transfer) = owned::<DVector<f64>>(strided(&[4], &[-3], 9));
    assert_eq!(d.as_slice(), &[9.0, 6.0, 3.0, 0.0]);
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
}

// --- exports of views -------------------------------------------------------------------------

#[test]
fn an_exported_column_step_view_is_refused_as_a_safe_view_but_strided_in_place_or_copied() {
    let m = DMatrix::from_fn(4, 6, |i, j| (10 * i + j) as f64);
    let v = m.columns_with_step(1, 3, 1); // columns 1, 3, 5
    // SAFETY: the tensor is dropped before `m`, which nobody writes meanwhile.
    let tensor = unsafe { export_view(v).unwrap() };
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[4, 3][..], &[1, 8][..])
    );
    // Not compact column-major (column stride 8 for 4 rows): no safe view.
    let err = view::<DMatrixView<'_, f64>>(&tensor).unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnsupportedLayout {
                axis: 1,
                stride: 8,
                ..
            }
        ),
        "{err:?}"
    );
    // SAFETY: the view is only indexed.
    let back = unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor).unwrap() };
    assert_eq!(back.as_ptr(), v.as_ptr());
    assert_eq!(back[(3, 2)], 35.0);
    assert_eq!(to_owned::<DMatrix<f64>>(&tensor).unwrap(), v);
    drop(tensor);
}

#[test]
fn an_exported_row_step_view_is_refused_as_a_view_and_copied_right() {
    let m = DMatrix::from_fn(6, 3, |i, j| (10 * i + j) as f64);
    let v = m.rows_with_step(0, 3, 1); // rows 0, 2, 4
    // SAFETY: the tensor is dropped before `m`, which nobody writes meanwhile.
    let tensor = unsafe { export_view(v).unwrap() };
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[3, 3][..], &[2, 6][..])
    );
    assert!(view::<DMatrixView<'_, f64>>(&tensor).is_err());
    let copy = to_owned::<DMatrix<f64>>(&tensor).unwrap();
    assert_eq!(copy, DMatrix::from_fn(3, 3, |i, j| (20 * i + j) as f64));
    drop(tensor);
}

#[test]
fn export_view_mut_of_a_column_view_writes_into_the_matrix() {
    let mut m = DMatrix::<i32>::zeros(3, 3);
    {
        let col = m.column_mut(1);
        // SAFETY: the tensor is dropped at the end of this block; `m` is not used meanwhile.
        let mut tensor = unsafe { export_view_mut(col).unwrap() };
        assert_eq!(tensor.shape(), &[3]);
        let mut v = dlpack_nalgebra::view_mut::<DVectorViewMut<'_, i32>>(&mut tensor).unwrap();
        v.fill(7);
    }
    assert_eq!(m.column(1).as_slice(), &[7, 7, 7]);
    assert_eq!(m.column(0).as_slice(), &[0, 0, 0]);
}

#[test]
fn to_dlpack_of_a_row_view_is_2_d_and_of_a_column_view_1_d() {
    let m = DMatrix::from_fn(3, 4, |i, j| (10 * i + j) as u8);
    let t = to_dlpack(&m.row(2)).unwrap();
    assert_eq!(t.shape(), &[1, 4]);
    assert_eq!(t.to_vec::<u8>().unwrap(), [20, 21, 22, 23]);
    let t = to_dlpack(&m.column(1)).unwrap();
    assert_eq!(t.shape(), &[3]);
    assert_eq!(t.to_vec::<u8>().unwrap(), [1, 11, 21]);
    let t = to_dlpack(&m.transpose()).unwrap();
    assert_eq!(t.shape(), &[4, 3]);
}

#[test]
fn a_dvector_export_imported_as_a_matrix_is_zero_copy() {
    let v = DVector::from_vec(vec![1u64, 2, 3]);
    let address = v.as_ptr();
    let (m, transfer) = owned::<DMatrix<u64>>(into_dlpack(v).unwrap());
    assert_eq!((m.shape(), m.as_ptr()), ((3, 1), address));
    assert_eq!(transfer, Transfer::Moved);
    // And an SVector export into a DMatrix is a right copy.
    let (m, transfer) = owned::<DMatrix<u64>>(into_dlpack(SVector::<u64, 2>::new(4, 5)).unwrap());
    assert_eq!(m.as_slice(), &[4, 5]);
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    let _: Option<OMatrix<u64, U2, U1>> = None;
}

#[test]
fn into_owned_dvector_of_a_single_column_dmatrix_export_is_refused() {
    // A DMatrix n x 1 exports 2-d; DVector imports take 1-d only (documented).
    let m = DMatrix::from_vec(3, 1, vec![1.0f32, 2.0, 3.0]);
    let e = into_owned::<DVector<f32>>(into_dlpack(m).unwrap(), CopyMode::IfNeeded).unwrap_err();
    assert_eq!(
        e.error,
        Error::NdimMismatch {
            found: 2,
            expected: 1
        }
    );
}
