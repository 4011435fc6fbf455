"""The libcuda stand-in's own checks, called through ctypes: what makes the CUDA tests that run
on it able to fail. Each test provokes one kind of misuse and expects the stand-in to refuse it
(the `refusals` marker: the fixture checks the count) or to order work as a driver does."""

import contextlib
import ctypes
import threading

import pytest

from conftest import STAND_IN

SUCCESS, INVALID_VALUE, INVALID_CONTEXT, INVALID_HANDLE, NOT_READY = 0, 1, 201, 400, 600
HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@pytest.fixture
def ctx(m):
    """Device 0's primary context current on this thread for the test, released after."""
    context = ctypes.c_void_p()
    assert STAND_IN.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) == SUCCESS
    assert STAND_IN.cuCtxSetCurrent(context) == SUCCESS
    yield context
    assert STAND_IN.cuCtxSetCurrent(None) == SUCCESS
    assert STAND_IN.cuDevicePrimaryCtxRelease_v2(0) == SUCCESS


def alloc(size):
    address = ctypes.c_uint64()
    assert STAND_IN.cuMemAlloc_v2(ctypes.byref(address), ctypes.c_size_t(size)) == SUCCESS
    return address.value


def stream():
    handle = ctypes.c_void_p()
    assert STAND_IN.cuStreamCreate(ctypes.byref(handle), 1) == SUCCESS
    return handle


@contextlib.contextmanager
def blocked(s):
    """Blocks stream `s` until the block ends (a host function in stream order), also when the
    test fails inside it; the host function is kept alive until the stream has run it."""
    gate = threading.Event()
    callback = HOST_FN(lambda _: gate.wait(10))
    assert STAND_IN.cuLaunchHostFunc(s, callback, None) == SUCCESS
    try:
        yield
    finally:
        gate.set()
        STAND_IN.cuStreamSynchronize(s)
        del callback


@pytest.mark.refusals(1)
def test_a_second_free_is_refused(ctx):
    address = alloc(64)
    assert STAND_IN.cuMemFree_v2(ctypes.c_uint64(address)) == SUCCESS
    assert STAND_IN.cuMemFree_v2(ctypes.c_uint64(address)) == INVALID_VALUE


@pytest.mark.refusals(1)
def test_a_copy_past_the_end_of_an_allocation_is_refused(ctx):
    address = alloc(64)
    host = (ctypes.c_uint8 * 65)()
    copy = STAND_IN.cuMemcpyDtoHAsync_v2
    assert copy(host, ctypes.c_uint64(address), ctypes.c_size_t(64), None) == SUCCESS
    assert copy(host, ctypes.c_uint64(address), ctypes.c_size_t(65), None) == INVALID_VALUE
    assert STAND_IN.cuMemFree_v2(ctypes.c_uint64(address)) == SUCCESS


@pytest.mark.refusals(1)
def test_a_device_pointer_passed_as_host_memory_is_refused(ctx):
    address = alloc(64)
    other = alloc(64)
    assert STAND_IN.cuMemcpyHtoDAsync_v2(
        ctypes.c_uint64(other), ctypes.c_void_p(address), ctypes.c_size_t(8), None
    ) == INVALID_VALUE
    for a in (address, other):
        assert STAND_IN.cuMemFree_v2(ctypes.c_uint64(a)) == SUCCESS


