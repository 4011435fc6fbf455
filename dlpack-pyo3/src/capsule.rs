//! DLPack capsules: wrapping an owned managed tensor in one (producer side) and taking it out
//! again (consumer side).
//!
//! The rules (DLPack's Python specification, dlpack-reference §3):
//! - a fresh capsule is named `"dltensor_versioned"` (a `DLManagedTensorVersioned`) or
//!   `"dltensor"` (a legacy `DLManagedTensor`);
//! - a consumer that takes the tensor renames the capsule `"used_dltensor_versioned"` /
//!   `"used_dltensor"`, and from then on owns the tensor and calls its deleter itself;
//! - the capsule's destructor calls the deleter only while the capsule still has its fresh
//!   name, that is, when no consumer took the tensor;
//! - a consumer that refuses the tensor leaves the capsule as it was (NumPy and PyTorch check
//!   before they rename), so the destructor deletes it, or another consumer takes it: the
//!   importer here validates the tensor before it renames the capsule ([`import_capsule`]).
//!
//! Which name is fresh, used or foreign is dlpack-core's decision
//! ([`accept_capsule_name`](dlpack_core::protocol::accept_capsule_name)).

use core::ffi::{CStr, c_void};
use core::ptr::NonNull;

use dlpack_core::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use dlpack_core::protocol::{ExportStruct, accept_capsule_name};
use dlpack_core::{CheckedTensor, ManagedTensor};
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::critical_section::with_critical_section;
use pyo3::types::PyCapsule;

use crate::exceptions::{capsule_error, to_py_err};

/// An owned raw managed tensor of either struct, between a capsule and a [`ManagedTensor`].
#[derive(Debug)]
pub(crate) enum RawTensor {
    /// A `DLManagedTensorVersioned` the holder owns.
    Versioned(NonNull<DLManagedTensorVersioned>),
    /// A legacy `DLManagedTensor` the holder owns.
    Legacy(NonNull<DLManagedTensor>),
}

impl RawTensor {
    /// The struct this is.
    #[cfg(test)]
    pub(crate) fn format(&self) -> ExportStruct {
        match self {
            RawTensor::Versioned(_) => ExportStruct::Versioned,
            RawTensor::Legacy(_) => ExportStruct::Legacy,
        }
    }

    fn as_void(&self) -> NonNull<c_void> {
        match self {
            RawTensor::Versioned(p) => p.cast(),
            RawTensor::Legacy(p) => p.cast(),
        }
    }

    /// Calls the deleter, if there is one.
    ///
    /// # Safety
    /// The caller owns the live tensor and never uses it again.
    pub(crate) unsafe fn delete(self) {
        match self {
            RawTensor::Versioned(p) => {
                // SAFETY: live and owned (caller): the deleter field is readable, and calling it
                // once with the struct's own pointer is what the owner must do.
                unsafe {
                    if let Some(deleter) = p.as_ref().deleter {
                        deleter(p.as_ptr());
                    }
                }
            }
            RawTensor::Legacy(p) => {
                // SAFETY: as above.
                unsafe {
                    if let Some(deleter) = p.as_ref().deleter {
                        deleter(p.as_ptr());
                    }
                }
            }
        }
    }

    /// Validates the tensor into its owner ([`ManagedTensor::from_raw`] or
    /// [`ManagedTensor::from_raw_legacy`]); on failure the deleter has been called.
    ///
    /// With `writable == false`, the result is read-only whatever the producer said
    /// ([`ManagedTensor::into_read_only`], after validation: nothing is written into a struct
    /// whose version has not been checked, nor into one that is read-only already).
    ///
    /// # Safety
    /// The caller owns the live tensor, and it satisfies the conditions of
    /// [`ManagedTensor::from_raw`] except for exclusive access to the data: unless `writable`,
    /// others may keep writing nothing but may read the data. With `writable`, no one else
    /// accesses the data while views of the result exist (or writes it at all, if it is
    /// read-only).
    pub(crate) unsafe fn into_managed(self, writable: bool) -> PyResult<ManagedTensor> {
        let tensor = match self {
            // SAFETY: forwarded contract: owned, live, well-formed; unless `writable`, the
            // result is made read-only below before anyone can view it.
            RawTensor::Versioned(p) => unsafe { ManagedTensor::from_raw(p.as_ptr()) },
            // SAFETY: as above.
            RawTensor::Legacy(p) => unsafe { ManagedTensor::from_raw_legacy(p.as_ptr()) },
        }
        .map_err(to_py_err)?;
        Ok(if writable {
            tensor
        } else {
            tensor.into_read_only()
        })
    }
}

