//! Import and ownership: [`CheckedTensor`], the validated description every view is made from,
//! and the owners that dereference to it: [`ManagedTensor`], which calls a managed tensor's
//! deleter exactly once, and [`BorrowedTensor`], a tensor lent for a while.
//!
//! - `checked`: the validation, run once, and the accessors and checks of [`CheckedTensor`];
//! - `typed`: its typed views and copies;
//! - `managed`: [`ManagedTensor`]'s import, mutable access, hand-over to C and drop;
//! - `exported`: [`ManagedTensor::export`] and the other export constructors;
//! - `reclaim`: taking the memory over ([`ManagedTensor::reclaim`], [`ManagedTensor::into_vec`]);
//! - `borrowed`: [`BorrowedTensor`].

use core::ptr::NonNull;

mod borrowed;
mod checked;
mod exported;
mod managed;
mod reclaim;
mod typed;

pub use borrowed::BorrowedTensor;
pub use checked::CheckedTensor;
pub use managed::ManagedTensor;

/// An imported tensor whose holder may write its memory: a [`ManagedTensor`] (owned) or a
/// [`BorrowedTensor`] (lent for a call). The adapters' `view_mut` functions take either.
/// Sealed: no other type implements it.
///
/// ```
/// use dlpack_core::{Error, ManagedTensor, TensorMut};
///
/// fn zero_first(tensor: &mut impl TensorMut) -> Result<(), Error> {
///     if let Some(x) = tensor.view_mut::<f32>()?.get_mut(&[0]) {
///         *x = 0.0;
///     }
///     Ok(())
/// }
///
/// let mut t = ManagedTensor::export(vec![1.0f32, 2.0])?;
/// zero_first(&mut t)?;
/// assert_eq!(t.to_vec::<f32>()?, [0.0, 2.0]);
/// # Ok::<(), Error>(())
/// ```
pub trait TensorMut: core::ops::Deref<Target = CheckedTensor> + sealed::Sealed {
    /// A typed, bounds-checked mutable view: [`ManagedTensor::view_mut`] or
    /// [`BorrowedTensor::view_mut`].
    ///
    /// # Errors
    ///
    /// As the inherent `view_mut` of the tensor's type.
    fn view_mut<T: crate::Element>(&mut self) -> Result<crate::TensorViewMut<'_, T>, crate::Error>;
}

impl TensorMut for ManagedTensor {
    #[inline(always)]
    fn view_mut<T: crate::Element>(&mut self) -> Result<crate::TensorViewMut<'_, T>, crate::Error> {
        ManagedTensor::view_mut(self)
    }
}

impl TensorMut for BorrowedTensor<'_> {
    #[inline(always)]
    fn view_mut<T: crate::Element>(&mut self) -> Result<crate::TensorViewMut<'_, T>, crate::Error> {
        BorrowedTensor::view_mut(self)
    }
}

mod sealed {
    /// Keeps [`TensorMut`](super::TensorMut) to the two owners of this crate.
    pub trait Sealed {}
    impl Sealed for super::ManagedTensor {}
    impl Sealed for super::BorrowedTensor<'_> {}
}

/// The address range of the struct behind `p`.
fn byte_range<T>(p: NonNull<T>) -> core::ops::Range<usize> {
    p.addr().get()..p.addr().get() + core::mem::size_of::<T>()
}
