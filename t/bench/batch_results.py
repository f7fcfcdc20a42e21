#!/usr/bin/python3
"""
What a batch's results cost a worker's memory as they stream through the
gateway (batch.api on, 2 workers, one account on the mock, pricing
builtin):

  - client: a batch of --lines requests is made through the gateway,
    polled until it ended, and its results (JSONL, some --words words a
    line) read through the gateway --reads times, as fast as the client
    can.  Between its reads the client samples each worker's private
    memory (RssAnon in /proc/PID/status); each worker's peak resident set
    (VmHWM, reset through /proc/PID/clear_refs before each read when this
    process may write it) is read after it.
  - gateway: a batch nobody reads, whose results the gateway reads itself
    once it ended (batch.poll_interval_seconds 0.05); the workers sampled
    every millisecond until its hold is released.

For each read: the bytes and lines that passed, the workers' growth over
their memory before it (the worker that grew most), and the larger of
the two growths in bytes per MB streamed.  The first read of a batch is also checked to be
charged exactly what the mock says the batch used, at half price.

    batch_results.py --module build/ngx_http_tokenbiryani_module.so
        [--lines 10000[,40000...]] [--words 600] [--reads 3]
        [--modes client,gateway] [--hold BYTES]

--hold sets retry.hold_response_bytes (4 MiB when not given).  A
measurement, not a test: it exits 1 only when a read lost lines, the
gateway read a batch's results more than once, a batch was charged wrong
or nginx logged an alert.
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

KEY = "bir_bench"
ADMIN = "bir_admin"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01",
           "content-type": "application/json"}


def status_kb(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for ln in f:
                if ln.startswith(field + ":"):
                    return int(ln.split()[1])
    except FileNotFoundError:
        pass
    return 0


def reset_hwm(pid):
    """VmHWM back to VmRSS (clear_refs 5); False when not allowed"""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Memory:
    """the workers' RssAnon before a read and its peak during it"""

    def __init__(self, pids):
        self.pids = pids
        self.base = {p: status_kb(p, "RssAnon") for p in pids}
        self.rss = {p: status_kb(p, "VmRSS") for p in pids}
        self.hwm = all([reset_hwm(p) for p in pids])
        self.peak = dict(self.base)

    def sample(self):
        for p in self.pids:
            kb = status_kb(p, "RssAnon")
            if kb > self.peak[p]:
                self.peak[p] = kb

    def report(self):
        """(pid, RssAnon growth kB, VmHWM growth kB or None, after kB)"""
        self.sample()
        pid = max(self.pids, key=lambda p: self.peak[p] - self.base[p])
        hwm = (max(status_kb(p, "VmHWM") - self.rss[p] for p in self.pids)
               if self.hwm else None)
        return (pid, self.peak[pid] - self.base[pid], hwm,
                status_kb(pid, "RssAnon") - self.base[pid])


def batch_body(n, words):
    return json.dumps({"requests": [
        {"custom_id": "r%d" % i,
         "params": {"model": "claude-sonnet-4-6", "max_tokens": words,
                    "messages": [{"role": "user",
                                  "content": "hello %d" % i}]}}
        for i in range(1, n + 1)]})


def api(gw, method, path, body=None, key=KEY):
    h = dict(HEADERS, **{"x-api-key": key})
    st, _, raw = tbbench.request(gw.port, method, path, body, h)
    return st, (json.loads(raw) if raw else None)


def create(gw, n, words):
    st, b = api(gw, "POST", "/v1/messages/batches", batch_body(n, words))
    if st != 200:
        raise RuntimeError("create: %d %s" % (st, b))
    return b["id"]


def until_ended(gw, bid):
    def ended():
        st, b = api(gw, "GET", "/v1/messages/batches/" + bid)
        return st == 200 and b["processing_status"] == "ended"
    tbbench.wait_for(ended, 120, "batch %s to end" % bid)


def spend(gw):
    _, s = api(gw, "GET", "/admin/status", key=ADMIN)
    k = [k for k in s["keys"] if k["name"] == "bench"][0]["spend"]
    return k["window_usd"], k["in_flight_usd"]


def mock_cost_nd(mock, bid):
    """what the mock says the batch used, at half the builtin price"""
    b = [b for b in mock.control("GET", "/_mock/batches")["batches"]
         if b["id"] == bid][0]["usage"]
    return (b["input_tokens"] * 3000 + b["output_tokens"] * 15000) / 2


def read_results(gw, bid, mem):
    """GET .../results as HTTP/1.1 (chunked), read as it comes; the
    workers sampled between reads: (bytes of JSONL, lines, seconds)"""
    s = socket.create_connection(("127.0.0.1", gw.port), 10)
    s.settimeout(60)
    s.sendall(("GET /v1/messages/batches/%s/results HTTP/1.1\r\n"
               "Host: localhost\r\nx-api-key: %s\r\n"
               "anthropic-version: 2023-06-01\r\nConnection: close\r\n\r\n"
               % (bid, KEY)).encode())
    t0 = time.monotonic()
    buf = bytearray()
    while True:
        piece = s.recv(1 << 18)
        if not piece:
            break
        buf += piece
        mem.sample()
    secs = time.monotonic() - t0
    s.close()
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("results: " + head.split(b"\r\n")[0].decode())
    body = bytearray()
    pos = 0
    while True:
        nl = rest.index(b"\r\n", pos)
        size = int(rest[pos:nl].split(b";")[0], 16)
        if size == 0:
            break
        body += rest[nl + 2:nl + 2 + size]
        pos = nl + 2 + size + 2
    return len(body), body.count(b"\n"), secs


