"""candle CUDA tensors to PyTorch and CuPy and back, through dlpack-candle's `cuda` feature.

Needs the test module built with its `candle-cuda` feature, which needs a CUDA toolkit to
build: scripts/gpu-kit builds it that way and sets DLPACK_TEST_CANDLE_CUDA=1. Runs only with
DLPACK_TEST_CUDA=1, like the rest of this folder; without DLPACK_TEST_CANDLE_CUDA=1 (the test
command on a GPU machine, whose module has no candle), skipped with the reason printed.
"""

import ctypes
import os

import pytest

VALUES = [float(i) for i in range(12)]


@pytest.fixture(scope="module")
def c(m, gpu):
    if hasattr(m, "candle_cuda_import"):
        return m
    if os.environ.get("DLPACK_TEST_CANDLE_CUDA") == "1":
        pytest.fail("DLPACK_TEST_CANDLE_CUDA=1 but dlpack_testmod was built without `candle-cuda`")
    pytest.skip(
        "candle on CUDA did not run: dlpack_testmod was built without `candle-cuda` "
        "(scripts/gpu-kit builds it and sets DLPACK_TEST_CANDLE_CUDA=1)"
    )


# (view, expected shape, expected strides in elements, expected values row-major), over the
# 3x4 tensor 0..12: the tensor itself, transposed, and rows 1.. (a start offset).
VIEWS = [
    ("none", [3, 4], (4, 1), VALUES),
    ("t", [4, 3], (1, 4), [float(r + 4 * k) for r in range(4) for k in range(3)]),
    ("narrow", [2, 4], (4, 1), VALUES[4:]),
]


@pytest.mark.parametrize("view,shape,strides,values", VIEWS)
def test_candle_into_torch_without_a_copy(c, torch, view, shape, strides, values):
    lent, address = c.candle_cuda_f32(VALUES, [3, 4], view)
    t = torch.from_dlpack(lent)
    assert t.device.type == "cuda"
    assert t.data_ptr() == address, "candle's own device memory"
    assert (list(t.shape), t.stride()) == (shape, strides)
    assert t.cpu().flatten().tolist() == values


