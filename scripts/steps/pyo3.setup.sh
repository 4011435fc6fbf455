# dlpack-pyo3: the Python packages its tests use, pinned, in .venv; and the interpreter that
# pyo3's build script reads (sourced by scripts/test: the export stays for cargo and the check).

step "Python packages for dlpack-pyo3 (numpy, jax[cpu], apache-tvm-ffi, pytest)"
ensure_venv
# Exactly these versions (PyPI, CPython 3.11, manylinux x86_64), the packages the tests import
# and every package they pull in, so that a new release of a dependency cannot change a run.
# jax[cpu] is jax plus jaxlib (ml_dtypes, a dependency of jax, is used by the tests for its
# bfloat16); apache-tvm-ffi is the wheel the dlpack.h step downloads, reused from .cache/wheels.
PYO3_PY_PINS=(
    numpy==2.4.6
    ml_dtypes==0.6.0
    jax==0.10.2
    jaxlib==0.10.2
    apache-tvm-ffi==0.1.15.post2
    pytest==9.2.0
    # pulled in by jax and jaxlib
    opt_einsum==3.4.0
    scipy==1.17.1
    # pulled in by apache-tvm-ffi
    typing_extensions==4.16.0
    # pulled in by pytest
    iniconfig==2.3.1
    packaging==26.4
    pluggy==1.7.0
    Pygments==2.21.0
)
if has_pins .venv/bin/python "${PYO3_PY_PINS[@]}"; then
    echo "    have ${PYO3_PY_PINS[*]}"
else
    echo "    installing ${PYO3_PY_PINS[*]} into .venv (pip)"
    pyo3_links=()
    [[ -d "$ROOT/.cache/wheels" ]] && pyo3_links=(--find-links "$ROOT/.cache/wheels")
    quietly "install the Python packages of dlpack-pyo3's tests (pip install ${PYO3_PY_PINS[*]})" \
        .venv/bin/pip install --quiet --disable-pip-version-check --only-binary=:all: \
        "${pyo3_links[@]}" "${PYO3_PY_PINS[@]}"
fi
# pyo3's build script (dlpack-pyo3 and its test module) builds against this interpreter, and
# the Rust tests and doctests of dlpack-pyo3 embed it.
export PYO3_PYTHON="$ROOT/.venv/bin/python3"
[[ -x "$PYO3_PYTHON" ]] || die "$PYO3_PYTHON is missing: the venv .venv is broken; delete it and rerun"
# Those tests link libpython (pyo3's auto-initialize): pyo3.packages.sh has python3-dev installed
# where Debian's Python lacks the library.
pyo3_lib=$(pyo3_libpython)
[[ -z "$pyo3_lib" || -e "$pyo3_lib" ]] || die "dlpack-pyo3's tests link $pyo3_lib, which is missing: \
install Python's development files as root (Debian: apt-get install python3-dev) and rerun"
