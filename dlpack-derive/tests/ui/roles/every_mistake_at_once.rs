// One compile reports every mistake, each on its own span.
use dlpack_core::DLPack;

#[derive(DLPack)]
#[dlpack(crate = "dlpack core", readonly)]
struct Everything {
    #[dlpack(data)]
    a: Vec<f32>,
    #[dlpack(data)]
    b: Vec<f32>,
    #[dlpack(stride)]
    strides: Vec<isize>,
    #[dlpack(byte_offset = 4)]
    offset: usize,
}

fn main() {}
