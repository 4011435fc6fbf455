//! Export: a candle CPU (or, with the feature `cuda`, CUDA) tensor as a DLPack tensor, lent
//! without a copy ([`into_dlpack`]) or copied ([`to_dlpack`]). Neither holds candle's storage
//! lock past the call.

use core::any::Any;
use core::ffi::c_void;
use core::fmt;
use core::mem::ManuallyDrop;

use candle_core::{CpuStorage, DType, DeviceLocation, Layout, Storage, Tensor};
use dlpack_core::__private::give_vec_of_buffer;
use dlpack_core::{DataType, Device, Export, ExportDesc, Flags, ManagedTensor, Refused};

use crate::import::{candle_tensor, copy_to_storage};
use crate::shape::check_products;
use crate::{CandleError, dlpack_dtype};

/// Copies a candle CPU tensor into a new DLPack tensor that owns the copy (a CUDA tensor, with
/// the feature `cuda`, on its device: see the crate's [Devices](crate#devices) section).
///
/// The elements are gathered in row-major order, whatever the tensor's strides and offset, into
/// memory that the managed tensor alone owns: it is writable, flagged [`Flags::IS_COPIED`],
/// handed over as a `Vec` to a consumer that takes one ([`ManagedTensor::into_vec`]), and
/// becomes candle storage again, without another copy, through
/// [`into_owned`](crate::into_owned). candle's storage lock is held only while the elements
/// are read, as for any candle read: candle may write the tensor in place right after the call,
/// on any thread, while the copy lives.
///
/// ```
/// use candle_core::{Device, Tensor};
/// use dlpack_core::Flags;
///
/// let t = Tensor::arange(0f32, 6., &Device::Cpu)?.reshape((2, 3))?;
/// let dl = dlpack_candle::to_dlpack(&t.t()?)?;
/// assert!(dl.flags().contains(Flags::IS_COPIED) && !dl.is_read_only());
/// assert_eq!((dl.shape(), dl.strides()), (&[3i64, 2][..], &[2i64, 1][..]));
/// t.zero_set()?; // candle writes in place while the copy lives
/// assert_eq!(dl.to_vec::<f32>()?, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`CandleError::Device`] for a tensor on a device this build cannot reach, [`CandleError::CandleDType`]
/// for a dtype DLPack cannot carry, and [`CandleError::DLPack`] with
/// [`dlpack_core::Error::OutOfMemory`] when the copy does not fit in memory (a broadcast can
/// stand for far more elements than its storage holds), [`dlpack_core::Error::BadNdim`] for
/// more dimensions than DLPack allows, [`dlpack_core::Error::Overflow`] for sizes that DLPack's
/// `i64` or candle's `usize` arithmetic cannot hold, or the export error of a layout that
/// reaches outside its storage (safe candle code can build one with `Tensor::from_storage`).
pub fn to_dlpack(tensor: &Tensor) -> Result<ManagedTensor, CandleError> {
    let dtype = exportable(tensor)?;
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(device) = tensor.device() {
        // As on the CPU (below): candle's contiguous strides are unchecked products.
        check_products(tensor.dims())?;
        check_i64(&Layout::contiguous(tensor.dims()))?;
        let (copy, located) = crate::cuda::copy_for_export(tensor, device)?;
        let copied = CandleExport {
            held: Held::CopiedOnDevice {
                tensor: HeldTensor::new(copy),
                data: located.data,
                bytes: located.bytes,
                device: located.device,
            },
            dtype,
        };
        return Ok(ManagedTensor::export(copied)?);
    }
    // The copy's contiguous strides are candle's products of the sizes.
    check_products(tensor.dims())?;
    let layout = Layout::contiguous(tensor.dims());
    check_i64(&layout)?;
    let storage = {
        let (storage, _) = tensor.storage_and_layout();
        let located = locate(tensor, &storage)?;
        // SAFETY: `located` was read from `tensor`'s own storage under the read lock `storage`,
        // so nothing writes to it while the lock is held; `lent`, declared after it, is dropped
        // before it, and nothing else reads the lent memory.
        let lent = unsafe { CandleExport::lend(tensor.clone(), located) };
        let lent = ManagedTensor::export(lent)?;
        copy_to_storage(&lent, tensor.dtype())?
    };
    let copied = CandleExport {
        held: Held::Copied { storage, layout },
        dtype,
    };
    Ok(ManagedTensor::export(copied)?)
}

