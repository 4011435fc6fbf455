//! Which struct a capsule holds: [`choose_struct`] for a producer, [`accept_capsule_name`] for
//! a consumer.

use core::ffi::CStr;

use crate::ffi::{CAPSULE_LEGACY, CAPSULE_LEGACY_USED, CAPSULE_VERSIONED, CAPSULE_VERSIONED_USED};
use crate::{Error, PyErrorKind, Version};

use super::value_error;

/// Which managed-tensor struct a capsule holds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ExportStruct {
    /// `DLManagedTensorVersioned` (DLPack >= 1.0), capsule name `"dltensor_versioned"`. It
    /// carries a version and flags (`READ_ONLY`, `IS_COPIED`).
    Versioned,
    /// `DLManagedTensor` (DLPack 0.x), capsule name `"dltensor"`. It has no version and no
    /// flags.
    Legacy,
}

impl ExportStruct {
    /// The name of a fresh capsule holding this struct (`"dltensor_versioned"` / `"dltensor"`).
    pub const fn capsule_name(self) -> &'static CStr {
        match self {
            ExportStruct::Versioned => CAPSULE_VERSIONED,
            ExportStruct::Legacy => CAPSULE_LEGACY,
        }
    }

    /// The name a consumer gives the capsule once it has taken the tensor
    /// (`"used_dltensor_versioned"` / `"used_dltensor"`), so that the capsule's destructor no
    /// longer calls the deleter.
    pub const fn used_capsule_name(self) -> &'static CStr {
        match self {
            ExportStruct::Versioned => CAPSULE_VERSIONED_USED,
            ExportStruct::Legacy => CAPSULE_LEGACY_USED,
        }
    }
}

/// The struct a producer exports for the consumer's `max_version`.
///
/// - `None`: the consumer predates `max_version` and knows only the legacy struct:
///   [`ExportStruct::Legacy`]. (The standard allows a producer to refuse this with
///   `BufferError`; this crate keeps serving it, since old consumers are still common and the
///   legacy struct loses nothing but the flags.)
/// - major `0`: [`ExportStruct::Legacy`].
/// - major `>= 1`: [`ExportStruct::Versioned`], carrying [`Version::CURRENT`] (1.3) whatever
///   minor was asked: minors are ABI-compatible additions. A consumer that announces a newer
///   major (`(2, 0)`) still gets this 1.x struct, because it is the newest this crate can write;
///   the standard makes every consumer check the major of what it receives, and one that cannot
///   read 1.x will then call the deleter and refuse. Raising here instead would break consumers
///   that still read 1.x.
///
/// ```
/// use dlpack_core::Version;
/// use dlpack_core::protocol::{ExportStruct, choose_struct};
/// assert_eq!(choose_struct(None), ExportStruct::Legacy);
/// assert_eq!(choose_struct(Some(Version::new(1, 0))), ExportStruct::Versioned);
/// ```
pub const fn choose_struct(max_version: Option<Version>) -> ExportStruct {
    match max_version {
        Some(v) if v.major >= 1 => ExportStruct::Versioned,
        _ => ExportStruct::Legacy,
    }
}

/// The highest version a consumer in this workspace announces: [`Version::CURRENT`].
///
/// Recommended consumer sequence (`from_dlpack(x, device=..., copy=...)`):
///
/// 1. Call `x.__dlpack__(max_version=(1, 3), dl_device=device, copy=copy, stream=s)`, where `s`
///    is the consumer's stream for the device `x.__dlpack_device__()` reports (CUDA: its
///    current stream, `1` or `2`, never `0`; ROCm: a stream or `0`; CPU: `None`), or `None`
///    when a `dl_device` of `(kDLCPU, 0)` is asked for, as the standard requires.
/// 2. On `TypeError` (a producer older than the 2023.12 keywords), retry with `stream` alone
///    and no other keyword; it then returns a legacy capsule, and a `device` / `copy` request
///    has to be served by the consumer itself.
/// 3. Whatever was asked, look at what came back: [`accept_capsule_name`] says which struct the
///    capsule holds (a producer may return a legacy capsule even to a versioned request, as
///    JAX does), and a versioned tensor is usable only if its `version.major` equals this
///    crate's ([`Version::is_compatible`]); otherwise only its deleter may be called.
pub const CONSUMER_MAX_VERSION: Version = Version::CURRENT;

