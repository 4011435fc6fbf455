//! Memory: device allocations the host cannot reach, pinned and managed host memory, frees in
//! stream order, and the copies and memsets between them (`cuMem*`).

use core::ffi::{c_uint, c_void};
use std::alloc::{self, Layout};
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY;
use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream};

use crate::entry::{Outcome, Refusal, entry, invalid, put, refuse, refuse_later};
use crate::state::{State, state};
use crate::streams::Work;

/// Alignment and spacing of device allocations (the real driver aligns to at least 256).
const DEVICE_ALIGN: usize = 512;
/// Alignment of pinned and managed allocations (a page, as the real driver gives).
const HOST_ALIGN: usize = 4096;
/// The sizes tried, largest first, for the address range reserved for device memory (address
/// space only; valgrind, for one, grants less than 64 GiB).
const DEVICE_RANGES: [usize; 4] = [1 << 36, 1 << 34, 1 << 32, 1 << 30];
/// The largest single allocation this library makes.
const MAX_ALLOCATION: usize = 1 << 32;

/// Memory that backs an allocation: a zero-copy home for its bytes, freed when the last user
/// (the allocation table or a queued copy) lets go.
pub(crate) struct Backing {
    ptr: NonNull<u8>,
    layout: Layout,
    /// Freed by the program: set when `cuMemFree` is called, or when the freeing stream reaches
    /// a `cuMemFreeAsync`. Work that reaches the bytes after that is refused (a use after free
    /// that the real driver would let corrupt reused memory).
    freed: AtomicBool,
}

// SAFETY: the bytes are plain memory; who writes when is ordered by the streams, as on a GPU.
unsafe impl Send for Backing {}
// SAFETY: as above.
unsafe impl Sync for Backing {}

impl Backing {
    fn new(size: usize, align: usize) -> Result<Arc<Backing>, Refusal> {
        let layout = Layout::from_size_align(size.max(1), align)
            .map_err(|_| refuse(CUDA_ERROR_OUT_OF_MEMORY, format!("{size} bytes")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc::alloc(layout) })
            .ok_or_else(|| refuse(CUDA_ERROR_OUT_OF_MEMORY, format!("{size} bytes")))?;
        // SAFETY: freshly allocated for `layout.size()` bytes. Not zeros: code that reads memory
        // it never wrote sees 0xA5 bytes.
        unsafe { ptr.as_ptr().write_bytes(0xa5, layout.size()) };
        Ok(Arc::new(Backing {
            ptr,
            layout,
            freed: AtomicBool::new(false),
        }))
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// Device memory: its address is in the reserved range, its bytes in the backing.
    Device,
    /// Pinned host memory: its address is its backing's.
    Pinned,
    /// Managed memory: its address is its backing's.
    Managed,
}

pub(crate) struct Allocation {
    pub(crate) kind: Kind,
    pub(crate) ordinal: i32,
    pub(crate) size: usize,
    backing: Arc<Backing>,
}

/// Bytes an operation reads or writes: inside an allocation, or caller-owned host memory.
#[derive(Clone)]
pub(crate) enum Place {
    /// `offset` bytes into an allocation's backing (kept alive by the queued operation).
    Memory(Arc<Backing>, usize),
    /// Pageable host memory the caller owns.
    Host(usize),
}

impl Place {
    pub(crate) fn is_freed(&self) -> bool {
        matches!(self, Place::Memory(backing, _) if backing.freed.load(Ordering::Acquire))
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        match self {
            // SAFETY: the offset lies inside the backing (checked when the place was found).
            Place::Memory(backing, offset) => unsafe { backing.ptr.as_ptr().add(*offset) },
            Place::Host(address) => ptr::with_exposed_provenance_mut(*address),
        }
    }
}

/// The allocation table: lookups, reserving device addresses, allocating and freeing.
impl State {
    /// The allocation holding `address`, and its first address.
    pub(crate) fn allocation_at(&self, address: usize) -> Option<(usize, &Allocation)> {
        let (&start, allocation) = self.allocations.range(..=address).next_back()?;
        (address - start < allocation.size).then_some((start, allocation))
    }

