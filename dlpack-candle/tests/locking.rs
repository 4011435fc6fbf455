//! The read lock an export holds: candle's in-place writers wait for it, and it is released
//! exactly when the export is dropped, on whatever thread.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use candle_core::{Device, Tensor};
use common::finishes;
use dlpack_candle::export;

type Result = std::result::Result<(), Box<dyn std::error::Error>>;

#[test]
#[cfg_attr(
    miri,
    ignore = "a contended parking_lot lock parks the thread, and parking_lot_core casts integers to pointers, which -Zmiri-strict-provenance refuses"
)]
fn a_candle_writer_waits_until_the_export_is_dropped() -> Result {
    let t = Tensor::arange(1f32, 5., &Device::Cpu)?;
    let dl = export(&t)?;
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (t, done) = (t.clone(), done.clone());
        std::thread::spawn(move || {
            let result = t.zero_set();
            done.store(true, Ordering::SeqCst);
            result
        })
    };
    // Give the writer ample time to reach the lock; it must still be waiting, and the exported
    // memory must be unchanged.
    std::thread::sleep(Duration::from_millis(200));
    assert!(!done.load(Ordering::SeqCst), "zero_set ran while exported");
    assert_eq!(dl.view::<f32>()?.to_vec(), [1.0, 2.0, 3.0, 4.0]);
    drop(dl);
    let joined = finishes("the writer, once the export is dropped", move || {
        writer.join()
    });
    joined.expect("writer thread panicked")?;
    assert_eq!(t.to_vec1::<f32>()?, [0.0; 4]);
    Ok(())
}

#[test]
fn an_export_dropped_on_another_thread_releases_the_lock() -> Result {
    let t = Tensor::arange(0i64, 4, &Device::Cpu)?;
    let dl = export(&t)?;
    std::thread::spawn(move || drop(dl))
        .join()
        .expect("drop thread panicked");
    let t2 = t.clone();
    finishes("zero_set after the export was dropped", move || {
        t2.zero_set()
    })?;
    assert_eq!(t.to_vec1::<i64>()?, [0; 4]);
    Ok(())
}

#[test]
fn readers_go_on_while_exported_and_several_exports_share_the_lock() -> Result {
    let t = Tensor::arange(0u32, 6, &Device::Cpu)?.reshape((2, 3))?;
    let first = export(&t)?;
    let second = export(&t.t()?)?; // a second read lock on the same storage
    let sum = (&t + &t)?; // candle reads the storage and makes a new tensor
    assert_eq!(sum.to_vec2::<u32>()?, [[0, 2, 4], [6, 8, 10]]);
    assert_eq!(second.view::<u32>()?.get(&[2, 1]), Some(&5));
    drop(first);
    drop(second);
    let t2 = t.clone();
    finishes("one_set after both exports were dropped", move || {
        t2.one_set()
    })?;
    assert_eq!(t.to_vec2::<u32>()?, [[1; 3]; 2]);
    Ok(())
}
