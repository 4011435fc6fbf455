//! Malformed and hostile input from a foreign producer.
//!
//! Every tensor here is built by `common::Foreign`, the way a C library would build it, not by
//! this crate's export path. Each test checks the exact [`Error`] variant, that its message names
//! the field and the value found, and that the producer's deleter runs exactly once (never for a
//! NULL deleter), whether the tensor is refused on import, refused on typed access, or used and
//! dropped. The suite also runs under Miri with `-Zmiri-strict-provenance`.

mod common;

use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::sync::Mutex;

use common::{Array, Built, Data, Foreign};
use dlpack_core::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use dlpack_core::{
    DataType, DataTypeCode, Device, DeviceHooks, DeviceType, Error, Flags, ManagedTensor,
    MemoryKind, PointerInfo, Version,
};

// --- helpers ---------------------------------------------------------------------------------

/// Imports a fixture tensor.
fn import(built: &Built<DLManagedTensorVersioned>) -> Result<ManagedTensor, Error> {
    // SAFETY: the fixture's block is live and owned by the test, which hands it over here once.
    // Its version, flags and deleter are readable; its shape and strides, when not NULL and
    // aligned, hold at least min(ndim, MAX_NDIM) readable i64s. Its data description may lie
    // (that is the point of these tests): validation must refuse such a tensor before reading
    // any element, and Miri checks that it does.
    unsafe { ManagedTensor::from_raw(built.ptr) }
}

/// Imports a legacy fixture tensor.
fn import_legacy(built: &Built<DLManagedTensor>) -> Result<ManagedTensor, Error> {
    // SAFETY: as in `import`, for a legacy block.
    unsafe { ManagedTensor::from_raw_legacy(built.ptr) }
}

/// Builds and imports a tensor that must be refused; checks that its deleter ran exactly once.
#[track_caller]
fn refused(foreign: Foreign) -> Error {
    let built = foreign.build();
    let err = import(&built).expect_err("the tensor must be refused");
    assert_eq!(
        built.deletes(),
        1,
        "a refused tensor is deleted exactly once ({err})"
    );
    err
}

/// As `refused`, for a legacy tensor.
#[track_caller]
fn refused_legacy(foreign: Foreign) -> Error {
    let built = foreign.build_legacy();
    let err = import_legacy(&built).expect_err("the tensor must be refused");
    assert_eq!(
        built.deletes(),
        1,
        "a refused tensor is deleted exactly once ({err})"
    );
    err
}

/// Builds and imports a tensor that must be accepted (not deleted yet).
#[track_caller]
fn accepted(foreign: Foreign) -> (ManagedTensor, Built<DLManagedTensorVersioned>) {
    let built = foreign.build();
    let tensor = import(&built).unwrap_or_else(|e| panic!("the tensor must be accepted: {e}"));
    assert_eq!(
        built.deletes(),
        0,
        "an accepted tensor is not deleted before it is dropped"
    );
    (tensor, built)
}

/// Drops an accepted tensor and checks that its deleter ran exactly once.
#[track_caller]
fn drop_once<H>(tensor: ManagedTensor, built: &Built<H>) {
    drop(tensor);
    assert_eq!(built.deletes(), 1, "the deleter runs exactly once, on drop");
}

/// Checks that an error's message mentions every part.
#[track_caller]
fn says(err: &Error, parts: &[&str]) {
    let message = err.to_string();
    for part in parts {
        assert!(
            message.contains(part),
            "the message {message:?} should mention {part:?}"
        );
    }
}

fn iota_f32(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

// --- the managed header ----------------------------------------------------------------------

#[test]
fn null_managed_pointer_is_refused_without_calling_anything() {
    // SAFETY: NULL is explicitly allowed and owns nothing.
    let err = unsafe { ManagedTensor::from_raw(ptr::null_mut()) }.unwrap_err();
    assert_eq!(
        err,
        Error::NullPointer {
            what: "managed tensor"
        }
    );
    says(&err, &["managed tensor", "NULL"]);
    // SAFETY: as above.
    let err = unsafe { ManagedTensor::from_raw_legacy(ptr::null_mut()) }.unwrap_err();
    assert_eq!(
        err,
        Error::NullPointer {
            what: "managed tensor"
        }
    );
    says(&err, &["managed tensor", "NULL"]);
}

#[test]
fn major_version_0_is_deleted_once_and_not_read_further() {
    let err = refused(
        Foreign::new(DataType::F32, &[2])
            .version(0, 5)
            .garbage_tensor(),
    );
    assert_eq!(
        err,
        Error::IncompatibleVersion {
            found: Version::new(0, 5)
        }
    );
    says(&err, &["version 0.5", "deleter"]);
}

#[test]
fn major_version_2_is_deleted_once_and_not_read_further() {
    let err = refused(
        Foreign::new(DataType::F32, &[2])
            .version(2, 0)
            .garbage_tensor(),
    );
    assert_eq!(
        err,
        Error::IncompatibleVersion {
            found: Version::new(2, 0)
        }
    );
    says(&err, &["version 2.0", "deleter"]);
}

#[test]
fn refused_tensor_with_a_null_deleter_calls_nothing_and_leaks_nothing() {
    for foreign in [
        Foreign::new(DataType::F32, &[2])
            .version(2, 0)
            .garbage_tensor(),
        Foreign::new(DataType::F32, &[2, -1]),
    ] {
        let built = foreign.no_deleter().build();
        let err = import(&built).unwrap_err();
        assert!(
            matches!(
                err,
                Error::IncompatibleVersion { .. } | Error::NegativeDim { .. }
            ),
            "{err}"
        );
        assert_eq!(built.deletes(), 0);
        // SAFETY: the deleter is NULL, so nobody freed the block; nobody uses it afterwards.
        unsafe { built.free() };
    }
}

#[test]
fn unknown_flag_bits_are_refused_and_deleted_once() {
    let err = refused(Foreign::of(&[1.0f32, 2.0], &[2]).flags(Flags::READ_ONLY.0 | 0x10));
    assert_eq!(err, Error::UnknownFlags { flags: Flags(0x11) });
    says(&err, &["flags 0x11", "(0x10)"]);

    let err = refused(Foreign::of(&[1.0f32, 2.0], &[2]).flags(1 << 63));
    assert_eq!(
        err,
        Error::UnknownFlags {
            flags: Flags(1 << 63)
        }
    );
    says(&err, &["flags 0x8000000000000000"]);
}

#[test]
fn negative_ndim_is_refused_and_deleted_once() {
    let err = refused(Foreign::new(DataType::F32, &[2]).ndim(-1));
    assert_eq!(err, Error::BadNdim { ndim: -1 });
    says(&err, &["ndim = -1", "0..=1024"]);

    let err = refused(Foreign::new(DataType::F32, &[2]).ndim(i32::MIN));
    assert_eq!(
        err,
        Error::BadNdim {
            ndim: i32::MIN.into()
        }
    );
    says(&err, &["ndim = -2147483648"]);
}

#[test]
fn ndim_above_max_ndim_is_refused_before_reading_the_arrays() {
    // The fixture's arrays hold MAX_NDIM = 1024 entries: reading `ndim` of them would be an
    // out-of-bounds read (reported by Miri).
    for ndim in [1025, 4096, i32::MAX] {
        let err = refused(Foreign::new(DataType::F32, &[2]).ndim(ndim));
        assert_eq!(err, Error::BadNdim { ndim: ndim.into() });
        says(&err, &[&format!("ndim = {ndim}"), "0..=1024"]);
    }
}

#[test]
fn max_ndim_dimensions_are_accepted() {
    // 1024 axes of size 1 (the fixture pads the shape and strides with 1s).
    let (t, built) = accepted(Foreign::of(&[42u8], &[1]).ndim(1024));
    assert_eq!(t.ndim(), 1024);
    assert_eq!(t.len(), 1);
    assert_eq!(t.to_vec::<u8>().unwrap(), [42]);
    drop_once(t, &built);
}

// --- shape and strides -----------------------------------------------------------------------

#[test]
fn null_shape_with_dims_is_refused_and_deleted_once() {
    let err = refused(
        Foreign::new(DataType::F32, &[2, 3])
            .shape(Array::Null)
            .ndim(2),
    );
    assert_eq!(err, Error::NullPointer { what: "shape" });
    says(&err, &["shape pointer is NULL"]);
}

#[test]
fn null_shape_with_ndim_0_is_accepted_as_a_scalar() {
    let (t, built) = accepted(
        Foreign::of(&[7.5f32], &[])
            .shape(Array::Null)
            .strides(Array::Null),
    );
    assert_eq!(t.ndim(), 0);
    assert_eq!(t.shape(), &[] as &[i64]);
    assert_eq!(t.strides(), &[] as &[i64]);
    assert_eq!(t.len(), 1);
    let view = t.view::<f32>().unwrap();
    assert_eq!(view.get(&[]), Some(&7.5));
    assert_eq!(view.to_vec().unwrap(), [7.5]);
    assert_eq!(t.byte_span(), built.buffer_addr()..built.buffer_addr() + 4);
    drop_once(t, &built);
}

#[test]
fn negative_dim_is_refused_and_deleted_once() {
    let err = refused(Foreign::new(DataType::F32, &[2, -3, 4]));
    assert_eq!(err, Error::NegativeDim { axis: 1, value: -3 });
    says(&err, &["shape[1] = -3"]);

    let err = refused(Foreign::new(DataType::F32, &[i64::MIN]));
    assert_eq!(
        err,
        Error::NegativeDim {
            axis: 0,
            value: i64::MIN
        }
    );
    says(&err, &["shape[0] = -9223372036854775808"]);
}

#[test]
fn null_strides_from_version_1_2_on_are_refused() {
    for minor in [2, 3, 9] {
        let foreign = Foreign::of(&iota_f32(6), &[2, 3])
            .version(1, minor)
            .strides(Array::Null);
        let err = refused(foreign);
        assert_eq!(
            err,
            Error::NullStrides {
                ndim: 2,
                version: Version::new(1, minor)
            }
        );
        says(
            &err,
            &["strides is NULL", "2-d", &format!("DLPack 1.{minor}")],
        );
    }
}

#[test]
fn null_strides_in_versions_1_0_and_1_1_mean_compact_row_major() {
    let values: Vec<i32> = (0..24).collect();
    for minor in [0, 1] {
        let foreign = Foreign::of(&values, &[2, 3, 4])
            .version(1, minor)
            .strides(Array::Null);
        let (t, built) = accepted(foreign);
        assert_eq!(t.strides(), &[12, 4, 1]);
        assert!(t.is_row_major_contiguous());
        let view = t.view::<i32>().unwrap();
        assert_eq!(view.strides(), &[12, 4, 1]);
        assert_eq!(view.as_slice(), Some(&values[..]));
        assert_eq!(view.get(&[1, 2, 3]), Some(&23));
        assert_eq!(t.to_vec::<i32>().unwrap(), values);
        drop_once(t, &built);
    }
}

#[test]
fn null_strides_in_legacy_tensors_mean_compact_row_major() {
    let values: Vec<i32> = (0..24).collect();
    let built = Foreign::of(&values, &[2, 3, 4])
        .strides(Array::Null)
        .build_legacy();
    let t = import_legacy(&built).unwrap();
    assert_eq!(t.version(), Version::new(0, 0));
    assert_eq!(t.strides(), &[12, 4, 1]);
    assert_eq!(t.to_vec::<i32>().unwrap(), values);
    drop_once(t, &built);
}

#[test]
fn misaligned_shape_pointer_is_refused() {
    let built = Foreign::of(&[1.0f32, 2.0], &[2])
        .shape(Array::Misaligned(vec![2]))
        .build();
    let address = built.pointers.shape.addr();
    assert_ne!(address % 8, 0);
    let err = import(&built).unwrap_err();
    assert_eq!(built.deletes(), 1);
    assert_eq!(
        err,
        Error::MisalignedArray {
            what: "shape",
            address
        }
    );
    says(
        &err,
        &["shape array", &format!("{address:#x}"), "not aligned"],
    );
}

#[test]
fn misaligned_strides_pointer_is_refused() {
    let built = Foreign::of(&[1.0f32, 2.0], &[2])
        .strides(Array::Misaligned(vec![1]))
        .build();
    let address = built.pointers.strides.addr();
    assert_ne!(address % 8, 0);
    let err = import(&built).unwrap_err();
    assert_eq!(built.deletes(), 1);
    assert_eq!(
        err,
        Error::MisalignedArray {
            what: "strides",
            address
        }
    );
    says(
        &err,
        &["strides array", &format!("{address:#x}"), "not aligned"],
    );
}

// --- data ------------------------------------------------------------------------------------

#[test]
fn null_data_with_elements_is_refused() {
    let err = refused(Foreign::new(DataType::F32, &[2, 3]).data(Data::Null));
    assert_eq!(err, Error::NullData { elements: 6 });
    says(&err, &["data pointer is NULL", "6 elements"]);

    // A scalar has one element.
    let err = refused(Foreign::new(DataType::F32, &[]).data(Data::Null));
    assert_eq!(err, Error::NullData { elements: 1 });
    says(&err, &["1 elements"]);
}

#[test]
fn null_data_with_a_zero_size_dim_is_accepted() {
    let (mut t, built) = accepted(Foreign::new(DataType::F32, &[2, 0, 3]).data(Data::Null));
    assert!(t.is_empty());
    assert_eq!(t.byte_span(), 0..0);
    let view = t.view::<f32>().unwrap();
    assert_eq!(view.len(), 0);
    assert_eq!(view.iter().count(), 0);
    assert!(view.to_vec().unwrap().is_empty());
    assert_eq!(view.get(&[0, 0, 0]), None);
    assert_eq!(t.view_mut::<f32>().unwrap().len(), 0);
    drop_once(t, &built);
}

// --- dtype -----------------------------------------------------------------------------------

#[test]
fn unknown_dtype_code_18_is_refused() {
    let err = refused(Foreign::new(DataType::new(DataTypeCode(18), 8, 1), &[4]));
    assert_eq!(err, Error::UnknownDataTypeCode { code: 18 });
    says(&err, &["dtype code 18", "unknown"]);
}

#[test]
fn zero_lanes_are_refused() {
    let dtype = DataType::new(DataTypeCode::FLOAT, 32, 0);
    let err = refused(Foreign::new(dtype, &[4]).buffer_words(2));
    assert_eq!(err, Error::ZeroLanes { dtype });
    says(&err, &["dtype float has", "lanes = 0"]);
}

#[test]
fn float_with_8_bits_is_refused() {
    let dtype = DataType::new(DataTypeCode::FLOAT, 8, 1);
    let err = refused(Foreign::new(dtype, &[4]));
    assert_eq!(
        err,
        Error::UnsupportedBits {
            dtype,
            allowed: &[16, 32, 64]
        }
    );
    says(&err, &["dtype float", "bits = 8", "[16, 32, 64]"]);
}

#[test]
fn fp4_with_8_bits_is_refused() {
    let dtype = DataType::new(DataTypeCode::FLOAT4_E2M1FN, 8, 1);
    let err = refused(Foreign::new(dtype, &[4]));
    assert_eq!(
        err,
        Error::UnsupportedBits {
            dtype,
            allowed: &[4]
        }
    );
    says(&err, &["float4_e2m1fn", "bits = 8", "[4]"]);
}

#[test]
fn fp6_with_8_bits_is_refused() {
    for code in [DataTypeCode::FLOAT6_E2M3FN, DataTypeCode::FLOAT6_E3M2FN] {
        let dtype = DataType::new(code, 8, 1);
        let err = refused(Foreign::new(dtype, &[4]));
        assert_eq!(
            err,
            Error::UnsupportedBits {
                dtype,
                allowed: &[6]
            }
        );
        says(&err, &[code.name().unwrap(), "bits = 8", "[6]"]);
    }
}

#[test]
fn opaque_handle_with_12_bits_is_refused() {
    let dtype = DataType::new(DataTypeCode::OPAQUE_HANDLE, 12, 1);
    let err = refused(Foreign::new(dtype, &[4]).buffer_words(1));
    assert_eq!(
        err,
        Error::UnsupportedBits {
            dtype,
            allowed: &[]
        }
    );
    says(&err, &["opaque_handle", "bits = 12", "multiple of 8"]);
}

#[test]
fn strided_packed_fp4_is_refused() {
    let fp4 = DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 1);
    for strides in [[2], [-1]] {
        let err = refused(
            Foreign::new(fp4, &[4])
                .buffer_words(1)
                .with_strides(&strides),
        );
        assert_eq!(err, Error::StridedSubByte { dtype: fp4 });
        says(&err, &["float4_e2m1fn", "packed", "strides"]);
    }
    let err = refused(Foreign::new(fp4, &[2, 3]).with_strides(&[1, 2]));
    assert_eq!(err, Error::StridedSubByte { dtype: fp4 });
}

