//! The safe views against nalgebra 0.35's double-ended iterators, and the imports that would
//! otherwise hang or panic on valid tensors.
//!
//! `MatrixIter::next_back` (and `MatrixIterMut`'s) finds the last remaining element from the
//! front pointer as if the columns followed each other in memory, which holds only for compact
//! column-major views (row stride 1, column stride = rows). On any other layout, mixing `next`
//! and `next_back` reads outside the tensor or hands out one element twice as `&mut`. These
//! tests replay the reported sequences: the safe views refuse those layouts, and what the
//! crate does hand out (views of compact layouts, copies) yields every element once, from
//! either end. Miri runs them (scripts/steps/dlpack-nalgebra.miri.sh).

mod common;

use std::collections::VecDeque;

use common::{Foreign, import, strided};
use dlpack_core::{CopyMode, CopyReason, DataType, Error};
use dlpack_nalgebra::{
    CowMatrix, into_owned, to_dlpack, to_owned, view, view_mut, view_or_copy, view_strided,
    view_transposed, view_transposed_mut,
};
use nalgebra::{DMatrix, DMatrixView, DMatrixViewMut, Dyn, U1};

/// `n` f64s whose element `k` holds `k`.
fn counting(n: usize) -> Vec<f64> {
    (0..n).map(|k| k as f64).collect()
}

/// One step of a walk over an iterator: from the front (`next`) or the back (`next_back`).
#[derive(Clone, Copy, Debug)]
enum End {
    Front,
    Back,
}
use End::{Back, Front};

/// Replays `steps` on `it`.
fn walk<T, I: DoubleEndedIterator<Item = T>>(mut it: I, steps: &[End]) -> Vec<Option<T>> {
    steps
        .iter()
        .map(|end| match end {
            Front => it.next(),
            Back => it.next_back(),
        })
        .collect()
}

/// What `steps` must yield from a matrix: its column-major elements taken from either end,
/// as from a `VecDeque`.
fn expected_walk(m: &DMatrix<f64>, steps: &[End]) -> Vec<Option<f64>> {
    let mut deque: VecDeque<f64> = m.as_slice().iter().copied().collect();
    steps
        .iter()
        .map(|end| match end {
            Front => deque.pop_front(),
            Back => deque.pop_back(),
        })
        .collect()
}

/// Asserts that `result` refuses stride `stride` of tensor axis `axis` as a layout.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(result: Result<T, Error>, axis: usize, stride: i64) {
    match result {
        Err(Error::UnsupportedLayout {
            axis: a, stride: s, ..
        }) => assert_eq!((a, s), (axis, stride)),
        other => panic!("expected stride {stride} of axis {axis} to be refused, got {other:?}"),
    }
}

// --- the reported sequences --------------------------------------------------------------------

