//! The producer side: `__dlpack__` and `__dlpack_device__` for Rust tensors.
//!
//! [`to_capsule`] serves one `__dlpack__` call for a tensor you own; [`Exporter`] serves any
//! number of them for a tensor that a Python object keeps (the state a `#[pyclass]` holds and
//! delegates to); [`DLPackTensor`](crate::DLPackTensor) is a ready-made `#[pyclass]` around an
//! [`Exporter`] that also offers the DLPack C exchange API.
//!
//! Every decision (which struct, whether to copy or relabel, what the stream means, which
//! exception) is dlpack-core's [`ExportArgs::decide`]; this module carries it out:
//!
//! 1. synchronise as [`SyncAction`] says, through the [`DeviceHooks`] (CUDA stream waits and the
//!    like; nothing on the CPU);
//! 2. export as is, relabel pinned or managed memory to the CPU, or copy: a host copy of
//!    host-readable memory, or of device memory read through
//!    [`DeviceHooks::copy_to_host`]; the copy carries `IS_COPIED`;
//! 3. build the versioned or the legacy struct and wrap it in a capsule whose destructor deletes
//!    it only while unused.
//!
//! The parts: [`args`] parses `__dlpack__`'s keyword arguments, [`method`] is the C-level
//! `__dlpack__` method, [`exporter`] serves calls for [`Exporter`] and [`to_capsule`], and
//! [`producers`] are the [`Export`](dlpack_core::Export) implementations every export is made
//! of (shared, relabelled, host copies), which the importer and the C exchange API also use.

mod args;
mod exporter;
mod method;
pub(crate) mod producers;

pub use args::export_args;
#[cfg(feature = "oneapi")]
pub(crate) use args::{SYCL_QUEUE_CAPSULE, is_sycl_queue};
pub use exporter::{Exporter, dlpack_device, to_capsule};
pub use method::{PyExporter, dlpack_method};

#[cfg(doc)]
use dlpack_core::DeviceHooks;
#[cfg(doc)]
use dlpack_core::protocol::{ExportArgs, SyncAction};
