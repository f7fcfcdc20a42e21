#!/bin/bash
# Builds ngx_http_tokenbiryani_module.so against Debian's packaged nginx
# (nginx-dev), the way Debian's own dh_nginx does: configure runs from the
# packaged source tree with Debian's conf_flags, so the module is binary
# compatible with /usr/sbin/nginx and NGX_HTTP_SSL stays compiled in
# (--with-compat alone would silently drop it).
#
# Usage: build-module.sh MODULE_DIR BUILD_DIR [MORE_MODULE_DIRS...]
#        (absolute paths; every module lands in BUILD_DIR)
# Env:   EXTRA_CFLAGS, EXTRA_LDFLAGS (e.g. for the sanitizer build)
set -euo pipefail

MOD_DIR=$1
BUILD_DIR=$2
shift 2
MORE=("$@")
EXTRA_CFLAGS=${EXTRA_CFLAGS:-}
EXTRA_LDFLAGS=${EXTRA_LDFLAGS:-}
SRC=/usr/share/nginx/src

mkdir -p "$BUILD_DIR"

# the console's files, compiled into the module (config includes TB_GEN_DIR)
export TB_GEN_DIR="$BUILD_DIR/gen"
"$MOD_DIR/src/tools/embed-assets.sh" "$MOD_DIR/lua-free-admin/console" "$TB_GEN_DIR"

stamp="$BUILD_DIR/.configured"
want="$(cat "$MOD_DIR/config") ${MORE[*]} $EXTRA_CFLAGS $EXTRA_LDFLAGS $(nginx -v 2>&1)"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    # a file moved or removed leaves no object behind (the call-loop lint
    # reads them)
    rm -rf "$BUILD_DIR/addon"
    (
        cd "$SRC"              # configure sources ./auto/* from here
        . ./conf_flags         # the bash array NGX_CONF_FLAGS
        ./configure \
            --with-cc-opt="$(dpkg-buildflags --get CFLAGS) -fPIC $(dpkg-buildflags --get CPPFLAGS) $EXTRA_CFLAGS" \
            --with-ld-opt="$(dpkg-buildflags --get LDFLAGS) -fPIC $EXTRA_LDFLAGS" \
            "${NGX_CONF_FLAGS[@]}" \
            --add-dynamic-module="$MOD_DIR" \
            ${MORE[@]/#/--add-dynamic-module=} \
            --builddir="$BUILD_DIR" >"$BUILD_DIR/configure.log" 2>&1
    ) || { tail -30 "$BUILD_DIR/configure.log"; exit 1; }
    printf '%s' "$want" >"$stamp"
fi

# -f must be absolute: make resolves it after -C
make -s -f "$BUILD_DIR/Makefile" -C "$SRC" -j2 modules