/// Lends a candle CPU tensor to DLPack without a copy: the DLPack tensor reads candle's own
/// storage, with the tensor's shape, strides and offset, and is flagged read-only. With the
/// feature `cuda`, a CUDA tensor is lent the same way as `kDLCUDA` device memory (see the
/// crate's [Devices](crate#devices) section for the stream it is ordered on).
///
/// The managed tensor keeps `tensor` (and so its storage) alive and takes no lock, so no candle
/// call ever waits for it, on any thread. candle cannot tell whether another handle shares the
/// storage (a clone of `tensor`, the tensor it is a view of, a view made of it, the `Var` it
/// belongs to), and through any such handle candle writes in place, even replacing the memory
/// (a user's `InplaceOp` may). Ruling that out is the caller's part, hence `unsafe`; the common
/// case is sound at a glance: the result of a candle operation that computes new storage
/// (`matmul`, arithmetic, `copy`), handed over before it is cloned, is the only handle on that
/// storage. (Operations that return views, such as `t()`, `narrow` or `reshape` of a contiguous
/// tensor, share their input's storage.) [`to_dlpack`] copies instead, and needs no promise.
///
/// ```
/// use candle_core::{Device, Tensor};
///
/// let a = Tensor::arange(0f32, 6., &Device::Cpu)?.reshape((2, 3))?;
/// let product = a.matmul(&a.t()?)?; // new storage, reachable only through `product`
/// let address = {
///     let (storage, _) = product.storage_and_layout();
///     let candle_core::Storage::Cpu(cpu) = &*storage else { unreachable!() };
///     cpu.as_slice::<f32>()?.as_ptr()
/// };
/// // SAFETY: `product` is the only handle on its storage, and it moves into the export.
/// let dl = unsafe { dlpack_candle::into_dlpack(product) }?;
/// assert!(dl.is_read_only());
/// assert_eq!(dl.view::<f32>()?.as_ptr(), address); // candle's own memory
/// assert_eq!(dl.to_vec::<f32>()?, [5.0, 14.0, 14.0, 50.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Safety
///
/// Nothing may write to `tensor`'s storage until the returned tensor is dropped, by whoever owns
/// it then (a foreign consumer included), or, if it is reclaimed as a [`CandleExport`], until
/// that is dropped or made a candle tensor again ([`CandleExport::into_tensor`],
/// [`into_owned`](crate::into_owned)). Writing means candle's in-place operations (`slice_set`,
/// `const_set`, `zero_set`, `one_set`, `scatter_set`, `scatter_add_set`, `Var::set`,
/// `inplace_op1`/`2`/`3`) through any tensor or `Var` sharing the storage. Reading it, and every
/// candle operation that makes a new tensor, are fine.
///
/// # Errors
///
/// The tensor comes back, as it was, in the [`Refused`] (`?` turns it into its
/// [`CandleError`] and drops the tensor): [`CandleError::Device`] for a tensor on a
/// device this build cannot reach, [`CandleError::CandleDType`] for a dtype DLPack cannot
/// carry, [`CandleError::DLPack`] for a layout the export refuses (more dimensions than DLPack
/// allows, sizes or strides beyond `i64`, a layout that reaches outside its storage), and for a
/// CUDA tensor [`CandleError::Candle`] when a driver call fails.
pub unsafe fn into_dlpack(tensor: Tensor) -> Result<ManagedTensor, Refused<Tensor, CandleError>> {
    let located = {
        let (storage, _) = tensor.storage_and_layout();
        locate(&tensor, &storage)
    };
    let located = match located {
        Ok(located) => located,
        Err(error) => {
            return Err(Refused {
                error,
                value: tensor,
            });
        }
    };
    // SAFETY: `located` was read from `tensor`'s own storage, under its lock; the caller
    // promises that nothing writes to it while the export, or what is reclaimed from it, lives.
    let lent = unsafe { CandleExport::lend(tensor, located) };
    ManagedTensor::export(lent).map_err(|refused| Refused {
        error: CandleError::DLPack(refused.error),
        value: refused.value.into_tensor(),
    })
}

