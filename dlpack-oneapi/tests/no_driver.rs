//! The real Level Zero loader with no driver: every entry point this crate binds returns the
//! documented `ZE_RESULT_ERROR_UNINITIALIZED`, and the safe API turns that into error values.
//! Nothing crashes.
//!
//! `ZE_ENABLE_ALT_DRIVERS` is pointed at a library that does not exist, so the loader has no
//! driver even on a machine with an Intel GPU driver installed. When the loader itself is not
//! installed, the suite prints NOT RUN (a failure with `DLPACK_REQUIRE_ZE_LOADER=1`), except for
//! the test of a missing loader, which needs none.

mod common;

use std::process::ExitCode;
use std::ptr::{null, null_mut};

use dlpack_core::Error;
use dlpack_oneapi::LevelZero;
use dlpack_oneapi::sys::{self, ze_result_t};

const SUITE: &str = "no_driver";

fn main() -> ExitCode {
    // SAFETY: `main` runs before any other thread of this process exists.
    unsafe {
        std::env::set_var(
            "ZE_ENABLE_ALT_DRIVERS",
            "/nonexistent/libze_no_such_driver.so",
        )
    };
    let loader_missing = common::loader_error();
    let mut cases: Vec<common::Case<()>> =
        common::cases![(); a_missing_loader_is_an_error_value_that_says_how_to_install_it].to_vec();
    if loader_missing.is_none() {
        cases.extend_from_slice(common::cases![();
            every_bound_entry_point_returns_uninitialized,
            loading_without_a_driver_is_an_error_value_naming_the_result,
        ]);
    }
    let code = common::run_cases(SUITE, &(), &cases, |_, case| case());
    match loader_missing {
        Some(why) => {
            let skipped = common::not_run(
                SUITE,
                &format!("the tests that need the Level Zero loader ({why})"),
            );
            if code == ExitCode::SUCCESS {
                skipped
            } else {
                code
            }
        }
        None => code,
    }
}

fn a_missing_loader_is_an_error_value_that_says_how_to_install_it(_: &()) {
    // SAFETY: nothing exists at this path, so nothing is loaded.
    let err = unsafe { LevelZero::open("/nonexistent/libze_loader.so.1") }.unwrap_err();
    let Error::Runtime { runtime, message } = &err else {
        panic!("expected Error::Runtime, got {err:?}");
    };
    assert_eq!(*runtime, "Level Zero");
    assert!(
        message.starts_with("cannot open the Level Zero loader /nonexistent/libze_loader.so.1 ("),
        "{message}"
    );
    assert!(
        message.ends_with("install it (Debian: apt-get install libze1)"),
        "{message}"
    );
}

fn loading_without_a_driver_is_an_error_value_naming_the_result(_: &()) {
    let err = LevelZero::load().unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "Level Zero: zeInit returned ZE_RESULT_ERROR_UNINITIALIZED (0x78000001), expected \
             ZE_RESULT_SUCCESS; the Level Zero loader found no driver"
        ),
        "{text}"
    );
    // The loader opens fine; it is initialisation and everything after it that fails.
    // SAFETY: the system's Level Zero loader.
    let ze = unsafe { LevelZero::open(LevelZero::LOADER) }.expect("the loader opens");
    assert!(ze.init().is_err());
    let err = ze.drivers().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("Level Zero: zeDriverGet returned ZE_RESULT_ERROR_UNINITIALIZED"),
        "{err}"
    );
}

