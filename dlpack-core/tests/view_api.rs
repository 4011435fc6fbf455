//! The typed views as a user holds them: references that live as long as the borrow of the
//! tensor (not the view value), iteration with `for`, `view[[i, j]]` indexing, and a mutable
//! view given up for a slice or a read-only view. Runs under Miri.

use dlpack_core::{Error, ManagedTensor, TensorView, ViewIter};
use dlpack_testing::StridedVec;

/// A slice that outlives the view it came from: it borrows the tensor.
fn row_major(t: &ManagedTensor) -> Option<&[u16]> {
    t.view::<u16>().ok()?.as_slice()
}

/// An element reference that outlives the view, likewise.
fn corner(t: &ManagedTensor) -> Option<&u16> {
    let view = t.view::<u16>().ok()?;
    let last: Vec<usize> = view.shape().iter().map(|&d| d as usize - 1).collect();
    view.get(&last)
}

fn matrix() -> ManagedTensor {
    // 2 x 3, row-major.
    StridedVec::export(vec![1u16, 2, 3, 4, 5, 6], &[2, 3], &[3, 1], 0).unwrap()
}

/// The transpose of `matrix`: 3 x 2, column-major over the same values.
fn transposed() -> ManagedTensor {
    StridedVec::export(vec![1u16, 2, 3, 4, 5, 6], &[3, 2], &[1, 3], 0).unwrap()
}

#[test]
fn shared_views_hand_out_references_that_borrow_the_tensor() {
    let t = matrix();
    assert_eq!(row_major(&t), Some(&[1, 2, 3, 4, 5, 6][..]));
    assert_eq!(corner(&t), Some(&6));
    let shape = t.view::<u16>().unwrap().shape();
    assert_eq!(shape, &[2, 3]);
    // The iterator, too, outlives the view value.
    let iter: ViewIter<'_, u16> = t.view::<u16>().unwrap().iter();
    assert_eq!(iter.len(), 6);
    assert_eq!(iter.copied().collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
}

#[test]
fn views_iterate_with_for_and_index_with_arrays() {
    let t = matrix();
    let view: TensorView<'_, u16> = t.view().unwrap();
    let mut seen = Vec::new();
    for x in &view {
        seen.push(*x);
    }
    for x in view {
        seen.push(*x);
    }
    assert_eq!(seen, [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6]);
    assert_eq!((view[[0, 0]], view[[1, 2]]), (1, 6));

    // A transposed layout iterates and indexes in its own row-major order.
    let tt = transposed();
    let tv = tt.view::<u16>().unwrap();
    assert_eq!(tv.iter().copied().collect::<Vec<_>>(), [1, 4, 2, 5, 3, 6]);
    assert_eq!(tv[[2, 1]], 6);
    assert_eq!(tv.as_slice(), None);
    let mut cloned = tv.iter().clone();
    assert_eq!((cloned.next(), cloned.len()), (Some(&1), 5));
}

#[test]
#[should_panic(expected = "index [2, 0] is out of bounds for a view of shape [2, 3]")]
fn indexing_out_of_bounds_panics_like_a_slice() {
    let t = matrix();
    let view = t.view::<u16>().unwrap();
    let _ = view[[2, 0]];
}

#[test]
#[should_panic(expected = "index [0] is out of bounds for a view of shape [2, 3]")]
fn indexing_with_the_wrong_rank_panics_like_a_slice() {
    let mut t = matrix();
    let view = t.view_mut::<u16>().unwrap();
    let _ = view[[0]];
}

#[test]
fn mutable_views_index_and_give_themselves_up() {
    let mut t = matrix();
    {
        let mut view = t.view_mut::<u16>().unwrap();
        view[[1, 1]] = 50;
        assert_eq!((view[[1, 1]], view.get(&[1, 1])), (50, Some(&50)));
        assert_eq!(view.iter().count(), 6);
        view.as_mut_slice().unwrap()[0] = 10;
        assert_eq!(view.as_slice().unwrap()[..2], [10, 2]);
    }
    // A slice for the rest of the borrow of the tensor.
    let slice = t.view_mut::<u16>().unwrap().into_slice_mut().unwrap();
    slice[5] = 60;
    assert_eq!(t.to_vec::<u16>().unwrap(), [10, 2, 3, 4, 50, 60]);
    // A read-only view for the rest of it.
    let view = t.view_mut::<u16>().unwrap().into_view();
    assert_eq!(view.get(&[0, 1]), Some(&2));

    // A layout that is not one slice comes back as the view.
    let mut tt = transposed();
    let mut back = tt.view_mut::<u16>().unwrap().into_slice_mut().unwrap_err();
    back[[0, 1]] = 40;
    assert_eq!(tt.to_vec::<u16>().unwrap(), [1, 40, 2, 5, 3, 6]);

    // An empty view is an empty slice.
    let mut empty = ManagedTensor::export(Vec::<u16>::new()).unwrap();
    assert_eq!(
        empty.view_mut::<u16>().unwrap().into_slice_mut().unwrap(),
        []
    );
}

#[test]
fn copy_from_slice_reports_the_tensors_length_as_found() {
    let mut t = matrix();
    let err = t
        .view_mut::<u16>()
        .unwrap()
        .copy_from_slice(&[0; 5])
        .unwrap_err();
    assert_eq!(
        err,
        Error::ShapeMismatch {
            found: vec![6],
            expected: vec![5]
        }
    );
}
