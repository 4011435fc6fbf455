# dlpack-cuda: its hook logic (device claims, memory kinds, spans, stream values, the event
# handshake, strided copies) runs against a fake driver in the unit tests; here they run again
# under Miri. The CUDA suite is part of `cargo test`, not of this step: tests/test_driver.rs
# runs it through the libcuda stand-in (a shared library, which Miri cannot load: under Miri it
# prints that it did not run), and tests/gpu.rs on a GPU when DLPACK_TEST_CUDA=1 is set (and
# then fails without a usable GPU), otherwise printing that it did not run.
step "cargo miri test -p dlpack-cuda (hook logic against the fake driver)"
cargo +"$MIRI_TOOLCHAIN" miri test -p dlpack-cuda --features "$("$ROOT"/scripts/features dlpack-cuda)" --lib --tests
