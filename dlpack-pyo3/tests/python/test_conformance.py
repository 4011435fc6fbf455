"""dlpack-pyo3 against the array API DLPack protocol, side by side with what NumPy 2.x and JAX
do: keywords, every dtype NumPy, ml_dtypes and JAX export, unaligned, big-endian and read-only
arrays, capsules refused and reused, producers' exceptions, lifetimes, threads and leaks.

Each test asserts what the standard asks for (where it is silent, what NumPy does). Cases the
other files of this folder cover (test_misuse.py, test_consumer.py, test_robustness.py) are not
repeated. One difference from NumPy is deliberate: a `stream` that is not an int is a
`TypeError` on every device (the producer checks argument types before it looks at the
tensor), where NumPy raises RuntimeError for any stream on the CPU.
"""

import gc
import os
import sys
import threading

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from conftest import NUMPY_DTYPES, UNDER_VALGRIND, Returns, base_array, rounds


def f64(m, **kwargs):
    return m.from_bytes(np.arange(4.0).tobytes(), NUMPY_DTYPES["float64"], [4], **kwargs)


def raised(action):
    with pytest.raises(BaseException) as info:
        action()
    return info.value


def capsule_name(capsule):
    return repr(capsule).split('"')[1]


@pytest.fixture
def balanced(m):
    """No Rust buffer made during the test outlives it (buffers kept alive by an earlier failed
    test's traceback are not counted against this one)."""
    gc.collect()
    made, freed = m.counters()
    yield
    gc.collect()
    made_after, freed_after = m.counters()
    assert made_after - freed_after <= made - freed, "a Rust buffer was leaked"


# --- __dlpack__ keyword handling ------------------------------------------------------------


VALID_KWARGS = [
    {},
    {"stream": None},
    {"max_version": None},
    {"dl_device": None},
    {"copy": None},
    {"stream": None, "max_version": None, "dl_device": None, "copy": None},
    {"max_version": (1, 0)},
    {"max_version": (1, 0), "dl_device": (1, 0)},
    {"max_version": (1, 0), "copy": False},
    {"max_version": (1, 0), "dl_device": (1, 0), "copy": False},
    {"max_version": (1, 0), "dl_device": (1, 0), "copy": True},
    {"copy": True},
    {"dl_device": (1, 0), "copy": True},
    {"max_version": (0, 5), "copy": True},
    {"max_version": (99, 0)},
]


@pytest.mark.parametrize("kwargs", VALID_KWARGS, ids=repr)
def test_every_valid_keyword_combination_gives_the_struct_numpy_gives(m, balanced, kwargs):
    a = np.arange(4.0)
    t = f64(m)
    theirs = a.__dlpack__(**kwargs)
    ours = t.__dlpack__(**kwargs)
    assert capsule_name(ours) == capsule_name(theirs)
    got = m.import_report(ours)
    copied = kwargs.get("copy") is True
    assert (got["data_ptr"] != t.data_ptr) is copied
    if not got["legacy"]:
        assert got["is_copied"] is copied
    np.testing.assert_array_equal(np.from_dlpack(Returns(t.__dlpack__(**kwargs))), a)


def test_more_positional_arguments_than_keywords_are_refused_like_numpy(m, balanced):
    a = np.arange(4.0)
    t = f64(m)
    for args in [(None, None), (None, None, None, None), ((1, 0),)]:
        theirs = raised(lambda: a.__dlpack__(*args))
        ours = raised(lambda: t.__dlpack__(*args))
        assert isinstance(ours, TypeError) and isinstance(theirs, TypeError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_version": {"major": 1}},
        {"max_version": "1.0"},
        {"max_version": (None, None)},
        {"dl_device": (None, 0)},
        {"dl_device": "cpu"},
        {"dl_device": {1: 0}},
    ],
    ids=repr,
)
def test_keywords_of_the_wrong_type_are_type_errors_like_numpy(m, balanced, kwargs):
    a = np.arange(4.0)
    t = f64(m)
    theirs = raised(lambda: a.__dlpack__(**kwargs))
    ours = raised(lambda: t.__dlpack__(**kwargs))
    assert isinstance(theirs, TypeError)
    assert isinstance(ours, TypeError), f"NumPy raised {theirs!r}, we raised {ours!r}"


