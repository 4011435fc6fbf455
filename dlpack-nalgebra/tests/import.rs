//! The layout matrix: every layout NumPy and PyTorch hand out (C order, F order, slices with
//! steps, negative steps, broadcasting, 0-d, size 0, size-1 axes), imported by every import
//! function of this crate.
//!
//! Each tensor is built by hand by the foreign-producer fixture (`common`), over a buffer whose
//! element `k` holds `k`, so the expected matrix is read straight from the layout. Safe views are
//! exercised with the nalgebra operations that break on the layouts this crate refuses
//! (iterators from both ends, `==`, `transpose`, matrix-vector and matrix-matrix products), so
//! that Miri checks the claim that the accepted layouts are sound; `unsafe` strided views are
//! only indexed, as their contract says. Every tensor's deleter runs exactly once.

mod common;

use std::collections::VecDeque;

use common::{Foreign, element_addr, import, strided};
use dlpack_core::ffi::DLManagedTensorVersioned;
use dlpack_core::{CopyMode, CopyReason, DataType, Error, ManagedTensor};
use dlpack_nalgebra::{
    CowMatrix, CowVector, to_owned, view, view_mut, view_or_copy, view_strided, view_strided_mut,
    view_transposed, view_transposed_mut,
};
use nalgebra::{
    DMatrix, DMatrixView, DMatrixViewMut, DVector, DVectorView, DVectorViewMut, Dim, Dyn, Matrix,
    RawStorage,
};

// --- layouts -----------------------------------------------------------------------------------

/// A strided layout over a buffer of `len` f64s whose element `k` holds `k`.
#[derive(Clone, Debug)]
struct Layout {
    shape: Vec<i64>,
    strides: Vec<i64>,
    /// Elements from the buffer's start to element [0, 0].
    offset: usize,
    len: usize,
}

fn layout(shape: &[i64], strides: &[i64], offset: usize, len: usize) -> Layout {
    Layout {
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        offset,
        len,
    }
}

impl Layout {
    fn buffer(&self) -> Vec<f64> {
        (0..self.len).map(|k| k as f64).collect()
    }

    fn build(&self) -> common::Built<DLManagedTensorVersioned> {
        strided(&self.buffer(), &self.shape, &self.strides, self.offset).build()
    }

    /// The buffer index of element `index`.
    fn at(&self, index: &[usize]) -> usize {
        let offset = index
            .iter()
            .zip(&self.strides)
            .map(|(&i, &s)| i as i64 * s)
            .sum::<i64>();
        (self.offset as i64 + offset) as usize
    }

    /// The tensor as an nalgebra matrix (a 1-d tensor is a column).
    fn expected(&self) -> DMatrix<f64> {
        match self.shape[..] {
            [n] => DMatrix::from_fn(n as usize, 1, |i, _| self.at(&[i]) as f64),
            [r, c] => DMatrix::from_fn(r as usize, c as usize, |i, j| self.at(&[i, j]) as f64),
            _ => panic!("not a matrix layout"),
        }
    }
}

/// a = np.arange(12.).reshape(3, 4)
fn c_order() -> Layout {
    layout(&[3, 4], &[4, 1], 0, 12)
}

/// np.asfortranarray(a), 3 x 4
fn f_order() -> Layout {
    layout(&[3, 4], &[1, 3], 0, 12)
}

/// A 5 x 7 Fortran-order array sliced [1:4, ::2]
fn f_order_column_steps() -> Layout {
    layout(&[3, 4], &[1, 10], 1, 35)
}

/// A 6 x 8 C-order array sliced [::2, 1::3]
fn c_order_steps() -> Layout {
    layout(&[3, 3], &[16, 3], 1, 48)
}

/// A 6 x 3 Fortran-order array sliced [::2, :]
fn f_order_row_steps() -> Layout {
    layout(&[3, 3], &[2, 6], 0, 18)
}

/// np.asfortranarray(a)[::-1, :]
fn reversed_rows() -> Layout {
    layout(&[3, 4], &[-1, 3], 2, 12)
}

/// np.asfortranarray(a)[:, ::-1]
fn reversed_columns() -> Layout {
    layout(&[3, 4], &[1, -3], 9, 12)
}

/// a[::-1, ::-1]
fn c_order_reversed() -> Layout {
    layout(&[3, 4], &[-4, -1], 11, 12)
}

