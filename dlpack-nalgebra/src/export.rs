//! Export: nalgebra matrices as DLPack tensors.
//!
//! An owned matrix moves into the managed tensor ([`into_dlpack`]) inside a [`MatrixProducer`] (or, for an
//! `SMatrix`, an [`SMatrixProducer`]): one allocation for the tensor's header, none for the
//! data, which stays where nalgebra put it (a `DMatrix`'s or `DVector`'s `Vec`; an `SMatrix`'s
//! inline array is moved to the heap once). The tensor is writable, since it is the only
//! owner. nalgebra stores matrices column-major, so an `r x c` matrix becomes a tensor
//! of shape `[r, c]` with element strides `[1, r]`; a column vector (a matrix type whose column
//! count is the type-level `U1`: `DVector`, `SVector`) becomes a 1-d tensor of shape `[r]`.
//!
//! A borrowed view cannot move into a tensor, which has no lifetime: [`export_view`] and
//! [`export_view_mut`] are `unsafe` and say what the caller must guarantee, and [`to_dlpack`]
//! copies any matrix or view into a fresh one.

use core::any::Any;
use core::fmt;
use core::marker::PhantomData;
use core::mem::size_of;

use crate::OwnedMatrix;
use dlpack_core::{Element, Error, Export, ExportDesc, ManagedTensor, Refused};
use nalgebra::{
    Const, DMatrix, DVector, Dim, Dyn, Matrix, RawStorage, RawStorageMut, SMatrix, Scalar, U1,
    VecStorage, ViewStorage, ViewStorageMut,
};

/// An owned, heap-allocated nalgebra matrix inside a DLPack tensor: the producer type that
/// [`into_dlpack`] moves a `DMatrix`, `DVector`, `RowDVector`, `Matrix3xX`, ... (any matrix with a
/// `VecStorage`) into, and that [`ManagedTensor::reclaim`] gives back (as
/// [`into_owned`](crate::into_owned) does). [`DMatrixProducer`] and
/// [`DVectorProducer`] name the common ones; [`SMatrixProducer`] is the one for `SMatrix`.
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_nalgebra::{DMatrixProducer, MatrixProducer};
/// use nalgebra::DMatrix;
///
/// let m = DMatrix::from_fn(2, 3, |i, j| (10 * i + j) as f32);
/// let data = m.as_ptr();
/// let tensor = ManagedTensor::export(MatrixProducer::new(m))?;
/// assert_eq!((tensor.shape(), tensor.strides()), (&[2, 3][..], &[1, 2][..]));
///
/// let back = tensor.reclaim::<DMatrixProducer<f32>>().expect("a DMatrix<f32> export");
/// assert_eq!(back.into_inner().as_ptr(), data); // the same allocation, never copied
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub struct MatrixProducer<T, R: Dim, C: Dim> {
    matrix: Matrix<T, R, C, VecStorage<T, R, C>>,
}

/// The producer of an exported `DMatrix<T>`.
pub type DMatrixProducer<T> = MatrixProducer<T, Dyn, Dyn>;

/// The producer of an exported `DVector<T>`.
pub type DVectorProducer<T> = MatrixProducer<T, Dyn, U1>;

impl<T, R: Dim, C: Dim> MatrixProducer<T, R, C> {
    /// Wraps a matrix for export, for [`ManagedTensor::export_legacy`] say ([`into_dlpack`]
    /// makes one itself).
    ///
    /// [`into_dlpack`] first refuses an empty matrix with more than `i64::MAX` rows or columns,
    /// which no DLPack shape holds; exported directly, the producer of one describes
    /// `i64::MAX` of them (still no element).
    pub fn new(matrix: Matrix<T, R, C, VecStorage<T, R, C>>) -> Self {
        MatrixProducer { matrix }
    }

    /// The matrix, for instance after [`ManagedTensor::reclaim`].
    pub fn into_inner(self) -> Matrix<T, R, C, VecStorage<T, R, C>> {
        self.matrix
    }

    /// The matrix, by reference.
    pub fn matrix(&self) -> &Matrix<T, R, C, VecStorage<T, R, C>> {
        &self.matrix
    }
}

impl<T: Scalar, R: Dim, C: Dim> fmt::Debug for MatrixProducer<T, R, C>
where
    VecStorage<T, R, C>: RawStorage<T, R, C>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MatrixProducer")
            .field("shape", &self.matrix.shape())
            .field("data", &self.matrix.as_ptr())
            .finish()
    }
}

