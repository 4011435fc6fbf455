use dlpack_core::DLPack;

#[derive(DLPack)]
#[dlpack(crate = "dlpack")]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn main() {}
