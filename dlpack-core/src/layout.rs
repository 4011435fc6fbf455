//! Shape and stride arithmetic, in elements: how many elements a layout has, how far it reaches,
//! whether it is compact or lets two indices share an element, and the order in which its
//! indices are walked. Nothing here reads tensor memory or knows about dtypes and bytes: the
//! callers turn element offsets into addresses.
//!
//! - Counting and reach: [`element_count`], [`count_and_extent`].
//! - Strides: [`fill_row_major_strides`], [`row_major_strides`], [`is_row_major`],
//!   [`strides_are_disjoint`].
//! - Indices: [`offset_of`] (one index to its offset), [`row_major_position`] (coordinates to
//!   their row-major position), and [`Walk`], the one odometer, which walks every index in
//!   row-major order over the axes [`merge_axes`] leaves ([`Offsets`] is its public face).

use core::fmt;
use core::marker::PhantomData;

/// The largest `ndim` an imported tensor may have. NumPy allows 64 dimensions, PyTorch 25;
/// this bound keeps a corrupt `ndim` from making the importer read far past a shape array.
pub const MAX_NDIM: usize = 1024;

/// The bytes a validated tensor can reach.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Span {
    /// Address of the lowest reachable byte.
    pub(crate) start: usize,
    /// One past the highest reachable byte (`start` for a tensor without elements).
    pub(crate) end: usize,
}

/// The element offsets, from the first element, of the lowest and the highest element a layout
/// with elements reaches: the sums of its negative and of its positive `(size - 1) * stride`
/// terms.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Extent {
    /// The sum of the negative terms (at most 0).
    pub(crate) lo: i64,
    /// The sum of the positive terms (at least 0).
    pub(crate) hi: i64,
}

/// Where [`count_and_extent`] stopped.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Overflow {
    /// A size is negative, or the product of the sizes exceeds `usize`.
    Count,
    /// `(shape[axis] - 1) * strides[axis]` exceeds `i64`, for the first such axis
    /// ([`overflowing_term`] names it).
    Term,
    /// A sum of the terms exceeds `i64`.
    Sum,
}

/// The number of elements of `shape` and the [`Extent`] of `strides` over it, in one pass, with
/// checked arithmetic: what both the import's fast path and its precise path compute. The extent
/// is meaningful only when the count is not 0.
#[inline(always)]
pub(crate) fn count_and_extent(
    shape: &[i64],
    strides: &[i64],
) -> Result<(usize, Extent), Overflow> {
    let mut elements: usize = 1;
    let (mut lo, mut hi) = (0i64, 0i64);
    for (&d, &s) in shape.iter().zip(strides) {
        let size = usize::try_from(d).map_err(|_| Overflow::Count)?;
        elements = elements.checked_mul(size).ok_or(Overflow::Count)?;
        // `d >= 0` here, so `d - 1` does not overflow.
        let term = (d - 1).checked_mul(s).ok_or(Overflow::Term)?;
        if term < 0 {
            lo = lo.checked_add(term).ok_or(Overflow::Sum)?;
        } else {
            hi = hi.checked_add(term).ok_or(Overflow::Sum)?;
        }
    }
    Ok((elements, Extent { lo, hi }))
}

/// The first axis whose `(shape[axis] - 1) * strides[axis]` exceeds `i64`: the axis of an
/// [`Overflow::Term`].
pub(crate) fn overflowing_term(shape: &[i64], strides: &[i64]) -> Option<usize> {
    shape
        .iter()
        .zip(strides)
        .position(|(&d, &s)| d.checked_sub(1).and_then(|t| t.checked_mul(s)).is_none())
}

/// The number of elements of `shape`: 0 when a size is 0, whatever the others; `None` when a
/// size is negative or the product exceeds `usize`.
pub(crate) fn element_count(shape: &[i64]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
}

/// Writes compact row-major strides (in elements) for `shape` into `out`.
pub(crate) fn fill_row_major_strides(shape: &[i64], out: &mut [i64]) {
    let mut step: i64 = 1;
    for (s, &d) in out.iter_mut().zip(shape).rev() {
        *s = step;
        // A stride past i64::MAX is only reachable with an empty or overflowing tensor; saturate
        // and let the span check report real overflow.
        step = step.saturating_mul(d.max(1));
    }
}

/// Compact row-major strides (in elements) for `shape`.
pub(crate) fn row_major_strides(shape: &[i64]) -> Box<[i64]> {
    let mut strides = vec![0i64; shape.len()].into_boxed_slice();
    fill_row_major_strides(shape, &mut strides);
    strides
}

/// Whether `strides` are compact row-major for `shape`, ignoring axes of size 1. A layout
/// without elements is row-major whatever its strides (no element is out of order).
pub(crate) fn is_row_major(shape: &[i64], strides: &[i64]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected: i64 = 1;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d == 1 {
            continue;
        }
        if s != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}

