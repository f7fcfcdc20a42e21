#!/usr/bin/python3
"""Self-test of t/mock/mock.py: starts the mock on free ports (two plain
listeners and one TLS listener with a throw-away openssl certificate) and
exercises every feature over plain sockets.  Exit 0 when everything passed;
otherwise prints each failed check and exits 1.

    /usr/bin/python3 t/mock/selftest.py [-v]
"""

import datetime
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
MOCK = os.path.join(HERE, "mock.py")
VERBOSE = "-v" in sys.argv
DEADLINE = 30.0

FAILURES = []
CHECKS = [0]
SECTION = ["startup"]

MODEL = "claude-sonnet-4-6"
LOG_FIELDS = ("seq", "ts", "listen", "tls", "sni", "conn", "conn_req",
              "method", "path", "credential", "auth_header_count", "headers",
              "body_len", "body_sha256", "model", "stream", "step", "status",
              "resp_len", "resp_sha256", "usage", "refused", "script_id")
RL_HEADERS = ["anthropic-ratelimit-%s-%s" % (d, k)
              for d in ("requests", "input-tokens", "output-tokens")
              for k in ("limit", "remaining", "reset")]
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append("[%s] %s" % (SECTION[0], what))
        if VERBOSE:
            print("FAIL [%s] %s" % (SECTION[0], what))
    return cond


def section(name):
    SECTION[0] = name
    if VERBOSE:
        print("-- " + name)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# --------------------------------------------------------------------------
# a raw HTTP/1.1 client that shows chunks, timing and closes

class Closed(Exception):
    pass


class Resp:
    pass


class Client:
    def __init__(self, port, tls=False, sni=None, timeout=10):
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            s = ctx.wrap_socket(s, server_hostname=sni)
        self.s = s
        self.f = s.makefile("rb")

    def close(self):
        try:
            self.f.close()
            self.s.close()
        except Exception:
            pass

    def send_raw(self, data):
        self.s.sendall(data)

    def request(self, method, path, body=None, headers=None, version="1.1"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        h = {"host": "mock"}
        if body is not None:
            h["content-type"] = "application/json"
            h["content-length"] = str(len(body))
        h.update(headers or {})
        lines = ["%s %s HTTP/%s" % (method, path, version)]
        for k, v in h.items():
            if isinstance(v, list):
                for x in v:
                    lines.append("%s: %s" % (k, x))
            elif v is not None:
                lines.append("%s: %s" % (k, v))
        self.s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode()
                       + (body or b""))
        return self.response()

    def response(self):
        r = Resp()
        r.t0 = time.monotonic()
        line = self.f.readline()
        if not line:
            raise Closed("connection closed before a response")
        r.status_line = line
        parts = line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise Closed("not HTTP: %r" % line[:60])
        r.status = int(parts[1])
        r.headers = {}
        while True:
            h = self.f.readline()
            if not h:
                raise Closed("closed in headers")
            if h in (b"\r\n", b"\n"):
                break
            k, _, v = h.decode("latin-1").partition(":")
            k = k.strip().lower()
            v = v.strip()
            r.headers[k] = r.headers[k] + ", " + v if k in r.headers else v
        r.chunks = []
        r.times = []
        r.complete = True
        te = r.headers.get("transfer-encoding", "").lower()
        if 100 <= r.status < 200:
            r.body = b""
        elif "chunked" in te:
            body = b""
            while True:
                sl = self.f.readline()
                if not sl:
                    r.complete = False
                    break
                n = int(sl.split(b";")[0].strip(), 16)
                if n == 0:
                    self.f.readline()
                    break
                d = self.f.read(n)
                crlf = self.f.read(2)
                if len(d) < n or crlf != b"\r\n":
                    body += d
                    r.complete = False
                    break
                r.chunks.append(d)
                r.times.append(time.monotonic())
                body += d
            r.body = body
        elif "content-length" in r.headers:
            n = int(r.headers["content-length"])
            d = self.f.read(n)
            r.body = d
            r.complete = len(d) == n
        else:
            r.body = self.f.read()
        r.t1 = time.monotonic()
        return r

    def is_closed(self, wait=0.5):
        """True when the server closed (EOF or reset) within wait."""
        try:
            self.s.settimeout(wait)
            d = self.f.read1(1) if hasattr(self.f, "read1") else \
                self.s.recv(1)
            return d == b""
        except (socket.timeout, TimeoutError):
            return False
        except (ConnectionResetError, BrokenPipeError, OSError):
            return True
        finally:
            try:
                self.s.settimeout(10)
            except Exception:
                pass


def parse_sse(body):
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        if not block.strip():
            continue
        name = data = None
        for ln in block.split("\n"):
            if ln.startswith("event: "):
                name = ln[7:]
            elif ln.startswith("data: "):
                data = json.loads(ln[6:])
        events.append((name, data))
    return events


def msg_body(text="hi", stream=False, **kw):
    b = {"model": MODEL, "max_tokens": 1024,
         "messages": [{"role": "user", "content": text}]}
    if stream:
        b["stream"] = True
    b.update(kw)
    return b


# --------------------------------------------------------------------------

class Env:
    pass


def api(env, method, path, body=None, headers=None, port=None):
    c = http.client.HTTPConnection("127.0.0.1", port or env.p1, timeout=10)
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    c.request(method, path, body=data, headers=headers or {})
    r = c.getresponse()
    raw = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    try:
        obj = json.loads(raw) if raw else None
    except ValueError:
        obj = None
    return r.status, hdrs, obj, raw


def mock_log(env):
    return api(env, "GET", "/_mock/log")[2]


def last_log(env):
    lg = mock_log(env)
    return lg[-1] if lg else {}


def reset(env):
    api(env, "POST", "/_mock/reset")


def config(env, obj):
    st, _, o, _ = api(env, "POST", "/_mock/config", obj)
    check(st == 200, "config accepted (%s)" % st)


def post(env, body, cred="sk-main", headers=None, port=None):
    h = {"x-api-key": cred, "content-type": "application/json"}
    h.update(headers or {})
    return api(env, "POST", "/v1/messages", body, h, port)


def check_rl_headers(h, what):
    for k in RL_HEADERS:
        if not check(k in h, "%s: header %s present" % (what, k)):
            continue
        v = h[k]
        if k.endswith("reset"):
            ok = bool(RFC3339.match(v))
            if ok:
                t = datetime.datetime.strptime(v, "%Y-%m-%dT%H:%M:%SZ")
                t = t.replace(tzinfo=datetime.timezone.utc).timestamp()
                ok = time.time() - 5 < t < time.time() + 100000
            check(ok, "%s: %s is RFC 3339 UTC (%r)" % (what, k, v))
        else:
            check(v.isdigit(), "%s: %s integer (%r)" % (what, k, v))


def check_error_shape(obj, etype, what):
    ok = isinstance(obj, dict) and obj.get("type") == "error" and \
        isinstance(obj.get("error"), dict) and \
        obj["error"].get("type") == etype and \
        isinstance(obj["error"].get("message"), str) and \
        str(obj.get("request_id", "")).startswith("req_mock_")
    check(ok, "%s: error shape with type %s (got %r)" % (what, etype, obj))


# --------------------------------------------------------------------------
# the sections

def t_basic_json(env):
    section("json")
    st, h, o, raw = post(env, msg_body("hello there"))
    check(st == 200, "status 200 (%s)" % st)
    check(h.get("content-type", "").startswith("application/json"),
          "content-type json")
    check(re.match(r"^req_mock_\d+$", h.get("request-id", "")) is not None,
          "request-id header")
    check(h.get("anthropic-organization-id") == "org-mock",
          "default org header (%r)" % h.get("anthropic-organization-id"))
    check_rl_headers(h, "json")
    check(o and o.get("type") == "message" and o.get("role") == "assistant",
          "message shape")
    check(o and o["id"] == "msg_mock_%s" % h["request-id"][9:],
          "message id matches seq")
    check(o and o["content"][0]["type"] == "text" and
          o["content"][0]["text"].startswith("Hello from the mock ("),
          "text content")
    check(o and o["stop_reason"] == "end_turn" and
          o["stop_sequence"] is None, "stop reason")
    u = o["usage"] if o else {}
    check(set(u) == {"input_tokens", "output_tokens",
                     "cache_creation_input_tokens",
                     "cache_read_input_tokens"}, "usage keys")
    check(u.get("output_tokens") == 12, "default output tokens 12")
    check(h.get("content-length") == str(len(raw)), "content-length")
    e = last_log(env)
    check(e.get("status") == 200 and e.get("step") == "ok", "log status/step")
    check(e.get("resp_len") == len(raw) and
          e.get("resp_sha256") == hashlib.sha256(raw).hexdigest(),
          "log resp_len/resp_sha256 match the body")
    check(e.get("usage") == u, "log usage")
    check(e.get("model") == MODEL and e.get("stream") is False,
          "log model/stream")
    # org of a configured credential
    st, h, o, raw = post(env, msg_body(), cred="sk-a")
    check(h.get("anthropic-organization-id") == "org-a", "org-a header")
    check(h.get("anthropic-ratelimit-requests-limit") == "50",
          "configured requests limit in header")
    # output tokens header, max_tokens cap
    st, h, o, raw = post(env, msg_body(), headers={"x-mock-output-tokens":
                                                   "40"})
    check(o["usage"]["output_tokens"] == 40, "x-mock-output-tokens")
    st, h, o, raw = post(env, msg_body(max_tokens=5),
                         headers={"x-mock-output-tokens": "40"})
    check(o["usage"]["output_tokens"] == 5, "capped at max_tokens")
    check(o["stop_reason"] == "max_tokens", "stop_reason max_tokens on cap")


