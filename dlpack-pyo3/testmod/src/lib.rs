//! The Python extension module that dlpack-pyo3's Python tests import, as `dlpack_testmod`.
//!
//! It is built as an abi3 extension without libpython and loaded by pytest
//! (`dlpack-pyo3/tests/python`, run by `scripts/steps/pyo3.check.sh`), for CPython >= 3.11
//! (`abi3-py311`, the first stable ABI with the buffer protocol):
//!
//! ```text
//! PYO3_BUILD_EXTENSION_MODULE=1 cargo build -p dlpack-pyo3-testmod --release
//! cp target/release/libdlpack_testmod.so <dir>/dlpack_testmod.abi3.so
//! ```
//!
//! What it offers Python:
//! - Rust-made tensors of any dtype, layout, device and read-only state (`from_bytes`), as
//!   `dlpack_pyo3.DLPackTensor` objects, with counters of the buffers made and freed
//!   (`counters`);
//! - a fake device (any non-CPU device type, whose "device memory" is host memory) with device
//!   hooks that log what they are asked (`hook_log`);
//! - the Rust importer, reporting what it received (`import_report`) or reading the values
//!   (`import_values`);
//! - the C exchange API of any type, called from Rust (`exchange_roundtrip` and friends);
//! - loops for the benchmark (`import_loop`);
//! - a `#[derive(DLPack)]` struct crossing into Python and back (`derived_image`,
//!   `to_derived_image`);
//! - the buffer protocol asked for with exact request flags (`buffer_info`), and a `PyExporter`
//!   class of the module's own with the buffer protocol and `__array__` (`ExporterTensor`),
//!   in `buffer.rs`;
//! - dlpack-pyo3's argument and result types in `#[pyfunction]`s (`args.rs`);
//! - with the feature `cuda`: float32 tensors on CUDA device 0 (`cuda_f32`) and the CUDA
//!   importer of `dlpack_pyo3::cuda` (`cuda_import_report`, `cuda_import_address`), for
//!   `dlpack-pyo3/tests/python-gpu` and `dlpack-pyo3/tests/python-stand-in`;
//! - with the feature `candle-cuda`: candle CUDA tensors lent to Python by dlpack-candle
//!   (`candle_cuda_f32`, `candle_cuda_lend`) and Python CUDA tensors taken into candle
//!   (`candle_cuda_import`), for `dlpack-pyo3/tests/python-gpu/test_candle_cuda.py`;
//! - with the feature `oneapi`: float32 tensors in Level Zero USM (`oneapi_f32`), queues to
//!   name as `stream` (`OneApiQueue`) and the importer of `dlpack_pyo3::oneapi`
//!   (`oneapi_import_report`), for `dlpack-pyo3/tests/python-oneapi`;
//! - a deliberate leak (`leak_one_export`), which the valgrind step of
//!   `scripts/steps/pyo3.check.sh` must find, to prove that it finds leaks.

mod args;
mod buffer;
#[cfg(feature = "candle-cuda")]
mod candle_cuda;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "oneapi")]
mod oneapi;

use std::collections::VecDeque;
use std::ffi::{CStr, c_char, c_void};
use std::ops::Range;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dlpack_core::ffi::{DLManagedTensorVersioned, DLPackExchangeAPI, DLTensor};
use dlpack_core::protocol::StreamRequest;
use dlpack_core::{
    DataType, DataTypeCode, Device, DeviceHooks, DeviceType, Element, Error, Export, ExportDesc,
    Flags, ManagedTensor, MemoryKind, PointerInfo,
};
use dlpack_pyo3::{DLPackTensor, ImportOptions, to_py_err};
use num_complex::Complex;
use pyo3::BoundObject;
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyComplex, PyDict, PyList, PyType};

static CREATED: AtomicUsize = AtomicUsize::new(0);
static DROPPED: AtomicUsize = AtomicUsize::new(0);

/// 64 bytes aligned to 64, the unit of [`TestBuffer`]'s storage (JAX imports CPU data without
/// a copy only when it is 64-byte aligned).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A Rust-owned buffer with a layout over it: the producer of [`from_bytes`]' tensors.
struct TestBuffer {
    lines: Vec<Line>,
    bytes: usize,
    dtype: DataType,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    device: Device,
    read_only: bool,
    padded: bool,
}