@pytest.mark.parametrize("dl_device", [(2**31, 0), (1, 2**31), (-(2**31) - 1, 0)])
def test_a_dl_device_beyond_int32_is_an_overflow_error_as_in_numpy(m, dl_device):
    """A tuple of two ints is the right type, so not a TypeError: NumPy raises OverflowError,
    as CPython does for an int argument out of a C type's range."""
    a = np.arange(4.0)
    t = f64(m)
    theirs = raised(lambda: a.__dlpack__(max_version=(1, 0), dl_device=dl_device))
    ours = raised(lambda: t.__dlpack__(max_version=(1, 0), dl_device=dl_device))
    assert isinstance(theirs, OverflowError)
    assert isinstance(ours, OverflowError), f"NumPy raised {theirs!r}, we raised {ours!r}"


@pytest.mark.parametrize("device", [(1, 0), (2, 0), (3, 0), (12, 3), (13, 1), (14, 2)])
def test_dlpack_device_is_a_tuple_of_two_ints(m, balanced, device):
    t = f64(m, device=device)
    got = t.__dlpack_device__()
    assert type(got) is tuple and got == device
    assert all(type(v) is int for v in got)
    with pytest.raises(TypeError):
        t.__dlpack_device__(1)


# --- from_dlpack of every dtype NumPy and JAX export --------------------------------------


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (2, 3)])
def test_jax_arrays_of_every_numpy_dtype_and_odd_shapes(m, dtype, shape):
    j = jnp.asarray(base_array(dtype, int(np.prod(shape))).reshape(shape))
    got = m.import_report(j)
    assert got["dtype"] == NUMPY_DTYPES[dtype] and got["shape"] == list(shape)
    assert m.import_values(j) == np.asarray(j).ravel().tolist()


# (name, DLPack code) of every ml_dtypes float JAX exports (dlpack-reference section 1).
ML_FLOATS = {
    "bfloat16": 4,
    "float8_e3m4": 7,
    "float8_e4m3": 8,
    "float8_e4m3b11fnuz": 9,
    "float8_e4m3fn": 10,
    "float8_e4m3fnuz": 11,
    "float8_e5m2": 12,
    "float8_e5m2fnuz": 13,
    "float8_e8m0fnu": 14,
}


@pytest.mark.parametrize("name", ML_FLOATS)
def test_ml_dtypes_floats_both_ways_with_jax(m, name):
    dt = getattr(ml_dtypes, name)
    values = np.array([0.5, 1, 2, 4, 0.25, 8], dt)
    code = (ML_FLOATS[name], values.itemsize * 8, 1)
    j = jnp.asarray(values.reshape(2, 3))
    got = m.import_report(j)
    assert got["dtype"] == code and got["data_ptr"] == j.unsafe_buffer_pointer()
    t = m.from_bytes(values.tobytes(), code, [2, 3])
    back = jnp.from_dlpack(t)
    assert back.dtype == dt
    np.testing.assert_array_equal(np.asarray(back).astype(np.float32), values.reshape(2, 3).astype(np.float32))


def test_packed_fp4_from_jax_is_read_as_packed(m):
    values = np.array([0.5, 1, 1.5, 2, 3, 4, 6, -1], ml_dtypes.float4_e2m1fn)
    j = jnp.asarray(values)
    got = m.import_report(j)
    assert got["dtype"] == (17, 4, 1) and got["shape"] == [8]
    # Re-exported as the same 8 packed elements over JAX's own 4 bytes.
    t = m.reexport(j)
    assert t.dtype == (17, 4, 1) and t.shape == [8]
    assert t.data_ptr == j.unsafe_buffer_pointer()


# --- NumPy layouts the existing layout table does not cover -------------------------------


def unaligned(dtype, n=6, offset=1):
    dtype = np.dtype(dtype)
    buf = bytearray(dtype.itemsize * (n + 1) + 8)
    a = np.ndarray((n,), dtype=dtype, buffer=buf, offset=offset)
    a[...] = base_array(dtype, n)
    return a


@pytest.mark.parametrize("dtype", [d for d in NUMPY_DTYPES if np.dtype(d).itemsize > 1])
@pytest.mark.parametrize(
    "view", [lambda x: x, lambda x: x[::-1], lambda x: x.reshape(2, 3).T], ids=["1d", "reversed", "F"]
)
def test_unaligned_numpy_arrays_are_never_misread(m, dtype, view):
    a = view(unaligned(dtype))
    assert not a.flags.aligned
    got = m.import_report(a)
    assert got["data_ptr"] == a.ctypes.data  # zero-copy, as NumPy
    # A typed Rust view needs alignment: refused with BufferError, never a crash.
    with pytest.raises(BufferError, match="not aligned"):
        m.import_values(a)
    # Through Rust and back to NumPy, in place and as a copy (the host copy reads bytes).
    np.testing.assert_array_equal(np.from_dlpack(m.reexport(a)), a)
    np.testing.assert_array_equal(np.from_dlpack(m.reexport(a), copy=True), a)
    got = m.import_report(a.__dlpack__(max_version=(1, 0)), copy=True)
    assert got["is_copied"]
    assert got["data_ptr"] % min(a.itemsize, 8) == 0  # the copy is aligned for its words


