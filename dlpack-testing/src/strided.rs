//! [`StridedVec`]: a producer that exports any layout over a `Vec`, through dlpack-core's own
//! export path (which checks it against the `Vec`'s allocation).

use dlpack_core::__private::describe_buffer;
use dlpack_core::{Element, Error, Export, ExportDesc, ManagedTensor};

/// A `Vec` exported with any shape, strides (in elements) and byte offset, optionally
/// read-only: for tests of importers over layouts no array library would produce.
#[derive(Clone, Debug)]
pub struct StridedVec<T> {
    /// The elements.
    pub data: Vec<T>,
    /// The shape.
    pub shape: Vec<i64>,
    /// The strides, in elements.
    pub strides: Vec<i64>,
    /// The byte offset of the first element.
    pub offset: u64,
    /// Whether the export is flagged read-only.
    pub read_only: bool,
}

impl<T: Element> StridedVec<T> {
    /// Exports `data` with `shape` and `strides` from element `first` (writable).
    pub fn export(
        data: Vec<T>,
        shape: &[i64],
        strides: &[i64],
        first: usize,
    ) -> Result<ManagedTensor, Error> {
        Ok(ManagedTensor::export(StridedVec {
            data,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset: (first * size_of::<T>()) as u64,
            read_only: false,
        })?)
    }
}

// SAFETY: `describe_buffer` names the Vec's allocation, which the export checks the layout
// against; `ndim` is the shape's length, which nothing changes once exported.
unsafe impl<T: Element> Export for StridedVec<T> {
    fn ndim(&self) -> usize {
        self.shape.len()
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        let desc = describe_buffer(
            &mut self.data,
            &self.shape,
            Some(&self.strides),
            self.offset,
            shape,
            strides,
        );
        if self.read_only {
            desc.read_only()
        } else {
            desc
        }
    }
}
