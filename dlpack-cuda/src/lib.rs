//! cudarc <-> DLPack: hand cudarc device, pinned and managed memory to PyTorch, CuPy or any
//! DLPack consumer without a copy, take their CUDA tensors back after the driver has confirmed
//! where the memory really lives, and order the two sides' streams with an event instead of a
//! device-wide synchronisation.
//!
//! The crate builds and loads on machines without a CUDA toolkit or driver: libcuda is opened at
//! run time, and its absence is an [`Error::Runtime`] value, never a panic.
//!
//! ```
//! use dlpack_core::protocol::parse_stream;
//! use dlpack_core::{Device, DeviceHooks, ManagedTensor};
//! use dlpack_cuda::{CudaBuffer, CudaHooks, open_device};
//!
//! let context = match open_device(0) {
//!     Ok(context) => context,
//!     Err(e) => {
//!         // No libcuda or no GPU here: a documented error value.
//!         assert!(e.to_string().starts_with("CUDA driver: "), "{e}");
//!         return Ok(());
//!     }
//! };
//! let stream = context.new_stream().expect("a stream");
//! let slice = stream.clone_htod(&[1.0f32, 2.0, 3.0]).expect("upload");
//!
//! // Export: the slice moves into the managed tensor (kDLCUDA on device 0), no copy.
//! let tensor = ManagedTensor::export(CudaBuffer::new(slice))?;
//! assert_eq!(tensor.device(), Device::cuda(0));
//!
//! // A consumer calls `__dlpack__(stream=2)`: our stream's pending work is made visible on its
//! // per-thread default stream by an event, without blocking the host.
//! let hooks = CudaHooks::new(stream)?;
//! hooks.make_ready(tensor.device(), parse_stream(tensor.device(), Some(2))?)?;
//!
//! // The device claim checks out with the driver, and the data comes back to the host.
//! let mut tensor = tensor;
//! tensor.verify_device(&hooks)?;
//! assert_eq!(tensor.to_host_vec::<f32>(&hooks)?, [1.0, 2.0, 3.0]);
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # Map of the crate
//!
//! - Export: [`CudaBuffer`] (`CudaSlice<T>`, `kDLCUDA` + ordinal), [`PinnedBuffer`]
//!   (`kDLCUDAHost`), [`ManagedBuffer`] (`kDLCUDAManaged`): dlpack-core [`Buffer`]s, so each
//!   exports by itself, can be the data field of a derived tensor struct, and is what a derived
//!   import copies into. [`CudaTensor`] gives any of them a shape, strides and an offset;
//!   [`SliceMut`] is [`CudaBuffer::slice_mut`]'s guard for writing the slice through cudarc.
//! - Hooks: [`CudaHooks`], dlpack-core's [`DeviceHooks`] for CUDA: pointer -> (device, memory
//!   kind, allocation) with `cuPointerGetAttributes`; the stream handshake (`cuEventRecord` on
//!   our stream, `cuStreamWaitEvent` on the consumer's); device <-> host copies.
//! - Import: [`CudaImport`] checks a foreign tensor's claim with the hooks and copies it to or
//!   from the host; [`DeviceView`] gives its device addresses, and [`ForeignSlice`] the same
//!   memory as a `&CudaSlice<T>` that cudarc never frees.
//! - Driver: [`load_driver`], [`open_device`], and [`ContextScope`] for driver calls on a
//!   thread whose current context must be left as it was (a DLPack deleter's, say).
//!
//! # Python (dlpack-pyo3) and CUDA tensors
//!
//! The Python layer needs nothing CUDA-specific beyond a [`CudaHooks`]:
//!
//! - `__dlpack__(stream=s, ...)` on a Rust CUDA tensor: `parse_stream(device, s)` (dlpack-core)
//!   then [`DeviceHooks::make_ready`]`(device, request)` before handing out the capsule, and
//!   [`DeviceHooks::wait_host`] instead when the protocol asks for host synchronisation (an
//!   export to `dl_device=(kDLCPU, 0)`, or pinned or managed memory asked for with
//!   `stream=None`, which a CPU consumer such as NumPy reads in place). `__dlpack_device__` is
//!   the tensor's device.
//! - `from_dlpack(x)` of a CUDA tensor: call `x.__dlpack__(stream=hooks.consumer_stream(dev))`
//!   with `dev` from `x.__dlpack_device__()`, then [`CudaImport::new`] (or
//!   [`ManagedTensor::verify_device`] with the hooks) on the tensor it returns.
//!
//! # Loading the driver
//!
//! cudarc 0.19 with `dynamic-loading` panics on the first driver call when libcuda is missing,
//! and when a function's symbol is. This crate calls the driver only after [`load_driver`] has
//! checked, once per process, that libcuda opens (`is_culib_present`), that it exports every
//! symbol this crate reaches, directly or through the cudarc functions it calls, and that
//! `cuInit` succeeds. So no cudarc panic is reachable through this crate's API and no
//! `catch_unwind` is needed (which would not help in `panic = "abort"` builds anyway). cudarc
//! functions you call yourself are yours to guard: call [`open_device`] instead of
//! `CudaContext::new`, and cudarc's other constructors only with a context in hand.
//!
//! The binding is cudarc's CUDA 12.8 API (feature `cuda-12080`), loaded function by function,
//! so any driver from CUDA 11.4 on serves every call this crate makes.
//!
//! With the feature `dynamic-linking` (which dlpack-candle's `cuda` turns on, because candle
//! links the CUDA libraries and cudarc cannot both link and load them in one build), libcuda is
//! linked into the program instead: the program then starts only where libcuda is installed,
//! every symbol is resolved before `main`, and [`load_driver`] only calls `cuInit`.
//!
//! # Limits
//!
//! - Stream handles from consumers are trusted, as the DLPack protocol has it: a value that is
//!   not a live stream reaches the driver as such.
//! - The handshake is one-way: a consumer that still has work queued on the memory when it
//!   calls the deleter must order that itself (DLPack has no way to say so); the memory is then
//!   freed on the producer's stream.
//! - The per-thread default stream (handle 2, cudarc's `per_thread_stream()`) names the calling
//!   thread's own stream, and tensors are read, handed on and freed on any thread. So it cannot
//!   be the hooks' stream ([`CudaHooks::new`] refuses it), and a slice of it is waited for, on
//!   the host, when [`CudaBuffer::new`] wraps it. A consumer may still ask for its own
//!   per-thread stream (`stream=2`, from its own thread).
//! - Strided device tensors are gathered through the host (one copy of the reachable span), as
//!   no kernels ship with this crate.
//! - A span is checked against the range `cuPointerGetAttributes` reports for the tensor's
//!   first byte. The driver documents that range as the mappable address range the pointer
//!   belongs to, so for memory of the stream-ordered allocator (memory pools, what PyTorch,
//!   CuPy and cudarc use on current GPUs) it may be the pool's reservation rather than the one
//!   allocation: a span that overruns its allocation but stays inside the pool is then not
//!   caught. The same holds for memory mapped through CUDA's virtual memory management
//!   (`cuMemAddressReserve` and `cuMemMap`, behind PyTorch's `expandable_segments`): the range
//!   is the whole reservation, mapped or not, so a pointer into an unmapped part of it passes
//!   the check and the first copy from it faults on the device (a sticky error, which ends the
//!   context). (What the driver reports there is among what the GPU suite has yet to show.) The
//!   driver API documents the range for device allocations only: where a driver refuses to
//!   report it (for page-locked host memory, say), the memory kind and device are asked for
//!   again alone and still checked, and the span is not.
//!
//! # Status of the GPU tests
//!
//! Three layers, from the cheapest:
//!
//! - The unit tests run the hook logic against an in-process fake driver (claims, memory kinds,
//!   spans, stream values, the event handshake, strided copies), also under Miri, and
//!   `tests/no_driver.rs` the no-driver path.
//! - `tests/test_driver.rs` runs the CUDA suite (`tests/suite`) on any machine through a
//!   libcuda stand-in built by this workspace (`dlpack-cuda/test-driver`): cudarc's real
//!   dynamic loading, this crate's real driver calls, device memory the host cannot read,
//!   asynchronous streams and events, with a leak, double-free and refused-call check after
//!   every case, with and without memory pools. It proves that the calls this crate makes are
//!   well-formed and well-ordered against the driver API as the stand-in models it.
//! - `tests/gpu.rs` runs the same suite on a real GPU (`DLPACK_TEST_CUDA=1`), also under
//!   compute-sanitizer's memcheck (`scripts/gpu-kit`); CONTRIBUTING.md says where it has run.
//!
//! [`Buffer`]: dlpack_core::Buffer
//! [`DeviceHooks`]: dlpack_core::DeviceHooks
//! [`DeviceHooks::make_ready`]: dlpack_core::DeviceHooks::make_ready
//! [`DeviceHooks::wait_host`]: dlpack_core::DeviceHooks::wait_host
//! [`Error::Runtime`]: dlpack_core::Error::Runtime
//! [`ManagedTensor::verify_device`]: dlpack_core::ManagedTensor::verify_device
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(target_pointer_width = "64"))]
compile_error!("dlpack-cuda needs a 64-bit target: CUDA device addresses are 64 bits wide");

