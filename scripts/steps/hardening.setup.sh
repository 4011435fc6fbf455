# Hardening (issue 9): Debian's valgrind, for the leak check over dlpack-core's integration
# tests in hardening.check.sh. Not needed (and not installed) with --quick, which skips the check.

if ((!QUICK)); then
    step "valgrind for the leak check (Debian package valgrind)"
    if ! command -v valgrind >/dev/null; then
        apt_install valgrind ||
            die "the leak check needs valgrind (the Debian package valgrind provides /usr/bin/valgrind); \
it is missing and $APT_WHY. Install it (Debian, as root: apt-get install valgrind)"
    fi
    echo "    have $(valgrind --version)"
fi