/// A candle tensor held for export: the DLPack producer behind [`into_dlpack`] and
/// [`to_dlpack`].
///
/// It holds no lock on candle's storage, so no candle call ever waits for an export, whatever
/// its consumer does with it and however long it keeps it. What keeps the memory valid and
/// unchanged for the consumer depends on how the export was made:
///
/// - Lent ([`into_dlpack`]): a handle on the candle tensor keeps the storage allocated, and the
///   caller's promise that nothing writes to it keeps its elements unchanged; the tensor is
///   read-only.
/// - Copied ([`to_dlpack`]): the export owns the copy's memory alone; no candle handle reaches
///   it until the export is made a candle tensor again. The consumer may write it.
///
/// A [`ManagedTensor`] exported from candle comes back as a candle tensor, without a copy,
/// through [`into_owned`](crate::into_owned)
/// ([`Transfer::Reclaimed`](dlpack_core::Transfer::Reclaimed)), or through
/// `managed.reclaim::<CandleExport>()` and [`CandleExport::into_tensor`].
pub struct CandleExport {
    held: Held,
    dtype: DataType,
}

/// What an export holds.
enum Held {
    /// The caller's tensor, on candle's shared storage.
    Lent {
        tensor: HeldTensor,
        /// The storage's buffer (a `Vec`'s, or a CUDA slice's device address) and its length in
        /// bytes.
        data: *const c_void,
        bytes: usize,
        byte_offset: u64,
        device: Device,
    },
    /// A row-major copy that no candle handle reaches, and its contiguous layout.
    Copied { storage: CpuStorage, layout: Layout },
    /// A row-major copy on a CUDA device that no other candle handle reaches: a tensor made by
    /// `force_contiguous`, its slice's device address and length in bytes.
    #[cfg(feature = "cuda")]
    CopiedOnDevice {
        tensor: HeldTensor,
        data: *const c_void,
        bytes: usize,
        device: Device,
    },
}

/// A candle tensor an export holds. A CUDA tensor is dropped with its context current on the
/// dropping thread (a DLPack deleter may run on any thread).
struct HeldTensor(ManuallyDrop<Tensor>);

impl HeldTensor {
    fn new(tensor: Tensor) -> Self {
        HeldTensor(ManuallyDrop::new(tensor))
    }

    fn get(&self) -> &Tensor {
        &self.0
    }

    fn into_inner(self) -> Tensor {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped or used again, so the tensor is taken exactly once.
        unsafe { ManuallyDrop::take(&mut this.0) }
    }
}

impl Drop for HeldTensor {
    fn drop(&mut self) {
        // SAFETY: this is the owner's `Drop`, which runs once; the tensor is not used after it.
        let tensor = unsafe { ManuallyDrop::take(&mut self.0) };
        #[cfg(feature = "cuda")]
        crate::cuda::drop_in_context(tensor);
        #[cfg(not(feature = "cuda"))]
        drop(tensor);
    }
}

// SAFETY: `Tensor` and `CpuStorage` are `Send`. The only non-`Send` fields are the data
// pointers: the address of a storage `Vec` buffer that the held tensor keeps allocated and that
// nothing writes while the export lives (`lend`'s contract), so reading it from any thread is
// race-free, or a CUDA device address, which the host never dereferences.
unsafe impl Send for CandleExport {}

/// Where a candle tensor's elements are: what an export describes, read from the tensor's
/// storage under its lock ([`locate`]).
pub(crate) struct Located {
    /// The storage's buffer (a `Vec`'s, or a CUDA slice's device address) and its length in
    /// bytes.
    pub(crate) data: *const c_void,
    pub(crate) bytes: usize,
    pub(crate) byte_offset: u64,
    pub(crate) dtype: DataType,
    pub(crate) device: Device,
}

