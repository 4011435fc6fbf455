use dlpack_core::DLPack;

#[derive(DLPack)]
#[dlpack(data)]
struct Matrix {
    #[dlpack(data, read_only)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn main() {}
