//! Paths the rest of the suite leaves unexercised (found with source-based coverage):
//! `into_owned` reclaiming a 4-, 5- or 6-dimensional array exported under its static
//! dimension type and asked for as `ArrayD` (the zero-copy path for those ranks).

use dlpack_core::{CopyMode, Transfer};
use dlpack_ndarray::{into_dlpack, into_owned};
use ndarray::{Array, ArrayD, IxDyn};

fn check<D: ndarray::Dimension + 'static>(shape: D) {
    let n = shape.size();
    let a = Array::from_shape_vec(shape, (0..n as i32).collect()).unwrap();
    let (address, dims) = (a.as_ptr(), a.shape().to_vec());
    let tensor = into_dlpack(a).unwrap();
    let (back, transfer): (ArrayD<i32>, _) = into_owned(tensor, CopyMode::Never).unwrap();
    assert_eq!(transfer, Transfer::Reclaimed);
    assert_eq!(
        back.as_ptr(),
        address,
        "rank {}: reclaimed without a copy",
        dims.len()
    );
    assert_eq!(back.shape(), &dims[..]);
    assert_eq!(
        back.iter().copied().collect::<Vec<_>>(),
        (0..n as i32).collect::<Vec<_>>()
    );
    assert_eq!(back.raw_dim(), IxDyn(&dims));
}

#[test]
fn arrays_of_rank_4_to_6_are_reclaimed_as_arrayd_without_a_copy() {
    check(ndarray::Ix4(1, 2, 1, 3));
    check(ndarray::Ix5(2, 1, 1, 2, 1));
    check(ndarray::Ix6(1, 1, 2, 1, 1, 2));
}
