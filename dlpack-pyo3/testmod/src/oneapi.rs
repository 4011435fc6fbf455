//! The oneAPI part of the test module (feature `oneapi`): Rust Level Zero USM tensors for
//! Python, queues to name as `stream`, and the importer of `dlpack_pyo3::oneapi`, reporting what
//! it received. Run by `dlpack-pyo3/tests/python-oneapi` through the real Level Zero loader and
//! the workspace's test-support driver.
//!
//! It also stands in for the two functions of a SYCL runtime that `dlpack_pyo3` calls for a
//! `dpctl.SyclQueue` given as `stream` (libsycl's `sycl::queue::getNative` and dpctl's
//! `DPCTLQueue_GetBackend`), over queues of its own (`sycl_queue_ref`): `dlpack_pyo3` looks
//! those functions up in the library that made the queue's capsule, which for these capsules
//! is this module. Only the capsules made here reach the stand-ins.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use dlpack_core::{DLPack, DataType, DeviceHooks, ManagedTensor};
use dlpack_oneapi::{Context, LevelZero, OneApiHooks, Queue, UsmBuffer, UsmKind};
use dlpack_pyo3::{DLPackTensor, to_py_err};
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The context every function here allocates and resolves in: one over the first driver, made
/// on first use. The loader's or driver's absence is kept as the error message.
fn context() -> PyResult<Context> {
    static CONTEXT: OnceLock<Result<Context, String>> = OnceLock::new();
    CONTEXT
        .get_or_init(|| {
            let ze = LevelZero::load().map_err(|e| e.to_string())?;
            let driver = ze.drivers().map_err(|e| e.to_string())?;
            let driver = driver
                .first()
                .ok_or_else(|| "the Level Zero loader lists no driver".to_owned())?;
            Context::new(driver).map_err(|e| e.to_string())
        })
        .clone()
        .map_err(PyBufferError::new_err)
}

/// The hooks of [`context`], shared by every tensor handed to Python.
fn hooks() -> PyResult<Arc<OneApiHooks>> {
    static HOOKS: OnceLock<Arc<OneApiHooks>> = OnceLock::new();
    let context = context()?;
    Ok(HOOKS.get_or_init(|| Arc::new(context.hooks())).clone())
}

/// `None` when Level Zero loads with a driver, else why not.
#[pyfunction]
fn oneapi_driver_error() -> Option<String> {
    context().err().map(|e| e.to_string())
}

/// A row-major float32 matrix in USM: what `oneapi_f32` exports.
#[derive(DLPack)]
struct UsmTensor {
    #[dlpack(data)]
    data: UsmBuffer<f32>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn usm_kind(kind: &str) -> PyResult<UsmKind> {
    match kind {
        "device" => Ok(UsmKind::Device),
        "shared" => Ok(UsmKind::Shared),
        "host" => Ok(UsmKind::Host),
        _ => Err(PyValueError::new_err(format!(
            "kind={kind:?}; expected \"device\", \"shared\" or \"host\""
        ))),
    }
}

/// `values` copied into USM of `kind` on root device `device` of the shared context, as a
/// float32 tensor of `shape` (row-major) with the context's hooks: `(tensor, address of its
/// first element)`. `own_context=True` allocates in a context of its own instead, which the
/// shared hooks do not know; `claim=n` makes the tensor claim `oneapi:n` whatever its device
/// (a producer that lies).
#[pyfunction]
#[pyo3(signature = (values, shape, kind="device", device=0, own_context=false, claim=None))]
fn oneapi_f32(
    values: Vec<f32>,
    shape: Vec<usize>,
    kind: &str,
    device: usize,
    own_context: bool,
    claim: Option<i32>,
) -> PyResult<(DLPackTensor, usize)> {
    let shared = context()?;
    let context = if own_context {
        let ze = LevelZero::load().map_err(to_py_err)?;
        Context::new(&ze.drivers().map_err(to_py_err)?[0]).map_err(to_py_err)?
    } else {
        shared
    };
    let ze_device = context.devices().get(device).cloned().ok_or_else(|| {
        PyValueError::new_err(format!(
            "device={device}; the context has {} root devices",
            context.devices().len()
        ))
    })?;
    let data =
        UsmBuffer::from_slice(&context, &ze_device, usm_kind(kind)?, &values).map_err(to_py_err)?;
    let address = data.as_ptr().addr();
    let mut tensor = ManagedTensor::export(UsmTensor { data, shape }).map_err(to_py_err)?;
    if let Some(id) = claim {
        let raw = tensor.into_raw().map_err(to_py_err)?;
        // SAFETY: `raw` is the live tensor just exported, owned here; its device field is ours
        // to write, and `from_raw` takes the ownership back.
        tensor = unsafe {
            (*raw).dl_tensor.device.device_id = id;
            ManagedTensor::from_raw(raw)
        }
        .map_err(to_py_err)?;
    }
    Ok((DLPackTensor::with_hooks(tensor, hooks()?), address))
}

/// A queue of the shared context (a Level Zero immediate command list) on a root device, for
/// Python to name as `__dlpack__(stream=queue.stream)`.
#[pyclass(frozen, name = "OneApiQueue")]
struct OneApiQueue {
    queue: Queue,
}

#[pymethods]
impl OneApiQueue {
    /// A new queue on root device `device`.
    #[new]
    #[pyo3(signature = (device=0))]
    fn new(device: usize) -> PyResult<Self> {
        let context = context()?;
        let ze_device = context
            .devices()
            .get(device)
            .cloned()
            .ok_or_else(|| PyValueError::new_err(format!("no root device {device}")))?;
        let queue = Queue::new(&context, &ze_device).map_err(to_py_err)?;
        Ok(OneApiQueue { queue })
    }

