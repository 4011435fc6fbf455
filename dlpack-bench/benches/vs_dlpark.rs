//! This workspace against dlpark 0.10 on the same inputs, in one run.
//!
//! Run: `cargo bench -p dlpack-bench --bench vs_dlpark`
//!
//! Groups (each function name starts with the library it measures, `ours_` or `dlpark_`):
//! - `zero_copy`: export a shared `f32` buffer of 16 B, 1 MiB or 1 GiB, hand it out as a raw
//!   `DLManagedTensorVersioned*`, import it with validation, make a typed view, read one
//!   element, drop the tensor. Both libraries get the same owner (an `Arc<Vec<f32>>`, so the
//!   drop is a reference-count decrement and no 1 GiB free is timed); `ours_vec_reclaim` is
//!   the workspace's own owned-`Vec` path, which takes the `Vec` back instead of freeing it.
//! - `owned_array`: an owned `ndarray::Array1<f32>` moved into a tensor, round trip as above,
//!   then dropped (the array is freed inside the timed region for both libraries).
//! - `view_import`: `from_raw` + ndarray `ArrayViewD` + one read + `into_raw`, for 1, 2, 4 and 8
//!   dimensions (the tensor is exported once, outside the timed region).
//! - `candle_export`: export of a candle CPU tensor and drop.
//! - `split`: the `zero_copy` round trip cut into its export half and its import half.
//! - `copy_out`: a 2048 x 2048 `f32` (16 MiB) tensor, contiguous, transposed or with rows
//!   reversed (negative stride), gathered into row-major memory: `copy_from_slice` (the
//!   yardstick), this workspace's `copy_to_slice` into an existing buffer, this workspace's
//!   `dlpack_candle::to_owned`, and dlpark's candle import (its only copy path).

use std::ffi::c_void;
use std::sync::Arc;

use divan::{Bencher, black_box};
use dlpack_bench::SharedOurs;
use dlpack_core::{Export, ExportDesc, ManagedTensor};
use dlpack_ndarray::{into_dlpack, view};
use dlpark::ffi::{DLDevice, DLManagedTensorVersioned};
use dlpark::metadata::Dynamic;
use dlpark::{DlpackElement, DlpackFlags, TryFromDlpack, allocation::dynamic, versioned};
use ndarray::{Array1, ArrayD, ArrayViewD, IxDyn};

fn main() {
    divan::main();
}

const B16: usize = 16;
const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;

mod zero_copy {
    use super::*;

    /// Workspace: shared owner -> `export_raw` (straight to a raw pointer, as dlpark's
    /// `finish` + `into_raw`) -> validated import -> typed view -> drop.
    #[divan::bench(args = [B16, MIB, GIB], sample_count = 200, sample_size = 1000)]
    fn ours_shared(bencher: Bencher, bytes: usize) {
        let buf = Arc::new(vec![1.0f32; bytes / 4]);
        bencher.bench_local(|| {
            let raw = ManagedTensor::export_raw(SharedOurs(Arc::clone(&buf))).unwrap();
            // SAFETY: `raw` was just exported and is owned here.
            let t = unsafe { ManagedTensor::from_raw(black_box(raw.as_ptr())) }.unwrap();
            black_box(*t.view::<f32>().unwrap().get(&[0]).unwrap());
        });
    }

    /// Workspace: the same through the validated owner on the export side
    /// (`ManagedTensor::export`, which validates the description, then `into_raw`).
    #[divan::bench(args = [B16], sample_count = 200, sample_size = 1000)]
    fn ours_shared_via_owner(bencher: Bencher, bytes: usize) {
        let buf = Arc::new(vec![1.0f32; bytes / 4]);
        bencher.bench_local(|| {
            let raw = ManagedTensor::export(SharedOurs(Arc::clone(&buf)))
                .unwrap()
                .into_raw()
                .unwrap();
            // SAFETY: `raw` was just exported and is owned here.
            let t = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
            black_box(*t.view::<f32>().unwrap().get(&[0]).unwrap());
        });
    }

    /// dlpark: the same owner -> export -> raw -> `from_raw` + `validate` -> `cpu_slice` -> drop.
    #[divan::bench(args = [B16, MIB, GIB], sample_count = 200, sample_size = 1000)]
    fn dlpark_shared(bencher: Bencher, bytes: usize) {
        let buf = Arc::new(vec![1.0f32; bytes / 4]);
        bencher.bench_local(|| {
            let raw = dlpack_bench::dlpark_shared(&buf).into_raw();
            // SAFETY: `raw` was just exported and is owned here.
            let t = unsafe { versioned::Dlpack::from_raw(black_box(raw)) }.unwrap();
            let checked = t.validate().unwrap();
            // SAFETY: the tensor describes the live, initialised, read-only buffer of `buf`.
            black_box(unsafe { checked.cpu_slice::<f32>() }.unwrap()[0]);
        });
    }

