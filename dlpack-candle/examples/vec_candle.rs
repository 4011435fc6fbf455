//! A `Vec` into candle and back out through DLPack, with no copy on the way, and the one case
//! that must copy, reported as such.
//!
//! Run: `cargo run -p dlpack-candle --example vec_candle`

use candle_core::{Storage, Tensor};
use dlpack_candle::{CopyMode, CopyReason, Transfer};
use dlpack_core::ManagedTensor;

/// The address of a candle CPU f32 tensor's storage.
fn storage_ptr(t: &Tensor) -> Result<*const f32, Box<dyn std::error::Error>> {
    let (storage, _) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err("not a CPU tensor".into());
    };
    Ok(cpu.as_slice::<f32>()?.as_ptr())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Vec -> candle: the Vec becomes candle's storage.
    let data: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let vec_ptr = data.as_ptr();
    let imported = dlpack_candle::import(ManagedTensor::export(data)?, CopyMode::Never)?;
    assert_eq!(imported.transfer, Transfer::Moved);
    let t = imported.tensor.reshape((3, 4))?;
    println!("Vec data            {vec_ptr:p}");
    println!(
        "candle storage      {:p}  ({:?})",
        storage_ptr(&t)?,
        imported.transfer
    );
    assert_eq!(storage_ptr(&t)?, vec_ptr);

    // candle -> DLPack: a read-only view of the same memory, with candle's layout.
    let cols = t.narrow(1, 1, 2)?.t()?; // columns 1 and 2, transposed: strided, offset
    // SAFETY: nothing writes to `t`'s storage until the export comes back below.
    let dl = unsafe { dlpack_candle::into_dlpack(cols.clone()) }?;
    let first = dl.view::<f32>()?.as_ptr();
    println!(
        "DLPack data         {:p}  + byte_offset {} = {first:p}, shape {:?}, strides {:?}, read-only {}",
        dl.data_ptr(),
        dl.byte_offset(),
        dl.shape(),
        dl.strides(),
        dl.is_read_only()
    );
    assert_eq!(dl.data_ptr().cast_const().cast::<f32>(), vec_ptr);
    assert_eq!(first, vec_ptr.wrapping_add(1));
    let values = dl.view::<f32>()?.to_vec().unwrap();
    assert_eq!(values, cols.flatten_all()?.to_vec1::<f32>()?);
    println!("values              {values:?}");

    // DLPack -> candle again: the exported candle tensor comes back as itself.
    let back = dlpack_candle::import(dl, CopyMode::Never)?;
    assert_eq!(back.transfer, Transfer::Reclaimed);
    println!(
        "back in candle      {:p}  ({:?})",
        storage_ptr(&back.tensor)?,
        back.transfer
    );
    assert_eq!(storage_ptr(&back.tensor)?, vec_ptr);
    assert_eq!(back.tensor.layout(), cols.layout());

    // A copy needs no promise: candle may write in place while it lives.
    let copy = dlpack_candle::to_dlpack(&cols)?;
    t.zero_set()?;
    println!(
        "DLPack copy         {:p}  shape {:?}, strides {:?}, flags {}",
        copy.data_ptr(),
        copy.shape(),
        copy.strides(),
        copy.flags()
    );
    assert_eq!(copy.to_vec::<f32>()?, values);

    // Shared memory cannot become candle storage: a copy, said so, or refused.
    let shared: std::sync::Arc<[f32]> = vec![1.0, 2.0].into();
    let copied = dlpack_candle::import(ManagedTensor::export(shared.clone())?, CopyMode::IfNeeded)?;
    assert_eq!(copied.transfer, Transfer::Copied(CopyReason::NotOwned));
    println!("Arc<[f32]> data     {:p}", shared.as_ptr());
    println!(
        "copied storage      {:p}  ({:?})",
        storage_ptr(&copied.tensor)?,
        copied.transfer
    );
    assert_ne!(storage_ptr(&copied.tensor)?, shared.as_ptr());
    let refused = dlpack_candle::import(ManagedTensor::export(shared)?, CopyMode::Never);
    println!("with CopyMode::Never: {}", refused.unwrap_err());
    Ok(())
}
