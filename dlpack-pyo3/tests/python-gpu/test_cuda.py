"""CUDA tensors between Rust and PyTorch / CuPy through dlpack-pyo3's `cuda` feature: pointer
identity, values, strides, memory kinds and the stream handshake."""

import pytest

VALUES = [float(i) for i in range(12)]


def test_the_cuda_importer_refuses_what_it_cannot_check(m):
    """Runs everywhere: without a driver no hooks can be made; with one, a CPU tensor is
    not a CUDA tensor. Both are BufferErrors that say why."""

    class CpuTensor:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            return m.from_bytes(bytes(8), (2, 32, 1), [2]).__dlpack__(**kwargs)

    with pytest.raises(BufferError) as info:
        m.cuda_import_report(CpuTensor())
    driver_error = m.cuda_driver_error()
    if driver_error is None:
        assert "no device hook handles cpu:0" in str(info.value)
    else:
        assert driver_error.startswith("CUDA driver: ")
        assert str(info.value) == driver_error


def test_torch_into_rust_without_a_copy(m, torch):
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    r = m.cuda_import_report(t)
    assert r["device"] == (2, torch.cuda.current_device())
    assert r["kind"] == "Device"
    assert r["data_ptr"] == t.data_ptr()
    assert (r["shape"], r["strides"], r["dtype"]) == ([3, 4], [4, 1], "float32")
    assert r["values"] == VALUES


def test_a_torch_tensor_comes_through_the_c_exchange_api(m, torch, monkeypatch):
    """PyTorch's tensor type offers the DLPack C exchange API (2.11 does): the importer takes
    the tensor through its table, never calling `__dlpack__` or `__dlpack_device__`."""
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip(f"torch {torch.__version__} has no __dlpack_c_exchange_api__")
    called = []
    for name in ("__dlpack__", "__dlpack_device__"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _name=name, _original=original, **kwargs):
            called.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    t.__dlpack_device__()
    assert called == ["__dlpack_device__"], "the counting wrappers are in place"
    called.clear()
    r = m.cuda_import_report(t)
    assert called == []
    assert (r["data_ptr"], r["kind"], r["values"]) == (t.data_ptr(), "Device", VALUES)


def test_torch_tensors_the_table_would_misdescribe_go_through_dlpack(m, torch, monkeypatch):
    """PyTorch's table exports a tensor as if it had no flags: a conjugate view with its values
    unconjugated, a tensor that requires grad although `__dlpack__` refuses it. Those, and a
    subclass overriding `__dlpack__`, are asked through `__dlpack__`, whose answer stands; a
    negative-bit view, which `__dlpack__` exports wrongly too, is refused."""
    called = []
    original = torch.Tensor.__dlpack__

    def counting(self, *args, **kwargs):
        called.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "__dlpack__", counting)
    z = torch.tensor([1 + 2j, 3 - 4j], device="cuda")
    with pytest.raises(BufferError, match="conjugate bit"):
        m.cuda_import_report(z.conj())
    with pytest.raises(BufferError, match="require gradient"):
        m.cuda_import_report(torch.ones(3, device="cuda", requires_grad=True))
    with pytest.raises(BufferError, match="require gradient"):
        m.cuda_import_report(torch.nn.Parameter(torch.ones(3, device="cuda")))
    assert called == ["Tensor", "Tensor", "Parameter"]
    called.clear()
    # The negative bit (`z.conj().imag` views z's imaginary parts, negated lazily): PyTorch 2.11
    # exports the memory as is through `__dlpack__` too (on the H200, torch.from_dlpack of it
    # gave [2.0, -4.0] for [-2.0, 4.0]), so the importer refuses it.
    negated = z.conj().imag
    assert negated.is_neg()
    with pytest.raises(BufferError, match="negative bit"):
        m.cuda_import_report(negated)
    assert called == []
    assert m.cuda_import_report(negated.resolve_neg())["values"] == negated.tolist()

    class Refusing(torch.Tensor):
        def __dlpack__(self, *args, **kwargs):
            raise BufferError("Refusing refuses")

    with pytest.raises(BufferError, match="Refusing refuses"):
        m.cuda_import_report(torch.ones(3, device="cuda").as_subclass(Refusing))


@pytest.mark.parametrize("memory", ["device", "pinned"])
def test_a_negative_bit_view_is_refused_before_any_export(m, torch, monkeypatch, memory):
    """On the table's route and the `__dlpack__` route it falls back to for pinned memory
    alike: neither export is asked for."""
    called = []
    original = torch.Tensor.__dlpack__

    def counting(self, *args, **kwargs):
        called.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "__dlpack__", counting)
    z = torch.tensor([1 + 2j, 3 - 4j])
    z = z.cuda() if memory == "device" else z.pin_memory()
    negated = z.conj().imag
    assert negated.is_neg()
    with pytest.raises(BufferError, match="negative bit"):
        m.cuda_import_report(negated)
    assert called == []


