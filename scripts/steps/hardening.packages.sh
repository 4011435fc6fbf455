# Hardening: Debian's valgrind, for the leak checks (hardening.background.sh, and the valgrind runs of
# dlpack-cuda.check.sh and pyo3.check.sh). Not needed with --quick, which skips them.

if ((!QUICK)) && ! command -v valgrind >/dev/null; then
    need_debian valgrind "/usr/bin/valgrind, for the leak checks"
fi
