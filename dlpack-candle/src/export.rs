//! Export: a candle CPU tensor as a read-only DLPack tensor on the same memory.

use core::ffi::c_void;
use core::fmt;
use core::mem::ManuallyDrop;

use candle_core::{CpuStorage, DeviceLocation, Storage, StorageRef, Tensor};
use dlpack_core::{DataType, Device, Export, ExportDesc, Flags, ManagedTensor};

use crate::{CandleError, dlpack_dtype};

/// Exports a candle CPU tensor without a copy: the DLPack tensor reads candle's own storage,
/// with the tensor's shape, strides and offset, and is flagged read-only.
///
/// The managed tensor keeps a clone of the candle tensor (and so its storage) alive, and holds
/// a read lock on that storage until it is dropped: see [`CandleExport`] for what that means
/// for candle's in-place writers.
///
/// ```
/// use candle_core::{Device, IndexOp, Tensor};
///
/// let t = Tensor::arange(0f32, 12., &Device::Cpu)?.reshape((3, 4))?;
/// let cols = t.i((.., 1..3))?.t()?; // a strided, offset view of the same storage
/// let dl = dlpack_candle::export(&cols)?;
/// assert_eq!((dl.shape(), dl.strides(), dl.byte_offset()), (&[2i64, 3][..], &[1i64, 4][..], 4));
/// assert!(dl.is_read_only());
/// let view = dl.view::<f32>()?;
/// assert_eq!(view.get(&[1, 2]), Some(&10.0)); // t[2, 2]
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`CandleError::Device`] for a tensor that is not on the CPU, [`CandleError::CandleDType`]
/// for a dtype DLPack cannot carry, [`CandleError::DLPack`] for a layout the export refuses.
pub fn export(tensor: &Tensor) -> Result<ManagedTensor, CandleError> {
    Ok(ManagedTensor::export(CandleExport::new(tensor)?)?)
}

/// A candle CPU tensor held for export: the DLPack producer behind [`export`].
///
/// It holds a clone of the tensor and a read lock on its storage.
///
/// # Why the memory stays valid and unchanged
///
/// candle's CPU storage is an `Arc<RwLock<Storage>>` owning a `Vec` per dtype. The clone keeps
/// the storage alive. Every write to a storage goes through its write lock: candle's in-place
/// operations (`slice_set`, `const_set`/`zero_set`/`one_set`, `scatter_set`,
/// `scatter_add_set`, `Var::set`) and user-defined in-place ops (`InplaceOp1`/`2`/`3`), which
/// receive `&mut CpuStorage` and may even replace or grow its `Vec`, freeing the memory an
/// exported pointer would read. Holding the read lock for the export's whole life therefore
/// keeps the memory both allocated and unmodified, which is what a consumer of a `READ_ONLY`
/// DLPack tensor (or of a Rust view over it) relies on.
///
/// # Writers wait while an export lives
///
/// While any export of a storage lives, candle's in-place writers on that storage block until
/// it is dropped. A thread that holds an export (or a view made from it) and then writes to the
/// same candle tensor waits forever. Drop the export first; or, to keep both, export a copy
/// (`tensor.copy()?`). Reading candle tensors, and every candle operation that makes a new
/// tensor, go on as usual.
///
/// Exporting takes the read lock the way candle's `storage_and_layout` does, and the lock is
/// fair: once a writer waits, a new export of the same storage (of the tensor, or of any view
/// of it) waits behind the writer. So a thread that holds an export and exports the same
/// storage again, while another thread waits to write it, blocks, and so does the writer, for
/// ever. Make every export of a storage before writers may start on it, or export copies.
///
/// A [`ManagedTensor`] exported from a candle tensor comes back as that very tensor (same
/// storage, same layout) through [`import`](crate::import), or through
/// `managed.reclaim::<CandleExport>()` and [`CandleExport::into_tensor`].
pub struct CandleExport {
    locked: Locked,
    /// The storage `Vec`'s buffer and its length in bytes.
    data: *const c_void,
    bytes: usize,
    dtype: DataType,
    byte_offset: u64,
}

