//! nalgebra <-> DLPack: zero-copy export of matrices and views of imported tensors.
