"""Set-up of dlpack-pyo3's oneAPI tests through the Level Zero test driver.

These tests run the Python side of the `oneapi` feature (Rust Level Zero USM tensors out to
Python, oneAPI tensors into Rust, the queue handshake named by `stream`, Level Zero's check of
device claims) on a machine without an Intel GPU: the extension opens the system's Level Zero
loader (Debian's ``libze1``), which loads the workspace's test-support driver
(``dlpack-oneapi/test-driver``) because ``ZE_ENABLE_ALT_DRIVERS`` names it. The driver keeps
"device" memory in host memory, runs command lists on worker threads, and counts its live
objects; it is opened here by the same path to read those counts and to hold a device's
command lists.

``ZE_ENABLE_ALT_DRIVERS`` (the driver library), ``DLPACK_ONEAPI_TEST_DRIVER_DEVICES`` (2) and
``DLPACK_TESTMOD_DIR`` (the folder holding ``dlpack_testmod.abi3.so`` built with
``--features oneapi``) are set by scripts/steps/pyo3.check.sh.

After every test the driver's live objects (contexts, allocations, command lists, event pools,
events) must be what they were before it.
"""

import ctypes
import gc
import os
import sys

import pytest

_DRIVER = os.environ.get("ZE_ENABLE_ALT_DRIVERS")
_DIR = os.environ.get("DLPACK_TESTMOD_DIR")
if not _DRIVER or not _DIR or os.environ.get("DLPACK_ONEAPI_TEST_DRIVER_DEVICES") != "2":
    raise pytest.UsageError(
        "set ZE_ENABLE_ALT_DRIVERS to the Level Zero test driver "
        "(cargo build -p dlpack-oneapi-test-driver), DLPACK_ONEAPI_TEST_DRIVER_DEVICES=2 and "
        "DLPACK_TESTMOD_DIR to the folder holding dlpack_testmod.abi3.so built with "
        "--features oneapi (scripts/steps/pyo3.check.sh)"
    )
sys.path.insert(0, _DIR)
DRIVER = ctypes.CDLL(_DRIVER)
DRIVER.dlpack_oneapi_test_driver_host_waiters.restype = ctypes.c_uint64


class Live(ctypes.Structure):
    """`LiveObjects` of dlpack-oneapi/test-driver/src/lib.rs."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "contexts",
            "allocations",
            "command_lists",
            "event_pools",
            "events",
            "refused_releases",
        )
    ]


def live():
    """The driver's live objects once every command list has run what it can."""
    gc.collect()
    DRIVER.dlpack_oneapi_test_driver_settle()
    out = Live()
    DRIVER.dlpack_oneapi_test_driver_live_objects(ctypes.byref(out))
    return {name: getattr(out, name) for name, _ in out._fields_}


class Held:
    """Stops root device `root`'s command lists until the block ends (also when it fails)."""

    def __init__(self, root):
        self.root = root

    def __enter__(self):
        assert DRIVER.dlpack_oneapi_test_driver_hold(self.root, 1) == 0
        return self

    def __exit__(self, *exc):
        assert DRIVER.dlpack_oneapi_test_driver_hold(self.root, 0) == 0


def host_waiters():
    """Host threads blocked on a Level Zero event."""
    return DRIVER.dlpack_oneapi_test_driver_host_waiters()


@pytest.fixture(scope="session")
def m():
    import dlpack_testmod

    if not hasattr(dlpack_testmod, "oneapi_import_report"):
        pytest.fail("dlpack_testmod was built without its `oneapi` feature")
    error = dlpack_testmod.oneapi_driver_error()
    assert error is None, f"Level Zero with the test driver at {_DRIVER} did not load: {error}"
    # The shared context and each root device's default queue (with its event pool) are made
    # once on first use: before the first test's count of live objects.
    for device in (0, 1):
        t, _ = dlpack_testmod.oneapi_f32([0.0], [1], device=device)
        dlpack_testmod.oneapi_import_report(t)
    return dlpack_testmod


@pytest.fixture(autouse=True)
def nothing_left_behind(m):
    before = live()
    yield
    assert live() == before, "the driver's live objects changed"