/// np.broadcast_to(column[:, None], (3, 4))
fn broadcast_columns() -> Layout {
    layout(&[3, 4], &[1, 0], 0, 3)
}

/// np.broadcast_to(row, (3, 4))
fn broadcast_rows() -> Layout {
    layout(&[3, 4], &[0, 1], 0, 4)
}

/// np.broadcast_to(scalar, (3, 4))
fn broadcast_scalar() -> Layout {
    layout(&[3, 4], &[0, 0], 0, 1)
}

// --- helpers -----------------------------------------------------------------------------------

/// Drops an imported tensor and checks that its deleter ran exactly once.
#[track_caller]
fn finish(tensor: ManagedTensor, built: &common::Built<DLManagedTensorVersioned>) {
    drop(tensor);
    assert_eq!(built.deletes(), 1, "the deleter runs exactly once");
}

/// Uses a safe view the way nalgebra code does, including the operations that go out of bounds
/// on layouts nalgebra 0.35 mishandles, and compares with the expected owned matrix.
#[track_caller]
fn exercise(view: &DMatrixView<'_, f64>, expected: &DMatrix<f64>) {
    assert_eq!(view, expected, "elements (nalgebra's iterators)");
    let column_major: Vec<f64> = expected.iter().copied().collect();
    let reversed: Vec<f64> = view.iter().rev().copied().collect();
    assert!(
        reversed.iter().eq(column_major.iter().rev()),
        "reverse iteration"
    );
    // From the front and the back in turn: `next_back` after `next`.
    let mut iter = view.iter();
    let mut deque = VecDeque::from(column_major);
    for k in 0..=expected.len() {
        let (got, want) = if k % 2 == 0 {
            (iter.next(), deque.pop_front())
        } else {
            (iter.next_back(), deque.pop_back())
        };
        assert_eq!(got.copied(), want, "step {k} from either end");
    }
    assert_eq!(view.clone_owned(), *expected);
    assert_eq!(view.transpose(), expected.transpose());
    assert_eq!(view.sum(), expected.sum());
    let ones = DVector::from_element(view.ncols(), 1.0);
    assert_eq!(
        view * &ones,
        expected * &ones,
        "matrix-vector product (gemv)"
    );
    assert_eq!(
        view * expected.transpose(),
        expected * expected.transpose(),
        "matrix-matrix product (gemm)"
    );
    for i in 0..view.nrows() {
        for j in 0..view.ncols() {
            assert_eq!(view[(i, j)], expected[(i, j)], "element ({i}, {j})");
        }
    }
}

/// Compares a view that may only be indexed (an `unsafe` strided view) with the expected matrix.
#[track_caller]
fn assert_indexed_eq<R: Dim, C: Dim, S: RawStorage<f64, R, C>>(
    view: &Matrix<f64, R, C, S>,
    expected: &DMatrix<f64>,
) {
    assert_eq!(view.shape(), expected.shape());
    for i in 0..view.nrows() {
        for j in 0..view.ncols() {
            assert_eq!(view[(i, j)], expected[(i, j)], "element ({i}, {j})");
        }
    }
}

/// Checks that `result` is the refusal of stride `value` on tensor axis `axis`, and that the
/// message names both and what nalgebra would need.
#[track_caller]
fn assert_stride_refused<T: std::fmt::Debug>(
    result: Result<T, Error>,
    axis: usize,
    value: i64,
    expected: &str,
) {
    let err = match result {
        Err(err) => err,
        Ok(other) => panic!("expected stride {value} on axis {axis} to be refused, got {other:?}"),
    };
    let Error::UnsupportedLayout {
        axis: a, stride: v, ..
    } = err
    else {
        panic!("expected UnsupportedLayout for stride {value} on axis {axis}, got {err:?}");
    };
    assert_eq!((a, v), (axis, value), "{err}");
    let message = err.to_string();
    assert!(message.contains(&value.to_string()), "{message}");
    assert!(message.contains(expected), "{message}");
}

