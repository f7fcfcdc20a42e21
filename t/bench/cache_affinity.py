#!/usr/bin/python3
"""
The cache-affinity benchmark, through the real gateway (nginx, 2 workers)
and the cache-aware mock: the workload of the Python implementation's
benchmarks/cache_affinity.py, run once per routing strategy, plus an oracle
computed from the same workload (each conversation misses the cache on its
first turn only).

    cache_affinity.py --module build/ngx_http_tokenbiryani_module.so
        [--accounts 4] [--conversations 24] [--turns 8]
        [--strategies sticky_headroom,headroom,...] [--json]

Prints a markdown table and the command line that reproduces it, or with
--json the figures as JSON (t/120-cache-affinity.t reads them).  Not a
test: it asserts nothing and never times anything it reports as a goal.
"""

import argparse
import json
import os
import shlex
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tbbench  # noqa: E402

STRATEGIES = ["sticky_headroom", "headroom", "cost_tiered", "priority",
              "least_loaded", "round_robin"]
CACHE_BLIND = ["headroom", "least_loaded", "round_robin"]

# USD per million tokens
PRICE = {"input": 3.00, "output": 15.00, "cache_read": 0.30,
         "cache_write": 3.75}

SYSTEM = "You are a careful engineering assistant for code. " * 120
TOOLS = [
    {"name": name, "description": desc * 20,
     "input_schema": {"type": "object",
                      "properties": {"path": {"type": "string"}}}}
    for name, desc in (("read_file", "Read a file from disk. "),
                       ("write_file", "Write a file to disk. "),
                       ("run_command", "Run a shell command. "))
]


def body(conv, turn, model, marked=True):
    # the cache breakpoint ends the conversation's own prefix: tools, system
    # and its opening task; what follows is fresh input every turn.  An
    # unmarked client (a plain SDK script) sends none at all.
    task = {"type": "text", "text": "Task %d: refactor and explain." % conv}
    if marked:
        task["cache_control"] = {"type": "ephemeral"}
    msgs = [{"role": "user", "content": [task]}]
    for k in range(1, turn + 1):
        msgs.append({"role": "assistant", "content": "Step %d done." % k})
        msgs.append({"role": "user", "content": "Continue with step %d." % (k + 1)})
    return json.dumps({
        "model": model, "max_tokens": 512,
        "system": [{"type": "text", "text": SYSTEM}],
        "tools": TOOLS, "messages": msgs})


def cost(u):
    return (u["input_tokens"] * PRICE["input"]
            + u["output_tokens"] * PRICE["output"]
            + u["cache_read_input_tokens"] * PRICE["cache_read"]
            + u["cache_creation_input_tokens"] * PRICE["cache_write"]) / 1e6


