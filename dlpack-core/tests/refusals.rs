//! Ownership on refusal, and the answers the error messages promise: a consuming method that
//! refuses gives its value back ([`Refused`]), the legacy export refuses what the legacy struct
//! cannot carry instead of dropping it, and the byte view that [`Error::IrregularOverlap`]
//! points to exists. Runs under Miri with `-Zmiri-strict-provenance`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{DropCounter, Foreign};
use dlpack_core::{DataType, Error, Export, ExportDesc, Flags, ManagedTensor, Refused};

/// A producer of three bytes whose description carries any flags.
struct Flagged {
    data: Vec<u8>,
    flags: Flags,
    _drops: DropCounter,
}

// SAFETY: describes the three initialised bytes of its own heap `Vec`, which stays in place and
// is written by no one else while the value lives.
unsafe impl Export for Flagged {
    fn ndim(&self) -> usize {
        1
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape[0] = 3;
        strides[0] = 1;
        let mut desc = ExportDesc::host(self.data.as_mut_ptr());
        desc.flags = self.flags;
        desc
    }
}

fn flagged(flags: Flags, drops: &Arc<AtomicUsize>) -> Flagged {
    Flagged {
        data: vec![1, 2, 3],
        flags,
        _drops: DropCounter::new(drops),
    }
}

#[test]
fn a_read_only_tensor_refused_as_legacy_comes_back_for_the_versioned_struct() {
    let data = vec![4u8, 5, 6];
    let address = data.as_ptr();
    let t = ManagedTensor::export(data).unwrap().into_read_only();
    let Refused { error, value } = t.into_raw_legacy().unwrap_err();
    assert_eq!(error, Error::LegacyReadOnly);
    // The caller falls back to the versioned struct: same memory, still read-only.
    let raw = value.into_raw().unwrap();
    // SAFETY: handed over by `into_raw`, owned here, taken once.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    assert!(t.is_read_only());
    assert_eq!(t.view::<u8>().unwrap().as_ptr(), address);
}

#[test]
fn a_producer_refused_as_legacy_comes_back_unchanged_from_both_legacy_exports() {
    let drops = Arc::new(AtomicUsize::new(0));
    for raw in [false, true] {
        let p = flagged(Flags::READ_ONLY, &drops);
        let address = p.data.as_ptr();
        let refused = if raw {
            ManagedTensor::export_raw_legacy(p).map(|_| ()).unwrap_err()
        } else {
            ManagedTensor::export_legacy(p).map(|_| ()).unwrap_err()
        };
        assert_eq!(refused.error, Error::LegacyReadOnly);
        assert_eq!(drops.load(Ordering::SeqCst), 0, "given back, not dropped");
        let p = refused.value;
        assert_eq!((p.data.as_ptr(), &p.data[..]), (address, &[1u8, 2, 3][..]));
        // The versioned export takes it.
        let t = ManagedTensor::export(p).unwrap();
        assert!(t.is_read_only());
        drop(t);
        assert_eq!(drops.swap(0, Ordering::SeqCst), 1);
    }
}

#[test]
fn a_foreign_read_only_tensor_refused_as_legacy_is_deleted_only_by_its_new_owner() {
    let built = Foreign::of(&[1u8, 2], &[2])
        .flags(Flags::READ_ONLY.0)
        .build();
    // SAFETY: the fixture's block describes its own buffer; handed over once.
    let t = unsafe { ManagedTensor::from_raw(built.ptr) }.unwrap();
    let refused = t.into_raw_legacy().unwrap_err();
    assert_eq!(built.deletes(), 0);
    assert_eq!(refused.value.to_vec::<u8>().unwrap(), [1, 2]);
    // `?` in a function returning `Error` keeps the error and drops the value.
    let as_error: Error = refused.into();
    assert_eq!(as_error, Error::LegacyReadOnly);
    assert_eq!(built.deletes(), 1);
}

