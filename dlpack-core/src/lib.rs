//! The DLPack 1.3 ABI for Rust: export any tensor memory without copying it (one small heap
//! block holds the DLPack header, shape, strides and the owner), import foreign tensors through
//! a validator that no malformed input gets past, and read them through typed, bounds-checked
//! views.
//!
//! DLPack is the zero-copy tensor exchange ABI of PyTorch, NumPy, JAX, CuPy, dpnp and TVM. This
//! crate is the base of the workspace: the adapters (ndarray, nalgebra, candle), the device
//! crates (CUDA, oneAPI) and the Python layer all move tensors through the types here.
//!
//! ```
//! use dlpack_core::{DataType, Device, ManagedTensor};
//!
//! // Export: the Vec moves into the managed tensor. One heap block, no copy of the data.
//! let data: Vec<f32> = (0..6).map(|i| i as f32).collect();
//! let address = data.as_ptr();
//! let raw = ManagedTensor::export(data)?.into_raw()?; // a DLManagedTensorVersioned* for C
//!
//! // Import: validation runs once, here. A malformed tensor is an error, and deleted.
//! // SAFETY: `raw` is a live tensor that we own.
//! let tensor = unsafe { ManagedTensor::from_raw(raw)? };
//! assert_eq!((tensor.device(), tensor.dtype()), (Device::CPU, DataType::F32));
//!
//! // View: typed, bounds-checked, on the very same memory.
//! let view = tensor.view::<f32>()?;
//! assert_eq!(view.as_ptr(), address);
//! assert_eq!(view.get(&[5]), Some(&5.0));
//!
//! // Reclaim: the original Vec comes back, still without a copy.
//! let data: Vec<f32> = tensor.reclaim().expect("exported from a Vec<f32>");
//! assert_eq!(data.as_ptr(), address);
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # Map of the crate
//!
//! - [`ffi`]: `#[repr(C)]` mirrors of every type of `dlpack.h` 1.3, layout-checked at compile
//!   time and against the real header in the test suite.
//! - Value types: [`Device`] / [`DeviceType`], [`DataType`] / [`DataTypeCode`], [`Flags`],
//!   [`Version`]. Device types and dtype codes are integer newtypes, never Rust enums, since
//!   foreign memory may hold values this crate has not heard of.
//! - [`Element`]: the Rust scalar types a view can hold.
//! - Export: [`Export`] (what a producer implements, describing its data with an
//!   [`ExportDesc`], e.g. [`ExportDesc::host`]), [`ManagedTensor::export`] and
//!   [`ManagedTensor::export_legacy`]; [`Buffer`] and [`Dims`], the parts a struct-shaped
//!   producer is made of. A struct that owns a [`Buffer`] exports with no `unsafe` code:
//!   implement the safe [`ShapedBuffer`] (buffer, shape, strides), or `#[derive(DLPack)]` when
//!   its shape is a field. `unsafe impl Export` is for memory no [`Buffer`] owns.
//! - Import: [`ManagedTensor::from_raw`], [`ManagedTensor::from_raw_legacy`] and
//!   [`BorrowedTensor`]; all dereference to [`CheckedTensor`], whose docs list every check.
//!   [`ManagedTensor::from_raw_if`] is for a consumer that may still decline a tensor it has
//!   validated (a Python consumer leaves a capsule it refuses to its destructor).
//! - Views and copies: [`TensorView`], [`TensorViewMut`], [`CheckedTensor::to_vec`].
//! - Taking a tensor over: [`ManagedTensor::reclaim`], [`ManagedTensor::into_vec`] and
//!   [`ManagedTensor::into_vec_with`]; [`CopyMode`], [`Transfer`] and [`CopyReason`], the words
//!   every adapter's `into_owned` uses (see "One vocabulary" below).
//! - [`hooks`]: what device crates implement so that device claims can be checked.
//! - [`protocol`]: the Python `__dlpack__` protocol's decisions in plain Rust.
//!
//! # One vocabulary
//!
//! Every adapter crate (`dlpack-ndarray`, `dlpack-nalgebra`, `dlpack-candle`) offers the same
//! verbs with the same meanings:
//!
//! | verb | what it does |
//! |---|---|
//! | `into_dlpack(value)` | moves an owned value out as a [`ManagedTensor`], without a copy; a refusal gives the value back ([`Refused`]) |
//! | `to_dlpack(&value)` | copies a value out into a [`ManagedTensor`] that owns the copy |
//! | `unsafe export_view(&value)`, `unsafe export_view_mut(&mut value)` | lends a borrowed value out, without a copy, for as long as the caller promises it stays alive |
//! | `view(&tensor)`, `view_mut(&mut tensor)` | a typed view of an imported tensor, in the adapter's own view type (`view_mut` takes any [`TensorMut`]) |
//! | `into_owned(tensor, mode)` | takes an imported tensor over as the adapter's owned type: `Ok((value, Transfer))`, or the tensor back with the reason ([`Refused`]) |
//! | `to_owned(&tensor)` | copies a tensor the caller keeps (a [`BorrowedTensor`], say) into the adapter's owned type |
//!
//! ```
//! use dlpack_core::{CopyMode, CopyReason, Error, ManagedTensor, Transfer};
//!
//! // `ManagedTensor::into_vec_with` speaks the same words for a plain `Vec`.
//! let v = vec![1.0f32, 2.0, 3.0];
//! let address = v.as_ptr();
//! let (back, transfer) = ManagedTensor::export(v)?.into_vec_with::<f32>(CopyMode::Never)?;
//! assert_eq!((back.as_ptr(), transfer), (address, Transfer::Moved));
//!
//! // Shared memory cannot be moved out: copied when a copy is allowed, refused when not.
//! let shared: std::sync::Arc<[f32]> = vec![4.0f32, 5.0].into();
//! let refused = ManagedTensor::export(shared)?.into_vec_with::<f32>(CopyMode::Never).unwrap_err();
//! assert_eq!(refused.error, Error::CopyRefused { reason: CopyReason::NotOwned });
//! let (copy, transfer) = refused.value.into_vec_with::<f32>(CopyMode::IfNeeded)?;
//! assert_eq!((copy, transfer), (vec![4.0, 5.0], Transfer::Copied(CopyReason::NotOwned)));
//! # Ok::<(), Error>(())
//! ```
//!
//! # Features
//!
//! | feature | adds |
//! |---|---|
//! | `half` | [`Element`] for `half::f16` and `half::bf16` |
//! | `num-complex` | [`Element`] for `Complex<f32>` (complex64) and `Complex<f64>` (complex128) |
//! | `float8` | [`Element`] for `float8::F8E4M3` (float8_e4m3fn, code 10) and `F8E5M2` (code 12) |
//! | `derive` | `#[derive(DLPack)]` for your own tensor structs (the `dlpack-derive` crate) |
//! | `testing` | [`testing`]: hand-made managed tensors with any field values and a deleter that counts its calls, for testing importers |
//!
//! # Safety model
//!
//! Everything that trusts a foreign pointer is an `unsafe fn` whose `# Safety` section says
//! what the caller vouches for: that the pointers point to what the fields describe. Everything
//! that can be checked from the fields themselves is checked, once, with checked arithmetic:
//! a tensor that passes is safe to view, and one that does not is deleted exactly once (left to
//! its owner, with `from_raw_if`) and reported with an [`Error`] that names the field, the value
//! found and what was expected. A `bool` view checks every element's byte, each distinct element
//! once, however many indices share it (broadcast and overlapping strides).
#![cfg_attr(docsrs, feature(doc_cfg))]

