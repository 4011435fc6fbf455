//! Hostile layouts and call sequences beside `bad_input.rs`: `bool` bytes reached through
//! negative strides, byte offsets and device staging, size-1 axes, `bool` with lanes, sub-byte
//! widths, packed multi-lane spans, and foreign tensors offered to `reclaim` and `into_vec`.
//! (From a review of the import side; each test asserts the correct behaviour.)

mod common;

use common::{Array, Built, Foreign};
use dlpack_core::ffi::DLManagedTensorVersioned;
use dlpack_core::{DataType, DataTypeCode, Device, DeviceHooks, DeviceType, Error, ManagedTensor};

fn import(built: &Built<DLManagedTensorVersioned>) -> Result<ManagedTensor, Error> {
    // SAFETY: the fixture's block is live and owned by the test, which hands it over once; its
    // arrays hold at least min(ndim, MAX_NDIM) readable i64s, and its data description is
    // checked by validation before anything is read.
    unsafe { ManagedTensor::from_raw(built.ptr) }
}

#[track_caller]
fn accepted(foreign: Foreign) -> (ManagedTensor, Built<DLManagedTensorVersioned>) {
    let built = foreign.build();
    let tensor = import(&built).unwrap_or_else(|e| panic!("the tensor must be accepted: {e}"));
    (tensor, built)
}

/// `shape`/`strides` with `extra` size-1 axes of stride 1 appended (they change nothing: no
/// index, offset or element differs).
fn with_unit_axes(shape: &[i64], strides: &[i64], extra: usize) -> (Vec<i64>, Vec<i64>) {
    let mut s = shape.to_vec();
    let mut t = strides.to_vec();
    s.extend(std::iter::repeat_n(1, extra));
    t.extend(std::iter::repeat_n(1, extra));
    (s, t)
}

/// Size-1 axes change no index, offset or element: a strided and an irregularly overlapping
/// `bool` layout give the same values and the same first bad index with 1000 of them appended.
/// (They once cost a step each per element in every walk: 1000 of them made a 2^24-index `bool`
/// check take 13.9 s instead of 15 ms. `Offsets` now leaves them out; its unit tests check that.)
#[test]
fn size_1_axes_change_nothing() {
    let mut bytes: Vec<u8> = (0..24).map(|i| u8::from(i % 3 == 0)).collect();
    for bad in [None, Some(6)] {
        if let Some(at) = bad {
            bytes[at] = 9;
        }
        for (shape, strides) in [(&[12i64][..], &[2i64][..]), (&[3, 4], &[3, 2])] {
            let plain = Foreign::new(DataType::BOOL, shape)
                .with_strides(strides)
                .bytes(&bytes);
            // Fewer under Miri, which runs this a thousand times slower.
            let (s, t) = with_unit_axes(shape, strides, if cfg!(miri) { 50 } else { 1000 });
            let padded = Foreign::new(DataType::BOOL, shape)
                .shape(Array::Values(s))
                .strides(Array::Values(t))
                .bytes(&bytes);
            let (a, _ba) = accepted(plain);
            let (b, _bb) = accepted(padded);
            assert_eq!(a.to_vec::<bool>(), b.to_vec::<bool>());
            assert_eq!(a.to_vec::<bool>().is_err(), bad.is_some());
            assert_eq!(
                a.element_offsets().collect::<Vec<_>>(),
                b.element_offsets().collect::<Vec<_>>()
            );
        }
    }
}

// --- bool values reached through negative strides and byte offsets ---------------------------

/// Four bools at bytes 6, 4, 2, 0 (stride -2 from byte 6): the invalid byte at the lowest
/// address, below the data pointer's first element, is index 3.
#[test]
fn reversed_strided_bool_names_the_bad_byte_below_the_first_element() {
    let bytes = [2u8, 0, 1, 0, 1, 0, 1, 0];
    let foreign = Foreign::new(DataType::BOOL, &[4])
        .with_strides(&[-2])
        .byte_offset(6)
        .bytes(&bytes);
    let (t, built) = accepted(foreign);
    assert_eq!(t.byte_span(), built.buffer_addr()..built.buffer_addr() + 7);
    assert_eq!(
        t.view::<bool>().unwrap_err(),
        Error::InvalidValue {
            dtype: DataType::BOOL,
            index: 3,
            byte: 2
        }
    );
    // Broadcast over a reversed axis: index [0, 3] (flat 3) is the first to reach it.
    let foreign = Foreign::new(DataType::BOOL, &[4])
        .shape(Array::Values(vec![3, 4]))
        .with_strides(&[0, -2])
        .byte_offset(6)
        .bytes(&bytes);
    let (t, _built) = accepted(foreign);
    assert!(matches!(
        t.view::<bool>().unwrap_err(),
        Error::InvalidValue {
            index: 3,
            byte: 2,
            ..
        }
    ));
    // Overlapping reversed windows (offsets 4 - i - j): merged into one run from byte 0.
    let bytes = [1u8, 0, 1, 0, 3];
    let foreign = Foreign::new(DataType::BOOL, &[5])
        .shape(Array::Values(vec![3, 3]))
        .with_strides(&[-1, -1])
        .byte_offset(4)
        .bytes(&bytes);
    let (t, _built) = accepted(foreign);
    assert!(matches!(
        t.view::<bool>().unwrap_err(),
        Error::InvalidValue {
            index: 0,
            byte: 3,
            ..
        }
    ));
}

// --- to_host_vec through a hook: staged bool bytes, negative strides ------------------------

/// A hook over one host buffer standing in for CUDA memory.
struct HostAsCuda {
    base: *const u8,
    len: usize,
}

