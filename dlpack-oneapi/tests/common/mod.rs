//! Shared by the test binaries that run the real Level Zero loader: a small test harness (these
//! binaries set environment variables before any thread exists, so they have their own `main`),
//! the "not run" rule, and the test driver's location and test-support exports.

#![allow(dead_code)] // each test binary uses a part

use std::ffi::OsString;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

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

/// A named test case taking the suite's fixture.
pub(crate) type Case<X> = (&'static str, fn(&X));

/// `cases![Fixture; a, b]`: the cases `a` and `b`, named after their functions.
macro_rules! cases {
    ($fixture:ty; $($case:ident),* $(,)?) => {
        &[$((stringify!($case), $case as fn(&$fixture))),*]
    };
}
pub(crate) use cases;

/// Runs `cases` like libtest does: `cargo test -- <filter>` selects by substring (`--exact`: by
/// name), `--list` lists, other flags are ignored. Each case runs in `around`, which can check
/// for leaks. Returns failure if any case panicked.
pub(crate) fn run_cases<X>(
    suite: &str,
    fixture: &X,
    cases: &[Case<X>],
    around: impl Fn(&str, &dyn Fn()),
) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exact = args.iter().any(|a| a == "--exact");
    if args.iter().any(|a| a == "--list") {
        for (name, _) in cases {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let selected: Vec<_> = cases
        .iter()
        .filter(|(name, _)| {
            filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        name == f
                    } else {
                        name.contains(f.as_str())
                    }
                })
        })
        .collect();
    println!("\nrunning {} tests ({suite})", selected.len());
    let mut failed = Vec::new();
    for (name, case) in &selected {
        let outcome = catch_unwind(AssertUnwindSafe(|| around(name, &|| case(fixture))));
        match outcome {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    let filtered = cases.len() - selected.len();
    if failed.is_empty() {
        println!(
            "\ntest result: ok. {} passed; 0 failed; {filtered} filtered out ({suite})\n",
            selected.len()
        );
        ExitCode::SUCCESS
    } else {
        println!("\nfailures ({suite}):");
        for name in &failed {
            println!("    {name}");
        }
        println!(
            "\ntest result: FAILED. {} passed; {} failed; {filtered} filtered out ({suite})\n",
            selected.len() - failed.len(),
            failed.len()
        );
        ExitCode::FAILURE
    }
}

/// The test driver library: `$DLPACK_ONEAPI_TEST_DRIVER`, or built now with
/// `cargo build -p dlpack-oneapi-test-driver`.
///
/// The nested cargo shares the workspace's target directory. That does not deadlock: cargo
/// releases its build lock before it runs test binaries (checked with cargo 1.95). If another
/// cargo is building, this one waits for the lock like any build.
///
/// `Err` with `Some(reason)` when cargo cannot be run (the tests then do not run); a build that
/// fails is a panic, since the driver is part of this workspace.
pub(crate) fn test_driver() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(DRIVER_PATH_VAR).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{DRIVER_PATH_VAR}={} is not a file; expected the path of libdlpack_oneapi_test_driver.so",
            path.display()
        );
        return Ok(path);
    }
    let cargo: OsString = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(&cargo)
        .args([
            "build",
            "-p",
            "dlpack-oneapi-test-driver",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(manifest_dir)
        .output()
        .map_err(|e| {
            format!(
                "cannot run cargo ({}) to build the test driver: {e}; set {DRIVER_PATH_VAR}",
                cargo.to_string_lossy()
            )
        })?;
    assert!(
        output.status.success(),
        "building the test driver (cargo build -p dlpack-oneapi-test-driver) failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = stdout
        .lines()
        .filter(|l| l.contains("\"compiler-artifact\"") && l.contains("dlpack_oneapi_test_driver"))
        .find_map(|l| {
            let rest = &l[l.find("\"filenames\":[\"")? + 14..];
            let end = rest.find('"')?;
            Some(PathBuf::from(rest[..end].replace("\\\\", "\\")))
        })
        .unwrap_or_else(|| panic!("cargo built no libdlpack_oneapi_test_driver.so:\n{stdout}"));
    assert!(
        path.is_file(),
        "cargo reported {}, which is not a file",
        path.display()
    );
    Ok(path)
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