def gateway_read(gw, bid, mem):
    """until the gateway read the results itself: the workers sampled
    every millisecond"""
    done = threading.Event()

    def sampler():
        while not done.is_set():
            mem.sample()
            time.sleep(0.001)

    t = threading.Thread(target=sampler, daemon=True)
    t.start()
    t0 = time.monotonic()
    try:
        tbbench.wait_for(lambda: spend(gw)[1] == 0, 120,
                         "the gateway to read batch %s" % bid)
    finally:
        done.set()
        t.join()
    return time.monotonic() - t0


def start(workdir, module, mock, hold, poll):
    yaml = ("batch:\n  api: true\n  poll_interval_seconds: %g\n"
            "pricing: builtin\n%s"
            "accounts:\n  - id: a1\n    api_key: sk-a1\n"
            "    base_url: http://127.0.0.1:%d\n"
            "keys:\n  - key: %s\n    name: bench\n"
            "  - key: %s\n    name: admin\n    admin: true\n"
            % (poll, "retry:\n  hold_response_bytes: %d\n" % hold
               if hold is not None else "", mock.ports[0], KEY, ADMIN))
    http = """
    tokenbiryani_zone   tb 32m;
    tokenbiryani_config tb.yaml;
    server {
        listen 127.0.0.1:@PORT@;
        client_max_body_size 256m;
        location /v1/       { tokenbiryani_pass; }
        location /admin/    { tokenbiryani_admin; }
    }
"""
    return tbbench.Nginx(workdir, module, http, files={"tb.yaml": yaml})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--lines", default="10000",
                    help="result lines of a batch; several, comma-separated")
    ap.add_argument("--words", type=int, default=600,
                    help="output tokens (words) of each result")
    ap.add_argument("--reads", type=int, default=3)
    ap.add_argument("--modes", default="client,gateway")
    ap.add_argument("--hold", type=int, default=None, metavar="BYTES")
    ap.add_argument("--workdir", default=os.path.join(
        tbbench.TOP, "build", "bench", "batch_results"))
    args = ap.parse_args()
    args.module = os.path.abspath(args.module)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)

    mock = tbbench.Mock(workdir, 1, config={"defaults": {
        "batch_processing_ms": 200, "output_tokens": args.words,
        "batch_requests_limit": 100000}})
    bad = 0
    print("| reader | lines | MB streamed | read | s | worker RssAnon "
          "peak growth | VmHWM growth | RssAnon after | bytes of worker "
          "memory per MB streamed |")
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for mode in args.modes.split(","):
            gw = start(workdir, args.module, mock, args.hold,
                       3600 if mode == "client" else 0.05)
            try:
                for n in (int(x) for x in args.lines.split(",")):
                    mock.reset()
                    pids = gw.pids()[1:]
                    w0, _ = spend(gw)
                    if mode == "gateway":
                        bid = create(gw, n, args.words)
                        mem = Memory(pids)
                        secs = gateway_read(gw, bid, mem)
                        size = None
                        reads = [(mem, size, None, secs)]
                    else:
                        bid = create(gw, n, args.words)
                        until_ended(gw, bid)
                        reads = []
                        for _ in range(args.reads):
                            mem = Memory(pids)
                            size, lines, secs = read_results(gw, bid, mem)
                            if lines != n:
                                print("lost lines: %d of %d" % (lines, n))
                                bad = 1
                            reads.append((mem, size, lines, secs))
                    w1, held = spend(gw)
                    want = mock_cost_nd(mock, bid)
                    if held != 0 or abs((w1 - w0) * 1e9 - want) >= 0.5:
                        print("charged $%.9f (held $%.9f) where the mock "
                              "says $%.9f" % (w1 - w0, held, want / 1e9))
                        bad = 1
                    if size is None:
                        # the gateway's own read: its size in the mock's
                        # log, where it is read once
                        got = [e.get("resp_len") or 0 for e in mock.log()
                               if e.get("path", "").endswith(
                                   bid + "/results")]
                        if len(got) != 1:
                            print("the gateway read the results of %s %d "
                                  "times" % (bid, len(got)))
                            bad = 1
                        size = got[0] if got else 0
                    for i, (mem, sz, lines, secs) in enumerate(reads):
                        sz = sz or size
                        pid, grew, hwm, after = mem.report()
                        mb = sz / 1048576
                        print("| %s | %d | %.1f | %d | %.2f | %d kB | %s | "
                              "%d kB | %.0f |"
                              % (mode, n, mb, i + 1, secs, grew,
                                 "%d kB" % hwm if hwm is not None else "-",
                                 after, max(grew, hwm or 0) * 1024 / mb))
                for e in gw.errors():
                    print("nginx: " + e.rstrip())
                    bad = 1
            finally:
                gw.stop()
    finally:
        mock.stop()
    print("\nreproduce: python3 t/bench/batch_results.py --module %s "
          "--lines %s --words %d --reads %d --modes %s%s"
          % (os.path.relpath(args.module, tbbench.TOP), args.lines,
             args.words, args.reads, args.modes,
             " --hold %d" % args.hold if args.hold is not None else ""))
    sys.exit(bad)


if __name__ == "__main__":
    main()
