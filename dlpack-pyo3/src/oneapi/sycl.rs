//! SYCL queues in dpctl's shape, as `stream` of a oneAPI export: their Level Zero command list,
//! read without importing dpctl.
//!
//! A `dpctl.SyclQueue` says its backend in Python (`q.backend`, a `dpctl.backend_type` member)
//! and hands out its `sycl::queue` as a `"SyclQueueRef"` capsule (`q._get_capsule()`, a copy of
//! the queue that the capsule's destructor deletes). Neither dpctl's Python API nor its C
//! library (libDPCTLSyclInterface) gives a queue's native handle: only the SYCL runtime does,
//! through `sycl::get_native<sycl::backend::ext_oneapi_level_zero>(queue)`, a header template
//! that calls the exported member function `sycl::_V1::queue::getNative(int &) const` of
//! libsycl. That function is read here from the library that made the capsule (the shared
//! object holding its destructor: dpctl's `_sycl_queue` extension, whose dependencies include
//! libsycl), which is already loaded and is never loaded anew.

use core::ffi::{CStr, c_void};

use dlpack_oneapi::sys::ze_command_list_handle_t;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

use crate::export::{SYCL_QUEUE_CAPSULE as QUEUE_CAPSULE, is_sycl_queue};

/// The Itanium C++ name of `sycl::_V1::queue::getNative(int &) const`, which returns the
/// queue's native handle (an integer) and writes through its argument whether a Level Zero
/// handle is an immediate command list (1) or a command queue (0).
const GET_NATIVE: &CStr = c"_ZNK4sycl3_V15queue9getNativeERi";

/// dpctl's C function `DPCTLQueue_GetBackend(DPCTLSyclQueueRef)`, which returns the queue's
/// `DPCTLSyclBackendType` (and catches the runtime's exceptions itself).
const GET_BACKEND: &CStr = c"DPCTLQueue_GetBackend";

/// `DPCTLSyclBackendType`'s values (dpctl's `dpctl_sycl_enum_types.h`) and the names of the
/// matching `dpctl.backend_type` members.
const BACKENDS: [(core::ffi::c_int, &str); 4] = [
    (1 << 16, "cuda"),
    (1 << 17, "level_zero"),
    (1 << 18, "opencl"),
    (1 << 19, "hip"),
];

/// The Level Zero immediate command list of a SYCL queue in dpctl's shape: a `dpctl.SyclQueue`
/// (any object with a `backend` whose name is `level_zero` and a `_get_capsule()` that returns
/// a `"SyclQueueRef"` capsule), or such a capsule itself.
///
/// This is the handle to adopt with [`Queue::from_raw`](dlpack_oneapi::Queue::from_raw) in the
/// context of a [`OneApiHooks`](dlpack_oneapi::OneApiHooks), so that `__dlpack__(stream=q)`
/// of a [`DLPackTensor`](crate::DLPackTensor) with those hooks orders `q` after the tensor's
/// work (the [module](super) docs). It is read from the SYCL runtime that made the queue
/// (`sycl::queue::getNative` of the libsycl that dpctl loaded), without importing dpctl; what
/// no SYCL runtime made is refused before anything native is called:
///
/// ```
/// use pyo3::exceptions::{PyBufferError, PyTypeError};
/// use pyo3::prelude::*;
///
/// Python::attach(|py| {
///     // An object in dpctl's shape whose queue runs on OpenCL has no Level Zero list.
///     let queue = py
///         .eval(
///             c"type('SyclQueue', (), {'backend': 'opencl', '_get_capsule': lambda self: None})()",
///             None,
///             None,
///         )
///         .unwrap();
///     let err = dlpack_pyo3::oneapi::level_zero_command_list(&queue).unwrap_err();
///     assert!(err.is_instance_of::<PyBufferError>(py));
///     assert!(err.to_string().contains("opencl"));
///
///     // Anything else is not a SYCL queue.
///     let err = dlpack_pyo3::oneapi::level_zero_command_list(&py.None().into_bound(py));
///     assert!(err.unwrap_err().is_instance_of::<PyTypeError>(py));
/// });
/// ```
///
/// Adopt the list of an *in-order* queue only: an out-of-order queue spreads its work over
/// several lists and names another one on every call (Intel's Level Zero adapter), so no one
/// list orders it.
///
/// # Errors
///
/// `TypeError` for an object that is not a SYCL queue in dpctl's shape; `BufferError` for a
/// queue on another backend (named in the message), a queue whose native handle is a Level
/// Zero command queue rather than an immediate command list (Intel's runtime uses immediate
/// lists unless told otherwise, `UR_L0_USE_IMMEDIATE_COMMANDLISTS=0`), and when the runtime
/// cannot be asked: on platforms other than Linux on x86-64 and AArch64, and when the library that made the capsule
/// does not lead to `sycl::queue::getNative`. A C++ exception thrown by the runtime is not
/// caught: it ends the process, or surfaces as a panic.
pub fn level_zero_command_list(queue: &Bound<'_, PyAny>) -> PyResult<ze_command_list_handle_t> {
    let repr = queue
        .repr()
        .map_or_else(|_| "a SYCL queue".to_owned(), |r| r.to_string());
    if !is_sycl_queue(queue) {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{repr} is not a SYCL queue: expected a dpctl.SyclQueue or a \"SyclQueueRef\" capsule"
        )));
    }
    let handle = command_list_of(queue, &repr)?;
    Ok(core::ptr::with_exposed_provenance_mut(handle))
}