/// A zero-copy safe view of `layout`: same address as the tensor's first element, elements and
/// nalgebra operations as expected.
#[track_caller]
fn assert_zero_copy_view(layout: &Layout) {
    let built = layout.build();
    let tensor = import(&built);
    let expected = layout.expected();
    let view = view::<DMatrixView<'_, f64>>(&tensor).unwrap();
    assert_eq!(
        view.as_ptr().addr(),
        element_addr::<f64, _>(&built, layout.offset)
    );
    exercise(&view, &expected);
    match view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap() {
        CowMatrix::Borrowed(v) => assert_eq!(v.as_ptr(), view.as_ptr()),
        CowMatrix::Owned(_) => panic!("a viewable layout is never copied"),
    }
    assert_eq!(to_owned::<DMatrix<f64>>(&tensor).unwrap(), expected);
    finish(tensor, &built);
}

/// A layout that safe views refuse: `view_or_copy` refuses to copy it under `CopyMode::Never`,
/// copies it under `CopyMode::IfNeeded`, and `to_owned` copies it.
#[track_caller]
fn assert_copied_on_request(layout: &Layout) {
    let built = layout.build();
    let tensor = import(&built);
    let expected = layout.expected();
    assert!(view::<DMatrixView<'_, f64>>(&tensor).is_err());
    let never = view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::Never);
    assert_eq!(
        never.unwrap_err(),
        Error::CopyRefused {
            reason: CopyReason::Layout
        }
    );
    let copied = view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap();
    assert!(!copied.is_borrowed());
    exercise(&copied.view(), &expected);
    assert_eq!(copied.into_owned().unwrap(), expected);
    assert_eq!(to_owned::<DMatrix<f64>>(&tensor).unwrap(), expected);
    finish(tensor, &built);
}

// --- C order -----------------------------------------------------------------------------------

#[test]
fn c_order_is_refused_as_a_plain_view_naming_the_row_stride() {
    let built = c_order().build();
    let tensor = import(&built);
    assert_stride_refused(view::<DMatrixView<'_, f64>>(&tensor), 0, 4, "stride 1");
    finish(tensor, &built);
}

#[test]
fn c_order_imports_as_a_zero_copy_transposed_view() {
    let layout = c_order();
    let built = layout.build();
    let tensor = import(&built);
    let view = view_transposed::<f64>(&tensor).unwrap();
    assert_eq!(view.as_ptr().addr(), built.buffer_addr());
    assert_eq!((view.shape(), view.strides()), ((4, 3), (1, 4)));
    exercise(&view, &layout.expected().transpose());
    finish(tensor, &built);
}

#[test]
fn c_order_imports_as_a_zero_copy_strided_view_with_strides_cols_1() {
    let layout = c_order();
    let built = layout.build();
    let tensor = import(&built);
    // SAFETY: the view is only indexed.
    let view = unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor) }.unwrap();
    assert_eq!(view.as_ptr().addr(), built.buffer_addr());
    assert_eq!((view.shape(), view.strides()), ((3, 4), (4, 1)));
    assert_indexed_eq(&view, &layout.expected());
    finish(tensor, &built);
}

#[test]
fn c_order_is_copied_when_the_caller_chooses_copy() {
    assert_copied_on_request(&c_order());
}

#[test]
fn c_order_slices_with_steps_are_only_strided_views_or_copies() {
    let layout = c_order_steps();
    let built = layout.build();
    let tensor = import(&built);
    assert_stride_refused(view::<DMatrixView<'_, f64>>(&tensor), 0, 16, "stride 1");
    assert_stride_refused(view_transposed::<f64>(&tensor), 1, 3, "stride 1");
    // SAFETY: the view is only indexed.
    let view = unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor) }.unwrap();
    assert_eq!(view.as_ptr().addr(), element_addr::<f64, _>(&built, 1));
    assert_eq!(view.strides(), (16, 3));
    assert_indexed_eq(&view, &layout.expected());
    finish(tensor, &built);
    assert_copied_on_request(&layout);
}

// --- F order -----------------------------------------------------------------------------------

#[test]
fn f_order_imports_as_a_zero_copy_view() {
    assert_zero_copy_view(&f_order());
}

#[test]
fn f_order_larger_than_nalgebras_small_size_imports_as_a_zero_copy_view() {
    // Above 5 x 5, nalgebra multiplies f64 matrices with matrixmultiply, using the strides.
    assert_zero_copy_view(&layout(&[6, 7], &[1, 6], 0, 42));
}

