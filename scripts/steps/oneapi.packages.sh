# dlpack-oneapi: Debian's Level Zero loader (libze1) and headers (libze-dev), both 1.8.12 on
# bookworm (API 1.4, the version the crate binds). The loader runs the crate's tests (with no
# driver, and with the workspace's test-support driver); the headers are what the layout test
# compiles C against. No GPU driver is needed or installed.

# Whether the loader is installed. A here-string, not a pipe: `grep -q` stops at the first
# match, and under pipefail the SIGPIPE that ldconfig then gets would count it as missing.
oneapi_have_loader() {
    grep -q 'libze_loader\.so\.1 ' <<<"$("$(command -v ldconfig || echo /sbin/ldconfig)" -p 2>/dev/null)"
}
oneapi_have_headers() {
    [[ -f /usr/include/level_zero/ze_api.h ]]
}
oneapi_have_loader || need_debian libze1 "libze_loader.so.1, the Level Zero loader of dlpack-oneapi's tests"
oneapi_have_headers || need_debian libze-dev "/usr/include/level_zero/ze_api.h, for dlpack-oneapi's layout test"
