// Every key, on a struct that exports and imports.
#![forbid(unsafe_code)] // the derive's `unsafe impl` is its own, not the user's

use dlpack_core::{DLPack, Device, ManagedTensor};

#[derive(DLPack)]
#[dlpack(crate = "dlpack_core", read_only)]
struct Everything {
    #[dlpack(data)]
    data: Vec<u16>,
    #[dlpack(shape)]
    shape: Box<[u64]>,
    #[dlpack(strides)]
    strides: Vec<i64>,
    #[dlpack(byte_offset)]
    offset: u64,
    #[dlpack(device)]
    device: Device,
    name: String,
}

#[derive(DLPack)]
#[dlpack(device = Device::CPU, export_only)]
struct Constant {
    #[dlpack(data)]
    data: Vec<u16>,
    #[dlpack(shape)]
    shape: [i32; 1],
    handle: std::fs::File,
}

fn main() -> Result<(), dlpack_core::Error> {
    let value = Everything {
        data: vec![1, 2, 3, 4],
        shape: vec![2, 2].into_boxed_slice(),
        strides: vec![2, 1],
        offset: 0,
        device: Device::CPU,
        name: "everything".into(),
    };
    let tensor = ManagedTensor::export(value)?;
    assert!(tensor.is_read_only());
    let back = Everything::try_from(tensor)?;
    assert_eq!(back.name, "everything");
    let _: fn(Constant) -> Result<ManagedTensor, dlpack_core::Refused<Constant>> = ManagedTensor::export;
    Ok(())
}
