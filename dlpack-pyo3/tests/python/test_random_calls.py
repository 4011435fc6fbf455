"""Randomized calls of every Python entry point: `__dlpack__`, `__dlpack_device__`, the importers
and the C exchange functions, with random keyword sets and values (wrong types, tuples of odd
length, huge ints, subclasses of int and tuple, NumPy scalars, random capsule names, capsules
that point at nothing DLPack). Whatever the input, each call returns or raises an ordinary
exception: no crash, no other exception class, and every Rust buffer made is freed once.

The seed is fixed (a failure names its case), the number of cases is `DLPACK_RANDOM_CASES`
(20 000 by default; the valgrind step of scripts/test runs fewer, since memcheck is ~50 times
slower).
"""

import ctypes
import gc
import os
import random

import numpy as np
import pytest
from conftest import NUMPY_DTYPES, Returns

CASES = int(os.environ.get("DLPACK_RANDOM_CASES", "20000"))

# What a call may raise (RuntimeError: NumPy's own `__dlpack__` refuses a stream that way, and
# the importer passes a producer's exception on). Anything else (SystemError above all, which a
# C-level contract breach becomes; pyo3's PanicException, a BaseException) fails the test; a
# crash ends the process.
ALLOWED = (
    TypeError,
    ValueError,
    BufferError,
    OverflowError,
    MemoryError,
    NotImplementedError,
    RuntimeError,
)


class Int(int):
    pass


class Tuple(tuple):
    pass


class Weird:
    """Neither an int nor a tuple, but with __index__ and __len__."""

    def __index__(self):
        return 1

    def __len__(self):
        return 2

    def __iter__(self):
        return iter((1, 0))


def atoms(rng):
    """One random value of the kinds a consumer might pass."""
    pick = rng.randrange(24)
    return [
        lambda: None,
        lambda: rng.choice([True, False]),
        lambda: rng.randrange(-3, 20),
        lambda: rng.choice([2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**40, -(10**40)]),
        lambda: Int(rng.randrange(-2, 4)),
        lambda: rng.choice([1.0, float("nan"), -0.0, 1e300]),
        lambda: rng.choice(["", "x", "1", "cpu", "\x00"]),
        lambda: rng.choice([b"", b"1"]),
        lambda: (),
        lambda: (rng.randrange(-2, 16),),
        lambda: (rng.randrange(-2, 16), rng.randrange(-2, 4)),
        lambda: (1, 0, 0),
        lambda: Tuple((rng.randrange(0, 16), rng.randrange(0, 3))),
        lambda: [1, 0],
        lambda: (1, "0"),
        lambda: ("1", "0"),
        lambda: (1.0, 0.0),
        lambda: (2**40, 0),
        lambda: (1, -(2**40)),
        lambda: np.int64(rng.randrange(-1, 4)),
        lambda: np.bool_(rng.random() < 0.5),
        lambda: np.array([1, 2, 3]),
        lambda: Weird(),
        lambda: object(),
    ][pick]()


KEYWORDS = ["stream", "max_version", "dl_device", "copy"]


def random_kwargs(rng):
    kwargs = {}
    for name in KEYWORDS:
        if rng.random() < 0.5:
            kwargs[name] = atoms(rng)
    if rng.random() < 0.05:
        kwargs[rng.choice(["strem", "Copy", "max_versions", "x"])] = atoms(rng)
    return kwargs


def random_args(rng):
    return [atoms(rng) for _ in range(rng.choice([0, 0, 0, 0, 1, 2]))]


DTYPES = list(NUMPY_DTYPES.values()) + [(4, 16, 1), (6, 8, 1), (2, 32, 4), (17, 4, 1), (0, 1, 1)]
DEVICES = [(1, 0)] * 6 + [(2, 0), (3, 0), (13, 0), (14, 0), (7, 0), (10, 0)]


