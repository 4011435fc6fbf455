//! Everything a producer's `__dlpack__` decides at once: [`ExportArgs::decide`].

use crate::device::{MemoryKind, StreamRequest};
use crate::{Device, DeviceType, Error, Version};

use super::plan::plan_export_of;
#[cfg(doc)] // for the docs' links
use super::plan_export;
use super::{ExportPlan, ExportStruct, choose_struct, parse_stream};

/// What the producer must wait for before returning the capsule, from [`ExportArgs::decide`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum SyncAction {
    /// Nothing: a tensor on the CPU (or on a device this crate knows no streams for), or a
    /// consumer that asked for no synchronisation.
    Nothing,
    /// Make the producer's pending work on the tensor's device visible on this stream of the
    /// consumer: [`DeviceHooks::make_ready`](crate::DeviceHooks::make_ready) with the tensor's
    /// device. A same-device copy should run on that stream too.
    Stream(StreamRequest),
    /// Block the host until the producer's pending work on the tensor is done, before
    /// relabelling or copying the data to the CPU: the standard requires a synchronisation
    /// when `(kDLCPU, 0)` is asked for, and the host cannot wait on a stream. Also for pinned
    /// and managed memory asked for with `stream=None`, which a CPU consumer may read in place.
    Host,
}

/// The keyword arguments of `__dlpack__`, as the glue layer converts them from Python.
///
/// `Default` is a call with no keyword (`x.__dlpack__()`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ExportArgs {
    /// `stream`: `None`, or an integer (see [`parse_stream`]).
    pub stream: Option<i64>,
    /// `max_version`: the newest DLPack version the consumer reads (see [`choose_struct`]).
    pub max_version: Option<Version>,
    /// `dl_device`: the device the consumer wants the data on (see [`plan_export`]).
    pub dl_device: Option<Device>,
    /// `copy`: `Some(true)` always copy, `Some(false)` never copy, `None` copy only if needed.
    pub copy: Option<bool>,
}

/// Everything a producer's `__dlpack__` must do, from [`ExportArgs::decide`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ExportDecision {
    /// The struct to build and the capsule name to give it
    /// ([`ExportStruct::capsule_name`]).
    pub format: ExportStruct,
    /// Whether to export as is, relabel or copy.
    pub plan: ExportPlan,
    /// What to wait for before returning.
    pub sync: SyncAction,
}

impl ExportDecision {
    /// Whether the exported struct's flags get `IS_COPIED`: when the producer copies and the
    /// struct is versioned. A legacy struct has no flags, so a copy for a legacy consumer is
    /// handed over unmarked (the flag only tells the consumer that it owns the memory alone).
    pub const fn sets_is_copied(&self) -> bool {
        self.plan.is_copy() && matches!(self.format, ExportStruct::Versioned)
    }
}

impl ExportArgs {
    /// Decides everything for exporting a tensor on `tensor_device`: the struct
    /// ([`choose_struct`]), the plan ([`plan_export`], whose `BufferError` comes first), then the
    /// stream ([`parse_stream`] for the exported device) and what to wait for.
    ///
    /// Synchronisation: `-1` (or `None` on oneAPI) means [`SyncAction::Nothing`]. A tensor on a
    /// device with streams (CUDA, ROCm and their pinned and managed memory, oneAPI) exported to
    /// the CPU, by relabel or copy, needs [`SyncAction::Host`]; kept on its device it needs
    /// [`SyncAction::Stream`], except pinned and managed memory asked for with `stream=None`,
    /// which a CPU consumer may read in place (NumPy does, passing no stream): the host waits
    /// ([`SyncAction::Host`]). Tensors on other devices need nothing this crate can do.
    ///
    /// # Errors
    ///
    /// An [`Error::Protocol`]: `BufferError` from [`plan_export`], `ValueError` from
    /// [`parse_stream`]. A read-only tensor asked for as a legacy struct is refused by the
    /// exporter ([`Error::LegacyReadOnly`]), not here.
    #[inline]
    pub fn decide(&self, tensor_device: Device) -> Result<ExportDecision, Error> {
        // The common call (`np.from_dlpack(x)` on a host tensor, say): nothing asked but the
        // struct, on a device without streams. The general path below gives the same decision
        // (a test compares the two for every device type), after parsing what was not asked.
        if self.stream.is_none()
            && self.dl_device.is_none()
            && self.copy.is_none()
            && !has_streams(tensor_device)
        {
            return Ok(ExportDecision {
                format: choose_struct(self.max_version),
                plan: ExportPlan::AsIs,
                sync: SyncAction::Nothing,
            });
        }
        self.decide_in_full(
            tensor_device,
            tensor_device.device_type.is_host_accessible(),
        )
    }