/// A tensor and a read lock on its storage; dropping it releases the lock, then the tensor.
struct Locked {
    /// Declared `'static`, but it borrows the `RwLock` inside `tensor`'s storage `Arc`: it is
    /// always released before `tensor` is dropped.
    storage: ManuallyDrop<StorageRef<'static>>,
    tensor: ManuallyDrop<Tensor>,
}

impl Locked {
    /// Releases the lock and gives the tensor back.
    fn into_tensor(self) -> Tensor {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used again and its `Drop` does not run, so each field is
        // dropped or moved out exactly once; the guard is dropped (unlocking) while the tensor
        // that owns the lock is still alive.
        unsafe {
            ManuallyDrop::drop(&mut this.storage);
            ManuallyDrop::take(&mut this.tensor)
        }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // SAFETY: dropped once, here; the guard goes first, while the tensor that owns the lock
        // is still alive.
        unsafe {
            ManuallyDrop::drop(&mut self.storage);
            ManuallyDrop::drop(&mut self.tensor);
        }
    }
}

// SAFETY: `Tensor` is `Send`. The read guard is `!Send` only because parking_lot marks its
// guards so (for its optional deadlock detector's per-thread bookkeeping): releasing a shared
// lock is an atomic decrement that is valid from any thread, which is why parking_lot's
// `send_guard` feature makes the same guard `Send` with the same lock code. With the deadlock
// detector enabled instead, a release on another thread only leaves a stale entry in the
// detector's list (`release_resource` ignores a key it does not find): no memory is touched
// wrongly. The data pointer is the address of a `Vec` buffer that the lock keeps allocated and
// unmodified; candle's storage is `Sync`, so reading it from any thread is race-free.
unsafe impl Send for CandleExport {}

impl CandleExport {
    /// Locks `tensor`'s storage for reading and describes it.
    ///
    /// # Errors
    ///
    /// As for [`export`].
    pub fn new(tensor: &Tensor) -> Result<Self, CandleError> {
        let location = tensor.device().location();
        if location != DeviceLocation::Cpu {
            return Err(CandleError::Device { location });
        }
        let dtype = dlpack_dtype(tensor.dtype())?;
        let tensor = tensor.clone();
        let (storage, layout) = tensor.storage_and_layout();
        let element = dtype.element_bytes() as u64;
        let too_large = |what: &str, value: usize| {
            CandleError::DLPack(dlpack_core::Error::Overflow {
                what: format!("the candle tensor's {what} {value} does not fit DLPack's i64"),
            })
        };
        // Shape and strides are written from candle's layout in `describe`; check here, once,
        // that they fit DLPack's i64 (no allocation: the export block holds the arrays).
        for (what, values) in [("dimension", layout.dims()), ("stride", layout.stride())] {
            if let Some(&v) = values.iter().find(|&&v| i64::try_from(v).is_err()) {
                return Err(too_large(what, v));
            }
        }
        let offset = layout.start_offset();
        let byte_offset = (offset as u64)
            .checked_mul(element)
            .ok_or_else(|| too_large("start offset", offset))?;
        let Storage::Cpu(cpu) = &*storage else {
            return Err(CandleError::Device { location });
        };
        let (data, bytes, found) = cpu_buffer(cpu);
        // candle keeps the tensor's dtype and its storage's variant in step; check anyway.
        if found != tensor.dtype() {
            return Err(CandleError::CandleDType {
                dtype: found,
                reason: "the tensor's storage holds another dtype than the tensor claims",
            });
        }
        // SAFETY: only the lifetime changes. The guard borrows the `RwLock` in the heap block of
        // the storage `Arc` that `tensor` holds; `tensor` moves into `Self` below (moving the
        // handle does not move that block), and `Self` releases the guard before dropping
        // `tensor` (in `Drop` and in `into_tensor`), so the lock outlives the guard.
        let storage =
            unsafe { core::mem::transmute::<StorageRef<'_>, StorageRef<'static>>(storage) };
        Ok(CandleExport {
            locked: Locked {
                storage: ManuallyDrop::new(storage),
                tensor: ManuallyDrop::new(tensor),
            },
            data,
            bytes,
            dtype,
            byte_offset,
        })
    }

