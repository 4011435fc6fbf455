// The import builds the struct: a field without a role needs `Default`, unless the struct is
// `#[dlpack(export_only)]`.
use dlpack_core::DLPack;

struct Handle(u32);

#[derive(DLPack)]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 2],
    handle: Handle,
}

fn main() {}
