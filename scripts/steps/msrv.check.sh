# The minimum supported Rust version: every crate that inherits the workspace's `rust-version`
# builds (cargo check, all features but those needing a CUDA toolkit: scripts/features) with exactly that toolchain. The crates that depend on
# candle-core (dlpack-candle, dlpack-bench and the root package) declare 1.94 themselves and are
# left out; the pinned toolchain (1.95) builds them in every other step. Skipped with --quick.

if ((!QUICK)); then
    step "cargo +$MSRV check (the crates whose rust-version is $MSRV)"
    msrv_names=()
    for manifest in "$ROOT"/*/Cargo.toml "$ROOT"/*/*/Cargo.toml; do
        grep -q '^rust-version.workspace = true' "$manifest" || continue
        msrv_names+=("$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -n 1)")
    done
    ((${#msrv_names[@]})) || die "no crate inherits the workspace's rust-version"
    echo "    ${msrv_names[*]}"
    msrv_crates=()
    for name in "${msrv_names[@]}"; do msrv_crates+=(-p "$name"); done
    cargo "+$MSRV" check --quiet --features "$("$ROOT"/scripts/features "${msrv_names[@]}")" \
        --lib --bins --examples "${msrv_crates[@]}"
fi
