//! oneAPI for DLPack: export Level Zero USM allocations as `kDLOneAPI` tensors with the right
//! device number, import `kDLOneAPI` tensors after asking Level Zero which device really owns
//! the pointer, and order a consumer's queue after the producer's work. The Rust counterpart of
//! the XPU DLPack support in PyTorch, and of dpctl and dpnp's `__dlpack__`.
//!
//! ```
//! use dlpack_core::{Device, ManagedTensor};
//! use dlpack_oneapi::{Context, LevelZero, UsmBuffer, UsmKind};
//!
//! # fn main() -> Result<(), dlpack_core::Error> {
//! // The loader is opened at run time: no loader or no driver is an error value.
//! let ze = match LevelZero::load() {
//!     Ok(ze) => ze,
//!     Err(e) => {
//!         println!("no Level Zero here: {e}");
//!         return Ok(());
//!     }
//! };
//! let context = Context::new(&ze.drivers()?[0])?;
//! let hooks = context.hooks();
//! let gpu = &context.devices()[0];
//!
//! // Export: device USM, zero-copy, freed when the consumer deletes the tensor.
//! let data = UsmBuffer::from_slice(&context, gpu, UsmKind::Device, &[1.0f32, 2.0, 3.0])?;
//! let address = data.as_ptr();
//! let raw = ManagedTensor::export(data)?.into_raw()?; // a DLManagedTensorVersioned* for C
//!
//! // Import: the device claim is checked against Level Zero before the data is touched.
//! // SAFETY: `raw` is a live tensor that we own.
//! let mut tensor = unsafe { ManagedTensor::from_raw(raw)? };
//! let info = tensor.verify_device(&hooks)?.expect("the tensor has elements");
//! assert_eq!((info.device, tensor.data_ptr().cast_const().cast()), (Device::oneapi(0), address));
//!
//! // Device memory is not host memory: reading it is a copy on a Level Zero command list.
//! assert!(tensor.view::<f32>().is_err());
//! assert_eq!(tensor.to_host_vec::<f32>(&hooks)?, [1.0, 2.0, 3.0]);
//! # Ok(())
//! # }
//! ```
//!
//! # What is here
//!
//! - [`LevelZero`]: the loader (`libze_loader.so.1`), opened with `libloading` at run time, so
//!   the crate builds and links everywhere. [`sys`] holds the raw bindings, written here (no
//!   Level Zero crate exists), checked against the real `ze_api.h` by a test that compiles C.
//! - [`Driver`], [`ZeDevice`], [`Context`]: driver and device enumeration, and the context in
//!   which memory is allocated and pointers are resolved.
//! - [`UsmBuffer`]: a typed device, shared or host USM allocation. It implements
//!   [`dlpack_core::Buffer`], so it exports as `kDLOneAPI` (`ManagedTensor::export`) and can be
//!   the data field of a struct that derives DLPack (see [`UsmBuffer`]).
//! - [`DeviceNumbering`]: DLPack's `kDLOneAPI` device number <-> Level Zero root device, by
//!   default the root device's index in the driver's order, or an explicit table.
//! - [`OneApiHooks`]: [`dlpack_core::DeviceHooks`] for `kDLOneAPI`: pointer -> device and memory
//!   kind (`zeMemGetAllocProperties` in the caller's context), the allocation's extent
//!   (`zeMemGetAddressRange`), device <-> host copies and synchronisation on a [`Queue`].
//! - [`Queue`]: an immediate command list and its events; the `stream` of the DLPack protocol
//!   names one, and the producer orders it after its own work with an event handshake.
//! - [`leaks`]: what the crate leaked on purpose because a device failed (see below).
//!
//! # Level Zero version
//!
//! The bindings follow Debian bookworm's loader and headers (`libze1`/`libze-dev` 1.8.12, API
//! 1.4): `zeInit` initialises (the loader has no `zeInitDrivers`, API 1.10), and a sub-device's
//! root device is found by walking `zeDeviceGetSubDevices` from the root devices (the loader has
//! no `zeDeviceGetRootDevice`, API 1.7). Newer loaders export everything used here.
//!
//! # Device numbers
//!
//! `kDLOneAPI`'s `device_id` in a capsule is, in dpctl, dpnp and PyTorch, the root device's
//! position in `sycl::device::get_devices()`, a list over every SYCL backend that Level Zero
//! cannot see. (PyTorch's `__dlpack_device__` returns its own XPU index instead, while its
//! capsules carry the SYCL index: key a numbering table on the capsule's `device_id`.) The
//! default numbering (the index in `zeDeviceGet`, after the GPUs of earlier drivers, as SYCL
//! lists one platform per Level Zero driver) agrees with it when Level Zero's GPUs are the only
//! SYCL devices or come first; otherwise build a [`DeviceNumbering::table`] (match devices by
//! UUID). Sub-devices export and resolve as their root device. In the opt-in `COMBINED` device
//! hierarchy (`ZE_FLAT_DEVICE_HIERARCHY=COMBINED`), memory of a card-level composite device
//! reports a device that is neither a root device nor below one, and is refused with a runtime
//! error (the bookworm loader has no `zeDeviceGetRootDevice` to map it).
//!
//! # Queues and the `stream` argument
//!
//! oneAPI's `stream` is not standardised; dpctl and dpnp pass a SYCL queue and read `None` as
//! "no synchronisation" (see [`dlpack_core::protocol::parse_stream`]). Here a queue is a Level
//! Zero immediate command list and its `stream` number is [`Queue::stream`]. Asked to make data
//! ready for such a stream, the hooks append a barrier that signals an event to the producer
//! device's default queue, and a barrier that waits on it to the consumer's queue: the consumer
//! cannot read before the producer's writes are done, and the host does not block. Numbers that
//! are not a live queue of the context are refused, never handed to Level Zero as handles. A
//! SYCL queue joins by adopting its native command list ([`Queue::from_raw`]); only an in-order
//! queue's, with `UR_L0_USE_COPY_ENGINE_FOR_IN_ORDER_QUEUE=0` (otherwise Intel's adapter sends
//! its copies to a copy-engine list of their own), since the handshake orders one list. Level Zero starts a list's commands in order
//! but may finish them out of order, so every copy the crate appends goes behind a barrier.
//!
//! # When the device fails
//!
//! Every copy waits for its event on the host (`zeEventHostSynchronize`). When that wait fails
//! (a lost device) and the event is not signalled either (`zeEventHostSynchronize` and
//! `zeEventQueryStatus` both say no), Level Zero cannot confirm that the copy finished: it may
//! still read and write its memory. The copy then returns an [`dlpack_core::Error::Runtime`]
//! that names the failed call and its result and says the work "may still be running", and
//! nothing it may touch is freed or reused: its event is never reset, reused or destroyed (nor
//! its pool), the crate's own staging buffers are leaked, USM that the copy touches is never
//! freed, whichever [`Context`] the copy went through (a [`UsmBuffer`] over it leaks its
//! allocation), a queue whose work cannot be waited for leaks its command list, and from then
//! on no context is destroyed. An event whose `zeEventHostReset` fails may still be signalled, so it is retired
//! the same way (and the operation returns that error). The hooks' device-to-host copy writes
//! the caller's memory directly and, when it cannot confirm the copy finished, returns
//! [`dlpack_core::Error::CopyInFlight`] instead, which obliges the caller to leak that memory
//! (dlpack-core's `to_host_vec` leaks its staging buffer). [`leaks`] counts what this crate
//! leaked; it stays zero on a device that works. Nothing here panics.
//!
//! # Contexts
//!
//! The Level Zero specification scopes USM to the context that allocated it, and DLPack carries
//! no context. A consumer must therefore resolve in the producer's context: both sides share
//! one [`Context`], or one side adopts the other's handle with [`Context::from_raw`] (with SYCL:
//! the native Level Zero handle of the SYCL context, found with
//! `sycl::get_native<sycl::backend::ext_oneapi_level_zero>`, and its platform's driver with
//! [`LevelZero::driver`]). Memory a context does not know is `ZE_MEMORY_TYPE_UNKNOWN` there,
//! which the hooks report as [`dlpack_core::Error::UnknownPointer`] instead of guessing.
//!
//! Intel's GPU driver is more lenient than the specification: its `zeMemGetAllocProperties`,
//! `zeMemGetAddressRange` and `zeMemFree` look the pointer up in a table of the whole driver
//! (compute-runtime's `ContextImp`, read in its source), so there any context of the driver
//! knows every allocation of it. The workspace's test driver follows the specification, or
//! Intel's reading with `DLPACK_ONEAPI_TEST_DRIVER_DRIVER_WIDE_LOOKUP=1`; the test suite runs
//! under both, and the hooks rely on neither. Their copies, though, run in the resolving context: memory of
//! another context that Intel's driver answers for is copied across contexts, which the
//! specification does not allow (what a failed copy may still touch is recorded for the whole
//! process, so no context frees it).
//!
//! A span is checked against the range `zeMemGetAddressRange` reports, which is only as fine as
//! the allocator behind the memory: the SYCL runtime sub-allocates USM from larger blocks by
//! default, PyTorch XPU has a caching allocator, and Intel's driver keeps freed allocations for
//! reuse. There the range is the whole block, so a span that overruns its tensor but stays in
//! the block is not caught, and memory a producer has freed may still resolve as USM.
//!
//! # Testing without a GPU
//!
//! **No Intel GPU was available while this crate was written.** Its tests run the real Debian
//! loader twice: with no driver (every entry point must return
//! `ZE_RESULT_ERROR_UNINITIALIZED`), and with the workspace's test-support driver
//! (`dlpack-oneapi-test-driver`, loaded through the loader's `ZE_ENABLE_ALT_DRIVERS` switch),
//! which stands host memory in for device memory and runs command lists on worker threads. That
//! covers the bindings, the loader's dispatch, export, import, pointer resolution on two
//! devices with sub-devices, contexts, spans, copies and the event handshake. What only real
//! hardware (Intel's `libze_intel_gpu.so.1`) can confirm:
//!
//! - that device USM really is unreadable from the host and the copies move the right bytes
//!   across PCIe; that shared USM migrates and host USM is reachable from every device;
//! - what the GPU driver reports for sub-device (tile) allocations with implicit scaling on or
//!   off (`phDevice` of `zeMemGetAllocProperties`: root or tile), which the root mapping handles
//!   either way but was only tested with a driver that reports the tile;
//! - the driver's answer for pointers into another context (expected from its source: the
//!   real kind and range, see above, which the test driver's driver-wide mode imitates), which
//!   the hooks accept either way;
//! - the event handshake against a real SYCL queue's native list (immediate command lists must
//!   be enabled in the SYCL runtime), and the default numbering against
//!   `sycl::device::get_devices()` on a machine with several backends;
//! - interoperation with dpctl, dpnp and PyTorch XPU capsules end to end.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[macro_use]
pub mod sys;

mod api;
mod context;
mod device;
mod hooks;
mod leaks;
mod numbering;
mod queue;
mod usm;

pub use api::{Api, LevelZero};
pub use context::{Context, UsmAllocation};
pub use device::{DeviceProperties, Driver, ZeDevice};
pub use hooks::OneApiHooks;
pub use leaks::{Leaks, leaks};
pub use numbering::DeviceNumbering;
pub use queue::Queue;
pub use usm::{UsmBuffer, UsmKind};