impl Drop for TestBuffer {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: describes the buffer's own lines (initialised, owned, in place while `self` lives),
// and names them as the allocation, so the export constructor refuses any layout that reaches
// outside them. The shape (and strides, when given, of the same length: checked in
// `from_bytes`) never change, so `ndim` is stable.
unsafe impl Export for TestBuffer {
    fn ndim(&self) -> usize {
        self.shape.len()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&self.shape);
        match &self.strides {
            Some(s) => strides.copy_from_slice(s),
            None => {
                let mut step = 1i64;
                for (s, &d) in strides.iter_mut().zip(&self.shape).rev() {
                    *s = step;
                    step = step.saturating_mul(d.max(1));
                }
            }
        }
        let data = self.lines.as_mut_ptr().cast::<c_void>();
        let start = data.addr();
        ExportDesc {
            data,
            byte_offset: self.byte_offset,
            dtype: self.dtype,
            device: self.device,
            flags: Flags::empty()
                .with(Flags::READ_ONLY, self.read_only)
                .with(Flags::IS_SUBBYTE_TYPE_PADDED, self.padded),
            allocation: Some(Range {
                start,
                end: start + self.bytes,
            }),
        }
    }
}

/// What the fake device's hooks were asked, oldest first.
static HOOK_LOG: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

fn log_hook(entry: String) {
    if let Ok(mut log) = HOOK_LOG.lock() {
        log.push_back(entry);
    }
}

/// Hooks for the fake device: every non-CPU device type, whose "device memory" is host memory
/// that only [`from_bytes`] makes. They log each call.
struct FakeDeviceHooks;

// SAFETY: `resolve` reports device memory only (never host-accessible) and no allocation; no
// `copy_from_host` is implemented.
unsafe impl DeviceHooks for FakeDeviceHooks {
    fn handles(&self, device_type: DeviceType) -> bool {
        device_type != DeviceType::CPU
    }

    fn resolve(&self, claimed: Device, address: usize) -> Result<PointerInfo, Error> {
        log_hook(format!("resolve {claimed} {address:#x}"));
        Ok(PointerInfo {
            device: claimed,
            kind: MemoryKind::Device,
            allocation: None,
        })
    }

    fn make_ready(&self, device: Device, stream: StreamRequest) -> Result<(), Error> {
        log_hook(format!("make_ready {device} {stream:?}"));
        Ok(())
    }

    fn wait_host(&self, device: Device) -> Result<(), Error> {
        log_hook(format!("wait_host {device}"));
        Ok(())
    }

