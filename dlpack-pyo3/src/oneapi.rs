//! oneAPI tensors across the Python boundary (feature `oneapi`): Level Zero USM out to dpnp,
//! dpctl or PyTorch XPU as `kDLOneAPI`, and their tensors into Rust after Level Zero has
//! confirmed which device owns the pointer.
//!
//! Out to Python, a tensor exported from a [`dlpack_oneapi::UsmBuffer`] (or a struct deriving
//! DLPack over one) is a [`DLPackTensor`] with the context's hooks attached
//! ([`DLPackTensor::with_hooks`]). Its `__dlpack__` then answers as a oneAPI producer does:
//!
//! - `stream=None` (what dpctl, dpnp and PyTorch pass, since none of them names a stream for a
//!   oneAPI producer): no synchronisation, as dpctl reads `None`;
//! - `stream=q` with `q` the [`Queue::stream`] number of a live queue of the context: that
//!   queue waits, on the device, for the work on the producer device's default queue (an event
//!   handshake, never a host wait); any other number is refused with a `ValueError`, never
//!   handed to Level Zero as a handle;
//! - `stream=q` with `q` a `dpctl.SyclQueue` (dpctl's convention), or the `"SyclQueueRef"`
//!   capsule of one: on the Level Zero backend its native immediate command list
//!   ([`level_zero_command_list`]) stands for it as a number would, so a SYCL queue whose list
//!   the context adopted ([`Queue::from_raw`]) is ordered as above, and any other is refused
//!   with a `ValueError`. A queue on another backend (OpenCL, as on the CPU device of Intel's
//!   `intel-opencl-rt` wheel) is refused with a `BufferError` that names it. dpctl is not
//!   imported: the queue is recognised by its `backend` and `_get_capsule()`, and its list is
//!   read from the SYCL runtime that made it;
//! - `dl_device=(1, 0)` (`np.from_dlpack(t, device="cpu")`): after waiting for the producer
//!   device's default queue, host and shared USM go to the CPU without a copy (Level Zero says
//!   which kind of USM the tensor is, since `kDLOneAPI` does not), device USM is copied on that
//!   queue, and `copy=False` refuses to copy it.
//!
//! Into Rust, [`from_dlpack_oneapi`] asks the object where its tensor lives
//! (`__dlpack_device__`), calls `__dlpack__` with the consumer's queue as `stream` only when the
//! caller names one (dpctl's `__dlpack__` raises `TypeError` for an int, and PyTorch ignores it),
//! and has Level Zero check the tensor's claim in the hooks' context
//! ([`ManagedTensor::verify_device`]): memory kind, owning device under the context's
//! [`DeviceNumbering`](dlpack_oneapi::DeviceNumbering), and every reachable byte inside the
//! allocation. A tensor that fails is deleted. After the check, host and shared USM are readable
//! through the core's typed views; device USM through
//! [`to_host_vec`](dlpack_core::CheckedTensor::to_host_vec).
//!
//! ```
//! use std::sync::Arc;
//! use dlpack_core::ManagedTensor;
//! use dlpack_oneapi::{Context, LevelZero, UsmBuffer, UsmKind};
//! use dlpack_pyo3::{DLPackTensor, to_py_err};
//! use pyo3::prelude::*;
//!
//! Python::attach(|py| -> PyResult<()> {
//!     // The loader is opened at run time: no loader or no driver is an error value.
//!     let Ok(ze) = LevelZero::load() else { return Ok(()) };
//!     let context = Context::new(&ze.drivers().map_err(to_py_err)?[0]).map_err(to_py_err)?;
//!     let hooks = Arc::new(context.hooks());
//!
//!     // Rust -> Python: a consumer sees the same device memory as kDLOneAPI.
//!     let gpu = &context.devices()[0];
//!     let buffer = UsmBuffer::from_slice(&context, gpu, UsmKind::Device, &[1.0f32, 2.0, 3.0])
//!         .map_err(to_py_err)?;
//!     let tensor = ManagedTensor::export(buffer).map_err(to_py_err)?;
//!     let object = Bound::new(py, DLPackTensor::with_hooks(tensor, hooks.clone()))?;
//!
//!     // Python -> Rust, here our own object back; a dpnp array works the same when its memory
//!     // is USM of `context`.
//!     let import = dlpack_pyo3::oneapi::from_dlpack_oneapi(object.as_any(), &hooks, None)?;
//!     assert_eq!(import.to_host_vec::<f32>(&*hooks).map_err(to_py_err)?, [1.0, 2.0, 3.0]);
//!     Ok(())
//! })?;
//! # Ok::<(), PyErr>(())
//! ```
//!
//! # Contexts: what dpctl and PyTorch need
//!
//! DLPack carries no context, and the Level Zero specification scopes USM to the context that
//! allocated it. dpctl accepts a `kDLOneAPI` tensor when SYCL's `get_pointer_type` knows its
//! memory in the *default context* of the SYCL platform of the device numbered `device_id` in
//! `dpctl.get_devices()`, and PyTorch when it is *device* USM its own context knows. Both ask
//! `zeMemGetAllocProperties` with that context's native handle. The safe way for a Rust export
//! to be taken by them, and for their tensors to resolve here, is to share their context: adopt
//! its native Level Zero handle with [`Context::from_raw`](dlpack_oneapi::Context::from_raw)
//! (found with `sycl::get_native<sycl::backend::ext_oneapi_level_zero>`; dpctl exposes no native
//! handle to Python, so this takes a few lines of C++ beside the extension) and number devices
//! as SYCL does ([`DeviceNumbering::table`](dlpack_oneapi::DeviceNumbering::table)).
//!
//! Intel's GPU driver is more lenient than the specification: its `zeMemGetAllocProperties`,
//! `zeMemGetAddressRange` and `zeMemFree` look the pointer up in a table of the whole driver
//! (compute-runtime's `ContextImp`, read in its source, not run), so any context of the same
//! driver answers. The workspace's test driver follows the specification instead, which is why
//! its tests refuse another context's pointer as unknown
//! ([`dlpack_core::Error::UnknownPointer`]).
//!
//! # Rust USM to dpnp, step by step
//!
//! 1. A few lines of C++ beside the extension hand Rust the native Level Zero handles of the
//!    SYCL queue dpnp works on (with dpctl's pybind11 type casters, `dpctl4pybind11.hpp`, a
//!    `dpctl.SyclQueue` arrives as a `sycl::queue`), and the UUID of each SYCL device with its
//!    position in `sycl::device::get_devices()`, which is the number dpnp puts in `device_id`:
//!
//!    ```text
//!    auto ctx = sycl::get_native<sycl::backend::ext_oneapi_level_zero>(q.get_context());
//!    auto drv = sycl::get_native<sycl::backend::ext_oneapi_level_zero>(
//!        q.get_device().get_platform());
//!    auto uuid = device.get_info<sycl::ext::intel::info::device::uuid>();  // per device
//!    ```
//!
//! 2. Rust adopts that context and numbers its devices as SYCL does:
//!
//!    ```no_run
//!    use dlpack_oneapi::{Context, DeviceNumbering, LevelZero, sys};
//!
//!    /// `driver` and `context`: the handles from the C++ side, as integers; `sycl`: each
//!    /// SYCL device's UUID and its position in `sycl::device::get_devices()`.
//!    fn adopt(
//!        driver: usize,
//!        context: usize,
//!        sycl: &[([u8; 16], i32)],
//!    ) -> Result<Context, dlpack_core::Error> {
//!        let ze = LevelZero::load()?;
//!        let driver = ze.driver(core::ptr::with_exposed_provenance_mut(driver))?;
//!        let mut table = Vec::new();
//!        for device in driver.devices()? {
//!            let uuid = device.properties()?.uuid;
//!            if let Some(&(_, number)) = sycl.iter().find(|(u, _)| *u == uuid) {
//!                table.push((device, number));
//!            }
//!        }
//!        let context: sys::ze_context_handle_t = core::ptr::with_exposed_provenance_mut(context);
//!        // SAFETY: the SYCL context outlives the adopted one and everything made from it (the
//!        // Python side keeps its queue alive for as long as Rust uses the context).
//!        unsafe { Context::from_raw(&driver, context, DeviceNumbering::table(table)) }
//!    }
//!    # fn main() {}
//!    ```
//!
//! 3. USM allocated in the adopted context ([`dlpack_oneapi::UsmBuffer`]) and exported as a
//!    [`DLPackTensor`] with `context.hooks()` goes to `dpnp.from_dlpack(obj)` without a copy,
//!    and dpnp arrays come back through [`from_dlpack_oneapi`] with the same hooks.
//!
//! 4. So that `__dlpack__(stream=q)` orders a dpctl queue `q` after the tensor's work, adopt
//!    the command list of that (in-order) queue in the same context:
//!    `unsafe { Queue::from_raw(&context, &device, level_zero_command_list(q)?) }`. The context
//!    finds the `Queue` only while a clone of it lives, and the SYCL queue must outlive it.
//!
//! With a context of the crate's own instead ([`Context::new`](dlpack_oneapi::Context::new)),
//! dpnp takes the tensor only on a driver that resolves pointers driver-wide (Intel's, by its
//! source). None of these steps has run against dpnp yet (see below).

