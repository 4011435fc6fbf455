"""PyTorch CPU tensors into Rust and back through dlpack-pyo3, with PyTorch's own
`torch.from_dlpack` as the reference: what it refuses, the importer refuses, and the importer
never reads values that differ from the tensor's (PyTorch's own import of a negative-bit view
does: it shares memory that holds the values negated).

`m.import_safe_report` / `m.import_report` / `m.import_values` are dlpack-pyo3's importer
(`from_dlpack_with`, read-only or writable; the last reads every element through a typed view);
they take a PyTorch tensor through its C exchange API table when nothing is asked and the table
gives what `__dlpack__` would, and through `__dlpack__` otherwise.
"""

import struct

import pytest

from conftest import NOT_RUN, TORCH

if not TORCH:
    pytest.skip(NOT_RUN, allow_module_level=True)

IMPORTERS = ["import_safe_report", "import_report", "import_values"]
# What a consumer may ask: nothing (the table's route), or a request only `__dlpack__` serves.
REQUESTS = [{}, {"dl_device": (1, 0)}, {"copy": False}, {"dl_device": (1, 0), "copy": False}]
REQUEST_IDS = ["plain", "dl_device", "copy=False", "dl_device,copy=False"]


def refusal(call):
    """The exception `call()` raises (it must raise one)."""
    with pytest.raises(Exception) as info:
        call()
    return info.value


def dlpack_calls(torch, monkeypatch):
    """Counts the calls of `torch.Tensor.__dlpack__` (for telling the importer's routes apart)."""
    called = []
    original = torch.Tensor.__dlpack__

    def counting(self, *args, **kwargs):
        called.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "__dlpack__", counting)
    return called


# --- the negative bit ----------------------------------------------------------------------


def negative_view(torch, name):
    """A view with PyTorch's negative bit set: its values are its memory's, negated."""
    if name == "conj().imag":
        return torch.tensor([1 + 2j, 3 + 4j]).conj().imag  # [-2.0, -4.0]
    return torch._neg_view(torch.arange(1.0, 4.0))  # [-1.0, -2.0, -3.0]


NEGATIVE = ["conj().imag", "_neg_view"]


@pytest.mark.parametrize("request_", REQUESTS, ids=REQUEST_IDS)
@pytest.mark.parametrize("importer", IMPORTERS)
@pytest.mark.parametrize("view", NEGATIVE)
def test_a_negative_bit_view_is_refused_whatever_is_asked(m, torch, view, importer, request_):
    n = negative_view(torch, view)
    assert n.is_neg()
    with pytest.raises(BufferError, match=r"negative bit set \(is_neg\(\)\).*resolve_neg"):
        getattr(m, importer)(n, **request_)
    # Resolved, it is an ordinary tensor.
    assert m.import_values(n.resolve_neg(), **request_) == n.tolist()


@pytest.mark.parametrize("view", NEGATIVE)
def test_copy_true_of_a_negative_bit_view_is_a_copy_of_its_values(m, torch, view):
    """PyTorch's `__dlpack__(copy=True)` copies the values, not the memory."""
    n = negative_view(torch, view)
    assert m.import_values(n, copy=True) == n.tolist()
    assert m.import_safe_report(n, copy=True)["data_ptr"] != n.data_ptr()


def test_copy_true_is_refused_when_the_producer_never_sees_it(m, torch):
    """A subclass whose `__dlpack__` takes no keywords: its capsule shares the negated memory,
    and a copy made here would copy that."""

    class NoKeywords(torch.Tensor):
        def __dlpack__(self):
            return torch.Tensor.__dlpack__(self.as_subclass(torch.Tensor))

    n = negative_view(torch, "_neg_view").as_subclass(NoKeywords)
    assert n.is_neg()
    with pytest.raises(BufferError, match="negative bit"):
        m.import_values(n, copy=True)
    assert m.import_values(n.resolve_neg().as_subclass(NoKeywords), copy=True) == n.tolist()


# --- __torch_function__ and TorchFunctionMode ----------------------------------------------


