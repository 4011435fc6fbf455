//! Fuzzes dlpack-core's import path (`ManagedTensor::from_raw` and `from_raw_legacy`).
//!
//! The input bytes choose every field of a foreign managed tensor built by dlpack-testing over a
//! real buffer: legacy or versioned, version, flags, ndim, shape, strides (values, NULL,
//! misaligned, row-major), dtype (code, bits, lanes, valid or not), device, data pointer
//! (inside or past the buffer, NULL, fake), byte_offset, buffer contents and a NULL deleter.
//!
//! The invariant (the same as dlpack-core/tests/property.rs):
//! - a refused tensor's deleter ran exactly once (never, for a NULL deleter);
//! - an accepted tensor whose fields describe memory inside the buffer has a `byte_span()`
//!   inside the buffer, equal to the reach computed here independently (byte-sized dtypes),
//!   every element a typed view yields lies inside that span, and `to_vec` returns them;
//! - an accepted tensor's deleter runs exactly once on drop;
//! - nothing panics.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run import` (see docs/bad-inputs.md).

#![no_main]

use std::ops::Range;
use std::sync::atomic::Ordering;

use dlpack_core::{
    DataType, DataTypeCode, Device, DeviceType, Element, Flags, MAX_NDIM, ManagedTensor,
};
use dlpack_testing::{Array, Data, Foreign, row_major};
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;

#[derive(Clone, Debug)]
enum ArrayChoice {
    Values(Vec<i64>),
    Null,
    Misaligned,
    RowMajor,
}

#[derive(Clone, Debug)]
struct Input {
    legacy: bool,
    version: (u32, u32),
    flags: u64,
    ndim: Option<i32>,
    shape: ArrayChoice,
    strides: ArrayChoice,
    dtype: DataType,
    device: Device,
    data: Data,
    byte_offset: u64,
    buffer: Vec<u8>,
    deleter: bool,
}

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

