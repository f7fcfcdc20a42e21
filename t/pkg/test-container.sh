#!/bin/bash
# make test-container: the image (deploy/Dockerfile) and the compose stack
# (deploy/compose.yaml: gateway, Redis, the mock) brought up with podman
# and podman-compose as an operator would, on a private port:
#
#   the base image: debian:bookworm-slim from a registry, else made here
#   with debootstrap and imported (kept as localhost/debian:bookworm-slim)
#   up -d --build: the gateway unhealthy (503) on its empty pool
#   an account (the mock) added through the admin API: healthy
#   a key minted, a request with it answered 200 by the mock
#   every process of the stack not root; only 127.0.0.1 published
#   no compiler and no source in the gateway's image; its size
#   down, up: the minted key and the account still serve (the volumes)
#
# Usage: test-container.sh TOP              (run as root: rootful podman)
set -euo pipefail

TOP=$1
WORK=$TOP/build/container
PORT=${TB_CONTAINER_PORT:-18787}
PROJECT=tbtest
BASE=localhost/debian:bookworm-slim
export CONTAINERS_CONF=$TOP/deploy/containers.conf
export BUILDAH_FORMAT=docker        # keeps the image's HEALTHCHECK
export BASE_IMAGE=$BASE TOKENBIRYANI_PORT=$PORT
export TOKENBIRYANI_ADMIN_KEY=test-admin-key-0001
export TOKENBIRYANI_SECRET_KEY=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
GW=127.0.0.1:$PORT
start=$(date +%s)
. "$TOP/t/pkg/lib.sh"

compose() { (cd "$TOP/deploy" && podman-compose -p "$PROJECT" "$@") >>"$WORK/compose.log" 2>&1; }

mkdir -p "$WORK"
: >"$WORK/compose.log"
trap 'compose down -v || true' EXIT

# the base image
if ! podman image exists "$BASE"; then
    if timeout 60 podman pull -q docker.io/library/debian:bookworm-slim >/dev/null 2>&1; then
        podman tag docker.io/library/debian:bookworm-slim "$BASE"
        say "base image: debian:bookworm-slim from the registry"
    else
        say "no registry answers: the base image made with debootstrap"
        debian_root "$WORK/rootfs" "$WORK/debootstrap.log" || exit 1
        tar -C "$WORK/rootfs" -c . | podman import - "$BASE" >/dev/null
        rm -rf "$WORK/rootfs"
    fi
fi
say "base image $BASE: $(podman image inspect -f '{{.Size}}' "$BASE") bytes"

t0=$(date +%s)
compose down -v || true
compose up -d --build || { tail -30 "$WORK/compose.log"; exit 1; }
say "built and up in $(( $(date +%s) - t0 )) s"
gw=${PROJECT}_gateway_1

up() { for _ in $(seq 100); do curl -s -o /dev/null "http://$GW/healthz" && return 0; sleep 0.1; done; return 1; }
check "the gateway answers on $GW" up
health() { podman healthcheck run "$gw" >/dev/null 2>&1; }
check "the image's HEALTHCHECK is kept" test -n "$(podman inspect -f '{{.Config.Healthcheck}}' "$gw")"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$GW/healthz")
check "/healthz on the empty pool: 503 ($code)" test "$code" = 503
check "the container is unhealthy on an empty pool" bash -c "! podman healthcheck run $gw >/dev/null 2>&1"

A=$TOKENBIRYANI_ADMIN_KEY
code=$(curl -s -o "$WORK/acct.json" -w '%{http_code}' -H "x-api-key: $A" -H 'content-type: application/json' \
       -d '{"id":"mock","api_key":"sk-ant-api03-container","base_url":"http://mock:8080","probe":false}' \
       "http://$GW/admin/accounts")
check "an account (the mock) added through the admin API: 201 ($code)" test "$code" = 201
check "... and the container is healthy" health
code=$(curl -s -o "$WORK/key.json" -w '%{http_code}' -H "x-api-key: $A" -H 'content-type: application/json' \
       -d '{"name":"client"}' "http://$GW/admin/keys")
check "a key minted: 201 ($code)" test "$code" = 201
key=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("key", ""))' "$WORK/key.json")
msg='{"model":"claude-sonnet-4-6","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}'
send() { curl -s -o "$WORK/msg.json" -w '%{http_code}' -H "x-api-key: $key" -H 'content-type: application/json' \
              -H 'anthropic-version: 2023-06-01' -d "$msg" "http://$GW/v1/messages"; }
code=$(send)
check "a request with the minted key, answered by the mock: 200 ($code)" test "$code" = 200
check "... a Message" grep -q '"type":"message"' "$WORK/msg.json"
code=$(key=sk-ant-not-minted send)
check "a key never minted: 401 ($code)" test "$code" = 401

for svc in gateway redis mock; do
    users=$(podman top "${PROJECT}_${svc}_1" user 2>/dev/null | tail -n +2 | sort -u | tr '\n' ' ')
    check "$svc runs as non-root ($users)" bash -c "[ -n '$users' ] && ! echo '$users' | grep -qw root"
done
published=$(podman ps --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Ports}}' | tr '\n' ' ')
check "only the gateway is published, on 127.0.0.1 ($published)" \
    bash -c "echo '$published' | grep -q '127.0.0.1:$PORT->8787' && ! echo '$published' | grep -q '0.0.0.0'"
check "nothing of the stack listens beyond 127.0.0.1 on this machine" \
    bash -c "! ss -ltn | awk '{print \$4}' | grep -E ':($PORT|6379|8080)\$' | grep -v '^127\.0\.0\.1:'"
img=localhost/tokenbiryani:latest
check "no compiler, make or source in the gateway's image" \
    bash -c "! podman run --rm --entrypoint sh $img -c 'command -v gcc || command -v cc || command -v make || test -e /src' 2>/dev/null"
size=$(podman image inspect -f '{{.Size}}' "$img")
say "the gateway's image: $size bytes ($(( size / 1000000 )) MB; the base $(( $(podman image inspect -f '{{.Size}}' "$BASE") / 1000000 )) MB)"

# down (keeping the volumes), up: the store
compose down
compose up -d
check "after down and up the gateway answers" up
for _ in $(seq 50); do [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$GW/healthz")" = 200 ] && break; sleep 0.1; done
code=$(send)
check "... the minted key and the added account still serve: 200 ($code)" test "$code" = 200

compose down -v
trap - EXIT
echo "# test-container: $fails failed, in $(( $(date +%s) - start )) s"
[ "$fails" = 0 ]
