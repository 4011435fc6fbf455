//! Two `Context` values over one Level Zero context (an adopted handle, `Context::from_raw`,
//! the flow the docs recommend for SYCL interop), through the test driver: what an unconfirmed
//! copy through one may still touch is never freed by the other, and a queue of one is a stream
//! the other's hooks name as such. (Intel's driver resolves pointers across every context of a
//! driver, so there any two contexts meet the same way; the test driver follows the
//! specification, so the adopted handle stands in for that.)
//!
//! Each test re-runs this binary as a child process with the loader's environment set (the
//! loader reads it once, and `set_var` is not allowed while libtest threads run):
//!
//! ```text
//! DLPACK_REQUIRE_ZE_LOADER=1 cargo test -p dlpack-oneapi --all-features --test cross_context
//! ```

#[allow(unused_imports)] // this file uses a part of the shared module
mod common;

use std::path::PathBuf;
use std::process::Command;

use dlpack_core::protocol::StreamRequest;
use dlpack_core::{Device, DeviceHooks, Error, ManagedTensor};
use dlpack_oneapi::{Context, DeviceNumbering, LevelZero, Queue, UsmBuffer, UsmKind, sys};

use common::{DriverSupport, Failure};

/// Set in the child process that runs one test's body.
const CHILD_VAR: &str = "DLPACK_ONEAPI_CROSS_CONTEXT_CHILD";

/// Runs `body` in a child process of this test binary with the test driver loaded.
fn in_child(name: &str, body: fn(&LevelZero, &DriverSupport)) {
    in_child_with(name, &[], body);
}

