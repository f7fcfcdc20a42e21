"""The mock's control: its configuration (what the tests post to
/_mock/config, merged over the built-in defaults, restored by
/_mock/reset) and the /_mock/* endpoints (the log, reset, config, stats).
Standard library only.
"""

import json
import threading
import time
import traceback

from mock_api import log_err, error_obj


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
    "batch_max_body_bytes": 256 * 1024 * 1024,
    "batch_results_unreadable": 0, # results' first lines cut (a fault)
    "idle_timeout_seconds": 300,
    "bedrock": {},                 # keys, api_keys, region (mock_platforms)
    "google": {},                  # keys, token_uri, token_ttl, project
}


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


class Control:
    """The /_mock/* endpoints, a part of the Mock server."""

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
            if p == "/_mock/batches" and req.method == "GET":
                return reply(200, self.batches.report(time.time()))
            if p.startswith("/_mock/batches/") and req.method == "POST" \
                    and p.endswith(("/end", "/forget")):
                # a test's clock: every request of that batch done now
                # (/end), or the batch past its keeping (/forget)
                bid, _, what = p[len("/_mock/batches/"):].rpartition("/")
                if not self.batches.end_now(bid, time.time(),
                                            forget=(what == "forget")):
                    return reply(404, error_obj("not_found_error",
                                                "no batch %s" % bid))
                return reply(200, {"id": bid, "ended": what == "end",
                                   "forgotten": what == "forget"})
            if p == "/_mock/files" and req.method == "GET":
                with st.lock:
                    every = list(st.files.values())
                return reply(200, {"files": [
                    dict(f.obj(), org=f.org, deleted=f.deleted)
                    for f in every]})
            if p in ("/_mock/log", "/_mock/reset", "/_mock/config",
                     "/_mock/stats", "/_mock/batches", "/_mock/files"):
                return reply(405, error_obj("invalid_request_error",
                                            "method not allowed"))
            return reply(404, error_obj("not_found_error",
                                        "unknown control endpoint"))
        except OSError:
            raise
        except Exception:
            log_err("control error:\n" + traceback.format_exc())
            return reply(500, error_obj("api_error", "mock control error"))
