//! Strided gather ("copy-out"): copies any strided tensor into a new contiguous row-major buffer.
//!
//! [`gather`] first simplifies the layout without changing the row-major order of the output
//! ([`merge_axes`]): size-1 axes are dropped (their stride is never used), and adjacent axes
//! `k, k + 1` are merged into one when `strides[k] == strides[k + 1] * shape[k + 1]`, so a
//! C-contiguous tensor of any rank becomes a single axis of stride 1. It then picks one of three
//! loops:
//!
//! - **runs**: the innermost merged axis has stride 1. Each inner run is one
//!   `ptr::copy_nonoverlapping` (memcpy), and a fully contiguous tensor is a single memcpy.
//! - **tiles**: some other axis has stride +1 or -1 (a transposed layout such as `.t()` of a
//!   matrix, or an F-order tensor). That axis and the innermost one are copied in tiles of 256
//!   bytes along the unit-stride axis by 64 along the innermost one, through a 16 KiB buffer:
//!   each tile column is one contiguous source run copied into the buffer, then each destination
//!   row is written from the L1-resident buffer as one contiguous run. Every cache line is
//!   streamed once on both sides (a naive transposed copy touches one element per line, and
//!   power-of-two strides make those lines evict each other), tiles are visited in blocks small
//!   enough for the TLB, and full tiles run with constant sizes so their loops are unrolled. The
//!   remaining axes are walked by the odometer ([`Walk`]).
//! - **elements**: everything else. The odometer walks the outer axes, keeping the source offset
//!   as a running `isize` sum (one addition per step, no multiplication over all axes), and a
//!   plain loop copies the innermost axis; a zero (broadcast) inner stride reads once and fills,
//!   and a stride of -1 (a reversed row) gets its own loop with a constant stride, which
//!   vectorizes.
//!
//! All loops are iterative (no recursion), so any rank is fine, and every source address is
//! formed by `ptr.offset` on the caller's pointer from an offset that is itself the offset of an
//! in-bounds index, so the arithmetic never overflows and the code is clean under Miri's strict
//! provenance. Nothing is ever read when the tensor has no elements.

use core::mem::MaybeUninit;
use core::ptr;

use crate::layout::{Axis, Walk, merge_axes};

/// Copies every element reachable from `src` with `shape` and `strides` (in elements, may be
/// negative or zero) into `dst`, in row-major (C) order of the indices.
///
/// # Safety
/// - `dst.len()` equals the product of `shape` (the caller checked it does not overflow);
/// - for every in-bounds index `i`, `src.offset(sum_k i_k * strides[k])` is valid for reads of
///   `T` and properly aligned, and the sum does not overflow `isize` (the caller validated the
///   span);
/// - `shape.len() == strides.len()`.
///
/// Being valid for reads while `dst` is borrowed uniquely also means the source elements do not
/// overlap `dst`. When the product of `shape` is 0, `src` is never offset or read and may be
/// dangling or null.
pub(crate) unsafe fn gather<T: Copy>(
    src: *const T,
    shape: &[usize],
    strides: &[isize],
    dst: &mut [MaybeUninit<T>],
) {
    debug_assert_eq!(shape.len(), strides.len());
    debug_assert_eq!(
        shape.iter().try_fold(1usize, |n, &len| n.checked_mul(len)),
        Some(dst.len())
    );
    if dst.is_empty() || shape.contains(&0) {
        return;
    }
    if size_of::<T>() == 0 {
        // SAFETY: the tensor is not empty, so the all-zero index is in bounds and `src` itself
        // is valid for reads (a zero-sized read in any case).
        let value = unsafe { src.read() };
        dst.fill(MaybeUninit::new(value));
        return;
    }

    let axes = merge_axes(shape.iter().copied().zip(strides.iter().copied()));
    let Some((inner, outer)) = axes.split_last() else {
        // Every axis has length 1 (or there are none): exactly one element, at offset 0.
        // SAFETY: the all-zero index is in bounds, so `src` is valid for reads and aligned.
        let value = unsafe { src.read() };
        if let Some(first) = dst.first_mut() {
            *first = MaybeUninit::new(value);
        }
        return;
    };

    if inner.stride == 1 {
        // SAFETY: forwarded from the caller; `axes` is an equivalent layout (see `merge_axes`).
        unsafe { copy_runs(src, *inner, outer, dst) };
    } else if inner.stride.unsigned_abs() != 1
        && let Some(j) = outer
            .iter()
            .rposition(|axis| axis.stride.unsigned_abs() == 1)
    {
        // SAFETY: as above.
        unsafe { copy_tiled(src, j, *inner, outer, dst) };
    } else {
        // SAFETY: as above.
        unsafe { copy_elements(src, *inner, outer, dst) };
    }
}

