"""Misuse: each situation raises an exception of the type NumPy raises in the same situation,
and nothing is leaked or freed twice."""

import gc
import sys
import threading

import numpy as np
import pytest
from conftest import NUMPY_DTYPES, Returns


def raised(action):
    with pytest.raises(Exception) as info:
        action()
    return info.value


def assert_same_kind(numpy_action, our_action):
    """Our exception is an instance of the class NumPy raised."""
    theirs = raised(numpy_action)
    ours = raised(our_action)
    assert isinstance(ours, type(theirs)), f"NumPy raised {theirs!r}, we raised {ours!r}"
    return theirs, ours


@pytest.fixture
def balanced(m):
    """Checks that every Rust buffer made during the test is freed exactly once."""
    gc.collect()
    made, freed = m.counters()
    assert made == freed
    yield
    gc.collect()
    made_after, freed_after = m.counters()
    assert made_after == freed_after, "a Rust buffer was leaked"
    assert made_after > made, "the test made no Rust tensor"


def f64(m, **kwargs):
    return m.from_bytes(np.arange(4.0).tobytes(), NUMPY_DTYPES["float64"], [4], **kwargs)


def test_a_capsule_consumed_twice(m, balanced):
    a = np.arange(4.0)
    numpy_capsule = a.__dlpack__(max_version=(1, 0))
    np.from_dlpack(Returns(numpy_capsule))
    t = f64(m)
    our_capsule = t.__dlpack__(max_version=(1, 0))
    m.import_report(our_capsule)
    assert repr(our_capsule).startswith('<capsule object "used_dltensor_versioned"')
    theirs, ours = assert_same_kind(
        lambda: np.from_dlpack(Returns(numpy_capsule)), lambda: m.import_report(our_capsule)
    )
    assert type(ours) is ValueError and "only once" in str(ours)
    # NumPy refuses our used capsule too: the renaming is what the protocol expects.
    with pytest.raises(type(theirs)):
        np.from_dlpack(Returns(our_capsule))
    # And our importer refuses NumPy's.
    with pytest.raises(type(theirs)):
        m.import_report(numpy_capsule)


@pytest.mark.parametrize("legacy", [False, True])
def test_threads_racing_for_one_capsule_take_it_once(m, legacy):
    """Several threads import one capsule at once. On free-threaded CPython they run in
    parallel, and the importer's check of the capsule's name and its renaming are one critical
    section on the capsule; with the GIL (a switch interval of a microsecond lets the threads
    interleave wherever they call into Python), the same path runs. Either way exactly one
    thread takes the tensor, the others are told the capsule is used, and the tensor is deleted
    once."""
    threads, rounds = 4, 100
    gc.collect()
    made0, freed0 = m.counters()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(rounds):
            t = f64(m)
            capsule = t.__dlpack__() if legacy else t.__dlpack__(max_version=(1, 0))
            del t  # the capsule's export is the tensor's last owner
            start = threading.Barrier(threads)
            taken, refused, other = [], [], []

            def consume():
                start.wait()
                try:
                    taken.append(m.import_report(capsule)["shape"])
                except ValueError as e:
                    refused.append(str(e))
                except BaseException as e:  # noqa: BLE001 - any other outcome fails the test
                    other.append(repr(e))

            workers = [threading.Thread(target=consume) for _ in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            assert not other, other
            assert taken == [[4]], f"{len(taken)} threads took the capsule: {refused}"
            assert len(refused) == threads - 1
            assert all("only once" in e or "another consumer" in e for e in refused), refused
            del capsule
            made, freed = m.counters()
            assert freed - freed0 == made - made0, "the tensor was not deleted exactly once"
    finally:
        sys.setswitchinterval(interval)
    made, freed = m.counters()
    assert (made - made0, freed - freed0) == (rounds, rounds)


@pytest.mark.parametrize("legacy", [False, True])
def test_numpy_consumes_our_capsule_once(m, balanced, legacy):
    t = f64(m)
    capsule = t.__dlpack__() if legacy else t.__dlpack__(max_version=(1, 0))
    a = np.from_dlpack(Returns(capsule))
    assert a.ctypes.data == t.data_ptr
    with pytest.raises(ValueError):
        np.from_dlpack(Returns(capsule))


@pytest.mark.parametrize("name", ["numpy_array", "DLTensor", "dltensor_versioned ", ""])
def test_a_wrong_capsule_name(m, name):
    capsule = m.foreign_capsule(name)
    _, ours = assert_same_kind(
        lambda: np.from_dlpack(Returns(capsule)), lambda: m.import_report(capsule)
    )
    # dlpack-core calls it a TypeError (the wrong kind of object); NumPy a ValueError.
    assert isinstance(ours, TypeError) and isinstance(ours, ValueError)
    assert type(ours).__name__ == "DLPackCapsuleError"
    assert type(ours) is m.DLPackCapsuleError


def test_dlpack_returning_something_else_than_a_capsule(m):
    _, ours = assert_same_kind(
        lambda: np.from_dlpack(Returns(42)), lambda: m.import_report(Returns(42))
    )
    assert isinstance(ours, m.DLPackCapsuleError)


@pytest.mark.parametrize("name", ["used_dltensor", "used_dltensor_versioned"])
def test_a_used_capsule(m, name):
    capsule = m.foreign_capsule(name)
    _, ours = assert_same_kind(
        lambda: np.from_dlpack(Returns(capsule)), lambda: m.import_report(capsule)
    )
    assert type(ours) is ValueError


@pytest.mark.parametrize("stream", [-1, 0, 1, 2, 3, 12345])
def test_a_stream_on_a_cpu_tensor(m, balanced, stream):
    a = np.arange(4.0)
    t = f64(m)
    _, ours = assert_same_kind(
        lambda: a.__dlpack__(stream=stream), lambda: t.__dlpack__(stream=stream)
    )
    # dlpack-core calls it a ValueError (the standard's word); NumPy a RuntimeError.
    assert isinstance(ours, ValueError) and isinstance(ours, RuntimeError)
    assert type(ours) is m.DLPackStreamError
    assert f"stream={stream}" in str(ours)


def test_a_stream_of_the_wrong_type(m, balanced):
    t = f64(m)
    with pytest.raises(TypeError):
        t.__dlpack__(stream="default")


def test_copy_false_when_a_copy_is_needed(m, balanced):
    a = np.arange(4.0)
    device_tensor = f64(m, device=(12, 0), hooks=True)
    _, ours = assert_same_kind(
        lambda: a.__dlpack__(dl_device=(2, 0), copy=False),
        lambda: device_tensor.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False),
    )
    assert type(ours) is BufferError and "copy=False" in str(ours)
    # Through NumPy's own from_dlpack as the consumer, too.
    with pytest.raises(BufferError):
        np.from_dlpack(device_tensor, device="cpu", copy=False)
    assert m.hook_log() == []


