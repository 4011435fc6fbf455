"""JAX (CPU) both ways: legacy capsules, and bfloat16."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from conftest import NUMPY_DTYPES


class Recorder:
    """Forwards __dlpack__ and remembers the arguments and the capsule handed out."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.calls = []
        self.capsules = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        capsule = self.tensor.__dlpack__(**kwargs)
        self.capsules.append(capsule)
        return capsule

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def test_jax_takes_a_legacy_capsule_from_rust_without_a_copy(m):
    values = np.arange(12, dtype=np.float32)
    t = m.from_bytes(values.tobytes(), NUMPY_DTYPES["float32"], [3, 4])
    spy = Recorder(t)
    j = jnp.from_dlpack(spy)
    np.testing.assert_array_equal(np.asarray(j), values.reshape(3, 4))
    # JAX asks without max_version, so it gets the legacy struct, and takes it by renaming.
    assert spy.calls == [{"stream": None}]
    assert repr(spy.capsules[0]).startswith('<capsule object "used_dltensor"')
    # 64-byte aligned data: JAX uses it in place.
    assert j.unsafe_buffer_pointer() == t.data_ptr


def test_jax_takes_a_column_major_rust_tensor(m):
    values = np.arange(6, dtype=np.int64)
    t = m.from_bytes(values.tobytes(), NUMPY_DTYPES["int64"], [2, 3], strides=[1, 2])
    j = jnp.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(j), values.reshape(3, 2).T)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "bool", "complex64"])
def test_rust_importer_takes_jax_legacy_capsules(m, dtype):
    j = jnp.asarray(np.arange(6).reshape(2, 3).astype(dtype))
    got = m.import_report(j)
    # JAX answers a versioned request with a legacy capsule; it imports read-only, as in NumPy.
    assert got["legacy"] and got["version"] == (0, 0)
    assert got["read_only"]
    assert got["dtype"] == NUMPY_DTYPES[dtype]
    assert got["shape"] == [2, 3]
    assert got["data_ptr"] == j.unsafe_buffer_pointer()
    assert m.import_values(j) == np.asarray(j).ravel().tolist()


def test_bfloat16_from_jax_to_rust(m):
    j = jnp.arange(-3, 5, dtype=jnp.bfloat16) / 2
    got = m.import_report(j)
    assert got["dtype"] == (4, 16, 1)
    assert m.import_values(j) == [float(x) for x in np.asarray(j).astype(np.float64)]


def test_bfloat16_from_rust_to_jax(m):
    values = (np.arange(8) / 4 - 1).astype(ml_dtypes.bfloat16)
    t = m.from_bytes(values.tobytes(), (4, 16, 1), [2, 4])
    j = jnp.from_dlpack(t)
    assert j.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(j), values.reshape(2, 4))
    assert j.unsafe_buffer_pointer() == t.data_ptr


def test_read_only_rust_tensor_is_refused_by_the_legacy_protocol(m):
    t = m.from_bytes(b"\0" * 16, NUMPY_DTYPES["float32"], [4], read_only=True)
    with pytest.raises(BufferError, match="read-only"):
        jnp.from_dlpack(t)
