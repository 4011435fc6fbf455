//! The workspace's foreign-producer fixture (the `dlpack-testing` crate, shared by every
//! crate's tests).
#![allow(dead_code)] // Not every test file uses every helper.

pub(crate) use dlpack_testing::*;

use dlpack_core::ffi::DLManagedTensorVersioned;

// --- helpers shared by the nalgebra tests ----------------------------------------------------

/// A foreign CPU tensor over `buffer` (the whole allocation) with the given shape, element
/// strides and offset (in elements) of the first element: any layout NumPy can produce.
pub(crate) fn strided<T: NeBytes>(
    buffer: &[T],
    shape: &[i64],
    strides: &[i64],
    offset: usize,
) -> Foreign {
    Foreign::of(buffer, shape)
        .with_strides(strides)
        .byte_offset((offset * std::mem::size_of::<T>()) as u64)
}

/// Imports a fixture tensor, which must be accepted (not deleted yet).
#[track_caller]
pub(crate) fn import(built: &Built<DLManagedTensorVersioned>) -> dlpack_core::ManagedTensor {
    // SAFETY: the fixture's block is live, well-formed (the tests only build tensors whose
    // fields describe memory inside the fixture's buffer) and handed over here exactly once.
    let tensor = unsafe { dlpack_core::ManagedTensor::from_raw(built.ptr) }
        .unwrap_or_else(|e| panic!("the tensor must be accepted: {e}"));
    assert_eq!(
        built.deletes(),
        0,
        "an accepted tensor is not deleted before it is dropped"
    );
    tensor
}

/// The address of element `offset` of the fixture buffer of `T`s.
pub(crate) fn element_addr<T, H>(built: &Built<H>, offset: usize) -> usize {
    built.buffer_addr() + offset * std::mem::size_of::<T>()
}