/// Runs path: the innermost axis has stride 1, so each of its rows is one memcpy.
///
/// # Safety
/// The contract of [`gather`], for the layout `outer` followed by `inner`, with
/// `inner.stride == 1` and `dst.len()` the product of all their lengths.
unsafe fn copy_runs<T: Copy>(
    src: *const T,
    inner: Axis,
    outer: &[Axis],
    dst: &mut [MaybeUninit<T>],
) {
    let run = inner.size;
    let rows = Walk::new(outer.to_vec(), dst.len() / run);
    for (out, offset) in dst.chunks_exact_mut(run).zip(rows) {
        // SAFETY: `offset` is the source offset of an in-bounds index (the outer index with the
        // inner index 0), so the caller guarantees it is a valid, in-allocation offset of `src`.
        let from = unsafe { src.offset(offset) };
        // SAFETY: with stride 1 the `run` source elements of this row are `from.add(0..run)`,
        // each valid for reads, aligned, and (being offsets of `src`) in one allocation, so the
        // range is readable; `out` is a distinct `&mut` chunk of `run` elements, which the
        // source cannot overlap, and `MaybeUninit<T>` has the layout of `T`.
        unsafe { ptr::copy_nonoverlapping(from, out.as_mut_ptr().cast::<T>(), run) };
    }
}

/// Reads the elements `from.offset(k * step)`, `k = 0, 1, ...`, into `slots`, in order.
///
/// Inlined into call sites that pass a literal `step` of 1 or -1, so those loops are compiled
/// with a constant stride (contiguous or reversed loads, which vectorize).
///
/// # Safety
/// For every `k` below the number of slots, `k * step` fits in `isize` and `from.offset(k * step)`
/// is the source of an in-bounds index under the contract of [`gather`].
#[inline(always)]
unsafe fn read_line<'a, T: Copy + 'a>(
    from: *const T,
    step: isize,
    slots: impl Iterator<Item = &'a mut MaybeUninit<T>>,
) {
    for (k, slot) in slots.enumerate() {
        // SAFETY: `k` is below the number of slots, so `k * step` fits in `isize` and
        // `from.offset(k * step)` is the source of an in-bounds index, inside `src`'s allocation.
        let at = unsafe { from.offset(k as isize * step) };
        // SAFETY: the source of an in-bounds index is valid for reads and aligned.
        *slot = MaybeUninit::new(unsafe { at.read() });
    }
}

