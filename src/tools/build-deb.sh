#!/bin/bash
# Builds the Debian packages (debian/: libnginx-mod-http-tokenbiryani and
# tokenbiryani) from a copy of the tree, the way a Debian build would:
# dpkg-buildpackage with dh and dh-sequence-nginx against nginx-dev.
#
# Usage: build-deb.sh TOP OUT_DIR      (the .deb files land in OUT_DIR)
set -euo pipefail

TOP=$1
OUT=$2

for tool in dpkg-buildpackage dh dh_nginx; do
    if ! command -v "$tool" >/dev/null; then
        echo "skipped: the Debian packages need $tool (debhelper, nginx-dev)"
        exit 0
    fi
done

rm -rf "$OUT"
mkdir -p "$OUT/src"

# what git tracks and what it would (the working tree as it is), else all
# but what builds and tests leave behind
if git -C "$TOP" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$TOP" && git ls-files -co --exclude-standard -z \
                  | xargs -0 cp --parents -t "$OUT/src")
else
    tar -C "$TOP" --exclude=./build --exclude=./.run --exclude='./t/servroot*' \
        --exclude=node_modules -cf - . | tar -C "$OUT/src" -xf -
fi

start=$(date +%s)
if ! (cd "$OUT/src" && DEB_BUILD_OPTIONS=noddebs dpkg-buildpackage -us -uc -b) \
        >"$OUT/build.log" 2>&1; then
    tail -30 "$OUT/build.log"
    exit 1
fi
rm -rf "$OUT/src"

for deb in "$OUT"/*.deb; do
    echo "built $deb ($(stat -c %s "$deb") bytes) in $(( $(date +%s) - start )) s"
done
