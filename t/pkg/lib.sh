# Shared by t/pkg/test-package.sh and t/pkg/test-container.sh (sourced):
# TAP-like lines and a count of failures, and a Debian bookworm root made
# with debootstrap from the mirror the host's apt uses.

fails=0

say()  { echo "# $*"; }
ok()   { echo "ok - $*"; }
nok()  { echo "not ok - $*"; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else nok "$what"; fi; }

# a minimal bookworm root in $1 (its log in $2), apt pointed at the main,
# -updates and -security suites, no package lists or cache left in it
debian_root() {
    local dir=$1 log=$2 mirror
    mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
    mirror=${mirror:-http://deb.debian.org/debian}
    say "debootstrap bookworm from $mirror"
    rm -rf "$dir"
    debootstrap --variant=minbase bookworm "$dir" "$mirror" >"$log" 2>&1 \
        || { tail -20 "$log"; return 1; }
    cat > "$dir/etc/apt/sources.list" <<EOF2
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF2
    rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*
}