#[test]
fn export_legacy_refuses_flag_bits_dlpack_does_not_define_as_export_does() {
    let drops = Arc::new(AtomicUsize::new(0));
    let unknown = Flags(1 << 7);
    let expected = Error::UnknownFlags { flags: unknown };
    assert_eq!(
        ManagedTensor::export(flagged(unknown, &drops))
            .unwrap_err()
            .error,
        expected
    );
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    for raw in [false, true] {
        let refused = if raw {
            ManagedTensor::export_raw_legacy(flagged(unknown, &drops))
                .map(|_| ())
                .unwrap_err()
        } else {
            ManagedTensor::export_legacy(flagged(unknown, &drops))
                .map(|_| ())
                .unwrap_err()
        };
        assert_eq!(refused.error, expected);
        assert_eq!(refused.value.flags, unknown);
    }
    assert_eq!(drops.load(Ordering::SeqCst), 3);
    // The raw versioned export, which trusts a producer that names no allocation for its
    // layout, still refuses the bits: no undefined flag reaches C from this crate.
    assert_eq!(
        ManagedTensor::export_raw(flagged(unknown | Flags::READ_ONLY, &drops))
            .map(|_| ())
            .unwrap_err()
            .error,
        Error::UnknownFlags {
            flags: unknown | Flags::READ_ONLY
        }
    );
}

#[test]
fn the_bytes_of_a_bool_tensor_are_viewed_as_u8_whatever_they_hold() {
    // A producer wrote 2 where a bool must be 0 or 1: the bool view refuses, the byte view reads.
    let built = Foreign::of(&[1u8, 2, 0], &[3])
        .dtype(DataType::BOOL)
        .build();
    // SAFETY: the fixture's block describes its own buffer; handed over once.
    let t = unsafe { ManagedTensor::from_raw(built.ptr) }.unwrap();
    assert!(matches!(
        t.view::<bool>().unwrap_err(),
        Error::InvalidValue { byte: 2, .. }
    ));
    let bytes = t.view_bytes().unwrap();
    assert_eq!(bytes.to_vec().unwrap(), [1, 2, 0]);
    assert_eq!(bytes.as_ptr().addr(), built.buffer_addr());
}

#[test]
fn the_byte_view_keeps_shape_and_strides_and_refuses_wider_elements() {
    let t = ManagedTensor::export(vec![1i8, -2, 3, -4, 5, -6]).unwrap();
    assert_eq!(
        t.view_bytes().unwrap().to_vec().unwrap(),
        [1, 0xfe, 3, 0xfc, 5, 0xfa]
    );
    let strided = Foreign::of(&[10u8, 11, 12, 13, 14, 15], &[2, 3])
        .dtype(DataType::new(
            dlpack_core::DataTypeCode::FLOAT8_E4M3FN,
            8,
            1,
        ))
        .with_strides(&[1, 2]);
    let built = strided.build();
    // SAFETY: as above.
    let t = unsafe { ManagedTensor::from_raw(built.ptr) }.unwrap();
    let v = t.view_bytes().unwrap();
    assert_eq!(v.to_vec().unwrap(), [10, 12, 14, 11, 13, 15]);
    assert_eq!(
        ManagedTensor::export(vec![1.0f32])
            .unwrap()
            .view_bytes()
            .unwrap_err(),
        Error::DataTypeMismatch {
            found: DataType::F32,
            expected: DataType::U8
        }
    );
}

#[test]
fn into_vec_takes_a_vec_with_ordinary_spare_room_without_a_copy() {
    // A Vec grown by push has up to twice the room its elements need: taken whole.
    let mut v = Vec::with_capacity(10);
    v.extend([1u32, 2, 3, 4, 5, 6]);
    let address = v.as_ptr();
    let back: Vec<u32> = ManagedTensor::export(v).unwrap().into_vec().unwrap();
    assert_eq!(
        (back.as_ptr(), &back[..]),
        (address, &[1, 2, 3, 4, 5, 6][..])
    );
    // Less than 4 KiB of spare room is taken too, whatever the tensor's size.
    let mut v = Vec::with_capacity(500);
    v.push(7u64);
    let address = v.as_ptr();
    let back: Vec<u64> = ManagedTensor::export(v).unwrap().into_vec().unwrap();
    assert_eq!((back.as_ptr(), back.len()), (address, 1));
}

#[test]
fn into_vec_leaves_a_few_elements_in_a_large_allocation_with_their_producer() {
    // Two f64s in room for 100 000 (800 kB): handing the Vec over would keep 800 kB alive for
    // 16 bytes. The tensor comes back untouched, for the caller to copy.
    let mut v = Vec::with_capacity(100_000);
    v.extend([1.5f64, 2.5]);
    let address = v.as_ptr();
    let t = ManagedTensor::export(v).unwrap();
    let t = t.into_vec::<f64>().unwrap_err();
    let view = t.view::<f64>().unwrap();
    assert_eq!(
        (view.as_ptr(), view.to_vec().unwrap()),
        (address, vec![1.5, 2.5])
    );
    // The producer still holds its whole Vec.
    let v: Vec<f64> = t.reclaim().unwrap();
    assert_eq!((v.as_ptr(), v.capacity() >= 100_000), (address, true));
}