#[test]
fn compact_packed_fp4_is_accepted_with_a_span_of_half_a_byte_per_element() {
    let fp4 = DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 1);
    for shape in [&[1][..], &[5], &[2, 4], &[3, 3], &[2, 1, 7]] {
        let (t, built) = accepted(Foreign::new(fp4, shape));
        let n = t.len();
        let start = built.buffer_addr();
        assert_eq!(
            t.byte_span(),
            start..start + (n * 4).div_ceil(8),
            "shape {shape:?}"
        );
        // No Rust element type is fp4.
        assert!(matches!(
            t.view::<u8>(),
            Err(Error::DataTypeMismatch { .. })
        ));
        drop_once(t, &built);
    }
    // fp6 packs the same way: 5 elements, 30 bits, 4 bytes.
    let fp6 = DataType::new(DataTypeCode::FLOAT6_E3M2FN, 6, 1);
    let (t, built) = accepted(Foreign::new(fp6, &[5]));
    assert_eq!(t.byte_span().len(), 4);
    drop_once(t, &built);
}

#[test]
fn padded_fp4_may_be_strided_one_byte_per_element() {
    let fp4 = DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 1);
    let foreign = Foreign::new(fp4, &[4])
        .buffer_words(1)
        .with_strides(&[2])
        .flags(Flags::IS_SUBBYTE_TYPE_PADDED.0);
    let (t, built) = accepted(foreign);
    let start = built.buffer_addr();
    assert_eq!(t.byte_span(), start..start + 7);
    drop_once(t, &built);
}

// --- address arithmetic ----------------------------------------------------------------------

#[test]
fn element_count_overflowing_usize_is_refused() {
    let foreign = Foreign::new(DataType::U8, &[i64::MAX, 3])
        .buffer_words(1)
        .with_strides(&[i64::MAX, i64::MAX]);
    let err = refused(foreign);
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    says(&err, &["element count", "[9223372036854775807, 3]"]);
}

#[test]
fn shape_times_stride_overflowing_i64_is_refused() {
    // (3 - 1) * 2^62 = 2^63 overflows i64 (checked in i128 here), and the bytes reach past
    // the address space.
    let foreign = Foreign::new(DataType::F32, &[3]).with_strides(&[1 << 62]);
    let err = refused(foreign);
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    says(&err, &["strides [4611686018427387904]", "shape [3]"]);
}

#[test]
fn shape_times_stride_overflowing_i128_bits_is_refused() {
    // (i64::MAX - 1) * i64::MAX is about 2^126 elements; in bits that overflows i128.
    let foreign = Foreign::new(DataType::U8, &[i64::MAX])
        .buffer_words(1)
        .with_strides(&[i64::MAX]);
    let err = refused(foreign);
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    says(
        &err,
        &[
            "strides [9223372036854775807]",
            "shape [9223372036854775807]",
        ],
    );

    // Two axes in opposite directions, a wide dtype: reaches below 0 and past usize::MAX.
    let foreign = Foreign::new(DataType::C128, &[1 << 31, 1 << 31])
        .buffer_words(2)
        .with_strides(&[i64::MAX, i64::MIN + 1]);
    let err = refused(foreign);
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    says(
        &err,
        &["strides [9223372036854775807, -9223372036854775807]"],
    );
}

#[test]
fn byte_offset_making_data_plus_offset_overflow_usize_is_refused() {
    let byte_offset = u64::MAX - 7;
    let err = refused(Foreign::of(&[1.0f32, 2.0], &[2]).byte_offset(byte_offset));
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    says(
        &err,
        &[
            &format!("byte_offset {byte_offset}"),
            "leaves the address space",
        ],
    );
}

#[test]
fn negative_strides_reaching_below_address_0_are_refused() {
    // The data is a real (small) address; one step back is 2^63 bytes.
    let stride = -(1i64 << 60);
    let built = Foreign::of(&[1u64, 2], &[2])
        .with_strides(&[stride])
        .build();
    let data = built.buffer_addr();
    assert!(data < 1 << 63);
    let err = import(&built).unwrap_err();
    assert_eq!(built.deletes(), 1);
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    says(
        &err,
        &[
            &format!("data {data:#x}"),
            &format!("strides [{stride}]"),
            "leaves the address space",
        ],
    );
}

#[test]
fn span_larger_than_isize_max_is_refused() {
    // From a real address up 2^63 + 8 bytes: inside usize, but more than isize::MAX bytes.
    let stride = 1i64 << 60;
    let built = Foreign::of(&[1u64, 2], &[2])
        .with_strides(&[stride])
        .build();
    assert!(built.buffer_addr() < (1 << 63) - 8, "the end fits in usize");
    let err = import(&built).unwrap_err();
    assert_eq!(built.deletes(), 1);
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    says(&err, &[&format!("strides [{stride}]"), "shape [2]"]);
}

