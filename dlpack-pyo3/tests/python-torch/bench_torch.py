"""Per-import cost of the Rust importer on a PyTorch CPU tensor (not part of the test suite).

    DLPACK_TESTMOD_DIR=<folder with dlpack_testmod.abi3.so> .venv-torch/bin/python \
        dlpack-pyo3/tests/python-torch/bench_torch.py

Prints the median of several runs of 20 000 imports in a Rust loop, in nanoseconds per import:
through PyTorch's C exchange API (the importer's own choice), through `__dlpack__` (the capsule
of `__dlpack__(max_version=(1, 3))`, imported), and through the table with a TorchFunctionMode
active (which sends the import the `__dlpack__` way, as PyTorch's `__dlpack__` consults it).
"""

import os
import statistics
import sys
import timeit

sys.path.insert(0, os.environ["DLPACK_TESTMOD_DIR"])

import dlpack_testmod as m  # noqa: E402
import torch  # noqa: E402

IMPORTS = 20_000
RUNS = 9


def per_import(stmt):
    times = timeit.repeat(stmt, number=1, repeat=RUNS)
    return statistics.median(times) / IMPORTS * 1e9


class Passing(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def main():
    t = torch.arange(1024, dtype=torch.float32).reshape(32, 32)
    m.import_loop(t, 1000)
    rows = [
        ("auto (the C exchange API)", per_import(lambda: m.import_loop(t, IMPORTS, "auto"))),
        ("__dlpack__", per_import(lambda: m.import_loop(t, IMPORTS, "dlpack"))),
    ]
    with Passing():
        in_mode = per_import(lambda: m.import_loop(t, IMPORTS, "auto"))
    rows.append(("auto, a TorchFunctionMode active", in_mode))
    width = max(len(name) for name, _ in rows)
    python = sys.version.split()[0]
    print(
        f"median of {RUNS} runs of {IMPORTS} imports, ns per import "
        f"(torch {torch.__version__}, Python {python})"
    )
    for name, ns in rows:
        print(f"  {name:<{width}}  {ns:8.0f}")


if __name__ == "__main__":
    main()
