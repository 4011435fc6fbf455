# dlpack-oneapi: checks that Debian's Level Zero loader and headers are there (see
# oneapi.packages.sh, which has them installed), and makes their absence a test failure.

step "Level Zero loader and headers for dlpack-oneapi (libze1, libze-dev)"
# Installed by the Debian packages step (oneapi.packages.sh).
oneapi_have_loader && oneapi_have_headers ||
    die "dlpack-oneapi's tests need Debian's Level Zero packages libze1 and libze-dev \
(libze_loader.so.1, /usr/include/level_zero/ze_api.h); install them as root: apt-get install libze1 libze-dev"
if command -v dpkg-query >/dev/null; then
    echo "    have $(dpkg-query -W -f='${Package} ${Version}  ' libze1 libze-dev 2>/dev/null)"
fi
# From here on a missing loader or header is a test failure, not a printed NOT RUN.
export DLPACK_REQUIRE_ZE_LOADER=1 DLPACK_REQUIRE_ZE_HEADERS=1
