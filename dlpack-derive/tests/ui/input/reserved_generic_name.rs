#![allow(non_camel_case_types, non_upper_case_globals)]

use dlpack_core::{DLPack, Element};

#[derive(DLPack)]
struct Reserved<__dlpack: Element, const __data: usize> {
    #[dlpack(data)]
    data: Vec<__dlpack>,
    #[dlpack(shape)]
    shape: [usize; __data],
}

fn main() {}