    /// Workspace: owned `Vec<f32>` -> export -> raw -> validated import -> typed view ->
    /// reclaim (the `Vec` comes back; nothing is freed).
    #[divan::bench(args = [B16, MIB, GIB], sample_count = 200, sample_size = 1000)]
    fn ours_vec_reclaim(bencher: Bencher, bytes: usize) {
        let mut vec = vec![1.0f32; bytes / 4];
        bencher.bench_local(|| {
            let v = std::mem::take(&mut vec);
            let raw = ManagedTensor::export_raw(v).unwrap();
            // SAFETY: `raw` was just exported and is owned here.
            let t = unsafe { ManagedTensor::from_raw(black_box(raw.as_ptr())) }.unwrap();
            black_box(*t.view::<f32>().unwrap().get(&[0]).unwrap());
            vec = t.reclaim().unwrap();
        });
    }
}

mod owned_array {
    use super::*;

    /// Workspace: `Array1<f32>` moved in -> raw -> validated import -> `ArrayView1` -> drop.
    #[divan::bench(args = [B16, MIB], sample_count = 100, sample_size = 100)]
    fn ours(bencher: Bencher, bytes: usize) {
        bencher
            .with_inputs(|| Array1::<f32>::ones(bytes / 4))
            .bench_local_values(|a| {
                let raw = into_dlpack(a).unwrap().into_raw().unwrap();
                // SAFETY: `raw` was just exported and is owned here.
                let t = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
                let v = view::<f32, ndarray::Ix1>(&t).unwrap();
                black_box(v[0]);
            });
    }

    /// dlpark: `Box<Array1<f32>>` -> initialized -> finish -> raw -> `from_raw` ->
    /// `ArrayViewD` (validates) -> drop.
    #[divan::bench(args = [B16, MIB], sample_count = 100, sample_size = 100)]
    fn dlpark(bencher: Bencher, bytes: usize) {
        bencher
            .with_inputs(|| Array1::<f32>::ones(bytes / 4))
            .bench_local_values(|a| {
                let init: dynamic::Initialized<DLManagedTensorVersioned> =
                    Box::new(a).try_into().unwrap();
                // SAFETY: dlpark's ndarray conversion filled in every field.
                let raw = unsafe { init.finish() }.into_raw();
                // SAFETY: `raw` was just exported and is owned here.
                let t = unsafe { versioned::Dlpack::from_raw(black_box(raw)) }.unwrap();
                // SAFETY: the tensor describes the live array it owns.
                let v = unsafe { ArrayViewD::<f32>::try_from_dlpack(&t, ()) }.unwrap();
                black_box(v[[0]]);
            });
    }
}

mod view_import {
    use super::*;

    /// A tensor of shape `[2; ndim]` (`2^ndim` f32s).
    fn array(ndim: usize) -> ArrayD<f32> {
        ArrayD::ones(IxDyn(&vec![2; ndim]))
    }

    /// Workspace: `from_raw` (validation) -> `view::<f32, IxDyn>` -> read -> `into_raw`.
    #[divan::bench(args = [1, 2, 4, 8], sample_count = 200, sample_size = 1000)]
    fn ours(bencher: Bencher, ndim: usize) {
        let mut raw = into_dlpack(array(ndim)).unwrap().into_raw().unwrap();
        bencher.bench_local(|| {
            // SAFETY: `raw` is a live tensor owned here (handed back by `into_raw` each time).
            let t = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
            let v = view::<f32, IxDyn>(&t).unwrap();
            black_box(v.first());
            raw = t.into_raw().unwrap();
        });
        // SAFETY: `raw` is still owned here; this frees it.
        drop(unsafe { ManagedTensor::from_raw(raw) }.unwrap());
    }

    /// dlpark: `from_raw` -> `ArrayViewD::try_from_dlpack` (validation) -> read -> `into_raw`.
    #[divan::bench(args = [1, 2, 4, 8], sample_count = 200, sample_size = 1000)]
    fn dlpark(bencher: Bencher, ndim: usize) {
        let init: dynamic::Initialized<DLManagedTensorVersioned> =
            Box::new(array(ndim)).try_into().unwrap();
        // SAFETY: dlpark's ndarray conversion filled in every field.
        let mut raw = unsafe { init.finish() }.into_raw();
        bencher.bench_local(|| {
            // SAFETY: `raw` is a live tensor owned here (handed back by `into_raw` each time).
            let t = unsafe { versioned::Dlpack::from_raw(black_box(raw)) }.unwrap();
            // SAFETY: the tensor describes the live array it owns.
            let v = unsafe { ArrayViewD::<f32>::try_from_dlpack(&t, ()) }.unwrap();
            black_box(v.first());
            raw = t.into_raw();
        });
        // SAFETY: `raw` is still owned here; this frees it.
        drop(unsafe { versioned::Dlpack::from_raw(raw) }.unwrap());
    }
}