/// An `SMatrix` (or `SVector`) inside a DLPack tensor: the producer type [`into_dlpack`] moves
/// it into and [`ManagedTensor::reclaim`] gives back.
///
/// The elements are moved to the heap (one allocation of `R * C` elements) rather than kept
/// inside the producer: dlpack-core borrows a producer mutably when a consumer asks it for a
/// `Vec` ([`ManagedTensor::into_vec`]), and that borrow must not cover memory the tensor's data
/// pointer refers to. Moving an `SMatrix` copies its elements in any case, being inline.
///
/// ```
/// use dlpack_nalgebra::SMatrixProducer;
/// use nalgebra::Matrix2;
///
/// let m = Matrix2::new(1.0f64, 2.0, 3.0, 4.0);
/// let tensor = dlpack_nalgebra::into_dlpack(m)?;
/// let back = tensor.reclaim::<SMatrixProducer<f64, 2, 2>>().expect("a Matrix2<f64> export");
/// assert_eq!(back.into_inner(), m);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub struct SMatrixProducer<T, const R: usize, const C: usize> {
    matrix: Box<SMatrix<T, R, C>>,
}

impl<T, const R: usize, const C: usize> SMatrixProducer<T, R, C> {
    /// Moves a matrix to the heap for export, for [`ManagedTensor::export_legacy`] say
    /// ([`into_dlpack`] makes one itself). As for [`MatrixProducer::new`], only
    /// [`into_dlpack`] refuses an empty `SMatrix<T, 0, C>` with more than `i64::MAX` columns.
    pub fn new(matrix: SMatrix<T, R, C>) -> Self {
        SMatrixProducer {
            matrix: Box::new(matrix),
        }
    }

    /// The matrix, for instance after [`ManagedTensor::reclaim`].
    pub fn into_inner(self) -> SMatrix<T, R, C> {
        *self.matrix
    }

    /// The matrix, by reference.
    pub fn matrix(&self) -> &SMatrix<T, R, C> {
        &self.matrix
    }
}

impl<T: Scalar, const R: usize, const C: usize> fmt::Debug for SMatrixProducer<T, R, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SMatrixProducer")
            .field("shape", &(R, C))
            .field("data", &self.matrix.as_ptr())
            .finish()
    }
}

/// The number of DLPack dimensions of a matrix type: 1 for column vectors (the column count is
/// the type-level `U1`), 2 otherwise.
pub(crate) fn ndim_of<C: Dim>() -> usize {
    if C::is::<U1>() { 1 } else { 2 }
}