def run_strategy(args, strategy, mock, workdir, client="marked"):
    accounts = "".join(
        "  - id: acct-%02d\n    api_key: key-%02d\n"
        "    base_url: http://127.0.0.1:%d\n" % (i, i, mock.ports[i - 1])
        for i in range(1, args.accounts + 1))
    yaml = ("routing:\n  strategy: %s\nretry:\n  backoff_base_seconds: 0\n"
            "%saccounts:\n%skeys:\n  - key: bir_bench\n    name: bench\n"
            "    admin: true\n"
            % (strategy, "cache:\n  auto_breakpoint: true\n"
               if client == "auto" else "", accounts))
    http = """
    tokenbiryani_zone   tb 16m;
    tokenbiryani_config tb.yaml;
    server {
        listen 127.0.0.1:@PORT@ backlog=4096;
        client_max_body_size 32m;
        location /v1/       { tokenbiryani_pass; }
        location /admin/    { tokenbiryani_admin; }
    }
"""
    mock.reset()
    gw = tbbench.Nginx(workdir, args.module, http, files={"tb.yaml": yaml})
    latencies = []
    failures = []
    lock = threading.Lock()

    def conversation(i):
        for t in range(args.turns):
            t0 = time.monotonic()
            st, _, raw = tbbench.request(
                gw.port, "POST", "/v1/messages",
                body(i, t, args.model, marked=(client == "marked")),
                {"x-api-key": "bir_bench", "content-type": "application/json",
                 "anthropic-version": "2023-06-01",
                 "x-bench-conv": str(i), "x-bench-turn": str(t)})
            dt = time.monotonic() - t0
            with lock:
                latencies.append(dt)
                if st != 200:
                    failures.append((i, t, st, raw[:200]))

    try:
        t0 = time.monotonic()
        threads = [threading.Thread(target=conversation, args=(i,))
                   for i in range(1, args.conversations + 1)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.monotonic() - t0
        st, _, raw = tbbench.request(gw.port, "GET", "/admin/status",
                                     headers={"x-api-key": "bir_bench"})
        status = json.loads(raw)
        errors = gw.errors()
    finally:
        gw.stop()

    log = [e for e in mock.log() if e.get("path") == "/v1/messages"]
    reqs = []
    for e in log:
        h = e.get("headers", {})
        u = e.get("usage") or {}
        reqs.append({"conv": int(h.get("x-bench-conv", 0)),
                     "turn": int(h.get("x-bench-turn", 0)),
                     "status": e.get("status"), "credential": e["credential"],
                     "usage": {k: u.get(k, 0) for k in
                               ("input_tokens", "output_tokens",
                                "cache_read_input_tokens",
                                "cache_creation_input_tokens")}})
    ok = [r for r in reqs if r["status"] == 200]
    read = sum(r["usage"]["cache_read_input_tokens"] for r in ok)
    write = sum(r["usage"]["cache_creation_input_tokens"] for r in ok)
    fresh = sum(r["usage"]["input_tokens"] for r in ok)
    aff = status["affinity"]
    return {
        "strategy": strategy + {"marked": "",
                                "unmarked": " · client sends no breakpoint",
                                "auto": " · no breakpoint + auto_breakpoint"
                                }[client],
        "requests": len(ok),
        "upstream_attempts": len(reqs),
        "failures": len(failures),
        "cache_hit": read / (read + write + fresh) if ok else 0.0,
        "cache_breaks": aff["broken"] + aff["forced_breaks"],
        "broken": aff["broken"],
        "forced_breaks": aff["forced_breaks"],
        "cost": sum(cost(r["usage"]) for r in ok),
        "billed_input": read + write + fresh,
        "p50_ms": statistics.median(latencies) * 1000 if latencies else 0,
        "wall_s": wall,
        "nginx_errors": errors,
        "requests_detail": ok,
    }


def oracle(run):
    """The same work with one cache miss per conversation, its first turn."""
    total = 0.0
    for r in run["requests_detail"]:
        u = dict(r["usage"])
        cacheable = u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        first = r["turn"] == 0
        u["cache_creation_input_tokens"] = cacheable if first else 0
        u["cache_read_input_tokens"] = 0 if first else cacheable
        total += cost(u)
    n = len(run["requests_detail"])
    billed = run["billed_input"]
    convs = len({r["conv"] for r in run["requests_detail"]})
    hit = sum(r["usage"]["cache_read_input_tokens"]
              + r["usage"]["cache_creation_input_tokens"]
              for r in run["requests_detail"] if r["turn"] != 0)
    return {"strategy": "oracle", "requests": n, "cost": total,
            "cache_hit": hit / billed if billed else 0.0,
            "cache_breaks": 0, "billed_input": billed, "conversations": convs}


def table(rows, sticky, orc):
    out = ["| Strategy | Cache hit | Cache breaks | Cost | vs sticky | vs oracle "
           "| Billed input |", "|---|---|---|---|---|---|---|"]
    for r in rows + [orc]:
        vs = "—" if r is sticky else "%.2fx" % (r["cost"] / sticky["cost"])
        out.append("| %s | %.1f%% | %d | $%.4f | %s | %.2fx | {:,} |"
                   .format(r["billed_input"])
                   % (r["strategy"], r["cache_hit"] * 100, r["cache_breaks"],
                      r["cost"], vs, r["cost"] / orc["cost"]))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--accounts", type=int, default=4)
    ap.add_argument("--conversations", type=int, default=24)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--model", default="claude-bench")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--workdir", default=os.path.join(tbbench.TOP, "build",
                                                      "bench", "cache"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-clients", action="store_true",
                    help="leave out the rows of a client that sends no "
                    "breakpoint")
    args = ap.parse_args()
    args.module = os.path.abspath(args.module)
    args.workdir = os.path.abspath(args.workdir)

    os.makedirs(args.workdir, exist_ok=True)
    # the reference's shape: 20 output tokens a turn
    mock = tbbench.Mock(args.workdir, args.accounts,
                        config={"defaults": {"output_tokens": 20}})
    try:
        rows = [run_strategy(args, s, mock, args.workdir)
                for s in args.strategies.split(",")]
        # a client that marks nothing (a plain SDK script), without and
        # with the gateway's cache.auto_breakpoint, under the default
        if not args.no_clients:
            rows += [run_strategy(args, "sticky_headroom", mock, args.workdir,
                                  client=c) for c in ("unmarked", "auto")]
    finally:
        mock.stop()

    sticky = next((r for r in rows if r["strategy"] == "sticky_headroom"),
                  rows[0])
    # (every row is the same work: the oracle is the marked client's best)
    orc = oracle(sticky)

    if args.json:
        for r in rows:
            # what missed the cache after a conversation's first turn
            r["late_misses"] = [
                {k: d[k] for k in ("conv", "turn", "credential")}
                for d in r["requests_detail"]
                if d["turn"] and d["usage"]["cache_creation_input_tokens"]]
            del r["requests_detail"]
        print(json.dumps({"rows": rows, "oracle": orc}, indent=1))
        return

    cmd = "make bench-cache" if (args.accounts, args.conversations,
                                 args.turns) == (4, 24, 8) else \
        "python3 t/bench/cache_affinity.py " + " ".join(
            shlex.quote(a) for a in sys.argv[1:])
    print("%d accounts, %d concurrent conversations, %d sequential turns each; "
          "nginx with the module, 2 workers; the cache-aware mock\n"
          % (args.accounts, args.conversations, args.turns))
    print(table(rows, sticky, orc))
    print("\nper strategy: requests served, upstream attempts, p50 latency, "
          "wall time")
    for r in rows:
        print("- %s: %d served (%d failed), %d attempts, p50 %.1f ms, %.2f s%s"
              % (r["strategy"], r["requests"], r["failures"],
                 r["upstream_attempts"], r["p50_ms"], r["wall_s"],
                 "; nginx logged: " + " ".join(r["nginx_errors"])
                 if r["nginx_errors"] else ""))
    print("\nreproduce: %s" % cmd)


if __name__ == "__main__":
    main()
