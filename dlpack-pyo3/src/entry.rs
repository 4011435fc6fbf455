//! C entry points: the functions that CPython and C consumers call directly, outside pyo3's
//! own wrappers (the fast `__dlpack__` of [`crate::dlpack_method`] and the C exchange API's
//! functions).
//!
//! Such a function is called with the thread attached to the interpreter, but pyo3 does not
//! know it: under a `Python` token made with `Python::assume_attached`, pyo3's count of
//! attachments stays at zero, and pyo3 defers every reference it then drops (those of an
//! exception's type and value when the exception is raised, those of an error that is made and
//! discarded) to a pool that it empties only the next time it attaches. A loop of refused calls
//! from Python or C, which never enters a pyo3 function of the same extension module, would
//! grow that pool by a few hundred bytes a call.
//!
//! So an entry point runs its body under [`Entry::py`], whose success paths drop nothing that
//! pyo3 defers (they make no `PyErr`, and `Bound` references are released at once whatever
//! pyo3's count), and reports every error through [`Entry::raise`], which attaches as pyo3
//! counts it (`Python::try_attach`): that empties the pool, the body's discarded errors
//! included, and the raised exception's references are then released at once. The success
//! path pays nothing for it; attaching for the whole call would cost about 40 ns a call
//! (`PyGILState_Ensure` and `PyGILState_Release`), a fifth of a `__dlpack__` call.

use core::marker::PhantomData;

use pyo3::{PyErr, Python};

/// A C entry point's promise that the thread is attached to the interpreter for the call.
pub(crate) struct Entry {
    /// Not `Send`: the promise holds on the thread that made it.
    _thread: PhantomData<*mut ()>,
}

impl Entry {
    /// Records the promise that the thread is attached.
    ///
    /// # Safety
    /// The thread is attached to the interpreter while the result lives (the contract of every
    /// C entry point that uses this).
    pub(crate) unsafe fn assume() -> Self {
        Entry {
            _thread: PhantomData,
        }
    }

    /// The token for the entry point's body. pyo3 does not count this attachment, so a
    /// `Py` reference or `PyErr` dropped under it is deferred (see the module's text): report
    /// errors through [`Entry::raise`].
    pub(crate) fn py(&self) -> Python<'_> {
        // SAFETY: the thread is attached while `self` lives (the promise `assume` records), and
        // the token borrows `self`.
        unsafe { Python::assume_attached() }
    }

    /// Sets `err` as the Python exception, attached as pyo3 counts it: the references pyo3
    /// deferred (those of errors the body made and discarded) are released first, and those
    /// that raising `err` drops (its type and value) at once.
    ///
    /// When pyo3 refuses to attach (while the interpreter finalizes), `err` is raised under
    /// the attachment promised, and pyo3 defers what that drops.
    pub(crate) fn raise(&self, err: PyErr) {
        let mut err = Some(err);
        // On a thread that CPython has attached and pyo3 has not counted, `try_attach` takes
        // the thread state the thread has (`PyGILState_Ensure`) and counts the attachment.
        let attached = Python::try_attach(|py| {
            if let Some(err) = err.take() {
                err.restore(py);
            }
        });
        if attached.is_none()
            && let Some(err) = err
        {
            err.restore(self.py());
        }
    }
}

/// A caught panic as the `PanicException` pyo3 raises for a panic in a Python method.
pub(crate) fn panic_error(payload: Box<dyn std::any::Any + Send>) -> PyErr {
    pyo3::panic::PanicException::new_err(panic_message(&*payload))
}

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
