//! **Test support only**: a Level Zero driver library that the real Level Zero loader can load,
//! with host memory standing in for device memory. It is not a device backend and never touches
//! a GPU; it exists so that `dlpack-oneapi`'s tests can run the real loader and the crate's real
//! binding path on machines without an Intel GPU.
//!
//! The loader loads it when `ZE_ENABLE_ALT_DRIVERS` names this library's path (the loader's
//! development switch; Debian bookworm's `libze1` 1.8.12 honours it). The loader then calls the
//! `zeGet*ProcAddrTable` functions exported here and dispatches every Level Zero call it receives
//! to the entry points they hand out:
//!
//! ```text
//! ZE_ENABLE_ALT_DRIVERS=/path/to/libdlpack_oneapi_test_driver.so \
//! DLPACK_ONEAPI_TEST_DRIVER_DEVICES=2 DLPACK_ONEAPI_TEST_DRIVER_SUB_DEVICES=2 cargo test ...
//! ```
//!
//! What the bookworm loader (1.8.12) needs from a driver, found by reading its driver
//! initialisation (`init_driver` in `source/loader/ze_loader.cpp` of oneapi-src/level-zero) and
//! by experiment (hiding one export at a time from the real loader, then calling `zeInit`):
//!
//! - `zeGetGlobalProcAddrTable` with a non-NULL `pfnInit`, which the loader calls from `zeInit`
//!   (a driver whose `zeInit` fails is dropped);
//! - then, because the loader's own `zeInit` collects every table of the core (`ze`), tools
//!   (`zet`) and sysman (`zes`) APIs and fails if one is missing: the 17 core tables
//!   (Global, Driver, Device, Context, CommandQueue, CommandList, Fence, EventPool, Event, Image,
//!   Module, ModuleBuildLog, Kernel, Sampler, PhysicalMem, Mem, VirtualMem), 12 tools tables
//!   (Device, Context, CommandList, Module, Kernel, MetricGroup, Metric, MetricStreamer,
//!   MetricQueryPool, MetricQuery, TracerExp, Debug) and 17 sysman tables: 46 exports in all.
//!   The `*Exp` core tables and `zetGetMetricGroupExpProcAddrTable` are optional.
//!
//! This driver exports exactly those 46. The tables whose functions `dlpack-oneapi` binds
//! (Global, Driver, Device, Context, CommandList, EventPool, Event, Mem) are filled with the
//! entry points below; every other slot, and every other table, is NULL, which the loader
//! reports to callers as `ZE_RESULT_ERROR_UNSUPPORTED_FEATURE`.
//!
//! # What it models
//!
//! - One driver with `DLPACK_ONEAPI_TEST_DRIVER_DEVICES` root devices (default 1, at most 16),
//!   each with `DLPACK_ONEAPI_TEST_DRIVER_SUB_DEVICES` sub-devices (default 0, at most 4).
//! - Contexts with device, shared and host USM: `zeMemAlloc*` allocate host memory (filled with
//!   `0xA5`) and record the kind and owning device, which `zeMemGetAllocProperties` and
//!   `zeMemGetAddressRange` report for any byte inside the allocation, in that context only, as
//!   the specification has it; copies refuse another context's memory. With
//!   `DLPACK_ONEAPI_TEST_DRIVER_DRIVER_WIDE_LOOKUP=1` both queries and copies resolve a pointer
//!   in every context of the driver instead, as Intel's GPU driver does.
//! - Immediate command lists whose commands (copies and barriers, with signal and wait events)
//!   run in order on a worker thread, so that work really is asynchronous and a missing
//!   synchronisation shows up as wrong data (or, for a missing barrier, as a counted misuse).
//! - Event pools and events that the host can wait on, query and reset.
//! - Handles are checked against a registry of live objects and descriptors' `stype` are
//!   checked; destroying a context that still has allocations, lists or pools, or a pool that
//!   still has events, is refused with `ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE`.
//! - What a real driver leaves undefined when device work has not finished is caught, counted
//!   ([`Misuses`]) and refused with `ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE`, so that the memory
//!   stays valid for the work: freeing memory that an unfinished copy reads or writes, resetting
//!   or destroying an event that an unfinished command signals or waits on, destroying a list
//!   with unfinished commands. Appending a command that signals an event which is already
//!   signalled (reused without a reset) is counted too, and so is a copy appended behind
//!   unfinished commands with no barrier between (commands run in order here, but Level Zero
//!   only promises that they start in order).
//!
//! Seven extra exports serve the tests: [`dlpack_oneapi_test_driver_live_objects`] counts live
//! objects (leak checks); [`dlpack_oneapi_test_driver_hold`] pauses a root device's command
//! lists; [`dlpack_oneapi_test_driver_settle`] waits until every list has run or waits for
//! something; [`dlpack_oneapi_test_driver_host_waiters`] counts host threads blocked on an event.
//! With them a test proves, without timing, that a consumer waits for a producer.
//! [`dlpack_oneapi_test_driver_fail`] makes the next calls of a named entry point fail (a lost
//! device, say), [`dlpack_oneapi_test_driver_clear_failures`] disarms what is left, and
//! [`dlpack_oneapi_test_driver_misuses`] reports the misuses above: with them a test drives the
//! caller's error paths and checks that nothing unfinished work uses was released.