#[test]
fn f_order_is_refused_as_a_transposed_view_naming_the_column_stride() {
    let built = f_order().build();
    let tensor = import(&built);
    assert_stride_refused(view_transposed::<f64>(&tensor), 1, 3, "stride 1");
    finish(tensor, &built);
}

#[test]
fn f_order_column_steps_are_only_strided_views_or_copies() {
    // Row stride 1, but column stride 10 for 3 rows: not compact.
    let layout = f_order_column_steps();
    let built = layout.build();
    let tensor = import(&built);
    assert_stride_refused(
        view::<DMatrixView<'_, f64>>(&tensor),
        1,
        10,
        "column stride equal to the number of rows",
    );
    // SAFETY: the view is only indexed.
    let view = unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor) }.unwrap();
    assert_eq!(view.as_ptr().addr(), element_addr::<f64, _>(&built, 1));
    assert_eq!(view.strides(), (1, 10));
    assert_indexed_eq(&view, &layout.expected());
    finish(tensor, &built);
    assert_copied_on_request(&layout);
}

#[test]
fn f_order_row_ranges_are_only_strided_views_or_copies() {
    // np.asfortranarray(a)[1:3, :]: rows 1 and 2 of a 3 x 4 column-major matrix.
    let layout = layout(&[2, 4], &[1, 3], 1, 12);
    let built = layout.build();
    let tensor = import(&built);
    assert_stride_refused(
        view::<DMatrixView<'_, f64>>(&tensor),
        1,
        3,
        "compact column-major",
    );
    finish(tensor, &built);
    assert_copied_on_request(&layout);
}

#[test]
fn f_order_column_ranges_import_as_a_zero_copy_view() {
    // np.asfortranarray(a)[:, 1:3]: still compact column-major.
    assert_zero_copy_view(&layout(&[3, 2], &[1, 3], 3, 12));
}

#[test]
fn f_order_row_steps_are_only_strided_views_or_copies() {
    let layout = f_order_row_steps();
    let built = layout.build();
    let tensor = import(&built);
    assert_stride_refused(view::<DMatrixView<'_, f64>>(&tensor), 0, 2, "stride 1");
    // SAFETY: the view is only indexed.
    let view = unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor) }.unwrap();
    assert_eq!(view.as_ptr().addr(), built.buffer_addr());
    assert_eq!(view.strides(), (2, 6));
    assert_indexed_eq(&view, &layout.expected());
    finish(tensor, &built);
    assert_copied_on_request(&layout);
}

// --- negative strides --------------------------------------------------------------------------

#[test]
fn negative_row_stride_is_refused_by_every_view_and_copied_on_request() {
    let layout = reversed_rows();
    let built = layout.build();
    let tensor = import(&built);
    let negative = "cannot step backwards";
    assert_stride_refused(view::<DMatrixView<'_, f64>>(&tensor), 0, -1, negative);
    assert_stride_refused(view_transposed::<f64>(&tensor), 0, -1, negative);
    // SAFETY: nothing is done with the view (it is refused).
    let strided = unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor) };
    assert_stride_refused(strided, 0, -1, negative);
    finish(tensor, &built);
    assert_copied_on_request(&layout);
}

#[test]
fn negative_column_stride_is_refused_by_every_view_and_copied_on_request() {
    let layout = reversed_columns();
    let built = layout.build();
    let tensor = import(&built);
    let negative = "cannot step backwards";
    assert_stride_refused(view::<DMatrixView<'_, f64>>(&tensor), 1, -3, negative);
    // SAFETY: nothing is done with the view (it is refused).
    let strided = unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor) };
    assert_stride_refused(strided, 1, -3, negative);
    finish(tensor, &built);
    assert_copied_on_request(&layout);
}

#[test]
fn both_strides_negative_is_copied_on_request_in_the_right_order() {
    let layout = c_order_reversed();
    assert_copied_on_request(&layout);
    assert_eq!(layout.expected()[(0, 0)], 11.0);
    assert_eq!(layout.expected()[(2, 3)], 0.0);
}

