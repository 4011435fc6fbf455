//! Side-by-side benchmarks of this workspace against dlpark and NumPy (not published).
//!
//! The crate has no API; it carries the comparisons that `docs/benchmarks.md` reports, each
//! reproducible with one command from the repository root:
//!
//! - `cargo bench -p dlpack-bench --bench vs_dlpark`: this workspace against dlpark 0.10 on the
//!   same inputs (zero-copy round trips at 16 B, 1 MiB and 1 GiB, ndarray view import at 1, 4
//!   and 8 dimensions, candle export, strided copy-out of 16 MiB);
//! - `cargo run --profile bench -p dlpack-bench --example peak_rss`: peak resident memory of
//!   1 000 000 export/import round trips per library (nothing may grow);
//! - `DLPACK_TESTMOD_DIR=target/dlpack-pyo3-python .venv/bin/python dlpack-bench/python/compare.py`:
//!   NumPy's exchange against this workspace's, after `scripts/steps/pyo3.check.sh` has built
//!   the test extension module.
//! - `cargo build --profile bench -p dlpack-bench --example count` and
//!   `valgrind --tool=callgrind target/release/examples/count round-trip 100000` (or another
//!   operation the example lists): the instructions of one round trip, export -> drop or
//!   `Box::new` -> drop, counted rather than timed.

use std::ffi::c_void;
use std::sync::Arc;

use dlpack_core::{Export, ExportDesc};
use dlpark::ffi::{DLDevice, DLManagedTensorVersioned};
use dlpark::metadata::Dynamic;
use dlpark::{DlpackElement, DlpackFlags, versioned};

/// A shared, read-only `f32` buffer exported as a 1-d tensor by this workspace: the owner both
/// libraries get in the zero-copy comparisons.
#[derive(Debug)]
pub struct SharedOurs(pub Arc<Vec<f32>>);

// SAFETY: `describe` reports the shared Vec's buffer (len initialised f32s) read-only; the Arc
// keeps it alive and in place while `self` lives, and no one writes it.
unsafe impl Export for SharedOurs {
    fn ndim(&self) -> usize {
        1
    }
    fn describe(&mut self, shape: &mut [i64], strides: &mut [i64]) -> ExportDesc {
        shape[0] = self.0.len() as i64;
        strides[0] = 1;
        ExportDesc::host(self.0.as_ptr().cast_mut()).read_only()
    }
}

/// The same owner, exported by dlpark as a read-only 1-d tensor.
pub fn dlpark_shared(buf: &Arc<Vec<f32>>) -> versioned::Dlpack {
    let len = buf.len() as i64;
    let data = buf.as_ptr().cast_mut().cast::<c_void>();
    let mut init = Dynamic::new([len], [1i64])
        .prepare_as::<DLManagedTensorVersioned>()
        .expect("a 1-d shape fits dlpark's layout")
        .initialize(Arc::clone(buf));
    init.set_data(data)
        .set_dtype(f32::DTYPE)
        .set_device(DLDevice::CPU);
    init.set_flags(DlpackFlags::READ_ONLY)
        .expect("dlpark accepts READ_ONLY on a versioned tensor");
    // SAFETY: data, shape, dtype and device describe the Arc's live buffer, which the context
    // (the Arc clone) keeps alive until the deleter runs; the tensor is read-only.
    unsafe { init.finish() }
}
