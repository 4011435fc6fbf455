"""The producer protocol and the DLPack 1.3 C exchange API against what the array API
standard's ``__dlpack__`` text, dlpack.h 1.3 and the reference users of the C exchange API
(apache-tvm-ffi's consumer and the PyTorch producer tvm-ffi ships) require: the table's layout
and version, ownership on success and on refusal (a refused tensor stays the caller's: tvm-ffi
deletes it itself), reference counts, errors, threads, and device ordering.
"""

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from conftest import DLTensor, NUMPY_DTYPES

# ---------------------------------------------------------------------------------------------
# ctypes mirror of dlpack.h 1.3 (the layouts dlpack-core/src/ffi.rs asserts).

DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)

# Functions that touch Python objects are called with the GIL held (PYFUNCTYPE: ctypes keeps the
# GIL and raises the Python exception the function set); the allocator and current_work_stream
# are called as tvm-ffi may call them, with the GIL released (CFUNCTYPE).
ALLOCATOR = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, SET_ERROR
)
FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
DLTENSOR_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)
STREAM_NOGIL = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)
)


class DLPackExchangeAPIHeader(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", ctypes.c_void_p)]


class DLPackExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


# Prototypes of our own: setting argtypes on ctypes.pythonapi's shared function objects would
# change them for every other test module too.
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi)
)
_decref = ctypes.pythonapi.Py_DecRef
_decref.argtypes = [ctypes.c_void_p]


def table(m):
    capsule = m.DLPackTensor.__dlpack_c_exchange_api__
    return DLPackExchangeAPI.from_address(_get_pointer(capsule, b"dlpack_exchange_api"))


def call_deleter(address):
    """Calls the deleter of the versioned tensor at `address` (nothing if it is NULL)."""
    mt = DLManagedTensorVersioned.from_address(address)
    if mt.deleter:
        DELETER(mt.deleter)(address)


class Foreign:
    """A versioned managed tensor built here, whose deleter counts its calls."""

    def __init__(self, dtype=(2, 32, 1), major=1, n=4):
        self.calls = 0
        self.buf = (ctypes.c_uint64 * 8)()
        self.shape = (ctypes.c_int64 * 1)(n)
        self.strides = (ctypes.c_int64 * 1)(1)

        @DELETER
        def deleter(_address):
            self.calls += 1

        self._deleter = deleter
        self.mt = DLManagedTensorVersioned()
        self.mt.version = DLPackVersion(major, 3)
        self.mt.deleter = ctypes.cast(deleter, ctypes.c_void_p)
        self.mt.dl_tensor = DLTensor(
            ctypes.addressof(self.buf), 1, 0, 1, *dtype,
            ctypes.addressof(self.shape), ctypes.addressof(self.strides), 0,
        )

    @property
    def address(self):
        return ctypes.addressof(self.mt)


def f32_tensor(m, **kwargs):
    return m.from_bytes(np.arange(4, dtype=np.float32).tobytes(), NUMPY_DTYPES["float32"], [4], **kwargs)


# ---------------------------------------------------------------------------------------------
# Ownership on refusal: managed_tensor_to_py_object_no_sync leaves a tensor it refuses to the
# caller. Its callers (tvm-ffi's make_tensor_from_chandle and pycallback, following the PyTorch
# implementation tvm-ffi ships) call the deleter themselves on failure; deleting it here too
# was a double free (a bus error in tvm-ffi before the fix).


@pytest.mark.parametrize(
    "dtype, major",
    [((0, 4, 1), 1), ((2, 32, 1), 2)],
    ids=["int4 (a dtype dlpack-core refuses)", "major version 2"],
)
def test_to_py_object_leaves_a_tensor_it_refuses_to_the_caller(m, dtype, major):
    api = table(m)
    to_py = TO_PY(api.managed_tensor_to_py_object_no_sync)
    foreign = Foreign(dtype=dtype, major=major)
    out = ctypes.c_void_p()
    with pytest.raises(Exception):
        to_py(foreign.address, ctypes.byref(out))
    # tvm-ffi calls the deleter itself when the call fails (cython/tensor.pxi
    # make_tensor_from_chandle, cython/pycallback.pxi), as does the PyTorch table that tvm-ffi
    # builds (utils/_build_optional_torch_c_dlpack.py: a throwing fromDLPackImpl never reaches
    # the deleter): a refused tensor must still be the caller's.
    assert foreign.calls == 0, "the refused tensor was deleted by the callee, and tvm-ffi deletes it again"


