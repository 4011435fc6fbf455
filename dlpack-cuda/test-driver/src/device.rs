//! Initialisation, error names and strings, devices and their primary contexts (`cuInit`,
//! `cuGetError*`, `cuDevice*`, `cuCtx*`).

use core::ffi::{CStr, c_char, c_int, c_uint};
use std::cell::Cell;
use std::ptr;
use std::sync::atomic::Ordering;

use cudarc::driver::sys::CUresult::{
    CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS,
};
use cudarc::driver::sys::{CUcontext, CUdevice, CUresult};

use crate::entry::{entry, invalid, put, refuse};
use crate::state::{CONTEXT_BASE, CONTEXT_STEP, CURRENT, driver, lock, state};

// `CUdevice_attribute` values.
const DEVICE_UNIFIED_ADDRESSING: c_int = 41;
const DEVICE_MANAGED_MEMORY: c_int = 83;
const DEVICE_CONCURRENT_MANAGED_ACCESS: c_int = 89;
const DEVICE_MEMORY_POOLS_SUPPORTED: c_int = 115;

/// `cuInit`.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(flags: c_uint) -> CUresult {
    entry("cuInit", || {
        if flags != 0 {
            return Err(invalid(format!("flags {flags}; expected 0")));
        }
        lock(&driver().state).initialised = true;
        Ok(())
    })
}

fn error_text(code: c_uint) -> Option<(&'static CStr, &'static CStr)> {
    let (name, text): (&CStr, &CStr) = match code {
        0 => (c"CUDA_SUCCESS", c"no error"),
        1 => (c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
        2 => (c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
        3 => (c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
        101 => (c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
        201 => (c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
        400 => (c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
        600 => (c"CUDA_ERROR_NOT_READY", c"device not ready"),
        801 => (c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
        999 => (c"CUDA_ERROR_UNKNOWN", c"unknown error"),
        _ => return None,
    };
    Some((name, text))
}

/// `cuGetErrorString`.
///
/// # Safety
/// `text` is valid for a write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(error: c_uint, text: *mut *const c_char) -> CUresult {
    let found = error_text(error);
    // SAFETY: the caller's contract.
    unsafe { put(text, found.map_or(ptr::null(), |(_, t)| t.as_ptr())) }.map_or(
        CUDA_ERROR_INVALID_VALUE,
        |()| match found {
            Some(_) => CUDA_SUCCESS,
            None => CUDA_ERROR_INVALID_VALUE,
        },
    )
}

/// `cuGetErrorName`.
///
/// # Safety
/// `name` is valid for a write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(error: c_uint, name: *mut *const c_char) -> CUresult {
    let found = error_text(error);
    // SAFETY: the caller's contract.
    unsafe { put(name, found.map_or(ptr::null(), |(n, _)| n.as_ptr())) }.map_or(
        CUDA_ERROR_INVALID_VALUE,
        |()| match found {
            Some(_) => CUDA_SUCCESS,
            None => CUDA_ERROR_INVALID_VALUE,
        },
    )
}

/// `cuDeviceGetCount`.
///
/// # Safety
/// `count` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    entry("cuDeviceGetCount", || {
        let devices = state()?.devices.len() as c_int;
        // SAFETY: the caller's contract.
        unsafe { put(count, devices) }
    })
}

/// `cuDeviceGet`: device `n` is `n`.
///
/// # Safety
/// `device` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    entry("cuDeviceGet", || {
        state()?.device(ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { put(device, ordinal) }
    })
}

/// `cuDeviceGetAttribute`, for the attributes cudarc asks about; any other is refused, so that
/// a new question shows up.
///
/// # Safety
/// `value` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    device: CUdevice,
) -> CUresult {
    entry("cuDeviceGetAttribute", || {
        let state = state()?;
        state.device(device)?;
        let answer = match attribute {
            DEVICE_UNIFIED_ADDRESSING
            | DEVICE_MANAGED_MEMORY
            | DEVICE_CONCURRENT_MANAGED_ACCESS => 1,
            DEVICE_MEMORY_POOLS_SUPPORTED => c_int::from(state.memory_pools),
            other => return Err(invalid(format!("device attribute {other} is not modelled"))),
        };
        // SAFETY: the caller's contract.
        unsafe { put(value, answer) }
    })
}

/// `cuDevicePrimaryCtxRetain`.
///
/// # Safety
/// `context` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(
    context: *mut CUcontext,
    device: CUdevice,
) -> CUresult {
    entry("cuDevicePrimaryCtxRetain", || {
        let mut state = state()?;
        let n = state.device(device)?;
        let handle = ptr::without_provenance_mut(CONTEXT_BASE + n * CONTEXT_STEP);
        // SAFETY: the caller's contract.
        unsafe { put(context, handle) }?;
        state.devices[n].retained += 1;
        Ok(())
    })
}

/// `cuDevicePrimaryCtxRelease_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> CUresult {
    entry("cuDevicePrimaryCtxRelease_v2", || {
        let mut state = state()?;
        let n = state.device(device)?;
        let retained = &mut state.devices[n].retained;
        if *retained == 0 {
            return Err(refuse(
                CUDA_ERROR_INVALID_CONTEXT,
                format!("device {n}'s primary context released more often than retained"),
            ));
        }
        if *retained > 1 {
            *retained -= 1;
            return Ok(());
        }
        // The last release destroys the context, and with it everything made in it: refused,
        // changing nothing, while any of that is alive.
        let ordinal = n as i32;
        let allocations = state
            .allocations
            .values()
            .filter(|a| a.ordinal == ordinal)
            .count();
        let streams = state
            .streams
            .values()
            .filter(|s| s.ordinal == ordinal)
            .count();
        let events = state
            .events
            .values()
            .filter(|e| e.ordinal == ordinal)
            .count();
        if allocations + streams + events > 0 {
            return Err(refuse(
                CUDA_ERROR_INVALID_CONTEXT,
                format!(
                    "device {n}'s primary context destroyed by its last release with {allocations} allocations, {streams} streams and {events} events of it still alive"
                ),
            ));
        }
        state.devices[n].retained = 0;
        Ok(())
    })
}

/// `cuCtxGetCurrent`.
///
/// # Safety
/// `context` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(context: *mut CUcontext) -> CUresult {
    entry("cuCtxGetCurrent", || {
        drop(state()?);
        let handle = ptr::without_provenance_mut(CURRENT.with(Cell::get));
        // SAFETY: the caller's contract.
        unsafe { put(context, handle) }
    })
}

/// `cuCtxSetCurrent` (NULL: none).
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(context: CUcontext) -> CUresult {
    entry("cuCtxSetCurrent", || {
        let state = state()?;
        let handle = context.addr();
        if handle != 0 && state.context_device(handle).is_none() {
            return Err(refuse(
                CUDA_ERROR_INVALID_CONTEXT,
                format!("context {handle:#x}"),
            ));
        }
        CURRENT.with(|current| current.set(handle));
        Ok(())
    })
}

/// `cuCtxSynchronize`: waits for every stream of the current context's device.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    entry("cuCtxSynchronize", || {
        let streams = {
            let state = state()?;
            let device = state.current()? as i32;
            driver()
                .calls
                .context_synchronizations
                .fetch_add(1, Ordering::Relaxed);
            state
                .all_streams()
                .into_iter()
                .filter(|s| s.ordinal == device)
                .collect::<Vec<_>>()
        };
        streams.iter().try_for_each(|s| s.finish())
    })
}
