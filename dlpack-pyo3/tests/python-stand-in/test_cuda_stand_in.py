"""Rust CUDA tensors and the Python protocol, through the libcuda stand-in: pointer identity,
values, the stream argument's rules, NumPy's copy to the host, and device claims that the
driver refutes."""

import ctypes

import numpy as np
import pytest

from conftest import STAND_IN, calls, live

VALUES = [float(i) for i in range(12)]


def test_the_extension_uses_the_stand_in(m):
    before = live()["device_allocations"]
    t, _ = m.cuda_f32(VALUES, [12])
    assert live()["device_allocations"] == before + 1
    del t
    assert live()["device_allocations"] == before


def test_a_rust_cuda_tensor_crosses_python_and_back_without_a_copy(m):
    t, address = m.cuda_f32(VALUES, [3, 4])
    assert t.__dlpack_device__() == (2, 0)
    r = m.cuda_import_report(t)
    assert r["data_ptr"] == address
    assert r["device"] == (2, 0)
    assert r["kind"] == "Device"
    assert (r["shape"], r["strides"], r["dtype"]) == ([3, 4], [4, 1], "float32")
    assert r["values"] == VALUES


def test_stream_values_follow_the_standard(m):
    t, _ = m.cuda_f32(VALUES, [12])
    for stream in (None, -1, 1, 2):
        capsule = t.__dlpack__(stream=stream)
        assert type(capsule).__name__ == "PyCapsule"
    for stream in (0, -2):
        with pytest.raises(ValueError, match=f"stream={stream} is not valid for cuda:0"):
            t.__dlpack__(stream=stream)


def test_a_consumer_stream_handle_gets_an_event_wait(m):
    """A stream of the consumer's own (a handle > 2): the producer records an event on its
    stream and makes the consumer's wait on it; the event is released afterwards (the
    fixture's check)."""
    context = ctypes.c_void_p()
    stream = ctypes.c_void_p()
    assert STAND_IN.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) == 0
    assert STAND_IN.cuCtxSetCurrent(context) == 0
    assert STAND_IN.cuStreamCreate(ctypes.byref(stream), 1) == 0
    try:
        t, _ = m.cuda_f32(VALUES, [12])
        before = calls()
        capsule = t.__dlpack__(stream=stream.value)
        assert type(capsule).__name__ == "PyCapsule"
        after = calls()
        assert after["event_records"] == before["event_records"] + 1
        assert after["stream_waits"] == before["stream_waits"] + 1
        assert after["context_synchronizations"] == before["context_synchronizations"], (
            "the handshake synchronised the whole context"
        )
        # The producer's own stream (the legacy default of its hooks) needs no event.
        t.__dlpack__(stream=1)
        assert calls() == after
        assert STAND_IN.cuStreamSynchronize(stream) == 0
    finally:
        assert STAND_IN.cuStreamDestroy_v2(stream) == 0
        assert STAND_IN.cuCtxSetCurrent(None) == 0
        assert STAND_IN.cuDevicePrimaryCtxRelease_v2(0) == 0


def test_numpy_copies_to_the_host_when_asked_and_refuses_otherwise(m):
    t, _ = m.cuda_f32(VALUES, [3, 4])
    a = np.from_dlpack(t, device="cpu")
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4))
    # Without device="cpu" NumPy takes the capsule, sees cuda:0 and gives it back (deleted:
    # the fixture's check).
    with pytest.raises(RuntimeError, match="Unsupported device"):
        np.from_dlpack(t)
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(dl_device=(1, 0), copy=False)
    with pytest.raises(BufferError, match="no device hook offers"):
        t.__dlpack__(copy=True)


def test_host_memory_claimed_as_cuda_is_refused_by_the_driver(m):
    made, freed = m.counters()
    liar = m.from_bytes(bytes(16), (2, 32, 1), [4], device=(2, 0))
    # The producer has no CUDA hooks, so it cannot order the tensor on any stream: it refuses
    # a stream through `__dlpack__`, and its C exchange API table (the CUDA importer's route
    # for this type) refuses the tensor as `__dlpack__()` does...
    with pytest.raises(BufferError, match="no device hook handles cuda:0"):
        liar.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="no device hook handles cuda:0"):
        m.cuda_import_report(liar)
    # ...and the bare tensor (stream=-1: no synchronisation) is refused by the driver, which
    # does not know the address.
    with pytest.raises(BufferError, match="cuda:0") as info:
        m.cuda_import_report(liar.__dlpack__(stream=-1))
    assert "does not know the data pointer" in str(info.value)
    del liar
    assert m.counters() == (made + 1, freed + 1), "every refused tensor is deleted"


def test_a_deleter_on_a_thread_without_a_context_frees(m):
    """DLPack deleters may run on any thread: the Rust CUDA tensor is freed on one that never
    used CUDA (the stand-in refuses a free without a current context, and the fixture checks
    that nothing is left)."""
    import threading

    t, _ = m.cuda_f32(VALUES, [12])
    capsule = t.__dlpack__(stream=-1)
    del t
    holder = [capsule]
    del capsule
    thread = threading.Thread(target=holder.clear)
    thread.start()
    thread.join()


def test_a_host_wait_lets_a_python_host_function_on_the_stream_run(m):
    # `np.from_dlpack(t, device="cpu")` makes the producer wait for the device on the host. The
    # work waited for here is a Python function on the stream (as CuPy's `launch_host_func`
    # queues), which needs the interpreter: the wait must not hold it. In a child interpreter,
    # so that a deadlock fails this test instead of hanging the run.
    import os
    import subprocess
    import sys

    source = f"""
import ctypes, sys
STAND_IN = ctypes.CDLL({os.environ["DLPACK_CUDA_TEST_DRIVER"]!r})
sys.path.insert(0, {os.environ["DLPACK_TESTMOD_DIR"]!r})
import numpy as np, dlpack_testmod as m
t, _ = m.cuda_f32([1.0, 2.0, 3.0], [3])
context = ctypes.c_void_p()
assert STAND_IN.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) == 0
assert STAND_IN.cuCtxSetCurrent(context) == 0
ran = []
host_function = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: ran.append(1))
assert STAND_IN.cuLaunchHostFunc(ctypes.c_void_p(1), host_function, None) == 0  # legacy stream
print(np.from_dlpack(t, device="cpu").tolist(), ran)
"""
    try:
        child = subprocess.run(
            [sys.executable, "-c", source], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: the host waited for the device while holding the interpreter")
    assert child.returncode == 0, child.stdout + child.stderr
    assert child.stdout.strip() == "[1.0, 2.0, 3.0] [1]"
