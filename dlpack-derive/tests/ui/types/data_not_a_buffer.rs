use dlpack_core::DLPack;

#[derive(DLPack)]
struct Text {
    #[dlpack(data)]
    text: String,
    #[dlpack(shape)]
    shape: [usize; 1],
}

#[derive(DLPack)]
struct Strings {
    #[dlpack(data)]
    words: Vec<String>,
    #[dlpack(shape)]
    shape: [usize; 1],
}

fn main() {}
