use dlpack_core::DLPack;

#[derive(DLPack)]
#[dlpack(crate = "dlpack_core", read_only)]
#[dlpack(crate = "::dlpack_core", read_only)]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn main() {}
