//! Buffers and dimension lists: the building blocks that `#[derive(DLPack)]` and hand-written
//! producers put together into a tensor.
//!
//! A [`Buffer`] is a run of elements in one allocation: `Vec<T>`, `Box<[T]>`, `Arc<[T]>`, or a
//! device crate's buffer type. Every buffer is a one-dimensional [`Export`](crate::Export)
//! producer by itself, and a struct that pairs a buffer with a shape (and optionally strides and
//! a byte offset) describes any tensor inside it. The export path checks that such a description
//! stays inside the buffer's allocation, so a shape that does not fit its buffer is an error,
//! never an out-of-bounds read.
//!
//! A [`Dims`] is a list of sizes or strides: `Vec<usize>`, `[usize; N]`, `Vec<i64>`, `Box<[isize]>`
//! and the like.

use core::ops::Range;
use std::sync::Arc;

use crate::{CheckedTensor, Device, Element, Error, Export, ExportDesc, Flags, VecSlot};

/// A run of initialised elements in one allocation, on some device.
///
/// Implemented here for `Vec<T>`, `Box<[T]>` and `Arc<[T]>` (read-only, since other `Arc`s may
/// read it); device crates implement it for their buffer types, so that a struct holding one can
/// derive DLPack. Every buffer is also a one-dimensional [`Export`] producer.
///
/// ```
/// use dlpack_core::{Buffer, Device, ManagedTensor};
///
/// let data = vec![1u16, 2, 3];
/// assert_eq!((data.len(), Buffer::device(&data)), (3, Device::CPU));
/// let tensor = ManagedTensor::export(data)?; // every buffer exports as a 1-d tensor
/// assert_eq!(tensor.shape(), &[3]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Safety
///
/// For as long as the value lives and is not moved, [`Buffer::as_mut_ptr`] returns a non-NULL,
/// element-aligned pointer to [`Buffer::len`] initialised values of `Self::Elem` in one
/// allocation on [`Buffer::device`], which no one else writes (nor reads, unless
/// [`Buffer::is_read_only`]); unless `is_read_only` returns `true`, that memory is valid for
/// writes. `len`, `device` and `is_read_only` return the same values on every call. If
/// [`Buffer::GIVES_VEC`] is `true`, those elements do not lie inside the value itself (they are
/// on the heap, as a `Vec`'s are): a producer holding the buffer passes the constant on as its
/// own [`Export::GIVES_VEC`], whose `give_vec` borrows the value mutably, which would
/// invalidate a pointer to elements held inline.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a DLPack buffer",
    label = "a data field must hold a buffer of elements",
    note = "buffers are `Vec<T>`, `Box<[T]>`, `Arc<[T]>` for a `T: dlpack_core::Element`, and device crates' buffer types (dlpack-cuda, dlpack-oneapi)"
)]
pub unsafe trait Buffer: Send + 'static {
    /// The element type.
    type Elem: Element;

    /// A pointer to the first element. Called on the buffer at its final address.
    fn as_mut_ptr(&mut self) -> *mut Self::Elem;

    /// The number of elements.
    fn len(&self) -> usize;

    /// Whether the buffer has no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device the memory lives on.
    fn device(&self) -> Device {
        Device::CPU
    }

    /// Whether consumers must not write the memory (it is shared).
    fn is_read_only(&self) -> bool {
        false
    }

    /// Whether [`Buffer::give_vec`] may give a `Vec`. Set it only for buffers whose elements
    /// live on the heap, outside the value (a requirement of the trait's `# Safety` section;
    /// see [`Export::GIVES_VEC`]). Default `false`.
    const GIVES_VEC: bool = false;

    /// Gives the elements up as a host `Vec`, leaving the buffer empty, if this buffer is one
    /// (or wraps one) in host memory. Called only when [`Buffer::GIVES_VEC`] is `true`. The
    /// default returns `None`.
    fn give_vec(&mut self) -> Option<Vec<Self::Elem>> {
        None
    }

    /// The capacity of the `Vec` that [`Buffer::give_vec`] would give, in elements. The default
    /// is [`Buffer::len`], right for a buffer whose allocation holds exactly its elements (a
    /// `Box<[T]>`).
    fn vec_capacity(&self) -> usize {
        self.len()
    }

    /// Copies a tensor's elements, in row-major order, into a new buffer of this type.
    ///
    /// This is the import path's fallback when a tensor cannot be reclaimed without a copy.
    /// Host buffers take any host-accessible tensor of their element type; device buffers
    /// decide which devices they can copy from.
    ///
    /// # Errors
    ///
    /// The host buffers (`Vec`, `Box<[T]>`, `Arc<[T]>`) fail as [`CheckedTensor::to_vec`] does:
    /// [`Error::DataTypeMismatch`] and [`Error::NotHostAccessible`], say. A device buffer
    /// returns an error for a device it cannot copy from, and its runtime's errors.
    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error>
    where
        Self: Sized;
}

