//! `dlpack_core::protocol` against the array API standard's `__dlpack__` text (2024.12 and the
//! draft) and dlpack.h 1.3, one test per group of rules: `max_version`, the stream values of
//! CUDA, ROCm, oneAPI and stream-less devices, `dl_device` and `copy`, the decisions they lead
//! to, and capsule names.

use dlpack_core::protocol::{
    CONSUMER_MAX_VERSION, ExportArgs, ExportPlan, ExportStruct, StreamRequest, SyncAction,
    accept_capsule_name, choose_struct, parse_stream, plan_export,
};
use dlpack_core::{Device, DeviceType, PyErrorKind, Version};

const CPU: Device = Device::CPU;
const CUDA: Device = Device::new(DeviceType::CUDA, 0);
const CUDA_HOST: Device = Device::new(DeviceType::CUDA_HOST, 0);
const CUDA_MANAGED: Device = Device::new(DeviceType::CUDA_MANAGED, 0);
const ROCM: Device = Device::new(DeviceType::ROCM, 0);
const ROCM_HOST: Device = Device::new(DeviceType::ROCM_HOST, 0);
const ONEAPI: Device = Device::new(DeviceType::ONEAPI, 0);
const VULKAN: Device = Device::new(DeviceType::VULKAN, 0);

fn v(major: u32, minor: u32) -> Option<Version> {
    Some(Version::new(major, minor))
}

fn kind<T: core::fmt::Debug>(r: Result<T, dlpack_core::Error>) -> PyErrorKind {
    r.expect_err("expected a refusal").py_kind()
}

/// Standard, `max_version`: "If max_version is None: keep and use the DLPack 0.X
/// implementation"; major equal: "return our own max version"; a consumer whose max_version
/// is >= ours "understands us, just return a Capsule with our max version"; a lower major:
/// the older struct if kept (it is). dlpack.h: "a change in minor version ... ABI is kept".
#[test]
fn max_version_rules() {
    assert_eq!(choose_struct(None), ExportStruct::Legacy);
    assert_eq!(choose_struct(v(0, 0)), ExportStruct::Legacy);
    assert_eq!(choose_struct(v(0, 8)), ExportStruct::Legacy);
    for mv in [
        v(1, 0),
        v(1, 2),
        v(1, 3),
        v(1, 4),
        v(2, 0),
        v(u32::MAX, u32::MAX),
    ] {
        assert_eq!(choose_struct(mv), ExportStruct::Versioned, "{mv:?}");
    }
    assert_eq!(Version::CURRENT, Version::new(1, 3));
    assert_eq!(CONSUMER_MAX_VERSION, Version::new(1, 3));
    assert_eq!(
        ExportStruct::Versioned.capsule_name(),
        c"dltensor_versioned"
    );
    assert_eq!(ExportStruct::Legacy.capsule_name(), c"dltensor");
    assert_eq!(
        ExportStruct::Versioned.used_capsule_name(),
        c"used_dltensor_versioned"
    );
    assert_eq!(ExportStruct::Legacy.used_capsule_name(), c"used_dltensor");
}

/// Standard, `stream` for CUDA: None = legacy default (default), 1 legacy default, 2
/// per-thread default, > 2 a stream, 0 disallowed; -1 "producer must not perform any
/// synchronization"; "an integer larger than or equal to -1".
#[test]
fn cuda_stream_rules() {
    for d in [
        CUDA,
        Device::new(DeviceType::CUDA, 5),
        CUDA_HOST,
        CUDA_MANAGED,
    ] {
        assert_eq!(parse_stream(d, None), Ok(StreamRequest::Default), "{d}");
        assert_eq!(parse_stream(d, Some(-1)), Ok(StreamRequest::NoSync), "{d}");
        assert_eq!(
            parse_stream(d, Some(1)),
            Ok(StreamRequest::LegacyDefault),
            "{d}"
        );
        assert_eq!(
            parse_stream(d, Some(2)),
            Ok(StreamRequest::PerThreadDefault),
            "{d}"
        );
        assert_eq!(
            parse_stream(d, Some(3)),
            Ok(StreamRequest::Handle(3)),
            "{d}"
        );
        assert_eq!(
            kind(parse_stream(d, Some(0))),
            PyErrorKind::ValueError,
            "{d}"
        );
        assert_eq!(
            kind(parse_stream(d, Some(-2))),
            PyErrorKind::ValueError,
            "{d}"
        );
    }
}