mod driver;
mod export;
mod hooks;
mod import;

#[cfg(test)]
mod fake_driver;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use cudarc;
use cudarc::driver::CudaContext;
use dlpack_core::Error;

pub use driver::{ContextScope, upgrade_device_ptr};
pub use export::{CudaBuffer, CudaTensor, ManagedBuffer, PinnedBuffer, SliceMut};
pub use hooks::CudaHooks;
pub use import::{CudaImport, DeviceView, ForeignSlice};

/// Loads the CUDA driver if it is not loaded yet: opens libcuda, checks every symbol this crate
/// needs, and calls `cuInit`. The result is cached for the process.
///
/// ```
/// match dlpack_cuda::load_driver() {
///     Ok(()) => println!("CUDA driver loaded"),
///     Err(e) => println!("no CUDA here: {e}"),
/// }
/// ```
///
/// # Errors
///
/// [`Error::Runtime`] (runtime `"CUDA driver"`) when libcuda cannot be opened (the message lists
/// the file names searched), lacks a symbol, or `cuInit` fails (no device, say). The same error
/// is returned on every later call.
pub fn load_driver() -> Result<(), Error> {
    driver::cuda_driver().map(|_| ())
}

/// The primary context of CUDA device `ordinal`, retained once per process and made current on
/// the calling thread (as `CudaContext::new` does); the guarded replacement for cudarc's
/// `CudaContext::new`, which panics when libcuda is missing.
///
/// ```
/// match dlpack_cuda::open_device(0) {
///     Ok(context) => assert_eq!(context.ordinal(), 0),
///     Err(e) => assert!(e.to_string().starts_with("CUDA driver: ")),
/// }
/// ```
///
/// # Errors
///
/// [`Error::Runtime`] when the driver cannot be loaded ([`load_driver`]), or the device cannot
/// be opened (an ordinal beyond the device count, say) or made current.
pub fn open_device(ordinal: usize) -> Result<Arc<CudaContext>, Error> {
    let context = driver::cuda_driver()?.context(ordinal)?;
    // Some cudarc calls (`alloc_unified`, say) use the thread's current context without making
    // their own current, so callers expect the one they opened to be current. Not through
    // `bind_to_thread`, which would take (and clear) an error cudarc recorded in the context
    // earlier and fail with it.
    // SAFETY: the context of a live `CudaContext`, which holds it retained for the process.
    unsafe { cudarc::driver::result::ctx::set_current(context.cu_ctx()) }
        .map_err(|e| driver::driver_error("cuCtxSetCurrent", e))?;
    Ok(context)
}
