// Representations other than `packed` keep every field aligned, and the derive works with them.
// (`#[repr(transparent)]` cannot hold a buffer and a shape: every `Dims` type, even `[usize; 0]`,
// has an alignment above 1, so rustc refuses it (E0690) whether or not the struct derives.)
use dlpack_core::{DLPack, ManagedTensor};

#[derive(DLPack)]
#[repr(C)]
struct C {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 1],
}

#[derive(DLPack)]
#[repr(align(64))]
struct Aligned {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 1],
}

#[derive(DLPack)]
#[repr(C)]
#[repr(align(16))]
struct Several(#[dlpack(data)] Vec<u8>, #[dlpack(shape)] Vec<usize>);

#[derive(DLPack)]
#[repr(C, align(8))]
struct Scalar {
    #[dlpack(data)]
    value: Box<[f64]>,
    #[dlpack(shape)]
    shape: [usize; 0],
}

fn main() -> Result<(), dlpack_core::Error> {
    let c = C::try_from(ManagedTensor::export(C {
        values: vec![1.0, 2.0],
        shape: [2],
    })?)?;
    assert_eq!((c.values, c.shape), (vec![1.0, 2.0], [2]));
    let a = Aligned {
        values: vec![3.0],
        shape: [1],
    };
    let a = Aligned::try_from(ManagedTensor::export(a)?)?;
    assert_eq!((a.values, a.shape), (vec![3.0], [1]));
    let s = Several::try_from(ManagedTensor::export(Several(vec![4, 5], vec![2]))?)?;
    assert_eq!((s.0, s.1), (vec![4, 5], vec![2]));
    let scalar = Scalar {
        value: vec![6.0].into(),
        shape: [],
    };
    let tensor = ManagedTensor::export(scalar)?;
    assert!(tensor.shape().is_empty());
    let scalar = Scalar::try_from(tensor)?;
    assert_eq!(&*scalar.value, &[6.0]);
    Ok(())
}