/// Elements path: an odometer over the outer axes and a strided loop over the innermost one.
///
/// # Safety
/// The contract of [`gather`], for the layout `outer` followed by `inner`, with `dst.len()` the
/// product of all their lengths.
unsafe fn copy_elements<T: Copy>(
    src: *const T,
    inner: Axis,
    outer: &[Axis],
    dst: &mut [MaybeUninit<T>],
) {
    let stride = inner.stride;
    let rows = Walk::new(outer.to_vec(), dst.len() / inner.size);
    for (out, offset) in dst.chunks_exact_mut(inner.size).zip(rows) {
        // SAFETY: `offset` is the source offset of an in-bounds index (inner index 0).
        let row = unsafe { src.offset(offset) };
        match stride {
            0 => {
                // SAFETY: `row` is the source of an in-bounds index, so it is valid for reads.
                let value = unsafe { row.read() };
                out.fill(MaybeUninit::new(value));
            }
            -1 => {
                // SAFETY: `out` has `inner.len` slots and, for `k < inner.len`,
                // `row.offset(k * -1)` is the source of the in-bounds index with inner index `k`.
                unsafe { read_line(row, -1, out.iter_mut()) }
            }
            _ => {
                // SAFETY: as above, with `stride` for -1.
                unsafe { read_line(row, stride, out.iter_mut()) }
            }
        }
    }
}

/// Tile width along the unit-stride axis, in bytes: four cache lines of every source line.
const TILE_BYTES: usize = 256;
/// Tile height: the number of columns (destination rows get that many elements per tile).
const TILE_ROWS: usize = 64;
/// Tiles are visited in blocks of `BLOCK_BYTES` along the unit-stride axis by `BLOCK_ROWS`
/// columns, so that the pages one block touches on either side stay in the TLB.
const BLOCK_BYTES: usize = 2048;
/// See [`BLOCK_BYTES`].
const BLOCK_ROWS: usize = 512;

/// Tiles path: `outer[j]` has stride +1 or -1 and the innermost axis does not. The two are
/// copied tile by tile through a small buffer; the other outer axes are walked by the odometer.
///
/// # Safety
/// The contract of [`gather`], for the layout `outer` followed by `inner`, with `dst.len()` the
/// product of all their lengths, `j < outer.len()` and `outer[j].stride` equal to +1 or -1.
unsafe fn copy_tiled<T: Copy>(
    src: *const T,
    j: usize,
    inner: Axis,
    outer: &[Axis],
    dst: &mut [MaybeUninit<T>],
) {
    // The other outer axes, walked for the source offset and the destination position in step.
    // The destination is row-major: each axis steps over all the elements of the inner ones
    // (at most `dst.len()`, which fits `isize`).
    let mut rest = Vec::with_capacity(outer.len() - 1);
    let mut unit_dst = 0;
    let mut step = inner.size;
    for (k, axis) in outer.iter().enumerate().rev() {
        if k == j {
            unit_dst = step;
        } else {
            rest.push(Axis::new(axis.size, (axis.stride, step as isize)));
        }
        step = step.saturating_mul(axis.size);
    }
    // Pushed innermost first.
    rest.reverse();
    let unit = Line {
        len: outer[j].size,
        src: outer[j].stride,
        dst: unit_dst,
    };
    let inner = Line {
        len: inner.size,
        src: inner.stride,
        dst: 1,
    };
    let walk = Walk::new(rest, dst.len() / (unit.len * inner.len));
    let tile_a = (TILE_BYTES / size_of::<T>()).max(4);
    // Room for one tile: 16 KiB for elements of up to 64 bytes, so it stays in L1.
    let mut buf = Box::<[T]>::new_uninit_slice(tile_a.min(unit.len) * TILE_ROWS.min(inner.len));
    for (src_base, dst_base) in walk {
        let slab = Slab {
            src_base,
            dst_base: dst_base as usize,
            a: unit,
            b: inner,
        };
        // SAFETY: `src_base` is the source offset of an in-bounds index that is zero on `unit`
        // and `inner`, and `dst_base` its row-major position, so the slab's indices are exactly
        // the in-bounds indices that agree with it on the other axes; `unit.src` is +1 or -1.
        unsafe { copy_slab(src, slab, dst, &mut buf) };
    }
}

/// One axis of a [`Slab`]: its length and its source and destination strides, in elements.
#[derive(Clone, Copy, Debug)]
struct Line {
    len: usize,
    src: isize,
    dst: usize,
}

