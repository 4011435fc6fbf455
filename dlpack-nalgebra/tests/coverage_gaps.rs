//! Paths the rest of the suite leaves unexercised (found with source-based coverage):
//! `view_strided_mut` into a `DVectorViewMut`, the mutable strided vector view, which no other test calls.

mod common;

use common::{import, strided};
use dlpack_core::Error;
use dlpack_nalgebra::view_strided_mut;
use nalgebra::{DVectorViewMut, Dyn};

#[test]
fn view_strided_mut_as_a_vector_writes_every_other_element_in_place() {
    // Shape [3], stride 2 over six f64s: elements 0, 2 and 4.
    let built = strided(&[0.0f64, 1.0, 2.0, 3.0, 4.0, 5.0], &[3], &[2], 0).build();
    let counter = built.counter();
    let mut t = import(&built);
    {
        // SAFETY: the view is read and written only through nalgebra's checked indexing.
        let mut v =
            unsafe { view_strided_mut::<DVectorViewMut<'_, f64, Dyn, Dyn>>(&mut t) }.unwrap();
        assert_eq!((v.nrows(), v.strides().0), (3, 2));
        v[1] = 20.0;
        v[2] *= 10.0;
    }
    assert_eq!(t.to_vec::<f64>().unwrap(), [0.0, 20.0, 40.0]);
    drop(t);
    assert_eq!(counter.load(std::sync::atomic::Ordering::SeqCst), 1);

    // Negative strides are refused (nalgebra strides are unsigned); so is a matrix.
    let built = strided(&[0.0f64, 1.0, 2.0], &[3], &[-1], 2).build();
    let mut t = import(&built);
    // SAFETY: refused before any view is made.
    let err = unsafe { view_strided_mut::<DVectorViewMut<'_, f64, Dyn, Dyn>>(&mut t) }.unwrap_err();
    assert!(matches!(err, Error::UnsupportedLayout { .. }), "{err:?}");
    let built = strided(&[0.0f64; 4], &[2, 2], &[2, 1], 0).build();
    let mut t = import(&built);
    // SAFETY: refused before any view is made.
    let err = unsafe { view_strided_mut::<DVectorViewMut<'_, f64, Dyn, Dyn>>(&mut t) }.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NdimMismatch {
                found: 2,
                expected: 1
            }
        ),
        "{err:?}"
    );
}
