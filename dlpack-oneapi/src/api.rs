//! The Level Zero loader, opened at run time: [`LevelZero`] and its entry points, [`Api`].

use std::ffi::OsStr;
use std::sync::Arc;

use dlpack_core::Error;
use libloading::Library;

use crate::sys::{self, ze_result_t};

/// The name [`Error::Runtime`] carries for every error of this crate's runtime.
pub(crate) const RUNTIME: &str = "Level Zero";

/// A [`Error::Runtime`] with this message.
pub(crate) fn runtime_error(message: impl Into<String>) -> Error {
    Error::Runtime {
        runtime: RUNTIME,
        message: message.into(),
    }
}

/// `Ok` for `ZE_RESULT_SUCCESS`, otherwise an error naming the call and the result (and, for
/// `ZE_RESULT_ERROR_UNINITIALIZED`, what it means from that call).
pub(crate) fn check(result: ze_result_t, call: &str) -> Result<(), Error> {
    if result == sys::ZE_RESULT_SUCCESS {
        return Ok(());
    }
    let mut message = format!(
        "{call} returned {}, expected ZE_RESULT_SUCCESS",
        sys::describe_result(result)
    );
    if result == sys::ZE_RESULT_ERROR_UNINITIALIZED {
        message.push_str(uninitialized_hint(call));
    }
    Err(runtime_error(message))
}

/// What `ZE_RESULT_ERROR_UNINITIALIZED` means coming from `call`. From `zeInit` and
/// `zeDriverGet`, which run before any driver is in use, it means the loader found none; from
/// any other call, `zeInit` and `zeDriverGet` have already succeeded in this process (every
/// handle this crate passes comes from them), so it is the driver that refused the call.
fn uninitialized_hint(call: &str) -> &'static str {
    if call == "zeInit" || call == "zeDriverGet" {
        "; the Level Zero loader found no driver (no GPU driver such as Intel's \
         libze_intel_gpu.so.1 is installed, or ZE_ENABLE_ALT_DRIVERS names none that loads)"
    } else {
        "; zeInit and zeDriverGet had succeeded, so the driver refused this call as if \
         uninitialised: another runtime in the process (a SYCL runtime, say) may have \
         initialised Level Zero through a different loader"
    }
}

macro_rules! declare_api {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty;
    )*) => {
        /// The loader's entry points, resolved by name when the loader is opened.
        ///
        /// Calling them is `unsafe`: each has the contract its Level Zero specification states.
        /// The pointers stay valid while this `Api` (and so the loader library) lives.
        #[derive(Debug)]
        #[allow(non_snake_case)] // the fields are the C functions' names
        pub struct Api {
            $(
                $(#[$doc])*
                pub $name: sys::pfn::$name,
            )*
            _library: Library,
        }

        impl Api {
            /// Resolves every entry point in `library` (opened from `path`).
            #[allow(non_snake_case)]
            fn resolve(library: Library, path: &OsStr) -> Result<Self, Error> {
                $(
                    // SAFETY: the symbol is the Level Zero function of that name, whose C type is
                    // `sys::pfn::$name` (checked against ze_api.h by the ze_header_layout test);
                    // the pointer is only used while `library` stays loaded, as it is owned by
                    // the returned `Api`.
                    let $name: sys::pfn::$name = *unsafe {
                        library.get::<sys::pfn::$name>(stringify!($name))
                    }
                    .map_err(|e| {
                        runtime_error(format!(
                            "the Level Zero loader {} does not export {} ({e}); expected a \
                             loader for API {}.{} or newer",
                            path.to_string_lossy(),
                            stringify!($name),
                            sys::ZE_API_VERSION_CURRENT.major(),
                            sys::ZE_API_VERSION_CURRENT.minor(),
                        ))
                    })?;
                )*
                Ok(Api { $($name,)* _library: library })
            }
        }
    };
}

ze_functions!(declare_api);

/// The Level Zero loader (`libze_loader.so.1`), opened at run time, and its entry points.
///
/// Opening it is the only way into this crate's runtime, so the crate builds and links on
/// machines without Level Zero: a missing loader, a missing symbol or a loader without drivers
/// is an [`Error::Runtime`] that says which.
///
/// ```
/// use dlpack_oneapi::LevelZero;
///
/// match LevelZero::load() {
///     Ok(ze) => println!("{} Level Zero driver(s)", ze.drivers()?.len()),
///     // No loader, or no driver: an error value that says which.
///     Err(e) => println!("{e}"),
/// }
/// # Ok::<(), dlpack_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LevelZero {
    api: Arc<Api>,
}

impl LevelZero {
    /// The loader's file name (its soname on Linux), as `dlopen` looks it up.
    pub const LOADER: &'static str = "libze_loader.so.1";

