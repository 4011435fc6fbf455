//! End to end through the real Level Zero loader and the workspace's test-support driver
//! (`dlpack-oneapi-test-driver`, loaded with `ZE_ENABLE_ALT_DRIVERS`): two root devices with two
//! sub-devices each, host memory standing in for device memory, command lists running on worker
//! threads. Export, import, pointer -> device, contexts, spans, copies and the queue handshake.
//!
//! The suite runs three times, each in its own process (the loader reads its configuration once):
//! with the loader passing calls straight to the driver, with the loader's intercept layer
//! (`ZE_ENABLE_LOADER_INTERCEPT=1`, the multi-driver path, where the loader wraps every handle),
//! and with the loader's validation layer (`ZE_ENABLE_VALIDATION_LAYER=1`,
//! `ZE_ENABLE_PARAMETER_VALIDATION=1`), which checks the parameters of every call this crate
//! makes. After every case the driver's live objects (contexts, allocations, command lists, event
//! pools, events) must be back where they were, except what `dlpack_oneapi::leaks()` reports as
//! leaked on purpose after a failure the case injected: nothing else leaked. The driver's misuse
//! counts (memory freed, events reset or destroyed, lists destroyed while unfinished work uses
//! them; events reused while still signalled) must not have moved, and every failure a case
//! armed must have been returned.
//!
//! The driver is built with `cargo build -p dlpack-oneapi-test-driver` unless
//! `DLPACK_ONEAPI_TEST_DRIVER` names it. Without the loader the suite prints NOT RUN (a failure
//! with `DLPACK_REQUIRE_ZE_LOADER=1`).

mod common;

use std::ffi::c_void;
use std::process::{Command, ExitCode};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::ffi::{DLManagedTensorVersioned, DLTensor};
use dlpack_core::protocol::StreamRequest;
use dlpack_core::{
    DLPack, DataType, Device, DeviceHooks, Error, Flags, ManagedTensor, MemoryKind, PyErrorKind,
    Version,
};
use dlpack_oneapi::{
    Context, DeviceNumbering, Driver, LevelZero, Queue, UsmBuffer, UsmKind, ZeDevice, sys,
};

use common::{DriverSupport, Failure, LiveObjects, Misuses};

const SUITE: &str = "test_driver";
/// Which loader configuration a process runs the suite in.
const MODE_VAR: &str = "DLPACK_ONEAPI_TEST_MODE";
const MODES: [(&str, &[(&str, &str)]); 4] = [
    ("direct", &[]),
    ("intercept", &[("ZE_ENABLE_LOADER_INTERCEPT", "1")]),
    (
        "validation",
        &[
            ("ZE_ENABLE_VALIDATION_LAYER", "1"),
            ("ZE_ENABLE_PARAMETER_VALIDATION", "1"),
        ],
    ),
    // The test driver resolving pointers in every context of the driver, as Intel's GPU
    // driver does (the specification scopes them to their context).
    ("driver-wide", &[(DRIVER_WIDE_VAR, "1")]),
];
/// The test driver's switch for driver-wide pointer lookups.
const DRIVER_WIDE_VAR: &str = "DLPACK_ONEAPI_TEST_DRIVER_DRIVER_WIDE_LOOKUP";

/// Whether this process runs the driver-wide mode.
fn driver_wide() -> bool {
    std::env::var(DRIVER_WIDE_VAR).is_ok_and(|v| v == "1")
}

struct Fixture {
    driver: Driver,
    support: DriverSupport,
    /// Misuses the running case commits on purpose (the driver's self-test), which the check
    /// after it allows.
    allowed_misuses: Mutex<Misuses>,
}

