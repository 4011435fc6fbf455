# dlpack-oneapi: Debian's Level Zero loader (libze1) and headers (libze-dev), both 1.8.12 on
# bookworm (API 1.4, the version the crate binds). The loader runs the crate's tests (with no
# driver, and with the workspace's test-support driver); the headers are what the layout test
# compiles C against. No GPU driver is needed or installed.

step "Level Zero loader and headers for dlpack-oneapi (libze1, libze-dev)"
oneapi_ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
oneapi_missing=()
# A here-string, not a pipe: `grep -q` stops at the first match, and under pipefail the
# SIGPIPE that ldconfig then gets would count the installed loader as missing.
grep -q 'libze_loader\.so\.1 ' <<<"$("$oneapi_ldconfig" -p 2>/dev/null)" || oneapi_missing+=(libze1)
[[ -f /usr/include/level_zero/ze_api.h ]] || oneapi_missing+=(libze-dev)
if ((${#oneapi_missing[@]})); then
    apt_install "${oneapi_missing[@]}" ||
        die "dlpack-oneapi's tests need Debian's Level Zero packages; missing: ${oneapi_missing[*]} \
(libze1 provides libze_loader.so.1, libze-dev provides /usr/include/level_zero/ze_api.h), and \
$APT_WHY. Install them (Debian, as root: apt-get install ${oneapi_missing[*]})"
fi
if command -v dpkg-query >/dev/null; then
    echo "    have $(dpkg-query -W -f='${Package} ${Version}  ' libze1 libze-dev 2>/dev/null)"
fi
# From here on a missing loader or header is a test failure, not a printed NOT RUN.
export DLPACK_REQUIRE_ZE_LOADER=1 DLPACK_REQUIRE_ZE_HEADERS=1
