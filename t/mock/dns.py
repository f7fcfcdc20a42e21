#!/usr/bin/python3
"""
A DNS responder the tests control: UDP, A and AAAA questions, answers read
from a JSON zone file at every question, so a test changes what a name
resolves to by rewriting the file.

    dns.py --listen 127.0.0.1:PORT --zone zone.json --log queries.log
           [--ready-file F] [--pidfile F]

zone.json:

    {"names": {"upstream.test": {"a": ["127.0.0.1"], "aaaa": [], "ttl": 1}},
     "servfail": false,   # every answer SERVFAIL
     "drop": false}       # no answer at all (a resolver that is down)

A name not in the zone is NXDOMAIN. Each question is one JSON line in the
log: {"ts", "name", "type", "rcode", "answers"}.
"""

import argparse
import json
import os
import socket
import struct
import sys
import time

QTYPES = {1: "A", 28: "AAAA"}


def parse_question(data):
    """(id, flags, name, qtype, qclass, end of question) or None."""
    if len(data) < 12:
        return None
    qid, flags, qd = struct.unpack("!HHH", data[:6])
    if qd != 1:
        return None
    labels = []
    pos = 12
    while True:
        if pos >= len(data):
            return None
        n = data[pos]
        pos += 1
        if n == 0:
            break
        if n & 0xC0 or pos + n > len(data):
            return None
        labels.append(data[pos:pos + n].decode("ascii", "replace"))
        pos += n
    if pos + 4 > len(data):
        return None
    qtype, qclass = struct.unpack("!HH", data[pos:pos + 4])
    return qid, flags, ".".join(labels), qtype, qclass, pos + 4


def answer(data, zone):
    q = parse_question(data)
    if q is None:
        return None, None
    qid, flags, name, qtype, qclass, end = q
    rd = flags & 0x0100
    rcode = 0
    records = []
    entry = zone.get("names", {}).get(name.lower().rstrip("."))
    if zone.get("servfail"):
        rcode = 2
    elif entry is None:
        rcode = 3
    elif qclass == 1 and qtype in QTYPES:
        ttl = int(entry.get("ttl", 60))
        if qtype == 1:
            for ip in entry.get("a", []):
                records.append((1, ttl, socket.inet_pton(socket.AF_INET, ip)))
        else:
            for ip in entry.get("aaaa", []):
                records.append((28, ttl,
                                socket.inet_pton(socket.AF_INET6, ip)))
    out = struct.pack("!HHHHHH", qid, 0x8080 | rd | rcode, 1, len(records),
                      0, 0)
    out += data[12:end]
    for rtype, ttl, rdata in records:
        # the name: a pointer to the question's
        out += struct.pack("!HHHIH", 0xC00C, rtype, 1, ttl, len(rdata))
        out += rdata
    entry_log = {"name": name, "type": QTYPES.get(qtype, str(qtype)),
                 "rcode": rcode, "answers": len(records)}
    return out, entry_log


def load_zone(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"names": {}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--zone", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--ready-file")
    ap.add_argument("--pidfile")
    args = ap.parse_args()

    host, _, port = args.listen.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))

    if args.pidfile:
        with open(args.pidfile, "w") as f:
            f.write("%d\n" % os.getpid())
    if args.ready_file:
        with open(args.ready_file, "w") as f:
            f.write("%s\n" % args.listen)

    log = open(args.log, "a", buffering=1)

    while True:
        data, peer = sock.recvfrom(4096)
        zone = load_zone(args.zone)
        if zone.get("drop"):
            q = parse_question(data)
            log.write(json.dumps({"ts": time.time(),
                                  "name": q[2] if q else None,
                                  "dropped": True}) + "\n")
            continue
        out, entry = answer(data, zone)
        if out is None:
            continue
        entry["ts"] = time.time()
        log.write(json.dumps(entry) + "\n")
        sock.sendto(out, peer)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
