//! Edge cases beside `layout_matrix.rs`: exports of Fortran, sliced, reversed, 0-d, empty and
//! broadcast arrays; imports of hostile layouts into views, copies and owned arrays; zero-copy
//! claims checked by pointer identity, copies by the `IS_COPIED` flag. (From a review of the
//! crate; each test asserts the documented behaviour.)

use dlpack_core::{CopyMode, CopyReason, Element, Error, Flags, ManagedTensor, Transfer};
use dlpack_ndarray::{
    ImportedArray, OwnedArray, SharedArray, export_view, into_dlpack, into_owned, to_dlpack,
    to_owned, view, view_mut,
};
use dlpack_testing::StridedVec;
use ndarray::{
    ArcArray, Array, Array0, Array1, Array2, ArrayD, ArrayView2, ArrayViewD, Axis, Dimension, Ix0,
    Ix1, Ix2, Ix3, IxDyn, ShapeBuilder, array, s,
};

fn strided<T: Element>(
    data: Vec<T>,
    shape: &[i64],
    strides: &[i64],
    first: usize,
) -> ManagedTensor {
    StridedVec::export(data, shape, strides, first).expect("a layout inside the buffer")
}

fn counting(n: usize) -> Vec<i32> {
    (0..n as i32).collect()
}

// ---------------------------------------------------------------------------------------------
// Export

#[test]
fn fortran_sliced_negative_array_exports_its_layout_and_reclaims_the_same_memory() {
    // Fortran order, then reversed along axis 1 and stepped along axis 0.
    let a = Array::from_shape_vec((4, 6).f(), counting(24)).unwrap();
    let a = a.slice_move(s![..;2, ..;-1]);
    let expected = a.clone();
    let first = a.as_ptr();
    let (shape, strides) = (a.shape().to_vec(), a.strides().to_vec());
    let tensor = into_dlpack(a).unwrap();
    assert_eq!(tensor.shape(), &[shape[0] as i64, shape[1] as i64]);
    assert_eq!(tensor.strides(), &[strides[0] as i64, strides[1] as i64]);
    assert_eq!(tensor.view::<i32>().unwrap().as_ptr(), first);
    // Core agrees on every element.
    let v: ArrayView2<i32> = view(&tensor).unwrap();
    assert_eq!(v, expected);
    assert_eq!(v.as_ptr(), first);
    // into_vec must refuse (not row-major) and leave the tensor intact.
    let tensor = tensor.into_vec::<i32>().unwrap_err();
    let (back, transfer): (Array2<i32>, _) = into_owned(tensor, CopyMode::Never).unwrap();
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(back.as_ptr(), first);
    assert_eq!(back, expected);
    assert_eq!(back.strides(), &strides[..]);
}

#[test]
fn zero_d_array_round_trips_through_every_import() {
    let a = Array0::from_elem((), 7.5f64);
    let address = a.as_ptr();
    let tensor = into_dlpack(a).unwrap();
    assert_eq!(tensor.ndim(), 0);
    assert_eq!(view::<f64, Ix0>(&tensor).unwrap()[()], 7.5);
    assert_eq!(view::<f64, IxDyn>(&tensor).unwrap().ndim(), 0);
    assert_eq!(
        to_owned::<f64, IxDyn>(&tensor)
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        [7.5]
    );
    let back: ArrayD<f64> = into_owned(tensor, CopyMode::Never).unwrap().0;
    assert_eq!(back.as_ptr(), address);
    assert_eq!(back.ndim(), 0);
    // A 0-d export gives its Vec up.
    let v = into_dlpack(Array0::from_elem((), 3u8))
        .unwrap()
        .into_vec::<u8>()
        .unwrap();
    assert_eq!(v, [3]);
}

