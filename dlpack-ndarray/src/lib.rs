//! ndarray <-> DLPack: hand ndarray arrays to any DLPack consumer (NumPy, PyTorch, JAX, candle,
//! nalgebra, C) without copying them, and work on tensors from any DLPack producer as ordinary
//! ndarray views, as safely as on native arrays. (candle's storage must own a row-major `Vec`:
//! `dlpack-candle` takes an owned standard-layout `Array` without a copy and copies any other.)
//!
//! ```
//! use dlpack_core::{CopyMode, ManagedTensor, Transfer};
//! use dlpack_ndarray::{into_dlpack, into_owned, view, view_mut};
//! use ndarray::{array, s, ArrayView2, Ix2};
//!
//! // Export: the array moves into the tensor. One small allocation, no copy of the elements.
//! let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
//! let address = a.as_ptr();
//! let raw = into_dlpack(a)?.into_raw()?; // a DLManagedTensorVersioned* for C or Python
//!
//! // Import: dlpack-core validates the tensor once; the view is ndarray's own type.
//! // SAFETY: `raw` is a live tensor that we own.
//! let mut tensor = unsafe { ManagedTensor::from_raw(raw)? };
//! let v: ArrayView2<f32> = view(&tensor)?;
//! assert_eq!(v.as_ptr(), address); // the same memory
//! assert_eq!(v.slice(s![.., ..;-1]), array![[3.0, 2.0, 1.0], [6.0, 5.0, 4.0]]);
//!
//! // Write through a mutable view, then take the original array back, still without a copy.
//! view_mut::<f32, Ix2>(&mut tensor)?[[0, 0]] = 10.0;
//! let (back, transfer) = into_owned::<f32, Ix2>(tensor, CopyMode::Never)?;
//! assert_eq!((back.as_ptr(), transfer), (address, Transfer::Reclaimed));
//! assert_eq!(back[[0, 0]], 10.0);
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # The verbs
//!
//! The same free functions, with the same meanings, as every adapter of the workspace
//! (`dlpack-nalgebra`, `dlpack-candle`):
//!
//! | verb | from -> to | copies? |
//! |---|---|---|
//! | [`into_dlpack`] | [`Array<T, D>`](ndarray::Array) (writable) or [`ArcArray<T, D>`](ndarray::ArcArray) (read-only) -> [`ManagedTensor`](dlpack_core::ManagedTensor); a refusal gives the array back | never |
//! | [`to_dlpack`] | `&` any array or view -> a C-order copy, flagged `IS_COPIED` | always |
//! | `unsafe` [`export_view`] / [`export_view_mut`] | `&` / `&mut` any array or view -> a read-only / writable tensor over its memory; the caller vouches for the borrow | never |
//! | [`view`] | `&`[`CheckedTensor`](dlpack_core::CheckedTensor) -> [`ArrayView<T, D>`](ndarray::ArrayView) | never |
//! | [`view_mut`] | `&mut` [`ManagedTensor`](dlpack_core::ManagedTensor) or [`BorrowedTensor`](dlpack_core::BorrowedTensor) -> [`ArrayViewMut<T, D>`](ndarray::ArrayViewMut) | never |
//! | [`into_owned`] | [`ManagedTensor`](dlpack_core::ManagedTensor) -> [`Array<T, D>`](ndarray::Array) and the [`Transfer`](dlpack_core::Transfer): reclaimed, moved (the producer's `Vec`), or copied as the [`CopyMode`](dlpack_core::CopyMode) allows; a refusal gives the tensor back | when it must, or when asked |
//!
//! Two more, for what the verbs do not cover: [`ImportedArray<T, D>`] owns an imported tensor
//! and lends views of it without checking again (return it from a function), and [`to_owned`]
//! copies a tensor held by reference (a [`BorrowedTensor`](dlpack_core::BorrowedTensor)) into
//! an `Array`.
//!
//! Any layout ndarray can hold goes out as it is: C or Fortran order, sliced with steps, negative
//! strides (DLPack allows them), 0-d, size 0. The data pointer is the array's first element.
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

pub use export::{
    ExportableArray, OwnedArray, SharedArray, export_view, export_view_mut, into_dlpack, to_dlpack,
};
pub use import::{ImportedArray, into_owned, to_owned, view, view_mut};

/// The dlpack-core this crate is built on, for its types ([`ManagedTensor`](dlpack_core::ManagedTensor),
/// [`Error`](dlpack_core::Error), [`CopyMode`](dlpack_core::CopyMode), ...) at the matching
/// version.
pub use dlpack_core;
/// The ndarray this crate is built on, at the matching version.
pub use ndarray;
