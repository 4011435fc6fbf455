//! Property test of the import path: whatever a foreign producer writes into a managed tensor
//! (ndim, shape, strides, byte_offset, dtype, device, flags, version, NULLs, misaligned arrays),
//! `ManagedTensor::from_raw` / `from_raw_legacy` either refuses it, having run the deleter
//! exactly once, or accepts it with a `byte_span()` that lies inside the producer's buffer
//! whenever the fields describe memory inside it, a typed view that reaches only bytes inside
//! that span, a working `to_vec`, and a deleter that runs exactly once on drop.
//!
//! The same invariant is fuzzed by `fuzz/fuzz_targets/import.rs` (see docs/bad-inputs.md).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::{
    DataType, DataTypeCode, Device, DeviceType, Element, Error, Flags, MAX_NDIM, ManagedTensor,
};
use dlpack_testing::{Array, Data, Foreign, row_major};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Cases per property: the default test command runs them natively in a few seconds; Miri
/// interprets every byte access, so it gets a handful. `PROPTEST_CASES` overrides both (the
/// valgrind leak check in scripts/steps/hardening.check.sh sets it low).
const CASES: u32 = if cfg!(miri) { 12 } else { 10_000 };

/// How a `shape` or `strides` field is filled.
#[derive(Clone, Debug)]
enum ArrayChoice {
    /// Real values (padded with 1s by the fixture up to `ndim`).
    Values(Vec<i64>),
    /// NULL.
    Null,
    /// A real array 4 bytes off its alignment.
    Misaligned,
    /// For strides only: the compact row-major strides of the shape.
    RowMajor,
}

/// Every field of one foreign tensor.
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

fn dim() -> impl Strategy<Value = i64> {
    prop_oneof![
        24 => 0i64..6,
        1 => -3i64..0,
        1 => Just(i64::MAX),
        1 => Just(i64::MIN),
        1 => any::<i64>(),
        1 => (1i64 << 31)..(1i64 << 33),
    ]
}

fn stride() -> impl Strategy<Value = i64> {
    prop_oneof![
        24 => -8i64..9,
        1 => Just(i64::MAX),
        1 => Just(i64::MIN),
        1 => any::<i64>(),
        1 => (1i64 << 40)..(1i64 << 62),
    ]
}

fn array(values: BoxedStrategy<i64>, row_major_allowed: bool) -> BoxedStrategy<ArrayChoice> {
    let weight = if row_major_allowed { 6 } else { 0 };
    prop_oneof![
        8 => proptest::collection::vec(values, 0..=5).prop_map(ArrayChoice::Values),
        weight => Just(ArrayChoice::RowMajor),
        1 => Just(ArrayChoice::Null),
        1 => Just(ArrayChoice::Misaligned),
    ]
    .boxed()
}

fn dtype() -> impl Strategy<Value = DataType> {
    let known = prop::sample::select(vec![
        DataType::U8,
        DataType::I8,
        DataType::BOOL,
        DataType::I16,
        DataType::U16,
        DataType::I32,
        DataType::U32,
        DataType::F32,
        DataType::I64,
        DataType::U64,
        DataType::F64,
        DataType::F16,
        DataType::BF16,
        DataType::C64,
        DataType::C128,
        DataType::F8_E4M3FN,
        DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 1),
        DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 2),
        DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 3),
        DataType::new(DataTypeCode::FLOAT6_E3M2FN, 6, 1),
        DataType::new(DataTypeCode::FLOAT6_E2M3FN, 6, 4),
        DataType::new(DataTypeCode::OPAQUE_HANDLE, 24, 1),
        DataType::new(DataTypeCode::UINT, 8, 4),
    ]);
    let near = (
        0u8..20,
        prop::sample::select(vec![0u8, 1, 4, 6, 7, 8, 12, 16, 32, 64, 128, 255]),
        prop::sample::select(vec![0u16, 1, 2, 3, 4, 16, u16::MAX]),
    )
        .prop_map(|(code, bits, lanes)| DataType::new(DataTypeCode(code), bits, lanes));
    let wild = (any::<u8>(), any::<u8>(), any::<u16>())
        .prop_map(|(code, bits, lanes)| DataType::new(DataTypeCode(code), bits, lanes));
    prop_oneof![16 => known, 3 => near, 1 => wild]
}