@pytest.mark.refusals(1)
def test_a_read_after_a_free_in_another_streams_order_is_refused(ctx):
    """Stream B reads memory that stream A frees before B gets to the read: the stand-in
    refuses the read when B reaches it (a real driver would let it read reused memory)."""
    a, b = stream(), stream()
    address = ctypes.c_uint64()
    assert STAND_IN.cuMemAllocAsync(ctypes.byref(address), ctypes.c_size_t(64), a) == SUCCESS
    assert STAND_IN.cuStreamSynchronize(a) == SUCCESS
    pinned = ctypes.c_void_p()
    assert STAND_IN.cuMemHostAlloc(ctypes.byref(pinned), ctypes.c_size_t(64), 0) == SUCCESS
    with blocked(b):
        # Queued on B behind the block, into pinned memory (so it stays asynchronous).
        assert STAND_IN.cuMemcpyDtoHAsync_v2(pinned, address, ctypes.c_size_t(64), b) == SUCCESS
        assert STAND_IN.cuMemFreeAsync(address, a) == SUCCESS
        assert STAND_IN.cuStreamSynchronize(a) == SUCCESS
    assert STAND_IN.cuStreamSynchronize(b) == SUCCESS
    assert STAND_IN.cuMemFreeHost(pinned) == SUCCESS
    for s in (a, b):
        assert STAND_IN.cuStreamDestroy_v2(s) == SUCCESS


def test_a_stream_waits_for_the_recording_it_was_given(ctx):
    """B waits on an event recorded on A behind a block. Recording the event again on an idle
    stream C does not release B: it waits for the recording that was latest when it was told
    to wait, as the driver does."""
    a, b, c = stream(), stream(), stream()
    recorded, waited = ctypes.c_void_p(), ctypes.c_void_p()
    for e in (recorded, waited):
        assert STAND_IN.cuEventCreate(ctypes.byref(e), 2) == SUCCESS
    with blocked(a):
        assert STAND_IN.cuEventRecord(recorded, a) == SUCCESS
        assert STAND_IN.cuStreamWaitEvent(b, recorded, 0) == SUCCESS
        assert STAND_IN.cuEventRecord(waited, b) == SUCCESS
        assert STAND_IN.cuEventRecord(recorded, c) == SUCCESS
        assert STAND_IN.cuStreamSynchronize(c) == SUCCESS
        assert STAND_IN.cuEventQuery(recorded) == SUCCESS, "the latest recording, on C"
        assert STAND_IN.cuEventQuery(waited) == NOT_READY, "B still waits for A"
    assert STAND_IN.cuEventSynchronize(waited) == SUCCESS
    for e in (recorded, waited):
        assert STAND_IN.cuEventDestroy_v2(e) == SUCCESS
    for s in (a, b, c):
        assert STAND_IN.cuStreamDestroy_v2(s) == SUCCESS


@pytest.mark.refusals(1)
def test_an_event_recorded_on_another_devices_stream_is_refused(ctx):
    event = ctypes.c_void_p()
    assert STAND_IN.cuEventCreate(ctypes.byref(event), 2) == SUCCESS
    context1 = ctypes.c_void_p()
    assert STAND_IN.cuDevicePrimaryCtxRetain(ctypes.byref(context1), 1) == SUCCESS
    assert STAND_IN.cuCtxSetCurrent(context1) == SUCCESS
    s1 = stream()
    assert STAND_IN.cuEventRecord(event, s1) == INVALID_HANDLE
    assert STAND_IN.cuStreamDestroy_v2(s1) == SUCCESS
    assert STAND_IN.cuCtxSetCurrent(ctx) == SUCCESS
    assert STAND_IN.cuDevicePrimaryCtxRelease_v2(1) == SUCCESS
    assert STAND_IN.cuEventDestroy_v2(event) == SUCCESS


@pytest.mark.refusals(1)
def test_destroying_a_context_with_live_objects_is_refused_and_changes_nothing(ctx):
    context1 = ctypes.c_void_p()
    assert STAND_IN.cuDevicePrimaryCtxRetain(ctypes.byref(context1), 1) == SUCCESS
    assert STAND_IN.cuCtxSetCurrent(context1) == SUCCESS
    s1 = stream()
    # The last release would destroy the stream with the context.
    assert STAND_IN.cuDevicePrimaryCtxRelease_v2(1) == INVALID_CONTEXT
    assert STAND_IN.cuStreamDestroy_v2(s1) == SUCCESS
    assert STAND_IN.cuCtxSetCurrent(ctx) == SUCCESS
    assert STAND_IN.cuDevicePrimaryCtxRelease_v2(1) == SUCCESS
