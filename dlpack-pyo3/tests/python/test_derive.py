"""A struct with #[derive(DLPack)] crosses into NumPy without a copy, and NumPy arrays come
into it (a copy into its Vec, since NumPy owns that memory)."""

import numpy as np
import pytest

import dlpack_testmod as tm


@pytest.mark.parametrize("transposed", [False, True])
def test_a_derived_struct_is_a_numpy_array_on_the_same_memory(transposed):
    tensor, address = tm.derived_image(3, 4, transposed)
    a = np.from_dlpack(tensor)
    assert a.dtype == np.uint16
    assert a.ctypes.data == address
    expected = np.arange(12, dtype=np.uint16).reshape(3, 4)
    np.testing.assert_array_equal(a, expected.T if transposed else expected)


def test_a_numpy_array_imports_into_the_derived_struct_as_a_row_major_copy():
    src = np.arange(12, dtype=np.uint16).reshape(3, 4).T  # F order: strides (1, 4)
    hw, strides, pixels = tm.to_derived_image(src)
    assert hw == [4, 3] and strides == [3, 1]
    assert pixels == src.ravel(order="C").tolist()


def test_a_wrong_dtype_or_ndim_is_refused_with_numpys_error_type():
    with pytest.raises(BufferError, match="float32"):
        tm.to_derived_image(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(BufferError):
        tm.to_derived_image(np.zeros(4, dtype=np.uint16))