fn main() -> ExitCode {
    let child_mode = std::env::var(MODE_VAR).ok();
    let driver_path = match common::test_driver() {
        Ok(p) => p,
        Err(why) => return common::not_run(SUITE, &why),
    };
    let mode = child_mode.as_deref().unwrap_or("direct");
    let Some((_, mode_env)) = MODES.iter().find(|(m, _)| *m == mode) else {
        panic!("{MODE_VAR}={mode}: expected one of direct, intercept, validation, driver-wide");
    };
    // SAFETY: `main` is still the only thread (building the driver ran cargo as a child
    // process and waited for it), and the loader, which reads these variables, is not loaded.
    unsafe {
        for (_, vars) in &MODES {
            for (k, _) in *vars {
                std::env::remove_var(k);
            }
        }
        std::env::set_var("ZE_ENABLE_ALT_DRIVERS", &driver_path);
        std::env::set_var("DLPACK_ONEAPI_TEST_DRIVER_DEVICES", "2");
        std::env::set_var("DLPACK_ONEAPI_TEST_DRIVER_SUB_DEVICES", "2");
        for (k, v) in *mode_env {
            std::env::set_var(k, v);
        }
    }
    if let Some(why) = common::loader_error() {
        return common::not_run(SUITE, &why);
    }
    let ze = LevelZero::load().expect("the loader loads the test driver");
    let driver = ze.drivers().expect("zeDriverGet")[0].clone();
    let fixture = Fixture {
        driver,
        support: DriverSupport::open(&driver_path),
        allowed_misuses: Mutex::new(Misuses::default()),
    };
    let suite = format!("{SUITE}, {mode} mode");
    let mut code = common::run_cases(&suite, &fixture, CASES, |name, case| {
        // A case that failed earlier may have left failures armed.
        fixture.support.clear_failures();
        *fixture.allowed_misuses.lock().unwrap() = Misuses::default();
        let before = fixture.support.live();
        let misuses = fixture.support.misuses();
        let leaks = dlpack_oneapi::leaks();
        case();
        let leaked = Leaked::since(&leaks);
        assert_eq!(
            fixture.support.clear_failures(),
            0,
            "{name}: failures were armed that no call returned"
        );
        let after = fixture.support.live();
        let expected = LiveObjects {
            contexts: before.contexts + leaked.contexts,
            allocations: before.allocations + leaked.allocations,
            command_lists: before.command_lists + leaked.command_lists,
            event_pools: before.event_pools + leaked.event_pools,
            events: before.events + leaked.events,
            refused_releases: before.refused_releases,
        };
        assert_eq!(
            after, expected,
            "{name}: the driver's live objects changed beyond what dlpack_oneapi::leaks() \
             reports as leaked on purpose ({leaked:?}); expected every other context, \
             allocation, list, pool and event to be released"
        );
        let allowed = *fixture.allowed_misuses.lock().unwrap();
        assert_eq!(
            fixture.support.misuses(),
            Misuses {
                frees_in_use: misuses.frees_in_use + allowed.frees_in_use,
                event_resets_in_use: misuses.event_resets_in_use + allowed.event_resets_in_use,
                event_destroys_in_use: misuses.event_destroys_in_use
                    + allowed.event_destroys_in_use,
                list_destroys_in_use: misuses.list_destroys_in_use + allowed.list_destroys_in_use,
                signalled_signal_events: misuses.signalled_signal_events
                    + allowed.signalled_signal_events,
                unordered_copies: misuses.unordered_copies + allowed.unordered_copies,
            },
            "{name}: device work that had not finished would have touched memory or an event \
             that was released or reused"
        );
    });
    let listing = std::env::args().any(|a| a == "--list");
    if child_mode.is_none() && !listing {
        // The other loader configurations, each in a fresh process.
        for (mode, _) in &MODES[1..] {
            let status = Command::new(std::env::current_exe().expect("current_exe"))
                .args(std::env::args_os().skip(1))
                .env(MODE_VAR, mode)
                .env(common::DRIVER_PATH_VAR, &driver_path)
                .status()
                .expect("run the suite in a child process");
            if !status.success() {
                println!("{SUITE}: the {mode} mode run failed ({status})");
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}

const CASES: &[common::Case<Fixture>] = common::cases![Fixture;
    the_loader_lists_one_driver_with_two_root_devices_and_their_sub_devices,
    device_usm_exports_as_oneapi_with_its_root_device_number,
    shared_and_host_usm_import_as_views_of_the_same_memory,
    pointers_resolve_to_their_owning_device_on_two_devices,
    a_tensor_claiming_the_wrong_device_is_refused,
    sub_device_memory_exports_and_resolves_as_its_root_device,
    a_pointer_from_another_context_is_refused_as_unknown,
    an_adopted_context_resolves_its_makers_memory_and_is_left_to_its_maker,
    adopting_needs_a_driver_of_the_loader_and_a_context_handle,
    host_memory_claimed_as_oneapi_is_refused_as_unknown,
    a_tensor_reaching_past_its_allocation_is_refused,
    strided_device_tensors_are_copied_to_the_host_in_row_major_order,
    host_data_is_copied_into_device_memory,
    copies_from_memory_of_another_context_are_refused,
    without_a_handshake_a_consumer_reads_before_the_producer_writes,
    a_consumer_queue_waits_for_the_producer_through_the_event_handshake,
    waiting_on_the_host_returns_after_the_producer_work,
    stream_values_that_are_not_queues_of_the_context_are_refused,
    a_numbering_table_renumbers_exports_and_claims,
    an_exported_usm_buffer_is_reclaimed_without_a_copy,
    a_struct_with_a_usm_field_exports_any_layout_inside_it,
    empty_buffers_export_without_allocating,
    buffers_keep_their_context_alive,
    the_test_driver_refuses_to_destroy_a_context_that_still_has_allocations,
    the_test_driver_refuses_to_release_what_unfinished_work_uses_and_injects_failures,
    a_copy_whose_host_wait_fails_keeps_its_event_staging_buffer_and_source,
    filling_device_memory_whose_host_wait_fails_keeps_the_allocation,
    a_copy_hook_whose_host_wait_fails_leaves_the_callers_memory_to_the_copy,
    a_failed_host_wait_is_unfinished_only_while_the_event_is_not_seen_signalled,
    an_event_whose_reset_fails_is_retired_not_reused,
    a_synchronize_whose_host_wait_fails_retires_its_barrier_event,
    a_failed_handshake_retires_the_producer_event_only_while_it_may_be_signalled,
    a_queue_dropped_while_its_work_cannot_be_waited_for_leaks_its_list_and_events,
];

// --- helpers --------------------------------------------------------------------------------

fn context(fx: &Fixture) -> Context {
    Context::new(&fx.driver).expect("zeContextCreate")
}

fn root(ctx: &Context, i: usize) -> ZeDevice {
    ctx.devices()[i].clone()
}

fn f32s(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

/// What `dlpack_oneapi::leaks()` counted since an earlier reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Leaked {
    events: u64,
    event_pools: u64,
    command_lists: u64,
    allocations: u64,
    contexts: u64,
    host_bytes: u64,
}

impl Leaked {
    fn since(before: &dlpack_oneapi::Leaks) -> Self {
        let now = dlpack_oneapi::leaks();
        Leaked {
            events: now.events - before.events,
            event_pools: now.event_pools - before.event_pools,
            command_lists: now.command_lists - before.command_lists,
            allocations: now.allocations - before.allocations,
            contexts: now.contexts - before.contexts,
            host_bytes: now.host_bytes - before.host_bytes,
        }
    }
}

/// The error a lost device gives.
const LOST: sys::ze_result_t = sys::ZE_RESULT_ERROR_DEVICE_LOST;

/// Asserts that `err` is a Level Zero runtime error whose message contains every one of `parts`.
fn assert_runtime_error(err: &Error, parts: &[&str]) {
    let Error::Runtime { runtime, message } = err else {
        panic!("expected a Level Zero runtime error, got {err:?}");
    };
    assert_eq!(*runtime, "Level Zero");
    for part in parts {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
}

/// Deleter calls of [`foreign`] tensors.
static FOREIGN_DELETES: AtomicUsize = AtomicUsize::new(0);

/// A foreign tensor: a managed struct and its arrays in one heap block, as a C producer would
/// make it. Its deleter frees the block (not the data) and counts.
#[repr(C)]
struct Foreign {
    managed: DLManagedTensorVersioned,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

unsafe extern "C" fn delete_foreign(t: *mut DLManagedTensorVersioned) {
    // SAFETY: every tensor with this deleter is a `Box<Foreign>` (managed is its first field)
    // deleted once, by the owner that imported it.
    drop(unsafe { Box::from_raw(t.cast::<Foreign>()) });
    FOREIGN_DELETES.fetch_add(1, Ordering::SeqCst);
}

fn foreign(
    data: *const c_void,
    device: Device,
    dtype: DataType,
    shape: &[i64],
    strides: &[i64],
    byte_offset: u64,
) -> *mut DLManagedTensorVersioned {
    let mut block = Box::new(Foreign {
        managed: DLManagedTensorVersioned {
            version: Version::CURRENT,
            manager_ctx: core::ptr::null_mut(),
            deleter: Some(delete_foreign),
            flags: 0,
            dl_tensor: DLTensor {
                data: data.cast_mut(),
                device,
                ndim: shape.len() as i32,
                dtype,
                shape: core::ptr::null_mut(),
                strides: core::ptr::null_mut(),
                byte_offset,
            },
        },
        shape: shape.to_vec(),
        strides: strides.to_vec(),
    });
    block.managed.dl_tensor.shape = block.shape.as_mut_ptr();
    block.managed.dl_tensor.strides = block.strides.as_mut_ptr();
    Box::into_raw(block).cast()
}

/// Imports a foreign tensor, checking that the deleter runs exactly once by the end of `f`.
fn with_foreign<R>(raw: *mut DLManagedTensorVersioned, f: impl FnOnce(ManagedTensor) -> R) -> R {
    let before = FOREIGN_DELETES.load(Ordering::SeqCst);
    // SAFETY: `raw` is a fresh foreign tensor whose fields describe memory that the caller keeps
    // alive (or, for the refusals tested, that is never read: verification only asks the
    // driver about addresses).
    let tensor = unsafe { ManagedTensor::from_raw(raw) }.expect("a well-formed tensor imports");
    let r = f(tensor);
    assert_eq!(
        FOREIGN_DELETES.load(Ordering::SeqCst),
        before + 1,
        "the foreign deleter must run exactly once"
    );
    r
}

// --- the cases ------------------------------------------------------------------------------

fn the_loader_lists_one_driver_with_two_root_devices_and_their_sub_devices(fx: &Fixture) {
    assert_eq!(fx.driver.api_version().unwrap(), (1, 4));
    let devices = fx.driver.devices().unwrap();
    assert_eq!(devices.len(), 2);
    for (i, d) in devices.iter().enumerate() {
        let p = d.properties().unwrap();
        assert_eq!(
            p.name,
            format!("dlpack-oneapi test driver device {i} (host memory)")
        );
        assert_eq!(p.device_type, sys::ZE_DEVICE_TYPE_GPU);
        assert_eq!(p.sub_device_id, None);
        let subs = d.sub_devices().unwrap();
        assert_eq!(subs.len(), 2);
        for (s, sub) in subs.iter().enumerate() {
            let sp = sub.properties().unwrap();
            assert_eq!(sp.sub_device_id, Some(s as u32));
            assert_ne!(sp.uuid, p.uuid);
        }
    }
    assert_ne!(devices[0], devices[1]);
}

fn device_usm_exports_as_oneapi_with_its_root_device_number(fx: &Fixture) {
    let ctx = context(fx);
    for i in 0..2 {
        let data = f32s(5);
        let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, i), UsmKind::Device, &data).unwrap();
        let address = buffer.as_ptr();
        assert_eq!(buffer.dlpack_device(), Device::oneapi(i as i32));
        assert_eq!(
            buffer.as_slice(),
            None,
            "device USM is not host-readable in place"
        );
        let tensor = ManagedTensor::export(buffer).unwrap();
        assert_eq!(tensor.device(), Device::oneapi(i as i32));
        assert_eq!(
            (tensor.shape(), tensor.strides()),
            (&[5i64][..], &[1i64][..])
        );
        assert_eq!(tensor.data_ptr().cast_const().cast(), address);
        assert!(!tensor.is_host_accessible());
        assert_eq!(tensor.to_host_vec::<f32>(&ctx.hooks()).unwrap(), data);
        let live = fx.support.live();
        drop(tensor);
        assert_eq!(
            fx.support.live().allocations,
            live.allocations - 1,
            "deleting the tensor frees the USM"
        );
    }
}

fn shared_and_host_usm_import_as_views_of_the_same_memory(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    for (kind, memory, device) in [
        (UsmKind::Shared, MemoryKind::Managed, 1),
        (UsmKind::Host, MemoryKind::HostPinned, 0),
    ] {
        let data = f32s(6);
        let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, device), kind, &data).unwrap();
        assert_eq!(buffer.as_slice(), Some(&data[..]));
        let address = buffer.as_ptr();
        let raw = ManagedTensor::export(buffer).unwrap().into_raw().unwrap();
        // SAFETY: a live tensor we own.
        let mut tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
        assert!(
            tensor.view::<f32>().is_err(),
            "{kind}: unverified oneAPI memory is not viewed"
        );
        let info = tensor.verify_device(&hooks).unwrap().unwrap();
        assert_eq!(info.kind, memory, "{kind}");
        assert_eq!(info.device, Device::oneapi(device as i32), "{kind}");
        let view = tensor.view::<f32>().unwrap();
        assert_eq!(view.as_ptr(), address, "{kind}: zero copy");
        assert_eq!(view.to_vec().unwrap(), data, "{kind}");
    }
}

fn pointers_resolve_to_their_owning_device_on_two_devices(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let on0 = UsmBuffer::<u32>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Device, 16).unwrap();
    let on1 = UsmBuffer::<u32>::zeroed(&ctx, &root(&ctx, 1), UsmKind::Device, 16).unwrap();
    for (buffer, id) in [(&on0, 0), (&on1, 1)] {
        let start = buffer.as_ptr().addr();
        for offset in [0, 4, 63] {
            let info = hooks.resolve(Device::oneapi(id), start + offset).unwrap();
            assert_eq!(info.device, Device::oneapi(id));
            assert_eq!(info.kind, MemoryKind::Device);
            assert_eq!(info.allocation, Some(start..start + 64));
        }
        let allocation = ctx.allocation_of(start + 8).unwrap().unwrap();
        assert_eq!(allocation.kind, UsmKind::Device);
        assert_eq!(allocation.device.as_ref(), Some(&root(&ctx, id as usize)));
    }
    // One past the end belongs to no allocation (the driver allocates exactly 64 bytes, aligned
    // to 256, so the next byte is not USM).
    let past = on0.as_ptr().addr() + 64;
    assert_eq!(
        hooks.resolve(Device::oneapi(0), past),
        Err(Error::UnknownPointer {
            claimed: Device::oneapi(0),
            address: past
        })
    );
}

