"""No leaks: 100 000 exchanges with flat RSS and balanced buffer counts, and refused calls that
leave nothing behind."""

import gc
import os
import sys

import ctypes

import numpy as np
import pytest
from conftest import NUMPY_DTYPES, UNDER_VALGRIND, rounds
from test_exchange_conformance import (
    DLTENSOR_FROM_PY,
    FROM_PY,
    TO_PY,
    Foreign,
    f32_tensor,
    table,
)

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def test_100000_exchanges_leave_nothing_behind(m):
    payload = np.arange(256, dtype=np.float32).tobytes()  # 1 KiB per Rust tensor
    numpy_array = np.arange(256, dtype=np.float64)
    f32 = NUMPY_DTYPES["float32"]

    def round_of_five():
        # 1. Rust -> NumPy (versioned capsule, consumed by NumPy)
        t = m.from_bytes(payload, f32, [16, 16])
        a = np.from_dlpack(t)
        # 2. a capsule nobody takes (its destructor deletes the tensor)
        t.__dlpack__(max_version=(1, 0))
        # 3. a legacy capsule taken by the Rust importer
        m.import_loop(t.__dlpack__(), 1)
        del t, a
        # 4. the Rust importer through the C exchange API of a Rust tensor
        m.import_loop(m.from_bytes(payload, f32, [256]), 1)
        # 5. NumPy -> Rust
        m.import_loop(numpy_array, 1)

    gc.collect()
    made0, freed0 = m.counters()
    refs0 = sys.getrefcount(numpy_array)
    warm = rounds(1000)
    for _ in range(warm):  # warm-up: allocator pools, interned objects
        round_of_five()
    gc.collect()
    rss0 = rss_bytes()
    measured = rounds(20_000)  # 5 exchanges each: 100 000 exchanges
    for _ in range(measured):
        round_of_five()
    gc.collect()
    grown = rss_bytes() - rss0
    made, freed = m.counters()
    assert made - made0 == 2 * (measured + warm)
    assert freed - freed0 == made - made0, f"{made - freed} Rust buffers not freed"
    assert sys.getrefcount(numpy_array) == refs0, "NumPy's deleter was not called exactly once"
    # One leaked KiB per round would be 20 MiB.
    if not UNDER_VALGRIND:
        assert grown < 4 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB"


# How many refusals of each kind the test makes. A refusal whose error left its references in
# pyo3's pool of deferred references (emptied only when a pyo3 function of the module runs)
# would keep 100 to 400 bytes each: 5 to 20 MiB here, against the 1 MiB allowed.
REFUSALS = 50_000


def refusals(m):
    """One refused call of each kind that reaches a C entry point of the module from outside
    pyo3 (Python calling the fast __dlpack__, C calling the exchange API), by name."""
    t = f32_tensor(m)
    read_only = f32_tensor(m, read_only=True)
    device = f32_tensor(m, device=(2, 0))  # the fake device, without hooks
    api = table(m)
    from_py = FROM_PY(api.managed_tensor_from_py_object_no_sync)
    to_py = TO_PY(api.managed_tensor_to_py_object_no_sync)
    dltensor_from_py = DLTENSOR_FROM_PY(api.dltensor_from_py_object_no_sync)
    # With the GIL held, as current_work_stream is called when it has an exception to set.
    stream = ctypes.PYFUNCTYPE(
        ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)
    )(api.current_work_stream)
    future = Foreign(major=2)  # refused, and left to us untouched
    out = ctypes.c_void_p()
    dl = ctypes.create_string_buffer(64)
    kinds = {
        "__dlpack__(stream=1) of a CPU tensor": lambda: t.__dlpack__(stream=1),
        "__dlpack__(dl_device=(2, 0))": lambda: t.__dlpack__(dl_device=(2, 0)),
        "a read-only tensor as a legacy struct": lambda: read_only.__dlpack__(),
        "a positional argument": lambda: t.__dlpack__(1),
        "__dlpack__(stream='x')": lambda: t.__dlpack__(stream="x"),
        "from_py_object of another type": lambda: from_py(object(), ctypes.byref(out)),
        "from_py_object of a device tensor without hooks": lambda: from_py(
            device, ctypes.byref(out)
        ),
        "to_py_object of a DLPack 2 tensor": lambda: to_py(future.address, ctypes.byref(out)),
        "dltensor_from_py_object of a read-only tensor": lambda: dltensor_from_py(
            read_only, ctypes.addressof(dl)
        ),
        "current_work_stream with a NULL out pointer": lambda: stream(1, 0, None),
    }
    try:
        import tvm_ffi
    except ImportError:
        pass
    else:
        echo = tvm_ffi.get_global_func("testing.echo")
        kinds["tvm-ffi's echo of a device tensor without hooks"] = lambda: echo(device)
    return kinds


@pytest.mark.skipif(UNDER_VALGRIND, reason="RSS under valgrind counts memcheck's freed blocks")
def test_refused_calls_leave_nothing_behind(m):
    kinds = refusals(m)
    grown = {}
    for name, call in kinds.items():
        # No call into the module between the refusals: any pyo3 function would release what
        # pyo3 deferred, and hide it.
        for _ in range(1000):  # warm-up: allocator pools, interned objects
            with pytest.raises(Exception):
                call()
        gc.collect()
        rss0 = rss_bytes()
        for _ in range(REFUSALS):
            try:
                call()
            except Exception:
                pass
            else:
                raise AssertionError(f"{name}: the call was not refused")
        gc.collect()
        grown[name] = rss_bytes() - rss0
    too_much = {name: f"{g / REFUSALS:.0f} B a refusal" for name, g in grown.items() if g > 2**20}
    assert not too_much, f"RSS grew by more than 1 MiB over {REFUSALS} refusals: {too_much}"
