use dlpack_core::DLPack;

#[derive(DLPack)]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape, strides)]
    shape: Vec<usize>,
}

fn main() {}
