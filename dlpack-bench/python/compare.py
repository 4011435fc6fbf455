"""NumPy's own exchange against this workspace's, side by side, with median and fastest.

    DLPACK_TESTMOD_DIR=target/dlpack-pyo3-python .venv/bin/python dlpack-bench/python/compare.py

Needs the test extension module that `scripts/steps/pyo3.check.sh` builds. Reuses the setup of
dlpack-pyo3/tests/python/bench_exchange.py (run that too for its full table) and adds, from the
same run: the fastest repeat next to the median (the machine is shared; the two
np.from_dlpack rows take their repeats in turn), the Rust importer on a
NumPy array and on a Rust tensor by its automatic route (the C exchange API where the type offers
one; NumPy 2.4's ndarray does not) and by an explicit `__dlpack__` call, and each row's ratio to
np.from_dlpack(numpy_array).
"""

import importlib.util
import pathlib
import statistics
import sys
import timeit

HERE = pathlib.Path(__file__).resolve()
spec = importlib.util.spec_from_file_location(
    "bench_exchange", HERE.parents[2] / "dlpack-pyo3" / "tests" / "python" / "bench_exchange.py"
)
be = importlib.util.module_from_spec(spec)
spec.loader.exec_module(be)
m, np = be.m, be.np

N = 200_000
REPEATS = 9


def per_call(stmt, number=N, loop_inside=1):
    """(median, fastest) ns per exchange over REPEATS timeit repeats."""
    times = [t / (number * loop_inside) * 1e9 for t in timeit.repeat(stmt, number=number, repeat=REPEATS)]
    return statistics.median(times), min(times)


def interleaved(stmts, number=N):
    """per_call for several statements, their repeats taken in turn, so that a slow spell of the
    machine falls on all of them alike."""
    times = [[] for _ in stmts]
    for _ in range(REPEATS):
        for stmt, samples in zip(stmts, times):
            samples.append(timeit.timeit(stmt, number=number) / number * 1e9)
    return [(statistics.median(t), min(t)) for t in times]


def main():
    a = np.arange(1024, dtype=np.float32).reshape(32, 32)
    t = m.from_bytes(a.tobytes(), (2, 32, 1), [32, 32])
    from_dlpack = np.from_dlpack
    loop = N // 1000
    peer, ours = interleaved([lambda: from_dlpack(a), lambda: from_dlpack(t)])
    rows = [
        ("np.from_dlpack(numpy_array)", peer),
        ("np.from_dlpack(rust_tensor)", ours),
        ("Rust import of numpy_array, auto route", per_call(lambda: m.import_loop(a, 1000, "auto"), loop, 1000)),
        ("Rust import of numpy_array, __dlpack__", per_call(lambda: m.import_loop(a, 1000, "dlpack"), loop, 1000)),
        ("Rust import of rust_tensor, auto route (C API)", per_call(lambda: m.import_loop(t, 1000, "auto"), loop, 1000)),
        ("Rust import of rust_tensor, __dlpack__", per_call(lambda: m.import_loop(t, 1000, "dlpack"), loop, 1000)),
    ]
    print(
        f"NumPy {np.__version__}, Python {sys.version.split()[0]}; C exchange API: "
        f"ndarray {m.exchange_version(np.ndarray)}, rust tensor {m.exchange_version(type(t))}"
    )
    print(f"ns per exchange over {REPEATS} repeats; ratio = median / median of np.from_dlpack(numpy_array)")
    width = max(len(name) for name, _ in rows)
    for name, (med, fast) in rows:
        print(f"  {name:<{width}}  median {med:7.0f}  fastest {fast:7.0f}  ratio {med / peer[0]:5.2f}")


if __name__ == "__main__":
    main()
