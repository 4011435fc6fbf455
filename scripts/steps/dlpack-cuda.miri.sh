# dlpack-cuda: its hook logic (device claims, memory kinds, spans, stream values, the event
# handshake, strided copies) runs against a fake driver in the unit tests; here they run again
# under Miri. The GPU suite (dlpack-cuda/tests/gpu.rs) is part of `cargo test`: it runs
# when DLPACK_TEST_CUDA=1 is set (and then fails without a usable GPU), and otherwise prints
# that it did not run.
step "cargo miri test -p dlpack-cuda (hook logic against the fake driver)"
cargo +nightly miri test -p dlpack-cuda --all-features --lib --tests
