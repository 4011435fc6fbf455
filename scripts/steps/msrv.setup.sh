# The minimum supported Rust version (issue 2): the toolchain named by `rust-version` in the
# root Cargo.toml's [workspace.package], for msrv.check.sh. Not installed with --quick.

if ((!QUICK)); then
    MSRV=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^rust-version = "\([0-9.]*\)"$/\1/p' "$ROOT/Cargo.toml")
    [[ -n $MSRV ]] || die "no rust-version in the [workspace.package] of $ROOT/Cargo.toml"
    [[ $MSRV == *.*.* ]] || MSRV=$MSRV.0
    step "Rust $MSRV for the MSRV check"
    if ! grep -q "^$MSRV-" <<<"$(rustup toolchain list)"; then
        echo "    installing Rust $MSRV (minimal profile)"
        quietly "install Rust $MSRV" rustup toolchain install "$MSRV" --profile minimal
    fi
    echo "    have $(rustc "+$MSRV" --version)"
fi
