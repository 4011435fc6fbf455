# Hardening (issue 9): Debian's valgrind (hardening.packages.sh installs it), for the leak check
# over dlpack-core's integration tests in hardening.background.sh. Not needed with --quick.

if ((!QUICK)); then
    step "valgrind for the leak check (Debian package valgrind)"
    command -v valgrind >/dev/null ||
        die "the leak check needs valgrind, which is missing (Debian, as root: apt-get install valgrind)"
    echo "    have $(valgrind --version)"
fi
