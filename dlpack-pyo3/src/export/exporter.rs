//! Serving `__dlpack__`: [`to_capsule`] for a tensor the call owns, [`Exporter`] for one a
//! Python object keeps; both carry out dlpack-core's decision in `serve`.

use std::sync::Arc;

use dlpack_core::protocol::{ExportArgs, ExportPlan, ExportStruct, StreamRequest, SyncAction};
use dlpack_core::{
    CheckedTensor, Device, DeviceHooks, DeviceType, Error, Flags, ManagedTensor, MemoryKind,
    PyErrorKind,
};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use super::args::export_args;
#[cfg(doc)]
use super::method::{PyExporter, dlpack_method};
use super::producers::{Reexport, Shared, host_copy};
use crate::capsule::{RawTensor, new_capsule};
use crate::exceptions::{stream_error, to_py_err};

/// `__dlpack_device__()`'s answer for `device`: `(device_type, device_id)`.
pub fn dlpack_device(device: Device) -> (i32, i32) {
    (device.device_type.0, device.device_id)
}

/// Serves one `__dlpack__` call: exports `tensor` as `args` ask and wraps it in a capsule.
///
/// `hooks` synchronise and copy device memory; a CPU tensor needs none.
///
/// When the host must wait for the device (an export to the CPU, or pinned or managed memory
/// asked for with `stream=None`) the wait, and a copy from the device, run detached from the
/// interpreter (`py.detach`), since the work waited for may need a Python thread. So this call,
/// and every `__dlpack__` this crate serves, may let other Python threads run: do not hold a
/// lock across it that those threads take while attached.
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use pyo3::prelude::*;
///
/// Python::attach(|py| -> PyResult<()> {
///     let tensor = ManagedTensor::export(vec![1i32, 2, 3]).map_err(dlpack_pyo3::to_py_err)?;
///     let args = dlpack_pyo3::export_args(None, Some((1, 0)), None, None);
///     let capsule = dlpack_pyo3::to_capsule(py, tensor, &args, None)?;
///     assert_eq!(capsule.repr()?.to_string().split('"').nth(1), Some("dltensor_versioned"));
///     Ok(())
/// })?;
/// # Ok::<(), pyo3::PyErr>(())
/// ```
///
/// # Errors
///
/// The Python exceptions dlpack-core decides on ([`to_py_err`]): `BufferError` for a
/// `dl_device` / `copy` request that cannot be served (or a read-only tensor asked for as a
/// legacy struct, as NumPy does), for a device tensor that needs `hooks` and has none, and for
/// a hook that fails; `DLPackStreamError` (a `ValueError` and a `RuntimeError`) for a stream
/// the device does not take; `MemoryError` for a copy that memory cannot hold.
pub fn to_capsule<'py>(
    py: Python<'py>,
    tensor: ManagedTensor,
    args: &ExportArgs,
    hooks: Option<&dyn DeviceHooks>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let raw = serve(py, Source::Owned(tensor), args, hooks)?;
    // SAFETY: `serve` hands over a fresh tensor that we own.
    unsafe { new_capsule(py, raw) }
}

/// A tensor that a Python object keeps and exports any number of times: the state a
/// `#[pyclass]` holds to implement `__dlpack__` and `__dlpack_device__` by delegation.
///
/// Every export shares the tensor (one more heap block per export, no copy of the data); the
/// tensor is deleted when the `Exporter` and every export of it are gone. Exports are writable
/// unless the tensor is read-only, and, as with NumPy arrays, all consumers see the same
/// memory; this crate's importer ([`crate::from_dlpack`]) takes such memory read-only.
///
/// The example below delegates from a `#[pymethods]` method, the simplest way. Under the stable
/// ABI such a method pays pyo3's keyword handling on every call (several hundred nanoseconds
/// for the three keywords `np.from_dlpack` passes); for NumPy-like speed implement
/// [`PyExporter`] and return [`dlpack_method`] from a `#[classattr]` instead.
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_pyo3::Exporter;
/// use pyo3::prelude::*;
/// use pyo3::types::PyCapsule;
///
/// #[pyclass(frozen)]
/// struct Image {
///     pixels: Exporter,
/// }
///
/// #[pymethods]
/// impl Image {
///     #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
///     fn __dlpack__<'py>(
///         &self,
///         py: Python<'py>,
///         stream: Option<i64>,
///         max_version: Option<(u32, u32)>,
///         dl_device: Option<(i32, i32)>,
///         copy: Option<bool>,
///     ) -> PyResult<Bound<'py, PyCapsule>> {
///         self.pixels.dlpack(py, stream, max_version, dl_device, copy)
///     }
///
///     fn __dlpack_device__(&self) -> (i32, i32) {
///         self.pixels.dlpack_device()
///     }
/// }
///
/// Python::attach(|py| -> PyResult<()> {
///     let tensor = ManagedTensor::export(vec![0u8; 12]).map_err(dlpack_pyo3::to_py_err)?;
///     let image = Bound::new(py, Image { pixels: Exporter::new(tensor) })?;
///     let back = dlpack_pyo3::from_dlpack(image.as_any())?; // through __dlpack__
///     assert_eq!(back.shape(), &[12]);
///     Ok(())
/// })?;
/// # Ok::<(), pyo3::PyErr>(())
/// ```
#[derive(Clone)]
pub struct Exporter {
    tensor: Arc<ManagedTensor>,
    hooks: Option<Arc<dyn DeviceHooks>>,
}

