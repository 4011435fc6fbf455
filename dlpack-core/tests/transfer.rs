//! `ManagedTensor::into_vec_with`: every `CopyMode` against every way a tensor can reach it,
//! and the tensor given back, untouched, with every refusal.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::{CopyMode, CopyReason, DataType, Error, ExportDesc, ManagedTensor, Transfer};
use dlpack_testing::DropCounter;

/// A column-major 2 x 3 view of six `u32`s: not a layout a `Vec` can own.
struct ColumnMajor(Vec<u32>);

// SAFETY: the description covers the Vec's six elements, which the producer owns and never
// moves; the shape and strides are those `describe` writes.
unsafe impl dlpack_core::Export for ColumnMajor {
    fn ndim(&self) -> usize {
        2
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&[2, 3]);
        strides.copy_from_slice(&[1, 2]);
        ExportDesc::host(self.0.as_mut_ptr())
    }
}

#[test]
fn a_vec_moves_out_under_every_mode_but_always() {
    for mode in [CopyMode::IfNeeded, CopyMode::Never] {
        let v = vec![1i64, 2, 3];
        let address = v.as_ptr();
        let (back, transfer) = ManagedTensor::export(v)
            .unwrap()
            .into_vec_with::<i64>(mode)
            .unwrap();
        assert_eq!((back.as_ptr(), transfer), (address, Transfer::Moved));
    }
    let v = vec![1i64, 2, 3];
    let address = v.as_ptr();
    let (copy, transfer) = ManagedTensor::export(v)
        .unwrap()
        .into_vec_with::<i64>(CopyMode::Always)
        .unwrap();
    assert_ne!(copy.as_ptr(), address);
    assert_eq!(
        (copy, transfer),
        (vec![1, 2, 3], Transfer::Copied(CopyReason::Requested))
    );
}

#[test]
fn a_strided_tensor_is_copied_in_row_major_order_or_refused_with_the_layout_reason() {
    let tensor = ManagedTensor::export(ColumnMajor(vec![0, 1, 2, 3, 4, 5])).unwrap();
    let refused = tensor.into_vec_with::<u32>(CopyMode::Never).unwrap_err();
    assert_eq!(
        refused.error,
        Error::CopyRefused {
            reason: CopyReason::Layout
        }
    );
    assert_eq!(refused.value.shape(), [2, 3]);
    let (v, transfer) = refused
        .value
        .into_vec_with::<u32>(CopyMode::IfNeeded)
        .unwrap();
    assert_eq!(transfer, Transfer::Copied(CopyReason::Layout));
    assert_eq!(v, [0, 2, 4, 1, 3, 5]);
}

#[test]
fn a_dtype_mismatch_is_reported_before_the_copy_mode_and_gives_the_tensor_back() {
    let drops = Arc::new(AtomicUsize::new(0));
    let producer = Counted(
        ColumnMajor(vec![0, 1, 2, 3, 4, 5]),
        DropCounter::new(&drops),
    );
    let mut tensor = ManagedTensor::export(producer).unwrap();
    for mode in [CopyMode::Never, CopyMode::IfNeeded, CopyMode::Always] {
        let refused = tensor.into_vec_with::<f32>(mode).unwrap_err();
        assert_eq!(
            refused.error,
            Error::DataTypeMismatch {
                found: DataType::U32,
                expected: DataType::F32
            }
        );
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "the refused tensor is alive"
        );
        tensor = refused.value;
    }
    let (v, _) = tensor.into_vec_with::<u32>(CopyMode::Always).unwrap();
    assert_eq!(v, [0, 2, 4, 1, 3, 5]);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the copied-from tensor was deleted"
    );
}

/// A producer that counts its drop.
struct Counted(ColumnMajor, #[allow(dead_code)] DropCounter);

// SAFETY: `describe` is `ColumnMajor`'s, whose memory this producer owns.
unsafe impl dlpack_core::Export for Counted {
    fn ndim(&self) -> usize {
        2
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        self.0.describe(shape, strides)
    }
}
