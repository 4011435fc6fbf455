//! No candle call ever waits for an export: an export holds no lock on candle's storage past
//! the call that makes it, so candle's in-place writers, and further exports, finish while
//! exports live, on any thread.
//!
//! Each call that could block runs on a spawned thread and is waited for with a timeout
//! (`finishes`): a regression fails the test instead of hanging the run, and the blocked thread
//! does not keep the test process from exiting.

mod common;

use std::time::Duration;

use candle_core::{CpuStorage, Device, Layout, Tensor, Var};
use common::{finishes, lend, storage_address};
use dlpack_candle::to_dlpack;

type Result = std::result::Result<(), Box<dyn std::error::Error>>;

#[test]
fn candle_writes_in_place_finish_while_an_export_lives() -> Result {
    let t = Tensor::arange(1f32, 5., &Device::Cpu)?;
    let dl = to_dlpack(&t)?;
    let writer = t.clone();
    finishes("zero_set while an export lives", move || writer.zero_set())?;
    let (writer, src) = (t.clone(), Tensor::new(&[7f32, 8.], &Device::Cpu)?);
    finishes("slice_set while an export lives", move || {
        writer.slice_set(&src, 0, 1)
    })?;
    assert_eq!(t.to_vec1::<f32>()?, [0.0, 7.0, 8.0, 0.0]);
    assert_eq!(dl.view::<f32>()?.to_vec().unwrap(), [1.0, 2.0, 3.0, 4.0]);

    let var = Var::new(&[1i64, 2, 3], &Device::Cpu)?;
    let dl = to_dlpack(var.as_tensor())?;
    let (writer, src) = (var.clone(), Tensor::new(&[4i64, 5, 6], &Device::Cpu)?);
    finishes("Var::set while an export lives", move || writer.set(&src))?;
    assert_eq!(var.to_vec1::<i64>()?, [4, 5, 6]);
    assert_eq!(dl.view::<i64>()?.to_vec().unwrap(), [1, 2, 3]);
    Ok(())
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the writer and the second export run at once and may meet on candle's lock; a contended parking_lot lock parks the thread, and parking_lot_core casts integers to pointers, which -Zmiri-strict-provenance refuses"
)]
fn a_second_export_finishes_while_a_writer_waits_for_the_storage() -> Result {
    let t = Tensor::arange(0u32, 6, &Device::Cpu)?;
    let first = to_dlpack(&t)?;
    let writer = {
        let t = t.clone();
        std::thread::spawn(move || t.one_set())
    };
    // Let the writer reach the storage's lock. Were the first export holding it, the writer
    // would queue there, and the second export, a fair reader, would queue behind the writer
    // while this thread holds the first: a deadlock.
    std::thread::sleep(Duration::from_millis(200));
    let view = t.reshape((2, 3))?.t()?;
    let second = finishes("a second export while a writer is queued", move || {
        to_dlpack(&view)
    })?;
    finishes("the writer", move || writer.join()).expect("writer panicked")?;
    assert_eq!(t.to_vec1::<u32>()?, [1; 6]);
    assert_eq!(first.view::<u32>()?.to_vec().unwrap(), [0, 1, 2, 3, 4, 5]);
    let second = second.to_vec::<u32>()?;
    assert!(
        second == [0, 3, 1, 4, 2, 5] || second == [1; 6],
        "{second:?}"
    );
    Ok(())
}

/// An in-place op that takes candle's write lock on a storage and changes nothing: it shows
/// whether anything holds the lock without writing memory a lent export reads.
struct Touch;

impl candle_core::InplaceOp1 for Touch {
    fn name(&self) -> &'static str {
        "touch"
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout) -> candle_core::Result<()> {
        Ok(())
    }
}

#[test]
fn a_lent_export_holds_no_lock_on_candles_storage() -> Result {
    let t = Tensor::arange(0f64, 4., &Device::Cpu)?;
    let dl = lend(&t)?;
    let again = lend(&t.narrow(0, 1, 2)?)?;
    let touched = t.clone();
    finishes("candle's write lock while lent", move || {
        touched.inplace_op1(&Touch)
    })?;
    assert_eq!(dl.view::<f64>()?.as_ptr().addr(), storage_address(&t));
    assert_eq!(dl.to_vec::<f64>()?, [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(again.to_vec::<f64>()?, [1.0, 2.0]);
    Ok(())
}

#[test]
fn exports_move_to_and_drop_on_another_thread() -> Result {
    let t = Tensor::arange(0i64, 4, &Device::Cpu)?;
    let (lent, copied) = (lend(&t)?, to_dlpack(&t)?);
    let sums = std::thread::spawn(move || {
        let sum = |dl: &dlpack_core::ManagedTensor| dl.to_vec::<i64>().map(|v| v.iter().sum());
        (sum(&lent), sum(&copied))
    })
    .join()
    .expect("reader thread panicked");
    assert_eq!((sums.0?, sums.1?), (6i64, 6i64));
    t.zero_set()?; // both exports are gone
    assert_eq!(t.to_vec1::<i64>()?, [0; 4]);
    Ok(())
}

#[test]
fn several_lent_exports_of_one_storage_live_together_while_candle_reads() -> Result {
    let t = Tensor::arange(0u32, 6, &Device::Cpu)?.reshape((2, 3))?;
    let first = lend(&t)?;
    let second = lend(&t.t()?)?;
    let sum = (&t + &t)?; // candle reads the storage and makes a new tensor
    assert_eq!(sum.to_vec2::<u32>()?, [[0, 2, 4], [6, 8, 10]]);
    assert_eq!(second.view::<u32>()?.get(&[2, 1]), Some(&5));
    assert_eq!(first.view::<u32>()?.get(&[1, 2]), Some(&5));
    drop((first, second));
    t.one_set()?;
    assert_eq!(t.to_vec2::<u32>()?, [[1; 3]; 2]);
    Ok(())
}
