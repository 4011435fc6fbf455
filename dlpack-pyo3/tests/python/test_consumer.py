"""The Rust importer's consumer sequence: max_version first, the retry for old producers, and
dl_device / copy served locally when the producer could not see them."""

import ctypes
import gc
import sys

import numpy as np
import pytest
from conftest import NUMPY_DTYPES, DLTensor, Returns, rounds


class OldProducer:
    """A producer older than the 2023.12 keywords: __dlpack__(stream=None) only."""

    def __init__(self, array):
        self.array = array
        self.calls = []

    def __dlpack__(self, stream=None):
        self.calls.append(stream)
        return self.array.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class NewProducer(OldProducer):
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append(dict(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy))
        return self.array.__dlpack__(
            stream=stream, max_version=max_version, dl_device=dl_device, copy=copy
        )


def test_the_importer_asks_for_dlpack_1_3(m):
    p = NewProducer(np.arange(3.0))
    got = m.import_report(p)
    assert p.calls == [dict(stream=None, max_version=(1, 3), dl_device=None, copy=None)]
    assert not got["legacy"]


def test_the_importer_passes_dl_device_and_copy_on(m):
    p = NewProducer(np.arange(3.0))
    got = m.import_report(p, dl_device=(1, 0), copy=True)
    assert p.calls[0]["dl_device"] == (1, 0) and p.calls[0]["copy"] is True
    assert got["is_copied"] and got["data_ptr"] != p.array.ctypes.data


def test_an_old_producer_is_asked_again_without_keywords(m):
    a = np.arange(6.0)
    p = OldProducer(a)
    got = m.import_report(p)
    assert p.calls == [None]  # the call with keywords failed with TypeError before reaching it
    assert got["legacy"] and got["data_ptr"] == a.ctypes.data


def test_a_copy_an_old_producer_could_not_make_is_made_by_the_importer(m):
    a = np.arange(6.0)
    got = m.import_report(OldProducer(a), copy=True)
    assert got["data_ptr"] != a.ctypes.data and got["is_copied"]
    assert got["read_only"] is False  # the copy is the importer's own


def test_a_bare_capsule_with_copy_is_copied_by_the_importer(m):
    a = np.arange(6.0)
    got = m.import_report(a.__dlpack__(max_version=(1, 0)), copy=True)
    assert got["data_ptr"] != a.ctypes.data and got["is_copied"]
    assert m.import_report(a.__dlpack__(max_version=(1, 0)), dl_device=(1, 0))["data_ptr"] == a.ctypes.data


def test_a_bare_capsule_refuses_what_it_cannot_serve(m):
    a = np.arange(6.0)
    with pytest.raises(BufferError):
        m.import_report(a.__dlpack__(max_version=(1, 0)), dl_device=(2, 0))


def test_producer_errors_reach_the_caller_unchanged(m):
    class Failing:
        def __dlpack__(self, **kwargs):
            raise BufferError("nope")

    with pytest.raises(BufferError, match="nope"):
        m.import_report(Failing())


def test_an_object_without_dlpack_is_a_type_error_that_names_its_type(m):
    class NotATensor:
        pass

    with pytest.raises(TypeError, match="expected an object with __dlpack__.*NotATensor"):
        m.import_report(NotATensor())
    with pytest.raises(TypeError, match="expected an object with __dlpack__.*NotATensor"):
        m.import_report(NotATensor(), copy=True)  # the other route, with a keyword dict


def test_an_attribute_error_inside_dlpack_reaches_the_caller_unchanged(m):
    class Broken:
        def __dlpack__(self, **kwargs):
            return self.missing

    with pytest.raises(AttributeError, match="missing"):
        m.import_report(Broken())
    with pytest.raises(AttributeError, match="missing"):
        m.import_report(Broken(), copy=False)