// SAFETY: a Vec's buffer holds `len` initialised elements in one allocation, is valid for reads
// and writes, and does not move when the Vec does; the Vec's owner is the only one accessing it.
unsafe impl<T: Element> Buffer for Vec<T> {
    type Elem = T;
    const GIVES_VEC: bool = true;
    fn as_mut_ptr(&mut self) -> *mut T {
        Vec::as_mut_ptr(self)
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn give_vec(&mut self) -> Option<Vec<T>> {
        Some(core::mem::take(self))
    }
    fn vec_capacity(&self) -> usize {
        self.capacity()
    }
    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        tensor.to_vec()
    }
}

// SAFETY: as for Vec: a boxed slice is one allocation that does not move with the box.
unsafe impl<T: Element> Buffer for Box<[T]> {
    type Elem = T;
    const GIVES_VEC: bool = true;
    fn as_mut_ptr(&mut self) -> *mut T {
        <[T]>::as_mut_ptr(self)
    }
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn give_vec(&mut self) -> Option<Vec<T>> {
        Some(core::mem::take(self).into_vec())
    }
    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        tensor.to_vec().map(Vec::into_boxed_slice)
    }
}

// SAFETY: the slice is initialised and stays in place while this Arc lives. Other Arcs may read
// it concurrently, so the buffer is read-only, and no one writes it (an `Arc<[T]>` gives no
// mutable access while shared).
unsafe impl<T: Element + Sync> Buffer for Arc<[T]> {
    type Elem = T;
    fn as_mut_ptr(&mut self) -> *mut T {
        <[T]>::as_ptr(self).cast_mut()
    }
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn is_read_only(&self) -> bool {
        true
    }
    fn copy_from_tensor(tensor: &CheckedTensor) -> Result<Self, Error> {
        tensor.to_vec().map(Arc::from)
    }
}

/// The address range of a buffer's elements, for [`ExportDesc::allocation`].
pub(crate) fn allocation_of<B: Buffer>(buffer: &mut B) -> Range<usize> {
    let start = buffer.as_mut_ptr().addr();
    // A buffer's elements fit the address space (Buffer contract), so this cannot overflow;
    // saturate rather than wrap all the same.
    let bytes = buffer.len().saturating_mul(core::mem::size_of::<B::Elem>());
    start..start.saturating_add(bytes)
}

/// Describes a buffer plus a layout over it: the description a struct pairing a buffer with a
/// shape (and optionally strides and a byte offset) exports.
///
/// `shape` and `strides` (in elements, row-major when `None`) are written into `shape_out` and
/// `strides_out`, which must have [`Dims::ndim`] entries. The description carries the buffer's
/// allocation, so the export constructor refuses a layout that reaches outside the buffer
/// ([`Error::SpanOutsideAllocation`]) or whose reach overflows ([`Error::Overflow`]); dims that
/// do not fit `i64` are written as `i64::MAX` (see [`Dims`]).
///
/// This is what `#[derive(DLPack)]` generates calls to; a hand-written [`Export`] for a struct
/// with a buffer field can use it the same way.
///
/// ```
/// use dlpack_core::__private::describe_buffer;
/// use dlpack_core::{Export, ExportDesc, ManagedTensor};
///
/// struct Image { pixels: Vec<u8>, hw: [usize; 2] }
///
/// // SAFETY: `describe_buffer` describes memory inside `pixels` only (export checks the layout
/// // against the buffer's allocation), and `ndim` is the length of a fixed-size array.
/// unsafe impl Export for Image {
///     fn ndim(&self) -> usize { 2 }
///     fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
///         describe_buffer(&mut self.pixels, &self.hw, None::<&[i64; 2]>, 0, shape, strides)
///     }
/// }
///
/// let t = ManagedTensor::export(Image { pixels: vec![7; 6], hw: [2, 3] })?;
/// assert_eq!((t.shape(), t.strides()), (&[2, 3][..], &[3, 1][..]));
///
/// let too_big = Image { pixels: vec![7; 6], hw: [3, 3] };
/// assert!(ManagedTensor::export(too_big).is_err()); // 9 elements do not fit in 6
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub fn describe_buffer<B: Buffer, S: Dims, R: Dims>(
    buffer: &mut B,
    shape: &S,
    strides: Option<&R>,
    byte_offset: u64,
    shape_out: &mut [i64],
    strides_out: &mut [i64],
) -> ExportDesc {
    shape.write_dims(shape_out);
    match strides {
        Some(strides) => strides.write_dims(strides_out),
        None => crate::layout::fill_row_major_strides(shape_out, strides_out),
    }
    let allocation = allocation_of(buffer);
    let mut flags = Flags::empty();
    if buffer.is_read_only() {
        flags |= Flags::READ_ONLY;
    }
    ExportDesc {
        data: buffer.as_mut_ptr().cast(),
        byte_offset,
        dtype: B::Elem::DTYPE,
        device: buffer.device(),
        flags,
        allocation: Some(allocation),
    }
}

