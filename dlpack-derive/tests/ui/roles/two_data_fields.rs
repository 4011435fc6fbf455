use dlpack_core::DLPack;

#[derive(DLPack)]
struct Complex {
    #[dlpack(data)]
    re: Vec<f32>,
    #[dlpack(data)]
    im: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn main() {}