    /// The queue's `stream` number.
    #[getter]
    fn stream(&self) -> i64 {
        self.queue.stream()
    }

    /// Blocks until the queue has run everything appended to it.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.queue.synchronize()).map_err(to_py_err)
    }
}

/// Imports `obj` with `dlpack_pyo3::oneapi::from_dlpack_oneapi` (with `queue` as the consumer's
/// queue) and reports what it received: device, the memory kind Level Zero reported, data
/// pointer (of the first element), shape, strides, dtype, whether typed views work in place,
/// and for float32 the values in row-major order (copied to the host when they are device USM).
#[pyfunction]
#[pyo3(signature = (obj, queue=None))]
fn oneapi_import_report<'py>(
    obj: &Bound<'py, PyAny>,
    queue: Option<PyRef<'py, OneApiQueue>>,
) -> PyResult<Bound<'py, PyDict>> {
    let py = obj.py();
    let hooks = hooks()?;
    let t = dlpack_pyo3::oneapi::from_dlpack_oneapi(obj, &hooks, queue.as_ref().map(|q| &q.queue))?;
    let d = PyDict::new(py);
    let device = t.device();
    d.set_item("device", (device.device_type.0, device.device_id))?;
    let first = t
        .data_ptr()
        .addr()
        .wrapping_add(usize::try_from(t.byte_offset()).unwrap_or(usize::MAX));
    let kind = if t.is_empty() {
        None
    } else {
        Some(format!(
            "{:?}",
            hooks.resolve(device, first).map_err(to_py_err)?.kind
        ))
    };
    d.set_item("kind", kind)?;
    d.set_item("data_ptr", first)?;
    d.set_item("shape", t.shape().to_vec())?;
    d.set_item("strides", t.strides().to_vec())?;
    d.set_item("dtype", t.dtype().to_string())?;
    if t.dtype() == DataType::F32 {
        d.set_item("in_place", t.view::<f32>().is_ok())?;
        d.set_item("values", t.to_host_vec::<f32>(&*hooks).map_err(to_py_err)?)?;
    }
    Ok(d)
}

/// A stand-in for a `sycl::queue`, behind the pointer of a `"SyclQueueRef"` capsule made by
/// [`sycl_queue_ref`]: what [`sycl_queue_get_native`] and [`dpctl_queue_get_backend`] answer.
struct SyclQueueStandIn {
    /// The native handle: for Level Zero, a command list (or a command queue).
    native: usize,
    /// What `getNative` writes through its argument: 1 for an immediate command list.
    immediate: i32,
    /// A `DPCTLSyclBackendType` value.
    backend: c_int,
}

/// The name dpctl gives its queue capsules.
const QUEUE_CAPSULE: &std::ffi::CStr = c"SyclQueueRef";

/// Calls of [`sycl_queue_get_native`] so far.
static GET_NATIVE_CALLS: AtomicUsize = AtomicUsize::new(0);

