use dlpack_core::DLPack;

#[derive(DLPack)]
#[dlpack(read_only = true, export_only(yes))]
struct Matrix {
    #[dlpack(data = "values")]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn main() {}
