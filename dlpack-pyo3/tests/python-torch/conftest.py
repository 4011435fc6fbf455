"""Set-up of dlpack-pyo3's PyTorch tests (CPU tensors both ways, with PyTorch's own
`torch.from_dlpack` as the reference).

The test module is the one the CPU tests use (``dlpack_testmod.abi3.so`` in the folder named by
``DLPACK_TESTMOD_DIR``; scripts/steps/pyo3.check.sh builds it), loaded into an interpreter that
has PyTorch: being abi3, it loads in any CPython >= 3.9.

The tests run only with ``DLPACK_TEST_TORCH=1``; then a missing PyTorch is a failure.
scripts/steps/torch.check.sh runs them under ``DLPACK_TORCH_PYTHON`` (default ``.venv-torch``,
which it creates with a pinned CPU-usable PyTorch). Without the switch they are skipped with a
reason that pytest prints (``-rs``), once for the module.
"""

import os
import sys

import pytest

_DIR = os.environ.get("DLPACK_TESTMOD_DIR")
if not _DIR:
    raise pytest.UsageError(
        "DLPACK_TESTMOD_DIR is not set: point it at the folder holding dlpack_testmod.abi3.so "
        "(scripts/steps/pyo3.check.sh builds it)"
    )
sys.path.insert(0, _DIR)

TORCH = os.environ.get("DLPACK_TEST_TORCH") == "1"
NOT_RUN = (
    "the PyTorch tests did not run: set DLPACK_TEST_TORCH=1 (scripts/test then installs "
    "PyTorch into .venv-torch: scripts/steps/torch.setup.sh)"
)


@pytest.fixture(scope="session")
def m():
    import dlpack_testmod

    return dlpack_testmod


@pytest.fixture(scope="session")
def torch():
    """PyTorch, which must import (the test modules skip themselves without the switch)."""
    if not TORCH:
        pytest.skip(NOT_RUN)
    import torch

    return torch