/// Finds `tensor`'s elements in `storage` (its own storage, read under its lock) for a
/// read-only export, checking that DLPack can describe them.
fn locate(tensor: &Tensor, storage: &Storage) -> Result<Located, CandleError> {
    let dtype = exportable(tensor)?;
    let layout = tensor.layout();
    check_i64(layout)?;
    let offset = layout.start_offset();
    let byte_offset = (offset as u64)
        .checked_mul(dtype.element_bytes() as u64)
        .ok_or_else(|| too_large("start offset", offset))?;
    let (data, bytes, found, device) = match (storage, tensor.device()) {
        (Storage::Cpu(cpu), _) => {
            let (data, bytes, found) = cpu_buffer(cpu);
            (data, bytes, found, Device::CPU)
        }
        #[cfg(feature = "cuda")]
        (Storage::Cuda(cuda), candle_core::Device::Cuda(device)) => {
            let (address, bytes, found) = crate::cuda::locate(device, cuda)?;
            let data = crate::cuda::device_pointer(address);
            (data, bytes, found, crate::cuda::dlpack_device(device))
        }
        _ => {
            let location = tensor.device().location();
            return Err(CandleError::Device { location });
        }
    };
    // candle keeps the tensor's dtype and its storage's variant in step; check anyway.
    if found != tensor.dtype() {
        return Err(CandleError::CandleDType {
            dtype: found,
            reason: "the tensor's storage holds another dtype than the tensor claims",
        });
    }
    Ok(Located {
        data,
        bytes,
        byte_offset,
        dtype,
        device,
    })
}

impl CandleExport {
    /// A read-only export of `tensor`'s elements where `located` says they are, keeping no lock.
    ///
    /// # Safety
    ///
    /// `located` was found by [`locate`] in `tensor`'s own storage (read under its lock, which
    /// the caller may release before this is called: the held tensor keeps the storage
    /// allocated), and nothing writes to that storage while the returned value, a managed
    /// tensor it moves into, or a value reclaimed from that, lives.
    unsafe fn lend(tensor: Tensor, located: Located) -> Self {
        let Located {
            data,
            bytes,
            byte_offset,
            dtype,
            device,
        } = located;
        CandleExport {
            held: Held::Lent {
                tensor: HeldTensor::new(tensor),
                data,
                bytes,
                byte_offset,
                device,
            },
            dtype,
        }
    }

    /// The layout the export describes.
    fn layout(&self) -> &Layout {
        match &self.held {
            Held::Lent { tensor, .. } => tensor.get().layout(),
            Held::Copied { layout, .. } => layout,
            #[cfg(feature = "cuda")]
            Held::CopiedOnDevice { tensor, .. } => tensor.get().layout(),
        }
    }

    /// Whether the held tensor is on candle device `device` (the same candle device, not only
    /// the same GPU: candle does not mix tensors of two devices).
    #[cfg(feature = "cuda")]
    pub(crate) fn is_on(&self, device: &candle_core::Device) -> bool {
        let held = match &self.held {
            Held::Lent { tensor, .. } | Held::CopiedOnDevice { tensor, .. } => tensor.get(),
            Held::Copied { .. } => return device.is_cpu(),
        };
        held.device().same_device(device)
    }

    /// Whether the export is a copy that it owns alone ([`to_dlpack`]), rather than a tensor
    /// lent on candle's storage ([`into_dlpack`]).
    pub fn is_copy(&self) -> bool {
        match self.held {
            Held::Lent { .. } => false,
            Held::Copied { .. } => true,
            #[cfg(feature = "cuda")]
            Held::CopiedOnDevice { .. } => true,
        }
    }

    /// The candle tensor again: the lent tensor itself, or a new tensor on the copy's memory
    /// (no copy either way).
    pub fn into_tensor(self) -> Tensor {
        match self.held {
            Held::Lent { tensor, .. } => tensor.into_inner(),
            Held::Copied { storage, layout } => candle_tensor(storage, layout.shape().clone()),
            #[cfg(feature = "cuda")]
            Held::CopiedOnDevice { tensor, .. } => tensor.into_inner(),
        }
    }
}

/// The DLPack dtype of a tensor that can be exported (on the CPU, or on CUDA with the feature).
fn exportable(tensor: &Tensor) -> Result<DataType, CandleError> {
    let location = tensor.device().location();
    let reachable = matches!(location, DeviceLocation::Cpu)
        || (cfg!(feature = "cuda") && matches!(location, DeviceLocation::Cuda { .. }));
    if !reachable {
        return Err(CandleError::Device { location });
    }
    dlpack_dtype(tensor.dtype())
}

