use dlpack_core::DLPack;

#[derive(DLPack)]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 2],
    #[dlpack(device)]
    device: i32,
}

fn main() {}