fn a_tensor_claiming_the_wrong_device_is_refused(fx: &Fixture) {
    let ctx = context(fx);
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &f32s(4)).unwrap();
    for (claimed, expected) in [
        (
            Device::oneapi(0),
            Error::DeviceMismatch {
                claimed: Device::oneapi(0),
                actual: Device::oneapi(1),
            },
        ),
        (
            Device::oneapi(7),
            Error::DeviceMismatch {
                claimed: Device::oneapi(7),
                actual: Device::oneapi(1),
            },
        ),
    ] {
        let raw = foreign(
            buffer.as_ptr().cast(),
            claimed,
            DataType::F32,
            &[4],
            &[1],
            0,
        );
        with_foreign(raw, |mut t| {
            assert_eq!(t.verify_device(&ctx.hooks()), Err(expected.clone()));
        });
    }
    // Copies need no verified claim, so they check it too: device 1's memory claimed as device
    // 0's is not copied by device 0's command list (it would reach it only with peer access).
    let hooks = ctx.hooks();
    let raw = foreign(
        buffer.as_ptr().cast(),
        Device::oneapi(0),
        DataType::F32,
        &[4],
        &[1],
        0,
    );
    let mismatch = Error::DeviceMismatch {
        claimed: Device::oneapi(0),
        actual: Device::oneapi(1),
    };
    with_foreign(raw, |t| {
        assert_eq!(t.to_host_vec::<f32>(&hooks), Err(mismatch.clone()));
        let span = t.byte_span();
        // SAFETY: the span is live USM that nothing else uses during the call; the hook
        // refuses before copying anything.
        let written = unsafe { hooks.copy_from_host(Device::oneapi(0), &[0u8; 16], span.start) };
        assert_eq!(written, Err(mismatch.clone()));
    });
    assert_eq!(buffer.to_vec().unwrap(), f32s(4), "nothing was written");
}

fn sub_device_memory_exports_and_resolves_as_its_root_device(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let sub = root(&ctx, 1).sub_devices().unwrap()[1].clone();
    assert_eq!(ctx.root_device(&sub).unwrap(), root(&ctx, 1));
    assert_eq!(ctx.dlpack_device(&sub).unwrap(), Device::oneapi(1));
    for kind in [UsmKind::Device, UsmKind::Shared] {
        let buffer = UsmBuffer::from_slice(&ctx, &sub, kind, &[1u8, 2, 3]).unwrap();
        assert_eq!(buffer.dlpack_device(), Device::oneapi(1));
        // The driver reports the sub-device as the owner; the hook maps it to its root.
        let allocation = ctx.allocation_of(buffer.as_ptr().addr()).unwrap().unwrap();
        assert_eq!(allocation.device.as_ref(), Some(&sub));
        let mut tensor = ManagedTensor::export(buffer).unwrap();
        assert_eq!(tensor.device(), Device::oneapi(1));
        let info = tensor.verify_device(&hooks).unwrap().unwrap();
        assert_eq!(info.device, Device::oneapi(1));
        assert_eq!(tensor.to_host_vec::<u8>(&hooks).unwrap(), [1, 2, 3]);
    }
}

fn a_pointer_from_another_context_is_refused_as_unknown(fx: &Fixture) {
    let producer = context(fx);
    let consumer = context(fx);
    let buffer =
        UsmBuffer::from_slice(&producer, &root(&producer, 0), UsmKind::Device, &f32s(4)).unwrap();
    let address = buffer.as_ptr().addr();
    if driver_wide() {
        // Intel's reading: every context of the driver knows the allocation, and the import
        // checks out in the consumer's context, values included.
        assert!(consumer.allocation_of(address).unwrap().is_some());
        let raw = ManagedTensor::export(buffer).unwrap().into_raw().unwrap();
        // SAFETY: a live tensor we own.
        let mut tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
        let hooks = consumer.hooks();
        tensor.verify_device(&hooks).unwrap();
        assert_eq!(tensor.to_host_vec::<f32>(&hooks).unwrap(), f32s(4));
        return;
    }
    assert_eq!(consumer.allocation_of(address).unwrap(), None);
    let raw = ManagedTensor::export(buffer).unwrap().into_raw().unwrap();
    // SAFETY: a live tensor we own.
    let mut tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let err = tensor.verify_device(&consumer.hooks()).unwrap_err();
    assert_eq!(
        err,
        Error::UnknownPointer {
            claimed: Device::oneapi(0),
            address
        }
    );
    assert!(err.to_string().contains("or in another context"), "{err}");
    // The producer's context knows it.
    assert!(tensor.verify_device(&producer.hooks()).is_ok());
}

fn an_adopted_context_resolves_its_makers_memory_and_is_left_to_its_maker(fx: &Fixture) {
    // Another runtime (SYCL, say) made a context and allocated device USM in it with raw calls.
    let ze = fx.driver.level_zero();
    let api = ze.api();
    let contexts = fx.support.live().contexts;
    let desc = sys::ze_context_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_CONTEXT_DESC,
        pNext: core::ptr::null(),
        flags: 0,
    };
    let device_desc = sys::ze_device_mem_alloc_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC,
        pNext: core::ptr::null(),
        flags: 0,
        ordinal: 0,
    };
    let devices = fx.driver.devices().unwrap();
    let mut handle = core::ptr::null_mut();
    let mut foreign = core::ptr::null_mut();
    // SAFETY: raw calls with valid descriptors, live handles and out-pointers; both objects are
    // released below.
    unsafe {
        assert_eq!(
            (api.zeContextCreate)(fx.driver.raw(), &desc, &mut handle),
            sys::ZE_RESULT_SUCCESS
        );
        assert_eq!(
            (api.zeMemAllocDevice)(handle, &device_desc, 64, 64, devices[1].raw(), &mut foreign),
            sys::ZE_RESULT_SUCCESS
        );
    }
    let driver = ze
        .driver(fx.driver.raw())
        .expect("the driver is found by its handle");
    // SAFETY: `handle` is a context of `driver`, destroyed below after everything made from
    // the adopted context is gone.
    let adopted =
        unsafe { Context::from_raw(&driver, handle, DeviceNumbering::driver_order()) }.unwrap();
    assert_eq!(adopted.raw(), handle);

    // Its maker's memory resolves in it, to the device it was allocated on.
    let allocation = adopted.allocation_of(foreign.addr() + 8).unwrap().unwrap();
    assert_eq!(allocation.kind, UsmKind::Device);
    assert_eq!(allocation.range, foreign.addr()..foreign.addr() + 64);
    let info = adopted
        .hooks()
        .resolve(Device::oneapi(1), foreign.addr())
        .unwrap();
    assert_eq!(
        (info.device, info.kind),
        (Device::oneapi(1), MemoryKind::Device)
    );
    // A context of our own does not know it (except with driver-wide lookups, as Intel's).
    let ours = context(fx).allocation_of(foreign.addr()).unwrap();
    assert_eq!(ours.is_some(), driver_wide(), "{ours:?}");

    // What the adopted context allocates and copies lives in the maker's context.
    let buffer =
        UsmBuffer::from_slice(&adopted, &root(&adopted, 0), UsmKind::Device, &f32s(3)).unwrap();
    let mut kind = sys::ze_memory_allocation_properties_t {
        stype: sys::ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES,
        pNext: core::ptr::null_mut(),
        r#type: sys::ZE_MEMORY_TYPE_UNKNOWN,
        id: 0,
        pageSize: 0,
    };
    let mut owner = core::ptr::null_mut();
    // SAFETY: live context, a pointer compared only, valid out-pointers.
    let r = unsafe {
        (api.zeMemGetAllocProperties)(handle, buffer.as_ptr().cast(), &mut kind, &mut owner)
    };
    assert_eq!(
        (r, kind.r#type),
        (sys::ZE_RESULT_SUCCESS, sys::ZE_MEMORY_TYPE_DEVICE)
    );
    assert_eq!(buffer.to_vec().unwrap(), f32s(3));
    drop(buffer);

    // Dropping the last user leaves the context to its maker, who destroys it.
    drop(adopted);
    assert_eq!(fx.support.live().contexts, contexts + 1);
    // SAFETY: the maker releases its objects; nothing of ours uses them any more.
    unsafe {
        assert_eq!((api.zeMemFree)(handle, foreign), sys::ZE_RESULT_SUCCESS);
        assert_eq!((api.zeContextDestroy)(handle), sys::ZE_RESULT_SUCCESS);
    }
}

