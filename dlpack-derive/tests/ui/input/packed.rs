use dlpack_core::DLPack;

#[derive(DLPack)]
#[repr(packed)]
struct Packed {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 2],
}

#[derive(DLPack)]
#[repr(C, packed(2))]
struct PackedTo2 {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 2],
}

#[derive(DLPack)]
#[repr(C)]
#[repr(packed(4))]
struct Tuple(#[dlpack(data)] Vec<f32>, #[dlpack(shape)] Vec<usize>);

fn main() {}
