//! Every dlpack-core `Element` type (all are nalgebra `Scalar`s) through every path: an exported
//! `DMatrix` viewed and reclaimed without a copy, a foreign Fortran-order tensor viewed in
//! place, a foreign C-order tensor viewed transposed and copied. `half`, `num-complex` and
//! `float8` types are tested when their features are on (`--all-features`).

mod common;

use common::{NeBytes, import, strided};
use dlpack_core::{CopyMode, Element, Transfer};
use dlpack_nalgebra::{into_dlpack, into_owned, to_owned, view, view_mut, view_transposed};
use nalgebra::{DMatrix, DMatrixView, DMatrixViewMut, DVector, DVectorView, Scalar};

/// Distinct values of an element type, from small integers.
trait Sample: Element + Scalar + NeBytes {
    fn sample(k: usize) -> Self;
}

macro_rules! sample_int {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            fn sample(k: usize) -> Self {
                k as $t
            }
        }
    )*};
}

sample_int!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

impl Sample for bool {
    fn sample(k: usize) -> Self {
        k % 3 == 1
    }
}

#[cfg(feature = "half")]
impl Sample for half::f16 {
    fn sample(k: usize) -> Self {
        half::f16::from_f32(k as f32)
    }
}

#[cfg(feature = "half")]
impl Sample for half::bf16 {
    fn sample(k: usize) -> Self {
        half::bf16::from_f32(k as f32)
    }
}

#[cfg(feature = "num-complex")]
impl Sample for num_complex::Complex<f32> {
    fn sample(k: usize) -> Self {
        num_complex::Complex::new(k as f32, -(k as f32))
    }
}

#[cfg(feature = "num-complex")]
impl Sample for num_complex::Complex<f64> {
    fn sample(k: usize) -> Self {
        num_complex::Complex::new(k as f64, 0.5)
    }
}

#[cfg(feature = "float8")]
impl Sample for float8::F8E4M3 {
    fn sample(k: usize) -> Self {
        float8::F8E4M3::from_f32(k as f32)
    }
}

#[cfg(feature = "float8")]
impl Sample for float8::F8E5M2 {
    fn sample(k: usize) -> Self {
        float8::F8E5M2::from_f32(k as f32)
    }
}

/// m[i, j] = sample(3 i + j + 1)
fn matrix<T: Sample>() -> DMatrix<T> {
    DMatrix::from_fn(2, 3, |i, j| T::sample(3 * i + j + 1))
}

fn exported_dmatrix_is_viewed_and_reclaimed_without_a_copy<T: Sample>() {
    let m = matrix::<T>();
    let data = m.as_ptr();
    let raw = into_dlpack(m).unwrap().into_raw().unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let mut tensor = unsafe { dlpack_core::ManagedTensor::from_raw(raw) }.unwrap();
    assert_eq!(tensor.dtype(), T::DTYPE);
    let view = view::<DMatrixView<'_, T>>(&tensor).unwrap();
    assert_eq!(view.as_ptr(), data);
    assert_eq!(view, matrix::<T>());
    let mut view = view_mut::<DMatrixViewMut<'_, T>>(&mut tensor).unwrap();
    view[(1, 1)] = T::sample(0);
    let (back, transfer) = into_owned::<DMatrix<T>>(tensor, CopyMode::Never).unwrap();
    assert_eq!((back.as_ptr(), transfer), (data, Transfer::Reclaimed));
    assert_eq!(back[(1, 1)], T::sample(0));
}

fn foreign_f_order_tensor_is_viewed_in_place<T: Sample>() {
    let m = matrix::<T>();
    // Column-major buffer: exactly the DMatrix's own order.
    let built = strided(m.as_slice(), &[2, 3], &[1, 2], 0).build();
    let tensor = import(&built);
    let view = view::<DMatrixView<'_, T>>(&tensor).unwrap();
    assert_eq!(view.as_ptr().addr(), built.buffer_addr());
    assert_eq!(view, m);
    drop(tensor);
    assert_eq!(built.deletes(), 1);
}

fn foreign_c_order_tensor_is_viewed_transposed_and_copied<T: Sample>() {
    let m = matrix::<T>();
    let row_major: Vec<T> = m.transpose().as_slice().to_vec();
    let built = strided(&row_major, &[2, 3], &[3, 1], 0).build();
    let tensor = import(&built);
    let transposed = view_transposed::<T>(&tensor).unwrap();
    assert_eq!(transposed.as_ptr().addr(), built.buffer_addr());
    assert_eq!(transposed, m.transpose());
    assert_eq!(to_owned::<DMatrix<T>>(&tensor).unwrap(), m);
    drop(tensor);
    assert_eq!(built.deletes(), 1);
}

fn foreign_vector_is_viewed_in_place<T: Sample>() {
    let values: Vec<T> = (0..5).map(T::sample).collect();
    let built = strided(&values, &[5], &[1], 0).build();
    let tensor = import(&built);
    let view = view::<DVectorView<'_, T>>(&tensor).unwrap();
    assert_eq!(view.as_ptr().addr(), built.buffer_addr());
    assert_eq!(view, DVector::from_vec(values));
    drop(tensor);
    assert_eq!(built.deletes(), 1);
}

macro_rules! every_path {
    ($($(#[$cfg:meta])* $name:ident: $t:ty),* $(,)?) => {$(
        $(#[$cfg])*
        mod $name {
            #[test]
            fn exported_dmatrix_is_viewed_and_reclaimed_without_a_copy() {
                super::exported_dmatrix_is_viewed_and_reclaimed_without_a_copy::<$t>();
            }

            #[test]
            fn foreign_f_order_tensor_is_viewed_in_place() {
                super::foreign_f_order_tensor_is_viewed_in_place::<$t>();
            }

            #[test]
            fn foreign_c_order_tensor_is_viewed_transposed_and_copied() {
                super::foreign_c_order_tensor_is_viewed_transposed_and_copied::<$t>();
            }

            #[test]
            fn foreign_vector_is_viewed_in_place() {
                super::foreign_vector_is_viewed_in_place::<$t>();
            }
        }
    )*};
}

every_path! {
    bool_: bool,
    i8_: i8,
    i16_: i16,
    i32_: i32,
    i64_: i64,
    u8_: u8,
    u16_: u16,
    u32_: u32,
    u64_: u64,
    f32_: f32,
    f64_: f64,
    #[cfg(feature = "half")] f16_: half::f16,
    #[cfg(feature = "half")] bf16_: half::bf16,
    #[cfg(feature = "num-complex")] complex64: num_complex::Complex<f32>,
    #[cfg(feature = "num-complex")] complex128: num_complex::Complex<f64>,
    #[cfg(feature = "float8")] f8_e4m3: float8::F8E4M3,
    #[cfg(feature = "float8")] f8_e5m2: float8::F8E5M2,
}