fn device() -> impl Strategy<Value = Device> {
    let device_type = prop_oneof![
        8 => Just(DeviceType::CPU),
        1 => Just(DeviceType::CUDA_HOST),
        1 => Just(DeviceType::CUDA),
        1 => any::<i32>().prop_map(DeviceType),
    ];
    (device_type, prop_oneof![4 => Just(0), 1 => any::<i32>()])
        .prop_map(|(t, id)| Device::new(t, id))
}

fn input() -> impl Strategy<Value = Input> {
    let header = (
        prop::bool::weighted(0.2),
        prop_oneof![12 => Just((1u32, 3u32)), 2 => (0u32..3, 0u32..6), 1 => any::<(u32, u32)>()],
        prop_oneof![12 => Just(0u64), 4 => 0u64..8, 1 => any::<u64>()],
        prop_oneof![
            12 => Just(None),
            2 => (0i32..6).prop_map(Some),
            1 => (-4i32..0).prop_map(Some),
            1 => (MAX_NDIM as i32 - 2..MAX_NDIM as i32 + 3).prop_map(Some),
            1 => prop::sample::select(vec![i32::MIN, i32::MAX]).prop_map(Some),
        ],
        prop::bool::weighted(0.95),
    );
    let layout = (
        array(dim().boxed(), false),
        array(stride().boxed(), true),
        dtype(),
        device(),
    );
    let memory = (
        prop_oneof![
            10 => (0usize..80).prop_map(|offset| Data::Buffer { offset }),
            1 => Just(Data::Null),
            1 => (1usize..usize::MAX).prop_map(Data::Fake),
        ],
        prop_oneof![6 => Just(0u64), 4 => 0u64..64, 1 => any::<u64>()],
        proptest::collection::vec(any::<u8>(), 0..160),
    );
    (header, layout, memory).prop_map(
        |(
            (legacy, version, flags, ndim, deleter),
            (shape, strides, dtype, device),
            (data, byte_offset, buffer),
        )| Input {
            legacy,
            version,
            flags,
            ndim,
            shape,
            strides,
            dtype,
            device,
            data,
            byte_offset,
            buffer,
            deleter,
        },
    )
}

impl Input {
    /// The shape values as given (before the fixture pads them).
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

    fn foreign(&self) -> Foreign {
        let shape = self.shape_values();
        // The buffer is the input's; U8 keeps the fixture's default buffer small (a wild
        // dtype times a large shape would ask for gigabytes).
        let mut f = Foreign::new(DataType::U8, &shape)
            .dtype(self.dtype)
            .bytes(&self.buffer)
            .version(self.version.0, self.version.1)
            .flags(self.flags)
            .shape(self.to_array(&self.shape))
            .strides(self.to_array(&self.strides))
            .device(self.device)
            .data(self.data)
            .byte_offset(self.byte_offset);
        // A NULL shape counts as 0 dimensions unless `ndim` says otherwise.
        if let Some(ndim) = self.ndim {
            f = f.ndim(ndim);
        } else if matches!(self.shape, ArrayChoice::Misaligned) {
            f = f.ndim(2);
        }
        if !self.deleter {
            f = f.no_deleter();
        }
        f
    }

    /// The `ndim` the header carries.
    fn header_ndim(&self) -> i32 {
        match (self.ndim, &self.shape) {
            (Some(n), _) => n,
            (None, ArrayChoice::Misaligned) => 2,
            (None, ArrayChoice::Values(v)) => v.len() as i32,
            (None, _) => 0,
        }
    }

    /// The array the importer reads for `choice` (the fixture pads real arrays with 1s and
    /// fills misaligned ones with 1s), or `None` for NULL.
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

