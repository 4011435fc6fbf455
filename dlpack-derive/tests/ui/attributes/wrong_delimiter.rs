use dlpack_core::DLPack;

#[derive(DLPack)]
#[dlpack[read_only]]
struct Brackets {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[derive(DLPack)]
struct Braces {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack{shape}]
    shape: Vec<usize>,
}

fn main() {}
