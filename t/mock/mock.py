#!/usr/bin/python3
"""Mock Anthropic Messages API upstream for the tokenbiryani integration tests.

Standard library only (Python 3.11).  See t/mock/README.md for the CLI, the
control endpoints and the failure-scripting language.

The HTTP/1.1 layer is written over raw sockets on purpose: the tests need
exact control over keep-alive, chunking, half-sent bodies and abrupt closes,
which http.server does not give.  One daemon thread per connection.
"""

import argparse
import datetime
import faulthandler
import hashlib
import json
import math
import os
import resource
import signal
import socket
import ssl
import sys
import threading
import time
import traceback

import mock_platforms


# --------------------------------------------------------------------------
# constants

MAX_LINE = 65536                 # request line / header line / chunk line
MAX_HEADERS = 256
MAX_HEADER_BYTES = 256 * 1024
TLS_HANDSHAKE_TIMEOUT = 10.0
HANG_MAX_SECONDS = 600.0
SPLIT_PAUSE = 0.005              # pause between the halves of the split delta

TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789"
                        "abcdefghijklmnopqrstuvwxyz"
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZ")

BUILTIN_DEFAULTS = {
    "requests_limit": 1000,
    "input_limit": 1000000,
    "output_limit": 200000,
    "count_tokens_limit": None,    # None: same as requests_limit
    "window_seconds": 60,
    "output_tokens": 12,
    "min_cache_tokens": 1024,
    "cache_ttl_seconds": 300,
    "org": None,                   # None: an organisation per key
    "behavior": None,
    "omit_headers": [],            # rate-limit headers left out
}

BUILTIN_TOP = {
    "strict_credentials": False,
    "event_delay_ms": 0,
    "max_body_bytes": 32 * 1024 * 1024,
    "idle_timeout_seconds": 300,
    "bedrock": {},                 # keys, api_keys, region (mock_platforms)
    "google": {},                  # keys, token_uri, token_ttl, project
}

MODELS = [
    {"type": "model", "id": "claude-sonnet-4-6",
     "display_name": "Claude Sonnet 4.6",
     "created_at": "2026-01-01T00:00:00Z"},
    {"type": "model", "id": "claude-opus-4-6",
     "display_name": "Claude Opus 4.6",
     "created_at": "2026-01-01T00:00:00Z"},
    {"type": "model", "id": "claude-haiku-4-5",
     "display_name": "Claude Haiku 4.5",
     "created_at": "2025-10-01T00:00:00Z"},
]

REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized",
    402: "Payment Required", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
    413: "Request Entity Too Large", 422: "Unprocessable Entity",
    429: "Too Many Requests", 500: "Internal Server Error",
    502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
    529: "Overloaded",
}

# scripted error steps: step -> (status, error type, message)
ERROR_STEPS = {
    "400": (400, "invalid_request_error", "mock: scripted invalid request"),
    "401": (401, "authentication_error", "invalid x-api-key"),
    "402": (402, "billing_error",
            "Your credit balance is too low to access the Anthropic API. "
            "Please go to Plans & Billing to upgrade or purchase credits."),
    "403": (403, "permission_error",
            "your API key does not have permission to use the specified "
            "resource"),
    "403-model": (403, "permission_error",
                  "model {model} is not available for this key"),
    "404": (404, "not_found_error", "mock: scripted not found"),
    "408": (408, "timeout_error", "Request timeout"),
    "500": (500, "api_error", "Internal server error"),
    "502": (502, "api_error", "Bad gateway"),
    "503": (503, "api_error", "Service unavailable"),
    "504": (504, "timeout_error", "Gateway timeout"),
    "529": (529, "overloaded_error", "Overloaded"),
}

GENERIC_ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error",
    402: "billing_error", 403: "permission_error", 404: "not_found_error",
    408: "timeout_error", 413: "request_too_large",
    429: "rate_limit_error", 504: "timeout_error", 529: "overloaded_error",
}

# steps that go through the normal pipeline (auth, window, cache) and
# produce a message, possibly failing while sending it
MESSAGE_STEPS = ("ok", "preerr", "midfail", "midfail-error",
                 "slow-prelude", "drip", "ping-preerr", "overlong", "accel",
                 "chunked", "chunked-midfail", "badjson", "evs-badcrc",
                 "evs-badcrc-first", "evs-badcrc-late", "evs-split")

# what an upstream that misbehaves on purpose adds: nginx's own control
# headers, which a proxy must never obey
ACCEL_HEADERS = [("x-accel-redirect", "/healthz"),
                 ("x-accel-limit-rate", "1"),
                 ("x-accel-buffering", "yes"),
                 ("x-accel-charset", "koi8-r"),
                 ("x-accel-expires", "100")]

# bytes past a response's Content-Length that read like a second response
SMUGGLED_BODY = b'{"smuggled":"answer"}'
SMUGGLED_RESPONSE = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s"
                     % (len(SMUGGLED_BODY), SMUGGLED_BODY))

WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur",
         "adipiscing", "elit")


def log_err(msg):
    try:
        sys.stderr.write("mock: %s\n" % msg)
        sys.stderr.flush()
    except Exception:
        pass


def canon(v):
    return json.dumps(v, separators=(",", ":"), sort_keys=True,
                      ensure_ascii=False)


def compact(v):
    return json.dumps(v, separators=(",", ":"))


