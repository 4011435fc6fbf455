"""dlpack-pyo3's argument types (PyTensor, PyTensorMut, Imported) and result types (Exported,
HostArray) in #[pyfunction]s (dlpack-pyo3/testmod/src/args.rs), with NumPy, JAX and tvm-ffi."""

import sys

import jax.numpy as jnp
import numpy as np
import pytest
import tvm_ffi


# --- arguments: any producer, read in place -----------------------------------------------


def test_numpy_argument_is_read_in_place(m):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert m.address_f32(a) == a.ctypes.data
    assert m.sum_f32(a) == a.sum()


def test_strided_numpy_argument_is_read_in_place(m):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = a[1:, ::-2]
    assert m.address_f32(view) == view.ctypes.data
    assert m.sum_f32(view) == view.sum()


def test_jax_argument_is_read_in_place(m):
    j = jnp.arange(10, dtype=jnp.float32)
    assert m.address_f32(j) == j.unsafe_buffer_pointer()
    assert m.sum_f32(j) == 45.0


def test_tvm_ffi_argument_is_read_in_place(m):
    a = np.arange(6, dtype=np.float32)
    t = tvm_ffi.from_dlpack(a)
    assert m.address_f32(t) == a.ctypes.data
    assert m.sum_f32(t) == 15.0


def test_bare_capsule_argument(m):
    a = np.arange(4, dtype=np.float32)
    assert m.address_f32(a.__dlpack__()) == a.ctypes.data
    assert m.sum_f32(a.__dlpack__(max_version=(1, 0))) == 6.0


def test_rust_tensor_argument(m):
    t, address = m.vec_result(5)
    assert m.address_f32(t) == address
    assert m.sum_f32(t) == 10.0


def test_fixed_rank_argument(m):
    assert m.matrix_dims(np.zeros((3, 5))) == (3, 5)
    assert m.matrix_dims(np.zeros((0, 7))) == (0, 7)


def test_argument_released_after_the_call(m):
    # The import's deleter (NumPy's, which drops its reference to the array) runs when the
    # argument is dropped, at the end of the call; a refused one the same way.
    a = np.arange(8, dtype=np.float32)
    before = sys.getrefcount(a)
    for _ in range(100):
        m.sum_f32(a)
        with pytest.raises(TypeError):
            m.matrix_dims(a)
    assert sys.getrefcount(a) == before


def test_argument_read_with_the_interpreter_released(m):
    a = np.linspace(0, 1, 101)
    assert m.sum_detached(a) == pytest.approx(a.sum())


# --- arguments: refusals -------------------------------------------------------------------


def test_wrong_dtype_is_a_type_error_naming_the_argument(m):
    with pytest.raises(TypeError) as refused:
        m.sum_f32(np.zeros(3))
    assert str(refused.value) == "expected a float32 tensor, found a float64 tensor of shape [3]"
    # pyo3 names the argument in a note (Python >= 3.11), shown under the message.
    assert refused.value.__notes__ == ["while processing 'x'"]


def test_refusal_names_the_argument_that_did_not_fit(m):
    with pytest.raises(TypeError, match="expected a int64 tensor with 1 dimension") as refused:
        m.pair(np.zeros(2, dtype=np.float32), np.zeros(2, dtype=np.int32))
    assert refused.value.__notes__ == ["while processing 'b'"]
    assert m.pair(np.zeros(2, dtype=np.float32), np.zeros(3, dtype=np.int64)) == (2, 3)


def test_wrong_rank_is_a_type_error(m):
    with pytest.raises(TypeError) as refused:
        m.matrix_dims(np.zeros((2, 3, 4)))
    assert str(refused.value) == (
        "expected a float64 tensor with 2 dimensions, found a float64 tensor of shape [2, 3, 4]"
    )
    assert refused.value.__notes__ == ["while processing 'm'"]


def test_object_without_dlpack_is_a_type_error(m):
    with pytest.raises(TypeError, match="expected an object with __dlpack__") as refused:
        m.sum_f32([1.0, 2.0])
    assert refused.value.__notes__ == ["while processing 'x'"]


def test_misaligned_argument_is_a_buffer_error(m):
    raw = np.zeros(9, dtype=np.uint8)
    misaligned = raw[1:].view(np.float32)
    assert misaligned.ctypes.data % 4 != 0
    with pytest.raises(BufferError, match="not aligned"):
        m.sum_f32(misaligned)


# --- PyTensorMut ---------------------------------------------------------------------------


def test_writable_argument_is_written_in_place(m):
    a = np.arange(6, dtype=np.float32)
    m.scale_in_place(a, 2.0)
    np.testing.assert_array_equal(a, np.arange(6) * 2)
    # A strided view of a writable array is writable too.
    b = np.zeros((4, 6), dtype=np.int32)
    m.fill_matrix(b[::2, 1::2])
    expected = np.zeros((4, 6), dtype=np.int32)
    expected[::2, 1::2] = [[0, 1, 2], [10, 11, 12]]
    np.testing.assert_array_equal(b, expected)


