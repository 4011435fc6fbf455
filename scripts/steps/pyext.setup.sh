# examples/python-extension: maturin, the example's build backend, pinned, in .venv, so that
# pyext.check.sh builds the example as a user's pip does, without a download per run
# (`pip install --no-build-isolation` uses the build backend the environment has). maturin's
# wheel has no Python dependencies on CPython >= 3.11.

step "maturin for the Python extension example (examples/python-extension)"
ensure_venv
PYEXT_PY_PINS=(maturin==1.16.0)
if has_pins .venv/bin/python "${PYEXT_PY_PINS[@]}"; then
    echo "    have ${PYEXT_PY_PINS[*]}"
else
    echo "    installing ${PYEXT_PY_PINS[*]} into .venv (pip)"
    quietly "install maturin into .venv (pip install ${PYEXT_PY_PINS[*]})" \
        .venv/bin/pip install --quiet --disable-pip-version-check --only-binary=:all: \
        "${PYEXT_PY_PINS[@]}"
fi
