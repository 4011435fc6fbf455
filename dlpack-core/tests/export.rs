//! Export, re-import and reclaim: what this crate promises about its own tensors.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::{
    DataType, Device, Element, Error, Export, ExportDesc, Flags, ManagedTensor, Version,
};
use dlpack_testing::DropCounter;

/// A producer that counts its drops, to prove the deleter drops it exactly once.
struct Counted {
    data: Vec<i32>,
    _drops: DropCounter,
}

// SAFETY: describes the Vec's own initialised, writable buffer, which stays in place while self
// lives.
unsafe impl Export for Counted {
    fn ndim(&self) -> usize {
        2
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&[2, (self.data.len() / 2) as i64]);
        strides.copy_from_slice(&[(self.data.len() / 2) as i64, 1]);
        ExportDesc::host(self.data.as_mut_ptr())
    }
}

fn counted(n: i32) -> (Counted, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    (
        Counted {
            data: (0..n).collect(),
            _drops: DropCounter::new(&drops),
        },
        drops,
    )
}

#[test]
fn vec_export_is_zero_copy_and_describes_a_1d_cpu_tensor() {
    let v = vec![1.5f64, 2.5, 3.5];
    let ptr = v.as_ptr();
    let t = ManagedTensor::export(v).unwrap();
    assert_eq!(t.device(), Device::CPU);
    assert_eq!(t.dtype(), DataType::F64);
    assert_eq!(t.shape(), &[3]);
    assert_eq!(t.strides(), &[1]);
    assert_eq!(t.byte_offset(), 0);
    assert_eq!(t.version(), Version::CURRENT);
    assert_eq!(t.flags(), Flags::empty());
    assert!(!t.is_legacy());
    let view = t.view::<f64>().unwrap();
    assert_eq!(view.as_ptr(), ptr);
    assert_eq!(view.as_slice(), Some(&[1.5, 2.5, 3.5][..]));
}

#[test]
fn the_shape_and_strides_live_in_the_same_block_as_the_header() {
    let t = ManagedTensor::export(vec![0u8; 7]).unwrap();
    let raw = t.into_raw().unwrap();
    // SAFETY: `raw` is a live tensor we own; only addresses are compared.
    let (header, shape, strides) = unsafe {
        (
            raw.addr(),
            (*raw).dl_tensor.shape.addr(),
            (*raw).dl_tensor.strides.addr(),
        )
    };
    let block_end = header + 4096;
    assert!(
        shape > header && shape < block_end,
        "shape array is inside the export block"
    );
    assert_eq!(strides, shape + 8);
    // SAFETY: we own `raw` and give it back.
    drop(unsafe { ManagedTensor::from_raw(raw) }.unwrap());
}

#[test]
fn arc_exports_read_only_and_refuses_mutable_views() {
    let shared: Arc<[u16]> = Arc::from(vec![1u16, 2, 3]);
    let keep = shared.clone();
    let mut t = ManagedTensor::export(shared).unwrap();
    assert!(t.is_read_only());
    assert_eq!(t.view::<u16>().unwrap().as_ptr(), keep.as_ptr());
    assert_eq!(t.view_mut::<u16>().unwrap_err(), Error::ReadOnly);
    drop(t);
    assert_eq!(Arc::strong_count(&keep), 1, "the export's Arc was dropped");
}

#[test]
fn boxed_slices_export_writable() {
    let b: Box<[i8]> = vec![1i8, -2, 3].into_boxed_slice();
    let mut t = ManagedTensor::export(b).unwrap();
    t.view_mut::<i8>().unwrap().as_mut_slice().unwrap()[1] = 42;
    let back: Box<[i8]> = t.reclaim().unwrap();
    assert_eq!(&*back, &[1, 42, 3]);
}

