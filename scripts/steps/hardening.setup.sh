# Hardening (issue 9): Debian's valgrind, for the leak check over dlpack-core's integration
# tests in hardening.check.sh. Not needed (and not installed) with --quick, which skips the check.

if ((!QUICK)); then
    step "valgrind for the leak check (Debian package valgrind)"
    if ! command -v valgrind >/dev/null; then
        if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
            echo "    installing valgrind (apt-get)"
            quietly "apt-get update" apt-get update -qq
            quietly "install valgrind" env DEBIAN_FRONTEND=noninteractive \
                apt-get install -y -qq --no-install-recommends valgrind
        else
            die "the leak check needs valgrind (the Debian package valgrind provides /usr/bin/valgrind); \
it is missing and this is not root with apt-get. Install it as root: apt-get install valgrind"
        fi
    fi
    echo "    have $(valgrind --version)"
fi
