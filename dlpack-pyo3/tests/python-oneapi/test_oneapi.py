"""Rust Level Zero USM tensors and the Python protocol, through the real Level Zero loader and
the workspace's test driver: pointer identity, values, the memory kinds, the stream argument as
a queue handshake, what dpctl-style producers are passed, NumPy's copy to the host, and device
claims that Level Zero refutes."""

import threading
import time

import numpy as np
import pytest

from conftest import Held, host_waiters, live

ONEAPI = 14
VALUES = [float(i) for i in range(12)]


def test_the_extension_allocates_through_the_test_driver(m):
    before = live()["allocations"]
    t, _ = m.oneapi_f32(VALUES, [12])
    assert live()["allocations"] == before + 1
    del t
    assert live()["allocations"] == before


@pytest.mark.parametrize(
    "kind, reported, in_place",
    [("device", "Device", False), ("shared", "Managed", True), ("host", "HostPinned", True)],
)
def test_a_rust_usm_tensor_crosses_python_and_back_without_a_copy(m, kind, reported, in_place):
    t, address = m.oneapi_f32(VALUES, [3, 4], kind=kind, device=1)
    assert t.__dlpack_device__() == (ONEAPI, 1)
    r = m.oneapi_import_report(t)
    assert r["data_ptr"] == address
    assert r["device"] == (ONEAPI, 1)
    assert r["kind"] == reported
    assert (r["shape"], r["strides"], r["dtype"]) == ([3, 4], [4, 1], "float32")
    assert r["in_place"] is in_place, "typed views exist exactly for host-accessible USM"
    assert r["values"] == VALUES


def test_a_bare_capsule_imports_too(m):
    t, address = m.oneapi_f32(VALUES, [12])
    r = m.oneapi_import_report(t.__dlpack__(max_version=(1, 0)))
    assert (r["data_ptr"], r["values"]) == (address, VALUES)
    legacy = m.oneapi_import_report(t.__dlpack__())
    assert (legacy["data_ptr"], legacy["values"]) == (address, VALUES)


class DpctlLike:
    """A producer that takes `stream` as dpctl's and dpnp's `usm_ndarray.__dlpack__` do: None,
    or a `dpctl.SyclQueue`; anything else is a TypeError. It records what it was passed."""

    def __init__(self, inner):
        self.inner = inner
        self.streams = []

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        if stream is not None:
            raise TypeError(
                f"stream argument type was expected to be dpctl.SyclQueue, got {type(stream)} "
                "instead"
            )
        return self.inner.__dlpack__(max_version=max_version, dl_device=dl_device, copy=copy)


def test_a_dpctl_style_producer_is_passed_no_stream(m):
    t, address = m.oneapi_f32(VALUES, [12])
    producer = DpctlLike(t)
    r = m.oneapi_import_report(producer)
    assert (r["data_ptr"], r["values"]) == (address, VALUES)
    assert producer.streams == [None]


def test_naming_a_queue_passes_its_stream_number(m):
    t, _ = m.oneapi_f32(VALUES, [12])
    q = m.OneApiQueue(1)
    producer = DpctlLike(t)
    # What dpctl does with an int: its TypeError reaches the caller, who asked for a queue the
    # producer cannot serve (and the retry without keywords gets the same answer).
    with pytest.raises(TypeError, match="dpctl.SyclQueue"):
        m.oneapi_import_report(producer, q)
    assert producer.streams == [q.stream, q.stream]
    # This workspace's producer takes it.
    assert m.oneapi_import_report(t, q)["values"] == VALUES
    q.synchronize()


def test_stream_values_of_a_oneapi_tensor(m):
    t, _ = m.oneapi_f32(VALUES, [12])
    q = m.OneApiQueue(0)
    for stream in (None, q.stream):
        assert type(t.__dlpack__(stream=stream)).__name__ == "PyCapsule"
    for stream in (0, -1, -2):
        with pytest.raises(ValueError, match=f"stream={stream} is not valid for oneapi:0"):
            t.__dlpack__(stream=stream)
    # A positive number is a queue handle on oneAPI (CUDA's 1 and 2 included): only the
    # context's live queues are taken, and nothing else reaches Level Zero.
    for stream in (1, 2, q.stream + 4096):
        with pytest.raises(ValueError, match="not the command list of a live queue"):
            t.__dlpack__(stream=stream)
    # An object that is neither an int nor a SYCL queue (test_sycl_queue.py) is a TypeError.
    with pytest.raises(TypeError):
        t.__dlpack__(stream=object())
    q.synchronize()


def test_a_consumer_queue_waits_on_the_device_not_the_host(m):
    """`stream=q`: the producer device's default queue signals an event that q waits for. With
    the producer device held, the export still returns at once and no host thread waits; q is
    blocked until the hold ends."""
    t, _ = m.oneapi_f32(VALUES, [12], device=0)
    q = m.OneApiQueue(1)
    with Held(0):
        done = threading.Event()

        def export():
            t.__dlpack__(stream=q.stream)
            done.set()

        exporter = threading.Thread(target=export)
        exporter.start()
        exporter.join(timeout=30)
        assert done.is_set(), "the export waited for the held producer device"
        assert host_waiters() == 0

        consumer = threading.Thread(target=q.synchronize)
        consumer.start()
        deadline = time.monotonic() + 30
        while host_waiters() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert consumer.is_alive(), "the consumer queue did not wait for the producer"
    consumer.join(timeout=30)
    assert not consumer.is_alive(), "the consumer queue never ran after the hold ended"


