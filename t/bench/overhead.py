#!/usr/bin/python3
"""
What the gateway costs per request, measured side by side in one run with
wrk against:

  (a) upstream  a fast static upstream: plain nginx answering a canned
                Messages JSON and a canned SSE stream, with the nine
                anthropic-ratelimit-* headers (1 worker);
  (b) nginx     plain nginx proxy_pass in front of it (2 workers,
                keepalive): the floor any nginx-based proxy pays;
  (c) gateway   nginx with this module (2 workers, 4 accounts, keys on,
                the default strategy) in front of it;
  (d) portkey   Portkey's open-source gateway (@portkey-ai/gateway from
                npm, Node) in front of it, as a peer a user might choose;
  (e) redis     the gateway of (c) with store.backend: redis, Debian's
                redis-server on a free port (no persistence), on the same
                cores;
  (f) pair      the same, and a second such gateway sharing its pool (the
                same Redis, another namespace than e's), idle: the pool's
                capacity, caps and conversations shared between the two
                (slices, news, what each ran up told every 50 ms), the
                load on the first.  For f, what Redis did per request:
                commands, and bytes in and out (INFO stats).

    overhead.py --module build/ngx_http_tokenbiryani_module.so
        [--conns 1,16,64,256] [--seconds 5] [--targets a,b,c,d,e,f]
        [--modes json,stream] [--json]

Prints requests/s, p50 and p99 for each, and the ratios c/b, c/d, e/c and
f/c, as markdown.  A benchmark, not a test: it asserts nothing.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tbbench  # noqa: E402

# limits no run of the bench can reach: the gateway's capacity sharing
# (target f) holds the instances to what the windows refill, as it should
RL_HEADERS = """
            add_header anthropic-ratelimit-requests-limit 100000000;
            add_header anthropic-ratelimit-requests-remaining 99999999;
            add_header anthropic-ratelimit-requests-reset 2026-01-01T00:00:01Z;
            add_header anthropic-ratelimit-input-tokens-limit 1000000000;
            add_header anthropic-ratelimit-input-tokens-remaining 999999900;
            add_header anthropic-ratelimit-input-tokens-reset 2026-01-01T00:00:01Z;
            add_header anthropic-ratelimit-output-tokens-limit 400000;
            add_header anthropic-ratelimit-output-tokens-remaining 399980;
            add_header anthropic-ratelimit-output-tokens-reset 2026-01-01T00:00:01Z;"""

JSON_BODY = ('{"id":"msg_1","type":"message","role":"assistant","model":'
             '"claude-sonnet-4-6","content":[{"type":"text","text":"hello"}],'
             '"stop_reason":"end_turn","usage":{"input_tokens":100,'
             '"output_tokens":20,"cache_read_input_tokens":0,'
             '"cache_creation_input_tokens":0}}')

SSE_EVENTS = [
    ("message_start", '{"type":"message_start","message":{"id":"msg_1","type":'
     '"message","role":"assistant","model":"claude-sonnet-4-6","content":[],'
     '"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":100,'
     '"output_tokens":1,"cache_read_input_tokens":0,'
     '"cache_creation_input_tokens":0}}}'),
    ("content_block_start", '{"type":"content_block_start","index":0,'
     '"content_block":{"type":"text","text":""}}'),
    ("content_block_delta", '{"type":"content_block_delta","index":0,"delta":'
     '{"type":"text_delta","text":"Hello"}}'),
    ("content_block_delta", '{"type":"content_block_delta","index":0,"delta":'
     '{"type":"text_delta","text":" there,"}}'),
    ("content_block_delta", '{"type":"content_block_delta","index":0,"delta":'
     '{"type":"text_delta","text":" world"}}'),
    ("content_block_stop", '{"type":"content_block_stop","index":0}'),
    ("message_delta", '{"type":"message_delta","delta":{"stop_reason":'
     '"end_turn","stop_sequence":null},"usage":{"output_tokens":20}}'),
    ("message_stop", '{"type":"message_stop"}'),
]


def nginx_string(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace(
        "\n", "\\n") + "'"


def request_body(stream):
    b = {"model": "claude-sonnet-4-6", "max_tokens": 256,
         "system": "You are a helpful assistant. " * 30,
         "messages": [{"role": "user",
                       "content": "Conversation CONVERSATION. "
                                  + "Summarise the following. " * 59}]}
    if stream:
        b["stream"] = True
    return json.dumps(b)


WRK_LUA = r"""
-- 64 conversations, taken in turn: a realistic spread over the accounts
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.headers["anthropic-version"] = "2023-06-01"
wrk.headers["x-api-key"] = "%(key)s"
%(extra)s
local template = io.open("%(body)s"):read("*a")
local bodies = {}
for i = 1, 64 do
  bodies[i] = template:gsub("CONVERSATION", tostring(i))
