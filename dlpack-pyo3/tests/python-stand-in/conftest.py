"""Set-up of dlpack-pyo3's CUDA tests through the libcuda stand-in.

These tests run the Python side of the `cuda` feature (Rust CUDA tensors out to Python, Python
CUDA tensors into Rust, the stream argument, the driver's check of device claims) on a machine
without a GPU. The stand-in is the workspace's `dlpack-cuda/test-driver`, a library whose soname
is ``libcuda.so``: opened here by its path before any CUDA call, it is what the extension's
cudarc finds when it opens ``libcuda.so``. It keeps device memory where the host cannot read
it and runs streams asynchronously (see its crate docs).

``DLPACK_CUDA_TEST_DRIVER`` names the library and ``DLPACK_TESTMOD_DIR`` the folder holding
``dlpack_testmod.abi3.so`` built with ``--features cuda``; scripts/steps/pyo3.check.sh sets
both. Run this folder in a process of its own: with the stand-in loaded, a real libcuda is
never used.

After every test the stand-in's live objects (allocations, streams, events) and its count of
refused driver calls must be what they were before it.
"""

import ctypes
import gc
import os
import sys

import pytest

_DRIVER = os.environ.get("DLPACK_CUDA_TEST_DRIVER")
_DIR = os.environ.get("DLPACK_TESTMOD_DIR")
if not _DRIVER or not _DIR:
    raise pytest.UsageError(
        "set DLPACK_CUDA_TEST_DRIVER to the libcuda stand-in "
        "(cargo build -p dlpack-cuda-test-driver) and DLPACK_TESTMOD_DIR to the folder holding "
        "dlpack_testmod.abi3.so built with --features cuda (scripts/steps/pyo3.check.sh)"
    )
sys.path.insert(0, _DIR)
# Before the extension makes any CUDA call.
STAND_IN = ctypes.CDLL(_DRIVER)


class Live(ctypes.Structure):
    """`LiveObjects` of dlpack-cuda/test-driver/src/support.rs."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "device_allocations",
            "pinned_allocations",
            "managed_allocations",
            "streams",
            "events",
            "context_retains",
            "refused",
        )
    ]

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


class Calls(ctypes.Structure):
    """`CallCounts` of dlpack-cuda/test-driver/src/support.rs."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "event_records",
            "stream_waits",
            "context_synchronizations",
            "context_less_pointer_queries",
            "host_range_refusals",
        )
    ]


def live():
    """The stand-in's live objects once every stream has run its work."""
    gc.collect()
    STAND_IN.dlpack_cuda_test_driver_settle()
    out = Live()
    size = ctypes.c_size_t(ctypes.sizeof(out))
    status = STAND_IN.dlpack_cuda_test_driver_live(ctypes.byref(out), size)
    assert status == 0, "the stand-in's LiveObjects differs from conftest.Live"
    return out.as_dict()


def calls():
    """The stand-in's counts of event records, stream waits and context synchronisations."""
    out = Calls()
    size = ctypes.c_size_t(ctypes.sizeof(out))
    status = STAND_IN.dlpack_cuda_test_driver_calls(ctypes.byref(out), size)
    assert status == 0, "the stand-in's CallCounts differs from conftest.Calls"
    return {name: getattr(out, name) for name, _ in out._fields_}


@pytest.fixture(scope="session")
def m():
    import dlpack_testmod

    if not hasattr(dlpack_testmod, "cuda_import_report"):
        pytest.fail("dlpack_testmod was built without its `cuda` feature")
    error = dlpack_testmod.cuda_driver_error()
    assert error is None, f"the stand-in at {_DRIVER} did not load: {error}"
    # Device 0's primary context is retained once for the process on first use: before the
    # first test's count of live objects.
    dlpack_testmod.cuda_f32([0.0], [1])
    return dlpack_testmod


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "refusals(n): the test makes the stand-in refuse exactly n calls"
    )


@pytest.fixture(autouse=True)
def nothing_left_behind(request, m):
    marker = request.node.get_closest_marker("refusals")
    expected = marker.args[0] if marker else 0
    before = live()
    yield
    after = live()
    assert after["refused"] - before["refused"] == expected, (
        f"expected {expected} refused calls (refusals are printed on stderr)"
    )
    after["refused"] = before["refused"]
    assert after == before, "the stand-in's live objects changed"