    unsafe fn copy_to_host(&self, device: Device, src: usize, dst: &mut [u8]) -> Result<(), Error> {
        log_hook(format!("copy_to_host {device} {} bytes", dst.len()));
        // SAFETY: these hooks are attached only to tensors made by `from_bytes`, whose "device
        // memory" is a host buffer; the caller guarantees `src..src + dst.len()` is that
        // tensor's memory, valid for reads and not written meanwhile, and `dst` is ours.
        unsafe { ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

/// Makes a Rust tensor from `data` (copied into a 64-byte aligned buffer) with any dtype
/// `(code, bits, lanes)`, shape, strides (in elements; `None`: row-major), byte offset,
/// read-only state, device and `IS_SUBBYTE_TYPE_PADDED` flag (`padded`). A non-CPU device is
/// the fake device: its memory is host memory, and `hooks=True` attaches [`FakeDeviceHooks`]
/// to it. The layout must stay inside `data`.
#[pyfunction]
#[pyo3(signature = (data, dtype, shape, strides=None, byte_offset=0, read_only=false, device=(1, 0), hooks=false, padded=false))]
#[allow(clippy::too_many_arguments)]
fn from_bytes(
    data: &[u8],
    dtype: (u8, u8, u16),
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    read_only: bool,
    device: (i32, i32),
    hooks: bool,
    padded: bool,
) -> PyResult<DLPackTensor> {
    if let Some(s) = &strides
        && s.len() != shape.len()
    {
        return Err(PyValueError::new_err(format!(
            "strides {s:?} do not match shape {shape:?}: expected {} entries",
            shape.len()
        )));
    }
    let mut lines = vec![Line([0; 64]); data.len().div_ceil(64)];
    for (line, chunk) in lines.iter_mut().zip(data.chunks(64)) {
        line.0[..chunk.len()].copy_from_slice(chunk);
    }
    let buffer = TestBuffer {
        lines,
        bytes: data.len(),
        dtype: DataType::new(DataTypeCode(dtype.0), dtype.1, dtype.2),
        shape,
        strides,
        byte_offset,
        device: Device::new(DeviceType(device.0), device.1),
        read_only,
        padded,
    };
    CREATED.fetch_add(1, Ordering::SeqCst);
    let tensor = ManagedTensor::export(buffer).map_err(to_py_err)?;
    Ok(if hooks {
        DLPackTensor::with_hooks(tensor, Arc::new(FakeDeviceHooks))
    } else {
        DLPackTensor::new(tensor)
    })
}

/// `(buffers made, buffers freed)` by [`from_bytes`] so far.
#[pyfunction]
fn counters() -> (usize, usize) {
    (
        CREATED.load(Ordering::SeqCst),
        DROPPED.load(Ordering::SeqCst),
    )
}

/// Exports a 16-byte `Vec` and never deletes it: a leak on purpose, for the self-test of the
/// valgrind leak check (`scripts/steps/pyo3.check.sh`), which must report it.
#[pyfunction]
fn leak_one_export() -> PyResult<()> {
    // Dropping the raw pointer without calling its deleter leaks the block and the Vec.
    ManagedTensor::export_raw(vec![0u8; 16]).map_err(to_py_err)?;
    Ok(())
}

/// The fake device hooks' calls since the last call, oldest first.
#[pyfunction]
fn hook_log() -> Vec<String> {
    HOOK_LOG
        .lock()
        .map(|mut log| log.drain(..).collect())
        .unwrap_or_default()
}

fn options(
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
    stream: Option<i64>,
) -> ImportOptions {
    ImportOptions {
        dl_device: dl_device.map(|(t, id)| Device::new(DeviceType(t), id)),
        copy,
        stream,
    }
}

/// Describes a tensor as a dict: device, dtype, shape, strides, data pointer (of the first
/// element), byte offset, read-only, is-copied, version and struct.
fn report<'py>(py: Python<'py>, t: &ManagedTensor) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let device = t.device();
    let dtype = t.dtype();
    d.set_item("device", (device.device_type.0, device.device_id))?;
    d.set_item("dtype", (dtype.code.0, dtype.bits, dtype.lanes))?;
    d.set_item("shape", t.shape().to_vec())?;
    d.set_item("strides", t.strides().to_vec())?;
    let first = t
        .data_ptr()
        .addr()
        .wrapping_add(usize::try_from(t.byte_offset()).unwrap_or(usize::MAX));
    d.set_item("data_ptr", first)?;
    d.set_item("byte_offset", t.byte_offset())?;
    d.set_item("read_only", t.is_read_only())?;
    d.set_item("is_copied", t.flags().contains(Flags::IS_COPIED))?;
    let v = t.version();
    d.set_item("version", (v.major, v.minor))?;
    d.set_item("legacy", t.is_legacy())?;
    Ok(d)
}

/// Imports `obj` (any object with `__dlpack__`, or a capsule) and reports what was received,
/// with the producer's own read-only flag.
#[pyfunction]
#[pyo3(signature = (obj, *, dl_device=None, copy=None, stream=None))]
fn import_report<'py>(
    obj: &Bound<'py, PyAny>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
    stream: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    // SAFETY: the tensor's fields are read and it is dropped: no view of its memory is made, so
    // nobody can observe a write through it.
    let tensor =
        unsafe { dlpack_pyo3::from_dlpack_writable(obj, &options(dl_device, copy, stream)) }?;
    report(obj.py(), &tensor)
}

/// Imports `obj` the safe way (read-only) and reports what the Rust side holds.
#[pyfunction]
#[pyo3(signature = (obj, *, dl_device=None, copy=None, stream=None))]
fn import_safe_report<'py>(
    obj: &Bound<'py, PyAny>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
    stream: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let tensor = dlpack_pyo3::from_dlpack_with(obj, &options(dl_device, copy, stream))?;
    report(obj.py(), &tensor)
}