def test_tvm_ffi_returning_a_tensor_our_table_refuses_does_not_double_free():
    script = textwrap.dedent(
        """
        import ctypes, gc, sys
        import numpy as np, tvm_ffi, dlpack_testmod as m
        from conftest import DLTensor
        DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
        class DLManagedTensor(ctypes.Structure):
            _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]
        calls = []
        deleter = DELETER(lambda p: calls.append(p))
        buf = (ctypes.c_uint8 * 8)()
        shape = (ctypes.c_int64 * 1)(16)
        strides = (ctypes.c_int64 * 1)(1)
        mt = DLManagedTensor()
        # int4: tvm-ffi takes it, dlpack-core's validation refuses it.
        mt.dl_tensor = DLTensor(ctypes.addressof(buf), 1, 0, 1, 0, 4, 1,
                                ctypes.addressof(shape), ctypes.addressof(strides), 0)
        mt.deleter = deleter
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        capsule = new(ctypes.addressof(mt), b"dltensor", None)
        class Wrapper:
            def __dlpack__(self, **kw): return capsule
            def __dlpack_device__(self): return (1, 0)
        tv = tvm_ffi.from_dlpack(Wrapper())
        ours = m.from_bytes(np.arange(4, dtype=np.float32).tobytes(), (2, 32, 1), [4])
        second = tvm_ffi.convert(lambda a, b: b)
        # `ours` makes DLPackTensor's table the call's exchange API, so tvm-ffi hands the
        # returned tensor to our managed_tensor_to_py_object_no_sync.
        r = second(ours, tv)
        del r; gc.collect()
        assert not calls, "the producer's deleter ran while tvm still holds the tensor"
        del tv; gc.collect()
        assert len(calls) == 1, calls
        print("OK")
        """
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.environ["DLPACK_TESTMOD_DIR"], os.path.dirname(__file__), env.get("PYTHONPATH", "")]
    )
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", script],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, (
        f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    )


# ---------------------------------------------------------------------------------------------
# The exchange API's other contracts.


def test_table_header_and_function_pointers(m):
    api = table(m)
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    assert api.header.prev_api is None  # "must be NULL if the framework does not support older versions"
    for name in (
        "managed_tensor_allocator",
        "managed_tensor_from_py_object_no_sync",
        "managed_tensor_to_py_object_no_sync",
        "current_work_stream",
    ):
        assert getattr(api, name), f"{name} must not be NULL"
    # The capsule is on the type, named "dlpack_exchange_api", the same table every time.
    assert _get_name(m.DLPackTensor.__dlpack_c_exchange_api__) == b"dlpack_exchange_api"
    assert ctypes.addressof(table(m)) == ctypes.addressof(api)


def test_the_allocator_needs_no_gil_and_reports_through_set_error(m):
    # tvm-ffi installs the allocator as its environment allocator and may call it while the
    # GIL is released (FuncCall with release_gil).
    alloc = ALLOCATOR(table(m).managed_tensor_allocator)
    errors = []

    @SET_ERROR
    def set_error(ctx, kind, message):
        errors.append((ctx, kind, message))

    shape = (ctypes.c_int64 * 2)(3, 5)
    proto = DLTensor(None, 1, 0, 2, 2, 64, 1, ctypes.addressof(shape), None, 0)
    results = []

    def work():
        for _ in range(200):
            out = ctypes.c_void_p()
            rc = alloc(ctypes.addressof(proto), ctypes.byref(out), None, set_error)
            results.append(rc)
            if rc == 0:
                mt = DLManagedTensorVersioned.from_address(out.value)
                assert (mt.version.major, mt.dl_tensor.ndim) == (1, 2)
                call_deleter(out.value)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0] * 800 and not errors
    bad = DLTensor(None, 2, 0, 2, 2, 64, 1, ctypes.addressof(shape), None, 0)
    out = ctypes.c_void_p()
    assert alloc(ctypes.addressof(bad), ctypes.byref(out), ctypes.c_void_p(0x1234), set_error) == -1
    assert errors and errors[0][0] == 0x1234 and errors[0][1] == b"BufferError"
    assert out.value is None


def test_current_work_stream_needs_no_gil_and_is_null(m):
    stream = STREAM_NOGIL(table(m).current_work_stream)
    for device in [(1, 0), (2, 0), (10, 1), (14, 0)]:
        out = ctypes.c_void_p(0xDEAD)
        assert stream(*device, ctypes.byref(out)) == 0
        assert out.value is None


def test_from_py_object_gives_an_owned_versioned_tensor_and_balances_references(m):
    from_py = FROM_PY(table(m).managed_tensor_from_py_object_no_sync)
    t = f32_tensor(m, read_only=True)
    before = sys.getrefcount(t)
    out = ctypes.c_void_p()
    assert from_py(t, ctypes.byref(out)) == 0
    assert sys.getrefcount(t) == before
    mt = DLManagedTensorVersioned.from_address(out.value)
    assert (mt.version.major, mt.version.minor) == (1, 3)
    assert mt.flags & 1  # READ_ONLY travels with the versioned struct
    call_deleter(out.value)
    with pytest.raises(TypeError):
        from_py(object(), ctypes.byref(ctypes.c_void_p()))