// SAFETY: the test keeps the buffer alive and unwritten while the hook is used; only reads.
unsafe impl Send for HostAsCuda {}
// SAFETY: see above.
unsafe impl Sync for HostAsCuda {}

// SAFETY: reports nothing as host-accessible; copy_to_host writes only `dst`.
unsafe impl DeviceHooks for HostAsCuda {
    fn handles(&self, device_type: DeviceType) -> bool {
        device_type == DeviceType::CUDA
    }

    unsafe fn copy_to_host(&self, device: Device, src: usize, dst: &mut [u8]) -> Result<(), Error> {
        let start = self.base.addr();
        if src < start || src + dst.len() > start + self.len {
            return Err(Error::UnknownPointer {
                claimed: device,
                address: src,
            });
        }
        let from = self.base.wrapping_add(src - start);
        // SAFETY: inside the buffer (checked), which is live; `dst` is distinct.
        unsafe { std::ptr::copy_nonoverlapping(from, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

#[test]
fn to_host_vec_stages_the_span_below_a_reversed_first_element_and_checks_bools() {
    let bytes = [1u8, 0, 0, 0, 1, 0, 0, 0];
    let foreign = Foreign::new(DataType::BOOL, &[4])
        .with_strides(&[-2])
        .byte_offset(6)
        .on(DeviceType::CUDA, 0)
        .bytes(&bytes);
    let (t, built) = accepted(foreign);
    let hook = HostAsCuda {
        base: built.pointers.buffer,
        len: built.pointers.buffer_len,
    };
    assert_eq!(
        t.to_host_vec::<bool>(&hook).unwrap(),
        [false, true, false, true]
    );
    let foreign = Foreign::new(DataType::BOOL, &[4])
        .with_strides(&[-2])
        .byte_offset(6)
        .on(DeviceType::CUDA, 0)
        .bytes(&[1u8, 0, 7, 0, 1, 0, 0, 0]);
    let (t, built) = accepted(foreign);
    let hook = HostAsCuda {
        base: built.pointers.buffer,
        len: built.pointers.buffer_len,
    };
    assert!(matches!(
        t.to_host_vec::<bool>(&hook).unwrap_err(),
        Error::InvalidValue {
            index: 2,
            byte: 7,
            ..
        }
    ));
}

// --- dtypes: bool with lanes, sub-byte widths ----------------------------------------------

#[test]
fn bool_with_lanes_imports_but_never_views_as_bool() {
    let foreign = Foreign::new(DataType::new(DataTypeCode::BOOL, 8, 2), &[3]).bytes(&[7u8; 6]);
    let (mut t, _built) = accepted(foreign);
    assert_eq!(t.byte_span().len(), 6);
    assert!(matches!(
        t.view::<bool>(),
        Err(Error::DataTypeMismatch { .. })
    ));
    assert!(matches!(
        t.to_vec::<bool>(),
        Err(Error::DataTypeMismatch { .. })
    ));
    assert!(matches!(
        t.view_mut::<bool>(),
        Err(Error::DataTypeMismatch { .. })
    ));
}

#[test]
fn sub_byte_integer_and_bool_widths_are_refused() {
    for dtype in [
        DataType::new(DataTypeCode::INT, 4, 1),
        DataType::new(DataTypeCode::UINT, 1, 8),
        DataType::new(DataTypeCode::BOOL, 1, 8),
        DataType::new(DataTypeCode::BOOL, 16, 1),
    ] {
        let built = Foreign::new(DataType::U8, &[2]).dtype(dtype).build();
        let err = import(&built).unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedBits { .. }),
            "{dtype}: {err}"
        );
        assert_eq!(built.deletes(), 1);
    }
}

#[test]
fn packed_fp4_with_three_lanes_spans_ceil_of_its_bits() {
    // 3 elements of 3 packed fp4 lanes: 36 bits, 5 bytes.
    let dtype = DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 3);
    let (t, built) = accepted(Foreign::new(dtype, &[3]).buffer_words(1).byte_offset(1));
    let start = built.buffer_addr() + 1;
    assert_eq!(t.byte_span(), start..start + 5);
    // Strided, it is refused: only the compact layout of packed elements is defined.
    let built = Foreign::new(dtype, &[3])
        .with_strides(&[2])
        .buffer_words(1)
        .build();
    assert!(matches!(
        import(&built).unwrap_err(),
        Error::StridedSubByte { .. }
    ));
}

// --- reclaim / into_vec on foreign tensors ---------------------------------------------------

#[test]
fn foreign_tensors_are_never_reclaimed_or_taken_as_vecs() {
    let (t, built) = accepted(Foreign::of(&[1.0f32, 2.0], &[2]));
    let t = t.into_vec::<f32>().unwrap_err();
    let t = t.reclaim::<Vec<f32>>().unwrap_err();
    assert_eq!(built.deletes(), 0);
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    drop(t);
    assert_eq!(built.deletes(), 1);
}

/// A foreign tensor wrapped by this crate (`ManagedTensor::export` of the owner) is ours at the
/// outer level only: `into_vec` must not reach through to memory the foreign producer owns.
#[test]
fn a_wrapped_foreign_tensor_does_not_give_its_memory_away() {
    let (t, built) = accepted(Foreign::of(&[1.0f32, 2.0], &[2]));
    let wrapped = ManagedTensor::export(t).unwrap();
    let wrapped = wrapped.into_vec::<f32>().unwrap_err();
    let inner: ManagedTensor = wrapped.reclaim().unwrap();
    assert_eq!(built.deletes(), 0);
    assert_eq!(inner.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    drop(inner);
    assert_eq!(built.deletes(), 1);
}
