"""The CUDA importer's C exchange API route, through the libcuda stand-in.

`Producer` is a tensor type whose `__dlpack_c_exchange_api__` table is made here with ctypes,
as PyTorch's is in C++: `managed_tensor_from_py_object_no_sync` hands over an export of a Rust
CUDA tensor, and `current_work_stream` names whatever stream the test chose. Its
`__dlpack__` and `__dlpack_device__` count their calls, which tells the two routes apart: the
event records and stream waits of the stand-in are the same for both when the streams are.
"""

import ctypes

import pytest

from conftest import STAND_IN, calls

VALUES = [float(i) for i in range(12)]

_OUT = ctypes.POINTER(ctypes.c_void_p)
FROM_PY_OBJECT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _OUT)
CURRENT_WORK_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, _OUT)


class Table(ctypes.Structure):
    """`DLPackExchangeAPI` of dlpack.h 1.3 (its header, then five function pointers)."""

    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("prev_api", ctypes.c_void_p),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", FROM_PY_OBJECT),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", CURRENT_WORK_STREAM),
    ]


# What the table's current_work_stream answers (a stream handle, or None to fail with -1), and
# whether its managed_tensor_from_py_object_no_sync fails (with -1 and no exception).
STATE = {"stream": 0, "queries": [], "export_fails": False}

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype = ctypes.c_int
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

# Capsules keep the name pointers they are given: these live as long as the module.
_VERSIONED = b"dltensor_versioned"
_USED = b"used_dltensor_versioned"
_API_NAME = b"dlpack_exchange_api"


def _from_py_object(obj, out):
    if STATE["export_fails"]:
        return -1
    producer = ctypes.cast(obj, ctypes.py_object).value
    producer.exchange_exports += 1
    # Without synchronisation, as the table's function promises (a CPU tensor takes no stream).
    cpu = producer.inner.__dlpack_device__()[0] == 1
    capsule = producer.inner.__dlpack__(max_version=(1, 3), **({} if cpu else {"stream": -1}))
    pointer = _get_pointer(capsule, _VERSIONED)
    # The caller owns the tensor now: the capsule must not delete it.
    _set_name(capsule, _USED)
    out[0] = pointer
    return 0


def _current_work_stream(device_type, device_id, out):
    STATE["queries"].append((device_type, device_id))
    if STATE["stream"] is None:
        # A failure without an exception set: a producer's bug the consumer must survive.
        return -1
    out[0] = STATE["stream"]
    return 0


# The callbacks and the table live as long as the module, as the API requires.
_CALLBACKS = (FROM_PY_OBJECT(_from_py_object), CURRENT_WORK_STREAM(_current_work_stream))
TABLE = Table(1, 3, None, None, _CALLBACKS[0], None, None, _CALLBACKS[1])


class Producer:
    """A tensor of a type with an exchange API table, around a tensor of the test module."""

    __dlpack_c_exchange_api__ = _new_capsule(ctypes.addressof(TABLE), _API_NAME, None)

    def __init__(self, inner):
        self.inner = inner
        self.exchange_exports = 0
        self.protocol_calls = 0

    def __dlpack_device__(self):
        self.protocol_calls += 1
        return self.inner.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.protocol_calls += 1
        return self.inner.__dlpack__(**kwargs)


class FlaggedProducer(Producer):
    """A producer with PyTorch's tensor flags (`requires_grad`, `is_conj()`, `is_neg()`), which
    PyTorch 2.11's table ignores: an instance with one set must go the `__dlpack__` way."""

    def __init__(self, inner, flag=None):
        super().__init__(inner)
        self.flag = flag

    @property
    def requires_grad(self):
        return self.flag == "requires_grad"

    def is_conj(self):
        return self.flag == "conj"

    def is_neg(self):
        return self.flag == "neg"


class FlaggedWithoutTable:
    """A tensor with PyTorch's tensor flags whose type offers no table, as a PyTorch without
    the C exchange API (before 2.10), or a subclass that overrides `__dlpack__`: imported
    through `__dlpack__` alone."""

    def __init__(self, inner, flag=None):
        self.inner = inner
        self.flag = flag
        self.protocol_calls = 0

    def __dlpack_device__(self):
        self.protocol_calls += 1
        return self.inner.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.protocol_calls += 1
        return self.inner.__dlpack__(**kwargs)

    requires_grad = False

    def is_conj(self):
        return False

    def is_neg(self):
        return self.flag == "neg"


