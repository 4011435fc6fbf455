//! Cross-crate tests and the tour example of the DLPack workspace live beside this (empty) library.

/// The README's Rust examples, compiled and run as doctests (`cargo test --doc`).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