//! # Not verified on hardware
//!
//! No Intel GPU and no SYCL runtime were available when this module was written. It runs in
//! the workspace's tests through the real Level Zero loader with the workspace's test-support
//! driver (dlpack-pyo3/tests/python-oneapi); dpctl, dpnp and PyTorch XPU themselves have not
//! exchanged tensors with it. [`level_zero_command_list`] has met real dpctl queues (dpctl
//! 0.22.1 on the OpenCL CPU device of `intel-opencl-rt`) only on OpenCL, which it refuses
//! from the queue and, through dpctl's own `DPCTLQueue_GetBackend`, from its capsule; it
//! has read Level Zero command lists only from the test module's stand-in for libsycl's
//! `sycl::queue::getNative`.

pub(crate) mod sycl;

use dlpack_core::{DeviceType, Error, ManagedTensor, PyErrorKind};
pub use dlpack_oneapi::{OneApiHooks, Queue};
use pyo3::prelude::*;
pub use sycl::level_zero_command_list;

#[cfg(doc)]
use crate::DLPackTensor;
use crate::import::producer_device;
use crate::{ImportOptions, from_dlpack_with, from_dlpack_writable, to_py_err};

/// Takes a Python oneAPI tensor (a dpnp or dpctl array, a PyTorch XPU tensor, any object with
/// `__dlpack__`, or a bare capsule) into Rust without a copy, read-only, after Level Zero has
/// checked its device claim in the hooks' context (see the [module](self) docs).
///
/// `queue`: the consumer's queue, passed as `stream=queue.stream()` so that the producer orders
/// it after its own work; only for producers that take Level Zero queues by number (this
/// workspace's). `None` passes no `stream`, which is what dpctl, dpnp and PyTorch accept: their
/// pending work is then the caller's to wait for (`x.sycl_queue.wait()`,
/// `torch.xpu.synchronize()`).
///
/// # Errors
///
/// Those of [`crate::from_dlpack`], and an exception for a `__dlpack_device__` that fails or
/// answers with something other than a pair of `int`s; `BufferError` for a tensor that is not on
/// `kDLOneAPI`, whose claim Level Zero contradicts or does not know (it is deleted then), or
/// when a Level Zero call fails.
pub fn from_dlpack_oneapi(
    obj: &Bound<'_, PyAny>,
    hooks: &OneApiHooks,
    queue: Option<&Queue>,
) -> PyResult<ManagedTensor> {
    let options = options_for(obj, queue)?;
    verified(from_dlpack_with(obj, &options)?, hooks)
}

