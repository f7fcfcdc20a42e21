#!/usr/bin/python3
"""
Does a worker's memory stay flat under steady load?  For each store
backend asked for, the gateway (2 workers, 8 accounts) in front of a fast
static upstream, driven for --minutes by:

  - wrk, JSON Messages and streams at the same time (--conns each);
  - a churn loop: malformed JSON, an unknown key, a body over the limit,
    a stream the client leaves after its first bytes, and a key minted,
    used and revoked through /admin/keys, over and over.

Every --every seconds it reads each worker's private memory (RssAnon in
/proc/PID/status) and, once --warmup seconds have passed, fits a line
through the readings: the slope in KB/min is what a worker keeps and never
gives back.  The worker that writes the store (the flusher) is named.

    soak.py --module build/ngx_http_tokenbiryani_module.so
        [--stores sqlite,redis,memory] [--minutes 4] [--warmup 60]
        [--every 5] [--conns 8] [--limit-kb 200]

Prints a markdown table and one line per store; exits 1 when a worker's
slope after warm-up is over --limit-kb KB/min.  A benchmark of a few
minutes, not part of make test.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead  # noqa: E402
import tbbench  # noqa: E402


def rss_anon_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for ln in f:
                if ln.startswith("RssAnon:"):
                    return int(ln.split()[1])
    except FileNotFoundError:
        return None
    return None


def slope_per_min(samples):
    """least squares through (seconds, KB): KB per minute"""
    n = len(samples)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in samples) / n
    my = sum(v for _, v in samples) / n
    sxx = sum((t - mx) ** 2 for t, _ in samples)
    sxy = sum((t - mx) * (v - my) for t, v in samples)
    return (sxy / sxx) * 60 if sxx else 0.0


def raw(port, data, read=True, keep_open=0.0):
    """one request as bytes; the answer's status line, or None"""
    try:
        s = socket.create_connection(("127.0.0.1", port), 5)
        s.settimeout(10)
        s.sendall(data)
        line = None
        if read:
            buf = s.recv(4096)
            line = buf.split(b"\r\n", 1)[0].decode(errors="replace")
        if keep_open:
            time.sleep(keep_open)
        s.close()
        return line
    except OSError:
        return None


def post(path, key, body, extra=b""):
    if isinstance(body, str):
        body = body.encode()
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n"
            b"x-api-key: " + key.encode() + b"\r\n"
            b"anthropic-version: 2023-06-01\r\n"
            b"content-type: application/json\r\n" + extra
            + b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + body)


class Churn(threading.Thread):
    """the odd traffic around the steady one, until stopped"""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.stop_ev = threading.Event()
        self.counts = {}

    def count(self, what, line):
        parts = (line or "").split(" ")
        k = "%s %s" % (what, parts[1] if len(parts) > 1 else "no answer")
        self.counts[k] = self.counts.get(k, 0) + 1

    def run(self):
        body = overhead.request_body(False)
        sbody = overhead.request_body(True)
        n = 0
        while not self.stop_ev.is_set():
            n += 1
            self.count("malformed", raw(self.port, post(
                "/v1/messages", "sk-client-json", '{"model": "claude')))
            self.count("unknown key", raw(self.port, post(
                "/v1/messages", "sk-nobody", body)))
            self.count("too large", raw(self.port, post(
                "/v1/messages", "sk-client-json",
                '{"model":"claude-sonnet-4-6","x":"' + "a" * 2000000
                + '"}')))
            # a client that leaves a stream once it has begun
            raw(self.port, post("/v1/messages", "sk-client-sse", sbody),
                read=True)
            # a key minted, used once and revoked
            name = "churn-%d" % n
            st, _, out = tbbench.request(
                self.port, "POST", "/admin/keys",
                json.dumps({"name": name, "pool": ["json-1", "json-2"]}),
                {"x-api-key": "sk-admin", "content-type": "application/json"},
                timeout=10)
            if st == 201 or st == 200:
                key = json.loads(out).get("key", "")
                self.count("minted key", raw(self.port, post(
                    "/v1/messages", key, body)))
                tbbench.request(self.port, "DELETE", "/admin/keys/" + name,
                                None, {"x-api-key": "sk-admin"}, timeout=10)
            else:
                self.count("mint refused", "x %d" % st)
            self.stop_ev.wait(0.2)


def workers_of(gw, n=2):
    tbbench.wait_for(lambda: len(gw.pids()) > n, 10, "the workers")
    return gw.pids()[1:]


def flusher_of(gw):
    st, _, out = tbbench.request(gw.port, "GET", "/admin/status", None,
                                 {"x-api-key": "sk-admin"}, timeout=10)
    if st != 200:
        return None
    return (json.loads(out).get("store") or {}).get("writer_pid")