/// Wraps an owned tensor in a fresh capsule whose destructor deletes it unless a consumer takes
/// it. If the capsule cannot be made, the tensor is deleted and the error returned.
///
/// # Safety
/// The caller owns the live tensor and hands it over.
pub(crate) unsafe fn new_capsule(py: Python<'_>, raw: RawTensor) -> PyResult<Bound<'_, PyCapsule>> {
    let (name, destructor): (&'static CStr, ffi::PyCapsule_Destructor) = match raw {
        RawTensor::Versioned(_) => (ExportStruct::Versioned.capsule_name(), destroy_versioned),
        RawTensor::Legacy(_) => (ExportStruct::Legacy.capsule_name(), destroy_legacy),
    };
    let pointer = raw.as_void();
    // SAFETY: `pointer` is a live managed tensor of the struct the name says; the destructor
    // reads it only while the capsule keeps that fresh name (then the tensor is still unowned
    // by any consumer) and may run on any thread, as DLPack deleters may.
    let capsule =
        unsafe { PyCapsule::new_with_pointer_and_destructor(py, pointer, name, Some(destructor)) };
    match capsule {
        Ok(capsule) => Ok(capsule),
        Err(err) => {
            // SAFETY: no capsule owns the tensor; we still do and never use it again.
            unsafe { raw.delete() };
            Err(err)
        }
    }
}

/// The destructor of `"dltensor_versioned"` capsules made here.
///
/// # Safety
/// `capsule` is a capsule made by [`new_capsule`] for a versioned tensor.
unsafe extern "C" fn destroy_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: forwarded contract.
    unsafe { destroy(capsule, ExportStruct::Versioned) }
}

/// The destructor of `"dltensor"` capsules made here.
///
/// # Safety
/// `capsule` is a capsule made by [`new_capsule`] for a legacy tensor.
unsafe extern "C" fn destroy_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: forwarded contract.
    unsafe { destroy(capsule, ExportStruct::Legacy) }
}

/// Deletes the capsule's tensor if the capsule still has its fresh name.
///
/// A capsule is often destroyed while an exception propagates (the consumer that refused it
/// raised one), and the deleter it calls may call into Python (a foreign producer's deleter,
/// the `Drop` of a Rust producer that holds Python objects), which must not run with an
/// exception set. As DLPack's reference destructor does, the pending exception is put aside
/// while the tensor is deleted and set again afterwards ([`PendingException`]).
///
/// # Safety
/// `capsule` is a capsule made by [`new_capsule`] for a tensor of `format`, being destroyed.
unsafe fn destroy(capsule: *mut ffi::PyObject, format: ExportStruct) {
    let name = format.capsule_name();
    // SAFETY: `capsule` is a live capsule object (it is being deallocated, and CPython calls the
    // destructor before freeing it). PyCapsule_IsValid never raises, so an exception pending
    // during deallocation is left alone.
    if unsafe { ffi::PyCapsule_IsValid(capsule, name.as_ptr()) } != 1 {
        // Renamed: a consumer took the tensor and deletes it itself.
        return;
    }
    // SAFETY: the capsule is valid with this name, so GetPointer returns its non-NULL pointer
    // without raising.
    let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule, name.as_ptr()) };
    let raw = match format {
        ExportStruct::Versioned => NonNull::new(pointer.cast()).map(RawTensor::Versioned),
        ExportStruct::Legacy => NonNull::new(pointer.cast()).map(RawTensor::Legacy),
    };
    if let Some(raw) = raw {
        // SAFETY: CPython destroys capsules with the thread attached; the token does not
        // outlive this call.
        let py = unsafe { Python::assume_attached() };
        let pending = PendingException::set_aside(py);
        // SAFETY: the capsule still has its fresh name, so no consumer took the tensor: the
        // capsule owns it, and is going away.
        unsafe { raw.delete() };
        drop(pending);
    }
}

