//! ndarray <-> DLPack <-> nalgebra: the same memory on both sides, no copy, and writes through
//! one side visible on the other. The adapters never depend on each other; DLPack joins them.

use dlpack_core::{CopyMode, CopyReason, DLPack, Error, ManagedTensor};
use dlpack_nalgebra::{view, view_mut, view_or_copy, view_transposed};
use nalgebra::{DMatrix, DMatrixView, DMatrixViewMut};
use ndarray::{Array2, ShapeBuilder, s};

#[test]
fn an_f_order_ndarray_is_a_nalgebra_view_on_the_same_memory() -> Result<(), Error> {
    let a = Array2::from_shape_fn((3, 4).f(), |(i, j)| (10 * i + j) as f64);
    let address = a.as_ptr();
    let tensor = dlpack_ndarray::into_dlpack(a)?;
    let m = view::<DMatrixView<'_, f64>>(&tensor)?;
    assert_eq!(m.as_ptr(), address, "zero copy");
    assert_eq!((m.nrows(), m.ncols()), (3, 4));
    assert_eq!(m[(2, 3)], 23.0);
    Ok(())
}

#[test]
fn a_c_order_ndarray_is_the_transposed_nalgebra_view_without_a_copy() -> Result<(), Error> {
    let a = Array2::from_shape_fn((3, 4), |(i, j)| (10 * i + j) as f32);
    let address = a.as_ptr();
    let tensor = dlpack_ndarray::into_dlpack(a)?;
    let t = view_transposed::<f32>(&tensor)?;
    assert_eq!(t.as_ptr(), address);
    assert_eq!((t.nrows(), t.ncols()), (4, 3));
    assert_eq!(t[(3, 2)], 23.0);
    // Plain nalgebra views need a unit row stride; a C-order matrix is refused, not copied.
    assert!(view::<DMatrixView<'_, f32>>(&tensor).is_err());
    Ok(())
}

#[test]
fn writes_through_a_nalgebra_view_are_seen_by_the_ndarray_that_comes_back() -> Result<(), Error> {
    let a = Array2::<i32>::zeros((2, 3).f());
    let address = a.as_ptr();
    let raw = dlpack_ndarray::into_dlpack(a)?.into_raw()?;
    // SAFETY: `raw` is a live tensor we own, as a C consumer would after receiving it.
    let mut tensor = unsafe { ManagedTensor::from_raw(raw)? };
    {
        let mut m = view_mut::<DMatrixViewMut<'_, i32>>(&mut tensor)?;
        m[(1, 2)] = 7;
        m[(0, 0)] = -1;
    }
    let (back, transfer): (Array2<i32>, _) = dlpack_ndarray::into_owned(tensor, CopyMode::Never)?;
    assert_eq!(transfer, dlpack_core::Transfer::Reclaimed);
    assert_eq!(back.as_ptr(), address, "the same array, reclaimed");
    assert_eq!(back[[1, 2]], 7);
    assert_eq!(back[[0, 0]], -1);
    Ok(())
}

#[test]
fn a_nalgebra_matrix_is_an_ndarray_view_with_column_major_strides() -> Result<(), Error> {
    let m = DMatrix::from_fn(3, 2, |i, j| (10 * i + j) as u16);
    let address = m.as_ptr();
    let tensor = dlpack_nalgebra::into_dlpack(m)?;
    let v = dlpack_ndarray::view::<u16, ndarray::Ix2>(&tensor)?;
    assert_eq!(v.as_ptr(), address);
    assert_eq!(v.strides(), &[1, 3]);
    assert_eq!(v[[2, 1]], 21);
    Ok(())
}

#[test]
fn a_negative_step_ndarray_view_imports_into_ndarray_and_is_refused_by_nalgebra()
-> Result<(), Error> {
    let a = Array2::from_shape_fn((4, 3), |(i, j)| (10 * i + j) as f32);
    let reversed = a.slice_move(s![..;-1, ..]);
    let tensor = dlpack_ndarray::into_dlpack(reversed)?;
    assert_eq!(tensor.strides(), &[-3, 1]);
    let v = dlpack_ndarray::view::<f32, ndarray::Ix2>(&tensor)?;
    assert_eq!(v[[0, 2]], 32.0);
    // nalgebra cannot hold a negative stride: no view, and a copy only where it is allowed.
    assert!(view::<DMatrixView<'_, f32>>(&tensor).is_err());
    assert_eq!(
        view_or_copy::<DMatrixView<'_, f32>>(&tensor, CopyMode::Never).unwrap_err(),
        Error::CopyRefused {
            reason: CopyReason::Layout
        }
    );
    let copy = view_or_copy::<DMatrixView<'_, f32>>(&tensor, CopyMode::IfNeeded)?;
    assert!(!copy.is_borrowed());
    assert_eq!(copy.view()[(0, 2)], 32.0);
    Ok(())
}

/// A user's own tensor type, made DLPack-capable by one derive.
#[derive(DLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    hw: [usize; 2],
}

#[test]
fn a_derived_struct_crosses_into_ndarray_and_nalgebra_without_a_copy() -> Result<(), Error> {
    let image = Image {
        pixels: (0..12).collect(),
        hw: [3, 4],
    };
    let address = image.pixels.as_ptr();
    let tensor = ManagedTensor::export(image)?;
    let v = dlpack_ndarray::view::<u8, ndarray::Ix2>(&tensor)?;
    assert_eq!((v.as_ptr(), v[[2, 3]]), (address, 11));
    let t = view_transposed::<u8>(&tensor)?;
    assert_eq!((t.as_ptr(), t[(3, 2)]), (address, 11));
    // And back into the struct, the same buffer.
    let image = Image::try_from(tensor)?;
    assert_eq!(image.pixels.as_ptr(), address);
    Ok(())
}