/// A `usize` as a DLPack `i64`; `i64::MAX` if it does not fit, which [`fits_dlpack`] refuses
/// before the exports of this crate make a producer.
fn to_i64(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Refuses a shape or strides that DLPack's `i64` cannot hold: only an empty matrix can have
/// them (nalgebra makes a `usize::MAX x 0` one without memory), since the elements of any other
/// fit in memory. Checked before a producer is made rather than in its [`Export::check`], which
/// would cost every export more than the check itself (measured on the round-trip bench).
#[inline]
pub(crate) fn fits_dlpack(shape: (usize, usize), strides: (usize, usize)) -> Result<(), Error> {
    // One comparison on the export path: every value fits when their bitwise or does.
    if (shape.0 | shape.1 | strides.0 | strides.1) <= i64::MAX as usize {
        Ok(())
    } else {
        Err(too_large_for_dlpack(shape, strides))
    }
}

/// The error of [`fits_dlpack`].
#[cold]
fn too_large_for_dlpack((nrows, ncols): (usize, usize), (rs, cs): (usize, usize)) -> Error {
    let value = [nrows, ncols, rs, cs]
        .into_iter()
        .max()
        .unwrap_or(usize::MAX);
    Error::Overflow {
        what: format!(
            "a matrix of {nrows} x {ncols} elements with strides ({rs}, {cs}): {value} does not fit DLPack's i64 sizes and strides"
        ),
    }
}

/// Writes a matrix's shape and element strides as a 1-d or 2-d DLPack layout.
fn write_layout(
    ndim: usize,
    (nrows, ncols): (usize, usize),
    (rs, cs): (usize, usize),
    shape: &mut [i64],
    strides: &mut [i64],
) {
    if ndim == 1 {
        shape.copy_from_slice(&[to_i64(nrows)]);
        strides.copy_from_slice(&[to_i64(rs)]);
    } else {
        shape.copy_from_slice(&[to_i64(nrows), to_i64(ncols)]);
        strides.copy_from_slice(&[to_i64(rs), to_i64(cs)]);
    }
}

/// A description of `len` writable host elements at `data`, naming them as the allocation so
/// that the export constructor checks the layout against it.
fn owned_desc<T: Element>(data: *mut T, len: usize) -> ExportDesc {
    let start = data.addr();
    let end = start.saturating_add(len.saturating_mul(size_of::<T>()));
    ExportDesc {
        allocation: Some(start..end),
        ..ExportDesc::host(data)
    }
}

// SAFETY: the description is the VecStorage's own buffer: `nrows * ncols` initialised `T`s in
// the Vec's heap allocation (the VecStorage invariant), column-major with nalgebra's own strides
// (1, nrows), which stays in place while the producer (and so the Vec) lives, even when the
// producer moves or is borrowed, since the producer holds only the Vec's pointer. The producer
// owns the matrix, so nobody else accesses the memory and it is writable. The description names
// that buffer as its allocation, so the export constructor itself refuses any layout reaching
// outside it. `ndim` depends only on the type `C`. `give_vec` hands the Vec over only when
// column-major order is also row-major order.
unsafe impl<T, R, C> Export for MatrixProducer<T, R, C>
where
    T: Element,
    R: Dim,
    C: Dim,
    VecStorage<T, R, C>: RawStorageMut<T, R, C> + Default,
{
    // The matrix's elements live in its Vec's heap buffer, never inline.
    const GIVES_VEC: bool = true;

    fn ndim(&self) -> usize {
        ndim_of::<C>()
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        write_layout(
            ndim_of::<C>(),
            self.matrix.shape(),
            self.matrix.strides(),
            shape,
            strides,
        );
        let elements = self.matrix.data.as_mut_slice();
        owned_desc(elements.as_mut_ptr(), elements.len())
    }

    /// Gives the `Vec` up when the matrix is also row-major: when it has at most one row or at
    /// most one column (a vector, or an empty matrix), where column-major and row-major order
    /// are the same. A general `r x c` matrix (`r, c > 1`) keeps its `Vec`.
    fn give_vec(&mut self, slot: &mut dyn Any) {
        let (nrows, ncols) = self.matrix.shape();
        if nrows > 1 && ncols > 1 {
            return;
        }
        if let Some(slot) = slot.downcast_mut::<dlpack_core::VecSlot<T>>()
            && slot.takes(
                self.matrix.data.as_vec().as_ptr(),
                self.matrix.data.as_vec().capacity(),
            )
        {
            let storage = core::mem::take(&mut self.matrix.data);
            slot.fill(Vec::from(storage));
        }
    }
}

// SAFETY: the description is the boxed ArrayStorage: `R * C` initialised `T`s in the Box's heap
// allocation, column-major with strides (1, R), which stays in place while the producer (and so
// the Box) lives, even when the producer moves or is borrowed, since the producer holds only the
// Box's pointer. The producer owns the matrix, so the memory is writable and nobody else
// accesses it. The description names the array as its allocation, which the export constructor
// checks the layout against. `ndim` depends only on `C`. There is no Vec to give.
unsafe impl<T: Element, const R: usize, const C: usize> Export for SMatrixProducer<T, R, C> {
    fn ndim(&self) -> usize {
        ndim_of::<Const<C>>()
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        write_layout(
            ndim_of::<Const<C>>(),
            self.matrix.shape(),
            self.matrix.strides(),
            shape,
            strides,
        );
        let array: &mut [[T; R]; C] = &mut self.matrix.data.0;
        owned_desc(array.as_mut_ptr().cast::<T>(), R * C)
    }
}

/// Moves an owned matrix (`DMatrix`, `DVector`, `SMatrix`, ...: any [`OwnedMatrix`]) into a new
/// DLPack tensor without copying its elements: shape `[rows, cols]` with column-major strides
/// `[1, rows]`, or `[rows]` with stride `[1]` for a column vector type. The tensor is writable.
///
/// [`into_owned`](crate::into_owned) gives the matrix back without a copy
/// ([`Transfer::Reclaimed`](dlpack_core::Transfer::Reclaimed)), as does
/// [`ManagedTensor::reclaim`] with the matrix's [`OwnedMatrix::Producer`] ([`DMatrixProducer`],
/// [`DVectorProducer`], [`SMatrixProducer`], ...).
///
/// ```
/// use nalgebra::{DVector, SMatrix};
///
/// let v = DVector::from_vec(vec![1u8, 2, 3]);
/// let t = dlpack_nalgebra::into_dlpack(v)?;
/// assert_eq!((t.shape(), t.strides()), (&[3][..], &[1][..]));
///
/// let s = SMatrix::<f64, 2, 2>::new(1.0, 2.0, 3.0, 4.0); // row by row
/// let t = dlpack_nalgebra::into_dlpack(s)?;
/// assert_eq!(t.view::<f64>()?.get(&[0, 1]), Some(&2.0));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Overflow`] for an empty matrix with more than `i64::MAX` rows or columns (nalgebra
/// makes a `usize::MAX x 0` one without memory), which no DLPack shape holds. The matrix comes
/// back, untouched, in [`Refused::value`](dlpack_core::Refused). The layout of any other owned
/// matrix passes [`ManagedTensor::export`]'s checks.
pub fn into_dlpack<M: OwnedMatrix>(matrix: M) -> Result<ManagedTensor, Refused<M>> {
    if let Err(error) = matrix.fits_dlpack() {
        return Err(Refused {
            error,
            value: matrix,
        });
    }
    ManagedTensor::export(matrix.into_producer()).map_err(|refused| Refused {
        error: refused.error,
        value: M::from_producer(refused.value),
    })
}

/// Copies any matrix or view into a new owned one and exports that: a `DVector` (1-d) for a
/// column vector type, a `DMatrix` otherwise. The safe way to export a borrowed view.
///
/// ```
/// use nalgebra::DMatrix;
///
/// let m = DMatrix::from_fn(4, 4, |i, j| (4 * i + j) as i32);
/// let t = dlpack_nalgebra::to_dlpack(&m.view((1, 1), (2, 3)))?;
/// assert_eq!(t.shape(), &[2, 3]);
/// assert_eq!(t.view::<i32>()?.get(&[1, 2]), Some(&11));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::OutOfMemory`] when the copy does not fit in memory: a view that nalgebra itself made
/// (`from_slice_with_strides` with a stride of 0) can broadcast a few elements over far more
/// indices than memory holds. [`Error::Overflow`] for an empty view with more than `i64::MAX`
/// rows or columns, as for [`into_dlpack`].
pub fn to_dlpack<T, R, C, S>(matrix: &Matrix<T, R, C, S>) -> Result<ManagedTensor, Error>
where
    T: Element + Scalar,
    R: Dim,
    C: Dim,
    S: RawStorage<T, R, C>,
{
    let (nrows, ncols) = matrix.shape();
    let data = column_major_vec(matrix)?;
    if ndim_of::<C>() == 1 {
        Ok(into_dlpack(DVector::from_vec(data))?)
    } else {
        Ok(into_dlpack(DMatrix::from_vec(nrows, ncols, data))?)
    }
}

/// The elements of any matrix or view in column-major order, in a new `Vec`: the copy behind
/// [`to_dlpack`] and [`CowMatrix::into_owned`](crate::CowMatrix::into_owned). It reads them
/// by index, which nalgebra gets right whatever the strides (its iterators do not: see the
/// [`import`](crate::import) module docs).
///
/// # Errors
///
/// [`Error::OutOfMemory`] when they do not fit in memory, instead of `Vec`'s panic or abort.
pub(crate) fn column_major_vec<T, R, C, S>(matrix: &Matrix<T, R, C, S>) -> Result<Vec<T>, Error>
where
    T: Scalar,
    R: Dim,
    C: Dim,
    S: RawStorage<T, R, C>,
{
    let (nrows, ncols) = matrix.shape();
    let Some(len) = nrows.checked_mul(ncols) else {
        return Err(Error::OutOfMemory {
            bytes: (nrows as u128 * ncols as u128).saturating_mul(size_of::<T>() as u128),
        });
    };
    if len == 0 {
        // No loop over the rows or columns of an empty matrix: there may be any number of them.
        return Ok(Vec::new());
    }
    let mut data = dlpack_core::__private::try_vec_with_capacity(len)?;
    for j in 0..ncols {
        data.extend((0..nrows).map(|i| matrix[(i, j)].clone()));
    }
    Ok(data)
}

/// The producer behind [`export_view`] and [`export_view_mut`]: the elements of a nalgebra
/// view, described with the view's own strides, whose lifetime the caller of those functions
/// vouches for.
pub struct ViewProducer<T> {
    data: *mut T,
    ndim: usize,
    shape: (usize, usize),
    strides: (usize, usize),
    read_only: bool,
    _elements: PhantomData<T>,
}

// SAFETY: a ViewProducer is a shared (read-only) or exclusive borrow of `T`s whose lifetime the
// caller of `export_view(_mut)` guarantees; `T: Element` is `Send + Sync`, so both kinds of
// borrow may move to another thread, as `&T` and `&mut T` may.
unsafe impl<T: Element> Send for ViewProducer<T> {}

impl<T> fmt::Debug for ViewProducer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ViewProducer")
            .field("data", &self.data)
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .field("read_only", &self.read_only)
            .finish()
    }
}

