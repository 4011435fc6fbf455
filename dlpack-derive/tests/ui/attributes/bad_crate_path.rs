use dlpack_core::DLPack;

#[derive(DLPack)]
#[dlpack(crate = "dlpack core")]
struct Spaces {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[derive(DLPack)]
#[dlpack(crate = "Vec::<u8>")]
struct Generics {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[derive(DLPack)]
#[dlpack(crate = dlpack_core)]
struct Unquoted {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn main() {}