/// A type made of one [`Buffer`] and a layout over it: implement this safe trait, and the type
/// is an [`Export`] producer (through a blanket implementation), with no `unsafe` code.
///
/// The export checks the layout against the buffer's allocation, so a shape that does not fit
/// the buffer is refused ([`Error::SpanOutsideAllocation`]), never read out of bounds. The
/// value is moved into the export and comes back whole from
/// [`ManagedTensor::reclaim`](crate::ManagedTensor::reclaim). Every [`Buffer`] is a
/// `ShapedBuffer` (one dimension over all its elements), which is how a `Vec` exports.
///
/// ```
/// use dlpack_core::{ManagedTensor, ShapedBuffer};
///
/// /// A row-major matrix.
/// struct Matrix { rows: usize, cols: usize, data: Vec<f32> }
///
/// impl ShapedBuffer for Matrix {
///     type Buffer = Vec<f32>;
///     fn buffer(&mut self) -> &mut Vec<f32> { &mut self.data }
///     fn ndim(&self) -> usize { 2 }
///     fn shape(&self, shape: &mut [i64]) {
///         shape.copy_from_slice(&[self.rows as i64, self.cols as i64]);
///     }
///     // `strides` defaults to compact row-major, `byte_offset` to 0.
/// }
///
/// let m = Matrix { rows: 2, cols: 3, data: vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0] };
/// let data = m.data.as_ptr();
/// let tensor = ManagedTensor::export(m)?;
/// assert_eq!((tensor.shape(), tensor.strides()), (&[2, 3][..], &[3, 1][..]));
/// assert_eq!(tensor.view::<f32>()?.as_ptr(), data); // zero copy
/// let m: Matrix = tensor.reclaim().expect("exported from a Matrix");
/// assert_eq!(m.data.as_ptr(), data);
///
/// // A shape that does not fit the buffer is refused, and the value comes back.
/// let refused = ManagedTensor::export(Matrix { rows: 3, cols: 3, data: vec![0.0; 6] }).unwrap_err();
/// assert_eq!(refused.value.data.len(), 6);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// A `ShapedBuffer` other than a bare buffer does not hand its `Vec` to
/// [`ManagedTensor::into_vec`](crate::ManagedTensor::into_vec) (a consumer that needs a `Vec`
/// copies instead): that would call [`ShapedBuffer::buffer`] on a value whose memory a live
/// tensor still describes. `#[derive(DLPack)]` structs do hand it over. Write
/// `unsafe impl Export` for memory no [`Buffer`] owns (foreign memory, a view).
pub trait ShapedBuffer: Send + 'static {
    /// The buffer the elements live in.
    type Buffer: Buffer;

    /// The buffer. Called once per export, on the value at its final address.
    fn buffer(&mut self) -> &mut Self::Buffer;

    /// The number of dimensions. Called once per export, before the other methods.
    fn ndim(&self) -> usize;

    /// Writes the size of each dimension into `shape`, which has [`ShapedBuffer::ndim`]
    /// entries.
    fn shape(&self, shape: &mut [i64]);

    /// Writes the stride of each dimension, in elements, into `strides` (as many entries as
    /// `shape`). The default writes compact row-major strides.
    fn strides(&self, shape: &[i64], strides: &mut [i64]) {
        crate::layout::fill_row_major_strides(shape, strides);
    }

    /// Bytes from the buffer's first element to the tensor's first element. Default 0.
    fn byte_offset(&self) -> u64 {
        0
    }
}

