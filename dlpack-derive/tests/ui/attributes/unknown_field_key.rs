use dlpack_core::DLPack;

#[derive(DLPack)]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
    #[dlpack(stride)]
    strides: Vec<isize>,
    #[dlpack(elements(f32))]
    other: Vec<isize>,
}

fn main() {}