mod candle_export {
    use super::*;
    use candle_core::{Device, Tensor};

    fn tensor() -> Tensor {
        Tensor::ones((64, 64), candle_core::DType::F32, &Device::Cpu).unwrap()
    }

    /// Workspace: `dlpack_candle::into_dlpack(tensor.clone())` -> drop.
    #[divan::bench(sample_count = 200, sample_size = 1000)]
    fn ours(bencher: Bencher) {
        let t = tensor();
        bencher.bench_local(|| {
            // SAFETY: nothing writes to `t`'s storage in this benchmark.
            let dl = unsafe { dlpack_candle::into_dlpack(t.clone()) };
            drop(black_box(dl.unwrap()))
        });
    }

    /// dlpark: `Box::new(tensor.clone())` -> `Initialized` -> finish -> drop.
    #[divan::bench(sample_count = 200, sample_size = 1000)]
    fn dlpark(bencher: Bencher) {
        let t = tensor();
        bencher.bench_local(|| {
            let init: dynamic::Initialized<DLManagedTensorVersioned> =
                Box::new(t.clone()).try_into().unwrap();
            // SAFETY: dlpark's candle conversion filled in every field.
            drop(black_box(unsafe { init.finish() }));
        });
    }
}

mod copy_out {
    use super::*;

    const SIDE: usize = 2048; // 2048 x 2048 f32 = 16 MiB

    /// A 2-d view of a shared buffer with chosen strides and byte offset.
    struct Strided {
        data: Arc<Vec<f32>>,
        strides: [i64; 2],
        offset: u64,
    }

    // SAFETY: the strides and offsets used below address only elements of the SIDE x SIDE
    // buffer, which the Arc keeps alive; the description is read-only.
    unsafe impl Export for Strided {
        fn ndim(&self) -> usize {
            2
        }
        fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
            shape.copy_from_slice(&[SIDE as i64; 2]);
            strides.copy_from_slice(&self.strides);
            let mut d = ExportDesc::host(self.data.as_ptr().cast_mut()).read_only();
            d.byte_offset = self.offset;
            d
        }
    }

    /// Layout name -> (strides in elements, byte offset of element [0, 0]).
    fn layout(name: &str) -> ([i64; 2], u64) {
        let s = SIDE as i64;
        match name {
            "contiguous" => ([s, 1], 0),
            "transposed" => ([1, s], 0),
            _ => ([-s, 1], ((SIDE - 1) * SIDE * 4) as u64), // a[::-1, :]
        }
    }

    fn data() -> Arc<Vec<f32>> {
        Arc::new((0..SIDE * SIDE).map(|i| i as f32).collect())
    }

    fn ours_tensor(name: &str) -> ManagedTensor {
        let (strides, offset) = layout(name);
        ManagedTensor::export(Strided {
            data: data(),
            strides,
            offset,
        })
        .unwrap()
    }

    fn dlpark_tensor(name: &str) -> versioned::Dlpack {
        let (strides, offset) = layout(name);
        let buf = data();
        let ptr = buf.as_ptr().cast_mut().cast::<c_void>();
        let mut init = Dynamic::new([SIDE as i64; 2], strides)
            .prepare_as::<DLManagedTensorVersioned>()
            .unwrap()
            .initialize(buf);
        init.set_data(ptr)
            .set_byte_offset(offset)
            .set_dtype(f32::DTYPE)
            .set_device(DLDevice::CPU);
        init.set_flags(DlpackFlags::READ_ONLY).unwrap();
        // SAFETY: every element the strides and offset reach lies in the Arc's buffer, which
        // the context keeps alive until the deleter runs.
        unsafe { init.finish() }
    }

    const LAYOUTS: [&str; 3] = ["contiguous", "transposed", "negative_rows"];

    /// The yardstick: `copy_from_slice` of 16 MiB into an existing buffer.
    #[divan::bench(sample_count = 50)]
    fn memcpy(bencher: Bencher) {
        let src = data();
        let mut dst = vec![0.0f32; SIDE * SIDE];
        bencher.bench_local(|| dst.copy_from_slice(black_box(&src)));
    }

    /// Workspace: `view().copy_to_slice` into an existing buffer.
    #[divan::bench(args = LAYOUTS, sample_count = 50)]
    fn ours_copy_to_slice(bencher: Bencher, name: &str) {
        let t = ours_tensor(name);
        let mut dst = vec![0.0f32; SIDE * SIDE];
        bencher.bench_local(|| t.view::<f32>().unwrap().copy_to_slice(&mut dst).unwrap());
    }

    /// Workspace: `dlpack_candle::to_owned` (a new candle tensor; one copy).
    #[divan::bench(args = LAYOUTS, sample_count = 50)]
    fn ours_to_owned(bencher: Bencher, name: &str) {
        let t = ours_tensor(name);
        bencher.bench_local(|| black_box(dlpack_candle::to_owned(&t).unwrap()));
    }

    /// dlpark: `candle_core::Tensor::try_from_dlpack` (its copy path).
    #[divan::bench(args = LAYOUTS, sample_count = 50)]
    fn dlpark_to_candle(bencher: Bencher, name: &str) {
        let t = dlpark_tensor(name);
        bencher.bench_local(|| {
            // SAFETY: the tensor describes its live, read-only buffer.
            black_box(unsafe { candle_core::Tensor::try_from_dlpack(&t, ()) }.unwrap())
        });
    }
}

