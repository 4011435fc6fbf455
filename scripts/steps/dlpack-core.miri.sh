# dlpack-core: every unit and integration test under Miri (strict provenance), but the
# header_layout test, which is #[ignore]d under Miri (it runs the C compiler).
step "cargo miri test -p dlpack-core"
cargo +"$MIRI_TOOLCHAIN" miri test -p dlpack-core --all-features --lib --tests
