# dlpack-derive: the derived impls' behaviour tests under Miri (strict provenance). The UI
# tests (trybuild) run in `cargo test`; they compile code, which Miri cannot run, and
# Miri does not run the proc-macro crate's own unit tests.
step "cargo miri test -p dlpack-derive (behaviour tests)"
cargo +"$MIRI_TOOLCHAIN" miri test -p dlpack-derive --all-features --test export_import --test hygiene --test user_structs