/// The `zero_copy` round trip split in its export half and its import half (16 B shared owner),
/// to show where the difference between the libraries lies.
mod split {
    use super::*;

    /// Workspace: `export_raw` (the producer vouches for its description, as dlpark's caller
    /// does) -> the deleter, called as a C consumer calls it.
    #[divan::bench(sample_count = 200, sample_size = 1000)]
    fn ours_export_raw_delete(bencher: Bencher) {
        let buf = Arc::new(vec![1.0f32; 4]);
        bencher.bench_local(|| {
            let raw = black_box(ManagedTensor::export_raw(SharedOurs(Arc::clone(&buf))).unwrap());
            // SAFETY: `raw` was just exported and is owned here; its deleter frees it once.
            unsafe { (raw.as_ref().deleter.unwrap())(raw.as_ptr()) };
        });
    }

    /// Workspace: export to the validated owner (builds and validates the description) -> drop.
    #[divan::bench(sample_count = 200, sample_size = 1000)]
    fn ours_export_drop(bencher: Bencher) {
        let buf = Arc::new(vec![1.0f32; 4]);
        bencher.bench_local(|| {
            drop(black_box(ManagedTensor::export(SharedOurs(Arc::clone(
                &buf,
            )))))
        });
    }

    /// dlpark: prepare -> initialize -> finish (the caller vouches for the fields) -> drop.
    #[divan::bench(sample_count = 200, sample_size = 1000)]
    fn dlpark_export_drop(bencher: Bencher) {
        let buf = Arc::new(vec![1.0f32; 4]);
        bencher.bench_local(|| drop(black_box(dlpack_bench::dlpark_shared(&buf))));
    }

    /// Workspace: `from_raw` (validation) -> typed view -> read -> `into_raw`.
    #[divan::bench(sample_count = 200, sample_size = 1000)]
    fn ours_import_view(bencher: Bencher) {
        let buf = Arc::new(vec![1.0f32; 4]);
        let mut raw = ManagedTensor::export(SharedOurs(buf))
            .unwrap()
            .into_raw()
            .unwrap();
        bencher.bench_local(|| {
            // SAFETY: `raw` is a live tensor owned here (handed back by `into_raw` each time).
            let t = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
            black_box(*t.view::<f32>().unwrap().get(&[0]).unwrap());
            raw = t.into_raw().unwrap();
        });
        // SAFETY: `raw` is still owned here; this frees it.
        drop(unsafe { ManagedTensor::from_raw(raw) }.unwrap());
    }

    /// dlpark: `from_raw` -> `validate` -> `cpu_slice` -> read -> `into_raw`.
    #[divan::bench(sample_count = 200, sample_size = 1000)]
    fn dlpark_import_view(bencher: Bencher) {
        let buf = Arc::new(vec![1.0f32; 4]);
        let mut raw = dlpack_bench::dlpark_shared(&buf).into_raw();
        bencher.bench_local(|| {
            // SAFETY: `raw` is a live tensor owned here (handed back by `into_raw` each time).
            let t = unsafe { versioned::Dlpack::from_raw(black_box(raw)) }.unwrap();
            let checked = t.validate().unwrap();
            // SAFETY: the tensor describes the live, initialised, read-only buffer of `buf`.
            black_box(unsafe { checked.cpu_slice::<f32>() }.unwrap()[0]);
            raw = t.into_raw();
        });
        // SAFETY: `raw` is still owned here; this frees it.
        drop(unsafe { versioned::Dlpack::from_raw(raw) }.unwrap());
    }
}
