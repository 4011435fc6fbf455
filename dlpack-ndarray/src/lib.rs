//! ndarray <-> DLPack: hand ndarray arrays to any DLPack consumer (NumPy, PyTorch, JAX, candle,
//! nalgebra, C) without copying them, and work on tensors from any DLPack producer as ordinary
//! ndarray views, as safely as on native arrays. (candle's storage must own a row-major `Vec`:
//! `dlpack-candle` takes an owned standard-layout `Array` without a copy and copies any other.)
//!
//! ```
//! use dlpack_core::ManagedTensor;
//! use dlpack_ndarray::prelude::*;
//! use ndarray::{array, s, Array2, ArrayView2};
//!
//! // Export: the array moves into the tensor. One small allocation, no copy of the elements.
//! let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
//! let address = a.as_ptr();
//! let raw = a.into_dlpack()?.into_raw()?; // a DLManagedTensorVersioned* for C or Python
//!
//! // Import: dlpack-core validates the tensor once; the view is ndarray's own type.
//! // SAFETY: `raw` is a live tensor that we own.
//! let mut tensor = unsafe { ManagedTensor::from_raw(raw)? };
//! let view: ArrayView2<f32> = tensor.as_array_view()?;
//! assert_eq!(view.as_ptr(), address); // the same memory
//! assert_eq!(view.slice(s![.., ..;-1]), array![[3.0, 2.0, 1.0], [6.0, 5.0, 4.0]]);
//!
//! // Write through a mutable view, then take the original array back, still without a copy.
//! tensor.as_array_view_mut::<f32, ndarray::Ix2>()?[[0, 0]] = 10.0;
//! let back: Array2<f32> = tensor.into_array()?;
//! assert_eq!(back.as_ptr(), address);
//! assert_eq!(back[[0, 0]], 10.0);
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # Export
//!
//! | from | how | tensor |
//! |---|---|---|
//! | [`Array<T, D>`](ndarray::Array) | [`IntoDLPack::into_dlpack`] (the array moves in) | writable, zero copy |
//! | [`ArcArray<T, D>`](ndarray::ArcArray) | [`IntoDLPack::into_dlpack`] (one clone moves in) | read-only, zero copy |
//! | any array or view | [`ToDLPack::to_dlpack`] | a C-order copy, flagged `IS_COPIED` |
//! | [`ArrayView`](ndarray::ArrayView) / [`ArrayViewMut`](ndarray::ArrayViewMut) | `unsafe` [`export_view`] / [`export_view_mut`] | read-only / writable, zero copy; the caller vouches for the borrow |
//!
//! Any layout ndarray can hold goes out as it is: C or Fortran order, sliced with steps, negative
//! strides (DLPack allows them), 0-d, size 0. The data pointer is the array's first element.
//!
//! # Import
//!
//! | to | how |
//! |---|---|
//! | [`ArrayView<T, D>`](ndarray::ArrayView) | [`AsArray::as_array_view`], borrowing a [`CheckedTensor`](dlpack_core::CheckedTensor) |
//! | [`ArrayViewMut<T, D>`](ndarray::ArrayViewMut) | [`AsArrayMut::as_array_view_mut`], borrowing a [`ManagedTensor`](dlpack_core::ManagedTensor) or [`BorrowedTensor`](dlpack_core::BorrowedTensor) mutably |
//! | an owner that lends both | [`ImportedArray<T, D>`], which keeps the tensor alive (return it from a function) |
//! | [`Array<T, D>`](ndarray::Array) | [`IntoArray::into_array`]: reclaim without a copy when possible, otherwise a copy; [`AsArray::to_array`]: always a copy |
//!
//! `D` is any ndarray dimensionality: fixed (`Ix0` ... `Ix6`, where the tensor's ndim must match,
//! [`Error::NdimMismatch`](dlpack_core::Error::NdimMismatch) otherwise) or `IxDyn`. Negative
//! strides (NumPy's `a[::-1]`) become ndarray views with negative strides over the same memory;
//! zero strides (broadcast) become views with zero strides, read-only, since a mutable view
//! refuses strides under which two indices share an element. Every check on the foreign tensor
//! (dtype, device, alignment, span, read-only flag, overlap) is dlpack-core's; a tensor that
//! fails one is reported with a typed [`Error`](dlpack_core::Error), and its deleter still runs
//! exactly once, when its owner is dropped.
//!
//! # Features
//!
//! `half`, `num-complex` and `float8` enable dlpack-core's [`Element`](dlpack_core::Element)
//! impls for `half::{f16, bf16}`, `num_complex::Complex<f32 | f64>` and
//! `float8::{F8E4M3, F8E5M2}`, so that arrays of those types export and import too.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod export;
mod import;

pub use export::{IntoDLPack, OwnedArray, SharedArray, ToDLPack, export_view, export_view_mut};
pub use import::{AsArray, AsArrayMut, ImportedArray, IntoArray};

/// The dlpack-core this crate is built on, for its types ([`ManagedTensor`](dlpack_core::ManagedTensor),
/// [`Error`](dlpack_core::Error), ...) at the matching version.
pub use dlpack_core;
/// The ndarray this crate is built on, at the matching version.
pub use ndarray;

/// The extension traits, for `use dlpack_ndarray::prelude::*`: their methods, not their names,
/// so that the glob sits beside `use ndarray::prelude::*` (which has an `AsArray` trait of its
/// own) without an ambiguity. Name a trait through the crate root (`dlpack_ndarray::AsArray`).
///
/// ```
/// use dlpack_ndarray::prelude::*;
/// use ndarray::prelude::*;
///
/// let tensor = array![1u8, 2, 3].into_dlpack()?;
/// let view: ArrayView1<u8> = tensor.as_array_view()?;
/// assert_eq!(view, array![1, 2, 3]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub mod prelude {
    pub use crate::{
        AsArray as _, AsArrayMut as _, IntoArray as _, IntoDLPack as _, ToDLPack as _,
    };
}
