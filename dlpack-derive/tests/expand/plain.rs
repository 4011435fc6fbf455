/// A row-major matrix of `f32`.
#[derive(DLPack)]
struct Matrix {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    dims: [usize; 2],
    name: String,
}
