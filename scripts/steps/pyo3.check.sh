# dlpack-pyo3: builds the abi3 test module (without libpython) and runs its Python tests with
# NumPy, JAX and tvm-ffi.

step "dlpack-pyo3 Python tests (abi3 extension + pytest)"
export PYO3_PYTHON="${PYO3_PYTHON:-$ROOT/.venv/bin/python3}"
# PYO3_BUILD_EXTENSION_MODULE: do not link libpython (the interpreter that loads the module
# provides it). Release, so that this build never invalidates the debug one of cargo test.
PYO3_BUILD_EXTENSION_MODULE=1 cargo build --quiet --release -p dlpack-pyo3-testmod
pyo3_target="${CARGO_TARGET_DIR:-$ROOT/target}"
pyo3_ext="$pyo3_target/dlpack-pyo3-python"
mkdir -p "$pyo3_ext"
cp "$pyo3_target/release/libdlpack_testmod.so" "$pyo3_ext/dlpack_testmod.abi3.so"
if command -v readelf >/dev/null && readelf -d "$pyo3_ext/dlpack_testmod.abi3.so" | grep -q 'NEEDED.*libpython'; then
    die "dlpack_testmod.abi3.so links libpython; an extension module must not"
fi
DLPACK_TESTMOD_DIR="$pyo3_ext" .venv/bin/python -m pytest -q -p no:cacheprovider \
    "$ROOT/dlpack-pyo3/tests/python"
