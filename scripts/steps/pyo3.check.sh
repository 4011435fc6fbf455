# dlpack-pyo3: builds the abi3 test module (without libpython) and runs its Python tests with
# NumPy, JAX and tvm-ffi, then its CUDA tests through the libcuda stand-in and its oneAPI tests
# through the Level Zero loader with the test driver.

step "dlpack-pyo3 Python tests (abi3 extension + pytest)"
export PYO3_PYTHON="${PYO3_PYTHON:-$ROOT/.venv/bin/python3}"
# PYO3_BUILD_EXTENSION_MODULE: do not link libpython (the interpreter that loads the module
# provides it). Release, so that this build never invalidates the debug one of cargo test.
# The `cuda` and `oneapi` features add the CUDA and oneAPI functions (dlpack-cuda and
# dlpack-oneapi load libcuda and the Level Zero loader at run time, so this builds without a
# toolkit, loader or driver).
PYO3_BUILD_EXTENSION_MODULE=1 cargo build --quiet --release -p dlpack-pyo3-testmod --features cuda,oneapi
pyo3_target="${CARGO_TARGET_DIR:-$ROOT/target}"
pyo3_ext="$pyo3_target/dlpack-pyo3-python"
mkdir -p "$pyo3_ext"
cp "$pyo3_target/release/libdlpack_testmod.so" "$pyo3_ext/dlpack_testmod.abi3.so"
if command -v readelf >/dev/null && readelf -d "$pyo3_ext/dlpack_testmod.abi3.so" | grep -q 'NEEDED.*libpython'; then
    die "dlpack_testmod.abi3.so links libpython; an extension module must not"
fi
DLPACK_TESTMOD_DIR="$pyo3_ext" .venv/bin/python -m pytest -q -p no:cacheprovider \
    "$ROOT/dlpack-pyo3/tests/python"

# The CUDA path of the module (Rust CUDA tensors out to Python and back, the stream argument,
# NumPy's copy to the host, device claims the driver refutes, deleters on other threads)
# through the workspace's libcuda stand-in, on any machine. A pytest process of its own: with
# the stand-in loaded, a real libcuda is never used.
step "dlpack-pyo3 CUDA tests through the libcuda stand-in (dlpack-cuda/test-driver)"
quietly "build the libcuda stand-in (cargo build -p dlpack-cuda-test-driver)" \
    cargo build -p dlpack-cuda-test-driver
pyo3_stand_in="$pyo3_target/debug/libdlpack_cuda_test_driver.so"
[[ -f "$pyo3_stand_in" ]] || die "cargo build -p dlpack-cuda-test-driver produced no $pyo3_stand_in"
DLPACK_CUDA_TEST_DRIVER="$pyo3_stand_in" DLPACK_TESTMOD_DIR="$pyo3_ext" .venv/bin/python -m pytest \
    -q -p no:cacheprovider "$ROOT/dlpack-pyo3/tests/python-stand-in"

# The same two folders against a debug build of the module (debug assertions on, as
# `maturin develop` builds it): what only such a build checks (pyo3 panics in debug builds
# where a C API contract is broken, `debug_assert!`s) must not fire either.
step "dlpack-pyo3 Python and stand-in tests against a debug build of the module"
PYO3_BUILD_EXTENSION_MODULE=1 cargo build --quiet --profile pyext-debug -p dlpack-pyo3-testmod \
    --features cuda,oneapi
pyo3_ext_debug="$pyo3_target/dlpack-pyo3-python-debug"
mkdir -p "$pyo3_ext_debug"
cp "$pyo3_target/pyext-debug/libdlpack_testmod.so" "$pyo3_ext_debug/dlpack_testmod.abi3.so"
DLPACK_TESTMOD_DIR="$pyo3_ext_debug" .venv/bin/python -m pytest -q -p no:cacheprovider \
    "$ROOT/dlpack-pyo3/tests/python"
DLPACK_CUDA_TEST_DRIVER="$pyo3_stand_in" DLPACK_TESTMOD_DIR="$pyo3_ext_debug" .venv/bin/python -m pytest \
    -q -p no:cacheprovider "$ROOT/dlpack-pyo3/tests/python-stand-in"

# The oneAPI path of the module (Rust USM tensors out to Python and back, the queue handshake
# named by `stream`, what dpctl-style producers are passed, NumPy's copy to the host, device
# claims Level Zero refutes) through Debian's Level Zero loader (oneapi.setup.sh installs it)
# and the workspace's test driver, on any machine. A pytest process of its own: the loader
# reads ZE_ENABLE_ALT_DRIVERS once, when the module first loads it.
step "dlpack-pyo3 oneAPI tests through the Level Zero loader and test driver"
quietly "build the Level Zero test driver (cargo build -p dlpack-oneapi-test-driver)" \
    cargo build -p dlpack-oneapi-test-driver
