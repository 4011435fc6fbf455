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

/// `Misuses` of the test driver (test-driver/src/lib.rs): calls that would have let unfinished
/// device work touch something released or reused.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Misuses {
    pub(crate) frees_in_use: u64,
    pub(crate) event_resets_in_use: u64,
    pub(crate) event_destroys_in_use: u64,
    pub(crate) list_destroys_in_use: u64,
    pub(crate) signalled_signal_events: u64,
    pub(crate) unordered_copies: u64,
}

type ZeResult = dlpack_oneapi::sys::ze_result_t;
type FailFn = unsafe extern "C" fn(*const core::ffi::c_char, u32, u32, ZeResult, u32) -> ZeResult;
type MisusesFn = unsafe extern "C" fn(*mut Misuses, usize) -> core::ffi::c_int;

/// The test driver's test-support exports, from the very library the loader loaded (opening
/// the same path again returns the already loaded instance).
pub(crate) struct DriverSupport {
    live: unsafe extern "C" fn(*mut LiveObjects),
    hold: extern "C" fn(u32, u32) -> ZeResult,
    settle: extern "C" fn(),
    host_waiters: extern "C" fn() -> u64,
    fail: FailFn,
    clear_failures: extern "C" fn() -> u64,
    misuses: MisusesFn,
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
            let fail = *library
                .get::<FailFn>("dlpack_oneapi_test_driver_fail")
                .expect("the test driver exports dlpack_oneapi_test_driver_fail");
            let clear_failures = *library
                .get::<extern "C" fn() -> u64>("dlpack_oneapi_test_driver_clear_failures")
                .expect("the test driver exports dlpack_oneapi_test_driver_clear_failures");
            let misuses = *library
                .get::<MisusesFn>("dlpack_oneapi_test_driver_misuses")
                .expect("the test driver exports dlpack_oneapi_test_driver_misuses");
            DriverSupport {
                live,
                hold,
                settle,
                host_waiters,
                fail,
                clear_failures,
                misuses,
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

    /// Makes the calls of Level Zero entry point `entry` after the next `skip` fail with
    /// `result`, `count` times, doing nothing ([`Failure::Instead`]) or after doing the call
    /// ([`Failure::After`]).
    pub(crate) fn fail(&self, entry: &str, skip: u32, count: u32, result: ZeResult, how: Failure) {
        let r = self.arm(entry, skip, count, result, how as u32);
        assert_eq!(r, dlpack_oneapi::sys::ZE_RESULT_SUCCESS, "fail({entry})");
    }

    /// `dlpack_oneapi_test_driver_fail` itself: arms a failure, returning the driver's answer.
    pub(crate) fn arm(
        &self,
        entry: &str,
        skip: u32,
        count: u32,
        result: ZeResult,
        flags: u32,
    ) -> ZeResult {
        let name = std::ffi::CString::new(entry).expect("an entry point name");
        // SAFETY: a NUL-terminated name.
        unsafe { (self.fail)(name.as_ptr(), skip, count, result, flags) }
    }

    /// Disarms every failure; how many armed failures no call had returned yet.
    pub(crate) fn clear_failures(&self) -> u64 {
        (self.clear_failures)()
    }

    /// The driver's misuse counts since it was loaded.
    pub(crate) fn misuses(&self) -> Misuses {
        let mut out = Misuses::default();
        // SAFETY: a valid out-pointer of the size passed.
        let r = unsafe { (self.misuses)(&mut out, size_of::<Misuses>()) };
        assert_eq!(
            r, 0,
            "dlpack_oneapi_test_driver_misuses agrees on the struct"
        );
        out
    }
}

/// How an injected failure fails ([`DriverSupport::fail`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Failure {
    /// The call does nothing and returns the error.
    Instead = 0,
    /// The call does its work (a host wait waits), then returns the error.
    After = 1,
}

/// A hold on a root device's command lists ([`DriverSupport::hold`]), released on drop.
pub(crate) struct Held<'a>(&'a DriverSupport, u32);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let _ = (self.0.hold)(self.1, 0);
    }
}