def test_to_py_object_returns_a_new_reference_and_owns_the_tensor(m):
    api = table(m)
    foreign = Foreign()
    out = ctypes.c_void_p()
    assert TO_PY(api.managed_tensor_to_py_object_no_sync)(foreign.address, ctypes.byref(out)) == 0
    obj = ctypes.cast(out, ctypes.py_object).value  # +1
    _decref(out.value)  # the reference the call handed over
    assert type(obj) is m.DLPackTensor and obj.shape == [4]
    assert sys.getrefcount(obj) == 2
    assert foreign.calls == 0
    del obj
    gc.collect()
    assert foreign.calls == 1


def test_dltensor_from_py_object_fills_strides_and_keeps_references(m):
    fn = DLTENSOR_FROM_PY(table(m).dltensor_from_py_object_no_sync)
    t = f32_tensor(m)
    before = sys.getrefcount(t)
    out = DLTensor()
    assert fn(t, ctypes.addressof(out)) == 0
    assert sys.getrefcount(t) == before
    assert out.ndim == 1 and out.strides  # non-NULL strides for ndim != 0 (DLPack >= 1.2)
    assert ctypes.c_int64.from_address(out.strides).value == 1


def test_exchange_api_orders_a_oneapi_tensor_before_the_consumer(m):
    # managed_tensor_from_py_object_no_sync never synchronises; the consumer runs on
    # current_work_stream, which this table reports as NULL for every device. For a CUDA
    # tensor the producer first orders its own stream before the default stream (the module
    # docs); a oneAPI tensor has no default stream (`None` means "no synchronisation" there),
    # so the producer makes it ready for the host instead.
    cuda = f32_tensor(m, device=(2, 0), hooks=True)
    m.hook_log()
    m.exchange_roundtrip(cuda)
    assert m.hook_log() == ["make_ready cuda:0 Default"]
    oneapi = f32_tensor(m, device=(14, 0), hooks=True)
    m.exchange_roundtrip(oneapi)
    assert m.hook_log() == ["make_ready oneapi:0 Default"], "a oneAPI tensor went unordered"


# ---------------------------------------------------------------------------------------------
# The producer's __dlpack__ against the array API standard.

_name = _get_name


def versioned(capsule):
    return DLManagedTensorVersioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))


@pytest.mark.parametrize(
    "max_version, name",
    [(None, b"dltensor"), ((0, 8), b"dltensor"), ((1, 0), b"dltensor_versioned"),
     ((1, 99), b"dltensor_versioned"), ((2, 0), b"dltensor_versioned")],
)
def test_max_version_picks_the_struct(m, max_version, name):
    c = f32_tensor(m).__dlpack__(max_version=max_version)
    assert _name(c) == name
    if name == b"dltensor_versioned":
        # "major versions match ... return our own max version"; a higher major consumer
        # "understands us": also our own version, whose major it must check.
        v = versioned(c).version
        assert (v.major, v.minor) == (1, 3)


def test_copy_true_always_copies_and_sets_is_copied(m):
    t = f32_tensor(m)
    c = t.__dlpack__(max_version=(1, 0), copy=True)
    mt = versioned(c)
    assert mt.flags & 2 and mt.dl_tensor.data != t.data_ptr
    c = t.__dlpack__(max_version=(1, 0), copy=False, dl_device=(1, 0))
    mt = versioned(c)
    assert not mt.flags & 2 and mt.dl_tensor.data == t.data_ptr


@pytest.mark.parametrize("stream", [-1, 0, 1, 2, 7])
def test_cpu_accepts_only_stream_none(m, stream):
    with pytest.raises(ValueError):
        f32_tensor(m).__dlpack__(max_version=(1, 0), stream=stream)


def test_cuda_stream_rules(m):
    t = f32_tensor(m, device=(2, 0), hooks=True)
    m.hook_log()
    with pytest.raises(ValueError):
        t.__dlpack__(max_version=(1, 0), stream=0)
    with pytest.raises(ValueError):
        t.__dlpack__(max_version=(1, 0), stream=-2)
    assert m.hook_log() == []
    t.__dlpack__(max_version=(1, 0), stream=-1)
    assert m.hook_log() == []  # -1: the producer must not synchronise
    t.__dlpack__(max_version=(1, 0))
    t.__dlpack__(max_version=(1, 0), stream=1)
    t.__dlpack__(max_version=(1, 0), stream=2)
    t.__dlpack__(max_version=(1, 0), stream=0x7F00)
    assert m.hook_log() == [
        "make_ready cuda:0 Default",
        "make_ready cuda:0 LegacyDefault",
        "make_ready cuda:0 PerThreadDefault",
        f"make_ready cuda:0 Handle({0x7F00})",
    ]


