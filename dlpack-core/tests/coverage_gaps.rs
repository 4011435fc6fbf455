//! Paths that the rest of the suite leaves unexercised (found with source-based coverage):
//! `BorrowedTensor`'s refusals and mutable views, the legacy export's padded-sub-byte refusal,
//! `into_raw_legacy` of a restricted legacy tensor, the deleters' NULL case, the default
//! `DeviceHooks` methods, hook error propagation through `to_host_vec`, the mutable view's
//! slice copies, custom `Element` bit checks, `Dims::from_dims`, the `Buffer` copies, and the
//! messages of the errors nothing else displays. Every test checks exact values and that each
//! tensor is deleted (or each producer dropped) exactly once. Runs under Miri with
//! `-Zmiri-strict-provenance`.

mod common;

use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Data, DropCounter, Foreign};
use dlpack_core::__private::{describe_buffer, give_vec_of_buffer};
use dlpack_core::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLTensor};
use dlpack_core::protocol::StreamRequest;
use dlpack_core::{
    BorrowedTensor, Buffer, DataType, DataTypeCode, Device, DeviceHooks, DeviceType, Dims, Element,
    Error, Export, ExportDesc, Flags, ManagedTensor, MemoryKind, PointerInfo, PyErrorKind, VecSlot,
    Version,
};

// --- helpers ---------------------------------------------------------------------------------

fn import(ptr: *mut DLManagedTensorVersioned) -> Result<ManagedTensor, Error> {
    // SAFETY: every caller passes a fixture block it owns and hands over once; its fields
    // describe its own buffer and arrays.
    unsafe { ManagedTensor::from_raw(ptr) }
}

fn import_legacy(ptr: *mut DLManagedTensor) -> Result<ManagedTensor, Error> {
    // SAFETY: as in `import`, for a legacy block.
    unsafe { ManagedTensor::from_raw_legacy(ptr) }
}

/// A `DLTensor` over `data` (u8, 1-d, contiguous) whose arrays live in `arrays`.
fn dl_u8(data: *mut u8, arrays: &mut [i64; 2]) -> DLTensor {
    let base = arrays.as_mut_ptr();
    DLTensor {
        data: data.cast(),
        device: Device::CPU,
        ndim: 1,
        dtype: DataType::U8,
        shape: base,
        strides: base.wrapping_add(1),
        byte_offset: 0,
    }
}

/// A producer that counts its drops, describing its own `Vec<u8>` with the dtype and flags
/// given.
struct Counted {
    data: Vec<u8>,
    len: i64,
    dtype: DataType,
    flags: Flags,
    _drops: DropCounter,
}

// SAFETY: describes `len` elements of `dtype` at the start of its own heap `Vec`, which holds
// at least that many bytes (every test sizes it so), writable, initialised, and valid until the
// producer is dropped.
unsafe impl Export for Counted {
    fn ndim(&self) -> usize {
        1
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape[0] = self.len;
        strides[0] = 1;
        ExportDesc {
            data: self.data.as_mut_ptr().cast(),
            byte_offset: 0,
            dtype: self.dtype,
            device: Device::CPU,
            flags: self.flags,
            allocation: None,
        }
    }
}

const FP4: DataType = DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 1);

// --- BorrowedTensor: every refusal goes through CheckedTensor::new's slow path ---------------

#[test]
fn borrowed_tensor_refuses_invalid_descriptions_with_the_exact_error() {
    let mut data = [0u8; 4];
    let mut arrays = [-3i64, 1];
    let t = dl_u8(data.as_mut_ptr(), &mut arrays);
    // SAFETY: the fields point to `data` and `arrays`, which outlive the call; nothing is read
    // beyond them.
    let err = unsafe { BorrowedTensor::new(&t, Version::CURRENT, Flags::empty()) }.unwrap_err();
    assert_eq!(err, Error::NegativeDim { axis: 0, value: -3 });

    let mut arrays = [4i64, 1];
    let mut t = dl_u8(data.as_mut_ptr(), &mut arrays);
    // SAFETY: as above.
    let err = unsafe { BorrowedTensor::new(&t, Version::CURRENT, Flags(1 << 7)) }.unwrap_err();
    assert_eq!(
        err,
        Error::UnknownFlags {
            flags: Flags(1 << 7)
        }
    );

    // NULL strides are allowed before 1.2 only.
    t.strides = ptr::null_mut();
    // SAFETY: as above.
    let err = unsafe { BorrowedTensor::new(&t, Version::new(1, 2), Flags::empty()) }.unwrap_err();
    assert_eq!(
        err,
        Error::NullStrides {
            ndim: 1,
            version: Version::new(1, 2)
        }
    );
    // SAFETY: as above.
    let ok = unsafe { BorrowedTensor::new(&t, Version::new(1, 1), Flags::empty()) }.unwrap();
    assert_eq!(ok.strides(), &[1]);
    assert_eq!(ok.to_vec::<u8>().unwrap(), [0, 0, 0, 0]);
    drop(ok);

    let mut t = dl_u8(data.as_mut_ptr(), &mut arrays);
    t.dtype = DataType::new(DataTypeCode::FLOAT, 8, 1);
    // SAFETY: as above.
    let err = unsafe { BorrowedTensor::new(&t, Version::CURRENT, Flags::empty()) }.unwrap_err();
    assert_eq!(
        err,
        Error::UnsupportedBits {
            dtype: DataType::new(DataTypeCode::FLOAT, 8, 1),
            allowed: &[16, 32, 64]
        }
    );

    let mut t = dl_u8(ptr::null_mut(), &mut arrays);
    t.ndim = 1;
    // SAFETY: as above; the NULL data is refused before anything is read.
    let err = unsafe { BorrowedTensor::new(&t, Version::CURRENT, Flags::empty()) }.unwrap_err();
    assert_eq!(err, Error::NullData { elements: 4 });
}

