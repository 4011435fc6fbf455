# dlpack-pyo3's PyTorch tests (dlpack-pyo3/tests/python-torch), only with DLPACK_TEST_TORCH=1:
# the interpreter they run under is DLPACK_TORCH_PYTHON when set (it must import torch and
# pytest), else the venv .venv-torch, made here with .venv's Python and PyTorch from PyPI,
# pinned. PyPI's torch for Linux x86_64 pulls NVIDIA's CUDA libraries (about 4.7 GB installed,
# 85 s to install here) and runs on the CPU without a GPU or driver; torch does not import
# without them. Without the switch nothing is installed (torch.check.sh says the tests did not
# run).

if [[ ${DLPACK_TEST_TORCH:-} == 1 ]]; then
    step "PyTorch for dlpack-pyo3's PyTorch tests (DLPACK_TEST_TORCH=1)"
    if [[ -n ${DLPACK_TORCH_PYTHON:-} ]]; then
        "$DLPACK_TORCH_PYTHON" -c 'import torch, pytest' ||
            die "DLPACK_TEST_TORCH=1, but DLPACK_TORCH_PYTHON=$DLPACK_TORCH_PYTHON cannot import torch and pytest"
        echo "    using $DLPACK_TORCH_PYTHON ($("$DLPACK_TORCH_PYTHON" -c 'import torch; print("torch", torch.__version__)'))"
    else
        ensure_venv
        # Exactly these versions (PyPI, CPython 3.11, manylinux x86_64): torch, pytest and every
        # package they pull in, so that a new release cannot change a run.
        TORCH_PY_PINS=(
            torch==2.11.0
            pytest==9.2.0
            # pulled in by torch
            filelock==4.3.1
            fsspec==2026.9.0
            Jinja2==3.1.6
            MarkupSafe==3.0.4
            mpmath==1.3.0
            networkx==3.6.1
            sympy==1.14.0
            triton==3.6.0
            typing_extensions==4.16.0
            cuda-bindings==13.5.0
            cuda-pathfinder==1.9.1
            cuda-toolkit==13.0.2
            nvidia-cublas==13.1.0.3
            nvidia-cuda-cupti==13.0.85
            nvidia-cuda-nvrtc==13.0.88
            nvidia-cuda-runtime==13.0.96
            nvidia-cudnn-cu13==9.19.0.56
            nvidia-cufft==12.0.0.61
            nvidia-cufile==1.15.1.6
            nvidia-curand==10.4.0.35
            nvidia-cusolver==12.0.4.66
            nvidia-cusparse==12.6.3.3
            nvidia-cusparselt-cu13==0.8.0
            nvidia-nccl-cu13==2.28.9
            nvidia-nvjitlink==13.0.88
            nvidia-nvshmem-cu13==3.4.5
            nvidia-nvtx==13.0.85
            # pulled in by pytest
            iniconfig==2.3.1
            packaging==26.4
            pluggy==1.7.0
            Pygments==2.21.0
        )
        # A venv whose interpreter still runs (a dangling link from a removed Python does not)
        # and has every pin.
        if has_pins .venv-torch/bin/python "${TORCH_PY_PINS[@]}"; then
            echo "    have torch 2.11.0 and its pins in .venv-torch"
        else
            # .venv's own interpreter (the one its python3 links to), so that the abi3 test
            # module built for .venv loads in .venv-torch too.
            torch_base=$(.venv/bin/python3 -c 'import sys; print(sys._base_executable)') ||
                die "cannot ask .venv/bin/python3 for its base interpreter"
            if ! [[ -x .venv-torch/bin/python ]] || ! .venv-torch/bin/python -c 'import pip' 2>/dev/null; then
                echo "    creating .venv-torch ($torch_base)"
                quietly "create the venv .venv-torch ($torch_base -m venv)" \
                    "$torch_base" -m venv --clear .venv-torch
            fi
            echo "    installing ${TORCH_PY_PINS[*]} into .venv-torch (pip; about 4.7 GB)"
            quietly "install PyTorch and pytest into .venv-torch (pip install ${TORCH_PY_PINS[*]})" \
                .venv-torch/bin/pip install --quiet --disable-pip-version-check --only-binary=:all: \
                "${TORCH_PY_PINS[@]}"
        fi
    fi
fi
