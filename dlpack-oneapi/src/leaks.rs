//! What the crate leaks on purpose when Level Zero cannot confirm that device work has finished
//! ([`leaks`]), and the process-wide record of memory such work may still touch ([`KEPT`]).

use core::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::context::lock;

/// What this crate has leaked on purpose since the process started, because Level Zero could not
/// confirm that device work using it had finished: a `zeEventHostSynchronize` that failed (a
/// lost device, say) while its event was not signalled, or a `zeEventHostReset` that failed.
///
/// Freeing memory or reusing an event that a copy may still write would let the device corrupt
/// whatever is allocated there next, so the crate keeps them instead, for the life of the
/// process:
///
/// - the event of a command that may still run, or that could not be reset, is never reset,
///   reused or destroyed, nor its event pool;
/// - a copy's host staging buffer (this crate's own: [`crate::UsmBuffer::to_vec`] and
///   [`crate::UsmBuffer::zeroed`] copy through one) is never freed; the hooks'
///   [`copy_to_host`](dlpack_core::DeviceHooks::copy_to_host) returns
///   [`dlpack_core::Error::CopyInFlight`] instead, and its caller leaks the destination;
/// - USM that such a copy reads or writes is never freed, whichever [`crate::Context`] the
///   copy went through: a [`crate::UsmBuffer`] over it leaks its allocation when dropped;
/// - a queue whose work could not be waited for when it was dropped leaks its command list;
/// - once anything was leaked, no context is destroyed any more (`zeContextDestroy` may free
///   every allocation of its context, which another context's unfinished copy may touch).
///
/// Every count is zero on a device that works. The error that reports the failure says what was
/// kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leaks {
    /// Events never reset, reused or destroyed.
    pub events: u64,
    /// Event pools not destroyed because they hold such events.
    pub event_pools: u64,
    /// Command lists not destroyed because work on them could not be waited for.
    pub command_lists: u64,
    /// USM allocations not freed ([`crate::UsmBuffer`]s dropped over memory a copy may still
    /// touch).
    pub allocations: u64,
    /// Contexts not destroyed because something of theirs was leaked.
    pub contexts: u64,
    /// Bytes of host staging buffers never freed.
    pub host_bytes: u64,
}

/// The process-wide counts behind [`leaks`].
pub(crate) struct Counters {
    pub(crate) events: AtomicU64,
    pub(crate) event_pools: AtomicU64,
    pub(crate) command_lists: AtomicU64,
    pub(crate) allocations: AtomicU64,
    pub(crate) contexts: AtomicU64,
    pub(crate) host_bytes: AtomicU64,
}

pub(crate) static LEAKED: Counters = Counters {
    events: AtomicU64::new(0),
    event_pools: AtomicU64::new(0),
    command_lists: AtomicU64::new(0),
    allocations: AtomicU64::new(0),
    contexts: AtomicU64::new(0),
    host_bytes: AtomicU64::new(0),
};

/// Adds `n` to a leak count.
pub(crate) fn count(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Leaks a host staging buffer that a copy may still read or write, and counts its bytes.
pub(crate) fn keep_staging<T>(buffer: Vec<T>) {
    count(
        &LEAKED.host_bytes,
        (buffer.capacity() * core::mem::size_of::<T>()) as u64,
    );
    core::mem::forget(buffer);
}

/// What this crate has leaked on purpose so far, process-wide (see [`Leaks`]).
pub fn leaks() -> Leaks {
    let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
    Leaks {
        events: read(&LEAKED.events),
        event_pools: read(&LEAKED.event_pools),
        command_lists: read(&LEAKED.command_lists),
        allocations: read(&LEAKED.allocations),
        contexts: read(&LEAKED.contexts),
        host_bytes: read(&LEAKED.host_bytes),
    }
}

/// What device work that Level Zero could not confirm as finished may still touch, for the whole
/// process: byte ranges that must never be freed, and whether anything was leaked (then no
/// context is destroyed, since `zeContextDestroy` may free every allocation of its context).
///
/// One record for the process, not one per context: USM addresses are unique in a process, a
/// copy through one `Context` may touch memory that a [`crate::UsmBuffer`] of another frees
/// (two `Context`s over one adopted handle; or, on Intel's driver, which resolves pointers
/// across every context of a driver, any two), and a context destroyed while another context's
/// unconfirmed copy touches its memory would free that memory under it.
pub(crate) static KEPT: Kept = Kept::new();

/// See [`KEPT`].
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// Whether anything was leaked: set by [`Kept::keep`] and [`Kept::taint`], never cleared.
    tainted: AtomicBool,
    /// Byte ranges an unconfirmed copy reads or writes.
    ranges: Mutex<Vec<Range<usize>>>,
}

impl Kept {
    /// Nothing kept.
    pub(crate) const fn new() -> Self {
        Kept {
            tainted: AtomicBool::new(false),
            ranges: Mutex::new(Vec::new()),
        }
    }

    /// Records that unconfirmed work may still touch `ranges` (and taints the record).
    pub(crate) fn keep(&self, ranges: &[Range<usize>]) {
        lock(&self.ranges).extend(ranges.iter().filter(|r| !r.is_empty()).cloned());
        self.taint();
    }

    /// Records that something was leaked.
    pub(crate) fn taint(&self) {
        self.tainted.store(true, Ordering::SeqCst);
    }

    /// Whether anything was leaked.
    pub(crate) fn is_tainted(&self) -> bool {
        self.tainted.load(Ordering::SeqCst)
    }

    /// Whether unconfirmed work may touch a byte of `range`.
    pub(crate) fn touches(&self, range: &Range<usize>) -> bool {
        if !self.is_tainted() || range.is_empty() {
            return false;
        }
        lock(&self.ranges)
            .iter()
            .any(|k| k.start < range.end && range.start < k.end)
    }
}

/// `start..start + len`, cut at the end of the address space.
pub(crate) fn span(start: usize, len: usize) -> Range<usize> {
    start..start.saturating_add(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_ranges_match_any_range_that_shares_a_byte_with_them() {
        let kept = Kept::default();
        assert!(!kept.is_tainted());
        assert!(!kept.touches(&(0..usize::MAX)), "nothing is kept yet");
        kept.keep(&[span(100, 16), span(500, 0)]);
        assert!(kept.is_tainted());
        assert!(kept.touches(&(115..116)));
        assert!(kept.touches(&(0..101)));
        assert!(!kept.touches(&(116..200)));
        assert!(!kept.touches(&(0..100)));
        assert!(!kept.touches(&(500..501)), "empty ranges are not kept");
        assert!(!kept.touches(&(110..110)), "an empty range touches nothing");
        assert_eq!(span(usize::MAX - 1, 10), usize::MAX - 1..usize::MAX);
    }

    #[test]
    fn a_tainted_context_keeps_no_range_until_one_is_kept() {
        let kept = Kept::default();
        kept.taint();
        assert!(kept.is_tainted());
        assert!(!kept.touches(&(0..usize::MAX)));
    }
}
