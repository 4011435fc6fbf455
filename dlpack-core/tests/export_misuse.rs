//! The export side against producers and safe trait impls (`Dims`, `Drop`, ...) that misbehave:
//! panics midway, answers that change between calls, re-entry into the API; the block layout
//! and the deleters; `into_read_only` / wrapping / `reclaim` / `into_vec` chains; extreme ndim
//! and shapes. (From a review of the export side; each test asserts the correct behaviour, and
//! runs under Miri too, but for the two that run themselves in a child process.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use dlpack_core::{
    Buffer, DataType, Device, Element, Error, Export, ExportDesc, Flags, ManagedTensor,
};

// ---------------------------------------------------------------------------------------------
// A global allocator that counts live allocations by alignment (for alignments >= 512), so that
// a test whose producer has a distinctive alignment can see whether its export block was freed,
// whatever the other tests running at the same time allocate.

struct Counting;

static LIVE_BY_ALIGN: [AtomicIsize; 24] = [const { AtomicIsize::new(0) }; 24];

fn slot(align: usize) -> Option<&'static AtomicIsize> {
    let log = align.trailing_zeros() as usize;
    (9..24).contains(&log).then(|| &LIVE_BY_ALIGN[log])
}

// SAFETY: every call is passed on to the system allocator with the caller's arguments; the
// counters beside it allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null()
            && let Some(s) = slot(layout.align())
        {
            s.fetch_add(1, Ordering::SeqCst);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null()
            && let Some(s) = slot(layout.align())
        {
            s.fetch_add(1, Ordering::SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(s) = slot(layout.align()) {
            s.fetch_sub(1, Ordering::SeqCst);
        }
        // SAFETY: the caller's contract, passed on (the block came from `System` too).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on (the block came from `System` too).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_blocks(align: usize) -> isize {
    slot(align).unwrap().load(Ordering::SeqCst)
}

// ---------------------------------------------------------------------------------------------
// Producers.

/// Counts drops; optionally panics in its Drop.
struct DropCounter {
    drops: Arc<AtomicUsize>,
    panic_in_drop: bool,
}

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        if self.panic_in_drop {
            panic!("producer Drop panics");
        }
    }
}

/// A producer with a distinctive alignment (so its export block can be counted), a heap Vec,
/// a drop counter and a choice of read-only description.
#[repr(C, align(4096))]
struct Aligned4096 {
    data: Vec<u8>,
    read_only: bool,
    counter: DropCounter,
}

// SAFETY: describes the Vec's own heap buffer, initialised, in place while self lives.
unsafe impl Export for Aligned4096 {
    fn ndim(&self) -> usize {
        1
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape[0] = self.data.len() as i64;
        strides[0] = 1;
        let d = ExportDesc::host(self.data.as_mut_ptr());
        if self.read_only { d.read_only() } else { d }
    }
}

#[test]
fn a_refused_legacy_export_frees_its_block_even_when_the_producer_drop_panics() {
    // export_legacy of a read-only description is refused in H::init; the block is freed and
    // the producer given back, so the panic in its Drop happens where the caller drops the
    // refusal. The block must be freed either way.
    let align = 4096;
    let before = live_blocks(align);
    let drops = Arc::new(AtomicUsize::new(0));
    let producer = Aligned4096 {
        data: vec![1, 2, 3],
        read_only: true,
        counter: DropCounter {
            drops: drops.clone(),
            panic_in_drop: true,
        },
    };
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let _ = ManagedTensor::export_legacy(producer);
    }));
    assert!(result.is_err(), "the Drop's panic reaches the caller");
    drop(result);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped once");
    assert_eq!(
        live_blocks(align) - before,
        0,
        "the export block (4096-aligned) was leaked when the producer's Drop panicked"
    );
}

#[test]
fn a_refused_legacy_export_with_a_quiet_drop_frees_its_block() {
    // The control for the test above: same path, Drop does not panic.
    #[repr(C, align(8192))]
    struct A8192(Aligned4096);
    // SAFETY: delegates.
    unsafe impl Export for A8192 {
        fn ndim(&self) -> usize {
            1
        }
        fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
            self.0.describe(shape, strides)
        }
    }
    let before = live_blocks(8192);
    let drops = Arc::new(AtomicUsize::new(0));
    let producer = A8192(Aligned4096 {
        data: vec![1, 2, 3],
        read_only: true,
        counter: DropCounter {
            drops: drops.clone(),
            panic_in_drop: false,
        },
    });
    let refused = ManagedTensor::export_legacy(producer).unwrap_err();
    assert_eq!(refused.error, Error::LegacyReadOnly);
    assert_eq!(live_blocks(8192) - before, 0);
    assert_eq!(drops.load(Ordering::SeqCst), 0, "given back");
    drop(refused);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

