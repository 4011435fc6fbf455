//! Checking that every element a view reaches holds a valid value (a `bool` byte is 0 or 1),
//! each distinct element once, in time bounded by the elements, not by the indices.
//!
//! Indices and elements differ when strides make indices share elements. A broadcast axis
//! (stride 0) repeats elements; so do overlapping axes, like a sliding window (shape
//! `[n - k + 1, k]`, strides `[1, 1]`: `(n - k + 1) * k` indices over `n` bytes), or a hostile
//! `[2^31, 2^31]` with strides `[1, 1]`: 2^62 indices over 2^32 bytes, which a walk over the
//! indices would not finish. So the axes are first reduced to the set of offsets they reach:
//!
//! - broadcast axes and axes of size 1 reach nothing new and are dropped;
//! - two arithmetic progressions `{i * a}` (`i < n`) and `{j * b}` (`j < m`), with `b` a
//!   multiple of `a` no larger than `n * a`, sum to one progression: `{t * a}` for
//!   `t < n + (m - 1) * b / a` (every `t` is `i + j * b / a` for some `i < n`, `j < m`). This
//!   merge is exact, and repeated until no pair merges, it turns every sliding window (and every
//!   window of windows) into a plain strided layout.
//!
//! The same merge joins progressions that only touch (`b == n * a`), so a transposed, flipped or
//! otherwise permuted compact layout becomes one run of consecutive elements, scanned in one
//! pass like a compact tensor. The check reads memory in increasing order, whatever the index
//! order; when it finds a bad element of a layout whose indices reach distinct elements, a
//! row-major walk (on that error path only) names the first bad index.
//!
//! If what remains reaches each element once, it is walked: each element is read once. A layout
//! that still overlaps after merging (strides 2 and 3 over the same bytes, say) is irregular;
//! no producer in practice makes one for `bool` data. Its walk is bounded by
//! [`IRREGULAR_CHECK_LIMIT`] reads, and a layout past that is refused with
//! [`Error::IrregularOverlap`] instead of hanging.

use crate::layout::{Offsets, is_row_major, row_major_position, strides_are_disjoint};
use crate::{Element, Error};

/// The most element reads spent checking a layout whose indices still share elements after
/// exact merging, or that merging cannot show to reach each element once: 2^30, seconds of
/// work, where a walk over the indices of such a layout need not finish. A layout needing more
/// is refused with [`Error::IrregularOverlap`]. Each `bool` view (and `to_vec`) makes the check
/// again.
pub(crate) const IRREGULAR_CHECK_LIMIT: u64 = 1 << 30;

/// One node of a merge tree: an axis of the tensor, or two progressions merged.
#[derive(Clone, Copy, Debug)]
enum Node {
    /// The tensor's axis `axis`, of `size` > 1; `reversed` when its stride is negative
    /// (coordinate `c` along the progression is index `size - 1 - c` on the axis).
    Axis {
        axis: usize,
        size: u64,
        reversed: bool,
    },
    /// The progressions `small` (stride `a`) and `big` (stride `step * a`, `big_count` terms),
    /// summed.
    Merged {
        small: usize,
        big: usize,
        step: u64,
        big_count: u64,
    },
}

/// An arithmetic progression `{c * stride : c < count}` of element offsets, described by the
/// merge tree rooted at `node`.
#[derive(Clone, Copy, Debug)]
struct Progression {
    stride: u64,
    count: u64,
    node: usize,
}

