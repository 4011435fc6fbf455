//! Export -> import -> typed view -> reclaim round trips against `Box::new`, and the strided
//! gather against `copy_from_slice`.
//!
//! Run: `cargo bench -p dlpack-core --bench roundtrip`

use divan::{Bencher, black_box};
use dlpack_core::{Device, Element, Export, ExportDesc, ManagedTensor};

fn main() {
    divan::main();
}

const SMALL: usize = 4; // 16 bytes of f32
const LARGE: usize = 1 << 28; // 1 GiB of f32

/// One full round trip, the way a tensor crosses to C and back: export a `Vec<f32>` straight to
/// a raw `DLManagedTensorVersioned*` (`export_raw`: one heap block, no owner built on the way),
/// import it (full validation), make a typed view and read one element, then reclaim the `Vec`
/// (the block is freed, the `Vec` comes back untouched). Zero copy, so its cost must not depend
/// on the size.
#[divan::bench(args = [SMALL, LARGE], sample_count = 200, sample_size = 1000)]
fn round_trip(bencher: Bencher, len: usize) {
    let mut vec = vec![1.0f32; len];
    bencher.bench_local(|| {
        let v = std::mem::take(&mut vec);
        let raw = ManagedTensor::export_raw(v).unwrap();
        // SAFETY: `raw` was just exported and is owned here.
        let t = unsafe { ManagedTensor::from_raw(black_box(raw.as_ptr())) }.unwrap();
        let first = *t.view::<f32>().unwrap().get(&[0]).unwrap();
        black_box(first);
        vec = t.reclaim().unwrap();
    });
}

/// The same round trip through the validated owner on the export side too:
/// `ManagedTensor::export` (which validates the description and builds the owner, for Rust code
/// that keeps the tensor), then `into_raw`.
#[divan::bench(args = [SMALL, LARGE], sample_count = 200, sample_size = 1000)]
fn round_trip_via_owner(bencher: Bencher, len: usize) {
    let mut vec = vec![1.0f32; len];
    bencher.bench_local(|| {
        let v = std::mem::take(&mut vec);
        let raw = ManagedTensor::export(v).unwrap().into_raw().unwrap();
        // SAFETY: `raw` was just exported and is owned here.
        let t = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
        let first = *t.view::<f32>().unwrap().get(&[0]).unwrap();
        black_box(first);
        vec = t.reclaim().unwrap();
    });
}

/// The yardstick the issue names: one `Box::new` of a block as large as the tensor. divan drops
/// a benchmark's return values after the timed loop, so this times the allocation alone, 1000 in
/// a row (which also keeps glibc from serving them all from its per-thread cache).
#[divan::bench(args = [SMALL, LARGE], sample_count = 200, sample_size = 1000)]
fn box_new(bencher: Bencher, len: usize) {
    if len == SMALL {
        bencher.bench_local(|| black_box(Box::new(black_box([1.0f32; SMALL]))));
    } else {
        bencher.bench_local(|| black_box(vec![0.0f32; len].into_boxed_slice()));
    }
}

/// The stricter yardstick: one `Box::new` and its drop inside the timed loop, one allocation and
/// one free in the steady state, which is what a round trip pays for its block.
#[divan::bench(args = [SMALL, LARGE], sample_count = 200, sample_size = 1000)]
fn box_new_drop(bencher: Bencher, len: usize) {
    if len == SMALL {
        bencher.bench_local(|| drop(black_box(Box::new(black_box([1.0f32; SMALL])))));
    } else {
        bencher.bench_local(|| drop(black_box(vec![0.0f32; len].into_boxed_slice())));
    }
}

const SIDE: usize = 4096; // 4096 x 4096 f32 = 64 MiB

/// A 2-d view of a Vec with a chosen shape, strides (row-major, transposed, overlapping) and
/// byte offset.
struct Strided<T> {
    data: Vec<T>,
    shape: [i64; 2],
    strides: [i64; 2],
    offset: u64,
}

