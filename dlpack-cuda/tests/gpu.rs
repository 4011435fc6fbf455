//! The CUDA suite (`tests/suite`) on a real GPU.
//!
//! It runs only when `DLPACK_TEST_CUDA` is set (to anything but `0`):
//! `DLPACK_TEST_CUDA=1 cargo test -p dlpack-cuda --all-features --test gpu`. Unset, it prints
//! one line saying so and passes; set on a machine where device 0 cannot be opened, it fails.
//! It has its own runner (`harness = false`) so that line is always shown. Names given after
//! `--` select cases as with libtest. The same cases run on every machine against the
//! workspace's libcuda stand-in (`tests/test_driver.rs`).

use std::process::ExitCode;

use dlpack_cuda::open_device;
use dlpack_testing::harness::{run_cases, test_args};

mod suite;

const SUITE: &str = "dlpack-cuda GPU suite";

fn main() -> ExitCode {
    // Exactly `1`, as the Python GPU tests read it.
    let switch = std::env::var("DLPACK_TEST_CUDA").unwrap_or_default();
    if switch != "1" {
        let value = if switch.is_empty() {
            "unset".to_owned()
        } else {
            format!("{switch:?}")
        };
        println!(
            "{SUITE}: did not run ({} tests skipped; DLPACK_TEST_CUDA is {value}); set DLPACK_TEST_CUDA=1 on a machine with an NVIDIA GPU to run it",
            suite::CASES.len()
        );
        return ExitCode::SUCCESS;
    }
    let context = match open_device(0) {
        Ok(context) => context,
        Err(e) => {
            eprintln!("{SUITE}: DLPACK_TEST_CUDA is set, but device 0 cannot be opened: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = run_cases(SUITE, &context, suite::CASES, &test_args(), |name, case| {
        case();
        if let Err(e) = context.check_err() {
            panic!("{name}: the CUDA context recorded an error: {e:?}");
        }
    });
    outcome.report(SUITE)
}
