"""The DLPack 1.3 C exchange API offered on dlpack_pyo3.DLPackTensor."""

import numpy as np
import pytest
from conftest import NUMPY_DTYPES


def rust_tensor(m):
    return m.from_bytes(
        np.arange(12, dtype=np.int32).tobytes(), NUMPY_DTYPES["int32"], [3, 4], strides=[1, 3]
    )


def test_the_type_offers_a_versioned_table(m):
    ty = m.DLPackTensor
    assert repr(ty.__dlpack_c_exchange_api__).startswith('<capsule object "dlpack_exchange_api"')
    assert m.exchange_version(ty) == (1, 3)
    assert m.exchange_version(np.ndarray) is None


def test_from_and_to_py_object_share_the_memory(m):
    t = rust_tensor(m)
    u = m.exchange_roundtrip(t)
    assert type(u) is m.DLPackTensor and u is not t
    assert u.data_ptr == t.data_ptr and u.shape == [3, 4] and u.strides == [1, 3]
    np.testing.assert_array_equal(np.from_dlpack(u), np.from_dlpack(t))


def test_from_py_object_refuses_other_types(m):
    class Impostor:
        __dlpack_c_exchange_api__ = m.DLPackTensor.__dlpack_c_exchange_api__

    with pytest.raises(TypeError, match="DLPackTensor"):
        m.exchange_roundtrip(Impostor())


def test_the_allocator_makes_zeroed_host_tensors(m):
    u = m.exchange_allocate(m.DLPackTensor, [2, 5], NUMPY_DTYPES["float64"])
    a = np.from_dlpack(u)
    assert a.shape == (2, 5) and a.dtype == np.float64 and not a.any()
    a[1, 2] = 3.0
    assert np.from_dlpack(u)[1, 2] == 3.0
    scalar = np.from_dlpack(m.exchange_allocate(m.DLPackTensor, [], NUMPY_DTYPES["int8"]))
    assert scalar.shape == () and scalar == 0


@pytest.mark.parametrize(
    "shape, dtype, device, match",
    [
        ([2], NUMPY_DTYPES["float32"], (2, 0), "host memory only"),
        ([2, -1], NUMPY_DTYPES["float32"], (1, 0), "shape"),
        ([2], (2, 13, 1), (1, 0), "bits"),
    ],
)
def test_the_allocator_reports_errors_through_set_error(m, shape, dtype, device, match):
    with pytest.raises(BufferError, match=match):
        m.exchange_allocate(m.DLPackTensor, shape, dtype, device)


def test_dltensor_from_py_object_describes_the_tensor(m):
    t = rust_tensor(m)
    d = m.exchange_dltensor(t)
    assert d == {
        "data_ptr": t.data_ptr,
        "shape": [3, 4],
        "strides": [1, 3],
        "dtype": NUMPY_DTYPES["int32"],
        "device": (1, 0),
    }


def test_current_work_stream_is_the_default_stream(m):
    assert m.exchange_current_stream(m.DLPackTensor, (1, 0)) == 0
    assert m.exchange_current_stream(m.DLPackTensor, (2, 0)) == 0


def test_the_importer_takes_our_tensors_through_the_table(m):
    t = rust_tensor(m)
    got = m.import_report(t)
    assert got["data_ptr"] == t.data_ptr and got["version"] == (1, 3)
    assert m.import_values(t) == np.arange(12).reshape(4, 3).T.ravel().tolist()


def test_dltensor_from_py_object_refuses_a_read_only_tensor(m):
    # A plain DLTensor has no READ_ONLY flag: a C consumer would take the memory as writable.
    t = m.from_bytes(np.arange(4.0).tobytes(), NUMPY_DTYPES["float64"], [4], read_only=True)
    with pytest.raises(BufferError, match="read-only.*managed_tensor_from_py_object_no_sync"):
        m.exchange_dltensor(t)
    # The managed route carries the flag and still serves it.
    u = m.exchange_roundtrip(t)
    assert u.data_ptr == t.data_ptr
    assert not np.from_dlpack(u).flags.writeable


def test_dltensor_from_py_object_refuses_a_read_only_import(m):
    # A DLPackTensor made from the safe (read-only) import of a NumPy array.
    a = np.arange(4.0)
    with pytest.raises(BufferError, match="read-only"):
        m.exchange_dltensor(m.reexport(a))


def test_dltensor_from_py_object_refuses_a_padded_sub_byte_tensor(m):
    # Nor has it IS_SUBBYTE_TYPE_PADDED: a consumer would read one float4 per byte as packed.
    t = m.from_bytes(bytes(4), (17, 4, 1), [4], padded=True)
    with pytest.raises(BufferError, match="padded sub-byte"):
        m.exchange_dltensor(t)
    packed = m.from_bytes(bytes(2), (17, 4, 1), [4])
    assert m.exchange_dltensor(packed)["shape"] == [4]


def test_dltensor_from_py_object_refuses_before_any_device_work(m):
    t = m.from_bytes(
        np.arange(4.0).tobytes(), NUMPY_DTYPES["float64"], [4], read_only=True, device=(2, 0), hooks=True
    )
    m.hook_log()
    with pytest.raises(BufferError, match="read-only"):
        m.exchange_dltensor(t)
    assert m.hook_log() == []
