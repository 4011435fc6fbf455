"""Per-call overhead of the DLPack exchanges (not part of the test suite).

    DLPACK_TESTMOD_DIR=<folder with dlpack_testmod.abi3.so> .venv/bin/python \
        dlpack-pyo3/tests/python/bench_exchange.py

Prints the median of several timeit repeats, in nanoseconds per exchange:
- np.from_dlpack(rust_tensor) against np.from_dlpack(numpy_array), in the same run;
- the Rust importer on a NumPy array, one call from Python each, and in a Rust loop;
- the Rust importer on a Rust tensor through the C exchange API against through __dlpack__.
"""

import os
import statistics
import sys
import timeit

sys.path.insert(0, os.environ["DLPACK_TESTMOD_DIR"])

import dlpack_testmod as m  # noqa: E402
import numpy as np  # noqa: E402

N = 200_000
REPEATS = 7


def per_call(stmt, number=N, loop_inside=1):
    times = timeit.repeat(stmt, number=number, repeat=REPEATS)
    return statistics.median(times) / (number * loop_inside) * 1e9


def main():
    a = np.arange(1024, dtype=np.float32).reshape(32, 32)
    t = m.from_bytes(a.tobytes(), (2, 32, 1), [32, 32])
    from_dlpack = np.from_dlpack
    rows = [
        ("np.from_dlpack(numpy_array)", per_call(lambda: from_dlpack(a))),
        ("np.from_dlpack(rust_tensor)", per_call(lambda: from_dlpack(t))),
        ("numpy_array.__dlpack__(max_version=(1, 0))", per_call(lambda: a.__dlpack__(max_version=(1, 0)))),
        ("rust_tensor.__dlpack__(max_version=(1, 0))", per_call(lambda: t.__dlpack__(max_version=(1, 0)))),
        ("Rust importer on a NumPy array, from Python", per_call(lambda: m.import_loop(a, 1))),
        ("Rust importer on a NumPy array, Rust loop", per_call(lambda: m.import_loop(a, 1000), N // 1000, 1000)),
        ("Rust importer, Rust tensor, C exchange API", per_call(lambda: m.import_loop(t, 1000, "auto"), N // 1000, 1000)),
        ("Rust importer, Rust tensor, __dlpack__", per_call(lambda: m.import_loop(t, 1000, "dlpack"), N // 1000, 1000)),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"median of {REPEATS} repeats, ns per exchange (NumPy {np.__version__}, Python {sys.version.split()[0]})")
    for name, ns in rows:
        print(f"  {name:<{width}}  {ns:8.0f}")


if __name__ == "__main__":
    main()