impl core::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Exporter")
            .field("tensor", &*self.tensor)
            .field("hooks", &self.hooks.is_some())
            .finish()
    }
}

impl Exporter {
    /// An exporter for a tensor that needs no device hooks (host memory).
    pub fn new(tensor: ManagedTensor) -> Self {
        Exporter {
            tensor: Arc::new(tensor.into_externally_writable()),
            hooks: None,
        }
    }

    /// An exporter whose device work (stream synchronisation, copies to the host) goes through
    /// `hooks`: the seam a device crate such as dlpack-cuda plugs into.
    pub fn with_hooks(tensor: ManagedTensor, hooks: Arc<dyn DeviceHooks>) -> Self {
        Exporter {
            tensor: Arc::new(tensor.into_externally_writable()),
            hooks: Some(hooks),
        }
    }

    /// An exporter of a tensor the caller keeps a reference to (the C exchange API's
    /// `managed_tensor_to_py_object_no_sync`, which takes the tensor back if the object
    /// cannot be made), with no device hooks.
    pub(crate) fn shared(tensor: Arc<ManagedTensor>) -> Self {
        Exporter {
            tensor,
            hooks: None,
        }
    }

    /// The tensor. Python code that imported it (writable, unless it is read-only) may write
    /// its memory while Rust reads it, so it is
    /// [externally writable](ManagedTensor::into_externally_writable): a `bool` view of it is
    /// refused, and its `to_vec` is a checked copy.
    pub fn tensor(&self) -> &CheckedTensor {
        &self.tensor
    }

    /// The device hooks, if any.
    pub fn hooks(&self) -> Option<&dyn DeviceHooks> {
        self.hooks.as_deref()
    }

    /// `__dlpack_device__()`: the tensor's `(device_type, device_id)`.
    pub fn dlpack_device(&self) -> (i32, i32) {
        dlpack_device(self.tensor.device())
    }

