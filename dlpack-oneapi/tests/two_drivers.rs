//! Two Level Zero drivers in one process (Intel's current GPU driver beside its legacy one, or
//! two vendors): the default numbering gives their GPUs distinct `kDLOneAPI` numbers, in SYCL's
//! order (one platform per driver, in `zeDriverGet` order).
//!
//! The Level Zero loader reads its configuration once per process, so the test starts itself
//! again in a child process with the environment it needs, and the child does the checks.

#[allow(unused_imports)] // this file uses a part of the shared module
mod common;

use std::path::PathBuf;
use std::process::Command;

use dlpack_core::{Device, ManagedTensor};
use dlpack_oneapi::{Context, LevelZero, UsmBuffer, UsmKind};

/// Set in the child processes.
const CHILD_VAR: &str = "DLPACK_ONEAPI_TWO_DRIVERS_CHILD";

/// Runs the test `name` of this binary in a child process (marked by [`CHILD_VAR`]) with
/// `env`, and returns whether it passed and its output.
fn run_child(name: &str, env: &[(&str, String)]) -> (bool, String) {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    for var in [
        "ZE_ENABLE_ALT_DRIVERS",
        "ZE_ENABLE_LOADER_INTERCEPT",
        "ZE_ENABLE_VALIDATION_LAYER",
        "ZE_ENABLE_PARAMETER_VALIDATION",
        "DLPACK_ONEAPI_TEST_DRIVER_DEVICES",
        "DLPACK_ONEAPI_TEST_DRIVER_SUB_DEVICES",
    ] {
        cmd.env_remove(var);
    }
    cmd.env(CHILD_VAR, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the child test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The test driver, and a byte-identical copy of it under another name: the loader then loads
/// two independent driver instances (two `dlopen` handles, each with its own statics), which is
/// what a machine with two Level Zero GPU drivers looks like (Intel's current
/// `libze_intel_gpu.so.1` next to `libze_intel_gpu_legacy1.so.1`, or two vendors). `None` (with
/// a printed NOT RUN, or a failure under `DLPACK_REQUIRE_ZE_LOADER=1`) when the
/// loader or the test driver is missing.
fn two_driver_libraries() -> Option<(PathBuf, PathBuf)> {
    let missing = match (common::loader_error(), common::test_driver()) {
        (Some(why), _) => why,
        (None, Err(why)) => format!("no test driver ({why})"),
        (None, Ok(first)) => {
            let dir = std::env::temp_dir()
                .join(format!("dlpack-oneapi-two-drivers-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let second = dir.join("libdlpack_oneapi_test_driver_second.so");
            std::fs::copy(&first, &second).expect("copy the test driver");
            return Some((first, second));
        }
    };
    assert!(
        common::not_run("two_drivers", &missing) == std::process::ExitCode::SUCCESS,
        "the two-driver case did not run: {missing}"
    );
    None
}

/// The default numbering once restarted at 0 in every driver, so the GPUs of two Level Zero
/// drivers both exported as `kDLOneAPI` device 0. dpctl, dpnp and PyTorch number a device by its
/// position in `sycl::device::get_devices()`, where the Level Zero platforms (one per driver)
/// come one after the other: the second driver's GPU is device 1 there.
#[test]
fn two_drivers_do_not_give_two_gpus_the_same_dlpack_number() {
    if std::env::var_os(CHILD_VAR).is_some() {
        return in_the_child();
    }
    let Some((first, second)) = two_driver_libraries() else {
        return;
    };
    let (ok, out) = run_child(
        "two_drivers_do_not_give_two_gpus_the_same_dlpack_number",
        &[
            (
                "ZE_ENABLE_ALT_DRIVERS",
                format!("{},{}", first.display(), second.display()),
            ),
            ("DLPACK_ONEAPI_TEST_DRIVER_DEVICES", "1".into()),
        ],
    );
    println!("{out}");
    let _ = std::fs::remove_file(&second);
    if let Some(dir) = second.parent() {
        let _ = std::fs::remove_dir(dir);
    }
    assert!(ok, "the child process failed; its output is above");
}

/// The checks, in the child process whose loader sees the two drivers.
fn in_the_child() {
    let ze = LevelZero::load().expect("the loader with two test drivers");
    let drivers = ze.drivers().expect("zeDriverGet");
    println!("zeDriverGet: {} drivers", drivers.len());
    assert_eq!(
        drivers.len(),
        2,
        "the loader should load both copies of the test driver"
    );
    let a = Context::new(&drivers[0]).expect("context on driver 0");
    let b = Context::new(&drivers[1]).expect("context on driver 1");
    let gpu_a = a.devices()[0].clone();
    let gpu_b = b.devices()[0].clone();
    assert_ne!(gpu_a, gpu_b, "two different devices");
    let num_a = a.dlpack_device(&gpu_a).unwrap();
    let num_b = b.dlpack_device(&gpu_b).unwrap();
    println!(
        "driver 0 GPU {gpu_a:?} exports as {num_a}; driver 1 GPU {gpu_b:?} exports as {num_b}"
    );

    assert_eq!((num_a, num_b), (Device::oneapi(0), Device::oneapi(1)));

    // A tensor on driver 1's GPU claims its number, which only driver 1's context maps back.
    let buffer = UsmBuffer::from_slice(&b, &gpu_b, UsmKind::Device, &[1.0f32, 2.0]).unwrap();
    let tensor = ManagedTensor::export(buffer).unwrap();
    assert_eq!(tensor.device(), Device::oneapi(1));
    assert_eq!(b.ze_device(tensor.device()).unwrap(), gpu_b);
    let err = a.ze_device(tensor.device()).unwrap_err();
    assert!(
        err.to_string()
            .contains("no Level Zero device of this context is numbered oneapi:1"),
        "{err}"
    );
}
