//! The buffer protocol (PEP 3118) for host tensors: [`get_buffer`] and [`release_buffer`], the
//! `__getbuffer__` and `__releasebuffer__` of [`DLPackTensor`](crate::DLPackTensor) and of any
//! [`PyExporter`] class.
//!
//! Compiled where pyo3 offers the protocol: every build but the limited API of CPython < 3.11
//! (`abi3-py39`, `abi3-py310`), whose stable ABI has no buffer slots.
//!
//! What a buffer is made of:
//! - `buf`: the first element (`data + byte_offset`), in place, never a copy;
//! - `obj`: a new reference to the object, so the buffer keeps the tensor alive;
//! - `format`, `itemsize`: [`format_of`] (static strings);
//! - `shape` and `strides` in bytes: one heap block that `internal` points to, freed by
//!   [`release_buffer`];
//! - `readonly`: the tensor's `READ_ONLY` flag.

use core::ffi::{CStr, c_int, c_void};

use dlpack_core::{CheckedTensor, DataType, DataTypeCode};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::export::PyExporter;

/// The PEP 3118 format (a `struct` module character, native size) and item size of `dtype`, or
/// why it has none.
///
/// Integers, IEEE floats of 16, 32 and 64 bits, `bool` (`?`), and complex64 and complex128
/// (`Zf`, `Zd`) have one. bfloat16, the float8/float6/float4 types, complex32 (PEP 3118 pairs
/// `Z` with `f`, `d` and `g` only, and NumPy reads no `Ze`), opaque handles and vector types
/// (`lanes > 1`) have none.
fn format_of(dtype: DataType) -> Result<(&'static CStr, usize), String> {
    let format = if dtype.lanes != 1 {
        None
    } else {
        match (dtype.code, dtype.bits) {
            (DataTypeCode::INT, 8) => Some(c"b"),
            (DataTypeCode::INT, 16) => Some(c"h"),
            (DataTypeCode::INT, 32) => Some(c"i"),
            (DataTypeCode::INT, 64) => Some(c"q"),
            (DataTypeCode::UINT, 8) => Some(c"B"),
            (DataTypeCode::UINT, 16) => Some(c"H"),
            (DataTypeCode::UINT, 32) => Some(c"I"),
            (DataTypeCode::UINT, 64) => Some(c"Q"),
            (DataTypeCode::FLOAT, 16) => Some(c"e"),
            (DataTypeCode::FLOAT, 32) => Some(c"f"),
            (DataTypeCode::FLOAT, 64) => Some(c"d"),
            (DataTypeCode::COMPLEX, 64) => Some(c"Zf"),
            (DataTypeCode::COMPLEX, 128) => Some(c"Zd"),
            (DataTypeCode::BOOL, 8) => Some(c"?"),
            _ => None,
        }
    };
    format
        .map(|format| (format, dtype.element_bytes()))
        .ok_or_else(|| {
            let why = if dtype.lanes != 1 {
                "a vector type (lanes > 1)"
            } else if !dtype.is_byte_sized() {
                "a sub-byte type"
            } else {
                "a type the struct module has no character for"
            };
            format!(
                "the buffer protocol (PEP 3118) has no format for dtype {dtype}, {why}; \
                 use __dlpack__ (numpy.from_dlpack, or ml_dtypes for NumPy's bfloat16 and float8)"
            )
        })
}

/// Whether an array of `shape` with `strides` (in bytes) and items of `itemsize` bytes is
/// contiguous, in row-major order (`c`) or in column-major order: CPython's rule, under which
/// an empty array is both, and a dimension of size 1 may have any stride.
fn is_contiguous(shape: &[isize], strides: &[isize], itemsize: isize, c: bool) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected = itemsize;
    let mut check = |(&n, &s): (&isize, &isize)| {
        let ok = n == 1 || s == expected;
        expected = expected.saturating_mul(n);
        ok
    };
    if c {
        shape.iter().zip(strides).rev().all(&mut check)
    } else {
        shape.iter().zip(strides).all(&mut check)
    }
}

/// Whether `flags` holds every bit of `request` (PEP 3118's requests include one another:
/// `PyBUF_C_CONTIGUOUS` includes `PyBUF_STRIDES`, which includes `PyBUF_ND`).
fn asks(flags: c_int, request: c_int) -> bool {
    flags & request == request
}