/// Runs the test named `name` in a child process with DLPACK_REVIEW_CHILD set, returning its
/// exit status and stderr.
#[cfg(unix)]
fn run_child(name: &str) -> (std::process::ExitStatus, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("DLPACK_REVIEW_CHILD", "1")
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(unix)]
fn in_child() -> bool {
    std::env::var_os("DLPACK_REVIEW_CHILD").is_some()
}

#[test]
#[cfg(unix)]
#[cfg_attr(
    miri,
    ignore = "runs itself in a child process, which Miri cannot start"
)]
fn a_producer_drop_that_panics_in_the_deleter_aborts_never_unwinds_into_c() {
    const NAME: &str = "a_producer_drop_that_panics_in_the_deleter_aborts_never_unwinds_into_c";
    if in_child() {
        let drops = Arc::new(AtomicUsize::new(0));
        let t = ManagedTensor::export(Aligned4096 {
            data: vec![1],
            read_only: false,
            counter: DropCounter {
                drops,
                panic_in_drop: true,
            },
        })
        .unwrap();
        let raw = t.into_raw().unwrap();
        // What a C consumer does: call the deleter (an extern "C" fn) once.
        // SAFETY: raw is a live tensor we own; its deleter is called once.
        let _ = panic::catch_unwind(|| unsafe { ((*raw).deleter.unwrap())(raw) });
        // Reaching this line would mean the panic unwound out of the extern "C" deleter.
        std::process::exit(42);
    }
    use std::os::unix::process::ExitStatusExt;
    let (status, stderr) = run_child(NAME);
    assert_eq!(status.signal(), Some(6), "aborted: {status:?}\n{stderr}");
    assert!(
        stderr.contains("panic in a function that cannot unwind"),
        "{stderr}"
    );
}

#[test]
#[cfg(unix)]
#[cfg_attr(
    miri,
    ignore = "runs itself in a child process, which Miri cannot start"
)]
fn dropping_from_rust_an_export_whose_producer_drop_panics_aborts_too() {
    // Documents: even a drop from Rust goes through the extern "C" deleter, so a panicking
    // producer Drop aborts the process rather than unwinding (not UB, not a leak).
    const NAME: &str = "dropping_from_rust_an_export_whose_producer_drop_panics_aborts_too";
    if in_child() {
        let t = ManagedTensor::export(Aligned4096 {
            data: vec![1],
            read_only: false,
            counter: DropCounter {
                drops: Arc::new(AtomicUsize::new(0)),
                panic_in_drop: true,
            },
        })
        .unwrap();
        let _ = panic::catch_unwind(AssertUnwindSafe(|| drop(t)));
        std::process::exit(42);
    }
    use std::os::unix::process::ExitStatusExt;
    let (status, stderr) = run_child(NAME);
    assert_eq!(status.signal(), Some(6), "aborted: {status:?}\n{stderr}");
}

// --- panics midway: check, ndim, describe (legacy), give_vec ---------------------------------

struct Panicky {
    data: Vec<i32>,
    at: &'static str,
    // Counts (and may panic in) the producer's drop; never read.
    _counter: DropCounter,
}

// SAFETY: describes its Vec's heap buffer.
unsafe impl Export for Panicky {
    const GIVES_VEC: bool = true;
    fn check(&self) -> Result<(), Error> {
        if self.at == "check" {
            panic!("check");
        }
        Ok(())
    }
    fn ndim(&self) -> usize {
        if self.at == "ndim" {
            panic!("ndim");
        }
        1
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape[0] = self.data.len() as i64;
        if self.at == "describe" {
            panic!("describe");
        }
        strides[0] = 1;
        ExportDesc::host(self.data.as_mut_ptr())
    }
    fn give_vec(&mut self, slot: &mut dyn std::any::Any) {
        if self.at == "give_vec" {
            panic!("give_vec");
        }
        dlpack_core::__private::give_vec_of_buffer(&mut self.data, slot)
    }
}

fn panicky(at: &'static str) -> (Panicky, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    (
        Panicky {
            data: vec![1, 2, 3],
            at,
            _counter: DropCounter {
                drops: drops.clone(),
                panic_in_drop: false,
            },
        },
        drops,
    )
}