// SAFETY: the shapes, strides and offsets used below stay inside the Vec's buffer.
unsafe impl<T: Element> Export for Strided<T> {
    fn ndim(&self) -> usize {
        2
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&self.shape);
        strides.copy_from_slice(&self.strides);
        ExportDesc {
            data: self.data.as_mut_ptr().cast(),
            byte_offset: self.offset,
            dtype: T::DTYPE,
            device: Device::CPU,
            flags: Default::default(),
            allocation: None,
        }
    }
}

mod copy_out {
    use super::*;

    fn tensor(strides: [i64; 2], offset: u64) -> ManagedTensor {
        let data: Vec<f32> = (0..SIDE * SIDE).map(|i| i as f32).collect();
        let s = SIDE as i64;
        ManagedTensor::export(Strided {
            data,
            shape: [s, s],
            strides,
            offset,
        })
        .unwrap()
    }

    /// The yardstick: `copy_from_slice` of 64 MiB into an existing buffer.
    #[divan::bench(sample_count = 30)]
    fn memcpy(bencher: Bencher) {
        let src: Vec<f32> = (0..SIDE * SIDE).map(|i| i as f32).collect();
        let mut dst = vec![0.0f32; SIDE * SIDE];
        bencher.bench_local(|| dst.copy_from_slice(black_box(&src)));
    }

    #[divan::bench(sample_count = 30)]
    fn contiguous(bencher: Bencher) {
        let t = tensor([SIDE as i64, 1], 0);
        let mut dst = vec![0.0f32; SIDE * SIDE];
        bencher.bench_local(|| t.view::<f32>().unwrap().copy_to_slice(&mut dst).unwrap());
    }

    #[divan::bench(sample_count = 30)]
    fn transposed(bencher: Bencher) {
        let t = tensor([1, SIDE as i64], 0);
        let mut dst = vec![0.0f32; SIDE * SIDE];
        bencher.bench_local(|| t.view::<f32>().unwrap().copy_to_slice(&mut dst).unwrap());
    }

    #[divan::bench(sample_count = 30)]
    fn negative_rows(bencher: Bencher) {
        // Rows in reverse order: a[::-1, :].
        let last_row = ((SIDE - 1) * SIDE * 4) as u64;
        let t = tensor([-(SIDE as i64), 1], last_row);
        let mut dst = vec![0.0f32; SIDE * SIDE];
        bencher.bench_local(|| t.view::<f32>().unwrap().copy_to_slice(&mut dst).unwrap());
    }
}

/// Making a `bool` view, which checks that every element's byte is 0 or 1, of a 16 MiB mask:
/// compact (one pass over the bytes), transposed (merged into one run) and as sliding windows of 64
/// (1 GiB of indices over the same 16 MiB: each byte is still checked once).
mod bool_view {
    use super::*;

    const BYTES: usize = 1 << 24;

    fn mask(shape: [i64; 2], strides: [i64; 2]) -> ManagedTensor {
        let data = (0..BYTES).map(|i| i % 3 == 0).collect();
        ManagedTensor::export(Strided::<bool> {
            data,
            shape,
            strides,
            offset: 0,
        })
        .unwrap()
    }

    #[divan::bench(sample_count = 30)]
    fn compact(bencher: Bencher) {
        let t = mask([1 << 12, 1 << 12], [1 << 12, 1]);
        bencher.bench_local(|| black_box(t.view::<bool>().unwrap().len()));
    }

    #[divan::bench(sample_count = 30)]
    fn transposed(bencher: Bencher) {
        let t = mask([1 << 12, 1 << 12], [1, 1 << 12]);
        bencher.bench_local(|| black_box(t.view::<bool>().unwrap().len()));
    }

    #[divan::bench(sample_count = 30)]
    fn sliding_windows_of_64(bencher: Bencher) {
        let t = mask([(BYTES - 63) as i64, 64], [1, 1]);
        bencher.bench_local(|| black_box(t.view::<bool>().unwrap().len()));
    }
}
