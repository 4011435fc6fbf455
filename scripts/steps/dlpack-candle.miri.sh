# dlpack-candle: its tests under Miri (strict provenance). They run the crate's unsafe code (the
# storage read lock held across the export's life and released on any thread, the lifetime of
# that guard, the Vec<Float8E8M0> -> Vec<u8> hand-over) together with candle's own code paths.
# One test is #[ignore]d under Miri: a contended parking_lot lock, whose parking code casts
# integers to pointers. The step took 149 s alone and 220-330 s beside the other checks (2 cores).
step "cargo miri test -p dlpack-candle"
cargo +"$MIRI_TOOLCHAIN" miri test -p dlpack-candle --all-features --lib --tests
