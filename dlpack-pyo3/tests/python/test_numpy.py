"""NumPy both ways: every dtype DLPack can express, every layout, zero-copy where expected."""

import numpy as np
import pytest
from conftest import NUMPY_DTYPES, base_array
from layouts import NUMPY_LAYOUTS, RUST_LAYOUTS, element_strides, expected_view


@pytest.mark.parametrize("layout", NUMPY_LAYOUTS)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_rust_importer_receives_numpy_arrays_without_a_copy(m, dtype, layout):
    a = NUMPY_LAYOUTS[layout](base_array(dtype))
    got = m.import_report(a)
    assert got["device"] == (1, 0)
    assert got["dtype"] == NUMPY_DTYPES[dtype]
    assert got["shape"] == list(a.shape)
    if a.size > 1:
        assert got["strides"] == element_strides(a)
    assert got["read_only"] == (not a.flags.writeable)
    assert not got["legacy"] and got["version"][0] == 1
    if a.size:
        assert got["data_ptr"] == a.ctypes.data
    # The values, read in Rust through typed views, in row-major order.
    assert m.import_values(a) == a.ravel(order="C").tolist()


@pytest.mark.parametrize("layout", RUST_LAYOUTS)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_imports_rust_tensors_without_a_copy(m, dtype, layout):
    shape, strides, offset, read_only = RUST_LAYOUTS[layout]
    base = base_array(dtype)
    t = m.from_bytes(
        base.tobytes(),
        NUMPY_DTYPES[dtype],
        list(shape),
        strides=None if strides is None else list(strides),
        byte_offset=offset * base.itemsize,
        read_only=read_only,
    )
    a = np.from_dlpack(t)
    expected = expected_view(base, shape, strides, offset)
    assert a.dtype == np.dtype(dtype)
    assert a.shape == shape
    np.testing.assert_array_equal(a, expected)
    assert a.flags.writeable == (not read_only)
    if a.size:
        assert a.ctypes.data == t.data_ptr
        if a.size > 1:
            assert element_strides(a) == element_strides(expected)


@pytest.mark.parametrize("layout", RUST_LAYOUTS)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_copy_true_gives_numpy_a_fresh_compact_copy(m, dtype, layout):
    shape, strides, offset, read_only = RUST_LAYOUTS[layout]
    base = base_array(dtype)
    t = m.from_bytes(
        base.tobytes(),
        NUMPY_DTYPES[dtype],
        list(shape),
        strides=None if strides is None else list(strides),
        byte_offset=offset * base.itemsize,
        read_only=read_only,
    )
    a = np.from_dlpack(t, copy=True)
    np.testing.assert_array_equal(a, expected_view(base, shape, strides, offset))
    assert a.flags.writeable and a.flags.c_contiguous
    if a.size:
        assert a.ctypes.data != t.data_ptr
    report = m.import_report(t, copy=True)
    assert report["is_copied"] and not report["read_only"]


def test_numpy_writes_are_seen_by_the_rust_tensor(m):
    t = m.from_bytes(np.zeros(4, np.int32).tobytes(), NUMPY_DTYPES["int32"], [4])
    a = np.from_dlpack(t)
    a[2] = 7
    assert m.import_values(t) == [0, 0, 7, 0]
    assert np.from_dlpack(t)[2] == 7


def test_rust_tensor_roundtrips_through_the_rust_importer(m):
    """NumPy -> Rust -> NumPy: the same memory all the way, read-only after the Rust import."""
    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    t = m.reexport(a)
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(b, a)
    assert not b.flags.writeable


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: np.arange(3, dtype=np.longdouble), id="longdouble"),
        pytest.param(lambda: np.arange(3, dtype=">i4"), id="byte-swapped"),
        pytest.param(lambda: np.arange(3, dtype=np.dtype("<i4").newbyteorder()), id="swapped-le"),
    ],
)
def test_unexpressible_numpy_arrays_are_refused_with_numpys_error(m, make):
    with pytest.raises(Exception) as numpy_error:
        np.from_dlpack(make())
    assert numpy_error.type is BufferError
    with pytest.raises(BufferError):
        m.import_report(make())


def test_dlpack_device_is_the_cpu(m):
    t = m.from_bytes(b"\0" * 8, NUMPY_DTYPES["float64"], [1])
    assert t.__dlpack_device__() == (1, 0)
    assert np.from_dlpack(t, device="cpu").shape == (1,)


def test_max_version_picks_the_struct(m):
    t = m.from_bytes(b"\0" * 8, NUMPY_DTYPES["float64"], [1])
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 0)))
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 3)))
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(2, 0)))
    assert '"dltensor"' in repr(t.__dlpack__())
    assert '"dltensor"' in repr(t.__dlpack__(max_version=(0, 8)))
    # A legacy capsule is what old consumers get; NumPy reads it as well.
    assert m.import_report(t.__dlpack__())["legacy"]


def test_read_only_rust_tensor_is_refused_as_a_legacy_capsule_like_numpy(m):
    t = m.from_bytes(b"\0" * 8, NUMPY_DTYPES["float64"], [1], read_only=True)
    a = np.zeros(1)
    a.flags.writeable = False
    with pytest.raises(BufferError):
        a.__dlpack__()
    with pytest.raises(BufferError):
        t.__dlpack__()
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 0)))


def test_the_safe_importer_makes_shared_memory_read_only(m):
    a = np.arange(4.0)
    assert m.import_report(a)["read_only"] is False  # what NumPy said
    assert m.import_safe_report(a)["read_only"] is True  # what safe Rust holds
    t = m.from_bytes(np.arange(4.0).tobytes(), NUMPY_DTYPES["float64"], [4])
    assert m.import_safe_report(t)["read_only"] is True
    assert m.import_safe_report(t.__dlpack__())["read_only"] is True