def test_rocm_stream_rules(m):
    t = f32_tensor(m, device=(10, 0), hooks=True)
    m.hook_log()
    for bad in (1, 2, -2):
        with pytest.raises(ValueError):
            t.__dlpack__(max_version=(1, 0), stream=bad)
    t.__dlpack__(max_version=(1, 0), stream=0)
    t.__dlpack__(max_version=(1, 0))
    t.__dlpack__(max_version=(1, 0), stream=-1)
    assert m.hook_log() == ["make_ready rocm:0 Default", "make_ready rocm:0 Default"]


def test_dl_device_cpu_for_device_memory(m):
    t = f32_tensor(m, device=(2, 0), hooks=True)
    m.hook_log()
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False)
    with pytest.raises(ValueError):  # kDLCPU takes only stream=None
        t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), stream=1)
    assert m.hook_log() == []
    c = t.__dlpack__(max_version=(1, 0), dl_device=(1, 0))
    mt = versioned(c)
    assert (mt.dl_tensor.device_type, mt.dl_tensor.device_id) == (1, 0) and mt.flags & 2
    log = m.hook_log()
    assert log[0] == "wait_host cuda:0" and log[1].startswith("copy_to_host")
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 0), dl_device=(2, 1))


@pytest.mark.parametrize("device", [(3, 0), (13, 0)], ids=["kDLCUDAHost", "kDLCUDAManaged"])
def test_host_readable_memory_is_relabelled_to_the_cpu_without_a_copy(m, device):
    t = f32_tensor(m, device=device, hooks=True)
    m.hook_log()
    c = t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False)
    mt = versioned(c)
    assert (mt.dl_tensor.device_type, mt.dl_tensor.device_id) == (1, 0)
    assert mt.dl_tensor.data + mt.dl_tensor.byte_offset == t.data_ptr and not mt.flags & 2
    log = m.hook_log()
    assert len(log) == 1 and log[0].startswith("wait_host")  # a synchronisation for kDLCPU


def test_oneapi_stream_none_means_no_synchronisation(m):
    t = f32_tensor(m, device=(14, 0), hooks=True)
    m.hook_log()
    t.__dlpack__(max_version=(1, 0))
    assert m.hook_log() == []
    with pytest.raises(ValueError):
        t.__dlpack__(max_version=(1, 0), stream=-1)


@pytest.mark.parametrize(
    "device, folded",
    [((1, 0), True), ((2, 0), True), ((3, 0), True), ((13, 0), True), ((14, 0), True),
     ((10, 0), True), ((7, 0), False)],
    ids=["cpu", "cuda", "cuda_host", "cuda_managed", "oneapi", "rocm", "vulkan"],
)
@pytest.mark.parametrize(
    "strides, byte_offset, first",
    [(None, 16, 4), ([-1], 44, 11), ([2], 8, 2)],
    ids=["offset", "reversed", "stepped"],
)
def test_an_export_puts_its_data_pointer_at_the_first_element(m, device, folded, strides, byte_offset, first):
    """NumPy and PyTorch export byte_offset 0 with `data` at the first element, and consumers
    that mishandle byte_offset (dpnp 0.20 on the CPU) rely on it: every device whose data
    pointer is an address gets the same; a handle (Vulkan) keeps its offset."""
    values = np.arange(12, dtype=np.float32)
    t = m.from_bytes(values.tobytes(), NUMPY_DTYPES["float32"], [4], strides=strides,
                     byte_offset=byte_offset, device=device, hooks=device != (1, 0))
    capsule = t.__dlpack__(max_version=(1, 0))
    mt = versioned(capsule)
    start = mt.dl_tensor.data + mt.dl_tensor.byte_offset
    if folded:
        assert mt.dl_tensor.byte_offset == 0
    else:
        assert mt.dl_tensor.byte_offset == byte_offset
    assert start == t.data_ptr
    if device == (1, 0):
        # A consumer that ignores byte_offset reads the right first element.
        assert ctypes.c_float.from_address(mt.dl_tensor.data).value == values[first]
        assert list(np.from_dlpack(t)) == list(values[first::(strides or [1])[0]][:4])
    del mt, capsule, t
    gc.collect()
    m.hook_log()  # the device exports' hook calls, which later tests must not see