def test_a_refusal_in_a_subclass_torch_function_stands(m, torch, monkeypatch):
    class Refusing(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__dlpack__:
                raise BufferError("Refusing refuses __dlpack__")
            return super().__torch_function__(func, types, args, kwargs)

    t = torch.arange(3.0).as_subclass(Refusing)
    with pytest.raises(BufferError, match="Refusing refuses"):
        torch.from_dlpack(t)
    for importer in IMPORTERS:
        with pytest.raises(BufferError, match="Refusing refuses"):
            getattr(m, importer)(t)


def test_a_subclass_torch_function_that_exports_another_tensor_is_obeyed(m, torch):
    other = torch.arange(10.0, 13.0)

    class Redirecting(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__dlpack__:
                return torch.Tensor.__dlpack__(other, **(kwargs or {}))
            return super().__torch_function__(func, types, args, kwargs)

    t = torch.arange(3.0).as_subclass(Redirecting)
    assert torch.from_dlpack(t).data_ptr() == other.data_ptr()
    assert m.import_safe_report(t)["data_ptr"] == other.data_ptr()
    assert m.import_values(t) == other.tolist()


def test_subclasses_without_an_override_go_through_the_table(m, torch, monkeypatch):
    """A subclass that inherits `Tensor.__torch_function__` (which calls the function as is),
    and `torch.nn.Parameter` (which turns it off), are served by the table; a subclass with its
    own `__torch_function__` goes through `__dlpack__`, even one that changes nothing."""

    class Plain(torch.Tensor):
        pass

    class Passing(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs)

    called = dlpack_calls(torch, monkeypatch)
    base = torch.arange(4.0)
    plain = base.as_subclass(Plain)
    parameter = torch.nn.Parameter(base, requires_grad=False)
    for t in (base, plain, parameter):
        assert m.import_safe_report(t)["data_ptr"] == base.data_ptr()
    assert called == []
    assert m.import_safe_report(base.as_subclass(Passing))["data_ptr"] == base.data_ptr()
    # (Twice: `Tensor.__dlpack__` hands itself to `__torch_function__`, which calls it again.)
    assert called == ["Passing", "Passing"]


def test_a_refusal_in_an_active_torch_function_mode_stands(m, torch, monkeypatch):
    class Refusing(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__dlpack__:
                raise BufferError("the mode refuses __dlpack__")
            return func(*args, **(kwargs or {}))

    t = torch.arange(3.0)
    with Refusing():
        with pytest.raises(BufferError, match="the mode refuses"):
            torch.from_dlpack(t)
        for importer in IMPORTERS:
            with pytest.raises(BufferError, match="the mode refuses"):
                getattr(m, importer)(t)
    # Once the mode is gone, the table serves the tensor again.
    called = dlpack_calls(torch, monkeypatch)
    assert m.import_safe_report(t)["data_ptr"] == t.data_ptr()
    assert called == []


def test_pytorch_device_context_modes_leave_the_import_as_it_was(m, torch):
    """`with torch.device(...)` is a TorchFunctionMode: the import goes through `__dlpack__`,
    with the same result."""
    t = torch.arange(6.0).reshape(2, 3)
    with torch.device("cpu"):
        r = m.import_safe_report(t)
        assert m.import_values(t) == t.flatten().tolist()
    assert (r["data_ptr"], r["shape"], r["strides"]) == (t.data_ptr(), [2, 3], [3, 1])


# --- what PyTorch refuses to export --------------------------------------------------------


def unusual_tensor(torch, name):
    base = torch.eye(3)
    return {
        "sparse_coo": lambda: base.to_sparse(),
        "sparse_csr": lambda: base.to_sparse_csr(),
        "sparse_csc": lambda: base.to_sparse_csc(),
        "sparse_bsr": lambda: base.to_sparse_bsr((1, 1)),
        "quantized": lambda: torch.quantize_per_tensor(base, 0.1, 0, torch.qint8),
        "jagged nested": lambda: torch.nested.nested_tensor(
            [torch.ones(2), torch.ones(3)], layout=torch.jagged
        ),
        "strided nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
        "mkldnn": lambda: base.to_mkldnn(),
        "meta": lambda: torch.empty(3, device="meta"),
    }[name]()


# PyTorch's `__dlpack__` refuses these with a BufferError, and so does `torch.from_dlpack`; its
# C exchange API table fails with its C++ converter's RuntimeError, C++ stack frames and all.
BUFFER_ERRORS = [
    "sparse_coo",
    "sparse_csr",
    "sparse_csc",
    "sparse_bsr",
    "quantized",
    "jagged nested",
]
# PyTorch refuses these otherwise (a RuntimeError of its nested tensors, a NotImplementedError
# from the `__dlpack_device__` of an MKL-DNN tensor, which the importer does not call).
OTHER_REFUSALS = ["strided nested", "mkldnn", "meta"]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", BUFFER_ERRORS + OTHER_REFUSALS)
def test_a_tensor_pytorch_refuses_to_export_is_refused_with_its_exception(m, torch, name):
    x = unusual_tensor(torch, name)
    reference = refusal(lambda: torch.from_dlpack(x))
    if name in BUFFER_ERRORS:
        assert isinstance(reference, BufferError)
    for request_ in REQUESTS:
        # What PyTorch's `__dlpack__` raises for the same request.
        expected = refusal(lambda: x.__dlpack__(max_version=(1, 3), **request_))
        if name in BUFFER_ERRORS:
            assert isinstance(expected, BufferError)
        for importer in IMPORTERS:
            got = refusal(lambda: getattr(m, importer)(x, **request_))
            assert (type(got), str(got)) == (type(expected), str(expected)), (importer, request_)


# --- the conjugate bit and autograd --------------------------------------------------------


@pytest.mark.parametrize("request_", REQUESTS, ids=REQUEST_IDS)
def test_a_conjugate_view_is_refused_as_pytorch_refuses_it(m, torch, request_):
    c = torch.tensor([1 + 2j, 3 - 4j]).conj()
    assert c.is_conj()
    with pytest.raises(BufferError, match="conjugate bit"):
        torch.from_dlpack(c)
    for importer in IMPORTERS:
        with pytest.raises(BufferError, match="conjugate bit"):
            getattr(m, importer)(c, **request_)
    assert m.import_values(c.resolve_conj(), **request_) == c.tolist()
    # A real tensor's conj() is the tensor itself.
    real = torch.arange(3.0)
    assert not real.conj().is_conj()
    assert m.import_safe_report(real.conj(), **request_)["data_ptr"] == real.data_ptr()


@pytest.mark.parametrize("request_", REQUESTS, ids=REQUEST_IDS)
def test_a_tensor_that_requires_grad_is_refused_as_pytorch_refuses_it(m, torch, request_):
    leaf = torch.arange(3.0, requires_grad=True)
    for t in (leaf, leaf * 2, torch.nn.Parameter(torch.ones(3))):
        with pytest.raises(BufferError, match="require gradient"):
            torch.from_dlpack(t)
        for importer in IMPORTERS:
            with pytest.raises(BufferError, match="require gradient"):
                getattr(m, importer)(t, **request_)
    with torch.no_grad():
        with pytest.raises(BufferError, match="require gradient"):
            m.import_safe_report(leaf, **request_)
    detached = leaf.detach()
    assert m.import_safe_report(detached, **request_)["data_ptr"] == leaf.data_ptr()
    assert m.import_values(detached, **request_) == [0.0, 1.0, 2.0]


# --- layouts -------------------------------------------------------------------------------


def layout(torch, name):
    return {
        "contiguous": lambda: torch.arange(12.0).reshape(3, 4),
        "transposed": lambda: torch.arange(12.0).reshape(3, 4).T,
        "sliced with a step": lambda: torch.arange(12.0)[::3],
        "offset": lambda: torch.arange(12.0)[5:],
        "broadcast (expand)": lambda: torch.arange(3.0).reshape(3, 1).expand(3, 4),
        "overlapping (as_strided)": lambda: torch.arange(6.0).as_strided((3, 3), (1, 1)),
        "zero-size": lambda: torch.empty(0, 3),
        "zero-size, transposed": lambda: torch.empty(3, 0).T,
        "0-d": lambda: torch.tensor(5.0),
        "channels_last": lambda: torch.arange(24.0)
        .reshape(1, 2, 3, 4)
        .contiguous(memory_format=torch.channels_last),
        # PyTorch has no negative strides: flip() copies.
        "flipped": lambda: torch.arange(4.0).flip(0),
    }[name]()


LAYOUTS = [
    "contiguous",
    "transposed",
    "sliced with a step",
    "offset",
    "broadcast (expand)",
    "overlapping (as_strided)",
    "zero-size",
    "zero-size, transposed",
    "0-d",
    "channels_last",
    "flipped",
]


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_layout_is_taken_as_is_without_a_copy(m, torch, name):
    t = layout(torch, name)
    reference = torch.from_dlpack(t)
    for obj in (t, t.__dlpack__(max_version=(1, 3))):  # the table's route, and a capsule
        r = m.import_safe_report(obj)
        assert r["shape"] == list(t.shape)
        assert r["strides"] == list(reference.stride())
        if t.numel():
            assert r["strides"] == list(t.stride())
            assert r["data_ptr"] == t.data_ptr()
        assert r["dtype"] == (2, 32, 1)
    assert m.import_values(t) == t.flatten().tolist()
    # And back: PyTorch takes the Rust import without a copy.
    back = torch.from_dlpack(m.reexport(t))
    assert (back.shape, back.dtype) == (t.shape, t.dtype)
    assert torch.equal(back, t)
    if t.numel():
        assert back.data_ptr() == t.data_ptr()


# --- dtypes, both ways ---------------------------------------------------------------------

DTYPES = {
    "bool": (6, 8),
    "uint8": (1, 8),
    "int8": (0, 8),
    "int16": (0, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "uint16": (1, 16),
    "uint32": (1, 32),
    "uint64": (1, 64),
    "float16": (2, 16),
    "bfloat16": (4, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    "complex64": (5, 64),
    "complex128": (5, 128),
}


@pytest.mark.parametrize("name", list(DTYPES))
def test_every_dtype_crosses_both_ways_without_a_copy(m, torch, name):
    dtype = getattr(torch, name)
    values = torch.tensor([0.0, 1.5, -2.25, 3.0, 0.0078125, -0.5])
    if name == "bool":
        t = values != 0
    elif name.startswith(("int", "uint")):
        t = values.abs().to(torch.int64).to(dtype) if name.startswith("uint") else values.to(dtype)
    else:
        t = values.to(dtype)
    code, bits = DTYPES[name]
    r = m.import_safe_report(t)
    assert (r["dtype"], r["data_ptr"]) == ((code, bits, 1), t.data_ptr())
    expected = t.tolist() if name not in ("float16", "bfloat16") else t.float().tolist()
    assert m.import_values(t) == expected
    back = torch.from_dlpack(m.reexport(t))
    assert (back.dtype, back.data_ptr()) == (dtype, t.data_ptr())
    assert torch.equal(back, t)


@pytest.mark.parametrize(
    "name, code",
    [("float8_e5m2", 12), ("float8_e4m3fn", 10), ("float8_e4m3fnuz", 11), ("float8_e5m2fnuz", 13)],
)
def test_float8_keeps_pytorch_s_dtype_codes_both_ways(m, torch, name, code):
    t = torch.tensor([0.5, -1.0, 2.0]).to(getattr(torch, name))
    r = m.import_safe_report(t)
    assert (r["dtype"], r["data_ptr"]) == ((code, 8, 1), t.data_ptr())
    back = torch.from_dlpack(m.reexport(t))
    assert (back.dtype, back.data_ptr()) == (t.dtype, t.data_ptr())


def test_bfloat16_and_bool_made_in_rust_go_to_pytorch_without_a_copy(m, torch):
    # bfloat16 is the upper half of a float32: 1.5, -2.0, 0.0078125.
    floats = [1.5, -2.0, 0.0078125]
    bf16 = b"".join(struct.pack("<f", v)[2:] for v in floats)
    rust = m.from_bytes(bf16, (4, 16, 1), [3])
    t = torch.from_dlpack(rust)
    assert (t.dtype, t.tolist()) == (torch.bfloat16, floats)
    assert t.data_ptr() == m.import_report(rust)["data_ptr"]

    rust = m.from_bytes(bytes([1, 0, 1, 1]), (6, 8, 1), [2, 2])
    t = torch.from_dlpack(rust)
    assert (t.dtype, t.tolist()) == (torch.bool, [[True, False], [True, True]])
    assert t.data_ptr() == m.import_report(rust)["data_ptr"]


def test_a_rust_tensor_with_strides_goes_to_pytorch_as_a_view(m, torch):
    data = struct.pack("<6f", *range(6))
    rust = m.from_bytes(data, (2, 32, 1), [3, 2], strides=[1, 3])
    t = torch.from_dlpack(rust)
    assert (t.shape, t.stride()) == ((3, 2), (1, 3))
    assert t.tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    assert t.data_ptr() == m.import_report(rust)["data_ptr"]


def test_the_table_route_is_taken_for_a_plain_cpu_tensor(m, torch, monkeypatch):
    """PyTorch's tensor type offers the C exchange API: a plain import calls no `__dlpack__`."""
    assert hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    called = dlpack_calls(torch, monkeypatch)
    t = torch.arange(12.0).reshape(3, 4)
    assert m.import_safe_report(t)["data_ptr"] == t.data_ptr()
    assert called == []
    # With a request, the importer calls `__dlpack__`.
    assert m.import_safe_report(t, copy=False)["data_ptr"] == t.data_ptr()
    assert called == ["Tensor"]
