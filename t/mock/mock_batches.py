"""The mock's Message Batches API: what it keeps, checks and answers.

A batch belongs to the organisation of the credential that created it
(Mock.org_of): to any other organisation its id is unknown (404
not_found_error, as for an id that never existed).  Its requests are
processed one after another over batch_processing_ms (a credential's
setting; 200 by default), each worked out at creation as the Messages API
would answer it, without touching the Messages windows: succeeded, with a
message and its usage, or errored with the invalid_request_error its
params would get.  A cancel makes it canceling, and ended
batch_cancel_ms later (100) with every request not done by the cancel
canceled; batch_expire_ms (none) ends it with every request not done by
then expired.  Results (JSONL, chunked, in result lines of the four types)
only once it ended; a delete only once it ended.  Batch operations have a
window of their own (batch_requests_limit per 60 s, 50 by default: a 429
rate_limit_error past it), and a batch at most batch_max_requests requests
(100,000).  Standard library only.
"""

import math
import re
import time

from mock_api import (compact, num, rfc3339, validate_request,
                      analyse_prompt, list_page)
from mock_wire import response_head, chunk

PREFIX = "/v1/messages/batches"
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_REQUESTS = 100000
RESULT_CHUNK = 64 * 1024
WINDOW_S = 60.0


class Batch:
    def __init__(self, bid, org, cred, created, items, done_at, expire_at):
        self.id = bid
        self.org = org
        self.cred = cred
        self.created = created
        self.items = items          # [(custom_id, result)] in order
        self.done_at = done_at      # [ts]: when each request is done
        self.expire_at = expire_at  # None: 24 h, as the API
        self.cancel_at = None
        self.cancel_ms = 0.1
        self.deleted = False

    def cut(self, now):
        """(ended at or None, how many are done, the type the rest take)"""
        n = len(self.items)
        stop, rest = None, None
        if self.cancel_at is not None and now >= self.cancel_at:
            stop, rest = self.cancel_at, "canceled"
        if self.expire_at is not None and now >= self.expire_at and \
                (stop is None or self.expire_at < stop):
            stop, rest = self.expire_at, "expired"
        if stop is not None:
            done = sum(1 for t in self.done_at if t <= stop)
            if done == n:
                return self.done_at[-1] if n else stop, n, None
            if rest == "canceled":
                return self.cancel_at + self.cancel_ms, done, rest
            return self.expire_at, done, rest
        done = sum(1 for t in self.done_at if t <= now)
        if done == n:
            return self.done_at[-1], n, None
        return None, done, None

    def results(self, now):
        ended, done, rest = self.cut(now)
        out = []
        for i, (cid, res) in enumerate(self.items):
            if i >= done:
                res = {"type": rest}
            out.append({"custom_id": cid, "result": res})
        return out

    def obj(self, now):
        ended, done, rest = self.cut(now)
        counts = {"processing": 0, "succeeded": 0, "errored": 0,
                  "canceled": 0, "expired": 0}
        for i, (_, res) in enumerate(self.items):
            if i < done:
                counts[res["type"]] += 1
            elif ended is not None and now >= ended:
                counts[rest] += 1
            else:
                counts["processing"] += 1
        if ended is not None and now >= ended:
            status = "ended"
        elif self.cancel_at is not None:
            status = "canceling"
        else:
            status = "in_progress"
        return {
            "id": self.id, "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "ended_at": rfc3339(ended) if status == "ended" else None,
            "created_at": rfc3339(self.created),
            "expires_at": rfc3339(self.created + 86400),
            "archived_at": None,
            "cancel_initiated_at": rfc3339(self.cancel_at)
            if self.cancel_at is not None else None,
            "results_url": "https://api.anthropic.com%s/%s/results"
            % (PREFIX, self.id) if status == "ended" else None,
        }

    def usage(self, now):
        """What the batch's succeeded requests used, summed"""
        tot = {"input_tokens": 0, "output_tokens": 0,
               "cache_creation_input_tokens": 0,
               "cache_read_input_tokens": 0}
        for line in self.results(now):
            r = line["result"]
            if r["type"] == "succeeded":
                for k in tot:
                    tot[k] += r["message"]["usage"].get(k, 0)
        return tot


def check_create(body, max_requests):
    """The 400's message for a create body, or None"""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    unknown = sorted(k for k in body if k != "requests")
    if unknown:
        return "%s: Extra inputs are not permitted" % unknown[0]
    reqs = body.get("requests")
    if reqs is None:
        return "requests: Field required"
    if not isinstance(reqs, list):
        return "requests: Input should be a valid list"
    if not reqs:
        return "requests: List should have at least 1 item after " \
               "validation, not 0"
    if len(reqs) > max_requests:
        return "requests: List should have at most %d items after " \
               "validation, not %d" % (max_requests, len(reqs))
    seen = set()
    for i, r in enumerate(reqs):
        if not isinstance(r, dict):
            return "requests.%d: Input should be a valid dictionary" % i
        for k in r:
            if k not in ("custom_id", "params"):
                return "requests.%d.%s: Extra inputs are not permitted" \
                    % (i, k)
        cid = r.get("custom_id")
        if cid is None:
            return "requests.%d.custom_id: Field required" % i
        if not isinstance(cid, str) or not CUSTOM_ID.match(cid):
            return "requests.%d.custom_id: String should match pattern " \
                   "'^[a-zA-Z0-9_-]{1,64}$'" % i
        if cid in seen:
            return "Duplicate custom_id: %s" % cid
        seen.add(cid)
        if "params" not in r:
            return "requests.%d.params: Field required" % i
        if not isinstance(r["params"], dict):
            return "requests.%d.params: Input should be a valid " \
                   "dictionary" % i
    return None


