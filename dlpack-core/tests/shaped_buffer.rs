//! `ShapedBuffer`, the safe way to export a struct made of a buffer and a layout: whatever its
//! safe methods say, the export either describes memory inside the buffer or refuses, giving the
//! value back.

use std::cell::Cell;

use dlpack_core::{Error, ManagedTensor, ShapedBuffer};

/// A producer whose every answer is chosen by the test.
struct Shaped {
    data: Vec<u32>,
    spare: Vec<u32>,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    /// `ndim` answers differently on each call, starting here.
    ndim_calls: Cell<usize>,
    /// `buffer` swaps `data` and `spare` on each call.
    swap: bool,
}

impl Shaped {
    fn new(data: Vec<u32>, shape: &[i64]) -> Self {
        Shaped {
            data,
            spare: vec![7; 3],
            shape: shape.to_vec(),
            strides: None,
            byte_offset: 0,
            ndim_calls: Cell::new(0),
            swap: false,
        }
    }
}

impl ShapedBuffer for Shaped {
    type Buffer = Vec<u32>;
    fn buffer(&mut self) -> &mut Vec<u32> {
        if self.swap {
            std::mem::swap(&mut self.data, &mut self.spare);
        }
        &mut self.data
    }
    fn ndim(&self) -> usize {
        let calls = self.ndim_calls.get();
        self.ndim_calls.set(calls + 1);
        self.shape.len() + calls
    }
    fn shape(&self, shape: &mut [i64]) {
        for (out, &d) in shape.iter_mut().zip(&self.shape) {
            *out = d;
        }
    }
    fn strides(&self, shape: &[i64], strides: &mut [i64]) {
        match &self.strides {
            Some(s) => strides.iter_mut().zip(s).for_each(|(out, &v)| *out = v),
            None => {
                let mut step = 1;
                for (out, &d) in strides.iter_mut().zip(shape).rev() {
                    *out = step;
                    step *= d.max(1);
                }
            }
        }
    }
    fn byte_offset(&self) -> u64 {
        self.byte_offset
    }
}

#[test]
fn a_layout_inside_the_buffer_exports_without_a_copy_and_reclaims_whole() {
    let mut p = Shaped::new((0..12).collect(), &[3, 2]);
    p.strides = Some(vec![2, 6]);
    p.byte_offset = 4;
    let first = p.data.as_ptr();
    let t = ManagedTensor::export(p).unwrap();
    assert_eq!((t.shape(), t.strides()), (&[3, 2][..], &[2, 6][..]));
    assert_eq!(t.to_vec::<u32>().unwrap(), [1, 7, 3, 9, 5, 11]);
    let back: Shaped = t
        .reclaim()
        .unwrap_or_else(|_| panic!("exported from a Shaped"));
    assert_eq!(back.data.as_ptr(), first);
}

/// Shape, strides and byte offset.
type Case = (&'static [i64], Option<Vec<i64>>, u64);

#[test]
fn every_layout_that_leaves_the_buffer_is_refused_and_the_value_comes_back() {
    let cases: [Case; 5] = [
        (&[4, 4], None, 0),                    // 16 elements in 12
        (&[12], None, 4),                      // one past the end through the offset
        (&[2], Some(vec![-1]), 0),             // one before the start
        (&[2, 2], Some(vec![i64::MAX, 1]), 0), // a reach that overflows
        (&[1], None, 48),                      // starts past the end
    ];
    for (shape, strides, byte_offset) in cases {
        let mut p = Shaped::new((0..12).collect(), shape);
        p.strides = strides.clone();
        p.byte_offset = byte_offset;
        let refused = ManagedTensor::export(p).unwrap_err();
        assert!(
            matches!(
                refused.error,
                Error::SpanOutsideAllocation { .. } | Error::Overflow { .. }
            ),
            "{shape:?} {strides:?} +{byte_offset}: {:?}",
            refused.error
        );
        assert_eq!(refused.value.data, (0..12).collect::<Vec<_>>());
    }
}

#[test]
fn an_ndim_that_changes_between_calls_is_asked_once() {
    let p = Shaped::new((0..6).collect(), &[2, 3]);
    let t = ManagedTensor::export(p).unwrap();
    assert_eq!(t.shape(), [2, 3]);
    assert_eq!(t.to_vec::<u32>().unwrap(), [0, 1, 2, 3, 4, 5]);
}

#[test]
fn a_buffer_method_that_answers_differently_each_time_cannot_free_what_a_tensor_reads() {
    // `buffer` swaps in the 3-element spare at export: the tensor describes the spare, and
    // into_vec never calls `buffer` again (which would swap the described memory out).
    let mut p = Shaped::new((0..6).collect(), &[3]);
    p.swap = true;
    let t = ManagedTensor::export(p).unwrap();
    let t = t.into_vec::<u32>().unwrap_err();
    assert_eq!(t.to_vec::<u32>().unwrap(), [7, 7, 7]);
    // Six elements do not fit the spare: refused, the value back.
    let mut p = Shaped::new((0..6).collect(), &[6]);
    p.swap = true;
    let refused = ManagedTensor::export(p).unwrap_err();
    assert!(matches!(refused.error, Error::SpanOutsideAllocation { .. }));
}

#[test]
fn a_shaped_buffer_is_copied_not_handed_over_by_into_vec() {
    let t = ManagedTensor::export(Shaped::new((0..6).collect(), &[2, 3])).unwrap();
    let t = t.into_vec::<u32>().unwrap_err();
    assert_eq!(t.to_vec::<u32>().unwrap(), [0, 1, 2, 3, 4, 5]);
}

#[test]
fn a_bare_vec_still_hands_itself_over() {
    let v = vec![1u8, 2, 3];
    let first = v.as_ptr();
    let back = ManagedTensor::export(v).unwrap().into_vec::<u8>().unwrap();
    assert_eq!(back.as_ptr(), first);
}
