"""The buffer protocol (PEP 3118) and __array__ of Rust tensors: memoryview, bytes and NumPy
without __dlpack__, sharing the memory; the request flags; the refusals, with their reasons."""

import gc

import numpy as np
import pytest
from conftest import NUMPY_DTYPES, base_array
from layouts import RUST_LAYOUTS, expected_view

# PEP 3118 request flags (CPython's object.h).
SIMPLE = 0
WRITABLE = 0x1
FORMAT = 0x4
ND = 0x8
STRIDES = 0x10 | ND
C_CONTIGUOUS = 0x20 | STRIDES
F_CONTIGUOUS = 0x40 | STRIDES
ANY_CONTIGUOUS = 0x80 | STRIDES
INDIRECT = 0x100 | STRIDES
FULL_RO = INDIRECT | FORMAT
FULL = FULL_RO | WRITABLE

FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
    "float16": "e",
    "float32": "f",
    "float64": "d",
    "complex64": "Zf",
    "complex128": "Zd",
}

F32 = NUMPY_DTYPES["float32"]
CUDA, CUDA_HOST, CUDA_MANAGED, ONEAPI = 2, 3, 13, 14


def tensor(m, dtype="float32", layout="C", **kwargs):
    """A Rust tensor of one of RUST_LAYOUTS over base_array(dtype), and its expected view."""
    shape, strides, offset, read_only = RUST_LAYOUTS[layout]
    base = base_array(dtype)
    t = m.from_bytes(
        base.tobytes(),
        NUMPY_DTYPES[dtype],
        list(shape),
        strides=None if strides is None else list(strides),
        byte_offset=offset * base.itemsize,
        read_only=kwargs.pop("read_only", read_only),
        **kwargs,
    )
    return t, expected_view(base, shape, strides, offset)


@pytest.fixture(params=["DLPackTensor", "ExporterTensor"])
def wrap(request, m):
    """The class under test: DLPackTensor itself, or the test module's own PyExporter class,
    which shares a DLPackTensor's exporter and calls dlpack-pyo3's generic functions."""
    if request.param == "DLPackTensor":
        return lambda t: t
    return m.ExporterTensor


@pytest.mark.parametrize("layout", RUST_LAYOUTS)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_memoryview_describes_the_tensor_in_place(m, wrap, dtype, layout):
    t, expected = tensor(m, dtype, layout)
    obj = wrap(t)
    with memoryview(obj) as mv:
        assert mv.obj is obj
        assert mv.format == FORMATS[dtype]
        assert mv.itemsize == np.dtype(dtype).itemsize
        assert mv.ndim == expected.ndim
        assert mv.shape == expected.shape
        assert mv.strides == expected.strides
        assert mv.readonly == RUST_LAYOUTS[layout][3]
        assert mv.nbytes == expected.nbytes
        assert mv.c_contiguous == expected.flags.c_contiguous
        assert mv.f_contiguous == expected.flags.f_contiguous
        # NumPy reads the memoryview in place, with the values of the layout.
        a = np.asarray(mv)
        assert a.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a, expected)
        if expected.size:
            assert a.__array_interface__["data"][0] == t.data_ptr
        # bytes() of the buffer: the elements in row-major order, whatever the strides.
        assert bytes(mv) == expected.tobytes()
    assert bytes(obj) == expected.tobytes()


def test_np_asarray_shares_the_memory_and_keeps_the_tensor_alive(m, wrap):
    t, expected = tensor(m, "float64", "negative")
    obj = wrap(t)
    address = t.data_ptr
    a = np.asarray(obj)
    assert a.__array_interface__["data"][0] == address
    assert a.flags.writeable and not a.flags.owndata
    np.testing.assert_array_equal(a, expected)
    gc.collect()
    made, freed = m.counters()
    del t, obj
    gc.collect()
    assert m.counters() == (made, freed), "the array's buffer must keep the tensor alive"
    np.testing.assert_array_equal(a, expected)
    del a
    gc.collect()
    assert m.counters() == (made, freed + 1)


