//! nalgebra <-> DLPack: hand nalgebra matrices to any DLPack consumer (NumPy, PyTorch, JAX,
//! ndarray, candle, ...) without copying them, and read foreign tensors as nalgebra views that
//! are as safe as nalgebra's own.
//!
//! ```
//! use dlpack_core::{CopyMode, ManagedTensor, Transfer};
//! use nalgebra::{DMatrix, DMatrixView, DVector};
//!
//! // Export: the matrix moves into the tensor; its elements stay where they are.
//! let m = DMatrix::from_fn(3, 2, |i, j| (10 * i + j) as f64);
//! let data = m.as_ptr();
//! let raw = dlpack_nalgebra::into_dlpack(m)?.into_raw()?; // a DLManagedTensorVersioned* for C
//!
//! // Import: core validates the tensor once; the view borrows it.
//! // SAFETY: `raw` is a live tensor that we own.
//! let tensor = unsafe { ManagedTensor::from_raw(raw)? };
//! assert_eq!((tensor.shape(), tensor.strides()), (&[3, 2][..], &[1, 3][..])); // column-major
//! let view = dlpack_nalgebra::view::<DMatrixView<'_, f64>>(&tensor)?;
//! assert_eq!(view.as_ptr(), data); // the same memory
//! assert_eq!(view * DVector::from_vec(vec![1.0, 1.0]), DVector::from_vec(vec![1.0, 21.0, 41.0]));
//!
//! // Take it over: the DMatrix comes back, still without a copy.
//! let (m, transfer) = dlpack_nalgebra::into_owned::<DMatrix<f64>>(tensor, CopyMode::Never)?;
//! assert_eq!((m.as_ptr(), transfer), (data, Transfer::Reclaimed));
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # The verbs
//!
//! Every function takes or returns dlpack-core's [`ManagedTensor`](dlpack_core::ManagedTensor)
//! (or, to read one, the [`CheckedTensor`](dlpack_core::CheckedTensor) behind it), and fails with
//! [`dlpack_core::Error`]. A function that consumes a value and fails gives it back in a
//! [`Refused`](dlpack_core::Refused).
//!
//! | verb | what it does |
//! |---|---|
//! | [`into_dlpack(matrix)`](into_dlpack) | moves an owned `DMatrix`, `DVector`, `SMatrix`, ... ([`OwnedMatrix`]) into a writable tensor without a copy: shape `[rows, cols]`, nalgebra's column-major strides `[1, rows]`; 1-d for column vector types |
//! | [`to_dlpack(&matrix)`](to_dlpack) | copies any matrix or view into a new tensor that owns the copy |
//! | [`unsafe export_view(view)`](export_view), [`unsafe export_view_mut(view)`](export_view_mut) | lends a nalgebra view out without a copy, with its own strides (read-only, or writable) |
//! | [`view::<V>(&tensor)`](view()), [`view_mut::<V>(&mut tensor)`](view_mut) | a zero-copy `DMatrixView`, `DVectorView` ([`ViewTarget`]) or mutable one ([`ViewMutTarget`]) of a compact column-major tensor |
//! | [`into_owned::<M>(tensor, mode)`](into_owned) | takes a tensor over as a `DMatrix`, `DVector`, `SMatrix`, ...: [`Reclaimed`](dlpack_core::Transfer::Reclaimed) if it was exported from one, [`Moved`](dlpack_core::Transfer::Moved) if its producer hands over a `Vec` that is the matrix, [`Copied`](dlpack_core::Transfer::Copied) as the [`CopyMode`](dlpack_core::CopyMode) allows otherwise |
//!
//! and the extras of this crate:
//!
//! | extra | what it does |
//! |---|---|
//! | [`view_transposed(&tensor)`](view_transposed), [`view_transposed_mut(&mut tensor)`](view_transposed_mut) | a zero-copy view of the transpose of a compact row-major (C-order) tensor: how NumPy's and ndarray's default layout becomes a safe nalgebra view |
//! | [`view_or_copy::<V>(&tensor, mode)`](view_or_copy) | the view when there is one, a copy otherwise as the [`CopyMode`](dlpack_core::CopyMode) allows: a [`CowMatrix`] or [`CowVector`] |
//! | [`to_owned::<M>(&tensor)`](to_owned) | copies a tensor of any layout into a new matrix, leaving the tensor as it is (a [`BorrowedTensor`](dlpack_core::BorrowedTensor), say) |
//! | [`unsafe view_strided::<V>(&tensor)`](view_strided), [`unsafe view_strided_mut`](view_strided_mut) | zero-copy views with any non-negative strides, which nalgebra 0.35 mishandles in ways the caller must avoid |
//!
//! # Which layouts become views
//!
//! The safe views take compact column-major layouts only (row stride 1, column stride equal to
//! the number of rows, as a `DMatrix` stores its elements), and the transposed views compact
//! row-major ones: nalgebra 0.35's iterators and matrix products go out of bounds on every
//! other layout (the [`import`] module docs say how, and list the alternatives for each
//! layout). Empty tensors with more than 2^24 rows or columns, which nalgebra would loop over,
//! are refused by every import but the one that gives back a matrix exported as it was.
//!
//! Copies report a lack of memory as [`Error::OutOfMemory`](dlpack_core::Error::OutOfMemory)
//! rather than panicking (a broadcast tensor can describe far more elements than memory holds).
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
mod owned;