/// Checks that every element reachable from `ptr` through `shape` and `strides` (of `len`
/// indices) holds a valid `T`. [`Error::InvalidValue`] names a bad element's index: the first
/// bad index whenever no two indices (broadcast axes aside) share an element, and otherwise one
/// index that reaches a bad element. [`Error::IrregularOverlap`] refuses a
/// layout that cannot be checked in bounded time.
///
/// # Safety
/// Every element reachable from `ptr` through `shape` and `strides` is readable memory (its
/// bytes need not be a valid `T`), and validation bounded every offset within `isize`.
pub(crate) unsafe fn check_values<T: Element>(
    ptr: *const T,
    shape: &[i64],
    strides: &[i64],
    len: usize,
) -> Result<(), Error> {
    if T::ANY_BIT_PATTERN || len == 0 {
        return Ok(());
    }
    if is_row_major(shape, strides) {
        // Compact: one pass over the bytes, in index order, with nothing allocated.
        // SAFETY: a compact tensor's `len` elements follow each other from `ptr`, all reachable,
        // hence readable (caller).
        return match unsafe { first_invalid(ptr, len) } {
            None => Ok(()),
            Some((index, byte)) => Err(Error::InvalidValue {
                dtype: T::DTYPE,
                index,
                byte,
            }),
        };
    }
    // The layout merged as far as it merges (see the module docs): broadcast axes (stride 0)
    // and overlapping windows repeat elements, which are then read once each (a `bool` scalar
    // seen 2^62 times takes one read), and a transposed or flipped layout becomes one run of
    // consecutive elements. An irregular overlap too costly to walk is refused here.
    let merged = Merged::new(shape, strides);
    let reads = merged.admitted_reads(shape, strides)?;
    let kept_len: usize = (shape.iter().zip(strides))
        .filter(|&(_, &s)| s != 0)
        .map(|(&d, _)| d as usize)
        .product();
    // Merging saved reads whenever indices share elements that way; then the merged layout is
    // walked, each element once, and the error names one index reaching a bad element. When it
    // saved nothing (the indices reach distinct elements, or overlap irregularly), the
    // row-major walk below reads no more and names the first bad index; the merged layout is
    // still scanned first when it is one run (a transpose), which is far faster, and the
    // row-major walk then runs only on the error path.
    let saved = merged.reads != Some(kept_len as u64);
    if saved || merged.is_one_run() {
        // SAFETY: forwarded from the caller; `reads` is the merged layout's.
        let verdict = unsafe { merged.check(ptr, reads, shape) };
        if saved || !matches!(verdict, Err(Error::InvalidValue { .. })) {
            return verdict;
        }
    }
    let kept: Vec<usize> = (0..shape.len()).filter(|&a| strides[a] != 0).collect();
    let kept_shape: Vec<i64> = kept.iter().map(|&a| shape[a]).collect();
    let kept_strides: Vec<i64> = kept.iter().map(|&a| strides[a]).collect();
    for (index, offset) in Offsets::new(&kept_shape, &kept_strides, kept_len).enumerate() {
        // SAFETY: the element at `offset` is reachable through the view's own axes (the same
        // ones, at index 0 on the broadcast axes), hence readable (caller).
        if let Some(byte) = unsafe { invalid_byte(ptr, offset) } {
            return Err(Error::InvalidValue {
                dtype: T::DTYPE,
                index: first_full_index(shape, &kept, &kept_shape, index),
                byte,
            });
        }
    }
    Ok(())
}

fn irregular(shape: &[i64], strides: &[i64]) -> Error {
    Error::IrregularOverlap {
        shape: shape.to_vec(),
        strides: strides.to_vec(),
    }
}

/// A layout's non-broadcast axes as progressions, merged as far as they merge.
struct Merged {
    /// The offset of the lowest reachable element: an axis of negative stride starts its
    /// progression at `(size - 1) * stride`.
    base: isize,
    /// What remains after merging, largest stride first.
    roots: Vec<Progression>,
    /// Every progression's merge tree.
    nodes: Vec<Node>,
    /// The roots' counts and strides, as the columns of a layout (each fits i64: a merged
    /// count is at most the validated span over its stride, plus one).
    counts: Vec<i64>,
    steps: Vec<i64>,
    /// The product of the roots' counts; `None` past `u64`.
    reads: Option<u64>,
}

impl Merged {
    fn new(shape: &[i64], strides: &[i64]) -> Self {
        let mut nodes = Vec::new();
        let mut roots = Vec::new();
        let mut base: isize = 0;
        for (axis, (&size, &stride)) in shape.iter().zip(strides).enumerate() {
            if size <= 1 || stride == 0 {
                continue;
            }
            if stride < 0 {
                // Validation bounded the whole span, so this partial sum is within isize.
                base = base.wrapping_add(((size - 1) as isize).wrapping_mul(stride as isize));
            }
            roots.push(Progression {
                stride: stride.unsigned_abs(),
                count: size as u64,
                node: nodes.len(),
            });
            nodes.push(Node::Axis {
                axis,
                size: size as u64,
                reversed: stride < 0,
            });
        }
        merge(&mut roots, &mut nodes);
        // Largest stride first: the walk then goes up through memory, like a row-major one.
        roots.sort_unstable_by_key(|r| core::cmp::Reverse(r.stride));
        let reads = roots.iter().try_fold(1u64, |n, r| n.checked_mul(r.count));
        Merged {
            base,
            counts: roots.iter().map(|r| r.count as i64).collect(),
            steps: roots.iter().map(|r| r.stride as i64).collect(),
            roots,
            nodes,
            reads,
        }
    }