@pytest.mark.parametrize("view,shape,strides,values", VIEWS)
def test_candle_into_cupy_without_a_copy(c, cupy, view, shape, strides, values):
    lent, address = c.candle_cuda_f32(VALUES, [3, 4], view)
    a = cupy.from_dlpack(lent)
    assert a.data.ptr == address
    assert list(a.shape) == shape
    assert tuple(s // 4 for s in a.strides) == strides
    assert a.get().flatten().tolist() == values


def test_a_candle_export_lent_to_python_comes_back_as_a_device_copy(c, torch):
    """The Python object keeps the candle tensor it lends and may lend it again, so an import
    cannot take the memory over: candle gets a copy, and "never" is refused. (In Rust, the
    export itself comes back as the same tensor: Transfer::Reclaimed.)"""
    lent, address = c.candle_cuda_f32(VALUES, [3, 4], "none")
    with pytest.raises(BufferError, match="copy"):
        c.candle_cuda_import(lent, "never")
    r = c.candle_cuda_import(lent, "if_needed")
    assert r["transfer"] == "Copied(NotOwned)"
    assert r["address"] != address
    assert (r["shape"], r["values"]) == ([3, 4], VALUES)
    # The lent tensor is untouched and still lends its own memory.
    t = torch.from_dlpack(lent)
    assert t.data_ptr() == address
    assert t.cpu().flatten().tolist() == VALUES


def test_torch_into_candle_is_a_device_copy(c, torch):
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    r = c.candle_cuda_import(t, "if_needed")
    assert r["transfer"] == "Copied(NotOwned)"
    assert r["address"] != t.data_ptr()
    assert (r["shape"], r["values"]) == ([3, 4], VALUES)
    # A transposed view is gathered on the device, in row-major order.
    r = c.candle_cuda_import(t.T, "if_needed")
    assert r["transfer"] == "Copied(Layout)"
    assert (r["shape"], r["values"]) == ([4, 3], t.T.contiguous().cpu().flatten().tolist())
    # Under "never" the copy is refused and the torch tensor is untouched.
    with pytest.raises(Exception, match="copy"):
        c.candle_cuda_import(t, "never")
    assert t.cpu().flatten().tolist() == VALUES


def _capsule_strides(obj):
    """The strides `obj.__dlpack__(max_version=(1, 0))` writes into its capsule, read with
    ctypes from the DLManagedTensorVersioned (or, for an older producer, the DLManagedTensor)
    it points to; the capsule, not consumed, deletes the tensor when dropped."""
    capsule = obj.__dlpack__(max_version=(1, 0))
    ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
    ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
    ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
    ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    name = ctypes.pythonapi.PyCapsule_GetName(capsule)
    base = ctypes.pythonapi.PyCapsule_GetPointer(capsule, name)
    # DLTensor: data (8 bytes), device (8), ndim (4), dtype (4), shape (8), strides (8). In the
    # versioned struct it follows version (8), manager_ctx (8), deleter (8) and flags (8).
    tensor = base + (32 if name == b"dltensor_versioned" else 0)
    ndim = ctypes.c_int32.from_address(tensor + 16).value
    strides = ctypes.c_void_p.from_address(tensor + 32).value
    return [ctypes.c_int64.from_address(strides + 8 * i).value for i in range(ndim)]


def test_cupy_into_candle_is_a_device_copy(c, cupy):
    a = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    r = c.candle_cuda_import(a, "if_needed")
    assert r["transfer"] == "Copied(NotOwned)"
    assert r["values"] == VALUES
    # A reversed view: negative strides.
    flipped = a[::-1, ::-1]
    strides = _capsule_strides(flipped)
    if strides == [-4, -1]:
        r = c.candle_cuda_import(flipped, "if_needed")
        assert r["transfer"] == "Copied(Layout)"
        assert r["values"] == VALUES[::-1]
    else:
        # CuPy before cupy/cupy#10228 divides negative byte strides by an unsigned itemsize
        # (cupy/cupy#10172; 14.2.0 does): -16 and -4 bytes become 2**62 - 4 and 2**62 - 1
        # elements. Such a tensor claims memory far past its allocation and must be refused,
        # not read.
        assert strides == [2**62 - 4, 2**62 - 1], f"CuPy exported strides {strides}"
        with pytest.raises(BufferError, match="overflow"):
            c.candle_cuda_import(flipped, "if_needed")
    assert a.get().flatten().tolist() == VALUES


def test_candle_sees_torchs_pending_write(c, torch):
    """PyTorch's last write is still queued (behind half a second of GPU time) on a stream of
    its own, current, when candle imports: the handshake orders candle's copy after it, so
    candle reads 3.0, not 1.0. (A stream of PyTorch's pool does not synchronise with candle's
    per-thread stream by itself, as the legacy default stream would.)"""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        # Once before, so that every kernel is loaded (loading waits for queued work).
        warm = torch.ones(1 << 22, dtype=torch.float32, device="cuda")
        torch.cuda._sleep(1)
        warm.add_(2.0)
        c.candle_cuda_import(warm, "if_needed")
        side.synchronize()
        t = torch.ones(1 << 22, dtype=torch.float32, device="cuda")
        torch.cuda._sleep(1 << 30)
        t.add_(2.0)
        assert not side.query(), "the write finished before the import"
        r = c.candle_cuda_import(t, "if_needed")
    assert set(r["values"]) == {3.0}


SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


def test_candle_sees_cupys_pending_write(c, cupy):
    """As above, with CuPy: a spinning kernel holds a non-blocking stream of CuPy's, current,
    while the last write waits behind it."""
    spin = cupy.RawKernel(SPIN, "spin")
    with cupy.cuda.Stream(non_blocking=True) as side:
        a = cupy.ones(1 << 22, dtype=cupy.float32)
        spin((1,), (1,), (cupy.int64(1),))
        a += 2.0
        c.candle_cuda_import(a, "if_needed")
        side.synchronize()
        a = cupy.ones(1 << 22, dtype=cupy.float32)
        spin((1,), (1,), (cupy.int64(1 << 30),))
        a += 2.0
        assert not side.done, "the write finished before the import"
        r = c.candle_cuda_import(a, "if_needed")
    assert set(r["values"]) == {3.0}