#[test]
fn zero_size_tensor_with_absurd_strides_is_accepted() {
    let cases: [(&[i64], &[i64]); 3] = [
        (&[0, 5], &[i64::MIN, i64::MAX]),
        (&[3, 0, 2], &[i64::MAX, -1, i64::MIN]),
        (&[0], &[0]),
    ];
    for (shape, strides) in cases {
        let foreign = Foreign::new(DataType::F64, shape)
            .with_strides(strides)
            .byte_offset(u64::MAX);
        let (mut t, built) = accepted(foreign);
        assert!(t.is_empty());
        assert_eq!(t.strides(), strides);
        assert!(t.byte_span().is_empty());
        assert!(t.to_vec::<f64>().unwrap().is_empty());
        assert_eq!(t.view::<f64>().unwrap().iter().count(), 0);
        assert_eq!(t.view_mut::<f64>().unwrap().len(), 0);
        drop_once(t, &built);
    }
}

// --- legacy refusals -------------------------------------------------------------------------

#[test]
fn legacy_refusals_delete_once_too() {
    let err = refused_legacy(Foreign::new(DataType::F32, &[2]).ndim(-1));
    assert_eq!(err, Error::BadNdim { ndim: -1 });
    let err = refused_legacy(
        Foreign::new(DataType::F32, &[2, 3])
            .shape(Array::Null)
            .ndim(2),
    );
    assert_eq!(err, Error::NullPointer { what: "shape" });
    let err = refused_legacy(Foreign::new(DataType::new(DataTypeCode(18), 8, 1), &[4]));
    assert_eq!(err, Error::UnknownDataTypeCode { code: 18 });
    let err = refused_legacy(Foreign::new(DataType::F32, &[2]).data(Data::Null));
    assert_eq!(err, Error::NullData { elements: 2 });
}

// --- typed access ----------------------------------------------------------------------------

#[test]
fn view_with_the_wrong_element_type_is_refused() {
    let (t, built) = accepted(Foreign::of(&[1.0f32, 2.0], &[2]));
    let err = t.view::<f64>().unwrap_err();
    assert_eq!(
        err,
        Error::DataTypeMismatch {
            found: DataType::F32,
            expected: DataType::F64
        }
    );
    says(&err, &["holds float32", "expected float64"]);
    let err = t.to_vec::<i32>().unwrap_err();
    assert_eq!(
        err,
        Error::DataTypeMismatch {
            found: DataType::F32,
            expected: DataType::I32
        }
    );
    says(&err, &["holds float32", "expected int32"]);
    drop_once(t, &built);
}

#[test]
fn view_of_a_misaligned_first_element_is_refused() {
    let (mut t, built) = accepted(Foreign::of(&[1.0f32, 2.0, 3.0], &[2]).byte_offset(1));
    let address = built.buffer_addr() + 1;
    let err = t.view::<f32>().unwrap_err();
    assert_eq!(err, Error::Misaligned { address, align: 4 });
    says(&err, &[&format!("{address:#x}"), "4 bytes"]);
    assert_eq!(
        t.view_mut::<f32>().unwrap_err(),
        Error::Misaligned { address, align: 4 }
    );
    drop_once(t, &built);

    // The same through the data pointer instead of byte_offset.
    let (t, built) =
        accepted(Foreign::of(&[1.0f32, 2.0, 3.0], &[2]).data(Data::Buffer { offset: 2 }));
    let address = built.buffer_addr() + 2;
    assert_eq!(
        t.view::<f32>().unwrap_err(),
        Error::Misaligned { address, align: 4 }
    );
    drop_once(t, &built);
}

#[test]
fn view_of_device_memory_is_refused() {
    let (mut t, built) = accepted(Foreign::of(&[1.0f32, 2.0], &[2]).on(DeviceType::CUDA, 0));
    assert!(!t.is_host_accessible());
    let err = t.view::<f32>().unwrap_err();
    assert_eq!(
        err,
        Error::NotHostAccessible {
            device: Device::cuda(0)
        }
    );
    says(&err, &["cuda:0"]);
    assert_eq!(
        t.to_vec::<f32>().unwrap_err(),
        Error::NotHostAccessible {
            device: Device::cuda(0)
        }
    );
    assert_eq!(
        t.view_mut::<f32>().unwrap_err(),
        Error::NotHostAccessible {
            device: Device::cuda(0)
        }
    );
    drop_once(t, &built);
}

#[test]
fn host_accessible_device_types_are_viewable() {
    for device_type in [
        DeviceType::CUDA_HOST,
        DeviceType::ROCM_HOST,
        DeviceType::CUDA_MANAGED,
    ] {
        let (t, built) = accepted(Foreign::of(&[1.0f32, 2.0], &[2]).on(device_type, 0));
        assert!(t.is_host_accessible());
        assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0]);
        drop_once(t, &built);
    }
}

#[test]
fn bool_view_refuses_a_byte_other_than_0_or_1_naming_its_index() {
    let bytes = [1u8, 0, 1, 2, 0, 1];
    let (t, built) = accepted(Foreign::new(DataType::BOOL, &[2, 3]).bytes(&bytes));
    let err = t.view::<bool>().unwrap_err();
    assert_eq!(
        err,
        Error::InvalidValue {
            dtype: DataType::BOOL,
            index: 3,
            byte: 2
        }
    );
    says(&err, &["element 3", "0x02", "bool"]);
    assert_eq!(t.to_vec::<bool>().unwrap_err(), err);
    // The bytes are fine as u8 (another dtype): refused as a mismatch, not read as bool.
    assert!(matches!(
        t.view::<u8>(),
        Err(Error::DataTypeMismatch { .. })
    ));
    drop_once(t, &built);

    // Transposed: the bad byte at memory offset 3 is index (0, 1), row-major index 1.
    let foreign = Foreign::new(DataType::BOOL, &[3, 2])
        .bytes(&bytes)
        .with_strides(&[1, 3]);
    let (t, built) = accepted(foreign);
    let err = t.view::<bool>().unwrap_err();
    assert_eq!(
        err,
        Error::InvalidValue {
            dtype: DataType::BOOL,
            index: 1,
            byte: 2
        }
    );
    says(&err, &["element 1"]);
    drop_once(t, &built);

    // All valid: the view reads them.
    let (t, built) = accepted(Foreign::new(DataType::BOOL, &[2, 2]).bytes(&[1, 0, 0, 1]));
    assert_eq!(t.to_vec::<bool>().unwrap(), [true, false, false, true]);
    drop_once(t, &built);
}

#[test]
fn compact_bool_view_finds_a_bad_byte_past_the_first_blocks() {
    // A compact mask is checked block by block (4096 bytes); the bad byte sits in the third.
    let mut bytes = vec![1u8; 10_000];
    bytes[1] = 0;
    bytes[9_000] = 0x40;
    let (t, built) = accepted(Foreign::new(DataType::BOOL, &[100, 100]).bytes(&bytes));
    let err = t.view::<bool>().unwrap_err();
    assert_eq!(
        err,
        Error::InvalidValue {
            dtype: DataType::BOOL,
            index: 9_000,
            byte: 0x40
        }
    );
    drop_once(t, &built);
    bytes[9_000] = 1;
    let (t, built) = accepted(Foreign::new(DataType::BOOL, &[100, 100]).bytes(&bytes));
    let view = t.view::<bool>().unwrap();
    assert_eq!(
        (view.get(&[0, 1]), view.get(&[90, 0])),
        (Some(&false), Some(&true))
    );
    drop_once(t, &built);
}

#[test]
fn bool_view_checks_each_broadcast_element_once_and_names_its_first_index() {
    // One byte seen 2^62 times: one check, not 2^62 (this test would not finish otherwise).
    let (t, built) = accepted(
        Foreign::new(DataType::BOOL, &[1 << 31, 1 << 31])
            .bytes(&[1])
            .with_strides(&[0, 0]),
    );
    let view = t.view::<bool>().unwrap();
    assert_eq!((view.len(), view.get(&[5, 7])), (1 << 62, Some(&true)));
    drop_once(t, &built);

    // Rows broadcast over a column of [1, 7]: the bad byte is row 1, first seen at (1, 0).
    let (t, built) = accepted(
        Foreign::new(DataType::BOOL, &[2, 3])
            .bytes(&[1, 7])
            .with_strides(&[1, 0]),
    );
    let err = t.view::<bool>().unwrap_err();
    assert_eq!(
        err,
        Error::InvalidValue {
            dtype: DataType::BOOL,
            index: 3,
            byte: 7
        }
    );
    drop_once(t, &built);

    // A row [1, 5] broadcast over 3 rows: first seen at (0, 1).
    let (t, built) = accepted(
        Foreign::new(DataType::BOOL, &[3, 2])
            .bytes(&[1, 5])
            .with_strides(&[0, 1]),
    );
    let err = t.view::<bool>().unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidValue {
                index: 1,
                byte: 5,
                ..
            }
        ),
        "{err:?}"
    );
    drop_once(t, &built);
}

/// The offset of every index of `shape` / `strides`, in row-major order (by brute force).
fn offsets_row_major(shape: &[i64], strides: &[i64]) -> Vec<i64> {
    let mut out = vec![0i64];
    for (&d, &s) in shape.iter().zip(strides) {
        out = out
            .iter()
            .flat_map(|&o| (0..d).map(move |i| o + i * s))
            .collect();
    }
    out
}

#[test]
fn bool_view_checks_overlapping_windows_once_per_element() {
    // Windows of windows of windows of a byte string (NumPy's `sliding_window_view` nests like
    // this): 2^60 indices over 4 * (2^15 - 1) + 1 bytes. A walk over the indices would not
    // finish; the view checks each byte once.
    let side: i64 = if cfg!(miri) { 1 << 5 } else { 1 << 15 };
    let shape = [side; 4];
    let n = 4 * (side as usize - 1) + 1;
    let window = |bytes: &[u8]| {
        accepted(
            Foreign::new(DataType::BOOL, &shape)
                .bytes(bytes)
                .with_strides(&[1, 1, 1, 1]),
        )
    };
    let mut bytes = vec![1u8; n];
    bytes[n / 2] = 0;
    let (t, built) = window(&bytes);
    let view = t.view::<bool>().unwrap();
    assert_eq!(view.len() as u128, (side as u128).pow(4));
    let last = (side - 1) as usize;
    assert_eq!(view.get(&[last, last, 0, 0]), Some(&false)); // byte 2 * last = n / 2
    assert_eq!(view.get(&[last, last, last, last]), Some(&true));
    drop_once(t, &built);

    // The last byte is reached by the last index alone: the error names it.
    bytes[n - 1] = 2;
    let (t, built) = window(&bytes);
    let err = t.view::<bool>().unwrap_err();
    let all = (side as u128).pow(4);
    assert_eq!(
        err,
        Error::InvalidValue {
            dtype: DataType::BOOL,
            index: (all - 1) as usize,
            byte: 2
        }
    );
    drop_once(t, &built);
}

