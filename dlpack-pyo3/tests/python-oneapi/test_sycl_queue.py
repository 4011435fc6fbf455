"""A `dpctl.SyclQueue` (dpctl's and dpnp's convention for `stream` on oneAPI) as the `stream` of
a Rust oneAPI tensor's `__dlpack__`, without dpctl: a fake queue with dpctl's attributes, whose
capsules the test module makes, so that its stand-ins for libsycl's `sycl::queue::getNative`
and dpctl's `DPCTLQueue_GetBackend` answer for them.

What this cannot show: that the mangled name and calling convention match a real libsycl, and
that a real dpctl capsule leads to it. That needs dpctl with a Level Zero GPU."""

import enum
import threading
import time

import pytest

from conftest import Held, host_waiters, live

ONEAPI = 14
VALUES = [float(i) for i in range(12)]


class backend_type(enum.Enum):
    """dpctl.backend_type (dpctl/enum_types.py, `class backend_type(Enum)` at line 73 of commit
    3d69291): an `enum.Enum` whose members are made with `auto()` in this order."""

    all = enum.auto()
    cuda = enum.auto()
    hip = enum.auto()
    level_zero = enum.auto()
    opencl = enum.auto()


class SyclDevice:
    """The part of dpctl.SyclDevice a queue exposes: `backend`, a `backend_type` member
    (dpctl/_sycl_device.pyx, property `backend` at line 536 of commit 3d69291)."""

    def __init__(self, backend):
        self._backend = backend

    @property
    def backend(self):
        return self._backend


class SyclQueue:
    """A stand-in for dpctl.SyclQueue with the attributes dpctl gives it (dpctl/_sycl_queue.pyx
    at commit 3d69291 of IntelPython/dpctl): the properties `backend` (a `backend_type`
    member, line 1137) and `sycl_device` (line 1168), `_get_capsule()` returning a new
    "SyclQueueRef" capsule that holds a copy of the `sycl::queue` (line 1883), `__eq__`
    (line 1120), `__hash__` (line 1873) and `__repr__` (line 1858). Its native queue is made by
    the test module (`sycl_queue_ref`); `capsules` counts the `_get_capsule()` calls."""

    def __init__(self, m, backend, native=0, immediate=True):
        self._m = m
        self._device = SyclDevice(backend)
        self._native = native
        self._immediate = immediate
        self.capsules = 0

    @property
    def backend(self):
        return self._device.backend

    @property
    def sycl_device(self):
        return self._device

    def _get_capsule(self):
        self.capsules += 1
        return self._m.sycl_queue_ref(self._native, self.backend.name, self._immediate)

    def __eq__(self, other):
        return isinstance(other, SyclQueue) and other._native == self._native

    def __hash__(self):
        return hash(self._native)

    def __repr__(self):
        return f"<dpctl.SyclQueue at {hex(id(self))}>"


def ordered_after_held_producer(m, t, stream, q):
    """Exports `t` (on root device 0) with `stream` while device 0 is held: the export must
    return at once without a host wait, and `q` (the queue the stream stands for) must wait on
    the device until the hold ends."""
    with Held(0):
        done = threading.Event()

        def export():
            t.__dlpack__(stream=stream)
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
        assert consumer.is_alive(), "the SYCL queue's command list did not wait for the producer"
    consumer.join(timeout=30)
    assert not consumer.is_alive(), "the SYCL queue's command list never ran after the hold"


@pytest.mark.parametrize("form", ["queue", "capsule"])
def test_a_level_zero_queue_is_ordered_through_its_native_command_list(m, form):
    t, _ = m.oneapi_f32(VALUES, [12], device=0)
    # A command list of the tensor's context, as a SYCL queue whose list was adopted
    # (Queue::from_raw) would be.
    q = m.OneApiQueue(1)
    sycl = SyclQueue(m, backend_type.level_zero, native=q.stream)
    stream = sycl if form == "queue" else sycl._get_capsule()
    calls = m.sycl_get_native_calls()
    ordered_after_held_producer(m, t, stream, q)
    assert m.sycl_get_native_calls() == calls + 1
    assert m.sycl_command_list(stream) == q.stream