/// The exception pending on this thread, put aside (`PyErr_Fetch`, without normalizing it or
/// running any Python code) so that code which must not run with one set can run, and set again
/// when this is dropped (`PyErr_Restore`), which also clears any exception set meanwhile: a
/// destructor cannot raise.
///
/// `PyErr_Fetch` and `PyErr_Restore` are in the stable ABI of every CPython this crate builds
/// for (`abi3-py39` and later); CPython 3.12 deprecates them in favour of
/// `PyErr_GetRaisedException` and `PyErr_SetRaisedException`, which are not in the stable ABI
/// before 3.12.
struct PendingException<'py> {
    _attached: Python<'py>,
    kind: *mut ffi::PyObject,
    value: *mut ffi::PyObject,
    traceback: *mut ffi::PyObject,
}

impl<'py> PendingException<'py> {
    /// Takes the pending exception, if any, leaving none set.
    #[allow(
        deprecated,
        reason = "PyErr_Fetch is the stable ABI's way before CPython 3.12"
    )]
    fn set_aside(py: Python<'py>) -> Self {
        let mut pending = PendingException {
            _attached: py,
            kind: core::ptr::null_mut(),
            value: core::ptr::null_mut(),
            traceback: core::ptr::null_mut(),
        };
        // SAFETY: the thread is attached (`py`); the three out-pointers are valid, and receive
        // new references (or NULL), which `drop` hands back.
        unsafe {
            ffi::PyErr_Fetch(
                &mut pending.kind,
                &mut pending.value,
                &mut pending.traceback,
            )
        };
        pending
    }
}

impl Drop for PendingException<'_> {
    /// Sets the exception put aside again (or none, if none was pending), replacing any set
    /// since.
    #[allow(
        deprecated,
        reason = "PyErr_Restore is the stable ABI's way before CPython 3.12"
    )]
    fn drop(&mut self) {
        // SAFETY: attached (the token's lifetime); the three references came from PyErr_Fetch
        // and are handed back once (this runs once), and PyErr_Restore steals them.
        unsafe { ffi::PyErr_Restore(self.kind, self.value, self.traceback) };
    }
}

/// A fresh DLPack capsule whose name has been checked and whose pointer has been read, not yet
/// taken: the capsule still owns the tensor (and its destructor would delete it).
struct Opened<'a, 'py> {
    capsule: &'a Bound<'py, PyCapsule>,
    format: ExportStruct,
    pointer: NonNull<c_void>,
    /// The capsule's name pointer when it was opened: a consumer that takes the capsule
    /// renames it, which changes this pointer (every used name differs from every fresh one).
    name: *const core::ffi::c_char,
}

/// Checks a capsule's name (dlpack-core's [`accept_capsule_name`]) and reads its pointer,
/// leaving the capsule as it is.
///
/// Errors: an object that is not a capsule, or a capsule with a foreign name, is a
/// `DLPackCapsuleError` (a `TypeError` and a `ValueError`); an already used capsule is a
/// `ValueError`.
fn open_capsule<'a, 'py>(obj: &'a Bound<'py, PyAny>) -> PyResult<Opened<'a, 'py>> {
    let py = obj.py();
    let Ok(capsule) = obj.cast::<PyCapsule>() else {
        let found = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into());
        return Err(capsule_error(
            py,
            format!(
                "expected a \"dltensor\" or \"dltensor_versioned\" PyCapsule, found an object of type {found}"
            ),
        ));
    };
    // SAFETY: a live capsule (we hold a reference). The name pointer is the capsule's own, valid
    // while the capsule keeps it; it is only read before anything could rename it.
    let name_ptr = unsafe { ffi::PyCapsule_GetName(capsule.as_ptr()) };
    let name: &CStr = if name_ptr.is_null() {
        // A capsule without a name (GetName does not raise for a valid capsule).
        c""
    } else {
        // SAFETY: a non-NULL capsule name is a NUL-terminated string owned by the capsule.
        unsafe { CStr::from_ptr(name_ptr) }
    };
    let format = match accept_capsule_name(name) {
        Ok(format) => format,
        Err(err) => {
            return Err(match err.py_kind() {
                dlpack_core::PyErrorKind::TypeError => capsule_error(py, err.to_string()),
                _ => to_py_err(err),
            });
        }
    };
    let fresh = format.capsule_name();
    // SAFETY: a live capsule; the name was just checked, so this does not raise.
    let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), fresh.as_ptr()) };
    let Some(pointer) = NonNull::new(pointer) else {
        return Err(PyErr::take(py).unwrap_or_else(|| {
            capsule_error(py, format!("the {fresh:?} capsule holds a NULL pointer"))
        }));
    };
    Ok(Opened {
        capsule,
        format,
        pointer,
        name: name_ptr,
    })
}

