//! [`OneApiHooks`]: dlpack-core's device hooks for `kDLOneAPI`, answered by Level Zero in one
//! context.

use dlpack_core::protocol::StreamRequest;
use dlpack_core::{Device, DeviceHooks, DeviceType, Error, PointerInfo, PyErrorKind};

use crate::leaks::span;
use crate::{Context, UsmAllocation};

/// The device hooks for `kDLOneAPI` tensors, answered in one [`Context`]
/// ([`Context::hooks`]).
///
/// - [`resolve`](DeviceHooks::resolve): `zeMemGetAllocProperties` in this context gives the
///   memory kind and owning device (a sub-device counts as its root device, numbered by the
///   context's [`crate::DeviceNumbering`]), `zeMemGetAddressRange` the allocation, which the
///   core checks the tensor's span against. A pointer the context did not allocate
///   (`ZE_MEMORY_TYPE_UNKNOWN`: not USM, or USM of another context) is
///   [`Error::UnknownPointer`]. Host USM belongs to no device and can be read by all of them,
///   so it resolves to the device the tensor claims, if that device exists in the context.
/// - [`make_ready`](DeviceHooks::make_ready): the `stream` of oneAPI is a queue. `None`
///   ([`StreamRequest::NoSync`]) does nothing; a [`Queue::stream`](crate::Queue::stream) number
///   of a live queue of this context makes that queue wait for everything appended to the
///   producer device's default queue (an event handshake, [`crate::Queue::make_ready_for`]).
///   Any other number is refused (`ValueError`) rather than handed to Level Zero as a handle.
/// - [`wait_host`](DeviceHooks::wait_host): blocks until the device's default queue is idle.
/// - [`copy_to_host`](DeviceHooks::copy_to_host) / [`copy_from_host`](DeviceHooks::copy_from_host):
///   a copy on the device's default queue, after checking that the device range is USM of this
///   context that lies in one allocation.
///
/// # When the device fails
///
/// A copy whose host wait fails while its event is not signalled (a lost device) may still be
/// running when the hook returns its error. `copy_to_host` then returns
/// [`Error::CopyInFlight`], which obliges its caller to leak `dst` (dlpack-core's
/// `to_host_vec` leaks its staging buffer), so the copy lands in memory nobody reuses. The
/// device range is recorded in the context as still in use, so a [`crate::UsmBuffer`] over it
/// leaks its allocation instead of freeing it (see [`crate::Leaks`]). That protects this
/// crate's memory only: the owner of foreign USM (a SYCL runtime's) must not free it after such
/// an error either, and `copy_from_host` may still read `src` into it.
#[derive(Clone, Debug)]
pub struct OneApiHooks {
    context: Context,
}

impl OneApiHooks {
    /// Hooks answering in `context`.
    pub fn new(context: Context) -> Self {
        OneApiHooks { context }
    }

    /// The context the hooks answer in.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The allocation that holds `start..start + len`, which must be USM of this context that
    /// the `claimed` device's command lists may read and write: host USM, or device or shared
    /// USM of that very device ([`Error::DeviceMismatch`] for another device's, which a list of
    /// `claimed` reaches only with peer access). A tensor handed to the copy hooks need not
    /// have had its claim checked ([`DeviceHooks::resolve`]), so the copies check it here.
    fn usm_range(&self, claimed: Device, start: usize, len: usize) -> Result<UsmAllocation, Error> {
        let allocation = self
            .context
            .allocation_of(start)?
            .ok_or(Error::UnknownPointer {
                claimed,
                address: start,
            })?;
        if let Some(owner) = &allocation.device {
            let actual = self.context.dlpack_device(owner)?;
            if actual != claimed {
                return Err(Error::DeviceMismatch { claimed, actual });
            }
        }
        let end = start.checked_add(len).ok_or_else(|| Error::Overflow {
            what: format!("{start:#x} + {len} bytes"),
        })?;
        if end > allocation.range.end {
            return Err(Error::SpanOutsideAllocation {
                start,
                end,
                alloc_start: allocation.range.start,
                alloc_end: allocation.range.end,
            });
        }
        Ok(allocation)
    }
}

// SAFETY: `resolve` reports what Level Zero's `zeMemGetAllocProperties` and
// `zeMemGetAddressRange` say about the pointer in the hooks' context: host and shared USM (the
// host-accessible kinds) are readable and writable by the host in place, and the range is the
// allocation the runtime reports. `copy_from_host` copies exactly `src.len()` bytes to `dst`
// through a Level Zero command list.
unsafe impl DeviceHooks for OneApiHooks {
    fn handles(&self, device_type: DeviceType) -> bool {
        device_type == DeviceType::ONEAPI
    }

