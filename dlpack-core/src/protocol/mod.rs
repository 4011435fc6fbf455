//! The Python `__dlpack__` / `from_dlpack` protocol's decisions, in plain Rust.
//!
//! `dlpack-pyo3` is glue over this module: it turns Python arguments into Rust values (a
//! `(major, minor)` tuple into a [`Version`], a `(device_type, device_id)` tuple into a
//! [`Device`], an `int` stream into an `i64`), raises `TypeError` itself for arguments of the
//! wrong Python type, and otherwise only carries out what this module decides:
//!
//! | question | producer side (`__dlpack__`) | consumer side (`from_dlpack`) |
//! |---|---|---|
//! | which struct? | [`choose_struct`] from `max_version` | [`accept_capsule_name`] |
//! | which device, copy or not? | [`plan_export`] from `dl_device` / `copy` | pass them on |
//! | what does `stream` mean? | [`parse_stream`] | see [`CONSUMER_MAX_VERSION`] |
//! | all of it at once | [`ExportArgs::decide`] | |
//!
//! Every refusal is an [`Error::Protocol`] whose [`PyErrorKind`] is the Python exception the
//! array API standard asks for: `BufferError` when the data cannot be exported as asked (device,
//! copy), `ValueError` for an argument value the protocol does not allow (a stream number, an
//! already used capsule), `TypeError` for the wrong kind of object (a capsule that is not a
//! DLPack tensor). Messages name the value found and what was expected.
//!
//! A producer holding a CPU tensor, asked `__dlpack__(max_version=(1, 0))` (so `stream=None`,
//! `dl_device=None`, `copy=None`):
//!
//! ```
//! use dlpack_core::protocol::{ExportArgs, ExportPlan, ExportStruct, SyncAction};
//! use dlpack_core::{Device, PyErrorKind, Version};
//!
//! let args = ExportArgs { max_version: Some(Version::new(1, 0)), ..ExportArgs::default() };
//! let decision = args.decide(Device::CPU)?;
//! assert_eq!(decision.format, ExportStruct::Versioned); // a `dltensor_versioned` capsule
//! assert_eq!(decision.plan, ExportPlan::AsIs); // zero-copy, same device
//! assert_eq!(decision.sync, SyncAction::Nothing); // nothing to wait for on the CPU
//! assert!(!decision.sets_is_copied());
//!
//! // The same tensor asked for with a CUDA stream number: the CPU accepts only `None`.
//! let err = ExportArgs { stream: Some(1), ..args }.decide(Device::CPU).unwrap_err();
//! assert_eq!(err.py_kind(), PyErrorKind::ValueError);
//! assert!(err.to_string().contains("stream=1"));
//! # Ok::<(), dlpack_core::Error>(())
//! ```

use core::ffi::CStr;

use crate::ffi::{CAPSULE_LEGACY, CAPSULE_LEGACY_USED, CAPSULE_VERSIONED, CAPSULE_VERSIONED_USED};
use crate::{Device, DeviceType, Error, MemoryKind, PyErrorKind, Version};

/// The consumer's `stream` argument, interpreted by [`parse_stream`] for the device the consumer
/// will read the data on.
///
/// A producer hands a request other than [`NoSync`](Self::NoSync) to
/// [`DeviceHooks::make_ready`](crate::DeviceHooks::make_ready), which makes its pending work on
/// the tensor visible on that stream (event record, then stream wait) without blocking the host,
/// unless [`ExportArgs::decide`] says the host must wait ([`SyncAction::Host`]: an export to the
/// CPU, or pinned or managed memory asked for with `stream=None`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum StreamRequest {
    /// `-1` on CUDA and ROCm, `None` on oneAPI: the producer must not synchronise; the consumer
    /// orders the work itself.
    NoSync,
    /// `None` on CUDA and ROCm, `0` on ROCm: the device's default stream (on CUDA the legacy
    /// default stream, the same as [`LegacyDefault`](Self::LegacyDefault)). On the CPU and other
    /// devices without streams (where only `None` is accepted) it stands for the host's program
    /// order: the data must be complete when `__dlpack__` returns.
    Default,
    /// CUDA `1`: the legacy default stream.
    LegacyDefault,
    /// CUDA `2`: the per-thread default stream.
    PerThreadDefault,
    /// A handle the consumer owns: a `cudaStream_t` (CUDA, `> 2`), a `hipStream_t` (ROCm, `> 2`)
    /// or, on oneAPI, a SYCL queue or Level Zero handle the glue layer passes as an integer
    /// (`> 0`).
    Handle(usize),
}