fn values<'py, T: Element, F>(
    py: Python<'py>,
    t: &ManagedTensor,
    f: F,
) -> PyResult<Bound<'py, PyList>>
where
    F: Fn(Python<'py>, &T) -> PyResult<Bound<'py, PyAny>>,
{
    let view = t.view::<T>().map_err(to_py_err)?;
    let items = view
        .iter()
        .map(|v| f(py, v))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

fn plain<'py, T: IntoPyObject<'py> + Copy>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    (*v).into_pyobject(py)
        .map(|o| o.into_any().into_bound())
        .map_err(Into::into)
}

/// Imports `obj` the safe way (with a `dl_device` / `copy` request, if given) and reads every
/// element through a typed view, in row-major order: ints, floats (float16 and bfloat16
/// widened), bools and complex numbers.
#[pyfunction]
#[pyo3(signature = (obj, *, dl_device=None, copy=None))]
fn import_values<'py>(
    obj: &Bound<'py, PyAny>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyList>> {
    let py = obj.py();
    let t = dlpack_pyo3::from_dlpack_with(obj, &options(dl_device, copy, None))?;
    let complex = |py, re: f64, im: f64| Ok(PyComplex::from_doubles(py, re, im).into_any());
    match t.dtype() {
        // Python may write the memory of an import, so bools are read from a checked copy.
        DataType::BOOL => {
            let items = t.to_vec::<bool>().map_err(to_py_err)?;
            PyList::new(py, items)
        }
        DataType::I8 => values::<i8, _>(py, &t, plain),
        DataType::I16 => values::<i16, _>(py, &t, plain),
        DataType::I32 => values::<i32, _>(py, &t, plain),
        DataType::I64 => values::<i64, _>(py, &t, plain),
        DataType::U8 => values::<u8, _>(py, &t, plain),
        DataType::U16 => values::<u16, _>(py, &t, plain),
        DataType::U32 => values::<u32, _>(py, &t, plain),
        DataType::U64 => values::<u64, _>(py, &t, plain),
        DataType::F16 => values::<half::f16, _>(py, &t, |py, v| plain(py, &v.to_f64())),
        DataType::BF16 => values::<half::bf16, _>(py, &t, |py, v| plain(py, &v.to_f64())),
        DataType::F32 => values::<f32, _>(py, &t, plain),
        DataType::F64 => values::<f64, _>(py, &t, plain),
        DataType::C64 => values::<Complex<f32>, _>(py, &t, |py, v| {
            complex(py, f64::from(v.re), f64::from(v.im))
        }),
        DataType::C128 => values::<Complex<f64>, _>(py, &t, |py, v| complex(py, v.re, v.im)),
        other => Err(PyTypeError::new_err(format!(
            "import_values reads bool, int, uint, float16/32/64, bfloat16 and complex64/128, found {other}"
        ))),
    }
}

/// Imports `obj` the safe way and hands the result back to Python as a new `DLPackTensor`
/// (read-only, sharing the memory).
#[pyfunction]
fn reexport(obj: &Bound<'_, PyAny>) -> PyResult<DLPackTensor> {
    Ok(DLPackTensor::new(dlpack_pyo3::from_dlpack(obj)?))
}

/// Imports `obj` `n` times, dropping each tensor at once. `route="auto"` is the importer's own
/// choice (the C exchange API when the type offers it); `route="dlpack"` takes the capsule of
/// `obj.__dlpack__(max_version=(1, 3))` with `dlpack_pyo3::dlpack_capsule` (the call the
/// importer makes for types without the C API) and imports it.
#[pyfunction]
#[pyo3(signature = (obj, n, route="auto"))]
fn import_loop(obj: &Bound<'_, PyAny>, n: usize, route: &str) -> PyResult<()> {
    match route {
        "auto" => {
            for _ in 0..n {
                drop(dlpack_pyo3::from_dlpack(obj)?);
            }
        }
        "dlpack" => {
            for _ in 0..n {
                let capsule = dlpack_pyo3::dlpack_capsule(obj)?;
                drop(dlpack_pyo3::from_dlpack(&capsule)?);
            }
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "route={other:?}: expected \"auto\" or \"dlpack\""
            )));
        }
    }
    Ok(())
}

fn api_of(ty: &Bound<'_, PyType>) -> PyResult<&'static DLPackExchangeAPI> {
    dlpack_pyo3::type_exchange_api(ty).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{} offers no usable __dlpack_c_exchange_api__",
            ty.name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })
}