fn every_bound_entry_point_returns_uninitialized(_: &()) {
    // SAFETY: the system's Level Zero loader.
    let ze = unsafe { LevelZero::open(LevelZero::LOADER) }.expect("the loader opens");
    let api = ze.api();
    let mut count = 0u32;
    // SAFETY: with no driver the loader returns before looking at any argument (it finds no
    // function in its dispatch table); the arguments are NULL or point to valid locals all the
    // same, so even a loader that looked would find nothing invalid beyond NULL handles.
    let results: Vec<(&str, ze_result_t)> = unsafe {
        vec![
            ("zeInit", (api.zeInit)(0)),
            ("zeDriverGet", (api.zeDriverGet)(&mut count, null_mut())),
            (
                "zeDriverGetApiVersion",
                (api.zeDriverGetApiVersion)(null_mut(), null_mut()),
            ),
            (
                "zeDeviceGet",
                (api.zeDeviceGet)(null_mut(), &mut count, null_mut()),
            ),
            (
                "zeDeviceGetSubDevices",
                (api.zeDeviceGetSubDevices)(null_mut(), &mut count, null_mut()),
            ),
            (
                "zeDeviceGetProperties",
                (api.zeDeviceGetProperties)(null_mut(), null_mut()),
            ),
            (
                "zeContextCreate",
                (api.zeContextCreate)(null_mut(), null(), null_mut()),
            ),
            ("zeContextDestroy", (api.zeContextDestroy)(null_mut())),
            (
                "zeMemAllocDevice",
                (api.zeMemAllocDevice)(null_mut(), null(), 64, 64, null_mut(), null_mut()),
            ),
            (
                "zeMemAllocShared",
                (api.zeMemAllocShared)(null_mut(), null(), null(), 64, 64, null_mut(), null_mut()),
            ),
            (
                "zeMemAllocHost",
                (api.zeMemAllocHost)(null_mut(), null(), 64, 64, null_mut()),
            ),
            ("zeMemFree", (api.zeMemFree)(null_mut(), null_mut())),
            (
                "zeMemGetAllocProperties",
                (api.zeMemGetAllocProperties)(null_mut(), null(), null_mut(), null_mut()),
            ),
            (
                "zeMemGetAddressRange",
                (api.zeMemGetAddressRange)(null_mut(), null(), null_mut(), null_mut()),
            ),
            (
                "zeCommandListCreateImmediate",
                (api.zeCommandListCreateImmediate)(null_mut(), null_mut(), null(), null_mut()),
            ),
            (
                "zeCommandListDestroy",
                (api.zeCommandListDestroy)(null_mut()),
            ),
            (
                "zeCommandListAppendMemoryCopy",
                (api.zeCommandListAppendMemoryCopy)(
                    null_mut(),
                    null_mut(),
                    null(),
                    0,
                    null_mut(),
                    0,
                    null_mut(),
                ),
            ),
            (
                "zeCommandListAppendBarrier",
                (api.zeCommandListAppendBarrier)(null_mut(), null_mut(), 0, null_mut()),
            ),
            (
                "zeEventPoolCreate",
                (api.zeEventPoolCreate)(null_mut(), null(), 0, null_mut(), null_mut()),
            ),
            ("zeEventPoolDestroy", (api.zeEventPoolDestroy)(null_mut())),
            (
                "zeEventCreate",
                (api.zeEventCreate)(null_mut(), null(), null_mut()),
            ),
            ("zeEventDestroy", (api.zeEventDestroy)(null_mut())),
            (
                "zeEventHostSynchronize",
                (api.zeEventHostSynchronize)(null_mut(), 0),
            ),
            ("zeEventQueryStatus", (api.zeEventQueryStatus)(null_mut())),
            ("zeEventHostReset", (api.zeEventHostReset)(null_mut())),
        ]
    };
    // Every bound function is here, once.
    let mut called: Vec<&str> = results.iter().map(|r| r.0).collect();
    let mut bound: Vec<&str> = sys::FUNCTIONS.iter().map(|f| f.name).collect();
    called.sort_unstable();
    bound.sort_unstable();
    assert_eq!(
        called, bound,
        "the calls above must cover sys::FUNCTIONS exactly"
    );
    let wrong: Vec<String> = results
        .iter()
        .filter(|(_, r)| *r != sys::ZE_RESULT_ERROR_UNINITIALIZED)
        .map(|(name, r)| format!("{name} returned {}", sys::describe_result(*r)))
        .collect();
    assert!(
        wrong.is_empty(),
        "expected ZE_RESULT_ERROR_UNINITIALIZED from every entry point: {wrong:?}"
    );
}
