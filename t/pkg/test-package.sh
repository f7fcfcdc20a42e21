#!/bin/bash
# make test-package: the Debian packages installed as an operator would,
# into a throwaway Debian root (debootstrap, kept as a tarball in
# build/pkgtest for the next run), with Debian's nginx from the archive:
#
#   apt-get install ./libnginx-mod-http-tokenbiryani_*.deb ./tokenbiryani_*.deb
#   the module enabled in modules-enabled, the key made 0600, nginx -t
#   tokenbiryani init --system: keys in the YAML, the site enabled, nginx -t
#   nginx started: /healthz 503 on the empty pool
#   an account added through the admin API with the admin key init printed,
#   `tokenbiryani status`, a request with its client key through to the
#   mock: 200, /healthz 200
#   nginx restarted: the added account still serves (the store kept it)
#   an upgrade (the same packages again) keeps the store and the key
#   apt-get purge says what it removes and removes it
#
# Usage: test-package.sh TOP DEB_DIR        (run as root: chroot)
set -euo pipefail

TOP=$1
DEBS=$2
WORK=$TOP/build/pkgtest
ROOT=$WORK/root
MOCK_PORT=${TB_PKG_MOCK_PORT:-19781}
GW=127.0.0.1:8787
start=$(date +%s)
. "$TOP/t/pkg/lib.sh"

in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
                DEBIAN_FRONTEND=noninteractive "$@"; }

[ "$(id -u)" = 0 ] || { echo "test-package: needs root (chroot)"; exit 1; }
ls "$DEBS"/libnginx-mod-http-tokenbiryani_*.deb "$DEBS"/tokenbiryani_*.deb >/dev/null

cleanup() {
    set +e
    [ -f "$ROOT/run/nginx.pid" ] && kill "$(cat "$ROOT/run/nginx.pid")" 2>/dev/null
    [ -n "${MOCK_PID:-}" ] && kill "$MOCK_PID" 2>/dev/null
    for m in dev/pts dev proc; do
        mountpoint -q "$ROOT/$m" && umount -l "$ROOT/$m"
    done
}
trap cleanup EXIT

mkdir -p "$WORK"
cleanup
rm -rf "$ROOT"

# the base root: Debian's own, from the mirror the host's apt uses
if [ ! -f "$WORK/base.tar" ]; then
    debian_root "$WORK/base" "$WORK/debootstrap.log" || exit 1
    tar -C "$WORK/base" -cf "$WORK/base.tar" .
    rm -rf "$WORK/base"
fi
mkdir -p "$ROOT"
tar -C "$ROOT" -xf "$WORK/base.tar"
mount --bind /dev "$ROOT/dev"
mount -t proc proc "$ROOT/proc"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# no init system in a chroot: services are not started by the packages
printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"
chmod 0755 "$ROOT/usr/sbin/policy-rc.d"
mkdir -p "$ROOT/tmp/debs"
cp "$DEBS"/libnginx-mod-http-tokenbiryani_*.deb "$DEBS"/tokenbiryani_*.deb "$ROOT/tmp/debs/"

say "apt-get install ./libnginx-mod-http-tokenbiryani_*.deb ./tokenbiryani_*.deb"
in_root apt-get update -qq >"$WORK/apt.log" 2>&1
in_root sh -c 'apt-get install -y -qq --no-install-recommends ./tmp/debs/*.deb' >>"$WORK/apt.log" 2>&1 \
    || { tail -30 "$WORK/apt.log"; exit 1; }
ok "installed with apt-get, nginx from Debian's archive: $(in_root nginx -v 2>&1)"

check "the module is enabled in modules-enabled" \
    test -L "$ROOT/etc/nginx/modules-enabled/50-mod-http-tokenbiryani.conf"
check "the secret key was made, 0600" \
    test "$(stat -c %a "$ROOT/etc/tokenbiryani/tokenbiryani.key")" = 600
check "... 64 hex digits" grep -qxE '[0-9a-f]{64}' "$ROOT/etc/tokenbiryani/tokenbiryani.key"
check "the store directory is root's alone" \
    test "$(stat -c %U:%a "$ROOT/var/lib/tokenbiryani")" = root:755
key_before=$(cat "$ROOT/etc/tokenbiryani/tokenbiryani.key")

# the mock on loopback, which the root shares
python3 "$TOP/t/mock/mock.py" --listen "127.0.0.1:$MOCK_PORT" >"$WORK/mock.log" 2>&1 &
MOCK_PID=$!

out=$(in_root nginx -t 2>&1) && ok "nginx -t with the module enabled" || nok "nginx -t: $out"

# the command sets up the packaged gateway: keys, the site, nginx -t, a
# reload through the service (none in a chroot: it says nginx is not running)
rm -f "$ROOT/etc/nginx/sites-enabled/default"
out=$(in_root tokenbiryani init --system --allow-private-hosts 2>&1) \
    && ok "tokenbiryani init --system" || nok "tokenbiryani init --system: $out"
check "... enabled the site" test -L "$ROOT/etc/nginx/sites-enabled/tokenbiryani"
check "... wrote the keys into the YAML, 0600" \
    test "$(stat -c %a "$ROOT/etc/tokenbiryani/tokenbiryani.yaml")" = 600
echo "$out" | grep -q 'nginx is not running' && ok "... and says nginx is not running" \
    || nok "... and says nginx is not running"
admin=$(echo "$out" | sed -n 's/^  \(bir_[A-Za-z0-9_]*\)$/\1/p' | head -1)
key=$(echo "$out" | sed -n 's/^export ANTHROPIC_AUTH_TOKEN=//p')
check "... printed an admin key and a client key" test -n "$admin" -a -n "$key" -a "$admin" != "$key"
out=$(in_root tokenbiryani init --system 2>&1) \
    && nok "a second init --system without --force is refused" \
    || ok "a second init --system without --force is refused"

