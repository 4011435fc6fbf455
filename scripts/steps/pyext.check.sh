# examples/python-extension: the example extension module built the way its README tells users
# to (pip, with maturin as the PEP 517 backend, which builds it in the workspace's target/ and
# without libpython) into .venv, then its pytest suite with NumPy and JAX: no copy either way,
# and the TypeError of a wrong dtype.

step "Python extension example (pip install examples/python-extension, pytest)"
# maturin's PEP 517 hooks run the `maturin` program from PATH: .venv/bin's, as in an activated
# venv. A target folder of its own: maturin hands pyo3's build script a configuration file
# (PYO3_CONFIG_FILE) that the test module's build does not, so in a shared target folder each
# build would rebuild pyo3 and everything above it for the other.
pyext_target="${CARGO_TARGET_DIR:-$ROOT/target}/pyext"
quietly "build and install examples/python-extension into .venv (pip install --no-build-isolation)" \
    env PATH="$ROOT/.venv/bin:$PATH" CARGO_TARGET_DIR="$pyext_target" .venv/bin/pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps \
    --force-reinstall "$ROOT/examples/python-extension"
pyext_so=$(.venv/bin/python -c 'import dlpack_example; print(dlpack_example.dlpack_example.__file__)') ||
    die "examples/python-extension was installed into .venv, but python cannot import dlpack_example"
if command -v readelf >/dev/null && readelf -d "$pyext_so" | grep -q 'NEEDED.*libpython'; then
    die "$pyext_so links libpython; an extension module must not"
fi
.venv/bin/python -m pytest -q -p no:cacheprovider "$ROOT/examples/python-extension/tests"