#[test]
fn negative_strides_are_refused_by_mutable_views_which_never_copy() {
    let built = reversed_rows().build();
    let mut tensor = import(&built);
    assert_stride_refused(
        view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor),
        0,
        -1,
        "cannot step backwards",
    );
    // SAFETY: nothing is done with the view (it is refused).
    let strided = unsafe { view_strided_mut::<DMatrixViewMut<'_, f64, Dyn, Dyn>>(&mut tensor) };
    assert_stride_refused(strided, 0, -1, "cannot step backwards");
    finish(tensor, &built);
}

// --- broadcasting (zero strides) ---------------------------------------------------------------

#[test]
fn broadcast_along_columns_is_only_a_strided_view_or_a_copy() {
    for layout in [broadcast_columns(), layout(&[6, 7], &[1, 0], 0, 6)] {
        let built = layout.build();
        let tensor = import(&built);
        assert_stride_refused(
            view::<DMatrixView<'_, f64>>(&tensor),
            1,
            0,
            "compact column-major",
        );
        // SAFETY: the view is only indexed.
        let view = unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor) }.unwrap();
        assert_eq!(view.strides(), (1, 0));
        assert_indexed_eq(&view, &layout.expected());
        finish(tensor, &built);
        assert_copied_on_request(&layout);
    }
}

#[test]
fn overlapping_column_windows_are_only_strided_views_or_copies() {
    // np.lib.stride_tricks.sliding_window_view(np.arange(6.), 3).T: column j is x[j:j + 3].
    let layout = layout(&[3, 4], &[1, 1], 0, 6);
    let built = layout.build();
    let tensor = import(&built);
    assert_stride_refused(
        view::<DMatrixView<'_, f64>>(&tensor),
        1,
        1,
        "compact column-major",
    );
    finish(tensor, &built);
    assert_copied_on_request(&layout);
}

#[test]
fn broadcast_along_columns_is_refused_mutably_because_elements_overlap() {
    let built = broadcast_columns().build();
    let mut tensor = import(&built);
    let err = view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).map(drop);
    assert!(
        matches!(err, Err(Error::OverlappingStrides { .. })),
        "{err:?}"
    );
    finish(tensor, &built);
}

#[test]
fn broadcast_along_rows_is_only_a_strided_view_or_a_copy() {
    let layout = broadcast_rows();
    let built = layout.build();
    let tensor = import(&built);
    // A row stride of 0 makes nalgebra's iterators read outside the tensor: refused.
    assert_stride_refused(view::<DMatrixView<'_, f64>>(&tensor), 0, 0, "stride 1");
    // Its transpose has row stride 1 but column stride 0, where `next_back` reads outside the
    // tensor: refused too.
    assert_stride_refused(view_transposed::<f64>(&tensor), 0, 0, "compact row-major");
    finish(tensor, &built);
    assert_copied_on_request(&layout);
}

#[test]
fn broadcast_scalar_is_only_a_strided_view_or_a_copy() {
    let layout = broadcast_scalar();
    let built = layout.build();
    let tensor = import(&built);
    assert_stride_refused(view::<DMatrixView<'_, f64>>(&tensor), 0, 0, "stride 1");
    assert_stride_refused(view_transposed::<f64>(&tensor), 1, 0, "stride 1");
    // SAFETY: the view is only indexed.
    let view = unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor) }.unwrap();
    assert_eq!(view.strides(), (0, 0));
    assert_indexed_eq(&view, &layout.expected());
    finish(tensor, &built);
    assert_copied_on_request(&layout);
}

// --- mutable views -----------------------------------------------------------------------------

#[test]
fn f_order_mutable_view_writes_into_the_tensor() {
    let layout = f_order();
    let built = layout.build();
    let mut tensor = import(&built);
    let mut view = view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap();
    assert_eq!(view.as_ptr().addr(), built.buffer_addr());
    view[(1, 2)] = -7.0;
    view.column_mut(3).fill(-1.0);
    view.apply(|x| *x *= 2.0);
    let read = tensor.view::<f64>().unwrap();
    assert_eq!(read.get(&[1, 2]), Some(&-14.0));
    assert_eq!(read.get(&[2, 3]), Some(&-2.0));
    assert_eq!(read.get(&[2, 0]), Some(&4.0));
    finish(tensor, &built);
}