@pytest.mark.parametrize("dtype", [d for d in NUMPY_DTYPES if np.dtype(d).itemsize > 1])
@pytest.mark.parametrize(
    "kwargs", [{}, {"copy": True}, {"copy": False}, {"dl_device": (1, 0)}], ids=repr
)
def test_big_endian_arrays_are_refused_on_every_route(m, dtype, kwargs):
    b = base_array(dtype).astype(np.dtype(dtype).newbyteorder(">"))
    theirs = raised(lambda: np.from_dlpack(b, **{"copy": kwargs.get("copy")}))
    ours = raised(lambda: m.import_report(b, **kwargs))
    assert type(theirs) is BufferError
    assert isinstance(ours, BufferError)
    assert isinstance(raised(lambda: m.import_safe_report(b, **kwargs)), BufferError)


def test_single_byte_arrays_with_a_big_endian_marker_are_fine(m):
    for a in [np.arange(3, dtype=">u1"), np.arange(3, dtype=">i1"), np.array([True, False], dtype=">?")]:
        assert m.import_values(a) == a.tolist() == np.from_dlpack(a).tolist()


def test_read_only_numpy_stays_read_only_through_rust_and_back(m):
    a = np.arange(6.0)
    a.flags.writeable = False
    assert m.import_report(a)["read_only"] is True  # even for the writable importer
    b = np.from_dlpack(m.reexport(a))
    assert not b.flags.writeable and b.ctypes.data == a.ctypes.data
    c = np.from_dlpack(m.reexport(a), copy=True)
    assert c.flags.writeable and c.ctypes.data != a.ctypes.data


# --- capsules ------------------------------------------------------------------------------


def test_a_capsule_refused_by_us_is_taken_by_jax_and_then_refused_by_everyone(m, balanced):
    t = f64(m)
    capsule = t.__dlpack__()
    with pytest.raises(BufferError):
        m.import_report(capsule, dl_device=(2, 0))
    j = jnp.from_dlpack(Returns(capsule))
    assert capsule_name(capsule) == "used_dltensor"
    with pytest.raises(ValueError, match="only once"):
        m.import_report(capsule)
    with pytest.raises(Exception):
        jnp.from_dlpack(Returns(capsule))
    del t
    gc.collect()
    np.testing.assert_array_equal(np.asarray(j), [0.0, 1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    "returned",
    [None, 42, b"dltensor", "dltensor_versioned", np.arange(3.0), (1, 2)],
    ids=["None", "int", "bytes", "str", "ndarray", "tuple"],
)
def test_dlpack_returning_a_non_capsule_is_refused_like_numpy(m, returned):
    theirs = raised(lambda: np.from_dlpack(Returns(returned)))
    ours = raised(lambda: m.import_report(Returns(returned)))
    assert isinstance(ours, type(theirs)), f"NumPy raised {theirs!r}, we raised {ours!r}"
    assert isinstance(ours, m.DLPackCapsuleError)


# --- exceptions raised by producers ---------------------------------------------------------


class Custom(Exception):
    pass


@pytest.mark.parametrize(
    "error", [BufferError("b"), ValueError("v"), RuntimeError("r"), KeyError("k"), Custom("c"), MemoryError()]
)
@pytest.mark.parametrize("options", [{}, {"copy": True}, {"dl_device": (1, 0)}], ids=repr)
def test_an_exception_inside_dlpack_reaches_the_caller_as_the_same_object(m, error, options):
    class Failing:
        def __dlpack__(self, **kwargs):
            raise error

        def __dlpack_device__(self):
            return (1, 0)

    assert raised(lambda: m.import_report(Failing(), **options)) is error
    assert raised(lambda: m.import_safe_report(Failing(), **options)) is error
    if "dl_device" not in options:
        assert raised(lambda: np.from_dlpack(Failing(), **options)) is error


def test_an_attribute_error_raised_while_looking_up_dlpack_is_not_lost(m):
    """A `__dlpack__` property whose getter fails with AttributeError (a bug in the producer):
    NumPy raises that AttributeError; the importer replaces it with "expected an object with
    __dlpack__", which hides the real error (not even chained as __cause__ / __context__)."""

    class Lazy:
        @property
        def __dlpack__(self):
            raise AttributeError("the wrapped tensor was released")

        def __dlpack_device__(self):
            return (1, 0)

    theirs = raised(lambda: np.from_dlpack(Lazy()))
    ours = raised(lambda: m.import_report(Lazy()))
    assert type(theirs) is AttributeError
    chain = [ours, ours.__cause__, ours.__context__]
    assert any("the wrapped tensor was released" in str(e) for e in chain if e is not None), repr(ours)


# --- lifetime ------------------------------------------------------------------------------


def test_exported_memory_outlives_the_rust_owner_for_every_consumer(m, balanced):
    import tvm_ffi

    values = np.arange(16.0)
    gc.collect()
    made0, freed0 = m.counters()
    held = []
    for consume in [np.from_dlpack, jnp.from_dlpack, tvm_ffi.from_dlpack, m.reexport]:
        t = m.from_bytes(values.tobytes(), NUMPY_DTYPES["float64"], [16])
        held.append(consume(t))
        del t
    held.append(m.reexport(m.from_bytes(values.tobytes(), NUMPY_DTYPES["float64"], [16]).__dlpack__()))
    gc.collect()
    made, freed = m.counters()
    for x in held:
        np.testing.assert_array_equal(np.from_dlpack(x), values)
    del x
    # NumPy, tvm-ffi and the Rust importer share the buffer; JAX may copy (it then deletes at
    # once). Either way nothing is freed while still in use.
    still_used = made - made0 - (freed - freed0)
    assert still_used >= 4
    del held
    gc.collect()
    made, freed = m.counters()
    assert made - freed == made0 - freed0


# --- threads -------------------------------------------------------------------------------


def test_concurrent_imports_and_exports_balance(m, balanced):
    import tvm_ffi

    arrays = [np.arange(64.0) for _ in range(4)]
    refs = [sys.getrefcount(arrays[i]) for i in range(len(arrays))]
    shared = f64(m)
    errors = []

    def work(a):
        try:
            for _ in range(rounds(3000)):
                m.import_safe_report(a)
                m.import_report(a.__dlpack__())
                np.from_dlpack(shared)
                jnp.from_dlpack(shared)
                m.import_report(shared.__dlpack__(max_version=(1, 0)))
                m.import_safe_report(tvm_ffi.core.DLTensorTestWrapper(tvm_ffi.from_dlpack(a)))
                with pytest.raises(RuntimeError):
                    shared.__dlpack__(stream=1)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(a,)) for a in arrays]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    del shared, threads
    gc.collect()
    # (computed outside the assert: pytest's rewriting would hold one more reference)
    now = [sys.getrefcount(arrays[i]) for i in range(len(arrays))]
    assert now == refs


