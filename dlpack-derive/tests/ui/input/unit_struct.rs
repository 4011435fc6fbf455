use dlpack_core::DLPack;

#[derive(DLPack)]
struct Nothing;

fn main() {}