    /// The place of `len` bytes at `address`, which must lie inside one live allocation.
    fn memory(&self, address: CUdeviceptr, len: usize) -> Result<Place, Refusal> {
        let address = address as usize;
        let (start, allocation) = self.allocation_at(address).ok_or_else(|| {
            invalid(format!(
                "{address:#x} is not inside a live allocation of this driver"
            ))
        })?;
        let offset = address - start;
        if len > allocation.size - offset {
            return Err(invalid(format!(
                "{len} bytes at {address:#x} run past the end of the {}-byte allocation at {start:#x}",
                allocation.size
            )));
        }
        Ok(Place::Memory(allocation.backing.clone(), offset))
    }

    /// The place of `address` in device or managed memory, and the bytes from it to the end of
    /// its allocation (what a kernel argument may reach).
    pub(crate) fn reach(&self, address: CUdeviceptr) -> Result<(Place, usize), Refusal> {
        let at = address as usize;
        let rest = match self.allocation_at(at) {
            Some((start, allocation)) if allocation.kind != Kind::Pinned => {
                allocation.size - (at - start)
            }
            Some(_) => {
                return Err(invalid(format!(
                    "{at:#x} is pinned host memory, passed to a kernel"
                )));
            }
            None => {
                return Err(invalid(format!(
                    "{at:#x} is not inside a live allocation of this driver"
                )));
            }
        };
        Ok((self.memory(address, rest)?, rest))
    }

    /// Host memory at `address`: inside a pinned or managed allocation (`Some`, reached in
    /// stream order), or pageable memory the caller owns (`None`).
    fn host(&self, address: usize, len: usize) -> Result<Option<Place>, Refusal> {
        match self.allocation_at(address) {
            Some((_, allocation)) if allocation.kind == Kind::Device => Err(invalid(format!(
                "{address:#x} is device memory, passed as a host pointer"
            ))),
            Some(_) => self.memory(address as CUdeviceptr, len).map(Some),
            None if (self.device_range.0..self.device_range.1).contains(&address) => {
                Err(invalid(format!(
                    "{address:#x} is in the device address range but no live allocation (freed device memory?), passed as a host pointer"
                )))
            }
            None => Ok(None),
        }
    }