/// The version `(major, minor)` of a type's C exchange API, or `None`.
#[pyfunction]
fn exchange_version(ty: &Bound<'_, PyType>) -> Option<(u32, u32)> {
    dlpack_pyo3::type_exchange_api(ty).map(|a| (a.header.version.major, a.header.version.minor))
}

/// Calls the deleter of a managed tensor that `managed_tensor_to_py_object_no_sync` refused
/// (ownership stays with the caller on failure).
///
/// # Safety
/// `tensor` is a live managed tensor that the caller owns and never uses again.
unsafe fn delete_versioned(tensor: *mut DLManagedTensorVersioned) {
    // SAFETY: live and owned (caller); its deleter, if any, takes it once.
    unsafe {
        if let Some(deleter) = (*tensor).deleter {
            deleter(tensor);
        }
    }
}

/// Takes a managed tensor out of `obj` through its type's C exchange API
/// (`managed_tensor_from_py_object_no_sync`) and wraps it in a new object of that type
/// (`managed_tensor_to_py_object_no_sync`).
#[pyfunction]
fn exchange_roundtrip<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let api = api_of(&obj.get_type())?;
    let (Some(from), Some(to)) = (
        api.managed_tensor_from_py_object_no_sync,
        api.managed_tensor_to_py_object_no_sync,
    ) else {
        return Err(PyTypeError::new_err("the exchange API lacks a function"));
    };
    let mut tensor: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: the type's own table, called with an instance of it while attached.
    if unsafe { from(obj.as_ptr().cast(), &mut tensor) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let mut out: *mut c_void = ptr::null_mut();
    // SAFETY: hands over the owned tensor just received; `out` is a valid out-pointer.
    if unsafe { to(tensor, &mut out) } != 0 {
        // SAFETY: a refused tensor stays ours, and is deleted once, here.
        unsafe { delete_versioned(tensor) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: on success `out` is a new strong reference to a Python object.
    Ok(unsafe { Bound::from_owned_ptr(py, out.cast()) })
}

/// The error the allocator reported through `set_error`.
#[derive(Default)]
struct SetErrorSlot {
    kind: String,
    message: String,
}

/// The allocator's `set_error` callback: records kind and message.
///
/// # Safety
/// `ctx` is a `SetErrorSlot`; `kind` and `message` are NUL-terminated strings.
unsafe extern "C" fn set_error(ctx: *mut c_void, kind: *const c_char, message: *const c_char) {
    // SAFETY: the context is the slot `exchange_allocate` passed; the strings are valid (API).
    unsafe {
        let slot = &mut *ctx.cast::<SetErrorSlot>();
        slot.kind = CStr::from_ptr(kind).to_string_lossy().into_owned();
        slot.message = CStr::from_ptr(message).to_string_lossy().into_owned();
    }
}

/// Allocates a tensor like the prototype `(shape, dtype, device)` through a type's C exchange
/// API and wraps it in an object of that type; an allocation error is raised as the kind the
/// allocator reported.
#[pyfunction]
#[pyo3(signature = (ty, shape, dtype, device=(1, 0)))]
fn exchange_allocate<'py>(
    ty: &Bound<'py, PyType>,
    mut shape: Vec<i64>,
    dtype: (u8, u8, u16),
    device: (i32, i32),
) -> PyResult<Bound<'py, PyAny>> {
    let py = ty.py();
    let api = api_of(ty)?;
    let (Some(allocate), Some(to)) = (
        api.managed_tensor_allocator,
        api.managed_tensor_to_py_object_no_sync,
    ) else {
        return Err(PyTypeError::new_err("the exchange API has no allocator"));
    };
    let mut prototype = DLTensor {
        data: ptr::null_mut(),
        device: Device::new(DeviceType(device.0), device.1),
        ndim: i32::try_from(shape.len()).map_err(|_| PyValueError::new_err("too many dims"))?,
        dtype: DataType::new(DataTypeCode(dtype.0), dtype.1, dtype.2),
        shape: shape.as_mut_ptr(),
        strides: ptr::null_mut(),
        byte_offset: 0,
    };
    let mut slot = SetErrorSlot::default();
    let mut tensor: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: a valid prototype whose shape lives for the call, a valid out-pointer, and a
    // callback that expects exactly this context.
    let status = unsafe {
        allocate(
            &mut prototype,
            &mut tensor,
            ptr::from_mut(&mut slot).cast(),
            Some(set_error),
        )
    };
    if status != 0 {
        let message = format!("{}: {}", slot.kind, slot.message);
        return Err(match slot.kind.as_str() {
            "BufferError" => PyBufferError::new_err(message),
            "TypeError" => PyTypeError::new_err(message),
            "MemoryError" => PyMemoryError::new_err(message),
            _ => PyValueError::new_err(message),
        });
    }
    let mut out: *mut c_void = ptr::null_mut();
    // SAFETY: hands over the owned tensor just allocated; `out` is a valid out-pointer.
    if unsafe { to(tensor, &mut out) } != 0 {
        // SAFETY: a refused tensor stays ours, and is deleted once, here.
        unsafe { delete_versioned(tensor) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: on success `out` is a new strong reference.
    Ok(unsafe { Bound::from_owned_ptr(py, out.cast()) })
}

/// What a type's `dltensor_from_py_object_no_sync` says about `obj`: data pointer, shape,
/// strides, dtype and device; `None` if the table has no such function.
#[pyfunction]
fn exchange_dltensor<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let py = obj.py();
    let api = api_of(&obj.get_type())?;
    let Some(describe) = api.dltensor_from_py_object_no_sync else {
        return Ok(None);
    };
    let mut dl = DLTensor {
        data: ptr::null_mut(),
        device: Device::CPU,
        ndim: 0,
        dtype: DataType::U8,
        shape: ptr::null_mut(),
        strides: ptr::null_mut(),
        byte_offset: 0,
    };
    // SAFETY: the type's own table, called with an instance of it while attached; `dl` is a
    // valid out-pointer.
    if unsafe { describe(obj.as_ptr().cast(), &mut dl) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let ndim = usize::try_from(dl.ndim).map_err(|_| PyValueError::new_err("negative ndim"))?;
    let read = |p: *mut i64| -> Vec<i64> {
        if p.is_null() || ndim == 0 {
            Vec::new()
        } else {
            // SAFETY: the producer filled `ndim` entries, valid while `obj` lives (API).
            unsafe { std::slice::from_raw_parts(p, ndim) }.to_vec()
        }
    };
    let d = PyDict::new(py);
    d.set_item("data_ptr", dl.data.addr() + dl.byte_offset as usize)?;
    d.set_item("shape", read(dl.shape))?;
    d.set_item("strides", read(dl.strides))?;
    d.set_item("dtype", (dl.dtype.code.0, dl.dtype.bits, dl.dtype.lanes))?;
    d.set_item("device", (dl.device.device_type.0, dl.device.device_id))?;
    Ok(Some(d))
}

/// A type's `current_work_stream` for a device, as an integer (0 for NULL).
#[pyfunction]
fn exchange_current_stream(ty: &Bound<'_, PyType>, device: (i32, i32)) -> PyResult<usize> {
    let py = ty.py();
    let api = api_of(ty)?;
    let Some(current) = api.current_work_stream else {
        return Err(PyTypeError::new_err(
            "the exchange API has no current_work_stream",
        ));
    };
    let mut stream: *mut c_void = ptr::null_mut();
    // SAFETY: the type's own table, called while attached with a valid out-pointer.
    if unsafe { current(DeviceType(device.0), device.1, &mut stream) } != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(stream.addr())
}

/// A capsule with an arbitrary name, for misuse tests. Its pointer is its own name (a
/// `CString`), which its destructor frees.
#[pyfunction]
fn foreign_capsule<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyCapsule>> {
    let name = std::ffi::CString::new(name)?.into_raw();
    // SAFETY: `name` is a valid C string that lives until the destructor frees it; nobody may
    // take the pointer as a tensor (its name is the test's, and DLPack names are refused before
    // the pointer is read).
    let capsule = unsafe { pyo3::ffi::PyCapsule_New(name.cast(), name, Some(free_name)) };
    if capsule.is_null() {
        // SAFETY: no capsule took the string.
        drop(unsafe { std::ffi::CString::from_raw(name) });
    }
    // SAFETY: a new reference, or NULL with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?
        .cast_into::<PyCapsule>()
        .map_err(Into::into)
}

/// The destructor of [`foreign_capsule`]'s capsules: frees the name they point to.
///
/// # Safety
/// `capsule` is a capsule made by [`foreign_capsule`], being destroyed.
unsafe extern "C" fn free_name(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: a live capsule; whatever its name now (a consumer may have renamed it), GetPointer
    // with that name returns the pointer, the `CString` made by `foreign_capsule`, which only
    // this destructor frees.
    unsafe {
        let pointer =
            pyo3::ffi::PyCapsule_GetPointer(capsule, pyo3::ffi::PyCapsule_GetName(capsule));
        if !pointer.is_null() {
            drop(std::ffi::CString::from_raw(pointer.cast()));
        }
    }
}

/// A user's own tensor type, DLPack-capable by one derive.
#[derive(dlpack_core::DLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u16>,
    #[dlpack(shape)]
    hw: [usize; 2],
    #[dlpack(strides)]
    strides: [isize; 2],
}

/// A derived `Image` of `rows x cols` pixels `0, 1, 2, ...` (row-major), exported as seen
/// through `strides` when given (a transposed view, say); returns the tensor object and the
/// address of the pixels, for pointer identity.
#[pyfunction]
#[pyo3(signature = (rows, cols, transposed=false))]
fn derived_image(rows: usize, cols: usize, transposed: bool) -> PyResult<(DLPackTensor, usize)> {
    let count = rows
        .checked_mul(cols)
        .ok_or_else(|| PyValueError::new_err("too large"))?;
    let pixels: Vec<u16> = (0..count).map(|i| (i % 65536) as u16).collect();
    let address = pixels.as_ptr().addr();
    let as_isize = |n: usize| isize::try_from(n).map_err(|_| PyValueError::new_err("too large"));
    let (hw, strides) = if transposed {
        ([cols, rows], [1, as_isize(cols)?])
    } else {
        ([rows, cols], [as_isize(cols)?, 1])
    };
    let image = Image {
        pixels,
        hw,
        strides,
    };
    let tensor = ManagedTensor::export(image).map_err(to_py_err)?;
    Ok((DLPackTensor::new(tensor), address))
}

/// Imports any DLPack object into a derived `Image` (a copy for foreign tensors) and returns
/// `(hw, strides, pixels)`.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn to_derived_image(obj: &Bound<'_, PyAny>) -> PyResult<([usize; 2], [isize; 2], Vec<u16>)> {
    let image = Image::try_from(dlpack_pyo3::from_dlpack(obj)?).map_err(to_py_err)?;
    Ok((image.hw, image.strides, image.pixels))
}

