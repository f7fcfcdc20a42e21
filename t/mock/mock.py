#!/usr/bin/python3
"""Mock Anthropic Messages API upstream for the tokenbiryani integration tests.

Standard library only (Python 3.11).  See t/mock/README.md for the CLI, the
control endpoints and the failure-scripting language.

The server: the failure scripting, the control endpoints, the answers and
the command line.  The HTTP/1.1 wire is mock_wire.py (raw sockets on
purpose: the tests need exact control over keep-alive, chunking, half-sent
bodies and abrupt closes, which http.server does not give), what the API
checks and counts is mock_api.py, Bedrock and Vertex mock_platforms.py.
One daemon thread per connection.
"""

import argparse
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

import mock_batches
import mock_files
import mock_platforms
from mock_api import (log_err, compact, num, http_date, State,
                      validate_request, analyse_prompt, cache_lookup,
                      error_obj)
from mock_control import Config, Control
from mock_script import Scripting
from mock_wire import (BadRequest, PeerGone, TooLarge, Conn, read_request,
                       response_head, chunk)


# --------------------------------------------------------------------------
# constants

TLS_HANDSHAKE_TIMEOUT = 10.0
HANG_MAX_SECONDS = 600.0
OAUTH_BETA = "oauth-2025-04-20"  # what a subscription token must come with
SPLIT_PAUSE = 0.005              # pause between the halves of the split delta


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


# --------------------------------------------------------------------------
# the server

class Mock(Control, Scripting):
    def __init__(self, state):
        self.state = state
        self.config = state.config
        self.platforms = mock_platforms.Platforms(self, sys.modules[__name__])
        self.batches = mock_batches.Batches(self)
        self.files = mock_files.Files(self)
        self.words = WORDS

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
            max_body = {
                None: num(self.config.top("max_body_bytes"),
                          32 * 1024 * 1024, 0),
                mock_batches.PREFIX: num(self.config.top(
                    "batch_max_body_bytes"), 256 * 1024 * 1024, 0),
                mock_files.PREFIX: mock_files.MAX_BYTES + 65536}
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

    # ---------------------------------------------------------- /v1

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
                   should_retry=None, now=None, rate=True):
        now = now or time.time()
        body = compact(error_obj(etype, msg, entry["seq"], details)).encode()
        headers = self.base_headers(entry, "application/json", cred)
        if req.path == "/v1/messages" and rate:
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
        if name == "429-request":
            # request-scoped: no rate-limit header at all, worth a retry
            return self.send_error(
                conn, req, entry, gen, cred, 429, "rate_limit_error",
                "Rate limited. Please try again later. (scripted)",
                rate=False, now=now)
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
        elif self.batches.owns(p) or self.files.owns(p):
            pass                # its methods checked once it is known
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

        if self.config.settings(cred).get("subscription"):
            # a subscription's token: a bearer, with the OAuth beta
            betas = ",".join(v for n, v in req.headers
                             if n == "anthropic-beta")
            if req.header("x-api-key") is not None or \
                    OAUTH_BETA not in [b.strip() for b in betas.split(",")]:
                return self.send_error(conn, req, entry, gen, cred, 401,
                                       "authentication_error",
                                       "OAuth authentication is currently "
                                       "not supported.", now=now)

        if p.startswith("/v1/models"):
            return self.models(conn, req, entry, gen, cred, mode, mode_ms)
        if self.batches.owns(p):
            return self.batches.serve(conn, req, entry, gen, cred, body_obj,
                                      mode, mode_ms, now)
        if self.files.owns(p):
            return self.files.serve(conn, req, entry, gen, cred, mode,
                                    mode_ms, now)

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
        unknown = self.files.unknown(cred, body_obj)
        if unknown is not None:
            return self.send_error(conn, req, entry, gen, cred, 404,
                                   "not_found_error",
                                   "File not found: %s" % unknown, now=now)
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
            if cs.sub is not None:
                # a subscription's windows, not the buckets, say no
                full = cs.sub.full()
                wait = max(0.0, cs.sub.reset(full) - now) if full else 0
                if not full:
                    cs.sub.take()
                    cs.b["requests"].level += 1
                    cs.b["input"].level += counted
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
                % (self.org_of(cred), cs.limits[0], cs.limits[1], cs.limits[2], cs.limits[4])
                if cs.sub is None else
                "This request would exceed your account's rate limit. "
                "Please try again later.",
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
