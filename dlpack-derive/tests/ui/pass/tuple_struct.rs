use dlpack_core::{DLPack, ManagedTensor};

#[derive(DLPack)]
struct Image(#[dlpack(shape)] [usize; 2], #[dlpack(data)] Vec<u8>, String);

fn main() -> Result<(), dlpack_core::Error> {
    let tensor = ManagedTensor::export(Image([2, 2], vec![0, 1, 2, 3], String::new()))?;
    let Image(shape, pixels, _) = Image::try_from(tensor)?;
    assert_eq!((shape, pixels), ([2, 2], vec![0, 1, 2, 3]));
    Ok(())
}