def soak(args, up, store, redis):
    extra = ""
    if store == "sqlite":
        extra = "store:\n  backend: sqlite\n  path: soak.db\n"
    elif store == "redis":
        extra = ("store:\n  backend: redis\n  url: redis://127.0.0.1:%d/0\n"
                 "  namespace: soak\n" % redis.port)
    gw = overhead.start_gateway(args.workdir, args.module, up,
                                extra_yaml=extra, name="soak-" + store)
    wrks = []
    churn = Churn(gw.port)
    samples = {}
    try:
        workers = workers_of(gw)
        secs = int(args.minutes * 60)
        for stream in (False, True):
            lua = os.path.join(args.workdir, "soak-%s.lua"
                               % ("stream" if stream else "json"))
            with open(lua, "w") as f:
                f.write(overhead.WRK_LUA % {
                    "body": os.path.join(args.workdir, "body-%s.json"
                                         % ("stream" if stream else "json")),
                    "key": "sk-client-sse" if stream else "sk-client-json",
                    "extra": ""})
            wrks.append(subprocess.Popen(
                ["wrk", "-t1", "-c%d" % args.conns, "-d%ds" % secs,
                 "--timeout", "10s", "-s", lua,
                 "http://127.0.0.1:%d/v1/messages" % gw.port],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        churn.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < secs:
            now = time.monotonic() - t0
            for pid in workers:
                kb = rss_anon_kb(pid)
                if kb is not None:
                    samples.setdefault(pid, []).append((now, kb))
            time.sleep(args.every)
        flusher = flusher_of(gw)
        churn.stop_ev.set()
        churn.join(30)
        served = refused = 0
        for w in wrks:
            out = w.communicate(timeout=60)[0]
            for ln in out.splitlines():
                if ln.startswith("WRKJSON "):
                    r = json.loads(ln[8:])
                    served += r["requests"] - r["non2xx"] - r["errors"]
                    refused += r["non2xx"] + r["errors"]
        errors = gw.errors()
    finally:
        churn.stop_ev.set()
        for w in wrks:
            if w.poll() is None:
                w.kill()
        gw.stop()

    rows = []
    for pid, s in sorted(samples.items()):
        after = [(t, v) for t, v in s if t >= args.warmup]
        rows.append({"store": store, "pid": pid,
                     "flusher": pid == flusher,
                     "start_kb": after[0][1] if after else s[0][1],
                     "end_kb": s[-1][1],
                     "slope_kb_min": slope_per_min(after),
                     "samples": len(after)})
    return rows, (served, refused), churn.counts, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--stores", default="sqlite,redis")
    ap.add_argument("--minutes", type=float, default=4)
    ap.add_argument("--warmup", type=float, default=60)
    ap.add_argument("--every", type=float, default=5)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--limit-kb", type=float, default=200)
    ap.add_argument("--workdir", default=os.path.join(tbbench.TOP, "build",
                                                      "bench", "soak"))
    args = ap.parse_args()
    args.module = os.path.abspath(args.module)
    args.workdir = os.path.abspath(args.workdir)
    os.makedirs(args.workdir, exist_ok=True)
    for stream in (False, True):
        with open(os.path.join(args.workdir, "body-%s.json"
                               % ("stream" if stream else "json")), "w") as f:
            f.write(overhead.request_body(stream))

    up = overhead.start_upstream(args.workdir)
    redis = None
    results = []
    try:
        stores = args.stores.split(",")
        if "redis" in stores:
            redis = tbbench.Redis(args.workdir)
        for store in stores:
            rows, served, counts, errors = soak(args, up, store, redis)
            results.append((store, rows, served, counts, errors))
    finally:
        if redis:
            redis.stop()
        up.stop()

    print("%.1f min per store, wrk %d + %d connections (JSON, streams) and "
          "the churn loop; RssAnon every %gs, slope fitted after %gs\n"
          % (args.minutes, args.conns, args.conns, args.every, args.warmup))
    print("| store | worker | RssAnon after warm-up | at the end "
          "| slope KB/min |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for store, rows, served, counts, errors in results:
        for r in rows:
            worst = max(worst, r["slope_kb_min"])
            print("| %s | %d%s | %.1f MB | %.1f MB | %+.0f |"
                  % (store, r["pid"], " (flusher)" if r["flusher"] else "",
                     r["start_kb"] / 1024, r["end_kb"] / 1024,
                     r["slope_kb_min"]))
    print()
    for store, rows, served, counts, errors in results:
        print("%s: %d requests from wrk answered 200, %d not; churn %s; "
              "%d alert/crit lines"
              % (store, served[0], served[1], ", ".join("%s: %d" % kv
                                          for kv in sorted(counts.items())),
                 len(errors)))
        for ln in errors[:5]:
            print("  " + ln.rstrip())
    ok = worst <= args.limit_kb
    print("\nworst slope %+.0f KB/min: %s the %g KB/min bound"
          % (worst, "within" if ok else "OVER", args.limit_kb))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
