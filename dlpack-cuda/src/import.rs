//! Import: [`CudaImport`], a foreign CUDA tensor checked against the driver, its typed
//! [`DeviceView`], and [`ForeignSlice`], the same memory as a cudarc slice that never frees it.

use core::fmt;
use core::marker::PhantomData;
use core::mem::{ManuallyDrop, size_of};
use core::ops::{Deref, Range};
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use dlpack_core::{
    CheckedTensor, Device, DeviceHooks, Element, Error, ManagedTensor, MemoryKind, PyErrorKind,
    TensorView,
};

use crate::driver::{ContextScope, upgrade_device_ptr};
use crate::export::as_bytes;
use crate::hooks::is_cuda;

/// A foreign `kDLCUDA`, `kDLCUDAManaged` or `kDLCUDAHost` tensor whose device claim the driver
/// confirmed.
///
/// [`CudaImport::new`] asks the hooks where the data really lives
/// ([`ManagedTensor::verify_device`]): the memory kind must fit the device type (device or
/// managed memory for `kDLCUDA`, pinned for `kDLCUDAHost`, managed for `kDLCUDAManaged`), the
/// ordinal must match for device memory, and every byte the strides reach must lie inside the
/// allocation. A tensor that fails is deleted (its deleter runs once) and the error says what
/// was claimed and what was found.
///
/// The import owns the [`ManagedTensor`]: dropping it calls the producer's deleter, once. It
/// never frees the memory itself. Any strides work, negative and zero ones included.
///
/// ```no_run
/// use dlpack_core::ManagedTensor;
/// use dlpack_cuda::{CudaHooks, CudaImport};
///
/// # let raw: *mut dlpack_core::ffi::DLManagedTensorVersioned = std::ptr::null_mut();
/// let hooks = CudaHooks::on_default_streams()?;
/// // `raw` came from a producer's `__dlpack__(stream=hooks.consumer_stream(device)?)`.
/// // SAFETY: `raw` is a live DLPack tensor that we own.
/// let tensor = unsafe { ManagedTensor::from_raw(raw)? };
/// let import = CudaImport::new(tensor, &hooks)?;
/// let values: Vec<f32> = import.to_host_vec(&hooks)?; // row-major, whatever the strides
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub struct CudaImport {
    tensor: ManagedTensor,
    kind: Option<MemoryKind>,
}

impl CudaImport {
    /// Checks `tensor`'s device claim with `hooks` (normally [`CudaHooks`](crate::CudaHooks)).
    ///
    /// # Errors
    ///
    /// [`Error::NoHook`] for a tensor that is not on a CUDA device type, and the errors of
    /// [`ManagedTensor::verify_device`] for a claim the driver does not confirm
    /// ([`Error::MemoryKindMismatch`], [`Error::DeviceMismatch`],
    /// [`Error::SpanOutsideAllocation`], [`Error::UnknownPointer`], ...). The tensor is deleted
    /// then.
    pub fn new(mut tensor: ManagedTensor, hooks: &dyn DeviceHooks) -> Result<Self, Error> {
        let device = tensor.device();
        if !is_cuda(device.device_type) {
            return Err(Error::NoHook { device });
        }
        let info = tensor.verify_device(hooks)?;
        Ok(CudaImport {
            tensor,
            kind: info.map(|i| i.kind),
        })
    }

    /// The tensor.
    pub fn tensor(&self) -> &ManagedTensor {
        &self.tensor
    }

    /// Gives the tensor back (still owned: its deleter runs when it is dropped).
    pub fn into_tensor(self) -> ManagedTensor {
        self.tensor
    }

    /// The device the tensor claims (and the driver confirmed).
    pub fn device(&self) -> Device {
        self.tensor.device()
    }

    /// The kind of memory the driver reported, or `None` for a tensor without elements (there
    /// was no byte to ask about).
    pub fn memory_kind(&self) -> Option<MemoryKind> {
        self.kind
    }