// The modules, each using only those listed before it (in code; doc links go anywhere):
// - layout (shape and stride arithmetic), device, flags, version: nothing;
// - dtype, transfer and error: the value types whose checks return the error that names them,
//   and that error;
// - element, ffi; copy (the strided gather), valid (element values), view;
// - export (the one-allocation block), hooks; tensor (import and ownership); buffer;
// - protocol and testing, on the value types and ffi.

pub mod ffi;

mod buffer;
mod copy;
mod device;
mod dtype;
mod element;
mod error;
mod export;
mod flags;
pub mod hooks;
mod layout;
pub mod protocol;
mod tensor;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod transfer;
mod valid;
mod version;
mod view;

pub use buffer::{Buffer, Dims, ShapedBuffer};
pub use device::{Device, DeviceType, MemoryKind};
pub use dtype::{DataType, DataTypeCode};
pub use element::Element;
pub use error::{Error, PyErrorKind, Refused};
pub use export::{Export, ExportDesc, VecSlot};
pub use flags::Flags;
pub use hooks::{DeviceHooks, PointerInfo};
pub use layout::{MAX_NDIM, Offsets};
pub use tensor::{BorrowedTensor, CheckedTensor, ManagedTensor, TensorMut};
pub use transfer::{CopyMode, CopyReason, Transfer};
pub use version::Version;
pub use view::{TensorView, TensorViewMut, ViewIter};

/// What `#[derive(DLPack)]`'s generated code and this workspace's adapter and device crates
/// call. Not part of the API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::buffer::{describe_buffer, give_vec_of_buffer};
    pub use crate::view::try_vec_with_capacity;
}

#[cfg(feature = "derive")]
pub use dlpack_derive::DLPack;