    /// The byte range (relative to the buffer's start) that the fields describe, computed
    /// independently of dlpack-core in i128: `Some` only when the data pointer is the buffer,
    /// the tensor has elements and the layout can be read. It is the strided reach with
    /// `ceil(bits * lanes / 8)`-byte elements, a superset of the packed sub-byte layout.
    fn described_bytes(&self) -> Option<Range<i128>> {
        let Data::Buffer { offset } = self.data else {
            return None;
        };
        let ndim = usize::try_from(self.header_ndim())
            .ok()
            .filter(|&n| n <= MAX_NDIM)?;
        let shape = self.read(&self.shape, ndim)?;
        let strides = match self.read(&self.strides, ndim) {
            Some(s) => s,
            None => row_major(&shape),
        };
        if shape.iter().any(|&d| d <= 0) {
            return None;
        }
        let (mut lo, mut hi) = (0i128, 0i128);
        for (&d, &s) in shape.iter().zip(&strides) {
            // Each term is below 2^126 in magnitude; the sums of up to MAX_NDIM may not fit.
            let term = i128::from(d - 1) * i128::from(s);
            if term < 0 {
                lo = lo.checked_add(term)?;
            } else {
                hi = hi.checked_add(term)?;
            }
        }
        let elem = i128::from(self.dtype.bits) * i128::from(self.dtype.lanes);
        let elem = (elem + 7) / 8;
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

/// Walks a typed view when `T` is the tensor's dtype: every element must lie in `span`, the
/// view must have `len()` elements and `to_vec` must return the same values.
fn walk<T: Element + Same>(t: &ManagedTensor, span: &Range<usize>) -> Result<bool, TestCaseError> {
    // Broadcast (stride-0) axes let a few bytes hold billions of elements: walk those only
    // up to WALK_LIMIT elements, enough to reach every byte of a small buffer many times.
    if t.dtype() != T::DTYPE || !t.is_host_accessible() || t.len() > WALK_LIMIT {
        return Ok(false);
    }
    let Ok(view) = t.view::<T>() else {
        // Misaligned data, or (for bool) a byte that is not 0 or 1: `to_vec` refuses too.
        prop_assert!(t.to_vec::<T>().is_err());
        return Ok(false);
    };
    let mut count = 0usize;
    for element in view.iter() {
        let start = std::ptr::from_ref(element).addr();
        prop_assert!(
            span.start <= start && start + size_of::<T>() <= span.end,
            "element at {start:#x} outside the span {span:x?}"
        );
        count += 1;
    }
    prop_assert_eq!(count, t.len());
    let copied = t
        .to_vec::<T>()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(
        copied.len() == t.len() && copied.iter().zip(view.iter()).all(|(a, b)| a.same(*b))
    );
    Ok(true)
}

/// What became of one input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Refused,
    /// Accepted, but the fields do not describe memory inside the buffer (fake or NULL data,
    /// no elements, or a layout reaching outside it): nothing is read.
    AcceptedElsewhere,
    /// Accepted over the buffer; `walked` says whether a typed view was walked.
    AcceptedInside {
        walked: bool,
    },
}

/// Imports `input` and checks the invariant.
fn check(input: &Input) -> Result<Outcome, TestCaseError> {
    let described = input.described_bytes();
    let (imported, counter, buffer, buffer_len, freer): (_, Arc<AtomicUsize>, _, _, _) =
        if input.legacy {
            let built = input.foreign().build_legacy();
            // SAFETY: the fixture owns a live block whose arrays hold `min(ndim, MAX_NDIM)`
            // readable i64s; its data pointer is either fake/NULL (then the tensor is only read
            // when accepted and `described` says it lies in the buffer) or inside the buffer.
            // Ownership passes to the importer.
            let result = unsafe { ManagedTensor::from_raw_legacy(built.ptr) };
            let (counter, p) = (built.counter(), built.pointers);
            (
                result,
                counter,
                p.buffer,
                p.buffer_len,
                Freer::Legacy(built),
            )
        } else {
            let built = input.foreign().build();
            // SAFETY: as above, for the versioned block.
            let result = unsafe { ManagedTensor::from_raw(built.ptr) };
            let (counter, p) = (built.counter(), built.pointers);
            (
                result,
                counter,
                p.buffer,
                p.buffer_len,
                Freer::Versioned(built),
            )
        };
    let expected_deletes = usize::from(input.deleter);
    let outcome = match imported {
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            prop_assert_eq!(counter.load(Ordering::SeqCst), expected_deletes);
            Outcome::Refused
        }
        Ok(t) => {
            prop_assert_eq!(counter.load(Ordering::SeqCst), 0);
            let span = t.byte_span();
            let inside = described
                .as_ref()
                .is_some_and(|bytes| bytes.start >= 0 && bytes.end <= buffer_len as i128);
            let outcome = if inside {
                let buf = buffer.addr();
                prop_assert!(
                    buf <= span.start && span.end <= buf + buffer_len && !span.is_empty(),
                    "span {span:x?} outside the buffer {buf:#x}+{buffer_len}"
                );
                // Packed sub-byte tensors span fewer bytes than the strided superset.
                if t.dtype().is_byte_sized() || t.flags().contains(Flags::IS_SUBBYTE_TYPE_PADDED) {
                    let bytes = described.unwrap_or(0..0);
                    prop_assert_eq!(span.start as i128 - buf as i128, bytes.start);
                    prop_assert_eq!(span.end as i128 - buf as i128, bytes.end);
                }
                let walked = walk::<u8>(&t, &span)?
                    | walk::<i8>(&t, &span)?
                    | walk::<bool>(&t, &span)?
                    | walk::<i16>(&t, &span)?
                    | walk::<u16>(&t, &span)?
                    | walk::<i32>(&t, &span)?
                    | walk::<u32>(&t, &span)?
                    | walk::<f32>(&t, &span)?
                    | walk::<i64>(&t, &span)?
                    | walk::<u64>(&t, &span)?
                    | walk::<f64>(&t, &span)?;
                Outcome::AcceptedInside { walked }
            } else {
                if t.is_empty() {
                    // No element: a view exists but reaches nothing.
                    prop_assert!(span.is_empty());
                    if let Ok(view) = t.view::<u8>() {
                        prop_assert_eq!(view.iter().count(), 0);
                    }
                }
                Outcome::AcceptedElsewhere
            };
            drop(t);
            prop_assert_eq!(counter.load(Ordering::SeqCst), expected_deletes);
            outcome
        }
    };
    if !input.deleter {
        freer.free();
    }
    Ok(outcome)
}

