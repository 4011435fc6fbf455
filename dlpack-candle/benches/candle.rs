//! Vec -> candle and candle -> DLPack view without a copy, at 1 KiB and 1 GiB (the cost must
//! not depend on the size), and the forced-copy import of 1 GiB against a plain `to_vec`.
//!
//! Run: `cargo bench -p dlpack-candle --bench candle`

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use divan::{Bencher, black_box};
use dlpack_candle::{into_dlpack, into_owned};
use dlpack_core::{CopyMode, ManagedTensor, Transfer};

fn main() {
    divan::main();
}

const KIB: usize = 1 << 8; // 1 KiB of f32
const GIB: usize = 1 << 28; // 1 GiB of f32

/// Vec -> candle: export the Vec as a DLPack tensor and import it, moving the Vec into candle's
/// storage. The Vec is made (zeroed pages, untouched) and the candle tensor dropped outside the
/// timing.
#[divan::bench(args = [KIB, GIB], sample_count = 200, sample_size = 10)]
fn vec_to_candle(bencher: Bencher, len: usize) {
    bencher
        .with_inputs(|| vec![0.0f32; len])
        .bench_local_values(|data| {
            let dl = ManagedTensor::export(data).unwrap();
            let (tensor, transfer) = into_owned(black_box(dl), CopyMode::Never).unwrap();
            debug_assert_eq!(transfer, Transfer::Moved);
            tensor
        });
}

/// candle -> DLPack: lend a candle tensor (a clone, described under a brief read lock), make a
/// typed view, read one element, drop the export.
#[divan::bench(args = [KIB, GIB], sample_count = 200, sample_size = 100)]
fn candle_to_view(bencher: Bencher, len: usize) {
    let t = Tensor::zeros(len, DType::F32, &Device::Cpu).unwrap();
    bencher.bench_local(|| {
        // SAFETY: nothing writes to `t`'s storage in this benchmark.
        let dl = unsafe { into_dlpack(black_box(&t).clone()) }.unwrap();
        let first = *dl.view::<f32>().unwrap().get(&[0]).unwrap();
        black_box(first);
    });
}

mod copy_1gib {
    use super::*;

    fn source() -> Arc<[f32]> {
        (0..GIB).map(|i| i as f32).collect()
    }

    /// The forced-copy import: a DLPack tensor on shared memory (an `Arc<[f32]>` clone, cheap
    /// to export) imported with `CopyMode::Always`: one allocation and a contiguous gather.
    #[divan::bench(sample_count = 10, sample_size = 1)]
    fn import_copy(bencher: Bencher) {
        let src = source();
        bencher
            .with_inputs(|| ManagedTensor::export(src.clone()).unwrap())
            .bench_local_values(|dl| into_owned(dl, CopyMode::Always).unwrap().0);
    }

    /// The yardstick: `to_vec` of the same 1 GiB.
    #[divan::bench(sample_count = 10, sample_size = 1)]
    fn to_vec(bencher: Bencher) {
        let src = source();
        bencher.bench_local(|| black_box(&src[..]).to_vec());
    }
}
