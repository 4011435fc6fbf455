//! Drivers and devices: [`Driver`], [`ZeDevice`] and [`DeviceProperties`].

use core::fmt;
use core::hash::{Hash, Hasher};

use dlpack_core::Error;

use crate::api::{LevelZero, check, enumerate};
use crate::sys::{self, ze_device_handle_t, ze_driver_handle_t};

/// A Level Zero driver instance (`ze_driver_handle_t`): a set of devices of one vendor
/// runtime. Get one from [`LevelZero::drivers`].
#[derive(Clone)]
pub struct Driver {
    ze: LevelZero,
    handle: ze_driver_handle_t,
}

// SAFETY: a driver handle may be used from any thread: the Level Zero functions this crate calls
// on it (zeDeviceGet, zeDriverGetApiVersion, zeContextCreate) are thread-safe ("free-threaded"
// in the Level Zero specification's multithreading rules).
unsafe impl Send for Driver {}
// SAFETY: as above; `&Driver` only passes the handle to those functions.
unsafe impl Sync for Driver {}

impl Driver {
    pub(crate) fn from_raw(ze: LevelZero, handle: ze_driver_handle_t) -> Self {
        Driver { ze, handle }
    }

    /// The loader this driver came from.
    pub fn level_zero(&self) -> &LevelZero {
        &self.ze
    }

    /// The raw handle.
    pub fn raw(&self) -> ze_driver_handle_t {
        self.handle
    }

    /// The root devices in the driver's stable order (`zeDeviceGet`). A root device's index in
    /// this list is its default DLPack device number (see [`crate::DeviceNumbering`]).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when `zeDeviceGet` fails or returns a NULL handle.
    pub fn devices(&self) -> Result<Vec<ZeDevice>, Error> {
        let api = self.ze.api();
        // SAFETY: `handle` is a live driver handle; `enumerate` passes a valid count and a NULL
        // or large enough array.
        let handles = enumerate("zeDeviceGet", |count, out| unsafe {
            (api.zeDeviceGet)(self.handle, count, out)
        })?;
        Ok(handles
            .into_iter()
            .map(|h| ZeDevice::from_raw(self.ze.clone(), h))
            .collect())
    }

    /// The Level Zero API version the driver supports, as `(major, minor)`.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when `zeDriverGetApiVersion` fails.
    pub fn api_version(&self) -> Result<(u32, u32), Error> {
        let mut version = sys::ze_api_version_t(0);
        check(
            // SAFETY: live driver handle and a valid out-pointer.
            unsafe { (self.ze.api().zeDriverGetApiVersion)(self.handle, &mut version) },
            "zeDriverGetApiVersion",
        )?;
        Ok((version.major(), version.minor()))
    }
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Driver({:p})", self.handle)
    }
}

/// A Level Zero device or sub-device (`ze_device_handle_t`).
///
/// Named `ZeDevice` to keep it apart from [`dlpack_core::Device`], the DLPack device
/// `(kDLOneAPI, id)` that a [`crate::Context`] assigns to it. Two `ZeDevice`s are equal when
/// their handles are.
#[derive(Clone)]
pub struct ZeDevice {
    ze: LevelZero,
    handle: ze_device_handle_t,
}

// SAFETY: a device handle may be used from any thread: the device queries this crate makes
// (zeDeviceGetProperties, zeDeviceGetSubDevices) are thread-safe, and allocation and command
// list creation take the handle by value.
unsafe impl Send for ZeDevice {}
// SAFETY: as above.
unsafe impl Sync for ZeDevice {}

impl ZeDevice {
    pub(crate) fn from_raw(ze: LevelZero, handle: ze_device_handle_t) -> Self {
        ZeDevice { ze, handle }
    }

    /// The raw handle.
    pub fn raw(&self) -> ze_device_handle_t {
        self.handle
    }

    /// The device's properties (`zeDeviceGetProperties`).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when `zeDeviceGetProperties` fails.
    pub fn properties(&self) -> Result<DeviceProperties, Error> {
        // SAFETY: an all-zero ze_device_properties_t is a valid value (integers, a NULL pointer,
        // byte arrays); the driver overwrites it.
        let mut p: sys::ze_device_properties_t = unsafe { core::mem::zeroed() };
        p.stype = sys::ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
        check(
            // SAFETY: live device handle and a valid, tagged out-struct.
            unsafe { (self.ze.api().zeDeviceGetProperties)(self.handle, &mut p) },
            "zeDeviceGetProperties",
        )?;
        let name_bytes: Vec<u8> = p
            .name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Ok(DeviceProperties {
            name: String::from_utf8_lossy(&name_bytes).into_owned(),
            device_type: p.r#type,
            vendor_id: p.vendorId,
            device_id: p.deviceId,
            uuid: p.uuid.id,
            sub_device_id: (p.flags & sys::ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE != 0)
                .then_some(p.subdeviceId),
        })
    }

    /// The device's sub-devices (`zeDeviceGetSubDevices`); empty for a device that is not
    /// partitioned.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when `zeDeviceGetSubDevices` fails or returns a NULL handle.
    pub fn sub_devices(&self) -> Result<Vec<ZeDevice>, Error> {
        let api = self.ze.api();
        // SAFETY: live device handle; `enumerate` passes a valid count and a NULL or large
        // enough array.
        let handles = enumerate("zeDeviceGetSubDevices", |count, out| unsafe {
            (api.zeDeviceGetSubDevices)(self.handle, count, out)
        })?;
        Ok(handles
            .into_iter()
            .map(|h| ZeDevice::from_raw(self.ze.clone(), h))
            .collect())
    }
}

impl PartialEq for ZeDevice {
    fn eq(&self, other: &Self) -> bool {
        self.handle == other.handle
    }
}

impl Eq for ZeDevice {}

impl Hash for ZeDevice {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.handle.hash(state);
    }
}

impl fmt::Debug for ZeDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ZeDevice({:p})", self.handle)
    }
}

/// What `zeDeviceGetProperties` says about a device (the parts a user of this crate needs to
/// match devices across runtimes, e.g. to build a [`crate::DeviceNumbering`] table).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DeviceProperties {
    /// The device name.
    pub name: String,
    /// GPU, CPU, FPGA, MCA or VPU.
    pub device_type: sys::ze_device_type_t,
    /// PCI vendor id (0x8086 for Intel).
    pub vendor_id: u32,
    /// PCI device id.
    pub device_id: u32,
    /// The device UUID, which SYCL reports too (`ext::intel::info::device::uuid`): the reliable
    /// key for matching a SYCL device to a Level Zero device.
    pub uuid: [u8; sys::ZE_MAX_DEVICE_UUID_SIZE],
    /// `Some(id)` for a sub-device.
    pub sub_device_id: Option<u32>,
}
