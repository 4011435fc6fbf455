//! Export -> import -> nalgebra view -> reclaim round trips of a `DMatrix<f32>`, for 1 KiB and
//! 1 GiB matrices: zero copy, so the cost must not depend on the size.
//!
//! Run: `cargo bench -p dlpack-nalgebra --bench roundtrip`

use divan::{Bencher, black_box};
use dlpack_core::{CopyMode, ManagedTensor};
use nalgebra::{DMatrix, DMatrixView};

fn main() {
    divan::main();
}

/// The matrix sizes, as the side of a square `f32` matrix.
fn side(size: &str) -> usize {
    match size {
        "1 KiB" => 16,     // 16 x 16 x 4 bytes
        "1 GiB" => 16_384, // 16384 x 16384 x 4 bytes
        _ => unreachable!("unknown size {size}"),
    }
}

/// One full round trip: export the matrix (`into_dlpack`: it moves into the tensor), hand it out
/// as a raw `DLManagedTensorVersioned*`, import it (validation), make a nalgebra `DMatrixView`
/// of it (`view`: core's typed view, then the layout check), read one element, then take the
/// `DMatrix` back (`into_owned`, which reclaims it).
#[divan::bench(args = ["1 KiB", "1 GiB"], sample_count = 200, sample_size = 1000)]
fn round_trip(bencher: Bencher, size: &str) {
    let side = side(size);
    let mut matrix = DMatrix::<f32>::from_element(side, side, 1.0);
    bencher.bench_local(|| {
        let m = std::mem::take(&mut matrix);
        let raw = dlpack_nalgebra::into_dlpack(m).unwrap().into_raw().unwrap();
        // SAFETY: `raw` was just exported and is owned here.
        let tensor = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
        let view = dlpack_nalgebra::view::<DMatrixView<'_, f32>>(&tensor).unwrap();
        black_box(view[(side - 1, side - 1)]);
        matrix = dlpack_nalgebra::into_owned(tensor, CopyMode::IfNeeded)
            .unwrap()
            .0;
    });
}

/// The view alone, on a tensor exported once: `view` (core's typed view with its dtype, device
/// and alignment checks, then the layout check), and one element read.
#[divan::bench(args = ["1 KiB", "1 GiB"], sample_count = 200, sample_size = 1000)]
fn view_only(bencher: Bencher, size: &str) {
    let side = side(size);
    let tensor =
        dlpack_nalgebra::into_dlpack(DMatrix::<f32>::from_element(side, side, 1.0)).unwrap();
    bencher.bench_local(|| {
        let view = dlpack_nalgebra::view::<DMatrixView<'_, f32>>(black_box(&tensor)).unwrap();
        black_box(view[(side - 1, side - 1)]);
    });
}
