//! The Python extension module that dlpack-pyo3's Python tests import.