fn adopting_needs_a_driver_of_the_loader_and_a_context_handle(fx: &Fixture) {
    let ze = fx.driver.level_zero();
    let bogus = core::ptr::without_provenance_mut(0x1000);
    let err = ze.driver(bogus).unwrap_err();
    assert!(
        err.to_string()
            .contains("is not a driver of this Level Zero loader"),
        "{err}"
    );
    // SAFETY: a NULL handle is refused before any use.
    let err = unsafe {
        Context::from_raw(
            &fx.driver,
            core::ptr::null_mut(),
            DeviceNumbering::driver_order(),
        )
    }
    .unwrap_err();
    assert_eq!(err, Error::NullPointer { what: "context" });
}

fn host_memory_claimed_as_oneapi_is_refused_as_unknown(fx: &Fixture) {
    let ctx = context(fx);
    let data = f32s(4);
    let raw = foreign(
        data.as_ptr().cast(),
        Device::oneapi(0),
        DataType::F32,
        &[4],
        &[1],
        0,
    );
    with_foreign(raw, |mut t| {
        assert_eq!(
            t.verify_device(&ctx.hooks()),
            Err(Error::UnknownPointer {
                claimed: Device::oneapi(0),
                address: data.as_ptr().addr()
            })
        );
        assert!(t.view::<f32>().is_err());
    });
}

fn a_tensor_reaching_past_its_allocation_is_refused(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 0), UsmKind::Shared, &f32s(8)).unwrap();
    let start = buffer.as_ptr().addr();
    let p = buffer.as_ptr().cast();
    let d = Device::oneapi(0);
    // Inside: every other element, from element 1.
    with_foreign(foreign(p, d, DataType::F32, &[4], &[2], 4), |mut t| {
        t.verify_device(&hooks).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 3.0, 5.0, 7.0]);
    });
    // 16 elements over an 8-element allocation; and 8 elements from element 1.
    for (shape, offset, end) in [(16, 0, start + 64), (8, 4, start + 36)] {
        with_foreign(
            foreign(p, d, DataType::F32, &[shape], &[1], offset),
            |mut t| {
                assert_eq!(
                    t.verify_device(&hooks),
                    Err(Error::SpanOutsideAllocation {
                        start: start + offset as usize,
                        end,
                        alloc_start: start,
                        alloc_end: start + 32
                    })
                );
            },
        );
    }
}

fn strided_device_tensors_are_copied_to_the_host_in_row_major_order(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &f32s(12)).unwrap();
    // A 3x2 view: rows 4 elements apart, every other column, from element 1.
    let raw = foreign(
        buffer.as_ptr().cast(),
        Device::oneapi(1),
        DataType::F32,
        &[3, 2],
        &[4, 2],
        4,
    );
    with_foreign(raw, |mut t| {
        t.verify_device(&hooks).unwrap();
        assert!(
            t.view::<f32>().is_err(),
            "device memory is not viewed in place"
        );
        assert_eq!(
            t.to_host_vec::<f32>(&hooks).unwrap(),
            [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
        );
    });
    // The same data, transposed, into new device memory.
    let raw = foreign(
        buffer.as_ptr().cast(),
        Device::oneapi(1),
        DataType::F32,
        &[2, 2],
        &[1, 4],
        0,
    );
    with_foreign(raw, |mut t| {
        t.verify_device(&hooks).unwrap();
        let copy =
            UsmBuffer::<f32>::from_tensor(&ctx, &root(&ctx, 0), UsmKind::Device, &t).unwrap();
        assert_eq!(copy.to_vec().unwrap(), [0.0, 4.0, 1.0, 5.0]);
        assert_eq!(copy.dlpack_device(), Device::oneapi(0));
    });
}

fn host_data_is_copied_into_device_memory(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let mut buffer = UsmBuffer::<u16>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Device, 4).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), [0; 4]);
    buffer.copy_from_host(&[9, 8, 7, 6]).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), [9, 8, 7, 6]);
    assert_eq!(
        buffer.copy_from_host(&[1, 2]),
        Err(Error::ShapeMismatch {
            found: vec![2],
            expected: vec![4]
        })
    );
    // Through the hook, into the middle of the allocation.
    // SAFETY: bytes 2..6 of a live 8-byte device allocation that nothing else accesses.
    unsafe {
        hooks
            .copy_from_host(Device::oneapi(0), &[1, 0, 2, 0], buffer.as_ptr().addr() + 2)
            .unwrap()
    };
    assert_eq!(buffer.to_vec().unwrap(), [9, 1, 2, 6]);
    // A CPU tensor (any producer) into device memory.
    let cpu = ManagedTensor::export(vec![5u16, 4, 3]).unwrap();
    let copy = UsmBuffer::<u16>::from_tensor(&ctx, &root(&ctx, 1), UsmKind::Device, &cpu).unwrap();
    assert_eq!(copy.to_vec().unwrap(), [5, 4, 3]);
}

fn copies_from_memory_of_another_context_are_refused(fx: &Fixture) {
    let producer = context(fx);
    let consumer = context(fx);
    let buffer =
        UsmBuffer::from_slice(&producer, &root(&producer, 0), UsmKind::Device, &[1u8; 8]).unwrap();
    let mut out = [0u8; 8];
    // SAFETY: the source is a live 8-byte allocation nobody writes meanwhile.
    let r = unsafe {
        consumer
            .hooks()
            .copy_to_host(Device::oneapi(0), buffer.as_ptr().addr(), &mut out)
    };
    if driver_wide() {
        // Intel's reading: the consumer's context resolves and copies it.
        assert_eq!((r, out), (Ok(()), [1; 8]));
        return;
    }
    assert_eq!(
        r,
        Err(Error::UnknownPointer {
            claimed: Device::oneapi(0),
            address: buffer.as_ptr().addr()
        })
    );
    assert_eq!(out, [0; 8], "nothing was copied");
}

/// Appends a copy to `queue` without waiting (the crate's own copies always wait).
///
/// # Safety
/// The ranges stay valid until the queue has run the copy.
unsafe fn append_copy(queue: &Queue, ze: &LevelZero, dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: a live list of this test; valid ranges (caller); no events.
    let r = unsafe {
        (ze.api().zeCommandListAppendMemoryCopy)(
            queue.raw(),
            dst.cast(),
            src.cast(),
            n,
            core::ptr::null_mut(),
            0,
            core::ptr::null_mut(),
        )
    };
    assert_eq!(r, sys::ZE_RESULT_SUCCESS);
}

/// The producer/consumer set-up of the queue cases: producer data in host memory, device USM on
/// device 0 that the producer's default queue copies it into, and a consumer queue on device 1.
struct Handshake {
    ctx: Context,
    ze: LevelZero,
    source: Vec<u8>,
    target: UsmBuffer<u8>,
    producer: Queue,
    consumer: Queue,
}

fn handshake(fx: &Fixture) -> Handshake {
    let ctx = context(fx);
    let target = UsmBuffer::<u8>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Device, 4096).unwrap();
    Handshake {
        producer: ctx.queue(&root(&ctx, 0)).unwrap(),
        consumer: Queue::new(&ctx, &root(&ctx, 1)).unwrap(),
        ze: fx.driver.level_zero().clone(),
        source: vec![7u8; 4096],
        target,
        ctx,
    }
}