#[test]
fn bool_view_of_overlapping_strides_agrees_with_brute_force() {
    // Random small layouts whose axes overlap (strides from -3 to 3 over sizes up to 5), with a
    // few bad bytes: the view is refused exactly when a reachable byte is bad, and the error
    // names an index that reaches a bad byte (the first one whenever no two indices share one).
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let rounds = if cfg!(miri) { 40 } else { 3000 };
    for _ in 0..rounds {
        let ndim = 1 + next(4) as usize;
        let shape: Vec<i64> = (0..ndim).map(|_| 1 + next(5) as i64).collect();
        let strides: Vec<i64> = (0..ndim).map(|_| next(7) as i64 - 3).collect();
        let offsets = offsets_row_major(&shape, &strides);
        let lo = *offsets.iter().min().unwrap();
        let hi = *offsets.iter().max().unwrap();
        let bytes: Vec<u8> = (lo..=hi)
            .map(|_| [0, 1, 1, 1, 1, 1, 2, 0x80][next(8) as usize])
            .collect();
        let byte_at = |o: i64| bytes[(o - lo) as usize];
        let foreign = Foreign::new(DataType::BOOL, &shape)
            .bytes(&bytes)
            .with_strides(&strides)
            .data(Data::Buffer {
                offset: -lo as usize,
            });
        let (t, built) = accepted(foreign);
        let first_bad = offsets.iter().position(|&o| byte_at(o) > 1);
        let case = format!("shape {shape:?} strides {strides:?} bytes {bytes:?}");
        match (t.view::<bool>(), first_bad) {
            (Ok(view), None) => {
                let expected: Vec<bool> = offsets.iter().map(|&o| byte_at(o) == 1).collect();
                assert_eq!(view.to_vec().unwrap(), expected, "{case}");
            }
            (Err(Error::InvalidValue { index, byte, .. }), Some(first)) => {
                assert!(
                    byte > 1 && byte_at(offsets[index]) == byte,
                    "{case}: {index}"
                );
                // Broadcast axes aside, does each index reach a byte of its own?
                let (kept_shape, kept_strides): (Vec<i64>, Vec<i64>) =
                    shape.iter().zip(&strides).filter(|&(_, &s)| s != 0).unzip();
                let mut kept = offsets_row_major(&kept_shape, &kept_strides);
                let count = kept.len();
                kept.sort_unstable();
                kept.dedup();
                if kept.len() == count {
                    assert_eq!(index, first, "{case}");
                }
            }
            (other, first) => panic!("{case}: {other:?}, first bad index {first:?}"),
        }
        drop_once(t, &built);
    }
}

#[test]
fn bool_view_refuses_an_irregular_overlap_too_costly_to_check() {
    // Strides 2, 3, 5 and 7 over the same bytes: no exact merge applies, and checking each of
    // the 2^36 indices (or finding the distinct elements among them) is not bounded by the
    // bytes. Refused before any element is read; the bytes can still be viewed as u8.
    let side: i64 = 1 << 9;
    let bytes = vec![1u8; 17 * (side as usize - 1) + 1];
    let foreign = Foreign::new(DataType::BOOL, &[side; 4])
        .bytes(&bytes)
        .with_strides(&[2, 3, 5, 7]);
    let (t, built) = accepted(foreign);
    let err = t.view::<bool>().unwrap_err();
    assert_eq!(
        err,
        Error::IrregularOverlap {
            shape: vec![side; 4],
            strides: vec![2, 3, 5, 7]
        }
    );
    says(
        &err,
        &[
            "[2, 3, 5, 7]",
            "each element once",
            "2^30",
            "u8",
            "view_bytes",
        ],
    );
    // As the message says, the bytes can be read.
    let bytes_view = t.view_bytes().unwrap();
    assert_eq!(bytes_view.get(&[side as usize - 1; 4]), Some(&1));
    assert_eq!(bytes_view.len(), 1 << 36);
    drop_once(t, &built);

    // The same strides over few enough indices are checked index by index.
    let (t, built) = accepted(
        Foreign::new(DataType::BOOL, &[64, 64])
            .bytes(&bytes[..5 * 63 + 1])
            .with_strides(&[2, 3]),
    );
    assert_eq!(t.view::<bool>().unwrap().len(), 64 * 64);
    drop_once(t, &built);
}

#[test]
fn view_mut_of_a_read_only_tensor_is_refused() {
    let (mut t, built) = accepted(Foreign::of(&[1.0f32, 2.0], &[2]).flags(Flags::READ_ONLY.0));
    assert!(t.is_read_only());
    let err = t.view_mut::<f32>().unwrap_err();
    assert_eq!(err, Error::ReadOnly);
    says(&err, &["read-only"]);
    assert_eq!(t.view::<f32>().unwrap().to_vec().unwrap(), [1.0, 2.0]);
    drop_once(t, &built);
}

#[test]
fn view_mut_of_a_broadcast_tensor_is_refused_but_view_reads_it() {
    let foreign = Foreign::of(&[1.0f32, 2.0, 3.0, 4.0], &[4])
        .shape(Array::Values(vec![3, 4]))
        .with_strides(&[0, 1]);
    let (mut t, built) = accepted(foreign);
    let err = t.view_mut::<f32>().unwrap_err();
    assert_eq!(
        err,
        Error::OverlappingStrides {
            shape: vec![3, 4],
            strides: vec![0, 1]
        }
    );
    says(&err, &["strides [0, 1]", "shape [3, 4]"]);

    let start = built.buffer_addr();
    assert_eq!(t.byte_span(), start..start + 16);
    let view = t.view::<f32>().unwrap();
    let expected = [1.0, 2.0, 3.0, 4.0].repeat(3);
    assert_eq!(view.to_vec().unwrap(), expected);
    assert_eq!(view.iter().copied().collect::<Vec<_>>(), expected);
    assert_eq!(view.get(&[0, 0]), Some(&1.0));
    assert_eq!(view.get(&[2, 3]), Some(&4.0));
    assert_eq!(view.get(&[3, 0]), None);
    assert_eq!(view.as_slice(), None);
    drop_once(t, &built);

    // Broadcast along every axis: one element.
    let foreign = Foreign::of(&[9i64], &[1])
        .shape(Array::Values(vec![2, 3]))
        .with_strides(&[0, 0]);
    let (mut t, built) = accepted(foreign);
    assert!(matches!(
        t.view_mut::<i64>(),
        Err(Error::OverlappingStrides { .. })
    ));
    assert_eq!(t.to_vec::<i64>().unwrap(), [9; 6]);
    drop_once(t, &built);
}

#[test]
fn view_mut_with_overlapping_strides_is_refused() {
    // (i, j) -> i + j: (0, 1) and (1, 0) share an element.
    let foreign = Foreign::of(&iota_f32(5), &[5])
        .shape(Array::Values(vec![3, 3]))
        .with_strides(&[1, 1]);
    let (mut t, built) = accepted(foreign);
    let err = t.view_mut::<f32>().unwrap_err();
    assert_eq!(
        err,
        Error::OverlappingStrides {
            shape: vec![3, 3],
            strides: vec![1, 1]
        }
    );
    says(&err, &["strides [1, 1]", "shape [3, 3]"]);
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        [0.0, 1.0, 2.0, 1.0, 2.0, 3.0, 2.0, 3.0, 4.0]
    );
    drop_once(t, &built);

    // Negative strides overlap the same way.
    let foreign = Foreign::of(&iota_f32(5), &[5])
        .shape(Array::Values(vec![3, 3]))
        .with_strides(&[-1, 1])
        .byte_offset(8);
    let (mut t, built) = accepted(foreign);
    assert!(matches!(
        t.view_mut::<f32>(),
        Err(Error::OverlappingStrides { .. })
    ));
    drop_once(t, &built);
}

#[test]
fn negative_strides_are_viewed_in_row_major_order() {
    // A 2x3 matrix reversed along both axes: data at the buffer, first element at the last one.
    let foreign = Foreign::of(&iota_f32(6), &[2, 3])
        .with_strides(&[-3, -1])
        .byte_offset(5 * 4);
    let (t, built) = accepted(foreign);
    let start = built.buffer_addr();
    assert_eq!(t.byte_span(), start..start + 24);
    let view = t.view::<f32>().unwrap();
    let expected = [5.0, 4.0, 3.0, 2.0, 1.0, 0.0];
    assert_eq!(view.to_vec().unwrap(), expected);
    assert_eq!(view.iter().copied().collect::<Vec<_>>(), expected);
    assert_eq!(view.get(&[0, 0]), Some(&5.0));
    assert_eq!(view.get(&[0, 2]), Some(&3.0));
    assert_eq!(view.get(&[1, 0]), Some(&2.0));
    assert_eq!(view.get(&[1, 2]), Some(&0.0));
    assert_eq!(view.get(&[2, 0]), None);
    assert_eq!(view.as_slice(), None);
    drop_once(t, &built);

    // Transposed and flipped along one axis, the data pointer itself offset: (i, j) -> 3 + i - 3j.
    let foreign = Foreign::of(&iota_f32(6), &[2, 3])
        .shape(Array::Values(vec![3, 2]))
        .with_strides(&[1, -3])
        .data(Data::Buffer { offset: 12 });
    let (mut t, built) = accepted(foreign);
    let expected = [3.0, 0.0, 4.0, 1.0, 5.0, 2.0];
    assert_eq!(t.to_vec::<f32>().unwrap(), expected);
    assert_eq!(t.view::<f32>().unwrap().get(&[2, 1]), Some(&2.0));
    // Negative strides do not overlap: writes are allowed, and land where the reads find them.
    {
        let mut view = t.view_mut::<f32>().unwrap();
        *view.get_mut(&[0, 0]).unwrap() = 30.0;
        *view.get_mut(&[2, 1]).unwrap() = 20.0;
    }
    assert_eq!(t.to_vec::<f32>().unwrap(), [30.0, 0.0, 4.0, 1.0, 5.0, 20.0]);
    drop_once(t, &built);
}