def t_sse(env):
    section("sse")
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body("stream me", True),
                  {"x-api-key": "sk-main"})
    check(r.status == 200, "status 200")
    check(r.headers.get("content-type", "").startswith("text/event-stream"),
          "content-type event-stream")
    check(r.headers.get("cache-control") == "no-cache", "cache-control")
    check(r.headers.get("transfer-encoding") == "chunked", "chunked")
    check(r.complete, "complete chunked body")
    check_rl_headers(r.headers, "sse")
    ev = parse_sse(r.body)
    names = [n for n, _ in ev]
    check(names[:3] == ["message_start", "content_block_start", "ping"],
          "event order start (%s)" % names[:3])
    check(names[-3:] == ["content_block_stop", "message_delta",
                         "message_stop"], "event order end")
    nd = names.count("content_block_delta")
    check(nd >= 3, "at least 3 deltas (%d)" % nd)
    for n, d in ev:
        check(d is not None and d.get("type") == n,
              "event %s data type" % n)
    ms = ev[0][1]["message"]
    check(ms["usage"]["output_tokens"] == 1 and ms["content"] == [] and
          ms["stop_reason"] is None, "message_start shell")
    text = "".join(d["delta"]["text"] for n, d in ev
                   if n == "content_block_delta")
    check(text.startswith("Hello from the mock (") and text.endswith(")"),
          "delta text")
    md = [d for n, d in ev if n == "message_delta"][0]
    check(md["delta"] == {"stop_reason": "end_turn", "stop_sequence": None},
          "message_delta delta")
    check(md["usage"]["output_tokens"] == 12 and
          "input_tokens" in md["usage"] and
          "cache_read_input_tokens" in md["usage"] and
          "cache_creation_input_tokens" in md["usage"],
          "message_delta usage")
    # every event its own chunk, except the first delta split 9 + rest
    check(len(r.chunks) == len(ev) + 1, "one chunk per event + split (%d/%d)"
          % (len(r.chunks), len(ev)))
    idx = names.index("content_block_delta")
    check(len(r.chunks[idx]) == 9 and
          r.chunks[idx].startswith(b"event: co"),
          "first delta split: 9-byte chunk (%r)" % r.chunks[idx][:20])
    check(r.chunks[idx + 1].endswith(b"\n\n") and
          b"content_block_delta" in r.chunks[idx] + r.chunks[idx + 1],
          "first delta split: rest in next chunk")
    e = last_log(env)
    check(e.get("stream") is True and e.get("status") == 200, "log stream")
    check(e.get("resp_len") == len(r.body) and
          e.get("resp_sha256") == hashlib.sha256(r.body).hexdigest(),
          "log resp hash == de-chunked SSE text")
    # same usage as JSON would give
    check(e.get("usage", {}).get("output_tokens") == 12, "log usage")
    # keep-alive after a stream
    r2 = c.request("POST", "/v1/messages", msg_body("again", True),
                   {"x-api-key": "sk-main"})
    check(r2.status == 200 and r2.complete, "second stream on same conn")
    # event delay header
    r3 = c.request("POST", "/v1/messages", msg_body("slowly", True),
                   {"x-api-key": "sk-main", "x-mock-event-delay-ms": "20"})
    check(r3.t1 - r3.t0 >= 0.2, "x-mock-event-delay-ms slows the stream "
          "(%.3f)" % (r3.t1 - r3.t0))
    c.close()


def t_keepalive(env):
    section("keepalive")
    reset(env)
    c = Client(env.p1)
    for i in range(3):
        r = c.request("POST", "/v1/messages?beta=true",
                      msg_body("ka %d" % i), {"x-api-key": "sk-main"})
        check(r.status == 200, "request %d ok" % i)
    c.close()
    lg = mock_log(env)
    check([e["conn_req"] for e in lg] == [1, 2, 3],
          "conn_req 1,2,3 (%s)" % [e.get("conn_req") for e in lg])
    check(len(set(e["conn"] for e in lg)) == 1, "same conn port")
    check(lg and lg[0]["path"] == "/v1/messages?beta=true",
          "path keeps the query string")
    check([e["seq"] for e in lg] == [1, 2, 3], "seq restarts at 1 after reset")
    check(lg and lg[0]["listen"] == "127.0.0.1:%d" % env.p1, "listen field")
    # Connection: close is honoured
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body(),
                  {"x-api-key": "sk-main", "connection": "close"})
    check(r.status == 200 and r.headers.get("connection") == "close",
          "connection: close echoed")
    check(c.is_closed(), "closed after Connection: close")
    c.close()
    # HTTP/1.0
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body(), {"x-api-key":
                                                       "sk-main"}, "1.0")
    check(r.status == 200 and c.is_closed(), "HTTP/1.0 served then closed")
    c.close()
    # second listener
    st, h, o, _ = post(env, msg_body(), port=env.p2)
    check(st == 200, "second plain listener")
    check(last_log(env).get("listen") == "127.0.0.1:%d" % env.p2,
          "listen field of second listener")


def error_step(env, step, status, etype, stream=False, extra=None):
    c = Client(env.p1)
    h = {"x-api-key": "sk-main", "x-mock-script": step}
    r = c.request("POST", "/v1/messages", msg_body("err", stream), h)
    check(r.status == status, "%s: status %d (got %d)" % (step, status,
                                                          r.status))
    obj = None
    if etype:
        try:
            obj = json.loads(r.body)
        except ValueError:
            pass
        check_error_shape(obj, etype, step)
        check(r.headers.get("content-type", "").startswith(
            "application/json"), "%s: json content-type" % step)
    check("content-length" in r.headers, "%s: content-length" % step)
    check_rl_headers(r.headers, step)
    check("request-id" in r.headers, "%s: request-id" % step)
    if extra:
        extra(r, obj)
    # keep-alive still usable
    r2 = c.request("POST", "/v1/messages", msg_body("after"),
                   {"x-api-key": "sk-main"})
    check(r2.status == 200, "%s: connection reusable after error" % step)
    c.close()
    return r, obj


def t_error_steps(env):
    section("error steps")
    reset(env)

    def ra(secs):
        def f(r, o):
            check(r.headers.get("retry-after") == secs,
                  "retry-after %s (%r)" % (secs, r.headers.get("retry-after")))
            check(r.headers.get("anthropic-ratelimit-requests-remaining") ==
                  "0", "scripted 429 shows requests remaining 0")
        return f

    error_step(env, "429", 429, "rate_limit_error", extra=ra("5"))
    error_step(env, "429:7", 429, "rate_limit_error", extra=ra("7"))

    def spend(r, o):
        check("retry-after" not in r.headers, "429-spend: no retry-after")
        check(o and o["error"].get("details") ==
              {"error_code": "enforced_spend_limit_reached"},
              "429-spend details")
        check(o and "spend limit" in o["error"]["message"],
              "429-spend message")
    error_step(env, "429-spend", 429, "rate_limit_error", extra=spend)

    def msg(text):
        def f(r, o):
            check(o and o["error"]["message"] == text,
                  "message %r (got %r)" % (text, o and o["error"]["message"]))
        return f
    error_step(env, "529", 529, "overloaded_error", extra=msg("Overloaded"))
    error_step(env, "500", 500, "api_error")
    error_step(env, "502", 502, "api_error")
    error_step(env, "503", 503, "api_error")
    error_step(env, "504", 504, "timeout_error")
    error_step(env, "400", 400, "invalid_request_error")
    error_step(env, "401", 401, "authentication_error",
               extra=msg("invalid x-api-key"))
    error_step(env, "402", 402, "billing_error")
    error_step(env, "403", 403, "permission_error",
               extra=msg("your API key does not have permission to use the "
                         "specified resource"))
    error_step(env, "403-model", 403, "permission_error",
               extra=msg("model %s is not available for this key" % MODEL))
    error_step(env, "404", 404, "not_found_error")
    error_step(env, "408", 408, "timeout_error")
    error_step(env, "418", 418, "api_error")

    def plain413(r, o):
        check(r.body == b"Request Entity Too Large", "413 plain-text body")
        check(r.headers.get("content-type", "").startswith("text/plain"),
              "413 text/plain")
    error_step(env, "413", 413, None, extra=plain413)
    error_step(env, "err:403:authentication_error:key revoked", 403,
               "authentication_error", extra=msg("key revoked"))
    error_step(env, "err:400:quantum_flux_error", 400, "quantum_flux_error")
    error_step(env, "err:503", 503, "api_error")
    error_step(env, "err:99:x", 400, "invalid_request_error")
    error_step(env, "no-such-step", 400, "invalid_request_error")
    # preerr / midfail-error on a non-streaming request
    error_step(env, "preerr", 529, "overloaded_error")
    error_step(env, "midfail-error", 500, "api_error")
    lg = mock_log(env)
    steps = [e["step"] for e in lg if e["status"] != 200]
    check("429:7" in steps and "403-model" in steps and "413" in steps,
          "log step names (%s)" % steps)
    e429 = [e for e in lg if e["step"] == "429"][0]
    check(e429["refused"] is False, "scripted 429 is not 'refused'")
    check(all(e["usage"] is None for e in lg if e["status"] != 200),
          "no usage on errors")