    fn resolve(&self, claimed: Device, address: usize) -> Result<PointerInfo, Error> {
        let allocation = self
            .context
            .allocation_of(address)?
            .ok_or(Error::UnknownPointer { claimed, address })?;
        let device = match &allocation.device {
            Some(owner) => self.context.dlpack_device(owner)?,
            // Host USM (or shared USM without a device) is reachable from every device of the
            // context: it is where the tensor says, if that device exists here.
            None => {
                self.context.ze_device(claimed)?;
                claimed
            }
        };
        Ok(PointerInfo {
            device,
            kind: allocation.kind.memory_kind(),
            allocation: Some(allocation.range),
        })
    }

    fn make_ready(&self, device: Device, stream: StreamRequest) -> Result<(), Error> {
        match stream {
            StreamRequest::NoSync => Ok(()),
            // The host's program order: the data must be complete now.
            StreamRequest::Default => self.wait_host(device),
            StreamRequest::LegacyDefault | StreamRequest::PerThreadDefault => {
                Err(Error::Protocol {
                    kind: PyErrorKind::ValueError,
                    message: format!(
                        "{stream:?} is a CUDA default stream, which does not exist on {device}; \
                         expected None or a oneAPI queue"
                    ),
                })
            }
            StreamRequest::Handle(handle) => {
                let consumer =
                    self.context
                        .queue_by_handle(handle)
                        .ok_or_else(|| Error::Protocol {
                            kind: PyErrorKind::ValueError,
                            message: format!(
                                "stream={handle:#x} is not the command list of a live queue of \
                                 this Context; expected the Queue::stream() of a queue made or \
                                 adopted (Queue::from_raw) in this Context value (a queue of \
                                 another Context value is not found, even over the same Level \
                                 Zero context: adopt its command list here; a SYCL queue passed \
                                 as stream stands for its native command list, adopted the same \
                                 way)"
                            ),
                        })?;
                let root = self.context.ze_device(device)?;
                self.context.queue(&root)?.make_ready_for(&consumer)
            }
        }
    }

    fn wait_host(&self, device: Device) -> Result<(), Error> {
        let root = self.context.ze_device(device)?;
        self.context.queue(&root)?.synchronize()
    }

    unsafe fn copy_to_host(&self, device: Device, src: usize, dst: &mut [u8]) -> Result<(), Error> {
        if dst.is_empty() {
            return Ok(());
        }
        let root = self.context.ze_device(device)?;
        self.usm_range(device, src, dst.len())?;
        let queue = self.context.queue(&root)?;
        // SAFETY: `src..src + len` is USM of this context inside one allocation that the list of
        // `device` may read (host USM, or `device`'s own: checked), which the caller keeps valid
        // and unwritten during the call, and which a copy that may still run keeps (`keep`);
        // `dst` is an exclusive host slice of `len` bytes, which after such a copy the caller
        // must leak (the `CopyInFlight` returned below: `DeviceHooks::copy_to_host`'s contract).
        unsafe {
            queue.copy_keeping(
                dst.as_mut_ptr(),
                core::ptr::with_exposed_provenance(src),
                dst.len(),
                &[span(src, dst.len())],
            )
        }
        .map_err(|failed| {
            let unfinished = failed.unfinished();
            match failed.error {
                Error::Runtime { runtime, message } if unfinished => {
                    Error::CopyInFlight { runtime, message }
                }
                other => other,
            }
        })
    }

    unsafe fn copy_from_host(&self, device: Device, src: &[u8], dst: usize) -> Result<(), Error> {
        if src.is_empty() {
            return Ok(());
        }
        let root = self.context.ze_device(device)?;
        self.usm_range(device, dst, src.len())?;
        let queue = self.context.queue(&root)?;
        // SAFETY: `dst..dst + len` is USM of this context inside one allocation that the list of
        // `device` may write (host USM, or `device`'s own: checked), which the caller keeps valid
        // for writes and unaccessed during the call, and which a copy that may still run keeps
        // (`keep`); `src` is a host slice of `len` bytes, which such a copy may still read into
        // `dst` only.
        unsafe {
            queue.copy_keeping(
                core::ptr::with_exposed_provenance_mut(dst),
                src.as_ptr(),
                src.len(),
                &[span(dst, src.len())],
            )
        }
        .map_err(|f| f.error)
    }
}