/// A 2-D slice of the copy: rows along `a` (source stride +1 or -1), columns along `b`
/// (destination stride 1), starting at source offset `src_base` and destination position
/// `dst_base`.
#[derive(Clone, Copy, Debug)]
struct Slab {
    src_base: isize,
    dst_base: usize,
    a: Line,
    b: Line,
}

/// Copies a slab tile by tile, in blocks of tiles.
///
/// # Safety
/// `s.a.src` is +1 or -1, `buf.len()` is at least `min(max(TILE_BYTES / size_of::<T>(), 4),
/// s.a.len) * min(TILE_ROWS, s.b.len)` (one tile), and for every `i < s.a.len` and `k < s.b.len`,
/// `s.src_base + i * s.a.src + k * s.b.src` is the source offset of an in-bounds index (under the
/// contract of [`gather`]) whose position in `dst` is `s.dst_base + i * s.a.dst + k`.
unsafe fn copy_slab<T: Copy>(
    src: *const T,
    s: Slab,
    dst: &mut [MaybeUninit<T>],
    buf: &mut [MaybeUninit<T>],
) {
    let tile_a = (TILE_BYTES / size_of::<T>()).max(4);
    let block_a = (BLOCK_BYTES / size_of::<T>()).max(tile_a);
    let mut a_block = 0;
    while a_block < s.a.len {
        let a_block_end = s.a.len.min(a_block.saturating_add(block_a));
        let mut b_block = 0;
        while b_block < s.b.len {
            let b_block_end = s.b.len.min(b_block.saturating_add(BLOCK_ROWS));
            let mut a0 = a_block;
            while a0 < a_block_end {
                let a1 = a_block_end.min(a0 + tile_a);
                let mut b0 = b_block;
                while b0 < b_block_end {
                    let b1 = b_block_end.min(b0 + TILE_ROWS);
                    let (na, nb) = (a1 - a0, b1 - b0);
                    // Full tiles get constant sizes (once `copy_tile` is inlined), so their loops
                    // are unrolled.
                    if na == tile_a && nb == TILE_ROWS {
                        // SAFETY: the tile `a0..a1` by `b0..b1` lies inside the slab, and `buf`
                        // has room for its `na * nb` elements (`na <= min(tile_a, s.a.len)`,
                        // `nb <= min(TILE_ROWS, s.b.len)`).
                        unsafe { copy_tile(src, s, dst, buf, (a0, b0), (tile_a, TILE_ROWS)) };
                    } else {
                        // SAFETY: as above.
                        unsafe { copy_tile(src, s, dst, buf, (a0, b0), (na, nb)) };
                    }
                    b0 = b1;
                }
                a0 = a1;
            }
            b_block = b_block_end;
        }
        a_block = a_block_end;
    }
}

