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