/// [`in_child`], with more environment for the child (`env`).
fn in_child_with(name: &str, env: &[(&str, &str)], body: fn(&LevelZero, &DriverSupport)) {
    if let Some(child) = std::env::var_os(CHILD_VAR) {
        if child != name {
            return;
        }
        let path = PathBuf::from(std::env::var_os(common::DRIVER_PATH_VAR).expect("driver path"));
        let ze = LevelZero::load().expect("the loader loads the test driver");
        let support = DriverSupport::open(&path);
        body(&ze, &support);
        return;
    }
    let driver = match common::test_driver() {
        Ok(p) => p,
        Err(why) => {
            assert!(
                std::env::var_os(common::REQUIRE_LOADER_VAR).is_none_or(|v| v != "1"),
                "{why}"
            );
            println!("NOT RUN: {why}");
            return;
        }
    };
    if let Some(why) = common::loader_error() {
        assert!(
            std::env::var_os(common::REQUIRE_LOADER_VAR).is_none_or(|v| v != "1"),
            "{why}"
        );
        println!("NOT RUN: {why}");
        return;
    }
    let out = Command::new(std::env::current_exe().expect("current_exe"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, name)
        .env(common::DRIVER_PATH_VAR, &driver)
        .env("ZE_ENABLE_ALT_DRIVERS", &driver)
        .env("DLPACK_ONEAPI_TEST_DRIVER_DEVICES", "2")
        .env("DLPACK_ONEAPI_TEST_DRIVER_SUB_DEVICES", "0")
        .envs(env.iter().copied())
        .output()
        .expect("run the child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(
        out.status.success(),
        "{name} failed in the child process:\n{text}"
    );
}

const LOST: sys::ze_result_t = sys::ZE_RESULT_ERROR_DEVICE_LOST;

/// A context of the first driver, and a second `Context` value adopting its handle. Bind them as
/// `let (producer, adopted) = ...` before anything made from them: locals drop in reverse order,
/// so the adopted value, and all that was made after, goes before its maker.
fn producer_and_adopted(ze: &LevelZero) -> (Context, Context) {
    let driver = ze.drivers().unwrap()[0].clone();
    let producer = Context::new(&driver).unwrap();
    // SAFETY: the caller keeps `producer` alive until `adopted` and everything made from it are
    // gone (the binding order above).
    let adopted =
        unsafe { Context::from_raw(&driver, producer.raw(), DeviceNumbering::driver_order()) }
            .unwrap();
    (producer, adopted)
}

/// 64 bytes of device USM (all 9s) on `context`'s first device.
fn device_buffer(context: &Context) -> UsmBuffer<u8> {
    let gpu = context.devices()[0].clone();
    UsmBuffer::from_slice(context, &gpu, UsmKind::Device, &[9u8; 64]).unwrap()
}

/// A copy through the hooks of another `Context` (one that adopted the same Level Zero context)
/// that Level Zero cannot confirm as finished may still write the buffer: the buffer's drop
/// leaks its allocation rather than free it. (The record of such memory was once kept per
/// `Context` value, and this buffer was freed under the copy.) The test driver refuses such a
/// free and counts it as a misuse (`frees_in_use`).
#[test]
fn a_usm_buffer_is_freed_while_an_unconfirmed_copy_through_another_context_writes_it() {
    in_child(
        "a_usm_buffer_is_freed_while_an_unconfirmed_copy_through_another_context_writes_it",
        |ze, support| {
            let (producer, adopted) = producer_and_adopted(ze);
            let buffer = device_buffer(&producer);
            let address = buffer.as_ptr().addr();
            let hooks = adopted.hooks();
            // The consumer's hooks resolve the producer's memory (as Intel's driver does for any
            // context of the driver).
            assert!(adopted.allocation_of(address).unwrap().is_some());
            let before = support.misuses();
            // The source must outlive a copy that may still run: leaked.
            let src: &'static [u8] = Box::leak(vec![1u8; 64].into_boxed_slice());
            let held = support.hold(0);
            support.fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
            // SAFETY: live device USM of device 0 that nothing else accesses during the call.
            let err = unsafe { hooks.copy_from_host(Device::oneapi(0), src, address) }.unwrap_err();
            assert!(err.to_string().contains("may still be running"), "{err}");
            // The copy is still queued (device 0 is held) and will write `address`.
            drop(buffer);
            let after = support.misuses();
            drop(held);
            support.settle();
            println!(
                "frees_in_use before {} after {}; dlpack_oneapi::leaks().allocations = {}",
                before.frees_in_use,
                after.frees_in_use,
                dlpack_oneapi::leaks().allocations
            );
            assert_eq!(
                after.frees_in_use, before.frees_in_use,
                "UsmBuffer::drop called zeMemFree on memory that an unfinished copy (appended \
                 through another Context's hooks) still writes; the crate promises to leak it"
            );
            assert!(
                dlpack_oneapi::leaks().allocations >= 1,
                "the allocation is leaked"
            );
        },
    );
}

/// The same with two contexts of their own, under driver-wide lookups: on Intel's driver any
/// context resolves, and copies, another's memory.
#[test]
fn with_driver_wide_lookups_any_two_contexts_keep_what_an_unconfirmed_copy_touches() {
    in_child_with(
        "with_driver_wide_lookups_any_two_contexts_keep_what_an_unconfirmed_copy_touches",
        &[("DLPACK_ONEAPI_TEST_DRIVER_DRIVER_WIDE_LOOKUP", "1")],
        |ze, support| {
            let driver = ze.drivers().unwrap()[0].clone();
            let producer = Context::new(&driver).unwrap();
            let consumer = Context::new(&driver).unwrap();
            let buffer = device_buffer(&producer);
            let address = buffer.as_ptr().addr();
            assert!(consumer.allocation_of(address).unwrap().is_some());
            let before = support.misuses();
            let leaked = dlpack_oneapi::leaks().allocations;
            // The source must outlive a copy that may still run: leaked.
            let src: &'static [u8] = Box::leak(vec![1u8; 64].into_boxed_slice());
            let held = support.hold(0);
            support.fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
            // SAFETY: live device USM of device 0 that nothing else accesses during the call.
            let err = unsafe {
                consumer
                    .hooks()
                    .copy_from_host(Device::oneapi(0), src, address)
            }
            .unwrap_err();
            assert!(err.to_string().contains("may still be running"), "{err}");
            drop(buffer);
            let after = support.misuses();
            drop(held);
            support.settle();
            assert_eq!(
                after.frees_in_use, before.frees_in_use,
                "freed under the copy"
            );
            assert_eq!(dlpack_oneapi::leaks().allocations, leaked + 1);
        },
    );
}

/// The same through the tensor API: a tensor exported from the producer's buffer, read by the
/// consumer's hooks (`to_host_vec`) while the device is lost, then deleted by the consumer.
#[test]
fn a_deleted_tensor_frees_memory_an_unconfirmed_read_through_another_context_still_reads() {
    in_child(
        "a_deleted_tensor_frees_memory_an_unconfirmed_read_through_another_context_still_reads",
        |ze, support| {
            let (producer, adopted) = producer_and_adopted(ze);
            let buffer = device_buffer(&producer);
            let raw = ManagedTensor::export(buffer).unwrap().into_raw().unwrap();
            // SAFETY: a live tensor we own.
            let mut tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
            let hooks = adopted.hooks();
            tensor.verify_device(&hooks).unwrap();
            let before = support.misuses();
            let held = support.hold(0);
            support.fail("zeEventHostSynchronize", 0, 1, LOST, Failure::Instead);
            let err = tensor.to_host_vec::<u8>(&hooks).unwrap_err();
            assert!(matches!(err, Error::CopyInFlight { .. }), "{err:?}");
            drop(tensor);
            let after = support.misuses();
            drop(held);
            support.settle();
            println!(
                "frees_in_use before {} after {}",
                before.frees_in_use, after.frees_in_use
            );
            assert_eq!(
                after.frees_in_use, before.frees_in_use,
                "deleting the tensor freed device memory that an unfinished copy still reads"
            );
        },
    );
}

/// A queue of another `Context` value is not found by this one's hooks, even over the same
/// Level Zero context (the registry of queues is per value): the error says so and how to
/// proceed, and adopting the consumer's command list in the producer's `Context` works.
#[test]
fn a_queue_of_another_context_value_is_refused_by_name_and_adopting_its_list_works() {
    in_child(
        "a_queue_of_another_context_value_is_refused_by_name_and_adopting_its_list_works",
        |ze, _support| {
            let (producer, adopted) = producer_and_adopted(ze);
            let device = adopted.devices()[1].clone();
            let consumer = Queue::new(&adopted, &device).unwrap();
            let stream = consumer.stream() as usize;
            let err = producer
                .hooks()
                .make_ready(Device::oneapi(0), StreamRequest::Handle(stream))
                .unwrap_err();
            let message = err.to_string();
            assert!(
                message.contains("another Context value")
                    && message.contains("adopt its command list here"),
                "{message}"
            );
            // SAFETY: the consumer's list, of the same Level Zero context, outlives the adopted
            // queue (dropped below first), and nobody appends to it meanwhile.
            let mine = unsafe { Queue::from_raw(&producer, &device, consumer.raw()) }.unwrap();
            producer
                .hooks()
                .make_ready(Device::oneapi(0), StreamRequest::Handle(stream))
                .unwrap();
            drop(mine);
            consumer.synchronize().unwrap();
        },
    );
}