#[test]
fn the_deleter_drops_the_producer_exactly_once() {
    let (p, drops) = counted(6);
    let t = ManagedTensor::export(p).unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    let raw = t.into_raw().unwrap();
    // SAFETY: a consumer calling the deleter of the tensor it owns, once.
    unsafe { ((*raw).deleter.unwrap())(raw) };
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn reclaim_gives_back_the_same_buffer_and_skips_the_drop() {
    let (p, drops) = counted(4);
    let ptr = p.data.as_ptr();
    let t = ManagedTensor::export(p).unwrap();
    let raw = t.into_raw().unwrap();
    // SAFETY: we own `raw`.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let t = t
        .reclaim::<Vec<i32>>()
        .expect_err("a Counted is not a Vec<i32>");
    let back: Counted = t
        .reclaim()
        .map_err(|_| ())
        .expect("exported from a Counted");
    assert_eq!(back.data.as_ptr(), ptr);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "reclaim moves the producer out without dropping it"
    );
    drop(back);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn views_see_writes_made_through_mutable_views() {
    let (p, _drops) = counted(6);
    let mut t = ManagedTensor::export(p).unwrap();
    {
        let mut v = t.view_mut::<i32>().unwrap();
        *v.get_mut(&[1, 2]).unwrap() = 99;
        assert_eq!(v.get_mut(&[2, 0]), None);
        assert_eq!(v.get_mut(&[0]), None);
    }
    let v = t.view::<i32>().unwrap();
    assert_eq!(v.to_vec().unwrap(), vec![0, 1, 2, 3, 4, 99]);
    assert_eq!(
        v.iter().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4, 99]
    );
}

#[test]
fn legacy_export_round_trips_and_stays_writable() {
    let v = vec![1u32, 2, 3, 4];
    let ptr = v.as_ptr();
    let t = ManagedTensor::export_legacy(v).unwrap();
    assert!(t.is_legacy());
    let raw = t.into_raw_legacy().unwrap();
    // SAFETY: we own `raw`.
    let mut t = unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap();
    assert!(
        !t.is_read_only(),
        "our own legacy export is known to be writable"
    );
    t.view_mut::<u32>().unwrap().as_mut_slice().unwrap()[0] = 7;
    let back: Vec<u32> = t.reclaim().unwrap();
    assert_eq!(back.as_ptr(), ptr);
    assert_eq!(back, [7, 2, 3, 4]);
}

#[test]
fn a_read_only_tensor_cannot_be_exported_as_legacy_and_comes_back() {
    let shared: Arc<[f32]> = Arc::from(vec![1.0f32]);
    let keep = shared.clone();
    let refused = ManagedTensor::export_legacy(shared).unwrap_err();
    assert_eq!(refused.error, Error::LegacyReadOnly);
    assert!(Arc::ptr_eq(&refused.value, &keep));
    drop(refused);
    let t = ManagedTensor::export(keep.clone()).unwrap();
    let refused = t.into_raw_legacy().unwrap_err();
    assert_eq!(refused.error, Error::LegacyReadOnly);
    assert_eq!(refused.value.to_vec::<f32>().unwrap(), [1.0]);
    drop(refused);
    assert_eq!(
        Arc::strong_count(&keep),
        1,
        "nothing leaked on the error paths"
    );
}

#[test]
fn raw_exports_hand_the_same_block_to_c() {
    let v = vec![1.5f64, 2.5, 3.5];
    let ptr = v.as_ptr();
    let raw = ManagedTensor::export_raw(v).unwrap();
    // SAFETY: a fresh export, owned here, taken once.
    let t = unsafe { ManagedTensor::from_raw(raw.as_ptr()) }.unwrap();
    assert_eq!(
        (t.shape(), t.view::<f64>().unwrap().as_ptr()),
        (&[3][..], ptr)
    );
    let back: Vec<f64> = t.reclaim().unwrap();
    assert_eq!(back.as_ptr(), ptr);

    let raw = ManagedTensor::export_raw_legacy(vec![7u8; 4]).unwrap();
    // SAFETY: as above.
    let t = unsafe { ManagedTensor::from_raw_legacy(raw.as_ptr()) }.unwrap();
    assert_eq!(t.to_vec::<u8>().unwrap(), [7; 4]);

    let shared: Arc<[f32]> = Arc::from(vec![1.0f32]);
    let keep = shared.clone();
    let refused = ManagedTensor::export_raw_legacy(shared).unwrap_err();
    assert_eq!(refused.error, Error::LegacyReadOnly);
    assert!(
        Arc::ptr_eq(&refused.value, &keep),
        "the refused producer comes back"
    );
    drop(refused);
    assert_eq!(
        Arc::strong_count(&keep),
        1,
        "the refused producer was dropped by its owner"
    );
}