/// The shape and the byte strides of a buffer, one after the other: the block a buffer's
/// `internal` points to.
struct Dims(Box<[ffi::Py_ssize_t]>);

/// Everything a buffer says about a tensor, worked out before the `Py_buffer` is touched.
struct Layout {
    buf: *mut c_void,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: bool,
    format: Option<&'static CStr>,
    ndim: c_int,
    /// `None` for a request without `PyBUF_ND` and for a 0-d tensor, whose buffers have no
    /// shape.
    dims: Option<Box<Dims>>,
    strides: bool,
}

/// The buffer of a host `tensor` for a request with `flags`, or why there is none.
fn layout(tensor: &CheckedTensor, flags: c_int) -> Result<Layout, String> {
    let (format, itemsize) = format_of(tensor.dtype())?;
    let overflow = || {
        format!(
            "the tensor of shape {:?} overflows a Py_ssize_t",
            tensor.shape()
        )
    };
    let itemsize = isize::try_from(itemsize).map_err(|_| overflow())?;
    let shape = tensor
        .shape()
        .iter()
        .map(|&n| isize::try_from(n).ok())
        .collect::<Option<Vec<_>>>()
        .ok_or_else(overflow)?;
    let strides = tensor
        .strides()
        .iter()
        .map(|&s| {
            isize::try_from(s)
                .ok()
                .and_then(|s| s.checked_mul(itemsize))
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(overflow)?;
    let len = shape
        .iter()
        .try_fold(itemsize, |len, &n| len.checked_mul(n))
        .ok_or_else(overflow)?;
    let readonly = tensor.is_read_only();
    if readonly && asks(flags, ffi::PyBUF_WRITABLE) {
        return Err(
            "the tensor is read-only, and a writable buffer (PyBUF_WRITABLE) was asked for"
                .to_owned(),
        );
    }
    let c = is_contiguous(&shape, &strides, itemsize, true);
    let f = is_contiguous(&shape, &strides, itemsize, false);
    let refusal = if asks(flags, ffi::PyBUF_C_CONTIGUOUS) && !c {
        Some(("C-contiguous", "a C-contiguous buffer (PyBUF_C_CONTIGUOUS)"))
    } else if asks(flags, ffi::PyBUF_F_CONTIGUOUS) && !f {
        Some((
            "Fortran-contiguous",
            "a Fortran-contiguous buffer (PyBUF_F_CONTIGUOUS)",
        ))
    } else if asks(flags, ffi::PyBUF_ANY_CONTIGUOUS) && !c && !f {
        Some(("contiguous", "a contiguous buffer (PyBUF_ANY_CONTIGUOUS)"))
    } else if !asks(flags, ffi::PyBUF_STRIDES) && !c {
        Some((
            "C-contiguous",
            "a buffer without strides (no PyBUF_STRIDES), which must be C-contiguous,",
        ))
    } else {
        None
    };
    if let Some((layout, request)) = refusal {
        return Err(format!(
            "the tensor of shape {:?} and strides {:?} (in elements) is not {layout}, and \
             {request} was asked for",
            tensor.shape(),
            tensor.strides()
        ));
    }
    let nd = asks(flags, ffi::PyBUF_ND);
    let ndim = if nd { shape.len() } else { 1 };
    let dims = (nd && !shape.is_empty()).then(|| {
        let mut both = shape;
        both.extend_from_slice(&strides);
        Box::new(Dims(both.into_boxed_slice()))
    });
    let offset = usize::try_from(tensor.byte_offset()).map_err(|_| overflow())?;
    Ok(Layout {
        // The first element: DLPack's `data + byte_offset`, which the tensor's validation
        // checked lies in its memory (or the tensor has no elements).
        buf: tensor.data_ptr().wrapping_byte_add(offset),
        len,
        itemsize,
        readonly,
        format: asks(flags, ffi::PyBUF_FORMAT).then_some(format),
        ndim: c_int::try_from(ndim).map_err(|_| overflow())?,
        dims,
        strides: asks(flags, ffi::PyBUF_STRIDES),
    })
}

/// `__getbuffer__` for the class `T`: fills `view` with the tensor's memory in place, for a
/// request with `flags`.
///
/// The buffer shares the memory of every other export (as `__dlpack__` does), is writable
/// unless the tensor is read-only, and keeps the object, and so the tensor, alive until
/// [`release_buffer`] (the class's `__releasebuffer__`) and CPython's release of the object.
/// The host must read the memory in place: tensors on the CPU, and pinned or managed memory
/// (`kDLCUDAHost`, `kDLROCMHost`, `kDLCUDAManaged`; `kDLOneAPI` host or shared USM that the
/// hooks confirm), for which the host first waits for the device through the tensor's
/// [`DeviceHooks`](dlpack_core::DeviceHooks), as `__dlpack__(dl_device=(1, 0))` waits.
///
/// ```
/// use dlpack_core::ManagedTensor;
/// use dlpack_pyo3::{Exporter, PyExporter};
/// use pyo3::ffi;
/// use pyo3::prelude::*;
///
/// #[pyclass(frozen)]
/// struct Image {
///     pixels: Exporter,
/// }
///
/// impl PyExporter for Image {
///     fn exporter(&self) -> &Exporter {
///         &self.pixels
///     }
/// }
///
/// #[pymethods]
/// impl Image {
///     unsafe fn __getbuffer__(
///         slf: &Bound<'_, Self>,
///         view: *mut ffi::Py_buffer,
///         flags: core::ffi::c_int,
///     ) -> PyResult<()> {
///         // SAFETY: CPython passes a view to fill, valid for writes.
///         unsafe { dlpack_pyo3::get_buffer(slf, view, flags) }
///     }
///
///     unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
///         // SAFETY: CPython passes a view that `__getbuffer__` filled, once.
///         unsafe { dlpack_pyo3::release_buffer(view) }
///     }
/// }
///
/// Python::attach(|py| -> PyResult<()> {
///     let tensor = ManagedTensor::export(vec![1u16, 2, 3, 4, 5, 6]).map_err(dlpack_pyo3::to_py_err)?;
///     let image = Bound::new(py, Image { pixels: Exporter::new(tensor) })?;
///     let view = py.import("builtins")?.getattr("memoryview")?.call1((&image,))?;
///     assert_eq!(view.getattr("format")?.extract::<String>()?, "H");
///     assert_eq!(view.call_method0("tolist")?.extract::<Vec<u16>>()?, [1, 2, 3, 4, 5, 6]);
///     view.call_method0("release")?;
///     Ok(())
/// })?;
/// # Ok::<(), PyErr>(())
/// ```
///
/// # Safety
///
/// `view` is NULL or valid for reads and writes of a `Py_buffer`, as CPython passes it to
/// `__getbuffer__`.
///
/// # Errors
///
/// `BufferError`, with the reason, for a tensor the host does not read in place (device
/// memory), for a dtype PEP 3118 has no format for (bfloat16, the float8 types, complex32,
/// sub-byte types, vector types), for a read-only tensor asked for with
/// `PyBUF_WRITABLE`, and for a layout the request's contiguity flags (`PyBUF_C_CONTIGUOUS`,
/// `PyBUF_F_CONTIGUOUS`, `PyBUF_ANY_CONTIGUOUS`, or no `PyBUF_STRIDES`, which asks for a
/// C-contiguous buffer) rule out; as for [`to_capsule`](fn@crate::to_capsule) when the device
/// wait fails.
pub unsafe fn get_buffer<T: PyExporter>(
    slf: &Bound<'_, T>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err(
            "__getbuffer__ was given a NULL view",
        ));
    }
    // SAFETY: `view` is valid for writes (the caller). PEP 3118 asks for `obj` to be NULL when
    // the request fails.
    unsafe { (*view).obj = core::ptr::null_mut() };
    let exporter = slf.get().exporter();
    let tensor = exporter.tensor();
    let class = || {
        slf.as_any()
            .get_type()
            .qualname()
            .map_or_else(|_| "the object".to_owned(), |n| n.to_string())
    };
    if !exporter.host_read_in_place(slf.py())? {
        return Err(PyBufferError::new_err(format!(
            "{} on {} has no buffer: the buffer protocol hands out memory the host reads in \
             place, and this tensor's memory is its device's; copy it to the host through \
             __dlpack__, as numpy.from_dlpack(x, device='cpu') does",
            class(),
            tensor.device()
        )));
    }
    let layout = layout(tensor, flags)
        .map_err(|why| PyBufferError::new_err(format!("{} has no such buffer: {why}", class())))?;
    let (shape, strides, internal) = match layout.dims {
        Some(dims) => {
            let dims = Box::into_raw(dims);
            // SAFETY: `dims` is the block just leaked, live until `release_buffer` frees it;
            // its slice holds `ndim` sizes and then `ndim` strides.
            let first = unsafe { (*dims).0.as_mut_ptr() };
            // SAFETY: `ndim` entries past the start is still inside the slice of 2 * ndim.
            let strides = unsafe { first.add(layout.ndim as usize) };
            (
                first,
                if layout.strides {
                    strides
                } else {
                    core::ptr::null_mut()
                },
                dims.cast::<c_void>(),
            )
        }
        None => (
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
        ),
    };
    // SAFETY: `view` is valid for writes (the caller). The format is a static string, which
    // consumers only read; `shape` and `strides` point into the block `internal` owns.
    unsafe {
        (*view).buf = layout.buf;
        (*view).len = layout.len;
        (*view).itemsize = layout.itemsize;
        (*view).readonly = c_int::from(layout.readonly);
        (*view).ndim = layout.ndim;
        (*view).format = layout
            .format
            .map_or(core::ptr::null_mut(), |f| f.as_ptr().cast_mut());
        (*view).shape = shape;
        (*view).strides = strides;
        (*view).suboffsets = core::ptr::null_mut();
        (*view).internal = internal;
        (*view).obj = slf.clone().into_any().into_ptr();
    }
    Ok(())
}