def test_the_export_with_a_queue_is_the_same_tensor(m):
    t, address = m.oneapi_f32(VALUES, [3, 4], device=1)
    q = m.OneApiQueue(0)
    sycl = SyclQueue(m, backend_type.level_zero, native=q.stream)
    r = m.oneapi_import_report(t.__dlpack__(stream=sycl, max_version=(1, 0)))
    assert (r["data_ptr"], r["shape"], r["values"]) == (address, [3, 4], VALUES)
    q.synchronize()


@pytest.mark.parametrize("backend", ["opencl", "cuda", "hip"])
def test_a_queue_on_another_backend_is_refused_naming_it(m, backend):
    t, _ = m.oneapi_f32(VALUES, [12])
    sycl = SyclQueue(m, backend_type[backend], native=1)
    calls, events = m.sycl_get_native_calls(), live()["events"]
    with pytest.raises(BufferError, match=f"on the {backend} backend") as info:
        t.__dlpack__(stream=sycl)
    assert "level_zero" in str(info.value)
    # Refused on the queue's word, before anything native ran or was enqueued.
    assert (sycl.capsules, m.sycl_get_native_calls()) == (0, calls)
    assert live()["events"] == events
    # Its capsule says the same through dpctl's C function.
    with pytest.raises(BufferError, match=f"on the {backend} backend"):
        t.__dlpack__(stream=m.sycl_queue_ref(1, backend))
    assert m.sycl_get_native_calls() == calls


def test_a_queue_whose_list_the_context_did_not_adopt_is_refused(m):
    t, _ = m.oneapi_f32(VALUES, [12])
    q = m.OneApiQueue(0)
    stranger = SyclQueue(m, backend_type.level_zero, native=q.stream + 4096)
    with pytest.raises(ValueError, match="not the command list of a live queue") as info:
        t.__dlpack__(stream=stranger)
    assert "SYCL queue passed as stream" in str(info.value)
    q.synchronize()


def test_a_level_zero_command_queue_is_refused(m):
    t, _ = m.oneapi_f32(VALUES, [12])
    q = m.OneApiQueue(0)
    sycl = SyclQueue(m, backend_type.level_zero, native=q.stream, immediate=False)
    with pytest.raises(BufferError, match="is a command queue"):
        t.__dlpack__(stream=sycl)
    q.synchronize()


def test_a_queue_whose_capsule_is_not_a_queue_capsule_is_refused(m):
    t, _ = m.oneapi_f32(VALUES, [12])

    class Odd(SyclQueue):
        def _get_capsule(self):
            return m.foreign_capsule("OtherRef")

    with pytest.raises(BufferError, match="not a \"SyclQueueRef\" capsule"):
        t.__dlpack__(stream=Odd(m, backend_type.level_zero, native=1))


@pytest.mark.parametrize("backend", ["level_zero", "opencl"])
def test_a_cpu_tensor_refuses_a_queue_without_inviting_an_int(m, backend):
    t = m.from_bytes(bytes(16), (2, 32, 1), [4])
    assert t.__dlpack_device__() == (1, 0)
    for stream in (SyclQueue(m, backend_type[backend]), m.sycl_queue_ref(1, backend)):
        with pytest.raises(ValueError) as info:
            t.__dlpack__(stream=stream)
        assert isinstance(info.value, RuntimeError), "NumPy's class for a stream on the CPU"
        message = str(info.value)
        assert "is a SYCL queue" in message and "on cpu:0" in message
        assert "expected None" in message
        assert "int" not in message and "handle" not in message, message
    # An int is refused there too, as before.
    with pytest.raises(ValueError, match="expected None"):
        t.__dlpack__(stream=5)


def test_objects_that_are_not_queues_are_type_errors(m):
    t, _ = m.oneapi_f32(VALUES, [12])
    for stream in (object(), 1.5, "queue", m.foreign_capsule("OtherRef")):
        with pytest.raises(TypeError, match="must be an int, a SYCL queue"):
            t.__dlpack__(stream=stream)
    with pytest.raises(TypeError, match="is not a SYCL queue"):
        m.sycl_command_list(object())