def test_read_only_producers_are_refused_for_writing(m):
    j = jnp.zeros(3, dtype=jnp.float32)
    with pytest.raises(BufferError, match="read-only") as refused:
        m.scale_in_place(j, 2.0)
    assert refused.value.__notes__ == ["while processing 'x'"]
    a = np.zeros(3, dtype=np.float32)
    a.flags.writeable = False
    with pytest.raises(BufferError):
        m.scale_in_place(a, 2.0)
    np.testing.assert_array_equal(a, 0)


def test_shared_elements_are_refused_for_writing(m):
    a = np.zeros(1, dtype=np.float32)
    repeated = np.lib.stride_tricks.as_strided(a, shape=(4,), strides=(0,))
    assert repeated.flags.writeable
    with pytest.raises(BufferError, match="share memory|overlap"):
        m.scale_in_place(repeated, 2.0)


def test_writable_argument_checks_dtype_and_rank(m):
    with pytest.raises(TypeError, match="expected a float32 tensor, found a int32 tensor"):
        m.scale_in_place(np.zeros(3, dtype=np.int32), 2.0)
    with pytest.raises(TypeError, match="with 2 dimensions"):
        m.fill_matrix(np.zeros(3, dtype=np.int32))


# --- Imported: any dtype -------------------------------------------------------------------


def test_imported_argument_of_any_dtype(m):
    assert m.dtype_name(np.zeros(2, dtype=np.uint16)) == "uint16"
    assert m.dtype_name(jnp.zeros(2, dtype=jnp.bfloat16)) == "bfloat16"
    assert m.count_true(np.array([True, False, True])) == 2


def test_bools_python_wrote_out_of_range_are_refused_when_read(m):
    a = np.array([True, False, True])
    a.view(np.uint8)[1] = 2  # not a bool: Python code can write any byte
    with pytest.raises(BufferError, match="bool"):
        m.count_true(a)


# --- results -------------------------------------------------------------------------------


def test_vec_result_is_taken_by_numpy_without_a_copy(m):
    t, address = m.vec_result(6)
    a = np.from_dlpack(t)
    assert a.ctypes.data == address
    np.testing.assert_array_equal(a, np.arange(6, dtype=np.float32))
    assert type(t).__name__ == "DLPackTensor"


def test_boxed_slice_result(m):
    t, address = m.boxed_result(4)
    a = np.from_dlpack(t)
    assert (a.ctypes.data, a.dtype) == (address, np.int32)
    np.testing.assert_array_equal(a, [0, 1, 2, 3])


def test_managed_tensor_result_hands_the_same_memory_back(m):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)[:, 1:]
    back = np.from_dlpack(m.managed_result(a))
    assert back.ctypes.data == a.ctypes.data
    assert back.strides == a.strides
    np.testing.assert_array_equal(back, a)
    # The result keeps the array's memory alive after the array itself is gone.
    expected = a.copy()
    del a
    np.testing.assert_array_equal(back, expected)


def test_host_array_result_is_taken_by_numpy_and_jax_without_a_copy(m):
    t, address = m.host_array(3, 4)
    assert address % 64 == 0
    a = np.from_dlpack(t)
    assert a.ctypes.data == address
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4))
    j = jnp.from_dlpack(t)
    assert j.unsafe_buffer_pointer() == address
    np.testing.assert_array_equal(np.asarray(j), a)


def test_empty_host_array_result(m):
    t, _ = m.host_array(0, 4)
    assert np.from_dlpack(t).shape == (0, 4)


def test_zero_copy_both_ways_with_jax(m):
    x = jnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    t, address = m.scaled(x, 0.5)
    j = jnp.from_dlpack(t)
    assert j.unsafe_buffer_pointer() == address
    np.testing.assert_array_equal(np.asarray(j), np.asarray(x) * 0.5)


def test_host_array_of_a_strided_argument_is_row_major(m):
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T
    t, _ = m.scaled(a, 2.0)
    b = np.from_dlpack(t)
    assert b.shape == (4, 3) and b.flags.c_contiguous
    np.testing.assert_array_equal(b, a * 2)


def test_rust_result_as_the_next_argument(m):
    t, address = m.host_array(2, 2)
    assert m.address_f32(t) == address
    u, _ = m.scaled(t, 3.0)
    np.testing.assert_array_equal(np.from_dlpack(u), [[0, 3], [6, 9]])


# --- devices -------------------------------------------------------------------------------


@pytest.mark.parametrize("device", [(2, 0), (3, 0), (13, 1)], ids=["cuda", "cuda-host", "cuda-managed"])
def test_tensors_off_the_cpu_are_refused(m, device):
    # The test module's fake device: host memory labelled with another device type. Even memory
    # the host can map (pinned, managed) is refused: the plain import orders the producer's work
    # before the device's default stream, not before the host's reads.
    t = m.from_bytes(
        np.zeros(4, dtype=np.float32).tobytes(), (2, 32, 1), [4], device=device, hooks=True
    )
    with pytest.raises(BufferError, match=r"expected a tensor in CPU memory, found one on") as refused:
        m.sum_f32(t)
    assert refused.value.__notes__ == ["while processing 'x'"]
    with pytest.raises(BufferError, match="CPU memory"):
        m.scale_in_place(t, 2.0)