/// Standard, `stream` for ROCm: None = default, 0 the default stream, > 2 a stream, 1 and 2
/// not supported; -1 no synchronisation.
#[test]
fn rocm_stream_rules() {
    for d in [ROCM, ROCM_HOST] {
        assert_eq!(parse_stream(d, None), Ok(StreamRequest::Default), "{d}");
        assert_eq!(parse_stream(d, Some(0)), Ok(StreamRequest::Default), "{d}");
        assert_eq!(parse_stream(d, Some(-1)), Ok(StreamRequest::NoSync), "{d}");
        assert_eq!(
            parse_stream(d, Some(9)),
            Ok(StreamRequest::Handle(9)),
            "{d}"
        );
        for bad in [1, 2, -2] {
            assert_eq!(
                kind(parse_stream(d, Some(bad))),
                PyErrorKind::ValueError,
                "{d} {bad}"
            );
        }
    }
}

/// Standard: "On CPU and other device types without streams, only None is accepted."
#[test]
fn devices_without_streams_take_only_none() {
    for d in [CPU, VULKAN, Device::new(DeviceType(99), 0)] {
        assert_eq!(parse_stream(d, None), Ok(StreamRequest::Default), "{d}");
        for s in [-1, 0, 1, 2, 3] {
            assert_eq!(
                kind(parse_stream(d, Some(s))),
                PyErrorKind::ValueError,
                "{d} {s}"
            );
        }
    }
}

/// Standard: SYCL streams are "not yet determined ... allowed when libraries agree on such a
/// convention"; dpctl/dpnp: None = no synchronisation, a queue otherwise.
#[test]
fn oneapi_stream_convention() {
    assert_eq!(parse_stream(ONEAPI, None), Ok(StreamRequest::NoSync));
    assert_eq!(
        parse_stream(ONEAPI, Some(77)),
        Ok(StreamRequest::Handle(77))
    );
    assert_eq!(kind(parse_stream(ONEAPI, Some(0))), PyErrorKind::ValueError);
}

/// Standard, `dl_device` / `copy`: copy=True "must always copy"; copy=False "must never copy,
/// and raise a BufferError in case a copy is deemed necessary"; copy=None "reuse the existing
/// memory buffer if possible and copy otherwise"; a device "that cannot be handled by the
/// producer" is a BufferError; (kDLCPU, 0) must be offered.
#[test]
fn dl_device_and_copy_rules() {
    use ExportPlan::*;
    // copy=True always copies.
    for (t, d) in [
        (CPU, None),
        (CPU, Some(CPU)),
        (CUDA, None),
        (CUDA, Some(CPU)),
        (CUDA_HOST, Some(CPU)),
    ] {
        let plan = plan_export(t, d, Some(true)).unwrap();
        assert!(plan.is_copy(), "{t} {d:?}");
        assert_eq!(plan.target(t), d.unwrap_or(t));
    }
    // copy=False never copies, and refuses with BufferError when a copy is needed.
    for t in [CUDA, ROCM, ONEAPI, VULKAN] {
        assert_eq!(
            kind(plan_export(t, Some(CPU), Some(false))),
            PyErrorKind::BufferError,
            "{t}"
        );
    }
    for t in [CUDA_HOST, ROCM_HOST, CUDA_MANAGED] {
        assert_eq!(
            plan_export(t, Some(CPU), Some(false)),
            Ok(Relabel(CPU)),
            "{t}"
        );
    }
    // copy=None reuses when possible, copies otherwise.
    assert_eq!(plan_export(CUDA, None, None), Ok(AsIs));
    assert_eq!(plan_export(CUDA_HOST, Some(CPU), None), Ok(Relabel(CPU)));
    assert_eq!(plan_export(CUDA, Some(CPU), None), Ok(CopyTo(CPU)));
    // Devices the producer cannot handle.
    for (t, d) in [
        (CUDA, Device::new(DeviceType::CUDA, 1)),
        (CPU, CUDA),
        (CPU, Device::new(DeviceType::CPU, 1)),
        (CUDA_MANAGED, CUDA),
    ] {
        for copy in [None, Some(true), Some(false)] {
            assert_eq!(
                kind(plan_export(t, Some(d), copy)),
                PyErrorKind::BufferError,
                "{t}->{d}"
            );
        }
    }
}

