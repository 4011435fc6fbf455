//! How a producer serves `dl_device` and `copy`: [`plan_export`].

use crate::{Device, DeviceType, Error};

use super::buffer_error;
#[cfg(doc)] // for the docs' links
use super::{ExportArgs, ExportDecision};
#[cfg(doc)]
use crate::PyErrorKind;

/// How a producer serves the consumer's `dl_device` / `copy` request, from [`plan_export`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ExportPlan {
    /// Export the tensor's own memory on its own device, zero-copy.
    AsIs,
    /// Export the tensor's own memory zero-copy, but with this device in the `DLTensor`:
    /// pinned or managed memory handed to a consumer that asked for `(kDLCPU, 0)`. Not a copy:
    /// `IS_COPIED` stays clear.
    Relabel(Device),
    /// Copy the data into fresh memory on this device and export the copy, setting `IS_COPIED`
    /// (see [`ExportDecision::sets_is_copied`]). When the copy stays on a device with streams,
    /// the standard asks for it to run on the consumer's stream.
    CopyTo(Device),
}

impl ExportPlan {
    /// The device the exported `DLTensor` names.
    pub const fn target(self, tensor_device: Device) -> Device {
        match self {
            ExportPlan::AsIs => tensor_device,
            ExportPlan::Relabel(d) | ExportPlan::CopyTo(d) => d,
        }
    }

    /// Whether the producer makes a copy, which the standard says must carry `IS_COPIED`.
    pub const fn is_copy(self) -> bool {
        matches!(self, ExportPlan::CopyTo(_))
    }

    /// Whether the copy needs a device runtime: it reads memory the host cannot read
    /// ([`DeviceHooks::copy_to_host`](crate::DeviceHooks::copy_to_host)), or it must allocate
    /// pinned, managed or device memory (a same-device copy of a GPU tensor), which no hook does
    /// yet. A copy of host-readable memory to the CPU is a plain host copy (`false`), as are
    /// [`AsIs`](Self::AsIs) and [`Relabel`](Self::Relabel).
    pub const fn needs_device_runtime(self, tensor_device: Device) -> bool {
        match self {
            ExportPlan::CopyTo(d) => {
                !(d.device_type.0 == DeviceType::CPU.0
                    && tensor_device.device_type.is_host_accessible())
            }
            _ => false,
        }
    }
}

/// Decides how to serve `dl_device` and `copy` for a tensor on `tensor_device`.
///
/// - `dl_device` `None` or the tensor's device: `copy=True` gives
///   [`CopyTo`](ExportPlan::CopyTo) the same device; `None` or `False` give
///   [`AsIs`](ExportPlan::AsIs).
/// - `dl_device` `(kDLCPU, 0)` for host-readable memory (`CUDA_HOST`, `ROCM_HOST`,
///   `CUDA_MANAGED`): [`Relabel`](ExportPlan::Relabel) to the CPU, zero-copy, unless
///   `copy=True` ([`CopyTo`](ExportPlan::CopyTo) the CPU).
/// - `dl_device` `(kDLCPU, 0)` for memory the host cannot read (`CUDA`, `ROCM`, `ONEAPI`, ...):
///   `copy=False` is a `BufferError`; otherwise [`CopyTo`](ExportPlan::CopyTo) the CPU, which
///   needs the device's hook ([`ExportPlan::needs_device_runtime`]). oneAPI memory counts as
///   device memory here even when it is host or shared USM: only a hook's
///   [`resolve`](crate::DeviceHooks::resolve) can tell, and a copy is always correct. A
///   producer that has asked the hook decides with [`ExportArgs::decide_for_memory`], which
///   relabels such memory too.
/// - any other `dl_device` (another GPU, `(kDLCPU, 1)`, ...): `BufferError` naming both
///   devices. The standard only requires exports to `(kDLCPU, 0)`.
///
/// ```
/// use dlpack_core::protocol::{ExportPlan, plan_export};
/// use dlpack_core::{Device, DeviceType, PyErrorKind};
/// let pinned = Device::new(DeviceType::CUDA_HOST, 0);
/// assert_eq!(plan_export(pinned, Some(Device::CPU), None), Ok(ExportPlan::Relabel(Device::CPU)));
/// let err = plan_export(Device::cuda(0), Some(Device::CPU), Some(false)).unwrap_err();
/// assert_eq!(err.py_kind(), PyErrorKind::BufferError);
/// assert_eq!(err.to_string(), "a copy is needed to move cuda:0 data to cpu:0 but copy=False");
/// ```
///
/// # Errors
///
/// An [`Error::Protocol`] of kind [`PyErrorKind::BufferError`] for `copy=False` when memory the
/// host cannot read is asked for on `(kDLCPU, 0)`, and for a `dl_device` other than `None`, the
/// tensor's device or `(kDLCPU, 0)`.
pub fn plan_export(
    tensor_device: Device,
    dl_device: Option<Device>,
    copy: Option<bool>,
) -> Result<ExportPlan, Error> {
    let host_readable = tensor_device.device_type.is_host_accessible();
    plan_export_of(tensor_device, host_readable, dl_device, copy)
}

