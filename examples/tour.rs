//! A tour of the workspace: tensors cross the DLPack boundary and come back without a copy,
//! shown by pointer identity at every step.
//!
//! Run: `cargo run --example tour`

use candle_core::{Storage, Tensor};
use dlpack_core::{
    CopyMode, DLPack, DataType, Device, Error, ManagedTensor, ShapedBuffer, Transfer,
};
use ndarray::{Array2, ArrayView2, ShapeBuilder};

/// A user's own matrix type: row-major storage, exportable through the safe `ShapedBuffer`
/// (the export checks the shape against the Vec).
struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
}

impl ShapedBuffer for Matrix {
    type Buffer = Vec<f32>;
    fn buffer(&mut self) -> &mut Vec<f32> {
        &mut self.data
    }
    fn ndim(&self) -> usize {
        2
    }
    fn shape(&self, shape: &mut [i64]) {
        shape.copy_from_slice(&[self.rows as i64, self.cols as i64]);
    }
}

/// A user's own image type: one derive line makes it a DLPack producer and consumer.
#[derive(DLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    hw: [usize; 2],
}

/// The address of a candle CPU f32 tensor's storage.
fn candle_storage(t: &Tensor) -> *const f32 {
    let (storage, _) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(cpu) => cpu
            .as_slice::<f32>()
            .map_or(std::ptr::null(), |s| s.as_ptr()),
        _ => std::ptr::null(),
    }
}

fn same<T>(a: *const T, b: *const T) -> &'static str {
    assert_eq!(a, b, "zero copy means the same address");
    "same memory"
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    core_tour()?;
    adapters_tour()
}

fn core_tour() -> Result<(), Error> {
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

    println!(
        "\nsteps 1 to 3 used one buffer at {original:p}; only the copy asked for in step 4 made another\n"
    );
    Ok(())
}

fn adapters_tour() -> Result<(), Box<dyn std::error::Error>> {
    // 6. A derived struct crosses into ndarray and comes back, the same pixels throughout.
    let image = Image {
        pixels: (0..12).collect(),
        hw: [3, 4],
    };
    let pixels = image.pixels.as_ptr();
    let tensor = ManagedTensor::export(image)?;
    let view: ArrayView2<u8> = dlpack_ndarray::view(&tensor)?;
    println!(
        "6. #[derive(DLPack)] Image 3x4 as an ndarray view at {:p}: {}; [2, 3] = {}",
        view.as_ptr(),
        same(view.as_ptr(), pixels),
        view[[2, 3]]
    );
    let image = Image::try_from(tensor)?;
    println!(
        "   back into the Image: {:p}: {}",
        image.pixels.as_ptr(),
        same(image.pixels.as_ptr(), pixels)
    );

    // 7. ndarray -> nalgebra: a column-major array is a nalgebra matrix view in place.
    let a = Array2::from_shape_fn((3, 2).f(), |(i, j)| (10 * i + j) as f32);
    let a_ptr = a.as_ptr();
    let tensor = dlpack_ndarray::into_dlpack(a)?;
    let m = dlpack_nalgebra::view::<nalgebra::DMatrixView<'_, f32>>(&tensor)?;
    println!(
        "7. ndarray (F order) 3x2 as a nalgebra DMatrixView at {:p}: {}; m[(2, 1)] = {}",
        m.as_ptr(),
        same(m.as_ptr(), a_ptr),
        m[(2, 1)]
    );

    // 8. ndarray -> candle: the array's Vec becomes candle's storage; and back as a view.
    let a = Array2::from_shape_fn((2, 3), |(i, j)| (10 * i + j) as f32);
    let a_ptr = a.as_ptr();
    let (t, transfer) =
        dlpack_candle::into_owned(dlpack_ndarray::into_dlpack(a)?, CopyMode::Never)?;
    assert_eq!(transfer, Transfer::Moved);
    println!(
        "8. ndarray 2x3 into a candle Tensor, storage at {:p}: {}",
        candle_storage(&t),
        same(candle_storage(&t), a_ptr)
    );
    // SAFETY: nothing writes to `t`'s storage while `back` lives.
    let back = unsafe { dlpack_candle::into_dlpack(t.t()?) }?;
    let view: ArrayView2<f32> = dlpack_ndarray::view(&back)?;
    println!(
        "   candle's transpose as an ndarray view at {:p} (strides {:?}): {}",
        view.as_ptr(),
        view.strides(),
        same(view.as_ptr(), a_ptr)
    );
    Ok(())
}
