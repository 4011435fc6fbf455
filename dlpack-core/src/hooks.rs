//! Device hooks: what a device crate (`dlpack-cuda`, `dlpack-oneapi`) tells the rest of the
//! workspace about memory the host cannot judge by itself.
//!
//! This is the Rust form of PyTorch's device hooks that map an address to its device. A hook
//! answers three questions: which device and kind of memory a pointer belongs to (so that a
//! foreign tensor's device claim can be checked, see [`crate::ManagedTensor::verify_device`]),
//! how to make a producer's work visible on a consumer's stream or queue, and how to copy
//! between device and host. Host memory needs no hook.

use core::ops::Range;

use crate::device::StreamRequest;
use crate::{Device, DeviceType, Error};

pub use crate::device::MemoryKind;

/// What a runtime reports about one pointer.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PointerInfo {
    /// The device that owns the memory, numbered the way DLPack numbers it for that device type.
    pub device: Device,
    /// The kind of memory.
    pub kind: MemoryKind,
    /// The whole allocation the pointer lies in, when the runtime can tell.
    pub allocation: Option<Range<usize>>,
}

/// The hooks a device crate implements. Every method but [`DeviceHooks::handles`] has a default
/// that refuses with [`Error::NoHook`], so a crate implements only what its runtime can do.
///
/// Hooks must be callable from any thread.
///
/// # Safety
///
/// Importers trust what [`DeviceHooks::resolve`] reports: after
/// [`ManagedTensor::verify_device`](crate::ManagedTensor::verify_device), a tensor whose memory
/// the hook reported as host-accessible ([`MemoryKind::is_host_accessible`]) gets typed views
/// that read and write it in place, and a producer may hand it to CPU consumers. So an
/// implementation must:
///
/// - report a host-accessible kind only for memory the host can read and write directly, and
///   an `allocation` only when every byte of that range belongs to the allocation `address`
///   lies in (the runtime's own answer, not a guess);
/// - in [`DeviceHooks::copy_from_host`], write no byte outside `dst..dst + src.len()`.
///
/// The answers about devices and streams (`device`, [`DeviceHooks::make_ready`],
/// [`DeviceHooks::wait_host`]) decide correctness, not memory safety, but a hook that gets them
/// wrong hands consumers data that is not ready.
pub unsafe trait DeviceHooks: Send + Sync {
    /// Whether this hook handles tensors that claim `device_type`.
    fn handles(&self, device_type: DeviceType) -> bool;

    /// Resolves the device and memory kind of `address`, which a tensor claims lies on
    /// `claimed`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownPointer`] for an address the runtime does not know, [`Error::Runtime`]
    /// when the runtime fails. The default returns [`Error::NoHook`].
    fn resolve(&self, claimed: Device, address: usize) -> Result<PointerInfo, Error> {
        let _ = address;
        Err(Error::NoHook { device: claimed })
    }

    /// Makes the producer's pending work on `device` visible to the consumer's `stream` (for
    /// CUDA: record an event on the producer's stream and make the consumer's stream wait on
    /// it), without synchronising the whole device.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the runtime fails, an [`Error::Protocol`] (`ValueError`) for a
    /// stream the hook cannot use. The default returns [`Error::NoHook`].
    fn make_ready(&self, device: Device, stream: StreamRequest) -> Result<(), Error> {
        let _ = stream;
        Err(Error::NoHook { device })
    }

    /// Blocks the calling host thread until the producer's pending work on `device` is done
    /// (the protocol's [`SyncAction::Host`](crate::protocol::SyncAction::Host), used when device
    /// data is handed to a CPU consumer).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the runtime fails. The default returns [`Error::NoHook`].
    fn wait_host(&self, device: Device) -> Result<(), Error> {
        Err(Error::NoHook { device })
    }

    /// Copies `dst.len()` bytes from device memory at `src` to the host.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the runtime fails, or another [`Error`] for memory the hook
    /// refuses to copy from. [`Error::CopyInFlight`] (and only then may the copy go on after the
    /// call) when the runtime cannot confirm that the copy finished, a lost device's failed
    /// wait, say: the device may still write `dst`. The default returns [`Error::NoHook`].
    ///
    /// # Safety
    ///
    /// `src..src + dst.len()` must be memory of `device` that is valid for reads and not being
    /// written for the duration of the call. After an [`Error::CopyInFlight`], the caller never
    /// frees, reuses or reads `dst` again: it leaks the memory, which the device may still
    /// write ([`CheckedTensor::to_host_vec`](crate::CheckedTensor::to_host_vec) leaks its
    /// staging buffer).
    unsafe fn copy_to_host(&self, device: Device, src: usize, dst: &mut [u8]) -> Result<(), Error> {
        let _ = (src, dst);
        Err(Error::NoHook { device })
    }

    /// Copies `src` from the host into device memory at `dst`.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the runtime fails, or another [`Error`] for memory the hook
    /// refuses to copy to. The default returns [`Error::NoHook`].
    ///
    /// # Safety
    ///
    /// `dst..dst + src.len()` must be memory of `device` that is valid for writes and not
    /// accessed by anyone else for the duration of the call.
    unsafe fn copy_from_host(&self, device: Device, src: &[u8], dst: usize) -> Result<(), Error> {
        let _ = (src, dst);
        Err(Error::NoHook { device })
    }
}
