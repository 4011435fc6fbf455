// Generic element types, const-generic shapes, generic buffers and where clauses.
use dlpack_core::{Buffer, DLPack, Dims, Element, ManagedTensor};

#[derive(DLPack)]
struct Tensor<T: Element> {
    #[dlpack(data)]
    data: Vec<T>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[derive(DLPack)]
struct Fixed<T, const N: usize>
where
    T: Element,
{
    #[dlpack(data)]
    data: Box<[T]>,
    #[dlpack(shape)]
    shape: [usize; N],
}

// No bounds on the struct: the impls get `B: Buffer, S: Dims` (and `M: Default` for import).
#[derive(DLPack)]
struct AnyBuffer<B, S, M> {
    #[dlpack(data)]
    buffer: B,
    #[dlpack(shape)]
    shape: S,
    meta: M,
}

fn exports<T: dlpack_core::Export>() {}
fn imports<T: TryFrom<ManagedTensor, Error = dlpack_core::Error>>() {}

fn generic_over_buffers<B: Buffer, S: Dims + Send + 'static>() {
    exports::<AnyBuffer<B, S, ()>>();
}

fn main() {
    exports::<Tensor<f32>>();
    imports::<Tensor<bool>>();
    exports::<Fixed<u8, 3>>();
    imports::<Fixed<i64, 0>>();
    exports::<AnyBuffer<Vec<f32>, [usize; 2], String>>();
    imports::<AnyBuffer<std::sync::Arc<[u8]>, Vec<i32>, Option<u8>>>();
    generic_over_buffers::<Box<[u32]>, Vec<u64>>();
}
