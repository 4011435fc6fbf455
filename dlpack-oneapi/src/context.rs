//! [`Context`]: a Level Zero context with its device numbering and default queues, and what it
//! knows about pointers ([`UsmAllocation`]).

use core::fmt;
use core::ops::Range;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use dlpack_core::{Device, DeviceType, Error};

use crate::api::{LevelZero, check, runtime_error};
use crate::leaks::{self, KEPT};
use crate::queue::{Queue, QueueInner};
use crate::sys::{self, ze_context_handle_t};
use crate::{DeviceNumbering, Driver, OneApiHooks, UsmKind, ZeDevice};

/// Locks a mutex, ignoring poisoning (every critical section leaves its data consistent).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How deep sub-devices are searched below a root device.
const SUB_DEVICE_DEPTH: usize = 4;

/// The parts of a context that allocations and queues keep alive.
pub(crate) struct ContextCore {
    pub(crate) ze: LevelZero,
    pub(crate) handle: ze_context_handle_t,
    driver: Driver,
    /// Root devices in `zeDeviceGet` order.
    pub(crate) roots: Vec<ZeDevice>,
    /// The DLPack number of each root device.
    numbers: Vec<Option<i32>>,
    /// Sub-device handle address -> index of its root device.
    sub_devices: HashMap<usize, usize>,
    /// The live queues of this context, by command list handle address, for the hooks'
    /// `make_ready` to find a consumer's queue from its `stream` number.
    pub(crate) queues: Mutex<HashMap<usize, Weak<QueueInner>>>,
    /// Whether the last user destroys the handle: made here, not adopted
    /// ([`Context::from_raw`]).
    owned: bool,
}

// SAFETY: the context handle may be used from any thread (Level Zero functions are free-threaded
// apart from appends to one command list, which `Queue` serialises); the rest is plain data,
// `LevelZero`/`Driver`/`ZeDevice` (Send + Sync) and a Mutex.
unsafe impl Send for ContextCore {}
// SAFETY: as above.
unsafe impl Sync for ContextCore {}

impl ContextCore {
    /// The index of the root device of `device` (itself, or the root of a sub-device).
    pub(crate) fn root_index(&self, device: &ZeDevice) -> Result<usize, Error> {
        let key = device.raw().addr();
        self.roots
            .iter()
            .position(|r| r.raw().addr() == key)
            .or_else(|| self.sub_devices.get(&key).copied())
            .ok_or_else(|| {
                runtime_error(format!(
                    "{device:?} is not a device of this context's driver {:?}",
                    self.driver
                ))
            })
    }

    /// The DLPack device of root device `root`.
    pub(crate) fn dlpack_device_of_root(&self, root: usize) -> Result<Device, Error> {
        match self.numbers.get(root).copied().flatten() {
            Some(id) => Ok(Device::oneapi(id)),
            None => Err(runtime_error(format!(
                "root device {root} ({:?}) has no kDLOneAPI number in this context's device \
                 numbering table",
                self.roots.get(root)
            ))),
        }
    }

    /// The root device index numbered `device` (a `kDLOneAPI` device).
    pub(crate) fn root_of(&self, device: Device) -> Result<usize, Error> {
        if device.device_type != DeviceType::ONEAPI {
            return Err(runtime_error(format!(
                "{device} is not a oneAPI device; expected oneapi:<n>"
            )));
        }
        self.numbers
            .iter()
            .position(|n| *n == Some(device.device_id))
            .ok_or_else(|| {
                let known: Vec<String> = self
                    .numbers
                    .iter()
                    .flatten()
                    .map(|n| format!("oneapi:{n}"))
                    .collect();
                runtime_error(format!(
                    "no Level Zero device of this context is numbered {device}; its devices are \
                     [{}]",
                    known.join(", ")
                ))
            })
    }