    /// Copies the elements into a new row-major host `Vec`: device memory through
    /// `hooks.copy_to_host` (one copy of the reachable span, then a host gather), pinned and
    /// managed memory read in place after `hooks.wait_host`.
    ///
    /// # Errors
    ///
    /// Those of `hooks.wait_host` for pinned and managed memory ([`Error::Runtime`]), and those
    /// of [`CheckedTensor::to_host_vec`] ([`Error::DataTypeMismatch`], [`Error::OutOfMemory`],
    /// the hook's [`Error::Runtime`] or [`Error::CopyInFlight`], ...).
    pub fn to_host_vec<T: Element>(&self, hooks: &dyn DeviceHooks) -> Result<Vec<T>, Error> {
        if self.tensor.is_host_accessible() && !self.tensor.is_empty() {
            hooks.wait_host(self.device())?;
        }
        self.tensor.to_host_vec(hooks)
    }

    /// A host view of pinned or managed memory, after `hooks.wait_host`, so that pending GPU
    /// writes are complete.
    ///
    /// # Errors
    ///
    /// [`Error::NotHostAccessible`] for device memory, those of `hooks.wait_host`
    /// ([`Error::Runtime`]), and those of [`CheckedTensor::view`] ([`Error::DataTypeMismatch`],
    /// [`Error::Misaligned`], ...).
    pub fn host_view<T: Element>(
        &self,
        hooks: &dyn DeviceHooks,
    ) -> Result<TensorView<'_, T>, Error> {
        if !self.tensor.is_host_accessible() {
            return Err(Error::NotHostAccessible {
                device: self.device(),
            });
        }
        if !self.tensor.is_empty() {
            hooks.wait_host(self.device())?;
        }
        self.tensor.view()
    }

    /// Writes `values`, in row-major order, into the tensor through `hooks.copy_from_host`.
    ///
    /// A compact layout (row-major, or any permutation of it such as a transpose, negative
    /// strides included) takes one copy; a layout with gaps (a slice of a larger tensor) takes
    /// one copy per contiguous run, so the bytes between elements are never written.
    ///
    /// # Errors
    ///
    /// [`Error::DataTypeMismatch`] for another dtype, [`Error::NoHook`] if `hooks` does not
    /// handle the tensor's device type, [`Error::ReadOnly`] for a read-only tensor,
    /// [`Error::OverlappingStrides`] for a layout where two indices share an element,
    /// [`Error::DataOverlapsDescription`] for elements lying in the tensor's own struct, shape or
    /// strides (pinned or managed memory is at host addresses), [`Error::ShapeMismatch`] for a
    /// `values` length other than the tensor's, [`Error::Misaligned`] for a first element not
    /// aligned for `T`, and the errors of `hooks.copy_from_host` ([`Error::Runtime`]). When a
    /// copy of a layout with gaps fails, the runs before it have been written.
    pub fn copy_from_host<T: Element>(
        &mut self,
        hooks: &dyn DeviceHooks,
        values: &[T],
    ) -> Result<(), Error> {
        copy_from_host(&self.tensor, hooks, values)
    }

    /// A typed view of the tensor's device memory: addresses, shape and strides, for kernels.
    ///
    /// # Errors
    ///
    /// [`Error::DataTypeMismatch`] if `T`'s dtype is not the tensor's, [`Error::Misaligned`] if
    /// the first element is not aligned for `T`, [`Error::Overflow`] if `data + byte_offset`
    /// overflows (which validation leaves possible only for a tensor without elements).
    pub fn device_view<T: Element>(&self) -> Result<DeviceView<'_, T>, Error> {
        let tensor: &CheckedTensor = &self.tensor;
        check_dtype::<T>(tensor)?;
        let first = first_element(tensor)?;
        if !tensor.is_empty() && !first.is_multiple_of(core::mem::align_of::<T>()) {
            return Err(Error::Misaligned {
                address: first,
                align: core::mem::align_of::<T>(),
            });
        }
        Ok(DeviceView {
            tensor,
            first,
            kind: self.kind,
            _elements: PhantomData,
        })
    }
}