#[path = "../../src/sys.rs"]
#[allow(unreachable_pub, dead_code, missing_docs, unused_macros)]
// The Level Zero ABI as `dlpack-oneapi` binds it: including the same file makes the driver
// implement exactly the signatures the library calls.
mod sys;

#[allow(unreachable_pub)]
mod ddi;
mod entry;
mod inject;
mod objects;

use ddi::*;
use entry::*;
use sys::*;

/// Accepts any 1.x version the loader asks for (the tables are filled up to API 1.4).
fn check_version(version: ze_api_version_t, table_is_null: bool) -> ze_result_t {
    if table_is_null {
        ZE_RESULT_ERROR_INVALID_NULL_POINTER
    } else if version.major() != 1 {
        ZE_RESULT_ERROR_UNSUPPORTED_VERSION
    } else {
        ZE_RESULT_SUCCESS
    }
}

macro_rules! export_tables {
    ($(
        $(#[$doc:meta])*
        $getter:ident($table:ident) { $($field:ident: $fun:expr),* $(,)? }
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// `table` is NULL or valid for writing the table struct. Called by the Level Zero loader.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $getter(version: ze_api_version_t, table: *mut $table) -> ze_result_t {
            let checked = check_version(version, table.is_null());
            if checked != ZE_RESULT_SUCCESS {
                return checked;
            }
            #[allow(clippy::needless_update)] // tables this driver fills completely
            let filled = $table {
                $($field: Some($fun),)*
                ..$table::default()
            };
            // SAFETY: non-NULL and valid for writes (caller).
            unsafe { table.write(filled) };
            ZE_RESULT_SUCCESS
        }
    )*};
}

macro_rules! export_empty_tables {
    ($($getter:ident($table:ident);)*) => {$(
        #[doc = concat!("Hands the loader an empty `", stringify!($table), "`: every slot NULL.")]
        ///
        /// # Safety
        ///
        /// `table` is NULL or valid for writing the table struct. Called by the Level Zero loader.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $getter(version: ze_api_version_t, table: *mut $table) -> ze_result_t {
            let checked = check_version(version, table.is_null());
            if checked != ZE_RESULT_SUCCESS {
                return checked;
            }
            // SAFETY: non-NULL and valid for writes (caller).
            unsafe { table.write($table::default()) };
            ZE_RESULT_SUCCESS
        }
    )*};
}