@pytest.mark.parametrize("dl_device", [(2, 0), (1, 1), (14, 0), (99, 0)])
def test_an_unsupported_dl_device(m, balanced, dl_device):
    a = np.arange(4.0)
    t = f64(m)
    for copy in (None, True, False):
        _, ours = assert_same_kind(
            lambda: a.__dlpack__(max_version=(1, 0), dl_device=dl_device, copy=copy),
            lambda: t.__dlpack__(max_version=(1, 0), dl_device=dl_device, copy=copy),
        )
        assert type(ours) is BufferError


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_version": 3},
        {"max_version": [1, 0]},
        {"max_version": (1,)},
        {"max_version": (1, 0, 0)},
        {"max_version": ("1", "0")},
        {"dl_device": 3},
        {"dl_device": (1, "0")},
        {"an_unknown_keyword": None},
    ],
)
def test_arguments_of_the_wrong_type(m, balanced, kwargs):
    a = np.arange(4.0)
    t = f64(m)
    assert_same_kind(lambda: a.__dlpack__(**kwargs), lambda: t.__dlpack__(**kwargs))


def test_positional_arguments_are_refused(m, balanced):
    a = np.arange(4.0)
    t = f64(m)
    assert_same_kind(lambda: a.__dlpack__(None), lambda: t.__dlpack__(None))
    assert_same_kind(
        lambda: a.__dlpack__(None, max_version=(1, 0)), lambda: t.__dlpack__(None, max_version=(1, 0))
    )


def test_keyword_names_made_at_run_time(m, balanced):
    """Names that are not interned (built at run time) are matched by value."""
    t = f64(m)
    name = "".join(["max_", "version"])
    capsule = t.__dlpack__(**{name: (1, 0), "".join(["co", "py"]): None})
    assert repr(capsule).startswith('<capsule object "dltensor_versioned"')
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_versio'"):
        t.__dlpack__(**{name[:-1]: (1, 0)})


def test_the_signature_is_the_standards(m):
    import inspect

    t = f64(m)
    expected = "(*, stream=None, max_version=None, dl_device=None, copy=None)"
    assert str(inspect.signature(t.__dlpack__)) == expected
    assert str(inspect.signature(np.arange(1.0).__dlpack__)) == expected


def test_an_object_without_dlpack(m):
    with pytest.raises(TypeError, match="__dlpack__"):
        m.import_report(object())