    /// Reserves device addresses for `size` bytes.
    fn device_address(&mut self, size: usize) -> Result<usize, Refusal> {
        if self.device_range.0 == 0 {
            let reserved = DEVICE_RANGES.iter().find_map(|&size| {
                // SAFETY: an anonymous private mapping with no access rights: address space only.
                let base = unsafe {
                    libc::mmap(
                        ptr::null_mut(),
                        size,
                        libc::PROT_NONE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                (base != libc::MAP_FAILED).then(|| (base.addr(), size))
            });
            let (base, size) = reserved.ok_or_else(|| {
                refuse(
                    CUDA_ERROR_OUT_OF_MEMORY,
                    "cannot reserve an address range for device memory",
                )
            })?;
            self.device_range = (base, base + size);
            self.next_device_address = base.next_multiple_of(DEVICE_ALIGN);
        }
        let address = self.next_device_address;
        // One spare block after each allocation, so that a read past its end finds nothing.
        let next = size
            .checked_next_multiple_of(DEVICE_ALIGN)
            .and_then(|s| address.checked_add(s + DEVICE_ALIGN))
            .filter(|&next| next <= self.device_range.1)
            .ok_or_else(|| refuse(CUDA_ERROR_OUT_OF_MEMORY, "device address range used up"))?;
        self.next_device_address = next;
        Ok(address)
    }

    /// Allocates `size` bytes of `kind` on device `ordinal` (`None`: the current context's).
    fn allocate(
        &mut self,
        kind: Kind,
        size: usize,
        ordinal: Option<i32>,
    ) -> Result<usize, Refusal> {
        if size == 0 {
            return Err(invalid("an allocation of 0 bytes"));
        }
        if size > MAX_ALLOCATION {
            return Err(refuse(
                CUDA_ERROR_OUT_OF_MEMORY,
                format!("{size} bytes is more than this test driver allocates"),
            ));
        }
        let ordinal = match ordinal {
            Some(ordinal) => ordinal,
            None => self.current()? as i32,
        };
        let (backing, address) = match kind {
            Kind::Device => (Backing::new(size, 16)?, self.device_address(size)?),
            Kind::Pinned | Kind::Managed => {
                let backing = Backing::new(size, HOST_ALIGN)?;
                let address = backing.ptr.as_ptr().expose_provenance();
                (backing, address)
            }
        };
        self.allocations.insert(
            address,
            Allocation {
                kind,
                ordinal,
                size,
                backing,
            },
        );
        Ok(address)
    }

    /// Takes the allocation at `address` out of the table: the address is invalid for any
    /// later call. Its bytes stay until work queued earlier lets go of them; `freed` is for the
    /// caller to set, now or in stream order.
    fn free(&mut self, address: usize, kinds: &[Kind]) -> Result<Arc<Backing>, Refusal> {
        match self.allocations.get(&address) {
            Some(allocation) if kinds.contains(&allocation.kind) => {
                let allocation = self.allocations.remove(&address).expect("just found");
                Ok(allocation.backing)
            }
            Some(allocation) => Err(invalid(format!(
                "{address:#x} is {:?} memory, freed with the call for {kinds:?} memory",
                allocation.kind
            ))),
            None => Err(invalid(format!(
                "{address:#x} is not the start of a live allocation (freed twice, or never allocated)"
            ))),
        }
    }
}

/// The work of copying `len` bytes from `src` to `dst`, for a stream.
fn copy_work(src: Place, dst: Place, len: usize) -> Work {
    Box::new(move || {
        if src.is_freed() || dst.is_freed() {
            refuse_later(&format!(
                "a copy of {len} bytes reached memory freed before the stream got to it"
            ));
            return;
        }
        // SAFETY: both places hold `len` bytes (checked when they were found; pageable host
        // memory by the caller's contract); allocations are kept alive by the places.
        unsafe { ptr::copy(src.ptr(), dst.ptr(), len) };
    })
}

/// Allocates `bytes` of `kind` on device `ordinal` (`None`: the current context's) and writes
/// what `value` makes of its address through `out`.
/// Nothing is allocated when `out` is NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn allocate_into<T>(
    kind: Kind,
    bytes: usize,
    ordinal: Option<i32>,
    out: *mut T,
    value: impl FnOnce(usize) -> T,
) -> Outcome {
    if out.is_null() {
        return Err(invalid("a NULL output pointer"));
    }
    let at = state()?.allocate(kind, bytes, ordinal)?;
    // SAFETY: `out` is not NULL, and valid for a write (the caller's contract).
    unsafe { put(out, value(at)) }
}

/// `cuMemAlloc_v2`: device memory of the current context's device.
///
/// # Safety
/// `address` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(address: *mut CUdeviceptr, bytes: usize) -> CUresult {
    entry("cuMemAlloc_v2", || {
        // SAFETY: the caller's contract.
        unsafe { allocate_into(Kind::Device, bytes, None, address, |at| at as CUdeviceptr) }
    })
}

/// `cuMemAllocAsync`: device memory of the stream's device, usable at once (stream order is
/// kept by the caller).
///
/// # Safety
/// `address` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(
    address: *mut CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    entry("cuMemAllocAsync", || {
        // From the pool of the stream's device.
        let ordinal = {
            let mut state = state()?;
            if !state.memory_pools {
                return Err(refuse(
                    CUresult::CUDA_ERROR_NOT_SUPPORTED,
                    "memory pools are switched off (DLPACK_CUDA_TEST_DRIVER_POOLS=0)",
                ));
            }
            state.stream(stream)?.ordinal
        };
        // SAFETY: the caller's contract.
        unsafe {
            allocate_into(Kind::Device, bytes, Some(ordinal), address, |at| {
                at as CUdeviceptr
            })
        }
    })
}

/// `cuMemAllocManaged` (flags `CU_MEM_ATTACH_GLOBAL` or `CU_MEM_ATTACH_HOST`).
///
/// # Safety
/// `address` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    address: *mut CUdeviceptr,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    entry("cuMemAllocManaged", || {
        if flags != 1 && flags != 2 {
            return Err(invalid(format!("managed memory flags {flags}")));
        }
        // SAFETY: the caller's contract.
        unsafe { allocate_into(Kind::Managed, bytes, None, address, |at| at as CUdeviceptr) }
    })
}

/// `cuMemHostAlloc`: pinned host memory.
///
/// # Safety
/// `address` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(
    address: *mut *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    entry("cuMemHostAlloc", || {
        if flags & !0x7 != 0 {
            return Err(invalid(format!("host allocation flags {flags:#x}")));
        }
        // SAFETY: the caller's contract. The address is the backing's, whose provenance
        // `allocate` exposed.
        unsafe {
            allocate_into(
                Kind::Pinned,
                bytes,
                None,
                address,
                ptr::with_exposed_provenance_mut,
            )
        }
    })
}