impl Opened<'_, '_> {
    /// Takes the tensor: renames the capsule to its used name. The caller owns the result.
    ///
    /// The capsule is checked again first, still under the name it had when opened: Python
    /// code run since then (a consumer's check, a garbage collection) could have handed it to
    /// another consumer, which renamed it and owns the tensor.
    ///
    /// The check and the rename run in a critical section on the capsule
    /// (`pyo3::sync::critical_section::with_critical_section`): on free-threaded CPython, two
    /// threads taking one capsule through this crate cannot both pass the check, so exactly one
    /// owns the tensor. (With the GIL, nothing between the check and the rename lets another
    /// thread run, and the critical section costs nothing.)
    #[inline]
    fn take(&self) -> PyResult<RawTensor> {
        with_critical_section(self.capsule.as_any(), || {
            let capsule = self.capsule.as_ptr();
            // SAFETY: a live capsule (we hold a reference); GetName does not raise for one.
            if unsafe { ffi::PyCapsule_GetName(capsule) } != self.name {
                return Err(PyValueError::new_err(
                    "the DLPack capsule was taken by another consumer while this one examined it",
                ));
            }
            let used = self.format.used_capsule_name();
            // SAFETY: a live capsule; the used name is a 'static string, as the capsule requires.
            if unsafe { ffi::PyCapsule_SetName(capsule, used.as_ptr()) } != 0 {
                // Not renamed: the capsule still owns the tensor.
                return Err(PyErr::fetch(self.capsule.py()));
            }
            Ok(match self.format {
                ExportStruct::Versioned => RawTensor::Versioned(self.pointer.cast()),
                ExportStruct::Legacy => RawTensor::Legacy(self.pointer.cast()),
            })
        })
    }
}

/// Takes the tensor out of a DLPack capsule: checks its name (dlpack-core's
/// [`accept_capsule_name`]), reads the pointer and renames the capsule to its used name,
/// without validating the tensor. The caller owns the returned tensor.
///
/// Errors as [`import_capsule`]'s before the tensor is read.
#[cfg(test)]
pub(crate) fn take_capsule(obj: &Bound<'_, PyAny>) -> PyResult<RawTensor> {
    open_capsule(obj)?.take()
}

/// Why [`import_capsule`] did not take a tensor: dlpack-core's validation refused it, or the
/// consumer's check (or the renaming) failed.
enum NotTaken {
    Invalid(dlpack_core::Error),
    Refused(PyErr),
}

impl From<dlpack_core::Error> for NotTaken {
    fn from(err: dlpack_core::Error) -> Self {
        NotTaken::Invalid(err)
    }
}

