#!/usr/bin/python3
"""
The stampede: N requests started at once against the real gateway (nginx,
2 workers) in front of 4 mock accounts whose request and input-token
windows are deliberately small.  Every request the gateway admits past a
window is one the mock must refuse with a 429: that count is the figure
(goal: 0).  Also reported: what the gateway served, queued and refused
itself, and per account the peak reservation next to what the mirror had
left at that moment.

    stampede.py --module build/ngx_http_tokenbiryani_module.so
        [--requests 1000] [--rpm 60] [--itpm 30000] [--wait 5]
        [--mode bucket|fixed] [--window 60] [--json]

    stampede.py --module ... --variants

    stampede.py --module ... --pair [--requests 200 ...]

--variants runs four cold pools in turn - token-bucket and fixed windows,
10 s and a minute long, each of 8 requests and about 6 requests' worth of
input tokens - with a wait budget that spans two window ends, and prints
for each the upstream 429s caused by over-admission (goal 0) and the
requests served against the capacity the windows offered in that time
(goal >= 0.90).

--pair splits the stampede across two gateways (2 workers each) in front
of the same accounts, first sharing the pool through one redis-server
(store.backend: redis), then each on its own, and prints both: the upstream
429s each way (goal with Redis: 0).
"""

import argparse
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tbbench  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--accounts", type=int, default=4)
    ap.add_argument("--rpm", type=int, default=60,
                    help="each account's request window, per minute")
    ap.add_argument("--itpm", type=int, default=30000,
                    help="each account's input-token window, per minute")
    ap.add_argument("--wait", type=float, default=5,
                    help="queue.default_max_wait_seconds")
    ap.add_argument("--mode", choices=("bucket", "fixed"), default="bucket",
                    help="the mock's windows: token buckets or fixed")
    ap.add_argument("--window", type=float, default=60,
                    help="the windows' length in seconds (--rpm and "
                    "--itpm are per window)")
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--pair", action="store_true",
                    help="two gateways, with Redis and without")
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--redis", action="store_true",
                    help="the instances share the pool through Redis")
    ap.add_argument("--workdir", default=os.path.join(tbbench.TOP, "build",
                                                      "bench", "stampede"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.module = os.path.abspath(args.module)
    args.workdir = os.path.abspath(args.workdir)
    os.makedirs(args.workdir, exist_ok=True)

    if args.variants:
        variants(args)
        return

    if args.pair:
        pair(args)
        return

    out = run(args)
    report(args, out)


def body_of(i):
    return {"model": "claude-sonnet-4-6", "max_tokens": 64,
            "messages": [{"role": "user", "content":
                          "stampede request %d: " % i + "word " * 300}]}


def tokens_of(body):
    """The input tokens the mock counts for body (its own rule)."""
    sys.path.insert(0, os.path.join(tbbench.TOP, "t", "mock"))
    import mock as mockmod  # noqa: E402
    return mockmod.analyse_prompt(body)[0]


def variants(args):
    rows = []
    per = tokens_of(body_of(500))
    for window, wait in ((10, 25), (60, 70)):
        for mode in ("bucket", "fixed"):
            args.mode, args.window, args.wait = mode, window, wait
            args.rpm, args.itpm = 8, 6 * per + per // 2
            out = run(args)
            ends = int(wait // window)
            if mode == "fixed":
                # whole requests per window, each window on its own
                per_account = min(args.rpm, args.itpm // per) * (1 + ends)
            else:
                # a bucket's refill carries over: fractions add up
                refills = wait / window
                per_account = int(min(args.rpm * (1 + refills),
                                      args.itpm * (1 + refills) / per))
            capacity = args.accounts * per_account
            rows.append((window, mode, out, capacity))
    print("%d requests at once, %d accounts, each window %d requests and %d "
          "input tokens (%d requests' worth: %d tokens a request); a wait "
          "budget that spans two window ends; a cold pool each time\n"
          % (args.requests, args.accounts, 8, 6 * per + per // 2,
             (6 * per + per // 2) // per, per))
    print("| windows | kind | upstream 429s (over-admission) | served | "
          "capacity offered | served / capacity |\n|---|---|---|---|---|---|")
    for window, mode, out, capacity in rows:
        print("| %ds, wait %gs | %s | **%d** | %d | %d | **%.2f** |" % (
            window, {10: 25, 60: 70}[window],
            "token bucket" if mode == "bucket" else "fixed window",
            out["mock_refused_429"], out["served"], capacity,
            out["served"] / capacity if capacity else 0))
    print("\nreproduce: make bench-stampede BENCH_ARGS=--variants")


def pair(args):
    rows = []
    for redis in (True, False):
        args.instances, args.redis = 2, redis
        rows.append((redis, run(args)))
    print("%d requests at once, split across two gateways (2 workers each) "
          "in front of the same %d accounts, each %d requests and %d input "
          "tokens per %gs %s; queue wait %gs\n"
          % (args.requests, args.accounts, args.rpm, args.itpm, args.window,
             "token bucket" if args.mode == "bucket" else "fixed window",
             args.wait))
    print("| the two gateways | upstream 429s (over-admission) | served | "
          "queued | refused by the gateways |\n|---|---|---|---|---|")
    for redis, out in rows:
        print("| %s | **%d** | %d | %d | %d |" % (
            "share the pool through Redis" if redis else "each on its own",
            out["mock_refused_429"], out["served"], out["queued"],
            out["refused_by_gateway_429"]))
    for redis, out in rows:
        if out["other"] or out["nginx_errors"]:
            print("\n%s: other outcomes %s; nginx logged %s" % (
                "Redis" if redis else "alone", out["other_samples"],
                out["nginx_errors"]))
    print("\nreproduce: make bench-stampede BENCH_ARGS=--pair")


def run(args):
    mock = tbbench.Mock(args.workdir, args.accounts, config={
        "defaults": {"requests_limit": args.rpm, "input_limit": args.itpm,
                     "output_limit": 100000, "window_seconds": args.window,
                     "window_mode": args.mode}})
    accounts = "".join(
        "  - id: acct-%02d\n    api_key: key-%02d\n"
        "    base_url: http://127.0.0.1:%d\n    max_concurrency: 1000\n"
        % (i, i, mock.ports[i - 1]) for i in range(1, args.accounts + 1))
    redis = tbbench.Redis(args.workdir) if args.redis else None
    http = """
    tokenbiryani_zone   tb 32m;
    tokenbiryani_config tb.yaml;
    server {
        listen 127.0.0.1:@PORT@ backlog=4096;
        location /v1/       { tokenbiryani_pass; }
        location /admin/    { tokenbiryani_admin; }
    }
"""
    gws = []
    for n in range(args.instances):
        yaml = ("queue:\n  max_size: %d\n  default_max_wait_seconds: %g\n"
                "accounts:\n%skeys:\n  - key: bir_bench\n    name: bench\n"
                "    admin: true\n" % (args.requests, args.wait, accounts))
        if redis:
            yaml += ("store:\n  backend: redis\n  url: redis://127.0.0.1:%d\n"
                     "  instance: gw-%d\n" % (redis.port, n))
        gws.append(tbbench.Nginx(args.workdir, args.module, http,
                                 files={"tb.yaml": yaml}, name="gw-%d" % n))
    if redis:
        # every gateway has been granted its share before the stampede
        for gw in gws:
            tbbench.wait_for(lambda: shared(gw), 10, "a gateway's share")

    # every request connected first, then all of them sent at once
    results = [None] * args.requests
    ready = threading.Barrier(args.requests + 1, timeout=60)

    def one(i):
        body = json.dumps(body_of(i))
        req = ("POST /v1/messages HTTP/1.1\r\nHost: localhost\r\n"
               "x-api-key: bir_bench\r\ncontent-type: application/json\r\n"
               "connection: close\r\ncontent-length: %d\r\n\r\n%s"
               % (len(body), body)).encode()
        s = None
        try:
            s = socket.create_connection(
                ("127.0.0.1", gws[i % len(gws)].port), 30)
        except OSError as e:
            results[i] = (0, str(e))
        # every thread connected (or failed to): that is the start
        ready.wait()
        if s is None:
            return
        try:
            s.settimeout(args.wait + 30)
            s.sendall(req)
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            s.close()
            head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
            status = int(head.split(" ", 2)[1])
            via = "x-tokenbiryani-account:" in head.lower()
            results[i] = (status, via)
        except (OSError, ValueError, IndexError) as e:
            results[i] = (0, str(e))

    threads = [threading.Thread(target=one, args=(i,))
               for i in range(args.requests)]
    for t in threads:
        t.start()
    ready.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0

    statuses = []
    errors = []
    for gw in gws:
        st, _, raw = tbbench.request(gw.port, "GET", "/admin/status",
                                     headers={"x-api-key": "bir_bench"})
        statuses.append(json.loads(raw))
        errors += gw.errors()
        gw.stop()
    if redis:
        redis.stop()
    stats = mock.stats()
    mock.stop()
    status = statuses[0]

    served = sum(1 for r in results if r[0] == 200)
    gw429 = sum(1 for r in results if r[0] == 429 and not r[1])
    up429 = sum(1 for r in results if r[0] == 429 and r[1])
    other = [r for r in results if r[0] not in (200, 429)]
    out = {
        "requests": args.requests,
        "served": served,
        "refused_by_gateway_429": gw429,
        "upstream_429_passed_on": up429,
        "other": len(other),
        "other_samples": [str(r) for r in other[:5]],
        "mock_refused_429": stats["refused_429"],
        "mock_requests": stats["total_requests"],
        "queued": sum(x["queue"]["queued_total"] for x in statuses),
        "queue_served": sum(x["queue"]["served"] for x in statuses),
        "queue_timed_out": sum(x["queue"]["timed_out"] for x in statuses),
        "wall_s": wall,
        "leases_held_after": sum(x["leases"]["held"] for x in statuses),
        "accounts": [{
            "id": a["id"],
            "peak_reserved": a["peak"]["reserved"],
            "peak_available": a["peak"]["available"],
            "inflight_after": a["inflight"],
        } for a in status["accounts"]],
        "nginx_errors": errors,
    }

    return out


def shared(gw):
    """whether the gateway's share of the pool was granted"""
    try:
        st, _, raw = tbbench.request(gw.port, "GET", "/admin/status",
                                     headers={"x-api-key": "bir_bench"})
        return st == 200 and json.loads(raw)["store"].get("share") is not None
    except (OSError, ValueError, KeyError):
        return False


def report(args, out):
    served = out["served"]
    gw429 = out["refused_by_gateway_429"]
    wall = out["wall_s"]
    errors = out["nginx_errors"]
    other = out["other_samples"]

    if args.json:
        print(json.dumps(out, indent=1))
        return

    print("%d requests started at once; %d accounts, each %d requests and "
          "%d input tokens per %gs %s; queue wait %gs; nginx with the module, "
          "2 workers\n" % (args.requests, args.accounts, args.rpm, args.itpm,
                           args.window, "token bucket" if args.mode == "bucket"
                           else "fixed window", args.wait))
    print("| | count |\n|---|---|")
    print("| 429s the mock had to send (admitted past a window) | **%d** |"
          % out["mock_refused_429"])
    print("| served | %d |" % served)
    print("| queued by the gateway | %d (%d then served, %d timed out) |"
          % (out["queued"], out["queue_served"], out["queue_timed_out"]))
    print("| refused by the gateway itself, 429 with retry-after | %d |"
          % gw429)
    print("| other outcomes | %d %s |" % (out["other"], other))
    print("| requests the mock received | %d |" % out["mock_requests"])
    print("\n| account | peak reserved (requests / input) | mirror had then "
          "(requests / input) |\n|---|---|---|")
    for a in out["accounts"]:
        print("| %s | %d / %d | %d / %d |" % (
            a["id"], a["peak_reserved"]["requests"],
            a["peak_reserved"]["input_tokens"],
            a["peak_available"]["requests"],
            a["peak_available"]["input_tokens"]))
    print("\nwall time %.2fs; leases held after: %d%s"
          % (wall, out["leases_held_after"],
             "; nginx logged: " + " ".join(errors) if errors else ""))
    print("\nreproduce: make bench-stampede")


if __name__ == "__main__":
    main()
