//! Sets pyo3's cfgs for the Python build this crate compiles for (`Py_LIMITED_API`, `Py_3_11`
//! and the like), so that the buffer protocol is compiled only where pyo3 offers it: every
//! build but the limited API of CPython < 3.11 (`abi3-py39`, `abi3-py310`).

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
