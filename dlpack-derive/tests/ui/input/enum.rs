use dlpack_core::DLPack;

#[derive(DLPack)]
enum Tensor {
    F32 { data: Vec<f32>, shape: Vec<usize> },
    I64 { data: Vec<i64>, shape: Vec<usize> },
}

fn main() {}