#[test]
fn panics_in_check_ndim_and_describe_drop_the_producer_once_on_every_export_path() {
    type Exporter = fn(Panicky) -> bool;
    let paths: [(&str, Exporter); 4] = [
        ("export", |p| ManagedTensor::export(p).is_ok()),
        ("export_legacy", |p| ManagedTensor::export_legacy(p).is_ok()),
        ("export_raw", |p| ManagedTensor::export_raw(p).is_ok()),
        ("export_raw_legacy", |p| {
            ManagedTensor::export_raw_legacy(p).is_ok()
        }),
    ];
    for (path, f) in paths {
        for at in ["check", "ndim", "describe"] {
            let (p, drops) = panicky(at);
            let r = panic::catch_unwind(AssertUnwindSafe(|| f(p)));
            assert!(r.is_err(), "{path}/{at}: the panic goes on");
            assert_eq!(drops.load(Ordering::SeqCst), 1, "{path}/{at}: dropped once");
        }
    }
}

#[test]
fn a_panic_in_give_vec_drops_the_tensor_once_also_through_a_wrapper() {
    let (p, drops) = panicky("give_vec");
    let t = ManagedTensor::export(p).unwrap();
    let r = panic::catch_unwind(AssertUnwindSafe(|| t.into_vec::<i32>()));
    assert!(r.is_err());
    assert_eq!(drops.load(Ordering::SeqCst), 1);

    // Wrapped twice (legacy inside versioned inside versioned): the request is passed down and
    // the panic unwinds through each wrapper's give_vec; every block is deleted once.
    let (p, drops) = panicky("give_vec");
    let inner = ManagedTensor::export_legacy(p).unwrap();
    let mid = ManagedTensor::export(inner).unwrap();
    let outer = ManagedTensor::export(mid).unwrap();
    let r = panic::catch_unwind(AssertUnwindSafe(|| outer.into_vec::<i32>()));
    assert!(r.is_err());
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

// --- re-entrance ------------------------------------------------------------------------------

/// A producer whose describe and Drop use the API on other tensors.
struct Reentrant {
    data: Vec<f32>,
    held: Option<ManagedTensor>,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for Reentrant {
    fn drop(&mut self) {
        // Export, wrap, reclaim and take the Vec of other tensors while our own deleter runs.
        let t = ManagedTensor::export(vec![9u16, 8]).unwrap();
        let w = ManagedTensor::export_legacy(t).unwrap();
        let raw = w.into_raw().unwrap();
        // SAFETY: raw is ours, handed back once.
        let back = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
        let v = back.into_vec::<u16>().unwrap();
        self.log.lock().unwrap().push(format!("drop:{v:?}"));
        if let Some(h) = self.held.take() {
            let v: Vec<i64> = h.reclaim().map_err(|_| ()).unwrap();
            self.log.lock().unwrap().push(format!("drop-held:{v:?}"));
        }
    }
}

// SAFETY: describes the Vec's heap buffer.
unsafe impl Export for Reentrant {
    const GIVES_VEC: bool = true;
    fn ndim(&self) -> usize {
        1
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        // Export and drop another tensor, and swap the held one, from inside describe.
        let other = ManagedTensor::export(vec![1u8, 2, 3]).unwrap();
        let other = ManagedTensor::export(other).unwrap();
        self.log
            .lock()
            .unwrap()
            .push(format!("describe:{:?}", other.to_vec::<u8>().unwrap()));
        drop(other);
        self.held = Some(ManagedTensor::export(vec![5i64, 6]).unwrap());
        shape[0] = self.data.len() as i64;
        strides[0] = 1;
        ExportDesc::host(self.data.as_mut_ptr())
    }
    fn give_vec(&mut self, slot: &mut dyn std::any::Any) {
        // Re-enter in give_vec too.
        let t = ManagedTensor::export(vec![0u32; 4]).unwrap();
        let _: Vec<u32> = t.into_vec().unwrap();
        dlpack_core::__private::give_vec_of_buffer(&mut self.data, slot)
    }
}

#[test]
fn describe_give_vec_and_drop_may_reenter_the_api() {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let t = ManagedTensor::export(Reentrant {
        data: vec![1.0, 2.0],
        held: None,
        log: log.clone(),
    })
    .unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    let t = ManagedTensor::export(t).unwrap();
    let v = t.into_vec::<f32>().unwrap();
    assert_eq!(v, [1.0, 2.0]);
    assert_eq!(
        *log.lock().unwrap(),
        ["describe:[1, 2, 3]", "drop:[9, 8]", "drop-held:[5, 6]"]
    );
}

// --- the block: inline producers, big alignments, ZST producers, MAX_NDIM ----------------------

/// Elements held inline, in the producer, at a large alignment.
#[repr(C, align(1024))]
struct InlineBig {
    tag: u64,
    elems: [u32; 6],
}

// SAFETY: the array is inside self, which does not move between describe and drop.
unsafe impl Export for InlineBig {
    fn ndim(&self) -> usize {
        2
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.copy_from_slice(&[2, 3]);
        strides.copy_from_slice(&[3, 1]);
        ExportDesc::host(self.elems.as_mut_ptr())
    }
}

#[test]
fn inline_producers_can_be_written_wrapped_and_reclaimed() {
    let before = live_blocks(1024);
    let mut t = ManagedTensor::export_legacy(InlineBig {
        tag: 7,
        elems: [0, 1, 2, 3, 4, 5],
    })
    .unwrap();
    {
        let mut v = t.view_mut::<u32>().unwrap();
        for x in v.iter_mut() {
            *x *= 10;
        }
    }
    assert_eq!(t.to_vec::<u32>().unwrap(), [0, 10, 20, 30, 40, 50]);
    // Legacy -> versioned wrapper -> C -> back; the inline producer is never given as a Vec.
    let raw = t.into_raw().unwrap();
    // SAFETY: ours, once.
    let mut w = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    w.view_mut::<u32>()
        .unwrap()
        .iter_mut()
        .for_each(|x| *x += 1);
    let w = w.into_vec::<u32>().unwrap_err();
    let inner: ManagedTensor = w.reclaim().map_err(|_| ()).unwrap();
    assert_eq!(inner.to_vec::<u32>().unwrap(), [1, 11, 21, 31, 41, 51]);
    let back: InlineBig = inner.reclaim().map_err(|_| ()).unwrap();
    assert_eq!((back.tag, back.elems), (7, [1, 11, 21, 31, 41, 51]));
    assert_eq!(live_blocks(1024) - before, 0);
}

/// A zero-sized producer describing an empty tensor with a NULL data pointer.
struct Nothing;

// SAFETY: a tensor with no elements reaches no memory.
unsafe impl Export for Nothing {
    fn ndim(&self) -> usize {
        3
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        // An element count that overflows before the 0 is reached, and absurd strides.
        shape.copy_from_slice(&[i64::MAX, 2, 0]);
        strides.copy_from_slice(&[i64::MAX, i64::MIN, 1]);
        ExportDesc::host(core::ptr::null_mut::<f64>())
    }
}

#[test]
fn a_zero_sized_producer_of_an_empty_tensor_with_an_overflowing_shape_product() {
    let t = ManagedTensor::export(Nothing).unwrap();
    assert_eq!(t.len(), 0);
    assert!(t.to_vec::<f64>().unwrap().is_empty());
    let t = ManagedTensor::export_legacy(t).unwrap();
    let raw = t.into_raw().unwrap();
    // SAFETY: ours, once.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    assert_eq!(t.shape(), &[i64::MAX, 2, 0]);
    let t = t.into_vec::<f64>().unwrap_err(); // no Vec to give
    let t: ManagedTensor = t.reclaim().map_err(|_| ()).unwrap();
    let t: ManagedTensor = t.reclaim().map_err(|_| ()).unwrap();
    let Nothing = t.reclaim().map_err(|_| ()).unwrap();
    let raw = ManagedTensor::export_raw_legacy(Nothing).unwrap();
    // SAFETY: ours, once.
    let t = unsafe { ManagedTensor::from_raw_legacy(raw.as_ptr()) }.unwrap();
    assert!(t.is_empty());
}

/// `n` dimensions of size 1 over a one-element heap buffer.
struct ManyDims {
    n: usize,
    data: Box<[i16]>,
}

// SAFETY: shape all ones, strides 1: one element, the box's.
unsafe impl Export for ManyDims {
    const GIVES_VEC: bool = true;
    fn ndim(&self) -> usize {
        self.n
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape.fill(1);
        strides.fill(1);
        ExportDesc::host(self.data.as_mut_ptr())
    }
    fn give_vec(&mut self, slot: &mut dyn std::any::Any) {
        dlpack_core::__private::give_vec_of_buffer(&mut self.data, slot)
    }
}

#[test]
fn max_ndim_exports_in_both_headers_wraps_and_gives_its_vec() {
    let n = dlpack_core::MAX_NDIM;
    for legacy in [false, true] {
        let p = ManyDims {
            n,
            data: vec![-3i16].into_boxed_slice(),
        };
        let t = if legacy {
            ManagedTensor::export_legacy(p)
        } else {
            ManagedTensor::export(p)
        }
        .unwrap();
        assert_eq!((t.ndim(), t.len()), (n, 1));
        let t = ManagedTensor::export(t).unwrap();
        let raw = t.into_raw_legacy().unwrap();
        // SAFETY: ours, once.
        let t = unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap();
        assert_eq!(t.ndim(), n);
        assert_eq!(t.into_vec::<i16>().unwrap(), [-3]);
    }
    // One more than MAX_NDIM: refused before anything is allocated, dropped.
    let err = ManagedTensor::export(ManyDims {
        n: n + 1,
        data: vec![1].into_boxed_slice(),
    })
    .unwrap_err()
    .error;
    assert!(matches!(err, Error::BadNdim { ndim: 1025 }), "{err}");
    // ndim beyond i32 and beyond i64 are BadNdim too, never a truncation.
    for big in [i32::MAX as usize + 1, usize::MAX] {
        let err = ManagedTensor::export_raw(ManyDims {
            n: big,
            data: vec![1].into_boxed_slice(),
        })
        .unwrap_err()
        .error;
        assert!(matches!(err, Error::BadNdim { .. }), "{err}");
    }
}

// --- into_read_only, wrapping, reclaim and into_vec chains ------------------------------------

#[test]
fn read_only_restrictions_survive_every_wrapping_and_reclaim_chain() {
    let data: Vec<u64> = vec![1, 2, 3, 4];
    let address = data.as_ptr();
    let t = ManagedTensor::export(data).unwrap().into_read_only();
    // Wrapped by a safe export: the wrapper is read-only by its struct.
    let w = ManagedTensor::export(t).unwrap();
    assert!(w.is_read_only());
    let w = w.into_vec::<u64>().unwrap_err();
    // The legacy wrapper is refused (read-only), which drops the chain: rebuild.
    drop(w);

    let t = ManagedTensor::export(vec![1u64, 2])
        .unwrap()
        .into_read_only();
    let w = ManagedTensor::export(t).unwrap();
    let raw = w.into_raw().unwrap();
    // SAFETY: ours, once.
    let w = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let w = w.into_vec::<u64>().unwrap_err();
    let w = w.reclaim::<Vec<u64>>().unwrap_err();
    let t: ManagedTensor = w.reclaim().map_err(|_| ()).unwrap();
    assert!(
        t.is_read_only(),
        "the reclaimed inner owner is still restricted"
    );
    let t = t.into_vec::<u64>().unwrap_err();
    let t = t.reclaim::<Vec<u64>>().unwrap_err();
    // Made read-only again by an outer owner: still nothing is given.
    let w = ManagedTensor::export(t).unwrap().into_read_only();
    let w = ManagedTensor::export_raw(w).unwrap();
    // SAFETY: ours, once.
    let w = unsafe { ManagedTensor::from_raw(w.as_ptr()) }.unwrap();
    let w = w.into_vec::<u64>().unwrap_err();
    drop(w);

    // A writable chain gives the innermost Vec through any number of wrappers and header kinds.
    let data: Vec<u64> = vec![7, 8, 9];
    let ptr = data.as_ptr();
    let mut t = ManagedTensor::export_legacy(data).unwrap();
    for i in 0..6 {
        t = if i % 2 == 0 {
            ManagedTensor::export(t).unwrap()
        } else {
            let raw = ManagedTensor::export_raw_legacy(t).unwrap();
            // SAFETY: ours, once.
            unsafe { ManagedTensor::from_raw_legacy(raw.as_ptr()) }.unwrap()
        };
    }
    let v = t.into_vec::<u64>().unwrap();
    assert_eq!((v.as_ptr(), &v[..]), (ptr, &[7, 8, 9][..]));
    let _ = address;
}

#[test]
fn into_raw_legacy_of_a_read_only_tensor_gives_it_back() {
    let drops = Arc::new(AtomicUsize::new(0));
    let p = Aligned4096 {
        data: vec![1, 2],
        read_only: false,
        counter: DropCounter {
            drops: drops.clone(),
            panic_in_drop: false,
        },
    };
    let t = ManagedTensor::export(p).unwrap().into_read_only();
    let refused = t.into_raw_legacy().unwrap_err();
    assert_eq!(refused.error, Error::LegacyReadOnly);
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    assert_eq!(refused.value.to_vec::<u8>().unwrap(), [1, 2]);
    drop(refused);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

// --- descriptions the export constructor must refuse or accept --------------------------------

#[test]
fn byte_offsets_that_are_not_multiples_of_the_element_size() {
    struct Off {
        data: Vec<u32>,
        shape: [usize; 1],
        offset: u64,
    }
    // SAFETY: describe_buffer names the Vec's allocation, so export checks the layout.
    unsafe impl Export for Off {
        const GIVES_VEC: bool = true;
        fn ndim(&self) -> usize {
            1
        }
        fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
            dlpack_core::__private::describe_buffer(
                &mut self.data,
                &self.shape,
                None::<&[i64; 1]>,
                self.offset,
                shape,
                strides,
            )
        }
        fn give_vec(&mut self, slot: &mut dyn std::any::Any) {
            dlpack_core::__private::give_vec_of_buffer(&mut self.data, slot)
        }
    }
    let t = ManagedTensor::export(Off {
        data: vec![0x0403_0201, 0x0807_0605, 0x0c0b_0a09, 0x100f_0e0d],
        shape: [3],
        offset: 1,
    })
    .unwrap();
    assert!(matches!(t.view::<u32>(), Err(Error::Misaligned { .. })));
    assert!(matches!(t.to_vec::<u32>(), Err(Error::Misaligned { .. })));
    let t = t.into_vec::<u32>().unwrap_err();
    let mut t = ManagedTensor::export(t).unwrap();
    assert!(matches!(t.view_mut::<u32>(), Err(Error::Misaligned { .. })));
    assert_eq!(t.byte_span().len(), 12);
    // One byte too far.
    let err = ManagedTensor::export(Off {
        data: vec![0; 4],
        shape: [4],
        offset: 1,
    })
    .unwrap_err()
    .error;
    assert!(matches!(err, Error::SpanOutsideAllocation { .. }), "{err}");
}

// --- derive: misbehaving safe Dims ------------------------------------------------------------

#[cfg(feature = "derive")]
mod derive {
    use super::*;
    use dlpack_core::{CheckedTensor, DLPack, Dims};
    use std::cell::Cell;

    /// A dims list whose answers change on every call (a safe trait: anything goes).
    #[derive(Default)]
    pub(crate) struct Flaky {
        pub(crate) calls: Cell<usize>,
        pub(crate) ndim_calls: Cell<usize>,
        pub(crate) write_calls: Cell<usize>,
        pub(crate) ndims: Vec<usize>,
        pub(crate) values: Vec<Vec<i64>>,
        pub(crate) panic_at_call: Option<usize>,
    }

    impl Flaky {
        fn tick(&self) -> usize {
            let n = self.calls.get();
            self.calls.set(n + 1);
            if self.panic_at_call == Some(n) {
                panic!("Flaky dims panic at call {n}");
            }
            n
        }
    }

    impl Dims for Flaky {
        fn ndim(&self) -> usize {
            self.tick();
            let n = self.ndim_calls.get();
            self.ndim_calls.set(n + 1);
            self.ndims[n % self.ndims.len()]
        }
        fn write_dims(&self, out: &mut [i64]) {
            self.tick();
            let n = self.write_calls.get();
            self.write_calls.set(n + 1);
            let v = &self.values[n % self.values.len()];
            for (i, o) in out.iter_mut().enumerate() {
                *o = v[i % v.len()];
            }
        }
        fn from_dims(_: &[i64]) -> Result<Self, Error> {
            Err(Error::NdimMismatch {
                found: 0,
                expected: 0,
            })
        }
    }

    #[derive(DLPack)]
    #[dlpack(export_only)]
    pub(crate) struct FlakyTensor {
        #[dlpack(data)]
        pub(crate) data: Vec<i32>,
        #[dlpack(shape)]
        pub(crate) shape: Flaky,
        #[dlpack(strides)]
        pub(crate) strides: Flaky,
        // Counts the struct's drop; never read.
        pub(crate) _counter: DropCounter,
    }

    fn flaky(ndims: Vec<usize>, values: Vec<Vec<i64>>) -> Flaky {
        Flaky {
            calls: Cell::new(0),
            ndim_calls: Cell::new(0),
            write_calls: Cell::new(0),
            ndims,
            values,
            panic_at_call: None,
        }
    }

    /// Every reached element lies inside the buffer, or the export was refused.
    fn check_sound(t: &ManagedTensor, buffer: core::ops::Range<usize>) {
        if t.is_empty() {
            return;
        }
        let span = t.byte_span();
        assert!(
            buffer.start <= span.start && span.end <= buffer.end,
            "span {span:?} outside buffer {buffer:?}; shape {:?} strides {:?}",
            t.shape(),
            t.strides()
        );
        let _ = t.to_vec::<i32>().unwrap();
    }

    #[test]
    fn flaky_dims_never_describe_memory_outside_the_buffer() {
        let shapes: Vec<Vec<i64>> = vec![
            vec![2, 3],
            vec![6],
            vec![100, 100],
            vec![1, 1, 1],
            vec![0, 1_000_000],
            vec![-1, 5],
            vec![i64::MAX, 2],
        ];
        let strides: Vec<Vec<i64>> = vec![
            vec![3, 1],
            vec![1],
            vec![1000, 1],
            vec![0],
            vec![-1, -1],
            vec![i64::MIN, 1],
        ];
        let mut accepted = 0;
        for a in 1..4usize {
            for b in 1..4usize {
                for rot in 0..shapes.len() {
                    let mut sh = shapes.clone();
                    sh.rotate_left(rot);
                    let mut st = strides.clone();
                    st.rotate_left(rot % strides.len());
                    let drops = Arc::new(AtomicUsize::new(0));
                    let p = FlakyTensor {
                        data: (0..6).collect(),
                        shape: flaky(vec![a, b, a + b - 1], sh),
                        strides: flaky(vec![b, a, 2], st),
                        _counter: DropCounter {
                            drops: drops.clone(),
                            panic_in_drop: false,
                        },
                    };
                    let buffer = {
                        let s = p.data.as_ptr().addr();
                        s..s + 24
                    };
                    if let Ok(t) = ManagedTensor::export(p) {
                        accepted += 1;
                        check_sound(&t, buffer.clone());
                        // And through a wrapper and a trip through C.
                        let w = ManagedTensor::export(t).unwrap();
                        let raw = w.into_raw_legacy().unwrap();
                        // SAFETY: ours, once.
                        let w = unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap();
                        check_sound(&w, buffer);
                        let len = w.len();
                        match w.into_vec::<i32>() {
                            Ok(v) => assert_eq!(
                                v.len(),
                                len,
                                "into_vec gave a Vec of another length than the tensor's"
                            ),
                            Err(w) => drop(w),
                        }
                    }
                    assert_eq!(drops.load(Ordering::SeqCst), 1);
                }
            }
        }
        assert!(accepted > 0);
    }

    #[test]
    fn into_vec_gives_exactly_the_tensors_elements_even_when_dims_change_their_answer() {
        // describe sees shape [2] (a valid 2-element prefix of the 6-element Vec); give_vec then
        // sees [6] and hands over the whole Vec.
        let p = FlakyTensor {
            data: (0..6).collect(),
            shape: flaky(vec![1], vec![vec![2], vec![6]]),
            strides: flaky(vec![1], vec![vec![1]]),
            _counter: DropCounter {
                drops: Arc::new(AtomicUsize::new(0)),
                panic_in_drop: false,
            },
        };
        let t = ManagedTensor::export(p).unwrap();
        assert_eq!(t.shape(), &[2]);
        let len = t.len();
        if let Ok(v) = t.into_vec::<i32>() {
            assert_eq!(
                v.len(),
                len,
                "into_vec returned {v:?} for a tensor of {len} elements"
            );
        }
    }

    #[test]
    fn dims_that_panic_anywhere_drop_the_producer_once_and_free_the_block() {
        // Calls on the shape: check (strides present) 0, ndim 1, describe's write 2, ...
        for at in 0..8 {
            let drops = Arc::new(AtomicUsize::new(0));
            let mut shape = flaky(vec![1], vec![vec![6]]);
            shape.panic_at_call = Some(at);
            let p = FlakyTensor {
                data: (0..6).collect(),
                shape,
                strides: flaky(vec![1], vec![vec![1]]),
                _counter: DropCounter {
                    drops: drops.clone(),
                    panic_in_drop: false,
                },
            };
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                let t = ManagedTensor::export(p).map_err(|_| ())?;
                let w = ManagedTensor::export(t).map_err(|_| ())?;
                w.into_vec::<i32>().map(drop).map_err(drop)
            }));
            drop(r);
            assert_eq!(drops.load(Ordering::SeqCst), 1, "panic at call {at}");
        }
    }

    /// A buffer whose elements are inline (the Buffer contract allows it: valid while the value
    /// lives and is not moved).
    pub(crate) struct InlineBuf {
        elems: [f64; 4],
    }

    // SAFETY: the array is inside the value; valid while it lives and does not move; never gives a
    // Vec (GIVES_VEC false).
    unsafe impl Buffer for InlineBuf {
        type Elem = f64;
        fn as_mut_ptr(&mut self) -> *mut f64 {
            self.elems.as_mut_ptr()
        }
        fn len(&self) -> usize {
            4
        }
        fn device(&self) -> Device {
            // Reads the value (a shared borrow of the buffer) after as_mut_ptr.
            let _ = self.elems[0];
            Device::CPU
        }
        fn is_read_only(&self) -> bool {
            let _ = self.elems[3];
            false
        }
        fn copy_from_tensor(t: &CheckedTensor) -> Result<Self, Error> {
            let v = t.to_vec::<f64>()?;
            Ok(InlineBuf {
                elems: v.try_into().map_err(|_| Error::NdimMismatch {
                    found: 0,
                    expected: 4,
                })?,
            })
        }
    }

    #[derive(DLPack)]
    pub(crate) struct InlineTensor {
        #[dlpack(data)]
        data: InlineBuf,
        #[dlpack(shape)]
        shape: [usize; 2],
        #[dlpack(strides)]
        strides: [isize; 2],
        #[dlpack(byte_offset)]
        offset: u8,
    }

    #[test]
    fn a_derived_tensor_over_an_inline_buffer_is_written_in_place_and_reclaimed() {
        let p = InlineTensor {
            data: InlineBuf {
                elems: [1.0, 2.0, 3.0, 4.0],
            },
            shape: [2, 2],
            strides: [1, 2], // column-major
            offset: 0,
        };
        let mut t = ManagedTensor::export(p).unwrap();
        for x in t.view_mut::<f64>().unwrap().iter_mut() {
            *x = -*x;
        }
        assert_eq!(t.to_vec::<f64>().unwrap(), [-1.0, -3.0, -2.0, -4.0]);
        let t = t.into_vec::<f64>().unwrap_err();
        let raw = t.into_raw_legacy().unwrap();
        // SAFETY: ours, once.
        let mut t = unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap();
        t.view_mut::<f64>()
            .unwrap()
            .iter_mut()
            .for_each(|x| *x *= 2.0);
        // Through the legacy wrapper, TryFrom cannot reclaim: it copies, row-major.
        let back = InlineTensor::try_from(t).unwrap();
        assert_eq!(back.data.elems, [-2.0, -6.0, -4.0, -8.0]);
        assert_eq!(back.strides, [2, 1]);
        // And a byte offset of one element, read through a view.
        let p = InlineTensor {
            offset: 8,
            shape: [1, 3],
            strides: [0, 1],
            ..back
        };
        let t = ManagedTensor::export(p).unwrap();
        assert_eq!(t.to_vec::<f64>().unwrap(), [-6.0, -4.0, -8.0]);
    }

    #[derive(DLPack)]
    pub(crate) struct Dyn {
        #[dlpack(data)]
        data: Vec<u8>,
        #[dlpack(shape)]
        shape: Vec<usize>,
    }

    #[test]
    fn derived_shapes_at_max_ndim_and_beyond_and_with_values_beyond_i64() {
        let n = dlpack_core::MAX_NDIM;
        let t = ManagedTensor::export(Dyn {
            data: vec![42],
            shape: vec![1; n],
        })
        .unwrap();
        let t = ManagedTensor::export_legacy(t).unwrap();
        assert_eq!(t.into_vec::<u8>().unwrap(), [42]);
        let err = ManagedTensor::export(Dyn {
            data: vec![42],
            shape: vec![1; n + 1],
        })
        .unwrap_err()
        .error;
        assert!(matches!(err, Error::BadNdim { .. }), "{err}");
        // A size beyond i64 with a zero-size axis: exported as i64::MAX (documented).
        let t = ManagedTensor::export(Dyn {
            data: vec![],
            shape: vec![usize::MAX, 0],
        })
        .unwrap();
        assert_eq!(t.shape(), &[i64::MAX, 0]);
        assert_eq!(t.into_vec::<u8>().unwrap(), Vec::<u8>::new());
        // Without one: refused, never a wrapped size.
        let err = ManagedTensor::export(Dyn {
            data: vec![1; 4],
            shape: vec![usize::MAX, 1],
        })
        .unwrap_err()
        .error;
        assert!(
            matches!(
                err,
                Error::SpanOutsideAllocation { .. } | Error::Overflow { .. }
            ),
            "{err}"
        );
    }
}

