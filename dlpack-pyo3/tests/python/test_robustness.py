"""Hostile or oversized input from Python: an exception every time, never a crashed interpreter,
a write into a producer's struct, a copy that is an alias, or a class kept alive for ever.

Cases that would crash the interpreter if they failed run in a child interpreter, so that a
crash fails one test instead of ending the run."""

import ctypes
import gc
import mmap
import os
import pickle
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

from conftest import NUMPY_DTYPES, DLTensor

# 2^46 float32 elements: 256 TiB, which fits isize::MAX (so the allocator is really asked) but
# no machine's memory.
HUGE = 2**46

PyCapsule_New = ctypes.pythonapi.PyCapsule_New
PyCapsule_New.restype = ctypes.py_object
PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def run_child(body):
    """Runs `body` in a new interpreter with the test module importable; returns its exit
    status and output."""
    source = (
        f"import sys; sys.path.insert(0, {os.environ['DLPACK_TESTMOD_DIR']!r})\n"
        "import numpy as np, dlpack_testmod as m\n" + textwrap.dedent(body)
    )
    child = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        env={**os.environ, "RUST_BACKTRACE": "0"},
        timeout=120,
    )
    return child.returncode, (child.stdout + child.stderr).strip()


@pytest.mark.parametrize(
    "body",
    [
        # Our export, asked for a copy of a broadcast tensor.
        f"t = m.from_bytes(bytes(4), (2, 32, 1), [{HUGE}], strides=[0])\n"
        "try:\n    np.from_dlpack(t, copy=True)\n"
        "except MemoryError as e:\n    print('MemoryError:', e)",
        # Our import, asked for a copy of NumPy's broadcast view: the copy is tried before the
        # capsule is taken, so the capsule is left as it was and a plain import still takes it.
        f"c = np.broadcast_to(np.float32(0), ({HUGE},)).__dlpack__(max_version=(1, 0))\n"
        "import ctypes\n"
        "valid = ctypes.pythonapi.PyCapsule_IsValid\n"
        "valid.argtypes = [ctypes.py_object, ctypes.c_char_p]\n"
        "try:\n    m.import_report(c, copy=True)\n"
        "except MemoryError as e:\n    print('MemoryError:', e)\n"
        "assert valid(c, b'dltensor_versioned') == 1, 'the refused capsule was consumed'\n"
        f"assert m.import_report(c)['shape'] == [{HUGE}]",
        # The C exchange API's allocator.
        f"try:\n    m.exchange_allocate(m.DLPackTensor, [{HUGE}], (2, 32, 1))\n"
        "except MemoryError as e:\n    print('MemoryError:', e)",
    ],
    ids=["export_copy", "import_copy", "exchange_allocator"],
)
def test_a_copy_that_does_not_fit_in_memory_is_a_memory_error(body):
    status, output = run_child(body)
    assert status == 0, f"the interpreter died ({status}): {output}"
    assert output.startswith("MemoryError:") and "cannot allocate" in output, output


class Future(ctypes.Structure):
    """A DLPack 2.x struct: only the prefix up to `deleter` is promised."""


FUTURE_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(Future))
Future._fields_ = [
    ("major", ctypes.c_uint32),
    ("minor", ctypes.c_uint32),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", FUTURE_DELETER),
    ("field_at_24", ctypes.c_uint64),
]


@pytest.mark.parametrize("route", ["import_safe_report", "import_report"])
def test_a_struct_of_another_major_version_is_only_deleted_never_written(m, route):
    seen = []

    @FUTURE_DELETER
    def deleter(p):
        seen.append(p.contents.field_at_24)

    struct = Future(2, 0, None, deleter, 0x1000)
    capsule = PyCapsule_New(ctypes.addressof(struct), b"dltensor_versioned", None)
    with pytest.raises(BufferError, match="not compatible"):
        getattr(m, route)(capsule)
    assert seen == [0x1000], "the deleter saw the struct as the producer left it"


