"""No leaks: 100 000 exchanges with flat RSS and balanced buffer counts."""

import gc
import os
import sys

import numpy as np
from conftest import NUMPY_DTYPES

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
    for _ in range(1000):  # warm-up: allocator pools, interned objects
        round_of_five()
    gc.collect()
    rss0 = rss_bytes()
    rounds = 20_000  # 5 exchanges each: 100 000 exchanges
    for _ in range(rounds):
        round_of_five()
    gc.collect()
    grown = rss_bytes() - rss0
    made, freed = m.counters()
    assert made - made0 == 2 * (rounds + 1000)
    assert freed - freed0 == made - made0, f"{made - freed} Rust buffers not freed"
    assert sys.getrefcount(numpy_array) == refs0, "NumPy's deleter was not called exactly once"
    # One leaked KiB per round would be 20 MiB.
    assert grown < 4 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB"