#[test]
fn c_order_mutable_transposed_view_writes_into_the_tensor() {
    let built = c_order().build();
    let mut tensor = import(&built);
    let mut view = view_transposed_mut::<f64>(&mut tensor).unwrap();
    view[(3, 1)] = 99.0; // the tensor's [1, 3]
    view.row_mut(0).fill(-1.0); // the tensor's column 0
    let read = tensor.view::<f64>().unwrap();
    assert_eq!(read.get(&[1, 3]), Some(&99.0));
    assert_eq!(read.get(&[2, 0]), Some(&-1.0));
    assert_eq!(read.get(&[2, 1]), Some(&9.0));
    finish(tensor, &built);
}

#[test]
fn c_order_mutable_view_is_refused_but_strided_mutable_view_writes_by_index() {
    let built = c_order().build();
    let mut tensor = import(&built);
    assert_stride_refused(
        view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor),
        0,
        4,
        "stride 1",
    );
    // SAFETY: the view is only indexed.
    let mut view =
        unsafe { view_strided_mut::<DMatrixViewMut<'_, f64, Dyn, Dyn>>(&mut tensor) }.unwrap();
    view[(2, 1)] = 42.0;
    assert_eq!(tensor.view::<f64>().unwrap().get(&[2, 1]), Some(&42.0));
    finish(tensor, &built);
}

// --- 1-d tensors -------------------------------------------------------------------------------

#[test]
fn one_dimensional_tensor_imports_as_a_zero_copy_vector_view() {
    let layout = layout(&[4], &[1], 0, 4);
    let built = layout.build();
    let mut tensor = import(&built);
    let view = view::<DVectorView<'_, f64>>(&tensor).unwrap();
    assert_eq!(view.as_ptr().addr(), built.buffer_addr());
    assert_eq!(view.as_slice(), &[0.0, 1.0, 2.0, 3.0]);
    assert_eq!(view.dot(&view), 14.0);
    let mut view = view_mut::<DVectorViewMut<'_, f64>>(&mut tensor).unwrap();
    view.axpy(2.0, &DVector::from_element(4, 1.0), 1.0);
    assert_eq!(
        tensor.view::<f64>().unwrap().to_vec().unwrap(),
        [2.0, 3.0, 4.0, 5.0]
    );
    finish(tensor, &built);
}

#[test]
fn one_dimensional_tensor_is_a_column_when_imported_as_a_matrix() {
    let layout = layout(&[4], &[1], 0, 4);
    assert_zero_copy_view(&layout);
    let built = layout.build();
    let tensor = import(&built);
    assert_eq!(
        view::<DMatrixView<'_, f64>>(&tensor).unwrap().shape(),
        (4, 1)
    );
    let row = view_transposed::<f64>(&tensor).unwrap();
    assert_eq!(row.shape(), (1, 4));
    finish(tensor, &built);
}

