use dlpack_core::DLPack;

#[derive(DLPack)]
#[dlpack(readonly, dtype = "float32")]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn main() {}