/// A `"SyclQueueRef"` capsule as `dpctl.SyclQueue._get_capsule()` returns one: a new queue
/// (here a stand-in) that the capsule's destructor deletes, whose native Level Zero handle is
/// `native` (an immediate command list, or with `immediate=False` a command queue) and whose
/// backend is `backend` (`"level_zero"`, `"opencl"`, `"cuda"` or `"hip"`, dpctl's names).
#[pyfunction]
#[pyo3(signature = (native, backend="level_zero", immediate=true))]
fn sycl_queue_ref<'py>(
    py: Python<'py>,
    native: usize,
    backend: &str,
    immediate: bool,
) -> PyResult<Bound<'py, PyAny>> {
    // `DPCTLSyclBackendType` (dpctl's `dpctl_sycl_enum_types.h`).
    let backend = match backend {
        "cuda" => 1 << 16,
        "level_zero" => 1 << 17,
        "opencl" => 1 << 18,
        "hip" => 1 << 19,
        _ => {
            return Err(PyValueError::new_err(format!(
                "backend={backend:?}; expected \"level_zero\", \"opencl\", \"cuda\" or \"hip\""
            )));
        }
    };
    let queue = Box::into_raw(Box::new(SyclQueueStandIn {
        native,
        immediate: i32::from(immediate),
        backend,
    }));
    // SAFETY: the thread is attached; `queue` is a live heap block that the destructor frees
    // once, with the capsule.
    let capsule = unsafe {
        pyo3::ffi::PyCapsule_New(
            queue.cast(),
            QUEUE_CAPSULE.as_ptr(),
            Some(delete_sycl_queue_ref),
        )
    };
    if capsule.is_null() {
        // SAFETY: the capsule was not made, so nothing else owns the block.
        drop(unsafe { Box::from_raw(queue) });
    }
    // SAFETY: PyCapsule_New returns a new reference, or NULL with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, capsule) }
}

/// The destructor of [`sycl_queue_ref`]'s capsules: frees the stand-in.
///
/// # Safety
/// Called by CPython only, once, for a capsule made by [`sycl_queue_ref`].
unsafe extern "C" fn delete_sycl_queue_ref(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: a capsule of ours, under its own name (whatever it is now): GetName and
    // GetPointer do not fail for it.
    let queue =
        unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule, pyo3::ffi::PyCapsule_GetName(capsule)) };
    if !queue.is_null() {
        // SAFETY: the block `sycl_queue_ref` leaked for this capsule, freed only here.
        drop(unsafe { Box::from_raw(queue.cast::<SyclQueueStandIn>()) });
    }
}

/// The stand-in for libsycl's `sycl::_V1::queue::getNative(int &) const`: the native handle of
/// a queue of [`sycl_queue_ref`], and whether it is an immediate command list.
///
/// # Safety
/// `queue` is the pointer of a live capsule made by [`sycl_queue_ref`]; `immediate` points to
/// a writable int.
#[unsafe(export_name = "_ZNK4sycl3_V15queue9getNativeERi")]
unsafe extern "C" fn sycl_queue_get_native(queue: *const c_void, immediate: *mut i32) -> usize {
    GET_NATIVE_CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: caller's contract.
    let queue = unsafe { &*queue.cast::<SyclQueueStandIn>() };
    // SAFETY: caller's contract.
    unsafe { immediate.write(queue.immediate) };
    queue.native
}

/// The stand-in for dpctl's `DPCTLQueue_GetBackend`: the backend of a queue of
/// [`sycl_queue_ref`].
///
/// # Safety
/// `queue` is the pointer of a live capsule made by [`sycl_queue_ref`].
#[unsafe(export_name = "DPCTLQueue_GetBackend")]
unsafe extern "C" fn dpctl_queue_get_backend(queue: *const c_void) -> c_int {
    // SAFETY: caller's contract.
    unsafe { (*queue.cast::<SyclQueueStandIn>()).backend }
}

/// How many times `dlpack_pyo3` has asked [`sycl_queue_get_native`] for a native handle.
#[pyfunction]
fn sycl_get_native_calls() -> usize {
    GET_NATIVE_CALLS.load(Ordering::SeqCst)
}

/// `dlpack_pyo3::oneapi::level_zero_command_list(queue)`, as an integer.
#[pyfunction]
fn sycl_command_list(queue: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(dlpack_pyo3::oneapi::level_zero_command_list(queue)?.addr())
}

/// Adds the oneAPI functions and the queue class to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(oneapi_driver_error, m)?)?;
    m.add_function(wrap_pyfunction!(oneapi_f32, m)?)?;
    m.add_function(wrap_pyfunction!(oneapi_import_report, m)?)?;
    m.add_function(wrap_pyfunction!(sycl_queue_ref, m)?)?;
    m.add_function(wrap_pyfunction!(sycl_get_native_calls, m)?)?;
    m.add_function(wrap_pyfunction!(sycl_command_list, m)?)?;
    m.add_class::<OneApiQueue>()?;
    Ok(())
}
