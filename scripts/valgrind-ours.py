"""Reads a valgrind memcheck log and fails on any error or definite leak that involves this
workspace's code.

    python3 scripts/valgrind-ours.py LOG PATTERN

A record (one error, or one leak record of `--leak-check=full`) involves our code when one of
its stack frames names PATTERN, in any case: "dlpack" catches this workspace's module and the
DLPack code of NumPy, JAX and tvm-ffi, where a tensor that our importer failed to delete was
allocated. The interpreter and the libraries it loads (CPython, NumPy, JAX's jaxlib) have
leaks and uninitialised reads of their own at exit that are not ours to fix: they are counted
and reported, not failed on.
Exit status: 0 when no record involves our code, 1 otherwise (the records are printed).
"""

import re
import sys


def records(lines):
    """Yields the log's records: runs of lines between valgrind's blank `==PID== ` lines."""
    current = []
    for line in lines:
        body = re.sub(r"^==\d+== ?", "", line.rstrip("\n"))
        if body.strip():
            current.append(body)
        elif current:
            yield current
            current = []
    if current:
        yield current


def main():
    log, pattern = sys.argv[1], sys.argv[2].lower()
    with open(log, encoding="utf-8", errors="replace") as f:
        all_records = list(records(f))
    kinds = re.compile(
        r"^(Invalid (read|write|free)|Conditional jump|Use of uninitialised|Syscall param|"
        r"Mismatched free|Source and destination overlap|Argument .* of function)"
    )
    ours, theirs_errors, theirs_leaks = [], 0, 0
    for record in all_records:
        head = record[0]
        is_leak = "definitely lost in loss record" in head
        is_error = bool(kinds.match(head))
        if not (is_leak or is_error):
            continue
        if any(pattern in line.lower() for line in record[1:]):
            ours.append(record)
        elif is_leak:
            theirs_leaks += 1
        else:
            theirs_errors += 1
    summary = [r[0] for r in all_records if r[0].startswith(("definitely lost:", "ERROR SUMMARY"))]
    print(f"    valgrind: {len(ours)} record(s) in our code; outside it (the interpreter and "
          f"its libraries): {theirs_leaks} definite leak record(s), {theirs_errors} error "
          f"record(s)")
    if not summary and not all_records:
        print("    valgrind log is empty: did the run start?", file=sys.stderr)
        return 1
    for record in ours:
        print("\n".join(record), file=sys.stderr)
        print(file=sys.stderr)
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main())