def t_stream_steps(env):
    section("stream steps")
    H = {"x-api-key": "sk-main"}

    # preerr
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body("p", True),
                  dict(H, **{"x-mock-script": "preerr"}))
    ev = parse_sse(r.body)
    check(r.status == 200 and r.complete, "preerr: 200 and terminated")
    check([n for n, _ in ev] == ["message_start", "error"],
          "preerr: message_start then error (%s)" % [n for n, _ in ev])
    check(ev[-1][1]["error"]["type"] == "overloaded_error",
          "preerr: overloaded_error")
    r2 = c.request("POST", "/v1/messages", msg_body(), H)
    check(r2.status == 200, "preerr: connection reusable")
    c.close()

    # midfail (stream)
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body("m", True),
                  dict(H, **{"x-mock-script": "midfail"}))
    ev = parse_sse(r.body)
    check(r.status == 200 and not r.complete,
          "midfail: 200 and no terminating chunk")
    check([n for n, _ in ev] == ["message_start", "content_block_start",
                                 "ping", "content_block_delta"],
          "midfail: events up to the first delta (%s)" % [n for n, _ in ev])
    check(c.is_closed(), "midfail: connection closed")
    c.close()
    e = last_log(env)
    check(e["step"] == "midfail" and e["resp_len"] == len(r.body) and
          e["resp_sha256"] == hashlib.sha256(r.body).hexdigest(),
          "midfail: log resp = what was sent")

    # midfail (non-stream)
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body("m"),
                  dict(H, **{"x-mock-script": "midfail"}))
    check(r.status == 200 and not r.complete and
          0 < len(r.body) < int(r.headers["content-length"]),
          "midfail json: short body (%d of %s)"
          % (len(r.body), r.headers.get("content-length")))
    check(c.is_closed(), "midfail json: closed")
    c.close()

    # midfail-error
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body("me", True),
                  dict(H, **{"x-mock-script": "midfail-error"}))
    ev = parse_sse(r.body)
    check(r.complete and [n for n, _ in ev][-2:] ==
          ["content_block_delta", "error"],
          "midfail-error: delta then error, terminated")
    check(ev[-1][1]["error"]["type"] == "api_error", "midfail-error type")
    r2 = c.request("POST", "/v1/messages", msg_body(), H)
    check(r2.status == 200, "midfail-error: connection reusable")
    c.close()

    # reset
    c = Client(env.p1)
    t0 = time.monotonic()
    try:
        c.request("POST", "/v1/messages", msg_body(),
                  dict(H, **{"x-mock-script": "reset"}))
        check(False, "reset: got a response")
    except (Closed, ConnectionResetError, OSError):
        check(time.monotonic() - t0 < 2, "reset: closed at once")
    c.close()
    check(last_log(env).get("step") == "reset" and
          last_log(env).get("status") is None, "reset logged, status null")

    # garbage
    c = Client(env.p1)
    c.send_raw(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\n"
               b"x-mock-script: garbage\r\ncontent-length: 2\r\n\r\n{}")
    data = c.f.read()
    check(data == b"this is not http\r\n\r\n", "garbage bytes (%r)" % data)
    c.close()

    # overlong: a second response's bytes past the Content-Length
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body(),
                  dict(H, **{"x-mock-script": "overlong"}))
    check(r.status == 200 and json.loads(r.body)["type"] == "message",
          "overlong: the real response first")
    r2 = c.response()
    check(r2.status == 200 and r2.body == b'{"smuggled":"answer"}',
          "overlong: then the smuggled one (%r)" % r2.body)
    c.close()

    # chunked JSON, whole and cut, and a 200 that is not JSON
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body(),
                  dict(H, **{"x-mock-script": "chunked"}))
    check(r.status == 200 and r.headers.get("transfer-encoding") == "chunked"
          and json.loads(r.body)["type"] == "message",
          "chunked: a whole JSON answer in chunks")
    c.close()
    c = Client(env.p1)
    c.send_raw(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\n"
               b"x-mock-script: chunked-midfail\r\ncontent-type: "
               b"application/json\r\ncontent-length: %d\r\n\r\n%s"
               % (len(json.dumps(msg_body())), json.dumps(msg_body()).encode()))
    data = c.f.read()
    check(data.startswith(b"HTTP/1.1 200") and not data.endswith(b"0\r\n\r\n"),
          "chunked-midfail: no last chunk")
    c.close()
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body(),
                  dict(H, **{"x-mock-script": "badjson"}))
    check(r.status == 200 and r.body.endswith(b"not json"), "badjson body")
    c.close()

    # accel: nginx control headers on a normal response
    for stream in (False, True):
        c = Client(env.p1)
        r = c.request("POST", "/v1/messages", msg_body(stream=stream),
                      dict(H, **{"x-mock-script": "accel"}))
        check(r.status == 200 and
              r.headers.get("x-accel-redirect") == "/healthz" and
              r.headers.get("x-accel-limit-rate") == "1",
              "accel: X-Accel headers (stream %s)" % stream)
        c.close()

    # hang
    c = Client(env.p1)
    c.send_raw(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\n"
               b"x-mock-script: hang\r\ncontent-length: 2\r\n\r\n{}")
    c.s.settimeout(0.6)
    try:
        d = c.s.recv(10)
        check(False, "hang: got data or close (%r)" % d)
    except (socket.timeout, TimeoutError):
        check(True, "hang: nothing sent")
    check(last_log(env).get("step") == "hang", "hang logged")
    c.close()

    # slow-headers
    t0 = time.monotonic()
    st, h, o, _ = post(env, msg_body(), headers={"x-mock-script":
                                                 "slow-headers:300"})
    dt = time.monotonic() - t0
    check(st == 200 and dt >= 0.3, "slow-headers: 200 after >=300ms (%.3f)"
          % dt)
    check(last_log(env).get("step") == "slow-headers:300",
          "slow-headers step logged")

    # slow-prelude
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body("sp", True),
                  dict(H, **{"x-mock-script": "slow-prelude:400"}))
    check(r.status == 200 and r.complete, "slow-prelude: complete")
    gap = r.times[1] - r.times[0] if len(r.times) > 1 else 0
    check(gap >= 0.35, "slow-prelude: pause after message_start (%.3f)" % gap)
    check(r.chunks and b"message_start" in r.chunks[0],
          "slow-prelude: message_start first")
    c.close()

    # ping-preerr: pings, then an error event, no delta
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body("pp", True),
                  dict(H, **{"x-mock-script": "ping-preerr:60:3"}))
    evs = [e for e, _ in parse_sse(r.body)]
    dt = r.t1 - r.t0
    check(r.status == 200 and r.complete, "ping-preerr: 200, complete")
    check(evs == ["message_start", "ping", "ping", "ping", "error"],
          "ping-preerr: events (%s)" % evs)
    check(dt >= 0.18, "ping-preerr: one ping every 60ms (%.3f)" % dt)
    c.close()
    st, _, _, _ = post(env, msg_body("pp"),
                       headers={"x-mock-script": "ping-preerr:60:3"})
    check(st == 529, "ping-preerr, not streamed: 529")

    # drip
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", msg_body("dr", True),
                  dict(H, **{"x-mock-script": "drip:40"}))
    nev = len(parse_sse(r.body))
    dt = r.t1 - r.t0
    check(r.complete and dt >= 0.04 * (nev - 1) * 0.9,
          "drip: %d events over %.3fs" % (nev, dt))
    c.close()


def t_scripts(env):
    section("scripts")
    seen = []
    for cred in ("sk-main", "sk-b", "sk-main", "sk-b"):
        st, h, o, _ = post(env, msg_body(), cred=cred,
                           headers={"x-mock-script": "429,529,ok",
                                    "x-mock-script-id": "seq-1"})
        seen.append(st)
    check(seen == [429, 529, 200, 200], "script by id: %s" % seen)
    lg = mock_log(env)[-4:]
    check([e["script_id"] for e in lg] == ["seq-1"] * 4, "script_id logged")
    check([e["step"] for e in lg] == ["429", "529", "ok", "ok"],
          "steps logged (%s)" % [e["step"] for e in lg])
    # an independent id has its own counter
    st, _, _, _ = post(env, msg_body(), headers={
        "x-mock-script": "503", "x-mock-script-id": "seq-2"})
    check(st == 503, "second script id starts at step 1")
    # no id: first step always
    seen = [post(env, msg_body(), headers={"x-mock-script": "502,ok"})[0]
            for _ in range(3)]
    check(seen == [502] * 3, "script without id: first step (%s)" % seen)
    # persistent behaviour
    config(env, {"credentials": {"sk-bad": {"behavior": "529"},
                                 "sk-flaky": {"behavior": "ok,500"}}})
    seen = [post(env, msg_body(), cred="sk-bad")[0] for _ in range(2)]
    check(seen == [529, 529], "behavior 529 (%s)" % seen)
    seen = [post(env, msg_body(), cred="sk-flaky")[0] for _ in range(4)]
    check(seen == [200, 500, 200, 500], "behavior cycles (%s)" % seen)
    st = post(env, msg_body(), cred="sk-bad",
              headers={"x-mock-script": "ok"})[0]
    check(st == 200, "script header overrides behavior")
    config(env, {"credentials": {"sk-bad": {"behavior": None}}})
    check(post(env, msg_body(), cred="sk-bad")[0] == 200,
          "behavior removed with null")