def num(v, default, lo=None):
    """A config number, or default when absent / not a number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return default
    if v != v:  # NaN
        return default
    if lo is not None and v < lo:
        return lo
    return v


def rfc3339(ts):
    ts = math.ceil(ts)
    return datetime.datetime.fromtimestamp(
        ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def http_date():
    return datetime.datetime.now(datetime.timezone.utc).strftime(
        "%a, %d %b %Y %H:%M:%S GMT")


# --------------------------------------------------------------------------
# configuration

def deep_merge(dst, src):
    """Merge src into dst (new dict); a null value deletes the key."""
    out = dict(dst)
    for k, v in src.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


class Config:
    def __init__(self):
        self.data = {"defaults": {}, "credentials": {}}
        self.lock = threading.Lock()

    def merge(self, upd):
        if not isinstance(upd, dict):
            raise ValueError("config must be a JSON object")
        for key in ("defaults", "credentials"):
            if key in upd and upd[key] is not None \
                    and not isinstance(upd[key], dict):
                raise ValueError("%s must be an object" % key)
        creds = upd.get("credentials")
        if isinstance(creds, dict):
            for c, v in creds.items():
                if v is not None and not isinstance(v, dict):
                    raise ValueError("credentials.%s must be an object" % c)
        with self.lock:
            new = deep_merge(self.data, upd)
            if not isinstance(new.get("defaults"), dict):
                new["defaults"] = {}
            if not isinstance(new.get("credentials"), dict):
                new["credentials"] = {}
            self.data = new      # copy-on-write: readers need no lock

    def remember(self):
        """What /_mock/reset goes back to: the configuration at start."""
        self.initial = self.data

    def restore(self):
        with self.lock:
            self.data = getattr(self, "initial", self.data)

    def top(self, key):
        return self.data.get(key, BUILTIN_TOP[key])

    def known(self, cred):
        return cred in self.data["credentials"]

    def settings(self, cred):
        d = dict(BUILTIN_DEFAULTS)
        d.update(self.data["defaults"])
        c = self.data["credentials"].get(cred) if cred is not None else None
        if isinstance(c, dict):
            d.update(c)
        return d


def limits_of(s):
    req = num(s.get("requests_limit"), 1000, 0)
    inp = num(s.get("input_limit"), 1000000, 0)
    out = num(s.get("output_limit"), 200000, 0)
    ct = num(s.get("count_tokens_limit"), req, 0)
    win = num(s.get("window_seconds"), 60, 0.001)
    mode = "fixed" if s.get("window_mode") == "fixed" else "bucket"
    return (req, inp, out, ct, win, mode)


# --------------------------------------------------------------------------
# rate windows, prompt cache, counters

class Bucket:
    __slots__ = ("limit", "rate", "level", "last")

    def __init__(self, limit, window, now):
        self.limit = float(limit)
        self.rate = self.limit / window if window > 0 else 0.0
        self.level = self.limit
        self.last = now

    def refill(self, now):
        if now > self.last:
            if self.rate > 0:
                self.level = min(self.limit,
                                 self.level + (now - self.last) * self.rate)
            self.last = now

    def wait_for(self, amount):
        """Seconds until amount can be admitted (inf if never)."""
        if amount <= self.level:
            return 0.0
        if amount > self.limit or self.rate <= 0:
            return math.inf
        return (amount - self.level) / self.rate

    def full_at(self, now):
        if self.rate <= 0:
            return now
        return now + (self.limit - self.level) / self.rate

    def remaining(self):
        return max(0, int(math.floor(self.level + 1e-9)))


class FixedWindow:
    """A window that is full at fixed instants (every `window` seconds from
    its start) and does not refill in between; its reset is the window's
    end, the same instant all through the window."""
    __slots__ = ("limit", "window", "level", "start")

    def __init__(self, limit, window, now):
        self.limit = float(limit)
        self.window = window
        self.level = self.limit
        self.start = now

    def refill(self, now):
        if self.window > 0 and now >= self.start + self.window:
            k = math.floor((now - self.start) / self.window)
            self.start += k * self.window
            self.level = self.limit

    def wait_for(self, amount):
        if amount <= self.level:
            return 0.0
        if amount > self.limit or self.window <= 0:
            return math.inf
        return max(0.0, self.start + self.window - time.time())

    def full_at(self, now):
        return self.start + self.window

    def remaining(self):
        return max(0, int(math.floor(self.level + 1e-9)))


class CredState:
    def __init__(self, limits, now):
        self.requests = 0
        self.messages = 0
        self.admitted = 0
        self.refused_429 = 0
        self.count_tokens_requests = 0
        self.behavior_counter = 0
        self.behavior_seen = None
        self.cache = {}            # prefix key -> expiry
        self.limits = None
        self.set_limits(limits, now)

    def set_limits(self, limits, now):
        req, inp, out, ct, win, mode = limits
        self.limits = limits
        kind = FixedWindow if mode == "fixed" else Bucket
        self.b = {
            "requests": kind(req, win, now),
            "input": kind(inp, win, now),
            "output": kind(out, win, now),
            "count_tokens": kind(ct, win, now),
        }

    def refill(self, now):
        for b in self.b.values():
            b.refill(now)

    def cache_entries(self, now):
        return sum(1 for e in self.cache.values() if e > now)


class State:
    def __init__(self, config, log_path):
        self.config = config
        self.lock = threading.Lock()        # counters, buckets, caches
        self.log_lock = threading.Lock()    # log list + file
        self.log_path = log_path
        self.log_file = None
        if log_path:
            self.log_file = open(log_path, "w", encoding="utf-8")
        self.reset_all()

    def reset_all(self):
        with self.lock, self.log_lock:
            self.gen = getattr(self, "gen", 0) + 1
            self.seq = 0
            self.total_requests = 0
            self.refused_total = 0
            self.bad_requests = 0
            self.creds = {}
            self.scripts = {}
            self.log = []
            if self.log_file is not None:
                self.log_file.seek(0)
                self.log_file.truncate(0)
                self.log_file.flush()

    # caller holds self.lock
    def cred_state(self, cred, now):
        settings = self.config.settings(cred)
        limits = limits_of(settings)
        cs = self.creds.get(cred)
        if cs is None:
            cs = CredState(limits, now)
            self.creds[cred] = cs
        elif cs.limits != limits:
            cs.set_limits(limits, now)   # limits changed: bucket reset
        cs.omit = settings.get("omit_headers") or []
        cs.refill(now)
        return cs

    def append_log(self, entry, gen):
        line = json.dumps(entry)
        with self.log_lock:
            if gen != self.gen:
                return          # request started before a /_mock/reset
            self.log.append(entry)
            if self.log_file is not None:
                try:
                    self.log_file.write(line + "\n")
                    self.log_file.flush()
                except Exception as e:
                    log_err("log write failed: %s" % e)

    def get_log(self, since=0):
        with self.log_lock:
            out = [e for e in self.log if e.get("seq", 0) > since]
        out.sort(key=lambda e: e.get("seq", 0))
        return out

    def rate_headers(self, cred, now, override_requests_reset=None):
        """The nine anthropic-ratelimit-* headers for cred (no debit)."""
        with self.lock:
            if cred is None:
                cs = CredState(limits_of(self.config.settings(None)), now)
            else:
                cs = self.cred_state(cred, now)
            return self._rate_headers_locked(cs, now,
                                             override_requests_reset)

    @staticmethod
    def _rate_headers_locked(cs, now, override_requests_reset=None):
        h = []
        for dim, name in (("requests", "requests"),
                          ("input", "input-tokens"),
                          ("output", "output-tokens")):
            b = cs.b[dim]
            rem = b.remaining()
            reset = b.full_at(now)
            if dim == "requests" and override_requests_reset is not None:
                rem = 0
                reset = max(reset, override_requests_reset)
            pre = "anthropic-ratelimit-%s-" % name
            h.append((pre + "limit", str(int(b.limit))))
            h.append((pre + "remaining", str(rem)))
            h.append((pre + "reset", rfc3339(reset)))
        omit = getattr(cs, "omit", [])
        if "*" in omit:
            return []
        return [x for x in h if x[0] not in omit]

    def stats(self):
        now = time.time()
        with self.lock:
            names = set(self.creds) | set(self.config.data["credentials"])
            creds = {}
            for c in sorted(names):
                cs = self.cred_state(c, now)
                creds[c] = {
                    "requests": cs.requests,
                    "messages": cs.messages,
                    "admitted": cs.admitted,
                    "refused_429": cs.refused_429,
                    "count_tokens_requests": cs.count_tokens_requests,
                    "requests_remaining": cs.b["requests"].remaining(),
                    "requests_reset": cs.b["requests"].full_at(now),
                    "input_remaining": cs.b["input"].remaining(),
                    "output_remaining": cs.b["output"].remaining(),
                    "cache_entries": cs.cache_entries(now),
                }
            return {"credentials": creds,
                    "total_requests": self.total_requests,
                    "refused_429": self.refused_total,
                    "scripts": dict(self.scripts),
                    "bad_requests": self.bad_requests}


# --------------------------------------------------------------------------
# prompt analysis

def _strip_cc(v):
    if isinstance(v, dict) and "cache_control" in v:
        return {k: x for k, x in v.items() if k != "cache_control"}
    return v


def _is_bp(v):
    return isinstance(v, dict) and isinstance(v.get("cache_control"), dict)


def prompt_items(body):
    """[(canonical text, is breakpoint)] in the order tools, system, msgs."""
    items = []
    tools = body.get("tools")
    if isinstance(tools, list):
        for t in tools:
            items.append((canon(_strip_cc(t)), _is_bp(t)))
    elif tools is not None:
        items.append((canon(tools), False))
    system = body.get("system")
    if isinstance(system, list):
        for b in system:
            items.append((canon(_strip_cc(b)), _is_bp(b)))
    elif system is not None:
        items.append((canon(system), False))
    msgs = body.get("messages")
    if isinstance(msgs, list):
        for m in msgs:
            if isinstance(m, dict):
                role = m.get("role")
                content = m.get("content")
                if isinstance(content, list) and content:
                    for b in content:
                        items.append((canon({"role": role,
                                             "content": _strip_cc(b)}),
                                      _is_bp(b)))
                else:
                    items.append((canon({"role": role, "content": content}),
                                  False))
            else:
                items.append((canon(m), False))
    elif msgs is not None:
        items.append((canon(msgs), False))
    return items


def validate_request(body, count_tokens):
    """What the Messages API checks before it counts a token: the message
    of its 400 invalid_request_error, or None.  The messages follow the
    API's own ("max_tokens: Field required")."""
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    def is_num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def blocks(v, where):
        if not isinstance(v, list):
            return "%s: Input should be a valid list" % where
        for i, b in enumerate(v):
            if not isinstance(b, dict):
                return "%s.%d: Input should be a valid dictionary" % (where, i)
            if not isinstance(b.get("type"), str):
                return "%s.%d.type: Field required" % (where, i)
            if b["type"] == "text" and not isinstance(b.get("text"), str):
                return "%s.%d.text: Field required" % (where, i)
        return None

    if not count_tokens:
        if "max_tokens" not in body:
            return "max_tokens: Field required"
        if not is_int(body["max_tokens"]):
            return "max_tokens: Input should be a valid integer"
        if body["max_tokens"] < 1:
            return "max_tokens: Input should be greater than or equal to 1"
    if "messages" not in body:
        return "messages: Field required"
    msgs = body["messages"]
    if not isinstance(msgs, list):
        return "messages: Input should be a valid list"
    if not msgs:
        return "messages: at least one message is required"
    for i, m in enumerate(msgs):
        where = "messages.%d" % i
        if not isinstance(m, dict):
            return "%s: Input should be a valid dictionary" % where
        if "role" not in m:
            return "%s.role: Field required" % where
        # a system message may stand among the turns (Claude Code sends
        # one after the first user message): it applies from there on
        if m["role"] not in ("user", "assistant", "system"):
            return ("%s.role: Input should be 'user', 'assistant' or "
                    "'system'" % where)
        if "content" not in m:
            return "%s.content: Field required" % where
        c = m["content"]
        if not isinstance(c, str):
            err = blocks(c, where + ".content")
            if err:
                return err
    if "system" in body and not isinstance(body["system"], str):
        err = blocks(body["system"], "system")
        if err:
            return err
    if "stream" in body and not isinstance(body["stream"], bool):
        return "stream: Input should be a valid boolean"
    if "temperature" in body:
        t = body["temperature"]
        if not is_num(t):
            return "temperature: Input should be a valid number"
        if t < 0 or t > 1:
            return "temperature: Input should be less than or equal to 1" \
                if t > 1 else \
                "temperature: Input should be greater than or equal to 0"
    if "tools" in body:
        if not isinstance(body["tools"], list):
            return "tools: Input should be a valid list"
        for i, t in enumerate(body["tools"]):
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                return "tools.%d.name: Field required" % i
    return None


