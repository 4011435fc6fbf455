use dlpack_core::{DLPack, Device};

#[derive(DLPack)]
#[dlpack(device = Device::CPU)]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
    #[dlpack(device)]
    device: Device,
}

#[derive(DLPack)]
#[dlpack(device)]
struct NoValue {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn main() {}