#[test]
fn an_empty_slice_in_the_middle_of_its_vec_round_trips() {
    let a = Array1::from_vec(counting(10)).slice_move(s![5..5]);
    assert_eq!(a.len(), 0);
    let tensor = into_dlpack(a).unwrap();
    assert_eq!(tensor.shape(), &[0]);
    assert_eq!(tensor.to_vec::<i32>().unwrap(), Vec::<i32>::new());
    let back: Array1<i32> = into_owned(tensor, CopyMode::IfNeeded).unwrap().0;
    assert_eq!(back.len(), 0);

    // A 2-d empty array with a non-trivial other axis, Fortran order.
    let e = Array2::<f32>::zeros((0, 5).f());
    let tensor = into_dlpack(e).unwrap();
    assert_eq!(tensor.shape(), &[0, 5]);
    assert!(tensor.is_row_major_contiguous());
    let v: ArrayView2<f32> = view(&tensor).unwrap();
    assert_eq!(v.shape(), &[0, 5]);
    let back: Array2<f32> = into_owned(tensor, CopyMode::IfNeeded).unwrap().0;
    assert_eq!(back.shape(), &[0, 5]);
}

#[test]
fn an_empty_array_with_huge_other_axes_round_trips() {
    // ndarray allows a zero axis next to large sizes (their product must fit isize).
    let big = isize::MAX as usize / 3;
    let a = Array::<u8, _>::from_shape_vec((0, big, 3), vec![]).unwrap();
    let tensor = into_dlpack(a).unwrap();
    assert_eq!(tensor.shape(), &[0, big as i64, 3]);
    let v = view::<u8, Ix3>(&tensor).unwrap();
    assert_eq!(v.shape(), &[0, big, 3]);
    let copy = to_owned::<u8, IxDyn>(&tensor).unwrap();
    assert_eq!(copy.shape(), &[0, big, 3]);
    let back: Array<u8, Ix3> = into_owned(tensor, CopyMode::IfNeeded).unwrap().0;
    assert_eq!(back.shape(), &[0, big, 3]);
}

#[test]
fn a_unique_arc_array_comes_back_without_a_copy_and_a_shared_one_is_copied() {
    let shared = ArcArray::from_shape_vec((3, 4), counting(12)).unwrap();
    let sliced = shared.slice(s![.., ..;2]).to_shared(); // a copy (to_shared of a view)
    drop(shared);
    let address = sliced.as_ptr();
    let tensor = into_dlpack(sliced).unwrap();
    assert!(tensor.is_read_only());
    let (back, transfer): (Array2<i32>, _) = into_owned(tensor, CopyMode::Never).unwrap();
    assert_eq!(back.as_ptr(), address, "a unique ArcArray is not copied");
    assert_eq!(transfer, Transfer::Reclaimed);

    let shared = ArcArray::from_shape_vec((2, 2), counting(4)).unwrap();
    let tensor = into_dlpack(shared.clone()).unwrap();
    let (mut back, transfer): (Array2<i32>, _) = into_owned(tensor, CopyMode::IfNeeded).unwrap();
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    assert_ne!(
        back.as_ptr(),
        shared.as_ptr(),
        "a shared ArcArray is copied"
    );
    back[[0, 0]] = 100;
    assert_eq!(shared[[0, 0]], 0);
}

#[test]
fn a_unique_arc_array_under_another_dimension_type_comes_back_without_a_copy() {
    // The doc of `into_owned` promises the ArcArray path (`ArcArray::into_owned`, which copies
    // only when shared) under another dimension type of the same ndim, as for the Array path.
    let shared = ArcArray::from_shape_vec((3, 4), counting(12)).unwrap();
    let address = shared.as_ptr();
    let tensor = into_dlpack(shared).unwrap();
    let (back, transfer): (ArrayD<i32>, _) = into_owned(tensor, CopyMode::Never).unwrap();
    assert_eq!((back.as_ptr(), transfer), (address, Transfer::Reclaimed));
}

#[test]
fn shared_array_reclaim_and_into_inner_keep_the_layout() {
    let a = ArcArray::from_shape_vec((3, 4).f(), counting(12)).unwrap();
    let r = a.slice(s![..;-1, 1..]).to_shared();
    let (ptr, strides) = (r.as_ptr(), r.strides().to_vec());
    let tensor = ManagedTensor::export(SharedArray::new(r)).unwrap();
    let r = tensor
        .reclaim::<SharedArray<i32, Ix2>>()
        .unwrap()
        .into_inner();
    assert_eq!((r.as_ptr(), r.strides()), (ptr, &strides[..]));
}

