"""candle CUDA tensors to PyTorch and CuPy and back, through dlpack-candle's `cuda` feature.

Needs the test module built with its `candle-cuda` feature (scripts/gpu-kit builds it that
way); runs only with DLPACK_TEST_CUDA=1, like the rest of this folder.
"""

import pytest

VALUES = [float(i) for i in range(12)]


@pytest.fixture(scope="module")
def c(m, gpu):
    if not hasattr(m, "candle_cuda_import"):
        pytest.fail("DLPACK_TEST_CUDA=1 but dlpack_testmod was built without `candle-cuda`")
    return m


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


def test_a_candle_export_comes_back_without_a_copy(c):
    lent, address = c.candle_cuda_f32(VALUES, [3, 4], "none")
    r = c.candle_cuda_import(lent, "never")
    assert r["transfer"] == "Reclaimed"
    assert r["address"] == address
    assert r["values"] == VALUES


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


def test_cupy_into_candle_is_a_device_copy(c, cupy):
    a = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    r = c.candle_cuda_import(a, "if_needed")
    assert r["transfer"] == "Copied(NotOwned)"
    assert r["values"] == VALUES
    # A reversed view: negative strides.
    r = c.candle_cuda_import(a[::-1, ::-1], "if_needed")
    assert r["transfer"] == "Copied(Layout)"
    assert r["values"] == VALUES[::-1]


def test_candle_sees_torchs_pending_write(c, torch):
    """PyTorch's last write is still queued (behind half a second of GPU time) when candle
    imports: the handshake orders candle's copy after it, so candle reads 3.0, not 1.0."""
    warm = torch.ones(1 << 22, dtype=torch.float32, device="cuda")
    torch.cuda._sleep(1)
    warm.add_(2.0)
    torch.cuda.synchronize()
    t = torch.ones(1 << 22, dtype=torch.float32, device="cuda")
    torch.cuda._sleep(1 << 30)
    t.add_(2.0)
    assert not torch.cuda.current_stream().query(), "the write finished before the import"
    r = c.candle_cuda_import(t, "if_needed")
    assert set(r["values"]) == {3.0}


SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


def test_candle_sees_cupys_pending_write(c, cupy):
    """As above, with CuPy: a spinning kernel holds CuPy's current stream while the last write
    waits behind it."""
    spin = cupy.RawKernel(SPIN, "spin")
    a = cupy.ones(1 << 22, dtype=cupy.float32)
    spin((1,), (1,), (cupy.int64(1),))
    a += 2.0
    cupy.cuda.Device().synchronize()
    a = cupy.ones(1 << 22, dtype=cupy.float32)
    spin((1,), (1,), (cupy.int64(1 << 30),))
    a += 2.0
    assert not cupy.cuda.get_current_stream().done, "the write finished before the import"
    r = c.candle_cuda_import(a, "if_needed")
    assert set(r["values"]) == {3.0}
