"""Shared set-up of dlpack-pyo3's Python tests.

The extension module under test, ``dlpack_testmod``, is built by scripts/steps/pyo3.check.sh
(``PYO3_BUILD_EXTENSION_MODULE=1 cargo build -p dlpack-pyo3-testmod --release``) and copied as
``dlpack_testmod.abi3.so`` into the folder named by ``DLPACK_TESTMOD_DIR``.
"""

import ctypes
import gc
import os
import sys

import numpy as np
import pytest

_DIR = os.environ.get("DLPACK_TESTMOD_DIR")
if not _DIR:
    raise pytest.UsageError(
        "DLPACK_TESTMOD_DIR is not set: build the test module with scripts/steps/pyo3.check.sh "
        "(or see dlpack-pyo3/testmod/src/lib.rs) and point DLPACK_TESTMOD_DIR at the folder "
        "holding dlpack_testmod.abi3.so"
    )
sys.path.insert(0, _DIR)

import jax  # noqa: E402

# float64 and int64 stay 64-bit in JAX, as in NumPy.
jax.config.update("jax_enable_x64", True)

# Every NumPy dtype DLPack can express, with its DLPack (code, bits, lanes).
# Under valgrind (the leak-check step of scripts/steps/pyo3.check.sh, about 50 times slower),
# loops that repeat the same calls thousands of times for what memcheck does not need (RSS
# growth, which its quarantine of freed blocks spoils anyway, or many chances of a race, which
# its serialised threads make rare) run a fiftieth of their rounds: memcheck sees a leak or a
# bad access in one. The run before it, without valgrind, does every round.
UNDER_VALGRIND = "vgpreload" in os.environ.get("LD_PRELOAD", "")


def rounds(n):
    """`n`, or a fiftieth of it (at least 1) under valgrind."""
    return max(1, n // 50) if UNDER_VALGRIND else n


NUMPY_DTYPES = {
    "bool": (6, 8, 1),
    "int8": (0, 8, 1),
    "int16": (0, 16, 1),
    "int32": (0, 32, 1),
    "int64": (0, 64, 1),
    "uint8": (1, 8, 1),
    "uint16": (1, 16, 1),
    "uint32": (1, 32, 1),
    "uint64": (1, 64, 1),
    "float16": (2, 16, 1),
    "float32": (2, 32, 1),
    "float64": (2, 64, 1),
    "complex64": (5, 64, 1),
    "complex128": (5, 128, 1),
}


def base_array(dtype, n=24):
    """n distinct values of `dtype` (bools alternate in a pattern)."""
    dtype = np.dtype(dtype)
    i = np.arange(n)
    if dtype == np.bool_:
        return i % 3 == 1
    if dtype.kind == "c":
        return (i + 1j * (n - i)).astype(dtype)
    if dtype.kind in "iu":
        return (i * 3 + 1).astype(dtype)
    return (i * 0.5 - 3).astype(dtype)


def pytest_collection_finish(session):
    """Moves everything made by the imports (NumPy, JAX, tvm-ffi, the test modules) out of the
    garbage collector's sight: the leak checks' `gc.collect()` then looks only at what the tests
    made, in microseconds instead of the ~60 ms (~0.5 s under valgrind) of walking JAX."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def m():
    import dlpack_testmod

    return dlpack_testmod


# The C struct DLTensor (dlpack.h), for tests that build foreign tensors with ctypes.
class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    ]


class Returns:
    """An object whose __dlpack__ returns a given object (a capsule made beforehand, to hand a consumer any capsule)."""

    def __init__(self, obj):
        self.obj = obj

    def __dlpack__(self, **kwargs):
        return self.obj

    def __dlpack_device__(self):
        return (1, 0)
