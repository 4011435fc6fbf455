//! nalgebra <-> DLPack: hand nalgebra matrices to any DLPack consumer (NumPy, PyTorch, JAX,
//! ndarray, candle, ...) without copying them, and read foreign tensors as nalgebra views that
//! are as safe as nalgebra's own.
//!
//! ```
//! use dlpack_core::ManagedTensor;
//! use nalgebra::{DMatrix, DVector};
//!
//! // Export: the matrix moves into the tensor; its elements stay where they are.
//! let m = DMatrix::from_fn(3, 2, |i, j| (10 * i + j) as f64);
//! let data = m.as_ptr();
//! let raw = dlpack_nalgebra::export(m)?.into_raw()?; // a DLManagedTensorVersioned* for C
//!
//! // Import: core validates the tensor once; the view borrows it.
//! // SAFETY: `raw` is a live tensor that we own.
//! let tensor = unsafe { ManagedTensor::from_raw(raw)? };
//! assert_eq!((tensor.shape(), tensor.strides()), (&[3, 2][..], &[1, 3][..])); // column-major
//! let view = dlpack_nalgebra::dmatrix_view(tensor.view::<f64>()?)?;
//! assert_eq!(view.as_ptr(), data); // the same memory
//! assert_eq!(view * DVector::from_vec(vec![1.0, 1.0]), DVector::from_vec(vec![1.0, 21.0, 41.0]));
//!
//! // Reclaim: the DMatrix comes back, still without a copy.
//! let m = dlpack_nalgebra::into_dmatrix::<f64>(tensor)?;
//! assert_eq!(m.as_ptr(), data);
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # Export
//!
//! - [`export()`]: an owned `DMatrix`, `DVector`, `SMatrix` (any [`OwnedMatrix`]) moves into a
//!   writable tensor inside a [`MatrixProducer`] or [`SMatrixProducer`]. Shape
//!   `[rows, cols]` with nalgebra's column-major strides `[1, rows]`; column vector types
//!   (`DVector`, `SVector`) are 1-d. [`ManagedTensor::reclaim`](dlpack_core::ManagedTensor::reclaim)
//!   with [`DMatrixProducer`], [`DVectorProducer`] or [`SMatrixProducer`] gives the matrix back;
//!   [`ManagedTensor::into_vec`](dlpack_core::ManagedTensor::into_vec) takes the `Vec` of a
//!   `DMatrix`/`DVector` when column-major order is also row-major (at most one row or column).
//! - Views: [`export_copy`] (safe, copies), or [`export_view`] (read-only tensor) and
//!   [`export_view_mut`] (writable), both `unsafe` since the tensor outlives the borrow checker's
//!   reach.
//!
//! # Import
//!
//! From core's validated [`TensorView`](dlpack_core::TensorView) /
//! [`TensorViewMut`](dlpack_core::TensorViewMut), so dtype, device, alignment, bounds,
//! read-only state and overlapping strides are already checked:
//!
//! - zero-copy safe views of compact tensors: [`dmatrix_view`], [`dmatrix_view_mut`],
//!   [`dvector_view`], [`dvector_view_mut`] for column-major data (row stride 1, column stride
//!   = rows, as a `DMatrix` stores its elements), and [`dmatrix_view_transposed`] /
//!   [`dmatrix_view_transposed_mut`] for row-major data;
//! - view or copy, the caller's choice ([`Fallback`], default: fail): [`dmatrix_cow`],
//!   [`dvector_cow`], for steps, ranges of rows, broadcasting, negative strides and the other
//!   layouts nalgebra cannot view soundly; [`CowMatrix::into_owned`] copies a view fallibly;
//! - zero-copy views with any non-negative strides, `unsafe` because nalgebra 0.35 mishandles
//!   every layout but the compact column-major one (its iterators go out of bounds from the back,
//!   or from both ends for row strides other than 1): [`dmatrix_view_strided`] (a row-major tensor
//!   gives strides `(cols, 1)`) and its siblings;
//! - owned: [`into_dmatrix`], [`into_dvector`], [`into_smatrix`] (reclaim without a copy when
//!   possible, otherwise copy), [`to_dmatrix`], [`to_dvector`] (copy any layout).
//!
//! Copies report a lack of memory as [`Error::OutOfMemory`](dlpack_core::Error::OutOfMemory)
//! rather than panicking (a broadcast tensor can describe far more elements than memory holds).
//! Empty tensors with more than 2^24 rows or columns, which nalgebra would loop over, are
//! refused. The [`import`] module docs explain which layouts become views and why.
//!
//! # Features
//!
//! | feature | adds |
//! |---|---|
//! | `half` | matrices of `half::f16` and `half::bf16` (dlpack-core's `half`) |
//! | `num-complex` | matrices of `Complex<f32>` and `Complex<f64>` (dlpack-core's `num-complex`) |
//! | `float8` | matrices of `float8::F8E4M3` and `F8E5M2` (dlpack-core's `float8`) |
//!
//! Every dlpack-core [`Element`](dlpack_core::Element) type is a nalgebra `Scalar`, so every
//! one of them works.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod export;
pub mod import;

pub use export::{
    DMatrixProducer, DVectorProducer, MatrixProducer, OwnedMatrix, SMatrixProducer, ViewProducer,
    export, export_copy, export_view, export_view_mut,
};
pub use import::{
    CowMatrix, CowVector, Fallback, dmatrix_cow, dmatrix_view, dmatrix_view_mut,
    dmatrix_view_strided, dmatrix_view_strided_mut, dmatrix_view_transposed,
    dmatrix_view_transposed_mut, dvector_cow, dvector_view, dvector_view_mut, dvector_view_strided,
    dvector_view_strided_mut, into_dmatrix, into_dvector, into_smatrix, to_dmatrix, to_dvector,
};

/// The dlpack-core this crate is built on, re-exported so that versions always match.
pub use dlpack_core;
/// The nalgebra this crate is built on, re-exported so that versions always match.
pub use nalgebra;
