"""Per-call overhead of CUDA exchanges between Rust and PyTorch (not part of the test suite; needs
a GPU, PyTorch and CuPy, and the test module built with --features cuda):

    DLPACK_TESTMOD_DIR=<folder with dlpack_testmod.abi3.so> python \
        dlpack-pyo3/tests/python-gpu/bench_cuda.py

Prints the median of several timeit repeats, in microseconds per exchange, of:
- torch.from_dlpack(rust_tensor) against torch.from_dlpack(cupy_array), in the same run;
- with the module's `candle-cuda` feature: torch.from_dlpack of a candle CUDA tensor lent by
  dlpack-candle, once with the export made beforehand and once with a new export per call;
- the Rust CUDA importer (stream handshake and driver check included) on a torch tensor
  (through PyTorch's C exchange API where it has one), also with a side stream current (an
  event to wait for), and on a CuPy array (through `__dlpack__`);
- beside them, the producers' own share of the `__dlpack__` route: their `__dlpack_device__` and
  `__dlpack__(stream=1)` calls, the capsule dropped unconsumed.
"""

import os
import statistics
import sys
import timeit

sys.path.insert(0, os.environ["DLPACK_TESTMOD_DIR"])

import cupy  # noqa: E402
import dlpack_testmod as m  # noqa: E402
import torch  # noqa: E402

N = 20_000
REPEATS = 7


def per_call(stmt):
    times = timeit.repeat(stmt, number=N, repeat=REPEATS)
    return statistics.median(times) / N * 1e6


def main():
    rust, _ = m.cuda_f32([0.0] * 1024, [32, 32])
    c = cupy.zeros((32, 32), dtype=cupy.float32)
    t = torch.zeros((32, 32), dtype=torch.float32, device="cuda")
    side = torch.cuda.Stream()

    def in_side_stream():
        # PyTorch names `side` as its current stream: an event there, waited on by the Rust
        # importer's stream.
        with torch.cuda.stream(side):
            m.cuda_import_address(t)

    def side_stream_alone():
        with torch.cuda.stream(side):
            pass

    rows = [
        ("torch.from_dlpack(cupy_array)", per_call(lambda: torch.from_dlpack(c))),
        ("torch.from_dlpack(rust_tensor)", per_call(lambda: torch.from_dlpack(rust))),
        ("Rust CUDA importer on a torch tensor", per_call(lambda: m.cuda_import_address(t))),
        ("  the same, under torch.cuda.stream(side)", per_call(in_side_stream)),
        ("    of which entering and leaving torch.cuda.stream(side)", per_call(side_stream_alone)),
        # What the `__dlpack__` route asks of PyTorch alone (the capsule dropped unconsumed):
        # the route the importer takes where the type has no C exchange API.
        ("PyTorch's __dlpack_device__ + __dlpack__(stream=1)", per_call(
            lambda: (t.__dlpack_device__(), t.__dlpack__(stream=1, max_version=(1, 3))))),
        ("Rust CUDA importer on a CuPy array", per_call(lambda: m.cuda_import_address(c))),
        ("  of which CuPy's __dlpack_device__ + __dlpack__(stream=1)", per_call(
            lambda: (c.__dlpack_device__(), c.__dlpack__(stream=1, max_version=(1, 3))))),
    ]
    if hasattr(m, "candle_cuda_lend"):
        candle, _ = m.candle_cuda_f32([0.0] * 1024, [32, 32], "none")
        rows[2:2] = [
            ("torch.from_dlpack(candle_tensor)", per_call(lambda: torch.from_dlpack(candle))),
            ("  with dlpack_candle::into_dlpack per call", per_call(
                lambda: torch.from_dlpack(m.candle_cuda_lend()))),
        ]
    else:
        print("candle rows left out: dlpack_testmod was built without `candle-cuda`")
    width = max(len(name) for name, _ in rows)
    print(f"median of {REPEATS} repeats, us per exchange (torch {torch.__version__}, "
          f"cupy {cupy.__version__}, {torch.cuda.get_device_name()}; torch C exchange API: "
          f"{hasattr(torch.Tensor, '__dlpack_c_exchange_api__')})")
    for name, us in rows:
        print(f"  {name:<{width}}  {us:8.2f}")


if __name__ == "__main__":
    main()
