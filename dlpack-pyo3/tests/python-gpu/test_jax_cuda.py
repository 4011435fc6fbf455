"""CUDA tensors between Rust and JAX through dlpack-pyo3's `cuda` feature: pointer identity,
values and the stream handshake, both ways.

JAX's GPU side differs from PyTorch's and CuPy's in what reaches the Rust code:

- into Rust, ``jax.Array.__dlpack__`` ignores ``max_version`` and hands out a legacy
  ``"dltensor"`` capsule, and with ``stream=1`` (what the Rust importer passes) XLA makes the
  legacy default stream wait for the buffer's definition event;
- out of Rust, ``jax.dlpack.from_dlpack`` passes ``stream=`` the handle of XLA's own stream
  (``Device.get_stream_for_external_ready_events()``, neither 1 nor 2), so the Rust producer's
  event is recorded on its stream and waited on by XLA's.

Like test_cuda.py, these run only with ``DLPACK_TEST_CUDA=1``. JAX is optional on the GPU
machine (scripts/gpu-kit needs only PyTorch and CuPy): a missing ``jax`` is a skip, but a JAX
that imports and has no GPU backend while ``DLPACK_TEST_CUDA=1`` is a failure.
"""

import os

import pytest

# As conftest.py decides (not imported from it: pytest may load another conftest module under
# that name when several test folders are collected together).
GPU = os.environ.get("DLPACK_TEST_CUDA") == "1"
NOT_RUN = (
    "the GPU tests did not run: set DLPACK_TEST_CUDA=1 on a machine with a CUDA GPU, "
    "PyTorch and CuPy"
)

# JAX would otherwise take 75% of the GPU's memory when its backend starts, beside the PyTorch
# and CuPy of the same pytest process; the tests need a few MB.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

VALUES = [float(i) for i in range(12)]


@pytest.fixture(scope="session")
def jax_gpu(m):
    """``(jax, the first JAX GPU device)``; skips with the reason printed unless
    DLPACK_TEST_CUDA=1 (or when JAX is not installed), fails when the switch is set and JAX
    imports without a GPU backend, or when the CUDA driver does not load for the Rust side."""
    try:
        import jax
    except ImportError as err:
        pytest.skip(f"the JAX GPU tests did not run: JAX is not installed ({err})")
    try:
        devices = jax.devices("gpu")
        why = None
    except RuntimeError as err:
        devices, why = [], f"{type(err).__name__}: {err}"
    state = (
        f"JAX {jax.__version__} sees {devices}"
        if devices
        else f"JAX {jax.__version__} has no GPU backend ({why})"
    )
    if not GPU:
        pytest.skip(f"{NOT_RUN}; for this file also JAX with its CUDA plugin ({state})")
    assert devices, (
        f"DLPACK_TEST_CUDA=1 but {state}; install jax[cuda13] (the jax-cuda13 plugin) or "
        "uninstall jax to skip these tests"
    )
    error = m.cuda_driver_error()
    assert error is None, f"DLPACK_TEST_CUDA=1 but {error}"
    return jax, devices[0]


def on_gpu(jax_gpu, values, shape):
    """A float32 JAX array of `values` (row-major `shape`) committed to the GPU, ready."""
    import numpy as np

    jax, device = jax_gpu
    host = np.asarray(values, dtype=np.float32).reshape(shape)
    return jax.device_put(host, device).block_until_ready()


def host_list(array):
    import numpy as np

    return np.asarray(array).flatten().tolist()


def test_jax_into_rust_without_a_copy(m, jax_gpu):
    x = on_gpu(jax_gpu, VALUES, (3, 4))
    dl_type, dl_id = x.__dlpack_device__()
    assert int(dl_type) == 2, "kDLCUDA"
    r = m.cuda_import_report(x)
    assert r["device"] == (2, int(dl_id))
    assert r["kind"] == "Device"
    assert r["data_ptr"] == x.unsafe_buffer_pointer()
    assert (r["shape"], r["strides"], r["dtype"]) == ([3, 4], [4, 1], "float32")
    assert r["values"] == VALUES


def test_a_pending_jax_computation_is_ordered_before_the_rust_copy(m, jax_gpu):
    """JAX dispatches asynchronously: the import runs while the loop may still be on the GPU.
    XLA makes the stream the Rust importer names (1, the legacy default stream) wait for the
    result, and the Rust copy to the host on that stream sees the final values."""
    jax, device = jax_gpu
    import jax.numpy as jnp

    # 1000 passes over 16 MB: some 10 ms of GPU time, far longer than reaching the import.
    @jax.jit
    def work(v):
        return jax.lax.fori_loop(0, 1000, lambda i, acc: acc + 1.0, v)

    x = jax.device_put(jnp.zeros(1 << 22, dtype=jnp.float32), device).block_until_ready()
    work(x).block_until_ready()  # compiled outside the measured call
    y = work(x)  # not waited for
    pending = not y.is_ready()
    r = m.cuda_import_report(y)
    assert set(r["values"]) == {1000.0}, f"the result was pending at the import: {pending}"
    assert r["data_ptr"] == y.unsafe_buffer_pointer()


def test_rust_into_jax_without_a_copy(m, jax_gpu):
    """jax.dlpack.from_dlpack passes XLA's own stream handle; the Rust producer orders its
    upload (on the legacy default stream) before it with an event."""
    jax, device = jax_gpu
    import jax.dlpack

    rust, address = m.cuda_f32(VALUES, [3, 4])
    x = jax.dlpack.from_dlpack(rust)
    assert x.devices() == {device}
    assert (x.shape, str(x.dtype)) == ((3, 4), "float32")
    assert x.unsafe_buffer_pointer() == address
    assert host_list(x) == VALUES
    # And back into Rust: the same memory still.
    r = m.cuda_import_report(x)
    assert (r["data_ptr"], r["kind"]) == (address, "Device")
    assert r["values"] == VALUES


def test_rust_into_jax_numpy_from_dlpack_without_a_copy(m, jax_gpu):
    jax, device = jax_gpu
    import jax.numpy as jnp

    rust, address = m.cuda_f32(VALUES, [12])
    x = jnp.from_dlpack(rust)
    assert x.devices() == {device}
    assert x.unsafe_buffer_pointer() == address
    # JAX computes on the imported memory, on its own stream.
    assert host_list(x * 2.0) == [2.0 * v for v in VALUES]
    # The Rust tensor outlives JAX's view of it, and the reverse: both free cleanly.
    del x
    assert host_list(jnp.from_dlpack(rust)) == VALUES
