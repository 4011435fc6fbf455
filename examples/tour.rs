//! A tour of the workspace: tensors cross the DLPack boundary and come back without a copy,
//! shown by pointer identity at every step.
//!
//! Run: `cargo run --example tour`

use dlpack_core::{DataType, Device, Error, Export, ExportDesc, ManagedTensor};

/// A user's own matrix type: row-major storage, exportable by implementing `Export`.
struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
}

// SAFETY: `describe` reports the Vec's own buffer of rows * cols initialised f32s, which is
// writable and stays in place while the Matrix is alive.
unsafe impl Export for Matrix {
    fn ndim(&self) -> usize {
        2
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&[self.rows as i64, self.cols as i64]);
        strides.copy_from_slice(&[self.cols as i64, 1]);
        ExportDesc::host(self.data.as_mut_ptr())
    }
}

fn same(a: *const f32, b: *const f32) -> &'static str {
    assert_eq!(a, b, "zero copy means the same address");
    "same memory"
}

fn main() -> Result<(), Error> {
    println!("DLPack {} tour\n", dlpack_core::Version::CURRENT);

    // 1. A Vec goes out as a DLManagedTensorVersioned* and comes back.
    let data: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let original = data.as_ptr();
    let raw = ManagedTensor::export(data)?.into_raw()?;
    println!("1. Vec<f32> exported as DLManagedTensorVersioned* {raw:p}");
    // SAFETY: `raw` is a live tensor we own, as a C consumer would after receiving it.
    let tensor = unsafe { ManagedTensor::from_raw(raw)? };
    let view = tensor.view::<f32>()?;
    println!(
        "   imported: {} {} shape {:?}; data {:p} vs original {:p}: {}",
        tensor.device(),
        tensor.dtype(),
        tensor.shape(),
        view.as_ptr(),
        original,
        same(view.as_ptr(), original)
    );
    let back: Vec<f32> = tensor.reclaim().expect("exported from a Vec<f32>");
    println!(
        "   reclaimed the Vec: {:p}: {}\n",
        back.as_ptr(),
        same(back.as_ptr(), original)
    );

    // 2. A user type with its own layout, viewed and written in place.
    let m = Matrix {
        rows: 3,
        cols: 4,
        data: back,
    };
    let mut tensor = ManagedTensor::export(m)?;
    {
        let mut view = tensor.view_mut::<f32>()?;
        *view.get_mut(&[2, 3]).expect("in bounds") = 100.0;
    }
    let view = tensor.view::<f32>()?;
    println!(
        "2. Matrix 3x4 exported: strides {:?}, [2, 3] = {} written through a mutable view at {:p}: {}",
        view.strides(),
        view.get(&[2, 3]).expect("in bounds"),
        view.as_ptr(),
        same(view.as_ptr(), original)
    );
    let m: Matrix = tensor
        .reclaim()
        .map_err(|_| Error::ReadOnly)
        .expect("exported from a Matrix");
    println!(
        "   reclaimed the Matrix: {:p}: {}\n",
        m.data.as_ptr(),
        same(m.data.as_ptr(), original)
    );

    // 3. A legacy DLManagedTensor for consumers that predate DLPack 1.0.
    let legacy = ManagedTensor::export_legacy(m.data)?.into_raw_legacy()?;
    // SAFETY: `legacy` is a live legacy tensor we own.
    let tensor = unsafe { ManagedTensor::from_raw_legacy(legacy)? };
    let view = tensor.view::<f32>()?;
    println!(
        "3. legacy DLManagedTensor* {legacy:p}: data {:p}: {}",
        view.as_ptr(),
        same(view.as_ptr(), original)
    );

    // 4. A copy, when one is wanted, is explicit: the strided gather makes a new buffer.
    let copy = tensor.to_vec::<f32>()?;
    println!(
        "4. to_vec made a copy at {:p} (a new buffer, as asked)\n",
        copy.as_ptr()
    );
    assert_ne!(copy.as_ptr(), original);

    // 5. Bad input is an error, never undefined behaviour.
    let err = tensor.view::<f64>().unwrap_err();
    println!("5. viewing float32 data as f64: error: {err}");
    assert_eq!(
        err,
        Error::DataTypeMismatch {
            found: DataType::F32,
            expected: DataType::F64
        }
    );
    assert_eq!(tensor.device(), Device::CPU);

    println!("\nevery step above shared one buffer at {original:p}");
    Ok(())
}