end
local n = 0
request = function()
  n = n %% 64 + 1
  return wrk.format(nil, nil, nil, bodies[n])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRKJSON {\"requests\":%%d,\"duration_us\":%%d,\"p50\":%%d,\"p99\":%%d,"
    .. "\"errors\":%%d,\"non2xx\":%%d}\n",
    summary.requests, summary.duration, latency:percentile(50),
    latency:percentile(99), e.connect + e.read + e.write + e.timeout,
    e.status))
end
"""


def start_upstream(workdir):
    sse = "".join("event: %s\ndata: %s\n\n" % (n, d) for n, d in SSE_EVENTS)
    conf = """
    server {
        listen 127.0.0.1:@PORT@ backlog=4096;
        keepalive_requests 100000;
        location = /v1/messages {
            default_type application/json;%s
            return 200 %s;
        }
        location ~ ^(/v1/stream|/sse/v1/messages)$ {
            default_type text/event-stream;
            add_header cache-control no-cache;%s
            return 200 %s;
        }
    }
""" % (RL_HEADERS, nginx_string(JSON_BODY), RL_HEADERS, nginx_string(sse))
    return tbbench.Nginx(workdir, None, conf, workers=1, name="upstream")


def start_proxy(workdir, up):
    conf = """
    upstream up {
        server 127.0.0.1:%d;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:@PORT@ backlog=4096;
        keepalive_requests 100000;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header x-api-key sk-test;
        location /v1/stream {
            proxy_buffering off;
            proxy_pass http://up;
        }
        location / {
            proxy_pass http://up;
        }
    }
""" % up.port
    return tbbench.Nginx(workdir, None, conf, workers=2, name="proxy")


def start_gateway(workdir, module, up, extra_yaml="", name="gateway"):
    accounts = ""
    for mode, prefix in (("json", ""), ("sse", "/sse")):
        for i in range(1, 5):
            accounts += ("  - id: %s-%d\n    api_key: sk-test-%d\n"
                         "    base_url: http://127.0.0.1:%d%s\n"
                         "    max_concurrency: 1000\n"
                         % (mode, i, i, up.port, prefix))
    yaml = ("accounts:\n%skeys:\n"
            "  - key: sk-client-json\n    name: json\n"
            "    pool: [json-1, json-2, json-3, json-4]\n"
            "  - key: sk-client-sse\n    name: sse\n"
            "    pool: [sse-1, sse-2, sse-3, sse-4]\n"
            "  - key: sk-admin\n    name: admin\n    admin: true\n%s"
            % (accounts, extra_yaml))
    conf = """
    tokenbiryani_zone   tb 32m;
    tokenbiryani_config tb.yaml;
    tokenbiryani_keepalive %s;
    server {
        listen 127.0.0.1:@PORT@ backlog=4096;
        keepalive_requests 100000;
        location /v1/       { tokenbiryani_pass; }
        location /admin/    { tokenbiryani_admin; }
    }
"""
    conf = conf % os.environ.get("TB_KEEPALIVE", "64")
    return tbbench.Nginx(workdir, module, conf, workers=2, name=name,
                         files={"tb.yaml": yaml})


def stop_process(proc, log):
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


class Portkey:
    def __init__(self, workdir):
        self.dir = os.path.join(workdir, "portkey")
        os.makedirs(self.dir, exist_ok=True)
        pkg = os.path.join(self.dir, "package.json")
        main = os.path.join(self.dir, "node_modules", "@portkey-ai",
                            "gateway", "build", "start-server.js")
        if not os.path.exists(main):
            with open(pkg, "w") as f:
                # @hono/node-server 2.1.9 copies the headers of a fetched
                # Response: without it Portkey's streams fail ("immutable")
                json.dump({"name": "tb-bench-portkey", "private": True,
                           "dependencies": {"@portkey-ai/gateway": "1.15.2"},
                           "overrides": {"@hono/node-server": "2.1.9"}}, f)
            subprocess.run(["npm", "install", "--no-audit", "--no-fund",
                            "--ignore-scripts", "--loglevel=error"],
                           cwd=self.dir, check=True)
        self.port = tbbench.free_port()
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(
            ["node", main, "--port=%d" % self.port, "--headless"],
            cwd=self.dir, stdout=self.log, stderr=self.log,
            env=dict(os.environ, NODE_ENV="production"))
        tbbench.wait_listening(self.port, 30, "portkey")

    def pids(self):
        return [self.proc.pid]

    def stop(self):
        stop_process(self.proc, self.log)


def redis_stats(procs):
    """Redis's counters: commands processed, bytes in and out"""
    import socket
    s = socket.create_connection(("127.0.0.1", procs["redis"].port), 5)
    s.sendall(b"INFO stats\r\n")
    data = b""
    while b"\r\n" not in data:
        data += s.recv(65536)
    head, data = data.split(b"\r\n", 1)
    size = int(head[1:])                    # a bulk string: $<len>
    while len(data) < size:
        data += s.recv(65536)
    s.close()
    f = dict(ln.split(":", 1) for ln in data[:size].decode().splitlines()
             if ":" in ln)
    return {"commands": int(f["total_commands_processed"]),
            "in": int(f["total_net_input_bytes"]),
            "out": int(f["total_net_output_bytes"])}


