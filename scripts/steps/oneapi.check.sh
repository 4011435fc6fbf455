# dlpack-oneapi: `cargo test` above already ran the real loader with no driver, the loader with
# the test-support driver in three configurations (direct, intercept, validation layer) and the
# header layout test. Here the crate's documentation examples (and dlpack-pyo3's oneAPI one) run
# again with the test-support driver loaded, so that they take their full path (export, import,
# copies) instead of stopping at "no Level Zero driver". Its Miri run is in oneapi.miri.sh.

step "dlpack-oneapi and dlpack-pyo3 oneAPI doc examples through the Level Zero test driver"
oneapi_target=${CARGO_TARGET_DIR:-$ROOT/target}
quietly "build the Level Zero test driver (cargo build -p dlpack-oneapi-test-driver)" \
    cargo build -p dlpack-oneapi-test-driver
oneapi_driver="$oneapi_target/debug/libdlpack_oneapi_test_driver.so"
[[ -f "$oneapi_driver" ]] || die "cargo build -p dlpack-oneapi-test-driver produced no $oneapi_driver"
ZE_ENABLE_ALT_DRIVERS="$oneapi_driver" DLPACK_ONEAPI_TEST_DRIVER_DEVICES=2 \
    cargo test -p dlpack-oneapi --all-features --doc
# And dlpack-pyo3's oneAPI example (its `oneapi` module), which embeds Python.
ZE_ENABLE_ALT_DRIVERS="$oneapi_driver" DLPACK_ONEAPI_TEST_DRIVER_DEVICES=2 \
    cargo test -p dlpack-pyo3 --all-features --doc oneapi

