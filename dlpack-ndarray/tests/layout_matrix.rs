//! The layout matrix: every `Element` type in every layout ndarray can hold (C order, Fortran
//! order, sliced with steps, negative steps, permuted axes, broadcast, 0-d, size 0) goes out
//! through DLPack and comes back as the same memory, through every import path.

use std::fmt::Debug;

use dlpack_core::{CopyMode, Element, Error, ManagedTensor, Transfer};
use dlpack_ndarray::{
    ImportedArray, export_view, into_dlpack, to_dlpack, to_owned, view, view_mut,
};
use float8::{F8E4M3, F8E5M2};
use half::{bf16, f16};
use ndarray::{Array, ArrayD, ArrayViewD, IxDyn, ShapeBuilder, s};
use num_complex::Complex;

/// An array of `shape` (C order) holding `make(0)`, `make(1)`, ...
fn filled<T: Element>(shape: &[usize], make: fn(usize) -> T) -> ArrayD<T> {
    let n = shape.iter().product();
    Array::from_shape_vec(IxDyn(shape), (0..n).map(make).collect()).unwrap()
}

/// Every owned layout under test, with its name.
fn layouts<T: Element>(make: fn(usize) -> T) -> Vec<(&'static str, ArrayD<T>)> {
    let n = 2 * 3 * 4;
    vec![
        ("C order", filled(&[2, 3, 4], make)),
        (
            "Fortran order",
            Array::from_shape_vec(IxDyn(&[2, 3, 4]).f(), (0..n).map(make).collect()).unwrap(),
        ),
        (
            "sliced with steps",
            filled(&[4, 6, 5], make)
                .slice_move(s![1..;2, ..;3, 1..4])
                .into_dyn(),
        ),
        (
            "negative steps",
            filled(&[3, 4, 5], make)
                .slice_move(s![..;-1, 1..;-2, ..])
                .into_dyn(),
        ),
        (
            "permuted axes",
            filled(&[2, 3, 4], make).permuted_axes(IxDyn(&[2, 0, 1])),
        ),
        ("0-d", filled(&[], make)),
        ("size 0", filled(&[2, 0, 3], make)),
        (
            "sliced to size 0",
            filled(&[3, 4], make).slice_move(s![1..1, ..]).into_dyn(),
        ),
    ]
}

/// Exports `a`, passes it through the C ABI, and checks every import path against it.
fn round_trip<T: Element + PartialEq + Debug>(name: &str, a: ArrayD<T>) {
    let expected = a.clone();
    let first = a.as_ptr();
    let strides = a.strides().to_vec();
    let has_elements = !a.is_empty();

    let raw = into_dlpack(a).unwrap().into_raw().unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let mut tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let shape: Vec<i64> = expected.shape().iter().map(|&d| d as i64).collect();
    assert_eq!(tensor.shape(), shape, "{name}: shape");
    assert_eq!(tensor.dtype(), T::DTYPE, "{name}: dtype");

    // The read-only view: the same memory, the same strides.
    let v: ArrayViewD<T> = view(&tensor).unwrap();
    assert_eq!(v, expected, "{name}: view");
    if has_elements {
        assert_eq!(v.as_ptr(), first, "{name}: view address");
        assert_eq!(v.strides(), strides, "{name}: view strides");
    }

    // The mutable view: owned arrays never overlap, so it is granted, on the same memory.
    let v = view_mut::<T, IxDyn>(&mut tensor).unwrap();
    assert_eq!(v, expected, "{name}: mutable view");
    if has_elements {
        assert_eq!(v.as_ptr(), first, "{name}: mutable view address");
    }

    // The copy: equal values in C order, elsewhere.
    let copy: ArrayD<T> = to_owned(&tensor).unwrap();
    assert_eq!(copy, expected, "{name}: copy");
    assert!(copy.is_standard_layout(), "{name}: copy layout");

    // The owning wrapper, then the array itself back.
    let imported = ImportedArray::<T, IxDyn>::new(tensor).unwrap();
    assert_eq!(imported.view(), expected, "{name}: ImportedArray");
    let (back, transfer) = imported.into_owned(CopyMode::Never).unwrap();
    assert_eq!(transfer, Transfer::Reclaimed, "{name}: reclaimed");
    assert_eq!(back, expected, "{name}: reclaimed");
    if has_elements {
        assert_eq!(back.as_ptr(), first, "{name}: reclaimed address");
        assert_eq!(back.strides(), strides, "{name}: reclaimed strides");
    }

    // The copying export agrees.
    let copied = to_dlpack(&expected).unwrap();
    assert_eq!(
        view::<T, IxDyn>(&copied).unwrap(),
        expected,
        "{name}: to_dlpack"
    );
}

/// A broadcast view (zero strides) lent through DLPack views as itself, read-only.
fn broadcast<T: Element + PartialEq + Debug>(make: fn(usize) -> T) {
    let row = filled(&[1, 4], make);
    let wide = row.broadcast(IxDyn(&[3, 4])).unwrap();
    // SAFETY: the tensor is dropped at the end of this block, before `row`, which is not
    // written meanwhile.
    unsafe {
        let mut tensor = export_view(&wide).unwrap();
        assert_eq!(tensor.strides(), &[0, 1]);
        let v: ArrayViewD<T> = view(&tensor).unwrap();
        assert_eq!(v, wide);
        assert_eq!((v.as_ptr(), v.strides()), (row.as_ptr(), &[0, 1][..]));
        assert_eq!(
            view_mut::<T, IxDyn>(&mut tensor).unwrap_err(),
            Error::ReadOnly
        );
        let copy: ArrayD<T> = to_owned(&tensor).unwrap();
        assert_eq!(copy, wide);
    }
}

/// Under Miri, which takes a minute over the whole matrix, one type per size and alignment (bool,
/// u8, i16, f16, f32, f64, the two complex types and one float8) goes through every layout: the
/// unsafe code depends on those, not on the type's name. Natively, every type does.
const NATIVE_ONLY: bool = cfg!(miri);

fn matrix<T: Element + PartialEq + Debug>(make: fn(usize) -> T) {
    for (name, a) in layouts(make) {
        round_trip(name, a);
    }
    broadcast(make);
}

#[test]
fn bool_in_every_layout() {
    matrix(|i| i % 3 == 0);
}

#[test]
fn signed_integers_in_every_layout() {
    matrix(|i| -(i as i16));
    if !NATIVE_ONLY {
        matrix(|i| i as i8);
        matrix(|i| i as i32 * 1000);
        matrix(|i| i as i64 - 50);
    }
}

#[test]
fn unsigned_integers_in_every_layout() {
    matrix(|i| i as u8);
    if !NATIVE_ONLY {
        matrix(|i| i as u16 * 3);
        matrix(|i| i as u32 + 7);
        matrix(|i| i as u64 * 11);
    }
}

#[test]
fn floats_in_every_layout() {
    matrix(|i| i as f32 / 4.0);
    matrix(|i| i as f64 * 0.5);
}

#[test]
fn half_floats_in_every_layout() {
    matrix(|i| f16::from_f32(i as f32));
    if !NATIVE_ONLY {
        matrix(|i| bf16::from_f32(i as f32));
    }
}

#[test]
fn complex_numbers_in_every_layout() {
    matrix(|i| Complex::new(i as f32, -(i as f32)));
    matrix(|i| Complex::new(i as f64, 1.0));
}

#[test]
fn float8_in_every_layout() {
    matrix(|i| F8E4M3::from_f32((i % 16) as f32));
    if !NATIVE_ONLY {
        matrix(|i| F8E5M2::from_f32((i % 16) as f32));
    }
}