    /// How many elements a walk of the merged layout reads: every distinct element, when the
    /// roots reach each once; otherwise (an irregular overlap) at most
    /// [`IRREGULAR_CHECK_LIMIT`], or [`Error::IrregularOverlap`] for the original layout.
    fn admitted_reads(&self, shape: &[i64], strides: &[i64]) -> Result<usize, Error> {
        let reads = match self.reads {
            Some(n)
                if n <= IRREGULAR_CHECK_LIMIT
                    || reach_each_once(&self.roots, &self.counts, &self.steps) =>
            {
                n
            }
            _ => return Err(irregular(shape, strides)),
        };
        // Distinct elements of the tensor, or at most IRREGULAR_CHECK_LIMIT: a usize on 64-bit
        // targets; on smaller ones a count past usize is refused like an irregular layout.
        usize::try_from(reads).map_err(|_| irregular(shape, strides))
    }

    /// Whether the merged layout is one run of consecutive elements.
    fn is_one_run(&self) -> bool {
        is_row_major(&self.counts, &self.steps)
    }

    /// Reads every element the roots reach (each once, if they reach each once), `reads` of
    /// them ([`Merged::admitted_reads`]).
    ///
    /// # Safety
    /// As for [`check_values`], of the layout `self` was made from; `reads` is the product of
    /// the roots' counts.
    unsafe fn check<T: Element>(
        &self,
        ptr: *const T,
        reads: usize,
        shape: &[i64],
    ) -> Result<(), Error> {
        let Merged {
            base,
            ref roots,
            ref nodes,
            ref counts,
            ref steps,
            ..
        } = *self;
        let found = if self.is_one_run() {
            // What is left is one run of consecutive elements (the usual end of merging sliding
            // windows): scanned like a compact tensor.
            // SAFETY: the run from `base` is the set of reachable elements (the merge is exact),
            // readable (caller).
            unsafe { first_invalid(ptr.offset(base), reads) }
        } else {
            Offsets::new(counts, steps, reads)
                .enumerate()
                .find_map(|(k, offset)| {
                    // SAFETY: `offset` is `base` plus a sum of progression terms, which the
                    // merge trees turn back into the offset of an in-bounds index of the tensor
                    // (`axis_indices`): a reachable element, readable (caller).
                    unsafe { invalid_byte(ptr, base.wrapping_add(offset)) }.map(|byte| (k, byte))
                })
        };
        let Some((k, byte)) = found else {
            return Ok(());
        };
        // Decode `k` (row-major over the roots) into each root's coordinate.
        let mut coords = vec![0usize; shape.len()];
        let mut rest = k as u64;
        for root in roots.iter().rev() {
            axis_indices(nodes, root.node, rest % root.count, &mut coords);
            rest /= root.count;
        }
        let index = row_major_position(&coords, shape);
        Err(Error::InvalidValue {
            dtype: T::DTYPE,
            index,
            byte,
        })
    }
}

/// The position and first byte of the first invalid `T` among the `len` consecutive elements
/// from `ptr`, if any.
///
/// # Safety
/// The `len` elements from `ptr` are readable memory, a span within `isize`.
unsafe fn first_invalid<T: Element>(ptr: *const T, len: usize) -> Option<(usize, u8)> {
    let size = core::mem::size_of::<T>();
    // SAFETY: readable (caller), whatever the bytes hold.
    let bytes = unsafe { core::slice::from_raw_parts(ptr.cast::<u8>(), len * size) };
    // For `bool` itself (not any type claiming its dtype), valid bytes are exactly 0 and 1:
    // OR-ing them, which vectorises, clears a whole block at memory speed; the exact scan below
    // runs only when some block holds a bad byte.
    if core::any::TypeId::of::<T>() == core::any::TypeId::of::<bool>()
        && bytes
            .chunks(1 << 12)
            .all(|block| block.iter().fold(0u8, |acc, &b| acc | b) <= 1)
    {
        return None;
    }
    let index = bytes
        .chunks_exact(size)
        .position(|e| !T::is_valid_bits(e))?;
    Some((index, bytes[index * size]))
}

