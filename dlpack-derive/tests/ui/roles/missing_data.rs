use dlpack_core::DLPack;

#[derive(DLPack)]
struct Matrix {
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 2],
}

fn main() {}