@pytest.mark.parametrize("flags", [0, 1])
def test_a_struct_in_read_only_memory_is_imported_read_only_without_a_write(m, flags):
    # The whole tensor (struct, arrays, data) on a page the producer has made read-only: the
    # read-only import must not write `flags`, whether READ_ONLY is set already or not.
    status, output = run_child(
        f"""
        import ctypes, mmap
        class DLTensor(ctypes.Structure):
            _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                        ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                        ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                        ("lanes", ctypes.c_uint16), ("shape", ctypes.c_void_p),
                        ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]
        class Managed(ctypes.Structure):
            _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                        ("ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                        ("flags", ctypes.c_uint64), ("t", DLTensor)]
        page = mmap.mmap(-1, mmap.PAGESIZE)
        data = (ctypes.c_double * 4).from_buffer(page, 256)
        data[:] = [1.0, 2.0, 3.0, 4.0]
        shape = (ctypes.c_int64 * 1).from_buffer(page, 512)
        shape[0] = 4
        strides = (ctypes.c_int64 * 1).from_buffer(page, 640)
        strides[0] = 1
        s = Managed.from_buffer(page, 0)
        s.major, s.minor, s.flags = 1, 3, {flags}  # no deleter
        s.t = DLTensor(ctypes.addressof(data), 1, 0, 1, 2, 64, 1,
                       ctypes.addressof(shape), ctypes.addressof(strides), 0)
        libc = ctypes.CDLL(None)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        assert libc.mprotect(ctypes.addressof(s), mmap.PAGESIZE, 1) == 0  # PROT_READ
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        print(m.import_values(new(ctypes.addressof(s), b"dltensor_versioned", None)))
        """
    )
    assert status == 0, f"the interpreter died ({status}): {output}"
    assert output == "[1.0, 2.0, 3.0, 4.0]"


class IgnoresKeywords:
    """A wrapper that takes every keyword and passes on only `max_version`."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, **kwargs):
        return self.inner.__dlpack__(max_version=kwargs.get("max_version"))

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


def test_a_copy_from_a_producer_that_does_not_flag_it_is_not_copied_again(m):
    # IS_COPIED is optional: JAX answers copy=True with a legacy capsule (no flags at all). Its
    # copy is taken as it is, not copied a second time (the version says whose struct it is:
    # a copy made here would be a 1.3 struct).
    import jax.numpy as jnp

    x = jnp.arange(4.0)
    got = m.import_report(x, copy=True)
    assert got["legacy"] and not got["is_copied"]
    np.testing.assert_array_equal(np.from_dlpack(x), [0.0, 1.0, 2.0, 3.0])


def test_a_device_asked_of_a_producer_that_ignores_dl_device_is_still_that_device(m):
    # A fake-device tensor whose producer ignores dl_device=(1, 0): its memory cannot be
    # relabelled or copied by the host here, so the import is refused rather than returning a
    # tensor on the wrong device.
    t = m.from_bytes(np.arange(4.0).tobytes(), NUMPY_DTYPES["float64"], [4], device=(12, 0))
    with pytest.raises(BufferError):
        m.import_report(IgnoresKeywords(t), dl_device=(1, 0))


def test_the_importer_does_not_keep_producer_classes_alive(m):
    class Made:
        payload = np.zeros(1000)

        def __dlpack__(self, **kwargs):
            return np.arange(3.0).__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return (1, 0)

    m.import_safe_report(Made())
    gone = weakref.ref(Made)
    del Made
    gc.collect()
    assert gone() is None


def test_the_exception_classes_pickle(m):
    t = m.from_bytes(np.arange(4.0).tobytes(), NUMPY_DTYPES["float64"], [4])
    with pytest.raises(m.DLPackStreamError) as info:
        t.__dlpack__(stream=1)
    assert m.DLPackStreamError.__module__ == m.__name__
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is m.DLPackStreamError and str(back) == str(info.value)
    capsule_error = m.DLPackCapsuleError("x")
    assert type(pickle.loads(pickle.dumps(capsule_error))) is m.DLPackCapsuleError


@pytest.mark.parametrize("stream", [2**63, 2**64, -(2**63) - 1])
def test_a_stream_int_beyond_64_bits_is_a_stream_error_not_a_type_error(m, stream):
    t = m.from_bytes(np.arange(4.0).tobytes(), NUMPY_DTYPES["float64"], [4], device=(12, 0))
    with pytest.raises(m.DLPackStreamError, match="does not fit a 64-bit stream handle"):
        t.__dlpack__(stream=stream)