#[test]
fn a_1x3_broadcast_of_one_element_is_refused_as_a_view_and_its_copy_iterates_back_in_bounds() {
    // Shape [1, 3], strides [1, 0] over one f64: `next` then `next_back` read one element past
    // the tensor through a view.
    let built = strided(&[7.0f64], &[1, 3], &[1, 0], 0).build();
    let tensor = import(&built);
    assert_refused(view::<DMatrixView<'_, f64>>(&tensor), 1, 0);
    let cow = view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap();
    assert!(!cow.is_borrowed());
    let view = cow.view();
    assert_eq!(walk(view.iter(), &[Front, Back]), [Some(&7.0), Some(&7.0)]);
}

#[test]
fn a_window_of_overlapping_columns_is_refused_as_a_view_and_its_copy_iterates_back_in_bounds() {
    // Shape [3, 2], strides [1, 1] over 4 f64s: column j is x[j..j + 3]. Three `next` then
    // `next_back` computed element 5 of 4 through a view.
    let built = strided(&counting(4), &[3, 2], &[1, 1], 0).build();
    let tensor = import(&built);
    assert_refused(view::<DMatrixView<'_, f64>>(&tensor), 1, 1);
    let cow = view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap();
    let steps = [Front, Front, Front, Back];
    assert_eq!(
        walk(cow.view().iter().copied(), &steps),
        [Some(0.0), Some(1.0), Some(2.0), Some(3.0)]
    );
}

#[test]
fn a_broadcast_row_is_refused_as_a_transposed_view_and_its_copy_iterates_back_in_bounds() {
    // np.broadcast_to(row, (3, 2)): shape [3, 2], strides [0, 1]. Its transpose has row
    // stride 1 and column stride 0; `next`, `next`, `next_back` read past the row.
    let built = strided(&[5.0f64, 6.0], &[3, 2], &[0, 1], 0).build();
    let tensor = import(&built);
    assert_refused(view_transposed::<f64>(&tensor), 0, 0);
    let transposed = to_owned::<DMatrix<f64>>(&tensor).unwrap().transpose();
    assert_eq!(
        transposed,
        DMatrix::from_row_slice(2, 3, &[5.0, 5.0, 5.0, 6.0, 6.0, 6.0])
    );
    assert_eq!(
        walk(transposed.iter().copied(), &[Front, Front, Back]),
        [Some(5.0), Some(6.0), Some(6.0)]
    );
}

#[test]
fn a_mutable_view_of_two_rows_of_a_three_row_matrix_is_refused() {
    // Shape [2, 3], strides [1, 3]: rows 0..2 of a 3 x 3 column-major matrix. `iter_mut` with
    // next, next, next_back, next, next, next handed out (0, 2) twice and (1, 2) never.
    let built = strided(&counting(9), &[2, 3], &[1, 3], 0).build();
    let mut tensor = import(&built);
    assert_refused(view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor), 1, 3);
    assert_refused(view::<DMatrixView<'_, f64>>(&tensor), 1, 3);
}

#[test]
fn iter_mut_of_a_compact_mutable_view_hands_out_each_element_once_from_either_end() {
    // The same sequence on the layout the safe views accept, shape [2, 3], strides [1, 2].
    let built = strided(&counting(6), &[2, 3], &[1, 2], 0).build();
    let mut tensor = import(&built);
    let mut view = view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap();
    let steps = [Front, Front, Back, Front, Front, Front];
    let handed_out = walk(view.iter_mut(), &steps);
    let mut seen: Vec<f64> = handed_out
        .into_iter()
        .map(|x| {
            let x = x.expect("six elements");
            *x += 100.0; // every `&mut` is live at once: Miri checks that they are distinct
            *x
        })
        .collect();
    assert_eq!(seen, [100.0, 101.0, 105.0, 102.0, 103.0, 104.0]);
    seen.sort_by(f64::total_cmp);
    assert_eq!(seen, [100.0, 101.0, 102.0, 103.0, 104.0, 105.0]);
}

#[test]
fn a_row_of_a_column_major_matrix_is_refused_as_a_view_and_its_copy_iterates_back_right() {
    // Row 0 of a 5 x 3 column-major matrix: shape [1, 3], strides [1, 5]. `next_back` after
    // `next` gave 6.0 (from between the columns) instead of 10.0 through a view.
    let built = strided(&counting(15), &[1, 3], &[1, 5], 0).build();
    let tensor = import(&built);
    assert_refused(view::<DMatrixView<'_, f64>>(&tensor), 1, 5);
    let cow = view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap();
    assert_eq!(
        walk(cow.view().iter().copied(), &[Front, Back]),
        [Some(0.0), Some(10.0)]
    );
}

#[test]
fn columns_of_a_row_major_matrix_are_refused_as_a_transposed_view() {
    // c[:, :2] of a 3 x 4 row-major matrix: shape [3, 2], strides [4, 1]. Through the transposed
    // view, `next`, `next`, `next_back` gave 7.0 (outside the slice) instead of 9.0.
    let built = strided(&counting(12), &[3, 2], &[4, 1], 0).build();
    let tensor = import(&built);
    assert_refused(view_transposed::<f64>(&tensor), 0, 4);
    let transposed = to_owned::<DMatrix<f64>>(&tensor).unwrap().transpose();
    assert_eq!(
        walk(transposed.iter().copied(), &[Front, Front, Back]),
        [Some(0.0), Some(1.0), Some(9.0)]
    );
}

// --- every view the crate hands out, walked from both ends -------------------------------------

/// Layouts over `len` counting f64s from element `first`, as (shape, strides, first, len).
fn layouts() -> Vec<(Vec<i64>, Vec<i64>, usize, usize)> {
    let l =
        |shape: &[i64], strides: &[i64], first, len| (shape.to_vec(), strides.to_vec(), first, len);
    vec![
        l(&[2, 3], &[1, 2], 0, 6),  // F order
        l(&[2, 3], &[3, 1], 0, 6),  // C order
        l(&[3, 2], &[1, 3], 0, 6),  // F order
        l(&[1, 4], &[9, 1], 0, 4),  // a row, any row stride
        l(&[4, 1], &[1, -7], 0, 4), // a column, any column stride
        l(&[1, 1], &[-3, 5], 0, 1), // one element
        l(&[1, 3], &[1, 0], 0, 1),  // reported
        l(&[1, 3], &[1, 5], 0, 15), // reported
        l(&[1, 3], &[1, 2], 1, 6),  // a row with gaps
        l(&[3, 2], &[1, 1], 0, 4),  // reported
        l(&[3, 2], &[0, 1], 0, 2),  // reported
        l(&[3, 2], &[4, 1], 0, 12), // reported
        l(&[2, 3], &[1, 3], 0, 9),  // reported
        l(&[2, 2], &[1, 4], 1, 8),  // column steps
        l(&[3, 4], &[1, 0], 0, 3),  // column broadcast
        l(&[2, 3], &[6, 2], 0, 12), // steps on both axes
        l(&[2, 2], &[0, 0], 0, 1),  // scalar broadcast
        l(&[4], &[1], 0, 4),        // 1-d
        l(&[3], &[2], 0, 6),        // 1-d with a step
        l(&[0, 3], &[-1, 7], 0, 0), // empty
    ]
}

/// Every walk of `len` steps from either end (all 2^len of them).
fn every_walk(len: usize) -> impl Iterator<Item = Vec<End>> {
    (0..1u32 << len).map(move |bits| {
        (0..len)
            .map(|i| if bits >> i & 1 == 0 { Front } else { Back })
            .collect()
    })
}

#[test]
fn every_safe_view_yields_each_element_once_in_every_walk_from_either_end() {
    for (shape, strides, first, len) in layouts() {
        let name = format!("shape {shape:?} strides {strides:?}");
        let built = strided(&counting(len), &shape, &strides, first).build();
        let mut tensor = import(&built);
        let expected = to_owned::<DMatrix<f64>>(&tensor).unwrap();
        let plain = view::<DMatrixView<'_, f64>>(&tensor).ok();
        let transposed = view_transposed::<f64>(&tensor).ok();
        for (function, view, want) in [
            ("view", plain, expected.clone()),
            ("view_transposed", transposed, expected.transpose()),
        ] {
            let Some(view) = view else { continue };
            for steps in every_walk(want.len() + 1) {
                assert_eq!(
                    walk(view.iter().copied(), &steps),
                    expected_walk(&want, &steps),
                    "{function} of {name}, walk {steps:?}"
                );
            }
        }
        // The mutable views hand out each element once, whichever end they come from.
        for transposed in [false, true] {
            let view = if transposed {
                view_transposed_mut::<f64>(&mut tensor)
            } else {
                view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor)
            };
            // Refused: overlapping strides, or a layout that is not compact.
            let Ok(mut view) = view else { continue };
            let n = view.len();
            for steps in every_walk(n) {
                let handed_out = walk(view.iter_mut(), &steps);
                let mut addresses: Vec<usize> = handed_out
                    .into_iter()
                    .map(|x| std::ptr::from_mut(x.expect("n elements")).addr())
                    .collect();
                addresses.sort_unstable();
                addresses.dedup();
                assert_eq!(
                    addresses.len(),
                    n,
                    "{name}, transposed {transposed}: {steps:?}"
                );
            }
        }
    }
}

// --- empty tensors with a dimension nalgebra would loop over -----------------------------------

#[test]
fn an_empty_tensor_with_more_than_2_pow_24_rows_or_columns_is_refused_by_every_import() {
    // Valid DLPack (no elements), but nalgebra loops over each row or column of a matrix even
    // when the other dimension is 0: `transpose` of an i64::MAX x 0 view would not return.
    for (shape, axis) in [
        ([i64::MAX, 0], 0),
        ([0, i64::MAX], 1),
        ([(1 << 24) + 1, 0], 0),
        ([1 << 30, 0], 0),
    ] {
        let value = shape[axis];
        let refusal = |e: Error| match e {
            Error::DimOutOfRange {
                axis: a, value: v, ..
            } if (a, v) == (axis, value) => {
                let message = e.to_string();
                assert!(message.contains(&value.to_string()), "{message}");
                assert!(message.contains("2^24"), "{message}");
            }
            other => panic!("{shape:?}: expected DimOutOfRange of axis {axis}, got {other:?}"),
        };
        let built = Foreign::new(DataType::F64, &shape).build();
        let mut tensor = import(&built);
        refusal(view::<DMatrixView<'_, f64>>(&tensor).unwrap_err());
        refusal(view_transposed::<f64>(&tensor).unwrap_err());
        refusal(view_mut::<DMatrixViewMut<'_, f64>>(&mut tensor).unwrap_err());
        refusal(view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap_err());
        refusal(to_owned::<DMatrix<f64>>(&tensor).unwrap_err());
        // SAFETY: refused before any view exists.
        refusal(unsafe { view_strided::<DMatrixView<'_, f64, Dyn, Dyn>>(&tensor) }.unwrap_err());
        let refused = into_owned::<DMatrix<f64>>(tensor, CopyMode::IfNeeded).unwrap_err();
        assert_eq!(built.deletes(), 0, "a refusal gives the tensor back");
        refusal(refused.error);
        drop(refused.value);
        assert_eq!(built.deletes(), 1);
    }
}

#[test]
fn an_empty_tensor_with_up_to_2_pow_24_rows_or_columns_is_an_empty_view() {
    for shape in [[1 << 24, 0], [0, 1 << 24]] {
        let built = Foreign::new(DataType::F64, &shape).build();
        let tensor = import(&built);
        let view = view::<DMatrixView<'_, f64>>(&tensor).unwrap();
        assert_eq!(view.shape(), (shape[0] as usize, shape[1] as usize));
        assert_eq!(view.iter().next_back(), None);
    }
    // A smaller one through the nalgebra operations that loop over rows or columns.
    for shape in [[1000, 0], [0, 1000]] {
        let built = Foreign::new(DataType::F64, &shape).build();
        let tensor = import(&built);
        let view = view::<DMatrixView<'_, f64>>(&tensor).unwrap();
        let (r, c) = (shape[0] as usize, shape[1] as usize);
        assert_eq!(view.transpose().shape(), (c, r));
        assert_eq!(view.clone_owned(), DMatrix::<f64>::zeros(r, c));
        assert_eq!(view.map(|x| x + 1.0).shape(), (r, c));
    }
}

// --- copies of tensors too large for memory ----------------------------------------------------

#[test]
fn a_view_or_copy_of_a_broadcast_too_large_for_memory_is_an_out_of_memory_error() {
    // Shape [2, 2^62], strides [1, 0] over two f64s: valid, but no copy of 2^63 f64s fits.
    let built = strided(&[1.0f64, 2.0], &[2, 1 << 62], &[1, 0], 0).build();
    let tensor = import(&built);
    let too_large = Error::OutOfMemory { bytes: 8 << 63 };
    assert_eq!(
        view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::IfNeeded).unwrap_err(),
        too_large
    );
    assert_eq!(to_owned::<DMatrix<f64>>(&tensor).unwrap_err(), too_large);
    assert_refused(view::<DMatrixView<'_, f64>>(&tensor), 1, 0);
    assert_eq!(
        view_or_copy::<DMatrixView<'_, f64>>(&tensor, CopyMode::Never).unwrap_err(),
        Error::CopyRefused {
            reason: CopyReason::Layout
        }
    );
}

/// nalgebra's own safe view of two f64s broadcast along 2^62 columns.
fn huge_broadcast(data: &[f64; 2]) -> DMatrixView<'_, f64> {
    DMatrixView::from_slice_with_strides_generic(data, Dyn(2), Dyn(1 << 62), U1, Dyn(0))
}

#[test]
fn into_owned_of_a_view_too_large_for_memory_is_an_out_of_memory_error() {
    let data = [1.0f64, 2.0];
    let cow = CowMatrix::Borrowed(huge_broadcast(&data));
    assert_eq!(
        cow.into_owned().unwrap_err(),
        Error::OutOfMemory { bytes: 8 << 63 }
    );
    let small = CowMatrix::Borrowed(DMatrixView::from_slice(&data, 2, 1));
    assert_eq!(
        small.into_owned().unwrap(),
        DMatrix::from_column_slice(2, 1, &data)
    );
}

#[test]
fn to_dlpack_of_a_view_too_large_for_memory_is_an_out_of_memory_error() {
    let data = [1.0f64, 2.0];
    assert_eq!(
        to_dlpack(&huge_broadcast(&data)).unwrap_err(),
        Error::OutOfMemory { bytes: 8 << 63 }
    );
}