/// [`level_zero_command_list`] for a `queue` that [`is_sycl_queue`] accepted,
/// with `what` naming it in messages: the list's handle as an integer.
pub(crate) fn command_list_of(queue: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    let refuse = |why: String| PyBufferError::new_err(format!("{what} {why}"));
    let backend_refusal = |name: &str| {
        refuse(format!(
            "is a SYCL queue on the {name} backend, which has no Level Zero command list: a \
             oneAPI tensor here is Level Zero USM, ordered only before Level Zero queues; \
             expected a queue on the level_zero backend"
        ))
    };
    let bare_capsule = is_queue_capsule(queue);
    let capsule = if bare_capsule {
        queue.clone()
    } else {
        let backend = queue.getattr(pyo3::intern!(queue.py(), "backend"))?;
        // A `dpctl.backend_type` member (an `enum.Enum`) says its name; anything else is read as
        // text.
        let name = match backend.getattr(pyo3::intern!(queue.py(), "name")) {
            Ok(name) => name.str()?.to_string(),
            Err(_) => backend.str()?.to_string(),
        };
        if name != "level_zero" {
            return Err(backend_refusal(&name));
        }
        let capsule = queue.call_method0(pyo3::intern!(queue.py(), "_get_capsule"))?;
        if !is_queue_capsule(&capsule) {
            return Err(refuse(format!(
                "is a Level Zero SYCL queue whose _get_capsule() returned {}, not a \
                 \"SyclQueueRef\" capsule",
                capsule
                    .repr()
                    .map_or_else(|_| "an object without a repr".to_owned(), |r| r.to_string())
            )));
        }
        capsule
    };
    let runtime = native::Runtime::of(&capsule).map_err(&refuse)?;
    // SAFETY: `capsule` is a live "SyclQueueRef" capsule (checked above), whose pointer is a
    // `sycl::queue *` (dpctl's convention for the name) that lives as long as the capsule,
    // which `capsule` keeps for this call; the runtime is the library that made it.
    let pointer = unsafe { queue_pointer(&capsule) };
    if bare_capsule {
        // A bare capsule says its backend only through dpctl's C library.
        // SAFETY: as above.
        let backend = unsafe { runtime.backend(pointer) }.map_err(&refuse)?;
        if backend != BACKENDS[1].0 {
            let name = BACKENDS
                .iter()
                .find(|(value, _)| *value == backend)
                .map_or("unknown", |(_, name)| name);
            return Err(backend_refusal(name));
        }
    }
    // SAFETY: as above, for a queue on Level Zero (checked above), whose handle needs no release.
    let (handle, immediate) = unsafe { runtime.native(pointer) }.map_err(&refuse)?;
    if immediate == 0 {
        return Err(refuse(format!(
            "is a Level Zero SYCL queue whose native handle {handle:#x} is a command queue \
             (ze_command_queue_handle_t), not an immediate command list, the only kind a \
             producer can append its barrier to; create the queue with immediate command lists \
             (UR_L0_USE_IMMEDIATE_COMMANDLISTS=1 before the SYCL runtime starts)"
        )));
    }
    if handle == 0 {
        return Err(refuse(
            "is a Level Zero SYCL queue whose native command list is NULL".to_owned(),
        ));
    }
    Ok(handle)
}

