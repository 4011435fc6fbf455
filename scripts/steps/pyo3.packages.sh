# dlpack-pyo3: its Rust tests and doctests embed Python (pyo3's auto-initialize) and link
# libpython, which for Debian's Python is the development package's libpython3.X.so, not
# installed with python3 itself. The venv's interpreter is this python3, so its library is the
# one to look for.

pyo3_libpython() {
    python3 -c 'import os, sysconfig as s
shared = s.get_config_var("Py_ENABLE_SHARED")
print(os.path.join(s.get_config_var("LIBDIR") or "", s.get_config_var("LDLIBRARY") or "") if shared else "")'
}
pyo3_lib=$(pyo3_libpython)
if [[ -n "$pyo3_lib" && ! -e "$pyo3_lib" ]]; then
    need_debian python3-dev "$pyo3_lib, which dlpack-pyo3's Rust tests link"
fi