/// Checks that the layout's sizes and strides fit DLPack's `i64`, so that `describe` writes
/// them as they are (the export block holds the arrays: no allocation here).
fn check_i64(layout: &Layout) -> Result<(), CandleError> {
    for (what, values) in [("dimension", layout.dims()), ("stride", layout.stride())] {
        if let Some(&v) = values.iter().find(|&&v| i64::try_from(v).is_err()) {
            return Err(too_large(what, v));
        }
    }
    Ok(())
}

fn too_large(what: &str, value: usize) -> CandleError {
    CandleError::DLPack(dlpack_core::Error::Overflow {
        what: format!("the candle tensor's {what} {value} does not fit DLPack's i64"),
    })
}

/// The data pointer, the length in bytes and the dtype of a CPU storage's `Vec`. The pointer
/// comes from `Vec::as_ptr`, which makes no reference to the elements.
fn cpu_buffer(cpu: &CpuStorage) -> (*const c_void, usize, DType) {
    macro_rules! parts {
        ($v:expr, $dtype:expr) => {
            (
                $v.as_ptr().cast::<c_void>(),
                core::mem::size_of_val($v.as_slice()),
                $dtype,
            )
        };
    }
    match cpu {
        CpuStorage::U8(v) => parts!(v, DType::U8),
        CpuStorage::U32(v) => parts!(v, DType::U32),
        CpuStorage::I16(v) => parts!(v, DType::I16),
        CpuStorage::I32(v) => parts!(v, DType::I32),
        CpuStorage::I64(v) => parts!(v, DType::I64),
        CpuStorage::BF16(v) => parts!(v, DType::BF16),
        CpuStorage::F16(v) => parts!(v, DType::F16),
        CpuStorage::F32(v) => parts!(v, DType::F32),
        CpuStorage::F64(v) => parts!(v, DType::F64),
        CpuStorage::F8E4M3(v) => parts!(v, DType::F8E4M3),
        CpuStorage::F6E2M3(v) => parts!(v, DType::F6E2M3),
        CpuStorage::F6E3M2(v) => parts!(v, DType::F6E3M2),
        CpuStorage::F4(v) => parts!(v, DType::F4),
        CpuStorage::F8E8M0(v) => parts!(v, DType::F8E8M0),
    }
}

/// The writable data pointer and the length in bytes of a CPU storage's `Vec`, from
/// `Vec::as_mut_ptr` (no reference to the elements is made).
fn cpu_buffer_mut(cpu: &mut CpuStorage) -> (*mut c_void, usize) {
    macro_rules! parts {
        ($v:expr) => {{
            let bytes = core::mem::size_of_val($v.as_slice());
            ($v.as_mut_ptr().cast::<c_void>(), bytes)
        }};
    }
    match cpu {
        CpuStorage::U8(v)
        | CpuStorage::F6E2M3(v)
        | CpuStorage::F6E3M2(v)
        | CpuStorage::F4(v)
        | CpuStorage::F8E8M0(v) => parts!(v),
        CpuStorage::U32(v) => parts!(v),
        CpuStorage::I16(v) => parts!(v),
        CpuStorage::I32(v) => parts!(v),
        CpuStorage::I64(v) => parts!(v),
        CpuStorage::BF16(v) => parts!(v),
        CpuStorage::F16(v) => parts!(v),
        CpuStorage::F32(v) => parts!(v),
        CpuStorage::F64(v) => parts!(v),
        CpuStorage::F8E4M3(v) => parts!(v),
    }
}

