# The minimum supported Rust version: every crate that inherits the workspace's `rust-version`
# builds (cargo check, all features) with exactly that toolchain. The crates that depend on
# candle-core (dlpack-candle, dlpack-bench and the root package) declare 1.94 themselves and are
# left out; the pinned toolchain (1.95) builds them in every other step. Skipped with --quick.

if ((!QUICK)); then
    step "cargo +$MSRV check (the crates whose rust-version is $MSRV)"
    msrv_crates=()
    for manifest in "$ROOT"/*/Cargo.toml "$ROOT"/*/*/Cargo.toml; do
        grep -q '^rust-version.workspace = true' "$manifest" || continue
        msrv_crates+=(-p "$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -n 1)")
    done
    ((${#msrv_crates[@]})) || die "no crate inherits the workspace's rust-version"
    echo "    ${msrv_crates[*]}"
    cargo "+$MSRV" check --quiet --all-features --lib --bins --examples "${msrv_crates[@]}"
fi