#[test]
fn to_dlpack_of_a_broadcast_view_is_an_independent_c_order_copy() {
    let a = array![1.0f32, 2.0, 3.0];
    let b = a.broadcast((2, 3)).unwrap();
    let tensor = to_dlpack(&b).unwrap();
    assert!(tensor.flags().contains(Flags::IS_COPIED));
    assert_eq!(tensor.strides(), &[3, 1]);
    assert_eq!(
        tensor.to_vec::<f32>().unwrap(),
        [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    );
    let v = tensor.into_vec::<f32>().unwrap();
    assert_eq!(v.len(), 6);
}

#[test]
fn export_view_of_a_broadcast_imports_back_as_a_read_only_zero_stride_view() {
    let a = array![1i64, 2, 3];
    let b = a.broadcast((4, 3)).unwrap();
    // SAFETY: the tensor is dropped before `a`, which nobody writes meanwhile.
    let mut tensor = unsafe { export_view(&b).unwrap() };
    assert_eq!(tensor.strides(), &[0, 1]);
    let v: ArrayView2<i64> = view(&tensor).unwrap();
    assert_eq!(v.strides(), &[0, 1]);
    assert_eq!(v.as_ptr(), a.as_ptr());
    assert_eq!(v.sum(), 24);
    assert!(view_mut::<i64, Ix2>(&mut tensor).is_err());
    let (copy, transfer): (Array2<i64>, _) = into_owned(tensor, CopyMode::IfNeeded).unwrap();
    assert_eq!(copy, b);
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
}

#[test]
fn an_array_with_more_dimensions_than_dlpack_allows_is_refused() {
    let a = ArrayD::<u8>::zeros(IxDyn(&[1; 1025]));
    let refused = into_dlpack(a).unwrap_err();
    assert!(matches!(refused.error, Error::BadNdim { .. }));
    // The array comes back.
    assert_eq!(refused.value.ndim(), 1025);
}

// ---------------------------------------------------------------------------------------------
// Import

/// Every layout: (name, shape, strides, first element), over a buffer of 24 counting elements.
fn layouts() -> Vec<(&'static str, Vec<i64>, Vec<i64>, usize)> {
    vec![
        ("c", vec![2, 3], vec![3, 1], 0),
        ("f", vec![2, 3], vec![1, 2], 0),
        ("c steps", vec![2, 3], vec![12, 2], 1),
        ("reversed rows", vec![2, 3], vec![-3, 1], 3),
        ("reversed both", vec![2, 3], vec![-3, -1], 5),
        ("f reversed cols", vec![2, 3], vec![1, -2], 4),
        ("broadcast rows", vec![4, 3], vec![0, 1], 2),
        ("broadcast cols", vec![2, 5], vec![1, 0], 2),
        ("broadcast scalar", vec![3, 3], vec![0, 0], 7),
        ("size-1 axis, odd strides", vec![1, 3], vec![-100, 2], 0),
        ("size-1 axis, huge stride", vec![3, 1], vec![1, i64::MAX], 0),
        ("size-1 axis, min stride", vec![3, 1], vec![2, i64::MIN], 0),
        ("empty, odd strides", vec![0, 3], vec![-7, 99], 0),
        ("3d mixed", vec![2, 2, 3], vec![-12, 1, 2], 12),
    ]
}

/// The element of `data` at `index` under a layout, computed independently.
fn element(data: &[i32], strides: &[i64], first: usize, index: &[usize]) -> i32 {
    let off: i64 = index.iter().zip(strides).map(|(&i, &s)| i as i64 * s).sum();
    data[(first as i64 + off) as usize]
}

fn expected(shape: &[i64], strides: &[i64], first: usize) -> ArrayD<i32> {
    let data = counting(24);
    let dim: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    ArrayD::from_shape_fn(IxDyn(&dim), |idx| {
        element(&data, strides, first, idx.slice())
    })
}

#[test]
fn every_layout_imports_as_views_copies_and_imported_arrays_with_the_right_elements() {
    for (name, shape, strides, first) in layouts() {
        let want = expected(&shape, &strides, first);
        let mut tensor = strided(counting(24), &shape, &strides, first);
        let first_ptr = tensor.view::<i32>().unwrap().as_ptr();

        let v: ArrayViewD<i32> = view(&tensor).unwrap();
        assert_eq!(v, want, "{name}: view");
        if !want.is_empty() {
            assert_eq!(v.as_ptr(), first_ptr, "{name}: a view is zero copy");
        }
        // Operations on the view that ndarray builds on its layout.
        assert_eq!(v.to_owned(), want, "{name}: to_owned");
        assert_eq!(v.t().to_owned(), want.t(), "{name}: t");
        assert_eq!(v.iter().copied().sum::<i32>(), want.sum(), "{name}: iter");
        let reversed = {
            let mut v = v.clone();
            for ax in 0..v.ndim() {
                v.invert_axis(Axis(ax));
            }
            v.to_owned()
        };
        let mut w = want.clone();
        for ax in 0..w.ndim() {
            w.invert_axis(Axis(ax));
        }
        assert_eq!(reversed, w, "{name}: inverted");
        let sliced = v
            .slice_each_axis(|_| ndarray::Slice::new(0, None, 2))
            .to_owned();
        assert_eq!(
            sliced,
            want.slice_each_axis(|_| ndarray::Slice::new(0, None, 2)),
            "{name}: stepped slice"
        );
        drop(v);

        assert_eq!(
            to_owned::<i32, IxDyn>(&tensor).unwrap(),
            want,
            "{name}: to_owned"
        );
        let overlapping = strides.iter().zip(&shape).any(|(&s, &d)| s == 0 && d > 1);
        match view_mut::<i32, IxDyn>(&mut tensor) {
            Ok(mut v) => {
                assert!(
                    !overlapping,
                    "{name}: a mutable view of overlapping strides"
                );
                assert_eq!(v, want, "{name}: view_mut");
                v.map_inplace(|x| *x += 1000);
            }
            Err(e) => assert!(overlapping, "{name}: view_mut refused: {e}"),
        }
        let after = if overlapping {
            want.clone()
        } else {
            want.mapv(|x| x + 1000)
        };
        let imported = ImportedArray::<i32, IxDyn>::new(tensor).unwrap();
        assert_eq!(imported.view(), after, "{name}: ImportedArray");
        let (owned, transfer) = imported.into_owned(CopyMode::IfNeeded).unwrap();
        assert_eq!(owned, after, "{name}: into_owned");
        assert!(transfer.is_copy(), "{name}: a StridedVec is copied");
        assert!(
            owned.is_standard_layout(),
            "{name}: a copy is standard layout"
        );
    }
}

#[test]
fn fixed_dimension_imports_of_every_layout() {
    for (name, shape, strides, first) in layouts().into_iter().filter(|l| l.1.len() == 2) {
        let want = expected(&shape, &strides, first)
            .into_dimensionality::<Ix2>()
            .unwrap();
        let tensor = strided(counting(24), &shape, &strides, first);
        let v: ArrayView2<i32> = view(&tensor).unwrap();
        assert_eq!(v, want, "{name}");
        let owned: Array2<i32> = into_owned(tensor, CopyMode::IfNeeded).unwrap().0;
        assert_eq!(owned, want, "{name}");
        let tensor = strided(counting(24), &shape, &strides, first);
        assert_eq!(
            view::<i32, Ix1>(&tensor).unwrap_err(),
            Error::NdimMismatch {
                found: 2,
                expected: 1
            }
        );
    }
}

#[test]
fn into_owned_of_a_compact_vec_producer_is_zero_copy_and_of_any_other_a_copy() {
    // `StridedVec` does not give its Vec (a hand-written producer): a compact row-major tensor
    // of it is copied because it is not owned.
    let tensor = StridedVec::export(counting(6), &[2, 3], &[3, 1], 0).unwrap();
    let (a, transfer): (Array2<i32>, _) = into_owned(tensor, CopyMode::IfNeeded).unwrap();
    assert_eq!(a, array![[0, 1, 2], [3, 4, 5]]);
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));

    // A boxed-slice export is taken over without a copy.
    let b: Box<[i32]> = counting(4).into_boxed_slice();
    let address = b.as_ptr();
    let tensor = ManagedTensor::export(b).unwrap();
    let (a, transfer): (Array1<i32>, _) = into_owned(tensor, CopyMode::Never).unwrap();
    assert_eq!((a.as_ptr(), transfer), (address, Transfer::Moved));
}