    /// [`ExportArgs::decide`] for a tensor whose memory a device hook has resolved
    /// ([`DeviceHooks::resolve`](crate::DeviceHooks::resolve) reported `memory`): memory the
    /// host can read on a device type that does not say so (oneAPI host and shared USM) is then
    /// relabelled to the CPU without a copy, as pinned and managed memory are, and `copy=False`
    /// is served; device memory is copied, as [`ExportArgs::decide`] plans.
    ///
    /// ```
    /// use dlpack_core::protocol::{ExportArgs, ExportPlan};
    /// use dlpack_core::{Device, MemoryKind};
    /// let to_cpu = ExportArgs { dl_device: Some(Device::CPU), ..ExportArgs::default() };
    /// let usm = Device::oneapi(0);
    /// assert_eq!(to_cpu.decide(usm)?.plan, ExportPlan::CopyTo(Device::CPU));
    /// assert_eq!(
    ///     to_cpu.decide_for_memory(usm, MemoryKind::Managed)?.plan,
    ///     ExportPlan::Relabel(Device::CPU)
    /// );
    /// assert_eq!(
    ///     to_cpu.decide_for_memory(usm, MemoryKind::Device)?.plan,
    ///     ExportPlan::CopyTo(Device::CPU)
    /// );
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`ExportArgs::decide`], except that `copy=False` with `dl_device=(kDLCPU, 0)` is a
    /// `BufferError` only for memory the host cannot read.
    pub fn decide_for_memory(
        &self,
        tensor_device: Device,
        memory: MemoryKind,
    ) -> Result<ExportDecision, Error> {
        self.decide_in_full(tensor_device, memory.is_host_accessible())
    }

    /// [`ExportArgs::decide`] without its shortcut, for memory the host can (`host_readable`)
    /// or cannot read.
    fn decide_in_full(
        &self,
        tensor_device: Device,
        host_readable: bool,
    ) -> Result<ExportDecision, Error> {
        let format = choose_struct(self.max_version);
        let plan = plan_export_of(tensor_device, host_readable, self.dl_device, self.copy)?;
        let target = plan.target(tensor_device);
        let stream = parse_stream(target, self.stream)?;
        let sync = if stream == StreamRequest::NoSync || !has_streams(tensor_device) {
            SyncAction::Nothing
        } else if target.device_type == DeviceType::CPU
            || (stream == StreamRequest::Default && is_host_memory(target.device_type))
        {
            // Pinned and managed memory asked for with `stream=None` may go to a CPU consumer
            // (NumPy reads `kDLCUDAHost` and `kDLCUDAManaged` in place, passing no stream),
            // which no stream ordering reaches: the host waits. A GPU consumer that wants the
            // device-side ordering alone names its stream (on ROCm, where `0` is the default
            // stream and reads as `None`, a stream other than the default one).
            SyncAction::Host
        } else {
            SyncAction::Stream(stream)
        };
        Ok(ExportDecision { format, plan, sync })
    }
}

/// Whether `device_type` is host memory a GPU may be writing: pinned (CUDA, ROCm) or CUDA
/// managed memory.
fn is_host_memory(device_type: DeviceType) -> bool {
    matches!(
        device_type,
        DeviceType::CUDA_HOST | DeviceType::ROCM_HOST | DeviceType::CUDA_MANAGED
    )
}