/// A sufficient condition for distinct indices to reach distinct elements: sorted by absolute
/// stride, every axis of size > 1 steps past everything the smaller axes reach. Conservative:
/// some exotic non-overlapping layouts are refused too.
pub(crate) fn strides_are_disjoint(shape: &[i64], strides: &[i64]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut axes: Vec<(u128, u128)> = shape
        .iter()
        .zip(strides)
        .filter(|(d, _)| **d > 1)
        .map(|(&d, &s)| (s.unsigned_abs() as u128, d as u128))
        .collect();
    axes.sort_unstable();
    let mut reach: u128 = 0; // elements reached by the smaller axes, as an offset extent
    for (stride, size) in axes {
        if stride <= reach {
            return false;
        }
        reach = match stride
            .checked_mul(size - 1)
            .and_then(|r| r.checked_add(reach))
        {
            Some(r) => r,
            None => return false,
        };
    }
    true
}

/// The offset of `index`, or `None` if it is out of bounds or of the wrong length. The layout
/// is a validated one: the offset of an in-bounds index lies within its span, so the arithmetic
/// does not overflow.
#[inline]
pub(crate) fn offset_of(shape: &[i64], strides: &[i64], index: &[usize]) -> Option<isize> {
    if index.len() != shape.len() {
        return None;
    }
    let mut offset: isize = 0;
    for ((&i, &d), &s) in index.iter().zip(shape).zip(strides) {
        if i as u64 >= d as u64 {
            return None;
        }
        // In bounds, so the product and the sum are a valid element offset within the span.
        offset = offset.wrapping_add((i as isize).wrapping_mul(s as isize));
    }
    Some(offset)
}

/// The row-major position, among all the indices of `shape`, of the index whose coordinates
/// are `coords` (each below its size).
pub(crate) fn row_major_position(coords: &[usize], shape: &[i64]) -> usize {
    coords
        .iter()
        .zip(shape)
        .fold(0usize, |flat, (&c, &d)| flat * d as usize + c)
}

/// What a walk keeps a running sum of: one element offset ([`Offsets`]), or a source offset and
/// a destination position walked in step (the gather's tiles). Every partial sum is that of an
/// index of the walk, within a validated span, so the wrapping arithmetic never wraps.
pub(crate) trait Sum: Copy {
    /// The sum at index 0 of every axis.
    const ZERO: Self;
    /// `self + stride`: one step along an axis.
    fn step(self, stride: Self) -> Self;
    /// `self - index * stride`: from `index` back to index 0 of an axis.
    fn rewind(self, stride: Self, index: usize) -> Self;
}

impl Sum for isize {
    const ZERO: isize = 0;
    #[inline(always)]
    fn step(self, stride: isize) -> isize {
        self.wrapping_add(stride)
    }
    #[inline(always)]
    fn rewind(self, stride: isize, index: usize) -> isize {
        self.wrapping_sub((index as isize).wrapping_mul(stride))
    }
}

impl Sum for (isize, isize) {
    const ZERO: (isize, isize) = (0, 0);
    #[inline(always)]
    fn step(self, stride: (isize, isize)) -> (isize, isize) {
        (self.0.step(stride.0), self.1.step(stride.1))
    }
    #[inline(always)]
    fn rewind(self, stride: (isize, isize), index: usize) -> (isize, isize) {
        (
            self.0.rewind(stride.0, index),
            self.1.rewind(stride.1, index),
        )
    }
}

/// One axis of a walk: its size, its stride (or strides, walked in step), and the index a walk
/// is at on it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Axis<S = isize> {
    /// The number of indices along the axis.
    pub(crate) size: usize,
    /// The offset between neighbouring indices, in elements.
    pub(crate) stride: S,
    index: usize,
}

impl<S> Axis<S> {
    /// An axis of `size` indices, `stride` apart.
    pub(crate) const fn new(size: usize, stride: S) -> Self {
        Axis {
            size,
            stride,
            index: 0,
        }
    }
}

/// The axes of a layout that move, outermost first, given as `(size, stride)` pairs: size-1
/// axes are left out (their stride is never used), and an axis that steps over exactly one run
/// of the next inner one (its stride is `size * stride` of that one: a compact row-major pair)
/// is joined with it into one axis. The result reaches the same offsets in the same row-major
/// order, so a compact layout of any rank becomes one axis of stride 1.
///
/// Expects no size 0 and sizes whose product fits `usize`.
pub(crate) fn merge_axes(dims: impl ExactSizeIterator<Item = (usize, isize)>) -> Vec<Axis> {
    let mut axes: Vec<Axis> = Vec::with_capacity(dims.len());
    for (size, stride) in dims {
        if size == 1 {
            continue;
        }
        if let Some(outer) = axes.last_mut() {
            // Joining outer (L, S) with inner (size, stride) when S == stride * size: the joined
            // index m = i * size + k has offset i * S + k * stride = m * stride.
            let steps_as_one = isize::try_from(size)
                .ok()
                .and_then(|n| stride.checked_mul(n))
                == Some(outer.stride);
            if steps_as_one && let Some(joined) = outer.size.checked_mul(size) {
                outer.size = joined;
                outer.stride = stride;
                continue;
            }
        }
        axes.push(Axis::new(size, stride));
    }
    axes
}

