use dlpack_core::DLPack;

#[derive(DLPack)]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    shape: [usize; 2],
}

fn main() {}
