//! An ndarray array into candle and back out as an ndarray view, without a copy: the data
//! pointers printed at each step are the same. Then the case that must copy, reported as such.
//!
//! Run: `cargo run --example ndarray_candle`

use candle_core::{Storage, Tensor};
use dlpack_core::{CopyMode, CopyReason, Transfer};
use ndarray::{Array2, ArrayView2, ShapeBuilder, array};

/// The address of a candle CPU f32 tensor's storage.
fn storage_ptr(t: &Tensor) -> Result<*const f32, Box<dyn std::error::Error>> {
    let (storage, _) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err("not a CPU tensor".into());
    };
    Ok(cpu.as_slice::<f32>()?.as_ptr())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ndarray -> candle: the array's Vec becomes candle's storage.
    let a: Array2<f32> = array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let array_ptr = a.as_ptr();
    let (t, transfer) =
        dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(a)?, CopyMode::Never)?;
    println!("ndarray data          {array_ptr:p}");
    println!(
        "candle storage        {:p}  ({transfer:?})",
        storage_ptr(&t)?
    );
    assert_eq!(transfer, Transfer::Moved);
    assert_eq!(storage_ptr(&t)?, array_ptr);

    // candle works on it as on any tensor.
    let gram = t.matmul(&t.t()?)?;
    println!("candle t @ t.T        {:?}", gram.to_vec2::<f32>()?);

    // candle -> ndarray: a read-only ndarray view of candle's memory, transposed in place.
    // SAFETY: nothing writes to `t`'s storage while the view lives.
    let dl = unsafe { dlpack_candle::into_dlpack(t.t()?) }?;
    let view: ArrayView2<f32> = dlpack_ndarray::view(&dl)?;
    println!(
        "ndarray view          {:p}  shape {:?}, strides {:?}",
        view.as_ptr(),
        view.shape(),
        view.strides()
    );
    assert_eq!(view.as_ptr(), array_ptr);
    assert_eq!(view, array![[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]);
    println!("{view}");

    // A column-major array cannot be candle storage as it is: it is copied, and said so.
    let f: Array2<f32> = Array2::from_shape_vec((2, 2).f(), vec![1.0, 3.0, 2.0, 4.0])?;
    let f_ptr = f.as_ptr();
    let (copied, transfer) =
        dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(f)?, CopyMode::IfNeeded)?;
    println!("column-major data     {f_ptr:p}");
    println!(
        "candle storage        {:p}  ({transfer:?})",
        storage_ptr(&copied)?
    );
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
    assert_ne!(storage_ptr(&copied)?, f_ptr);
    Ok(())
}