impl fmt::Debug for CudaImport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaImport")
            .field("tensor", &self.tensor)
            .field("kind", &self.kind)
            .finish()
    }
}

/// A typed view of an imported tensor's device memory: where its elements are, for kernels and
/// cudarc. Borrowed from a [`CudaImport`], so the memory outlives it.
pub struct DeviceView<'a, T> {
    tensor: &'a CheckedTensor,
    first: usize,
    kind: Option<MemoryKind>,
    _elements: PhantomData<&'a [T]>,
}

impl<'a, T: Element> DeviceView<'a, T> {
    /// The device address of the first element (`data + byte_offset`).
    pub fn device_ptr(&self) -> u64 {
        self.first as u64
    }

    /// The shape.
    pub fn shape(&self) -> &'a [i64] {
        self.tensor.shape()
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &'a [i64] {
        self.tensor.strides()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.tensor.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.tensor.is_empty()
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.tensor.device()
    }

    /// The device addresses of every byte the strides reach.
    pub fn byte_span(&self) -> Range<usize> {
        self.tensor.byte_span()
    }

    /// The reachable span as a cudarc slice on `stream`, which never frees the memory: element
    /// `0` of the slice is the lowest reachable element, and the tensor's first element is at
    /// [`ForeignSlice::first_index`]. Use it with cudarc's copies and kernel launches (as
    /// `&CudaSlice<T>`); it borrows the import, so it cannot outlive the memory.
    ///
    /// `stream` must belong to the memory's device for device memory. Managed memory works on
    /// any device; pinned memory is used at its host address, which is also its device address
    /// under the unified addressing of every 64-bit platform CUDA supports.
    ///
    /// The slice covers the whole span, the bytes between a strided tensor's elements included,
    /// which cudarc lets safe code read as `T`s. If cudarc's event tracking is on, making the
    /// slice creates two events.
    ///
    /// # Errors
    ///
    /// [`Error::DeviceMismatch`] for device memory of another device than `stream`'s. An
    /// [`Error::Protocol`] of kind `BufferError` for an element type with invalid bit patterns
    /// (`bool`) and a tensor that is not compact row-major: take it as `u8` instead.
    /// [`Error::Runtime`] when event tracking is on and the context cannot create events, or
    /// holds an error cudarc recorded earlier (cudarc itself would panic).
    pub fn cudarc_slice(&self, stream: &Arc<CudaStream>) -> Result<ForeignSlice<'a, T>, Error> {
        let ordinal = stream.context().ordinal() as i32;
        let device = self.device();
        if self.kind == Some(MemoryKind::Device) && device.device_id != ordinal {
            return Err(Error::DeviceMismatch {
                claimed: Device::cuda(ordinal),
                actual: device,
            });
        }
        if !T::ANY_BIT_PATTERN && !self.tensor.is_row_major_contiguous() {
            return Err(Error::Protocol {
                kind: PyErrorKind::BufferError,
                message: format!(
                    "a cudarc slice of {} covers the bytes between this tensor's elements (strides {:?} for shape {:?}), which need not be valid {}s; take it as u8",
                    T::DTYPE,
                    self.tensor.strides(),
                    self.tensor.shape(),
                    T::DTYPE
                ),
            });
        }
        let span = self.byte_span();
        let size = size_of::<T>();
        let len = span.len() / size;
        let first_index = (self.first - span.start) / size;
        // cudarc makes the stream's context current to create the slice's events; the thread
        // keeps its own (a stream exists, so the driver is loaded).
        let _keep = ContextScope::preserve();
        // SAFETY: `span` is the tensor's reachable memory, which the driver confirmed is one
        // CUDA allocation (CudaImport::new) and which stays valid while the import is borrowed
        // for 'a; it holds `len` elements of `T` (the span is a whole number of elements, from
        // an aligned first element). The slice is never dropped as a CudaSlice: ForeignSlice
        // hands it to `leak` instead, so cudarc never frees the foreign memory.
        let slice = unsafe { upgrade_device_ptr::<T>(stream, span.start as u64, len) }?;
        Ok(ForeignSlice {
            slice: ManuallyDrop::new(slice),
            first_index,
            _lent: PhantomData,
        })
    }
}

