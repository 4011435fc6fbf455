//! [`DeviceNumbering`]: the hook between DLPack's `kDLOneAPI` device numbers and Level Zero
//! devices.

use std::collections::{HashMap, HashSet};

use dlpack_core::Error;

use crate::ZeDevice;
use crate::api::runtime_error;

/// How a [`crate::Context`] numbers its devices for DLPack: `(kDLOneAPI, device_id)` <-> a Level
/// Zero root device.
///
/// dpctl, dpnp and PyTorch (XPU) put the position of the root device in
/// `sycl::device::get_devices()` in `device_id`: a list over every SYCL platform and backend
/// (OpenCL CPU devices included), which Level Zero cannot see. So the numbering is a hook with
/// two forms:
///
/// - [`DeviceNumbering::driver_order`] (the default): a root device's number is its index in
///   `zeDeviceGet` of the context's driver (the stable order Level Zero guarantees), after the
///   GPUs of the drivers that come before it in `zeDriverGet`. SYCL makes one platform per
///   Level Zero driver, in that order, and lists their GPUs one platform after the other, so
///   with two drivers (Intel's current GPU driver beside its legacy one, say) the second
///   driver's first GPU is device 1, as in dpctl. This matches SYCL when the Level Zero GPUs
///   are the only SYCL devices, or come first in SYCL's list (the usual
///   `ONEAPI_DEVICE_SELECTOR=level_zero:*` setup).
/// - [`DeviceNumbering::table`]: explicit `(device, number)` pairs for users who know the SYCL
///   numbering, e.g. built by matching each SYCL device's UUID (`ext::intel::info::device::uuid`)
///   with [`crate::DeviceProperties::uuid`]. Devices missing from the table have no number:
///   exporting their memory, or importing a tensor that claims a number not in the table, is an
///   error.
///
/// Either way `kDLOneAPI` numbers root devices only: a sub-device (a tile of a partitioned GPU)
/// maps to the number of its root device, found by walking `zeDeviceGetSubDevices` from the
/// roots (the bookworm loader, API 1.4, has no `zeDeviceGetRootDevice`).
///
/// ```
/// use dlpack_oneapi::{Context, DeviceNumbering, LevelZero};
///
/// # fn main() -> Result<(), dlpack_core::Error> {
/// let Ok(ze) = LevelZero::load() else { return Ok(()) }; // no driver here: nothing to number
/// let driver = &ze.drivers()?[0];
/// let devices = driver.devices()?;
/// // Say SYCL lists two OpenCL CPU devices first: the GPUs are SYCL devices 2, 3, ...
/// let table = devices.iter().cloned().zip(2..);
/// let context = Context::with_numbering(driver, DeviceNumbering::table(table))?;
/// assert_eq!(context.dlpack_device(&devices[0])?, dlpack_core::Device::oneapi(2));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct DeviceNumbering {
    table: Option<Vec<(ZeDevice, i32)>>,
}

impl DeviceNumbering {
    /// Root device `i` of the driver's `zeDeviceGet` order is `kDLOneAPI` device `g + i`, `g`
    /// being the number of GPU root devices of the drivers before it in `zeDriverGet` (0 for
    /// the first driver).
    pub fn driver_order() -> Self {
        DeviceNumbering { table: None }
    }

    /// Explicit numbers for root devices. Checked when a [`crate::Context`] is made: every
    /// device must be a root device of the context's driver, numbers must be `>= 0`, and
    /// neither a device nor a number may appear twice.
    pub fn table(entries: impl IntoIterator<Item = (ZeDevice, i32)>) -> Self {
        DeviceNumbering {
            table: Some(entries.into_iter().collect()),
        }
    }

    /// Whether the numbers follow the driver order (and so need the GPUs of earlier drivers).
    pub(crate) fn is_driver_order(&self) -> bool {
        self.table.is_none()
    }

    /// The number of each root device (`None`: no number), after checking the table against
    /// the driver's root devices and their sub-devices; in driver order, numbers start at
    /// `first`.
    pub(crate) fn assign(
        &self,
        roots: &[ZeDevice],
        sub_devices: &HashMap<usize, usize>,
        first: usize,
    ) -> Result<Vec<Option<i32>>, Error> {
        let root_keys: Vec<usize> = roots.iter().map(|d| d.raw().addr()).collect();
        let subs: HashSet<usize> = sub_devices.keys().copied().collect();
        let table: Option<Vec<(usize, i32)>> = self
            .table
            .as_ref()
            .map(|t| t.iter().map(|(d, id)| (d.raw().addr(), *id)).collect());
        assign_numbers(&root_keys, &subs, table.as_deref(), first)
    }
}