def test_a_memoryview_keeps_the_tensor_alive_until_released(m):
    t, expected = tensor(m, "int16", "steps")
    mv = memoryview(t)
    gc.collect()
    made, freed = m.counters()
    del t
    gc.collect()
    assert m.counters() == (made, freed)
    assert mv.tobytes() == expected.tobytes()
    mv.release()
    assert m.counters() == (made, freed + 1)


def test_a_writable_buffer_writes_through(m, wrap):
    t, _ = tensor(m, "float32", "steps")
    obj = wrap(t)
    with memoryview(obj) as mv:
        assert not mv.readonly
        mv[1, 0] = 42.5
    a = np.asarray(obj)
    a[0, 1] = -1.0
    shared = np.from_dlpack(t)
    assert shared[1, 0] == 42.5 and shared[0, 1] == -1.0
    info = m.buffer_info(obj, FULL)
    assert not info["readonly"]


def test_a_read_only_tensor_gives_read_only_buffers_only(m, wrap):
    t, expected = tensor(m, "uint8", "read-only")
    obj = wrap(t)
    with memoryview(obj) as mv:
        assert mv.readonly
        with pytest.raises(TypeError):
            mv[0, 0] = 1
    a = np.asarray(obj)
    assert not a.flags.writeable
    np.testing.assert_array_equal(a, expected)
    assert m.buffer_info(obj, FULL_RO)["readonly"]
    for flags in (WRITABLE, FULL, STRIDES | WRITABLE):
        with pytest.raises(BufferError, match="read-only.*PyBUF_WRITABLE"):
            m.buffer_info(obj, flags)


def test_request_flags_are_honoured(m, wrap):
    c, expected = tensor(m, "int32", "C")
    c = wrap(c)
    nbytes = expected.nbytes
    # PyBUF_SIMPLE: bytes only, no format, shape or strides (itemsize stays the item's).
    info = m.buffer_info(c, SIMPLE)
    assert (info["ndim"], info["shape"], info["strides"], info["format"]) == (1, None, None, None)
    assert (info["len"], info["itemsize"], info["obj_is_object"]) == (nbytes, 4, True)
    assert info["suboffsets_null"]
    # PyBUF_FORMAT alone: the format, still no shape.
    assert m.buffer_info(c, FORMAT)["format"] == "i"
    # PyBUF_ND: the shape, no strides (C-contiguous implied).
    info = m.buffer_info(c, ND)
    assert (info["ndim"], info["shape"], info["strides"]) == (3, [2, 3, 4], None)
    assert info["c_contiguous"]
    # PyBUF_STRIDES and the contiguity requests a C-contiguous tensor satisfies.
    for flags in (STRIDES, C_CONTIGUOUS, ANY_CONTIGUOUS, FULL_RO):
        info = m.buffer_info(c, flags)
        assert (info["shape"], info["strides"]) == ([2, 3, 4], [48, 16, 4])
    with pytest.raises(BufferError, match="PyBUF_F_CONTIGUOUS"):
        m.buffer_info(c, F_CONTIGUOUS)

    f, _ = tensor(m, "int32", "F")
    f = wrap(f)
    info = m.buffer_info(f, F_CONTIGUOUS)
    assert info["strides"] == [4, 8, 24] and info["f_contiguous"] and not info["c_contiguous"]
    assert m.buffer_info(f, ANY_CONTIGUOUS)["strides"] == [4, 8, 24]
    for flags, request in (
        (C_CONTIGUOUS, "PyBUF_C_CONTIGUOUS"),
        (ND, "no PyBUF_STRIDES"),
        (SIMPLE, "no PyBUF_STRIDES"),
    ):
        with pytest.raises(BufferError, match=request):
            m.buffer_info(f, flags)

    steps, _ = tensor(m, "int32", "steps")
    steps = wrap(steps)
    assert m.buffer_info(steps, STRIDES)["strides"] == [32, 12]
    with pytest.raises(BufferError, match="PyBUF_ANY_CONTIGUOUS"):
        m.buffer_info(steps, ANY_CONTIGUOUS)