#[test]
fn one_dimensional_steps_are_only_a_strided_view_or_a_copy() {
    // np.arange(6.)[::2]
    let layout = layout(&[3], &[2], 0, 6);
    let built = layout.build();
    let tensor = import(&built);
    assert_stride_refused(view::<DVectorView<'_, f64>>(&tensor), 0, 2, "stride 1");
    assert_stride_refused(view::<DMatrixView<'_, f64>>(&tensor), 0, 2, "stride 1");
    // As a `1 x 3` row, the step is the column stride, which must be 1 for one row.
    assert_stride_refused(view_transposed::<f64>(&tensor), 0, 2, "compact row-major");
    // SAFETY: the view is only indexed.
    let strided = unsafe { view_strided::<DVectorView<'_, f64, Dyn, Dyn>>(&tensor) }.unwrap();
    assert_eq!(strided.strides().0, 2);
    assert_indexed_eq(&strided, &layout.expected());
    let copy = view_or_copy::<DVectorView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap();
    assert!(matches!(copy, CowVector::Owned(_)));
    assert_eq!(copy.view().as_slice(), &[0.0, 2.0, 4.0]);
    finish(tensor, &built);
}

#[test]
fn one_dimensional_negative_and_zero_strides_are_copied_on_request() {
    for layout in [layout(&[4], &[-1], 3, 4), layout(&[4], &[0], 0, 1)] {
        let built = layout.build();
        let tensor = import(&built);
        let expected = DVector::from_iterator(4, layout.expected().iter().copied());
        let never = view_or_copy::<DVectorView<'_, f64>>(&tensor, CopyMode::Never);
        assert!(matches!(never, Err(Error::CopyRefused { .. })), "{never:?}");
        let copy = view_or_copy::<DVectorView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap();
        assert_eq!(copy.into_owned().unwrap(), expected);
        assert_eq!(to_owned::<DVector<f64>>(&tensor).unwrap(), expected);
        finish(tensor, &built);
    }
}

// --- dimensions --------------------------------------------------------------------------------

#[test]
fn zero_dimensional_tensor_is_refused_with_ndim_mismatch() {
    let built = Foreign::of(&[1.5f64], &[]).build();
    let tensor = import(&built);
    let matrix = view::<DMatrixView<'_, f64>>(&tensor);
    assert_eq!(
        matrix.unwrap_err(),
        Error::NdimMismatch {
            found: 0,
            expected: 2
        }
    );
    let vector = view::<DVectorView<'_, f64>>(&tensor);
    assert_eq!(
        vector.unwrap_err(),
        Error::NdimMismatch {
            found: 0,
            expected: 1
        }
    );
    assert!(to_owned::<DMatrix<f64>>(&tensor).is_err());
    assert!(view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).is_err());
    finish(tensor, &built);
}

#[test]
fn three_dimensional_tensor_is_refused_with_ndim_mismatch() {
    let built = Foreign::new(DataType::F64, &[2, 2, 2]).build();
    let tensor = import(&built);
    let err = view::<DMatrixView<'_, f64>>(&tensor).unwrap_err();
    assert_eq!(
        err,
        Error::NdimMismatch {
            found: 3,
            expected: 2
        }
    );
    assert!(err.to_string().contains("3 dimensions"), "{err}");
    finish(tensor, &built);
}

#[test]
fn two_dimensional_tensor_is_refused_as_a_vector() {
    let built = f_order().build();
    let tensor = import(&built);
    let err = view::<DVectorView<'_, f64>>(&tensor).unwrap_err();
    assert_eq!(
        err,
        Error::NdimMismatch {
            found: 2,
            expected: 1
        }
    );
    finish(tensor, &built);
}

#[test]
fn size_zero_tensors_import_as_empty_views_whatever_their_strides() {
    for (shape, strides, nrows_ncols) in [
        (&[0i64, 3][..], &[5i64, -2][..], (0, 3)),
        (&[3, 0], &[-1, 7], (3, 0)),
        (&[0], &[-3], (0, 1)),
    ] {
        let built = Foreign::new(DataType::F64, shape)
            .with_strides(strides)
            .build();
        let mut tensor = import(&built);
        let view = view::<DMatrixView<'_, f64>>(&tensor).unwrap();
        assert_eq!(view.shape(), nrows_ncols);
        assert_eq!(view.iter().count(), 0);
        assert_eq!(
            view.clone_owned(),
            DMatrix::zeros(nrows_ncols.0, nrows_ncols.1)
        );
        let view = view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap();
        assert_eq!(view.len(), 0);
        let copy = to_owned::<DMatrix<f64>>(&tensor).unwrap();
        assert_eq!(copy.shape(), nrows_ncols);
        finish(tensor, &built);
    }
}

#[test]
fn strides_of_size_one_axes_are_ignored() {
    // A C-order row (1 x 4), a column with a negative column stride, and a 1 x 1 with both
    // strides negative: each axis of size 1 never addresses an element.
    for layout in [
        layout(&[1, 4], &[99, 1], 0, 4),
        layout(&[4, 1], &[1, -5], 0, 4),
        layout(&[1, 1], &[-3, -3], 0, 1),
    ] {
        assert_zero_copy_view(&layout);
    }
    let built = layout(&[1, 4], &[99, 1], 0, 4).build();
    let tensor = import(&built);
    let view = view::<DMatrixView<'_, f64>>(&tensor).unwrap();
    assert_eq!(view.strides(), (1, 1));
    finish(tensor, &built);
}

// --- values and views across a round trip ------------------------------------------------------

#[test]
fn cow_view_of_a_copy_has_the_tensors_shape() {
    let layout = c_order();
    let built = layout.build();
    let tensor = import(&built);
    let cow = view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap();
    assert_eq!(cow.view().shape(), (3, 4));
    assert!(format!("{cow:?}").starts_with("Owned"));
    drop(cow);
    finish(tensor, &built);
}
