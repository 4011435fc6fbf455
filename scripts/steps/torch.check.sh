# dlpack-pyo3 with PyTorch on the CPU (dlpack-pyo3/tests/python-torch): the test module that
# pyo3.check.sh built (sourced before this file) against torch.from_dlpack, both ways. Only with
# DLPACK_TEST_TORCH=1, under DLPACK_TORCH_PYTHON (default .venv-torch, which torch.setup.sh
# makes); otherwise pytest runs the folder under .venv, which has no torch: the test module
# skips itself with the reason printed (-rs), and the step says the tests did not run. About 5 s
# with the switch.

step "dlpack-pyo3 PyTorch tests (CPU; DLPACK_TEST_TORCH=${DLPACK_TEST_TORCH:-unset})"
[[ -n ${pyo3_ext:-} && -f "$pyo3_ext/dlpack_testmod.abi3.so" ]] ||
    die "the test module is missing: scripts/steps/pyo3.check.sh builds it (as \$pyo3_ext/dlpack_testmod.abi3.so) before this step"
torch_python=.venv/bin/python
if [[ ${DLPACK_TEST_TORCH:-} == 1 ]]; then
    torch_python=${DLPACK_TORCH_PYTHON:-$ROOT/.venv-torch/bin/python}
    "$torch_python" -c "import torch, pytest" ||
        die "DLPACK_TEST_TORCH=1, but $torch_python cannot import torch and pytest"
fi
DLPACK_TESTMOD_DIR="$pyo3_ext" "$torch_python" -m pytest -q -rs -p no:cacheprovider \
    "$ROOT/dlpack-pyo3/tests/python-torch"
if [[ ${DLPACK_TEST_TORCH:-} != 1 ]]; then
    echo "    the PyTorch tests did not run: set DLPACK_TEST_TORCH=1 (torch.setup.sh then installs PyTorch into .venv-torch, about 4.7 GB), or also DLPACK_TORCH_PYTHON to an interpreter with torch and pytest"
fi