def t_window(env):
    section("rate window")
    config(env, {"credentials": {"sk-w": {"requests_limit": 3,
                                          "window_seconds": 60}}})
    seen = []
    for i in range(3):
        st, h, o, _ = post(env, msg_body("w%d" % i), cred="sk-w")
        seen.append((st, h.get("anthropic-ratelimit-requests-remaining")))
    check([s for s, _ in seen] == [200] * 3, "3 admitted (%s)" % seen)
    check([x for _, x in seen] == ["2", "1", "0"], "remaining 2,1,0 (%s)"
          % seen)
    st, h, o, _ = post(env, msg_body("w3"), cred="sk-w")
    check(st == 429, "4th refused (%s)" % st)
    check_error_shape(o, "rate_limit_error", "refused")
    ra = h.get("retry-after", "")
    check(ra.isdigit() and 1 <= int(ra) <= 21,
          "retry-after integer >=1 and about 20s (%r)" % ra)
    check_rl_headers(h, "refused")
    check(h.get("anthropic-ratelimit-requests-remaining") == "0",
          "refused: remaining 0")
    e = last_log(env)
    check(e.get("refused") is True and e.get("status") == 429 and
          e.get("usage") is None, "refused logged")
    stats = api(env, "GET", "/_mock/stats")[2]
    cs = stats["credentials"].get("sk-w", {})
    check(cs.get("refused_429") == 1 and cs.get("requests") == 4,
          "stats refused_429 1, requests 4 (%s)" % cs)
    check(stats.get("refused_429", 0) >= 1, "global refused counter")
    # raising the limit resets the bucket
    config(env, {"credentials": {"sk-w": {"requests_limit": 10}}})
    st, h, o, _ = post(env, msg_body("w4"), cred="sk-w")
    check(st == 200 and h.get("anthropic-ratelimit-requests-remaining") ==
          "9", "limit change resets the bucket (%s %s)" % (
              st, h.get("anthropic-ratelimit-requests-remaining")))
    # continuous refill: 600 per 1s window -> fast refill
    config(env, {"credentials": {"sk-r": {"requests_limit": 2,
                                          "window_seconds": 1}}})
    s = [post(env, msg_body(), cred="sk-r")[0] for _ in range(3)]
    check(s == [200, 200, 429], "tiny window exhausted (%s)" % s)
    time.sleep(0.6)
    check(post(env, msg_body(), cred="sk-r")[0] == 200, "refilled")
    # input tokens window
    config(env, {"credentials": {"sk-i": {"input_limit": 100}}})
    st, h, o, _ = post(env, msg_body("x" * 200), cred="sk-i")
    check(st == 200 and
          int(h["anthropic-ratelimit-input-tokens-remaining"]) < 100,
          "input debited")
    st, h, o, _ = post(env, msg_body("x" * 200), cred="sk-i")
    check(st == 429, "input window refuses (%s)" % st)
    # output tokens window
    config(env, {"credentials": {"sk-o": {"output_limit": 30}}})
    s = [post(env, msg_body(), cred="sk-o",
              headers={"x-mock-output-tokens": "20"})[0] for _ in range(2)]
    check(s == [200, 429], "output window refuses (%s)" % s)
    # a fixed window: no refill before its end, the same reset throughout
    config(env, {"credentials": {"sk-f": {"requests_limit": 3,
                                          "window_seconds": 1.5,
                                          "window_mode": "fixed"}}})
    seen = [post(env, msg_body("f%d" % i), cred="sk-f") for i in range(3)]
    resets = set(h.get("anthropic-ratelimit-requests-reset")
                 for _, h, _, _ in seen)
    check([x[0] for x in seen] == [200] * 3, "fixed: 3 admitted")
    check(len(resets) == 1, "fixed: one reset instant all through (%s)"
          % resets)
    time.sleep(0.4)
    st, h, o, _ = post(env, msg_body("f3"), cred="sk-f")
    check(st == 429 and h.get("anthropic-ratelimit-requests-remaining")
          == "0", "fixed: nothing back before the end (%s)" % st)
    end = parse_time(list(resets)[0])
    while time.time() < end + 0.05:
        time.sleep(0.05)
    st, h, o, _ = post(env, msg_body("f4"), cred="sk-f")
    check(st == 200 and h.get("anthropic-ratelimit-requests-remaining")
          == "2", "fixed: full again after its end (%s %s)" % (
              st, h.get("anthropic-ratelimit-requests-remaining")))
    check(parse_time(h.get("anthropic-ratelimit-requests-reset")) > end,
          "fixed: the next window's end")


def parse_time(v):
    t = datetime.datetime.strptime(v, "%Y-%m-%dT%H:%M:%SZ")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def long_system(n=6000, tag="A"):
    return ("You are a careful assistant %s. " % tag) * (n // 30)


def cached_body(sys_text, user="question", extra_msgs=None, bp_last=False):
    msgs = [{"role": "user", "content": user}]
    if extra_msgs:
        msgs = extra_msgs
    b = {"model": MODEL, "max_tokens": 100,
         "system": [{"type": "text", "text": sys_text,
                     "cache_control": {"type": "ephemeral"}}],
         "messages": msgs}
    return b


def t_subscription(env):
    section("a subscription's token")
    reset(env)
    config(env, {"credentials": {"sk-ant-oat-1": {"subscription": {
        "five_hour_requests": 2, "five_hour_seconds": 3,
        "seven_day_requests": 10}}}})
    body = msg_body("sub")
    oauth = {"authorization": "Bearer sk-ant-oat-1",
             "anthropic-beta": "claude-code-20250219,oauth-2025-04-20",
             "content-type": "application/json"}
    st, h, o, _ = api(env, "POST", "/v1/messages", body,
                      {"authorization": "Bearer sk-ant-oat-1",
                       "content-type": "application/json"})
    check(st == 401 and o["error"]["message"] ==
          "OAuth authentication is currently not supported.",
          "no OAuth beta: 401 (%s)" % st)
    st, h, o, _ = post(env, body, cred="sk-ant-oat-1",
                       headers={"anthropic-beta": "oauth-2025-04-20"})
    check(st == 401, "an x-api-key with the token: 401 (%s)" % st)
    st, h, o, _ = api(env, "POST", "/v1/messages", body, oauth)
    check(st == 200, "bearer and beta: 200 (%s)" % st)
    check(h.get("anthropic-ratelimit-unified-status") == "allowed" and
          h.get("anthropic-ratelimit-unified-5h-utilization") == "0.50" and
          h.get("anthropic-ratelimit-unified-7d-utilization") == "0.10" and
          h.get("anthropic-ratelimit-unified-representative-claim") ==
          "five_hour", "the unified headers (%s)" % h)
    check(not any(k.startswith("anthropic-ratelimit-requests") for k in h),
          "none of the nine")
    st, h, o, _ = api(env, "POST", "/v1/messages", body, oauth)
    check(st == 200 and h.get("anthropic-ratelimit-unified-5h-status") ==
          "rejected", "the window used up (%s)" % h)
    st, h, o, _ = api(env, "POST", "/v1/messages", body, oauth)
    check(st == 429 and h.get("anthropic-ratelimit-unified-status") ==
          "rejected" and int(h.get("retry-after", "0")) >= 1 and
          h.get("x-should-retry") == "true",
          "past it: 429, rejected, retry-after (%s %s)" % (st, h))
    time.sleep(3.1)
    st, h, o, _ = api(env, "POST", "/v1/messages", body, oauth)
    check(st == 200 and h.get("anthropic-ratelimit-unified-5h-utilization")
          == "0.50", "reset: allowed again (%s %s)" % (st, h))
    h2 = dict(oauth, **{"x-mock-script": "429-request"})
    st, h, o, _ = api(env, "POST", "/v1/messages", body, h2)
    check(st == 429 and h.get("x-should-retry") == "true" and
          not any(k.startswith("anthropic-ratelimit") for k in h) and
          "retry-after" not in h,
          "a request-scoped 429: no rate-limit header at all (%s)" % h)
    reset(env)
    config(env, {})


def t_cache(env):
    section("prompt cache")
    body = cached_body(long_system())
    st, h, o1, _ = post(env, body, cred="sk-c1")
    u1 = o1["usage"]
    check(u1["cache_creation_input_tokens"] >= 1024 and
          u1["cache_read_input_tokens"] == 0, "first: creation (%s)" % u1)
    st, h, o2, _ = post(env, body, cred="sk-c1")
    u2 = o2["usage"]
    check(u2["cache_read_input_tokens"] ==
          u1["cache_creation_input_tokens"] and
          u2["cache_creation_input_tokens"] == 0,
          "second on same credential: read (%s)" % u2)
    check(u2["input_tokens"] == u1["input_tokens"], "uncached tail same")
    st, h, o3, _ = post(env, body, cred="sk-c2")
    u3 = o3["usage"]
    check(u3["cache_read_input_tokens"] == 0 and
          u3["cache_creation_input_tokens"] > 0,
          "other credential: no read (%s)" % u3)
    # the rate window only counts input + creation
    total = u1["input_tokens"] + u1["cache_creation_input_tokens"]
    ct = api(env, "POST", "/v1/messages/count_tokens", body,
             {"x-api-key": "sk-c1"})[2]
    check(ct == {"input_tokens": total}, "count_tokens == total (%s vs %d)"
          % (ct, total))
    # a longer conversation with a second breakpoint reads the first
    msgs = [{"role": "user", "content": [
        {"type": "text", "text": "first question " * 400,
         "cache_control": {"type": "ephemeral"}}]}]
    b2 = cached_body(long_system(), extra_msgs=msgs)
    st, h, o4, _ = post(env, b2, cred="sk-c1")
    u4 = o4["usage"]
    check(u4["cache_read_input_tokens"] ==
          u1["cache_creation_input_tokens"] and
          u4["cache_creation_input_tokens"] > 0,
          "second breakpoint: read prefix + create rest (%s)" % u4)
    st, h, o5, _ = post(env, b2, cred="sk-c1")
    u5 = o5["usage"]
    check(u5["cache_read_input_tokens"] ==
          u4["cache_read_input_tokens"] + u4["cache_creation_input_tokens"],
          "longest prefix read (%s)" % u5)
    # short prefix: not cached
    short = cached_body("short system prompt")
    u6 = post(env, short, cred="sk-c1")[2]["usage"]
    u7 = post(env, short, cred="sk-c1")[2]["usage"]
    check(u6["cache_creation_input_tokens"] == 0 and
          u7["cache_read_input_tokens"] == 0, "below min_cache_tokens")
    # no breakpoint: all input
    nb = cached_body(long_system())
    del nb["system"][0]["cache_control"]
    u8 = post(env, nb, cred="sk-c1")[2]["usage"]
    check(u8["cache_read_input_tokens"] == 0 and
          u8["cache_creation_input_tokens"] == 0 and
          u8["input_tokens"] == total, "no breakpoint: all input")
    # tools breakpoint + string system
    tb = {"model": MODEL, "max_tokens": 10,
          "tools": [{"name": "t%d" % i, "description": "d" * 500,
                     "input_schema": {"type": "object"}} for i in range(10)],
          "messages": [{"role": "user", "content": "q"}]}
    tb["tools"][-1]["cache_control"] = {"type": "ephemeral"}
    post(env, tb, cred="sk-c3")
    u9 = post(env, tb, cred="sk-c3")[2]["usage"]
    check(u9["cache_read_input_tokens"] > 1024, "tool breakpoint cached")
    # the API's automatic caching (a top-level cache_control): the last
    # block is the breakpoint, and the next turn of the conversation reads
    # what the one before wrote, a boundary back
    conv = [{"role": "user", "content": "turn one " * 600}]
    ab = {"model": MODEL, "max_tokens": 10, "system": long_system(tag="Z"),
          "cache_control": {"type": "ephemeral"}, "messages": conv}
    ua = post(env, ab, cred="sk-c4")[2]["usage"]
    check(ua["cache_creation_input_tokens"] > 1024 and
          ua["cache_read_input_tokens"] == 0,
          "automatic caching: the whole prompt written (%s)" % ua)
    ab2 = dict(ab, messages=conv + [
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "turn two"}])
    ub = post(env, ab2, cred="sk-c4")[2]["usage"]
    check(ub["cache_read_input_tokens"] == ua["cache_creation_input_tokens"]
          and ub["cache_creation_input_tokens"] > 0,
          "the next turn reads it by looking back (%s)" % ub)
    bad = dict(ab, cache_control={"type": "forever"})
    st = api(env, "POST", "/v1/messages", bad, {"x-api-key": "sk-c4"})[0]
    check(st == 400, "a top-level cache_control of another type: 400")
    # streaming shows the same counters
    sb = dict(body, stream=True)
    c = Client(env.p1)
    r = c.request("POST", "/v1/messages", sb, {"x-api-key": "sk-c1"})
    ev = parse_sse(r.body)
    su = ev[0][1]["message"]["usage"]
    check(su["cache_read_input_tokens"] == u1["cache_creation_input_tokens"],
          "stream message_start cache read")
    c.close()
    stats = api(env, "GET", "/_mock/stats")[2]["credentials"]
    check(stats["sk-c1"]["cache_entries"] == 2 and
          stats["sk-c2"]["cache_entries"] == 1,
          "stats cache_entries (%s, %s)" % (stats["sk-c1"]["cache_entries"],
                                            stats["sk-c2"]["cache_entries"]))


