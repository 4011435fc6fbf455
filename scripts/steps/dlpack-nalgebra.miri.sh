# dlpack-nalgebra: its tests under Miri (strict provenance). They check that the layouts the
# crate hands to nalgebra as safe views survive nalgebra's iterators and BLAS routines, which go
# out of bounds on the layouts it refuses.
step "cargo miri test -p dlpack-nalgebra"
cargo +"$MIRI_TOOLCHAIN" miri test -p dlpack-nalgebra --all-features --lib --tests
