//! Peak resident memory of 1 000 000 export -> raw -> import -> view -> release round trips,
//! for this workspace and for dlpark: a leak of even one small block per round trip would add
//! tens of MiB, so the peak (`VmHWM` in `/proc/self/status`, Linux only) must not grow.
//!
//! Run: `cargo run --release -p dlpack-bench --example peak_rss`
//!
//! Exits with status 1 when a peak grows by more than 1 MiB over the warm-up.

use std::hint::black_box;

use dlpack_core::ManagedTensor;
use dlpack_ndarray::{into_dlpack, view};
use dlpark::{TryFromDlpack, allocation::dynamic, ffi::DLManagedTensorVersioned, versioned};
use ndarray::{Array1, ArrayViewD, Ix1};

const ROUNDS: usize = 1_000_000;
const SLACK_KIB: u64 = 1024;

/// A field of `/proc/self/status` in KiB (`VmHWM`: peak resident set, `VmRSS`: current).
fn status_kib(field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no {field} line in /proc/self/status"))
}

/// Workspace: owned `Vec<f32>` exported, imported, viewed and reclaimed.
fn ours_vec(vec: &mut Vec<f32>) {
    let v = std::mem::take(vec);
    let raw = ManagedTensor::export(v).unwrap().into_raw().unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let t = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
    black_box(*t.view::<f32>().unwrap().get(&[0]).unwrap());
    *vec = t.reclaim().unwrap();
}

/// Workspace: a new `Array1<f32>` moved in, imported, viewed and dropped (freed).
fn ours_array() {
    let raw = into_dlpack(Array1::<f32>::ones(4))
        .unwrap()
        .into_raw()
        .unwrap();
    // SAFETY: `raw` was just exported and is owned here.
    let t = unsafe { ManagedTensor::from_raw(black_box(raw)) }.unwrap();
    black_box(view::<f32, Ix1>(&t).unwrap()[0]);
}

/// dlpark: the same with its ndarray adapter.
fn dlpark_array() {
    let init: dynamic::Initialized<DLManagedTensorVersioned> =
        Box::new(Array1::<f32>::ones(4)).try_into().unwrap();
    // SAFETY: dlpark's ndarray conversion filled in every field.
    let raw = unsafe { init.finish() }.into_raw();
    // SAFETY: `raw` was just exported and is owned here.
    let t = unsafe { versioned::Dlpack::from_raw(black_box(raw)) }.unwrap();
    // SAFETY: the tensor describes the live array it owns.
    black_box(unsafe { ArrayViewD::<f32>::try_from_dlpack(&t, ()) }.unwrap()[[0]]);
}

/// Runs `f` 1000 times (warm-up), then `ROUNDS` times; prints the peaks; `true` if it grew.
fn measure(name: &str, mut f: impl FnMut()) -> Result<bool, String> {
    for _ in 0..1000 {
        f();
    }
    let (hwm0, rss0) = (status_kib("VmHWM")?, status_kib("VmRSS")?);
    for _ in 0..ROUNDS {
        f();
    }
    let (hwm1, rss1) = (status_kib("VmHWM")?, status_kib("VmRSS")?);
    let grew = hwm1 > hwm0 + SLACK_KIB;
    println!(
        "{name:<32} VmHWM {hwm0} -> {hwm1} kB (+{}), VmRSS {rss0} -> {rss1} kB{}",
        hwm1 - hwm0,
        if grew { "  GREW" } else { "" }
    );
    Ok(grew)
}

fn main() -> Result<(), String> {
    println!("{ROUNDS} round trips each, 16 B f32 tensors");
    let mut vec = vec![1.0f32; 4];
    let mut grew = measure("ours: Vec export/reclaim", || ours_vec(&mut vec))?;
    grew |= measure("ours: ndarray export/drop", ours_array)?;
    grew |= measure("dlpark: ndarray export/drop", dlpark_array)?;
    if grew {
        std::process::exit(1);
    }
    Ok(())
}