/// [`from_dlpack_oneapi`], keeping the producer's writability (for writes through the views of
/// host and shared USM, and copies into device USM).
///
/// # Errors
///
/// As for [`from_dlpack_oneapi`].
///
/// # Safety
///
/// As for [`from_dlpack_writable`]: while the result lives, nothing else accesses the memory
/// other than by reading it while Rust does not write it (not Python code through the producer,
/// not device work queued by it, and not another import of the same object).
pub unsafe fn from_dlpack_oneapi_writable(
    obj: &Bound<'_, PyAny>,
    hooks: &OneApiHooks,
    queue: Option<&Queue>,
) -> PyResult<ManagedTensor> {
    let options = options_for(obj, queue)?;
    // SAFETY: forwarded contract.
    let tensor = unsafe { from_dlpack_writable(obj, &options) }?;
    verified(tensor, hooks)
}

/// The import options: `stream=queue.stream()` when the caller names a queue and the object's
/// tensor is on a oneAPI device; none otherwise (a tensor elsewhere is refused by [`verified`]).
fn options_for(obj: &Bound<'_, PyAny>, queue: Option<&Queue>) -> PyResult<ImportOptions> {
    let stream = match (queue, producer_device(obj)?) {
        (Some(queue), Some(device)) if device.device_type == DeviceType::ONEAPI => {
            Some(queue.stream())
        }
        _ => None,
    };
    Ok(ImportOptions {
        stream,
        ..ImportOptions::default()
    })
}

/// `tensor` after Level Zero confirmed its claim; deleted (dropped) when it did not.
fn verified(mut tensor: ManagedTensor, hooks: &OneApiHooks) -> PyResult<ManagedTensor> {
    let device = tensor.device();
    if device.device_type != DeviceType::ONEAPI {
        return Err(to_py_err(Error::Protocol {
            kind: PyErrorKind::BufferError,
            message: format!(
                "the tensor is on {device}; from_dlpack_oneapi takes kDLOneAPI tensors \
                 (oneapi:<n>), use dlpack_pyo3::from_dlpack for others"
            ),
        }));
    }
    tensor.verify_device(hooks).map_err(to_py_err)?;
    Ok(tensor)
}