/// Imports the tensor of a DLPack capsule, as a consumer that may refuse it: checks the
/// capsule's name, validates the tensor (dlpack-core's checks, made once) and runs `check` on
/// it while the capsule still owns it, and only then takes it (renames the capsule to its used
/// name) into a [`ManagedTensor`], read-only unless `writable` (see
/// [`ManagedTensor::into_read_only`]).
///
/// A refusal leaves the capsule as it was, as NumPy and PyTorch leave a capsule they refuse:
/// still named `"dltensor"` / `"dltensor_versioned"`, its tensor not deleted, so that its
/// destructor deletes it when the capsule is collected, or another consumer can still take it.
/// The exception is a versioned tensor of another major version, which is taken and deleted
/// before the error is returned: the DLPack header says that a consumer must call its deleter.
///
/// Errors: those of [`open_capsule`]; `BufferError` (mostly) for a tensor that fails
/// validation; whatever `check` returns.
///
/// # Safety
/// The capsule's producer promises a tensor that meets [`ManagedTensor::from_raw`]'s conditions
/// except exclusive access (the DLPack protocol's promise for a fresh capsule): unless
/// `writable`, others may keep reading the data. With `writable`, the caller promises that no
/// one else accesses the data while views of the result exist (or writes it at all, if it is
/// read-only).
pub(crate) unsafe fn import_capsule(
    obj: &Bound<'_, PyAny>,
    writable: bool,
    check: impl FnOnce(&CheckedTensor) -> PyResult<()>,
) -> PyResult<ManagedTensor> {
    let opened = open_capsule(obj)?;
    // Ownership passes from the capsule to the owner made here exactly when the capsule is
    // renamed, the last step of `accept`.
    let accept = |t: &CheckedTensor| -> Result<(), NotTaken> {
        check(t).map_err(NotTaken::Refused)?;
        opened.take().map(drop).map_err(NotTaken::Refused)
    };
    let pointer = opened.pointer;
    let taken = match opened.format {
        // SAFETY: the producer's promise (forwarded contract): a live, well-formed tensor that
        // the capsule owns and hands over when renamed, which `accept` does last; the result
        // is made read-only below (unless `writable`) before anyone can view it.
        ExportStruct::Versioned => unsafe {
            ManagedTensor::from_raw_if(pointer.cast().as_ptr(), accept)
        },
        // SAFETY: as above, for the legacy struct.
        ExportStruct::Legacy => unsafe {
            ManagedTensor::from_raw_legacy_if(pointer.cast().as_ptr(), accept)
        },
    };
    match taken {
        Ok(tensor) if writable => Ok(tensor),
        Ok(tensor) => Ok(tensor.into_read_only()),
        Err(NotTaken::Refused(err)) => Err(err),
        Err(NotTaken::Invalid(err @ dlpack_core::Error::IncompatibleVersion { .. })) => {
            let raw = opened.take()?;
            // SAFETY: we own the tensor just taken; for another major version its deleter is
            // all that may be used, and DLPack asks the consumer to call it.
            unsafe { raw.delete() };
            Err(to_py_err(err))
        }
        Err(NotTaken::Invalid(err)) => Err(to_py_err(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use dlpack_core::{Export, ExportDesc};
    use dlpack_testing::DropCounter;
    use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};

    /// A producer that counts its drops, which is when the tensor's deleter ran.
    struct Counted {
        data: Vec<f32>,
        _drops: DropCounter,
    }

    // SAFETY: describes the Vec's own buffer (initialised, owned, in place while self lives).
    unsafe impl Export for Counted {
        fn ndim(&self) -> usize {
            1
        }
        fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
            shape[0] = self.data.len() as i64;
            strides[0] = 1;
            ExportDesc::host(self.data.as_mut_ptr())
        }
    }

    fn counted() -> (Counted, Arc<AtomicUsize>) {
        let drops = Arc::new(AtomicUsize::new(0));
        let producer = Counted {
            data: vec![1.0, 2.0, 3.0],
            _drops: DropCounter::new(&drops),
        };
        (producer, drops)
    }

    fn raw_of(tensor: ManagedTensor, format: ExportStruct) -> RawTensor {
        match format {
            ExportStruct::Versioned => {
                RawTensor::Versioned(NonNull::new(tensor.into_raw().unwrap()).unwrap())
            }
            ExportStruct::Legacy => {
                RawTensor::Legacy(NonNull::new(tensor.into_raw_legacy().unwrap()).unwrap())
            }
        }
    }

    /// A fresh versioned capsule holding an export of any `producer`.
    fn fresh_capsule_of<'py>(py: Python<'py>, producer: impl Export) -> Bound<'py, PyCapsule> {
        let raw = raw_of(
            ManagedTensor::export(producer).unwrap(),
            ExportStruct::Versioned,
        );
        // SAFETY: we own the fresh tensor and hand it over.
        unsafe { new_capsule(py, raw) }.unwrap()
    }

    /// A fresh capsule of `format` holding an export of `producer`.
    fn fresh_capsule<'py>(
        py: Python<'py>,
        producer: Counted,
        format: ExportStruct,
    ) -> Bound<'py, PyCapsule> {
        let raw = raw_of(ManagedTensor::export(producer).unwrap(), format);
        // SAFETY: we own the fresh tensor and hand it over.
        unsafe { new_capsule(py, raw) }.unwrap()
    }

    fn capsule_name(capsule: &Bound<'_, PyCapsule>) -> String {
        let name = capsule.name().unwrap().unwrap();
        // SAFETY: the names used here are 'static strings, read at once.
        unsafe { name.as_cstr() }.to_str().unwrap().to_owned()
    }

    #[test]
    fn an_unused_capsule_deletes_its_tensor_when_collected() {
        for format in [ExportStruct::Versioned, ExportStruct::Legacy] {
            let (producer, drops) = counted();
            Python::attach(|py| {
                let capsule = fresh_capsule(py, producer, format);
                assert_eq!(
                    capsule_name(&capsule),
                    format.capsule_name().to_str().unwrap()
                );
                assert_eq!(drops.load(Ordering::SeqCst), 0);
                drop(capsule);
            });
            assert_eq!(drops.load(Ordering::SeqCst), 1, "{format:?}");
        }
    }

    #[test]
    fn a_taken_capsule_is_renamed_and_no_longer_deletes() {
        for format in [ExportStruct::Versioned, ExportStruct::Legacy] {
            let (producer, drops) = counted();
            Python::attach(|py| {
                let capsule = fresh_capsule(py, producer, format);
                let taken = take_capsule(capsule.as_any()).unwrap();
                assert_eq!(taken.format(), format);
                assert_eq!(
                    capsule_name(&capsule),
                    format.used_capsule_name().to_str().unwrap()
                );
                drop(capsule);
                assert_eq!(drops.load(Ordering::SeqCst), 0, "the consumer owns it now");
                // SAFETY: we own the taken tensor and validate it once.
                let tensor = unsafe { taken.into_managed(false) }.unwrap();
                assert_eq!(
                    tensor.view::<f32>().unwrap().to_vec().unwrap(),
                    [1.0, 2.0, 3.0]
                );
                assert!(tensor.is_read_only());
                drop(tensor);
            });
            assert_eq!(drops.load(Ordering::SeqCst), 1, "{format:?}");
        }
    }

    #[test]
    fn a_capsule_refused_by_the_check_keeps_its_name_and_its_tensor() {
        for format in [ExportStruct::Versioned, ExportStruct::Legacy] {
            let (producer, drops) = counted();
            Python::attach(|py| {
                let capsule = fresh_capsule(py, producer, format);
                let refuse = |t: &CheckedTensor| {
                    assert_eq!(t.shape(), &[3]);
                    Err(PyValueError::new_err("refused by the check"))
                };
                // SAFETY: a capsule made here from a valid export.
                let err = unsafe { import_capsule(capsule.as_any(), false, refuse) }.unwrap_err();
                assert!(err.value(py).to_string().contains("refused by the check"));
                assert_eq!(
                    capsule_name(&capsule),
                    format.capsule_name().to_str().unwrap()
                );
                assert_eq!(drops.load(Ordering::SeqCst), 0, "{format:?}");
                // Still a fresh capsule: another consumer takes it.
                // SAFETY: as above.
                let tensor = unsafe { import_capsule(capsule.as_any(), false, |_| Ok(())) };
                let tensor = tensor.unwrap();
                assert_eq!(
                    capsule_name(&capsule),
                    format.used_capsule_name().to_str().unwrap()
                );
                assert_eq!(
                    tensor.view::<f32>().unwrap().to_vec().unwrap(),
                    [1.0, 2.0, 3.0]
                );
                drop(capsule);
                assert_eq!(drops.load(Ordering::SeqCst), 0, "the importer owns it");
                drop(tensor);
            });
            assert_eq!(drops.load(Ordering::SeqCst), 1, "{format:?}");
        }
    }

    #[test]
    fn a_capsule_whose_tensor_fails_validation_is_left_to_its_destructor() {
        for format in [ExportStruct::Versioned, ExportStruct::Legacy] {
            let (producer, drops) = counted();
            Python::attach(|py| {
                let raw = raw_of(ManagedTensor::export(producer).unwrap(), format);
                let dl_tensor = match &raw {
                    // SAFETY: we own the fresh struct: nobody else reads or writes it yet.
                    RawTensor::Versioned(p) => unsafe { &mut (*p.as_ptr()).dl_tensor },
                    // SAFETY: as above.
                    RawTensor::Legacy(p) => unsafe { &mut (*p.as_ptr()).dl_tensor },
                };
                dl_tensor.dtype.bits = 13; // float13: no such dtype
                // SAFETY: we own the tensor and hand it over; its deleter reads no field.
                let capsule = unsafe { new_capsule(py, raw) }.unwrap();
                for _ in 0..2 {
                    // SAFETY: the tensor's fields are readable and describe the Vec's memory,
                    // for any dtype width up to 32 bits.
                    let err = unsafe { import_capsule(capsule.as_any(), true, |_| Ok(())) };
                    let err = err.unwrap_err();
                    assert!(err.value(py).to_string().contains("bits = 13"), "{err}");
                    assert_eq!(
                        capsule_name(&capsule),
                        format.capsule_name().to_str().unwrap()
                    );
                }
                assert_eq!(drops.load(Ordering::SeqCst), 0, "{format:?}");
                drop(capsule);
            });
            assert_eq!(drops.load(Ordering::SeqCst), 1, "{format:?}");
        }
    }

    #[test]
    fn a_refused_capsule_only_we_held_is_deleted_once_by_its_destructor() {
        let (producer, drops) = counted();
        Python::attach(|py| {
            let capsule = fresh_capsule(py, producer, ExportStruct::Versioned).into_any();
            let refuse = |_: &CheckedTensor| Err(PyValueError::new_err("refused"));
            // SAFETY: a capsule made here from a valid export.
            let err = unsafe { import_capsule(&capsule, false, refuse) }.unwrap_err();
            assert!(err.value(py).to_string().contains("refused"));
            assert_eq!(drops.load(Ordering::SeqCst), 0, "the capsule still owns it");
            drop(capsule);
            assert_eq!(
                drops.load(Ordering::SeqCst),
                1,
                "deleted once, by the capsule"
            );
        });
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_capsule_taken_by_another_consumer_during_the_check_is_not_taken_twice() {
        let (producer, drops) = counted();
        Python::attach(|py| {
            let capsule = fresh_capsule(py, producer, ExportStruct::Versioned).into_any();
            let mut other = None;
            // The check runs code that hands the capsule to another consumer, as Python code
            // run meanwhile could.
            let meddle = |_: &CheckedTensor| {
                other = Some(take_capsule(&capsule).unwrap());
                Ok(())
            };
            // SAFETY: a capsule made here from a valid export.
            let err = unsafe { import_capsule(&capsule, false, meddle) }.unwrap_err();
            assert!(
                err.value(py).to_string().contains("another consumer"),
                "{err}"
            );
            assert_eq!(
                capsule_name(capsule.cast().unwrap()),
                "used_dltensor_versioned"
            );
            assert_eq!(
                drops.load(Ordering::SeqCst),
                0,
                "the other consumer owns it"
            );
            // SAFETY: the other consumer took the tensor, and owns it alone.
            drop(unsafe { other.unwrap().into_managed(false) }.unwrap());
            assert_eq!(drops.load(Ordering::SeqCst), 1);
            drop(capsule);
        });
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_capsule_is_taken_only_once() {
        let (producer, drops) = counted();
        Python::attach(|py| {
            let capsule = fresh_capsule(py, producer, ExportStruct::Versioned);
            let taken = take_capsule(capsule.as_any()).unwrap();
            let err = take_capsule(capsule.as_any()).unwrap_err();
            assert!(err.is_instance_of::<PyValueError>(py));
            assert!(err.value(py).to_string().contains("only once"), "{err}");
            // SAFETY: we own the taken tensor.
            drop(unsafe { taken.into_managed(true) }.unwrap());
        });
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    /// A producer whose `Drop` looks at the exception indicator, as a foreign deleter calling
    /// the C API would need to, and leaves an exception of its own set.
    struct Watcher {
        data: Vec<f32>,
        saw_an_exception: Arc<std::sync::Mutex<Option<bool>>>,
    }

    // SAFETY: describes the Vec's own buffer (initialised, owned, in place while self lives).
    unsafe impl Export for Watcher {
        fn ndim(&self) -> usize {
            1
        }
        fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
            shape[0] = self.data.len() as i64;
            strides[0] = 1;
            ExportDesc::host(self.data.as_mut_ptr())
        }
    }

    impl Drop for Watcher {
        fn drop(&mut self) {
            Python::attach(|py| {
                if let Ok(mut saw) = self.saw_an_exception.lock() {
                    *saw = Some(PyErr::occurred(py));
                }
                PyValueError::new_err("left set by the deleter").restore(py);
            });
        }
    }

    #[test]
    fn a_capsule_destroyed_while_an_exception_propagates_deletes_without_it_and_keeps_it() {
        for legacy in [false, true] {
            let saw = Arc::new(std::sync::Mutex::new(None));
            let producer = Watcher {
                data: vec![1.0, 2.0],
                saw_an_exception: saw.clone(),
            };
            Python::attach(|py| {
                let tensor = ManagedTensor::export(producer).unwrap();
                let args = crate::export_args(None, (!legacy).then_some((1, 0)), None, None);
                let capsule = crate::to_capsule(py, tensor, &args, None).unwrap();
                // A consumer refused the capsule: its error propagates as the capsule dies.
                PyBufferError::new_err("refused by the consumer").restore(py);
                drop(capsule);
                assert_eq!(
                    *saw.lock().unwrap(),
                    Some(false),
                    "the deleter ran with the consumer's exception set (legacy: {legacy})"
                );
                let pending = PyErr::take(py).expect("the consumer's exception is kept");
                assert!(pending.is_instance_of::<PyBufferError>(py), "{pending}");
                assert!(pending.to_string().contains("refused by the consumer"));
            });
        }
    }

    #[test]
    fn a_capsule_destroyed_without_an_exception_leaves_none_set() {
        let saw = Arc::new(std::sync::Mutex::new(None));
        let producer = Watcher {
            data: vec![1.0],
            saw_an_exception: saw.clone(),
        };
        Python::attach(|py| {
            let capsule = fresh_capsule_of(py, producer);
            drop(capsule);
            assert_eq!(*saw.lock().unwrap(), Some(false));
            // What the deleter left set is cleared: a destructor cannot raise.
            assert!(PyErr::take(py).is_none());
        });
    }

    #[test]
    fn foreign_capsules_and_other_objects_are_refused() {
        Python::attach(|py| {
            static VALUE: u8 = 7;
            let pointer = NonNull::from(&VALUE).cast::<c_void>();
            // SAFETY: a pointer to a static, no destructor.
            let foreign = unsafe { PyCapsule::new_with_pointer(py, pointer, c"numpy_array") };
            let foreign = foreign.unwrap();
            for obj in [
                foreign.into_any(),
                42i32.into_pyobject(py).unwrap().into_any(),
            ] {
                let err = take_capsule(&obj).unwrap_err();
                assert!(err.is_instance_of::<PyTypeError>(py), "{err}");
                assert!(err.is_instance_of::<PyValueError>(py), "{err}");
            }
        });
    }
}