fn without_a_handshake_a_consumer_reads_before_the_producer_writes(fx: &Fixture) {
    // The control experiment: the driver really runs the two queues independently, so the next
    // case's data check can only pass through the handshake.
    let h = handshake(fx);
    let mut out = vec![0xEEu8; 4096];
    let held = fx.support.hold(0);
    // SAFETY: source, target and `out` outlive both copies (both queues are synchronised
    // below, before `out` is read).
    unsafe {
        append_copy(
            &h.producer,
            &h.ze,
            h.target.as_ptr().cast_mut(),
            h.source.as_ptr(),
            4096,
        );
        append_copy(
            &h.consumer,
            &h.ze,
            out.as_mut_ptr(),
            h.target.as_ptr(),
            4096,
        );
    }
    fx.support.settle();
    drop(held);
    h.consumer.synchronize().unwrap();
    h.producer.synchronize().unwrap();
    assert_eq!(
        out,
        vec![0u8; 4096],
        "the consumer ran before the producer's copy"
    );
    assert_eq!(h.target.to_vec().unwrap(), h.source);
}

fn a_consumer_queue_waits_for_the_producer_through_the_event_handshake(fx: &Fixture) {
    let h = handshake(fx);
    let hooks = h.ctx.hooks();
    let mut out = vec![0xEEu8; 4096];
    let held = fx.support.hold(0);
    // SAFETY: source and target outlive the copy (the producer is synchronised below).
    unsafe {
        append_copy(
            &h.producer,
            &h.ze,
            h.target.as_ptr().cast_mut(),
            h.source.as_ptr(),
            4096,
        )
    };
    // `__dlpack__(stream=consumer)` on the producer's side, then the consumer's read:
    let stream = usize::try_from(h.consumer.stream()).unwrap();
    hooks
        .make_ready(Device::oneapi(0), StreamRequest::Handle(stream))
        .unwrap();
    // SAFETY: target and `out` outlive the copy (the consumer is synchronised below).
    unsafe {
        append_copy(
            &h.consumer,
            &h.ze,
            out.as_mut_ptr(),
            h.target.as_ptr(),
            4096,
        )
    };
    // Everything that can run has run: without the handshake the consumer would have read by
    // now (see the previous case).
    fx.support.settle();
    drop(held);
    h.consumer.synchronize().unwrap();
    assert_eq!(out, h.source, "the consumer read the producer's data");
    // Asking again reuses the handshake events once the consumer has passed them.
    for _ in 0..40 {
        hooks
            .make_ready(Device::oneapi(0), StreamRequest::Handle(stream))
            .unwrap();
    }
    h.consumer.synchronize().unwrap();
}

fn waiting_on_the_host_returns_after_the_producer_work(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let shared = UsmBuffer::<u8>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Shared, 1024).unwrap();
    let source = vec![3u8; 1024];
    let producer = ctx.queue(&root(&ctx, 0)).unwrap();
    let ze = fx.driver.level_zero().clone();
    let held = fx.support.hold(0);
    // SAFETY: source and the shared buffer outlive the copy (waited for below).
    unsafe {
        append_copy(
            &producer,
            &ze,
            shared.as_ptr().cast_mut(),
            source.as_ptr(),
            1024,
        )
    };
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            hooks.wait_host(Device::oneapi(0)).unwrap();
            // Shared USM is read in place: the copy must be complete.
            shared.as_slice().unwrap().to_vec()
        });
        // Release the producer only once the waiter blocks in Level Zero (or, if wait_host
        // did not wait, has already read).
        while fx.support.host_waiters() == 0 && !waiter.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(held);
        assert_eq!(waiter.join().unwrap(), source);
    });
}

fn stream_values_that_are_not_queues_of_the_context_are_refused(fx: &Fixture) {
    let ctx = context(fx);
    let other = context(fx);
    let hooks = ctx.hooks();
    let foreign_queue = Queue::new(&other, &root(&other, 0)).unwrap();
    assert_eq!(
        hooks.make_ready(Device::oneapi(0), StreamRequest::NoSync),
        Ok(())
    );
    for request in [
        StreamRequest::Handle(0xdead_beef),
        StreamRequest::Handle(usize::try_from(foreign_queue.stream()).unwrap()),
        StreamRequest::LegacyDefault,
        StreamRequest::PerThreadDefault,
    ] {
        let err = hooks.make_ready(Device::oneapi(0), request).unwrap_err();
        assert_eq!(err.py_kind(), PyErrorKind::ValueError, "{request:?}: {err}");
    }
    let err = hooks
        .make_ready(Device::oneapi(0), StreamRequest::Handle(0xdead_beef))
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("stream=0xdeadbeef is not the command list of a live queue"),
        "{err}"
    );
    // A device the context does not have.
    let queue = Queue::new(&ctx, &root(&ctx, 1)).unwrap();
    let stream = usize::try_from(queue.stream()).unwrap();
    assert!(
        hooks
            .make_ready(Device::oneapi(2), StreamRequest::Handle(stream))
            .is_err()
    );
    assert!(hooks.wait_host(Device::oneapi(2)).is_err());
    // An adopted list resolves to the same queue, and is not destroyed twice.
    // SAFETY: the list of `queue`, alive while `queue` is.
    let adopted = unsafe { Queue::from_raw(&ctx, &root(&ctx, 1), queue.raw()) }.unwrap();
    assert_eq!(adopted.raw(), queue.raw());
    hooks
        .make_ready(Device::oneapi(0), StreamRequest::Handle(stream))
        .unwrap();
    queue.synchronize().unwrap();
}

fn a_numbering_table_renumbers_exports_and_claims(fx: &Fixture) {
    let devices = fx.driver.devices().unwrap();
    let table = DeviceNumbering::table([(devices[0].clone(), 3), (devices[1].clone(), 5)]);
    let ctx = Context::with_numbering(&fx.driver, table).unwrap();
    let hooks = ctx.hooks();
    assert_eq!(ctx.dlpack_device(&devices[1]).unwrap(), Device::oneapi(5));
    assert_eq!(ctx.ze_device(Device::oneapi(3)).unwrap(), devices[0]);
    let buffer = UsmBuffer::from_slice(&ctx, &devices[1], UsmKind::Device, &[1i32, 2]).unwrap();
    let address = buffer.as_ptr();
    let mut tensor = ManagedTensor::export(buffer).unwrap();
    assert_eq!(tensor.device(), Device::oneapi(5));
    assert_eq!(
        tensor.verify_device(&hooks).unwrap().unwrap().device,
        Device::oneapi(5)
    );
    // A claim in the default numbering is now wrong.
    let raw = foreign(
        address.cast(),
        Device::oneapi(1),
        DataType::I32,
        &[2],
        &[1],
        0,
    );
    with_foreign(raw, |mut t| {
        assert_eq!(
            t.verify_device(&hooks),
            Err(Error::DeviceMismatch {
                claimed: Device::oneapi(1),
                actual: Device::oneapi(5)
            })
        );
    });
    let err = ctx.ze_device(Device::oneapi(1)).unwrap_err();
    assert!(
        err.to_string().ends_with(
            "no Level Zero device of this context is numbered oneapi:1; its devices are [oneapi:3, oneapi:5]"
        ),
        "{err}"
    );
    // A device left out of the table has no number.
    let partial = Context::with_numbering(
        &fx.driver,
        DeviceNumbering::table([(devices[1].clone(), 0)]),
    )
    .unwrap();
    assert!(UsmBuffer::<u8>::zeroed(&partial, &devices[0], UsmKind::Host, 1).is_err());
    // Sub-devices cannot be numbered.
    let sub = devices[0].sub_devices().unwrap()[0].clone();
    let err = Context::with_numbering(&fx.driver, DeviceNumbering::table([(sub, 0)])).unwrap_err();
    assert!(err.to_string().contains("which is a sub-device"), "{err}");
}

fn an_exported_usm_buffer_is_reclaimed_without_a_copy(fx: &Fixture) {
    let ctx = context(fx);
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 0), UsmKind::Device, &f32s(3)).unwrap();
    let address = buffer.as_ptr();
    let raw = ManagedTensor::export(buffer).unwrap().into_raw().unwrap();
    // SAFETY: a live tensor we own.
    let tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let back: UsmBuffer<f32> = tensor.reclaim().unwrap();
    assert_eq!(back.as_ptr(), address);
    assert_eq!(back.to_vec().unwrap(), f32s(3));
    // A tensor that is not a UsmBuffer cannot be turned into one without a context.
    let cpu = ManagedTensor::export(vec![1.0f32]).unwrap();
    let err = <UsmBuffer<f32> as dlpack_core::Buffer>::copy_from_tensor(&cpu).unwrap_err();
    assert!(
        err.to_string().contains("UsmBuffer::from_tensor(&context"),
        "{err}"
    );
}

/// A user's struct with a USM data field: one derive makes it a DLPack producer and consumer.
#[derive(DLPack)]
struct Matrix {
    #[dlpack(data)]
    data: UsmBuffer<f32>,
    #[dlpack(shape)]
    shape: [usize; 2],
}

