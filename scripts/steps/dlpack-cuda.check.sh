# dlpack-cuda: `cargo test` above ran its CUDA suite through the libcuda stand-in
# (tests/test_driver.rs, with and without memory pools). Here the same binary runs under
# valgrind's memcheck, the child process without pools included: the crate's driver calls,
# cudarc and the stand-in's copies with a definite leak or a memory error fail the step. About
# 20 s. Skipped with --quick.

if ((!QUICK)); then
    step "valgrind over dlpack-cuda's CUDA suite on the libcuda stand-in"
    cuda_json=$(mktemp)
    quietly "build the suite and the stand-in (cargo test -p dlpack-cuda --test test_driver --no-run)" \
        sh -c 'cargo build -p dlpack-cuda-test-driver &&
            cargo test -p dlpack-cuda --all-features --test test_driver --no-run --message-format=json >"$1"' \
        sh "$cuda_json"
    cuda_bin=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "test_driver" and m.get("executable"):
        print(m["executable"])
' "$cuda_json")
    rm -f "$cuda_json"
    [[ -x "$cuda_bin" ]] || die "cargo built no test_driver binary for dlpack-cuda"
    cuda_stand_in="${CARGO_TARGET_DIR:-$ROOT/target}/debug/libdlpack_cuda_test_driver.so"
    [[ -f "$cuda_stand_in" ]] || die "cargo build -p dlpack-cuda-test-driver produced no $cuda_stand_in"
    cuda_log=$(mktemp)
    if ! (cd "$ROOT/dlpack-cuda" && DLPACK_CUDA_TEST_DRIVER="$cuda_stand_in" valgrind --quiet \
        --trace-children=yes --leak-check=full --errors-for-leak-kinds=definite \
        --error-exitcode=1 "$cuda_bin") >"$cuda_log" 2>&1; then
        cat "$cuda_log" >&2
        rm -f "$cuda_log"
        die "valgrind found a definite leak or a memory error in dlpack-cuda's suite (log above)"
    fi
    grep -E '^test result' "$cuda_log" | sed 's/^/    /'
    rm -f "$cuda_log"
fi