#[test]
fn a_small_prefix_of_a_large_array_is_not_handed_over_as_its_whole_vec() {
    // The first row of a 1000 x 10 array: a prefix of its Vec, but 80 bytes of 80 kB. Handing
    // the Vec over would keep 80 kB alive for 80 bytes, so into_vec refuses and the caller
    // copies; the tensor still reads the same elements from the same address.
    let mut a = Array2::<f64>::zeros((1000, 10));
    a.row_mut(0)
        .assign(&Array1::from_iter((0..10).map(f64::from)));
    a.slice_collapse(s![0..1, ..]);
    let address = a.as_ptr();
    let tensor = into_dlpack(a).unwrap();
    let tensor = tensor.into_vec::<f64>().unwrap_err();
    let v: ArrayView2<f64> = view(&tensor).unwrap();
    assert_eq!(v.as_ptr(), address);
    assert_eq!(
        v.row(0).to_vec(),
        (0..10).map(f64::from).collect::<Vec<_>>()
    );
    // A prefix that is most of the Vec is still handed over, without a copy.
    let mut a = Array2::from_shape_vec((4, 3), counting(12)).unwrap();
    a.slice_collapse(s![..3, ..]);
    let address = a.as_ptr();
    let v = into_dlpack(a).unwrap().into_vec::<i32>().unwrap();
    assert_eq!((v.as_ptr(), v.len()), (address, 9));
}