def test_a_failed_export_leaves_nothing_behind(m, balanced):
    t = f64(m, read_only=True)
    for _ in range(3):
        with pytest.raises(BufferError):
            t.__dlpack__()  # read-only as legacy
        with pytest.raises(RuntimeError):
            t.__dlpack__(stream=1)
    del t


class IntPair(tuple):
    """A tuple subclass: read by the general extraction, not the exact-tuple shortcut."""


@pytest.mark.parametrize(
    "max_version,name",
    [
        ((1, 0), "dltensor_versioned"),
        ((0, 9), "dltensor"),
        ((0, 3), "dltensor"),  # ints the shortcut knows by identity
        ((1, 7), "dltensor_versioned"),  # an int it reads with PyLong_AsLong
        ((int("1"), int("2")), "dltensor_versioned"),  # ints made at run time
        ((True, False), "dltensor_versioned"),  # bools are ints, through the general path
        (IntPair((1, 3)), "dltensor_versioned"),
        ((np.int64(1), 0), "dltensor_versioned"),  # an __index__ int, through the general path
    ],
)
def test_max_version_is_read_alike_by_both_paths(m, balanced, max_version, name):
    t = f64(m)
    capsule = t.__dlpack__(max_version=max_version)
    assert repr(capsule).startswith(f'<capsule object "{name}"')


@pytest.mark.parametrize("value", [(2**70, 0), (-1, 0), (1, 2**40)])
def test_max_version_out_of_range_is_an_overflow_error(m, balanced, value):
    """A pair of ints is the right type; ints that do not fit are an OverflowError, as CPython
    raises for an int argument out of a C type's range."""
    t = f64(m)
    with pytest.raises(OverflowError, match=r"max_version.*out of range.*0\.\.2\*\*32"):
        t.__dlpack__(max_version=value)
    with pytest.raises(TypeError, match="max_version.*must be a tuple of two ints"):
        t.__dlpack__(max_version=(1.0, 0))


@pytest.mark.parametrize("copy", [True, False, np.True_, np.False_])
def test_copy_is_read_alike_by_both_paths(m, balanced, copy):
    """The bool singletons take the shortcut, NumPy's bools the general extraction."""
    t = f64(m)
    got = m.import_report(t.__dlpack__(max_version=(1, 0), copy=copy))
    assert got["is_copied"] is bool(copy)
    assert (got["data_ptr"] == t.data_ptr) is not bool(copy)


def test_dl_device_is_read_alike_by_both_paths(m, balanced):
    t = f64(m)
    for dl_device in [(1, 0), IntPair((1, 0)), (np.int32(1), 0)]:
        capsule = t.__dlpack__(max_version=(1, 0), dl_device=dl_device)
        assert repr(capsule).startswith('<capsule object "dltensor_versioned"')
    with pytest.raises(OverflowError, match=r"dl_device.*out of range"):
        t.__dlpack__(dl_device=(2**40, 0))
    with pytest.raises(TypeError, match="dl_device.*must be a tuple of two ints"):
        t.__dlpack__(dl_device=(1, "0"))


def test_the_method_called_through_the_type_checks_its_self(m):
    """`DLPackTensor.__dlpack__(other)` is refused before the export reads `other` as a tensor."""
    method = type(f64(m)).__dlpack__
    for other in [np.arange(3.0), object(), None]:
        with pytest.raises(TypeError, match="DLPackTensor"):
            method(other, max_version=(1, 0))
    assert repr(method(f64(m), max_version=(1, 0))).startswith('<capsule object "dltensor_versioned"')


@pytest.mark.parametrize(
    "copy", [1, 0, 2.0, np.array(True), np.array([1, 2, 3]), "x", [], [0]],
    ids=["1", "0", "2.0", "0-d array", "3-element array", "str", "empty list", "list"],
)
def test_copy_is_read_by_its_truth_value_as_numpy_reads_it(m, balanced, copy):
    a = np.arange(4.0)
    t = f64(m)
    try:
        a.__dlpack__(copy=copy)
    except Exception as theirs:
        with pytest.raises(type(theirs)) as ours:
            t.__dlpack__(max_version=(1, 0), copy=copy)
        assert type(ours.value) is type(theirs) is ValueError
        return
    got = m.import_report(t.__dlpack__(max_version=(1, 0), copy=copy))
    assert got["is_copied"] is bool(copy)


def test_a_device_tensor_the_host_cannot_read_says_how_to_get_a_host_copy(m):
    t = m.from_bytes(bytes(8), NUMPY_DTYPES["float32"], [2], device=(14, 0), hooks=True)
    with pytest.raises(BufferError, match=r"oneapi:0.*dl_device=\(1, 0\)"):
        m.import_values(t)
    # As the message says: the producer copies to the host.
    assert m.import_safe_report(t, dl_device=(1, 0))["device"] == (1, 0)
    m.hook_log()
