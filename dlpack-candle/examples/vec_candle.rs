//! A `Vec` into candle and back out through DLPack, with no copy on the way, and the one case
//! that must copy, reported as such.
//!
//! Run: `cargo run -p dlpack-candle --example vec_candle`

use candle_core::{Storage, Tensor};
use dlpack_core::{CopyMode, CopyReason, ManagedTensor, Transfer};

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
    let (t, transfer) = dlpack_candle::into_owned(ManagedTensor::export(data)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    let t = t.reshape((3, 4))?;
    println!("Vec data            {vec_ptr:p}");
    println!("candle storage      {:p}  ({transfer:?})", storage_ptr(&t)?);
    assert_eq!(storage_ptr(&t)?, vec_ptr);

    // candle -> DLPack: a read-only view of the same memory, with candle's layout.
    let cols = t.narrow(1, 1, 2)?.t()?; // columns 1 and 2, transposed: strided, offset
    // SAFETY: nothing writes to `t`'s storage until the export comes back below.
    let dl = unsafe { dlpack_candle::into_dlpack(cols.clone()) }?;
    println!(
        "DLPack data         {:p}  (byte_offset {}), shape {:?}, strides {:?}, read-only {}",
        dl.data_ptr(),
        dl.byte_offset(),
        dl.shape(),
        dl.strides(),
        dl.is_read_only()
    );
    // The data pointer is that of the view's first element, column 1 of candle's storage.
    assert_eq!(dl.byte_offset(), 0);
    assert_eq!(
        dl.data_ptr().cast_const().cast::<f32>(),
        vec_ptr.wrapping_add(1)
    );
    assert_eq!(dl.view::<f32>()?.as_ptr(), vec_ptr.wrapping_add(1));
    let values = dl.view::<f32>()?.to_vec().unwrap();
    assert_eq!(values, cols.flatten_all()?.to_vec1::<f32>()?);
    println!("values              {values:?}");

    // DLPack -> candle again: the exported candle tensor comes back as itself.
    let (back, transfer) = dlpack_candle::into_owned(dl, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Reclaimed);
    println!(
        "back in candle      {:p}  ({transfer:?})",
        storage_ptr(&back)?
    );
    assert_eq!(storage_ptr(&back)?, vec_ptr);
    assert_eq!(back.layout(), cols.layout());

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

    // Shared memory cannot become candle storage: refused under CopyMode::Never, which gives
    // the tensor back, and copied, said so, when a copy is allowed.
    let shared: std::sync::Arc<[f32]> = vec![1.0, 2.0].into();
    let address = shared.as_ptr();
    let refused = match dlpack_candle::into_owned(ManagedTensor::export(shared)?, CopyMode::Never) {
        Ok(_) => return Err("shared memory cannot move into candle".into()),
        Err(refused) => refused,
    };
    println!("with CopyMode::Never: {}", refused.error);
    let (copied, transfer) = dlpack_candle::into_owned(refused.value, CopyMode::IfNeeded)?;
    assert_eq!(transfer, Transfer::Copied(CopyReason::NotOwned));
    println!("Arc<[f32]> data     {address:p}");
    println!(
        "copied storage      {:p}  ({transfer:?})",
        storage_ptr(&copied)?
    );
    assert_ne!(storage_ptr(&copied)?, address);
    Ok(())
}