/// `cuMemFree_v2`: device or managed memory.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(address: CUdeviceptr) -> CUresult {
    entry("cuMemFree_v2", || {
        let backing = state()?.free(address as usize, &[Kind::Device, Kind::Managed])?;
        backing.freed.store(true, Ordering::Release);
        Ok(())
    })
}

/// `cuMemFreeAsync`: the address is invalid for later calls at once, and the bytes are freed
/// when the stream gets to the free: work of other streams that reaches them after that is
/// refused.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeAsync(address: CUdeviceptr, stream: CUstream) -> CUresult {
    entry("cuMemFreeAsync", || {
        let mut state = state()?;
        let stream = state.stream(stream)?;
        let backing = state.free(address as usize, &[Kind::Device])?;
        state.queue(
            &stream,
            Box::new(move || backing.freed.store(true, Ordering::Release)),
        )
    })
}

/// `cuMemFreeHost`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeHost(address: *mut c_void) -> CUresult {
    entry("cuMemFreeHost", || {
        let backing = state()?.free(address.addr(), &[Kind::Pinned])?;
        backing.freed.store(true, Ordering::Release);
        Ok(())
    })
}

/// `cuMemsetD8Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8Async(
    address: CUdeviceptr,
    value: u8,
    count: usize,
    stream: CUstream,
) -> CUresult {
    entry("cuMemsetD8Async", || {
        let mut state = state()?;
        let (stream, place) = (state.stream(stream)?, state.memory(address, count)?);
        state.queue(
            &stream,
            Box::new(move || {
                if place.is_freed() {
                    refuse_later(&format!(
                        "a memset of {count} bytes reached memory freed before the stream got to it"
                    ));
                    return;
                }
                // SAFETY: the place holds `count` bytes (checked above) and is kept alive here.
                unsafe { place.ptr().write_bytes(value, count) }
            }),
        )
    })
}

/// `cuMemcpyHtoDAsync_v2`. From pageable memory the bytes are read now (the real driver stages
/// them before it returns); from pinned or managed memory, in stream order.
///
/// # Safety
/// `src` is valid for reads of `bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    entry("cuMemcpyHtoDAsync_v2", || {
        let mut state = state()?;
        let stream = state.stream(stream)?;
        if bytes == 0 {
            return Ok(());
        }
        let to = state.memory(dst, bytes)?;
        let from = match state.host(src.addr(), bytes)? {
            Some(place) => place,
            None => {
                let staged = Backing::new(bytes, 16)?;
                // SAFETY: `staged` holds `bytes` bytes; the source too (the caller's contract).
                unsafe { ptr::copy_nonoverlapping(src.cast::<u8>(), staged.ptr.as_ptr(), bytes) };
                Place::Memory(staged, 0)
            }
        };
        state.queue(&stream, copy_work(from, to, bytes))
    })
}

/// `cuMemcpyDtoHAsync_v2`. To pageable memory it returns when the copy is done (as the real
/// driver does); to pinned or managed memory it is queued.
///
/// # Safety
/// `dst` is valid for writes of `bytes` bytes until the copy is done.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    entry("cuMemcpyDtoHAsync_v2", || {
        let mut state = state()?;
        let stream = state.stream(stream)?;
        if bytes == 0 {
            return Ok(());
        }
        let from = state.memory(src, bytes)?;
        let (to, pageable) = match state.host(dst.addr(), bytes)? {
            Some(place) => (place, false),
            None => (Place::Host(dst.expose_provenance()), true),
        };
        state.queue(&stream, copy_work(from, to, bytes))?;
        drop(state);
        if pageable { stream.finish() } else { Ok(()) }
    })
}

/// `cuMemcpyDtoDAsync_v2`: both ranges inside live allocations, not overlapping.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    entry("cuMemcpyDtoDAsync_v2", || {
        state()?.stream(stream)?;
        if bytes == 0 {
            return Ok(());
        }
        let (dst_end, src_end) = (
            dst.saturating_add(bytes as u64),
            src.saturating_add(bytes as u64),
        );
        if dst < src_end && src < dst_end {
            return Err(invalid(format!(
                "overlapping copy of {bytes} bytes from {src:#x} to {dst:#x}"
            )));
        }
        let mut state = state()?;
        let stream = state.stream(stream)?;
        let from = state.memory(src, bytes)?;
        let to = state.memory(dst, bytes)?;
        state.queue(&stream, copy_work(from, to, bytes))
    })
}