impl Input {
    fn arbitrary(u: &mut Unstructured<'_>) -> ArbResult<Self> {
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

    fn shape_values(&self) -> Vec<i64> {
        match &self.shape {
            ArrayChoice::Values(v) => v.clone(),
            _ => Vec::new(),
        }
    }

    fn to_array(&self, choice: &ArrayChoice) -> Array {
        match choice {
            ArrayChoice::Values(v) => Array::Values(v.clone()),
            ArrayChoice::Null => Array::Null,
            ArrayChoice::Misaligned => Array::Misaligned(Vec::new()),
            ArrayChoice::RowMajor => Array::Values(row_major(&self.shape_values())),
        }
    }

    fn header_ndim(&self) -> i32 {
        match (self.ndim, &self.shape) {
            (Some(n), _) => n,
            (None, ArrayChoice::Misaligned) => 2,
            (None, ArrayChoice::Values(v)) => v.len() as i32,
            (None, _) => 0,
        }
    }

    fn foreign(&self) -> Foreign {
        // The buffer is the input's; U8 keeps the fixture's default buffer small (a wild
        // dtype times a large shape would ask for gigabytes).
        let mut f = Foreign::new(DataType::U8, &self.shape_values())
            .dtype(self.dtype)
            .bytes(&self.buffer)
            .version(self.version.0, self.version.1)
            .flags(self.flags)
            .shape(self.to_array(&self.shape))
            .strides(self.to_array(&self.strides))
            .device(self.device)
            .data(self.data)
            .byte_offset(self.byte_offset)
            .ndim(self.header_ndim());
        if !self.deleter {
            f = f.no_deleter();
        }
        f
    }

    /// What the importer reads for an array field (the fixture pads with 1s), `None` for NULL.
    fn read(&self, choice: &ArrayChoice, ndim: usize) -> Option<Vec<i64>> {
        let mut values = match choice {
            ArrayChoice::Values(v) => v.clone(),
            ArrayChoice::RowMajor => row_major(&self.shape_values()),
            ArrayChoice::Misaligned => Vec::new(),
            ArrayChoice::Null => return None,
        };
        values.resize(values.len().max(ndim), 1);
        values.truncate(ndim);
        Some(values)
    }

    /// Bytes (relative to the buffer) the fields describe, computed in i128 independently of
    /// dlpack-core; a superset of the packed sub-byte layout. `None` when not over the buffer,
    /// without elements, or unreadable.
    fn described_bytes(&self) -> Option<Range<i128>> {
        let Data::Buffer { offset } = self.data else {
            return None;
        };
        let ndim = usize::try_from(self.header_ndim())
            .ok()
            .filter(|&n| n <= MAX_NDIM)?;
        let shape = self.read(&self.shape, ndim)?;
        let strides = self
            .read(&self.strides, ndim)
            .unwrap_or_else(|| row_major(&shape));
        if shape.iter().any(|&d| d <= 0) {
            return None;
        }
        let (mut lo, mut hi) = (0i128, 0i128);
        for (&d, &s) in shape.iter().zip(&strides) {
            let term = i128::from(d - 1) * i128::from(s);
            if term < 0 {
                lo = lo.checked_add(term)?;
            } else {
                hi = hi.checked_add(term)?;
            }
        }
        let elem = (i128::from(self.dtype.bits) * i128::from(self.dtype.lanes) + 7) / 8;
        let base = offset as i128 + i128::from(self.byte_offset);
        let start = lo.checked_mul(elem)?.checked_add(base)?;
        let end = hi.checked_add(1)?.checked_mul(elem)?.checked_add(base)?;
        Some(start..end)
    }
}

/// The most elements a typed view is walked for.
const WALK_LIMIT: usize = 1 << 12;

/// Bit-exact equality (NaN payloads included), to compare `to_vec` with the view.
trait Same: Copy {
    fn same(self, other: Self) -> bool;
}

macro_rules! same_by_eq {
    ($($t:ty),*) => { $(impl Same for $t { fn same(self, other: Self) -> bool { self == other } })* };
}
same_by_eq!(u8, i8, bool, i16, u16, i32, u32, i64, u64);

impl Same for f32 {
    fn same(self, other: Self) -> bool {
        self.to_bits() == other.to_bits()
    }
}

impl Same for f64 {
    fn same(self, other: Self) -> bool {
        self.to_bits() == other.to_bits()
    }
}

fn walk<T: Element + Same>(t: &ManagedTensor, span: &Range<usize>) {
    // Broadcast (stride-0) axes let a few bytes hold billions of elements: walk those only
    // up to WALK_LIMIT elements, enough to reach every byte of a small buffer many times.
    if t.dtype() != T::DTYPE || !t.is_host_accessible() || t.len() > WALK_LIMIT {
        return;
    }
    let Ok(view) = t.view::<T>() else {
        assert!(t.to_vec::<T>().is_err(), "view refused but to_vec accepted");
        return;
    };
    let mut count = 0usize;
    for element in view.iter() {
        let start = std::ptr::from_ref(element).addr();
        assert!(
            span.start <= start && start + size_of::<T>() <= span.end,
            "element at {start:#x} outside the span {span:x?}"
        );
        count += 1;
    }
    assert_eq!(count, t.len());
    let copied = t.to_vec::<T>().expect("to_vec after a successful view");
    assert!(copied.len() == t.len() && copied.iter().zip(view.iter()).all(|(a, b)| a.same(*b)));
}

fn check(input: &Input) {
    let described = input.described_bytes();
    let (imported, counter, buffer, buffer_len, free): (_, _, _, _, Box<dyn FnOnce()>) =
        if input.legacy {
            let built = input.foreign().build_legacy();
            // SAFETY: a live fixture block whose arrays hold min(ndim, MAX_NDIM) readable i64s;
            // data outside the buffer is only read if accepted and described inside it (never).
            let result = unsafe { ManagedTensor::from_raw_legacy(built.ptr) };
            let (counter, p) = (built.counter(), built.pointers);
            // SAFETY: only called for a NULL deleter, after the importer's result is dropped.
            let free = Box::new(move || unsafe { built.free() });
            (result, counter, p.buffer, p.buffer_len, free)
        } else {
            let built = input.foreign().build();
            // SAFETY: as above, versioned.
            let result = unsafe { ManagedTensor::from_raw(built.ptr) };
            let (counter, p) = (built.counter(), built.pointers);
            // SAFETY: as above.
            let free = Box::new(move || unsafe { built.free() });
            (result, counter, p.buffer, p.buffer_len, free)
        };
    let expected = usize::from(input.deleter);
    match imported {
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert_eq!(counter.load(Ordering::SeqCst), expected, "refused: {e}");
        }
        Ok(t) => {
            assert_eq!(counter.load(Ordering::SeqCst), 0);
            let span = t.byte_span();
            let inside = described
                .as_ref()
                .is_some_and(|b| b.start >= 0 && b.end <= buffer_len as i128);
            if inside {
                let buf = buffer.addr();
                assert!(
                    buf <= span.start && span.end <= buf + buffer_len && !span.is_empty(),
                    "span {span:x?} outside the buffer {buf:#x}+{buffer_len}"
                );
                if t.dtype().is_byte_sized() || t.flags().contains(Flags::IS_SUBBYTE_TYPE_PADDED) {
                    let b = described.unwrap_or(0..0);
                    assert_eq!(span.start as i128 - buf as i128, b.start);
                    assert_eq!(span.end as i128 - buf as i128, b.end);
                }
                walk::<u8>(&t, &span);
                walk::<i8>(&t, &span);
                walk::<bool>(&t, &span);
                walk::<i16>(&t, &span);
                walk::<u16>(&t, &span);
                walk::<i32>(&t, &span);
                walk::<u32>(&t, &span);
                walk::<f32>(&t, &span);
                walk::<i64>(&t, &span);
                walk::<u64>(&t, &span);
                walk::<f64>(&t, &span);
            } else if t.is_empty() {
                assert!(span.is_empty());
                if let Ok(view) = t.view::<u8>() {
                    assert_eq!(view.iter().count(), 0);
                }
            }
            drop(t);
            assert_eq!(counter.load(Ordering::SeqCst), expected);
        }
    }
    if !input.deleter {
        free();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if let Ok(input) = Input::arbitrary(&mut u) {
        check(&input);
    }
});
