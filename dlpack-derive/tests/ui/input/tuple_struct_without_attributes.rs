use dlpack_core::DLPack;

#[derive(DLPack)]
struct Image(Vec<u8>, [usize; 2]);

fn main() {}
