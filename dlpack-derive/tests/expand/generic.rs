/// A tensor of any element type with `N` dimensions, strides and a device.
#[derive(DLPack)]
#[dlpack(crate = "tensors", read_only)]
struct Tensor<T: Element, const N: usize>
where
    T: Copy,
{
    #[dlpack(data)]
    data: Box<[T]>,
    #[dlpack(shape)]
    shape: [usize; N],
    #[dlpack(strides)]
    strides: [isize; N],
    #[dlpack(byte_offset)]
    offset: u64,
    #[dlpack(device)]
    device: Device,
}
