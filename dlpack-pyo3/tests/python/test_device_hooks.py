"""dl_device, copy and stream on devices, through the DeviceHooks seam (a fake device whose
"device memory" is host memory, with hooks that log their calls)."""

import numpy as np
import pytest
from conftest import NUMPY_DTYPES

EXT_DEV = 12
CUDA = 2
CUDA_HOST = 3


@pytest.fixture(autouse=True)
def empty_log(m):
    m.hook_log()
    yield
    m.hook_log()


def tensor(m, device, hooks=True, **kwargs):
    values = np.arange(6, dtype=np.float32)
    return m.from_bytes(
        values.tobytes(), NUMPY_DTYPES["float32"], [2, 3], device=(device, 0), hooks=hooks, **kwargs
    )


def test_device_memory_is_copied_to_the_host_through_the_hooks(m):
    t = tensor(m, EXT_DEV)
    assert t.__dlpack_device__() == (EXT_DEV, 0)
    a = np.from_dlpack(t, device="cpu")
    np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))
    assert a.ctypes.data != t.data_ptr
    assert m.hook_log() == ["copy_to_host ext_dev:0 24 bytes"]
    got = m.import_report(t, dl_device=(1, 0))
    assert got["device"] == (1, 0) and got["is_copied"]


def test_a_strided_device_tensor_is_copied_in_its_logical_order(m):
    values = np.arange(12, dtype=np.int16)
    t = m.from_bytes(
        values.tobytes(), NUMPY_DTYPES["int16"], [3, 2], strides=[-4, 2],
        byte_offset=8 * 2, device=(EXT_DEV, 0), hooks=True,
    )
    a = np.from_dlpack(t, device="cpu")
    np.testing.assert_array_equal(a, values[8::-4][:, None] + np.array([0, 2]))


def test_device_memory_without_hooks_is_refused(m):
    t = tensor(m, EXT_DEV, hooks=False)
    with pytest.raises(BufferError, match="no device hook"):
        np.from_dlpack(t, device="cpu")


def test_a_cuda_stream_is_made_ready_through_the_hooks(m):
    t = tensor(m, CUDA)
    capsule = t.__dlpack__(max_version=(1, 0), stream=7)
    assert "dltensor_versioned" in repr(capsule)
    assert m.hook_log() == ["make_ready cuda:0 Handle(7)"]
    t.__dlpack__(max_version=(1, 0))
    t.__dlpack__(max_version=(1, 0), stream=2)
    assert m.hook_log() == ["make_ready cuda:0 Default", "make_ready cuda:0 PerThreadDefault"]
    t.__dlpack__(max_version=(1, 0), stream=-1)
    assert m.hook_log() == []


def test_the_exchange_api_orders_a_device_tensor_before_the_default_stream(m):
    """The C exchange API's consumer waits on the stream current_work_stream names (the default
    stream), so the producer's hooks make that stream ready first, as __dlpack__() would."""
    t = tensor(m, CUDA)
    u = m.exchange_roundtrip(t)
    assert u.data_ptr == t.data_ptr
    assert m.hook_log() == ["make_ready cuda:0 Default"]
    assert m.exchange_dltensor(t)["data_ptr"] == t.data_ptr
    assert m.hook_log() == ["make_ready cuda:0 Default"]
    # Pinned memory too (which `__dlpack__()` without a stream waits for on the host).
    m.exchange_roundtrip(tensor(m, CUDA_HOST))
    assert m.hook_log() == ["make_ready cuda_host:0 Default"]
    # On the host: nothing to do.
    m.exchange_roundtrip(tensor(m, 1))
    assert m.hook_log() == []
    # A device tensor without hooks cannot be ordered before the default stream: refused, as
    # `__dlpack__()` refuses it (a consumer through the table would otherwise read it unordered).
    hookless = tensor(m, CUDA, hooks=False)
    for export in (lambda: hookless.__dlpack__(), lambda: m.exchange_roundtrip(hookless)):
        with pytest.raises(BufferError, match="no device hook handles cuda:0"):
            export()
    assert m.hook_log() == []


def test_the_importer_passes_its_stream_to_a_device_producer(m):
    t = tensor(m, CUDA)
    got = m.import_report(t, stream=9)
    assert got["device"] == (CUDA, 0)
    assert m.hook_log() == ["make_ready cuda:0 Handle(9)"]


def test_stream_zero_is_refused_on_cuda(m):
    t = tensor(m, CUDA)
    with pytest.raises(ValueError, match="ambiguous"):
        t.__dlpack__(max_version=(1, 0), stream=0)
    assert m.hook_log() == []


def test_a_cuda_tensor_to_the_cpu_waits_then_copies(m):
    t = tensor(m, CUDA)
    got = m.import_report(t, dl_device=(1, 0))
    assert got["device"] == (1, 0) and got["is_copied"]
    assert m.hook_log() == ["wait_host cuda:0", "copy_to_host cuda:0 24 bytes"]


def test_a_cpu_export_takes_no_stream(m):
    t = tensor(m, CUDA)
    with pytest.raises(ValueError, match="stream=5"):
        t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), stream=5)


def test_pinned_memory_is_relabelled_to_the_cpu_without_a_copy(m):
    t = tensor(m, CUDA_HOST)
    a = np.from_dlpack(t, device="cpu")
    assert a.ctypes.data == t.data_ptr
    np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))
    assert m.hook_log() == ["wait_host cuda_host:0"]
    b = np.from_dlpack(t, device="cpu", copy=True)
    assert b.ctypes.data != t.data_ptr
    # Host-readable: copied by the host, no device copy needed.
    assert m.hook_log() == ["wait_host cuda_host:0"]


def test_pinned_memory_without_a_stream_waits_on_the_host_for_readers_in_place(m):
    # NumPy takes pinned memory in place and passes no stream: only a host wait makes the
    # GPU's pending writes visible to it. A named stream gets the device-side ordering alone.
    t = tensor(m, CUDA_HOST)
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr
    assert m.hook_log() == ["wait_host cuda_host:0"]
    t.__dlpack__(max_version=(1, 0), stream=5)
    assert m.hook_log() == ["make_ready cuda_host:0 Handle(5)"]
    t.__dlpack__(max_version=(1, 0), stream=-1)
    assert m.hook_log() == []


def test_a_same_device_copy_of_device_memory_is_refused(m):
    t = tensor(m, CUDA)
    with pytest.raises(BufferError, match="device allocation"):
        t.__dlpack__(max_version=(1, 0), copy=True)


def test_the_c_exchange_api_path_is_left_for_device_tensors(m):
    """The C exchange API does not synchronise, so a device tensor goes through __dlpack__."""
    t = tensor(m, CUDA)
    m.import_report(t)
    assert m.hook_log() == ["make_ready cuda:0 Default"]
