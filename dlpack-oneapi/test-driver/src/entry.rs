//! The Level Zero entry points this driver implements. Each has exactly the type of the function
//! `dlpack-oneapi` binds (`crate::sys::pfn::*`), which the DDI tables enforce.
//!
//! Every pointer argument is checked for NULL and every handle is looked up before use; every
//! descriptor's `stype` is checked, so a caller that fills a struct wrongly gets
//! `ZE_RESULT_ERROR_INVALID_ARGUMENT` here (a real driver might not notice).

use core::ffi::{c_char, c_void};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::inject::injectable;
use crate::objects::{
    Command, CommandList, Context, Event, EventPool, HOST_WAITERS, MISUSES, Objects, Op,
    REFUSED_RELEASES, SendPtr, copies_pending_in, driver, lock, misuse, objects,
};
use crate::sys::*;

/// Counts a free or destroy of something that does not exist (a double free, a stale handle),
/// for the tests' leak check, and passes the result on.
fn refused_release(result: ze_result_t) -> ze_result_t {
    if result == ZE_RESULT_ERROR_INVALID_NULL_HANDLE || result == ZE_RESULT_ERROR_INVALID_ARGUMENT {
        REFUSED_RELEASES.fetch_add(1, Ordering::SeqCst);
    }
    result
}

/// Turns a `Result` into the `ze_result_t` the loader expects.
fn ret(r: Result<(), ze_result_t>) -> ze_result_t {
    r.err().unwrap_or(ZE_RESULT_SUCCESS)
}

/// Writes `items` into the `(pCount, phItems)` pair of a Level Zero enumeration call: with a
/// zero count, report how many there are; otherwise write up to `*pCount` and report how many
/// were written.
///
/// # Safety
/// `count` is valid for reads and writes; `out` is NULL or valid for `*count` writes.
unsafe fn enumerate<T>(
    items: &[usize],
    count: *mut u32,
    out: *mut *mut T,
) -> Result<(), ze_result_t> {
    if count.is_null() {
        return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
    }
    let n = u32::try_from(items.len()).map_err(|_| ZE_RESULT_ERROR_UNKNOWN)?;
    // SAFETY: `count` is non-NULL and valid (caller).
    let asked = unsafe { *count };
    if asked == 0 || out.is_null() {
        // SAFETY: as above.
        unsafe { *count = n };
        return Ok(());
    }
    let written = asked.min(n);
    for (i, &h) in items.iter().take(written as usize).enumerate() {
        // SAFETY: `out` has room for `asked >= written` handles (caller).
        unsafe { *out.add(i) = core::ptr::with_exposed_provenance_mut(h) };
    }
    // SAFETY: as above.
    unsafe { *count = written };
    Ok(())
}

/// The handle value of an object, exposed so that the address can be turned back into the
/// pointer the loader holds.
fn to_handle<T>(addr: usize) -> *mut T {
    core::ptr::with_exposed_provenance_mut(addr)
}

fn expose<T>(object: &Arc<T>) -> usize {
    Arc::as_ptr(object).expose_provenance()
}

/// `zeInit`.
pub(crate) unsafe extern "C" fn ze_init(flags: ze_init_flags_t) -> ze_result_t {
    // ZE_INIT_FLAG_VPU_ONLY: this driver has GPU devices only.
    if flags & (1 << 1) != 0 && flags & 1 == 0 {
        return ZE_RESULT_ERROR_UNINITIALIZED;
    }
    ret(driver().map(|_| ()))
}

/// `zeDriverGet`.
pub(crate) unsafe extern "C" fn driver_get(
    count: *mut u32,
    drivers: *mut ze_driver_handle_t,
) -> ze_result_t {
    ret(driver().and_then(|d| {
        let h = core::ptr::from_ref(d).expose_provenance();
        // SAFETY: the loader passes a valid count and a NULL or large enough array.
        unsafe { enumerate(&[h], count, drivers) }
    }))
}

/// `zeDriverGetApiVersion`.
pub(crate) unsafe extern "C" fn driver_get_api_version(
    h_driver: ze_driver_handle_t,
    version: *mut ze_api_version_t,
) -> ze_result_t {
    ret(driver().and_then(|d| {
        if h_driver.addr() != d.handle() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
        }
        if version.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        // SAFETY: non-NULL out-parameter (caller).
        unsafe { *version = ZE_API_VERSION_CURRENT };
        Ok(())
    }))
}