class Batches:
    """Served for the Mock (its send_error, send_json_ok, base_headers,
    finish, org_of and config); the batches in its State."""

    def __init__(self, mock):
        self.mock = mock

    def owns(self, path):
        return path == PREFIX or path.startswith(PREFIX + "/")

    # ------------------------------------------------------------ helpers

    def err(self, a, status, etype, msg, **kw):
        conn, req, entry, gen, cred = a
        return self.mock.send_error(conn, req, entry, gen, cred, status,
                                    etype, msg, **kw)

    def ok(self, a, obj, mode, mode_ms):
        conn, req, entry, gen, cred = a
        return self.mock.send_json_ok(conn, req, entry, gen, cred, obj, [],
                                      mode, mode_ms)

    def find(self, org, bid):
        b = self.mock.state.batches.get(bid)
        if b is None or b.org != org or b.deleted:
            return None
        return b

    def result_of(self, cred, seq, i, params):
        """One request as the Messages API would answer it"""
        s = self.mock.config.settings(cred)
        if params.get("stream") is True:
            msg = "stream: Streaming is not supported in the Batches API"
        elif not isinstance(params.get("model"), str) or \
                not params.get("model"):
            msg = "model: Field required"
        else:
            msg = validate_request(params, False)
        if msg is None:
            try:
                total, _ = analyse_prompt(params)
            except (ValueError, TypeError, RecursionError) as e:
                msg = "mock: cannot analyse prompt: %s" % e
        if msg is not None:
            return {"type": "errored", "error": {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": msg}}}
        out = int(num(s.get("output_tokens"), 12, 0))
        stop = "end_turn"
        mt = params.get("max_tokens")
        if isinstance(mt, int) and not isinstance(mt, bool) and out > mt:
            out, stop = mt, "max_tokens"
        words = self.mock.words
        text = "Hello from the mock batch (" + \
            " ".join(words[j % len(words)] for j in range(out)) + ")"
        return {"type": "succeeded", "message": {
            "id": "msg_mock_b%d_%d" % (seq, i), "type": "message",
            "role": "assistant", "model": params["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": total,
                      "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0,
                      "output_tokens": out}}}

    def admit(self, cred, now):
        """The batch operations' window: the seconds to wait, or 0"""
        st = self.mock.state
        limit = int(num(self.mock.config.settings(cred).get(
            "batch_requests_limit"), 50, 0))
        org = self.mock.org_of(cred)
        with st.lock:
            w = [t for t in st.batch_ops.get(org, ()) if t > now - WINDOW_S]
            if len(w) >= limit:
                st.batch_ops[org] = w
                return max(1, int(math.ceil(w[0] + WINDOW_S - now)))
            w.append(now)
            st.batch_ops[org] = w
        return 0

    # ------------------------------------------------------------ serve

    def serve(self, conn, req, entry, gen, cred, body, mode, mode_ms, now):
        a = (conn, req, entry, gen, cred)
        p = req.path
        rest = p[len(PREFIX):].strip("/").split("/") if p != PREFIX else []
        if len(rest) > 2 or (len(rest) == 2 and rest[1] not in
                             ("cancel", "results")):
            return self.err(a, 404, "not_found_error",
                            "Not found: %s %s" % (req.method, p))
        want = {0: ("GET", "POST"), 1: ("GET", "DELETE"),
                2: ("POST",) if rest[-1:] == ["cancel"] else ("GET",)}
        if req.method not in want[len(rest)]:
            return self.err(a, 405, "invalid_request_error",
                            "Method Not Allowed")
        wait = self.admit(cred, now)
        if wait:
            entry["refused"] = True
            return self.err(a, 429, "rate_limit_error",
                            "Number of Message Batches API requests has "
                            "exceeded your rate limit. Please try again "
                            "later.", retry_after=wait)
        org = self.mock.org_of(cred)
        if not rest:
            if req.method == "POST":
                return self.create(a, org, body, mode, mode_ms, now)
            return self.list(a, org, req, mode, mode_ms, now)
        entry["batch_id"] = rest[0]
        b = self.find(org, rest[0])
        if b is None:
            return self.err(a, 404, "not_found_error",
                            "message_batch not found: %s" % rest[0])
        if len(rest) == 1 and req.method == "GET":
            return self.ok(a, b.obj(now), mode, mode_ms)
        ended = b.obj(now)["processing_status"] == "ended"
        if len(rest) == 1:
            if not ended:
                return self.err(a, 400, "invalid_request_error",
                                "Message Batch %s cannot be deleted while "
                                "it is processing: cancel it first" % b.id)
            b.deleted = True
            return self.ok(a, {"id": b.id, "type": "message_batch_deleted"},
                           mode, mode_ms)
        if rest[1] == "cancel":
            if ended:
                return self.err(a, 400, "invalid_request_error",
                                "Message Batch %s has already ended"
                                % b.id)
            if b.cancel_at is None:
                b.cancel_at = now
            return self.ok(a, b.obj(now), mode, mode_ms)
        if not ended:
            return self.err(a, 400, "invalid_request_error",
                            "Message Batch %s has not ended yet: its "
                            "results are not available" % b.id)
        return self.results(a, b, now)

    def create(self, a, org, body, mode, mode_ms, now):
        conn, req, entry, gen, cred = a
        s = self.mock.config.settings(cred)
        if body is None:
            return self.err(a, 400, "invalid_request_error",
                            "There was an error parsing the body of your "
                            "request: invalid JSON")
        msg = check_create(body, int(num(s.get("batch_max_requests"),
                                         MAX_REQUESTS, 1)))
        if msg:
            return self.err(a, 400, "invalid_request_error", msg)
        seq = entry["seq"]
        reqs = body["requests"]
        n = len(reqs)
        span = num(s.get("batch_processing_ms"), 200, 0) / 1000.0
        items = [(r["custom_id"], self.result_of(cred, seq, i, r["params"]))
                 for i, r in enumerate(reqs)]
        done_at = [now + span * (i + 1) / n for i in range(n)]
        exp = s.get("batch_expire_ms")
        b = Batch("msgbatch_mock_%d_%d" % (self.mock.state.gen, seq), org,
                  cred, now, items, done_at,
                  now + num(exp, 0, 0) / 1000.0 if exp is not None else None)
        b.cancel_ms = num(s.get("batch_cancel_ms"), 100, 0) / 1000.0
        st = self.mock.state
        with st.lock:
            st.batches[b.id] = b
        entry["batch_id"] = b.id
        entry["batch_requests"] = n
        return self.ok(a, b.obj(now), mode, mode_ms)

    def list(self, a, org, req, mode, mode_ms, now):
        with self.mock.state.lock:
            mine = [b for b in self.mock.state.batches.values()
                    if b.org == org and not b.deleted]
        got = list_page(req.target, mine, "message_batch")
        if isinstance(got, str):
            return self.err(a, 400, "invalid_request_error", got)
        page, more = got
        obj = {"data": [b.obj(now) for b in page], "has_more": more,
               "first_id": page[0].id if page else None,
               "last_id": page[-1].id if page else None}
        return self.ok(a, obj, mode, mode_ms)

    def results(self, a, b, now):
        conn, req, entry, gen, cred = a
        lines = b.results(now)
        # a fault for the reader to survive: the first lines cut short,
        # each no longer a result
        bad = int(num(self.mock.config.top("batch_results_unreadable"), 0, 0))
        body = b"".join((compact(ln)[:20] if i < bad else compact(ln)).encode()
                        + b"\n" for i, ln in enumerate(lines))
        headers = self.mock.base_headers(entry, "application/binary", cred)
        # chunked to HTTP/1.1; to HTTP/1.0, which cannot take it, the body
        # ends with the connection (RFC 9112, 6.1)
        framed = req.version == "HTTP/1.1"
        if framed:
            headers.append(("transfer-encoding", "chunked"))
        if not req.keep_alive or not framed:
            headers.append(("connection", "close"))
        entry["status"] = 200
        entry["batch_results"] = len(lines)
        entry["version"] = req.version
        self.mock.finish(entry, gen, body)
        # the head and the body's first piece in one write, as a server
        # answering from memory does: a reader may have both, and more
        # behind them, in its first read
        out = response_head(200, headers)
        for i in range(0, len(body), RESULT_CHUNK):
            piece = body[i:i + RESULT_CHUNK]
            conn.send(out + (chunk(piece) if framed else piece))
            out = b""
        if out:
            conn.send(out)
        if not framed:
            return False
        conn.send(b"0\r\n\r\n")
        return req.keep_alive

    # ------------------------------------------------------------ control

    def end_now(self, bid, now, forget=False):
        """/_mock/batches/<id>/end: the requests not done yet done now;
        /forget: the batch gone, as the API forgets one past its keeping
        (every operation on it a 404 from then on)"""
        with self.mock.state.lock:
            b = self.mock.state.batches.get(bid)
            if b is None:
                return False
            if forget:
                b.deleted = True
            else:
                b.done_at = [min(t, now) for t in b.done_at]
        return True

    def report(self, now):
        """/_mock/batches: every batch, its organisation and usage"""
        with self.mock.state.lock:
            every = list(self.mock.state.batches.values())
        return {"batches": [dict(b.obj(now), org=b.org, deleted=b.deleted,
                                 usage=b.usage(now)) for b in every]}
