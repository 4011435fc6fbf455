//! Cross-crate tests and the tour example of the DLPack workspace live beside this (empty) library.