/// The odometer: the running sums of every index of some axes, in row-major order.
#[derive(Clone)]
pub(crate) struct Walk<S = isize> {
    /// The axes, outermost first, each with its index in the walk.
    axes: Vec<Axis<S>>,
    sum: S,
    remaining: usize,
}

impl<S: Sum> Walk<S> {
    /// The walk over the `len` indices of `axes` (whose sizes multiply to `len`), as they are,
    /// outermost first.
    pub(crate) fn new(axes: Vec<Axis<S>>, len: usize) -> Self {
        Walk {
            axes,
            sum: S::ZERO,
            remaining: len,
        }
    }
}

impl<S: Sum> Iterator for Walk<S> {
    type Item = S;

    #[inline]
    fn next(&mut self) -> Option<S> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let current = self.sum;
        if self.remaining > 0 {
            // Advance the odometer. Every axis here has at least two indices, so this loop
            // takes fewer than two steps per index on average.
            for axis in self.axes.iter_mut().rev() {
                if axis.index + 1 < axis.size {
                    axis.index += 1;
                    self.sum = self.sum.step(axis.stride);
                    break;
                }
                self.sum = self.sum.rewind(axis.stride, axis.index);
                axis.index = 0;
            }
        }
        Some(current)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<S: Sum> ExactSizeIterator for Walk<S> {}

/// Element offsets (in elements, from the first element) of every index, in row-major order:
/// what [`CheckedTensor::element_offsets`](crate::CheckedTensor::element_offsets) returns.
///
/// The walk costs the same whatever the number of axes: size-1 axes, which never move, are left
/// out, and neighbouring axes that step like one (a compact row-major pair) are walked as one.
///
/// ```
/// use dlpack_core::ManagedTensor;
///
/// let t = ManagedTensor::export(vec![0u8; 6])?; // 1-d, stride 1
/// assert_eq!(t.element_offsets().len(), 6);
/// assert_eq!(t.element_offsets().collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Offsets<'a> {
    walk: Walk,
    _tensor: PhantomData<&'a [i64]>,
}

impl<'a> Offsets<'a> {
    /// The walk over `len` indices of `shape` (whose sizes multiply to `len`) with `strides`, a
    /// validated layout.
    pub(crate) fn new(shape: &'a [i64], strides: &'a [i64], len: usize) -> Self {
        let axes = if len > 1 {
            // With `len` indices in all, every size is at least 1 and fits usize.
            merge_axes(
                shape
                    .iter()
                    .zip(strides)
                    .map(|(&size, &stride)| (size as usize, stride as isize)),
            )
        } else {
            Vec::new()
        };
        Offsets {
            walk: Walk::new(axes, len),
            _tensor: PhantomData,
        }
    }
}

impl Iterator for Offsets<'_> {
    type Item = isize;

    #[inline]
    fn next(&mut self) -> Option<isize> {
        self.walk.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.walk.size_hint()
    }
}

impl ExactSizeIterator for Offsets<'_> {}