/// Standard: "When dl_device is provided explicitly, stream must be a valid construct for the
/// specified device type. In particular, when kDLCPU is in use, stream must be None and a
/// synchronization must be performed." IS_COPIED "must be set" when a copy happens.
#[test]
fn decisions_for_a_cpu_request_synchronise_and_mark_copies() {
    let to_cpu = |stream| ExportArgs {
        stream,
        max_version: v(1, 3),
        dl_device: Some(CPU),
        copy: None,
    };
    for t in [CUDA, CUDA_HOST, CUDA_MANAGED, ROCM, ROCM_HOST, ONEAPI] {
        let d = to_cpu(None).decide(t).unwrap();
        assert_eq!(d.sync, SyncAction::Host, "{t}");
        assert_eq!(d.plan.target(t), CPU, "{t}");
        assert_eq!(d.sets_is_copied(), d.plan.is_copy(), "{t}");
        for s in [-1, 1, 2, 5] {
            assert_eq!(
                kind(to_cpu(Some(s)).decide(t)),
                PyErrorKind::ValueError,
                "{t} {s}"
            );
        }
    }
    // The same copy for a legacy consumer has no flags to carry IS_COPIED.
    let legacy = ExportArgs {
        max_version: None,
        ..to_cpu(None)
    };
    let d = legacy.decide(CUDA).unwrap();
    assert!(d.plan.is_copy() && !d.sets_is_copied());
}

/// Standard: stream = -1: "producer must not perform any synchronization"; otherwise the
/// producer orders its work before the consumer's stream.
#[test]
fn decisions_follow_the_stream() {
    let args = |stream| ExportArgs {
        stream,
        max_version: v(1, 0),
        ..ExportArgs::default()
    };
    assert_eq!(
        args(Some(-1)).decide(CUDA).unwrap().sync,
        SyncAction::Nothing
    );
    assert_eq!(
        args(Some(-1)).decide(ROCM).unwrap().sync,
        SyncAction::Nothing
    );
    assert_eq!(
        args(None).decide(CUDA).unwrap().sync,
        SyncAction::Stream(StreamRequest::Default)
    );
    assert_eq!(
        args(Some(9)).decide(CUDA).unwrap().sync,
        SyncAction::Stream(StreamRequest::Handle(9))
    );
    assert_eq!(args(None).decide(CPU).unwrap().sync, SyncAction::Nothing);
    assert_eq!(args(None).decide(ONEAPI).unwrap().sync, SyncAction::Nothing);
    // A device error comes before the stream error, as BufferError.
    let both = ExportArgs {
        stream: Some(0),
        dl_device: Some(CPU),
        copy: Some(false),
        ..args(None)
    };
    assert_eq!(kind(both.decide(CUDA)), PyErrorKind::BufferError);
}

/// Consumer side: capsule names (Python spec: "dltensor"/"dltensor_versioned", consumed once).
#[test]
fn capsule_names() {
    assert_eq!(accept_capsule_name(c"dltensor"), Ok(ExportStruct::Legacy));
    assert_eq!(
        accept_capsule_name(c"dltensor_versioned"),
        Ok(ExportStruct::Versioned)
    );
    assert_eq!(
        kind(accept_capsule_name(c"used_dltensor")),
        PyErrorKind::ValueError
    );
    assert_eq!(
        kind(accept_capsule_name(c"used_dltensor_versioned")),
        PyErrorKind::ValueError
    );
    assert_eq!(
        kind(accept_capsule_name(c"dlpack_exchange_api")),
        PyErrorKind::TypeError
    );
}

#[test]
fn an_unreachable_dl_device_is_refused_naming_each_acceptable_device_once() {
    let cpu = plan_export(CPU, Some(CUDA), None).unwrap_err().to_string();
    assert!(
        cpu.ends_with("expected None or cpu:0 (its own device)"),
        "{cpu}"
    );
    let cuda = plan_export(CUDA, Some(ROCM), None).unwrap_err().to_string();
    assert!(
        cuda.ends_with("expected None, cuda:0 (its own device) or cpu:0"),
        "{cuda}"
    );
}
