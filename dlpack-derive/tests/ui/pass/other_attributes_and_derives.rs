// Other derives and attributes on the same struct and fields are left alone.
use dlpack_core::DLPack;

#[derive(DLPack, Clone, Debug, Default, PartialEq)]
#[allow(dead_code)]
pub struct Documented {
    /// The elements.
    #[dlpack(data)]
    #[allow(unused)]
    pub data: Vec<f64>,
    /// The sizes.
    #[dlpack(shape)]
    pub shape: Vec<usize>,
}

mod inner {
    #[derive(dlpack_core::DLPack)]
    pub(crate) struct Private {
        #[dlpack(data)]
        data: Vec<u8>,
        #[dlpack(shape)]
        shape: [usize; 1],
    }
}

fn main() {
    let _ = Documented::default().clone();
    let _ = core::mem::size_of::<inner::Private>();
}
