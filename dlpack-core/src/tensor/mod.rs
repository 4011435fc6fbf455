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

/// The address range of the struct behind `p`.
fn byte_range<T>(p: NonNull<T>) -> core::ops::Range<usize> {
    p.addr().get()..p.addr().get() + core::mem::size_of::<T>()
}
