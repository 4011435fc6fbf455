//! The Python __dlpack__ protocol both ways for pyo3 extensions, and the DLPack C exchange API.