export_tables! {
    /// Hands the loader the global table: `zeInit`.
    zeGetGlobalProcAddrTable(ze_global_dditable_t) { pfnInit: ze_init }

    /// Hands the loader the driver table: `zeDriverGet`, `zeDriverGetApiVersion`.
    zeGetDriverProcAddrTable(ze_driver_dditable_t) {
        pfnGet: driver_get,
        pfnGetApiVersion: driver_get_api_version,
    }

    /// Hands the loader the device table: `zeDeviceGet`, `zeDeviceGetSubDevices`,
    /// `zeDeviceGetProperties`.
    zeGetDeviceProcAddrTable(ze_device_dditable_t) {
        pfnGet: device_get,
        pfnGetSubDevices: device_get_sub_devices,
        pfnGetProperties: device_get_properties,
    }

    /// Hands the loader the context table: `zeContextCreate`, `zeContextDestroy`.
    zeGetContextProcAddrTable(ze_context_dditable_t) {
        pfnCreate: context_create,
        pfnDestroy: context_destroy,
    }

    /// Hands the loader the command list table: immediate lists, copies and barriers.
    zeGetCommandListProcAddrTable(ze_command_list_dditable_t) {
        pfnCreateImmediate: command_list_create_immediate,
        pfnDestroy: command_list_destroy,
        pfnAppendBarrier: command_list_append_barrier,
        pfnAppendMemoryCopy: command_list_append_memory_copy,
    }

    /// Hands the loader the event pool table.
    zeGetEventPoolProcAddrTable(ze_event_pool_dditable_t) {
        pfnCreate: event_pool_create,
        pfnDestroy: event_pool_destroy,
    }

    /// Hands the loader the event table.
    zeGetEventProcAddrTable(ze_event_dditable_t) {
        pfnCreate: event_create,
        pfnDestroy: event_destroy,
        pfnHostSynchronize: event_host_synchronize,
        pfnQueryStatus: event_query_status,
        pfnHostReset: event_host_reset,
    }

    /// Hands the loader the memory table: USM allocation, free and pointer queries.
    zeGetMemProcAddrTable(ze_mem_dditable_t) {
        pfnAllocShared: mem_alloc_shared,
        pfnAllocDevice: mem_alloc_device,
        pfnAllocHost: mem_alloc_host,
        pfnFree: mem_free,
        pfnGetAllocProperties: mem_get_alloc_properties,
        pfnGetAddressRange: mem_get_address_range,
    }
}

export_empty_tables! {
    zeGetCommandQueueProcAddrTable(ze_command_queue_dditable_t);
    zeGetImageProcAddrTable(ze_image_dditable_t);
    zeGetFenceProcAddrTable(ze_fence_dditable_t);
    zeGetModuleProcAddrTable(ze_module_dditable_t);
    zeGetModuleBuildLogProcAddrTable(ze_module_build_log_dditable_t);
    zeGetKernelProcAddrTable(ze_kernel_dditable_t);
    zeGetSamplerProcAddrTable(ze_sampler_dditable_t);
    zeGetPhysicalMemProcAddrTable(ze_physical_mem_dditable_t);
    zeGetVirtualMemProcAddrTable(ze_virtual_mem_dditable_t);
    zetGetDeviceProcAddrTable(zet_device_dditable_t);
    zetGetContextProcAddrTable(zet_context_dditable_t);
    zetGetCommandListProcAddrTable(zet_command_list_dditable_t);
    zetGetModuleProcAddrTable(zet_module_dditable_t);
    zetGetKernelProcAddrTable(zet_kernel_dditable_t);
    zetGetMetricGroupProcAddrTable(zet_metric_group_dditable_t);
    zetGetMetricProcAddrTable(zet_metric_dditable_t);
    zetGetMetricStreamerProcAddrTable(zet_metric_streamer_dditable_t);
    zetGetMetricQueryPoolProcAddrTable(zet_metric_query_pool_dditable_t);
    zetGetMetricQueryProcAddrTable(zet_metric_query_dditable_t);
    zetGetTracerExpProcAddrTable(zet_tracer_exp_dditable_t);
    zetGetDebugProcAddrTable(zet_debug_dditable_t);
    zesGetDriverProcAddrTable(zes_driver_dditable_t);
    zesGetDeviceProcAddrTable(zes_device_dditable_t);
    zesGetSchedulerProcAddrTable(zes_scheduler_dditable_t);
    zesGetPerformanceFactorProcAddrTable(zes_performance_factor_dditable_t);
    zesGetPowerProcAddrTable(zes_power_dditable_t);
    zesGetFrequencyProcAddrTable(zes_frequency_dditable_t);
    zesGetEngineProcAddrTable(zes_engine_dditable_t);
    zesGetStandbyProcAddrTable(zes_standby_dditable_t);
    zesGetFirmwareProcAddrTable(zes_firmware_dditable_t);
    zesGetMemoryProcAddrTable(zes_memory_dditable_t);
    zesGetFabricPortProcAddrTable(zes_fabric_port_dditable_t);
    zesGetTemperatureProcAddrTable(zes_temperature_dditable_t);
    zesGetPsuProcAddrTable(zes_psu_dditable_t);
    zesGetFanProcAddrTable(zes_fan_dditable_t);
    zesGetLedProcAddrTable(zes_led_dditable_t);
    zesGetRasProcAddrTable(zes_ras_dditable_t);
    zesGetDiagnosticsProcAddrTable(zes_diagnostics_dditable_t);
}