/// Whether the progressions (`counts` and `steps` are their columns) reach each element once:
/// exactly, for two of them; as [`strides_are_disjoint`] decides (conservatively) for more.
///
/// Two progressions of strides `a` and `b` (`g` their gcd) and counts `n` and `m` reach some
/// element twice exactly when `i * a + j * b == i' * a + j' * b` for other indices, that is when
/// `i - i'` is a nonzero multiple of `b / g` and `j' - j` the same multiple of `a / g`: possible
/// exactly when `n > b / g` and `m > a / g`. So strides 3 and 2 over counts `[n, 3]` interleave
/// without sharing (`m = 3 <= 3`), while strides 3 and 2 over `[n, 4]` share elements.
fn reach_each_once(roots: &[Progression], counts: &[i64], steps: &[i64]) -> bool {
    match roots {
        [x, y] => {
            let g = gcd(x.stride, y.stride);
            x.count <= y.stride / g || y.count <= x.stride / g
        }
        _ => strides_are_disjoint(counts, steps),
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Merges pairs of progressions while one pair merges (see the module docs); `nodes` records
/// how, for [`axis_indices`].
fn merge(roots: &mut Vec<Progression>, nodes: &mut Vec<Node>) {
    'again: loop {
        roots.sort_unstable_by_key(|r| r.stride);
        for a in 0..roots.len() {
            for b in a + 1..roots.len() {
                let (small, big) = (roots[a], roots[b]);
                // Both are > 0 and small.stride <= big.stride (sorted).
                let step = big.stride / small.stride;
                if big.stride % small.stride != 0 || step > small.count {
                    continue;
                }
                // The merged progression spans what the two span together, a part of the
                // validated span: no overflow.
                let count = small.count + (big.count - 1) * step;
                nodes.push(Node::Merged {
                    small: small.node,
                    big: big.node,
                    step,
                    big_count: big.count,
                });
                roots.remove(b);
                roots[a] = Progression {
                    stride: small.stride,
                    count,
                    node: nodes.len() - 1,
                };
                continue 'again;
            }
        }
        return;
    }
}

/// Writes into `coords` the tensor indices, on the axes below `node`, of one index reaching
/// coordinate `c` (`c` < the node's count) of `node`'s progression.
fn axis_indices(nodes: &[Node], node: usize, c: u64, coords: &mut [usize]) {
    match nodes[node] {
        Node::Axis {
            axis,
            size,
            reversed,
        } => coords[axis] = if reversed { size - 1 - c } else { c } as usize,
        Node::Merged {
            small,
            big,
            step,
            big_count,
        } => {
            // c = i + j * step with i < small's count and j < big's count. The largest such j,
            // min(c / step, big_count - 1), leaves i = c - j * step below step (<= small's
            // count, or the pair would not have merged) when j = c / step, and at most small's
            // count - 1 when j = big_count - 1, since c < small's count + (big_count - 1) * step.
            let j = (c / step).min(big_count - 1);
            axis_indices(nodes, small, c - j * step, coords);
            axis_indices(nodes, big, j, coords);
        }
    }
}

/// The first byte of the element at `offset` if that element is not a valid `T`.
///
/// # Safety
/// The `size_of::<T>()` bytes at `ptr.offset(offset)` are readable.
#[inline]
unsafe fn invalid_byte<T: Element>(ptr: *const T, offset: isize) -> Option<u8> {
    // SAFETY: readable (caller); reading bytes as u8 is valid whatever they hold.
    let bytes = unsafe {
        core::slice::from_raw_parts(ptr.offset(offset).cast::<u8>(), core::mem::size_of::<T>())
    };
    (!T::is_valid_bits(bytes)).then(|| bytes[0])
}

/// The row-major index, among all of `shape`'s, of the first index that reaches the element at
/// row-major index `kept_index` among the `kept` axes (of sizes `kept_shape`): that index with
/// 0 on every other (broadcast) axis.
fn first_full_index(shape: &[i64], kept: &[usize], kept_shape: &[i64], kept_index: usize) -> usize {
    let mut coords = vec![0usize; shape.len()];
    let mut rest = kept_index;
    for (&axis, &size) in kept.iter().zip(kept_shape).rev() {
        coords[axis] = rest % size as usize;
        rest /= size as usize;
    }
    row_major_position(&coords, shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_progressions_reach_each_element_once_exactly_when_brute_force_says_so() {
        // Fewer under Miri, which has nothing unsafe to look at here.
        let top = if cfg!(miri) { 4 } else { 9 };
        for a in 1..top {
            for b in a..top + 4 {
                for n in 2..top {
                    for m in 2..top {
                        let mut seen: Vec<u64> = (0..n)
                            .flat_map(|i| (0..m).map(move |j| i * a + j * b))
                            .collect();
                        seen.sort_unstable();
                        seen.dedup();
                        let once = seen.len() as u64 == n * m;
                        let roots = [
                            Progression {
                                stride: b,
                                count: m,
                                node: 0,
                            },
                            Progression {
                                stride: a,
                                count: n,
                                node: 1,
                            },
                        ];
                        let (counts, steps) = ([m as i64, n as i64], [b as i64, a as i64]);
                        assert_eq!(
                            reach_each_once(&roots, &counts, &steps),
                            once,
                            "strides {a}, {b} over counts {n}, {m}"
                        );
                    }
                }
            }
        }
    }
}
