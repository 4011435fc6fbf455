# dlpack-candle's CUDA suite (tests/cuda.rs, the feature `cuda`) on the libcuda stand-in
# (dlpack-cuda/test-driver), without a GPU: only with DLPACK_TEST_CANDLE_CUDA_STAND_IN=1,
# otherwise the step says it did not run. The feature needs a CUDA toolkit to build, which
# scripts/cuda-toolkit installs from PyPI into target/cuda-toolkit; the build goes to
# target/cuda. The first build takes about 13 minutes on two cores (nvcc compiling candle's
# kernels), later ones seconds, which is why the default run leaves it out.
#
# The stand-in is preloaded (LD_PRELOAD) over the toolkit's link stubs, which abort naming any
# function it does not model. It runs candle's real kernel PTX by name: the few kernels the suite
# reaches (strided copy, affine, broadcast add, index_select) are computed on the host in stream
# order, and a name candle-kernels' PTX lacks fails as on a GPU. Each case must leave the
# stand-in's allocations, events and refusals as it found them. Then the same binary runs under
# valgrind's memcheck (a definite leak or a memory error fails the step). What it cannot check:
# the kernels' device code, real stream timing, the driver's own behaviour (the GPU kit's runs).

step "dlpack-candle CUDA suite on the libcuda stand-in (DLPACK_TEST_CANDLE_CUDA_STAND_IN=${DLPACK_TEST_CANDLE_CUDA_STAND_IN:-unset})"
if [[ ${DLPACK_TEST_CANDLE_CUDA_STAND_IN:-} == 1 ]]; then
    candle_cuda_env=$("$ROOT"/scripts/cuda-toolkit env) ||
        die "scripts/cuda-toolkit could not set up the CUDA toolkit (its message is above)"
    candle_cuda_json=$(mktemp)
    # One cargo target directory (target/cuda) for the suite and the stand-in; the toolkit's
    # environment only in this subshell.
    (
        eval "$candle_cuda_env"
        cargo build --locked -p dlpack-cuda-test-driver --message-format=json >"$candle_cuda_json" &&
            cargo test --locked -p dlpack-candle --features cuda --test cuda --no-run \
                --message-format=json >>"$candle_cuda_json"
    ) >/dev/null || die "could not build dlpack-candle's CUDA suite and the stand-in (cargo's output is above)"
    mapfile -t candle_cuda_paths < <(artifacts_from_json "$candle_cuda_json" cuda dlpack_cuda_test_driver)
    rm -f "$candle_cuda_json"
    candle_cuda_bin=${candle_cuda_paths[0]:-}
    candle_cuda_stand_in=${candle_cuda_paths[1]:-}
    [[ -x "$candle_cuda_bin" ]] || die "cargo built no executable for dlpack-candle's tests/cuda.rs"
    [[ -f "$candle_cuda_stand_in" ]] || die "cargo built no libdlpack_cuda_test_driver.so"
    candle_cuda_libs=$(eval "$candle_cuda_env" && echo "$CUDA_HOME/lib/stubs:$CUDA_HOME/lib")
    # Runs the suite with the stand-in preloaded, under the command given first (or none).
    candle_cuda_run() {
        (cd "$ROOT/dlpack-candle" && DLPACK_TEST_CUDA=1 LD_LIBRARY_PATH="$candle_cuda_libs" \
            LD_PRELOAD="$candle_cuda_stand_in" "$@" "$candle_cuda_bin")
    }
    candle_cuda_log=$(mktemp)
    candle_cuda_run >"$candle_cuda_log" 2>&1 || {
        cat "$candle_cuda_log" >&2
        rm -f "$candle_cuda_log"
        die "dlpack-candle's CUDA suite failed on the libcuda stand-in (log above)"
    }
    grep -q '^test result: ok.*on the libcuda stand-in' "$candle_cuda_log" || {
        cat "$candle_cuda_log" >&2
        rm -f "$candle_cuda_log"
        die "dlpack-candle's CUDA suite did not say it ran on the stand-in (log above)"
    }
    grep -E '^test result' "$candle_cuda_log" | sed 's/^/    /'
    if ((!QUICK)); then
        # valgrind's own findings exit with 99; a failing test exits with the suite's status.
        candle_cuda_status=0
        candle_cuda_run valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite \
            --error-exitcode=99 >"$candle_cuda_log" 2>&1 || candle_cuda_status=$?
        if ((candle_cuda_status != 0)); then
            cat "$candle_cuda_log" >&2
            rm -f "$candle_cuda_log"
            ((candle_cuda_status != 99)) ||
                die "valgrind found a definite leak or a memory error in dlpack-candle's CUDA suite on the stand-in (log above)"
            die "dlpack-candle's CUDA suite failed under valgrind with status $candle_cuda_status (log above)"
        fi
        grep -E '^test result' "$candle_cuda_log" | sed 's/^/    under valgrind: /'
    fi
    rm -f "$candle_cuda_log"
else
    echo "    dlpack-candle's CUDA suite did not run on the stand-in: set DLPACK_TEST_CANDLE_CUDA_STAND_IN=1 (it builds candle's CUDA feature with scripts/cuda-toolkit: about 13 minutes the first time)"
fi