/// `__releasebuffer__` for a class whose `__getbuffer__` is [`get_buffer`]: frees the shape and
/// strides that `get_buffer` allocated. CPython then releases the buffer's reference to the
/// object.
///
/// # Safety
///
/// `view` was filled by [`get_buffer`] and is released once, as CPython releases a buffer.
pub unsafe fn release_buffer(view: *mut ffi::Py_buffer) {
    if view.is_null() {
        return;
    }
    // SAFETY: `view` was filled by `get_buffer` (the caller), whose `internal` is NULL or the
    // `Dims` block it leaked for this buffer, freed here once.
    unsafe {
        let internal = (*view).internal;
        if !internal.is_null() {
            drop(Box::from_raw(internal.cast::<Dims>()));
            (*view).internal = core::ptr::null_mut();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_follow_the_struct_module() {
        for (dtype, format, size) in [
            (DataType::I64, "q", 8),
            (DataType::U16, "H", 2),
            (DataType::F16, "e", 2),
            (DataType::C64, "Zf", 8),
            (DataType::C128, "Zd", 16),
            (DataType::BOOL, "?", 1),
        ] {
            let (f, s) = format_of(dtype).unwrap();
            assert_eq!((f.to_str().unwrap(), s), (format, size), "{dtype}");
        }
        for (dtype, why) in [
            (DataType::BF16, "bfloat16, a type the struct"),
            (DataType::F8_E4M3FN, "float8_e4m3fn, a type"),
            (
                DataType::new(DataTypeCode::FLOAT4_E2M1FN, 4, 1),
                "float4_e2m1fn, a sub-byte",
            ),
            (
                DataType::new(DataTypeCode::FLOAT, 32, 4),
                "float32x4, a vector",
            ),
            (
                DataType::new(DataTypeCode::COMPLEX, 32, 1),
                "complex32, a type",
            ),
        ] {
            let err = format_of(dtype).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn contiguity_is_cpythons() {
        // A 2 x 3 float32 array, row-major, column-major, and a column of it.
        assert!(is_contiguous(&[2, 3], &[12, 4], 4, true));
        assert!(!is_contiguous(&[2, 3], &[12, 4], 4, false));
        assert!(is_contiguous(&[2, 3], &[4, 8], 4, false));
        assert!(!is_contiguous(&[2, 3], &[24, 4], 4, true));
        // Size-1 dimensions take any stride; empty arrays are contiguous both ways.
        assert!(is_contiguous(&[1, 3], &[999, 4], 4, true));
        assert!(is_contiguous(&[0, 3], &[-5, 7], 4, true));
        assert!(is_contiguous(&[], &[], 4, false));
        assert!(!is_contiguous(&[3], &[-4], 4, true));
    }
}
