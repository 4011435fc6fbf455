"""tvm-ffi (apache-tvm-ffi) both ways, through __dlpack__ and through the C exchange API."""

import numpy as np
import pytest
import tvm_ffi
from conftest import NUMPY_DTYPES


class DLPackOnly:
    """Hides the C exchange API: only __dlpack__ and __dlpack_device__."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def rust_tensor(m, read_only=False):
    values = np.arange(6, dtype=np.float32)
    return m.from_bytes(values.tobytes(), NUMPY_DTYPES["float32"], [2, 3], read_only=read_only)


def test_tvm_takes_rust_tensors_through_dlpack(m):
    t = rust_tensor(m)
    tv = tvm_ffi.from_dlpack(DLPackOnly(t))
    assert tv.shape == (2, 3)
    got = m.import_report(tv)
    assert got["data_ptr"] == t.data_ptr
    np.testing.assert_array_equal(np.from_dlpack(tv), np.arange(6).reshape(2, 3))


def test_tvm_takes_rust_tensors_through_the_c_exchange_api(m):
    # tvm-ffi would ask __dlpack__ for a legacy capsule, which a read-only tensor cannot be:
    # that it succeeds shows it went through the C exchange API (a versioned export).
    t = rust_tensor(m, read_only=True)
    with pytest.raises(BufferError):
        tvm_ffi.from_dlpack(DLPackOnly(t))
    tv = tvm_ffi.from_dlpack(t)
    got = m.import_report(tv)
    assert got["data_ptr"] == t.data_ptr  # (tvm-ffi drops READ_ONLY when it re-exports)


def test_rust_importer_takes_tvm_tensors(m):
    a = np.arange(12, dtype=np.int16).reshape(3, 4)
    tv = tvm_ffi.from_dlpack(a)
    got = m.import_report(tv)
    assert got["dtype"] == NUMPY_DTYPES["int16"]
    assert got["shape"] == [3, 4]
    assert got["data_ptr"] == a.ctypes.data
    assert got["version"][0] == 1
    assert m.import_values(tv) == a.ravel().tolist()


def test_rust_importer_uses_a_producers_c_exchange_api(m):
    looked_up = []

    class Spy(tvm_ffi.core.DLTensorTestWrapper):
        # Sees every lookup of `__dlpack__`, the Rust importer's included, without overriding
        # it (an override would send the importer to it: see the next test).
        def __getattribute__(self, name):
            if name == "__dlpack__":
                looked_up.append(name)
            return super().__getattribute__(name)

    a = np.arange(5, dtype=np.float64)
    w = Spy(tvm_ffi.from_dlpack(a))
    assert m.exchange_version(type(w)) == (1, 3)
    w.__dlpack__
    assert looked_up == ["__dlpack__"], "the spy sees lookups"
    looked_up.clear()
    got = m.import_report(w)
    assert got["data_ptr"] == a.ctypes.data
    assert m.import_values(w) == a.tolist()
    assert looked_up == [], "the C exchange API was not used"


def test_a_subclass_overriding_dlpack_is_asked_through_it_not_its_bases_table(m):
    calls = []

    class Overriding(tvm_ffi.core.DLTensorTestWrapper):
        def __dlpack__(self, **kwargs):
            calls.append(kwargs)
            return super().__dlpack__(**kwargs)

    a = np.arange(5, dtype=np.float64)
    w = Overriding(tvm_ffi.from_dlpack(a))
    assert m.exchange_version(type(w)) == (1, 3), "the table is there"
    assert m.import_report(w)["data_ptr"] == a.ctypes.data
    assert len(calls) == 1, "the override was asked"