/// [`plan_export`] for memory the host can (`host_readable`) or cannot read.
pub(super) fn plan_export_of(
    tensor_device: Device,
    host_readable: bool,
    dl_device: Option<Device>,
    copy: Option<bool>,
) -> Result<ExportPlan, Error> {
    let target = dl_device.unwrap_or(tensor_device);
    let forced_copy = copy == Some(true);
    if target == tensor_device {
        return Ok(if forced_copy {
            ExportPlan::CopyTo(tensor_device)
        } else {
            ExportPlan::AsIs
        });
    }
    if target == Device::CPU {
        return if host_readable {
            Ok(if forced_copy {
                ExportPlan::CopyTo(Device::CPU)
            } else {
                ExportPlan::Relabel(Device::CPU)
            })
        } else if copy == Some(false) {
            Err(buffer_error(format!(
                "a copy is needed to move {tensor_device} data to {target} but copy=False"
            )))
        } else {
            Ok(ExportPlan::CopyTo(Device::CPU))
        };
    }
    Err(buffer_error(if tensor_device == Device::CPU {
        format!(
            "cannot export a tensor on {tensor_device} to dl_device={target}: expected None or cpu:0 (its own device)"
        )
    } else {
        format!(
            "cannot export a tensor on {tensor_device} to dl_device={target}: expected None, {tensor_device} (its own device) or cpu:0"
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PyErrorKind;
    use crate::protocol::fixtures::*;

    /// Tensor device, `dl_device`, `copy`, and the expected plan or error kind.
    type PlanRow = (
        Device,
        Option<Device>,
        Option<bool>,
        Result<ExportPlan, PyErrorKind>,
    );

    #[test]
    fn export_plans_follow_dl_device_and_copy() {
        use ExportPlan::*;
        use PyErrorKind::BufferError as BE;
        let cpu = Device::CPU;
        let cuda0 = Device::cuda(0);
        let cuda1 = Device::cuda(1);
        // (tensor device, dl_device, copy, expected)
        let table: &[PlanRow] = &[
            // No dl_device: the tensor's own device.
            (cpu, None, None, Ok(AsIs)),
            (cpu, None, Some(false), Ok(AsIs)),
            (cpu, None, Some(true), Ok(CopyTo(cpu))),
            (cuda0, None, None, Ok(AsIs)),
            (cuda0, None, Some(false), Ok(AsIs)),
            (cuda0, None, Some(true), Ok(CopyTo(cuda0))),
            (CUDA_HOST, None, None, Ok(AsIs)),
            (CUDA_HOST, None, Some(true), Ok(CopyTo(CUDA_HOST))),
            (ONEAPI, None, Some(true), Ok(CopyTo(ONEAPI))),
            (VULKAN, None, None, Ok(AsIs)),
            // dl_device equal to the tensor's device.
            (cpu, Some(cpu), None, Ok(AsIs)),
            (cpu, Some(cpu), Some(false), Ok(AsIs)),
            (cpu, Some(cpu), Some(true), Ok(CopyTo(cpu))),
            (cuda1, Some(cuda1), None, Ok(AsIs)),
            (cuda1, Some(cuda1), Some(true), Ok(CopyTo(cuda1))),
            (ONEAPI, Some(ONEAPI), Some(false), Ok(AsIs)),
            // Host-readable memory to the CPU: relabel unless copy=True.
            (CUDA_HOST, Some(cpu), None, Ok(Relabel(cpu))),
            (CUDA_HOST, Some(cpu), Some(false), Ok(Relabel(cpu))),
            (CUDA_HOST, Some(cpu), Some(true), Ok(CopyTo(cpu))),
            (ROCM_HOST, Some(cpu), None, Ok(Relabel(cpu))),
            (ROCM_HOST, Some(cpu), Some(false), Ok(Relabel(cpu))),
            (ROCM_HOST, Some(cpu), Some(true), Ok(CopyTo(cpu))),
            (CUDA_MANAGED, Some(cpu), None, Ok(Relabel(cpu))),
            (CUDA_MANAGED, Some(cpu), Some(false), Ok(Relabel(cpu))),
            (CUDA_MANAGED, Some(cpu), Some(true), Ok(CopyTo(cpu))),
            // Device memory to the CPU: a copy, refused by copy=False.
            (cuda0, Some(cpu), None, Ok(CopyTo(cpu))),
            (cuda0, Some(cpu), Some(true), Ok(CopyTo(cpu))),
            (cuda0, Some(cpu), Some(false), Err(BE)),
            (cuda1, Some(cpu), Some(false), Err(BE)),
            (ROCM, Some(cpu), None, Ok(CopyTo(cpu))),
            (ROCM, Some(cpu), Some(false), Err(BE)),
            (ONEAPI, Some(cpu), None, Ok(CopyTo(cpu))),
            (ONEAPI, Some(cpu), Some(false), Err(BE)),
            (VULKAN, Some(cpu), Some(true), Ok(CopyTo(cpu))),
            (VULKAN, Some(cpu), Some(false), Err(BE)),
            // Any other target: refused whatever copy says.
            (cuda0, Some(cuda1), None, Err(BE)),
            (cuda0, Some(cuda1), Some(true), Err(BE)),
            (cpu, Some(cuda0), None, Err(BE)),
            (cpu, Some(cuda0), Some(true), Err(BE)),
            (CUDA_HOST, Some(cuda0), None, Err(BE)),
            (cuda0, Some(CUDA_HOST), None, Err(BE)),
            (cpu, Some(Device::new(DeviceType::CPU, 1)), None, Err(BE)),
            (
                CUDA_HOST,
                Some(Device::new(DeviceType::CPU, 1)),
                None,
                Err(BE),
            ),
            (ONEAPI, Some(Device::oneapi(1)), Some(false), Err(BE)),
            (cuda0, Some(VULKAN), None, Err(BE)),
        ];
        for &(tensor, dl_device, copy, expected) in table {
            let row = format!("tensor {tensor}, dl_device={dl_device:?}, copy={copy:?}");
            let got = plan_export(tensor, dl_device, copy);
            match expected {
                Ok(plan) => {
                    assert_eq!(got, Ok(plan), "{row}");
                    assert_eq!(plan.target(tensor), dl_device.unwrap_or(tensor), "{row}");
                    // copy=True must always copy, copy=False never.
                    match copy {
                        Some(true) => assert!(plan.is_copy(), "{row}"),
                        Some(false) => assert!(!plan.is_copy(), "{row}"),
                        None => {}
                    }
                }
                Err(kind) => {
                    let target = dl_device.unwrap().to_string();
                    let tensor = tensor.to_string();
                    assert_refused(got, kind, &[&tensor, &target], &row);
                }
            }
        }
    }

    #[test]
    fn copy_false_message_is_exact() {
        let err = plan_export(Device::cuda(0), Some(Device::CPU), Some(false)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a copy is needed to move cuda:0 data to cpu:0 but copy=False"
        );
        let err = plan_export(Device::cuda(0), Some(Device::cuda(1)), None).unwrap_err();
        assert!(err.to_string().contains("dl_device=cuda:1"), "{err}");
    }

    #[test]
    fn copies_that_need_a_device_runtime() {
        use ExportPlan::*;
        let cpu = Device::CPU;
        let cuda0 = Device::cuda(0);
        let table = [
            (AsIs, cuda0, false),
            (Relabel(cpu), CUDA_HOST, false),
            (CopyTo(cpu), cpu, false),
            (CopyTo(cpu), CUDA_HOST, false),
            (CopyTo(cpu), ROCM_HOST, false),
            (CopyTo(cpu), CUDA_MANAGED, false),
            (CopyTo(cpu), cuda0, true),
            (CopyTo(cpu), ROCM, true),
            (CopyTo(cpu), ONEAPI, true),
            (CopyTo(cuda0), cuda0, true),
            (CopyTo(CUDA_HOST), CUDA_HOST, true),
        ];
        for (plan, tensor, expected) in table {
            assert_eq!(
                plan.needs_device_runtime(tensor),
                expected,
                "{plan:?} of a tensor on {tensor}"
            );
        }
    }
}