#[test]
fn legacy_imports_are_read_only_while_views_work() {
    let built = Foreign::of(&iota_f32(6), &[2, 3]).build_legacy();
    let mut t = import_legacy(&built).unwrap();
    assert!(t.is_legacy());
    assert!(t.is_read_only());
    assert_eq!(t.flags(), Flags::READ_ONLY);
    assert_eq!(t.version(), Version::new(0, 0));
    assert_eq!(t.view_mut::<f32>().unwrap_err(), Error::ReadOnly);
    let view = t.view::<f32>().unwrap();
    assert_eq!(view.as_slice(), Some(&iota_f32(6)[..]));
    assert_eq!(view.get(&[1, 1]), Some(&4.0));
    assert_eq!(built.deletes(), 0);
    drop_once(t, &built);
}

// --- device hooks ----------------------------------------------------------------------------

/// A host pointer the fake runtime may copy from.
#[derive(Clone, Copy, Debug)]
struct HostPtr(*const u8);

// SAFETY: the fake runtime only reads through the pointer, in `copy_to_host`, and each test keeps
// the buffer alive and unwritten while its hooks may be called; sharing a read-only pointer across
// threads is then race-free.
unsafe impl Send for HostPtr {}
// SAFETY: see above.
unsafe impl Sync for HostPtr {}

/// One allocation the fake runtime knows.
#[derive(Debug)]
struct Region {
    /// Where it starts; a real host pointer when `readable`, a fake address otherwise.
    base: HostPtr,
    len: usize,
    readable: bool,
    info: PointerInfo,
}

impl Region {
    fn range(&self) -> Range<usize> {
        self.base.0.addr()..self.base.0.addr() + self.len
    }
}

/// A fake CUDA runtime: handles CUDA tensors and resolves addresses from a table. Its "device
/// memory" is host memory of the test, so `copy_to_host` is a plain copy.
#[derive(Debug, Default)]
struct FakeCuda {
    regions: Vec<Region>,
    /// `(src, len)` of every `copy_to_host` call.
    copies: Mutex<Vec<(usize, usize)>>,
}

impl FakeCuda {
    /// A region at a fake address that must never be read.
    fn fake(
        mut self,
        address: usize,
        len: usize,
        device: Device,
        kind: MemoryKind,
        allocation: Range<usize>,
    ) -> Self {
        self.regions.push(Region {
            base: HostPtr(ptr::without_provenance(address)),
            len,
            readable: false,
            info: PointerInfo {
                device,
                kind,
                allocation: Some(allocation),
            },
        });
        self
    }

    /// The fixture's buffer, as memory of `device` of `kind` (the whole buffer is the allocation).
    fn real<H>(mut self, built: &Built<H>, device: Device, kind: MemoryKind) -> Self {
        let (base, len) = (built.pointers.buffer, built.pointers.buffer_len);
        self.regions.push(Region {
            base: HostPtr(base.cast_const()),
            len,
            readable: true,
            info: PointerInfo {
                device,
                kind,
                allocation: Some(base.addr()..base.addr() + len),
            },
        });
        self
    }

    fn copies(&self) -> Vec<(usize, usize)> {
        self.copies.lock().unwrap().clone()
    }
}

// SAFETY: a test hook. `real` regions are the fixture's readable buffers, reported with the
// fixture's own range as the allocation. One test reports an unreadable `fake` region as pinned
// host memory, to check that the importer refuses a CUDA claim for it (a kind mismatch): the
// import fails before any view exists, so nothing reads it. `copy_to_host` writes only `dst`.
unsafe impl DeviceHooks for FakeCuda {
    fn handles(&self, device_type: DeviceType) -> bool {
        device_type == DeviceType::CUDA
    }

    fn resolve(&self, claimed: Device, address: usize) -> Result<PointerInfo, Error> {
        self.regions
            .iter()
            .find(|r| r.range().contains(&address))
            .map(|r| r.info.clone())
            .ok_or(Error::UnknownPointer { claimed, address })
    }

