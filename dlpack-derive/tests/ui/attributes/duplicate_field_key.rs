use dlpack_core::DLPack;

#[derive(DLPack)]
struct Matrix {
    #[dlpack(data, data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn main() {}