def analyse_prompt(body):
    """(total tokens, [(prefix tokens, prefix key)] per breakpoint).

    The canonical prompt text is the item serialisations joined by "\\n";
    tokens(text) = ceil(len(text) / 4)."""
    items = prompt_items(body)
    h = hashlib.sha256()
    length = 0
    bps = []
    for i, (text, bp) in enumerate(items):
        if i:
            h.update(b"\n")
            length += 1
        h.update(text.encode("utf-8", "surrogatepass"))
        length += len(text)
        if bp:
            bps.append(((length + 3) // 4, h.hexdigest()))
    total = max(1, (length + 3) // 4)
    return total, bps


def cache_lookup(cs, bps, now, min_tokens):
    """(read, creation, keys to insert); does not modify the cache."""
    read = 0
    for t, k in reversed(bps):
        e = cs.cache.get(k)
        if e is not None and e > now:
            read = t
            break
    insert = [k for t, k in bps if t >= min_tokens]
    last = max([t for t, k in bps if t >= min_tokens], default=0)
    creation = max(0, last - read)
    return read, creation, insert


# --------------------------------------------------------------------------
# HTTP layer

class BadRequest(Exception):
    pass


class PeerGone(Exception):
    pass


class TooLarge(Exception):
    def __init__(self, req, declared):
        Exception.__init__(self, "body too large")
        self.req = req
        self.declared = declared


class Request:
    __slots__ = ("method", "target", "path", "version", "headers",
                 "hdict", "body", "keep_alive")

    def header(self, name, default=None):
        return self.hdict.get(name, default)


class Conn:
    def __init__(self, sock, listener, peer, tls, sni):
        self.sock = sock
        self.rfile = sock.makefile("rb", buffering=65536)
        self.listener = listener
        self.tls = tls
        self.sni = sni
        self.port = peer[1] if isinstance(peer, tuple) and \
            len(peer) > 1 else None
        self.nreq = 0
        self.closed = False

    def send(self, data):
        self.sock.sendall(data)

    def _close_files(self):
        try:
            self.rfile.close()
        except Exception:
            pass

    def close(self):
        if self.closed:
            return
        self.closed = True
        self._close_files()
        try:
            self.sock.close()
        except Exception:
            pass

    def abort(self):
        """Close with RST (SO_LINGER 0)."""
        if self.closed:
            return
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except Exception:
            pass
        self.close()

    def shutdown_close(self):
        """FIN without TLS close_notify, then close."""
        if self.closed:
            return
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except Exception:
            pass
        self.close()

    def lingering_close(self, seconds=1.0, limit=1 << 20):
        """Send FIN, drain what the peer still sends, close: the response
        is not lost to an RST when unread request bytes remain."""
        if self.closed:
            return
        try:
            self.sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + seconds
            got = 0
            while got < limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.sock.settimeout(left)
                d = self.sock.recv(65536)
                if not d:
                    break
                got += len(d)
        except Exception:
            pass
        self.close()


def _readline(rf):
    line = rf.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise BadRequest("line too long")
    return line


def read_chunked(rf, max_body):
    parts = []
    total = 0
    while True:
        line = _readline(rf)
        if not line:
            raise PeerGone()
        if not line.endswith(b"\n"):
            raise BadRequest("bad chunk size line")
        size_s = line.split(b";", 1)[0].strip()
        try:
            size = int(size_s, 16)
        except ValueError:
            raise BadRequest("bad chunk size")
        if size < 0 or not size_s or \
                any(c not in b"0123456789abcdefABCDEF" for c in size_s):
            raise BadRequest("bad chunk size")
        if size == 0:
            for _ in range(MAX_HEADERS):
                t = _readline(rf)
                if not t:
                    raise PeerGone()
                if t in (b"\r\n", b"\n"):
                    return b"".join(parts)
            raise BadRequest("too many trailers")
        total += size
        if total > max_body:
            raise TooLarge(None, total)
        data = rf.read(size)
        if len(data) < size:
            raise PeerGone()
        parts.append(data)
        crlf = _readline(rf)
        if crlf not in (b"\r\n", b"\n"):
            if not crlf:
                raise PeerGone()
            raise BadRequest("bad chunk terminator")


def read_request(conn, max_body):
    """A Request, or None at a clean EOF between requests."""
    rf = conn.rfile
    line = _readline(rf)
    skipped = 0
    while line in (b"\r\n", b"\n"):
        skipped += 1
        if skipped > 16:
            raise BadRequest("empty lines")
        line = _readline(rf)
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise BadRequest("truncated request line")
    parts = line.rstrip(b"\r\n").decode("latin-1").split(" ")
    if len(parts) != 3:
        raise BadRequest("bad request line")
    method, target, version = parts
    if not method or any(c not in TOKEN_CHARS for c in method):
        raise BadRequest("bad method")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest("bad version")
    if not target or any(ord(c) < 0x21 or ord(c) == 0x7f for c in target):
        raise BadRequest("bad target")
    headers = []
    total = 0
    while True:
        h = _readline(rf)
        if not h:
            raise PeerGone()
        if not h.endswith(b"\n"):
            raise BadRequest("truncated header")
        total += len(h)
        if total > MAX_HEADER_BYTES:
            raise BadRequest("headers too large")
        if h in (b"\r\n", b"\n"):
            break
        if h[:1] in (b" ", b"\t"):
            raise BadRequest("obsolete line folding")
        s = h.rstrip(b"\r\n").decode("latin-1")
        name, sep, value = s.partition(":")
        if not sep or not name or any(c not in TOKEN_CHARS for c in name):
            raise BadRequest("bad header line")
        headers.append((name.lower(), value.strip(" \t")))
        if len(headers) > MAX_HEADERS:
            raise BadRequest("too many headers")

    req = Request()
    req.method = method
    req.version = version
    req.headers = headers
    hd = {}
    for n, v in headers:
        hd[n] = hd[n] + ", " + v if n in hd else v
    req.hdict = hd
    if target.startswith(("http://", "https://")):
        rest = target.split("://", 1)[1]
        i = rest.find("/")
        target = rest[i:] if i >= 0 else "/"
    req.target = target
    req.path = target.split("?", 1)[0]
    req.body = b""

    tokens = [t.strip().lower() for t in hd.get("connection", "").split(",")]
    if version == "HTTP/1.1":
        req.keep_alive = "close" not in tokens
    else:
        req.keep_alive = "keep-alive" in tokens

    te = hd.get("transfer-encoding")
    cl = hd.get("content-length")
    expect = version == "HTTP/1.1" and \
        hd.get("expect", "").strip().lower() == "100-continue"
    if te is not None:
        codings = [c.strip().lower() for c in te.split(",") if c.strip()]
        if not codings or codings[-1] != "chunked" or cl is not None:
            raise BadRequest("unsupported transfer-encoding")
        if expect:
            conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            req.body = read_chunked(rf, max_body)
        except TooLarge as e:
            raise TooLarge(req, e.declared)
    elif cl is not None:
        vals = set(v.strip() for v in cl.split(","))
        if len(vals) != 1:
            raise BadRequest("conflicting content-length")
        v = vals.pop()
        if not v.isdigit() or len(v) > 18:
            raise BadRequest("bad content-length")
        n = int(v)
        if n > max_body:
            raise TooLarge(req, n)
        if n:
            if expect:
                conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = rf.read(n)
            if len(body) < n:
                raise PeerGone()
            req.body = body
    return req


def response_head(status, headers, reason=None):
    lines = ["HTTP/1.1 %d %s" % (status, reason or
                                 REASONS.get(status, "Status"))]
    for k, v in headers:
        lines.append("%s: %s" % (k, v))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def error_obj(etype, message, seq=None, details=None):
    err = {"type": etype, "message": message}
    if details is not None:
        err["details"] = details
    o = {"type": "error", "error": err}
    if seq is not None:
        o["request_id"] = "req_mock_%d" % seq
    return o


# --------------------------------------------------------------------------
# the server

class Mock:
    def __init__(self, state):
        self.state = state
        self.config = state.config
        self.platforms = mock_platforms.Platforms(self, sys.modules[__name__])

    # ---------------------------------------------------------- connection

    def serve_conn(self, sock, peer, listener, tls_ctx):
        conn = None
        try:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except Exception:
                pass
            sni = None
            if tls_ctx is not None:
                sock.settimeout(TLS_HANDSHAKE_TIMEOUT)
                holder = {}
                try:
                    sock = tls_ctx.wrap_socket(sock, server_side=True,
                                               do_handshake_on_connect=False)
                    sock._mock_sni = holder
                    sock.do_handshake()
                except Exception:
                    try:
                        sock.close()
                    except Exception:
                        pass
                    return
                sni = holder.get("sni")
            conn = Conn(sock, listener, peer, tls_ctx is not None, sni)
            self.loop(conn)
        except Exception:
            log_err("connection error:\n" + traceback.format_exc())
        finally:
            if conn is not None:
                conn.close()
            else:
                try:
                    sock.close()
                except Exception:
                    pass

    def loop(self, conn):
        while not conn.closed:
            idle = num(self.config.top("idle_timeout_seconds"), 300, 0.1)
            max_body = num(self.config.top("max_body_bytes"),
                           32 * 1024 * 1024, 0)
            conn.sock.settimeout(idle)
            try:
                req = read_request(conn, max_body)
            except BadRequest as e:
                with self.state.lock:
                    self.state.bad_requests += 1
                self.send_bad_request(conn, str(e))
                return
            except TooLarge as e:
                conn.nreq += 1
                self.too_large(conn, e.req, e.declared)
                return
            except (PeerGone, OSError, ValueError):
                return
            if req is None:
                return
            conn.nreq += 1
            try:
                if req.path == "/_mock" or req.path.startswith("/_mock/"):
                    keep = self.control(conn, req)
                elif self.platforms.owns(req):
                    keep = self.platforms.serve(conn, req)
                elif req.path == "/v1" or req.path.startswith("/v1/"):
                    keep = self.api(conn, req)
                else:
                    body = compact(error_obj("not_found_error",
                                             "Not found")).encode()
                    keep = self.send_simple(conn, req, 404, body,
                                            "application/json")
            except OSError:
                return
            if not keep or not req.keep_alive:
                if not conn.closed:
                    conn.close()
                return

    def send_bad_request(self, conn, why):
        body = compact(error_obj("invalid_request_error",
                                 "mock: bad HTTP request: " + why)).encode()
        head = response_head(400, [
            ("date", http_date()), ("server", "mock-anthropic"),
            ("content-type", "application/json"),
            ("content-length", str(len(body))), ("connection", "close")])
        try:
            conn.send(head + body)
        except Exception:
            pass
        conn.lingering_close()

    def send_simple(self, conn, req, status, body, ctype, extra=()):
        headers = [("date", http_date()), ("server", "mock-anthropic"),
                   ("content-type", ctype),
                   ("content-length", str(len(body)))]
        headers.extend(extra)
        keep = req.keep_alive
        if not keep:
            headers.append(("connection", "close"))
        elif req.version == "HTTP/1.0":
            headers.append(("connection", "keep-alive"))
        conn.send(response_head(status, headers) + body)
        return keep

    # ---------------------------------------------------------- control

    def control(self, conn, req):
        st = self.state
        p = req.path
        qs = req.target.split("?", 1)[1] if "?" in req.target else ""

        def reply(status, obj):
            body = (json.dumps(obj) + "\n").encode()
            return self.send_simple(conn, req, status, body,
                                    "application/json")

        try:
            if p == "/_mock/log" and req.method == "GET":
                since = 0
                for kv in qs.split("&"):
                    if kv.startswith("since="):
                        try:
                            since = int(kv[6:])
                        except ValueError:
                            pass
                return reply(200, st.get_log(since))
            if p == "/_mock/reset" and req.method == "POST":
                self.config.restore()
                st.reset_all()
                return reply(200, {"ok": True})
            if p == "/_mock/config" and req.method == "POST":
                try:
                    upd = json.loads(req.body or b"{}")
                    self.config.merge(upd)
                except (ValueError, RecursionError) as e:
                    return reply(400, error_obj("invalid_request_error",
                                                "mock config: %s" % e))
                return reply(200, self.config.data)
            if p == "/_mock/config" and req.method == "GET":
                return reply(200, self.config.data)
            if p == "/_mock/stats" and req.method == "GET":
                return reply(200, st.stats())
            if p in ("/_mock/log", "/_mock/reset", "/_mock/config",
                     "/_mock/stats"):
                return reply(405, error_obj("invalid_request_error",
                                            "method not allowed"))
            return reply(404, error_obj("not_found_error",
                                        "unknown control endpoint"))
        except OSError:
            raise
        except Exception:
            log_err("control error:\n" + traceback.format_exc())
            return reply(500, error_obj("api_error", "mock control error"))

    # ---------------------------------------------------------- /v1

    def new_entry(self, conn, req, now):
        st = self.state
        cred = None
        xk = [v for n, v in req.headers if n == "x-api-key"]
        au = [v for n, v in req.headers if n == "authorization"]
        if xk:
            cred = xk[0]
        elif au:
            a = au[0].strip()
            if a[:7].lower() == "bearer ":
                cred = a[7:].strip()
        body_obj = None
        if req.body:
            try:
                body_obj = json.loads(req.body)
            except (ValueError, RecursionError):
                body_obj = None
        model = stream = None
        if isinstance(body_obj, dict):
            model = body_obj.get("model")
            if not isinstance(model, str):
                model = None
            stream = body_obj.get("stream") is True
        with st.lock:
            st.seq += 1
            seq = st.seq
            gen = st.gen
            st.total_requests += 1
            if cred is not None:
                st.cred_state(cred, now).requests += 1
        entry = {
            "seq": seq,
            "ts": now,
            "listen": conn.listener,
            "tls": conn.tls,
            "sni": conn.sni,
            "conn": conn.port,
            "conn_req": conn.nreq,
            "method": req.method,
            "path": req.target,
            "credential": cred,
            "auth_header_count": len(xk) + len(au),
            "headers": dict(req.hdict),
            "body_len": len(req.body),
            "body_sha256": hashlib.sha256(req.body).hexdigest(),
            "model": model,
            "stream": stream,
            "step": "ok",
            "status": None,
            "resp_len": None,
            "resp_sha256": None,
            "usage": None,
            "refused": False,
            "script_id": req.header("x-mock-script-id"),
            "error_type": None,
            "client_aborted": False,
        }
        return entry, gen, body_obj

    def choose_step(self, req, cred):
        st = self.state
        script = req.header("x-mock-script")
        if script is not None:
            steps = [s.strip() for s in script.split(",") if s.strip()]
            sid = req.header("x-mock-script-id")
            if sid is None:
                return steps[0] if steps else "ok"
            with st.lock:
                k = st.scripts.get(sid, 0) + 1
                st.scripts[sid] = k
            return steps[k - 1] if k <= len(steps) else "ok"
        beh = self.config.settings(cred).get("behavior")
        if isinstance(beh, str):
            steps = [s.strip() for s in beh.split(",") if s.strip()]
        elif isinstance(beh, list):
            steps = [str(s).strip() for s in beh if str(s).strip()]
        else:
            steps = []
        if not steps:
            return "ok"
        if len(steps) == 1:
            return steps[0]
        with st.lock:
            cs = st.cred_state(cred, time.time())
            if cs.behavior_seen != steps:
                cs.behavior_seen = steps
                cs.behavior_counter = 0
            k = cs.behavior_counter
            cs.behavior_counter += 1
        return steps[k % len(steps)]

    def org_of(self, cred):
        """The credential's organisation: as configured, else one of its
        own - a key whose windows are its own is its own organisation, as
        with the real API, whose limits are an organisation's."""
        org = self.config.settings(cred).get("org")
        if isinstance(org, str):
            return org
        return "org-" + hashlib.sha256(str(cred).encode()).hexdigest()[:12]

    def base_headers(self, entry, ctype, cred):
        if entry.get("platform"):
            return self.platforms.base_headers(entry, ctype)
        org = self.org_of(cred)
        return [("date", http_date()), ("server", "mock-anthropic"),
                ("content-type", ctype),
                ("request-id", "req_mock_%d" % entry["seq"]),
                ("anthropic-organization-id", org)]

    def finish(self, entry, gen, body_sent):
        if body_sent is not None:
            entry["resp_len"] = len(body_sent)
            entry["resp_sha256"] = hashlib.sha256(body_sent).hexdigest()
        self.state.append_log(entry, gen)

    def too_large(self, conn, req, declared):
        now = time.time()
        entry, gen, _ = self.new_entry(conn, req, now)
        entry["body_len"] = declared
        entry["body_sha256"] = None
        entry["step"] = "too-large"
        req.keep_alive = False
        try:
            self.send_413(conn, req, entry, gen, entry["credential"], now)
        except OSError:
            pass
        conn.lingering_close()

    def send_413(self, conn, req, entry, gen, cred, now):
        body = b"Request Entity Too Large"
        headers = self.base_headers(entry, "text/plain", cred)
        if req.path == "/v1/messages":
            headers += self.state.rate_headers(cred, now)
        headers += [("x-should-retry", "false"),
                    ("content-length", str(len(body)))]
        if not req.keep_alive:
            headers.append(("connection", "close"))
        entry["status"] = 413
        entry["error_type"] = "request_too_large"
        self.finish(entry, gen, body)
        conn.send(response_head(413, headers) + body)
        return req.keep_alive

    def send_error(self, conn, req, entry, gen, cred, status, etype, msg,
                   retry_after=None, details=None, rate_override=None,
                   should_retry=None, now=None):
        now = now or time.time()
        body = compact(error_obj(etype, msg, entry["seq"], details)).encode()
        headers = self.base_headers(entry, "application/json", cred)
        if req.path == "/v1/messages":
            headers += self.state.rate_headers(cred, now, rate_override)
        if retry_after is not None:
            headers.append(("retry-after", str(retry_after)))
        if should_retry is None:
            should_retry = status in (408, 409, 429) or status >= 500
        headers.append(("x-should-retry",
                        "true" if should_retry else "false"))
        headers.append(("content-length", str(len(body))))
        keep = req.keep_alive
        if not keep:
            headers.append(("connection", "close"))
        elif req.version == "HTTP/1.0":
            headers.append(("connection", "keep-alive"))
        entry["status"] = status
        entry["error_type"] = etype
        self.finish(entry, gen, body)
        conn.send(response_head(status, headers) + body)
        return keep

    def api(self, conn, req):
        now = time.time()
        entry, gen, body_obj = self.new_entry(conn, req, now)
        cred = entry["credential"]
        step = self.choose_step(req, cred)
        entry["step"] = step
        name, _, arg = step.partition(":")
        name = name.strip().lower()
        arg = arg.strip()

        def arg_num(default):
            try:
                v = float(arg)
                return v if v >= 0 and v == v and v != math.inf else default
            except ValueError:
                return default

        # ---- connection-level misbehaviour
        if name == "reset":
            self.finish(entry, gen, None)
            conn.abort()
            return False
        if name == "garbage":
            data = b"this is not http\r\n\r\n"
            self.finish(entry, gen, data)
            try:
                conn.send(data)
            except OSError:
                pass
            conn.lingering_close()
            return False
        if name == "hang":
            self.finish(entry, gen, None)
            self.hang(conn)
            return False
        if name == "slow-headers":
            time.sleep(arg_num(1000) / 1000.0)
            name = "ok"

        # ---- scripted HTTP errors
        is_messages = req.path == "/v1/messages"
        streaming = bool(is_messages and entry["stream"])
        if name in ("preerr", "ping-preerr") and not streaming:
            name = "529"
        if name == "err":
            parts = arg.split(":", 2)
            try:
                status = int(parts[0])
            except ValueError:
                status = 0
            if not 400 <= status <= 599:
                return self.send_error(
                    conn, req, entry, gen, cred, 400, "invalid_request_error",
                    "mock: bad err step %r (err:<status>:<type>[:<message>])"
                    % step, now=now)
            etype = parts[1] if len(parts) > 1 and parts[1] else \
                GENERIC_ERROR_TYPES.get(status, "api_error")
            msg = parts[2] if len(parts) > 2 else "mock: scripted %d %s" % (
                status, etype)
            return self.send_error(conn, req, entry, gen, cred, status,
                                   etype, msg, now=now)
        if name == "midfail-error" and not streaming:
            name = "500"
        if name == "429":
            secs = max(1, int(math.ceil(arg_num(5))))
            return self.send_error(
                conn, req, entry, gen, cred, 429, "rate_limit_error",
                "This request would exceed the rate limit for your "
                "organization. Please reduce the prompt length or the "
                "maximum tokens requested, or try again later. (scripted)",
                retry_after=secs, rate_override=now + secs, now=now)
        if name == "429-spend":
            return self.send_error(
                conn, req, entry, gen, cred, 429, "rate_limit_error",
                "This request would exceed your workspace's spend limit. "
                "You have reached your specified workspace API usage limits "
                "and will regain access at the start of the next month.",
                details={"error_code": "enforced_spend_limit_reached"},
                should_retry=False, now=now)
        if name == "413":
            return self.send_413(conn, req, entry, gen, cred, now)
        if name in ERROR_STEPS:
            status, etype, msg = ERROR_STEPS[name]
            if "{model}" in msg:
                msg = msg.replace("{model}", entry["model"] or "claude-x")
            return self.send_error(conn, req, entry, gen, cred, status,
                                   etype, msg, now=now)
        if name.isdigit() and len(name) == 3 and 400 <= int(name) <= 599:
            status = int(name)
            return self.send_error(
                conn, req, entry, gen, cred, status,
                GENERIC_ERROR_TYPES.get(status, "api_error"),
                "mock: scripted %d" % status, now=now)
        if name not in MESSAGE_STEPS:
            return self.send_error(
                conn, req, entry, gen, cred, 400, "invalid_request_error",
                "mock: unknown script step %r" % step, now=now)
        mode = name
        if mode == "ping-preerr":
            # (interval, count)
            ms_arg, _, n_arg = arg.partition(":")
            try:
                ms_v = max(0.0, float(ms_arg))
            except ValueError:
                ms_v = 1000.0
            try:
                n_v = max(0, int(n_arg))
            except ValueError:
                n_v = 3
            mode_ms = (ms_v, n_v)
        else:
            mode_ms = arg_num(1000)

        # ---- routing
        p = req.path
        if p in ("/v1/messages", "/v1/messages/count_tokens"):
            if req.method != "POST":
                return self.send_error(conn, req, entry, gen, cred, 405,
                                       "invalid_request_error",
                                       "Method Not Allowed", now=now)
        elif p == "/v1/models" or p.startswith("/v1/models/"):
            if req.method != "GET":
                return self.send_error(conn, req, entry, gen, cred, 405,
                                       "invalid_request_error",
                                       "Method Not Allowed", now=now)
        else:
            return self.send_error(conn, req, entry, gen, cred, 404,
                                   "not_found_error",
                                   "Not found: %s %s" % (req.method, p),
                                   now=now)

        # ---- authentication
        if cred is None or cred == "":
            return self.send_error(conn, req, entry, gen, cred, 401,
                                   "authentication_error",
                                   "x-api-key header is required", now=now)
        if self.config.top("strict_credentials") is True and \
                not self.config.known(cred):
            return self.send_error(conn, req, entry, gen, cred, 401,
                                   "authentication_error",
                                   "invalid x-api-key", now=now)

        if p.startswith("/v1/models"):
            return self.models(conn, req, entry, gen, cred, mode, mode_ms)

        # ---- body
        if body_obj is None:
            return self.send_error(conn, req, entry, gen, cred, 400,
                                   "invalid_request_error",
                                   "There was an error parsing the body of "
                                   "your request: invalid JSON", now=now)
        if not isinstance(body_obj, dict):
            return self.send_error(conn, req, entry, gen, cred, 400,
                                   "invalid_request_error",
                                   "request body must be a JSON object",
                                   now=now)
        model = body_obj.get("model")
        if not isinstance(model, str) or not model:
            return self.send_error(conn, req, entry, gen, cred, 400,
                                   "invalid_request_error",
                                   "model: Field required", now=now)
        err = validate_request(body_obj, p == "/v1/messages/count_tokens")
        if err:
            return self.send_error(conn, req, entry, gen, cred, 400,
                                   "invalid_request_error", err, now=now)
        try:
            total, bps = analyse_prompt(body_obj)
        except (ValueError, TypeError, RecursionError) as e:
            return self.send_error(conn, req, entry, gen, cred, 400,
                                   "invalid_request_error",
                                   "mock: cannot analyse prompt: %s" % e,
                                   now=now)

        if p == "/v1/messages/count_tokens":
            return self.count_tokens(conn, req, entry, gen, cred, total,
                                     mode, mode_ms, now)
        return self.messages(conn, req, entry, gen, cred, body_obj, model,
                             total, bps, mode, mode_ms, now)

    def hang(self, conn):
        deadline = time.monotonic() + HANG_MAX_SECONDS
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                conn.sock.settimeout(min(left, 5.0))
                try:
                    d = conn.sock.recv(65536)
                except socket.timeout:
                    continue
                if not d:
                    break
        except Exception:
            pass
        conn.close()

    def models(self, conn, req, entry, gen, cred, mode, mode_ms):
        p = req.path
        if p in ("/v1/models", "/v1/models/"):
            obj = {"data": MODELS, "has_more": False,
                   "first_id": MODELS[0]["id"], "last_id": MODELS[-1]["id"]}
        else:
            mid = p[len("/v1/models/"):]
            found = [m for m in MODELS if m["id"] == mid]
            if not found:
                return self.send_error(conn, req, entry, gen, cred, 404,
                                       "not_found_error",
                                       "model: %s" % mid)
            obj = found[0]
        return self.send_json_ok(conn, req, entry, gen, cred, obj, [],
                                 mode, mode_ms)

    def count_tokens(self, conn, req, entry, gen, cred, total, mode,
                     mode_ms, now):
        st = self.state
        with st.lock:
            cs = st.cred_state(cred, now)
            cs.count_tokens_requests += 1
            b = cs.b["count_tokens"]
            wait = b.wait_for(1)
            if wait > 0:
                cs.refused_429 += 1
                st.refused_total += 1
                if wait == math.inf:
                    wait = cs.limits[4]
            else:
                b.level -= 1
        if wait > 0:
            entry["refused"] = True
            return self.send_error(
                conn, req, entry, gen, cred, 429, "rate_limit_error",
                "Number of count_tokens requests has exceeded your rate "
                "limit. Please try again later.",
                retry_after=max(1, int(math.ceil(wait))))
        return self.send_json_ok(conn, req, entry, gen, cred,
                                 {"input_tokens": total}, [], mode, mode_ms)

    def messages(self, conn, req, entry, gen, cred, body, model, total, bps,
                 mode, mode_ms, now):
        st = self.state
        s = self.config.settings(cred)
        out = int(num(s.get("output_tokens"), 12, 0))
        ho = req.header("x-mock-output-tokens")
        if ho is not None:
            try:
                out = max(0, int(ho.strip()))
            except ValueError:
                pass
        stop_reason = "end_turn"
        mt = body.get("max_tokens")
        if isinstance(mt, int) and not isinstance(mt, bool) and mt >= 0 \
                and out > mt:
            out = mt
            stop_reason = "max_tokens"
        min_cache = num(s.get("min_cache_tokens"), 1024, 0)
        ttl = num(s.get("cache_ttl_seconds"), 300, 0)

        # keys of an organisation with org_limits share its windows and
        # cache: the state of "org:<org>", as the real API keeps them
        lkey = cred
        if s.get("org_limits"):
            lkey = "org:" + self.org_of(cred)
        with st.lock:
            cs = st.cred_state(lkey, now)
            cs.messages += 1
            read, creation, insert = cache_lookup(cs, bps, now, min_cache)
            input_tokens = max(0, total - read - creation)
            counted = input_tokens + creation
            wait = max(cs.b["requests"].wait_for(1),
                       cs.b["input"].wait_for(counted),
                       cs.b["output"].wait_for(out))
            if wait > 0:
                cs.refused_429 += 1
                st.refused_total += 1
                if wait == math.inf:
                    wait = cs.limits[4]
                rl = st._rate_headers_locked(cs, now)
            else:
                cs.b["requests"].level -= 1
                cs.b["input"].level -= counted
                cs.admitted += 1
                exp = now + ttl
                for k in insert:
                    cs.cache[k] = exp
                if len(cs.cache) > 4096:
                    for k in [k for k, e in cs.cache.items() if e <= now]:
                        del cs.cache[k]
                # as with the real API, the headers go out before the
                # output exists: output-tokens-remaining does not count it
                rl = st._rate_headers_locked(cs, now)
                cs.b["output"].level -= out

        if wait > 0 and entry.get("platform"):
            entry["refused"] = True
            return self.platforms.throttled(conn, req, entry, gen)
        if entry.get("platform"):
            # neither platform says what is left of its quotas
            rl = []
        if wait > 0:
            entry["refused"] = True
            retry = max(1, int(math.ceil(wait)))
            sbody = compact(error_obj(
                "rate_limit_error",
                "This request would exceed the rate limit for your "
                "organization (%s) of %d requests / %d input tokens / "
                "%d output tokens per %g seconds. Please try again later."
                % (self.org_of(cred), cs.limits[0], cs.limits[1], cs.limits[2], cs.limits[4]),
                entry["seq"])).encode()
            headers = self.base_headers(entry, "application/json", cred)
            headers += rl
            headers += [("retry-after", str(retry)),
                        ("x-should-retry", "true"),
                        ("content-length", str(len(sbody)))]
            if not req.keep_alive:
                headers.append(("connection", "close"))
            entry["status"] = 429
            entry["error_type"] = "rate_limit_error"
            self.finish(entry, gen, sbody)
            conn.send(response_head(429, headers) + sbody)
            return req.keep_alive

        usage = {"input_tokens": input_tokens,
                 "cache_creation_input_tokens": creation,
                 "cache_read_input_tokens": read,
                 "output_tokens": out}
        entry["usage"] = usage
        text = "Hello from the mock (" + \
            " ".join(WORDS[i % len(WORDS)] for i in range(out)) + ")"
        msg_id = "msg_mock_%d" % entry["seq"]

        if entry["stream"]:
            return self.stream(conn, req, entry, gen, cred, rl, msg_id,
                               model, text, usage, stop_reason, mode,
                               mode_ms)
        obj = {"id": msg_id, "type": "message", "role": "assistant",
               "model": model,
               "content": [{"type": "text", "text": text}],
               "stop_reason": stop_reason, "stop_sequence": None,
               "usage": usage}
        return self.send_json_ok(conn, req, entry, gen, cred, obj, rl,
                                 mode, mode_ms)

    # ---------------------------------------------------------- 200 senders

    def send_json_ok(self, conn, req, entry, gen, cred, obj, extra, mode,
                     mode_ms):
        body = compact(obj).encode()
        if mode == "badjson":
            body = body[:len(body) // 2] + b"not json"
        headers = self.base_headers(entry, "application/json", cred)
        headers += extra
        if mode == "accel":
            headers += ACCEL_HEADERS
        if mode in ("chunked", "chunked-midfail"):
            return self.send_json_chunked(conn, req, entry, gen, headers,
                                          body, mode)
        headers.append(("content-length", str(len(body))))
        keep = req.keep_alive and mode != "midfail"
        if not keep:
            headers.append(("connection", "close"))
        elif req.version == "HTTP/1.0":
            headers.append(("connection", "keep-alive"))
        head = response_head(200, headers)
        entry["status"] = 200
        if mode == "midfail":
            half = body[:len(body) // 2]
            self.finish(entry, gen, half)
            try:
                conn.send(head + half)
            except OSError:
                pass
            conn.shutdown_close()
            return False
        if mode == "slow-prelude":
            self.finish(entry, gen, body)
            conn.send(head)
            time.sleep(mode_ms / 1000.0)
            conn.send(body)
            return keep
        if mode == "drip":
            n = 8
            size = max(1, -(-len(body) // n))
            pieces = [body[i:i + size] for i in range(0, len(body), size)]
            conn.send(head)
            sent = b""
            for i, pc in enumerate(pieces):
                time.sleep(mode_ms / 1000.0)
                if i == len(pieces) - 1:
                    self.finish(entry, gen, body)
                try:
                    conn.send(pc)
                except OSError:
                    if i < len(pieces) - 1:
                        entry["client_aborted"] = True
                        self.finish(entry, gen, sent)
                    conn.close()
                    return False
                sent += pc
            return keep
        self.finish(entry, gen, body)
        if mode == "overlong":
            conn.send(head + body + SMUGGLED_RESPONSE)
            return keep
        conn.send(head + body)
        return keep

    def send_json_chunked(self, conn, req, entry, gen, headers, body, mode):
        """A JSON answer in three chunks; chunked-midfail: the first one,
        then a close without the last chunk."""
        headers.append(("transfer-encoding", "chunked"))
        if not req.keep_alive or mode == "chunked-midfail":
            headers.append(("connection", "close"))
        entry["status"] = 200
        third = max(1, len(body) // 3)
        pieces = [body[:third], body[third:2 * third], body[2 * third:]]
        if mode == "chunked-midfail":
            self.finish(entry, gen, pieces[0])
            try:
                conn.send(response_head(200, headers) + chunk(pieces[0]))
            except OSError:
                pass
            conn.shutdown_close()
            return False
        self.finish(entry, gen, body)
        conn.send(response_head(200, headers)
                  + b"".join(chunk(pc) for pc in pieces if pc) + b"0\r\n\r\n")
        return req.keep_alive

    def stream(self, conn, req, entry, gen, cred, rl, msg_id, model, text,
               usage, stop_reason, mode, mode_ms):
        bedrock = entry.get("platform") == "bedrock"

        def ev(name, data):
            if bedrock:
                return self.platforms.bedrock_event(name, data, usage)
            return ("event: %s\ndata: %s\n\n" % (name, compact(data))).encode()

        shell_usage = dict(usage)
        shell_usage["output_tokens"] = 1
        shell = {"id": msg_id, "type": "message", "role": "assistant",
                 "model": model, "content": [], "stop_reason": None,
                 "stop_sequence": None, "usage": shell_usage}
        k = max(3, min(8, len(text) // 12))
        size = max(1, -(-len(text) // k))
        pieces = [text[i:i + size] for i in range(0, len(text), size)]
        while len(pieces) < 3:
            pieces.append("")
        ms = ev("message_start", {"type": "message_start", "message": shell})
        cbs = ev("content_block_start",
                 {"type": "content_block_start", "index": 0,
                  "content_block": {"type": "text", "text": ""}})
        ping = ev("ping", {"type": "ping"})
        deltas = [ev("content_block_delta",
                     {"type": "content_block_delta", "index": 0,
                      "delta": {"type": "text_delta", "text": pc}})
                  for pc in pieces]
        cbstop = ev("content_block_stop",
                    {"type": "content_block_stop", "index": 0})
        md_usage = {"output_tokens": usage["output_tokens"],
                    "input_tokens": usage["input_tokens"],
                    "cache_creation_input_tokens":
                        usage["cache_creation_input_tokens"],
                    "cache_read_input_tokens":
                        usage["cache_read_input_tokens"]}
        mdelta = ev("message_delta",
                    {"type": "message_delta",
                     "delta": {"stop_reason": stop_reason,
                               "stop_sequence": None},
                     "usage": md_usage})
        mstop = ev("message_stop", {"type": "message_stop"})

        def error_ev(etype, msg):
            if bedrock:
                return self.platforms.bedrock_exception(etype, msg)
            return ev("error", error_obj(etype, msg, entry["seq"]))

        ending = "terminate"
        if mode == "preerr":
            events = [ms, error_ev("overloaded_error", "Overloaded")]
        elif mode == "midfail":
            events = [ms, cbs, ping, deltas[0]]
            ending = "abort"
        elif mode == "midfail-error":
            events = [ms, cbs, ping, deltas[0],
                      error_ev("api_error", "Internal server error")]
        elif mode == "ping-preerr":
            events = [ms] + [ping] * mode_ms[1] \
                + [error_ev("overloaded_error", "Overloaded")]
        else:
            events = [ms, cbs, ping] + deltas + [cbstop, mdelta, mstop]
        if mode == "evs-badcrc":
            # a frame before the first delta whose CRC does not match
            events[1] = self.platforms.corrupt(events[1])
        elif mode == "evs-badcrc-first":
            # the very first frame broken
            events[0] = self.platforms.corrupt(events[0])
        elif mode == "evs-badcrc-late":
            events[4] = self.platforms.corrupt(events[4])
        first_delta = 3 if len(events) > 3 and mode != "ping-preerr" else -1

        delay_ms = num(self.config.top("event_delay_ms"), 0, 0)
        hd = req.header("x-mock-event-delay-ms")
        if hd is not None:
            try:
                delay_ms = max(0.0, float(hd.strip()))
            except ValueError:
                pass
        if mode == "drip":
            delay_ms = mode_ms
        if mode == "ping-preerr":
            delay_ms = mode_ms[0]

        chunked = req.version == "HTTP/1.1"
        keep = req.keep_alive and chunked and ending == "terminate"
        headers = self.base_headers(
            entry, "application/vnd.amazon.eventstream" if bedrock
            else "text/event-stream; charset=utf-8", cred)
        headers += rl
        if mode == "accel":
            headers += ACCEL_HEADERS
        headers.append(("cache-control", "no-cache"))
        if chunked:
            headers.append(("transfer-encoding", "chunked"))
        if not keep:
            headers.append(("connection", "close"))
        entry["status"] = 200

        h = hashlib.sha256()
        sent = [0]
        logged = [False]

        def put(data, extra=b""):
            if mode == "evs-split" and chunked:
                # every event cut into chunks of 1 to 7 bytes
                i, k, out = 0, 0, []
                while i < len(data):
                    n = 1 + k % 7
                    out.append(chunk(data[i:i + n]))
                    i += n
                    k += 1
                conn.send(b"".join(out) + extra)
            else:
                conn.send((chunk(data) if chunked else data) + extra)
            h.update(data)
            sent[0] += len(data)

        def log_final(last):
            hh = h.copy()
            hh.update(last)
            entry["resp_len"] = sent[0] + len(last)
            entry["resp_sha256"] = hh.hexdigest()
            logged[0] = True
            self.state.append_log(entry, gen)

        term = b"0\r\n\r\n" if chunked else b""
        try:
            conn.send(response_head(200, headers))
            for i, e in enumerate(events):
                if i > 0:
                    if delay_ms > 0:
                        time.sleep(delay_ms / 1000.0)
                    if mode == "slow-prelude" and i == 1:
                        time.sleep(mode_ms / 1000.0)
                rest = e
                if i == first_delta:
                    put(e[:9])
                    time.sleep(SPLIT_PAUSE)
                    rest = e[9:]
                if i == len(events) - 1:
                    log_final(rest)
                    if ending == "abort":
                        put(rest)
                        conn.shutdown_close()
                        return False
                    put(rest, term)
                else:
                    put(rest)
        except OSError:
            entry["client_aborted"] = True
            if not logged[0]:
                entry["resp_len"] = sent[0]
                entry["resp_sha256"] = h.hexdigest()
                self.state.append_log(entry, gen)
            conn.close()
            return False
        if not chunked:
            conn.shutdown_close()
            return False
        return keep


# --------------------------------------------------------------------------
# listeners and main

def parse_addr(s):
    s = s.strip()
    if s.startswith("["):
        host, _, rest = s[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, sep, port = s.rpartition(":")
        if not sep:
            host, port = "127.0.0.1", s
    if not port.isdigit():
        raise ValueError("bad listen address %r" % s)
    return host or "0.0.0.0", int(port)


def make_listener(addr):
    host, port = parse_addr(addr)
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    ls = socket.socket(fam, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(4096)
    real = ls.getsockname()[1]
    name = ("[%s]:%d" if fam == socket.AF_INET6 else "%s:%d") % (host, real)
    return ls, name


def accept_loop(mock, ls, name, tls_ctx):
    while True:
        try:
            s, peer = ls.accept()
        except OSError as e:
            if ls.fileno() < 0:
                return
            log_err("accept on %s: %s" % (name, e))
            time.sleep(0.05)
            continue
        try:
            t = threading.Thread(target=mock.serve_conn,
                                 args=(s, peer, name, tls_ctx), daemon=True)
            t.start()
        except Exception as e:
            log_err("cannot start thread: %s" % e)
            try:
                s.close()
            except Exception:
                pass


def make_tls_ctx(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    try:
        ctx.set_alpn_protocols(["http/1.1"])
    except Exception:
        pass

    def sni_cb(sslsock, server_name, _ctx):
        holder = getattr(sslsock, "_mock_sni", None)
        if isinstance(holder, dict):
            holder["sni"] = server_name
        return None

    ctx.sni_callback = sni_cb
    return ctx


def write_file_atomic(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description="mock Anthropic API upstream")
    ap.add_argument("--listen", action="append", default=[],
                    metavar="HOST:PORT")
    ap.add_argument("--tls-listen", action="append", default=[],
                    metavar="HOST:PORT")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--log")
    ap.add_argument("--config")
    ap.add_argument("--pidfile")
    ap.add_argument("--ready-file")
    a = ap.parse_args(argv)

    if not a.listen and not a.tls_listen:
        ap.error("at least one --listen or --tls-listen is required")
    if a.tls_listen and not (a.cert and a.key):
        ap.error("--tls-listen needs --cert and --key")

    for p in (a.ready_file, a.pidfile):
        if p:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except Exception:
        pass
    threading.stack_size(2 * 1024 * 1024)

    config = Config()
    if a.config:
        try:
            with open(a.config, "rb") as f:
                config.merge(json.loads(f.read() or b"{}"))
        except Exception as e:
            log_err("cannot load config %s: %s" % (a.config, e))
            return 2

    config.remember()
    state = State(config, a.log)
    mock = Mock(state)

    tls_ctx = None
    if a.tls_listen:
        try:
            tls_ctx = make_tls_ctx(a.cert, a.key)
        except Exception as e:
            log_err("cannot load cert/key: %s" % e)
            return 2

    listeners = []
    try:
        for addr in a.listen:
            ls, name = make_listener(addr)
            listeners.append((ls, name, None))
        for addr in a.tls_listen:
            ls, name = make_listener(addr)
            listeners.append((ls, name, tls_ctx))
    except (OSError, ValueError) as e:
        log_err("cannot listen: %s" % e)
        return 1

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    except Exception:
        pass
    try:   # kill -USR1 <pid>: dump every thread's stack to stderr
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except Exception:
        pass

    for ls, name, ctx in listeners:
        threading.Thread(target=accept_loop, args=(mock, ls, name, ctx),
                         daemon=True).start()

    if a.pidfile:
        write_file_atomic(a.pidfile, "%d\n" % os.getpid())
    if a.ready_file:
        write_file_atomic(a.ready_file,
                          "".join(n + "\n" for _, n, _ in listeners))
    sys.stdout.write("mock ready\n")
    sys.stdout.flush()

    while not stop.is_set():
        stop.wait(0.5)

    for ls, _, _ in listeners:
        try:
            ls.close()
        except Exception:
            pass
    try:
        with state.log_lock:
            if state.log_file is not None:
                state.log_file.flush()
    except Exception:
        pass
    for p in (a.pidfile, a.ready_file):
        if p:
            try:
                os.unlink(p)
            except Exception:
                pass
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