/// Every buffer is a one-dimensional tensor over all its elements.
impl<B: Buffer> ShapedBuffer for B {
    type Buffer = B;
    fn buffer(&mut self) -> &mut B {
        self
    }
    fn ndim(&self) -> usize {
        1
    }
    fn shape(&self, shape: &mut [i64]) {
        shape.fill(i64::try_from(self.len()).unwrap_or(i64::MAX));
    }
}

/// The buffer of a producer that is its own buffer (a `Vec`, a `Box<[T]>`, a device buffer
/// exported bare): the types are the same only through the blanket `ShapedBuffer` impl of
/// [`Buffer`] types, so no `ShapedBuffer` written elsewhere reaches the buffer paths below.
#[inline(always)]
fn as_own_buffer<P: ShapedBuffer>(producer: &mut P) -> Option<&mut P::Buffer> {
    (producer as &mut dyn core::any::Any).downcast_mut::<P::Buffer>()
}

// SAFETY: `ndim` is called once per export (the export constructor's contract with itself), so
// `describe` gets slices of the length it returned, whatever a later call would say.
// - A producer that is its own buffer (`as_own_buffer`; then `P: Buffer`) is described as shape
//   `[len]`, stride 1, byte offset 0 from the buffer's first element: exactly the buffer's `len`
//   initialised elements, in one allocation on the buffer's device (Buffer contract), with the
//   buffer's read-only state. That is valid by construction, so it names no allocation to be
//   checked: `len` fits `i64` and the span fits the address space because the elements do, the
//   pointer is non-NULL and aligned (Buffer contract), and `Element::DTYPE` is a valid dtype.
//   Its `give_vec` is the buffer's own (`give_vec_of_buffer`), whose elements are the whole tensor.
// - Any other producer: whatever its safe methods write, the description names the buffer's
//   allocation, and the export constructor refuses a layout that reaches outside it; pointer,
//   device, dtype and read-only state come from the buffer (Buffer contract), which is owned by
//   the value and so stays in place and unshared until the value is dropped. No method of the
//   value runs after `describe` (its `give_vec` does nothing), so nothing can free the memory
//   while a tensor describes it.
// - `GIVES_VEC` is the buffer's: when true, the buffer's elements are not inside the buffer
//   value (Buffer contract), so not inside the producer either.
unsafe impl<P: ShapedBuffer> Export for P {
    const GIVES_VEC: bool = <P::Buffer as Buffer>::GIVES_VEC;
    fn ndim(&self) -> usize {
        ShapedBuffer::ndim(self)
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        if let Some(buffer) = as_own_buffer(self) {
            // What the general path below writes for a bare buffer, without its loops or an
            // allocation check that cannot fail: every `Vec` export takes this path.
            // `ndim` is 1 for a bare buffer (its blanket `ShapedBuffer` impl).
            if let ([size], [stride]) = (shape, strides) {
                *size = buffer.len() as i64;
                *stride = 1;
            }
            return ExportDesc {
                data: buffer.as_mut_ptr().cast(),
                byte_offset: 0,
                dtype: <P::Buffer as Buffer>::Elem::DTYPE,
                device: buffer.device(),
                flags: Flags::empty().with(Flags::READ_ONLY, buffer.is_read_only()),
                allocation: None,
            };
        }
        ShapedBuffer::shape(self, shape);
        ShapedBuffer::strides(self, shape, strides);
        let byte_offset = self.byte_offset();
        let buffer = self.buffer();
        let allocation = allocation_of(buffer);
        ExportDesc {
            data: buffer.as_mut_ptr().cast(),
            byte_offset,
            dtype: <P::Buffer as Buffer>::Elem::DTYPE,
            device: buffer.device(),
            flags: Flags::empty().with(Flags::READ_ONLY, buffer.is_read_only()),
            allocation: Some(allocation),
        }
    }
    fn give_vec(&mut self, slot: &mut dyn core::any::Any) {
        if let Some(buffer) = as_own_buffer(self) {
            give_vec_of_buffer(buffer, slot);
        }
    }
}