def test_a_refusal_in_torch_function_stands_for_a_cuda_tensor(m, torch):
    """PyTorch's `Tensor.__dlpack__` hands itself to a subclass's `__torch_function__`, and to
    an active TorchFunctionMode, first; its table does not, so the importer skips it then."""

    class Refusing(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__dlpack__:
                raise BufferError("Refusing refuses __dlpack__")
            return super().__torch_function__(func, types, args, kwargs)

    class RefusingMode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__dlpack__:
                raise BufferError("the mode refuses __dlpack__")
            return func(*args, **(kwargs or {}))

    t = torch.arange(3.0, device="cuda")
    with pytest.raises(BufferError, match="Refusing refuses"):
        m.cuda_import_report(t.as_subclass(Refusing))
    with RefusingMode():
        with pytest.raises(BufferError, match="the mode refuses"):
            m.cuda_import_report(t)
    assert m.cuda_import_report(t)["values"] == [0.0, 1.0, 2.0]


def test_a_sparse_cuda_tensor_is_refused_as_pytorch_refuses_it(m, torch):
    """PyTorch's table fails with its C++ converter's RuntimeError; its `__dlpack__`, asked
    then, refuses with a BufferError, as `torch.from_dlpack` does."""
    sparse = torch.eye(3, device="cuda").to_sparse()
    with pytest.raises(BufferError, match="layout other than torch.strided"):
        torch.from_dlpack(sparse)
    with pytest.raises(BufferError, match="layout other than torch.strided"):
        m.cuda_import_report(sparse)


def test_a_transposed_torch_tensor_keeps_its_strides(m, torch):
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4).T
    r = m.cuda_import_report(t)
    assert r["data_ptr"] == t.data_ptr()
    assert (r["shape"], r["strides"]) == ([4, 3], [1, 4])
    assert r["values"] == t.contiguous().cpu().flatten().tolist()


def test_rust_into_torch_without_a_copy(m, torch):
    rust, address = m.cuda_f32(VALUES, [3, 4])
    t = torch.from_dlpack(rust)
    assert t.device.type == "cuda"
    assert t.data_ptr() == address
    assert t.cpu().flatten().tolist() == VALUES
    # And back into Rust: the same memory still.
    assert m.cuda_import_report(t)["data_ptr"] == address


def test_cupy_both_ways_without_a_copy(m, cupy):
    c = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    r = m.cuda_import_report(c)
    assert r["data_ptr"] == c.data.ptr
    assert r["values"] == VALUES
    rust, address = m.cuda_f32(VALUES, [3, 4])
    back = cupy.from_dlpack(rust)
    assert back.data.ptr == address
    assert back.get().flatten().tolist() == VALUES


def test_managed_memory_is_detected_from_the_pointer(m, cupy):
    """CuPy's array over managed memory: whatever device type CuPy claims for it (kDLCUDA or
    kDLCUDAManaged), the driver's pointer attributes say managed, and the claim is accepted."""
    # malloc_managed returns a MemoryPointer (over a ManagedMemory) already.
    managed = cupy.cuda.malloc_managed(48)
    array = cupy.ndarray((12,), dtype=cupy.float32, memptr=managed)
    array[...] = cupy.arange(12, dtype=cupy.float32)
    r = m.cuda_import_report(array)
    assert r["device"][0] in (2, 13)
    assert r["data_ptr"] == array.data.ptr
    assert r["kind"] == "Managed"
    assert r["values"] == VALUES


def test_a_producer_stream_and_a_consumer_stream_are_ordered(m, torch):
    """PyTorch writes on its own stream, the current one; the Rust importer's stream (the
    legacy default) is made to wait for it with an event (by the importer, for the stream that
    PyTorch's C exchange API names as current; by PyTorch, through __dlpack__(stream=1), where
    there is no such API), and the copy to the host on that stream sees every write."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        # Once before, so that every kernel below is loaded: CUDA loads a module on its first
        # launch (lazy loading, the default), and that load waits for the work already queued,
        # the sleep included (seen on an H200: the stream was idle before the import).
        warm = torch.ones(1 << 22, dtype=torch.float32, device="cuda")
        torch.cuda._sleep(1)
        warm.add_(2.0)
        side.synchronize()
        t = torch.ones(1 << 22, dtype=torch.float32, device="cuda")
        # About half a second of GPU time before the last write (PyTorch's own DLPack stream
        # test does the same), so that the write is still pending when the import starts: a
        # missing handshake then reads 1.0, not 3.0.
        torch.cuda._sleep(1 << 30)
        t.add_(2.0)
        assert not side.query(), "the producer's work finished before the import began"
        r = m.cuda_import_report(t)
    assert set(r["values"]) == {3.0}
