"""dlpack_example with NumPy and JAX: no copy either way, and a clear refusal of the wrong dtype."""

import dlpack_example as m
import jax
import jax.numpy as jnp
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)


def test_numpy_in_place_both_ways():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    # Rust reads the array where NumPy keeps it.
    assert m.data_address(x) == x.ctypes.data
    assert m.total(x) == 66.0
    # The result is Rust memory that NumPy uses as it is.
    result = m.scale(x, 0.5)
    y = np.from_dlpack(result)
    assert y.ctypes.data == result.data_ptr == m.data_address(result)
    assert y.shape == (3, 4)
    np.testing.assert_array_equal(y, x * 0.5)


def test_jax_in_place_both_ways():
    x = jnp.arange(8, dtype=jnp.float32).reshape(2, 4)
    assert m.data_address(x) == x.unsafe_buffer_pointer()
    result = m.scale(x, 3.0)
    # JAX takes host memory in place only when it is 64-byte aligned, as the result is.
    y = jnp.from_dlpack(result)
    assert y.unsafe_buffer_pointer() == result.data_ptr
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x) * 3)


def test_strided_input_gives_a_row_major_result():
    x = np.arange(12, dtype=np.float32).reshape(3, 4).T[::2]
    assert m.data_address(x) == x.ctypes.data
    assert m.total(x) == x.sum()
    y = np.from_dlpack(m.scale(x, 2.0))
    assert y.flags.c_contiguous
    np.testing.assert_array_equal(y, x * 2)


def test_result_outlives_the_input():
    y = np.from_dlpack(m.scale(np.ones(5, dtype=np.float32), 4.0))
    np.testing.assert_array_equal(y, 4.0)


@pytest.mark.parametrize("make", [np.zeros, jnp.zeros])
def test_wrong_dtype_is_a_type_error(make):
    with pytest.raises(TypeError) as refused:
        m.scale(make(3, dtype=np.float64), 2.0)
    assert str(refused.value) == "expected a float32 tensor, found a float64 tensor of shape [3]"
    # pyo3 names the argument in a note, printed under the message.
    assert refused.value.__notes__ == ["while processing 'x'"]


def test_not_an_array_is_a_type_error():
    with pytest.raises(TypeError, match="expected an object with __dlpack__"):
        m.total([1.0, 2.0])
