"""One Python-level exchange repeated N times, for counting instructions under callgrind.

    cargo build ... (the test module, as scripts/steps/pyo3.check.sh builds it)
    export PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1
    valgrind --tool=callgrind .venv/bin/python dlpack-bench/python/count.py OP 100000
    valgrind --tool=callgrind .venv/bin/python dlpack-bench/python/count.py OP 200000

The difference of the two totals divided by 100 000 is one exchange, without the interpreter's
start-up (PYTHONHASHSEED=0 keeps that start-up the same in both runs; OPENBLAS_NUM_THREADS=1
keeps NumPy's BLAS threads, which otherwise spin for a varying while, out of the count). OP is
one of from_dlpack_numpy, from_dlpack_rust (np.from_dlpack of a NumPy array or of a Rust tensor,
the same 32 x 32 float32 data) and dunder_numpy, dunder_rust (`x.__dlpack__(max_version=(1,
0))`, the capsule dropped at once). The test module is looked up in DLPACK_TESTMOD_DIR (default
target/dlpack-pyo3-python).
"""

import os
import sys

sys.path.insert(0, os.environ.get("DLPACK_TESTMOD_DIR", "target/dlpack-pyo3-python"))

import numpy as np  # noqa: E402

import dlpack_testmod as m  # noqa: E402


def main():
    ops = ("from_dlpack_numpy", "from_dlpack_rust", "dunder_numpy", "dunder_rust")
    if len(sys.argv) != 3 or sys.argv[1] not in ops:
        sys.exit(f"usage: count.py ({'|'.join(ops)}) N")
    op, n = sys.argv[1], int(sys.argv[2])
    a = np.arange(1024, dtype=np.float32).reshape(32, 32)
    x = a if op.endswith("numpy") else m.from_bytes(a.tobytes(), (2, 32, 1), [32, 32])
    if op.startswith("from_dlpack"):
        from_dlpack = np.from_dlpack
        for _ in range(n):
            from_dlpack(x)
    else:
        for _ in range(n):
            x.__dlpack__(max_version=(1, 0))


if __name__ == "__main__":
    main()