class TorchFunctionOverriding(FlaggedProducer):
    """A subclass that overrides `__torch_function__`, which PyTorch's `Tensor.__dlpack__`
    hands itself to first (to refuse, say), and which the table knows nothing of. (This
    stand-in's `__dlpack__` does not call it; the PyTorch tests show a refusal.)"""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class Overriding(Producer):
    """A subclass that overrides `__dlpack__`, which its base's table knows nothing of."""

    def __dlpack__(self, **kwargs):
        self.protocol_calls += 1
        raise BufferError("Overriding refuses")


@pytest.fixture
def stream():
    """A stream of the stand-in's device 0, as a producer's current work stream."""
    context = ctypes.c_void_p()
    handle = ctypes.c_void_p()
    assert STAND_IN.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) == 0
    assert STAND_IN.cuCtxSetCurrent(context) == 0
    assert STAND_IN.cuStreamCreate(ctypes.byref(handle), 1) == 0
    yield handle.value
    assert STAND_IN.cuStreamSynchronize(handle) == 0
    assert STAND_IN.cuStreamDestroy_v2(handle) == 0
    assert STAND_IN.cuCtxSetCurrent(None) == 0
    assert STAND_IN.cuDevicePrimaryCtxRelease_v2(0) == 0


@pytest.fixture(autouse=True)
def reset():
    STATE.update(stream=0, queries=[], export_fails=False)
    yield
    STATE.update(stream=0, queries=[], export_fails=False)


def test_the_named_stream_is_waited_for_without_a_python_call(m, stream):
    inner, address = m.cuda_f32(VALUES, [3, 4])
    producer = Producer(inner)
    STATE["stream"] = stream
    before = calls()
    r = m.cuda_import_report(producer)
    after = calls()
    assert (producer.exchange_exports, producer.protocol_calls) == (1, 0)
    assert STATE["queries"] == [(2, 0)], "current_work_stream(kDLCUDA, 0)"
    # An event on the producer's stream, which the importer's stream (legacy default) waits on.
    assert after["event_records"] == before["event_records"] + 1
    assert after["stream_waits"] == before["stream_waits"] + 1
    assert after["context_synchronizations"] == before["context_synchronizations"]
    assert r["data_ptr"] == address
    assert (r["device"], r["kind"]) == ((2, 0), "Device")
    assert r["values"] == VALUES


def test_the_default_stream_needs_no_event(m):
    inner, address = m.cuda_f32(VALUES, [12])
    producer = Producer(inner)
    before = calls()
    r = m.cuda_import_report(producer)
    assert calls()["event_records"] == before["event_records"]
    assert calls()["stream_waits"] == before["stream_waits"]
    assert (producer.exchange_exports, producer.protocol_calls) == (1, 0)
    assert STATE["queries"] == [(2, 0)]
    assert (r["data_ptr"], r["values"]) == (address, VALUES)


def test_a_failing_current_work_stream_is_an_error_and_the_tensor_is_deleted(m):
    """Deleted: the fixture finds the stand-in's allocations as they were once `inner` goes."""
    inner, _ = m.cuda_f32(VALUES, [12])
    producer = Producer(inner)
    STATE["stream"] = None
    with pytest.raises(SystemError, match="current_work_stream failed without setting an"):
        m.cuda_import_report(producer)
    assert (producer.exchange_exports, producer.protocol_calls) == (1, 0)


def test_a_failing_export_sends_the_import_through_dlpack(m):
    """A table whose function fails (here with -1 and no exception; PyTorch's raises its C++
    converter's RuntimeError for a sparse tensor): `__dlpack__` is asked, and its answer
    stands."""
    inner, address = m.cuda_f32(VALUES, [12])
    producer = Producer(inner)
    STATE["export_fails"] = True
    r = m.cuda_import_report(producer)
    assert (producer.exchange_exports, producer.protocol_calls) == (0, 2)
    assert (r["data_ptr"], r["values"]) == (address, VALUES)