#[test]
fn versioned_and_legacy_wrap_each_other_without_copying() {
    let v = vec![5i64, 6];
    let ptr = v.as_ptr();
    let legacy = ManagedTensor::export_legacy(v).unwrap();
    let raw = legacy.into_raw().unwrap();
    // SAFETY: we own `raw`.
    let versioned = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    assert!(!versioned.is_legacy());
    assert_eq!(versioned.view::<i64>().unwrap().as_ptr(), ptr);
    let raw = versioned.into_raw_legacy().unwrap();
    // SAFETY: we own `raw`.
    let again = unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap();
    assert_eq!(again.to_vec::<i64>().unwrap(), [5, 6]);
    // Wrapped twice, so the Vec is no longer directly reclaimable: the tensor comes back intact.
    let again = again.reclaim::<Vec<i64>>().unwrap_err();
    assert_eq!(again.len(), 2);
}

#[test]
fn every_builtin_element_type_round_trips() {
    fn check<T: Element + PartialEq + core::fmt::Debug>(values: Vec<T>) {
        let expected = values.clone();
        let t = ManagedTensor::export(values).unwrap();
        assert_eq!(t.dtype(), T::DTYPE);
        assert_eq!(t.to_vec::<T>().unwrap(), expected);
        let back: Vec<T> = t.reclaim().unwrap();
        assert_eq!(back, expected);
    }
    check(vec![true, false, true]);
    check(vec![i8::MIN, 0, i8::MAX]);
    check(vec![i16::MIN, i16::MAX]);
    check(vec![i32::MIN, i32::MAX]);
    check(vec![i64::MIN, i64::MAX]);
    check(vec![u8::MAX, 0]);
    check(vec![u16::MAX]);
    check(vec![u32::MAX]);
    check(vec![u64::MAX]);
    check(vec![1.0f32, -0.0]);
    check(vec![f64::MAX, f64::MIN_POSITIVE]);
    #[cfg(feature = "half")]
    {
        check(vec![half::f16::from_f32(1.5), half::f16::MAX]);
        check(vec![half::bf16::from_f32(-2.0)]);
    }
    #[cfg(feature = "num-complex")]
    {
        check(vec![num_complex::Complex::new(1.0f32, -1.0)]);
        check(vec![num_complex::Complex::new(1.0f64, 2.0)]);
    }
    #[cfg(feature = "float8")]
    {
        check(vec![float8::F8E4M3::from_f32(0.5)]);
        check(vec![float8::F8E5M2::from_f32(-4.0)]);
    }
}

#[test]
fn an_empty_vec_exports_and_views_as_empty() {
    let t = ManagedTensor::export(Vec::<f32>::new()).unwrap();
    assert_eq!(t.shape(), &[0]);
    assert!(t.is_empty());
    let v = t.view::<f32>().unwrap();
    assert_eq!(v.as_slice(), Some(&[][..]));
    assert_eq!(v.iter().count(), 0);
    assert!(v.to_vec().unwrap().is_empty());
}

