#!/bin/bash
# `make run` / `make stop`: nginx with the gateway on 127.0.0.1:8787 in a
# private prefix (.run/), in front of the bundled mock upstream standing in
# for Anthropic as four demo accounts -- or, when ANTHROPIC_API_KEY is set,
# in front of that one real account.
#
# Usage: run.sh start|stop TOP MODULE RUNDIR
set -euo pipefail

cmd=$1
TOP=$2
MODULE=$3
RUN=$4

LISTEN=${TOKENBIRYANI_LISTEN:-127.0.0.1:8787}
# the nginx to run (make test-asan's wrapper preloads the sanitizers)
NGINX=${TOKENBIRYANI_NGINX:-nginx}
MOCK_BASE=${TOKENBIRYANI_MOCK_PORT:-19201}

stop() {
    if [ -f "$RUN/logs/nginx.pid" ] && kill -0 "$(cat "$RUN/logs/nginx.pid")" 2>/dev/null; then
        # by its pid, not `nginx -s quit`: that reads the configuration
        # first, and refuses when an edit broke it
        kill -QUIT "$(cat "$RUN/logs/nginx.pid")" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$(cat "$RUN/logs/nginx.pid" 2>/dev/null)" 2>/dev/null || break
            sleep 0.05
        done
        echo "stopped nginx"
    fi
    if [ -f "$RUN/mock.pid" ] && kill -0 "$(cat "$RUN/mock.pid")" 2>/dev/null; then
        kill "$(cat "$RUN/mock.pid")" 2>/dev/null || true
        echo "stopped the mock upstream"
    fi
    rm -f "$RUN/mock.pid" "$RUN/mock.ready"
}

if [ "$cmd" = stop ]; then
    stop
    exit 0
fi

# a rebuilt module needs a fresh master, not a reload
stop >/dev/null

mkdir -p "$RUN/conf" "$RUN/logs"
chmod 711 "$RUN"    # workers (another user) must reach the temp dirs

# two keys: an admin key for the console and the command, a client key
# (no /admin) for the export lines - a client never holds /admin
for k in key client-key; do
    if [ ! -s "$RUN/$k" ]; then
        echo "bir_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$RUN/$k"
        chmod 600 "$RUN/$k"
    fi
done
KEY=$(cat "$RUN/key")
CLIENT=$(cat "$RUN/client-key")

YAML="$RUN/conf/tokenbiryani.yaml"
keys="keys:
  - key: $KEY
    name: admin                   # the console and the command
    admin: true
  - key: $CLIENT
    name: default                 # for clients: no /admin"

# what either file has: the store, the prices, a week's budget to pace
# against (advisory: read, never enforced), the Batches and Files APIs
common="store:
  backend: sqlite                 # .run/conf/tokenbiryani.db
pricing: builtin                  # the dated table shipped with the module
pacing:
  weekly_budget_usd: 100          # the Efficiency page: will it last?
batch:
  api: true                       # the Message Batches API through the pool
files:
  api: true                       # the Files API through the pool"

if [ -n "${ANTHROPIC_API_KEY:-}" ]; then
    mode="your ANTHROPIC_API_KEY (one real account)"
    # the credential stays in the environment: the file only names it
    cat >"$YAML.new" <<EOF
# written by \`make run\`; an edited file is kept (delete it to have it
# written again)
$common
accounts:
  - id: anthropic
    type: anthropic_api
    api_key: \${ANTHROPIC_API_KEY}
$keys
EOF
else
    mode="the bundled mock upstream (four demo accounts and a demo subscription)"
    accounts=""
    for i in 1 2 3 4; do
        port=$((MOCK_BASE + i - 1))
        accounts="$accounts
  - id: demo-$i
    name: demo account $i
    type: anthropic_api
    api_key: sk-demo-$i
    base_url: http://127.0.0.1:$port"
    done
    # the operator's own subscription, as the mock plays one (its windows
    # in the unified headers): one at most, and only while the gateway
    # listens on loopback alone
    case "$LISTEN" in
    127.*|localhost:*|"[::1]"*)
        accounts="$accounts
  - id: subscription
    name: demo subscription
    type: oauth
    api_key: sk-ant-oat01-demo-subscription
    base_url: http://127.0.0.1:$MOCK_BASE"
        ;;
    esac
    cat >"$YAML.new" <<EOF
# written by \`make run\`: four demo accounts and a demo subscription on
# the mock upstream; an edited file is kept (delete it to have it written
# again)
server:
  allow_private_hosts: true       # accounts added at runtime may use the mock