/// Which managed-tensor struct a capsule holds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ExportStruct {
    /// `DLManagedTensorVersioned` (DLPack >= 1.0), capsule name `"dltensor_versioned"`. It
    /// carries a version and flags (`READ_ONLY`, `IS_COPIED`).
    Versioned,
    /// `DLManagedTensor` (DLPack 0.x), capsule name `"dltensor"`. It has no version and no
    /// flags.
    Legacy,
}

impl ExportStruct {
    /// The name of a fresh capsule holding this struct (`"dltensor_versioned"` / `"dltensor"`).
    pub const fn capsule_name(self) -> &'static CStr {
        match self {
            ExportStruct::Versioned => CAPSULE_VERSIONED,
            ExportStruct::Legacy => CAPSULE_LEGACY,
        }
    }

    /// The name a consumer gives the capsule once it has taken the tensor
    /// (`"used_dltensor_versioned"` / `"used_dltensor"`), so that the capsule's destructor no
    /// longer calls the deleter.
    pub const fn used_capsule_name(self) -> &'static CStr {
        match self {
            ExportStruct::Versioned => CAPSULE_VERSIONED_USED,
            ExportStruct::Legacy => CAPSULE_LEGACY_USED,
        }
    }
}

/// The struct a producer exports for the consumer's `max_version`.
///
/// - `None`: the consumer predates `max_version` and knows only the legacy struct:
///   [`ExportStruct::Legacy`]. (The standard allows a producer to refuse this with
///   `BufferError` from March 2025; this crate keeps serving it, since old consumers are still
///   common and the legacy struct loses nothing but the flags.)
/// - major `0`: [`ExportStruct::Legacy`].
/// - major `>= 1`: [`ExportStruct::Versioned`], carrying [`Version::CURRENT`] (1.3) whatever
///   minor was asked: minors are ABI-compatible additions. A consumer that announces a newer
///   major (`(2, 0)`) still gets this 1.x struct, because it is the newest this crate can write;
///   the standard makes every consumer check the major of what it receives, and one that cannot
///   read 1.x will then call the deleter and refuse. Raising here instead would break consumers
///   that still read 1.x.
///
/// ```
/// use dlpack_core::Version;
/// use dlpack_core::protocol::{ExportStruct, choose_struct};
/// assert_eq!(choose_struct(None), ExportStruct::Legacy);
/// assert_eq!(choose_struct(Some(Version::new(1, 0))), ExportStruct::Versioned);
/// ```
pub const fn choose_struct(max_version: Option<Version>) -> ExportStruct {
    match max_version {
        Some(v) if v.major >= 1 => ExportStruct::Versioned,
        _ => ExportStruct::Legacy,
    }
}

/// The highest version a consumer in this workspace announces: [`Version::CURRENT`].
///
/// Recommended consumer sequence (`from_dlpack(x, device=..., copy=...)`):
///
/// 1. Call `x.__dlpack__(max_version=(1, 3), dl_device=device, copy=copy, stream=s)`, where `s`
///    is the consumer's stream for the device `x.__dlpack_device__()` reports (CUDA: its
///    current stream, `1` or `2`, never `0`; ROCm: a stream or `0`; CPU: `None`), or `None`
///    when a `dl_device` of `(kDLCPU, 0)` is asked for, as the standard requires.
/// 2. On `TypeError` (a producer older than the 2023.12 keywords), retry with `stream` alone
///    and no other keyword; it then returns a legacy capsule, and a `device` / `copy` request
///    has to be served by the consumer itself.
/// 3. Whatever was asked, look at what came back: [`accept_capsule_name`] says which struct the
///    capsule holds (a producer may return a legacy capsule even to a versioned request, as
///    JAX does), and a versioned tensor is usable only if its `version.major` equals this
///    crate's ([`Version::is_compatible`]); otherwise only its deleter may be called.
pub const CONSUMER_MAX_VERSION: Version = Version::CURRENT;

