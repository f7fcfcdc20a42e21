"""The mock's API behaviour: what Anthropic's Messages API checks and counts.

Rate windows (token buckets or fixed windows) per credential, the prompt
cache, a request's validation as the real service validates it, and the
Anthropic-shaped error object; with the small value helpers the rest of
the mock shares.  Standard library only.
"""

import datetime
import hashlib
import json
import math
import sys
import threading
import time


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


class Subscription:
    """A Claude subscription's 5-hour and 7-day windows, as its unified
    headers say them: counted in requests here, fixed from the first one,
    each rejected once used up until it resets."""
    WINDOWS = (("5h", "five_hour", 18000), ("7d", "seven_day", 604800))

    def __init__(self, cfg, now):
        self.cfg = dict(cfg) if isinstance(cfg, dict) else {}
        self.lim, self.span, self.start, self.used = {}, {}, {}, {}
        for w, claim, secs in self.WINDOWS:
            self.lim[w] = max(1, int(num(self.cfg.get(
                claim + "_requests"), 50 if w == "5h" else 500, 1)))
            self.span[w] = num(self.cfg.get(claim + "_seconds"), secs, 0.01)
            self.start[w] = now
            self.used[w] = 0

    def refill(self, now):
        for w, _, _ in self.WINDOWS:
            if now >= self.start[w] + self.span[w]:
                k = math.floor((now - self.start[w]) / self.span[w])
                self.start[w] += k * self.span[w]
                self.used[w] = 0

    def reset(self, w):
        return self.start[w] + self.span[w]

    def full(self):
        """the window that refuses, the latest to reset, or None"""
        full = [w for w, _, _ in self.WINDOWS if self.used[w] >= self.lim[w]]
        return max(full, key=self.reset) if full else None

    def take(self):
        for w, _, _ in self.WINDOWS:
            self.used[w] += 1

    def headers(self):
        h = []
        worst, claim = None, None
        for w, name, _ in self.WINDOWS:
            u = self.used[w] / self.lim[w]
            st = "rejected" if u >= 1 else \
                "allowed_warning" if u >= 0.8 else "allowed"
            if worst is None or u > worst:
                worst, claim = u, (w, name)
            p = "anthropic-ratelimit-unified-%s-" % w
            h += [(p + "status", st), (p + "utilization", "%.2f" % u),
                  (p + "reset", str(int(math.ceil(self.reset(w)))))]
        st = "rejected" if worst >= 1 else \
            "allowed_warning" if worst >= 0.8 else "allowed"
        return [("anthropic-ratelimit-unified-status", st),
                ("anthropic-ratelimit-unified-reset",
                 str(int(math.ceil(self.reset(claim[0]))))),
                ("anthropic-ratelimit-unified-representative-claim",
                 claim[1]),
                ("anthropic-ratelimit-unified-fallback-percentage", "0.5"),
                ("anthropic-ratelimit-unified-overage-status", "rejected"),
                ("anthropic-ratelimit-unified-overage-disabled-reason",
                 "org_level_disabled")] + h


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
        self.sub = None            # a Subscription, for such a credential
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
            self.batches = {}       # id -> mock_batches.Batch
            self.files = {}         # id -> mock_files.File
            self.batch_ops = {}     # org -> times of its batch operations
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
        subcfg = settings.get("subscription")
        if not subcfg:
            cs.sub = None
        elif cs.sub is None or cs.sub.cfg != subcfg:
            cs.sub = Subscription(subcfg, now)
        cs.refill(now)
        if cs.sub is not None:
            cs.sub.refill(now)
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
        if getattr(cs, "sub", None) is not None:
            # a subscription says its unified windows, not the nine
            return cs.sub.headers()
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
    cc = body.get("cache_control")
    if cc is not None and (not isinstance(cc, dict)
                           or cc.get("type") != "ephemeral"):
        return "cache_control.type: Input should be 'ephemeral'"
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


LOOKBACK = 20     # block boundaries the API checks before a breakpoint


def analyse_prompt(body):
    """(total tokens, [(prefix tokens, prefix key, [(tokens, key)] of the
    boundaries it looks back on)] per breakpoint).

    The canonical prompt text is the item serialisations joined by "\\n";
    tokens(text) = ceil(len(text) / 4).  A top-level cache_control (the
    API's automatic caching) is a breakpoint on the last block.  A lookup
    at a breakpoint also finds what was written at any of the 20 block
    boundaries before it, as the API's does."""
    items = prompt_items(body)
    if items and isinstance(body.get("cache_control"), dict):
        items[-1] = (items[-1][0], True)
    h = hashlib.sha256()
    length = 0
    bounds = []
    bps = []
    for i, (text, bp) in enumerate(items):
        if i:
            h.update(b"\n")
            length += 1
        h.update(text.encode("utf-8", "surrogatepass"))
        length += len(text)
        bounds.append(((length + 3) // 4, h.hexdigest()))
        if bp:
            bps.append(bounds[-1] + (bounds[max(0, i - LOOKBACK):i + 1],))
    total = max(1, (length + 3) // 4)
    return total, bps


def cache_lookup(cs, bps, now, min_tokens):
    """(read, creation, keys to insert); does not modify the cache."""
    read = 0
    for t, k, back in reversed(bps):
        for bt, bk in reversed(back):
            e = cs.cache.get(bk)
            if e is not None and e > now:
                read = bt
                break
        if read:
            break
    insert = [k for t, k, _ in bps if t >= min_tokens]
    last = max([t for t, k, _ in bps if t >= min_tokens], default=0)
    creation = max(0, last - read)
    return read, creation, insert


def error_obj(etype, message, seq=None, details=None):
    err = {"type": etype, "message": message}
    if details is not None:
        err["details"] = details
    o = {"type": "error", "error": err}
    if seq is not None:
        o["request_id"] = "req_mock_%d" % seq
    return o


def list_page(target, objs, what):
    """A list request's page of objs (each with created and id), newest
    first, by limit, before_id and after_id as the API pages: (page,
    has_more), or the 400's message"""
    qs = target.split("?", 1)[1] if "?" in target else ""
    q = dict(kv.partition("=")[::2] for kv in qs.split("&") if kv)
    try:
        limit = int(q.get("limit", "20"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 1000:
        return "limit: Input should be between 1 and 1000"
    objs = sorted(objs, key=lambda o: (o.created, o.id), reverse=True)
    ids = [o.id for o in objs]
    for k in ("before_id", "after_id"):
        if k in q and q[k] not in ids:
            return "%s: no %s %s" % (k, what, q[k])
    if "before_id" in q:
        i = ids.index(q["before_id"])
        return objs[max(0, i - limit):i], i - limit > 0
    i = ids.index(q["after_id"]) + 1 if "after_id" in q else 0
    return objs[i:i + limit], i + limit < len(objs)