/// Whether `object` is a live capsule named [`QUEUE_CAPSULE`].
fn is_queue_capsule(object: &Bound<'_, PyAny>) -> bool {
    // SAFETY: the thread is attached and `object` is live; IsValid only reads the object (and
    // sets no exception).
    unsafe { pyo3::ffi::PyCapsule_IsValid(object.as_ptr(), QUEUE_CAPSULE.as_ptr()) == 1 }
}

/// The pointer of a [`QUEUE_CAPSULE`] capsule.
///
/// # Safety
/// `capsule` is a live capsule of that name (so GetPointer neither fails nor raises).
unsafe fn queue_pointer(capsule: &Bound<'_, PyAny>) -> *mut c_void {
    // SAFETY: caller's contract.
    unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), QUEUE_CAPSULE.as_ptr()) }
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod native {
    use core::ffi::{CStr, c_char, c_int, c_void};

    use libloading::os::unix::{Library, RTLD_LAZY, Symbol};

    use super::{GET_BACKEND, GET_NATIVE, QUEUE_CAPSULE};

    /// `Dl_info` of glibc's and musl's `<dlfcn.h>`.
    #[repr(C)]
    struct DlInfo {
        dli_fname: *const c_char,
        dli_fbase: *mut c_void,
        dli_sname: *const c_char,
        dli_saddr: *mut c_void,
    }

    unsafe extern "C" {
        /// The shared object that holds `address` (glibc, musl): 0 when none does.
        fn dladdr(address: *const c_void, info: *mut DlInfo) -> c_int;
    }

    /// `RTLD_NOLOAD` of glibc and musl on Linux for x86-64 and AArch64: open a library only if
    /// it is already loaded.
    const RTLD_NOLOAD: c_int = 4;

    /// `sycl::_V1::queue::getNative(int &) const`: `this`, then the reference as a pointer.
    /// "C-unwind": the function may throw, and a C++ exception must not unwind through an ABI
    /// that forbids it.
    type GetNative = unsafe extern "C-unwind" fn(*const c_void, *mut i32) -> usize;
    /// `DPCTLQueue_GetBackend`.
    type GetBackend = unsafe extern "C" fn(*const c_void) -> c_int;

    /// The library that made a queue capsule, opened again (it is loaded already).
    pub(super) struct Runtime {
        library: Library,
        path: String,
    }

    impl Runtime {
        /// The shared object holding the destructor of `capsule` (a live [`QUEUE_CAPSULE`]
        /// capsule): the library that made it, whose dependencies define the SYCL runtime's
        /// functions for its queues.
        pub(super) fn of(capsule: &pyo3::Bound<'_, pyo3::PyAny>) -> Result<Self, String> {
            // SAFETY: `capsule` is live and the thread attached; GetDestructor only reads it.
            let destructor = unsafe { pyo3::ffi::PyCapsule_GetDestructor(capsule.as_ptr()) }
                .ok_or_else(|| {
                    "is a \"SyclQueueRef\" capsule without a destructor, so no library of a SYCL \
                     runtime can be found from it"
                        .to_owned()
                })?;
            let mut info = DlInfo {
                dli_fname: core::ptr::null(),
                dli_fbase: core::ptr::null_mut(),
                dli_sname: core::ptr::null(),
                dli_saddr: core::ptr::null_mut(),
            };
            // SAFETY: dladdr reads the loader's tables for an address and writes `info`.
            let found = unsafe { dladdr(destructor as *const c_void, &mut info) };
            if found == 0 || info.dli_fname.is_null() {
                return Err(format!(
                    "is a {QUEUE_CAPSULE:?} capsule whose destructor lies in no shared library"
                ));
            }
            // SAFETY: a non-NULL `dli_fname` is the loader's NUL-terminated path of the object,
            // valid while it stays loaded, which the capsule's destructor keeps it.
            let path = unsafe { CStr::from_ptr(info.dli_fname) }
                .to_string_lossy()
                .into_owned();
            // SAFETY: RTLD_NOLOAD opens only an object that is loaded already (this one, whose
            // code holds the destructor), so no initialiser runs.
            let library =
                unsafe { Library::open(Some(&path), RTLD_LAZY | RTLD_NOLOAD) }.map_err(|e| {
                    format!("is a SYCL queue capsule made by {path}, which cannot be opened: {e}")
                })?;
            Ok(Runtime { library, path })
        }

        /// A function of the library or of its dependencies.
        ///
        /// # Safety
        /// `T` is the type of the function named `name` wherever it is defined.
        unsafe fn function<T: Copy>(&self, name: &CStr) -> Result<T, String> {
            // SAFETY: caller's contract; looking a symbol up runs no code.
            let symbol: Result<Symbol<T>, _> = unsafe { self.library.get(name.to_bytes()) };
            symbol.map(|s| *s).map_err(|_| {
                format!(
                    "is a SYCL queue made by {}, which with its dependencies defines no {}: \
                     expected a library of dpctl, linked to a SYCL runtime (libsycl)",
                    self.path,
                    name.to_string_lossy()
                )
            })
        }

        /// `(handle, immediate)`: the queue's native handle, and whether a Level Zero handle
        /// is an immediate command list.
        ///
        /// # Safety
        /// `queue` is a live `sycl::queue` of this runtime on the Level Zero backend (for
        /// OpenCL the runtime retains the handle, which the caller would have to release).
        pub(super) unsafe fn native(&self, queue: *mut c_void) -> Result<(usize, i32), String> {
            // SAFETY: where libsycl exports this name, it is `queue::getNative(int &) const`,
            // of type `GetNative` under the Itanium C++ ABI.
            let get_native = unsafe { self.function::<GetNative>(GET_NATIVE) }?;
            // Intel's Level Zero adapters write 1 for an immediate command list and 0 for a
            // command queue, except those that use immediate lists only, some of which leave
            // the flag as it was: 1 reads right for them all.
            let mut immediate: i32 = 1;
            // SAFETY: `queue` is a live queue of this runtime (caller) and `immediate` a live
            // int; the function reads the queue and writes the int.
            let handle = unsafe { get_native(queue, &mut immediate) };
            Ok((handle, immediate))
        }

        /// dpctl's `DPCTLSyclBackendType` of the queue.
        ///
        /// # Safety
        /// `queue` is a live `sycl::queue` of this runtime.
        pub(super) unsafe fn backend(&self, queue: *mut c_void) -> Result<c_int, String> {
            // SAFETY: where dpctl exports this name, it is `DPCTLQueue_GetBackend`, of type
            // `GetBackend`.
            let get_backend = unsafe { self.function::<GetBackend>(GET_BACKEND) }?;
            // SAFETY: `queue` is a live queue (caller); the function only reads it.
            Ok(unsafe { get_backend(queue) })
        }
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
mod native {
    use core::ffi::{c_int, c_void};

    /// No SYCL runtime is read elsewhere.
    pub(super) enum Runtime {}

    impl Runtime {
        pub(super) fn of(_capsule: &pyo3::Bound<'_, pyo3::PyAny>) -> Result<Self, String> {
            Err(
                "is a SYCL queue, whose native handle this crate reads on Linux for x86-64 and \
                 AArch64 only"
                    .to_owned(),
            )
        }

        pub(super) unsafe fn native(&self, _queue: *mut c_void) -> Result<(usize, i32), String> {
            match *self {}
        }

        pub(super) unsafe fn backend(&self, _queue: *mut c_void) -> Result<c_int, String> {
            match *self {}
        }
    }
}
