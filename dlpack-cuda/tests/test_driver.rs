//! The CUDA suite (`tests/suite`) on any machine, through the workspace's libcuda stand-in
//! (`dlpack-cuda/test-driver`): cudarc's real dynamic loading, this crate's real driver calls,
//! device memory the host cannot read, asynchronous streams. After every case the stand-in's
//! live objects (allocations, streams, events) and its count of refused calls must be what they
//! were before it: a leak, a double free or a call the driver refuses fails the case.
//!
//! The suite runs twice: with stream-ordered allocation (memory pools, what current GPUs
//! offer), then, in a child process, without (`cuMemAlloc` and `cuMemFree`, what cudarc falls
//! back to on drivers without pools), with pointer queries that fail on a thread without a
//! current context (as on some drivers; the crate retries in device 0's context) and with
//! pointer queries that fail when they ask pinned memory for its range (the driver API
//! documents the range for device allocations only; the crate asks again without it).
//!
//! The stand-in is built with `cargo build -p dlpack-cuda-test-driver`, or taken from
//! `DLPACK_CUDA_TEST_DRIVER` (a path). It is opened by its path before any driver call; its
//! soname is `libcuda.so`, so cudarc's `dlopen("libcuda.so")` finds it already loaded.

use std::ffi::c_void;
use std::path::Path;
use std::process::{Command, ExitCode};

use dlpack_cuda::cudarc::driver::{CudaContext, sys};
use dlpack_cuda::{load_driver, open_device};
use dlpack_testing::cuda_stand_in::Support;
use dlpack_testing::harness::{run_cases, test_args, workspace_cdylib};

mod suite;

const SUITE: &str = "dlpack-cuda suite on the libcuda stand-in";

/// Set to `0` in the child process that runs the suite without memory pools.
const POOLS_VAR: &str = "DLPACK_CUDA_TEST_DRIVER_POOLS";
/// Set to `1` in that child too: pointer queries then need a current context, as on some
/// drivers (the crate retries with device 0's context).
const ATTRIBUTES_VAR: &str = "DLPACK_CUDA_TEST_DRIVER_ATTRIBUTES_NEED_CONTEXT";
/// Set to `0` in that child too: pointer queries then fail when they ask pinned memory for its
/// range (the crate asks again for the memory kind alone).
const HOST_RANGES_VAR: &str = "DLPACK_CUDA_TEST_DRIVER_HOST_RANGES";

fn main() -> ExitCode {
    if cfg!(miri) {
        println!("{SUITE}: did not run under Miri (it loads a shared library)");
        return ExitCode::SUCCESS;
    }
    let path = match workspace_cdylib(
        "dlpack-cuda-test-driver",
        "dlpack_cuda_test_driver",
        "DLPACK_CUDA_TEST_DRIVER",
        Path::new(env!("CARGO_MANIFEST_DIR")),
    ) {
        Ok(path) => path,
        Err(why) => {
            eprintln!("{SUITE}: FAILED: {why}");
            return ExitCode::FAILURE;
        }
    };
    // SAFETY: the workspace's stand-in, whose initialisers only set up Rust statics.
    let library = unsafe { libloading::Library::new(&path) }
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let pools = std::env::var(POOLS_VAR).as_deref() != Ok("0");
    let context_less_queries = std::env::var(ATTRIBUTES_VAR).as_deref() == Ok("1");
    let no_host_ranges = std::env::var(HOST_RANGES_VAR).as_deref() == Ok("0");
    let mut mode = String::from(if pools {
        "with memory pools"
    } else {
        "without memory pools"
    });
    if context_less_queries {
        mode.push_str(", pointer queries needing a context");
    }
    if no_host_ranges {
        mode.push_str(", no ranges for pinned memory");
    }
    let suite = format!("{SUITE}, {mode}");

    load_driver().unwrap_or_else(|e| panic!("{suite}: the stand-in did not load: {e}"));
    // SAFETY: `load_driver` succeeded, so cudarc has found a libcuda; looking a symbol up only
    // reads its symbol table.
    let cudarc_library = unsafe { sys::culib() };
    // SAFETY: looking a symbol up only reads a symbol table; the addresses found in the
    // stand-in opened above are its support functions, and it stays loaded until the end.
    let support = unsafe {
        assert!(
            cudarc_library
                .get::<unsafe extern "C" fn()>(b"dlpack_cuda_test_driver_live")
                .is_ok(),
            "cudarc loaded a libcuda other than the stand-in at {}",
            path.display()
        );
        Support::find(|name| {
            let symbol = library
                .get::<unsafe extern "C" fn()>(name.to_bytes())
                .ok()?;
            Some(*symbol as *const c_void)
        })
        .expect("the stand-in's support functions")
    };

    let context = open_device(0).unwrap_or_else(|e| panic!("{suite}: device 0: {e}"));
    // Every device's primary context is retained once for the process, on first use: before
    // the first case's count of live objects.
    let devices = CudaContext::device_count().expect("cuDeviceGetCount");
    for ordinal in 1..devices as usize {
        open_device(ordinal).unwrap_or_else(|e| panic!("{suite}: device {ordinal}: {e}"));
    }
    // The cases start with device 0's context current, as in the GPU suite.
    context.bind_to_thread().expect("cuCtxSetCurrent");
    let outcome = run_cases(
        &suite,
        &context,
        suite::CASES,
        &test_args(),
        |name, case| {
            let before = support.settled();
            case();
            if let Err(e) = context.check_err() {
                panic!("{name}: the CUDA context recorded an error: {e:?}");
            }
            let after = support.settled();
            assert_eq!(
                after, before,
                "{name}: the stand-in's live objects or refusals changed; expected every allocation, \
             stream and event to be released and no call refused (refusals are printed above)"
            );
        },
    );
    let mut code = outcome.report(&suite);
    if outcome.listed {
        return code;
    }
    let calls = support.calls();
    println!("{suite}: driver calls {calls:?}");
    if context_less_queries
        && outcome.ran == suite::CASES.len()
        && calls.context_less_pointer_queries == 0
    {
        println!(
            "{suite}: FAILED: no pointer query met a thread without a context, so the retry in \
             device 0's context did not run"
        );
        code = ExitCode::FAILURE;
    }
    if no_host_ranges && outcome.ran == suite::CASES.len() && calls.host_range_refusals == 0 {
        println!(
            "{suite}: FAILED: no pointer query asked pinned memory for its range, so the query \
             without the range did not run"
        );
        code = ExitCode::FAILURE;
    }

    // The same cases without memory pools, and with pointer queries that need a current
    // context, in a process of their own (the stand-in reads its switches once).
    if pools {
        let status = Command::new(std::env::current_exe().expect("this test binary"))
            .args(test_args())
            .env(POOLS_VAR, "0")
            .env(ATTRIBUTES_VAR, "1")
            .env(HOST_RANGES_VAR, "0")
            .env("DLPACK_CUDA_TEST_DRIVER", &path)
            .status()
            .expect("running this test binary again without memory pools");
        if !status.success() {
            // The child's own status, so that a runner (valgrind's 99, say) sees it.
            let child = status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1);
            code = ExitCode::from(child.max(1));
        }
    }
    drop(library);
    code
}