// SAFETY: the description is the view's: its first element and nalgebra strides, which reach
// exactly the view's elements (the view storage's invariant), initialised `T`s. The callers of
// `export_view` / `export_view_mut` guarantee (their `# Safety` sections) that this memory stays
// valid and in place, is not written by anyone else (nor read, for a mutable view) until the
// producer is dropped; a shared view is described read-only, a mutable one writable. `ndim` is a
// stored constant.
unsafe impl<T: Element> Export for ViewProducer<T> {
    fn ndim(&self) -> usize {
        self.ndim
    }

    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        write_layout(self.ndim, self.shape, self.strides, shape, strides);
        let desc = ExportDesc::host(self.data);
        if self.read_only {
            desc.read_only()
        } else {
            desc
        }
    }
}

/// Exports a shared nalgebra view without copying: a read-only tensor over the view's elements,
/// with its shape and strides (1-d for a column vector type).
///
/// ```
/// use nalgebra::DMatrix;
///
/// let m = DMatrix::from_fn(4, 5, |i, j| (10 * i + j) as f64);
/// let view = m.view((1, 1), (2, 3));
/// // SAFETY: `m` outlives the tensor, which is dropped below, and nothing writes `m` meanwhile.
/// let t = unsafe { dlpack_nalgebra::export_view(view)? };
/// assert!(t.is_read_only());
/// assert_eq!((t.shape(), t.strides()), (&[2, 3][..], &[1, 4][..]));
/// assert_eq!(t.view::<f64>()?.as_ptr(), &m[(1, 1)] as *const f64); // zero copy
/// drop(t);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Overflow`] for an empty view with more than `i64::MAX` rows or columns, or such
/// strides (nalgebra makes them without memory), which no DLPack layout holds. The layout of
/// any other nalgebra view passes [`ManagedTensor::export`]'s checks.
///
/// # Safety
///
/// A tensor has no lifetime, so the borrow checker no longer sees the view once it is exported.
/// Until the returned tensor is dropped (by this process, or by whichever consumer it is handed
/// to, on any thread, however late), the caller must keep the memory the view borrows alive and
/// in place, and must not write to it nor let anyone else write to it. Dropping, moving (for an
/// inline `SMatrix`), resizing or mutating the viewed matrix before then is undefined behaviour.
/// When that cannot be guaranteed, use [`to_dlpack`].
pub unsafe fn export_view<T, R, C, RStride, CStride>(
    view: Matrix<T, R, C, ViewStorage<'_, T, R, C, RStride, CStride>>,
) -> Result<ManagedTensor, Error>
where
    T: Element,
    R: Dim,
    C: Dim,
    RStride: Dim,
    CStride: Dim,
{
    fits_dlpack(view.shape(), view.strides())?;
    Ok(ManagedTensor::export(ViewProducer {
        data: view.data.ptr().cast_mut(),
        ndim: ndim_of::<C>(),
        shape: view.shape(),
        strides: view.strides(),
        read_only: true,
        _elements: PhantomData,
    })?)
}