#[test]
fn memory_others_may_write_gives_no_bool_view_and_a_checked_copy() {
    // Foreign code (Python, say) may write 2 into a bool's byte while Rust holds the tensor:
    // a `&bool` into it could then hold an invalid value, so none is made.
    let built = Foreign::of(&[1u8, 0, 1, 1, 0, 0], &[2, 3])
        .dtype(DataType::BOOL)
        .with_strides(&[1, 2])
        .build();
    // SAFETY: the fixture's block describes its own buffer; handed over once.
    let t = unsafe { ManagedTensor::from_raw(built.ptr) }
        .unwrap()
        .into_externally_writable();
    assert!(t.is_externally_writable());
    let err = t.view::<bool>().unwrap_err();
    assert_eq!(
        err,
        Error::ExternallyWritable {
            dtype: DataType::BOOL
        }
    );
    assert!(err.to_string().contains("to_vec"), "{err}");
    // The copy is checked in memory only it owns, in row-major order.
    assert_eq!(
        t.to_vec::<bool>().unwrap(),
        [true, true, false, false, true, false]
    );
    assert_eq!(
        t.view_bytes().unwrap().to_vec().unwrap(),
        [1, 1, 0, 0, 1, 0]
    );
    // Types every bit pattern is valid for are viewed as before.
    let ints = ManagedTensor::export(vec![5u8, 6])
        .unwrap()
        .into_externally_writable();
    assert_eq!(ints.view::<u8>().unwrap().to_vec().unwrap(), [5, 6]);
}

#[test]
fn a_checked_copy_of_memory_others_wrote_an_invalid_bool_into_is_refused() {
    let built = Foreign::of(&[0u8, 1, 2], &[3])
        .dtype(DataType::BOOL)
        .build();
    // SAFETY: as above.
    let t = unsafe { ManagedTensor::from_raw(built.ptr) }
        .unwrap()
        .into_externally_writable();
    assert_eq!(
        t.to_vec::<bool>().unwrap_err(),
        Error::InvalidValue {
            dtype: DataType::BOOL,
            index: 2,
            byte: 2
        }
    );
    // Other element types are still checked against the dtype first.
    assert!(matches!(
        t.to_vec::<u8>().unwrap_err(),
        Error::DataTypeMismatch { .. }
    ));
}

#[test]
fn memory_others_may_write_is_never_handed_over_as_owned_values_nor_viewed_mutably_as_bool() {
    // Outside code may still write the memory: a `Vec<bool>` of it could come to hold 2.
    let mut t = ManagedTensor::export(vec![true, false])
        .unwrap()
        .into_externally_writable();
    assert_eq!(
        t.view_mut::<bool>().unwrap_err(),
        Error::ExternallyWritable {
            dtype: DataType::BOOL
        }
    );
    let t = t.into_vec::<bool>().unwrap_err();
    let t = t.reclaim::<Vec<bool>>().unwrap_err();
    assert_eq!(t.to_vec::<bool>().unwrap(), [true, false]);
    // Whatever the element type: once handed over, the memory would be Rust's alone.
    let t = ManagedTensor::export(vec![1u8])
        .unwrap()
        .into_externally_writable();
    let t = t.into_vec::<u8>().unwrap_err();
    assert!(t.reclaim::<Vec<u8>>().is_err());
}

#[test]
fn a_bool_export_a_consumer_wrote_2_into_is_not_reclaimed_as_bools() {
    // A C consumer wrote 2 into a writable bool export and handed it back.
    let mut data = vec![true, false, true];
    let bytes = data.as_mut_ptr().cast::<u8>();
    let raw = ManagedTensor::export(data).unwrap().into_raw().unwrap();
    // SAFETY: the consumer's write, into the export's own writable memory, before handing the
    // tensor back; nothing reads it meanwhile.
    unsafe { bytes.add(1).write(2) };
    // SAFETY: handed back by the consumer, owned here, taken once.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let t = t.into_vec::<bool>().unwrap_err();
    let t = t.reclaim::<Vec<bool>>().unwrap_err();
    assert_eq!(t.view_bytes().unwrap().to_vec().unwrap(), [1, 2, 1]);
    assert!(matches!(
        t.to_vec::<bool>().unwrap_err(),
        Error::InvalidValue {
            index: 1,
            byte: 2,
            ..
        }
    ));
}