#[test]
fn a_consumer_that_never_takes_ownership_frees_nothing_twice() {
    // Like a capsule nobody consumed: the raw tensor goes out, the consumer only looks at it,
    // and the producer side takes it back and deletes it once.
    let (p, drops) = counted(2);
    let raw = ManagedTensor::export(p).unwrap().into_raw().unwrap();
    // SAFETY: looking at the fields of a live tensor is not taking ownership.
    let version = unsafe { (*raw).version };
    assert_eq!(version, Version::CURRENT);
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    // SAFETY: nobody took ownership, so the producer side still owns `raw`.
    drop(unsafe { ManagedTensor::from_raw(raw) }.unwrap());
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn tensors_and_their_deleters_cross_threads() {
    let (p, drops) = counted(4);
    let t = ManagedTensor::export(p).unwrap();
    let sum = std::thread::scope(|s| {
        s.spawn(|| t.view::<i32>().unwrap().iter().sum::<i32>())
            .join()
            .unwrap()
    });
    assert_eq!(sum, 6);
    std::thread::spawn(move || drop(t)).join().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn a_panic_while_a_view_is_alive_still_deletes_once() {
    let (p, drops) = counted(2);
    let result = std::panic::catch_unwind(move || {
        let t = ManagedTensor::export(p).unwrap();
        let v = t.view::<i32>().unwrap();
        if v.len() == 2 {
            panic!("consumer failed while viewing");
        }
    });
    assert!(result.is_err());
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn inline_producers_are_described_at_their_final_address() {
    /// A producer that keeps its elements inline: it moves into the block before `describe`.
    struct Inline([f32; 4]);
    // SAFETY: the array is inside `self`, which does not move between `describe` and drop.
    unsafe impl Export for Inline {
        fn ndim(&self) -> usize {
            1
        }
        fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
            shape[0] = 4;
            strides[0] = 1;
            ExportDesc::host(self.0.as_mut_ptr())
        }
    }
    let t = ManagedTensor::export(Inline([1.0, 2.0, 3.0, 4.0])).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
    let back: Inline = t.reclaim().map_err(|_| ()).unwrap();
    assert_eq!(back.0, [1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn a_producer_with_too_many_dimensions_is_refused_and_dropped() {
    struct Deep {
        _drops: DropCounter,
    }
    // SAFETY: never described: the export refuses it first.
    unsafe impl Export for Deep {
        fn ndim(&self) -> usize {
            dlpack_core::MAX_NDIM + 1
        }
        fn describe(&mut self, _: &mut [i64], _: &mut [i64]) -> ExportDesc {
            unreachable!("refused before describe")
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let err = ManagedTensor::export(Deep {
        _drops: DropCounter::new(&drops),
    })
    .unwrap_err()
    .error;
    assert!(matches!(err, Error::BadNdim { ndim: 1025 }), "{err}");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

/// A struct-shaped producer built from a buffer and user-supplied layout fields.
struct Strided {
    data: Vec<i32>,
    shape: Vec<usize>,
    strides: Vec<isize>,
    offset: u64,
    _drops: DropCounter,
}

// SAFETY: `describe_buffer` describes memory inside `data` only; export checks the layout
// against the buffer's allocation. `ndim` is the shape's length, which nothing changes.
unsafe impl Export for Strided {
    fn ndim(&self) -> usize {
        self.shape.len()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        dlpack_core::__private::describe_buffer(
            &mut self.data,
            &self.shape,
            Some(&self.strides),
            self.offset,
            shape,
            strides,
        )
    }
}

fn strided(shape: Vec<usize>, strides: Vec<isize>, offset: u64) -> (Strided, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    let s = Strided {
        data: (0..12).collect(),
        shape,
        strides,
        offset,
        _drops: DropCounter::new(&drops),
    };
    (s, drops)
}

#[test]
fn a_buffer_layout_inside_its_allocation_exports_with_its_strides() {
    // A transposed 3x4 view of a 4x3 row-major buffer, and one with a negative stride from an
    // offset base.
    let (s, _) = strided(vec![3, 4], vec![1, 3], 0);
    let t = ManagedTensor::export(s).unwrap();
    assert_eq!(t.strides(), &[1, 3]);
    assert_eq!(t.to_vec::<i32>().unwrap()[..4], [0, 3, 6, 9]);

    let (s, _) = strided(vec![4], vec![-3], 4 * 9);
    let t = ManagedTensor::export(s).unwrap();
    assert_eq!(t.to_vec::<i32>().unwrap(), [9, 6, 3, 0]);
}

#[test]
fn a_buffer_layout_reaching_outside_its_allocation_is_refused_and_dropped() {
    let cases = [
        (vec![13], vec![1], 0),         // one element too many
        (vec![4, 4], vec![3, 1], 0),    // the last row runs past the end
        (vec![12], vec![1], 4),         // the offset shifts the last element out
        (vec![2], vec![-1], 0),         // a negative stride reaches below the start
        (vec![usize::MAX], vec![1], 0), // a size past i64::MAX
    ];
    for ((shape, stride, offset), raw) in cases
        .iter()
        .cloned()
        .flat_map(|case| [(case.clone(), false), (case, true)])
    {
        let (s, drops) = strided(shape.clone(), stride.clone(), offset);
        // `export_raw` skips validation only for producers that name no allocation.
        let err = if raw {
            ManagedTensor::export_raw(s).unwrap_err().error
        } else {
            ManagedTensor::export(s).unwrap_err().error
        };
        assert!(
            matches!(
                err,
                Error::SpanOutsideAllocation { .. } | Error::Overflow { .. }
            ),
            "{shape:?} {stride:?} +{offset}: {err}"
        );
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "{shape:?}: dropped exactly once"
        );
    }
}

#[test]
fn dims_convert_imported_values_or_say_why_not() {
    use dlpack_core::Dims;
    assert_eq!(Vec::<usize>::from_dims(&[2, 3]).unwrap(), [2, 3]);
    assert_eq!(<[isize; 2]>::from_dims(&[-1, 3]).unwrap(), [-1, 3]);
    let err = Vec::<usize>::from_dims(&[2, -3]).unwrap_err();
    assert_eq!(err.to_string(), "entry 1 is -3, which does not fit usize");
    let err = <[usize; 3]>::from_dims(&[2, 3]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NdimMismatch {
                found: 2,
                expected: 3
            }
        ),
        "{err}"
    );
}

#[test]
fn into_vec_takes_the_memory_of_any_vec_owning_producer_without_knowing_its_type() {
    let data: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let address = data.as_ptr();
    let t = ManagedTensor::export(data).unwrap();
    let t = t.into_vec::<u32>().unwrap_err(); // another element type: untouched
    let raw = t.into_raw_legacy().unwrap(); // a trip through the legacy struct
    // SAFETY: `raw` is a live tensor we own.
    let t = unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap();
    let v = t.into_vec::<f32>().unwrap();
    assert_eq!(v.as_ptr(), address);
    assert_eq!(v, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);

    // A producer without a Vec to give (Arc: shared), or a layout that is not the whole Vec in
    // row-major order, keeps its tensor.
    let t = ManagedTensor::export(Arc::<[i32]>::from(vec![1, 2])).unwrap();
    assert_eq!(t.into_vec::<i32>().unwrap_err().len(), 2);
    let (s, drops) = strided(vec![3, 4], vec![1, 3], 0);
    let t = ManagedTensor::export(s).unwrap();
    let t = t.into_vec::<i32>().unwrap_err();
    drop(t);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

/// A producer whose fields can disagree, refused by `check` before it moves.
struct Checked {
    inner: Counted,
    ok: bool,
}

// SAFETY: delegates to `Counted`, whose description is valid.
unsafe impl Export for Checked {
    fn check(&self) -> Result<(), Error> {
        if self.ok {
            Ok(())
        } else {
            Err(Error::NdimMismatch {
                found: 1,
                expected: 2,
            })
        }
    }
    fn ndim(&self) -> usize {
        self.inner.ndim()
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        self.inner.describe(shape, strides)
    }
}

#[test]
fn check_refuses_a_producer_before_it_moves_and_drops_it_once() {
    let (inner, drops) = counted(4);
    let err = ManagedTensor::export(Checked { inner, ok: false })
        .unwrap_err()
        .error;
    assert!(
        matches!(
            err,
            Error::NdimMismatch {
                found: 1,
                expected: 2
            }
        ),
        "{err}"
    );
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let (inner, drops) = counted(4);
    let t = ManagedTensor::export(Checked { inner, ok: true }).unwrap();
    assert_eq!(t.shape(), &[2, 2]);
    drop(t);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn an_empty_tensor_is_row_major_whatever_its_strides() {
    let t = ManagedTensor::export(Vec::<f32>::new()).unwrap();
    assert!(t.is_row_major_contiguous());
    let (s, _) = strided(vec![2, 0, 4], vec![4, 4, 1], 0);
    assert!(ManagedTensor::export(s).unwrap().is_row_major_contiguous());
}

#[test]
fn element_offsets_walk_row_major_order_for_any_strides() {
    // Column-major storage seen as 2 x 3: strides (1, 2).
    let (s, _) = strided(vec![2, 3], vec![1, 2], 0);
    let t = ManagedTensor::export(s).unwrap();
    assert_eq!(t.element_offsets().collect::<Vec<_>>(), [0, 2, 4, 1, 3, 5]);
    // Both axes reversed from the last element of a 2 x 2 block.
    let (s, _) = strided(vec![2, 2], vec![-2, -1], 3 * 4);
    let t = ManagedTensor::export(s).unwrap();
    assert_eq!(t.element_offsets().collect::<Vec<_>>(), [0, -1, -2, -3]);
    // A 0-d tensor has one element, at offset 0.
    let (s, _) = strided(vec![], vec![], 0);
    let t = ManagedTensor::export(s).unwrap();
    assert_eq!(t.element_offsets().collect::<Vec<_>>(), [0]);
}