    /// The exported tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.locked.tensor
    }

    /// Releases the read lock and gives the tensor back.
    pub fn into_tensor(self) -> Tensor {
        self.locked.into_tensor()
    }
}

/// The data pointer, the length in bytes and the dtype of a CPU storage's `Vec`.
fn cpu_buffer(cpu: &CpuStorage) -> (*const c_void, usize, candle_core::DType) {
    use candle_core::DType as D;
    fn parts<T>(v: &[T], dtype: D) -> (*const c_void, usize, D) {
        (v.as_ptr().cast(), core::mem::size_of_val(v), dtype)
    }
    match cpu {
        CpuStorage::U8(v) => parts(v, D::U8),
        CpuStorage::U32(v) => parts(v, D::U32),
        CpuStorage::I16(v) => parts(v, D::I16),
        CpuStorage::I32(v) => parts(v, D::I32),
        CpuStorage::I64(v) => parts(v, D::I64),
        CpuStorage::BF16(v) => parts(v, D::BF16),
        CpuStorage::F16(v) => parts(v, D::F16),
        CpuStorage::F32(v) => parts(v, D::F32),
        CpuStorage::F64(v) => parts(v, D::F64),
        CpuStorage::F8E4M3(v) => parts(v, D::F8E4M3),
        CpuStorage::F6E2M3(v) => parts(v, D::F6E2M3),
        CpuStorage::F6E3M2(v) => parts(v, D::F6E3M2),
        CpuStorage::F4(v) => parts(v, D::F4),
        CpuStorage::F8E8M0(v) => parts(v, D::F8E8M0),
    }
}

// SAFETY: the description reports the storage `Vec`'s own buffer with the tensor's layout and
// names that buffer as the allocation, so the export constructor refuses any element outside it.
// The buffer holds initialised values of the dtype (`new` checked the storage variant against
// it). It stays allocated and unmodified until `self` is dropped: `self` owns a clone of the
// tensor (keeping the storage alive) and a read lock on the storage, and every write to candle
// storage, including any that could replace or reallocate the `Vec`, needs the write lock. The
// description is read-only, so consumers do not write either. `ndim` is the rank of the held
// tensor's layout, which never changes (`new` checked that its sizes and strides fit i64).
unsafe impl Export for CandleExport {
    fn ndim(&self) -> usize {
        self.locked.tensor.layout().dims().len()
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        let layout = self.locked.tensor.layout();
        for (out, &v) in shape.iter_mut().zip(layout.dims()) {
            *out = i64::try_from(v).unwrap_or(i64::MAX);
        }
        for (out, &v) in strides.iter_mut().zip(layout.stride()) {
            *out = i64::try_from(v).unwrap_or(i64::MAX);
        }
        let start = self.data.addr();
        ExportDesc {
            data: self.data.cast_mut(),
            byte_offset: self.byte_offset,
            dtype: self.dtype,
            device: Device::CPU,
            flags: Flags::READ_ONLY,
            allocation: Some(start..start.saturating_add(self.bytes)),
        }
    }
}

impl fmt::Debug for CandleExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CandleExport")
            .field("dtype", &format_args!("{}", self.dtype))
            .field("shape", &self.locked.tensor.layout().dims())
            .field("strides", &self.locked.tensor.layout().stride())
            .field("byte_offset", &self.byte_offset)
            .finish()
    }
}