impl<T> fmt::Debug for DeviceView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceView")
            .field("device", &format_args!("{}", self.tensor.device()))
            .field("first", &format_args!("{:#x}", self.first))
            .field("shape", &self.tensor.shape())
            .field("strides", &self.tensor.strides())
            .finish()
    }
}

/// Foreign device memory as a `&CudaSlice<T>`, for cudarc's APIs. It dereferences to the slice
/// but never gives it up by value, and on drop hands it to [`CudaSlice::leak`], so the memory is
/// never freed by cudarc: it stays the producer's.
pub struct ForeignSlice<'a, T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    first_index: usize,
    _lent: PhantomData<&'a CheckedTensor>,
}

impl<T> ForeignSlice<'_, T> {
    /// The index, in the slice, of the tensor's first element (non-zero when negative strides
    /// reach below it).
    pub fn first_index(&self) -> usize {
        self.first_index
    }
}

impl<T> Deref for ForeignSlice<'_, T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> Drop for ForeignSlice<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the slice is taken once, here, and not used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        // cudarc makes the stream's context current to release the slice's events; the thread
        // keeps its own.
        let _keep = ContextScope::preserve();
        // Releases cudarc's events and stream reference, not the memory.
        let _ = slice.leak();
    }
}

impl<T> fmt::Debug for ForeignSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForeignSlice")
            .field("len", &self.slice.len())
            .field("first_index", &self.first_index)
            .finish()
    }
}

fn check_dtype<T: Element>(tensor: &CheckedTensor) -> Result<(), Error> {
    if tensor.dtype() == T::DTYPE {
        Ok(())
    } else {
        Err(Error::DataTypeMismatch {
            found: tensor.dtype(),
            expected: T::DTYPE,
        })
    }
}

/// `data + byte_offset` (validation established that it does not overflow for a tensor with
/// elements).
fn first_element(tensor: &CheckedTensor) -> Result<usize, Error> {
    usize::try_from(tensor.byte_offset())
        .ok()
        .and_then(|offset| tensor.data_ptr().addr().checked_add(offset))
        .ok_or_else(|| Error::Overflow {
            what: "data + byte_offset".into(),
        })
}

/// How the elements of a layout sit in memory, for writing.
#[derive(Debug, PartialEq, Eq)]
enum Placement {
    /// Every byte of the span is one element: a permutation of the compact layout.
    Dense,
    /// Elements with gaps between them, in runs of `run` elements contiguous along the last
    /// axis.
    Runs {
        /// Elements per run.
        run: usize,
    },
}

/// Decides how to write a layout, or refuses one where two indices share an element. Axes of
/// size 1 never move, so their strides are ignored.
fn placement(shape: &[i64], strides: &[i64]) -> Result<Placement, Error> {
    let mut axes: Vec<(u64, u64)> = shape
        .iter()
        .zip(strides)
        .filter(|(d, _)| **d > 1)
        .map(|(&d, &s)| (s.unsigned_abs(), d as u64))
        .collect();
    axes.sort_unstable();
    // Sorted by stride, each axis must step past everything the smaller ones reach.
    let mut dense = true;
    let mut reach: u64 = 0; // the largest offset the smaller axes reach
    for &(stride, size) in &axes {
        if stride <= reach || stride == 0 {
            return Err(Error::OverlappingStrides {
                shape: shape.to_vec(),
                strides: strides.to_vec(),
            });
        }
        dense &= stride == reach + 1;
        reach = (size - 1)
            .checked_mul(stride)
            .and_then(|r| r.checked_add(reach))
            .ok_or_else(|| Error::Overflow {
                what: format!("the reach of strides {strides:?} for shape {shape:?}"),
            })?;
    }
    if dense {
        return Ok(Placement::Dense);
    }
    let run = match (shape.last(), strides.last()) {
        (Some(&d), Some(&1)) if d > 1 => d as usize,
        _ => 1,
    };
    Ok(Placement::Runs { run })
}

