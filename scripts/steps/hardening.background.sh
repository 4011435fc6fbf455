# Hardening: a leak check, in the background job beside Miri. Every integration test binary of dlpack-core (bad inputs,
# export, the dlpack.h layout, the import property test) runs under valgrind's memcheck; a
# definite leak or a memory error fails the step. The property test runs fewer cases here
# (PROPTEST_CASES), since memcheck is about 50 times slower; `cargo test` above ran them all.
# Skipped with --quick. The fuzz target (fuzz/, docs/bad-inputs.md) is not run here.

if ((!QUICK)); then
    step "valgrind leak check over dlpack-core's integration tests"
    hardening_json=$(mktemp)
    quietly "build dlpack-core's integration tests (cargo test -p dlpack-core --all-features --no-run)" \
        sh -c 'cargo test -p dlpack-core --all-features --tests --no-run --message-format=json >"$1"' \
        sh "$hardening_json"
    # The test executables of the integration-test targets (kind "test"), one per line.
    mapfile -t hardening_bins < <(python3 - "$hardening_json" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["kind"] == ["test"] and m.get("executable"):
        print(m["executable"])
PYEOF
    )
    rm -f "$hardening_json"
    ((${#hardening_bins[@]} >= 4)) ||
        die "expected at least 4 integration test binaries of dlpack-core, found ${#hardening_bins[@]}: ${hardening_bins[*]}"
    for hardening_bin in "${hardening_bins[@]}"; do
        hardening_name=$(basename "$hardening_bin")
        hardening_log=$(mktemp)
        # The binaries run from dlpack-core/, as cargo test runs them.
        if ! (cd "$ROOT/dlpack-core" && PROPTEST_CASES=1000 DLPACK_REQUIRE_HEADER=1 \
            DLPACK_HEADER="$HEADER" valgrind --quiet --leak-check=full \
            --errors-for-leak-kinds=definite --error-exitcode=1 \
            "$hardening_bin" --test-threads=2) >"$hardening_log" 2>&1; then
            cat "$hardening_log" >&2
            rm -f "$hardening_log"
            die "valgrind found a definite leak or a memory error in $hardening_name (log above)"
        fi
        echo "    $hardening_name: $(grep -E '^test result' "$hardening_log" | tail -1)"
        rm -f "$hardening_log"
    done
fi
