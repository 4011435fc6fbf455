//! `#[derive(DLPack)]` for your own tensor structs: export and import through dlpack-core.