/// Counts of the driver's live objects, for leak checks
/// ([`dlpack_oneapi_test_driver_live_objects`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveObjects {
    /// Contexts.
    pub contexts: u64,
    /// USM allocations, in all contexts.
    pub allocations: u64,
    /// Command lists.
    pub command_lists: u64,
    /// Event pools.
    pub event_pools: u64,
    /// Events.
    pub events: u64,
    /// Frees and destroys refused because their pointer or handle did not exist (double frees,
    /// stale handles) since the driver was loaded; a correct caller keeps this at 0.
    pub refused_releases: u64,
}

/// Test support: writes the number of live contexts, allocations, command lists, event pools
/// and events, and of refused releases, to `out`.
///
/// # Safety
///
/// `out` is NULL (then nothing happens) or valid for writing a [`LiveObjects`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlpack_oneapi_test_driver_live_objects(out: *mut LiveObjects) {
    if out.is_null() {
        return;
    }
    let [
        contexts,
        allocations,
        command_lists,
        event_pools,
        events,
        refused_releases,
    ] = live_counts();
    let counts = LiveObjects {
        contexts,
        allocations,
        command_lists,
        event_pools,
        events,
        refused_releases,
    };
    // SAFETY: non-NULL and valid for writes (caller).
    unsafe { out.write(counts) };
}

/// Test support: `hold != 0` stops the command lists of root device `root` (and its
/// sub-devices) before their next command, `hold == 0` lets them run again. Returns
/// `ZE_RESULT_SUCCESS`, or `ZE_RESULT_ERROR_INVALID_ARGUMENT` for a device that does not exist.
#[unsafe(no_mangle)]
pub extern "C" fn dlpack_oneapi_test_driver_hold(root: u32, hold: u32) -> ze_result_t {
    match objects::driver() {
        Ok(d) if d.set_hold(root, hold != 0) => ZE_RESULT_SUCCESS,
        Ok(_) => ZE_RESULT_ERROR_INVALID_ARGUMENT,
        Err(e) => e,
    }
}

/// Test support: returns once every command list has run all its commands or is waiting for a
/// hold ([`dlpack_oneapi_test_driver_hold`]) that is still on or for an event nobody has
/// signalled yet. From then on nothing changes until the host acts, so a test can tell "ran"
/// from "waits" without timing; after releasing a hold, it waits for what the hold kept back.
#[unsafe(no_mangle)]
pub extern "C" fn dlpack_oneapi_test_driver_settle() {
    objects::settle();
}

/// Test support: how many host threads are waiting in `zeEventHostSynchronize` for an event that
/// was not signalled when they started waiting.
#[unsafe(no_mangle)]
pub extern "C" fn dlpack_oneapi_test_driver_host_waiters() -> u64 {
    objects::HOST_WAITERS.load(core::sync::atomic::Ordering::SeqCst) as u64
}