def test_dlpack_set_on_the_instance_is_called_too(m):
    a = np.arange(4.0)
    calls = []

    class Holder:
        pass

    h = Holder()
    h.__dlpack__ = lambda **kw: (calls.append(kw), a.__dlpack__(**kw))[1]
    got = m.import_report(h)
    assert calls == [dict(max_version=(1, 3))]
    assert got["data_ptr"] == a.ctypes.data


def test_the_dlpack_route_of_the_import_loop_asks_for_1_3_each_time(m):
    p = NewProducer(np.arange(3.0))
    m.import_loop(p, 2, "dlpack")
    assert [c["max_version"] for c in p.calls] == [(1, 3), (1, 3)]
    old = OldProducer(np.arange(3.0))
    m.import_loop(old, 2, "dlpack")
    assert old.calls == [None, None]


# A foreign producer written with ctypes: a capsule with a real destructor (it calls the deleter
# while the capsule keeps its fresh name, as NumPy's and ours do) and a deleter that counts.


class _Versioned(ctypes.Structure):
    pass


class _Legacy(ctypes.Structure):
    pass


_Versioned._fields_ = [
    ("major", ctypes.c_uint32),
    ("minor", ctypes.c_uint32),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_Versioned))),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]
_Legacy._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_Legacy))),
]

_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_GetPointer.restype = ctypes.c_void_p
_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_New = ctypes.pythonapi.PyCapsule_New
_New.restype = ctypes.py_object
_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR]


class CountingProducer:
    """Makes DLPack capsules over float64 data, versioned or legacy, with a dtype of the
    caller's choice (a wrong one makes the importer refuse the tensor), and records each
    deleter call by the serial number of the capsule (its `manager_ctx`)."""

    def __init__(self):
        self.made = 0
        self.deleted = []  # serial numbers, one entry per deleter call
        self.by_destructor = []  # those of the calls made by the capsule's destructor
        self.alive = {}  # serial -> the struct and what it points to, until its deleter runs

        def deleter(p):
            serial = p.contents.manager_ctx
            self.deleted.append(serial)
            self.alive.pop(serial, None)

        self._deleters = {
            _Versioned: _Versioned._fields_[3][1](deleter),
            _Legacy: _Legacy._fields_[2][1](deleter),
        }

        def destructor(capsule):
            for name, struct in ((b"dltensor_versioned", _Versioned), (b"dltensor", _Legacy)):
                if _IsValid(capsule, name):
                    p = ctypes.cast(_GetPointer(capsule, name), ctypes.POINTER(struct))
                    self.by_destructor.append(p.contents.manager_ctx)
                    p.contents.deleter(p)

        self._destructor = _DESTRUCTOR(destructor)

    def capsule(self, legacy=False, bits=64):
        data = (ctypes.c_double * 4)(1.0, 2.0, 3.0, 4.0)
        shape = (ctypes.c_int64 * 1)(4)
        strides = (ctypes.c_int64 * 1)(1)
        tensor = DLTensor(
            ctypes.addressof(data), 1, 0, 1, 2, bits, 1, ctypes.addressof(shape), ctypes.addressof(strides), 0
        )
        self.made += 1
        serial = self.made
        if legacy:
            struct, name = _Legacy(tensor, serial, self._deleters[_Legacy]), b"dltensor"
        else:
            struct = _Versioned(1, 3, serial, self._deleters[_Versioned], 0, tensor)
            name = b"dltensor_versioned"
        self.alive[serial] = (struct, data, shape, strides)
        return _New(ctypes.addressof(struct), name, self._destructor), serial