def t_other_endpoints(env):
    section("count_tokens/models/404/auth")
    H = {"x-api-key": "sk-main"}
    st, h, o, _ = api(env, "POST", "/v1/messages/count_tokens",
                      msg_body("count me"), H)
    check(st == 200 and isinstance(o.get("input_tokens"), int) and
          o["input_tokens"] > 0, "count_tokens (%s %s)" % (st, o))
    check("anthropic-ratelimit-requests-limit" not in h,
          "count_tokens: no ratelimit headers")
    check("request-id" in h and "anthropic-organization-id" in h,
          "count_tokens: request-id, org")
    st2, _, o2, _ = post(env, msg_body("count me"))
    check(o2["usage"]["input_tokens"] == o["input_tokens"],
          "count_tokens == messages input_tokens")
    config(env, {"credentials": {"sk-ct": {"count_tokens_limit": 2}}})
    s = [api(env, "POST", "/v1/messages/count_tokens", msg_body(),
             {"x-api-key": "sk-ct"})[0] for _ in range(3)]
    check(s == [200, 200, 429], "count_tokens window (%s)" % s)
    check(post(env, msg_body(), cred="sk-ct")[0] == 200,
          "messages window separate from count_tokens")

    st, h, o, _ = api(env, "GET", "/v1/models", None, H)
    check(st == 200 and len(o["data"]) == 3 and o["has_more"] is False and
          o["first_id"] == o["data"][0]["id"] and
          o["last_id"] == o["data"][-1]["id"], "models list")
    check(o["data"][0] == {"type": "model", "id": "claude-sonnet-4-6",
                           "display_name": "Claude Sonnet 4.6",
                           "created_at": "2026-01-01T00:00:00Z"},
          "models entry")
    st, h, o, _ = api(env, "GET", "/v1/models/claude-sonnet-4-6", None, H)
    check(st == 200 and o["id"] == "claude-sonnet-4-6", "model by id")
    st, h, o, _ = api(env, "GET", "/v1/models/nope", None, H)
    check(st == 404, "unknown model 404")
    check_error_shape(o, "not_found_error", "unknown model")

    st, h, o, _ = api(env, "POST", "/v1/complete", {"x": 1}, H)
    check(st == 404, "unknown /v1 path 404")
    check_error_shape(o, "not_found_error", "unknown /v1 path")
    check(last_log(env).get("path") == "/v1/complete", "unknown path logged")
    n = len(mock_log(env))
    st, h, o, _ = api(env, "GET", "/elsewhere", None, H)
    check(st == 404 and len(mock_log(env)) == n, "non-/v1 not logged")

    # auth
    st, h, o, _ = api(env, "POST", "/v1/messages", msg_body(), {})
    check(st == 401, "missing credential 401")
    check_error_shape(o, "authentication_error", "missing credential")
    check_rl_headers(h, "401")
    st, h, o, _ = api(env, "POST", "/v1/messages", msg_body(),
                      {"authorization": "Bearer tok-oauth"})
    e = last_log(env)
    check(st == 200 and e["credential"] == "tok-oauth" and
          e["auth_header_count"] == 1, "Bearer credential")
    c = Client(env.p1)
    c.request("POST", "/v1/messages", msg_body(),
              {"x-api-key": ["sk-one", "sk-two"],
               "authorization": "Bearer zzz"})
    c.close()
    e = last_log(env)
    check(e["credential"] == "sk-one" and e["auth_header_count"] == 3 and
          e["headers"]["x-api-key"] == "sk-one, sk-two",
          "auth_header_count counts every line (%s)" % e["auth_header_count"])
    config(env, {"strict_credentials": True})
    st, h, o, _ = post(env, msg_body(), cred="sk-unknown")
    check(st == 401, "strict: unknown credential 401")
    check_error_shape(o, "authentication_error", "strict")
    check(post(env, msg_body(), cred="sk-a")[0] == 200,
          "strict: known credential ok")
    config(env, {"strict_credentials": False})

    # body validation
    st, h, o, _ = api(env, "POST", "/v1/messages", b"{not json", H)
    check(st == 400, "invalid JSON 400")
    check_error_shape(o, "invalid_request_error", "invalid JSON")
    check_rl_headers(h, "400")
    st, h, o, _ = api(env, "POST", "/v1/messages", {"messages": []}, H)
    check(st == 400, "missing model 400")
    st, h, o, _ = api(env, "POST", "/v1/messages", b"[1,2]", H)
    check(st == 400, "non-object body 400")
    # what the API checks, with its messages
    good = {"model": MODEL, "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}]}
    for change, want in (
            ({"max_tokens": None}, "max_tokens: Field required"),
            ({"max_tokens": 0},
             "max_tokens: Input should be greater than or equal to 1"),
            ({"max_tokens": "16"}, "max_tokens: Input should be a valid integer"),
            ({"max_tokens": True}, "max_tokens: Input should be a valid integer"),
            ({"messages": None}, "messages: Field required"),
            ({"messages": "odd"}, "messages: Input should be a valid list"),
            ({"messages": []}, "messages: at least one message is required"),
            ({"messages": [{"role": "tool", "content": "x"}]},
             "messages.0.role: Input should be 'user', 'assistant' or "
             "'system'"),
            ({"messages": [{"content": "x"}]}, "messages.0.role: Field required"),
            ({"messages": [{"role": "user"}]}, "messages.0.content: Field required"),
            ({"messages": [{"role": "user", "content": [{"text": "x"}]}]},
             "messages.0.content.0.type: Field required"),
            ({"system": {"x": 1}}, "system: Input should be a valid list"),
            ({"stream": "yes"}, "stream: Input should be a valid boolean"),
            ({"temperature": 2},
             "temperature: Input should be less than or equal to 1"),
            ({"tools": 7}, "tools: Input should be a valid list"),
            ({"tools": [{"description": "x"}]}, "tools.0.name: Field required")):
        b = dict(good)
        for k, v in change.items():
            if v is None:
                del b[k]
            else:
                b[k] = v
        st, h, o, _ = api(env, "POST", "/v1/messages", b, H)
        check(st == 400 and o["error"]["message"] == want,
              "%s: 400 %r (got %s %r)" % (change, want, st,
                                          o and o.get("error")))
        check_error_shape(o, "invalid_request_error", str(change))
    st, h, o, _ = api(env, "POST", "/v1/messages", good, H)
    check(st == 200, "a valid request: 200")
    b = dict(good, system=[{"type": "text", "text": "s"}],
             messages=[{"role": "user", "content": [{"type": "text",
                                                     "text": "hi"}]},
                       {"role": "assistant", "content": "ok"},
                       {"role": "user", "content": "again"}])
    st, h, o, _ = api(env, "POST", "/v1/messages", b, H)
    check(st == 200, "blocks, system blocks, several turns: 200")
    # what Claude Code sends: a system message after the first user turn
    b = dict(good, messages=[{"role": "user", "content": "hi"},
                             {"role": "system", "content": "agents: ..."}])
    st, h, o, _ = api(env, "POST", "/v1/messages", b, H)
    check(st == 200, "a system message among the turns: 200 (got %s)" % st)
    st, h, o, _ = api(env, "POST", "/v1/messages/count_tokens",
                      {"model": MODEL, "messages": good["messages"]}, H)
    check(st == 200, "count_tokens needs no max_tokens")
    st, h, o, _ = api(env, "POST", "/v1/messages/count_tokens",
                      {"model": MODEL}, H)
    check(st == 400 and o["error"]["message"] == "messages: Field required",
          "count_tokens needs messages")


def t_http_edges(env):
    section("http edges")
    # chunked request body
    body = json.dumps(msg_body("chunked body")).encode()
    c = Client(env.p1)
    parts = [body[:10], body[10:30], body[30:]]
    raw = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + \
        b"0\r\n\r\n"
    c.send_raw(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: sk-main"
               b"\r\ntransfer-encoding: chunked\r\n\r\n" + raw)
    r = c.response()
    check(r.status == 200, "chunked request body accepted")
    e = last_log(env)
    check(e["body_len"] == len(body) and
          e["body_sha256"] == hashlib.sha256(body).hexdigest(),
          "chunked body hash")
    # Expect: 100-continue
    c.send_raw(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: sk-main"
               b"\r\nexpect: 100-continue\r\ncontent-length: %d\r\n\r\n"
               % len(body))
    r = c.response()
    check(r.status == 100, "100 Continue")
    c.send_raw(body)
    r = c.response()
    check(r.status == 200, "body after 100 Continue")
    c.close()
    # garbage request -> 400 and close
    for junk in (b"HELLO\r\n\r\n", b"\x16\x03\x01\x00\xa5\x01\x00\x00",
                 b"GET / HTTP/9.9\r\n\r\n",
                 b"POST /v1/messages HTTP/1.1\r\ncontent-length: x\r\n\r\n",
                 b"GET /v1/models HTTP/1.1\r\nbad header\r\n\r\n",
                 b"POST /v1/messages HTTP/1.1\r\ntransfer-encoding: gzip"
                 b"\r\n\r\n",
                 b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n"):
        c = Client(env.p1)
        try:
            c.send_raw(junk + (b"\r\n\r\n" if junk.startswith(b"\x16")
                               else b""))
            r = c.response()
            check(r.status == 400, "junk %r -> 400 (%s)" % (junk[:20],
                                                           r.status))
            check(c.is_closed(1.5), "junk %r -> closed" % junk[:20])
        except (Closed, OSError) as e:
            check(False, "junk %r: %s" % (junk[:20], e))
        c.close()
    # a half request then close, an idle connection: others unaffected
    c = Client(env.p1)
    c.send_raw(b"POST /v1/messages HTTP/1.1\r\ncontent-length: 100\r\n\r\n{")
    c.close()
    idle = Client(env.p1)
    st = post(env, msg_body())[0]
    check(st == 200, "server fine after half request")
    idle.close()
    # oversized body
    config(env, {"max_body_bytes": 1000})
    c = Client(env.p1)
    c.send_raw(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: sk-main"
               b"\r\ncontent-length: 5000\r\n\r\n" + b"x" * 5000)
    r = c.response()
    check(r.status == 413 and r.body == b"Request Entity Too Large",
          "body over max_body_bytes -> 413")
    c.close()
    config(env, {"max_body_bytes": 32 * 1024 * 1024})
    # control endpoint errors
    st, _, o, _ = api(env, "POST", "/_mock/config", b"{bad")
    check(st == 400, "bad control config 400")
    st, _, o, _ = api(env, "GET", "/_mock/nope")
    check(st == 404, "unknown control 404")


def t_tls(env):
    section("tls")
    c = Client(env.ptls, tls=True, sni="api.mock.test")
    r = c.request("POST", "/v1/messages", msg_body("tls", True),
                  {"x-api-key": "sk-main"})
    check(r.status == 200 and r.complete, "TLS stream")
    r = c.request("POST", "/v1/messages", msg_body("tls2"),
                  {"x-api-key": "sk-main"})
    check(r.status == 200, "TLS keep-alive")
    c.close()
    lg = mock_log(env)[-2:]
    check(all(e["tls"] is True and e["sni"] == "api.mock.test" for e in lg),
          "tls/sni logged (%s)" % [(e["tls"], e["sni"]) for e in lg])
    check([e["conn_req"] for e in lg] == [1, 2], "TLS conn_req")
    check(lg[0]["listen"] == "127.0.0.1:%d" % env.ptls, "TLS listen field")
    # midfail over TLS
    c = Client(env.ptls, tls=True, sni="api.mock.test")
    r = c.request("POST", "/v1/messages", msg_body("tls", True),
                  {"x-api-key": "sk-main", "x-mock-script": "midfail"})
    check(not r.complete, "TLS midfail aborts")
    c.close()
    # no SNI
    c = Client(env.ptls, tls=True, sni=None)
    r = c.request("GET", "/v1/models", None, {"x-api-key": "sk-main"})
    check(r.status == 200 and last_log(env)["sni"] is None, "no SNI -> null")
    c.close()
    # a plain-text client on the TLS port does not hurt
    s = socket.create_connection(("127.0.0.1", env.ptls), timeout=5)
    s.sendall(b"GET /v1/models HTTP/1.1\r\n\r\n")
    try:
        s.recv(100)
    except OSError:
        pass
    s.close()
    c = Client(env.ptls, tls=True, sni="x")
    check(c.request("GET", "/_mock/stats").status == 200,
          "control endpoints on TLS listener")
    c.close()


def t_logfile(env):
    section("log file")
    mem = mock_log(env)
    with open(env.log, encoding="utf-8") as f:
        lines = [ln for ln in f.read().split("\n") if ln]
    try:
        entries = [json.loads(ln) for ln in lines]
    except ValueError as e:
        check(False, "log file line not JSON: %s" % e)
        return
    check(len(entries) == len(mem), "file and memory agree (%d/%d)"
          % (len(entries), len(mem)))
    check(sorted(e["seq"] for e in entries) == [e["seq"] for e in mem],
          "same seqs")
    missing = set()
    for e in entries:
        missing |= set(LOG_FIELDS) - set(e)
    check(not missing, "every line has every field (missing %s)" % missing)
    bad = [e["seq"] for e in entries
           if not (isinstance(e["ts"], float) and isinstance(e["tls"], bool)
                   and isinstance(e["headers"], dict)
                   and isinstance(e["refused"], bool)
                   and isinstance(e["conn"], int))]
    check(not bad, "field types (%s)" % bad[:5])


def t_concurrency(env):
    section("200 concurrent streams")
    reset(env)
    N = 200
    results = [None] * N
    barrier = threading.Barrier(N)

    def one(i):
        try:
            c = Client(env.p1 if i % 2 else env.p2, timeout=20)
            barrier.wait(10)
            r = c.request("POST", "/v1/messages", msg_body("c%d" % i, True),
                          {"x-api-key": "sk-conc-%d" % (i % 7),
                           "x-mock-event-delay-ms": "10"})
            ev = parse_sse(r.body)
            results[i] = r.status == 200 and r.complete and \
                ev[-1][0] == "message_stop"
            c.close()
        except Exception as e:
            results[i] = "error: %s" % e

    ts = [threading.Thread(target=one, args=(i,)) for i in range(N)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join(25)
    bad = [(i, r) for i, r in enumerate(results) if r is not True]
    check(not bad, "all %d streams complete (%d bad: %s)" % (N, len(bad),
                                                           bad[:3]))
    lg = mock_log(env)
    check(len(lg) == N and sorted(e["seq"] for e in lg) ==
          list(range(1, N + 1)), "log has %d entries (%d)" % (N, len(lg)))
    st = api(env, "GET", "/_mock/stats")[2]
    check(st["total_requests"] == N, "stats total_requests")
    if VERBOSE:
        print("   200 streams in %.2fs" % (time.monotonic() - t0))


def t_reset(env):
    section("reset")
    post(env, msg_body(), cred="sk-x")
    api(env, "POST", "/_mock/reset")
    check(mock_log(env) == [], "log cleared")
    with open(env.log) as f:
        check(f.read() == "", "log file truncated")
    st = api(env, "GET", "/_mock/stats")[2]
    check(st["total_requests"] == 0 and st["refused_429"] == 0 and
          "sk-x" not in st["credentials"], "stats cleared")
    check(st["credentials"].get("sk-a", {}).get("requests_remaining") == 50,
          "configured credential listed with full bucket")
    st, h, o, _ = post(env, msg_body(), headers={
        "x-mock-script": "529,ok", "x-mock-script-id": "seq-1"})
    check(st == 529, "script counters cleared")
    check(h.get("request-id") == "req_mock_1", "seq restarts")


def t_signal(env):
    section("sigterm")
    env.proc.send_signal(signal.SIGTERM)
    try:
        env.proc.wait(3)
        check(env.proc.returncode == 0, "exit 0 on SIGTERM (%s)"
              % env.proc.returncode)
    except subprocess.TimeoutExpired:
        check(False, "did not exit within 3s of SIGTERM")
        env.proc.kill()
    check(not os.path.exists(env.pidfile), "pidfile removed")


# --------------------------------------------------------------------------

def batch_api(env, method, path, body=None, cred="sk-main", qs=""):
    h = {"x-api-key": cred, "content-type": "application/json"}
    return api(env, method, "/v1/messages/batches" + path + qs, body, h)


def until_ended(env, bid, cred="sk-main"):
    """the batch polled as a client does, until it ends (or 5 s)"""
    deadline = time.monotonic() + 5
    o = None
    while time.monotonic() < deadline:
        _, _, o, _ = batch_api(env, "GET", "/" + bid, cred=cred)
        if not isinstance(o, dict) or o.get("processing_status") == "ended":
            break
        time.sleep(0.02)
    return o


def multipart(name, data, ctype="application/pdf", field="file",
              boundary="tbBoundary7"):
    body = ("--%s\r\nContent-Disposition: form-data; name=\"%s\"; "
            "filename=\"%s\"\r\nContent-Type: %s\r\n\r\n"
            % (boundary, field, name, ctype)).encode() + data + \
        ("\r\n--%s--\r\n" % boundary).encode()
    return body, "multipart/form-data; boundary=%s" % boundary


def files_api(env, method, path, body=None, cred="sk-main", ctype=None,
              beta=True, qs=""):
    h = {"x-api-key": cred}
    if beta:
        h["anthropic-beta"] = "files-api-2025-04-14"
    if ctype:
        h["content-type"] = ctype
    return api(env, method, "/v1/files" + path + qs, body, h)


def t_files(env):
    section("files")
    reset(env)
    config(env, {"credentials": {"sk-f1": {"org": "org-f1"},
                                 "sk-f2": {"org": "org-f2"},
                                 "sk-dl": {"org": "org-f3",
                                           "files_downloadable": True,
                                           "files_max_bytes": 10}}})
    data = b"%PDF-1.4 mock document"
    body, ct = multipart("doc.pdf", data)
    st, _, o, _ = files_api(env, "POST", "", body, "sk-f1", ct)
    check(st == 200 and o.get("type") == "file" and
          o.get("filename") == "doc.pdf" and
          o.get("mime_type") == "application/pdf" and
          o.get("size_bytes") == len(data) and
          o.get("downloadable") is False and
          RFC3339.match(o.get("created_at", "")),
          "upload: the file object (%s %r)" % (st, o))
    fid = o.get("id", "")
    lg = last_log(env)
    check(lg.get("file_id") == fid and lg.get("file_sha256") ==
          hashlib.sha256(data).hexdigest(), "upload: logged with its hash")
    st, _, o, _ = files_api(env, "GET", "/" + fid, cred="sk-f1")
    check(st == 200 and o.get("id") == fid, "retrieve (%s)" % st)
    st, _, o, _ = files_api(env, "GET", "/%s/content" % fid, cred="sk-f1")
    check(st == 400, "content of an uploaded file: 400 (%s)" % st)
    for m, suffix in (("GET", ""), ("GET", "/content"), ("DELETE", "")):
        st, _, e, _ = files_api(env, m, "/" + fid + suffix, cred="sk-f2")
        check(st == 404, "another org: %s %s is 404 (%s)"
              % (m, suffix or "/", st))
        check_error_shape(e, "not_found_error", "another org's file")
    # a Messages request naming it: its own org only
    ref = msg_body()
    ref["messages"] = [{"role": "user", "content": [
        {"type": "document", "source": {"type": "file", "file_id": fid}},
        {"type": "text", "text": "summarise"}]}]
    st, _, o, _ = post(env, ref, cred="sk-f1")
    check(st == 200, "messages naming its own file: 200 (%s)" % st)
    st, _, e, _ = post(env, ref, cred="sk-f2")
    check(st == 404, "messages naming another org's file: 404 (%s)" % st)
    check_error_shape(e, "not_found_error", "another org's file_id")
    # the list, newest first
    body2, ct2 = multipart("b.txt", b"text", "text/plain")
    st, _, o2, _ = files_api(env, "POST", "", body2, "sk-f1", ct2)
    st, _, o, _ = files_api(env, "GET", "", cred="sk-f1", qs="?limit=1")
    check(st == 200 and [f["id"] for f in o["data"]] == [o2["id"]] and
          o["has_more"] is True, "list: newest first, by pages (%r)" % o)
    st, _, o, _ = files_api(env, "GET", "", cred="sk-f2")
    check(st == 200 and o["data"] == [], "list: another org sees none")
    # what an upload checks
    for b, c, what in ((body[:-10], ct, "cut short"),
                       (multipart("x", b"1", field="other")[0],
                        multipart("x", b"1", field="other")[1], "no file"),
                       (multipart("", b"1")[0], multipart("", b"1")[1],
                        "no filename"),
                       (b"{}", "application/json", "not multipart")):
        st, _, e, _ = files_api(env, "POST", "", b, "sk-f1", c)
        check(st == 400, "upload %s: 400 (%s)" % (what, st))
        check_error_shape(e, "invalid_request_error", "upload " + what)
    st, _, e, _ = files_api(env, "POST", "", body, "sk-f1", ct, beta=False)
    check(st == 400, "no beta header: 400 (%s)" % st)
    st, _, e, _ = files_api(env, "POST", "", body, "sk-dl", ct)
    check(st == 413, "over files_max_bytes: 413 (%s)" % st)
    small, cs = multipart("s.txt", b"0123", "text/plain")
    st, _, o, _ = files_api(env, "POST", "", small, "sk-dl", cs)
    st, h, _, raw = files_api(env, "GET", "/%s/content" % o["id"],
                              cred="sk-dl")
    check(st == 200 and raw == b"0123" and
          h.get("content-type") == "text/plain",
          "a downloadable file's content (%s %r)" % (st, raw))
    st, _, o, _ = files_api(env, "DELETE", "/" + fid, cred="sk-f1")
    check(st == 200 and o == {"id": fid, "type": "file_deleted"},
          "delete (%r)" % o)
    st, _, o, _ = files_api(env, "GET", "/" + fid, cred="sk-f1")
    check(st == 404, "deleted: 404 (%s)" % st)
    st, _, o, _ = post(env, ref, cred="sk-f1")
    check(st == 404, "messages naming a deleted file: 404 (%s)" % st)
    rep = api(env, "GET", "/_mock/files")[2]
    check(len(rep["files"]) == 3 and
          sorted(f["org"] for f in rep["files"]) ==
          ["org-f1", "org-f1", "org-f3"], "/_mock/files (%r)" % rep)
    reset(env)


def t_batches(env):
    section("message batches")
    reset(env)
    config(env, {"credentials": {"sk-b1": {"org": "org-b1",
                                           "batch_processing_ms": 100},
                                 "sk-b2": {"org": "org-b2"},
                                 "sk-slow": {"org": "org-b1",
                                             "batch_processing_ms": 60000,
                                             "batch_cancel_ms": 50},
                                 "sk-exp": {"org": "org-b3",
                                            "batch_processing_ms": 60000,
                                            "batch_expire_ms": 50},
                                 "sk-val": {"org": "org-b4",
                                            "batch_max_requests": 3},
                                 "sk-few": {"org": "org-b5",
                                            "batch_requests_limit": 2}}})
    reqs = [{"custom_id": "ok-%d" % i,
             "params": msg_body("hello %d" % i, max_tokens=5)}
            for i in range(3)]
    reqs.append({"custom_id": "bad", "params": {"model": MODEL,
                                                "messages": []}})
    st, h, o, _ = batch_api(env, "POST", "", {"requests": reqs}, "sk-b1")
    check(st == 200 and o.get("type") == "message_batch",
          "create: 200 message_batch (%s %r)" % (st, o))
    bid = o.get("id", "")
    check(bid.startswith("msgbatch_"), "create: a msgbatch_ id (%r)" % bid)
    check(o.get("processing_status") == "in_progress" and
          o.get("results_url") is None and o.get("ended_at") is None,
          "create: in_progress, no results_url yet (%r)" % o)
    check(o.get("request_counts", {}).get("processing") == 4,
          "create: 4 processing (%r)" % o.get("request_counts"))
    check(RFC3339.match(o.get("created_at", "")) and
          RFC3339.match(o.get("expires_at", "")), "create: RFC 3339 times")
    st, _, e, _ = batch_api(env, "GET", "/%s/results" % bid, cred="sk-b1")
    check(st == 400, "results before the end: 400 (%s)" % st)
    st, _, e, _ = batch_api(env, "DELETE", "/" + bid, cred="sk-b1")
    check(st == 400, "delete while processing: 400 (%s)" % st)
    for cred in ("sk-b2",):
        for m, suffix in (("GET", ""), ("GET", "/results"),
                          ("POST", "/cancel"), ("DELETE", "")):
            st, _, e, _ = batch_api(env, m, "/" + bid + suffix, cred=cred)
            check(st == 404, "another org: %s %s is 404 (%s)"
                  % (m, suffix or "/", st))
            check_error_shape(e, "not_found_error", "another org")
    st, _, e, _ = batch_api(env, "GET", "/msgbatch_nope", cred="sk-b1")
    check(st == 404, "unknown id: 404 (%s)" % st)
    o = until_ended(env, bid, "sk-b1")
    check(o and o.get("processing_status") == "ended",
          "ended after its processing time (%r)" % o)
    check(o and o.get("request_counts") ==
          {"processing": 0, "succeeded": 3, "errored": 1, "canceled": 0,
           "expired": 0}, "counts at the end (%r)" % (o or {}).get(
              "request_counts"))
    check(o and (o.get("results_url") or "").endswith(
        "/v1/messages/batches/%s/results" % bid), "results_url at the end")
    st, h, _, raw = batch_api(env, "GET", "/%s/results" % bid, cred="sk-b1")
    lines = [json.loads(x) for x in raw.splitlines() if x.strip()]
    check(st == 200 and len(lines) == 4, "results: 4 lines (%s %d)"
          % (st, len(lines)))
    types = sorted(ln["result"]["type"] for ln in lines)
    check(types == ["errored", "succeeded", "succeeded", "succeeded"],
          "results: types (%r)" % types)
    ok = [ln for ln in lines if ln["result"]["type"] == "succeeded"]
    check(all(ln["result"]["message"]["usage"]["output_tokens"] == 5
              for ln in ok), "results: max_tokens held")
    # to HTTP/1.0 the same lines, not chunked: the body ends with the close
    c = Client(env.p1)
    r = c.request("GET", "/v1/messages/batches/%s/results" % bid,
                  headers={"x-api-key": "sk-b1",
                           "anthropic-version": "2023-06-01"},
                  version="1.0")
    c.close()
    want = raw.encode() if isinstance(raw, str) else raw
    check(r.status == 200 and "transfer-encoding" not in r.headers and
          r.headers.get("connection") == "close" and r.body == want,
          "results to HTTP/1.0: close-delimited, the same bytes (%r)"
          % r.headers)
    rep = api(env, "GET", "/_mock/batches")[2]
    mine = [b for b in rep["batches"] if b["id"] == bid]
    check(mine and mine[0]["usage"]["output_tokens"] == 15 and
          mine[0]["usage"]["input_tokens"] == sum(
              ln["result"]["message"]["usage"]["input_tokens"] for ln in ok),
          "/_mock/batches: the usage the results carry")
    # the list, one organisation's only, newest first, by pages
    ids = [bid]
    for i in range(2):
        st, _, o, _ = batch_api(env, "POST", "", {"requests": reqs[:1]},
                                "sk-b1")
        ids.insert(0, o["id"])
    batch_api(env, "POST", "", {"requests": reqs[:1]}, "sk-b2")
    st, _, o, _ = batch_api(env, "GET", "", cred="sk-b1", qs="?limit=2")
    check(st == 200 and [b["id"] for b in o["data"]] == ids[:2] and
          o["has_more"] is True and o["first_id"] == ids[0],
          "list: newest first, limit, has_more (%r)" % o)
    st, _, o, _ = batch_api(env, "GET", "", cred="sk-b1",
                            qs="?limit=2&after_id=" + ids[1])
    check(st == 200 and [b["id"] for b in o["data"]] == ids[2:] and
          o["has_more"] is False, "list: after_id (%r)" % o)
    st, _, o, _ = batch_api(env, "GET", "", cred="sk-b1",
                            qs="?before_id=" + ids[2])
    check(st == 200 and [b["id"] for b in o["data"]] == ids[:2],
          "list: before_id (%r)" % o)
    st, _, o, _ = batch_api(env, "GET", "", cred="sk-b1", qs="?limit=0")
    check(st == 400, "list: limit 0 is 400 (%s)" % st)
    # cancel: canceling, then ended with the rest canceled
    st, _, o, _ = batch_api(env, "POST", "", {"requests": reqs}, "sk-slow")
    sid = o["id"]
    st, _, o, _ = batch_api(env, "POST", "/%s/cancel" % sid, cred="sk-slow")
    check(st == 200 and o.get("processing_status") == "canceling" and
          o.get("cancel_initiated_at"), "cancel: canceling (%r)" % o)
    o = until_ended(env, sid, "sk-slow")
    check(o and o["request_counts"]["canceled"] == 4,
          "cancel: the rest canceled (%r)" % o)
    st, _, o, _ = batch_api(env, "POST", "/%s/cancel" % sid, cred="sk-slow")
    check(st == 400, "cancel once ended: 400 (%s)" % st)
    st, _, o, _ = batch_api(env, "DELETE", "/" + sid, cred="sk-slow")
    check(st == 200 and o == {"id": sid, "type": "message_batch_deleted"},
          "delete once ended (%r)" % o)
    st, _, o, _ = batch_api(env, "GET", "/" + sid, cred="sk-slow")
    check(st == 404, "deleted: 404 (%s)" % st)
    # expiry
    st, _, o, _ = batch_api(env, "POST", "", {"requests": reqs}, "sk-exp")
    o = until_ended(env, o["id"], "sk-exp")
    check(o and o["request_counts"]["expired"] == 4,
          "expired (%r)" % o)
    # what a create checks
    for body, what in ((b"{", "invalid JSON"),
                       ({}, "requests: Field required"),
                       ({"requests": []}, "at least 1 item"),
                       ({"requests": [{"custom_id": "a b",
                                       "params": {}}]}, "custom_id"),
                       ({"requests": [reqs[0], reqs[0]]}, "Duplicate"),
                       ({"requests": [{"custom_id": "x"}]}, "params: Field"),
                       ({"requests": reqs[:1], "x": 1}, "x: Extra inputs"),
                       ({"requests": reqs}, "at most 3 items")):
        st, _, e, _ = batch_api(env, "POST", "", body, "sk-val")
        check(st == 400 and what in (e or {}).get("error", {}).get(
            "message", ""), "create, %s: 400 (%s %r)" % (what, st, e))
    # a test's clock: a batch of 60 s ended now by the control
    st, _, o, _ = batch_api(env, "POST", "", {"requests": reqs[:2]},
                            "sk-slow")
    slow = o.get("id", "")
    st, _, e, _ = api(env, "POST", "/_mock/batches/%s/end" % slow, {})
    check(st == 200, "/_mock/batches/<id>/end: 200 (%s)" % st)
    st, _, o, _ = batch_api(env, "GET", "/" + slow, cred="sk-slow")
    check(o.get("processing_status") == "ended" and
          o.get("request_counts", {}).get("succeeded") == 2,
          "ended at once, its requests done (%r)" % o)
    st, _, e, _ = api(env, "POST", "/_mock/batches/msgbatch_nosuch/end", {})
    check(st == 404, "an unknown batch: 404 (%s)" % st)
    before = len(api(env, "GET", "/_mock/batches")[2]["batches"])
    check(before == 7, "refused creates made no batch (%d)" % before)
    for i in range(2):
        st, _, _, _ = batch_api(env, "GET", "", cred="sk-few")
        check(st == 200, "batch window: operation %d served" % i)
    st, h, e, _ = batch_api(env, "GET", "", cred="sk-few")
    check(st == 429 and h.get("retry-after", "").isdigit(),
          "batch window: the third 429 with retry-after (%s)" % st)
    check_error_shape(e, "rate_limit_error", "batch window")
    st, _, e, _ = batch_api(env, "PUT", "", {}, "sk-b1")
    check(st == 405, "PUT: 405 (%s)" % st)
    st, _, e, _ = batch_api(env, "GET", "/%s/other" % bid, cred="sk-b1")
    check(st == 404, "an unknown sub-path: 404 (%s)" % st)
    reset(env)
    st, _, e, _ = batch_api(env, "GET", "/" + bid, cred="sk-b1")
    check(st == 404, "reset forgets the batches (%s)" % st)


def main():
    t_start = time.monotonic()

    def watchdog():
        time.sleep(DEADLINE + 15)
        print("selftest: FAILED: still running after %ds" % (DEADLINE + 15))
        sys.stdout.flush()
        os._exit(1)
    threading.Thread(target=watchdog, daemon=True).start()

    tmp = tempfile.mkdtemp(prefix="mock-selftest-")
    env = Env()
    env.log = os.path.join(tmp, "mock.log")
    env.pidfile = os.path.join(tmp, "mock.pid")
    env.ready = os.path.join(tmp, "mock.ready")
    cert = os.path.join(tmp, "cert.pem")
    key = os.path.join(tmp, "key.pem")
    cp = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out",
         cert, "-days", "2", "-subj", "/CN=api.mock.test",
         "-addext", "subjectAltName=DNS:api.mock.test"],
        capture_output=True)
    if cp.returncode != 0:
        print("selftest: FAILED: openssl: %s" % cp.stderr.decode()[-500:])
        return 1
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w") as f:
        json.dump({"defaults": {"org": "org-mock"},
                   "credentials": {"sk-a": {"org": "org-a",
                                            "requests_limit": 50}}}, f)
    env.p1, env.p2, env.ptls = free_port(), free_port(), free_port()
    env.proc = subprocess.Popen(
        ["/usr/bin/python3", MOCK,
         "--listen", "127.0.0.1:%d" % env.p1,
         "--listen", "127.0.0.1:%d" % env.p2,
         "--tls-listen", "127.0.0.1:%d" % env.ptls,
         "--cert", cert, "--key", key, "--log", env.log, "--config", cfg,
         "--pidfile", env.pidfile, "--ready-file", env.ready],
        stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "stderr"),
                                            "w"))
    section("startup")
    deadline = time.monotonic() + 10
    while not os.path.exists(env.ready) and time.monotonic() < deadline:
        if env.proc.poll() is not None:
            break
        time.sleep(0.02)
    if not check(os.path.exists(env.ready), "ready file appears"):
        env.proc.kill()
        print("selftest: FAILED: mock did not start")
        with open(os.path.join(tmp, "stderr")) as f:
            print(f.read()[-2000:])
        return 1
    line = env.proc.stdout.readline()
    check(line == b"mock ready\n", "stdout 'mock ready' (%r)" % line)
    with open(env.pidfile) as f:
        check(f.read().strip() == str(env.proc.pid), "pidfile has the pid")
    with open(env.ready) as f:
        check(("127.0.0.1:%d" % env.ptls) in f.read(),
              "ready file lists the listeners")

    for t in (t_basic_json, t_sse, t_keepalive, t_error_steps,
              t_stream_steps, t_scripts, t_window, t_subscription, t_cache,
              t_other_endpoints, t_batches, t_files, t_http_edges, t_tls, t_logfile,
              t_concurrency, t_reset, t_signal):
        try:
            t(env)
        except Exception:
            check(False, "exception:\n" + traceback.format_exc())

    if env.proc.poll() is None:
        env.proc.kill()
    with open(os.path.join(tmp, "stderr")) as f:
        err = f.read()
    check("Traceback" not in err, "no traceback on mock stderr:\n" +
          err[-3000:])
    took = time.monotonic() - t_start
    check(took < DEADLINE, "finished in under %ds (%.1fs)" % (DEADLINE, took))
    if FAILURES:
        for f in FAILURES:
            print("FAIL " + f)
        print("selftest: FAILED: %d of %d checks (%.1fs, files in %s)"
              % (len(FAILURES), CHECKS[0], took, tmp))
        return 1
    print("selftest: OK: %d checks passed in %.1fs" % (CHECKS[0], took))
    subprocess.run(["rm", "-rf", tmp])
    return 0


if __name__ == "__main__":
    sys.exit(main())