def wrk(args, url, conns, lua):
    threads = 1 if conns == 1 else 2
    cmd = ["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % args.seconds,
           "--timeout", "10s", "-s", lua, url]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    for ln in out.splitlines():
        if ln.startswith("WRKJSON "):
            r = json.loads(ln[8:])
            r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
            return r
    raise RuntimeError("wrk said: " + out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--conns", default="1,16,64,256")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs per cell, interleaved; medians are reported")
    ap.add_argument("--targets", default="a,b,c,d,e")
    ap.add_argument("--modes", default="json,stream")
    ap.add_argument("--workdir", default=os.path.join(tbbench.TOP, "build",
                                                      "bench", "overhead"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.module = os.path.abspath(args.module)
    args.workdir = os.path.abspath(args.workdir)
    os.makedirs(args.workdir, exist_ok=True)
    conns = [int(c) for c in args.conns.split(",")]
    targets = args.targets.split(",")
    modes = args.modes.split(",")

    for stream in (False, True):
        with open(os.path.join(args.workdir, "body-%s.json"
                               % ("stream" if stream else "json")), "w") as f:
            f.write(request_body(stream))

    up = start_upstream(args.workdir)
    procs = {"a": up}
    try:
        if "b" in targets:
            procs["b"] = start_proxy(args.workdir, up)
        if "c" in targets:
            procs["c"] = start_gateway(args.workdir, args.module, up,
                                       extra_yaml=os.environ.get(
                                           "TB_BENCH_EXTRA_C", ""))
        if "d" in targets:
            procs["d"] = Portkey(args.workdir)
        if ("e" in targets or "f" in targets) and "redis" not in procs:
            procs["redis"] = tbbench.Redis(args.workdir)
        if "e" in targets:
            procs["e"] = start_gateway(
                args.workdir, args.module, up, name="gateway-redis",
                extra_yaml=os.environ.get("TB_BENCH_EXTRA", "") + "store:\n  backend: redis\n  url: redis://"
                           "127.0.0.1:%d/0\n" % procs["redis"].port)
        if "f" in targets:
            for name, inst in (("f", "pair-a"), ("f2", "pair-b")):
                procs[name] = start_gateway(
                    args.workdir, args.module, up, name="gateway-" + inst,
                    extra_yaml=os.environ.get("TB_BENCH_EXTRA", "")
                    + "store:\n  backend: redis\n  url: redis://"
                    "127.0.0.1:%d/0\n  namespace: pair\n  instance: %s\n"
                    % (procs["redis"].port, inst))

        def url_lua(t, mode):
            stream = mode == "stream"
            extra = ""
            key = "sk-client"
            if t == "a":
                url = "http://127.0.0.1:%d%s" % (
                    up.port, "/v1/stream" if stream else "/v1/messages")
            elif t == "b":
                url = "http://127.0.0.1:%d%s" % (
                    procs["b"].port, "/v1/stream" if stream else "/v1/messages")
            elif t in ("c", "e", "f"):
                url = "http://127.0.0.1:%d/v1/messages" % procs[t].port
                key = "sk-client-sse" if stream else "sk-client-json"
            else:
                url = "http://127.0.0.1:%d/v1/messages" % procs["d"].port
                cfg = {"provider": "anthropic", "api_key": "sk-test",
                       "custom_host": "http://127.0.0.1:%d%s/v1"
                       % (up.port, "/sse" if stream else "")}
                extra = 'wrk.headers["x-portkey-config"] = %s' % json.dumps(
                    json.dumps(cfg))
            lua = os.path.join(args.workdir, "wrk-%s-%s.lua" % (t, mode))
            with open(lua, "w") as f:
                f.write(WRK_LUA % {
                    "body": os.path.join(args.workdir, "body-%s.json"
                                         % ("stream" if stream else "json")),
                    "key": key, "extra": extra})
            return url, lua

        # warm-up: connections, the gateway's mirror, node's JIT
        for mode in modes:
            for t in targets:
                url, lua = url_lua(t, mode)
                wrk(argparse.Namespace(seconds=2), url, 16, lua)

        # the targets take turns, round after round, so that a slow moment
        # of the machine falls on all of them; each cell is the median run
        runs = {}
        redis_use = {}
        for mode in modes:
            for c in conns:
                for rnd in range(args.rounds):
                    for t in targets:
                        url, lua = url_lua(t, mode)
                        before = redis_stats(procs) if t == "f" else None
                        r = wrk(args, url, c, lua)
                        if before:
                            after = redis_stats(procs)
                            redis_use.setdefault((mode, c), []).append(
                                {k: (after[k] - before[k]) / r["requests"]
                                 for k in after})
                        runs.setdefault((mode, c, t), []).append(r)
                        time.sleep(0.3)

        results = {}
        for key, rs in runs.items():
            med = {}
            for field in ("rps", "p50", "p99"):
                med[field] = statistics.median(r[field] for r in rs)
            med["errors"] = sum(r["errors"] for r in rs)
            med["non2xx"] = sum(r["non2xx"] for r in rs)
            med["runs"] = [round(r["rps"]) for r in rs]
            results[key] = med
    finally:
        for p in procs.values():
            p.stop()

    names = {"a": "upstream (direct)", "b": "nginx proxy_pass",
             "c": "tokenbiryani", "d": "Portkey",
             "e": "tokenbiryani, store.backend: redis",
             "f": "tokenbiryani, two instances sharing the pool"}
    if args.json:
        print(json.dumps({"%s/%d/%s" % k: v for k, v in results.items()},
                         indent=1))
        return

    cores = os.cpu_count()
    mem = 0
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) // (1024 * 1024)
    print("wrk, %d interleaved runs of %ds per cell (medians), all processes "
          "on the same %d cores (%d GiB); request body %d bytes\n"
          % (args.rounds, args.seconds, cores, mem, len(request_body(False))))
    for mode in modes:
        print("### %s\n" % ("streams (SSE)" if mode == "stream"
                            else "JSON Messages"))
        print("| conns | target | req/s | p50 ms | p99 ms | errors |")
        print("|---|---|---|---|---|---|")
        for c in conns:
            for t in targets:
                r = results[(mode, c, t)]
                print("| %d | %s | %.0f | %.3f | %.3f | %d |" % (
                    c, names[t], r["rps"], r["p50"] / 1000, r["p99"] / 1000,
                    r["errors"] + r["non2xx"]))
        if "b" in targets and "c" in targets:
            print("\n| conns | gateway / nginx req/s | gateway p99 − nginx p99 "
                  "(ms) |%s\n|---|---|---|%s" % (
                      " gateway / Portkey req/s |" if "d" in targets else "",
                      "---|" if "d" in targets else ""))
            for c in conns:
                rb, rc = results[(mode, c, "b")], results[(mode, c, "c")]
                line = "| %d | %.2f | %+.3f |" % (
                    c, rc["rps"] / rb["rps"], (rc["p99"] - rb["p99"]) / 1000)
                if "d" in targets:
                    line += " %.1f |" % (rc["rps"] / results[(mode, c, "d")]
                                         ["rps"])
                print(line)
        if "c" in targets and "e" in targets:
            print("\n| conns | redis backend / zone only req/s | redis p99 − "
                  "zone only p99 (ms) |\n|---|---|---|")
            for c in conns:
                rc, re_ = results[(mode, c, "c")], results[(mode, c, "e")]
                print("| %d | %.2f | %+.3f |" % (
                    c, re_["rps"] / rc["rps"], (re_["p99"] - rc["p99"]) / 1000))
        if "c" in targets and "f" in targets:
            print("\n| conns | pair / zone only req/s | pair p99 − zone only "
                  "p99 (ms) | Redis commands / req | bytes to Redis / req | "
                  "bytes from Redis / req |\n|---|---|---|---|---|---|")
            for c in conns:
                rc, rf = results[(mode, c, "c")], results[(mode, c, "f")]
                use = redis_use[(mode, c)]
                med = {k: statistics.median(u[k] for u in use)
                       for k in use[0]}
                print("| %d | %.2f | %+.3f | %.3f | %.0f | %.0f |" % (
                    c, rf["rps"] / rc["rps"], (rf["p99"] - rc["p99"]) / 1000,
                    med["commands"], med["in"], med["out"]))
        print()
    print("reproduce: make bench-overhead")


if __name__ == "__main__":
    main()
