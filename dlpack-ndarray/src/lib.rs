//! ndarray <-> DLPack: zero-copy export of arrays and views of imported tensors.
