//! The Python `__dlpack__` protocol both ways for pyo3 extensions, and the DLPack C exchange API.
//!
//! Hand any Rust tensor to `numpy.from_dlpack`, `torch.from_dlpack`, `jax.numpy.from_dlpack` or
//! `tvm_ffi.from_dlpack` with one call ([`DLPackTensor::new`]), and take any Python tensor, or a
//! bare DLPack capsule, into Rust without a copy ([`from_dlpack`]). The result of an import is
//! dlpack-core's [`ManagedTensor`](dlpack_core::ManagedTensor), so every adapter of the workspace (ndarray, nalgebra,
//! candle) works on it.
//!
//! ```
//! use dlpack_core::{DataType, ManagedTensor};
//! use dlpack_pyo3::{DLPackTensor, from_dlpack, to_py_err};
//! use pyo3::prelude::*;
//!
//! Python::attach(|py| -> PyResult<()> {
//!     // Export: a Rust Vec becomes a Python object with __dlpack__ and __dlpack_device__.
//!     let data: Vec<f32> = vec![0.5, 1.5, 2.5];
//!     let address = data.as_ptr() as usize;
//!     let tensor = ManagedTensor::export(data).map_err(to_py_err)?;
//!     let object = Bound::new(py, DLPackTensor::new(tensor))?;
//!     assert_eq!(object.call_method0("__dlpack_device__")?.extract::<(i32, i32)>()?, (1, 0));
//!
//!     // Python consumers call __dlpack__ and get a capsule ...
//!     let kwargs = pyo3::types::PyDict::new(py);
//!     kwargs.set_item("max_version", (1, 0))?;
//!     let capsule = object.call_method("__dlpack__", (), Some(&kwargs))?;
//!
//!     // ... which this crate's importer takes too, without a copy.
//!     let back = from_dlpack(&capsule)?;
//!     assert_eq!((back.dtype(), back.data_ptr() as usize), (DataType::F32, address));
//!     assert_eq!(back.view::<f32>().map_err(to_py_err)?.to_vec().map_err(to_py_err)?, [0.5, 1.5, 2.5]);
//!     Ok(())
//! })?;
//! # Ok::<(), PyErr>(())
//! ```
//!
//! # Map of the crate
//!
//! - Producer: [`DLPackTensor`], a ready-made `#[pyclass]`; [`Exporter`], the state any
//!   `#[pyclass]` can hold and delegate `__dlpack__` / `__dlpack_device__` to; [`to_capsule`]
//!   for one call; [`dlpack_method`] and [`PyExporter`], the fastest `__dlpack__` for any
//!   `#[pyclass]`; [`export_args`] for the keyword arguments.
//! - Consumer: [`from_dlpack`], [`from_dlpack_with`] ([`ImportOptions`]: `dl_device`, `copy`,
//!   `stream`), and [`from_dlpack_writable`] for callers that can promise exclusive access.
//! - `#[pyfunction]` arguments: [`PyTensor`] (a typed read-only view of any producer's tensor,
//!   with [`PyTensor2`] and the like for a fixed number of dimensions), [`PyTensorMut`]
//!   (writable, `unsafe` to write) and [`Imported`] (any dtype). Results: [`Exported`] (any
//!   `dlpack_core::Export` producer: `Vec`, `Box<[T]>`, `ManagedTensor`, ...) and
//!   [`HostArray`] (64-byte aligned, which JAX needs to take it in place). The workspace's
//!   `docs/python.md` is the guide.
//! - The DLPack 1.3 C exchange API: [`exchange_api`], offered on [`DLPackTensor`]'s type and used
//!   by the importer when a producer's type offers one.
//! - NumPy without DLPack: the buffer protocol (PEP 3118) for host tensors, [`get_buffer`] and
//!   [`release_buffer`] (`memoryview(t)`, `bytes(t)`, and `np.asarray(t)` sharing the memory;
//!   see the section below for the builds that have it), and `__array__` with NumPy 2's `copy`
//!   ([`numpy_array`]); [`DLPackTensor`] offers both.
//! - Errors: [`to_py_err`], and two exception classes that also derive from the one NumPy raises
//!   ([`exceptions`]).
//! - [`register`] adds the class and the exceptions to an extension module.
//! - Feature `cuda`: `cuda::from_dlpack_cuda`, PyTorch / CuPy / JAX GPU tensors into Rust with
//!   the stream handshake and the CUDA driver's check of their device claim (dlpack-cuda).
//! - Feature `oneapi`: `oneapi::from_dlpack_oneapi`, dpnp / dpctl / PyTorch XPU tensors into
//!   Rust with Level Zero's check of their device claim, and the queue handshake for Rust USM
//!   tensors going out (dlpack-oneapi).
//!
//! # Glue only
//!
//! Every protocol decision (versioned or legacy struct, `dl_device`, `copy`, what a `stream`
//! means, which exception) is made by [`dlpack_core::protocol`] in plain Rust; this crate turns
//! Python arguments into its inputs and carries its decisions out. Device work (stream
//! synchronisation, copies out of device memory) goes through a [`dlpack_core::DeviceHooks`]
//! that a device crate provides ([`Exporter::with_hooks`], [`DLPackTensor::with_hooks`]); host
//! memory needs none.
//!
//! # Threads and free-threaded Python
//!
//! A module built with this crate may keep pyo3's default and declare that it runs without the
//! GIL (free-threaded CPython 3.13t and later); it need not declare `gil_used`. pyo3 builds such
//! a module for the free-threaded interpreter's own version even with an `abi3-py3*` feature,
//! since those interpreters do not load stable-ABI modules before CPython 3.15.
//!
//! What that takes of this crate:
//! - A capsule is consumed once. The importer checks a capsule's name and renames it in one
//!   critical section on the capsule (`pyo3::sync::critical_section::with_critical_section`):
//!   of two threads importing one capsule at once, one takes the tensor and the other gets a
//!   `ValueError`, and the tensor's deleter runs once. A consumer outside this crate that takes
//!   a capsule without such a critical section can still race with one of ours on a
//!   free-threaded interpreter: hand each capsule to one consumer.
//! - [`DLPackTensor`] and [`Exporter`] are immutable and `Sync`: any number of threads may
//!   export one tensor at once, each export sharing it.
//! - A consumer may call the deleter of an exported Rust tensor on any thread, attached to the
//!   interpreter or not, as DLPack allows: the `Drop` of a producer runs there.
//!
//! # The buffer protocol and the stable ABI
//!
//! CPython's stable ABI has the buffer protocol from 3.11 only, so this crate offers it
//! ([`get_buffer`], [`release_buffer`], `DLPackTensor.__getbuffer__`) in every build but the
//! limited API of older versions: a build for one interpreter, or for the stable ABI of
//! CPython >= 3.11 (pyo3's `abi3-py311` feature). With `abi3-py39` or `abi3-py310`,
//! [`DLPackTensor`] has no buffer, and NumPy reads it through `__array__` instead (a share or
//! a copy as `copy` says, through `numpy.from_dlpack`). The buffer serves memory the host
//! reads in place (the CPU, and pinned or managed memory once the device hooks have waited for
//! it); device tensors, and dtypes PEP 3118 has no format for (bfloat16, the float8, float6
//! and float4 types, complex32, vector types), are refused with a `BufferError` that says why.
//!
//! # Building an extension module
//!
//! A module that hands a Rust `Vec` to Python and reads any Python tensor in place:
//!
//! ```no_run
//! use dlpack_pyo3::{Exported, PyTensor};
//! use pyo3::prelude::*;
//!
//! /// `mylib.arange(n)`: a Rust Vec that NumPy, PyTorch or JAX take without a copy.
//! #[pyfunction]
//! fn arange(n: u32) -> Exported<Vec<f32>> {
//!     Exported((0..n).map(|i| i as f32).collect())
//! }
//!
//! /// `mylib.total(x)`: the sum of any float32 tensor with `__dlpack__`, read in place.
//! #[pyfunction]
//! fn total(x: PyTensor<f32>) -> f32 {
//!     x.view().iter().sum()
//! }
//!
//! #[pymodule]
//! fn mylib(m: &Bound<'_, PyModule>) -> PyResult<()> {
//!     dlpack_pyo3::register(m)?; // DLPackTensor and the exception classes, by name
//!     m.add_function(wrap_pyfunction!(arange, m)?)?;
//!     m.add_function(wrap_pyfunction!(total, m)?)?;
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! Build the extension's `cdylib` with pyo3's `abi3-py39` feature (one build serves every
//! CPython >= 3.9) and the `PYO3_BUILD_EXTENSION_MODULE` environment variable set, so that it
//! does not link libpython. cargo names the library `libmylib.so`; Python imports it as
//! `mylib.abi3.so` (copy it so, as `scripts/steps/pyo3.check.sh` does with the test module, or
//! build with maturin, which does it for you). This crate's own tests embed CPython instead
//! and link it. The workspace's `examples/python-extension` is such a module, built by
//! `pip install` with maturin as the build backend, with its pytest suite.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod arguments;
mod array;
#[cfg(any(not(Py_LIMITED_API), Py_3_11))]
mod buffer;
mod capsule;
#[cfg(feature = "cuda")]
pub mod cuda;
mod entry;
pub mod exceptions;
mod exchange;
mod export;
mod import;
#[cfg(feature = "oneapi")]
pub mod oneapi;
mod results;
mod tensor;

pub use arguments::{
    AnyNdim, Imported, Ndim, NdimSpec, PyTensor, PyTensor1, PyTensor2, PyTensor3, PyTensorMut,
    PyTensorMut1, PyTensorMut2, PyTensorMut3,
};
pub use array::numpy_array;
#[cfg(any(not(Py_LIMITED_API), Py_3_11))]
pub use buffer::{get_buffer, release_buffer};
pub use exceptions::to_py_err;
pub use exchange::{exchange_api, type_exchange_api};
pub use export::{Exporter, PyExporter, dlpack_device, dlpack_method, export_args, to_capsule};
pub use import::{
    ImportOptions, dlpack_capsule, from_dlpack, from_dlpack_with, from_dlpack_writable,
};
pub use results::{Exported, HostArray};
pub use tensor::DLPackTensor;

use pyo3::prelude::*;

/// Adds [`DLPackTensor`] and the exception classes `DLPackStreamError` and `DLPackCapsuleError`
/// to an extension module, so that Python code can name them.
///
/// The first module the classes are added to becomes their `__module__`, so that their
/// instances pickle (across `multiprocessing`, say): pickle finds a class by its module's name.
///
/// # Errors
///
/// The exception Python raises when a class cannot be made or added to `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add_class::<DLPackTensor>()?;
    for (name, ty) in [
        ("DLPackStreamError", exceptions::stream_error_type(py)?),
        ("DLPackCapsuleError", exceptions::capsule_error_type(py)?),
    ] {
        exceptions::adopt(ty, module)?;
        module.add(name, ty)?;
    }
    Ok(())
}
