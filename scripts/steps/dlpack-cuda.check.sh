# dlpack-cuda: `cargo test` above ran its CUDA suite through the libcuda stand-in
# (tests/test_driver.rs, with and without memory pools). Here the same binary runs under
# valgrind's memcheck, the child process without pools included: the crate's driver calls,
# cudarc and the stand-in's copies with a definite leak or a memory error fail the step. About
# 20 s. Skipped with --quick.

if ((!QUICK)); then
    step "valgrind over dlpack-cuda's CUDA suite on the libcuda stand-in"
    cuda_json=$(mktemp)
    quietly "build the suite and the stand-in (cargo test -p dlpack-cuda --test test_driver --no-run)" \
        sh -c 'cargo build -p dlpack-cuda-test-driver --message-format=json >"$1" &&
            cargo test -p dlpack-cuda --features "$2" --test test_driver \
                --no-run --message-format=json >>"$1"' \
        sh "$cuda_json" "$("$ROOT"/scripts/features dlpack-cuda)"
    # The suite's executable and the stand-in's library, from cargo's own report.
    mapfile -t cuda_paths < <(artifacts_from_json "$cuda_json" test_driver dlpack_cuda_test_driver)
    rm -f "$cuda_json"
    cuda_bin=${cuda_paths[0]:-}
    cuda_stand_in=${cuda_paths[1]:-}
    [[ -x "$cuda_bin" ]] || die "cargo built no test_driver binary for dlpack-cuda"
    [[ -f "$cuda_stand_in" ]] || die "cargo built no libdlpack_cuda_test_driver.so"
    cuda_log=$(mktemp)
    # valgrind's own findings exit with 99; a failing test exits with the suite's status.
    cuda_status=0
    (cd "$ROOT/dlpack-cuda" && DLPACK_CUDA_TEST_DRIVER="$cuda_stand_in" valgrind --quiet \
        --trace-children=yes --leak-check=full --errors-for-leak-kinds=definite \
        --error-exitcode=99 "$cuda_bin") >"$cuda_log" 2>&1 || cuda_status=$?
    if ((cuda_status != 0)); then
        cat "$cuda_log" >&2
        rm -f "$cuda_log"
        if ((cuda_status == 99)); then
            die "valgrind found a definite leak or a memory error in dlpack-cuda's suite (log above)"
        fi
        die "dlpack-cuda's suite failed under valgrind with status $cuda_status (log above)"
    fi
    if ! grep -qE '^test result' "$cuda_log"; then
        cat "$cuda_log" >&2
        rm -f "$cuda_log"
        die "dlpack-cuda's suite printed no 'test result' line under valgrind (log above)"
    fi
    grep -E '^test result' "$cuda_log" | sed 's/^/    /'
    rm -f "$cuda_log"
fi