/// Copies the tile of `na` rows from `a0` by `nb` columns from `b0` of a slab through `buf`.
///
/// Each column of the tile is read along `a` (one contiguous, or reversed, source run) into a
/// buffer row, then each destination row is written as one contiguous run from a buffer column,
/// which is in L1. Every cache line is thus streamed once on both sides; none has to survive
/// while lines that map to the same cache set (power-of-two strides) are touched, which is what
/// makes a naive transposed copy slow.
///
/// # Safety
/// As for [`copy_slab`], with `a0 + na <= s.a.len`, `b0 + nb <= s.b.len` and
/// `buf.len() >= na * nb`.
#[inline(always)]
unsafe fn copy_tile<T: Copy>(
    src: *const T,
    s: Slab,
    dst: &mut [MaybeUninit<T>],
    buf: &mut [MaybeUninit<T>],
    (a0, b0): (usize, usize),
    (na, nb): (usize, usize),
) {
    let tile = &mut buf[..na * nb];
    // Read: tile column `kk` becomes buffer row `kk`.
    for (kk, row) in tile.chunks_exact_mut(na).enumerate() {
        let k = b0 + kk;
        // SAFETY: `s.src_base + k * s.b.src` is the source offset of the in-bounds index (0, k)
        // and `a0 * s.a.src` one along `a` alone, so both fit in `isize`, and their sum is the
        // source offset of the in-bounds index (a0, k).
        let first =
            unsafe { src.offset(s.src_base + k as isize * s.b.src + a0 as isize * s.a.src) };
        if s.a.src == 1 {
            // SAFETY: `row` has `na` slots, and for `ii < na`, `first` offset by `ii * s.a.src`
            // (here `ii`) is the source of the in-bounds index (a0 + ii, k).
            unsafe { read_line(first, 1, row.iter_mut()) }
        } else {
            // SAFETY: as above, with `s.a.src == -1`.
            unsafe { read_line(first, -1, row.iter_mut()) }
        }
    }
    // Write: buffer column `ii` becomes a run of destination row `a0 + ii`.
    for ii in 0..na {
        let start = s.dst_base + (a0 + ii) * s.a.dst + b0;
        let column = &tile[ii..];
        for (kk, slot) in dst[start..start + nb].iter_mut().enumerate() {
            *slot = column[kk * na];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Debug;

    /// Element types for the tests: distinct values from an index.
    trait Val: Copy + PartialEq + Debug {
        fn val(i: usize) -> Self;
    }
    impl Val for u8 {
        fn val(i: usize) -> Self {
            (i % 251) as u8
        }
    }
    impl Val for u16 {
        fn val(i: usize) -> Self {
            i as u16
        }
    }
    impl Val for f32 {
        fn val(i: usize) -> Self {
            i as f32 + 0.5
        }
    }
    impl Val for f64 {
        fn val(i: usize) -> Self {
            -(i as f64) - 0.25
        }
    }
    /// A 16-byte, 16-aligned element.
    #[derive(Clone, Copy, PartialEq, Debug)]
    #[repr(C, align(16))]
    struct Quad([u32; 4]);
    impl Val for Quad {
        fn val(i: usize) -> Self {
            let i = i as u32;
            Quad([i, !i, i.wrapping_mul(7), 0xdead_beef ^ i])
        }
    }

    fn data<T: Val>(n: usize) -> Vec<T> {
        (0..n).map(T::val).collect()
    }

    /// Reference: computes every index from its row-major position and its offset from scratch.
    fn reference<T: Copy>(data: &[T], base: usize, shape: &[usize], strides: &[isize]) -> Vec<T> {
        let n: usize = shape.iter().product();
        let mut out = Vec::with_capacity(n);
        for flat in 0..n {
            let mut rem = flat;
            let mut offset = base as isize;
            for k in (0..shape.len()).rev() {
                offset += (rem % shape[k]) as isize * strides[k];
                rem /= shape[k];
            }
            out.push(data[usize::try_from(offset).expect("test layout leaves the buffer")]);
        }
        out
    }

    /// Gathers `shape`/`strides` starting at `data[base]` and compares with [`reference`], which
    /// panics (before `gather` runs) if the layout leaves `data`.
    fn check<T: Val>(data: &[T], base: usize, shape: &[usize], strides: &[isize]) {
        let expected = reference(data, base, shape, strides);
        assert!(base < data.len());
        let mut dst = vec![MaybeUninit::<T>::uninit(); expected.len()];
        // SAFETY: `base < data.len()`; the pointer keeps the provenance of all of `data`.
        let src = unsafe { data.as_ptr().add(base) };
        // SAFETY: `reference` just read every in-bounds index from `data` with these offsets,
        // `dst` has the product of `shape` elements, and the lengths match.
        unsafe { gather(src, shape, strides, &mut dst) };
        let got: Vec<T> = dst
            .iter()
            // SAFETY: `gather` initialised every element of `dst`.
            .map(|slot| unsafe { slot.assume_init() })
            .collect();
        assert_eq!(
            got, expected,
            "shape {shape:?} strides {strides:?} base {base}"
        );
    }

    /// The row-major strides of `shape`.
    fn c_strides(shape: &[usize]) -> Vec<isize> {
        let mut strides = vec![0; shape.len()];
        let mut s = 1isize;
        for k in (0..shape.len()).rev() {
            strides[k] = s;
            s *= shape[k] as isize;
        }
        strides
    }

    /// Checks `shape`/`strides` over a fresh buffer just large enough, for the given type.
    fn check_layout<T: Val>(shape: &[usize], strides: &[isize]) {
        let (mut lo, mut hi) = (0isize, 0isize);
        for (&len, &s) in shape.iter().zip(strides) {
            let span = (len.max(1) - 1) as isize * s;
            if span < 0 { lo += span } else { hi += span }
        }
        let buf = data::<T>((hi - lo + 1) as usize);
        check(&buf, (-lo) as usize, shape, strides);
    }

    fn check_all_types(shape: &[usize], strides: &[isize]) {
        check_layout::<u8>(shape, strides);
        check_layout::<u16>(shape, strides);
        check_layout::<f32>(shape, strides);
        check_layout::<f64>(shape, strides);
        check_layout::<Quad>(shape, strides);
    }

    #[test]
    fn c_order() {
        for shape in [&[7][..], &[3, 4, 5], &[2, 3, 4, 5], &[1, 6, 1, 5]] {
            check_all_types(shape, &c_strides(shape));
        }
    }

    #[test]
    fn f_order() {
        for shape in [&[3, 4, 5][..], &[2, 3, 4, 5], &[6, 7]] {
            let rev: Vec<usize> = shape.iter().rev().copied().collect();
            let strides: Vec<isize> = c_strides(&rev).into_iter().rev().collect();
            check_all_types(shape, &strides);
        }
    }

    /// The three transposed variants of a `rows x cols` matrix: the transpose of a C-contiguous
    /// `cols x rows` one, and that mirrored along the unit axis (stride -1) or the other one.
    fn check_transposed<T: Val>(rows: usize, cols: usize) {
        check_layout::<T>(&[rows, cols], &[1, rows as isize]);
        check_layout::<T>(&[rows, cols], &[-1, rows as isize]);
        check_layout::<T>(&[rows, cols], &[1, -(rows as isize)]);
    }

    #[test]
    fn transposed_2d() {
        // Partial tiles (odd sizes), both ways.
        for (rows, cols) in [(9, 17), (17, 9)] {
            check_transposed::<u8>(rows, cols);
            check_transposed::<u16>(rows, cols);
            check_transposed::<f32>(rows, cols);
            check_transposed::<f64>(rows, cols);
            check_transposed::<Quad>(rows, cols);
        }
        for (rows, cols) in [(2, 70), (70, 2)] {
            check_transposed::<u8>(rows, cols);
            check_transposed::<f64>(rows, cols);
        }
        // Full tiles (256 bytes of the unit axis by 64 columns) next to partial ones.
        check_layout::<f32>(&[64, 64], &[1, 64]);
        check_layout::<f64>(&[33, 64], &[-1, 33]);
        check_layout::<Quad>(&[20, 64], &[1, -20]);
        // Slabs that cross a block of tiles: 520 columns (blocks are 512), and 130 rows of the
        // 16-byte type (its blocks are 128 rows).
        check_layout::<f32>(&[3, 520], &[1, 3]);
        check_layout::<Quad>(&[130, 5], &[-1, 130]);
        if !cfg!(miri) {
            // Larger sizes, full tiles of every type and all three variants, natively only.
            for (rows, cols) in [(64, 64), (33, 70), (70, 33), (3, 520), (130, 5), (300, 130)] {
                check_transposed::<u8>(rows, cols);
                check_transposed::<u16>(rows, cols);
                check_transposed::<f32>(rows, cols);
                check_transposed::<f64>(rows, cols);
                check_transposed::<Quad>(rows, cols);
            }
        }
    }

    #[test]
    fn transposed_with_outer_axes() {
        // The unit-stride axis next to the inner one, and separated from it by another axis.
        check_all_types(&[3, 5, 7], &[35, 1, 5]);
        check_all_types(&[5, 3, 7], &[1, 35, 5]);
        check_all_types(&[5, 3, 7], &[-1, 35, 5]);
        check_all_types(&[2, 5, 3, 4], &[60, 1, 20, 5]);
    }

    #[test]
    fn sliced_with_steps() {
        check_all_types(&[10], &[2]);
        check_all_types(&[10], &[3]);
        check_all_types(&[4, 5], &[30, 2]);
        check_all_types(&[4, 5], &[30, 3]);
        check_all_types(&[4, 5], &[20, 1]); // rows of 5 out of 20: memcpy runs
        check_all_types(&[3, 4, 5], &[60, 10, 2]); // steps that merge: [12, 5] by [10, 2]
        check_all_types(&[3, 4, 5], &[120, 2 * 5 * 3, 3]);
    }

    #[test]
    fn negative_strides() {
        let shape = [3, 4, 5];
        let c = c_strides(&shape);
        for axis in 0..3 {
            let mut strides = c.clone();
            strides[axis] = -strides[axis];
            check_all_types(&shape, &strides);
        }
        check_all_types(&shape, &[-20, -5, -1]); // fully reversed
        check_all_types(&[17], &[-1]);
        check_all_types(&[4, 6], &[-12, -2]);
    }

    #[test]
    fn zero_strides() {
        check_all_types(&[5], &[0]);
        check_all_types(&[3, 4], &[0, 1]);
        check_all_types(&[3, 4], &[1, 0]);
        check_all_types(&[3, 4], &[4, 0]);
        check_all_types(&[3, 4], &[0, 0]);
        check_all_types(&[2, 3, 4], &[0, 4, 1]);
        check_all_types(&[2, 3, 4], &[12, 0, 1]);
        check_all_types(&[3, 5, 2], &[2, 0, 1]);
        check_all_types(&[6, 5], &[1, 0]); // unit outer axis, broadcast inner: tiles
    }

    #[test]
    fn size_one_axes_with_any_stride() {
        check_all_types(&[1], &[isize::MAX]);
        check_all_types(&[1, 5, 1], &[isize::MIN, 1, -7]);
        check_all_types(&[4, 1, 3], &[3, 99, 1]);
        check_all_types(&[4, 1, 3], &[1, -99, 4]);
        check_all_types(&[1, 1, 1], &[5, -5, isize::MAX]);
    }

    #[test]
    fn empty_never_touches_src() {
        let null = ptr::null::<f64>();
        let layouts: [(&[usize], &[isize]); 5] = [
            (&[0], &[1]),
            (&[3, 0, 4], &[0, 4, 1]),
            (&[0, 5], &[isize::MAX, isize::MIN]),
            (&[5, 0], &[1, 5]),
            (&[2, 3, 0], &[-3, 1, 7]),
        ];
        for (shape, strides) in layouts {
            let mut dst: [MaybeUninit<f64>; 0] = [];
            // SAFETY: there is no in-bounds index, so `src` need not be valid; `dst` is empty.
            unsafe { gather(null, shape, strides, &mut dst) };
        }
    }

    #[test]
    fn zero_sized_elements() {
        let src = ptr::NonNull::<()>::dangling().as_ptr();
        let mut dst = [MaybeUninit::<()>::uninit(); 12];
        // SAFETY: a dangling, aligned, non-null pointer is valid for zero-sized reads at any
        // offset; `dst` has 3 * 4 elements.
        unsafe { gather(src, &[3, 4], &[7, -2], &mut dst) };
    }

    #[test]
    fn ndim_zero() {
        let value = [Quad::val(41)];
        let mut dst = [MaybeUninit::uninit()];
        // SAFETY: the one in-bounds index (the empty one) has offset 0, inside `value`.
        unsafe { gather(value.as_ptr(), &[], &[], &mut dst) };
        // SAFETY: `gather` wrote the one element.
        assert_eq!(unsafe { dst[0].assume_init() }, value[0]);
        check_all_types(&[], &[]);
    }

    #[test]
    fn five_d_mixed() {
        // Permuted (the unit axis in the middle), one reversed axis, a size-1 axis with a wild
        // stride and a broadcast axis.
        check_all_types(&[3, 2, 4, 1, 5], &[-40, 0, 1, 1234, 8]);
        check_all_types(&[2, 3, 2, 3, 2], &[1, -24, 6, 2, 72]);
        check_all_types(&[2, 3, 2, 3, 2], &[72, 24, 12, 4, 1]); // stepped rows: memcpy runs
        check_all_types(&[2, 3, 1, 5, 3], &[-90, 30, 7, 6, 2]);
    }

    #[test]
    fn ndim_1024() {
        // Size-1 axes with strides that would overflow if they were ever multiplied.
        let mut shape = vec![1usize; 1024];
        let mut strides: Vec<isize> = (0..1024)
            .map(|k| [isize::MAX, isize::MIN, 0, k as isize][k % 4])
            .collect();
        shape[3] = 2;
        shape[500] = 3;
        shape[1023] = 2;
        strides[3] = -13;
        strides[500] = 4;
        strides[1023] = 1;
        check_layout::<f32>(&shape, &strides);
        strides[1023] = 3;
        check_layout::<u16>(&shape, &strides);
        // C-contiguous: merges into one memcpy.
        shape[10] = 2;
        check_layout::<u8>(&shape, &c_strides(&shape));
    }

    /// A tiny xorshift generator, so the random layouts are reproducible.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> usize {
            (self.next() % n) as usize
        }
    }

    #[test]
    fn random_layouts() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let rounds = if cfg!(miri) { 40 } else { 5000 };
        for _ in 0..rounds {
            let ndim = rng.below(6);
            let shape: Vec<usize> = (0..ndim).map(|_| rng.below(6)).collect();
            if shape.contains(&0) {
                let strides: Vec<isize> = (0..ndim).map(|_| rng.below(9) as isize - 4).collect();
                let mut dst: [MaybeUninit<u16>; 0] = [];
                // SAFETY: no in-bounds index exists, so `src` is never used.
                unsafe { gather(ptr::null(), &shape, &strides, &mut dst) };
                continue;
            }
            let strides: Vec<isize> = if rng.below(2) == 0 {
                // Anything small, including 0 and +-1 (aliasing reads are fine).
                (0..ndim).map(|_| rng.below(13) as isize - 6).collect()
            } else {
                // A permuted, stepped, partly reversed view of a contiguous buffer.
                let steps: Vec<usize> =
                    (0..ndim).map(|_| 1 + rng.below(2) * rng.below(3)).collect();
                let extents: Vec<usize> = shape.iter().zip(&steps).map(|(n, s)| n * s).collect();
                let base = c_strides(&extents);
                let mut perm: Vec<usize> = (0..ndim).collect();
                for k in (1..ndim).rev() {
                    perm.swap(k, rng.below(k as u64 + 1));
                }
                (0..ndim)
                    .map(|k| {
                        let s = base[perm[k]] * steps[k] as isize;
                        if rng.below(4) == 0 { -s } else { s }
                    })
                    .collect()
            };
            match rng.below(3) {
                0 => check_layout::<u8>(&shape, &strides),
                1 => check_layout::<f32>(&shape, &strides),
                _ => check_layout::<Quad>(&shape, &strides),
            }
        }
    }
}
