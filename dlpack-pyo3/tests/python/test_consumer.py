"""The Rust importer's consumer sequence: max_version first, the retry for old producers, and
dl_device / copy served locally when the producer could not see them."""

import numpy as np
import pytest


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