def test_a_capsule_raced_for_by_many_threads_is_taken_exactly_once(m, balanced):
    t = f64(m)
    for _ in range(100):
        capsule = t.__dlpack__(max_version=(1, 0))
        barrier = threading.Barrier(6)
        wins, losses = [], []

        def grab():
            barrier.wait()
            try:
                m.import_report(capsule)
                wins.append(1)
            except ValueError as e:
                losses.append(str(e))

        threads = [threading.Thread(target=grab) for _ in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(wins) == 1 and len(losses) == 5
        assert all("only once" in s for s in losses)


# --- leaks ---------------------------------------------------------------------------------


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_100000_imports_from_jax_and_failed_calls_leave_nothing_behind(m):
    j = jnp.arange(256.0)
    a = np.arange(256.0)
    t = m.from_bytes(a.tobytes(), NUMPY_DTYPES["float64"], [256])

    class NonCapsule:
        def __dlpack__(self, **kwargs):
            return 42

    def failures():
        for action in (
            lambda: t.__dlpack__(stream=1),
            lambda: t.__dlpack__(max_version=(1,)),
            lambda: t.__dlpack__(bogus=None),
            lambda: t.__dlpack__(dl_device=(2, 0)),
            lambda: m.import_report(NonCapsule()),
            lambda: m.import_report(a, stream=3),
            lambda: m.import_report(a.__dlpack__(max_version=(1, 0)), dl_device=(2, 0)),
        ):
            try:
                action()
            except Exception:
                pass

    refs = sys.getrefcount(a)
    for _ in range(rounds(2000)):
        m.import_loop(j, 1)
        failures()
    gc.collect()
    rss0 = rss_bytes()
    made0, freed0 = m.counters()
    m.import_loop(j, rounds(50_000))
    m.import_loop(j, rounds(50_000), "dlpack")
    for _ in range(rounds(10_000)):
        failures()
    gc.collect()
    grown = rss_bytes() - rss0
    assert m.counters() == (made0, freed0)
    refs_now = sys.getrefcount(a)
    assert refs_now == refs
    if not UNDER_VALGRIND:
        assert grown < 4 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB"
