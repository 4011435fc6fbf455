//! Property test of the import path: whatever a foreign producer writes into a managed tensor
//! (ndim, shape, strides, byte_offset, dtype, device, flags, version, NULLs, misaligned arrays),
//! `ManagedTensor::from_raw` / `from_raw_legacy` either refuses it, having run the deleter
//! exactly once, or accepts it with a `byte_span()` that lies inside the producer's buffer
//! whenever the fields describe memory inside it, a typed view that reaches only bytes inside
//! that span, a working `to_vec`, and a deleter that runs exactly once on drop.
//!
//! The invariant is `dlpack_testing::import_check`, which `fuzz/fuzz_targets/import.rs` fuzzes
//! too (see docs/bad-inputs.md); this file draws the inputs and counts the outcomes.

use std::sync::atomic::Ordering;

use dlpack_core::{DataType, DataTypeCode, Device, DeviceType, Error, MAX_NDIM, ManagedTensor};
use dlpack_testing::import_check::{self, ArrayChoice, Input, Outcome};
use dlpack_testing::{Data, Foreign};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Cases per property: the default test command runs them natively in a few seconds; Miri
/// interprets every byte access, so it gets a handful. `PROPTEST_CASES` overrides both (the
/// valgrind leak check in scripts/steps/hardening.check.sh sets it low).
const CASES: u32 = if cfg!(miri) { 12 } else { 10_000 };

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

/// Checks `input` against the import invariant, failing the case with its message.
fn check(input: &Input) -> Result<Outcome, TestCaseError> {
    import_check::check(input).map_err(TestCaseError::fail)
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
