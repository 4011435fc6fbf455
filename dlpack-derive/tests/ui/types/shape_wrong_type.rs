use dlpack_core::DLPack;

#[derive(DLPack)]
struct Tuple {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: (usize, usize),
}

#[derive(DLPack)]
struct Floats {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<f32>,
}

fn main() {}
