//! Fuzzes dlpack-core's import path (`ManagedTensor::from_raw` and `from_raw_legacy`).
//!
//! The input bytes choose every field of a foreign managed tensor built by dlpack-testing over a
//! real buffer: legacy or versioned, version, flags, ndim, shape, strides (values, NULL,
//! misaligned, row-major), dtype (code, bits, lanes, valid or not), device, data pointer
//! (inside or past the buffer, NULL, fake), byte_offset, buffer contents and a NULL deleter.
//!
//! The invariant, `dlpack_testing::import_check` (the same as dlpack-core/tests/property.rs):
//! - a refused tensor's deleter ran exactly once (never, for a NULL deleter);
//! - an accepted tensor whose fields describe memory inside the buffer has a `byte_span()`
//!   inside the buffer, equal to the reach computed independently of dlpack-core (byte-sized
//!   dtypes), every element a typed view yields lies inside that span, and `to_vec` returns
//!   them;
//! - an accepted tensor's deleter runs exactly once on drop;
//! - nothing panics.
//!
//! Run: `cd fuzz && cargo +nightly-2026-05-20 fuzz run import` (see docs/bad-inputs.md).

#![no_main]

use std::ops::Range;

use dlpack_core::{DataType, DataTypeCode, Device, DeviceType, MAX_NDIM};
use dlpack_testing::Data;
use dlpack_testing::import_check::{ArrayChoice, Input, check};
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;

/// A small value most of the time, an arbitrary one sometimes.
fn int(u: &mut Unstructured<'_>, small: Range<i64>) -> ArbResult<i64> {
    Ok(match u.int_in_range(0u8..=15)? {
        0 => i64::MAX,
        1 => i64::MIN,
        2 => u.arbitrary()?,
        3 => u.int_in_range(1i64 << 31..=1i64 << 62)?,
        _ => u.int_in_range(small.start..=small.end - 1)?,
    })
}

fn array(u: &mut Unstructured<'_>, strides: bool) -> ArbResult<ArrayChoice> {
    Ok(match u.int_in_range(0u8..=15)? {
        0 => ArrayChoice::Null,
        1 => ArrayChoice::Misaligned,
        2..=6 if strides => ArrayChoice::RowMajor,
        _ => {
            let len = u.int_in_range(0usize..=5)?;
            let range = if strides { -8..9 } else { -2..6 };
            let mut values = Vec::with_capacity(len);
            for _ in 0..len {
                values.push(int(u, range.clone())?);
            }
            ArrayChoice::Values(values)
        }
    })
}

fn dtype(u: &mut Unstructured<'_>) -> ArbResult<DataType> {
    const KNOWN: &[(u8, u8, u16)] = &[
        (1, 8, 1),
        (0, 8, 1),
        (6, 8, 1),
        (0, 16, 1),
        (1, 16, 1),
        (0, 32, 1),
        (1, 32, 1),
        (2, 32, 1),
        (0, 64, 1),
        (1, 64, 1),
        (2, 64, 1),
        (2, 16, 1),
        (4, 16, 1),
        (5, 64, 1),
        (5, 128, 1),
        (10, 8, 1),
        (17, 4, 1),
        (17, 4, 2),
        (17, 4, 3),
        (16, 6, 1),
        (15, 6, 4),
        (3, 24, 1),
        (1, 8, 4),
    ];
    let (code, bits, lanes) = match u.int_in_range(0u8..=9)? {
        0 => u.arbitrary()?,
        1 | 2 => (
            u.int_in_range(0u8..=19)?,
            *u.choose(&[0u8, 1, 4, 6, 7, 8, 12, 16, 32, 64, 128, 255])?,
            *u.choose(&[0u16, 1, 2, 3, 4, 16, u16::MAX])?,
        ),
        _ => *u.choose(KNOWN)?,
    };
    Ok(DataType::new(DataTypeCode(code), bits, lanes))
}

/// One foreign tensor, every field drawn from the input bytes.
fn input(u: &mut Unstructured<'_>) -> ArbResult<Input> {
    let legacy = u.ratio(1u8, 5)?;
    let version = if u.ratio(7u8, 8)? {
        (1, 3)
    } else {
        (u.arbitrary()?, u.arbitrary()?)
    };
    let flags = match u.int_in_range(0u8..=7)? {
        0..=3 => 0,
        4..=6 => u.int_in_range(0u64..=7)?,
        _ => u.arbitrary()?,
    };
    let ndim = match u.int_in_range(0u8..=15)? {
        0 => Some(u.int_in_range(-4i32..=-1)?),
        1 => Some(u.int_in_range(MAX_NDIM as i32 - 2..=MAX_NDIM as i32 + 2)?),
        2 => Some(u.arbitrary()?),
        3 | 4 => Some(u.int_in_range(0i32..=5)?),
        _ => None,
    };
    let shape = array(u, false)?;
    let strides = array(u, true)?;
    let dtype = dtype(u)?;
    let device_type = match u.int_in_range(0u8..=9)? {
        0 => DeviceType::CUDA_HOST,
        1 => DeviceType::CUDA,
        2 => DeviceType(u.arbitrary()?),
        _ => DeviceType::CPU,
    };
    let device_id = if u.ratio(1u8, 5)? { u.arbitrary()? } else { 0 };
    let data = match u.int_in_range(0u8..=11)? {
        0 => Data::Null,
        1 => Data::Fake(u.int_in_range(1usize..=usize::MAX)?),
        _ => Data::Buffer {
            offset: u.int_in_range(0usize..=80)?,
        },
    };
    let byte_offset = match u.int_in_range(0u8..=9)? {
        0..=4 => 0,
        5..=8 => u.int_in_range(0u64..=63)?,
        _ => u.arbitrary()?,
    };
    let deleter = !u.ratio(1u8, 20)?;
    let len = u.int_in_range(0usize..=160)?;
    let buffer = u.bytes(len.min(u.len()))?.to_vec();
    Ok(Input {
        legacy,
        version,
        flags,
        ndim,
        shape,
        strides,
        dtype,
        device: Device::new(device_type, device_id),
        data,
        byte_offset,
        buffer,
        deleter,
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if let Ok(input) = input(&mut u)
        && let Err(e) = check(&input)
    {
        panic!("{e}");
    }
});