def random_tensor(m, rng):
    """A Rust tensor of a random dtype, shape, device and read-only state."""
    dtype = rng.choice(DTYPES)
    shape = [rng.randrange(0, 4) for _ in range(rng.randrange(0, 3))]
    size = max(1, int(np.prod(shape))) * max(1, dtype[1] * dtype[2] // 8)
    return m.from_bytes(
        bytes(size),
        dtype,
        shape,
        read_only=rng.random() < 0.3,
        device=rng.choice(DEVICES),
        hooks=rng.random() < 0.5,
    )


_ZEROED = ctypes.create_string_buffer(256)  # lives as long as the module: no capsule frees it
_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def zeroed_capsule(name):
    assert not any(_ZEROED.raw), "a consumer wrote into the zeroed struct"
    return _PyCapsule_New(ctypes.addressof(_ZEROED), name, None)


def random_producer(m, rng, t):
    """An object handed to an importer: a real tensor, or one whose `__dlpack__` returns a random
    capsule or value, or whose `__dlpack_device__` says random things."""
    pick = rng.randrange(7)
    if pick == 0:
        return t
    if pick == 1:
        return np.arange(rng.randrange(0, 5), dtype=rng.choice(["f8", "i4", "?", "c8"]))
    if pick == 2:
        # A capsule whose name is not DLPack's (its pointer is not a tensor), or one with
        # DLPack's name over a zeroed struct: version 0.0 and a NULL deleter, or a legacy
        # tensor of NULLs and dtype bits 0. Both are refused without calling anything.
        if rng.random() < 0.5:
            name = rng.choice(["used_dltensor", "used_dltensor_versioned", "", "dltensor ", "DLTensor"])
            if rng.random() < 0.5:
                name = "".join(rng.choice("dltensor_vsiU ") for _ in range(rng.randrange(1, 20)))
            if name in ("dltensor", "dltensor_versioned"):
                name = "not_" + name
            return Returns(m.foreign_capsule(name))
        return Returns(zeroed_capsule(rng.choice([b"dltensor", b"dltensor_versioned"])))
    if pick == 3:
        try:
            return Returns(t.__dlpack__(**random_kwargs(rng)))
        except ALLOWED:
            return Returns(None)
    if pick == 4:
        return Returns(atoms(rng))

    class Device:
        def __dlpack__(self, **kwargs):
            return t.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return atoms(rng)

    if pick == 5:
        return Device()
    return atoms(rng)


def one_case(m, rng):
    t = random_tensor(m, rng)
    what = rng.randrange(9)
    if what == 0:
        capsule = t.__dlpack__(*random_args(rng), **random_kwargs(rng))
        if rng.random() < 0.5:
            m.import_report(Returns(capsule))
    elif what == 1:
        t.__dlpack_device__(*random_args(rng))
    elif what in (2, 3):
        obj = random_producer(m, rng, t)
        importer = rng.choice([m.import_report, m.import_safe_report])
        kwargs = {k: atoms(rng) for k in ["dl_device", "copy", "stream"] if rng.random() < 0.3}
        importer(obj, **kwargs)
    elif what == 4:
        m.import_values(random_producer(m, rng, t))
    elif what == 5:
        m.reexport(random_producer(m, rng, t)).__dlpack__(**random_kwargs(rng))
    elif what == 6:
        m.exchange_roundtrip(random_producer(m, rng, t) if rng.random() < 0.3 else t)
    elif what == 7:
        m.exchange_dltensor(random_producer(m, rng, t) if rng.random() < 0.3 else t)
    else:
        shape = [rng.choice([0, 1, 3, -1, 2**62]) for _ in range(rng.randrange(0, 3))]
        m.exchange_allocate(type(t), shape, rng.choice(DTYPES), rng.choice(DEVICES))


def test_random_calls_raise_only_ordinary_exceptions_and_free_everything(m):
    rng = random.Random(0xD1FA)
    gc.collect()
    made, freed = m.counters()
    assert made == freed
    outcomes = {"returned": 0}
    for case in range(CASES):
        state = rng.getstate()
        try:
            one_case(m, rng)
            outcomes["returned"] += 1
        except ALLOWED as e:
            outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
        except Exception as e:  # noqa: BLE001 - the point of the test
            rng.setstate(state)
            pytest.fail(f"case {case} raised {type(e).__name__}: {e} (replay: rng state saved before it)")
    gc.collect()
    made_after, freed_after = m.counters()
    assert made_after == freed_after, f"{made_after - freed_after} Rust buffers leaked"
    assert made_after - made >= CASES
    # Both outcomes happen often: the inputs reach past the argument checks.
    assert outcomes["returned"] > CASES // 10, outcomes
    assert sum(v for k, v in outcomes.items() if k != "returned") > CASES // 10, outcomes
