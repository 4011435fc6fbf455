//! The Python `__dlpack__` / `from_dlpack` protocol's decisions, in plain Rust.
//!
//! `dlpack-pyo3` is glue over this module: it turns Python arguments into Rust values (a
//! `(major, minor)` tuple into a [`Version`], a `(device_type, device_id)` tuple into a
//! [`Device`], an `int` stream into an `i64`), raises `TypeError` itself for arguments of the
//! wrong Python type, and otherwise only carries out what this module decides:
//!
//! | question | producer side (`__dlpack__`) | consumer side (`from_dlpack`) |
//! |---|---|---|
//! | which struct? | [`choose_struct`] from `max_version` | [`accept_capsule_name`] |
//! | which device, copy or not? | [`plan_export`] from `dl_device` / `copy` | pass them on |
//! | what does `stream` mean? | [`parse_stream`] | see [`CONSUMER_MAX_VERSION`] |
//! | all of it at once | [`ExportArgs::decide`] | |
//!
//! Every refusal is an [`Error::Protocol`] whose [`PyErrorKind`] is the Python exception the
//! array API standard asks for: `BufferError` when the data cannot be exported as asked (device,
//! copy), `ValueError` for an argument value the protocol does not allow (a stream number, an
//! already used capsule), `TypeError` for the wrong kind of object (a capsule that is not a
//! DLPack tensor). Messages name the value found and what was expected.
//!
//! A producer holding a CPU tensor, asked `__dlpack__(max_version=(1, 0))` (so `stream=None`,
//! `dl_device=None`, `copy=None`):
//!
//! ```
//! use dlpack_core::protocol::{ExportArgs, ExportPlan, ExportStruct, SyncAction};
//! use dlpack_core::{Device, PyErrorKind, Version};
//!
//! let args = ExportArgs { max_version: Some(Version::new(1, 0)), ..ExportArgs::default() };
//! let decision = args.decide(Device::CPU)?;
//! assert_eq!(decision.format, ExportStruct::Versioned); // a `dltensor_versioned` capsule
//! assert_eq!(decision.plan, ExportPlan::AsIs); // zero-copy, same device
//! assert_eq!(decision.sync, SyncAction::Nothing); // nothing to wait for on the CPU
//! assert!(!decision.sets_is_copied());
//!
//! // The same tensor asked for with a CUDA stream number: the CPU accepts only `None`.
//! let err = ExportArgs { stream: Some(1), ..args }.decide(Device::CPU).unwrap_err();
//! assert_eq!(err.py_kind(), PyErrorKind::ValueError);
//! assert!(err.to_string().contains("stream=1"));
//! # Ok::<(), dlpack_core::Error>(())
//! ```

mod capsule;
mod decide;
mod plan;
mod stream;

pub use crate::device::StreamRequest;
pub use capsule::{CONSUMER_MAX_VERSION, ExportStruct, accept_capsule_name, choose_struct};
pub use decide::{ExportArgs, ExportDecision, SyncAction};
pub use plan::{ExportPlan, plan_export};
pub use stream::parse_stream;

#[cfg(doc)] // for the docs' links
use crate::{Device, Version};
use crate::{Error, PyErrorKind};

/// A refusal of an argument value the protocol does not allow.
fn value_error(message: String) -> Error {
    Error::Protocol {
        kind: PyErrorKind::ValueError,
        message,
    }
}

/// A refusal to export the data as asked.
fn buffer_error(message: String) -> Error {
    Error::Protocol {
        kind: PyErrorKind::BufferError,
        message,
    }
}

/// What the tests of every concern share: devices, and a check of a refusal.
#[cfg(test)]
mod fixtures {
    use crate::{Device, DeviceType, Error, PyErrorKind};

    pub(super) const CUDA_HOST: Device = Device::new(DeviceType::CUDA_HOST, 0);
    pub(super) const CUDA_MANAGED: Device = Device::new(DeviceType::CUDA_MANAGED, 0);
    pub(super) const ROCM: Device = Device::new(DeviceType::ROCM, 0);
    pub(super) const ROCM_HOST: Device = Device::new(DeviceType::ROCM_HOST, 0);
    pub(super) const ONEAPI: Device = Device::oneapi(0);
    pub(super) const VULKAN: Device = Device::new(DeviceType::VULKAN, 0);
    pub(super) const METAL: Device = Device::new(DeviceType::METAL, 0);
    pub(super) const UNKNOWN: Device = Device::new(DeviceType(99), 0);

    /// Asserts that `result` is an `Error::Protocol` of `kind` whose message contains every one
    /// of `needles`.
    #[track_caller]
    pub(super) fn assert_refused<T: core::fmt::Debug>(
        result: Result<T, Error>,
        kind: PyErrorKind,
        needles: &[&str],
        row: &str,
    ) {
        let err = match result {
            Ok(v) => panic!("{row}: expected {kind:?}, got Ok({v:?})"),
            Err(e) => e,
        };
        assert!(
            matches!(err, Error::Protocol { .. }),
            "{row}: not a protocol error: {err:?}"
        );
        assert_eq!(err.py_kind(), kind, "{row}: {err}");
        let msg = err.to_string();
        for needle in needles {
            assert!(
                msg.contains(needle),
                "{row}: message {msg:?} lacks {needle:?}"
            );
        }
    }
}
