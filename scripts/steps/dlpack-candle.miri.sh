# dlpack-candle: its tests under Miri (strict provenance). They run the crate's unsafe code (the
# lent export's pointer into candle's storage, the copy an export owns, the Vec<Float8E8M0> ->
# Vec<u8> hand-over) together with candle's own code paths. Tests are #[ignore]d under Miri
# where candle's or its dependencies' code casts integers to pointers (a contended parking_lot
# lock, gemm's matmul), each saying so.
step "cargo miri test -p dlpack-candle"
cargo +"$MIRI_TOOLCHAIN" miri test -p dlpack-candle --features "$("$ROOT"/scripts/features dlpack-candle)" --lib --tests
