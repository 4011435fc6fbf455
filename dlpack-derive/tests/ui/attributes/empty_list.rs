use dlpack_core::DLPack;

#[derive(DLPack)]
#[dlpack()]
struct OnTheStruct {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[derive(DLPack)]
#[dlpack(read_only)]
struct OnAField {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
    #[dlpack()]
    name: String,
}

#[derive(DLPack)]
struct OnATupleField(
    #[dlpack(data)] Vec<f32>,
    #[dlpack(shape)] Vec<usize>,
    #[dlpack()] u8,
);

fn main() {}
