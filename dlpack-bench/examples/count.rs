//! One operation repeated `n` times, for counting instructions under callgrind, where the count
//! per iteration is exact and does not depend on what else the machine runs (divan's timings in
//! `vs_dlpark` and `dlpack-core/benches/roundtrip.rs` do).
//!
//! ```sh
//! cargo build --profile bench -p dlpack-bench --example count
//! valgrind --tool=callgrind target/release/examples/count round-trip 100000
//! valgrind --tool=callgrind target/release/examples/count round-trip 200000
//! ```
//!
//! The difference of two runs with different `n` divided by the difference of the `n`s is the
//! cost of one iteration, without the program's start-up. The operations:
//!
//! - `round-trip`: a `Vec<f32>` of 4 elements -> `export_raw` -> `from_raw` -> typed view -> read
//!   one element -> `reclaim` (the `round_trip` bench of dlpack-core);
//! - `round-trip-owner`: the same with `ManagedTensor::export` and `into_raw` on the export side
//!   (the `round_trip_via_owner` bench);
//! - `box-new-drop`: `Box::new` of 16 bytes and its drop, the yardstick;
//! - `export-drop`, `export-raw-delete`, `dlpark-export-drop`: one export of the same shared
//!   1-d `f32` buffer, dropped at once (to the validated owner; `export_raw` then the deleter, as
//!   a C consumer calls it; dlpark's `finish`);
//! - `view-import-N`, `dlpark-view-import-N` for N = 1, 2, 4 or 8: the `view_import` bench of
//!   `vs_dlpark` (`from_raw` -> `ArrayViewD<f32>` -> first element -> `into_raw`, shape `[2; N]`).
//!
//! Also prints the wall time per iteration (meaningful outside valgrind only).

use std::hint::black_box;
use std::sync::Arc;

use dlpack_bench::{SharedOurs, dlpark_shared};
use dlpack_core::ManagedTensor;
use dlpack_core::ffi::DLManagedTensorVersioned;
use dlpack_ndarray::{into_dlpack, view};
use dlpark::{TryFromDlpack, allocation::dynamic, versioned};
use ndarray::{ArrayD, ArrayViewD, IxDyn};

/// What the operations work on.
struct State {
    shared: Arc<Vec<f32>>,
    vec: Vec<f32>,
    /// A tensor of shape `[2; ndim]` exported by this workspace, and the same by dlpark.
    ours: *mut DLManagedTensorVersioned,
    theirs: *mut dlpark::ffi::DLManagedTensorVersioned,
}

#[inline(never)]
fn view_import(s: &mut State) {
    // SAFETY: `s.ours` is a live tensor owned here (handed back by `into_raw` each time).
    let t = unsafe { ManagedTensor::from_raw(black_box(s.ours)) }.unwrap();
    black_box(view::<f32, IxDyn>(&t).unwrap().first());
    s.ours = t.into_raw().unwrap();
}

#[inline(never)]
fn dlpark_view_import(s: &mut State) {
    // SAFETY: `s.theirs` is a live tensor owned here (handed back by `into_raw` each time).
    let t = unsafe { versioned::Dlpack::from_raw(black_box(s.theirs)) }.unwrap();
    // SAFETY: the tensor describes the live array it owns.
    black_box(
        unsafe { ArrayViewD::<f32>::try_from_dlpack(&t, ()) }
            .unwrap()
            .first(),
    );
    s.theirs = t.into_raw();
}

#[inline(never)]
fn round_trip(s: &mut State) {
    let raw = ManagedTensor::export_raw(std::mem::take(&mut s.vec)).unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let t = unsafe { ManagedTensor::from_raw(black_box(raw.as_ptr())) }.unwrap();
    black_box(*t.view::<f32>().unwrap().get(&[0]).unwrap());
    s.vec = t.reclaim().unwrap();
}

#[inline(never)]
fn round_trip_owner(s: &mut State) {
    let v = std::mem::take(&mut s.vec);
    let raw = ManagedTensor::export(v).unwrap().into_raw().unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let t = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
    black_box(*t.view::<f32>().unwrap().get(&[0]).unwrap());
    s.vec = t.reclaim().unwrap();
}

#[inline(never)]
fn box_new_drop(_: &mut State) {
    drop(black_box(Box::new(black_box([1.0f32; 4]))));
}

#[inline(never)]
fn export_drop(s: &mut State) {
    drop(black_box(ManagedTensor::export(SharedOurs(Arc::clone(
        &s.shared,
    )))));
}

#[inline(never)]
fn export_raw_delete(s: &mut State) {
    let raw = black_box(ManagedTensor::export_raw(SharedOurs(Arc::clone(&s.shared))).unwrap());
    // SAFETY: `raw` was just exported and is owned here; its deleter frees it once.
    unsafe { (raw.as_ref().deleter.unwrap())(raw.as_ptr()) };
}

#[inline(never)]
fn dlpark_export_drop(s: &mut State) {
    drop(black_box(dlpark_shared(&s.shared)));
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: count (round-trip|round-trip-owner|box-new-drop|export-drop|export-raw-delete|dlpark-export-drop|view-import-N|dlpark-view-import-N) ITERATIONS";
    let which = args.next().ok_or(usage)?;
    let n: u64 = args.next().and_then(|n| n.parse().ok()).ok_or(usage)?;
    let (op, ndim) = match which.rsplit_once('-') {
        Some((op, ndim)) if op.ends_with("view-import") => (op, ndim.parse().map_err(|_| usage)?),
        _ => (which.as_str(), 1),
    };
    let f: fn(&mut State) = match op {
        "view-import" => view_import,
        "dlpark-view-import" => dlpark_view_import,
        "round-trip" => round_trip,
        "round-trip-owner" => round_trip_owner,
        "box-new-drop" => box_new_drop,
        "export-drop" => export_drop,
        "export-raw-delete" => export_raw_delete,
        "dlpark-export-drop" => dlpark_export_drop,
        _ => return Err(usage.into()),
    };
    let array = || ArrayD::<f32>::ones(IxDyn(&vec![2; ndim]));
    let theirs: dynamic::Initialized<dlpark::ffi::DLManagedTensorVersioned> =
        Box::new(array()).try_into().map_err(|e| format!("{e:?}"))?;
    let mut state = State {
        shared: Arc::new(vec![1.0f32; 4]),
        vec: vec![1.0f32; 4],
        ours: into_dlpack(array())
            .map_err(|refused| refused.error)
            .and_then(ManagedTensor::into_raw)
            .map_err(|e| e.to_string())?,
        // SAFETY: dlpark's ndarray conversion filled in every field.
        theirs: unsafe { theirs.finish() }.into_raw(),
    };
    let start = std::time::Instant::now();
    for _ in 0..n {
        f(&mut state);
    }
    let per = start.elapsed().as_nanos() as f64 / n.max(1) as f64;
    println!("{which}: {n} iterations, {per:.1} ns each");
    // SAFETY: both tensors are still owned here; this frees them.
    unsafe {
        drop(ManagedTensor::from_raw(state.ours));
        drop(versioned::Dlpack::from_raw(state.theirs));
    }
    Ok(())
}