/// The module.
#[pymodule]
fn dlpack_testmod(m: &Bound<'_, PyModule>) -> PyResult<()> {
    dlpack_pyo3::register(m)?;
    m.add_function(wrap_pyfunction!(from_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(counters, m)?)?;
    m.add_function(wrap_pyfunction!(leak_one_export, m)?)?;
    m.add_function(wrap_pyfunction!(hook_log, m)?)?;
    m.add_function(wrap_pyfunction!(import_report, m)?)?;
    m.add_function(wrap_pyfunction!(import_safe_report, m)?)?;
    m.add_function(wrap_pyfunction!(import_values, m)?)?;
    m.add_function(wrap_pyfunction!(reexport, m)?)?;
    m.add_function(wrap_pyfunction!(import_loop, m)?)?;
    m.add_function(wrap_pyfunction!(exchange_version, m)?)?;
    m.add_function(wrap_pyfunction!(exchange_roundtrip, m)?)?;
    m.add_function(wrap_pyfunction!(exchange_allocate, m)?)?;
    m.add_function(wrap_pyfunction!(exchange_dltensor, m)?)?;
    m.add_function(wrap_pyfunction!(exchange_current_stream, m)?)?;
    m.add_function(wrap_pyfunction!(foreign_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(derived_image, m)?)?;
    m.add_function(wrap_pyfunction!(to_derived_image, m)?)?;
    args::register(m)?;
    buffer::register(m)?;
    #[cfg(feature = "cuda")]
    cuda::register(m)?;
    #[cfg(feature = "candle-cuda")]
    candle_cuda::register(m)?;
    #[cfg(feature = "oneapi")]
    oneapi::register(m)?;
    Ok(())
}