def test_zero_d_and_empty_tensors(m, wrap):
    scalar, expected = tensor(m, "complex128", "0-d")
    scalar = wrap(scalar)
    info = m.buffer_info(scalar, FULL_RO)
    assert (info["ndim"], info["shape"], info["strides"]) == (0, None, None)
    assert (info["len"], info["itemsize"], info["format"]) == (16, 16, "Zd")
    assert np.asarray(scalar) == expected
    assert np.asarray(scalar).shape == ()

    empty, _ = tensor(m, "float16", "size-0")
    empty = wrap(empty)
    info = m.buffer_info(empty, FULL_RO)
    assert (info["shape"], info["len"]) == ([0, 3], 0)
    assert info["c_contiguous"] and info["f_contiguous"]
    # An empty buffer is contiguous both ways, whatever its strides say.
    assert m.buffer_info(empty, F_CONTIGUOUS)["len"] == 0
    assert np.asarray(empty).shape == (0, 3)
    assert bytes(empty) == b""


@pytest.mark.parametrize("hooks", [False, True])
@pytest.mark.parametrize(
    "device, name", [(CUDA, "cuda:0"), (ONEAPI, "oneapi:0"), (10, "rocm:0")]
)
def test_device_memory_is_refused_naming_the_device(m, wrap, device, name, hooks):
    t, _ = tensor(m, "float32", "C", device=(device, 0), hooks=hooks)
    obj = wrap(t)
    with pytest.raises(BufferError, match=f"on {name} has no buffer.*host reads in place"):
        memoryview(obj)
    with pytest.raises(BufferError, match=name):
        m.buffer_info(obj, SIMPLE)


def test_pinned_and_managed_memory_is_read_in_place_after_the_device_wait(m, wrap):
    for device, name in ((CUDA_HOST, "cuda_host:0"), (CUDA_MANAGED, "cuda_managed:0")):
        t, expected = tensor(m, "float32", "C", device=(device, 0), hooks=True)
        obj = wrap(t)
        m.hook_log()
        with memoryview(obj) as mv:
            assert np.asarray(mv).__array_interface__["data"][0] == t.data_ptr
            np.testing.assert_array_equal(np.asarray(mv), expected)
        assert m.hook_log() == [f"wait_host {name}"]
        # Without hooks, nothing can wait for the device: refused, as __dlpack__ refuses it.
        bare, _ = tensor(m, "float32", "C", device=(device, 0))
        with pytest.raises(BufferError, match=f"no device hook handles {name}"):
            memoryview(wrap(bare))


@pytest.mark.parametrize(
    "dtype, shape, name, why",
    [
        ((4, 16, 1), [3], "bfloat16", "no character"),
        ((10, 8, 1), [3], "float8_e4m3fn", "no character"),
        ((12, 8, 1), [3], "float8_e5m2", "no character"),
        ((5, 32, 1), [3], "complex32", "no character"),
        ((2, 32, 4), [3], "float32x4", "lanes > 1"),
        ((17, 4, 1), [4], "float4_e2m1fn", "sub-byte"),
        ((15, 6, 1), [4], "float6_e2m3fn", "sub-byte"),
    ],
)
def test_dtypes_pep_3118_cannot_express_are_refused_naming_them(m, wrap, dtype, shape, name, why):
    obj = wrap(m.from_bytes(bytes(64), dtype, shape))
    with pytest.raises(BufferError, match=f"no format for dtype {name}, .*{why}"):
        memoryview(obj)
    with pytest.raises(BufferError, match=name):
        bytes(obj)


