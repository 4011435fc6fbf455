use dlpack_core::DLPack;

#[derive(DLPack)]
#[dlpack(read_only export_only)]
struct MissingComma {
    #[dlpack(data shape)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[derive(DLPack)]
#[dlpack(crate)]
struct CrateWithoutValue {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[derive(DLPack)]
#[dlpack(,)]
struct StrayComma {
    #[dlpack(data,, strides)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[derive(DLPack)]
#[dlpack("read_only")]
struct Literal {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(self::shape)]
    shape: Vec<usize>,
}

fn main() {}