/// Test support: makes calls of the entry point named `entry` (a NUL-terminated C name such as
/// `"zeEventHostSynchronize"`) fail. The next `skip` calls run as usual; the `count` after them
/// return `result` instead (a `count` of 0 disarms `entry`). With `flags` 0 a failing call does
/// nothing; with `flags` 1 it does the real work first (a host wait waits, a reset resets) and
/// then returns `result`. Arming an entry point again replaces what was armed for it.
///
/// The entry points that can fail this way: `zeCommandListAppendBarrier`,
/// `zeCommandListAppendMemoryCopy`, `zeCommandListDestroy`, `zeEventCreate`, `zeEventDestroy`,
/// `zeEventHostReset`, `zeEventHostSynchronize`, `zeEventPoolCreate`, `zeEventPoolDestroy`,
/// `zeEventQueryStatus` and `zeMemFree`. Returns `ZE_RESULT_SUCCESS`;
/// `ZE_RESULT_ERROR_INVALID_NULL_POINTER` for a NULL `entry`; `ZE_RESULT_ERROR_INVALID_ARGUMENT`
/// for another name, a `result` of `ZE_RESULT_SUCCESS` or an unknown flag.
///
/// # Safety
///
/// `entry` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlpack_oneapi_test_driver_fail(
    entry: *const core::ffi::c_char,
    skip: u32,
    count: u32,
    result: ze_result_t,
    flags: u32,
) -> ze_result_t {
    if entry.is_null() {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    // SAFETY: a non-NULL, NUL-terminated string (caller).
    let entry = unsafe { core::ffi::CStr::from_ptr(entry) };
    let Ok(entry) = entry.to_str() else {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    };
    let armed = objects::lock(&inject::INJECTIONS).arm(entry, skip, count, result, flags);
    armed.err().unwrap_or(ZE_RESULT_SUCCESS)
}

/// Test support: disarms every failure armed with [`dlpack_oneapi_test_driver_fail`]; returns
/// how many armed failures no call had returned yet (0 when each test used what it armed).
#[unsafe(no_mangle)]
pub extern "C" fn dlpack_oneapi_test_driver_clear_failures() -> u64 {
    objects::lock(&inject::INJECTIONS).disarm_all()
}

/// Calls that would have let device work that has not finished touch something released or
/// reused, since the driver was loaded ([`dlpack_oneapi_test_driver_misuses`]). Each refused
/// call returned `ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE` and changed nothing; a correct caller
/// keeps every count at 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Misuses {
    /// `zeMemFree` of an allocation that an unfinished copy reads or writes (refused).
    pub frees_in_use: u64,
    /// `zeEventHostReset` of an event that an unfinished command signals or waits on (refused).
    pub event_resets_in_use: u64,
    /// `zeEventDestroy` of an event that an unfinished command signals or waits on (refused).
    pub event_destroys_in_use: u64,
    /// `zeCommandListDestroy` of a list with unfinished commands (refused).
    pub list_destroys_in_use: u64,
    /// Commands appended with a signal event that was already signalled: an event reused
    /// without a reset, so that a host wait on it returns before the command has run (counted;
    /// the command is appended).
    pub signalled_signal_events: u64,
    /// Copies appended behind unfinished commands of their list with no barrier between: Level
    /// Zero starts a list's commands in order but lets them finish in any order, so such a copy
    /// may race with the work before it on real hardware (counted; the copy is appended, and
    /// this driver runs it after that work).
    pub unordered_copies: u64,
}

/// Test support: writes the [`Misuses`] counted so far to `out`, whose size the caller passes
/// (a check that both sides agree on the struct): -1 for a NULL `out` or another size, else 0.
///
/// # Safety
///
/// `out` is NULL or valid for a write of `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlpack_oneapi_test_driver_misuses(
    out: *mut Misuses,
    size: usize,
) -> core::ffi::c_int {
    if out.is_null() || size != core::mem::size_of::<Misuses>() {
        return -1;
    }
    let m = &objects::MISUSES;
    let read = |c: &core::sync::atomic::AtomicU64| c.load(core::sync::atomic::Ordering::SeqCst);
    let counts = Misuses {
        frees_in_use: read(&m.frees_in_use),
        event_resets_in_use: read(&m.event_resets_in_use),
        event_destroys_in_use: read(&m.event_destroys_in_use),
        list_destroys_in_use: read(&m.list_destroys_in_use),
        signalled_signal_events: read(&m.signalled_signal_events),
        unordered_copies: read(&m.unordered_copies),
    };
    // SAFETY: not NULL, and valid for a write of the struct (the caller's contract and the size
    // check).
    unsafe { out.write(counts) };
    0
}