// --- threads -----------------------------------------------------------------------------------

#[test]
fn wrappers_built_and_dropped_on_many_threads_delete_once_each() {
    let drops = Arc::new(AtomicUsize::new(0));
    let n = if cfg!(miri) { 3 } else { 32 };
    let tensors: Vec<ManagedTensor> = (0..n)
        .map(|i| {
            let t = ManagedTensor::export(Panicky {
                data: vec![i; 3],
                at: "",
                _counter: DropCounter {
                    drops: drops.clone(),
                    panic_in_drop: false,
                },
            })
            .unwrap();
            ManagedTensor::export_legacy(t).unwrap()
        })
        .collect();
    let handles: Vec<_> = tensors
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            std::thread::spawn(move || {
                let t = ManagedTensor::export(t).unwrap();
                if i % 2 == 0 {
                    let v = t.into_vec::<i32>().unwrap();
                    assert_eq!(v, [i as i32; 3]);
                } else {
                    drop(t);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(drops.load(Ordering::SeqCst), n as usize);
}

#[test]
fn the_dtype_flags_and_device_of_a_wrapper_are_the_inner_tensors() {
    let t = ManagedTensor::export(Arc::<[i8]>::from(vec![1, 2])).unwrap();
    let w = ManagedTensor::export(t).unwrap();
    assert_eq!(w.dtype(), DataType::I8);
    assert_eq!(w.device(), Device::CPU);
    assert!(w.flags().contains(Flags::READ_ONLY));
    assert_eq!(w.version(), dlpack_core::Version::CURRENT);
    let _ = <i8 as Element>::DTYPE;
}
