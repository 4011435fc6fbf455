//! How every export runs: a refusal is a returned code, counted and printed; a panic never
//! unwinds into C; out-pointers are checked for NULL.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;

use cudarc::driver::sys::CUresult;
use cudarc::driver::sys::CUresult::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_UNKNOWN, CUDA_SUCCESS};

use crate::state::driver;

/// A refused call: the code returned and why (printed on stderr).
pub(crate) struct Refusal {
    code: CUresult,
    why: String,
}

pub(crate) type Outcome = Result<(), Refusal>;

impl Refusal {
    /// The same refusal, its reason prefixed with what was being looked up.
    pub(crate) fn context(self, what: &str) -> Refusal {
        Refusal {
            code: self.code,
            why: format!("{what}: {}", self.why),
        }
    }
}

pub(crate) fn refuse(code: CUresult, why: impl Into<String>) -> Refusal {
    Refusal {
        code,
        why: why.into(),
    }
}

pub(crate) fn invalid(why: impl Into<String>) -> Refusal {
    refuse(CUDA_ERROR_INVALID_VALUE, why)
}

/// Runs an entry point: its refusal becomes the returned code, counted and printed; a panic
/// inside this library becomes `CUDA_ERROR_UNKNOWN` instead of unwinding into C.
pub(crate) fn entry(name: &str, body: impl FnOnce() -> Outcome) -> CUresult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(refusal)) => {
            driver().refused.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "dlpack-cuda test driver: {name} refused with {:?}: {}",
                refusal.code, refusal.why
            );
            refusal.code
        }
        Err(_) => {
            driver().refused.fetch_add(1, Ordering::Relaxed);
            eprintln!("dlpack-cuda test driver: {name} panicked (a bug in the test driver)");
            CUDA_ERROR_UNKNOWN
        }
    }
}

/// Writes through an out-pointer the caller passed, refusing NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) -> Outcome {
    if out.is_null() {
        return Err(invalid("a NULL output pointer"));
    }
    // SAFETY: non-NULL, and valid for writes by the caller's contract.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// Counts a refusal that happens where no call can return it (on a stream's thread, say).
pub(crate) fn refuse_later(why: &str) {
    driver().refused.fetch_add(1, Ordering::Relaxed);
    eprintln!("dlpack-cuda test driver: refused on a stream: {why}");
}