def test_no_stream_means_no_synchronisation(m):
    t, _ = m.oneapi_f32(VALUES, [12], device=0)
    events = live()["events"]
    with Held(0):
        capsule = t.__dlpack__()
        assert host_waiters() == 0
    assert live()["events"] == events
    del capsule


def test_numpy_copies_device_usm_to_the_host_when_asked_and_refuses_otherwise(m):
    t, _ = m.oneapi_f32(VALUES, [3, 4], device=1)
    a = np.from_dlpack(t, device="cpu")
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(dl_device=(1, 0), copy=False)
    # Without device="cpu" NumPy takes the capsule, sees a oneAPI device and gives it back
    # (deleted: the fixture's check).
    with pytest.raises(RuntimeError, match="Unsupported device"):
        np.from_dlpack(t)


@pytest.mark.parametrize("kind", ["host", "shared"])
def test_numpy_sees_host_readable_usm_in_place(m, kind):
    """`kDLOneAPI` does not say which kind of USM a tensor is; the producer asks Level Zero,
    and hands host and shared USM to the CPU without a copy (device USM is copied, above)."""
    t, address = m.oneapi_f32(VALUES, [3, 4], kind=kind)
    for copy in (None, False):
        a = np.from_dlpack(t, device="cpu", copy=copy)
        assert a.__array_interface__["data"][0] == address
        np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4))
        del a
    copied = np.from_dlpack(t, device="cpu", copy=True)
    assert copied.__array_interface__["data"][0] != address
    np.testing.assert_array_equal(copied, np.arange(12, dtype=np.float32).reshape(3, 4))


def test_a_relabel_needs_the_whole_tensor_inside_host_readable_memory(m):
    # Host USM of another context, which the producer's hooks do not know: no relabel, and the
    # copy says why.
    t, address = m.oneapi_f32(VALUES, [12], kind="host", own_context=True)
    with pytest.raises(BufferError, match=f"{address:#x}"):
        np.from_dlpack(t, device="cpu")


def test_memory_of_another_context_is_refused_as_unknown(m):
    t, address = m.oneapi_f32(VALUES, [12], own_context=True)
    with pytest.raises(BufferError, match=f"{address:#x}") as info:
        m.oneapi_import_report(t)
    assert "oneapi:0" in str(info.value)


def test_host_memory_claimed_as_oneapi_is_refused(m):
    made, freed = m.counters()
    liar = m.from_bytes(bytes(16), (2, 32, 1), [4], device=(ONEAPI, 0))
    with pytest.raises(BufferError, match="oneapi:0"):
        m.oneapi_import_report(liar)
    del liar
    assert m.counters() == (made + 1, freed + 1), "the refused tensor is deleted"


def test_a_tensor_on_the_wrong_device_is_refused_by_level_zero(m):
    # Device 1's memory, claimed as oneapi:0 by a producer that lies.
    liar, _ = m.oneapi_f32(VALUES, [12], device=1, claim=0)
    assert liar.__dlpack_device__() == (ONEAPI, 0)
    with pytest.raises(BufferError, match="oneapi:1") as info:
        m.oneapi_import_report(liar)
    assert "oneapi:0" in str(info.value)


def test_a_cpu_tensor_is_refused_by_the_oneapi_importer(m):
    with pytest.raises(BufferError, match="from_dlpack_oneapi takes kDLOneAPI tensors"):
        m.oneapi_import_report(np.arange(4, dtype=np.float32))


def test_a_deleter_on_another_thread_frees(m):
    t, _ = m.oneapi_f32(VALUES, [12])
    holder = [t.__dlpack__()]
    del t
    thread = threading.Thread(target=holder.clear)
    thread.start()
    thread.join()


@pytest.mark.parametrize("kind", ["device", "shared"])
def test_a_host_wait_lets_other_python_threads_run(m, kind):
    # `np.from_dlpack(t, device="cpu")` makes the producer wait for the device on the host;
    # here the device is held until a Python thread lets it go, which it can only do if the wait
    # does not hold the interpreter. In a child interpreter, so that a deadlock fails this test
    # instead of hanging the run.
    import os
    import subprocess
    import sys

    source = f"""
import ctypes, sys, threading
DRIVER = ctypes.CDLL({os.environ["ZE_ENABLE_ALT_DRIVERS"]!r})
sys.path.insert(0, {os.environ["DLPACK_TESTMOD_DIR"]!r})
import numpy as np, dlpack_testmod as m
t, _ = m.oneapi_f32([1.0, 2.0, 3.0], [3], kind={kind!r}, device=0)
assert DRIVER.dlpack_oneapi_test_driver_hold(0, 1) == 0
threading.Timer(0.3, lambda: DRIVER.dlpack_oneapi_test_driver_hold(0, 0)).start()
print(np.from_dlpack(t, device="cpu").tolist())
"""
    try:
        child = subprocess.run(
            [sys.executable, "-c", source], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: the host waited for the device while holding the interpreter")
    assert child.returncode == 0, child.stdout + child.stderr
    assert child.stdout.strip() == "[1.0, 2.0, 3.0]"
