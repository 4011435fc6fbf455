//! Failure injection for the tests: a test arms a failure of a named entry point
//! ([`crate::dlpack_oneapi_test_driver_fail`]) and the next calls of that entry point return the
//! chosen result, as a real driver does when the device is lost. That is how the tests reach the
//! error paths of `dlpack-oneapi` that a working device never takes (a failed
//! `zeEventHostSynchronize` or `zeEventHostReset`, say).

use std::sync::Mutex;

use crate::objects::lock;
use crate::sys::*;

/// The entry points whose failure a test can inject.
pub(crate) const ENTRY_POINTS: &[&str] = &[
    "zeCommandListAppendBarrier",
    "zeCommandListAppendMemoryCopy",
    "zeCommandListDestroy",
    "zeEventCreate",
    "zeEventDestroy",
    "zeEventHostReset",
    "zeEventHostSynchronize",
    "zeEventPoolCreate",
    "zeEventPoolDestroy",
    "zeEventQueryStatus",
    "zeMemFree",
];

/// Flag of [`crate::dlpack_oneapi_test_driver_fail`]: make the real call first (a host wait then
/// waits, a reset resets), then return the injected result. Without it the failing call does
/// nothing.
pub(crate) const AFTER_CALL: u32 = 1;

/// One armed failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Injection {
    entry: &'static str,
    /// Calls still to let through before failing.
    skip: u32,
    /// Calls still to fail.
    count: u32,
    result: ze_result_t,
    after_call: bool,
}

/// How one call of an entry point goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// As if nothing were armed.
    Run,
    /// Return this result without doing anything.
    Fail(ze_result_t),
    /// Do the call, then return this result.
    RunThenFail(ze_result_t),
}

/// The armed failures.
#[derive(Debug, Default)]
pub(crate) struct Injections(Vec<Injection>);

impl Injections {
    pub(crate) const fn new() -> Self {
        Injections(Vec::new())
    }

    /// Arms `count` failures of `entry` with `result`, after letting `skip` calls through;
    /// replaces what was armed for `entry` (a `count` of 0 disarms it).
    pub(crate) fn arm(
        &mut self,
        entry: &str,
        skip: u32,
        count: u32,
        result: ze_result_t,
        flags: u32,
    ) -> Result<(), ze_result_t> {
        let entry = ENTRY_POINTS
            .iter()
            .find(|e| **e == entry)
            .ok_or(ZE_RESULT_ERROR_INVALID_ARGUMENT)?;
        if result == ZE_RESULT_SUCCESS || flags & !AFTER_CALL != 0 {
            return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        }
        self.0.retain(|i| i.entry != *entry);
        if count > 0 {
            self.0.push(Injection {
                entry,
                skip,
                count,
                result,
                after_call: flags & AFTER_CALL != 0,
            });
        }
        Ok(())
    }

    /// Disarms everything; returns how many failures were armed and not yet returned.
    pub(crate) fn disarm_all(&mut self) -> u64 {
        let left = self.0.iter().map(|i| u64::from(i.count)).sum();
        self.0.clear();
        left
    }

    /// How this call of `entry` goes, counting it.
    pub(crate) fn next(&mut self, entry: &str) -> Outcome {
        let Some(at) = self.0.iter().position(|i| i.entry == entry) else {
            return Outcome::Run;
        };
        let i = &mut self.0[at];
        if i.skip > 0 {
            i.skip -= 1;
            return Outcome::Run;
        }
        i.count -= 1;
        let outcome = if i.after_call {
            Outcome::RunThenFail(i.result)
        } else {
            Outcome::Fail(i.result)
        };
        if i.count == 0 {
            self.0.remove(at);
        }
        outcome
    }
}

/// The failures the tests armed, for every entry point.
pub(crate) static INJECTIONS: Mutex<Injections> = Mutex::new(Injections::new());

/// Runs `call`, the body of entry point `entry`, unless a failure of `entry` is armed.
pub(crate) fn injectable(entry: &str, call: impl FnOnce() -> ze_result_t) -> ze_result_t {
    let outcome = lock(&INJECTIONS).next(entry);
    match outcome {
        Outcome::Run => call(),
        Outcome::Fail(result) => result,
        Outcome::RunThenFail(result) => {
            let _ = call();
            result
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn armed_failures_skip_then_fail_count_times_then_stop() {
        let mut i = Injections::new();
        i.arm(
            "zeEventHostSynchronize",
            1,
            2,
            ZE_RESULT_ERROR_DEVICE_LOST,
            0,
        )
        .unwrap();
        assert_eq!(i.next("zeEventHostReset"), Outcome::Run);
        assert_eq!(i.next("zeEventHostSynchronize"), Outcome::Run);
        let lost = Outcome::Fail(ZE_RESULT_ERROR_DEVICE_LOST);
        assert_eq!(i.next("zeEventHostSynchronize"), lost);
        assert_eq!(i.next("zeEventHostSynchronize"), lost);
        assert_eq!(i.next("zeEventHostSynchronize"), Outcome::Run);
        assert_eq!(i.disarm_all(), 0);
    }

    #[test]
    fn arming_again_replaces_and_disarming_reports_what_was_left() {
        let mut i = Injections::new();
        let lost = ZE_RESULT_ERROR_DEVICE_LOST;
        i.arm("zeEventHostReset", 0, 5, lost, AFTER_CALL).unwrap();
        assert_eq!(i.next("zeEventHostReset"), Outcome::RunThenFail(lost));
        i.arm("zeEventHostReset", 0, 3, ZE_RESULT_ERROR_UNKNOWN, 0)
            .unwrap();
        i.arm("zeMemFree", 0, 1, lost, 0).unwrap();
        assert_eq!(i.disarm_all(), 4);
        assert_eq!(i.next("zeEventHostReset"), Outcome::Run);
        i.arm("zeMemFree", 0, 1, lost, 0).unwrap();
        i.arm("zeMemFree", 0, 0, lost, 0).unwrap();
        assert_eq!(i.disarm_all(), 0, "a count of 0 disarms");
    }

    #[test]
    fn unknown_entry_points_success_and_unknown_flags_are_refused() {
        let mut i = Injections::new();
        let lost = ZE_RESULT_ERROR_DEVICE_LOST;
        let refused = Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        assert_eq!(i.arm("zeEventHostSync", 0, 1, lost, 0), refused);
        assert_eq!(
            i.arm("zeEventHostReset", 0, 1, ZE_RESULT_SUCCESS, 0),
            refused
        );
        assert_eq!(i.arm("zeEventHostReset", 0, 1, lost, 2), refused);
        assert_eq!(i.disarm_all(), 0);
    }
}
