//! candle <-> DLPack: candle CPU tensors, and with the feature `cuda` candle CUDA tensors, in
//! and out of DLPack, without a copy wherever that is sound, and saying when a copy happened.
//!
//! ```
//! use dlpack_core::{CopyMode, CopyReason, Error, ManagedTensor, Transfer};
//!
//! // Vec -> candle: the Vec becomes candle's storage.
//! let data: Vec<f32> = (0..6).map(|i| i as f32).collect();
//! let address = data.as_ptr();
//! let (t, transfer) = dlpack_candle::into_owned(ManagedTensor::export(data)?, CopyMode::Never)?;
//! assert_eq!(transfer, Transfer::Moved);
//! let t = t.reshape((2, 3))?;
//!
//! // candle -> DLPack: a read-only tensor on the same memory, here transposed.
//! // SAFETY: nothing writes to `t`'s storage while the export lives.
//! let dl = unsafe { dlpack_candle::into_dlpack(t.t()?) }?;
//! assert_eq!((dl.shape(), dl.strides()), (&[3i64, 2][..], &[1i64, 3][..]));
//! {
//!     let view = dl.view::<f32>()?;
//!     assert_eq!(view.as_ptr(), address);
//!     assert_eq!(view.get(&[2, 1]), Some(&5.0));
//! }
//!
//! // ... and back: the same candle tensor, not a copy.
//! let (back, transfer) = dlpack_candle::into_owned(dl, CopyMode::Never)?;
//! assert_eq!((transfer, back.dims()), (Transfer::Reclaimed, &[3, 2][..]));
//!
//! // A copy needs no promise: candle writes in place while it lives.
//! let copy = dlpack_candle::to_dlpack(&t)?;
//! t.zero_set()?;
//! assert_eq!(copy.to_vec::<f32>()?, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
//!
//! // Memory candle cannot own (here shared, an `Arc<[f32]>`) is copied, or refused under
//! // `CopyMode::Never`, which gives the tensor back.
//! let shared: std::sync::Arc<[f32]> = vec![1.0f32, 2.0].into();
//! let refused = dlpack_candle::into_owned(ManagedTensor::export(shared)?, CopyMode::Never)
//!     .unwrap_err();
//! assert!(matches!(
//!     refused.error,
//!     dlpack_candle::CandleError::DLPack(Error::CopyRefused { reason: CopyReason::NotOwned })
//! ));
//! let copy = dlpack_candle::to_owned(&refused.value)?; // the tensor stays the caller's
//! assert_eq!(copy.to_vec1::<f32>()?, [1.0, 2.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! | function | what it does |
//! |---|---|
//! | [`into_dlpack`]`(tensor)` | `unsafe`: lends a candle tensor out on candle's own memory, read-only, with its strides and offset; a refusal gives the tensor back |
//! | [`to_dlpack`]`(&tensor)` | copies a candle tensor into a compact row-major DLPack tensor that owns the copy: safe and writable |
//! | [`into_owned`]`(tensor, mode)` | takes a DLPack tensor over as a candle tensor, reclaimed, moved or copied as `mode` allows, and says which; a refusal gives the tensor back |
//! | [`to_owned`]`(&tensor)` | copies a DLPack tensor the caller keeps (a `BorrowedTensor`, say) into a new candle tensor |
//! | [`into_owned_on`]`(tensor, &device, mode)`, [`to_owned_on`]`(&tensor, &device)` | the same onto a given candle device: the CPU, or a CUDA device (feature `cuda`) |
//!
//! [`into_dlpack`] lends to any DLPack consumer (NumPy, PyTorch, an ndarray view through
//! `dlpack-ndarray`, ...) the tensor as candle holds it, views included (after `narrow`,
//! `transpose`, `i(..)`). It is `unsafe`: the caller promises that nothing writes to the
//! tensor's storage meanwhile ([below](#exports-never-block-candle)). Refusals are
//! [`Refused`](dlpack_core::Refused) values, holding the [`CandleError`] and the argument.
//!
//! These are the verbs every adapter crate of the workspace offers, and they speak
//! dlpack-core's words: [`CopyMode`](dlpack_core::CopyMode),
//! [`Transfer`](dlpack_core::Transfer) and [`CopyReason`](dlpack_core::CopyReason), used from
//! `dlpack_core` (which every caller has: [`into_owned`] takes its `ManagedTensor`), not
//! re-exported. candle has no borrowed tensor views, so there is no `export_view` or `view`
//! here: [`into_dlpack`] lends a tensor that candle itself shares.
//!
//! [`into_owned`] gives candle a tensor without a copy where candle's storage model allows:
//! candle's CPU storage must own a `Vec` of exactly the tensor's elements in row-major order,
//! so it takes the producer's `Vec` when the producer owns its elements as one, the layout is
//! compact row-major from the `Vec`'s first element, and the tensor is (nearly) all of the
//! `Vec`'s allocation (dlpack-core's `VecSlot::takes`: at most as much spare room as the tensor
//! itself, or under 4 KiB). That is a `Vec`, a `Box<[T]>`, a derived struct over a `Vec`, a
//! standard-layout owned ndarray `Array` (also one sliced to most of its `Vec`), a nalgebra
//! `DVector`; not a Fortran-order `Array`, one sliced past the start of its `Vec` or to a small
//! part of it (its first row, say, which a copy frees from the rest), nor a `DMatrix` of more
//! than one row and column, which is column-major. It gives a tensor exported from candle back
//! as a candle tensor, and otherwise copies.
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
//! The CPU always; CUDA with the feature `cuda` (the `cuda` module: candle CUDA tensors out
//! as `kDLCUDA` without a copy, `kDLCUDA` tensors in, copied on the device unless candle can
//! own their memory, with dlpack-cuda's driver checks and stream handshake). A candle tensor on
//! a device this build cannot reach (Metal; CUDA without the feature) is refused with
//! [`CandleError::Device`]. [`into_owned`] and [`to_owned`] make CPU tensors: a DLPack tensor
//! the host cannot read fails their copy with [`dlpack_core::Error::NotHostAccessible`];
//! [`into_owned_on`] takes it onto its GPU.
//!
//! # Exports never block candle
//!
//! candle's CPU storage is an `Arc<RwLock<..>>` that tensors, views and `Var`s share, and
//! candle writes it in place through any of them (`slice_set`, `zero_set`, `Var::set`, a user's
//! `InplaceOp`, which may even replace the memory). A DLPack consumer reads the exported memory
//! for as long as it chooses, so an export must keep that memory allocated and unchanged; it
//! must not do so by holding candle's lock, or every in-place write to the storage (and, behind
//! a waiting writer, every later export of it) would wait for a consumer that may never let go.
//! candle cannot tell whether a handle on a storage is the only one, so this crate cannot prove
//! that no writer will come. An export therefore holds no lock past the call, and:
//!
//! - [`into_dlpack`] lends candle's memory, zero-copy, on the caller's promise that nothing
//!   writes to the storage while the export lives. The result of a candle operation that
//!   computes new storage is the only handle on it, so `unsafe { into_dlpack(a.matmul(&b)?) }`
//!   is sound at a glance; so is lending a tensor (or a view) that no code writes in place.
//! - [`to_dlpack`] copies, under candle's read lock for the length of the call only, into memory
//!   the export alone owns.
//!
//! [`CandleExport`] is the producer behind both.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod dtype;
mod error;
mod export;
mod import;
mod shape;

pub use dtype::{Float8E8M0, candle_dtype, dlpack_dtype};
pub use error::CandleError;
pub use export::{CandleExport, into_dlpack, to_dlpack};
pub use import::{into_owned, into_owned_on, to_owned, to_owned_on};
