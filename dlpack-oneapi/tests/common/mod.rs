//! Shared by the test binaries that run the real Level Zero loader: a small test harness (these
//! binaries set environment variables before any thread exists, so they have their own `main`),
//! the "not run" rule, and the test driver's location and test-support exports.

#![allow(dead_code)] // each test binary uses a part

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `DLPACK_REQUIRE_ZE_LOADER=1` turns "the loader is not installed" (and "the test driver cannot
/// be built") from a printed NOT RUN into a failure. The workspace's test command sets it.
pub(crate) const REQUIRE_LOADER_VAR: &str = "DLPACK_REQUIRE_ZE_LOADER";

/// The path of a prebuilt test driver; when unset, the tests build it with cargo.
pub(crate) const DRIVER_PATH_VAR: &str = "DLPACK_ONEAPI_TEST_DRIVER";

/// Reports that a suite cannot run: a printed NOT RUN line and success, or a failure when
/// [`REQUIRE_LOADER_VAR`] is `1`.
pub(crate) fn not_run(suite: &str, why: &str) -> ExitCode {
    if std::env::var_os(REQUIRE_LOADER_VAR).is_some_and(|v| v == "1") {
        eprintln!("{suite}: FAILED: {why}, and {REQUIRE_LOADER_VAR}=1 demands these tests");
        ExitCode::FAILURE
    } else {
        println!(
            "{suite}: NOT RUN: {why}. These tests did not run; install Debian's libze1 \
             (scripts/test does) or set {REQUIRE_LOADER_VAR}=1 to make this an error."
        );
        ExitCode::SUCCESS
    }
}

/// Whether the system's Level Zero loader can be opened.
pub(crate) fn loader_error() -> Option<String> {
    // SAFETY: the system's Level Zero loader, by its soname.
    match unsafe { dlpack_oneapi::LevelZero::open(dlpack_oneapi::LevelZero::LOADER) } {
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

pub(crate) use dlpack_testing::harness::{Case, cases};

/// Runs `cases` like libtest does ([`dlpack_testing::harness::run_cases`] over this process's
/// arguments), each inside `around`, which can check for leaks; prints the summary and returns
/// failure if any case panicked.
pub(crate) fn run_cases<X>(
    suite: &str,
    fixture: &X,
    cases: &[Case<X>],
    around: impl Fn(&str, &dyn Fn()),
) -> ExitCode {
    let args = dlpack_testing::harness::test_args();
    dlpack_testing::harness::run_cases(suite, fixture, cases, &args, around).report(suite)
}

/// The test driver library: `$DLPACK_ONEAPI_TEST_DRIVER`, or built now with
/// `cargo build -p dlpack-oneapi-test-driver` ([`dlpack_testing::harness::workspace_cdylib`]).
///
/// `Err` with the reason when cargo cannot be run (the tests then do not run); a build that
/// fails is a panic, since the driver is part of this workspace.
pub(crate) fn test_driver() -> Result<PathBuf, String> {
    dlpack_testing::harness::workspace_cdylib(
        "dlpack-oneapi-test-driver",
        "dlpack_oneapi_test_driver",
        DRIVER_PATH_VAR,
        Path::new(env!("CARGO_MANIFEST_DIR")),
    )
}

/// `LiveObjects` of the test driver (test-driver/src/lib.rs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveObjects {
    pub(crate) contexts: u64,
    pub(crate) allocations: u64,
    pub(crate) command_lists: u64,
    pub(crate) event_pools: u64,
    pub(crate) events: u64,
    pub(crate) refused_releases: u64,
}

/// The test driver's test-support exports, from the very library the loader loaded (opening
/// the same path again returns the already loaded instance).
pub(crate) struct DriverSupport {
    live: unsafe extern "C" fn(*mut LiveObjects),
    hold: extern "C" fn(u32, u32) -> dlpack_oneapi::sys::ze_result_t,
    settle: extern "C" fn(),
    host_waiters: extern "C" fn() -> u64,
    _library: libloading::Library,
}

impl DriverSupport {
    pub(crate) fn open(path: &Path) -> Self {
        // SAFETY: the workspace's test driver, already loaded by the Level Zero loader; its
        // initialisers are Rust's, and the symbols have the types declared in its lib.rs.
        unsafe {
            let library = libloading::Library::new(path).expect("open the test driver");
            let live = *library
                .get::<unsafe extern "C" fn(*mut LiveObjects)>(
                    "dlpack_oneapi_test_driver_live_objects",
                )
                .expect("the test driver exports dlpack_oneapi_test_driver_live_objects");
            let hold = *library
                .get::<extern "C" fn(u32, u32) -> dlpack_oneapi::sys::ze_result_t>(
                    "dlpack_oneapi_test_driver_hold",
                )
                .expect("the test driver exports dlpack_oneapi_test_driver_hold");
            let settle = *library
                .get::<extern "C" fn()>("dlpack_oneapi_test_driver_settle")
                .expect("the test driver exports dlpack_oneapi_test_driver_settle");
            let host_waiters = *library
                .get::<extern "C" fn() -> u64>("dlpack_oneapi_test_driver_host_waiters")
                .expect("the test driver exports dlpack_oneapi_test_driver_host_waiters");
            DriverSupport {
                live,
                hold,
                settle,
                host_waiters,
                _library: library,
            }
        }
    }

    /// The driver's live objects now.
    pub(crate) fn live(&self) -> LiveObjects {
        let mut out = LiveObjects::default();
        // SAFETY: a valid out-pointer.
        unsafe { (self.live)(&mut out) };
        out
    }

    /// Stops the command lists of root device `root` until the guard is dropped (also when a
    /// test panics, so a failing case cannot wedge the next ones).
    pub(crate) fn hold(&self, root: u32) -> Held<'_> {
        let r = (self.hold)(root, 1);
        assert_eq!(r, dlpack_oneapi::sys::ZE_RESULT_SUCCESS, "hold({root})");
        Held(self, root)
    }

    /// Returns once every command list has run everything or waits for a hold or an event.
    pub(crate) fn settle(&self) {
        (self.settle)();
    }

    /// Host threads blocked in `zeEventHostSynchronize`.
    pub(crate) fn host_waiters(&self) -> u64 {
        (self.host_waiters)()
    }
}

/// A hold on a root device's command lists ([`DriverSupport::hold`]), released on drop.
pub(crate) struct Held<'a>(&'a DriverSupport, u32);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let _ = (self.0.hold)(self.1, 0);
    }
}