/// Exports a mutable nalgebra view without copying: a writable tensor over the view's elements,
/// with its shape and strides (1-d for a column vector type). Writes through the tensor land in
/// the viewed matrix.
///
/// ```
/// use nalgebra::DMatrix;
///
/// let mut m = DMatrix::<f32>::zeros(3, 3);
/// // SAFETY: `m` is neither used nor dropped until the tensor is dropped, below.
/// let mut t = unsafe { dlpack_nalgebra::export_view_mut(m.column_mut(1))? };
/// t.view_mut::<f32>()?.copy_from_slice(&[1.0, 2.0, 3.0])?;
/// drop(t);
/// assert_eq!(m.column(1).as_slice(), &[1.0, 2.0, 3.0]);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// As for [`export_view`].
///
/// # Safety
///
/// As for [`export_view`], and more: until the returned tensor is dropped, the caller must not
/// read the viewed memory either (the tensor's holder may be writing it), and must not let
/// anyone else access it other than through the tensor.
pub unsafe fn export_view_mut<T, R, C, RStride, CStride>(
    mut view: Matrix<T, R, C, ViewStorageMut<'_, T, R, C, RStride, CStride>>,
) -> Result<ManagedTensor, Error>
where
    T: Element,
    R: Dim,
    C: Dim,
    RStride: Dim,
    CStride: Dim,
{
    fits_dlpack(view.shape(), view.strides())?;
    Ok(ManagedTensor::export(ViewProducer {
        data: view.data.ptr_mut(),
        ndim: ndim_of::<C>(),
        shape: view.shape(),
        strides: view.strides(),
        read_only: false,
        _elements: PhantomData,
    })?)
}