/// `zeDeviceGet`.
pub(crate) unsafe extern "C" fn device_get(
    h_driver: ze_driver_handle_t,
    count: *mut u32,
    devices: *mut ze_device_handle_t,
) -> ze_result_t {
    ret(driver().and_then(|d| {
        if h_driver.addr() != d.handle() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
        }
        let handles: Vec<usize> = d
            .roots
            .iter()
            .map(|r| core::ptr::from_ref(r).expose_provenance())
            .collect();
        // SAFETY: valid count and NULL or large enough array (caller).
        unsafe { enumerate(&handles, count, devices) }
    }))
}

/// `zeDeviceGetSubDevices`.
pub(crate) unsafe extern "C" fn device_get_sub_devices(
    h_device: ze_device_handle_t,
    count: *mut u32,
    devices: *mut ze_device_handle_t,
) -> ze_result_t {
    ret(driver().and_then(|d| {
        let device = d
            .device(h_device.addr())
            .ok_or(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)?;
        let children = device.children.get().cloned().unwrap_or_default();
        for &c in &children {
            if let Some(sub) = d.device(c) {
                let _ = core::ptr::from_ref(sub).expose_provenance();
            }
        }
        // SAFETY: valid count and NULL or large enough array (caller).
        unsafe { enumerate(&children, count, devices) }
    }))
}

/// Copies `name` into a C `char` array, NUL-terminated and truncated to fit.
fn write_name(out: &mut [c_char], name: &str) {
    let bytes = name.as_bytes();
    let n = bytes.len().min(out.len().saturating_sub(1));
    for (o, &b) in out.iter_mut().zip(&bytes[..n]) {
        *o = b as c_char;
    }
    if let Some(nul) = out.get_mut(n) {
        *nul = 0;
    }
}

/// `zeDeviceGetProperties`.
pub(crate) unsafe extern "C" fn device_get_properties(
    h_device: ze_device_handle_t,
    props: *mut ze_device_properties_t,
) -> ze_result_t {
    ret(driver().and_then(|d| {
        let device = d
            .device(h_device.addr())
            .ok_or(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)?;
        if props.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        // SAFETY: non-NULL, and the caller passes a writable ze_device_properties_t.
        let p = unsafe { &mut *props };
        if p.stype != ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES {
            return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        }
        p.r#type = ZE_DEVICE_TYPE_GPU;
        p.vendorId = 0;
        p.deviceId = 0xd1a0 + device.root;
        p.flags = if device.sub.is_some() {
            ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE
        } else {
            0
        };
        p.subdeviceId = device.sub.unwrap_or(0);
        p.coreClockRate = 1;
        p.maxMemAllocSize = 1 << 32;
        p.maxHardwareContexts = 1;
        p.maxCommandQueuePriority = 0;
        p.numThreadsPerEU = 1;
        p.physicalEUSimdWidth = 1;
        p.numEUsPerSubslice = 1;
        p.numSubslicesPerSlice = 1;
        p.numSlices = 1;
        p.timerResolution = 1;
        p.timestampValidBits = 64;
        p.kernelTimestampValidBits = 64;
        let mut uuid = [0u8; ZE_MAX_DEVICE_UUID_SIZE];
        uuid[..8].copy_from_slice(b"dlpackze");
        uuid[8..12].copy_from_slice(&device.root.to_le_bytes());
        uuid[12..].copy_from_slice(&device.sub.map_or(u32::MAX, |s| s).to_le_bytes());
        p.uuid = ze_device_uuid_t { id: uuid };
        let name = match device.sub {
            None => format!(
                "dlpack-oneapi test driver device {} (host memory)",
                device.root
            ),
            Some(s) => format!(
                "dlpack-oneapi test driver device {} sub-device {s} (host memory)",
                device.root
            ),
        };
        write_name(&mut p.name, &name);
        Ok(())
    }))
}

/// `zeContextCreate`.
pub(crate) unsafe extern "C" fn context_create(
    h_driver: ze_driver_handle_t,
    desc: *const ze_context_desc_t,
    out: *mut ze_context_handle_t,
) -> ze_result_t {
    ret(driver().and_then(|d| {
        if h_driver.addr() != d.handle() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
        }
        if desc.is_null() || out.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        // SAFETY: non-NULL descriptor (caller: readable).
        if unsafe { (*desc).stype } != ZE_STRUCTURE_TYPE_CONTEXT_DESC {
            return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        }
        let context = Arc::new(Context::default());
        let h = expose(&context);
        objects().contexts.insert(h, context);
        // SAFETY: non-NULL out-parameter (caller: writable).
        unsafe { *out = to_handle(h) };
        Ok(())
    }))
}

