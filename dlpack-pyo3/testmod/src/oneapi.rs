//! The oneAPI part of the test module (feature `oneapi`): Rust Level Zero USM tensors for
//! Python, queues to name as `stream`, and the importer of `dlpack_pyo3::oneapi`, reporting what
//! it received. Run by `dlpack-pyo3/tests/python-oneapi` through the real Level Zero loader and
//! the workspace's test-support driver.

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

/// Adds the oneAPI functions and the queue class to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(oneapi_driver_error, m)?)?;
    m.add_function(wrap_pyfunction!(oneapi_f32, m)?)?;
    m.add_function(wrap_pyfunction!(oneapi_import_report, m)?)?;
    m.add_class::<OneApiQueue>()?;
    Ok(())
}
