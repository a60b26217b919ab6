# tools/gpu-env.sh: sourced by the GPU host scripts (tools/gpu-run.sh, tools/gpu-ab.sh): the
# Debian packages staged by shared/device/stage-debs.sh (Check, libyaml, jansson, xxhash,
# openssl headers, pkgconf), unpacked under /opt/deps by .device-deps/env.sh, and nvcc on PATH.
#   source tools/gpu-env.sh ROOT
if [ -f "$1/.device-deps/env.sh" ]; then
    # shellcheck disable=SC1091
    source "$1/.device-deps/env.sh"
    # Debian keeps openssl/configuration.h in the multiarch include dir, which env.sh's CPATH
    # does not name.
    [ -d /opt/deps/usr/include/x86_64-linux-gnu ] &&
        export CPATH="/opt/deps/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
    # pkg-config itself may be missing on the host: use the staged pkgconf.
    if ! command -v pkg-config >/dev/null 2>&1 && [ -x /opt/deps/usr/bin/pkgconf ]; then
        export PATH="/opt/deps/usr/bin:$PATH"
        export PKG_CONFIG=/opt/deps/usr/bin/pkgconf
    fi
fi
export PATH="/usr/local/cuda/bin:$PATH"
