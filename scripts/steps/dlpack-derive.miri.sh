# dlpack-derive: the derived impls' behaviour tests under Miri (strict provenance). The UI
# tests (trybuild) ran in `cargo test` above; they compile code, which Miri cannot run, and
# Miri does not run the proc-macro crate's own unit tests.
if ((!QUICK)); then
    step "cargo miri test -p dlpack-derive (behaviour tests)"
    MIRIFLAGS="-Zmiri-strict-provenance${MIRIFLAGS:+ $MIRIFLAGS}" \
        cargo +nightly miri test -p dlpack-derive --all-features --test export_import --test hygiene
fi