/// Interprets the consumer's `stream` for `device`, the device the consumer will read the data
/// on: `dl_device` when given, else the tensor's own device. (The standard says that with an
/// explicit `dl_device` the stream must suit that device; in particular `(kDLCPU, 0)` takes only
/// `None`.)
///
/// | device type | accepted | refused (`ValueError`) |
/// |---|---|---|
/// | CUDA, CUDA_HOST, CUDA_MANAGED | `None` default, `-1` no sync, `1` legacy default, `2` per-thread default, `> 2` handle | `0` (ambiguous: it could mean `None`, `1` or `2`; the standard forbids it), `< -1` |
/// | ROCM, ROCM_HOST | `None` or `0` default, `-1` no sync, `> 2` handle | `1`, `2` (CUDA's numbers, not supported on ROCm), `< -1` |
/// | CPU | `None` | everything else, `-1` included |
/// | ONEAPI (not standardised) | `None` no sync, `> 0` handle | `0`, `-1`, negatives |
/// | any other type | `None` | everything else |
///
/// Pinned (`CUDA_HOST`, `ROCM_HOST`) and managed memory follow their runtime's rules because the
/// GPU may still be writing it: the consumer's stream is what it must wait on.
///
/// On the CPU the standard accepts only `None`. This crate refuses `-1` there too, like NumPy
/// and PyTorch: with a `dl_device` of `(kDLCPU, 0)` the standard requires the producer to
/// synchronise, so accepting "do not synchronise" would let pinned or managed memory reach the
/// host while the GPU is still writing it.
///
/// On oneAPI, dpctl and dpnp take a `SyclQueue` and read `None` as "no synchronisation"; the glue
/// layer passes a queue as its handle (a positive integer). `-1` is refused because `None`
/// already says "no synchronisation" there and the standard defines `-1` only for CUDA and ROCm
/// integer streams.
///
/// A stream of the wrong Python type (a float, a queue object on CUDA) is the glue layer's
/// `TypeError`; it never reaches this function.
///
/// ```
/// use dlpack_core::protocol::{StreamRequest, parse_stream};
/// use dlpack_core::{Device, PyErrorKind};
/// assert_eq!(parse_stream(Device::cuda(0), Some(2)), Ok(StreamRequest::PerThreadDefault));
/// let err = parse_stream(Device::cuda(0), Some(0)).unwrap_err();
/// assert_eq!(err.py_kind(), PyErrorKind::ValueError);
/// ```
///
/// # Errors
///
/// An [`Error::Protocol`] of kind [`PyErrorKind::ValueError`] for a stream the table refuses,
/// and for a handle that does not fit a pointer on this platform.
pub fn parse_stream(device: Device, stream: Option<i64>) -> Result<StreamRequest, Error> {
    const CUDA_EXPECTED: &str = "expected None, -1 (no synchronisation), 1 (legacy default stream), 2 (per-thread default stream) or a cudaStream_t > 2";
    const ROCM_EXPECTED: &str =
        "expected None or 0 (default stream), -1 (no synchronisation) or a hipStream_t > 2";
    const ONEAPI_EXPECTED: &str = "expected None (no synchronisation) or a positive SYCL queue / Level Zero handle; oneAPI streams are not standardised";

    let t = device.device_type;
    let Some(value) = stream else {
        return Ok(if t == DeviceType::ONEAPI {
            StreamRequest::NoSync
        } else {
            StreamRequest::Default
        });
    };
    let refuse = |why: &str, expected: &str| {
        value_error(format!(
            "stream={value} is not valid for {device}{why}; {expected}"
        ))
    };
    let handle = |value: i64| {
        usize::try_from(value)
            .map(StreamRequest::Handle)
            .map_err(|_| {
                refuse(
                    " (it does not fit a pointer on this platform)",
                    "expected a stream handle",
                )
            })
    };
    match t {
        DeviceType::CUDA | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED => match value {
            -1 => Ok(StreamRequest::NoSync),
            0 => Err(refuse(
                ": 0 is ambiguous (it could mean None, 1 or 2) and the array API standard forbids it",
                CUDA_EXPECTED,
            )),
            1 => Ok(StreamRequest::LegacyDefault),
            2 => Ok(StreamRequest::PerThreadDefault),
            v if v > 2 => handle(v),
            _ => Err(refuse("", CUDA_EXPECTED)),
        },
        DeviceType::ROCM | DeviceType::ROCM_HOST => match value {
            -1 => Ok(StreamRequest::NoSync),
            0 => Ok(StreamRequest::Default),
            1 | 2 => Err(refuse(
                ": 1 and 2 are CUDA's default-stream numbers, which the array API standard does not support on ROCm",
                ROCM_EXPECTED,
            )),
            v if v > 2 => handle(v),
            _ => Err(refuse("", ROCM_EXPECTED)),
        },
        DeviceType::ONEAPI => match value {
            v if v > 0 => handle(v),
            _ => Err(refuse("", ONEAPI_EXPECTED)),
        },
        DeviceType::CPU => Err(refuse(
            "",
            "expected None: the array API standard accepts only None on the CPU (-1 is refused too, since a CPU export must be synchronised)",
        )),
        _ => Err(refuse(
            "",
            "expected None: this crate knows no streams for this device type, and the array API standard accepts only None on devices without streams",
        )),
    }
}

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
fn plan_export_of(
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
        // (a test compares the two for every device type), at a fifth of the cost.
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
    /// is served; device memory is copied as before.
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

/// Says which struct a capsule holds from its name, for a consumer about to take it.
///
/// `"dltensor_versioned"` is [`ExportStruct::Versioned`] and `"dltensor"`
/// [`ExportStruct::Legacy`]. The glue layer passes `c""` for a capsule without a name.
///
/// ```
/// use dlpack_core::protocol::{ExportStruct, accept_capsule_name};
/// use dlpack_core::PyErrorKind;
/// assert_eq!(accept_capsule_name(c"dltensor_versioned"), Ok(ExportStruct::Versioned));
/// let err = accept_capsule_name(c"used_dltensor").unwrap_err();
/// assert_eq!(err.py_kind(), PyErrorKind::ValueError);
/// ```
///
/// # Errors
///
/// An [`Error::Protocol`]: a `ValueError` for a `"used_"` name (another consumer already took
/// the tensor, and a capsule can be consumed only once), a `TypeError` for any other name (the
/// object is not a DLPack tensor capsule).
pub fn accept_capsule_name(name: &CStr) -> Result<ExportStruct, Error> {
    if name == CAPSULE_VERSIONED {
        Ok(ExportStruct::Versioned)
    } else if name == CAPSULE_LEGACY {
        Ok(ExportStruct::Legacy)
    } else if name == CAPSULE_VERSIONED_USED || name == CAPSULE_LEGACY_USED {
        Err(value_error(format!(
            "the capsule is named {name:?}: its tensor was already consumed, and a DLPack capsule can be consumed only once; expected a fresh \"dltensor\" or \"dltensor_versioned\" capsule"
        )))
    } else {
        Err(Error::Protocol {
            kind: PyErrorKind::TypeError,
            message: format!(
                "the capsule is named {name:?}, not a DLPack tensor; expected \"dltensor\" or \"dltensor_versioned\""
            ),
        })
    }
}

fn value_error(message: String) -> Error {
    Error::Protocol {
        kind: PyErrorKind::ValueError,
        message,
    }
}

fn buffer_error(message: String) -> Error {
    Error::Protocol {
        kind: PyErrorKind::BufferError,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    const CUDA_HOST: Device = Device::new(DeviceType::CUDA_HOST, 0);
    const CUDA_MANAGED: Device = Device::new(DeviceType::CUDA_MANAGED, 0);
    const ROCM: Device = Device::new(DeviceType::ROCM, 0);
    const ROCM_HOST: Device = Device::new(DeviceType::ROCM_HOST, 0);
    const ONEAPI: Device = Device::oneapi(0);
    const VULKAN: Device = Device::new(DeviceType::VULKAN, 0);
    const METAL: Device = Device::new(DeviceType::METAL, 0);
    const UNKNOWN: Device = Device::new(DeviceType(99), 0);

    /// Asserts that `result` is an `Error::Protocol` of `kind` whose message contains every one
    /// of `needles`.
    #[track_caller]
    fn assert_refused<T: core::fmt::Debug>(
        result: Result<T, Error>,
        kind: PyErrorKind,
        needles: &[&str],
        row: &str,
    ) {
        let err = match result {
            Ok(v) => panic!("{row}: expected {kind:?}, got Ok({v:?})"),
            Err(e) => e,
        };
        assert!(
            matches!(err, Error::Protocol { .. }),
            "{row}: not a protocol error: {err:?}"
        );
        assert_eq!(err.py_kind(), kind, "{row}: {err}");
        let msg = err.to_string();
        for needle in needles {
            assert!(
                msg.contains(needle),
                "{row}: message {msg:?} lacks {needle:?}"
            );
        }
    }

    #[test]
    fn struct_choice_follows_max_version() {
        let table = [
            (None, ExportStruct::Legacy),
            (Some(Version::new(0, 0)), ExportStruct::Legacy),
            (Some(Version::new(0, 8)), ExportStruct::Legacy),
            (Some(Version::new(1, 0)), ExportStruct::Versioned),
            (Some(Version::new(1, 3)), ExportStruct::Versioned),
            (Some(Version::new(1, 99)), ExportStruct::Versioned),
            (Some(Version::new(2, 0)), ExportStruct::Versioned),
            (Some(Version::new(u32::MAX, 0)), ExportStruct::Versioned),
        ];
        for (max_version, expected) in table {
            assert_eq!(
                choose_struct(max_version),
                expected,
                "max_version={max_version:?}"
            );
        }
        assert_eq!(CONSUMER_MAX_VERSION, Version::new(1, 3));
        assert_eq!(
            choose_struct(Some(CONSUMER_MAX_VERSION)),
            ExportStruct::Versioned
        );
    }

    /// Expected outcome of one stream row: the request, or the error kind.
    type Outcome = Result<StreamRequest, PyErrorKind>;
    /// The rows of one device type: `stream` and the expected outcome.
    type StreamRows<'a> = &'a [(Option<i64>, Outcome)];
    /// Tensor device, `dl_device`, `copy`, and the expected plan or error kind.
    type PlanRow = (
        Device,
        Option<Device>,
        Option<bool>,
        Result<ExportPlan, PyErrorKind>,
    );

    #[test]
    fn streams_follow_the_per_device_rules() {
        use PyErrorKind::ValueError as VE;
        use StreamRequest::*;
        let big = i64::MAX;
        // On a 32-bit target the largest handle does not fit a pointer and is refused.
        let big_outcome: Outcome = usize::try_from(big).map(Handle).map_err(|_| VE);
        let cuda_rows: &[(Option<i64>, Outcome)] = &[
            (None, Ok(Default)),
            (Some(-1), Ok(NoSync)),
            (Some(0), Err(VE)),
            (Some(1), Ok(LegacyDefault)),
            (Some(2), Ok(PerThreadDefault)),
            (Some(3), Ok(Handle(3))),
            (Some(0x7f00_dead_beef), Ok(Handle(0x7f00_dead_beef))),
            (Some(big), big_outcome),
            (Some(-2), Err(VE)),
            (Some(i64::MIN), Err(VE)),
        ];
        let rocm_rows: &[(Option<i64>, Outcome)] = &[
            (None, Ok(Default)),
            (Some(0), Ok(Default)),
            (Some(-1), Ok(NoSync)),
            (Some(1), Err(VE)),
            (Some(2), Err(VE)),
            (Some(3), Ok(Handle(3))),
            (Some(big), big_outcome),
            (Some(-2), Err(VE)),
        ];
        let cpu_rows: &[(Option<i64>, Outcome)] = &[
            (None, Ok(Default)),
            (Some(-1), Err(VE)),
            (Some(0), Err(VE)),
            (Some(1), Err(VE)),
            (Some(2), Err(VE)),
            (Some(3), Err(VE)),
            (Some(-7), Err(VE)),
        ];
        let oneapi_rows: &[(Option<i64>, Outcome)] = &[
            (None, Ok(NoSync)),
            (Some(1), Ok(Handle(1))),
            (Some(2), Ok(Handle(2))),
            (Some(0x5555_0000), Ok(Handle(0x5555_0000))),
            (Some(0), Err(VE)),
            (Some(-1), Err(VE)),
            (Some(-5), Err(VE)),
        ];
        let table: &[(Device, StreamRows<'_>)] = &[
            (Device::cuda(0), cuda_rows),
            (Device::cuda(3), cuda_rows),
            (CUDA_HOST, cuda_rows),
            (CUDA_MANAGED, cuda_rows),
            (ROCM, rocm_rows),
            (ROCM_HOST, rocm_rows),
            (Device::CPU, cpu_rows),
            (ONEAPI, oneapi_rows),
            (Device::oneapi(2), oneapi_rows),
            // Devices without streams this crate knows: the CPU's rules.
            (VULKAN, cpu_rows),
            (METAL, cpu_rows),
            (Device::new(DeviceType::OPENCL, 1), cpu_rows),
            (UNKNOWN, cpu_rows),
        ];
        let mut checked = 0;
        for (device, rows) in table {
            for (stream, expected) in *rows {
                let row = format!("{device} stream={stream:?}");
                let got = parse_stream(*device, *stream);
                match expected {
                    Ok(request) => assert_eq!(got, Ok(*request), "{row}"),
                    Err(kind) => {
                        let value = format!("stream={}", stream.unwrap());
                        let device = device.to_string();
                        assert_refused(got, *kind, &[&value, &device, "expected"], &row);
                    }
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 4 * 10 + 2 * 8 + 7 + 2 * 7 + 4 * 7);
    }

    #[test]
    fn stream_messages_explain_the_rule() {
        let msg = parse_stream(Device::cuda(0), Some(0))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("ambiguous") && msg.contains("forbids"),
            "{msg}"
        );
        let msg = parse_stream(ROCM, Some(1)).unwrap_err().to_string();
        assert!(msg.contains("not support") && msg.contains("ROCm"), "{msg}");
        let msg = parse_stream(Device::CPU, Some(-1)).unwrap_err().to_string();
        assert!(msg.contains("expected None"), "{msg}");
        let msg = parse_stream(ONEAPI, Some(-1)).unwrap_err().to_string();
        assert!(msg.contains("not standardised"), "{msg}");
    }

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

    #[test]
    fn capsule_names() {
        use PyErrorKind::{TypeError as TE, ValueError as VE};
        let table: &[(&CStr, Result<ExportStruct, PyErrorKind>)] = &[
            (c"dltensor", Ok(ExportStruct::Legacy)),
            (c"dltensor_versioned", Ok(ExportStruct::Versioned)),
            (c"used_dltensor", Err(VE)),
            (c"used_dltensor_versioned", Err(VE)),
            (c"", Err(TE)),
            (c"DLTensor", Err(TE)),
            (c"dltensor_versioned ", Err(TE)),
            (c"dlpack_exchange_api", Err(TE)),
            (c"numpy_array", Err(TE)),
        ];
        for &(name, expected) in table {
            let row = format!("capsule {name:?}");
            let got = accept_capsule_name(name);
            match expected {
                Ok(format) => assert_eq!(got, Ok(format), "{row}"),
                Err(kind) => {
                    let found = format!("{name:?}");
                    assert_refused(got, kind, &[&found, "expected"], &row);
                }
            }
        }
        assert!(
            accept_capsule_name(c"used_dltensor")
                .unwrap_err()
                .to_string()
                .contains("only once")
        );
        for format in [ExportStruct::Legacy, ExportStruct::Versioned] {
            assert_eq!(accept_capsule_name(format.capsule_name()), Ok(format));
            assert_refused(
                accept_capsule_name(format.used_capsule_name()),
                VE,
                &["used_"],
                "used",
            );
        }
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
