//! Pointer attributes: what `cuPointerGetAttributes` tells about an address.

use core::ffi::{c_int, c_uint, c_void};
use std::ptr;
use std::sync::atomic::Ordering;

use cudarc::driver::sys::CUresult::{CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_VALUE};
use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUresult};

use crate::entry::{Outcome, entry, invalid, put};
use crate::memory::Kind;
use crate::state::{CONTEXT_BASE, CONTEXT_STEP, driver, lock, state};

// `CUpointer_attribute` values.
const ATTRIBUTE_CONTEXT: u32 = 1;
const ATTRIBUTE_MEMORY_TYPE: u32 = 2;
const ATTRIBUTE_DEVICE_POINTER: u32 = 3;
const ATTRIBUTE_IS_MANAGED: u32 = 8;
const ATTRIBUTE_DEVICE_ORDINAL: u32 = 9;
const ATTRIBUTE_RANGE_START_ADDR: u32 = 11;
const ATTRIBUTE_RANGE_SIZE: u32 = 12;

// `CUmemorytype` values.
const MEMORY_TYPE_HOST: u32 = 1;
const MEMORY_TYPE_DEVICE: u32 = 2;

/// A pointer attribute's value, in the C type the driver writes for it.
enum Answer {
    /// `CUmemorytype`, and the `IS_MANAGED` boolean (an `unsigned int`).
    U32(u32),
    /// The device ordinal.
    Int(c_int),
    /// A context handle.
    Handle(usize),
    /// A `CUdeviceptr`.
    Address(CUdeviceptr),
    /// A `size_t`.
    Size(usize),
}

impl Answer {
    /// Writes the value through `out`.
    ///
    /// # Safety
    /// `out` is NULL or valid for a write of the value's C type.
    unsafe fn write(self, out: *mut c_void) -> Outcome {
        // SAFETY: the caller's contract, for the type each arm writes.
        unsafe {
            match self {
                Answer::U32(v) => put(out.cast::<u32>(), v),
                Answer::Int(v) => put(out.cast::<c_int>(), v),
                Answer::Handle(v) => put(out.cast::<CUcontext>(), ptr::without_provenance_mut(v)),
                Answer::Address(v) => put(out.cast::<CUdeviceptr>(), v),
                Answer::Size(v) => put(out.cast::<usize>(), v),
            }
        }
    }
}

/// `cuPointerGetAttributes`: memory type, managed or not, device, context, device pointer and
/// range of any byte of a live allocation; for an address this driver did not allocate, zeros
/// and the device ordinal -2 (the real driver's answer for pageable memory). Other attributes are refused, so that a new
/// question shows up.
///
/// # Safety
/// `attributes` and `data` hold `count` entries; each data pointer is valid for a write of its
/// attribute's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttributes(
    count: c_uint,
    attributes: *const c_uint,
    data: *const *mut c_void,
    address: CUdeviceptr,
) -> CUresult {
    {
        let state = lock(&driver().state);
        if state.initialised && state.attributes_need_context && state.current().is_err() {
            // A driver's answer, not a misuse: not counted as a refusal.
            driver()
                .calls
                .context_less_pointer_queries
                .fetch_add(1, Ordering::Relaxed);
            return CUDA_ERROR_INVALID_CONTEXT;
        }
        let asks_range = !attributes.is_null()
            && (0..count as usize).any(|i| {
                // SAFETY: `attributes` holds `count` entries (the caller's contract).
                let attribute = unsafe { *attributes.add(i) };
                matches!(attribute, ATTRIBUTE_RANGE_START_ADDR | ATTRIBUTE_RANGE_SIZE)
            });
        if state.initialised
            && state.host_ranges_refused
            && asks_range
            && state
                .allocation_at(address as usize)
                .is_some_and(|(_, a)| a.kind == Kind::Pinned)
        {
            // A driver's answer, not a misuse: not counted as a refusal.
            driver()
                .calls
                .host_range_refusals
                .fetch_add(1, Ordering::Relaxed);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    entry("cuPointerGetAttributes", || {
        if attributes.is_null() || data.is_null() {
            return Err(invalid("NULL attribute or data array"));
        }
        let state = state()?;
        let found = state.allocation_at(address as usize);
        for i in 0..count as usize {
            // SAFETY: both arrays hold `count` entries (the caller's contract).
            let (attribute, out) = unsafe { (*attributes.add(i), *data.add(i)) };
            let answer = match (attribute, found) {
                (ATTRIBUTE_MEMORY_TYPE, found) => Answer::U32(match found.map(|(_, a)| a.kind) {
                    None => 0,
                    Some(Kind::Pinned) => MEMORY_TYPE_HOST,
                    Some(Kind::Device | Kind::Managed) => MEMORY_TYPE_DEVICE,
                }),
                (ATTRIBUTE_IS_MANAGED, found) => Answer::U32(u32::from(
                    found.is_some_and(|(_, a)| a.kind == Kind::Managed),
                )),
                // -2 (CU_DEVICE_INVALID) for an unknown pointer, as the real driver answers
                // (NVIDIA/cuda-python#1336).
                (ATTRIBUTE_DEVICE_ORDINAL, found) => {
                    Answer::Int(found.map_or(-2, |(_, a)| a.ordinal))
                }
                (ATTRIBUTE_CONTEXT, found) => Answer::Handle(
                    found.map_or(0, |(_, a)| CONTEXT_BASE + a.ordinal as usize * CONTEXT_STEP),
                ),
                (ATTRIBUTE_DEVICE_POINTER, found) => Answer::Address(found.map_or(0, |_| address)),
                (ATTRIBUTE_RANGE_START_ADDR, found) => {
                    Answer::Address(found.map_or(0, |(start, _)| start as CUdeviceptr))
                }
                (ATTRIBUTE_RANGE_SIZE, found) => Answer::Size(found.map_or(0, |(_, a)| a.size)),
                (other, _) => {
                    return Err(invalid(format!(
                        "pointer attribute {other} is not modelled"
                    )));
                }
            };
            // SAFETY: `out` is valid for a write of the attribute's type (the caller's
            // contract), which is the type each answer is written as.
            unsafe { answer.write(out) }?;
        }
        Ok(())
    })
}