    /// `__dlpack__(*, stream, max_version, dl_device, copy)`, with the arguments as pyo3
    /// extracts them (see [`export_args`]).
    ///
    /// # Errors
    ///
    /// As for [`to_capsule`](fn@to_capsule).
    pub fn dlpack<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let args = export_args(stream, max_version, dl_device, copy);
        self.to_capsule(py, &args)
    }

    /// `__dlpack__` with arguments already converted. Like [`to_capsule`](fn@to_capsule), it may
    /// detach from the interpreter while the host waits for the device.
    ///
    /// # Errors
    ///
    /// As for [`to_capsule`](fn@to_capsule).
    pub fn to_capsule<'py>(
        &self,
        py: Python<'py>,
        args: &ExportArgs,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let raw = serve(
            py,
            Source::Shared(self.tensor.clone()),
            args,
            self.hooks.as_deref(),
        )?;
        // SAFETY: `serve` hands over a fresh tensor that we own.
        unsafe { new_capsule(py, raw) }
    }

    /// A new versioned export of the tensor as is, without synchronisation with the consumer:
    /// the C exchange API's `managed_tensor_from_py_object_no_sync`, after
    /// [`order_before_default_stream`](Self::order_before_default_stream).
    pub(crate) fn export_no_sync(
        &self,
    ) -> Result<core::ptr::NonNull<dlpack_core::ffi::DLManagedTensorVersioned>, Error> {
        self.order_before_default_stream()?;
        self.export_unordered()
    }

    /// A new versioned export of the tensor as is, with no stream ordering at all: for this
    /// crate's own consumer, which takes host tensors this way and device tensors through
    /// `__dlpack__` with its stream.
    #[inline]
    pub(crate) fn export_unordered(
        &self,
    ) -> Result<core::ptr::NonNull<dlpack_core::ffi::DLManagedTensorVersioned>, Error> {
        Ok(ManagedTensor::export_raw(Shared(self.tensor.clone()))?)
    }

    /// Through the hooks, orders the producer's pending work on the tensor before its device's
    /// default stream: what `__dlpack__()` without a stream asks.
    ///
    /// The C exchange API hands tensors over without synchronising with the consumer, who
    /// instead waits on the stream that `current_work_stream` names, which for this type is the
    /// default stream. Hooks that queue work on a stream of their own (dlpack-cuda's
    /// `CudaHooks::new`, say) must therefore make the default stream wait for it first, or the
    /// consumer could read before the writes land. For CUDA this is stream ordering on the
    /// device (an event and a wait), never a host synchronisation, and nothing at all for hooks
    /// on the default stream and for host tensors. A tensor without hooks that `__dlpack__()`
    /// would have to order is refused, as `__dlpack__()` refuses it. A device whose
    /// `__dlpack__()` does not synchronise (oneAPI, where `stream=None` means no
    /// synchronisation, as in dpctl) has no default stream for the consumer to wait on, and
    /// `current_work_stream` names none: there the hooks make the data ready for the host
    /// (`StreamRequest::Default`; dlpack-oneapi waits for the producer's queue).
    pub(crate) fn order_before_default_stream(&self) -> Result<(), Error> {
        let device = self.tensor.device();
        let sync = ExportArgs::default().decide(device)?.sync;
        let Some(hooks) = self.hooks.as_deref() else {
            // As `__dlpack__()` does: a tensor it would order on a stream, or wait for, is not
            // handed over without the hooks that do it.
            return match sync {
                SyncAction::Nothing => Ok(()),
                SyncAction::Stream(_) | SyncAction::Host => Err(Error::NoHook { device }),
            };
        };
        match sync {
            SyncAction::Stream(request) => hooks.make_ready(device, request),
            // Pinned and managed memory: `__dlpack__()` waits on the host for it (a CPU reader
            // may take it in place), but this API's consumer waits on the default stream, so
            // ordering before that stream is what it needs, as for device memory.
            SyncAction::Host => hooks.make_ready(device, StreamRequest::Default),
            SyncAction::Nothing if device.device_type != DeviceType::CPU => {
                hooks.make_ready(device, StreamRequest::Default)
            }
            SyncAction::Nothing => Ok(()),
        }
    }

    /// Whether the host may read and write the tensor's memory in place, as
    /// `__dlpack__(dl_device=(1, 0), copy=False)` decides: memory on the CPU, and pinned or
    /// managed memory (and host or shared USM that the hooks confirm), which that call
    /// relabels to the CPU. For those it first waits, detached, as that call waits, through
    /// the hooks. `Ok(false)` for memory only its device reads.
    ///
    /// # Errors
    ///
    /// As for [`to_capsule`](fn@to_capsule): pinned or managed memory without hooks to wait
    /// for it, or a hook that fails.
    #[cfg(any(not(Py_LIMITED_API), Py_3_11))]
    pub(crate) fn host_read_in_place(&self, py: Python<'_>) -> PyResult<bool> {
        let args = ExportArgs {
            stream: None,
            max_version: Some(dlpack_core::Version::CURRENT),
            dl_device: Some(Device::CPU),
            copy: Some(false),
        };
        let hooks = self.hooks.as_deref();
        let device = self.tensor.device();
        let decision = match resolved_kind(&self.tensor, &args, hooks) {
            Some(memory) => args.decide_for_memory(device, memory),
            None => args.decide(device),
        };
        match decision {
            Ok(decision) if !matches!(decision.plan, ExportPlan::CopyTo(_)) => {
                synchronise(py, device, decision.sync, hooks).map_err(to_py_err)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// What a `__dlpack__` call exports from.
enum Source {
    /// A tensor the call owns outright.
    Owned(ManagedTensor),
    /// A tensor an [`Exporter`] keeps.
    Shared(Arc<ManagedTensor>),
}

impl Source {
    fn tensor(&self) -> &ManagedTensor {
        match self {
            Source::Owned(t) => t,
            Source::Shared(t) => t,
        }
    }

    /// The tensor as is, in the struct asked for; one heap block for a shared tensor, none for
    /// an owned one in its own struct.
    fn export_as(self, format: ExportStruct) -> Result<RawTensor, Error> {
        match (self, format) {
            (Source::Owned(t), format) => raw_of(t, format),
            // The shared tensor was validated when it was made; its description is copied.
            (Source::Shared(t), ExportStruct::Versioned) => {
                Ok(RawTensor::Versioned(ManagedTensor::export_raw(Shared(t))?))
            }
            (Source::Shared(t), ExportStruct::Legacy) => {
                ManagedTensor::export_raw_legacy(Shared(t))
                    .map(RawTensor::Legacy)
                    .map_err(dlpack_core::Error::from)
            }
        }
    }

    fn into_managed(self) -> Result<ManagedTensor, Error> {
        match self {
            Source::Owned(t) => Ok(t),
            Source::Shared(t) => Ok(ManagedTensor::export(Shared(t))?),
        }
    }
}

/// Hands a tensor over to C in the struct asked for (wrapping it if it is in the other one).
fn raw_of(tensor: ManagedTensor, format: ExportStruct) -> Result<RawTensor, Error> {
    let nonnull = |what| Error::NullPointer { what };
    Ok(match format {
        ExportStruct::Versioned => RawTensor::Versioned(
            core::ptr::NonNull::new(tensor.into_raw()?).ok_or_else(|| nonnull("managed tensor"))?,
        ),
        ExportStruct::Legacy => RawTensor::Legacy(
            core::ptr::NonNull::new(tensor.into_raw_legacy()?)
                .ok_or_else(|| nonnull("managed tensor"))?,
        ),
    })
}

/// What the hooks say the tensor's memory is, when that can change the decision: a request for
/// the CPU (`dl_device=(1, 0)`) of a `kDLOneAPI` tensor, the one device type whose memory may be
/// device, host or shared USM (host and shared USM are then relabelled instead of copied; every
/// other device type says what its memory is). The hooks check the whole claim
/// ([`CheckedTensor::check_device`]), so a relabel never hands the host memory outside a
/// host-readable allocation. `None` otherwise, and when the check fails (the copy then reports
/// why).
fn resolved_kind(
    tensor: &CheckedTensor,
    args: &ExportArgs,
    hooks: Option<&dyn DeviceHooks>,
) -> Option<MemoryKind> {
    if args.dl_device != Some(Device::CPU) || tensor.device().device_type != DeviceType::ONEAPI {
        return None;
    }
    match tensor.check_device(hooks?) {
        Ok(Some(info)) => Some(info.kind),
        // No elements (nothing to read), or a claim the hooks refute: the general decision.
        Ok(None) | Err(_) => None,
    }
}

/// Synchronises as `sync` says for a tensor on `device`, through `hooks`.
fn synchronise(
    py: Python<'_>,
    device: Device,
    sync: SyncAction,
    hooks: Option<&dyn DeviceHooks>,
) -> Result<(), Error> {
    let hook = || hooks.ok_or(Error::NoHook { device });
    match sync {
        SyncAction::Nothing => Ok(()),
        SyncAction::Stream(request) => hook().and_then(|h| h.make_ready(device, request)),
        // Detached from the interpreter while the host waits: the device work waited for may
        // itself need a Python thread (a Python host function on the stream, as CuPy's
        // `launch_host_func` queues), and other threads need not stall meanwhile.
        SyncAction::Host => hook().and_then(|h| py.detach(|| h.wait_host(device))),
    }
}

/// Carries out dlpack-core's decision for one `__dlpack__` call.
fn serve(
    py: Python<'_>,
    source: Source,
    args: &ExportArgs,
    hooks: Option<&dyn DeviceHooks>,
) -> PyResult<RawTensor> {
    let device = source.tensor().device();
    let decision = match resolved_kind(source.tensor(), args, hooks) {
        Some(memory) => args.decide_for_memory(device, memory),
        None => args.decide(device),
    };
    let decision = decision.map_err(|err| match err.py_kind() {
        // `decide` refuses only stream values with ValueError (dlpack-core's docs).
        PyErrorKind::ValueError => stream_error(py, &err),
        _ => to_py_err(err),
    })?;
    synchronise(py, device, decision.sync, hooks).map_err(to_py_err)?;
    let exported = match decision.plan {
        ExportPlan::AsIs => source.export_as(decision.format),
        ExportPlan::Relabel(target) => source
            .into_managed()
            .and_then(|t| Ok(ManagedTensor::export(Reexport::relabel(t, target))?))
            .and_then(|t| raw_of(t, decision.format)),
        ExportPlan::CopyTo(target) if target == Device::CPU => {
            let flags = Flags::empty().with(Flags::IS_COPIED, decision.sets_is_copied());
            // A copy from a device waits for it, detached as above.
            let tensor = source.tensor();
            let copy = if device.device_type == DeviceType::CPU {
                host_copy(tensor, hooks, flags)
            } else {
                py.detach(|| host_copy(tensor, hooks, flags))
            };
            copy.and_then(|copy| Ok(ManagedTensor::export(copy)?))
                .and_then(|copy| raw_of(copy, decision.format))
        }
        ExportPlan::CopyTo(target) => Err(Error::Protocol {
            kind: PyErrorKind::BufferError,
            message: format!(
                "copy=True asks for a new copy of a tensor on {device} on {target}, which needs a device allocation that no device hook offers yet; expected copy=None or False, or dl_device=(1, 0) for a copy in host memory"
            ),
        }),
    };
    exported.map_err(to_py_err)
}
