//! DLPack capsules: wrapping an owned managed tensor in one (producer side) and taking it out
//! again (consumer side).
//!
//! The rules (DLPack's Python specification, dlpack-reference §3):
//! - a fresh capsule is named `"dltensor_versioned"` (a `DLManagedTensorVersioned`) or
//!   `"dltensor"` (a legacy `DLManagedTensor`);
//! - a consumer that takes the tensor renames the capsule `"used_dltensor_versioned"` /
//!   `"used_dltensor"`, and from then on owns the tensor and calls its deleter itself;
//! - the capsule's destructor calls the deleter only while the capsule still has its fresh
//!   name, that is, when no consumer took the tensor.
//!
//! Which name is fresh, used or foreign is dlpack-core's decision
//! ([`accept_capsule_name`](dlpack_core::protocol::accept_capsule_name)).

use core::ffi::{CStr, c_void};
use core::ptr::NonNull;

use dlpack_core::ManagedTensor;
use dlpack_core::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use dlpack_core::protocol::{ExportStruct, accept_capsule_name};
use pyo3::ffi;
use pyo3::prelude::*;
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
        // SAFETY: the capsule still has its fresh name, so no consumer took the tensor: the
        // capsule owns it, and is going away.
        unsafe { raw.delete() };
    }
}

/// Takes the tensor out of a DLPack capsule: checks its name (dlpack-core's
/// [`accept_capsule_name`]), reads the pointer and renames the capsule to its used name. The
/// caller owns the returned tensor.
///
/// Errors: an object that is not a capsule, or a capsule with a foreign name, is a
/// `DLPackCapsuleError` (a `TypeError` and a `ValueError`); an already used capsule is a
/// `ValueError`.
pub(crate) fn take_capsule(obj: &Bound<'_, PyAny>) -> PyResult<RawTensor> {
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
    let name = unsafe { ffi::PyCapsule_GetName(capsule.as_ptr()) };
    let name: &CStr = if name.is_null() {
        // A capsule without a name (GetName does not raise for a valid capsule).
        c""
    } else {
        // SAFETY: a non-NULL capsule name is a NUL-terminated string owned by the capsule.
        unsafe { CStr::from_ptr(name) }
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
    // SAFETY: a live capsule; the used name is a 'static string, as the capsule requires.
    if unsafe { ffi::PyCapsule_SetName(capsule.as_ptr(), format.used_capsule_name().as_ptr()) } != 0
    {
        // Not renamed: the capsule still owns the tensor.
        return Err(PyErr::fetch(py));
    }
    Ok(match format {
        ExportStruct::Versioned => RawTensor::Versioned(pointer.cast()),
        ExportStruct::Legacy => RawTensor::Legacy(pointer.cast()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use dlpack_core::{Export, ExportDesc};
    use pyo3::exceptions::{PyTypeError, PyValueError};

    /// A producer that counts its drops, which is when the tensor's deleter ran.
    struct Counted {
        data: Vec<f32>,
        drops: Arc<AtomicUsize>,
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
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
            drops: drops.clone(),
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
                let raw = raw_of(ManagedTensor::export(producer).unwrap(), format);
                // SAFETY: we own the fresh tensor and hand it over.
                let capsule = unsafe { new_capsule(py, raw) }.unwrap();
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
                let raw = raw_of(ManagedTensor::export(producer).unwrap(), format);
                // SAFETY: we own the fresh tensor and hand it over.
                let capsule = unsafe { new_capsule(py, raw) }.unwrap();
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
                assert_eq!(tensor.view::<f32>().unwrap().to_vec(), [1.0, 2.0, 3.0]);
                assert!(tensor.is_read_only());
                drop(tensor);
            });
            assert_eq!(drops.load(Ordering::SeqCst), 1, "{format:?}");
        }
    }

    #[test]
    fn a_capsule_is_taken_only_once() {
        let (producer, drops) = counted();
        Python::attach(|py| {
            let raw = raw_of(
                ManagedTensor::export(producer).unwrap(),
                ExportStruct::Versioned,
            );
            // SAFETY: we own the fresh tensor and hand it over.
            let capsule = unsafe { new_capsule(py, raw) }.unwrap();
            let taken = take_capsule(capsule.as_any()).unwrap();
            let err = take_capsule(capsule.as_any()).unwrap_err();
            assert!(err.is_instance_of::<PyValueError>(py));
            assert!(err.value(py).to_string().contains("only once"), "{err}");
            // SAFETY: we own the taken tensor.
            drop(unsafe { taken.into_managed(true) }.unwrap());
        });
        assert_eq!(drops.load(Ordering::SeqCst), 1);
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
