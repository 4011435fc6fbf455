//! What the consumer's `stream` means: [`parse_stream`].

use crate::device::StreamRequest;
use crate::{Device, DeviceType, Error};

use super::value_error;
#[cfg(doc)]
use crate::PyErrorKind;

/// Interprets the consumer's `stream` for `device`, the device the consumer will read the data
/// on: `dl_device` when given, else the tensor's own device. (The standard says that with an
/// explicit `dl_device` the stream must suit that device; in particular `(kDLCPU, 0)` takes only
/// `None`.)
///
/// | device type | accepted | refused (`ValueError`) |
/// |---|---|---|
/// | CUDA, CUDA_HOST, CUDA_MANAGED | `None` default, `-1` no sync, `1` legacy default, `2` per-thread default, `> 2` handle | `0` (ambiguous: it could mean `None`, `1` or `2`; the standard forbids it), `< -1` |
/// | ROCM, ROCM_HOST | `None` or `0` default, `-1` no sync, `> 2` handle | `1`, `2` (CUDA's numbers, not supported on ROCm), `< -1` |
/// | CPU | `None` | everything else, `-1` included |
/// | ONEAPI (not standardised) | `None` no sync, `> 0` handle | `0`, `-1`, negatives |
/// | any other type | `None` | everything else |
///
/// Pinned (`CUDA_HOST`, `ROCM_HOST`) and managed memory follow their runtime's rules because the
/// GPU may still be writing it: the consumer's stream is what it must wait on.
///
/// On the CPU the standard accepts only `None`. This crate refuses `-1` there too, like NumPy
/// and PyTorch: with a `dl_device` of `(kDLCPU, 0)` the standard requires the producer to
/// synchronise, so accepting "do not synchronise" would let pinned or managed memory reach the
/// host while the GPU is still writing it.
///
/// On oneAPI, dpctl and dpnp take a `SyclQueue` and read `None` as "no synchronisation"; the glue
/// layer passes a queue as its handle (a positive integer). `-1` is refused because `None`
/// already says "no synchronisation" there and the standard defines `-1` only for CUDA and ROCm
/// integer streams.
///
/// A stream of the wrong Python type (a float, a queue object on CUDA) is the glue layer's
/// `TypeError`; it never reaches this function.
///
/// ```
/// use dlpack_core::protocol::{StreamRequest, parse_stream};
/// use dlpack_core::{Device, PyErrorKind};
/// assert_eq!(parse_stream(Device::cuda(0), Some(2)), Ok(StreamRequest::PerThreadDefault));
/// let err = parse_stream(Device::cuda(0), Some(0)).unwrap_err();
/// assert_eq!(err.py_kind(), PyErrorKind::ValueError);
/// ```
///
/// # Errors
///
/// An [`Error::Protocol`] of kind [`PyErrorKind::ValueError`] for a stream the table refuses,
/// and for a handle that does not fit a pointer on this platform.
pub fn parse_stream(device: Device, stream: Option<i64>) -> Result<StreamRequest, Error> {
    const CUDA_EXPECTED: &str = "expected None, -1 (no synchronisation), 1 (legacy default stream), 2 (per-thread default stream) or a cudaStream_t > 2";
    const ROCM_EXPECTED: &str =
        "expected None or 0 (default stream), -1 (no synchronisation) or a hipStream_t > 2";
    const ONEAPI_EXPECTED: &str = "expected None (no synchronisation) or a positive SYCL queue / Level Zero handle; oneAPI streams are not standardised";

    let t = device.device_type;
    let Some(value) = stream else {
        return Ok(if t == DeviceType::ONEAPI {
            StreamRequest::NoSync
        } else {
            StreamRequest::Default
        });
    };
    let refuse = |why: &str, expected: &str| {
        value_error(format!(
            "stream={value} is not valid for {device}{why}; {expected}"
        ))
    };
    let handle = |value: i64| {
        usize::try_from(value)
            .map(StreamRequest::Handle)
            .map_err(|_| {
                refuse(
                    " (it does not fit a pointer on this platform)",
                    "expected a stream handle",
                )
            })
    };
    match t {
        DeviceType::CUDA | DeviceType::CUDA_HOST | DeviceType::CUDA_MANAGED => match value {
            -1 => Ok(StreamRequest::NoSync),
            0 => Err(refuse(
                ": 0 is ambiguous (it could mean None, 1 or 2) and the array API standard forbids it",
                CUDA_EXPECTED,
            )),
            1 => Ok(StreamRequest::LegacyDefault),
            2 => Ok(StreamRequest::PerThreadDefault),
            v if v > 2 => handle(v),
            _ => Err(refuse("", CUDA_EXPECTED)),
        },
        DeviceType::ROCM | DeviceType::ROCM_HOST => match value {
            -1 => Ok(StreamRequest::NoSync),
            0 => Ok(StreamRequest::Default),
            1 | 2 => Err(refuse(
                ": 1 and 2 are CUDA's default-stream numbers, which the array API standard does not support on ROCm",
                ROCM_EXPECTED,
            )),
            v if v > 2 => handle(v),
            _ => Err(refuse("", ROCM_EXPECTED)),
        },
        DeviceType::ONEAPI => match value {
            v if v > 0 => handle(v),
            _ => Err(refuse("", ONEAPI_EXPECTED)),
        },
        DeviceType::CPU => Err(refuse(
            "",
            "expected None: the array API standard accepts only None on the CPU (-1 is refused too, since a CPU export must be synchronised)",
        )),
        _ => Err(refuse(
            "",
            "expected None: this crate knows no streams for this device type, and the array API standard accepts only None on devices without streams",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PyErrorKind;
    use crate::protocol::fixtures::*;

    /// Expected outcome of one stream row: the request, or the error kind.
    type Outcome = Result<StreamRequest, PyErrorKind>;

    /// The rows of one device type: `stream` and the expected outcome.
    type StreamRows<'a> = &'a [(Option<i64>, Outcome)];

    #[test]
    fn streams_follow_the_per_device_rules() {
        use PyErrorKind::ValueError as VE;
        use StreamRequest::*;
        let big = i64::MAX;
        // On a 32-bit target the largest handle does not fit a pointer and is refused.
        let big_outcome: Outcome = usize::try_from(big).map(Handle).map_err(|_| VE);
        let cuda_rows: &[(Option<i64>, Outcome)] = &[
            (None, Ok(Default)),
            (Some(-1), Ok(NoSync)),
            (Some(0), Err(VE)),
            (Some(1), Ok(LegacyDefault)),
            (Some(2), Ok(PerThreadDefault)),
            (Some(3), Ok(Handle(3))),
            (Some(0x7f00_dead_beef), Ok(Handle(0x7f00_dead_beef))),
            (Some(big), big_outcome),
            (Some(-2), Err(VE)),
            (Some(i64::MIN), Err(VE)),
        ];
        let rocm_rows: &[(Option<i64>, Outcome)] = &[
            (None, Ok(Default)),
            (Some(0), Ok(Default)),
            (Some(-1), Ok(NoSync)),
            (Some(1), Err(VE)),
            (Some(2), Err(VE)),
            (Some(3), Ok(Handle(3))),
            (Some(big), big_outcome),
            (Some(-2), Err(VE)),
        ];
        let cpu_rows: &[(Option<i64>, Outcome)] = &[
            (None, Ok(Default)),
            (Some(-1), Err(VE)),
            (Some(0), Err(VE)),
            (Some(1), Err(VE)),
            (Some(2), Err(VE)),
            (Some(3), Err(VE)),
            (Some(-7), Err(VE)),
        ];
        let oneapi_rows: &[(Option<i64>, Outcome)] = &[
            (None, Ok(NoSync)),
            (Some(1), Ok(Handle(1))),
            (Some(2), Ok(Handle(2))),
            (Some(0x5555_0000), Ok(Handle(0x5555_0000))),
            (Some(0), Err(VE)),
            (Some(-1), Err(VE)),
            (Some(-5), Err(VE)),
        ];
        let table: &[(Device, StreamRows<'_>)] = &[
            (Device::cuda(0), cuda_rows),
            (Device::cuda(3), cuda_rows),
            (CUDA_HOST, cuda_rows),
            (CUDA_MANAGED, cuda_rows),
            (ROCM, rocm_rows),
            (ROCM_HOST, rocm_rows),
            (Device::CPU, cpu_rows),
            (ONEAPI, oneapi_rows),
            (Device::oneapi(2), oneapi_rows),
            // Devices without streams this crate knows: the CPU's rules.
            (VULKAN, cpu_rows),
            (METAL, cpu_rows),
            (Device::new(DeviceType::OPENCL, 1), cpu_rows),
            (UNKNOWN, cpu_rows),
        ];
        let mut checked = 0;
        for (device, rows) in table {
            for (stream, expected) in *rows {
                let row = format!("{device} stream={stream:?}");
                let got = parse_stream(*device, *stream);
                match expected {
                    Ok(request) => assert_eq!(got, Ok(*request), "{row}"),
                    Err(kind) => {
                        let value = format!("stream={}", stream.unwrap());
                        let device = device.to_string();
                        assert_refused(got, *kind, &[&value, &device, "expected"], &row);
                    }
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 4 * 10 + 2 * 8 + 7 + 2 * 7 + 4 * 7);
    }

    #[test]
    fn stream_messages_explain_the_rule() {
        let msg = parse_stream(Device::cuda(0), Some(0))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("ambiguous") && msg.contains("forbids"),
            "{msg}"
        );
        let msg = parse_stream(ROCM, Some(1)).unwrap_err().to_string();
        assert!(msg.contains("not support") && msg.contains("ROCm"), "{msg}");
        let msg = parse_stream(Device::CPU, Some(-1)).unwrap_err().to_string();
        assert!(msg.contains("expected None"), "{msg}");
        let msg = parse_stream(ONEAPI, Some(-1)).unwrap_err().to_string();
        assert!(msg.contains("not standardised"), "{msg}");
    }
}