/// The numbering logic on device keys (handle addresses), apart from any runtime.
pub(crate) fn assign_numbers(
    roots: &[usize],
    subs: &HashSet<usize>,
    table: Option<&[(usize, i32)]>,
    first: usize,
) -> Result<Vec<Option<i32>>, Error> {
    let Some(table) = table else {
        return (0..roots.len())
            .map(|i| {
                first
                    .checked_add(i)
                    .and_then(|n| i32::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(|| {
                        runtime_error(format!(
                            "root device {i} after {first} devices of other drivers does not fit an i32"
                        ))
                    })
            })
            .collect();
    };
    let mut numbers = vec![None; roots.len()];
    let mut seen_ids = HashSet::new();
    for (entry, &(key, id)) in table.iter().enumerate() {
        if id < 0 {
            return Err(runtime_error(format!(
                "device numbering table entry {entry} gives number {id}; expected a kDLOneAPI \
                 device_id >= 0"
            )));
        }
        let Some(root) = roots.iter().position(|&r| r == key) else {
            let what = if subs.contains(&key) {
                "a sub-device; kDLOneAPI numbers root devices only (a sub-device takes its \
                 root's number)"
            } else {
                "not a device of the context's driver"
            };
            return Err(runtime_error(format!(
                "device numbering table entry {entry} (number {id}) names {key:#x}, which is \
                 {what}"
            )));
        };
        if numbers[root].is_some() {
            return Err(runtime_error(format!(
                "device numbering table entry {entry} numbers root device {root} a second time; \
                 expected each device once"
            )));
        }
        if !seen_ids.insert(id) {
            return Err(runtime_error(format!(
                "device numbering table entry {entry} gives number {id} a second time; expected \
                 each number once"
            )));
        }
        numbers[root] = Some(id);
    }
    Ok(numbers)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOTS: [usize; 3] = [0x100, 0x200, 0x300];

    fn subs() -> HashSet<usize> {
        [0x210, 0x220].into_iter().collect()
    }

    #[test]
    fn driver_order_numbers_root_devices_by_position() {
        assert_eq!(
            assign_numbers(&ROOTS, &subs(), None, 0).unwrap(),
            [Some(0), Some(1), Some(2)]
        );
    }

    #[test]
    fn driver_order_numbers_start_after_the_gpus_of_earlier_drivers() {
        assert_eq!(
            assign_numbers(&ROOTS, &subs(), None, 2).unwrap(),
            [Some(2), Some(3), Some(4)]
        );
        let err = assign_numbers(&ROOTS, &subs(), None, i32::MAX as usize).unwrap_err();
        assert!(err.to_string().contains("does not fit an i32"), "{err}");
        // A table is the caller's numbering: earlier drivers do not shift it.
        let table = [(0x200, 7)];
        assert_eq!(
            assign_numbers(&ROOTS, &subs(), Some(&table), 2).unwrap(),
            [None, Some(7), None]
        );
    }

    #[test]
    fn a_table_numbers_listed_devices_and_leaves_the_rest_unnumbered() {
        let table = [(0x300, 7), (0x100, 2)];
        assert_eq!(
            assign_numbers(&ROOTS, &subs(), Some(&table), 0).unwrap(),
            [Some(2), None, Some(7)]
        );
    }

    #[test]
    fn a_table_refuses_sub_devices_foreign_devices_duplicates_and_negative_numbers() {
        let cases: [(&[(usize, i32)], &str); 5] = [
            (&[(0x210, 1)], "is a sub-device"),
            (&[(0x999, 1)], "not a device of the context's driver"),
            (
                &[(0x100, 1), (0x100, 2)],
                "second time; expected each device once",
            ),
            (&[(0x100, 1), (0x200, 1)], "gives number 1 a second time"),
            (
                &[(0x100, -1)],
                "gives number -1; expected a kDLOneAPI device_id >= 0",
            ),
        ];
        for (table, needle) in cases {
            let err = assign_numbers(&ROOTS, &subs(), Some(table), 0).unwrap_err();
            assert!(err.to_string().contains(needle), "{table:?}: {err}");
        }
    }
}