def capsule_name(capsule):
    return repr(capsule).split('"')[1]


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
@pytest.mark.parametrize(
    "route",
    [
        lambda m, c: m.import_report(c),
        lambda m, c: m.import_safe_report(c),
        lambda m, c: m.import_report(Returns(c)),  # the capsule a __dlpack__ returned
        lambda m, c: m.import_report(c, copy=True),
    ],
    ids=["bare", "bare_read_only", "dlpack", "bare_copy"],
)
def test_a_capsule_whose_tensor_is_refused_is_left_unconsumed(m, route, legacy):
    producer = CountingProducer()
    capsule, serial = producer.capsule(legacy=legacy, bits=13)  # float13: no such dtype
    fresh = capsule_name(capsule)
    with pytest.raises(BufferError, match="bits = 13"):
        route(m, capsule)
    # As NumPy leaves a capsule it refuses: the name unchanged, the tensor not deleted ...
    assert capsule_name(capsule) == fresh
    assert producer.deleted == []
    with pytest.raises(BufferError):
        route(m, capsule)  # ... refused again, as often as asked, never taken
    assert producer.deleted == []
    # ... and deleted once, by the producer's destructor, when the capsule is collected.
    del capsule
    gc.collect()
    assert producer.deleted == producer.by_destructor == [serial] and producer.alive == {}


def test_numpy_leaves_a_capsule_it_refuses_as_the_importer_does(m):
    producer = CountingProducer()
    capsule, _ = producer.capsule(bits=13)
    with pytest.raises(RuntimeError):
        np.from_dlpack(Returns(capsule))
    with pytest.raises(BufferError):
        m.import_report(capsule)
    assert capsule_name(capsule) == "dltensor_versioned" and producer.deleted == []


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
def test_an_accepted_capsule_is_taken_and_deleted_once_by_the_importer(m, legacy):
    producer = CountingProducer()
    capsule, serial = producer.capsule(legacy=legacy)
    got = m.import_report(capsule)
    assert got["shape"] == [4] and got["legacy"] is legacy
    assert capsule_name(capsule) == ("used_dltensor" if legacy else "used_dltensor_versioned")
    assert producer.deleted == [serial]  # by the importer, when its tensor was dropped
    del capsule
    gc.collect()
    assert producer.deleted == [serial], "the destructor of a used capsule deletes nothing"


def test_a_capsule_refused_for_its_request_can_still_be_taken_by_another_consumer(m):
    a = np.arange(6.0)
    refs = sys.getrefcount(a)
    capsule = a.__dlpack__(max_version=(1, 0))
    with pytest.raises(BufferError):
        m.import_report(capsule, dl_device=(2, 0))  # a CPU tensor cannot be had on CUDA here
    assert capsule_name(capsule) == "dltensor_versioned"
    b = np.from_dlpack(Returns(capsule))
    assert b.ctypes.data == a.ctypes.data
    assert capsule_name(capsule) == "used_dltensor_versioned"
    del b, capsule
    gc.collect()
    assert sys.getrefcount(a) == refs, "NumPy's deleter was not called exactly once"


def test_refused_capsules_are_neither_leaked_nor_freed_twice(m):
    """Many refusals, of NumPy's capsules, ours and a counting producer's: every tensor is
    deleted exactly once, by its capsule's destructor."""
    a = np.arange(6.0)
    payload = np.arange(4.0).tobytes()
    producer = CountingProducer()
    gc.collect()
    made0, freed0 = m.counters()
    refs0 = sys.getrefcount(a)
    n = rounds(2000)
    for _ in range(n):
        for capsule in (a.__dlpack__(max_version=(1, 0)), a.__dlpack__()):
            with pytest.raises(BufferError):
                m.import_report(capsule, dl_device=(2, 0))
        t = m.from_bytes(payload, NUMPY_DTYPES["float64"], [4])
        with pytest.raises(BufferError):
            m.import_report(t.__dlpack__(max_version=(1, 0)), dl_device=(2, 0))
        with pytest.raises(m.DLPackStreamError):
            m.import_report(t.__dlpack__(max_version=(1, 0)), stream=5)
        del t
        capsule, _ = producer.capsule(bits=13)
        with pytest.raises(BufferError):
            m.import_report(capsule)
        del capsule
    gc.collect()
    made, freed = m.counters()
    assert made - made0 == n and freed - freed0 == n, "a Rust buffer leaked or freed twice"
    assert sys.getrefcount(a) == refs0, "NumPy's deleter was not called exactly once per capsule"
    assert len(producer.deleted) == len(set(producer.deleted)) == n and producer.alive == {}