impl fmt::Debug for Offsets<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Offsets")
            .field("axes", &self.walk.axes)
            .field("offset", &self.walk.sum)
            .field("remaining", &self.walk.remaining)
            .field("_tensor", &self._tensor)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets of every index in row-major order, one axis at a time.
    fn naive(shape: &[i64], strides: &[i64]) -> Vec<isize> {
        let len: usize = shape.iter().map(|&d| d as usize).product();
        (0..len)
            .map(|mut flat| {
                let mut offset = 0isize;
                for (&d, &s) in shape.iter().zip(strides).rev() {
                    offset += (flat % d as usize) as isize * s as isize;
                    flat /= d as usize;
                }
                offset
            })
            .collect()
    }

    #[track_caller]
    fn walk(shape: &[i64], strides: &[i64], axes: usize) {
        let len = shape.iter().map(|&d| d as usize).product();
        let offsets = Offsets::new(shape, strides, len);
        assert_eq!(offsets.walk.axes.len(), axes, "{shape:?} {strides:?}");
        assert_eq!(offsets.len(), len);
        assert_eq!(offsets.collect::<Vec<_>>(), naive(shape, strides));
    }

    #[test]
    fn the_walk_leaves_out_size_1_axes_and_joins_axes_that_step_as_one() {
        // A compact row-major layout is one axis, whatever its rank.
        walk(&[2, 3, 4], &[12, 4, 1], 1);
        walk(&[2, 1, 3, 1, 4], &[12, 99, 4, -7, 1], 1);
        // 1000 size-1 axes leave the walk as it was.
        let mut shape = vec![5i64, 3];
        let mut strides = vec![2i64, -3];
        shape.extend([1; 1000]);
        strides.extend([1; 1000]);
        walk(&shape, &strides, 2);
        // Transposed, flipped, broadcast and overlapping layouts.
        walk(&[3, 4], &[1, 3], 2);
        walk(&[3, 4], &[-4, -1], 1);
        walk(&[3, 4], &[0, 1], 2);
        walk(&[3, 4], &[0, 0], 1);
        walk(&[2, 3, 4], &[0, 4, 1], 2);
        walk(&[4, 4], &[1, 1], 2);
        walk(&[2, 2, 2], &[4, 2, 1], 1);
        walk(&[2, 2, 2], &[1, 2, 4], 3);
        // No walk at all for one index or none.
        walk(&[1, 1], &[5, 7], 0);
        walk(&[], &[], 0);
        assert_eq!(Offsets::new(&[3, 0], &[1, 1], 0).count(), 0);
    }

    #[test]
    fn every_small_layout_walks_as_the_naive_odometer() {
        // Under Miri, which runs this a thousand times slower, fewer sizes and strides.
        let (sizes, strides): (&[i64], &[i64]) = if cfg!(miri) {
            (&[1, 3], &[-1, 0, 2, 6])
        } else {
            (&[1, 2, 3], &[-3, -1, 0, 1, 2, 6])
        };
        for &a in sizes {
            for &b in sizes {
                for &c in sizes {
                    for &x in strides {
                        for &y in strides {
                            for &z in strides {
                                let (shape, st) = ([a, b, c], [x, y, z]);
                                let len = (a * b * c) as usize;
                                let got: Vec<_> = Offsets::new(&shape, &st, len).collect();
                                assert_eq!(got, naive(&shape, &st), "{shape:?} {st:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_walk_over_axes_as_given_visits_them_in_row_major_order() {
        // Axes that would join are walked as given: the same offsets, from three dials.
        let axes = vec![Axis::new(2, 12), Axis::new(3, 4), Axis::new(4, 1)];
        let got: Vec<_> = Walk::new(axes, 24).collect();
        assert_eq!(got, naive(&[2, 3, 4], &[12, 4, 1]));
        // Two sums in step: each is the walk of its own strides.
        let axes = vec![Axis::new(2, (12, -1)), Axis::new(3, (4, 7))];
        let (first, second): (Vec<_>, Vec<_>) = Walk::new(axes, 6).unzip();
        assert_eq!(first, naive(&[2, 3], &[12, 4]));
        assert_eq!(second, naive(&[2, 3], &[-1, 7]));
        // No axes: the one index of a scalar.
        assert_eq!(Walk::<isize>::new(Vec::new(), 1).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn offsets_debug_shows_the_walk() {
        let offsets = Offsets::new(&[2, 3], &[1, 2], 6);
        assert_eq!(
            format!("{offsets:?}"),
            "Offsets { axes: [Axis { size: 2, stride: 1, index: 0 }, Axis { size: 3, stride: 2, index: 0 }], offset: 0, remaining: 6, _tensor: PhantomData<&[i64]> }"
        );
    }

    #[test]
    fn the_one_pass_count_and_extent_names_where_it_overflows() {
        let ok = |shape: &[i64], strides: &[i64]| count_and_extent(shape, strides).unwrap();
        assert_eq!(ok(&[], &[]), (1, Extent { lo: 0, hi: 0 }));
        assert_eq!(ok(&[3, 4], &[-4, 1]), (12, Extent { lo: -8, hi: 3 }));
        assert_eq!(ok(&[2, 0], &[5, 7]).0, 0);
        let err = |shape: &[i64], strides: &[i64]| count_and_extent(shape, strides).unwrap_err();
        assert_eq!(err(&[2, -1], &[1, 1]), Overflow::Count);
        assert_eq!(err(&[i64::MAX, 4], &[1, 1]), Overflow::Count);
        assert_eq!(err(&[2, 3], &[1, i64::MAX]), Overflow::Term);
        assert_eq!(overflowing_term(&[2, 3], &[1, i64::MAX]), Some(1));
        assert_eq!(err(&[2, 2], &[i64::MAX, i64::MAX]), Overflow::Sum);
        // The exact count of a shape with a zero size, whatever the others.
        assert_eq!(element_count(&[i64::MAX, i64::MAX, 0]), Some(0));
        assert_eq!(element_count(&[i64::MAX, 4]), None);
        assert_eq!(row_major_position(&[1, 2, 3], &[2, 3, 4]), 23);
    }
}