$common
accounts:$accounts
$keys
EOF
fi

# the file is written again only while it is what make run wrote (its
# SHA-256 kept beside it): an operator's edits stay
edited=0

if [ -f "$YAML" ] && [ -f "$YAML.written" ] \
   && [ "$(sha256sum <"$YAML")" != "$(cat "$YAML.written")" ]
then
    rm -f "$YAML.new"
    mode="$mode - your edited $YAML, kept as it is"
    edited=1
else
    mv "$YAML.new" "$YAML"
    sha256sum <"$YAML" >"$YAML.written"
fi

if [ -z "${ANTHROPIC_API_KEY:-}" ]; then
    ports=""
    for i in 1 2 3 4; do
        ports="$ports --listen 127.0.0.1:$((MOCK_BASE + i - 1))"
    done
    rm -f "$RUN/mock.ready"
    # the demo subscription's windows: 50 requests in 5 hours, 500 a week
    printf '%s\n' '{"credentials": {"sk-ant-oat01-demo-subscription":' \
        ' {"subscription": {"five_hour_requests": 50,' \
        ' "seven_day_requests": 500}}}}' >"$RUN/mock.json"
    # shellcheck disable=SC2086
    nohup /usr/bin/python3 "$TOP/t/mock/mock.py" $ports \
        --config "$RUN/mock.json" \
        --log "$RUN/logs/mock.log" --pidfile "$RUN/mock.pid" \
        --ready-file "$RUN/mock.ready" >"$RUN/logs/mock.out" 2>&1 &
    for _ in $(seq 200); do
        [ -f "$RUN/mock.ready" ] && break
        sleep 0.05
    done
    [ -f "$RUN/mock.ready" ] || { cat "$RUN/logs/mock.out"; echo "the mock did not start"; exit 1; }
fi
chmod 600 "$RUN/conf/tokenbiryani.yaml"

cat >"$RUN/conf/nginx.conf" <<EOF
# written by \`make run\`
load_module $MODULE;

worker_processes 2;
error_log logs/error.log info;
pid logs/nginx.pid;

events { worker_connections 1024; }

http {
    access_log logs/access.log;
    client_body_temp_path client_body_temp;
    proxy_temp_path proxy_temp;
    fastcgi_temp_path fastcgi_temp;
    uwsgi_temp_path uwsgi_temp;
    scgi_temp_path scgi_temp;

    tokenbiryani_zone    tokenbiryani 16m;
    tokenbiryani_config  tokenbiryani.yaml;     # next to nginx.conf

    server {
        listen $LISTEN;

        client_max_body_size     32m;
        client_body_buffer_size  1m;

        location /v1/          { tokenbiryani_pass; }
        location /v1/files     { tokenbiryani_pass; client_max_body_size 500m; }
        location /v1/messages/batches { tokenbiryani_pass; client_max_body_size 256m; }
        location /             { tokenbiryani_pass; }
        location /admin/       { tokenbiryani_admin; }
        location = /healthz    { tokenbiryani_healthz; }
        location /console      { tokenbiryani_console; }
    }
}
EOF

"$NGINX" -p "$RUN/" -c conf/nginx.conf -t -q
"$NGINX" -p "$RUN/" -c conf/nginx.conf

for _ in $(seq 100); do
    curl -s -o /dev/null "http://$LISTEN/healthz" && break
    sleep 0.05
done

if [ "$edited" = 1 ]; then
    CLIENT="<a client key of your file's>"
fi

cat <<EOF
tokenbiryani is running on http://$LISTEN in front of $mode.
Point any Anthropic client at it (a client key: it cannot reach /admin):

export ANTHROPIC_BASE_URL=http://$LISTEN
export ANTHROPIC_AUTH_TOKEN=$CLIENT

The admin key, for the console and the command: $KEY
Console:      http://$LISTEN/console/ (sign in with the admin key), or signed in:
              TOKENBIRYANI_URL=http://$LISTEN TOKENBIRYANI_KEY=$KEY build/tokenbiryani console
Terminal:     TOKENBIRYANI_URL=http://$LISTEN TOKENBIRYANI_KEY=$KEY build/tokenbiryani status
Pool status:  curl -s http://$LISTEN/admin/status -H "x-api-key: $KEY"
Mint a key:   curl -s http://$LISTEN/admin/keys -H "x-api-key: $KEY" -d '{"name": "me"}'
Store:        $RUN/conf/tokenbiryani.db (minted keys, added accounts and history survive make stop)
Logs:         $RUN/logs/
Stop it:      make stop
EOF
