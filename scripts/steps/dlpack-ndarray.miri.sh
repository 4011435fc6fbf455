# dlpack-ndarray: every test (layout matrix, bad input, hand-over, reclaim) under Miri with
# strict provenance, so the views it builds from imported tensors are checked for UB.
step "cargo miri test -p dlpack-ndarray"
cargo +"$MIRI_TOOLCHAIN" miri test -p dlpack-ndarray --all-features --lib --tests
