//! End to end through the real Level Zero loader and the workspace's test-support driver
//! (`dlpack-oneapi-test-driver`, loaded with `ZE_ENABLE_ALT_DRIVERS`): two root devices with two
//! sub-devices each, host memory standing in for device memory, command lists running on worker
//! threads. Export, import, pointer -> device, contexts, spans, copies and the queue handshake.
//!
//! The suite runs four times, each in its own process (the loader reads its configuration once):
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

#[path = "../common/mod.rs"]
mod common;

mod helpers;

// The cases, by API family.
mod contexts;
mod copies;
mod export;
mod failures;
mod pointers;
mod queues;

use std::process::{Command, ExitCode};
use std::sync::Mutex;

use dlpack_oneapi::{Driver, LevelZero};

use common::{DriverSupport, LiveObjects, Misuses};
use contexts::{
    a_numbering_table_renumbers_exports_and_claims,
    adopting_needs_a_driver_of_the_loader_and_a_context_handle,
    an_adopted_context_resolves_its_makers_memory_and_is_left_to_its_maker,
    buffers_keep_their_context_alive,
    the_loader_lists_one_driver_with_two_root_devices_and_their_sub_devices,
    the_test_driver_refuses_to_destroy_a_context_that_still_has_allocations,
};
use copies::{
    copies_from_memory_of_another_context_are_refused, host_data_is_copied_into_device_memory,
    strided_device_tensors_are_copied_to_the_host_in_row_major_order,
};
use export::{
    a_struct_with_a_usm_field_exports_any_layout_inside_it,
    an_exported_usm_buffer_is_reclaimed_without_a_copy,
    device_usm_exports_as_oneapi_with_its_root_device_number,
    empty_buffers_export_without_allocating,
    shared_and_host_usm_import_as_views_of_the_same_memory,
};
use failures::{
    a_copy_hook_whose_host_wait_fails_leaves_the_callers_memory_to_the_copy,
    a_copy_whose_host_wait_fails_keeps_its_event_staging_buffer_and_source,
    a_failed_handshake_retires_the_producer_event_only_while_it_may_be_signalled,
    a_failed_host_wait_is_unfinished_only_while_the_event_is_not_seen_signalled,
    a_queue_dropped_while_its_work_cannot_be_waited_for_leaks_its_list_and_events,
    a_synchronize_whose_host_wait_fails_retires_its_barrier_event,
    an_event_whose_reset_fails_is_retired_not_reused,
    filling_device_memory_whose_host_wait_fails_keeps_the_allocation,
    the_test_driver_refuses_to_release_what_unfinished_work_uses_and_injects_failures,
};
use helpers::Leaked;
use pointers::{
    a_pointer_from_another_context_is_refused_as_unknown,
    a_tensor_claiming_the_wrong_device_is_refused,
    a_tensor_reaching_past_its_allocation_is_refused,
    host_memory_claimed_as_oneapi_is_refused_as_unknown,
    pointers_resolve_to_their_owning_device_on_two_devices,
    sub_device_memory_exports_and_resolves_as_its_root_device,
};
use queues::{
    a_consumer_queue_waits_for_the_producer_through_the_event_handshake,
    stream_values_that_are_not_queues_of_the_context_are_refused,
    waiting_on_the_host_returns_after_the_producer_work,
    without_a_handshake_a_consumer_reads_before_the_producer_writes,
};

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