/// [`CudaImport::copy_from_host`], on the import's tensor.
fn copy_from_host<T: Element>(
    tensor: &ManagedTensor,
    hooks: &dyn DeviceHooks,
    values: &[T],
) -> Result<(), Error> {
    check_dtype::<T>(tensor)?;
    let device = tensor.device();
    if !hooks.handles(device.device_type) {
        return Err(Error::NoHook { device });
    }
    // Read-only, overlapping strides, and elements lying in the tensor's own struct, shape or
    // strides (pinned or managed memory is at host addresses): a chunk written there would move
    // the later ones.
    tensor.check_writable()?;
    if values.len() != tensor.len() {
        return Err(Error::ShapeMismatch {
            found: tensor.shape().to_vec(),
            expected: vec![i64::try_from(values.len()).unwrap_or(i64::MAX)],
        });
    }
    if tensor.is_empty() {
        return Ok(());
    }
    let (shape, strides) = (tensor.shape(), tensor.strides());
    let placement = placement(shape, strides)?;
    let size = size_of::<T>();
    let span = tensor.byte_span();
    let first = first_element(tensor)?;
    if first % core::mem::align_of::<T>() != 0 {
        return Err(Error::Misaligned {
            address: first,
            align: core::mem::align_of::<T>(),
        });
    }
    match placement {
        Placement::Dense => {
            // Lay the values out exactly as the span holds them, then copy the span once.
            let base = (first - span.start) / size;
            let mut staging = vec![values[0]; span.len() / size];
            for (value, offset) in values.iter().zip(tensor.element_offsets()) {
                // In bounds: a dense layout maps its indices one to one onto the span.
                staging[(base as isize + offset) as usize] = *value;
            }
            // SAFETY: the span is the tensor's reachable memory on `device`, valid for writes
            // (not read-only; the importer holds it exclusively through `&mut CudaImport`).
            unsafe { hooks.copy_from_host(device, as_bytes(&staging), span.start) }
        }
        Placement::Runs { run } => {
            let mut chunks = values.chunks(run);
            let mut starts = tensor.element_offsets().step_by(run);
            while let (Some(chunk), Some(offset)) = (chunks.next(), starts.next()) {
                let address = (first as isize + offset * size as isize) as usize;
                // SAFETY: `run` consecutive elements from this index are contiguous (stride 1
                // along the last axis, or a single element) and lie in the tensor's span, which
                // is valid for writes as above.
                unsafe { hooks.copy_from_host(device, as_bytes(chunk), address)? };
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_layouts_in_any_axis_order_are_dense() {
        assert_eq!(placement(&[2, 3], &[3, 1]), Ok(Placement::Dense));
        assert_eq!(placement(&[2, 3], &[1, 2]), Ok(Placement::Dense));
        assert_eq!(placement(&[2, 3], &[-3, -1]), Ok(Placement::Dense));
        assert_eq!(placement(&[4, 1, 3], &[3, 99, 1]), Ok(Placement::Dense));
    }

    #[test]
    fn layouts_with_gaps_are_written_in_runs_along_a_unit_last_axis() {
        assert_eq!(placement(&[2, 3], &[4, 1]), Ok(Placement::Runs { run: 3 }));
        assert_eq!(placement(&[3, 2], &[1, 4]), Ok(Placement::Runs { run: 1 }));
        assert_eq!(placement(&[3], &[2]), Ok(Placement::Runs { run: 1 }));
    }

    #[test]
    fn layouts_where_indices_share_an_element_are_refused() {
        for (shape, strides) in [
            (&[2, 3][..], &[0, 1][..]),
            (&[2, 3], &[1, 1]),
            (&[3, 3], &[2, 1]),
        ] {
            assert!(
                matches!(
                    placement(shape, strides),
                    Err(Error::OverlappingStrides { .. })
                ),
                "{shape:?} {strides:?}"
            );
        }
    }
}