/// Says which struct a capsule holds from its name, for a consumer about to take it.
///
/// `"dltensor_versioned"` is [`ExportStruct::Versioned`] and `"dltensor"`
/// [`ExportStruct::Legacy`]. The glue layer passes `c""` for a capsule without a name.
///
/// ```
/// use dlpack_core::protocol::{ExportStruct, accept_capsule_name};
/// use dlpack_core::PyErrorKind;
/// assert_eq!(accept_capsule_name(c"dltensor_versioned"), Ok(ExportStruct::Versioned));
/// let err = accept_capsule_name(c"used_dltensor").unwrap_err();
/// assert_eq!(err.py_kind(), PyErrorKind::ValueError);
/// ```
///
/// # Errors
///
/// An [`Error::Protocol`]: a `ValueError` for a `"used_"` name (another consumer already took
/// the tensor, and a capsule can be consumed only once), a `TypeError` for any other name (the
/// object is not a DLPack tensor capsule).
pub fn accept_capsule_name(name: &CStr) -> Result<ExportStruct, Error> {
    if name == CAPSULE_VERSIONED {
        Ok(ExportStruct::Versioned)
    } else if name == CAPSULE_LEGACY {
        Ok(ExportStruct::Legacy)
    } else if name == CAPSULE_VERSIONED_USED || name == CAPSULE_LEGACY_USED {
        Err(value_error(format!(
            "the capsule is named {name:?}: its tensor was already consumed, and a DLPack capsule can be consumed only once; expected a fresh \"dltensor\" or \"dltensor_versioned\" capsule"
        )))
    } else {
        Err(Error::Protocol {
            kind: PyErrorKind::TypeError,
            message: format!(
                "the capsule is named {name:?}, not a DLPack tensor; expected \"dltensor\" or \"dltensor_versioned\""
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::fixtures::assert_refused;

    #[test]
    fn struct_choice_follows_max_version() {
        let table = [
            (None, ExportStruct::Legacy),
            (Some(Version::new(0, 0)), ExportStruct::Legacy),
            (Some(Version::new(0, 8)), ExportStruct::Legacy),
            (Some(Version::new(1, 0)), ExportStruct::Versioned),
            (Some(Version::new(1, 3)), ExportStruct::Versioned),
            (Some(Version::new(1, 99)), ExportStruct::Versioned),
            (Some(Version::new(2, 0)), ExportStruct::Versioned),
            (Some(Version::new(u32::MAX, 0)), ExportStruct::Versioned),
        ];
        for (max_version, expected) in table {
            assert_eq!(
                choose_struct(max_version),
                expected,
                "max_version={max_version:?}"
            );
        }
        assert_eq!(CONSUMER_MAX_VERSION, Version::new(1, 3));
        assert_eq!(
            choose_struct(Some(CONSUMER_MAX_VERSION)),
            ExportStruct::Versioned
        );
    }

    #[test]
    fn capsule_names() {
        use PyErrorKind::{TypeError as TE, ValueError as VE};
        let table: &[(&CStr, Result<ExportStruct, PyErrorKind>)] = &[
            (c"dltensor", Ok(ExportStruct::Legacy)),
            (c"dltensor_versioned", Ok(ExportStruct::Versioned)),
            (c"used_dltensor", Err(VE)),
            (c"used_dltensor_versioned", Err(VE)),
            (c"", Err(TE)),
            (c"DLTensor", Err(TE)),
            (c"dltensor_versioned ", Err(TE)),
            (c"dlpack_exchange_api", Err(TE)),
            (c"numpy_array", Err(TE)),
        ];
        for &(name, expected) in table {
            let row = format!("capsule {name:?}");
            let got = accept_capsule_name(name);
            match expected {
                Ok(format) => assert_eq!(got, Ok(format), "{row}"),
                Err(kind) => {
                    let found = format!("{name:?}");
                    assert_refused(got, kind, &[&found, "expected"], &row);
                }
            }
        }
        assert!(
            accept_capsule_name(c"used_dltensor")
                .unwrap_err()
                .to_string()
                .contains("only once")
        );
        for format in [ExportStruct::Legacy, ExportStruct::Versioned] {
            assert_eq!(accept_capsule_name(format.capsule_name()), Ok(format));
            assert_refused(
                accept_capsule_name(format.used_capsule_name()),
                VE,
                &["used_"],
                "used",
            );
        }
    }
}
