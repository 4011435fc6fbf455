//! cuBLAS and cuRAND handles, and nothing they compute: candle makes one of each when it opens a
//! CUDA device, so a program that loads this library with `LD_PRELOAD` (dlpack-candle's CUDA
//! suite) can open a candle device here. A handle's stream must be a live stream of this driver.
//! Every other cuBLAS or cuRAND function is absent; the link-time stubs a program is built
//! against abort when one is called.

use core::ffi::{c_int, c_ulonglong, c_void};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::CUstream;

use crate::state::{lock, state};

/// cuBLAS's and cuRAND's success, "not initialised" and "invalid value" codes, and cuRAND's
/// pseudo-random default generator type.
const SUCCESS: c_int = 0;
const BLAS_INVALID_VALUE: c_int = 7;
const RAND_TYPE_ERROR: c_int = 103;
const RAND_NOT_INITIALIZED: c_int = 101;
const RAND_PSEUDO_DEFAULT: c_int = 100;

/// Live handles of both libraries (distinct values).
fn handles() -> &'static Mutex<HashSet<usize>> {
    static HANDLES: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    HANDLES.get_or_init(Mutex::default)
}

fn create(out: *mut *mut c_void) -> bool {
    static NEXT: AtomicUsize = AtomicUsize::new(0x9_0000);
    if out.is_null() {
        return false;
    }
    let handle = NEXT.fetch_add(0x10, Ordering::Relaxed);
    lock(handles()).insert(handle);
    // SAFETY: not NULL, and valid for a write (the callers' contract).
    unsafe { out.write(core::ptr::with_exposed_provenance_mut(handle)) };
    true
}

fn live(handle: *mut c_void) -> bool {
    lock(handles()).contains(&handle.addr())
}

fn destroy(handle: *mut c_void) -> bool {
    lock(handles()).remove(&handle.addr())
}

/// Whether `stream` is a stream of this driver, as seen from the calling thread.
fn is_stream(stream: CUstream) -> bool {
    state().and_then(|mut s| s.stream(stream)).is_ok()
}

fn code(ok: bool, failure: c_int, what: &str) -> c_int {
    if ok {
        SUCCESS
    } else {
        eprintln!("dlpack-cuda test driver: {what} refused");
        failure
    }
}

/// `cublasCreate_v2`.
///
/// # Safety
/// `handle` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasCreate_v2(handle: *mut *mut c_void) -> c_int {
    code(create(handle), BLAS_INVALID_VALUE, "cublasCreate_v2")
}

/// `cublasSetStream_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cublasSetStream_v2(handle: *mut c_void, stream: CUstream) -> c_int {
    code(
        live(handle) && is_stream(stream),
        BLAS_INVALID_VALUE,
        "cublasSetStream_v2",
    )
}

/// `cublasDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cublasDestroy_v2(handle: *mut c_void) -> c_int {
    code(destroy(handle), BLAS_INVALID_VALUE, "cublasDestroy_v2")
}

/// `curandCreateGenerator` (the pseudo-random default type only).
///
/// # Safety
/// `generator` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn curandCreateGenerator(generator: *mut *mut c_void, kind: c_int) -> c_int {
    if kind != RAND_PSEUDO_DEFAULT {
        return code(
            false,
            RAND_TYPE_ERROR,
            "curandCreateGenerator of another type",
        );
    }
    code(
        create(generator),
        RAND_NOT_INITIALIZED,
        "curandCreateGenerator",
    )
}

/// `curandSetPseudoRandomGeneratorSeed`.
#[unsafe(no_mangle)]
pub extern "C" fn curandSetPseudoRandomGeneratorSeed(
    generator: *mut c_void,
    _seed: c_ulonglong,
) -> c_int {
    code(
        live(generator),
        RAND_NOT_INITIALIZED,
        "curandSetPseudoRandomGeneratorSeed",
    )
}

/// `curandSetStream`.
#[unsafe(no_mangle)]
pub extern "C" fn curandSetStream(generator: *mut c_void, stream: CUstream) -> c_int {
    code(
        live(generator) && is_stream(stream),
        RAND_NOT_INITIALIZED,
        "curandSetStream",
    )
}

/// `curandDestroyGenerator`.
#[unsafe(no_mangle)]
pub extern "C" fn curandDestroyGenerator(generator: *mut c_void) -> c_int {
    code(
        destroy(generator),
        RAND_NOT_INITIALIZED,
        "curandDestroyGenerator",
    )
}