fn a_struct_with_a_usm_field_exports_any_layout_inside_it(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let data = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &f32s(6)).unwrap();
    let mut tensor = ManagedTensor::export(Matrix {
        data,
        shape: [2, 3],
    })
    .unwrap();
    assert_eq!(tensor.device(), Device::oneapi(1));
    assert_eq!(
        (tensor.shape(), tensor.strides()),
        (&[2i64, 3][..], &[3i64, 1][..])
    );
    assert_eq!(tensor.flags(), Flags::empty());
    tensor.verify_device(&hooks).unwrap();
    assert_eq!(tensor.to_host_vec::<f32>(&hooks).unwrap(), f32s(6));
    let address = tensor.data_ptr();
    let matrix = Matrix::try_from(tensor).unwrap(); // its own export: reclaimed, no copy
    assert_eq!(matrix.shape, [2, 3]);
    assert_eq!(
        matrix.data.as_ptr().cast::<core::ffi::c_void>(),
        address.cast_const()
    );
    // A shape that does not fit the buffer is refused by the export, and the buffer freed.
    let data = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &f32s(6)).unwrap();
    let err = ManagedTensor::export(Matrix {
        data,
        shape: [3, 3],
    })
    .unwrap_err()
    .error;
    assert!(matches!(err, Error::SpanOutsideAllocation { .. }), "{err}");
}

fn empty_buffers_export_without_allocating(fx: &Fixture) {
    let ctx = context(fx);
    let live = fx.support.live();
    for kind in [UsmKind::Device, UsmKind::Shared, UsmKind::Host] {
        let buffer = UsmBuffer::<f64>::from_slice(&ctx, &root(&ctx, 0), kind, &[]).unwrap();
        assert!(buffer.is_empty());
        assert_eq!(fx.support.live().allocations, live.allocations, "{kind}");
        let mut tensor = ManagedTensor::export(buffer).unwrap();
        assert_eq!(
            (tensor.shape(), tensor.device()),
            (&[0i64][..], Device::oneapi(0))
        );
        assert_eq!(tensor.verify_device(&ctx.hooks()), Ok(None));
        assert_eq!(
            tensor.to_host_vec::<f64>(&ctx.hooks()).unwrap(),
            Vec::<f64>::new()
        );
    }
}

fn buffers_keep_their_context_alive(fx: &Fixture) {
    let contexts = fx.support.live().contexts;
    let ctx = context(fx);
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &[4u64, 5]).unwrap();
    drop(ctx);
    assert_eq!(fx.support.live().contexts, contexts + 1);
    assert_eq!(buffer.to_vec().unwrap(), [4, 5]);
    drop(buffer);
    assert_eq!(
        fx.support.live().contexts,
        contexts,
        "the last user destroys the context"
    );
}

fn the_test_driver_refuses_to_destroy_a_context_that_still_has_allocations(fx: &Fixture) {
    // What makes the leak check after every case meaningful.
    let ze = fx.driver.level_zero();
    let api = ze.api();
    let desc = sys::ze_context_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_CONTEXT_DESC,
        pNext: core::ptr::null(),
        flags: 0,
    };
    let host = sys::ze_host_mem_alloc_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC,
        pNext: core::ptr::null(),
        flags: 0,
    };
    let mut ctx = core::ptr::null_mut();
    let mut ptr = core::ptr::null_mut();
    // SAFETY: raw calls with valid descriptors and out-pointers; the context and allocation
    // are released below.
    unsafe {
        assert_eq!(
            (api.zeContextCreate)(fx.driver.raw(), &desc, &mut ctx),
            sys::ZE_RESULT_SUCCESS
        );
        assert_eq!(
            (api.zeMemAllocHost)(ctx, &host, 8, 0, &mut ptr),
            sys::ZE_RESULT_SUCCESS
        );
        assert_eq!(
            (api.zeContextDestroy)(ctx),
            sys::ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE
        );
        assert_eq!((api.zeMemFree)(ctx, ptr), sys::ZE_RESULT_SUCCESS);
        assert_eq!((api.zeContextDestroy)(ctx), sys::ZE_RESULT_SUCCESS);
    }
    let _: LiveObjects = fx.support.live();
}

// --- device failures ------------------------------------------------------------------------
//
// The driver fails a named entry point on request (`DriverSupport::fail`), as a real driver does
// when the device is lost, and holds a device's command lists so that a copy is certainly still
// pending when the host wait for it fails. The crate must then return the error, panic nowhere,
// and release or reuse nothing that the pending work may still touch: the driver refuses and
// counts such releases (the misuse check after every case), and a pending copy runs once the
// hold ends, into memory that must still be there.

fn the_test_driver_refuses_to_release_what_unfinished_work_uses_and_injects_failures(fx: &Fixture) {
    // What makes the misuse check after every case meaningful.
    let ctx = context(fx);
    let ze = fx.driver.level_zero();
    let api = ze.api();
    let host = sys::ze_host_mem_alloc_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC,
        pNext: core::ptr::null(),
        flags: 0,
    };
    let list_desc = sys::ze_command_queue_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
        pNext: core::ptr::null(),
        ordinal: 0,
        index: 0,
        flags: 0,
        mode: sys::ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
        priority: sys::ZE_COMMAND_QUEUE_PRIORITY_NORMAL,
    };
    let pool_desc = sys::ze_event_pool_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
        pNext: core::ptr::null(),
        flags: sys::ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
        count: 1,
    };
    let event_desc = sys::ze_event_desc_t {
        stype: sys::ZE_STRUCTURE_TYPE_EVENT_DESC,
        pNext: core::ptr::null(),
        index: 0,
        signal: sys::ZE_EVENT_SCOPE_FLAG_HOST,
        wait: sys::ZE_EVENT_SCOPE_FLAG_HOST,
    };
    let (mut usm, mut list, mut pool, mut event) = (
        core::ptr::null_mut(),
        core::ptr::null_mut(),
        core::ptr::null_mut(),
        core::ptr::null_mut(),
    );
    let source = [7u8; 64];
    let ok = sys::ZE_RESULT_SUCCESS;
    let in_use = sys::ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
    let before = fx.support.misuses();
    // SAFETY: raw calls with live handles, valid descriptors and out-pointers; `source` and the
    // allocation outlive the copy (the list is drained before they go), and every object is
    // released below.
    unsafe {
        assert_eq!((api.zeMemAllocHost)(ctx.raw(), &host, 64, 64, &mut usm), ok);
        let device = root(&ctx, 0).raw();
        let created = (api.zeCommandListCreateImmediate)(ctx.raw(), device, &list_desc, &mut list);
        assert_eq!(created, ok);
        let no_devices = core::ptr::null_mut();
        let pooled = (api.zeEventPoolCreate)(ctx.raw(), &pool_desc, 0, no_devices, &mut pool);
        assert_eq!(pooled, ok);
        assert_eq!((api.zeEventCreate)(pool, &event_desc, &mut event), ok);
        let held = fx.support.hold(0);
        let copy = (api.zeCommandListAppendMemoryCopy)(
            list,
            usm,
            source.as_ptr().cast(),
            64,
            event,
            0,
            core::ptr::null_mut(),
        );
        assert_eq!(copy, ok);
        // A second copy behind the pending one with no barrier between: counted (on real
        // hardware the two may run at once).
        let unordered = (api.zeCommandListAppendMemoryCopy)(
            list,
            usm,
            source.as_ptr().cast(),
            64,
            core::ptr::null_mut(),
            0,
            core::ptr::null_mut(),
        );
        assert_eq!(unordered, ok);
        // The copy is pending: none of what it uses may go.
        assert_eq!((api.zeMemFree)(ctx.raw(), usm), in_use);
        assert_eq!((api.zeEventHostReset)(event), in_use);
        assert_eq!((api.zeEventDestroy)(event), in_use);
        assert_eq!((api.zeCommandListDestroy)(list), in_use);
        // A failure armed for the next host wait is returned once, without waiting.
        fx.support
            .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
        assert_eq!((api.zeEventHostSynchronize)(event, u64::MAX), LOST);
        assert_eq!((api.zeEventQueryStatus)(event), sys::ZE_RESULT_NOT_READY);
        drop(held);
        assert_eq!((api.zeEventHostSynchronize)(event, u64::MAX), ok);
        assert_eq!(core::slice::from_raw_parts(usm.cast::<u8>(), 64), source);
        // Signalling an event that is still signalled: counted.
        let no_waits = core::ptr::null_mut();
        assert_eq!(
            (api.zeCommandListAppendBarrier)(list, event, 0, no_waits),
            ok
        );
        // (A host wait would return at once, the event being signalled: settle instead.)
        fx.support.settle();
        // A failure after the call: the reset happens, the error is returned.
        fx.support
            .fail("zeEventHostReset", 0, 1, LOST, Failure::After);
        assert_eq!((api.zeEventHostReset)(event), LOST);
        assert_eq!((api.zeEventQueryStatus)(event), sys::ZE_RESULT_NOT_READY);
        // Skipped calls run; armed failures that no call returned are reported.
        fx.support
            .fail("zeEventQueryStatus", 1, 2, LOST, Failure::Instead);
        assert_eq!((api.zeEventQueryStatus)(event), sys::ZE_RESULT_NOT_READY);
        assert_eq!((api.zeEventQueryStatus)(event), LOST);
        assert_eq!(fx.support.clear_failures(), 1);
        assert_eq!((api.zeEventQueryStatus)(event), sys::ZE_RESULT_NOT_READY);
        assert_eq!((api.zeEventDestroy)(event), ok);
        assert_eq!((api.zeEventPoolDestroy)(pool), ok);
        assert_eq!((api.zeCommandListDestroy)(list), ok);
        assert_eq!((api.zeMemFree)(ctx.raw(), usm), ok);
    }
    // Only known entry points, real errors and known flags can be armed.
    let bad = sys::ZE_RESULT_ERROR_INVALID_ARGUMENT;
    assert_eq!(fx.support.arm("zeEventHostSync", 0, 1, LOST, 0), bad);
    assert_eq!(
        fx.support.arm("zeMemFree", 0, 1, sys::ZE_RESULT_SUCCESS, 0),
        bad
    );
    assert_eq!(fx.support.arm("zeMemFree", 0, 1, LOST, 2), bad);
    let misuses = Misuses {
        frees_in_use: 1,
        event_resets_in_use: 1,
        event_destroys_in_use: 1,
        list_destroys_in_use: 1,
        signalled_signal_events: 1,
        unordered_copies: 1,
    };
    let after = fx.support.misuses();
    assert_eq!(
        (
            after.frees_in_use - before.frees_in_use,
            after.event_resets_in_use - before.event_resets_in_use,
            after.event_destroys_in_use - before.event_destroys_in_use,
            after.list_destroys_in_use - before.list_destroys_in_use,
            after.signalled_signal_events - before.signalled_signal_events,
            after.unordered_copies - before.unordered_copies,
        ),
        (1, 1, 1, 1, 1, 1)
    );
    *fx.allowed_misuses.lock().unwrap() = misuses;
}

