//! candle <-> DLPack: move candle CPU tensors in and out of DLPack without a copy, and know
//! exactly when a copy happened.
//!
//! - [`export`] hands a candle tensor to any DLPack consumer (NumPy, PyTorch, an ndarray view
//!   through `dlpack-ndarray`, ...) on candle's own memory, with the tensor's real strides and
//!   offset (after `narrow`, `transpose`, `i(..)`), flagged read-only since candle shares its
//!   storage between tensors.
//! - [`import`] makes a candle tensor from a DLPack tensor. candle's CPU storage must own a
//!   `Vec` of exactly the tensor's elements in row-major order, so the import takes the
//!   producer's `Vec` when the producer owns its elements as one, the tensor is all of it, and
//!   the layout is compact row-major (a `Vec`, a `Box<[T]>`, a derived struct over a `Vec`, a
//!   standard-layout owned ndarray `Array`, also one sliced to a prefix of its `Vec`, a nalgebra
//!   `DVector`; not a Fortran-order `Array`, one sliced past the start of its `Vec`, nor a
//!   `DMatrix` of more than one row and column, which is column-major). It gives
//!   a tensor exported from candle back as itself, and otherwise copies. The result says which
//!   ([`Transfer`]); [`CopyMode::Never`] turns the copy into an error.
//!
//! ```
//! use candle_core::{Device, Tensor};
//! use dlpack_candle::{CopyMode, Transfer};
//! use dlpack_core::ManagedTensor;
//!
//! // Vec -> candle: the Vec becomes candle's storage.
//! let data: Vec<f32> = (0..6).map(|i| i as f32).collect();
//! let address = data.as_ptr();
//! let imported = dlpack_candle::import(ManagedTensor::export(data)?, CopyMode::Never)?;
//! assert_eq!(imported.transfer, Transfer::Moved);
//! let t = imported.tensor.reshape((2, 3))?;
//!
//! // candle -> DLPack: a read-only tensor on the same memory, here transposed.
//! let dl = dlpack_candle::export(&t.t()?)?;
//! assert_eq!((dl.shape(), dl.strides()), (&[3i64, 2][..], &[1i64, 3][..]));
//! {
//!     let view = dl.view::<f32>()?;
//!     assert_eq!(view.as_ptr(), address);
//!     assert_eq!(view.get(&[2, 1]), Some(&5.0));
//! }
//!
//! // ... and back: the same candle tensor, not a copy.
//! let back = dlpack_candle::import(dl, CopyMode::Never)?;
//! assert_eq!(back.transfer, Transfer::Reclaimed);
//! assert_eq!(back.tensor.dims(), &[3, 2]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # dtypes
//!
//! Every candle CPU dtype goes both ways, with the DLPack codes listed in [`dtype`]: `F8E4M3`
//! is `float8_e4m3fn` (code 10) and `F8E8M0` is `float8_e8m0fnu` (code 14, elements typed
//! [`Float8E8M0`]). candle's `F6E2M3`, `F6E3M2` and `F4` placeholders are refused
//! ([`dtype::PLACEHOLDER_REASON`] says why). DLPack dtypes candle lacks (bool, int8, uint16,
//! uint64, complex, ...) are refused with the nearest candle dtype named in the error.
//!
//! # Devices
//!
//! CPU only: a CUDA or Metal candle tensor is refused with [`CandleError::Device`], and a
//! DLPack tensor the host cannot read fails the copy with [`dlpack_core::Error::NotHostAccessible`].
//!
//! # Memory safety of the export
//!
//! An export holds a clone of the candle tensor and a read lock on its storage until the
//! consumer drops it: candle's in-place writers wait meanwhile, so the memory can be neither
//! freed nor modified under a reader. [`CandleExport`] explains the reasoning and the one
//! consequence to know: a thread that writes in place to a tensor it is still exporting
//! waits forever.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod dtype;
mod error;
mod export;
mod import;
mod shape;

pub use dtype::{Float8E8M0, candle_dtype, dlpack_dtype};
pub use error::CandleError;
pub use export::{CandleExport, export};
pub use import::{CopyMode, CopyReason, Imported, Transfer, copy_to_candle, import};