    unsafe fn copy_to_host(&self, device: Device, src: usize, dst: &mut [u8]) -> Result<(), Error> {
        self.copies.lock().unwrap().push((src, dst.len()));
        let region = self
            .regions
            .iter()
            .find(|r| {
                let range = r.range();
                range.contains(&src) && src + dst.len() <= range.end
            })
            .ok_or(Error::UnknownPointer {
                claimed: device,
                address: src,
            })?;
        if !region.readable {
            return Err(Error::Runtime {
                runtime: "fake CUDA",
                message: "not a host-backed region".into(),
            });
        }
        let from = region.base.0.wrapping_add(src - region.base.0.addr());
        // SAFETY: `from..from + dst.len()` lies inside the region (checked above), a live host
        // buffer that the test keeps alive and unwritten during the call; `dst` is a distinct,
        // exclusively borrowed buffer.
        unsafe { ptr::copy_nonoverlapping(from, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

const FAKE: usize = 0x7000_0000;

#[test]
fn device_hook_refuses_memory_on_another_device() {
    let (mut t, built) = accepted(
        Foreign::new(DataType::F32, &[4])
            .on(DeviceType::CUDA, 0)
            .data(Data::Fake(FAKE)),
    );
    let hooks = FakeCuda::default().fake(
        FAKE,
        4096,
        Device::cuda(1),
        MemoryKind::Device,
        FAKE..FAKE + 4096,
    );
    let err = t.verify_device(&hooks).unwrap_err();
    assert_eq!(
        err,
        Error::DeviceMismatch {
            claimed: Device::cuda(0),
            actual: Device::cuda(1)
        }
    );
    says(&err, &["claims device cuda:0", "belongs to cuda:1"]);
    drop_once(t, &built);
}

#[test]
fn device_hook_refuses_pinned_host_memory_claimed_as_cuda() {
    let (mut t, built) = accepted(
        Foreign::new(DataType::F32, &[4])
            .on(DeviceType::CUDA, 0)
            .data(Data::Fake(FAKE)),
    );
    let hooks = FakeCuda::default().fake(
        FAKE,
        4096,
        Device::cuda(0),
        MemoryKind::HostPinned,
        FAKE..FAKE + 4096,
    );
    let err = t.verify_device(&hooks).unwrap_err();
    assert_eq!(
        err,
        Error::MemoryKindMismatch {
            claimed: Device::cuda(0),
            actual: MemoryKind::HostPinned
        }
    );
    says(&err, &["cuda:0", "pinned host memory"]);
    assert!(!t.is_host_accessible());
    drop_once(t, &built);
}

#[test]
fn device_hook_refuses_a_span_beyond_the_allocation() {
    // 8 f32s = 32 bytes in a 16-byte allocation.
    let (mut t, built) = accepted(
        Foreign::new(DataType::F32, &[8])
            .on(DeviceType::CUDA, 0)
            .data(Data::Fake(FAKE)),
    );
    let hooks = FakeCuda::default().fake(
        FAKE,
        4096,
        Device::cuda(0),
        MemoryKind::Device,
        FAKE..FAKE + 16,
    );
    let err = t.verify_device(&hooks).unwrap_err();
    let expected = Error::SpanOutsideAllocation {
        start: FAKE,
        end: FAKE + 32,
        alloc_start: FAKE,
        alloc_end: FAKE + 16,
    };
    assert_eq!(err, expected);
    says(
        &err,
        &[
            "0x70000000..0x70000020",
            "allocation 0x70000000..0x70000010",
        ],
    );
    drop_once(t, &built);

    // Negative strides reaching 12 bytes before the allocation's start.
    let foreign = Foreign::new(DataType::F32, &[8])
        .with_strides(&[-1])
        .on(DeviceType::CUDA, 0)
        .data(Data::Fake(FAKE + 16));
    let (mut t, built) = accepted(foreign);
    let hooks = FakeCuda::default().fake(
        FAKE - 4096,
        8192,
        Device::cuda(0),
        MemoryKind::Device,
        FAKE..FAKE + 4096,
    );
    let err = t.verify_device(&hooks).unwrap_err();
    let expected = Error::SpanOutsideAllocation {
        start: FAKE - 12,
        end: FAKE + 20,
        alloc_start: FAKE,
        alloc_end: FAKE + 4096,
    };
    assert_eq!(err, expected);
    drop_once(t, &built);
}

#[test]
fn device_hook_unknown_pointer_propagates() {
    let (mut t, built) = accepted(
        Foreign::new(DataType::F32, &[4])
            .on(DeviceType::CUDA, 0)
            .data(Data::Fake(FAKE)),
    );
    let err = t.verify_device(&FakeCuda::default()).unwrap_err();
    assert_eq!(
        err,
        Error::UnknownPointer {
            claimed: Device::cuda(0),
            address: FAKE
        }
    );
    says(&err, &["cuda:0", "0x70000000"]);
    drop_once(t, &built);
}

#[test]
fn device_without_a_hook_is_refused() {
    let (mut t, built) = accepted(Foreign::of(&[1.0f32, 2.0], &[2]).on(DeviceType::ROCM, 0));
    let hooks = FakeCuda::default();
    let err = t.verify_device(&hooks).unwrap_err();
    assert_eq!(
        err,
        Error::NoHook {
            device: Device::new(DeviceType::ROCM, 0)
        }
    );
    says(&err, &["no device hook handles rocm:0"]);
    assert_eq!(
        t.to_host_vec::<f32>(&hooks).unwrap_err(),
        Error::NoHook {
            device: Device::new(DeviceType::ROCM, 0)
        }
    );
    assert!(hooks.copies().is_empty());
    drop_once(t, &built);
}

#[test]
fn managed_memory_reported_by_the_hook_makes_views_work() {
    let values = iota_f32(6);
    let (mut t, built) = accepted(Foreign::of(&values, &[2, 3]).on(DeviceType::CUDA, 0));
    assert_eq!(
        t.view::<f32>().unwrap_err(),
        Error::NotHostAccessible {
            device: Device::cuda(0)
        }
    );

    let hooks = FakeCuda::default().real(&built, Device::cuda(0), MemoryKind::Managed);
    let start = built.buffer_addr();
    let info = t.verify_device(&hooks).unwrap();
    let expected_allocation = start..start + built.pointers.buffer_len;
    assert_eq!(
        info,
        Some(PointerInfo {
            device: Device::cuda(0),
            kind: MemoryKind::Managed,
            allocation: Some(expected_allocation)
        })
    );
    assert!(t.is_host_accessible());
    let view = t.view::<f32>().unwrap();
    assert_eq!(view.as_slice(), Some(&values[..]));
    assert_eq!(view.get(&[1, 2]), Some(&5.0));
    assert!(hooks.copies().is_empty(), "managed memory is read in place");
    drop_once(t, &built);
}

#[test]
fn checking_a_claim_reports_what_verifying_it_would_and_leaves_views_alone() {
    let values = iota_f32(6);
    let (mut t, built) = accepted(Foreign::of(&values, &[2, 3]).on(DeviceType::CUDA, 0));
    let hooks = FakeCuda::default().real(&built, Device::cuda(0), MemoryKind::Managed);
    let checked = t.check_device(&hooks).unwrap();
    assert_eq!(checked.as_ref().map(|i| i.kind), Some(MemoryKind::Managed));
    assert!(!t.is_host_accessible(), "check_device records nothing");
    assert_eq!(t.verify_device(&hooks).unwrap(), checked);
    assert!(t.is_host_accessible());
    // A claim the hook refutes is refused the same way by both.
    let elsewhere = FakeCuda::default().real(&built, Device::cuda(1), MemoryKind::Device);
    assert_eq!(
        t.check_device(&elsewhere).unwrap_err(),
        Error::DeviceMismatch {
            claimed: Device::cuda(0),
            actual: Device::cuda(1)
        }
    );
    drop_once(t, &built);
}

#[test]
fn device_memory_stays_behind_the_hook_after_verification() {
    let (mut t, built) = accepted(Foreign::of(&iota_f32(4), &[4]).on(DeviceType::CUDA, 0));
    let hooks = FakeCuda::default().real(&built, Device::cuda(0), MemoryKind::Device);
    assert!(t.verify_device(&hooks).unwrap().is_some());
    assert!(!t.is_host_accessible());
    assert_eq!(
        t.view::<f32>().unwrap_err(),
        Error::NotHostAccessible {
            device: Device::cuda(0)
        }
    );
    drop_once(t, &built);
}

#[test]
fn to_host_vec_gathers_a_strided_device_tensor_through_copy_to_host() {
    // A 3x4 row-major buffer on the "device", seen transposed as 4x3.
    let foreign = Foreign::of(&iota_f32(12), &[3, 4])
        .shape(Array::Values(vec![4, 3]))
        .with_strides(&[1, 4]);
    let (t, built) = accepted(foreign.on(DeviceType::CUDA, 0));
    let hooks = FakeCuda::default().real(&built, Device::cuda(0), MemoryKind::Device);
    let start = built.buffer_addr();
    assert_eq!(
        t.view::<f32>().unwrap_err(),
        Error::NotHostAccessible {
            device: Device::cuda(0)
        }
    );
    let out = t.to_host_vec::<f32>(&hooks).unwrap();
    assert_eq!(
        out,
        [0.0, 4.0, 8.0, 1.0, 5.0, 9.0, 2.0, 6.0, 10.0, 3.0, 7.0, 11.0]
    );
    assert_eq!(
        hooks.copies(),
        [(start, 48)],
        "the span is copied as one block"
    );
    assert_eq!(
        t.to_host_vec::<i32>(&hooks).unwrap_err(),
        Error::DataTypeMismatch {
            found: DataType::F32,
            expected: DataType::I32
        }
    );
    drop_once(t, &built);

    // Negative strides, the first element in the middle of the span: (i, j) -> 6 - 4i - 2j.
    let foreign = Foreign::of(&iota_f32(8), &[8])
        .shape(Array::Values(vec![2, 2]))
        .with_strides(&[-4, -2])
        .byte_offset(24);
    let (t, built) = accepted(foreign.on(DeviceType::CUDA, 0));
    let hooks = FakeCuda::default().real(&built, Device::cuda(0), MemoryKind::Device);
    assert_eq!(t.to_host_vec::<f32>(&hooks).unwrap(), [6.0, 4.0, 2.0, 0.0]);
    assert_eq!(hooks.copies(), [(built.buffer_addr(), 28)]);
    drop_once(t, &built);

    // Host memory needs no hook call.
    let (t, built) = accepted(Foreign::of(&iota_f32(3), &[3]));
    let hooks = FakeCuda::default();
    assert_eq!(t.to_host_vec::<f32>(&hooks).unwrap(), [0.0, 1.0, 2.0]);
    assert!(hooks.copies().is_empty());
    drop_once(t, &built);
}

#[test]
fn to_host_vec_of_an_empty_device_tensor_with_null_data_copies_nothing() {
    // Like `verify_device` (which resolves nothing for a tensor without elements) and `view`
    // (which ignores data and byte_offset then), copying zero elements must not involve the
    // runtime: the data pointer may be NULL, which no runtime knows.
    let (t, built) = accepted(
        Foreign::new(DataType::F32, &[0, 3])
            .on(DeviceType::CUDA, 0)
            .data(Data::Null),
    );
    let hooks = FakeCuda::default();
    assert_eq!(t.to_host_vec::<f32>(&hooks), Ok(Vec::new()));
    assert!(
        hooks.copies().is_empty(),
        "no copy for zero bytes: {:?}",
        hooks.copies()
    );
    drop_once(t, &built);
}

#[test]
fn to_host_vec_of_an_empty_device_tensor_ignores_its_byte_offset() {
    // A byte_offset that is irrelevant for an empty tensor is not an alignment error.
    let foreign = Foreign::new(DataType::F32, &[0])
        .on(DeviceType::CUDA, 0)
        .data(Data::Fake(FAKE))
        .byte_offset(2);
    let (t, built) = accepted(foreign);
    let hooks = FakeCuda::default().fake(
        FAKE,
        4096,
        Device::cuda(0),
        MemoryKind::Device,
        FAKE..FAKE + 4096,
    );
    assert_eq!(t.to_host_vec::<f32>(&hooks), Ok(Vec::new()));
    drop_once(t, &built);
}

// --- ownership -------------------------------------------------------------------------------

#[test]
fn a_panic_while_a_view_is_alive_still_deletes_once() {
    let built = Foreign::of(&[1.0f32, 2.0, 3.0], &[3]).build();
    let t = import(&built).unwrap();
    let result = panic::catch_unwind(AssertUnwindSafe(move || {
        let view = t.view::<f32>().unwrap();
        assert_eq!(view.get(&[1]), Some(&2.0));
        panic!("the consumer fails while viewing (expected by the test)");
    }));
    assert!(result.is_err());
    assert_eq!(built.deletes(), 1);
}

#[test]
fn the_owner_may_be_dropped_on_another_thread() {
    let built = Foreign::of(&[1i32, 2, 3], &[3]).build();
    let t = import(&built).unwrap();
    let sum = std::thread::spawn(move || {
        let sum: i32 = t.view::<i32>().unwrap().iter().sum();
        drop(t);
        sum
    })
    .join()
    .unwrap();
    assert_eq!(sum, 6);
    assert_eq!(built.deletes(), 1);
}

#[test]
fn into_raw_then_from_raw_deletes_once() {
    let built = Foreign::of(&[1.0f32, 2.0], &[2]).build();
    let t = import(&built).unwrap();
    let raw = t.into_raw().unwrap();
    assert_eq!(
        raw, built.ptr,
        "a versioned tensor is handed back as it came"
    );
    assert_eq!(built.deletes(), 0);
    // SAFETY: `into_raw` gave ownership back; the block is live and handed over once.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    assert_eq!(built.deletes(), 0);
    drop_once(t, &built);
}

#[test]
fn a_legacy_import_handed_on_as_versioned_is_deleted_once() {
    let built = Foreign::of(&[1.0f32, 2.0], &[2]).build_legacy();
    let t = import_legacy(&built).unwrap();
    let raw = t.into_raw().unwrap();
    assert_eq!(
        built.deletes(),
        0,
        "wrapping does not delete the legacy tensor"
    );
    // SAFETY: `into_raw` made a live versioned tensor and gave us ownership, once.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    assert!(!t.is_legacy());
    assert!(
        t.is_read_only(),
        "a foreign legacy tensor stays read-only when wrapped"
    );
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    drop_once(t, &built);
}

#[test]
fn a_versioned_import_handed_on_as_legacy_is_deleted_once() {
    let built = Foreign::of(&[1.0f32, 2.0], &[2]).build();
    let t = import(&built).unwrap();
    let raw = t.into_raw_legacy().unwrap();
    assert_eq!(built.deletes(), 0);
    // SAFETY: `into_raw_legacy` made a live legacy tensor and gave us ownership, once.
    let mut t = unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap();
    assert!(
        !t.is_read_only(),
        "this crate's own legacy wrapper keeps writability"
    );
    t.view_mut::<f32>()
        .unwrap()
        .copy_from_slice(&[5.0, 6.0])
        .unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [5.0, 6.0]);
    drop_once(t, &built);
}

#[test]
fn a_read_only_tensor_refused_as_legacy_comes_back_and_is_deleted_once() {
    let built = Foreign::of(&[1.0f32, 2.0], &[2])
        .flags(Flags::READ_ONLY.0)
        .build();
    let t = import(&built).unwrap();
    let err = t.into_raw_legacy().unwrap_err();
    assert_eq!(err.error, Error::LegacyReadOnly);
    assert_eq!(built.deletes(), 0, "the refused tensor comes back");
    drop(err);
    assert_eq!(
        built.deletes(),
        1,
        "the consumed tensor is deleted, not leaked"
    );
}

#[test]
fn reclaiming_a_foreign_tensor_gives_it_back_untouched() {
    let built = Foreign::of(&[1.0f32, 2.0], &[2]).build();
    let t = import(&built).unwrap();
    let t = t.reclaim::<Vec<f32>>().unwrap_err();
    assert_eq!(built.deletes(), 0);
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    drop_once(t, &built);
}

#[test]
fn a_null_deleter_tensor_is_never_deleted_by_the_owner() {
    let built = Foreign::of(&[1.0f32, 2.0], &[2]).no_deleter().build();
    let t = import(&built).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    drop(t);
    assert_eq!(built.deletes(), 0);
    // SAFETY: the deleter is NULL, so nobody freed the block, and its owner is gone.
    unsafe { built.free() };

    let built = Foreign::of(&[1.0f32, 2.0], &[2])
        .no_deleter()
        .build_legacy();
    let t = import_legacy(&built).unwrap();
    drop(t);
    assert_eq!(built.deletes(), 0);
    // SAFETY: as above.
    unsafe { built.free() };
}

// --- data that overlaps the tensor's own description -----------------------------------------

/// A versioned tensor that a test lays out by hand in one heap block: the struct, its shape and
/// strides arrays, and a data buffer, so that the data can be made to overlap the others.
#[repr(C)]
struct SelfContained {
    managed: DLManagedTensorVersioned,
    shape: [i64; 1],
    strides: [i64; 1],
    data: [i64; 4],
}

static SELF_CONTAINED_DELETES: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// # Safety
/// `tensor` came from `self_contained` and is deleted once.
unsafe extern "C" fn delete_self_contained(tensor: *mut DLManagedTensorVersioned) {
    SELF_CONTAINED_DELETES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: made by `Box::into_raw` of a `SelfContained`, whose first field is the struct.
    drop(unsafe { Box::from_raw(tensor.cast::<SelfContained>()) });
}

/// A 1-d i64 tensor of 3 elements, stride 1, whose data starts `offset` bytes into the block
/// (8-aligned, with room for 3 elements before the block ends).
fn self_contained(offset: usize) -> ManagedTensor {
    assert!(offset.is_multiple_of(8) && offset + 24 <= size_of::<SelfContained>());
    let block = Box::into_raw(Box::new(SelfContained {
        managed: DLManagedTensorVersioned {
            version: Version::CURRENT,
            manager_ctx: ptr::null_mut(),
            deleter: Some(delete_self_contained),
            flags: 0,
            dl_tensor: dlpack_core::ffi::DLTensor {
                data: ptr::null_mut(),
                device: Device::CPU,
                ndim: 1,
                dtype: DataType::I64,
                shape: ptr::null_mut(),
                strides: ptr::null_mut(),
                byte_offset: 0,
            },
        },
        shape: [3],
        strides: [1],
        data: [1, 10, 20, 30],
    }));
    // SAFETY: `block` is a live, exclusively owned allocation; only field addresses are taken
    // (the data's is inside the block, asserted above) and the tensor's pointer fields written.
    unsafe {
        let t = &raw mut (*block).managed.dl_tensor;
        (*t).shape = (&raw mut (*block).shape).cast();
        (*t).strides = (&raw mut (*block).strides).cast();
        (*t).data = block.cast::<u8>().add(offset).cast();
    }
    // SAFETY: a well-formed 1.x tensor that the test owns; every element it reaches lies in the
    // block, which lives until its deleter runs.
    unsafe { ManagedTensor::from_raw(block.cast()) }.expect("a well-formed tensor")
}

#[test]
fn view_mut_refuses_data_that_overlaps_the_strides_or_the_struct() {
    SELF_CONTAINED_DELETES.store(0, std::sync::atomic::Ordering::SeqCst);
    // The data starts at the strides array: a write to element 0 would rewrite the stride.
    let mut t = self_contained(std::mem::offset_of!(SelfContained, strides));
    let err = t.view_mut::<i64>().unwrap_err();
    assert!(
        matches!(
            err,
            Error::DataOverlapsDescription {
                what: "strides array",
                ..
            }
        ),
        "{err:?}"
    );
    says(
        &err,
        &["overlaps", "strides array", "mutable access refused"],
    );
    // Reading is harmless: nothing writes.
    assert_eq!(t.view::<i64>().unwrap().to_vec().unwrap(), [1, 1, 10]);
    drop(t);

    // The data starts at the shape array.
    let mut t = self_contained(std::mem::offset_of!(SelfContained, shape));
    let err = t.view_mut::<i64>().unwrap_err();
    assert!(matches!(
        err,
        Error::DataOverlapsDescription {
            what: "shape array",
            ..
        }
    ));
    drop(t);

    // The data lies over the struct itself (its `ndim` and dtype, and beyond).
    let mut t = self_contained(std::mem::offset_of!(SelfContained, managed.dl_tensor.ndim));
    let err = t.view_mut::<i64>().unwrap_err();
    assert!(matches!(
        err,
        Error::DataOverlapsDescription {
            what: "managed tensor struct",
            ..
        }
    ));
    drop(t);

    // The data right after the arrays: writable as usual.
    let mut t = self_contained(std::mem::offset_of!(SelfContained, data));
    t.view_mut::<i64>()
        .unwrap()
        .copy_from_slice(&[7, 8, 9])
        .unwrap();
    assert_eq!(t.to_vec::<i64>().unwrap(), [7, 8, 9]);
    drop(t);
    assert_eq!(
        SELF_CONTAINED_DELETES.load(std::sync::atomic::Ordering::SeqCst),
        4
    );
}

/// Wrapping such a tensor (it is itself an `Export` producer: `ManagedTensor::export`,
/// `into_raw` of a legacy or restricted owner, `into_raw_legacy` of a versioned one) gives a
/// description made of fresh copies, whose own checks cannot see the overlap: so the wrapper
/// says READ_ONLY. Otherwise a safe write through the wrapper would rewrite the inner owner's
/// validated shape, and reading the inner owner back would leave its allocation.
#[test]
fn a_tensor_whose_data_overlaps_its_description_stays_read_only_when_wrapped() {
    use dlpack_core::Flags;
    for (offset, what) in [
        (std::mem::offset_of!(SelfContained, shape), "shape array"),
        (
            std::mem::offset_of!(SelfContained, strides),
            "strides array",
        ),
        (
            std::mem::offset_of!(SelfContained, managed.dl_tensor.ndim),
            "managed tensor struct",
        ),
    ] {
        let mut wrapped = ManagedTensor::export(self_contained(offset)).unwrap();
        assert!(wrapped.is_read_only(), "{what}");
        assert_eq!(
            wrapped.view_mut::<i64>().unwrap_err(),
            Error::ReadOnly,
            "{what}"
        );
        // Reading through the wrapper is as harmless as reading the tensor itself.
        let before = wrapped.to_vec::<i64>().unwrap();
        let inner: ManagedTensor = wrapped.reclaim().expect("the wrapped owner");
        assert_eq!(
            (inner.shape(), inner.to_vec::<i64>().unwrap()),
            (&[3][..], before)
        );

        // Handed to C as legacy: a legacy struct cannot say read-only, so it is refused.
        assert_eq!(
            self_contained(offset).into_raw_legacy().unwrap_err().error,
            Error::LegacyReadOnly,
            "{what}"
        );

        // Handed to C through a versioned wrapper (the inner owner is restricted): the wrapper's
        // flags say read-only, and a consumer importing it gets a read-only owner.
        let raw = inner.into_read_only().into_raw().unwrap();
        // SAFETY: `into_raw` returned a live versioned tensor that this test now owns.
        let flags = Flags(unsafe { (*raw).flags });
        assert!(flags.contains(Flags::READ_ONLY), "{what}: {flags:?}");
        // SAFETY: as above; the owner takes it over and deletes it once.
        let mut back = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
        assert_eq!(
            back.view_mut::<i64>().unwrap_err(),
            Error::ReadOnly,
            "{what}"
        );
    }
    // Data clear of the description: the wrapper stays writable, and writes reach the tensor.
    let mut wrapped =
        ManagedTensor::export(self_contained(std::mem::offset_of!(SelfContained, data))).unwrap();
    assert!(!wrapped.is_read_only());
    wrapped
        .view_mut::<i64>()
        .unwrap()
        .copy_from_slice(&[4, 5, 6])
        .unwrap();
    let inner: ManagedTensor = wrapped.reclaim().expect("the wrapped owner");
    assert_eq!(inner.to_vec::<i64>().unwrap(), [4, 5, 6]);
}

// --- a future major version whose struct is smaller than 1.x's --------------------------------

/// What DLPack promises of every major version: the prefix up to `deleter` (and `flags`).
#[repr(C)]
struct FuturePrefix {
    version: Version,
    manager_ctx: *mut std::ffi::c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
}

static FUTURE_DELETES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// # Safety
/// `tensor` came from `Box::into_raw` of a `FuturePrefix` and is deleted once.
unsafe extern "C" fn delete_future(tensor: *mut DLManagedTensorVersioned) {
    FUTURE_DELETES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: see above.
    drop(unsafe { Box::from_raw(tensor.cast::<FuturePrefix>()) });
}

#[test]
fn a_major_version_2_struct_shorter_than_1_x_is_deleted_reading_only_its_prefix() {
    let block = Box::into_raw(Box::new(FuturePrefix {
        version: Version::new(2, 0),
        manager_ctx: ptr::null_mut(),
        deleter: Some(delete_future),
    }));
    // SAFETY: the contract for another major version: version and deleter readable, owned.
    // Miri checks that nothing past the prefix (24 bytes here) is read or asserted readable.
    let err = unsafe { ManagedTensor::from_raw(block.cast()) }.unwrap_err();
    assert_eq!(
        err,
        Error::IncompatibleVersion {
            found: Version::new(2, 0)
        }
    );
    assert_eq!(FUTURE_DELETES.load(std::sync::atomic::Ordering::SeqCst), 1);
}

// --- copies of a broadcast tensor that do not fit in memory ------------------------------------

#[test]
fn copying_a_broadcast_tensor_too_large_for_memory_is_an_error_not_a_panic() {
    // One element seen 2^62 times: a valid tensor (a 4-byte span) whose copy cannot exist.
    let (t, built) = accepted(Foreign::of(&[1.0f32], &[1 << 62]).with_strides(&[0]));
    assert_eq!(t.view::<f32>().unwrap().len(), 1 << 62);
    let err = t.to_vec::<f32>().unwrap_err();
    assert_eq!(err, Error::OutOfMemory { bytes: 4 << 62 });
    says(&err, &["cannot allocate", "18446744073709551616 bytes"]);
    assert_eq!(err.py_kind(), dlpack_core::PyErrorKind::MemoryError);
    let err = t.view::<f32>().unwrap().to_vec().unwrap_err();
    assert_eq!(err, Error::OutOfMemory { bytes: 4 << 62 });
    drop_once(t, &built);
}

#[test]
// Miri stops at an allocation this large (resource exhaustion) instead of failing it; the
// native run checks that the failure comes back as an error.
#[cfg_attr(miri, ignore = "Miri cannot fail a 4 EiB allocation")]
fn staging_a_device_tensor_whose_span_does_not_fit_in_memory_is_an_error_not_an_abort() {
    // Two f64 elements 2^59 elements apart on a (fake) device: the host copy stages the span.
    let (t, built) = accepted(
        Foreign::new(DataType::F64, &[2])
            .with_strides(&[1 << 59])
            .on(DeviceType::CUDA, 0)
            .data(Data::Fake(FAKE)),
    );
    let hooks = FakeCuda::default();
    let err = t.to_host_vec::<f64>(&hooks).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err:?}");
    assert!(hooks.copies().is_empty(), "nothing is copied");
    drop_once(t, &built);
}

// --- a producer whose `describe` panics --------------------------------------------------------

static PANICKING_DROPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct PanicsInDescribe(#[allow(dead_code)] Vec<u8>);

impl Drop for PanicsInDescribe {
    fn drop(&mut self) {
        PANICKING_DROPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

// SAFETY: `describe` never returns, so no description is ever used.
unsafe impl dlpack_core::Export for PanicsInDescribe {
    fn ndim(&self) -> usize {
        1
    }
    fn describe(&mut self, _: &mut [i64], _: &mut [i64]) -> dlpack_core::ExportDesc {
        panic!("describe failed");
    }
}

#[test]
fn a_producer_whose_describe_panics_is_dropped_once_and_its_block_freed() {
    let result = panic::catch_unwind(|| ManagedTensor::export(PanicsInDescribe(vec![0; 64])));
    assert!(result.is_err());
    assert_eq!(PANICKING_DROPS.load(std::sync::atomic::Ordering::SeqCst), 1);
}

// --- a consumer that makes an import read-only ------------------------------------------------

#[test]
fn into_read_only_restricts_views_and_what_is_handed_on() {
    let built = Foreign::of(&[1i32, 2, 3], &[3]).build();
    let mut t = import(&built).unwrap().into_read_only();
    assert_eq!(t.view_mut::<i32>().unwrap_err(), Error::ReadOnly);
    assert_eq!(t.to_vec::<i32>().unwrap(), [1, 2, 3]);
    // Handed on, it is wrapped in a read-only struct.
    let raw = t.into_raw().unwrap();
    // SAFETY: handed back by `into_raw`, owned here.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    assert!(t.is_read_only());
    assert_eq!(built.deletes(), 0);
    drop_once(t, &built);

    // Our own legacy export is writable; made read-only it is wrapped in a versioned tensor.
    let raw = ManagedTensor::export(vec![5u8, 6])
        .unwrap()
        .into_raw_legacy()
        .unwrap();
    // SAFETY: a legacy tensor this crate just exported, owned here.
    let t = unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap();
    assert!(!t.is_read_only());
    let t = t.into_read_only();
    assert!(t.is_read_only() && t.is_legacy());
    // Its Vec is not handed out (others may be reading the memory), nor is it handed on as
    // legacy (our legacy exports import writable); as versioned it is wrapped, read-only.
    let t = t.into_vec::<u8>().unwrap_err();
    let t = t.reclaim::<Vec<u8>>().unwrap_err();
    let raw = t.into_raw().unwrap();
    // SAFETY: handed back by `into_raw`, owned here.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    assert!(t.is_read_only());
    assert_eq!(t.to_vec::<u8>().unwrap(), [5, 6]);
    assert_eq!(
        t.into_raw_legacy().unwrap_err().error,
        Error::LegacyReadOnly
    );

    // A writable versioned struct is wrapped when handed on, never written: its own flags stay.
    let raw = ManagedTensor::export(vec![7u8])
        .unwrap()
        .into_raw()
        .unwrap();
    // SAFETY: a tensor this crate just exported, owned here.
    let t = unsafe { ManagedTensor::from_raw(raw) }
        .unwrap()
        .into_read_only();
    let wrapped = t.into_raw().unwrap();
    assert_ne!(wrapped, raw, "wrapped, not handed on as it is");
    // SAFETY: `raw` is alive inside the wrapper, which this test owns; only its flags are read.
    let flags = unsafe { (*raw).flags };
    assert_eq!(
        flags & Flags::READ_ONLY.0,
        0,
        "the producer's struct is untouched"
    );
    // SAFETY: handed back by `into_raw`, owned here.
    let t = unsafe { ManagedTensor::from_raw(wrapped) }.unwrap();
    assert!(t.is_read_only());
}

#[test]
fn a_scalar_whose_unused_shape_pointer_points_into_its_data_is_writable() {
    // ndim 0: no shape or strides are read, so pointers into the data overlap nothing.
    let mut data = [0i64; 2];
    let base = data.as_mut_ptr();
    let scalar = dlpack_core::ffi::DLTensor {
        data: base.cast(),
        device: Device::CPU,
        ndim: 0,
        dtype: DataType::new(DataTypeCode::COMPLEX, 128, 1),
        // SAFETY: inside `data`.
        shape: unsafe { base.add(1) },
        strides: ptr::null_mut(),
        byte_offset: 0,
    };
    // SAFETY: a valid scalar over `data`, which outlives the borrow and nothing else uses.
    let t = unsafe { dlpack_core::BorrowedTensor::new(&scalar, Version::CURRENT, Flags::empty()) }
        .unwrap();
    assert_eq!(t.check_writable(), Ok(()));
}

// --- from_raw_if: a consumer that may still decline ---------------------------------------

/// Why `from_raw_if` returned no owner: the validation's error, or the consumer's own.
#[derive(Debug, PartialEq)]
enum NotTaken {
    Invalid(Error),
    Declined,
}

impl From<Error> for NotTaken {
    fn from(e: Error) -> Self {
        NotTaken::Invalid(e)
    }
}

#[test]
fn from_raw_if_leaves_a_declined_tensor_to_its_owner_and_owns_an_accepted_one() {
    let built = Foreign::of(&[1.0f32, 2.0, 3.0], &[3]).build();
    let mut seen = None;
    // SAFETY: the fixture's block is live and owned by the test; it stays ours on refusal.
    let declined = unsafe {
        ManagedTensor::from_raw_if(built.ptr, |t| {
            seen = Some(t.shape().to_vec());
            Err(NotTaken::Declined)
        })
    };
    assert_eq!(declined.unwrap_err(), NotTaken::Declined);
    assert_eq!(seen, Some(vec![3]), "the consumer saw the validated tensor");
    assert_eq!(built.deletes(), 0, "a declined tensor stays its owner's");
    // SAFETY: still ours (above); handed over now.
    let taken = unsafe { ManagedTensor::from_raw_if(built.ptr, |_| Ok::<(), NotTaken>(())) };
    let tensor = taken.unwrap();
    assert_eq!(tensor.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);
    drop_once(tensor, &built);
}

#[test]
fn from_raw_if_leaves_an_invalid_tensor_to_its_owner_without_asking_the_consumer() {
    let float13 = DataType::new(DataTypeCode::FLOAT, 13, 1);
    let built = Foreign::new(DataType::F32, &[2]).dtype(float13).build();
    // SAFETY: as above.
    let err = unsafe {
        ManagedTensor::from_raw_if(built.ptr, |_| -> Result<(), NotTaken> {
            panic!("an invalid tensor is not offered to the consumer")
        })
    }
    .unwrap_err();
    assert!(
        matches!(err, NotTaken::Invalid(Error::UnsupportedBits { .. })),
        "{err:?}"
    );
    assert_eq!(built.deletes(), 0);
    // The owner still decides: `from_raw` refuses it too, and deletes it once.
    assert!(matches!(import(&built), Err(Error::UnsupportedBits { .. })));
    assert_eq!(built.deletes(), 1);
}

#[test]
fn from_raw_if_leaves_another_major_version_to_its_owner_reading_only_the_version() {
    let built = Foreign::new(DataType::F32, &[2])
        .version(2, 0)
        .garbage_tensor()
        .build();
    // SAFETY: as above; for another major version only the version and deleter are readable,
    // and Miri checks that nothing else is read.
    let err = unsafe { ManagedTensor::from_raw_if(built.ptr, |_| Ok::<(), Error>(())) };
    let err = err.unwrap_err();
    assert_eq!(
        err,
        Error::IncompatibleVersion {
            found: Version::new(2, 0)
        }
    );
    says(&err, &["version 2.0", "nothing but its deleter"]);
    assert_eq!(built.deletes(), 0);
    // What DLPack asks of its owner: call the deleter.
    assert!(import(&built).is_err());
    assert_eq!(built.deletes(), 1);

    // SAFETY: NULL is allowed.
    let err = unsafe { ManagedTensor::from_raw_if(ptr::null_mut(), |_| Ok::<(), Error>(())) };
    assert!(matches!(err, Err(Error::NullPointer { .. })));
}

#[test]
fn from_raw_legacy_if_declines_or_takes_a_legacy_tensor_read_only() {
    let built = Foreign::of(&[1u8, 2], &[2]).build_legacy();
    // SAFETY: as above, for a legacy block.
    let declined = unsafe {
        ManagedTensor::from_raw_legacy_if(built.ptr, |t| {
            assert!(t.is_read_only(), "a foreign legacy tensor is read-only");
            Err(NotTaken::Declined)
        })
    };
    assert_eq!(declined.unwrap_err(), NotTaken::Declined);
    assert_eq!(built.deletes(), 0);
    // SAFETY: still ours; handed over now.
    let tensor = unsafe { ManagedTensor::from_raw_legacy_if(built.ptr, |_| Ok::<(), Error>(())) };
    let mut tensor = tensor.unwrap();
    assert!(tensor.is_legacy());
    assert_eq!(tensor.view_mut::<u8>().unwrap_err(), Error::ReadOnly);
    drop_once(tensor, &built);

    let bad = Foreign::of(&[1u8, 2], &[2])
        .dtype(DataType::new(DataTypeCode::FLOAT, 13, 1))
        .build_legacy();
    // SAFETY: as above.
    let err = unsafe { ManagedTensor::from_raw_legacy_if(bad.ptr, |_| Ok::<(), Error>(())) };
    assert!(matches!(err, Err(Error::UnsupportedBits { .. })));
    assert_eq!(bad.deletes(), 0);
    assert!(import_legacy(&bad).is_err());
    assert_eq!(bad.deletes(), 1);
}

// --- a device copy the runtime cannot see finish --------------------------------------------

/// Destinations of copies still "in flight", as a lost device leaves them: a raw pointer and a
/// length. Held in a static so that the memory stays reachable (Miri's and valgrind's leak
/// checks count it as kept, which is what the contract asks of the caller).
struct InFlight(Mutex<Vec<(*mut u8, usize)>>);

// SAFETY: the pointers are only written through by the test that recorded them.
unsafe impl Sync for InFlight {}

static IN_FLIGHT: InFlight = InFlight(Mutex::new(Vec::new()));

/// Hooks whose device copies never confirm completion.
struct LostDevice;

// SAFETY: `resolve` is never asked (the tests below do not verify a device), and
// `copy_to_host` writes nothing before returning.
unsafe impl DeviceHooks for LostDevice {
    fn handles(&self, device_type: DeviceType) -> bool {
        device_type == DeviceType::CUDA
    }

    unsafe fn copy_to_host(&self, _: Device, _: usize, dst: &mut [u8]) -> Result<(), Error> {
        IN_FLIGHT
            .0
            .lock()
            .unwrap()
            .push((dst.as_mut_ptr(), dst.len()));
        Err(Error::CopyInFlight {
            runtime: "lost device",
            message: "the copy's wait failed".into(),
        })
    }
}

#[test]
fn to_host_vec_leaks_its_staging_buffer_when_a_copy_may_still_be_running() {
    let (t, built) = accepted(Foreign::of(&iota_f32(4), &[4]).on(DeviceType::CUDA, 0));
    let err = t.to_host_vec::<f32>(&LostDevice).unwrap_err();
    assert!(matches!(err, Error::CopyInFlight { .. }), "{err:?}");
    says(&err, &["lost device", "may still be running", "leaked"]);
    // The copy lands after the error: the staging buffer must still be there (freed, this
    // write would be a use after free, which Miri and valgrind report).
    let (dst, len) = IN_FLIGHT.0.lock().unwrap().pop().unwrap();
    assert_eq!(len, 16);
    // SAFETY: the leaked staging buffer of `len` bytes, written by nobody else.
    unsafe { ptr::write_bytes(dst, 0xAB, len) };
    IN_FLIGHT.0.lock().unwrap().push((dst, len));
    drop_once(t, &built);
}
