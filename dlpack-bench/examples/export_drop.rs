//! `n` exports of the same shared 1-d `f32` buffer, each dropped at once, by one library (`ours`:
//! to the validated owner, then dropped; `ours-raw`: `export_raw`, then the deleter): the
//! program to count under callgrind, where instructions per export are exact and do not depend
//! on what else the machine runs (divan's timings in `vs_dlpark` do).
//!
//! ```sh
//! cargo build --profile bench -p dlpack-bench --example export_drop
//! valgrind --tool=callgrind target/release/examples/export_drop ours 100000
//! valgrind --tool=callgrind target/release/examples/export_drop dlpark 100000
//! ```
//!
//! The difference of two runs with different `n` divided by the difference of the `n`s is the
//! cost of one export -> drop, without the program's start-up. Also prints the wall time per
//! iteration (meaningful outside valgrind only).

use std::hint::black_box;
use std::sync::Arc;

use dlpack_bench::{SharedOurs, dlpark_shared};
use dlpack_core::ManagedTensor;

#[inline(never)]
fn ours(buf: &Arc<Vec<f32>>) {
    drop(black_box(ManagedTensor::export(SharedOurs(Arc::clone(
        buf,
    )))));
}

#[inline(never)]
fn ours_raw(buf: &Arc<Vec<f32>>) {
    let raw = black_box(ManagedTensor::export_raw(SharedOurs(Arc::clone(buf))).unwrap());
    // SAFETY: `raw` was just exported and is owned here; its deleter frees it once.
    unsafe { (raw.as_ref().deleter.unwrap())(raw.as_ptr()) };
}

#[inline(never)]
fn dlpark(buf: &Arc<Vec<f32>>) {
    drop(black_box(dlpark_shared(buf)));
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: export_drop (ours|ours-raw|dlpark) ITERATIONS";
    let which = args.next().ok_or(usage)?;
    let n: u64 = args.next().and_then(|n| n.parse().ok()).ok_or(usage)?;
    let f: fn(&Arc<Vec<f32>>) = match which.as_str() {
        "ours" => ours,
        "ours-raw" => ours_raw,
        "dlpark" => dlpark,
        _ => return Err(usage.into()),
    };
    let buf = Arc::new(vec![1.0f32; 4]);
    let start = std::time::Instant::now();
    for _ in 0..n {
        f(&buf);
    }
    let per = start.elapsed().as_nanos() as f64 / n.max(1) as f64;
    println!("{which}: {n} exports, {per:.1} ns each");
    Ok(())
}