fn a_copy_whose_host_wait_fails_keeps_its_event_staging_buffer_and_source(fx: &Fixture) {
    let ctx = context(fx);
    let data = f32s(1000);
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 0), UsmKind::Device, &data).unwrap();
    let address = buffer.as_ptr().addr();
    let leaks = dlpack_oneapi::leaks();
    let held = fx.support.hold(0);
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    let err = buffer.to_vec().unwrap_err();
    assert_runtime_error(
        &err,
        &[
            "zeEventHostSynchronize returned ZE_RESULT_ERROR_DEVICE_LOST",
            "cannot confirm that the copy finished, so it may still be running",
            "leaked rather than reused or freed",
        ],
    );
    // The copy is still held: its event and the staging Vec it will write are kept.
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            host_bytes: 4000,
            ..Leaked::default()
        }
    );
    drop(held);
    fx.support.settle();
    // The copy ran (into the leaked Vec); the queue and the buffer go on working.
    assert_eq!(buffer.to_vec().unwrap(), data);
    drop(buffer);
    // The copy read the buffer while Level Zero could not tell: its allocation is kept.
    assert!(ctx.allocation_of(address).unwrap().is_some());
    drop(ctx);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            event_pools: 1,
            allocations: 1,
            contexts: 1,
            host_bytes: 4000,
            ..Leaked::default()
        }
    );
}

fn filling_device_memory_whose_host_wait_fails_keeps_the_allocation(fx: &Fixture) {
    let ctx = context(fx);
    let mut target = UsmBuffer::<f32>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Device, 8).unwrap();
    let target_address = target.as_ptr().addr();
    let data = f32s(256);
    let eights = [8.0f32; 8];
    let allocations = fx.support.live().allocations;
    let leaks = dlpack_oneapi::leaks();
    let held = [fx.support.hold(0), fx.support.hold(1)];
    let host_wait = "zeEventHostSynchronize";
    // A new buffer filled from the host: the allocation the held copy will write stays.
    fx.support.fail(host_wait, 0, 1, LOST, Failure::Instead);
    let err = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &data).unwrap_err();
    assert_runtime_error(
        &err,
        &["ZE_RESULT_ERROR_DEVICE_LOST", "may still be running"],
    );
    assert_eq!(fx.support.live().allocations, allocations + 1);
    // A zeroed one: the allocation and the zeros the held copy will read stay.
    fx.support.fail(host_wait, 0, 1, LOST, Failure::Instead);
    let err = UsmBuffer::<u32>::zeroed(&ctx, &root(&ctx, 1), UsmKind::Device, 64).unwrap_err();
    assert_runtime_error(&err, &["may still be running"]);
    assert_eq!(fx.support.live().allocations, allocations + 2);
    // An existing buffer overwritten from the host: kept when dropped.
    fx.support.fail(host_wait, 0, 1, LOST, Failure::Instead);
    let err = target.copy_from_host(&eights).unwrap_err();
    assert_runtime_error(&err, &["may still be running"]);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 3,
            allocations: 2,
            host_bytes: 256,
            ..Leaked::default()
        }
    );
    drop(held);
    fx.support.settle();
    // The held copies ran (`data` and `eights` are still here for them to read).
    assert_eq!(target.to_vec().unwrap(), eights);
    drop(target);
    assert!(ctx.allocation_of(target_address).unwrap().is_some());
    drop(ctx);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 3,
            event_pools: 2,
            allocations: 3,
            contexts: 1,
            host_bytes: 256,
            ..Leaked::default()
        }
    );
}

fn a_copy_hook_whose_host_wait_fails_leaves_the_callers_memory_to_the_copy(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 0), UsmKind::Device, &[9u8; 64]).unwrap();
    let address = buffer.as_ptr().addr();
    let leaks = dlpack_oneapi::leaks();
    // What `copy_to_host`'s contract asks after a `CopyInFlight`: the destination is leaked.
    let out: &'static mut [u8] = Box::leak(vec![0xEEu8; 64].into_boxed_slice());
    let held = fx.support.hold(0);
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    // SAFETY: the buffer is live USM of device 0 that nothing writes during the call; `out` is
    // leaked, as the contract asks after a `CopyInFlight`.
    let err = unsafe { hooks.copy_to_host(Device::oneapi(0), address, out) }.unwrap_err();
    let Error::CopyInFlight { runtime, message } = &err else {
        panic!("expected CopyInFlight, got {err:?}");
    };
    assert_eq!(*runtime, "Level Zero");
    assert!(message.contains("ZE_RESULT_ERROR_DEVICE_LOST"), "{message}");
    assert!(err.to_string().contains("destination was leaked"), "{err}");
    drop(held);
    fx.support.settle();
    assert_eq!(
        out, [9; 64],
        "the copy ran after the error, into the leaked memory"
    );
    // Through the tensor API: an error, not a panic, and dlpack-core leaks its staging buffer
    // (freed, the copy that runs after the error would write freed memory).
    let tensor = ManagedTensor::export(buffer).unwrap();
    let held = fx.support.hold(0);
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    let err = tensor.to_host_vec::<u8>(&hooks).unwrap_err();
    assert!(matches!(err, Error::CopyInFlight { .. }), "{err:?}");
    drop(held);
    fx.support.settle();
    // Into device memory: the destination is kept.
    let ones = [1u8; 64];
    let held = fx.support.hold(0);
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    // SAFETY: the tensor's memory is live USM of device 0 that nobody else accesses meanwhile.
    let err = unsafe { hooks.copy_from_host(Device::oneapi(0), &ones, address) }.unwrap_err();
    assert_runtime_error(&err, &["may still be running"]);
    drop(held);
    fx.support.settle();
    assert_eq!(tensor.to_host_vec::<u8>(&hooks).unwrap(), ones);
    drop(tensor);
    assert!(ctx.allocation_of(address).unwrap().is_some());
    drop((hooks, ctx));
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 3,
            event_pools: 1,
            allocations: 1,
            contexts: 1,
            ..Leaked::default()
        }
    );
}