in_root nginx
for _ in $(seq 50); do curl -s -o /dev/null "http://$GW/healthz" && break; sleep 0.1; done

code=$(curl -s -o /dev/null -w '%{http_code}' "http://$GW/healthz")
check "/healthz on the empty pool: 503 ($code)" test "$code" = 503

code=$(curl -s -o "$WORK/acct.json" -w '%{http_code}' -H 'content-type: application/json' \
       -H "x-api-key: $admin" \
       -d "{\"id\":\"mock\",\"api_key\":\"sk-ant-api03-pkgtest\",\"base_url\":\"http://127.0.0.1:$MOCK_PORT\",\"probe\":false}" \
       "http://$GW/admin/accounts")
check "an account added through the admin API with the admin key: 201 ($code)" test "$code" = 201
out=$(in_root tokenbiryani -c /etc/tokenbiryani/tokenbiryani.yaml status 2>&1) \
    && ok "tokenbiryani status, with the admin key from the file" || nok "tokenbiryani status: $out"

msg='{"model":"claude-sonnet-4-6","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}'
send() { curl -s -o "$WORK/msg.json" -w '%{http_code}' -H "x-api-key: $key" \
              -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \
              -d "$msg" "http://$GW/v1/messages"; }
code=$(send)
check "a request with the client key, through to the mock: 200 ($code)" test "$code" = 200
check "... a Message" grep -q '"type":"message"' "$WORK/msg.json"
code=$(key=sk-not-a-key send)
check "a request with a key the gateway does not know: 401 ($code)" test "$code" = 401

# again with --force while nginx runs: new keys, which serve once it says
# nginx was reloaded
old_key=$key
out=$(in_root tokenbiryani init --system --force --allow-private-hosts 2>&1) \
    && ok "init --system --force while nginx runs" || nok "init --system --force: $out"
echo "$out" | grep -q '^nginx reloaded$' && ok "... says nginx was reloaded" \
    || nok "... says nginx was reloaded: $(echo "$out" | sed -n 3p)"
key=$(echo "$out" | sed -n 's/^export ANTHROPIC_AUTH_TOKEN=//p')
for _ in $(seq 50); do [ "$(send)" = 200 ] && break; sleep 0.1; done
code=$(send)
check "... and its new client key serves: 200 ($code)" test "$code" = 200
code=$(key=$old_key send)
check "... the old one no longer: 401 ($code)" test "$code" = 401
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$GW/healthz")
check "/healthz with an account: 200 ($code)" test "$code" = 200
# (the master's other child, the /admin/reload helper, is root's: it
# signals the master)
users=$(ps -o user=,args= --ppid "$(cat "$ROOT/run/nginx.pid")" | awk '/worker process/ {print $1}' \
        | sort -u | tr '\n' ' ')
check "the workers run as www-data ($users)" test "$users" = "www-data "
check "the store file is there" test -s "$ROOT/var/lib/tokenbiryani/tokenbiryani.db"
if grep -rq 'sk-ant-api03-pkgtest' "$ROOT/var/lib/tokenbiryani" "$ROOT/var/log/nginx"; then
    nok "the account's credential is in no store file or log in plaintext"
else
    ok "the account's credential is in no store file or log in plaintext"
fi

# stop, start: the store
in_root nginx -s quit 2>/dev/null
for _ in $(seq 50); do [ -f "$ROOT/run/nginx.pid" ] || break; sleep 0.1; done
in_root nginx
for _ in $(seq 50); do curl -s -o /dev/null "http://$GW/healthz" && break; sleep 0.1; done
code=$(send)
check "after a restart the added account serves: 200 ($code)" test "$code" = 200
in_root nginx -s quit 2>/dev/null
for _ in $(seq 50); do [ -f "$ROOT/run/nginx.pid" ] || break; sleep 0.1; done

# an upgrade (reinstall of the same version) keeps the store, key and YAML
in_root sh -c 'apt-get install -y -qq --reinstall ./tmp/debs/*.deb' >>"$WORK/apt.log" 2>&1
check "a reinstall keeps the secret key" test "$(cat "$ROOT/etc/tokenbiryani/tokenbiryani.key")" = "$key_before"
check "... the store" test -s "$ROOT/var/lib/tokenbiryani/tokenbiryani.db"
check "... and the operator's YAML" grep -q '^keys:' "$ROOT/etc/tokenbiryani/tokenbiryani.yaml"

# purge
out=$(in_root apt-get purge -y tokenbiryani libnginx-mod-http-tokenbiryani 2>&1)
echo "$out" | grep -q 'purging removes the store' \
    && ok "a purge says what it removes" || nok "a purge says what it removes: $out"
check "... removes the store" test ! -e "$ROOT/var/lib/tokenbiryani"
check "... the key and /etc/tokenbiryani" test ! -e "$ROOT/etc/tokenbiryani"
check "... the module's load line" test ! -e "$ROOT/etc/nginx/modules-enabled/50-mod-http-tokenbiryani.conf"
check "... and the site" test ! -e "$ROOT/etc/nginx/sites-enabled/tokenbiryani"
out=$(in_root nginx -t 2>&1) && ok "nginx -t after the purge" || nok "nginx -t after the purge: $out"

cleanup
trap - EXIT
rm -rf "$ROOT"
echo "# test-package: $fails failed, in $(( $(date +%s) - start )) s"
[ "$fails" = 0 ]