#[test]
fn borrowed_tensor_view_mut_writes_through_and_honours_read_only() {
    let mut data = [1u8, 2, 3, 4];
    let base = data.as_mut_ptr();
    let mut arrays = [4i64, 1];
    let t = dl_u8(base, &mut arrays);
    {
        // SAFETY: `t` describes `data`, which nothing else touches while the borrow lives.
        let mut b = unsafe { BorrowedTensor::new(&t, Version::CURRENT, Flags::empty()) }.unwrap();
        assert_eq!(b.check_writable(), Ok(()));
        let mut v = b.view_mut::<u8>().unwrap();
        v.copy_from_slice(&[9, 8, 7, 6]).unwrap();
        assert!(format!("{b:?}").starts_with("BorrowedTensor(CheckedTensor {"));
        // Deref to CheckedTensor.
        assert_eq!(b.shape(), &[4]);
    }
    assert_eq!(data, [9, 8, 7, 6]);

    let t = dl_u8(data.as_mut_ptr(), &mut arrays);
    // SAFETY: as above.
    let mut b = unsafe { BorrowedTensor::new(&t, Version::CURRENT, Flags::READ_ONLY) }.unwrap();
    assert_eq!(b.check_writable(), Err(Error::ReadOnly));
    assert_eq!(b.view_mut::<u8>().unwrap_err(), Error::ReadOnly);
    assert_eq!(b.view_mut::<i8>().unwrap_err(), Error::ReadOnly);
}

#[test]
fn borrowed_tensor_view_mut_refuses_data_that_overlaps_its_own_dltensor() {
    // The DLTensor lives inside the bytes it describes: a write through the view would rewrite
    // its own shape pointer.
    #[repr(C, align(8))]
    struct Arena([u8; 128]);
    let mut arena = Arena([0; 128]);
    let base = arena.0.as_mut_ptr();
    let mut arrays = [128i64, 1];
    let t_ptr = base.cast::<DLTensor>();
    // SAFETY: the arena is 8-aligned and larger than a DLTensor; nothing else uses it.
    unsafe { t_ptr.write(dl_u8(base, &mut arrays)) };
    // SAFETY: the DLTensor was just written; its data is the arena, alive for the whole test.
    let t = unsafe { &*t_ptr };
    // SAFETY: as above.
    let mut b = unsafe { BorrowedTensor::new(t, Version::CURRENT, Flags::empty()) }.unwrap();
    let start = base.addr();
    let expected = Error::DataOverlapsDescription {
        what: "managed tensor struct",
        start,
        end: start + 128,
    };
    assert_eq!(b.check_writable(), Err(expected.clone()));
    assert_eq!(b.view_mut::<u8>().unwrap_err(), expected);
    // Reading is fine.
    assert_eq!(b.view::<u8>().unwrap().len(), 128);
}

// --- NULL pointers and deleters ----------------------------------------------------------------

#[test]
fn legacy_from_raw_if_refuses_null_without_calling_the_consumer() {
    let mut asked = false;
    // SAFETY: NULL is allowed.
    let err = unsafe {
        ManagedTensor::from_raw_legacy_if(ptr::null_mut(), |_| -> Result<(), Error> {
            asked = true;
            Ok(())
        })
    }
    .unwrap_err();
    assert_eq!(
        err,
        Error::NullPointer {
            what: "managed tensor"
        }
    );
    assert!(!asked);
}

#[test]
fn exported_deleters_ignore_null() {
    let drops = Arc::new(AtomicUsize::new(0));
    let producer = || Counted {
        data: vec![0; 4],
        len: 4,
        dtype: DataType::U8,
        flags: Flags::empty(),
        _drops: DropCounter::new(&drops),
    };
    let raw = ManagedTensor::export_raw(producer()).unwrap().as_ptr();
    // SAFETY: a live block we own; its deleter accepts NULL (the DLPack rule for deleters).
    let deleter = unsafe { (*raw).deleter }.unwrap();
    // SAFETY: NULL is a no-op.
    unsafe { deleter(ptr::null_mut()) };
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    // SAFETY: the block is live and deleted once.
    unsafe { deleter(raw) };
    assert_eq!(drops.load(Ordering::SeqCst), 1);

    let raw = ManagedTensor::export_raw_legacy(producer())
        .unwrap()
        .as_ptr();
    // SAFETY: as above, for the legacy block.
    let deleter = unsafe { (*raw).deleter }.unwrap();
    // SAFETY: NULL is a no-op.
    unsafe { deleter(ptr::null_mut()) };
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    // SAFETY: the block is live and deleted once.
    unsafe { deleter(raw) };
    assert_eq!(drops.load(Ordering::SeqCst), 2);
}

