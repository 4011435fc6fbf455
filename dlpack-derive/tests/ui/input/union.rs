use dlpack_core::DLPack;

#[derive(DLPack)]
union Bits {
    float: f32,
    int: u32,
}

fn main() {}
