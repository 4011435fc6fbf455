# dlpack-pyo3 with PyTorch on the CPU (dlpack-pyo3/tests/python-torch): the test module that
# pyo3.check.sh built (sourced before this file) against torch.from_dlpack, both ways. Only with
# DLPACK_TEST_TORCH=1, under DLPACK_TORCH_PYTHON (default .venv-torch, which torch.setup.sh
# makes); otherwise the step says the tests did not run (and the test module, run by hand
# without the switch, skips itself with that reason). About 5 s with the switch.

step "dlpack-pyo3 PyTorch tests (CPU; DLPACK_TEST_TORCH=${DLPACK_TEST_TORCH:-unset})"
[[ -n ${pyo3_ext:-} && -f "$pyo3_ext/dlpack_testmod.abi3.so" ]] ||
    die "the test module is missing: scripts/steps/pyo3.check.sh builds it (as \$pyo3_ext/dlpack_testmod.abi3.so) before this step"
if [[ ${DLPACK_TEST_TORCH:-} == 1 ]]; then
    torch_python=${DLPACK_TORCH_PYTHON:-$ROOT/.venv-torch/bin/python}
    "$torch_python" -c "import torch, pytest" ||
        die "DLPACK_TEST_TORCH=1, but $torch_python cannot import torch and pytest"
    DLPACK_TESTMOD_DIR="$pyo3_ext" "$torch_python" -m pytest -q -rs -p no:cacheprovider \
        "$ROOT/dlpack-pyo3/tests/python-torch"
else
    # Not run at all (pytest would collect nothing and exit 5): said so instead.
    echo "    the PyTorch tests did not run: set DLPACK_TEST_TORCH=1 (torch.setup.sh then installs PyTorch into .venv-torch, about 4.7 GB), or also DLPACK_TORCH_PYTHON to an interpreter with torch and pytest"
fi