/// A built block to free by hand when its deleter is NULL.
enum Freer {
    Versioned(dlpack_testing::Built<dlpack_core::ffi::DLManagedTensorVersioned>),
    Legacy(dlpack_testing::Built<dlpack_core::ffi::DLManagedTensor>),
}

impl Freer {
    fn free(self) {
        // SAFETY: called only for blocks with a NULL deleter, which the importer never frees,
        // after the importer's result (the only other user of the pointer) was dropped.
        unsafe {
            match self {
                Freer::Versioned(b) => b.free(),
                Freer::Legacy(b) => b.free(),
            }
        }
    }
}

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

#[test]
fn any_foreign_tensor_is_refused_and_deleted_or_accepted_inside_its_buffer() {
    let outcomes = std::cell::RefCell::new(Vec::new());
    let result = TestRunner::new(config()).run(&input(), |input| {
        outcomes.borrow_mut().push(check(&input)?);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The generator must exercise every outcome, or the property says little.
    let outcomes = outcomes.into_inner();
    let count = |wanted: fn(&Outcome) -> bool| outcomes.iter().filter(|o| wanted(o)).count();
    let refused = count(|o| *o == Outcome::Refused);
    let elsewhere = count(|o| *o == Outcome::AcceptedElsewhere);
    let inside = count(|o| matches!(o, Outcome::AcceptedInside { .. }));
    let walked = count(|o| *o == Outcome::AcceptedInside { walked: true });
    let n = outcomes.len();
    eprintln!(
        "{n} cases: {refused} refused, {elsewhere} accepted elsewhere, {inside} accepted inside the buffer ({walked} walked)"
    );
    // Checked when the run is large enough to say something (not under Miri or valgrind,
    // which run a few cases); the thresholds are a fifth of the usual rates.
    if n >= 5000 {
        assert!(
            refused > n / 10 && elsewhere > n / 20 && inside > n / 60,
            "too few cases of some outcome: {refused} refused, {elsewhere} elsewhere, {inside} inside"
        );
        assert!(
            walked > n / 400,
            "only {walked} of {n} cases walked a typed view"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn well_formed_layouts_over_the_buffer_are_accepted_and_stay_inside_it(
        shape in proptest::collection::vec(1i64..4, 0..=4),
        strides in proptest::collection::vec(-3i64..4, 4),
        offset in 0u64..16,
        legacy in any::<bool>(),
    ) {
        // Negative strides need the first element far enough in: start in the middle.
        let reach: i64 = shape.iter().zip(&strides).map(|(d, s)| (d - 1) * s.abs()).sum();
        let strides = strides[..shape.len()].to_vec();
        let input = Input {
            legacy,
            version: (1, 3),
            flags: 0,
            ndim: None,
            shape: ArrayChoice::Values(shape),
            strides: ArrayChoice::Values(strides),
            dtype: DataType::U8,
            device: Device::CPU,
            data: Data::Buffer { offset: reach as usize },
            byte_offset: offset,
            buffer: (0..=255u8).cycle().take(2 * reach as usize + 17).collect(),
            deleter: true,
        };
        prop_assert!(matches!(check(&input)?, Outcome::AcceptedInside { walked: true }), "refused a valid layout: {:?}", input);
    }
}

#[test]
fn a_null_managed_tensor_is_refused_without_a_deleter_call() {
    // SAFETY: NULL is allowed and owns nothing.
    let err = unsafe { ManagedTensor::from_raw(std::ptr::null_mut()) }.unwrap_err();
    assert!(matches!(err, Error::NullPointer { .. }), "{err}");
    // SAFETY: as above.
    let err = unsafe { ManagedTensor::from_raw_legacy(std::ptr::null_mut()) }.unwrap_err();
    assert!(matches!(err, Error::NullPointer { .. }), "{err}");
}

#[test]
fn imported_tensors_dropped_concurrently_on_other_threads_are_deleted_once_each() {
    let threads = if cfg!(miri) { 2 } else { 8 };
    let mut counters = Vec::new();
    let mut tensors = Vec::new();
    for i in 0..threads {
        let shape = [2, i64::from(i) + 1];
        let values: Vec<i32> = (0..2 * (i + 1)).collect();
        let foreign = Foreign::of(&values, &shape);
        let t = if i % 2 == 0 {
            let built = foreign.build();
            counters.push(built.counter());
            // SAFETY: a well-formed block from the fixture; ownership passes to the importer.
            unsafe { ManagedTensor::from_raw(built.ptr) }
        } else {
            let built = foreign.build_legacy();
            counters.push(built.counter());
            // SAFETY: as above, legacy.
            unsafe { ManagedTensor::from_raw_legacy(built.ptr) }
        };
        tensors.push(t.unwrap());
    }
    let sums: Vec<i32> = std::thread::scope(|s| {
        let handles: Vec<_> = tensors
            .into_iter()
            .map(|t| {
                s.spawn(move || {
                    let sum = t.view::<i32>().unwrap().iter().sum();
                    drop(t);
                    sum
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (sum, counter)) in sums.iter().zip(&counters).enumerate() {
        let n = 2 * (i as i32 + 1);
        assert_eq!(*sum, n * (n - 1) / 2);
        assert_eq!(counter.load(Ordering::SeqCst), 1, "tensor {i}");
    }
}