def test_dunder_array_with_each_copy_value(m, wrap):
    t, expected = tensor(m, "float32", "negative")
    obj = wrap(t)
    address = t.data_ptr

    def data(a):
        return a.__array_interface__["data"][0]

    for copy in (None, False):
        a = obj.__array__(copy=copy)
        assert data(a) == address and a.dtype == np.float32
        np.testing.assert_array_equal(a, expected)
    fresh = obj.__array__(copy=True)
    assert data(fresh) != address
    np.testing.assert_array_equal(fresh, expected)
    fresh[0, 0] = 99.0
    assert np.from_dlpack(t)[0, 0] == expected[0, 0]
    # NumPy calls __array__ with the same meanings.
    assert data(np.asarray(obj, copy=False)) == address
    assert data(np.array(obj, copy=True)) != address


def test_dunder_array_with_a_dtype(m, wrap):
    t, expected = tensor(m, "int16", "steps")
    obj = wrap(t)
    address = t.data_ptr
    wider = obj.__array__(dtype="float64")
    assert wider.dtype == np.float64
    np.testing.assert_array_equal(wider, expected.astype(np.float64))
    assert obj.__array__(dtype=np.float64, copy=True).dtype == np.float64
    with pytest.raises(ValueError, match="copy=False.*int16.*a conversion is a copy"):
        obj.__array__(dtype="float64", copy=False)
    # The tensor's own dtype: no conversion, so no copy unless asked for.
    same = obj.__array__(dtype="int16", copy=False)
    assert same.__array_interface__["data"][0] == address
    same = obj.__array__(dtype="<i2")
    assert same.__array_interface__["data"][0] == address
    copied = obj.__array__(dtype="int16", copy=True)
    assert copied.__array_interface__["data"][0] != address
    np.testing.assert_array_equal(copied, expected)
    with pytest.raises(TypeError):
        obj.__array__(dtype="not a dtype")


def test_dunder_array_copies_device_memory_only_when_allowed(m, wrap):
    t, expected = tensor(m, "float64", "C", device=(CUDA, 0), hooks=True)
    obj = wrap(t)
    m.hook_log()
    a = obj.__array__()
    np.testing.assert_array_equal(a, expected)
    assert any(entry.startswith("copy_to_host cuda:0") for entry in m.hook_log())
    # np.asarray: the buffer is refused (device memory), so NumPy asks __array__.
    np.testing.assert_array_equal(np.asarray(obj), expected)
    with pytest.raises(ValueError, match="copy=False.*cannot be shared without a copy") as e:
        obj.__array__(copy=False)
    assert isinstance(e.value.__cause__, BufferError)
    with pytest.raises(ValueError):
        np.asarray(obj, copy=False)
    assert obj.__array__(dtype="float32").dtype == np.float32


def test_dunder_array_of_a_read_only_tensor_is_read_only(m, wrap):
    t, expected = tensor(m, "bool", "read-only")
    a = wrap(t).__array__()
    assert not a.flags.writeable
    np.testing.assert_array_equal(a, expected)
    assert a.__array_interface__["data"][0] == t.data_ptr


def test_buffers_and_refusals_leave_nothing_behind(m, wrap):
    t, _ = tensor(m, "float32", "F")
    obj = wrap(t)
    device = wrap(tensor(m, "float32", "C", device=(CUDA, 0))[0])
    bf16 = wrap(m.from_bytes(bytes(8), (4, 16, 1), [4]))
    gc.collect()
    made, freed = m.counters()
    for _ in range(2000):
        with memoryview(obj) as mv:
            mv.tobytes()
        m.buffer_info(obj, STRIDES)
        for target, flags in ((obj, C_CONTIGUOUS), (device, FULL_RO), (bf16, FULL_RO)):
            with pytest.raises(BufferError):
                m.buffer_info(target, flags)
    del obj, t, device, bf16, target
    gc.collect()
    made_now, freed_now = m.counters()
    assert made_now == made
    assert freed_now - freed == 3, "every tensor is freed once its buffers are released"