pub use export::{
    DMatrixProducer, DVectorProducer, MatrixProducer, SMatrixProducer, ViewProducer, export_view,
    export_view_mut, into_dlpack, to_dlpack,
};
pub use import::{
    CowMatrix, CowVector, StridedViewMutTarget, StridedViewTarget, ViewMutTarget, ViewTarget, view,
    view_mut, view_or_copy, view_strided, view_strided_mut, view_transposed, view_transposed_mut,
};
pub use owned::{OwnedMatrix, into_owned, to_owned};

/// The dlpack-core this crate is built on, re-exported so that versions always match.
pub use dlpack_core;
/// The nalgebra this crate is built on, re-exported so that versions always match.
pub use nalgebra;

/// The methods behind the crate's generic functions, in traits that nobody outside the crate
/// can name, so that only this crate implements the public traits built on them.
mod sealed {
    use dlpack_core::{CheckedTensor, CopyMode, Element, Error, TensorView, TensorViewMut};
    use nalgebra::Scalar;

    /// See [`crate::OwnedMatrix`].
    pub trait OwnedMatrix: Sized {
        /// The element type.
        type Elem: Element + Scalar;
        /// Whether the matrix may be built from a `Vec` in column-major order, so that a
        /// producer's `Vec` can become it without a copy.
        const TAKES_VEC: bool;
        /// Whether the type has one column at the type level (a column vector type), which
        /// exports as, and imports from, 1-d tensors only.
        fn is_vector() -> bool;
        /// The rows and columns the type fixes, if it does.
        fn fixed_shape() -> (Option<usize>, Option<usize>);
        /// The matrix of `nrows x ncols` elements in column-major order. The caller has
        /// checked the shape against [`OwnedMatrix::fixed_shape`] and `data.len()` against
        /// `nrows * ncols`.
        fn from_column_major(nrows: usize, ncols: usize, data: Vec<Self::Elem>) -> Self;
        /// Refuses a matrix whose shape or strides DLPack's `i64` cannot hold (an empty one
        /// with more than `i64::MAX` rows or columns).
        fn fits_dlpack(&self) -> Result<(), Error>;
    }

    /// See [`crate::ViewTarget`].
    pub trait ViewTarget<'a>: Sized {
        /// The element type.
        type Elem: Element;
        /// The view of core's view.
        fn view(view: TensorView<'a, Self::Elem>) -> Result<Self, Error>;
        /// The view, or a copy as `mode` allows.
        fn view_or_copy(
            tensor: &'a CheckedTensor,
            mode: CopyMode,
        ) -> Result<<Self as crate::ViewTarget<'a>>::Cow, Error>
        where
            Self: crate::ViewTarget<'a>;
    }

    /// See [`crate::ViewMutTarget`].
    pub trait ViewMutTarget<'a>: Sized {
        /// The element type.
        type Elem: Element;
        /// The view of core's mutable view, which it consumes.
        fn view_mut(view: TensorViewMut<'a, Self::Elem>) -> Result<Self, Error>;
    }

    /// See [`crate::StridedViewTarget`].
    pub trait StridedViewTarget<'a>: Sized {
        /// The element type.
        type Elem: Element;
        /// The view of core's view, with its strides.
        ///
        /// # Safety
        ///
        /// As for [`crate::view_strided`].
        unsafe fn view_strided(view: TensorView<'a, Self::Elem>) -> Result<Self, Error>;
    }

    /// See [`crate::StridedViewMutTarget`].
    pub trait StridedViewMutTarget<'a>: Sized {
        /// The element type.
        type Elem: Element;
        /// The view of core's mutable view, which it consumes, with its strides.
        ///
        /// # Safety
        ///
        /// As for [`crate::view_strided_mut`].
        unsafe fn view_strided_mut(view: TensorViewMut<'a, Self::Elem>) -> Result<Self, Error>;
    }
}