class DropsStream(NewProducer):
    """A lenient producer: takes `stream` and ignores it (tvm-ffi does so on the CPU)."""

    def __dlpack__(self, *, stream=None, **kwargs):
        self.calls.append(dict(stream=stream, **kwargs))
        return self.array.__dlpack__(**kwargs)


def cpu_producers(m):
    import tvm_ffi

    values = np.arange(4.0)
    return {
        # This crate's own type: the shortcut without a __dlpack__ call.
        "ours": m.from_bytes(values.tobytes(), NUMPY_DTYPES["float64"], [4]),
        # A type with a C exchange API (tvm-ffi's test wrapper; its __dlpack__ takes a stream).
        "c_exchange_api": tvm_ffi.core.DLTensorTestWrapper(tvm_ffi.from_dlpack(values)),
        "numpy": values,
        "lenient": DropsStream(values),
        "bare_capsule": values.__dlpack__(max_version=(1, 0)),
    }


@pytest.mark.parametrize("stream", [-1, 1, 2, 5])
@pytest.mark.parametrize("route", ["ours", "c_exchange_api", "numpy", "lenient", "bare_capsule"])
def test_a_stream_with_a_cpu_tensor_is_refused_on_every_route(m, route, stream):
    obj = cpu_producers(m)[route]
    # NumPy's own refusal is a RuntimeError; DLPackStreamError (ours, and the importer's when
    # the producer accepted the stream) is a RuntimeError and a ValueError.
    with pytest.raises(RuntimeError) as info:
        m.import_report(obj, stream=stream)
    if route != "numpy":
        assert type(info.value) is m.DLPackStreamError
        assert f"stream={stream} is not valid for cpu:0" in str(info.value)
    if route == "bare_capsule":
        assert capsule_name(obj) == "dltensor_versioned"  # refused, so left unconsumed
    # Without the stream, every route imports it.
    assert m.import_report(obj)["device"] == (1, 0)


def test_a_stream_with_dl_device_cpu_is_refused_too(m):
    # The stream names the consumer's stream on the device it receives the data on.
    with pytest.raises(m.DLPackStreamError, match="stream=5"):
        m.import_report(np.arange(3.0).__dlpack__(max_version=(1, 0)), dl_device=(1, 0), stream=5)
    with pytest.raises(RuntimeError):
        m.import_report(DropsStream(np.arange(3.0)), dl_device=(1, 0), stream=5)


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
def test_a_refused_capsule_that_only_the_importer_held_is_deleted_once(m, legacy):
    # __dlpack__ returns a fresh capsule and keeps no reference: the importer holds the only
    # one. It refuses the tensor without taking it, and the capsule's destructor deletes it,
    # exactly once, when the importer lets the capsule go.
    producer = CountingProducer()

    class Fresh:
        def __dlpack__(self, **kwargs):
            return producer.capsule(legacy=legacy, bits=13)[0]

    for route in (lambda: m.import_report(Fresh()), lambda: m.import_report(Fresh(), copy=True)):
        with pytest.raises(BufferError, match="bits = 13"):
            route()
    gc.collect()
    assert sorted(producer.deleted) == [1, 2] and producer.alive == {}
    assert len(producer.by_destructor) == 2, "left to the capsule, which deleted it"


def test_a_request_refused_for_a_capsule_only_the_importer_held_deletes_it_once(m):
    producer = CountingProducer()

    class Fresh:
        def __dlpack__(self, **kwargs):
            return producer.capsule()[0]  # takes the keywords and ignores them

    with pytest.raises(BufferError):
        m.import_report(Fresh(), dl_device=(2, 0))
    with pytest.raises(m.DLPackStreamError):
        m.import_report(Fresh(), stream=5)
    gc.collect()
    assert sorted(producer.deleted) == [1, 2] and producer.alive == {}
    assert len(producer.by_destructor) == 2, "left to the capsule, which deleted it"