// --- legacy export refusals --------------------------------------------------------------------

#[test]
fn a_padded_sub_byte_producer_is_refused_as_legacy_and_given_back() {
    let drops = Arc::new(AtomicUsize::new(0));
    let producer = || Counted {
        data: vec![0; 3],
        len: 3,
        dtype: FP4,
        flags: Flags::IS_SUBBYTE_TYPE_PADDED,
        _drops: DropCounter::new(&drops),
    };
    for i in 0..2 {
        let refused = if i == 0 {
            ManagedTensor::export_legacy(producer()).map(drop)
        } else {
            ManagedTensor::export_raw_legacy(producer()).map(drop)
        }
        .unwrap_err();
        assert_eq!(refused.error, Error::LegacyPaddedSubByte);
        assert!(refused.to_string().contains("padded sub-byte"), "{refused}");
        assert_eq!(refused.error.py_kind(), PyErrorKind::BufferError);
        // The producer comes back whole, not dropped.
        assert_eq!(drops.load(Ordering::SeqCst), i);
        assert_eq!(refused.value.data.len(), 3);
        drop(refused);
        assert_eq!(drops.load(Ordering::SeqCst), i + 1);
    }
    // The versioned export keeps the flag.
    let t = ManagedTensor::export(producer()).unwrap();
    assert!(t.flags().contains(Flags::IS_SUBBYTE_TYPE_PADDED));
    assert_eq!(t.byte_span().len(), 3);
    drop(t);
    assert_eq!(drops.load(Ordering::SeqCst), 3);
}

