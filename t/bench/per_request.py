#!/usr/bin/python3
"""
What one request costs the workers, the gateway next to plain nginx
proxy_pass, on the setup of overhead.py (the same static upstream, the
same bodies):

  - CPU: wrk for a few seconds, the workers' user and system time (from
    /proc/<pid>/stat) divided by the requests served;
  - system calls: `strace -c` on the workers during a short wrk run,
    divided by the requests served (--strace);
  - instructions: one nginx with master_process off under
    `valgrind --tool=callgrind`, N requests on one connection after a
    warm-up, the collected instructions divided by N (--callgrind).

    per_request.py --module build/ngx_http_tokenbiryani_module.so
        [--modes json,stream] [--conns 64] [--seconds 4]
        [--strace] [--callgrind 500] [--keep DIR]

--keep DIR keeps each callgrind profile there (callgrind.<mode>.<target>),
for callgrind_annotate.

A measurement, not a test: it asserts nothing.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead  # noqa: E402
import tbbench  # noqa: E402


def target(which, stream):
    if which == "gateway":
        return "/v1/messages", "sk-client-sse" if stream else "sk-client-json"
    return "/v1/stream" if stream else "/v1/messages", "sk-test"


def wrk(port, path, key, body, conns, seconds, lua):
    with open(lua, "w") as f:
        f.write(overhead.WRK_LUA % {"body": body, "key": key, "extra": ""})
    out = subprocess.run(
        ["wrk", "-t%d" % (1 if conns == 1 else 2), "-c%d" % conns,
         "-d%ds" % seconds, "-s", lua,
         "http://127.0.0.1:%d%s" % (port, path)],
        capture_output=True, text=True).stdout
    for ln in out.splitlines():
        if ln.startswith("WRKJSON "):
            return json.loads(ln[8:])["requests"]
    raise RuntimeError("wrk said: " + out)


def cpu(pids):
    u = s = 0
    for p in pids:
        with open("/proc/%d/stat" % p) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        u += int(fields[11])
        s += int(fields[12])
    return u, s


def measure_cpu(srv, path, key, body, args, lua):
    wrk(srv.port, path, key, body, args.conns, 1, lua)      # warm-up
    workers = srv.pids()[1:]
    u0, s0 = cpu(workers)
    n = wrk(srv.port, path, key, body, args.conns, args.seconds, lua)
    u1, s1 = cpu(workers)
    tck = os.sysconf("SC_CLK_TCK")
    return ((u1 - u0) / tck / n * 1e6, (s1 - s0) / tck / n * 1e6)


def measure_strace(srv, path, key, body, args, lua, out):
    cmd = ["strace", "-c", "-f", "-o", out]
    for p in srv.pids()[1:]:
        cmd += ["-p", str(p)]
    st = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    def attached():
        # every worker traced before the first request strace must count
        for p in srv.pids()[1:]:
            with open("/proc/%d/status" % p) as f:
                if "TracerPid:\t%d\n" % st.pid not in f.read():
                    return False
        return True
    tbbench.wait_for(attached, 10, "strace to attach")
    n = wrk(srv.port, path, key, body, args.conns, 2, lua)
    st.send_signal(signal.SIGINT)
    st.wait()
    calls = {}
    with open(out) as f:
        for ln in f:
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$",
                         ln)
            if m and m.group(2) != "total":
                calls[m.group(2)] = int(m.group(1)) / n
    return calls


KEEP = None
MODE = None


def measure_callgrind(srv, path, key, body_file, n, workdir, which):
    srv.stop()
    out = os.path.join(workdir, "callgrind.%s" % which)
    p = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
         "nginx", "-p", srv.prefix + "/", "-c", "conf/nginx.conf",
         "-g", "daemon off; master_process off;"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tbbench.wait_listening(srv.port, 60, "nginx under callgrind")
    with open(body_file) as f:
        body = f.read().replace("CONVERSATION", "5")
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)

    def one():
        c.request("POST", path, body=body, headers={
            "x-api-key": key, "content-type": "application/json",
            "anthropic-version": "2023-06-01"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError("%s answered %d" % (which, r.status))

    for _ in range(50):
        one()
    subprocess.run(["callgrind_control", "-z", str(p.pid)],
                   capture_output=True)
    for _ in range(n):
        one()
    subprocess.run(["callgrind_control", "-d", str(p.pid)],
                   capture_output=True)
    c.close()
    p.send_signal(signal.SIGQUIT)
    p.wait()
    if KEEP:
        shutil.copy(out + ".1", os.path.join(KEEP, "callgrind.%s.%s"
                                             % (MODE, which)))
    total = 0
    with open(out + ".1") as f:
        for ln in f:
            if ln.startswith("summary:"):
                total = int(ln.split()[1])
    return total / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--modes", default="json,stream")
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--strace", action="store_true")
    ap.add_argument("--keep", metavar="DIR")
    ap.add_argument("--callgrind", type=int, default=0, metavar="N")
    ap.add_argument("--pricing", action="store_true",
                    help="the gateway prices requests (pricing: builtin)")
    ap.add_argument("--workdir", default=os.path.join(
        tbbench.TOP, "build", "bench", "per_request"))
    args = ap.parse_args()
    global KEEP, MODE
    if args.keep:
        KEEP = os.path.abspath(args.keep)
        os.makedirs(KEEP, exist_ok=True)
    args.module = os.path.abspath(args.module)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)

    print("| mode | target | worker user µs/req | worker sys µs/req |%s%s"
          % (" syscalls/req |" if args.strace else "",
             " instructions/req |" if args.callgrind else ""))
    print("|---|---|---|---|%s%s" % ("---|" if args.strace else "",
                                     "---|" if args.callgrind else ""))
    for mode in args.modes.split(","):
        MODE = mode
        stream = mode == "stream"
        body = os.path.join(workdir, "body-%s.json" % mode)
        with open(body, "w") as f:
            f.write(overhead.request_body(stream))
        up = overhead.start_upstream(workdir)
        try:
            for which in ("nginx", "gateway"):
                srv = (overhead.start_gateway(
                           workdir, args.module, up,
                           "pricing: builtin\n" if args.pricing else "")
                       if which == "gateway"
                       else overhead.start_proxy(workdir, up))
                path, key = target(which, stream)
                lua = os.path.join(workdir, "wrk-%s.lua" % which)
                try:
                    user, sys_ = measure_cpu(srv, path, key, body, args, lua)
                    row = "| %s | %s | %.1f | %.1f |" % (mode, which, user,
                                                         sys_)
                    if args.strace:
                        calls = measure_strace(
                            srv, path, key, body, args, lua,
                            os.path.join(workdir, "strace.%s" % which))
                        row += " %s |" % ", ".join(
                            "%s %.1f" % kv for kv in sorted(calls.items())
                            if kv[1] >= 0.05)
                    if args.callgrind:
                        row += " %.0f |" % measure_callgrind(
                            srv, path, key, body, args.callgrind, workdir,
                            which)
                finally:
                    srv.stop()
                print(row)
        finally:
            up.stop()
    print("\nreproduce: python3 t/bench/per_request.py --module %s%s%s%s"
          % (os.path.relpath(args.module, tbbench.TOP),
             " --strace" if args.strace else "",
             " --callgrind %d" % args.callgrind if args.callgrind else "",
             " --pricing" if args.pricing else ""))


if __name__ == "__main__":
    main()