    /// Opens the system's loader ([`LevelZero::LOADER`]) and initialises it (`zeInit(0)`).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the loader is not installed (Debian: `apt-get install libze1`),
    /// lacks an entry point of API 1.4, or finds no driver (`zeInit` returns
    /// `ZE_RESULT_ERROR_UNINITIALIZED`).
    pub fn load() -> Result<Self, Error> {
        // SAFETY: `libze_loader.so.1` is the soname of the Level Zero loader, which every Level
        // Zero program links under that name; its initialisers are the loader's own.
        let ze = unsafe { Self::open(Self::LOADER) }?;
        ze.init()?;
        Ok(ze)
    }

    /// Opens a loader library and resolves its entry points, without initialising it.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the library cannot be opened or lacks an entry point of API 1.4.
    ///
    /// # Safety
    ///
    /// `path` must name a Level Zero loader (or nothing): loading a library runs its
    /// initialisers, and the symbols this crate resolves must have the Level Zero types.
    pub unsafe fn open(path: impl AsRef<OsStr>) -> Result<Self, Error> {
        let path = path.as_ref();
        // SAFETY: the caller vouches that `path` is a Level Zero loader.
        let library = unsafe { Library::new(path) }.map_err(|e| {
            runtime_error(format!(
                "cannot open the Level Zero loader {} ({e}); install it (Debian: apt-get \
                 install libze1)",
                path.to_string_lossy()
            ))
        })?;
        Ok(LevelZero {
            api: Arc::new(Api::resolve(library, path)?),
        })
    }

    /// Initialises the loader and its drivers (`zeInit(0)`: every driver type). Idempotent.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when `zeInit` fails (`ZE_RESULT_ERROR_UNINITIALIZED` when the loader
    /// finds no driver).
    pub fn init(&self) -> Result<(), Error> {
        // SAFETY: zeInit takes flags by value and has no other precondition.
        check(unsafe { (self.api.zeInit)(0) }, "zeInit")
    }

    /// The raw entry points.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The driver instances, in the loader's order (`zeDriverGet`).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when `zeDriverGet` fails or returns a NULL handle.
    pub fn drivers(&self) -> Result<Vec<crate::Driver>, Error> {
        let api = &self.api;
        // SAFETY: `enumerate` passes a valid count and a NULL or large enough array.
        let handles = enumerate("zeDriverGet", |count, out| unsafe {
            (api.zeDriverGet)(count, out)
        })?;
        Ok(handles
            .into_iter()
            .map(|h| crate::Driver::from_raw(self.clone(), h))
            .collect())
    }

    /// The driver whose handle is `handle` (a SYCL platform's native Level Zero handle, say),
    /// among [`LevelZero::drivers`], so that an unknown handle is never used.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`], naming the known handles, when `handle` is none of them; and as for
    /// [`LevelZero::drivers`].
    pub fn driver(&self, handle: sys::ze_driver_handle_t) -> Result<crate::Driver, Error> {
        let drivers = self.drivers()?;
        if let Some(driver) = drivers.iter().find(|d| d.raw() == handle) {
            return Ok(driver.clone());
        }
        let known: Vec<String> = drivers.iter().map(|d| format!("{:p}", d.raw())).collect();
        Err(runtime_error(format!(
            "{handle:p} is not a driver of this Level Zero loader; its drivers are [{}]",
            known.join(", ")
        )))
    }
}

/// Runs a Level Zero enumeration (`(pCount, phItems)`) twice: once for the count, once for the
/// handles.
pub(crate) fn enumerate<T>(
    call: &str,
    f: impl Fn(*mut u32, *mut *mut T) -> ze_result_t,
) -> Result<Vec<*mut T>, Error> {
    let mut count = 0u32;
    check(f(&mut count, core::ptr::null_mut()), call)?;
    let mut handles = vec![core::ptr::null_mut(); count as usize];
    let mut written = count;
    if count > 0 {
        check(f(&mut written, handles.as_mut_ptr()), call)?;
    }
    handles.truncate(written.min(count) as usize);
    if handles.iter().any(|h| h.is_null()) {
        return Err(runtime_error(format!(
            "{call} returned a NULL handle; expected {written} valid handles"
        )));
    }
    Ok(handles)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uninitialized_says_no_driver_only_where_no_driver_was_found_yet() {
        let before = check(sys::ZE_RESULT_ERROR_UNINITIALIZED, "zeInit")
            .unwrap_err()
            .to_string();
        assert!(before.contains("found no driver"), "{before}");
        for call in [
            "zeContextCreate",
            "zeMemGetAllocProperties",
            "zeCommandListAppendBarrier",
        ] {
            let after = check(sys::ZE_RESULT_ERROR_UNINITIALIZED, call)
                .unwrap_err()
                .to_string();
            assert!(!after.contains("found no driver"), "{after}");
            assert!(
                after.contains("zeInit and zeDriverGet had succeeded"),
                "{after}"
            );
            assert!(
                after.starts_with(&format!("Level Zero: {call} returned")),
                "{after}"
            );
        }
        assert!(check(sys::ZE_RESULT_SUCCESS, "zeContextCreate").is_ok());
    }
}