    /// What this context knows about `address` (`zeMemGetAllocProperties`, then
    /// `zeMemGetAddressRange`); `None` when the context did not allocate it.
    pub(crate) fn allocation_of(&self, address: usize) -> Result<Option<UsmAllocation>, Error> {
        let api = self.ze.api();
        let ptr = core::ptr::with_exposed_provenance::<core::ffi::c_void>(address);
        let mut props = sys::ze_memory_allocation_properties_t {
            stype: sys::ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES,
            pNext: core::ptr::null_mut(),
            r#type: sys::ZE_MEMORY_TYPE_UNKNOWN,
            id: 0,
            pageSize: 0,
        };
        let mut device: sys::ze_device_handle_t = core::ptr::null_mut();
        check(
            // SAFETY: live context handle; the pointer is only compared by the driver, never
            // dereferenced; the out-struct is tagged and valid, and `device` is a valid out-pointer.
            unsafe { (api.zeMemGetAllocProperties)(self.handle, ptr, &mut props, &mut device) },
            "zeMemGetAllocProperties",
        )?;
        let kind = match props.r#type {
            sys::ZE_MEMORY_TYPE_UNKNOWN => return Ok(None),
            sys::ZE_MEMORY_TYPE_HOST => UsmKind::Host,
            sys::ZE_MEMORY_TYPE_DEVICE => UsmKind::Device,
            sys::ZE_MEMORY_TYPE_SHARED => UsmKind::Shared,
            other => {
                return Err(runtime_error(format!(
                    "zeMemGetAllocProperties reported memory type {:#x} for {address:#x}; \
                     expected UNKNOWN (0), HOST (1), DEVICE (2) or SHARED (3)",
                    other.0
                )));
            }
        };
        let mut base: *mut core::ffi::c_void = core::ptr::null_mut();
        let mut size = 0usize;
        check(
            // SAFETY: as above; both out-pointers are valid.
            unsafe { (api.zeMemGetAddressRange)(self.handle, ptr, &mut base, &mut size) },
            "zeMemGetAddressRange",
        )?;
        let start = base.addr();
        let range = start
            .checked_add(size)
            .filter(|&end| start <= address && address < end)
            .map(|end| start..end)
            .ok_or_else(|| {
                runtime_error(format!(
                    "zeMemGetAddressRange reported base {start:#x} and size {size} for \
                     {address:#x}; expected a range containing it"
                ))
            })?;
        let device = (!device.is_null()).then(|| ZeDevice::from_raw(self.ze.clone(), device));
        Ok(Some(UsmAllocation {
            kind,
            device,
            range,
        }))
    }
}

impl Drop for ContextCore {
    fn drop(&mut self) {
        if !self.owned {
            // Adopted: its maker destroys it (`Context::from_raw`).
            return;
        }
        if KEPT.is_tainted() {
            // Something was leaked because device work using it may still run (an event, a
            // pool, a list, memory, of this context or of another whose copies may touch this
            // one's memory): `zeContextDestroy` "may immediately free all Host and Device
            // allocations associated with this context", so the context is leaked too.
            leaks::count(&leaks::LEAKED.contexts, 1);
            return;
        }
        // Every allocation and queue holds an `Arc<ContextCore>`, so none is left. Nothing can
        // be reported from a destructor; a failure here would mean the driver still counts an
        // object of ours.
        // SAFETY: the handle is live, made by `Context::with_numbering`, and this is its last
        // user.
        let _ = unsafe { (self.ze.api().zeContextDestroy)(self.handle) };
    }
}

/// A Level Zero context over all devices of one driver: the scope in which USM is allocated and
/// pointers are resolved, with the DLPack numbering of its devices.
///
/// Cloning is cheap (an `Arc`). The context lives until the last clone, [`crate::UsmBuffer`] and
/// [`Queue`] made from it are dropped. It keeps one default [`Queue`] per root device
/// ([`Context::queue`]), which the hooks use for copies and synchronisation.
///
/// Pointer queries answer for this context only: memory allocated in another context (another
/// process's, another library's) is unknown here, which Level Zero reports as
/// `ZE_MEMORY_TYPE_UNKNOWN` and the hooks as [`Error::UnknownPointer`]. DLPack carries no context,
/// so a consumer must query in the producer's context: share one `Context` between producer and
/// consumer, or adopt the other runtime's (a SYCL context's native handle) with
/// [`Context::from_raw`].
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

struct ContextInner {
    core: Arc<ContextCore>,
    /// The default queue of each root device, made on first use.
    default_queues: Mutex<Vec<Option<Queue>>>,
}

impl Context {
    /// A context over all devices of `driver`, numbered in the driver's order
    /// ([`DeviceNumbering::driver_order`]).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when a Level Zero call fails: creating the context, or listing the
    /// devices of `driver` and of the drivers before it (whose GPUs SYCL numbers first).
    pub fn new(driver: &Driver) -> Result<Self, Error> {
        Self::with_numbering(driver, DeviceNumbering::driver_order())
    }

    /// A context over all devices of `driver`, numbered by `numbering`.
    ///
    /// # Errors
    ///
    /// As for [`Context::new`], and [`Error::Runtime`] for a numbering table that does not fit
    /// the driver's root devices (a negative number, a sub-device or a device of another driver,
    /// a device or a number given twice, ...).
    pub fn with_numbering(driver: &Driver, numbering: DeviceNumbering) -> Result<Self, Error> {
        let ze = driver.level_zero();
        let desc = sys::ze_context_desc_t {
            stype: sys::ZE_STRUCTURE_TYPE_CONTEXT_DESC,
            pNext: core::ptr::null(),
            flags: 0,
        };
        let mut handle: ze_context_handle_t = core::ptr::null_mut();
        check(
            // SAFETY: live driver handle, a valid tagged descriptor and a valid out-pointer.
            unsafe { (ze.api().zeContextCreate)(driver.raw(), &desc, &mut handle) },
            "zeContextCreate",
        )?;
        if handle.is_null() {
            return Err(runtime_error(
                "zeContextCreate returned success with a NULL context; expected a handle",
            ));
        }
        Self::build(driver, numbering, handle, true)
    }