/// Whether tensors on `device` are ordered by streams the producer may have to synchronise:
/// CUDA, ROCm and their pinned and managed memory, and oneAPI.
fn has_streams(device: Device) -> bool {
    matches!(
        device.device_type,
        DeviceType::CUDA
            | DeviceType::CUDA_HOST
            | DeviceType::CUDA_MANAGED
            | DeviceType::ROCM
            | DeviceType::ROCM_HOST
            | DeviceType::ONEAPI
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PyErrorKind;
    use crate::protocol::fixtures::*;

    #[test]
    fn the_shortcut_of_decide_agrees_with_the_full_decision() {
        let versions = [
            None,
            Some(Version::new(0, 8)),
            Some(Version::new(1, 0)),
            Some(Version::new(1, 3)),
            Some(Version::new(2, 0)),
        ];
        for device_type in 0..=20 {
            for device_id in [0, 3] {
                let device = Device::new(DeviceType(device_type), device_id);
                for max_version in versions {
                    let args = ExportArgs {
                        max_version,
                        ..ExportArgs::default()
                    };
                    assert_eq!(
                        args.decide(device),
                        args.decide_in_full(device, device.device_type.is_host_accessible()),
                        "{device} with max_version {max_version:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn deciding_for_memory_of_the_kind_the_device_type_says_changes_nothing() {
        for copy in [None, Some(false), Some(true)] {
            for dl_device in [None, Some(Device::CPU), Some(Device::cuda(1))] {
                for stream in [None, Some(-1), Some(1), Some(0x1000)] {
                    let args = ExportArgs {
                        stream,
                        dl_device,
                        copy,
                        ..ExportArgs::default()
                    };
                    for device_type in 0..=20 {
                        let device = Device::new(DeviceType(device_type), 0);
                        let said = if device.device_type.is_host_accessible() {
                            MemoryKind::Managed
                        } else {
                            MemoryKind::Device
                        };
                        assert_eq!(
                            args.decide_for_memory(device, said),
                            args.decide(device),
                            "{device}, {args:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn host_readable_oneapi_memory_is_relabelled_to_the_cpu_where_device_memory_is_copied() {
        use ExportPlan::*;
        let to_cpu = |copy| ExportArgs {
            dl_device: Some(Device::CPU),
            copy,
            ..ExportArgs::default()
        };
        let plan = |args: ExportArgs, kind| args.decide_for_memory(ONEAPI, kind).map(|d| d.plan);
        for kind in [MemoryKind::HostPinned, MemoryKind::Managed] {
            assert_eq!(plan(to_cpu(None), kind), Ok(Relabel(Device::CPU)));
            assert_eq!(plan(to_cpu(Some(false)), kind), Ok(Relabel(Device::CPU)));
            assert_eq!(plan(to_cpu(Some(true)), kind), Ok(CopyTo(Device::CPU)));
            // The host still waits for the producer's work first.
            let sync = to_cpu(None).decide_for_memory(ONEAPI, kind).map(|d| d.sync);
            assert_eq!(sync, Ok(SyncAction::Host));
            // Kept on its device, nothing changes.
            let args = ExportArgs::default();
            assert_eq!(args.decide_for_memory(ONEAPI, kind), args.decide(ONEAPI));
        }
        assert_eq!(
            plan(to_cpu(None), MemoryKind::Device),
            Ok(CopyTo(Device::CPU))
        );
        assert!(plan(to_cpu(Some(false)), MemoryKind::Device).is_err());
    }

    #[test]
    fn decisions_combine_struct_plan_and_sync() {
        use ExportPlan::*;
        use ExportStruct::{Legacy as L, Versioned as V};
        use StreamRequest::{Handle, PerThreadDefault};
        use SyncAction::*;
        let v1 = Some(Version::new(1, 0));
        let cpu = Device::CPU;
        let cuda0 = Device::cuda(0);
        let args = |stream, max_version, dl_device, copy| ExportArgs {
            stream,
            max_version,
            dl_device,
            copy,
        };
        let default = Stream(StreamRequest::Default);
        // (tensor, args, format, plan, sync, IS_COPIED)
        #[rustfmt::skip]
        let table = [
            (cpu, args(None, v1, None, None), V, AsIs, Nothing, false),
            (cpu, ExportArgs::default(), L, AsIs, Nothing, false),
            (cpu, args(None, v1, Some(cpu), Some(true)), V, CopyTo(cpu), Nothing, true),
            // A legacy struct has no flags: the copy goes unmarked.
            (cpu, args(None, None, None, Some(true)), L, CopyTo(cpu), Nothing, false),
            (cuda0, args(None, v1, None, None), V, AsIs, default, false),
            (cuda0, args(Some(-1), v1, None, None), V, AsIs, Nothing, false),
            (cuda0, args(Some(7), v1, None, None), V, AsIs, Stream(Handle(7)), false),
            // A same-device copy runs on the consumer's stream.
            (cuda0, args(Some(2), v1, None, Some(true)), V, CopyTo(cuda0), Stream(PerThreadDefault), true),
            // To the CPU: the host waits, then copies (device memory) or relabels (pinned).
            (cuda0, args(None, v1, Some(cpu), None), V, CopyTo(cpu), Host, true),
            (CUDA_HOST, args(None, v1, Some(cpu), None), V, Relabel(cpu), Host, false),
            // Pinned and managed memory with stream=None may go to a CPU reader: the host waits;
            // a named stream gets the device-side ordering alone.
            (CUDA_HOST, args(None, v1, None, None), V, AsIs, Host, false),
            (CUDA_MANAGED, args(None, v1, None, None), V, AsIs, Host, false),
            (CUDA_HOST, args(Some(7), v1, None, None), V, AsIs, Stream(Handle(7)), false),
            (CUDA_HOST, args(Some(-1), v1, None, None), V, AsIs, Nothing, false),
            (CUDA_MANAGED, args(None, v1, Some(cpu), Some(true)), V, CopyTo(cpu), Host, true),
            (ROCM, args(Some(0), v1, None, None), V, AsIs, default, false),
            (ONEAPI, args(None, v1, None, None), V, AsIs, Nothing, false),
            (ONEAPI, args(Some(9), v1, None, None), V, AsIs, Stream(Handle(9)), false),
            (ONEAPI, args(None, v1, Some(cpu), None), V, CopyTo(cpu), Host, true),
            (VULKAN, args(None, v1, None, None), V, AsIs, Nothing, false),
        ];
        for (tensor, args, format, plan, sync, copied) in table {
            let row = format!("tensor {tensor}, {args:?}");
            let expected = ExportDecision { format, plan, sync };
            let got = args.decide(tensor);
            assert_eq!(got, Ok(expected), "{row}");
            assert_eq!(expected.sets_is_copied(), copied, "{row}");
        }
    }

    #[test]
    fn decisions_refuse_with_the_right_class() {
        use PyErrorKind::{BufferError as BE, ValueError as VE};
        let v1 = Some(Version::new(1, 0));
        let cpu = Some(Device::CPU);
        let cuda0 = Device::cuda(0);
        let args = |stream, max_version, dl_device, copy| ExportArgs {
            stream,
            max_version,
            dl_device,
            copy,
        };
        #[rustfmt::skip]
        let table: &[(Device, ExportArgs, PyErrorKind, &[&str])] = &[
            // A CPU export takes only stream=None, even for a GPU tensor.
            (cuda0, args(Some(5), v1, cpu, None), VE, &["stream=5", "cpu:0"]),
            (CUDA_HOST, args(Some(-1), v1, cpu, None), VE, &["stream=-1", "cpu:0"]),
            (cuda0, args(Some(0), v1, None, None), VE, &["stream=0", "cuda:0"]),
            // The device problem is reported before the stream problem.
            (cuda0, args(Some(0), v1, cpu, Some(false)), BE, &["copy=False", "cuda:0", "cpu:0"]),
            (cuda0, args(None, None, Some(ROCM), None), BE, &["cuda:0", "rocm:0"]),
        ];
        for (tensor, args, kind, needles) in table {
            assert_refused(
                args.decide(*tensor),
                *kind,
                needles,
                &format!("tensor {tensor}, {args:?}"),
            );
        }
    }
}