#[test]
fn owned_array_give_vec_keeps_the_tensor_valid_when_it_refuses() {
    // A standard-layout array that is a contiguous run inside a larger Vec: into_vec refuses,
    // and the tensor still reads the same elements from the same address afterwards.
    let a = Array2::from_shape_vec((4, 3), counting(12)).unwrap();
    let a = a.slice_move(s![1..3, ..]);
    let address = a.as_ptr();
    let tensor = into_dlpack(a).unwrap();
    let tensor = tensor.into_vec::<i32>().unwrap_err();
    let v: ArrayView2<i32> = view(&tensor).unwrap();
    assert_eq!(v.as_ptr(), address);
    assert_eq!(v, array![[3, 4, 5], [6, 7, 8]]);
    let back = tensor
        .reclaim::<OwnedArray<i32, Ix2>>()
        .unwrap()
        .into_inner();
    assert_eq!(back.as_ptr(), address);
    assert_eq!(back, array![[3, 4, 5], [6, 7, 8]]);
}

#[test]
fn a_read_only_foreign_tensor_is_an_imported_array_that_refuses_writes() {
    let t = ManagedTensor::export(StridedVec {
        data: counting(6),
        shape: vec![3, 2],
        strides: vec![1, 3],
        offset: 0,
        read_only: true,
    })
    .unwrap();
    let mut imported = ImportedArray::<i32, Ix2>::new(t).unwrap();
    assert_eq!(imported.view(), array![[0, 3], [1, 4], [2, 5]]);
    assert_eq!(imported.view_mut().unwrap_err(), Error::ReadOnly);
    let owned = imported.into_owned(CopyMode::IfNeeded).unwrap().0;
    assert_eq!(owned, array![[0, 3], [1, 4], [2, 5]]);
}

#[test]
fn legacy_export_and_import_of_a_fortran_array_keep_the_layout() {
    let a = Array2::from_shape_vec((2, 3).f(), counting(6)).unwrap();
    let address = a.as_ptr();
    let raw = ManagedTensor::export_legacy(OwnedArray::new(a))
        .unwrap()
        .into_raw_legacy()
        .unwrap();
    // SAFETY: a live legacy tensor that we own.
    let tensor = unsafe { ManagedTensor::from_raw_legacy(raw).unwrap() };
    let (back, transfer): (Array2<i32>, _) = into_owned(tensor, CopyMode::Never).unwrap();
    assert_eq!((back.as_ptr(), transfer), (address, Transfer::Reclaimed));
    assert_eq!(back.strides(), &[1, 2]);
}