#[test]
fn a_padded_sub_byte_import_is_refused_as_legacy_and_given_back() {
    let built = Foreign::new(FP4, &[3])
        .flags(Flags::IS_SUBBYTE_TYPE_PADDED.0)
        .build();
    let counter = built.counter();
    let t = import(built.ptr).unwrap();
    let (error, t) = t.into_raw_legacy().unwrap_err().into_parts();
    assert_eq!(error, Error::LegacyPaddedSubByte);
    assert_eq!(counter.load(Ordering::SeqCst), 0);
    assert!(t.flags().contains(Flags::IS_SUBBYTE_TYPE_PADDED));
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

#[test]
fn a_restricted_legacy_tensor_of_ours_is_refused_as_legacy_and_given_back() {
    let shared: Arc<[u32]> = Arc::from(vec![1u32, 2, 3]);
    // Arc<[T]> exports read-only, which legacy refuses, so export a Vec and restrict it.
    let t = ManagedTensor::export_legacy(vec![1u32, 2, 3]).unwrap();
    assert!(t.is_legacy() && !t.is_read_only());
    let refused = t.into_read_only().into_raw_legacy().unwrap_err();
    assert_eq!(refused.error, Error::LegacyReadOnly);
    // The caller falls back to the versioned struct, which says read-only.
    let raw = refused.value.into_raw().unwrap();
    // SAFETY: handed over by `into_raw`, owned here.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    assert!(t.is_read_only());
    assert_eq!(t.to_vec::<u32>().unwrap(), [1, 2, 3]);
    drop(t);
    // An Arc producer is read-only from the start: refused at export, and given back.
    let refused = ManagedTensor::export_legacy(Arc::clone(&shared)).unwrap_err();
    assert_eq!(refused.error, Error::LegacyReadOnly);
    assert_eq!(Arc::strong_count(&shared), 2);
    assert!(Arc::ptr_eq(&refused.value, &shared));
    drop(refused);
    assert_eq!(Arc::strong_count(&shared), 1);
    // A restricted Arc-backed versioned tensor is refused as legacy and given back.
    let t = ManagedTensor::export(Arc::clone(&shared)).unwrap();
    assert_eq!(Arc::strong_count(&shared), 2);
    let refused = t.into_raw_legacy().unwrap_err();
    assert_eq!(refused.error, Error::LegacyReadOnly);
    assert_eq!(Arc::strong_count(&shared), 2);
    assert_eq!(refused.value.to_vec::<u32>().unwrap(), [1, 2, 3]);
    drop(refused);
    assert_eq!(Arc::strong_count(&shared), 1);
}

#[test]
fn managed_check_writable_reports_each_refusal() {
    let t = ManagedTensor::export(vec![1u8, 2]).unwrap();
    assert_eq!(t.check_writable(), Ok(()));
    assert_eq!(t.into_read_only().check_writable(), Err(Error::ReadOnly));
    // A broadcast (stride 0) foreign tensor: indices share an element.
    let built = Foreign::of(&[5u8], &[3]).with_strides(&[0]).build();
    let counter = built.counter();
    let t = import(built.ptr).unwrap();
    assert_eq!(
        t.check_writable(),
        Err(Error::OverlappingStrides {
            shape: vec![3],
            strides: vec![0]
        })
    );
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

// --- hooks ---------------------------------------------------------------------------------------

/// A hook for one device type that implements nothing but `handles`.
struct HandlesOnly(DeviceType);

// SAFETY: it reports nothing and copies nothing.
unsafe impl DeviceHooks for HandlesOnly {
    fn handles(&self, device_type: DeviceType) -> bool {
        device_type == self.0
    }
}

const FAKE: usize = 0x7000_0000;

#[test]
fn default_hook_methods_refuse_with_no_hook() {
    let hooks = HandlesOnly(DeviceType::VULKAN);
    let dev = Device::new(DeviceType::VULKAN, 2);
    let no_hook = Error::NoHook { device: dev };
    assert_eq!(hooks.resolve(dev, FAKE), Err(no_hook.clone()));
    assert_eq!(
        hooks.make_ready(dev, StreamRequest::Default),
        Err(no_hook.clone())
    );
    assert_eq!(hooks.wait_host(dev), Err(no_hook.clone()));
    let mut dst = [0u8; 4];
    // SAFETY: the default copies nothing.
    let copied = unsafe { hooks.copy_to_host(dev, FAKE, &mut dst) };
    assert_eq!(copied, Err(no_hook.clone()));
    // SAFETY: as above.
    let copied = unsafe { hooks.copy_from_host(dev, &[1, 2], FAKE) };
    assert_eq!(copied, Err(no_hook.clone()));
    assert_eq!(dst, [0; 4]);

    // Through the importer: a handled device whose hook cannot resolve or copy.
    let built = Foreign::new(DataType::F32, &[2])
        .device(dev)
        .data(Data::Fake(FAKE))
        .build();
    let counter = built.counter();
    let mut t = import(built.ptr).unwrap();
    assert_eq!(t.check_device(&hooks), Err(no_hook.clone()));
    assert_eq!(t.verify_device(&hooks), Err(no_hook.clone()));
    assert_eq!(t.to_host_vec::<f32>(&hooks), Err(no_hook));
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

/// A hook for one device type that reports a fixed answer and fails every copy with a
/// runtime error.
struct Fixed {
    device_type: DeviceType,
    info: PointerInfo,
    copies: AtomicUsize,
}

// SAFETY: reports only device memory (never host-accessible) or kinds the tests check are
// refused; `copy_to_host` writes nothing.
unsafe impl DeviceHooks for Fixed {
    fn handles(&self, device_type: DeviceType) -> bool {
        device_type == self.device_type
    }
    fn resolve(&self, _claimed: Device, _address: usize) -> Result<PointerInfo, Error> {
        Ok(self.info.clone())
    }
    unsafe fn copy_to_host(&self, _: Device, _: usize, _: &mut [u8]) -> Result<(), Error> {
        self.copies.fetch_add(1, Ordering::SeqCst);
        Err(Error::Runtime {
            runtime: "fixed",
            message: "copy failed".into(),
        })
    }
}

#[test]
fn to_host_vec_propagates_a_hook_runtime_error_and_checks_alignment_first() {
    let dev = Device::new(DeviceType::VULKAN, 0);
    let hooks = Fixed {
        device_type: DeviceType::VULKAN,
        info: PointerInfo {
            device: dev,
            kind: MemoryKind::Device,
            allocation: None,
        },
        copies: AtomicUsize::new(0),
    };
    let built = Foreign::new(DataType::F32, &[2])
        .device(dev)
        .data(Data::Fake(FAKE))
        .build();
    let counter = built.counter();
    let t = import(built.ptr).unwrap();
    assert_eq!(
        t.to_host_vec::<f32>(&hooks),
        Err(Error::Runtime {
            runtime: "fixed",
            message: "copy failed".into()
        })
    );
    assert_eq!(hooks.copies.load(Ordering::SeqCst), 1);
    assert_eq!(
        t.to_host_vec::<u8>(&hooks),
        Err(Error::DataTypeMismatch {
            found: DataType::F32,
            expected: DataType::U8
        })
    );
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);

    // A device tensor whose first element is not aligned for f32: refused before any copy.
    let built = Foreign::new(DataType::F32, &[2])
        .device(dev)
        .data(Data::Fake(FAKE))
        .byte_offset(2)
        .build();
    let counter = built.counter();
    let t = import(built.ptr).unwrap();
    assert_eq!(
        t.to_host_vec::<f32>(&hooks),
        Err(Error::Misaligned {
            address: FAKE + 2,
            align: 4
        })
    );
    assert_eq!(hooks.copies.load(Ordering::SeqCst), 1);
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

#[test]
fn other_device_types_take_device_memory_only() {
    let dev = Device::new(DeviceType::METAL, 1);
    for (kind, ok) in [
        (MemoryKind::Device, true),
        (MemoryKind::Host, false),
        (MemoryKind::HostPinned, false),
        (MemoryKind::Managed, false),
    ] {
        let hooks = Fixed {
            device_type: DeviceType::METAL,
            info: PointerInfo {
                device: dev,
                kind,
                allocation: Some(FAKE..FAKE + 64),
            },
            copies: AtomicUsize::new(0),
        };
        let built = Foreign::new(DataType::F32, &[2])
            .device(dev)
            .data(Data::Fake(FAKE))
            .build();
        let counter = built.counter();
        let mut t = import(built.ptr).unwrap();
        let got = t.verify_device(&hooks);
        if ok {
            assert_eq!(got, Ok(Some(hooks.info.clone())));
            assert!(!t.is_host_accessible());
        } else {
            let err = got.unwrap_err();
            assert_eq!(
                err,
                Error::MemoryKindMismatch {
                    claimed: dev,
                    actual: kind
                }
            );
            assert!(err.to_string().contains(&kind.to_string()), "{err}");
        }
        drop(t);
        assert_eq!(counter.load(Ordering::SeqCst), 1);
    }
    assert_eq!(MemoryKind::Host.to_string(), "pageable host memory");
    assert_eq!(MemoryKind::Device.to_string(), "device memory");
    assert_eq!(MemoryKind::Managed.to_string(), "managed (shared) memory");
}

#[test]
fn check_device_of_an_empty_tensor_asks_nothing() {
    let dev = Device::cuda(0);
    let hooks = Fixed {
        device_type: DeviceType::CUDA,
        info: PointerInfo {
            device: Device::cuda(5),
            kind: MemoryKind::Host,
            allocation: None,
        },
        copies: AtomicUsize::new(0),
    };
    let built = Foreign::new(DataType::F32, &[0, 3])
        .device(dev)
        .data(Data::Fake(FAKE))
        .build();
    let counter = built.counter();
    let mut t = import(built.ptr).unwrap();
    assert_eq!(t.check_device(&hooks), Ok(None));
    assert_eq!(t.verify_device(&hooks), Ok(None));
    assert_eq!(t.to_host_vec::<f32>(&hooks), Ok(Vec::new()));
    assert_eq!(hooks.copies.load(Ordering::SeqCst), 0);
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

// --- views ---------------------------------------------------------------------------------------

#[test]
fn copy_to_slice_gathers_strided_elements_and_checks_the_length() {
    // A transposed 2x3 view over [0, 1, 2, 3, 4, 5]: row-major order is 0 2 4 / 1 3 5.
    let built = Foreign::of(&[0i16, 1, 2, 3, 4, 5], &[2, 3])
        .with_strides(&[1, 2])
        .build();
    let counter = built.counter();
    let t = import(built.ptr).unwrap();
    let v = t.view::<i16>().unwrap();
    assert_eq!(
        (v.shape(), v.strides(), v.ndim(), v.len(), v.is_empty()),
        (&[2i64, 3][..], &[1i64, 2][..], 2, 6, false)
    );
    assert!(!v.is_row_major_contiguous());
    let mut out = [0i16; 6];
    v.copy_to_slice(&mut out).unwrap();
    assert_eq!(out, [0, 2, 4, 1, 3, 5]);
    let mut short = [0i16; 5];
    assert_eq!(
        v.copy_to_slice(&mut short),
        Err(Error::ShapeMismatch {
            found: vec![6],
            expected: vec![5]
        })
    );
    assert_eq!(short, [0; 5]);
    let copy = v;
    #[allow(clippy::clone_on_copy)]
    let cloned = copy.clone();
    assert_eq!(cloned.to_vec().unwrap(), out);
    assert!(format!("{v:?}").starts_with("TensorView { shape: [2, 3], strides: [1, 2]"));
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

#[test]
fn view_mut_copy_from_slice_writes_strided_elements_in_row_major_order() {
    let built = Foreign::of(&[0i16; 6], &[2, 3])
        .with_strides(&[1, 2])
        .build();
    let counter = built.counter();
    let mut t = import(built.ptr).unwrap();
    {
        let mut v = t.view_mut::<i16>().unwrap();
        assert_eq!((v.shape(), v.ndim(), v.len()), (&[2i64, 3][..], 2, 6));
        assert!(!v.is_empty() && !v.is_row_major_contiguous());
        assert!(v.as_mut_slice().is_none());
        assert_eq!(v.as_mut_ptr().cast_const(), v.as_ptr());
        v.copy_from_slice(&[10, 11, 12, 13, 14, 15]).unwrap();
        assert_eq!(v.as_view().to_vec().unwrap(), [10, 11, 12, 13, 14, 15]);
        assert!(format!("{v:?}").starts_with("TensorViewMut { shape: [2, 3]"));
    }
    // Memory order: element (i, j) at i + 2 j.
    assert_eq!(t.view::<i16>().unwrap().get(&[1, 0]), Some(&13));
    assert_eq!(t.view::<i16>().unwrap().get(&[0, 1]), Some(&11));
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

/// `Error::ShapeMismatch` documents `found` as the tensor's shape and `expected` as the one
/// asked for, as `copy_to_slice` reports it. `copy_from_slice` reports them the other way round:
/// "the tensor has shape [5], expected [6]" for a 6-element tensor given 5 values.
#[test]
fn view_mut_copy_from_slice_reports_the_tensor_length_as_found() {
    let mut t = ManagedTensor::export(vec![0u8; 6]).unwrap();
    let mut v = t.view_mut::<u8>().unwrap();
    let err = v.copy_from_slice(&[1, 2, 3, 4, 5]).unwrap_err();
    assert_eq!(v.as_slice(), Some(&[0u8; 6][..]), "nothing was written");
    assert_eq!(
        err,
        Error::ShapeMismatch {
            found: vec![6],
            expected: vec![5]
        },
        "message: {err}"
    );
}

#[test]
fn empty_mutable_views_are_empty_slices() {
    let mut t = ManagedTensor::export(Vec::<f32>::new()).unwrap();
    let mut v = t.view_mut::<f32>().unwrap();
    assert!(v.is_empty());
    assert_eq!(v.as_mut_slice(), Some(&mut [][..]));
    v.copy_from_slice(&[]).unwrap();
    assert_eq!(
        v.copy_from_slice(&[1.0]).unwrap_err().py_kind(),
        PyErrorKind::BufferError
    );
}

#[test]
fn view_mut_checks_bool_bytes() {
    let built = Foreign::of(&[0u8, 1, 2, 1], &[4])
        .dtype(DataType::BOOL)
        .build();
    let counter = built.counter();
    let mut t = import(built.ptr).unwrap();
    let expected = Error::InvalidValue {
        dtype: DataType::BOOL,
        index: 2,
        byte: 2,
    };
    assert_eq!(t.view_mut::<bool>().unwrap_err(), expected);
    assert_eq!(t.view::<bool>().unwrap_err(), expected);
    // The bytes themselves can still be viewed.
    assert_eq!(
        t.view::<u8>().unwrap_err(),
        Error::DataTypeMismatch {
            found: DataType::BOOL,
            expected: DataType::U8
        }
    );
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

/// A user element with restricted bit patterns that is not `bool`: a two-byte value whose
/// high byte must be zero.
#[derive(Clone, Copy, PartialEq, Debug)]
#[repr(transparent)]
struct Small(u16);

// SAFETY: two bytes, no padding; `is_valid_bits` accepts exactly the patterns `Small` allows
// (every u16 is a valid `u16`, the restriction is this test's), and UINT16 describes it.
unsafe impl Element for Small {
    const DTYPE: DataType = DataType::U16;
    const ANY_BIT_PATTERN: bool = false;
    fn is_valid_bits(bytes: &[u8]) -> bool {
        u16::from_ne_bytes([bytes[0], bytes[1]]) < 256
    }
}

#[test]
fn a_custom_element_with_restricted_bits_is_checked_element_by_element() {
    let built = Foreign::of(&[1u16, 2, 3], &[3]).build();
    let counter = built.counter();
    let t = import(built.ptr).unwrap();
    assert_eq!(
        t.view::<Small>().unwrap().to_vec().unwrap(),
        [Small(1), Small(2), Small(3)]
    );
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);

    let built = Foreign::of(&[1u16, 0x0300, 3], &[3]).build();
    let counter = built.counter();
    let t = import(built.ptr).unwrap();
    let err = t.view::<Small>().unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidValue {
                dtype: DataType::U16,
                index: 1,
                ..
            }
        ),
        "{err:?}"
    );
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

// --- Dims, Buffer, describe_buffer ---------------------------------------------------------------

#[test]
fn dims_from_dims_refuses_values_and_lengths_the_type_cannot_hold() {
    assert_eq!(
        <Vec<usize> as Dims>::from_dims(&[2, -1]),
        Err(Error::DimOutOfRange {
            axis: 1,
            value: -1,
            target: "usize"
        })
    );
    assert_eq!(
        <[u32; 2] as Dims>::from_dims(&[1, 1 << 40]),
        Err(Error::DimOutOfRange {
            axis: 1,
            value: 1 << 40,
            target: "u32"
        })
    );
    assert_eq!(
        <[u32; 2] as Dims>::from_dims(&[1, 2, 3]),
        Err(Error::NdimMismatch {
            found: 3,
            expected: 2
        })
    );
    let boxed = <Box<[i32]> as Dims>::from_dims(&[4, -5]).unwrap();
    assert_eq!(&*boxed, &[4, -5]);
    assert_eq!(Dims::ndim(&boxed), 2);
    let mut out = [0i64; 2];
    boxed.write_dims(&mut out);
    assert_eq!(out, [4, -5]);
    // Values past i64 saturate when written (and the span check refuses them later).
    let mut out = [0i64; 1];
    [u64::MAX].write_dims(&mut out);
    assert_eq!(out, [i64::MAX]);
}

#[test]
fn buffers_copy_from_a_tensor_in_row_major_order() {
    let built = Foreign::of(&[0i32, 1, 2, 3, 4, 5], &[2, 3])
        .with_strides(&[1, 2])
        .build();
    let counter = built.counter();
    let t = import(built.ptr).unwrap();
    let want = [0, 2, 4, 1, 3, 5];
    assert_eq!(<Vec<i32> as Buffer>::copy_from_tensor(&t).unwrap(), want);
    assert_eq!(
        &*<Box<[i32]> as Buffer>::copy_from_tensor(&t).unwrap(),
        &want
    );
    assert_eq!(
        &*<Arc<[i32]> as Buffer>::copy_from_tensor(&t).unwrap(),
        &want
    );
    assert_eq!(
        <Vec<u8> as Buffer>::copy_from_tensor(&t).unwrap_err(),
        Error::DataTypeMismatch {
            found: DataType::I32,
            expected: DataType::U8
        }
    );
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

#[test]
fn describe_buffer_marks_read_only_buffers_and_arcs_give_no_vec() {
    let mut arc: Arc<[u16]> = Arc::from(vec![1u16, 2, 3, 4]);
    assert!(!Buffer::is_empty(&arc));
    let (mut shape, mut strides) = ([0i64; 2], [0i64; 2]);
    let desc = describe_buffer(
        &mut arc,
        &[2usize, 2],
        None::<&[usize; 2]>,
        0,
        &mut shape,
        &mut strides,
    );
    assert!(desc.flags.contains(Flags::READ_ONLY));
    assert_eq!((shape, strides), ([2, 2], [2, 1]));
    assert_eq!(
        desc.allocation,
        Some(arc.as_ptr().addr()..arc.as_ptr().addr() + 8)
    );
    let mut slot = VecSlot::<u16>::new(core::ptr::null(), 4);
    give_vec_of_buffer(&mut arc, &mut slot);
    assert!(slot.take().is_none());
    assert_eq!(Buffer::give_vec(&mut arc), None);
}

// --- messages and small impls ----------------------------------------------------------------------

#[test]
fn messages_of_errors_nothing_else_displays_name_their_values() {
    let cases = [
        (
            Error::NdimMismatch {
                found: 3,
                expected: 2,
            },
            "the tensor has 3 dimensions, expected 2",
        ),
        (
            Error::ShapeMismatch {
                found: vec![2, 3],
                expected: vec![3, 2],
            },
            "the tensor has shape [2, 3], expected [3, 2]",
        ),
        (
            Error::Runtime {
                runtime: "CUDA driver",
                message: "no device".into(),
            },
            "CUDA driver: no device",
        ),
    ];
    for (err, text) in cases {
        assert_eq!(err.to_string(), text);
        assert_eq!(err.py_kind(), PyErrorKind::BufferError);
    }
    let legacy = Error::LegacyReadOnly.to_string();
    assert!(
        legacy.contains("read-only") && legacy.contains("legacy"),
        "{legacy}"
    );
}

#[test]
fn flags_print_every_bit() {
    assert_eq!(Flags::empty().to_string(), "(none)");
    assert_eq!(format!("{:?}", Flags::empty()), "Flags((none))");
    let f = Flags::READ_ONLY | Flags::IS_COPIED;
    assert_eq!(f.to_string(), "READ_ONLY | IS_COPIED");
    assert_eq!(f & Flags::IS_COPIED, Flags::IS_COPIED);
    assert_eq!(Flags(1 << 9 | 1).to_string(), "READ_ONLY | 0x200");
    assert_eq!(Flags(1 << 9).to_string(), "0x200");
    assert_eq!(Device::default(), Device::CPU);
    assert_eq!(DataTypeCode(99).to_string(), "code(99)");
}

#[test]
fn debug_output_names_the_owner_kind() {
    let t = ManagedTensor::export_legacy(vec![1u8]).unwrap();
    let s = format!("{t:?}");
    assert!(
        s.starts_with("ManagedTensor(legacy)(CheckedTensor {"),
        "{s}"
    );
    assert!(s.contains("shape: [1]"), "{s}");
    let t = ManagedTensor::export(vec![1u8]).unwrap();
    assert!(format!("{t:?}").starts_with("ManagedTensor(CheckedTensor {"));
    assert_eq!(t.as_dl_tensor().ndim, 1);
    let built = Foreign::of(&[7u8], &[1]).build_legacy();
    let counter = built.counter();
    let t = import_legacy(built.ptr).unwrap();
    assert!(
        t.is_read_only(),
        "a foreign legacy tensor imports read-only"
    );
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}

/// `Error::InvalidValue`'s message is written for `bool` ("expected 0 or 1") and its `byte` is
/// the element's first byte. For a user `Element` with restricted bits (which the trait
/// documents) the message names a byte that is valid and a rule that is not the element's:
/// "element 1 holds byte 0x00, not a valid uint16 (expected 0 or 1)" for the value 0x0300.
#[test]
fn a_custom_element_refusal_does_not_claim_the_bool_rule() {
    let built = Foreign::of(&[1u16, 0x0300, 3], &[3]).build();
    let counter = built.counter();
    let t = import(built.ptr).unwrap();
    let err = t.view::<Small>().unwrap_err();
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
    let message = err.to_string();
    assert!(
        !message.contains("expected 0 or 1"),
        "a uint16 element is not a bool: {message}"
    );
}

// --- second pass: what the first pass still left ------------------------------------------------

#[test]
fn flags_set_operations() {
    let mut f = Flags::READ_ONLY | Flags::IS_COPIED;
    assert!(!f.is_empty());
    f &= !Flags::READ_ONLY;
    assert_eq!(f, Flags::IS_COPIED);
    assert_eq!((!Flags::empty()).unknown_bits(), !Flags::ALL_KNOWN.0);
    f &= Flags::READ_ONLY;
    assert!(f.is_empty());
}

#[test]
fn give_buffer_vec_leaves_a_slot_of_another_type_alone() {
    let mut v = vec![1u8, 2, 3];
    let mut wrong = VecSlot::<u16>::new(core::ptr::null(), 3);
    give_vec_of_buffer(&mut v, &mut wrong);
    assert!(wrong.take().is_none());
    assert_eq!(v, [1, 2, 3]);
    let mut right = VecSlot::<u8>::new(v.as_ptr(), 3);
    give_vec_of_buffer(&mut v, &mut right);
    assert_eq!(right.take(), Some(vec![1, 2, 3]));
}

/// A producer that sets `GIVES_VEC` but keeps the default `give_vec`, which gives nothing.
struct KeepsVec {
    data: Vec<u8>,
    _drops: DropCounter,
}

// SAFETY: its own heap Vec, whole, row-major, writable; valid until dropped.
unsafe impl Export for KeepsVec {
    const GIVES_VEC: bool = true;
    fn ndim(&self) -> usize {
        1
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape[0] = self.data.len() as i64;
        strides[0] = 1;
        ExportDesc::host(self.data.as_mut_ptr())
    }
}

#[test]
fn into_vec_of_a_producer_that_gives_nothing_returns_the_tensor() {
    let drops = Arc::new(AtomicUsize::new(0));
    let t = ManagedTensor::export(KeepsVec {
        data: vec![4, 5],
        _drops: DropCounter::new(&drops),
    })
    .unwrap();
    let t = t.into_vec::<u8>().unwrap_err();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    assert_eq!(t.to_vec::<u8>().unwrap(), [4, 5]);
    drop(t);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

/// A producer whose description reaches past the allocation it names.
struct Overreaching {
    data: Vec<u8>,
    _drops: DropCounter,
}

// SAFETY: names its allocation, so the export checks the reach and refuses it before anyone
// reads the memory.
unsafe impl Export for Overreaching {
    fn ndim(&self) -> usize {
        1
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape[0] = self.data.len() as i64 + 1;
        strides[0] = 1;
        let start = self.data.as_ptr().addr();
        ExportDesc {
            allocation: Some(start..start + self.data.len()),
            ..ExportDesc::host(self.data.as_mut_ptr())
        }
    }
}

#[test]
fn every_export_refuses_a_reach_past_the_named_allocation_and_gives_the_producer_back() {
    let drops = Arc::new(AtomicUsize::new(0));
    let p = || Overreaching {
        data: vec![0; 4],
        _drops: DropCounter::new(&drops),
    };
    let is_outside = |e: Error| {
        matches!(e, Error::SpanOutsideAllocation { start, end, alloc_start, alloc_end }
            if end - start == 5 && alloc_end - alloc_start == 4 && start == alloc_start)
    };
    for (i, export) in [
        |p| ManagedTensor::export(p).map(drop),
        |p| ManagedTensor::export_legacy(p).map(drop),
        |p| ManagedTensor::export_raw(p).map(drop),
        |p| ManagedTensor::export_raw_legacy(p).map(drop),
    ]
    .into_iter()
    .enumerate()
    {
        let refused: dlpack_core::Refused<Overreaching> = export(p()).unwrap_err();
        assert_eq!(drops.load(Ordering::SeqCst), i, "given back, not dropped");
        assert_eq!(refused.value.data.len(), 4);
        assert!(is_outside(Error::from(refused)));
        assert_eq!(drops.load(Ordering::SeqCst), i + 1);
    }
}

#[test]
fn a_tensor_with_null_strides_before_1_2_can_be_written() {
    let built = Foreign::of(&[1u8, 2, 3, 4, 5, 6], &[2, 3])
        .version(1, 1)
        .strides(common::Array::Null)
        .build();
    let counter = built.counter();
    let mut t = import(built.ptr).unwrap();
    assert_eq!(t.strides(), &[3, 1]);
    assert_eq!(t.check_writable(), Ok(()));
    t.view_mut::<u8>()
        .unwrap()
        .copy_from_slice(&[6, 5, 4, 3, 2, 1])
        .unwrap();
    assert_eq!(t.to_vec::<u8>().unwrap(), [6, 5, 4, 3, 2, 1]);
    drop(t);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
}