fn a_failed_host_wait_is_unfinished_only_while_the_event_is_not_seen_signalled(fx: &Fixture) {
    let ctx = context(fx);
    let data: Vec<u16> = (0..100).collect();
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 1), UsmKind::Device, &data).unwrap();
    let queue = ctx.queue(&root(&ctx, 1)).unwrap();
    let leaks = dlpack_oneapi::leaks();
    // The wait fails after the copy has finished: the event is signalled, so nothing is kept;
    // the driver's error is still returned.
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::After);
    let err = buffer.to_vec().unwrap_err();
    assert_runtime_error(
        &err,
        &["zeEventHostSynchronize returned ZE_RESULT_ERROR_DEVICE_LOST"],
    );
    assert!(!err.to_string().contains("may still be running"), "{err}");
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::After);
    assert!(queue.synchronize().is_err());
    assert_eq!(Leaked::since(&leaks), Leaked::default());
    assert_eq!(buffer.to_vec().unwrap(), data);
    // When the event cannot be queried either, finished or not, nothing tells: kept.
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    fx.support
        .fail("zeEventQueryStatus", 0, 1, LOST, Failure::Instead);
    let err = buffer.to_vec().unwrap_err();
    assert_runtime_error(&err, &["may still be running"]);
    fx.support.settle();
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            host_bytes: 200,
            ..Leaked::default()
        }
    );
    drop((buffer, queue, ctx));
}

fn an_event_whose_reset_fails_is_retired_not_reused(fx: &Fixture) {
    let ctx = context(fx);
    let data = f32s(16);
    let buffer = UsmBuffer::from_slice(&ctx, &root(&ctx, 0), UsmKind::Device, &data).unwrap();
    let leaks = dlpack_oneapi::leaks();
    // The copy finished, but its event stays signalled: an error, and the event is retired.
    fx.support
        .fail("zeEventHostReset", 0, 1, LOST, Failure::Instead);
    let err = buffer.to_vec().unwrap_err();
    assert_runtime_error(
        &err,
        &[
            "zeEventHostReset returned ZE_RESULT_ERROR_DEVICE_LOST",
            "leaked rather than reused",
        ],
    );
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            ..Leaked::default()
        },
        "the copy finished: no memory is kept"
    );
    // The next copy gets another event and really waits for it: the still signalled one would
    // let the host go on before the copy has run.
    let held = fx.support.hold(0);
    std::thread::scope(|s| {
        let reader = s.spawn(|| buffer.to_vec());
        while fx.support.host_waiters() == 0 && !reader.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!reader.is_finished(), "the copy returned before it ran");
        drop(held);
        assert_eq!(reader.join().unwrap().unwrap(), data);
    });
    // A handshake's events whose reset fails when they are reclaimed are retired as well; the
    // handshake takes others. The producer's pool has 31 usable events (one is retired): 15
    // handshakes leave one free, so the next handshake's second event is a reclaimed one.
    let producer = ctx.queue(&root(&ctx, 0)).unwrap();
    let consumer = Queue::new(&ctx, &root(&ctx, 1)).unwrap();
    for _ in 0..15 {
        producer.make_ready_for(&consumer).unwrap();
    }
    consumer.synchronize().unwrap();
    fx.support
        .fail("zeEventHostReset", 0, 1, LOST, Failure::Instead);
    for _ in 0..20 {
        producer.make_ready_for(&consumer).unwrap();
    }
    consumer.synchronize().unwrap();
    assert_eq!(buffer.to_vec().unwrap(), data);
    drop((producer, consumer, buffer, ctx));
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 2,
            event_pools: 1,
            contexts: 1,
            ..Leaked::default()
        }
    );
}

fn a_synchronize_whose_host_wait_fails_retires_its_barrier_event(fx: &Fixture) {
    let ctx = context(fx);
    let hooks = ctx.hooks();
    let ze = fx.driver.level_zero().clone();
    let target = UsmBuffer::<u8>::zeroed(&ctx, &root(&ctx, 0), UsmKind::Shared, 512).unwrap();
    let source = vec![5u8; 512];
    let queue = ctx.queue(&root(&ctx, 0)).unwrap();
    let leaks = dlpack_oneapi::leaks();
    let held = fx.support.hold(0);
    // SAFETY: source and target outlive the copy (the queue is synchronised below).
    unsafe {
        append_copy(
            &queue,
            &ze,
            target.as_ptr().cast_mut(),
            source.as_ptr(),
            512,
        )
    };
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    let err = queue.synchronize().unwrap_err();
    assert_runtime_error(
        &err,
        &[
            "ZE_RESULT_ERROR_DEVICE_LOST",
            "cannot confirm that the work appended to the queue finished",
            "the event of the barrier that waits for it is leaked",
        ],
    );
    // The protocol's host wait (`__dlpack__(stream=None)` on the consumer's side).
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    let err = hooks.wait_host(Device::oneapi(0)).unwrap_err();
    assert_runtime_error(&err, &["may still be running"]);
    drop(held);
    // With no failure armed, the wait succeeds, after the copy.
    hooks
        .make_ready(Device::oneapi(0), StreamRequest::Default)
        .unwrap();
    assert_eq!(target.as_slice().unwrap(), source);
    drop((queue, hooks, target, ctx));
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 2,
            event_pools: 1,
            contexts: 1,
            ..Leaked::default()
        }
    );
}

fn a_failed_handshake_retires_the_producer_event_only_while_it_may_be_signalled(fx: &Fixture) {
    let h = handshake(fx);
    let leaks = dlpack_oneapi::leaks();
    let barrier = "zeCommandListAppendBarrier";
    // The producer's barrier is appended, the consumer's is not; the producer's event is seen
    // signalled, so both events are reused.
    fx.support.fail(barrier, 1, 1, LOST, Failure::Instead);
    let err = h.producer.make_ready_for(&h.consumer).unwrap_err();
    assert_runtime_error(
        &err,
        &["zeCommandListAppendBarrier returned ZE_RESULT_ERROR_DEVICE_LOST"],
    );
    assert_eq!(Leaked::since(&leaks), Leaked::default());
    // Now the producer is held and the wait for its event fails: its barrier may still signal
    // the event, which is retired rather than reset under it.
    let held = fx.support.hold(0);
    fx.support.fail(barrier, 1, 1, LOST, Failure::Instead);
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    let err = h.producer.make_ready_for(&h.consumer).unwrap_err();
    assert_runtime_error(&err, &["zeCommandListAppendBarrier"]);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            ..Leaked::default()
        }
    );
    drop(held);
    fx.support.settle();
    // Handshakes go on with other events.
    for _ in 0..40 {
        h.producer.make_ready_for(&h.consumer).unwrap();
    }
    h.consumer.synchronize().unwrap();
    drop(h);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 1,
            event_pools: 1,
            contexts: 1,
            ..Leaked::default()
        }
    );
}

fn a_queue_dropped_while_its_work_cannot_be_waited_for_leaks_its_list_and_events(fx: &Fixture) {
    let ctx = context(fx);
    let ze = fx.driver.level_zero().clone();
    let lists = fx.support.live().command_lists;
    let leaks = dlpack_oneapi::leaks();
    // A queue with a held copy whose final wait fails: the list, which will still run the copy
    // and the barrier, is not destroyed, nor the barrier's event.
    let queue = Queue::new(&ctx, &root(&ctx, 0)).unwrap();
    let source = vec![1u8; 256];
    let mut sink = vec![0u8; 256];
    let held = fx.support.hold(0);
    // SAFETY: source and sink outlive the copy: they stay until the list has run (settle below).
    unsafe { append_copy(&queue, &ze, sink.as_mut_ptr(), source.as_ptr(), 256) };
    fx.support
        .fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
    drop(queue);
    assert_eq!(fx.support.live().command_lists, lists + 1);
    drop(held);
    fx.support.settle();
    assert_eq!(sink, source, "the leaked list ran the copy");
    // A producer dropped while a consumer's barrier that waits on its handshake events is held
    // and the wait for it fails: both events stay for the barrier.
    let producer = Queue::new(&ctx, &root(&ctx, 0)).unwrap();
    let consumer = Queue::new(&ctx, &root(&ctx, 1)).unwrap();
    let held = fx.support.hold(1);
    producer.make_ready_for(&consumer).unwrap();
    // The drop's own synchronisation waits (device 0 runs); the wait for the handshake fails.
    fx.support
        .fail("zeEventHostSynchronize", 1, 1, LOST, Failure::Instead);
    drop(producer);
    drop(held);
    consumer.synchronize().unwrap();
    drop(consumer);
    // A queue whose final barrier is seen finished but whose event cannot be reset: the list is
    // idle and destroyed; only that event, and its pool, stay.
    let queue = Queue::new(&ctx, &root(&ctx, 1)).unwrap();
    fx.support
        .fail("zeEventHostReset", 0, 1, LOST, Failure::Instead);
    drop(queue);
    assert_eq!(fx.support.live().command_lists, lists + 1);
    drop(ctx);
    assert_eq!(
        Leaked::since(&leaks),
        Leaked {
            events: 4,
            event_pools: 3,
            command_lists: 1,
            contexts: 1,
            ..Leaked::default()
        }
    );
}