/// Moves a copy's `Vec` into `slot` when the slot asks for its element type
/// ([`dlpack_core::__private::give_vec_of_buffer`]).
fn give_storage_vec(cpu: &mut CpuStorage, slot: &mut dyn Any) {
    match cpu {
        CpuStorage::U8(v) => give_vec_of_buffer(v, slot),
        CpuStorage::U32(v) => give_vec_of_buffer(v, slot),
        CpuStorage::I16(v) => give_vec_of_buffer(v, slot),
        CpuStorage::I32(v) => give_vec_of_buffer(v, slot),
        CpuStorage::I64(v) => give_vec_of_buffer(v, slot),
        CpuStorage::BF16(v) => give_vec_of_buffer(v, slot),
        CpuStorage::F16(v) => give_vec_of_buffer(v, slot),
        CpuStorage::F32(v) => give_vec_of_buffer(v, slot),
        CpuStorage::F64(v) => give_vec_of_buffer(v, slot),
        CpuStorage::F8E4M3(v) => give_vec_of_buffer(v, slot),
        // `u8` bytes of another DLPack dtype (float8_e8m0fnu, or a placeholder never exported):
        // a consumer asks for that dtype's element type, not `u8`, and copies instead.
        CpuStorage::F8E8M0(_)
        | CpuStorage::F6E2M3(_)
        | CpuStorage::F6E3M2(_)
        | CpuStorage::F4(_) => {}
    }
}

// SAFETY: the description reports a storage's own buffer (a `Vec`'s, or on a CUDA device the
// storage slice, one whole allocation, at the device address cudarc gave, with the storage's
// device) with a layout candle built for it (the lent tensor's, or the copy's contiguous one)
// and names that buffer as the allocation,
// so the export constructor refuses any element outside it. The buffer holds initialised values
// of the dtype (`locate` checked the storage variant; a copy is made for the dtype). It stays
// allocated and unmodified while `self` lives: a lent tensor's storage is kept alive by the
// held tensor and written by no one (`lend`'s contract; the description is read-only, so the
// consumer does not write either); a copy's `Vec` is owned by `self` alone, no candle handle
// reaches it, and its pointer comes from a `&mut` borrow, so the consumer may write it (a copy
// on a CUDA device is the only handle on its storage, held by `self`, and device memory the host
// never reads through it). The
// `Vec` is given away only from a copy, only for its own element type, and then whole: the
// tensor is all of it, row-major from its first element. `ndim` is the rank of the held
// layout, which never changes (its sizes and strides fit i64: checked when `self` was made).
unsafe impl Export for CandleExport {
    // The elements live in the storage `Vec`'s heap buffer, never inline.
    const GIVES_VEC: bool = true;

    fn ndim(&self) -> usize {
        self.layout().dims().len()
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        let dtype = self.dtype;
        let (data, bytes, byte_offset, flags, device) = match &mut self.held {
            Held::Lent {
                data,
                bytes,
                byte_offset,
                device,
                ..
            } => (
                data.cast_mut(),
                *bytes,
                *byte_offset,
                Flags::READ_ONLY,
                *device,
            ),
            Held::Copied { storage, .. } => {
                let (data, bytes) = cpu_buffer_mut(storage);
                (data, bytes, 0, Flags::IS_COPIED, Device::CPU)
            }
            #[cfg(feature = "cuda")]
            Held::CopiedOnDevice {
                data,
                bytes,
                device,
                ..
            } => (data.cast_mut(), *bytes, 0, Flags::IS_COPIED, *device),
        };
        let layout = self.layout();
        for (out, &v) in shape.iter_mut().zip(layout.dims()) {
            *out = i64::try_from(v).unwrap_or(i64::MAX);
        }
        for (out, &v) in strides.iter_mut().zip(layout.stride()) {
            *out = i64::try_from(v).unwrap_or(i64::MAX);
        }
        let start = data.addr();
        ExportDesc {
            data,
            byte_offset,
            dtype,
            device,
            flags,
            allocation: Some(start..start.saturating_add(bytes)),
        }
    }

    fn give_vec(&mut self, slot: &mut dyn Any) {
        if let Held::Copied { storage, .. } = &mut self.held {
            give_storage_vec(storage, slot);
        }
    }
}

impl fmt::Debug for CandleExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let layout = self.layout();
        f.debug_struct("CandleExport")
            .field("held", &if self.is_copy() { "copied" } else { "lent" })
            .field("dtype", &format_args!("{}", self.dtype))
            .field("shape", &layout.dims())
            .field("strides", &layout.stride())
            .field("start_offset", &layout.start_offset())
            .finish()
    }
}