@pytest.mark.parametrize("flag", ["requires_grad", "conj"])
def test_a_tensor_flag_the_table_ignores_sends_the_import_through_dlpack(m, flag):
    inner, address = m.cuda_f32(VALUES, [12])
    producer = FlaggedProducer(inner, flag)
    r = m.cuda_import_report(producer)
    assert (producer.exchange_exports, producer.protocol_calls) == (0, 2)
    assert (r["data_ptr"], r["values"]) == (address, VALUES)
    # Without a flag set, the table serves the same type.
    unflagged = FlaggedProducer(inner)
    m.cuda_import_report(unflagged)
    assert (unflagged.exchange_exports, unflagged.protocol_calls) == (1, 0)


def _pinned(m):
    """Host memory claimed as pinned (kDLCUDAHost), which a producer without CUDA hooks cannot
    serve a stream for: it refuses `__dlpack__(stream=...)`."""
    return m.from_bytes(bytes(48), (2, 32, 1), [12], device=(3, 0))


@pytest.mark.parametrize("memory", ["device", "pinned"])
@pytest.mark.parametrize("kind", [FlaggedProducer, FlaggedWithoutTable])
def test_the_negative_bit_is_refused_before_any_export_with_or_without_a_table(m, kind, memory):
    """On every route of the CUDA importer: the table's, and the `__dlpack__` route it falls
    back to (a type without a table, pinned or managed memory). Neither export is asked for."""
    inner = m.cuda_f32(VALUES, [12])[0] if memory == "device" else _pinned(m)
    producer = kind(inner, "neg")
    with pytest.raises(BufferError, match=r"negative bit set \(is_neg\(\)\).*resolve_neg"):
        m.cuda_import_report(producer)
    assert producer.protocol_calls == 0
    assert getattr(producer, "exchange_exports", 0) == 0
    # Without the bit, the `__dlpack__` route serves the same type.
    if kind is FlaggedWithoutTable and memory == "device":
        unflagged = kind(inner)
        assert m.cuda_import_report(unflagged)["values"] == VALUES
        assert unflagged.protocol_calls == 2


def test_a_subclass_overriding_torch_function_is_asked_through_dlpack(m):
    inner, address = m.cuda_f32(VALUES, [12])
    producer = TorchFunctionOverriding(inner)
    r = m.cuda_import_report(producer)
    assert (producer.exchange_exports, producer.protocol_calls) == (0, 2)
    assert (r["data_ptr"], r["values"]) == (address, VALUES)


def test_a_subclass_overriding_dlpack_is_asked_through_its_override(m):
    producer = Overriding(m.cuda_f32(VALUES, [12])[0])
    with pytest.raises(BufferError, match="Overriding refuses"):
        m.cuda_import_report(producer)
    assert producer.exchange_exports == 0
    assert producer.protocol_calls == 2, "__dlpack_device__, then the override"


def test_a_cpu_tensor_from_the_table_is_refused_as_through_dlpack(m):
    """Refused (and deleted) as the `__dlpack__` route refuses it, without asking again."""
    made, freed = m.counters()
    producer = Producer(m.from_bytes(bytes(8), (2, 32, 1), [2]))
    with pytest.raises(BufferError, match="no device hook handles cpu:0"):
        m.cuda_import_report(producer)
    assert (producer.exchange_exports, producer.protocol_calls) == (1, 0)
    assert STATE["queries"] == []
    del producer
    assert m.counters() == (made + 1, freed + 1), "the tensor and its export are deleted"


def test_pinned_memory_from_the_table_goes_the_dlpack_way(m):
    """The producer serves a stream for pinned memory through `__dlpack__`: the table's tensor
    is deleted and the object asked again."""
    made, freed = m.counters()
    # Host memory claimed as pinned (kDLCUDAHost) by a producer without CUDA hooks: asked for
    # the importer's stream through `__dlpack__`, the producer refuses, as it cannot serve one.
    producer = Producer(m.from_bytes(bytes(8), (2, 32, 1), [2], device=(3, 0)))
    with pytest.raises(BufferError, match="no device hook handles cuda_host:0"):
        m.cuda_import_report(producer)
    assert producer.exchange_exports == 1
    assert producer.protocol_calls == 2, "__dlpack_device__, then __dlpack__"
    assert STATE["queries"] == []
    del producer
    made_now, freed_now = m.counters()
    assert made_now - made == freed_now - freed, "every export is deleted"
