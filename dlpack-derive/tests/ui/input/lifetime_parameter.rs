use dlpack_core::DLPack;

#[derive(DLPack)]
struct Borrowed<'a> {
    #[dlpack(data)]
    data: Vec<f32>,
    #[dlpack(shape)]
    shape: &'a [usize],
}

fn main() {}
