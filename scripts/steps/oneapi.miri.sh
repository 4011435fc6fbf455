# dlpack-oneapi: the unit tests that need no loader (device numbering, result names; the test
# driver's allocation map). The rest is FFI, which Miri cannot run.
step "cargo miri test: dlpack-oneapi's numbering logic, the test driver's allocation map"
cargo +"$MIRI_TOOLCHAIN" miri test -p dlpack-oneapi -p dlpack-oneapi-test-driver --all-features --lib