pyo3_ze_driver="$pyo3_target/debug/libdlpack_oneapi_test_driver.so"
[[ -f "$pyo3_ze_driver" ]] || die "cargo build -p dlpack-oneapi-test-driver produced no $pyo3_ze_driver"
ZE_ENABLE_ALT_DRIVERS="$pyo3_ze_driver" DLPACK_ONEAPI_TEST_DRIVER_DEVICES=2 DLPACK_TESTMOD_DIR="$pyo3_ext" \
    .venv/bin/python -m pytest -q -p no:cacheprovider "$ROOT/dlpack-pyo3/tests/python-oneapi"

# The CUDA tests with PyTorch and CuPy: only with DLPACK_TEST_CUDA=1 (on a GPU machine, where
# they must pass); otherwise one test runs (the CUDA importer's refusals without a driver) and
# pytest prints why the others did not (-rs).
# PyTorch and CuPy are not in .venv: with the switch the tests run under DLPACK_GPU_PYTHON
# (default: the python3 on PATH), which must import torch, cupy and pytest (the abi3 module
# loads in any CPython >= 3.11, the first stable ABI with the buffer protocol).
step "dlpack-pyo3 CUDA tests (PyTorch, CuPy; DLPACK_TEST_CUDA=${DLPACK_TEST_CUDA:-unset})"
pyo3_gpu_python=.venv/bin/python
if [[ ${DLPACK_TEST_CUDA:-} == 1 ]]; then
    pyo3_gpu_python=${DLPACK_GPU_PYTHON:-python3}
    "$pyo3_gpu_python" -c "import sys, torch, cupy, pytest; assert sys.version_info >= (3, 11)" ||
        die "DLPACK_TEST_CUDA=1, but $pyo3_gpu_python is older than CPython 3.11 or cannot import torch, cupy and pytest: set DLPACK_GPU_PYTHON to an interpreter that can"
fi
DLPACK_TESTMOD_DIR="$pyo3_ext" "$pyo3_gpu_python" -m pytest -q -rs -p no:cacheprovider \
    "$ROOT/dlpack-pyo3/tests/python-gpu"
if [[ ${DLPACK_TEST_CUDA:-} != 1 ]]; then
    echo "    the GPU tests did not run: set DLPACK_TEST_CUDA=1 on a machine with a CUDA GPU, PyTorch and CuPy"
fi

# Hardening (issue 9): the same Python tests under valgrind's memcheck, with CPython's own
# allocator off (PYTHONMALLOC=malloc) so that every object is a malloc block valgrind sees. A
# definite leak or a memory error whose stack passes through DLPack code (this workspace's
# module, or the DLPack code of NumPy, JAX and tvm-ffi, where a tensor our importer failed to
# delete was allocated) fails the step; the interpreter's and its libraries' own leaks at exit
# are counted, not failed on (scripts/valgrind-ours.py). First a self-test: a deliberate leak
# must be found. Skipped with --quick.
if ((!QUICK)); then
    step "valgrind leak check over the Python tests"
    # DLPACK_RANDOM_CASES: test_random_calls.py's 20 000 cases (run above without valgrind)
    # become 1 000 under memcheck, enough to reach every kind of call and refusal it draws; the
    # tests' other long loops run a fiftieth of their rounds (conftest.py's `rounds`).
    pyo3_vg=(env PYTHONMALLOC=malloc OPENBLAS_NUM_THREADS=1 DLPACK_TESTMOD_DIR="$pyo3_ext"
        DLPACK_RANDOM_CASES=1000 valgrind --leak-check=full --show-leak-kinds=definite --num-callers=40)
    pyo3_log=$(mktemp)
    "${pyo3_vg[@]}" --log-file="$pyo3_log" .venv/bin/python -c \
        "import sys; sys.path.insert(0, '$pyo3_ext'); import dlpack_testmod; dlpack_testmod.leak_one_export()" ||
        die "the valgrind self-test run failed (log: $pyo3_log)"
    pyo3_found=$(python3 "$ROOT/scripts/valgrind-ours.py" "$pyo3_log" dlpack 2>&1 || true)
    [[ $pyo3_found == *leak_one_export* ]] ||
        die "the valgrind self-test did not find the deliberate leak of leak_one_export (log: $pyo3_log)"
    echo "    self-test: the deliberate leak was found"
    pyo3_pytest_log=$(mktemp)
    if "${pyo3_vg[@]}" --log-file="$pyo3_log" .venv/bin/python -m pytest -q -p no:cacheprovider \
        "$ROOT/dlpack-pyo3/tests/python" >"$pyo3_pytest_log" 2>&1; then
        tail -1 "$pyo3_pytest_log"
        rm -f "$pyo3_pytest_log"
    else
        cat "$pyo3_pytest_log" >&2
        die "the Python tests failed under valgrind (pytest's output above; valgrind's log: $pyo3_log)"
    fi
    python3 "$ROOT/scripts/valgrind-ours.py" "$pyo3_log" dlpack ||
        die "valgrind found a definite leak or a memory error in DLPack code (records above; log: $pyo3_log)"
    rm -f "$pyo3_log"
fi