/// `zeContextDestroy`: refused while allocations, command lists or event pools of the context
/// remain, so a leak in the caller shows up as `ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE`.
pub(crate) unsafe extern "C" fn context_destroy(h: ze_context_handle_t) -> ze_result_t {
    let mut o = objects();
    let known = o.context(h.addr());
    if known.is_err() {
        return refused_release(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
    }
    ret(known.and_then(|c| {
        let in_use = !lock(&c.allocations).is_empty()
            || o.lists.values().any(|l| l.context == h.addr())
            || o.pools.values().any(|p| p.context == h.addr());
        if in_use {
            return Err(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE);
        }
        o.contexts.remove(&h.addr());
        Ok(())
    }))
}

/// Checks an optional device memory descriptor.
///
/// # Safety
/// `desc` is NULL or readable.
unsafe fn check_device_desc(desc: *const ze_device_mem_alloc_desc_t) -> Result<(), ze_result_t> {
    if desc.is_null() {
        return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
    }
    // SAFETY: non-NULL and readable (caller).
    let d = unsafe { &*desc };
    if d.stype != ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC || d.ordinal != 0 {
        return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
    }
    Ok(())
}

/// Checks an optional host memory descriptor.
///
/// # Safety
/// `desc` is NULL or readable.
unsafe fn check_host_desc(desc: *const ze_host_mem_alloc_desc_t) -> Result<(), ze_result_t> {
    if desc.is_null() {
        return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
    }
    // SAFETY: non-NULL and readable (caller).
    if unsafe { (*desc).stype } != ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC {
        return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
    }
    Ok(())
}

/// Allocates in context `h` and writes the pointer to `pptr`.
///
/// # Safety
/// `pptr` is NULL or writable.
unsafe fn allocate(
    h: ze_context_handle_t,
    size: usize,
    alignment: usize,
    kind: ze_memory_type_t,
    device: ze_device_handle_t,
    pptr: *mut *mut c_void,
) -> Result<(), ze_result_t> {
    if pptr.is_null() {
        return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
    }
    let context = objects().context(h.addr())?;
    let device = if device.is_null() {
        0
    } else {
        driver()?
            .device(device.addr())
            .ok_or(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)?
            .handle()
    };
    let ptr = context.allocate(size, alignment, kind, device)?;
    // SAFETY: non-NULL out-parameter (caller: writable).
    unsafe { *pptr = ptr.cast() };
    Ok(())
}

/// `zeMemAllocDevice`.
pub(crate) unsafe extern "C" fn mem_alloc_device(
    h: ze_context_handle_t,
    device_desc: *const ze_device_mem_alloc_desc_t,
    size: usize,
    alignment: usize,
    device: ze_device_handle_t,
    pptr: *mut *mut c_void,
) -> ze_result_t {
    if device.is_null() {
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    }
    // SAFETY: the caller passes a readable descriptor and a writable out-pointer.
    ret(
        unsafe { check_device_desc(device_desc) }.and_then(|()| unsafe {
            // SAFETY: as above.
            allocate(h, size, alignment, ZE_MEMORY_TYPE_DEVICE, device, pptr)
        }),
    )
}

/// `zeMemAllocShared`.
pub(crate) unsafe extern "C" fn mem_alloc_shared(
    h: ze_context_handle_t,
    device_desc: *const ze_device_mem_alloc_desc_t,
    host_desc: *const ze_host_mem_alloc_desc_t,
    size: usize,
    alignment: usize,
    device: ze_device_handle_t,
    pptr: *mut *mut c_void,
) -> ze_result_t {
    // SAFETY: the caller passes readable descriptors and a writable out-pointer.
    ret(unsafe { check_device_desc(device_desc) }
        // SAFETY: as above.
        .and_then(|()| unsafe { check_host_desc(host_desc) })
        // SAFETY: as above.
        .and_then(|()| unsafe {
            allocate(h, size, alignment, ZE_MEMORY_TYPE_SHARED, device, pptr)
        }))
}

/// `zeMemAllocHost`.
pub(crate) unsafe extern "C" fn mem_alloc_host(
    h: ze_context_handle_t,
    host_desc: *const ze_host_mem_alloc_desc_t,
    size: usize,
    alignment: usize,
    pptr: *mut *mut c_void,
) -> ze_result_t {
    // SAFETY: the caller passes a readable descriptor and a writable out-pointer.
    ret(unsafe { check_host_desc(host_desc) }.and_then(|()| unsafe {
        // SAFETY: as above.
        allocate(
            h,
            size,
            alignment,
            ZE_MEMORY_TYPE_HOST,
            core::ptr::null_mut(),
            pptr,
        )
    }))
}

/// `zeMemFree`: only a base address this context returned is accepted. Memory that a copy
/// which has not finished reads or writes is not freed: that is a misuse, counted and refused
/// with `ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE` (a real driver would let the copy write freed
/// memory).
pub(crate) unsafe extern "C" fn mem_free(h: ze_context_handle_t, ptr: *mut c_void) -> ze_result_t {
    injectable("zeMemFree", || {
        if ptr.is_null() {
            return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
        }
        let context = objects().context(h.addr());
        if let Ok(c) = &context
            && let Some((base, size, ..)) = c.find(ptr.addr())
            && base == ptr.addr()
            && copies_pending_in(base, size)
        {
            misuse(&MISUSES.frees_in_use);
            return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
        }
        refused_release(ret(context.and_then(|c| c.free(ptr.addr()))))
    })
}

/// With driver-wide lookups ([`crate::objects::DRIVER_WIDE_VAR`], Intel's behaviour): the allocation of another
/// context that holds `ptr`.
fn lookup_elsewhere(ptr: *const c_void) -> Option<(usize, usize, ze_memory_type_t, usize, u64)> {
    let driver_wide = driver().is_ok_and(|d| d.driver_wide);
    if driver_wide {
        objects().find_anywhere(ptr.addr())
    } else {
        None
    }
}

/// `zeMemGetAllocProperties`: a pointer this context did not allocate is reported as
/// `ZE_MEMORY_TYPE_UNKNOWN` with success, as the specification has it (with driver-wide
/// lookups, as Intel's driver does, the allocation of any context of the driver is).
pub(crate) unsafe extern "C" fn mem_get_alloc_properties(
    h: ze_context_handle_t,
    ptr: *const c_void,
    props: *mut ze_memory_allocation_properties_t,
    device: *mut ze_device_handle_t,
) -> ze_result_t {
    let context = match objects().context(h.addr()) {
        Ok(c) => c,
        Err(e) => return e,
    };
    if ptr.is_null() || props.is_null() {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    // SAFETY: non-NULL, and the caller passes a writable properties struct.
    let p = unsafe { &mut *props };
    if p.stype != ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    let (kind, id, owner) = match context.find(ptr.addr()).or_else(|| lookup_elsewhere(ptr)) {
        Some((_, _, kind, owner, id)) => (kind, id, owner),
        None => (ZE_MEMORY_TYPE_UNKNOWN, 0, 0),
    };
    p.r#type = kind;
    p.id = id;
    p.pageSize = if kind == ZE_MEMORY_TYPE_UNKNOWN {
        0
    } else {
        4096
    };
    if !device.is_null() {
        // SAFETY: non-NULL optional out-parameter (caller: writable).
        unsafe { *device = to_handle(owner) };
    }
    ZE_RESULT_SUCCESS
}

/// `zeMemGetAddressRange`: a pointer this context did not allocate is
/// `ZE_RESULT_ERROR_INVALID_ARGUMENT` (with driver-wide lookups: unless another context did).
pub(crate) unsafe extern "C" fn mem_get_address_range(
    h: ze_context_handle_t,
    ptr: *const c_void,
    base: *mut *mut c_void,
    size: *mut usize,
) -> ze_result_t {
    let context = match objects().context(h.addr()) {
        Ok(c) => c,
        Err(e) => return e,
    };
    if ptr.is_null() {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    let Some((b, s, ..)) = context.find(ptr.addr()).or_else(|| lookup_elsewhere(ptr)) else {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    };
    if !base.is_null() {
        // SAFETY: non-NULL optional out-parameter (caller: writable). The base is derived from
        // the caller's pointer, so it carries that pointer's provenance.
        unsafe { *base = ptr.cast_mut().wrapping_byte_sub(ptr.addr() - b) };
    }
    if !size.is_null() {
        // SAFETY: non-NULL optional out-parameter (caller: writable).
        unsafe { *size = s };
    }
    ZE_RESULT_SUCCESS
}

/// `zeCommandListCreateImmediate`.
pub(crate) unsafe extern "C" fn command_list_create_immediate(
    h: ze_context_handle_t,
    device: ze_device_handle_t,
    desc: *const ze_command_queue_desc_t,
    out: *mut ze_command_list_handle_t,
) -> ze_result_t {
    ret((|| {
        let d = driver()?;
        let mut o = objects();
        o.context(h.addr())?;
        let device = d
            .device(device.addr())
            .ok_or(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)?;
        if desc.is_null() || out.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        // SAFETY: non-NULL descriptor (caller: readable).
        let desc = unsafe { &*desc };
        if desc.stype != ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC || desc.ordinal != 0 {
            return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        }
        let synchronous = match desc.mode {
            ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS => true,
            ZE_COMMAND_QUEUE_MODE_DEFAULT | ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS => false,
            _ => return Err(ZE_RESULT_ERROR_INVALID_ENUMERATION),
        };
        let list = Arc::new(CommandList::new(h.addr(), device.root, synchronous)?);
        let handle = expose(&list);
        o.lists.insert(handle, list);
        // SAFETY: non-NULL out-parameter (caller: writable).
        unsafe { *out = to_handle(handle) };
        Ok(())
    })())
}

/// `zeCommandListDestroy`: destroys a list whose commands have all finished. A list with
/// unfinished commands is not destroyed: that is a misuse (the specification makes the caller
/// wait first), counted and refused with `ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE`.
pub(crate) unsafe extern "C" fn command_list_destroy(h: ze_command_list_handle_t) -> ze_result_t {
    injectable("zeCommandListDestroy", || {
        let list = {
            let mut o = objects();
            match o.lists.get(&h.addr()) {
                None => return refused_release(ZE_RESULT_ERROR_INVALID_NULL_HANDLE),
                Some(l) if l.progress.unfinished.load(Ordering::SeqCst) > 0 => {
                    misuse(&MISUSES.list_destroys_in_use);
                    return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
                }
                Some(_) => o.lists.remove(&h.addr()),
            }
        };
        if let Some(list) = list {
            list.shut_down();
        }
        ZE_RESULT_SUCCESS
    })
}

/// The signal event and the wait events of an appended command.
type CommandEvents = (Option<Arc<Event>>, Vec<Arc<Event>>);

/// Looks up the signal and wait events of an append.
///
/// # Safety
/// `waits` is NULL or points to `n` readable handles.
unsafe fn command_events(
    o: &Objects,
    signal: ze_event_handle_t,
    n: u32,
    waits: *mut ze_event_handle_t,
) -> Result<CommandEvents, ze_result_t> {
    let signal = if signal.is_null() {
        None
    } else {
        Some(o.event(signal.addr())?)
    };
    if n > 0 && waits.is_null() {
        return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
    }
    let mut list = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: `waits` holds `n` readable handles (caller).
        let h = unsafe { *waits.add(i) };
        list.push(o.event(h.addr())?);
    }
    Ok((signal, list))
}

/// Checks that `ptr..ptr + size`, if it touches memory of this context, lies inside one
/// allocation, and that it is not memory of another context.
fn check_range(o: &Objects, context: usize, ptr: usize, size: usize) -> Result<(), ze_result_t> {
    let c = o.context(context)?;
    match c.find(ptr) {
        Some((base, len, ..)) => {
            if ptr + size > base + len {
                return Err(ZE_RESULT_ERROR_INVALID_SIZE);
            }
        }
        None => {
            if let Some((base, len, ..)) = o.find_anywhere(ptr) {
                // Another context's memory: a copy of it is refused, unless lookups are
                // driver-wide (Intel's driver copies it).
                if !driver().is_ok_and(|d| d.driver_wide) {
                    return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
                }
                if ptr + size > base + len {
                    return Err(ZE_RESULT_ERROR_INVALID_SIZE);
                }
            }
        }
    }
    Ok(())
}

/// `zeCommandListAppendMemoryCopy`.
pub(crate) unsafe extern "C" fn command_list_append_memory_copy(
    h: ze_command_list_handle_t,
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    signal: ze_event_handle_t,
    n_waits: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    injectable("zeCommandListAppendMemoryCopy", || {
        // SAFETY: the caller's arguments, passed on.
        unsafe { append_memory_copy(h, dst, src, size, signal, n_waits, waits) }
    })
}

/// The body of [`command_list_append_memory_copy`].
///
/// # Safety
/// As `zeCommandListAppendMemoryCopy`: `waits` holds `n_waits` readable handles.
unsafe fn append_memory_copy(
    h: ze_command_list_handle_t,
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    signal: ze_event_handle_t,
    n_waits: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    ret((|| {
        let (list, command) = {
            let o = objects();
            let list = o.list(h.addr())?;
            if size > 0 && (dst.is_null() || src.is_null()) {
                return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
            }
            if size > 0 {
                check_range(&o, list.context, dst.addr(), size)?;
                check_range(&o, list.context, src.addr(), size)?;
            }
            // SAFETY: `waits` holds `n_waits` handles (caller).
            let (signal, waits) = unsafe { command_events(&o, signal, n_waits, waits)? };
            let command = Command {
                op: Op::Copy {
                    dst: SendPtr(dst.cast()),
                    src: SendPtr(src.cast_mut().cast()),
                    size,
                },
                waits,
                signal,
                done: None,
                id: 0,
            };
            (list, command)
        };
        list.submit(command)
    })())
}

/// `zeCommandListAppendBarrier`.
pub(crate) unsafe extern "C" fn command_list_append_barrier(
    h: ze_command_list_handle_t,
    signal: ze_event_handle_t,
    n_waits: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    injectable("zeCommandListAppendBarrier", || {
        ret((|| {
            let (list, command) = {
                let o = objects();
                let list = o.list(h.addr())?;
                // SAFETY: `waits` holds `n_waits` handles (caller).
                let (signal, waits) = unsafe { command_events(&o, signal, n_waits, waits)? };
                let command = Command {
                    op: Op::Barrier,
                    waits,
                    signal,
                    done: None,
                    id: 0,
                };
                (list, command)
            };
            list.submit(command)
        })())
    })
}

/// `zeEventPoolCreate`.
pub(crate) unsafe extern "C" fn event_pool_create(
    h: ze_context_handle_t,
    desc: *const ze_event_pool_desc_t,
    n_devices: u32,
    devices: *mut ze_device_handle_t,
    out: *mut ze_event_pool_handle_t,
) -> ze_result_t {
    injectable("zeEventPoolCreate", || {
        ret((|| {
            let d = driver()?;
            let mut o = objects();
            o.context(h.addr())?;
            if desc.is_null() || out.is_null() || (n_devices > 0 && devices.is_null()) {
                return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
            }
            for i in 0..n_devices as usize {
                // SAFETY: `devices` holds `n_devices` readable handles (caller).
                let dev = unsafe { *devices.add(i) };
                d.device(dev.addr())
                    .ok_or(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)?;
            }
            // SAFETY: non-NULL descriptor (caller: readable).
            let desc = unsafe { &*desc };
            if desc.stype != ZE_STRUCTURE_TYPE_EVENT_POOL_DESC {
                return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
            }
            if desc.count == 0 {
                return Err(ZE_RESULT_ERROR_INVALID_SIZE);
            }
            let pool = Arc::new(EventPool {
                context: h.addr(),
                host_visible: desc.flags & ZE_EVENT_POOL_FLAG_HOST_VISIBLE != 0,
                slots: std::sync::Mutex::new(vec![false; desc.count as usize]),
            });
            let handle = expose(&pool);
            o.pools.insert(handle, pool);
            // SAFETY: non-NULL out-parameter (caller: writable).
            unsafe { *out = to_handle(handle) };
            Ok(())
        })())
    })
}

/// `zeEventPoolDestroy`: refused while events of the pool remain.
pub(crate) unsafe extern "C" fn event_pool_destroy(h: ze_event_pool_handle_t) -> ze_result_t {
    injectable("zeEventPoolDestroy", || {
        let mut o = objects();
        let known = o.pool(h.addr());
        if known.is_err() {
            return refused_release(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
        }
        ret(known.and_then(|p| {
            if lock(&p.slots).iter().any(|&used| used) {
                return Err(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE);
            }
            o.pools.remove(&h.addr());
            Ok(())
        }))
    })
}

/// `zeEventCreate`.
pub(crate) unsafe extern "C" fn event_create(
    h: ze_event_pool_handle_t,
    desc: *const ze_event_desc_t,
    out: *mut ze_event_handle_t,
) -> ze_result_t {
    injectable("zeEventCreate", || {
        let mut o = objects();
        ret(o.pool(h.addr()).and_then(|pool| {
            if desc.is_null() || out.is_null() {
                return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
            }
            // SAFETY: non-NULL descriptor (caller: readable).
            let desc = unsafe { &*desc };
            if desc.stype != ZE_STRUCTURE_TYPE_EVENT_DESC {
                return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
            }
            {
                let mut slots = lock(&pool.slots);
                let slot = slots
                    .get_mut(desc.index as usize)
                    .ok_or(ZE_RESULT_ERROR_INVALID_ARGUMENT)?;
                if *slot {
                    return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
                }
                *slot = true;
            }
            let event = Objects::new_event(pool, desc.index);
            let handle = expose(&event);
            o.events.insert(handle, event);
            // SAFETY: non-NULL out-parameter (caller: writable).
            unsafe { *out = to_handle(handle) };
            Ok(())
        }))
    })
}

/// `zeEventDestroy`. An event that a command which has not finished signals or waits on is not
/// destroyed: that is a misuse, counted and refused with `ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE`.
pub(crate) unsafe extern "C" fn event_destroy(h: ze_event_handle_t) -> ze_result_t {
    injectable("zeEventDestroy", || {
        let event = {
            let mut o = objects();
            match o.events.get(&h.addr()) {
                None => return refused_release(ZE_RESULT_ERROR_INVALID_NULL_HANDLE),
                Some(e) if e.pending.load(Ordering::SeqCst) > 0 => {
                    misuse(&MISUSES.event_destroys_in_use);
                    return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
                }
                Some(_) => o.events.remove(&h.addr()),
            }
        };
        if let Some(e) = event
            && let Some(slot) = lock(&e.pool.slots).get_mut(e.index as usize)
        {
            *slot = false;
        }
        ZE_RESULT_SUCCESS
    })
}

/// `zeEventHostSynchronize`: the pool must be host-visible.
pub(crate) unsafe extern "C" fn event_host_synchronize(
    h: ze_event_handle_t,
    timeout: u64,
) -> ze_result_t {
    injectable("zeEventHostSynchronize", || host_synchronize(h, timeout))
}

/// The body of [`event_host_synchronize`].
fn host_synchronize(h: ze_event_handle_t, timeout: u64) -> ze_result_t {
    let event = match objects().event(h.addr()) {
        Ok(e) => e,
        Err(e) => return e,
    };
    if !event.pool.host_visible {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    let timeout = (timeout != u64::MAX).then(|| Duration::from_nanos(timeout));
    let counted = !event.is_signalled();
    if counted {
        HOST_WAITERS.fetch_add(1, Ordering::SeqCst);
    }
    let signalled = event.wait(timeout);
    if counted {
        HOST_WAITERS.fetch_sub(1, Ordering::SeqCst);
    }
    if signalled {
        ZE_RESULT_SUCCESS
    } else {
        ZE_RESULT_NOT_READY
    }
}

/// `zeEventQueryStatus`.
pub(crate) unsafe extern "C" fn event_query_status(h: ze_event_handle_t) -> ze_result_t {
    injectable("zeEventQueryStatus", || match objects().event(h.addr()) {
        Ok(e) if e.is_signalled() => ZE_RESULT_SUCCESS,
        Ok(_) => ZE_RESULT_NOT_READY,
        Err(e) => e,
    })
}

/// `zeEventHostReset`. An event that a command which has not finished signals or waits on is not
/// reset: that is a misuse, counted and refused with `ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE`.
pub(crate) unsafe extern "C" fn event_host_reset(h: ze_event_handle_t) -> ze_result_t {
    injectable("zeEventHostReset", || match objects().event(h.addr()) {
        Ok(e) if e.pending.load(Ordering::SeqCst) > 0 => {
            misuse(&MISUSES.event_resets_in_use);
            ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE
        }
        Ok(e) => {
            e.reset();
            ZE_RESULT_SUCCESS
        }
        Err(e) => e,
    })
}

/// The handle of every live object, for the leak counters.
pub(crate) fn live_counts() -> [u64; 6] {
    let o = objects();
    let allocations: usize = o
        .contexts
        .values()
        .map(|c| lock(&c.allocations).len())
        .sum();
    [
        o.contexts.len() as u64,
        allocations as u64,
        o.lists.len() as u64,
        o.pools.len() as u64,
        o.events.len() as u64,
        REFUSED_RELEASES.load(Ordering::SeqCst),
    ]
}
