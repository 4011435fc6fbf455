//! Export -> C ABI -> import -> ndarray view -> reclaim, for a 1 KiB and a 1 GiB array. Nothing
//! is copied, so the cost must not depend on the size. The argument is the array's size in bytes.
//!
//! Run: `cargo bench -p dlpack-ndarray --bench roundtrip`

use divan::{Bencher, black_box};
use dlpack_core::{CopyMode, ManagedTensor};
use dlpack_ndarray::{ImportedArray, into_dlpack, into_owned, view};
use ndarray::{Array2, ArrayView2, Ix2};

fn main() {
    divan::main();
}

/// The arrays are `bytes / 256` rows of 64 f32s.
const COLS: usize = 64;
const KIB: usize = 1 << 10;
const GIB: usize = 1 << 30;

/// An array of `bytes` bytes of ones.
fn array(bytes: usize) -> Array2<f32> {
    Array2::ones((bytes / 4 / COLS, COLS))
}

/// One full round trip: move an `Array2<f32>` into a tensor, hand it out as a raw
/// `DLManagedTensorVersioned*`, import (validate) it, view it as an `ArrayView2`, read an
/// element, then take the array back.
#[divan::bench(args = [KIB, GIB], sample_count = 200, sample_size = 1000)]
fn export_import_view(bencher: Bencher, bytes: usize) {
    let mut array = array(bytes);
    let rows = array.nrows();
    bencher.bench_local(|| {
        let a = std::mem::take(&mut array);
        let raw = into_dlpack(a).unwrap().into_raw().unwrap();
        // SAFETY: `raw` was just exported and is owned here.
        let tensor = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
        let v: ArrayView2<f32> = view(&tensor).unwrap();
        black_box(v[[rows - 1, COLS - 1]]);
        array = into_owned(tensor, CopyMode::Never).unwrap().0;
    });
    assert_eq!(array.dim(), (rows, COLS));
}

/// The same through the owning wrapper: import into an `ImportedArray`, view, take back.
#[divan::bench(args = [KIB, GIB], sample_count = 200, sample_size = 1000)]
fn imported_array(bencher: Bencher, bytes: usize) {
    let mut array = array(bytes);
    let rows = array.nrows();
    bencher.bench_local(|| {
        let a = std::mem::take(&mut array);
        let raw = into_dlpack(a).unwrap().into_raw().unwrap();
        // SAFETY: `raw` was just exported and is owned here.
        let tensor = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
        let imported = ImportedArray::<f32, Ix2>::new(tensor).unwrap();
        black_box(imported.view()[[rows - 1, COLS - 1]]);
        array = imported.into_owned(CopyMode::Never).unwrap().0;
    });
    assert_eq!(array.dim(), (rows, COLS));
}