    /// Adopts a context someone else made: the native Level Zero context of a SYCL context
    /// (`sycl::get_native<sycl::backend::ext_oneapi_level_zero>(context)`), whose USM
    /// allocations dpctl, dpnp and PyTorch XPU export, say. Pointers are then resolved, and
    /// memory allocated, in that very context, which is what lets Level Zero answer for the
    /// other runtime's memory (see the type docs). The context is not destroyed when the last
    /// clone is dropped; `driver` must be the driver it was made on (for SYCL: the platform's
    /// native driver handle, found with [`LevelZero::driver`]).
    ///
    /// # Errors
    ///
    /// [`Error::NullPointer`] for a NULL `handle`; [`Error::Runtime`] when listing the devices
    /// fails or `numbering` does not fit them, as for [`Context::with_numbering`]. The handle is
    /// not destroyed on failure.
    ///
    /// # Safety
    ///
    /// `handle` must be a context of `driver` that stays alive while the returned context, a
    /// clone, or anything made from it ([`crate::UsmBuffer`], [`Queue`], hooks) lives.
    ///
    /// ```
    /// use dlpack_oneapi::{Context, DeviceNumbering, LevelZero};
    ///
    /// # fn main() -> Result<(), dlpack_core::Error> {
    /// let Ok(ze) = LevelZero::load() else { return Ok(()) }; // no Level Zero driver here
    /// let driver = &ze.drivers()?[0];
    /// // Here the runtime that owns the context is this crate itself; with SYCL it would be
    /// // the SYCL context's native handle.
    /// let runtime = Context::new(driver)?;
    /// // SAFETY: `runtime` outlives `adopted` and everything made from it.
    /// let adopted =
    ///     unsafe { Context::from_raw(driver, runtime.raw(), DeviceNumbering::driver_order())? };
    /// assert_eq!(adopted.raw(), runtime.raw());
    /// # Ok(())
    /// # }
    /// ```
    pub unsafe fn from_raw(
        driver: &Driver,
        handle: ze_context_handle_t,
        numbering: DeviceNumbering,
    ) -> Result<Self, Error> {
        if handle.is_null() {
            return Err(Error::NullPointer { what: "context" });
        }
        Self::build(driver, numbering, handle, false)
    }

    /// The context of `handle` over `driver`'s devices; `owned`: destroy the handle at the end.
    /// An owned handle is destroyed on failure too.
    fn build(
        driver: &Driver,
        numbering: DeviceNumbering,
        handle: ze_context_handle_t,
        owned: bool,
    ) -> Result<Self, Error> {
        let ze = driver.level_zero().clone();
        let devices = driver.devices().and_then(|roots| {
            let mut sub_devices = HashMap::new();
            for (root, device) in roots.iter().enumerate() {
                collect_sub_devices(device, root, SUB_DEVICE_DEPTH, &mut sub_devices)?;
            }
            let first = if numbering.is_driver_order() {
                gpus_before(driver)?
            } else {
                0
            };
            let numbers = numbering.assign(&roots, &sub_devices, first)?;
            Ok((roots, sub_devices, numbers))
        });
        let (roots, sub_devices, numbers) = match devices {
            Ok(devices) => devices,
            Err(e) => {
                if owned {
                    // SAFETY: the handle was just made and nothing else uses it.
                    let _ = unsafe { (ze.api().zeContextDestroy)(handle) };
                }
                return Err(e);
            }
        };
        let n_roots = roots.len();
        let core = Arc::new(ContextCore {
            ze,
            handle,
            driver: driver.clone(),
            roots,
            numbers,
            sub_devices,
            queues: Mutex::new(HashMap::new()),
            owned,
        });
        Ok(Context {
            inner: Arc::new(ContextInner {
                core,
                default_queues: Mutex::new(vec![None; n_roots]),
            }),
        })
    }

    pub(crate) fn core(&self) -> &Arc<ContextCore> {
        &self.inner.core
    }

    /// The raw handle.
    pub fn raw(&self) -> ze_context_handle_t {
        self.inner.core.handle
    }

    /// The driver's root devices, in `zeDeviceGet` order.
    pub fn devices(&self) -> &[ZeDevice] {
        &self.inner.core.roots
    }