/// [`Export::give_vec`] for a producer whose whole tensor is `buffer` (row-major, from its first
/// element): moves the buffer's `Vec` into `slot` when the element types match, the buffer
/// can give one up ([`Buffer::give_vec`]; nothing happens unless [`Buffer::GIVES_VEC`]) and
/// the slot takes a `Vec` that starts there with its capacity ([`VecSlot::takes`]).
pub fn give_vec_of_buffer<B: Buffer>(buffer: &mut B, slot: &mut dyn core::any::Any) {
    if !B::GIVES_VEC {
        return;
    }
    let Some(slot) = slot.downcast_mut::<VecSlot<B::Elem>>() else {
        return;
    };
    if !slot.takes(buffer.as_mut_ptr(), buffer.vec_capacity()) {
        return;
    }
    if let Some(vec) = Buffer::give_vec(buffer) {
        slot.fill(vec);
    }
}

/// A list of dimension sizes or strides: what a shape or strides field can hold.
///
/// Implemented for `Vec`, `Box<[_]>` and arrays of `usize`, `isize`, `i64`, `u64`, `i32`
/// and `u32`. Values that do not fit `i64` are written as `i64::MAX`: the export then fails
/// (a layout that reaches past its buffer, usually [`Error::SpanOutsideAllocation`]), except
/// for a tensor with a zero-size axis, which has no element to reach and is exported with that
/// size as `i64::MAX`. Unsigned types refuse negative values on import.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot hold DLPack dimensions",
    label = "a shape or strides field must be a list of integers",
    note = "dimension lists are `Vec<_>`, `Box<[_]>` or `[_; N]` of `usize`, `isize`, `i64`, `u64`, `i32` or `u32`"
)]
pub trait Dims {
    /// The number of entries.
    fn ndim(&self) -> usize;

    /// Writes the entries into `out` (`out.len() == self.ndim()`).
    fn write_dims(&self, out: &mut [i64]);

    /// Builds a list from imported `i64` values.
    ///
    /// # Errors
    ///
    /// [`Error::DimOutOfRange`] for a value the entry type cannot hold (a negative value in an
    /// unsigned list), [`Error::NdimMismatch`] for an array of another length.
    fn from_dims(dims: &[i64]) -> Result<Self, Error>
    where
        Self: Sized;
}

fn convert<T: TryFrom<i64>>(dims: &[i64]) -> Result<Vec<T>, Error> {
    dims.iter()
        .enumerate()
        .map(|(axis, &value)| {
            T::try_from(value).map_err(|_| Error::DimOutOfRange {
                axis,
                value,
                target: core::any::type_name::<T>(),
            })
        })
        .collect()
}

fn write_all<T: Copy>(dims: &[T], out: &mut [i64])
where
    i64: TryFrom<T>,
{
    for (o, &d) in out.iter_mut().zip(dims) {
        *o = i64::try_from(d).unwrap_or(i64::MAX);
    }
}

macro_rules! dims_for {
    ($($t:ty),*) => {$(
        impl Dims for Vec<$t> {
            fn ndim(&self) -> usize {
                self.len()
            }
            fn write_dims(&self, out: &mut [i64]) {
                write_all(self, out)
            }
            fn from_dims(dims: &[i64]) -> Result<Self, Error> {
                convert(dims)
            }
        }
        impl Dims for Box<[$t]> {
            fn ndim(&self) -> usize {
                self.len()
            }
            fn write_dims(&self, out: &mut [i64]) {
                write_all(self, out)
            }
            fn from_dims(dims: &[i64]) -> Result<Self, Error> {
                convert(dims).map(Vec::into_boxed_slice)
            }
        }
        impl<const N: usize> Dims for [$t; N] {
            fn ndim(&self) -> usize {
                N
            }
            fn write_dims(&self, out: &mut [i64]) {
                write_all(self, out)
            }
            fn from_dims(dims: &[i64]) -> Result<Self, Error> {
                let v = convert::<$t>(dims)?;
                <[$t; N]>::try_from(v).map_err(|v| Error::NdimMismatch { found: v.len(), expected: N })
            }
        }
    )*};
}

dims_for!(usize, isize, i64, u64, i32, u32);
