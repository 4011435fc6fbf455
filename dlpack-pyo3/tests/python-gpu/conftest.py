"""Set-up of dlpack-pyo3's CUDA tests (PyTorch, CuPy and JAX against the Rust CUDA path).

The test module must be built with its `cuda` feature (scripts/steps/pyo3.check.sh does:
``PYO3_BUILD_EXTENSION_MODULE=1 cargo build -p dlpack-pyo3-testmod --release --features cuda``)
and copied as ``dlpack_testmod.abi3.so`` into the folder named by ``DLPACK_TESTMOD_DIR``.

The GPU tests run only with ``DLPACK_TEST_CUDA=1``; then a missing driver, GPU, PyTorch or CuPy
is a failure. Without the switch they are skipped with a reason that pytest prints (``-rs``).
This folder does not import the CPU tests' helpers, so it runs wherever PyTorch and CuPy are
installed; JAX is optional (test_jax_cuda.py skips without it, and fails under
``DLPACK_TEST_CUDA=1`` only when JAX imports without a GPU backend).
"""

import os
import sys

import pytest

_DIR = os.environ.get("DLPACK_TESTMOD_DIR")
if not _DIR:
    raise pytest.UsageError(
        "DLPACK_TESTMOD_DIR is not set: point it at the folder holding dlpack_testmod.abi3.so "
        "built with --features cuda (scripts/steps/pyo3.check.sh)"
    )
sys.path.insert(0, _DIR)

GPU = os.environ.get("DLPACK_TEST_CUDA") == "1"
NOT_RUN = (
    "the GPU tests did not run: set DLPACK_TEST_CUDA=1 on a machine with a CUDA GPU, "
    "PyTorch and CuPy"
)


@pytest.fixture(scope="session")
def m():
    import dlpack_testmod

    if not hasattr(dlpack_testmod, "cuda_import_report"):
        pytest.fail("dlpack_testmod was built without its `cuda` feature")
    return dlpack_testmod


@pytest.fixture(scope="session")
def gpu(m):
    """Skips (with the reason printed) unless DLPACK_TEST_CUDA=1; then the driver must load."""
    if not GPU:
        pytest.skip(NOT_RUN)
    error = m.cuda_driver_error()
    assert error is None, f"DLPACK_TEST_CUDA=1 but {error}"


@pytest.fixture(scope="session")
def torch(gpu):
    import torch

    assert torch.cuda.is_available(), "DLPACK_TEST_CUDA=1 but torch sees no CUDA device"
    return torch


@pytest.fixture(scope="session")
def cupy(gpu):
    import cupy

    return cupy