    /// The root device of `device`: itself for a root device, its root for a sub-device.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] if `device` is not a device (or sub-device) of this context's driver.
    pub fn root_device(&self, device: &ZeDevice) -> Result<ZeDevice, Error> {
        let root = self.inner.core.root_index(device)?;
        Ok(self.inner.core.roots[root].clone())
    }

    /// The DLPack device `(kDLOneAPI, n)` of `device` under this context's numbering
    /// (a sub-device gets its root device's number).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] if `device` is not a device of this context's driver, or its root
    /// device has no number in this context's numbering.
    pub fn dlpack_device(&self, device: &ZeDevice) -> Result<Device, Error> {
        let root = self.inner.core.root_index(device)?;
        self.inner.core.dlpack_device_of_root(root)
    }

    /// The root device numbered `device`, a `(kDLOneAPI, n)` device.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] if `device` is not a `kDLOneAPI` device, or no root device of this
    /// context has its number.
    pub fn ze_device(&self, device: Device) -> Result<ZeDevice, Error> {
        let root = self.inner.core.root_of(device)?;
        Ok(self.inner.core.roots[root].clone())
    }

    /// The default queue of `device`'s root device, made on first use. The hooks copy and
    /// synchronise on these queues, and [`crate::UsmBuffer`]'s copies run on them.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] if `device` is not a device of this context's driver, or the queue
    /// cannot be made ([`Queue::new`]).
    pub fn queue(&self, device: &ZeDevice) -> Result<Queue, Error> {
        let root = self.inner.core.root_index(device)?;
        self.root_queue(root)
    }

    pub(crate) fn root_queue(&self, root: usize) -> Result<Queue, Error> {
        let mut queues = lock(&self.inner.default_queues);
        let slot = queues.get_mut(root).ok_or_else(|| {
            runtime_error(format!("root device {root} does not exist in this context"))
        })?;
        if let Some(q) = slot {
            return Ok(q.clone());
        }
        let q = Queue::new(self, &self.inner.core.roots[root])?;
        *slot = Some(q.clone());
        Ok(q)
    }

    /// What this context knows about the memory at `address`: `None` when the context did not
    /// allocate it (`ZE_MEMORY_TYPE_UNKNOWN`, which includes memory of other contexts).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when `zeMemGetAllocProperties` or `zeMemGetAddressRange` fails, or
    /// reports what Level Zero does not define (an unknown memory type, a range that does not
    /// contain `address`).
    pub fn allocation_of(&self, address: usize) -> Result<Option<UsmAllocation>, Error> {
        self.inner.core.allocation_of(address)
    }

    /// The queue of this context whose command list handle is `handle`, if one is live
    /// (made by [`Queue::new`] or adopted by [`Queue::from_raw`]).
    pub fn queue_by_handle(&self, handle: usize) -> Option<Queue> {
        lock(&self.inner.core.queues)
            .get(&handle)
            .and_then(Weak::upgrade)
            .map(Queue::from_inner)
    }

    /// The device hooks for this context ([`OneApiHooks`]).
    pub fn hooks(&self) -> OneApiHooks {
        OneApiHooks::new(self.clone())
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = &self.inner.core;
        f.debug_struct("Context")
            .field("handle", &core.handle)
            .field("driver", &core.driver)
            .field("numbers", &core.numbers)
            .finish()
    }
}

/// How many GPU root devices the drivers before `driver` in `zeDriverGet` have: where SYCL
/// (one platform per Level Zero driver, in that order) starts numbering `driver`'s GPUs.
fn gpus_before(driver: &Driver) -> Result<usize, Error> {
    let mut count = 0;
    for earlier in driver.level_zero().drivers()? {
        if earlier.raw() == driver.raw() {
            break;
        }
        for device in earlier.devices()? {
            if device.properties()?.device_type == sys::ZE_DEVICE_TYPE_GPU {
                count += 1;
            }
        }
    }
    Ok(count)
}

fn collect_sub_devices(
    device: &ZeDevice,
    root: usize,
    depth: usize,
    out: &mut HashMap<usize, usize>,
) -> Result<(), Error> {
    if depth == 0 {
        return Ok(());
    }
    for sub in device.sub_devices()? {
        out.insert(sub.raw().addr(), root);
        collect_sub_devices(&sub, root, depth - 1, out)?;
    }
    Ok(())
}

/// What a context reports about a USM pointer ([`Context::allocation_of`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UsmAllocation {
    /// Device, shared or host USM.
    pub kind: UsmKind,
    /// The device the allocation belongs to (possibly a sub-device); `None` for host USM, and
    /// for shared USM allocated without a device.
    pub device: Option<ZeDevice>,
    /// The whole allocation, from `zeMemGetAddressRange`.
    pub range: Range<usize>,
}
