"""
The mock's Amazon Bedrock and Google Vertex AI surfaces: what the gateway
must get right to be served by them, checked as the services check it.

Bedrock (InvokeModel, Anthropic's Messages body):
    POST /model/{modelId}/invoke
    POST /model/{modelId}/invoke-with-response-stream
  * SigV4 (AWS4-HMAC-SHA256, service bedrock): the signature recomputed
    with the key's secret from the canonical request of what arrived -
    the path as received, URI-encoded once more; the signed headers'
    values trimmed; the body's SHA-256 - and compared; x-amz-date within
    five minutes; the scope's date, region and service; the session
    token when the key has one.  Or a Bedrock API key as a bearer token.
  * the body: anthropic_version "bedrock-2023-05-31" (or one of
    bedrock.versions), no "model" and no "stream" (Bedrock refuses extra
    inputs), anthropic_beta a list of
    strings, then the Messages API's own checks.
  * the stream is AWS event-stream: frames with both CRC-32s, each
    payload {"bytes": base64(one Anthropic event)}; exceptions as
    exception frames; errors as x-amzn-ErrorType with {"message": ...}.
  * no anthropic-ratelimit-* headers: a window refusal is a 429
    ThrottlingException.

Vertex AI (rawPredict, Anthropic's Messages body):
    POST /v1/projects/{p}/locations/{l}/publishers/anthropic/models/{m}:rawPredict
    POST ...:streamRawPredict
  * Authorization: Bearer <a token the mock's token endpoint issued, not
    expired>, else 401 UNAUTHENTICATED.
  * the body: anthropic_version "vertex-2023-10-16" (or one of
    google.versions), no "model"; the
    Messages API's checks.  A stream is Anthropic's SSE as it is.
  * errors in Google's envelope {"error": {"code", "message", "status"}}:
    a window refusal is 429 RESOURCE_EXHAUSTED; a model's own errors
    (529 overloaded) in Anthropic's shape, as Vertex passes them on.

Google's token endpoint (POST google.token_path, default /token):
  * grant_type urn:ietf:params:oauth:grant-type:jwt-bearer, the assertion
    an RS256 JWT whose signature verifies with the service account's
    public key (google.keys: {client_email: {"n": hex, "e": int}}), its
    aud the endpoint's own URL (google.token_uri), its scope
    cloud-platform, iat no later than now and exp at most an hour after
    it and not past; then {"access_token", "expires_in": google.token_ttl
    (3600), "token_type": "Bearer"}.  google.token_behavior "500" or
    "garbage" makes it fail.

Python 3 standard library only.
"""

import base64
import binascii
import hashlib
import hmac
import json
import re
import struct
import time
import urllib.parse


BEDROCK_VERSION = "bedrock-2023-05-31"
VERTEX_VERSION = "vertex-2023-10-16"
JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
GOOGLE_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
SHA256_PREFIX = bytes.fromhex("3031300d060960864801650304020105000420")

# the mock's scripted steps, in Google's words
GOOGLE_ERRORS = {
    "429": (429, "RESOURCE_EXHAUSTED",
            "Quota exceeded for aiplatform.googleapis.com/"
            "online_prediction_requests_per_base_model with base model: "
            "anthropic-claude-sonnet."),
    "503": (503, "UNAVAILABLE", "The service is currently unavailable."),
    "500": (500, "INTERNAL", "Internal error encountered."),
    "400": (400, "INVALID_ARGUMENT", "mock: scripted invalid argument"),
    "403": (403, "PERMISSION_DENIED",
            "Permission 'aiplatform.endpoints.predict' denied on resource."),
    "404": (404, "NOT_FOUND",
            "Publisher Model `projects/p/locations/l/publishers/anthropic/"
            "models/m` not found."),
    "401": (401, "UNAUTHENTICATED",
            "Request had invalid authentication credentials."),
}

VERTEX_PATH = re.compile(r"^/v1/projects/([^/]+)/locations/([^/]+)/publishers/"
                         r"anthropic/models/([^/:]+):(rawPredict|"
                         r"streamRawPredict)$")
VERTEX_MODEL = re.compile(r"^claude-[a-z0-9.-]+(@\d{8})?$")
SIGV4_SKEW = 300
BEDROCK_ERROR_NS = ":http://internal.amazon.com/coral/com.amazon.bedrock/"

# the mock's scripted steps, as Bedrock says them
BEDROCK_ERRORS = {
    "429": (429, "ThrottlingException",
            "Too many requests, please wait before trying again."),
    "529": (429, "ModelNotReadyException",
            "Model is not ready to serve inference requests."),
    "503": (503, "ServiceUnavailableException",
            "Service Unavailable. Please try again later."),
    "500": (500, "InternalServerException",
            "The server encountered an internal error."),
    "400": (400, "ValidationException", "mock: scripted validation error"),
    "403": (403, "AccessDeniedException",
            "You don't have access to the model with the specified model "
            "ID."),
    "403-model": (403, "AccessDeniedException",
                  "You don't have access to the model with the specified "
                  "model ID."),
    "401": (403, "UnrecognizedClientException",
            "The security token included in the request is invalid."),
    "404": (404, "ResourceNotFoundException",
            "Could not resolve the foundation model from the provided "
            "model identifier."),
}

# an Anthropic error type as Bedrock's exception frame names it
BEDROCK_EXCEPTIONS = {
    "overloaded_error": "serviceUnavailableException",
    "rate_limit_error": "throttlingException",
    "api_error": "internalServerException",
}

MODEL_ID = re.compile(r"^((us|eu|apac|global)\.)?anthropic\.[a-z0-9.:-]+$"
                      r"|^arn:aws:bedrock:[a-z0-9-]+:\d*:"
                      r"(inference-profile|foundation-model)/[A-Za-z0-9.:/-]+$")

AUTH_RE = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/"
                     r"([a-z0-9-]+)/([a-z0-9-]+)/aws4_request, "
                     r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")


def _header(hdr, tb, value):
    n = hdr.encode()
    v = value.encode()
    return bytes([len(n)]) + n + bytes([tb]) + struct.pack(">H", len(v)) + v


def frame(message_type, event_type=None, exception_type=None, payload=b""):
    """One event-stream message: prelude, headers, payload, CRCs."""
    h = _header(":message-type", 7, message_type)
    if event_type:
        h += _header(":event-type", 7, event_type)
    if exception_type:
        h += _header(":exception-type", 7, exception_type)
    h += _header(":content-type", 7, "application/json")
    total = 16 + len(h) + len(payload)
    prelude = struct.pack(">II", total, len(h))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    msg = prelude + h + payload
    return msg + struct.pack(">I", binascii.crc32(msg))


def uri_encode(s, keep_slash):
    safe = "-._~" + ("/" if keep_slash else "")
    return urllib.parse.quote(s, safe=safe)


def canonical_query(qs):
    pairs = []
    for kv in qs.split("&"):
        if not kv:
            continue
        k, _, v = kv.partition("=")
        pairs.append((uri_encode(urllib.parse.unquote(k), False),
                      uri_encode(urllib.parse.unquote(v), False)))
    return "&".join("%s=%s" % p for p in sorted(pairs))


def sigv4_check(req, keys, region, service, now):
    """(access key, None) when the request is signed as AWS checks it,
    else (key or None, (status, exception, message))."""
    auth = req.header("authorization")
    if auth is None:
        return None, (403, "MissingAuthenticationTokenException",
                      "Missing Authentication Token")
    m = AUTH_RE.match(auth.strip())
    if not m:
        return None, (403, "IncompleteSignatureException",
                      "Authorization header requires 'Credential', "
                      "'SignedHeaders' and 'Signature' parameters.")
    akid, date, sregion, sservice, signed, sig = m.groups()
    key = keys.get(akid)
    if key is None:
        return akid, (403, "UnrecognizedClientException",
                      "The security token included in the request is "
                      "invalid.")
    secret = key["secret"] if isinstance(key, dict) else key
    token = key.get("session_token") if isinstance(key, dict) else None
    amz_date = req.header("x-amz-date") or ""
    try:
        t = time.mktime(time.strptime(amz_date, "%Y%m%dT%H%M%SZ")) \
            - time.timezone
    except ValueError:
        return akid, (403, "IncompleteSignatureException",
                      "x-amz-date is missing or not a date")
    if abs(now - t) > SIGV4_SKEW:
        return akid, (403, "InvalidSignatureException",
                      "Signature expired: %s is now earlier than ..."
                      % amz_date)
    if date != amz_date[:8] or sregion != region or sservice != service:
        return akid, (403, "InvalidSignatureException",
                      "Credential should be scoped to a valid region, and "
                      "service %s (%s %s)" % (service, sregion, sservice))
    names = signed.split(";")
    if names != sorted(names) or "host" not in names \
            or "x-amz-date" not in names:
        return akid, (403, "InvalidSignatureException",
                      "SignedHeaders must include host and x-amz-date, "
                      "sorted")
    if token is not None and (req.header("x-amz-security-token") != token
                              or "x-amz-security-token" not in names):
        return akid, (403, "UnrecognizedClientException",
                      "The security token included in the request is "
                      "invalid.")
    lines = []
    for n in names:
        vals = [v for k, v in req.headers if k == n]
        if not vals:
            return akid, (403, "InvalidSignatureException",
                          "signed header %s is missing" % n)
        lines.append("%s:%s" % (n, ",".join(
            " ".join(v.split()) for v in vals)))
    path, _, qs = req.target.partition("?")
    creq = "\n".join([req.method, uri_encode(path, True),
                      canonical_query(qs)] + lines
                     + ["", signed, hashlib.sha256(req.body).hexdigest()])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date,
                     "%s/%s/%s/aws4_request" % (date, region, service),
                     hashlib.sha256(creq.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    want = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, sig):
        return akid, (403, "InvalidSignatureException",
                      "The request signature we calculated does not match "
                      "the signature you provided.")
    return akid, None


class Platforms:
    def __init__(self, mock, helpers):
        self.mock = mock
        self.m = helpers        # mock.py's module: its helpers and tables
        self.state = mock.state
        self.config = mock.config

    # ------------------------------------------------------------ routing

    def google(self):
        return self.config.top("google") or {}

    def owns(self, req):
        return req.path.startswith("/model/") \
            or req.path.startswith("/v1/projects/") \
            or req.path == (self.google().get("token_path") or "/token")

    def serve(self, conn, req):
        if req.path.startswith("/model/"):
            return self.bedrock(conn, req)
        if req.path.startswith("/v1/projects/"):
            return self.vertex(conn, req)
        return self.token(conn, req)

    def base_headers(self, entry, ctype):
        if entry.get("platform") == "vertex":
            return [("date", self.mock_date()), ("server", "scaffolding on "
                     "HTTPServer2"), ("content-type", ctype),
                    ("x-vertex-ai-llm-request-type", "shared"),
                    ("x-goog-request-id", "mock-%d" % entry["seq"])]
        return [("date", self.mock_date()), ("server", "mock-bedrock"),
                ("content-type", ctype),
                ("x-amzn-requestid", "mock-%d" % entry["seq"]),
                ("x-amzn-bedrock-invocation-latency", "42")]

    def mock_date(self):
        return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())

    # ------------------------------------------------------------ bedrock

    def bedrock_error(self, conn, req, entry, gen, status, exc, msg):
        body = json.dumps({"message": msg}).encode()
        headers = self.base_headers(entry, "application/json")
        headers += [("x-amzn-errortype", exc + BEDROCK_ERROR_NS),
                    ("content-length", str(len(body)))]
        if not req.keep_alive:
            headers.append(("connection", "close"))
        entry["status"] = status
        entry["error_type"] = exc
        self.mock.finish(entry, gen, body)
        conn.send(self.m.response_head(status, headers) + body)
        return req.keep_alive

    def throttled(self, conn, req, entry, gen):
        if entry.get("platform") == "vertex":
            return self.google_error(conn, req, entry, gen,
                                     *GOOGLE_ERRORS["429"])
        return self.bedrock_error(conn, req, entry, gen,
                                  *BEDROCK_ERRORS["429"])

    def bedrock_event(self, name, data, usage):
        if name == "message_stop":
            data = dict(data)
            data["amazon-bedrock-invocationMetrics"] = {
                "inputTokenCount": usage["input_tokens"],
                "outputTokenCount": usage["output_tokens"],
                "invocationLatency": 42, "firstByteLatency": 21,
                "cacheReadInputTokenCount": usage["cache_read_input_tokens"],
                "cacheWriteInputTokenCount":
                    usage["cache_creation_input_tokens"]}
        raw = json.dumps(data, separators=(",", ":")).encode()
        payload = json.dumps({"bytes": base64.b64encode(raw).decode(),
                              "p": "abcdefghijklmnopqrstuvwxyz"[:len(raw) % 26]
                              }).encode()
        return frame("event", "chunk", None, payload)

    def bedrock_exception(self, etype, msg):
        exc = BEDROCK_EXCEPTIONS.get(etype, "internalServerException")
        return frame("exception", None, exc,
                     json.dumps({"message": msg}).encode())

    def step_ms(self, arg, default):
        try:
            v = float(arg)
            return v if 0 <= v < 600000 else default
        except ValueError:
            return default

    def corrupt(self, f):
        return f[:-1] + bytes([f[-1] ^ 0x5a])

    def bedrock(self, conn, req):
        m = self.m
        now = time.time()
        entry, gen, body = self.mock.new_entry(conn, req, now)
        entry["platform"] = "bedrock"

        cfg = self.config.top("bedrock") or {}
        keys = cfg.get("keys") or {}
        api_keys = cfg.get("api_keys") or []
        region = cfg.get("region") or "us-east-1"

        # ---- route: /model/{id}/invoke[-with-response-stream]
        mm = re.match(r"^/model/([^/]+)/(invoke|invoke-with-response-stream)$",
                      req.path)
        if not mm or req.method != "POST":
            return self.bedrock_error(conn, req, entry, gen, 404,
                                      "UnknownOperationException",
                                      "mock: no such operation %s %s"
                                      % (req.method, req.path))
        model = urllib.parse.unquote(mm.group(1))
        entry["model"] = model
        entry["stream"] = mm.group(2) == "invoke-with-response-stream"
        entry["query"] = req.target.partition("?")[2]

        # ---- authentication
        auth = (req.header("authorization") or "").strip()
        if auth[:7].lower() == "bearer ":
            cred = auth[7:].strip()
            entry["auth"] = "api_key"
            if cred not in api_keys:
                entry["credential"] = cred
                return self.bedrock_error(conn, req, entry, gen, 403,
                                          "UnrecognizedClientException",
                                          "Invalid API Key format: Must "
                                          "start with pre-defined prefix")
        else:
            cred, err = sigv4_check(req, keys, region, "bedrock", now)
            entry["auth"] = "sigv4"
            if err:
                entry["credential"] = cred
                return self.bedrock_error(conn, req, entry, gen, *err)
            with self.state.lock:
                # new_entry counted bearer credentials only
                self.state.cred_state(cred, now).requests += 1
        entry["credential"] = cred

        # ---- scripted errors, as Bedrock says them
        step = self.mock.choose_step(req, cred)
        entry["step"] = step
        name, _, arg = step.partition(":")
        if name == "slow-headers":
            time.sleep(self.step_ms(arg, 1000) / 1000.0)
            name = "ok"
        if name in BEDROCK_ERRORS:
            return self.bedrock_error(conn, req, entry, gen,
                                      *BEDROCK_ERRORS[name])
        if name == "reset":
            self.mock.finish(entry, gen, None)
            conn.abort()
            return False
        if name not in m.MESSAGE_STEPS:
            return self.bedrock_error(conn, req, entry, gen, 400,
                                      "ValidationException",
                                      "mock: unknown script step %r" % step)

        # ---- the model and the body
        if not MODEL_ID.match(model):
            return self.bedrock_error(conn, req, entry, gen, 400,
                                      "ValidationException",
                                      "The provided model identifier is "
                                      "invalid.")
        if not isinstance(body, dict):
            return self.bedrock_error(conn, req, entry, gen, 400,
                                      "ValidationException",
                                      "Malformed input request, please "
                                      "reformat your input and try again.")
        extra = [k for k in ("model", "stream") if k in body]
        if extra:
            return self.bedrock_error(conn, req, entry, gen, 400,
                                      "ValidationException",
                                      "Malformed input request: "
                                      "#: extraneous key [%s] is not "
                                      "permitted" % extra[0])
        entry["anthropic_version"] = body.get("anthropic_version")
        if body.get("anthropic_version") not in \
                (cfg.get("versions") or [BEDROCK_VERSION]):
            return self.bedrock_error(conn, req, entry, gen, 400,
                                      "ValidationException",
                                      "Malformed input request: "
                                      "anthropic_version: must be %s"
                                      % BEDROCK_VERSION)
        betas = body.get("anthropic_beta")
        if betas is not None and not (isinstance(betas, list) and all(
                isinstance(b, str) for b in betas)):
            return self.bedrock_error(conn, req, entry, gen, 400,
                                      "ValidationException",
                                      "anthropic_beta: expected a list of "
                                      "strings")
        entry["betas"] = betas
        checked = dict(body)
        del checked["anthropic_version"]
        checked.pop("anthropic_beta", None)
        checked["model"] = model
        err = m.validate_request(checked, False)
        if err:
            return self.bedrock_error(conn, req, entry, gen, 400,
                                      "ValidationException", err)
        try:
            total, bps = m.analyse_prompt(checked)
        except (ValueError, TypeError, RecursionError) as e:
            return self.bedrock_error(conn, req, entry, gen, 400,
                                      "ValidationException",
                                      "mock: cannot analyse prompt: %s" % e)
        mode_ms = 1000.0
        try:
            mode_ms = float(arg) if arg else 1000.0
        except ValueError:
            pass
        return self.mock.messages(conn, req, entry, gen, cred, checked,
                                  model, total, bps, name, mode_ms, now)

    # ------------------------------------------------------------ google

    def send(self, conn, req, entry, gen, status, body, ctype="application/json"):
        headers = self.base_headers(entry, ctype)
        headers.append(("content-length", str(len(body))))
        if not req.keep_alive:
            headers.append(("connection", "close"))
        entry["status"] = status
        self.mock.finish(entry, gen, body)
        conn.send(self.m.response_head(status, headers) + body)
        return req.keep_alive

    def google_error(self, conn, req, entry, gen, status, gstatus, msg):
        body = json.dumps({"error": {"code": status, "message": msg,
                                     "status": gstatus}}).encode()
        entry["error_type"] = gstatus
        return self.send(conn, req, entry, gen, status, body)

    def token(self, conn, req):
        now = time.time()
        entry, gen, _ = self.mock.new_entry(conn, req, now)
        entry["platform"] = "google-token"
        g = self.google()

        def refuse(status, error, desc):
            body = json.dumps({"error": error,
                               "error_description": desc}).encode()
            entry["error_type"] = error
            return self.send(conn, req, entry, gen, status, body)

        beh = g.get("token_behavior")
        if beh == "500":
            return refuse(500, "internal_failure", "mock: scripted")
        if beh == "garbage":
            return self.send(conn, req, entry, gen, 200, b"<html>no</html>",
                             "text/html")
        if req.method != "POST":
            return refuse(405, "invalid_request", "POST only")
        form = urllib.parse.parse_qs(req.body.decode("latin-1"),
                                     keep_blank_values=True)
        if form.get("grant_type") != [JWT_GRANT]:
            return refuse(400, "unsupported_grant_type",
                          "Invalid grant_type: %r" % form.get("grant_type"))
        jwt = (form.get("assertion") or [""])[0]
        parts = jwt.split(".")
        if len(parts) != 3:
            return refuse(400, "invalid_grant", "Invalid JWT: not three parts")

        def unb64(x):
            return base64.urlsafe_b64decode(x + "=" * (-len(x) % 4))
        try:
            header = json.loads(unb64(parts[0]))
            claims = json.loads(unb64(parts[1]))
            sig = unb64(parts[2])
        except (ValueError, binascii.Error):
            return refuse(400, "invalid_grant", "Invalid JWT: not base64url "
                          "JSON")
        if header.get("alg") != "RS256":
            return refuse(400, "invalid_grant", "Invalid JWT: alg must be "
                          "RS256")
        iss = claims.get("iss")
        key = (g.get("keys") or {}).get(iss)
        entry["credential"] = iss
        if key is None:
            return refuse(400, "invalid_grant", "Invalid JWT: no such "
                          "service account %r" % iss)
        n = int(key["n"], 16)
        e = int(key.get("e", 65537))
        k = (n.bit_length() + 7) // 8
        digest = hashlib.sha256((parts[0] + "." + parts[1]).encode()).digest()
        t = SHA256_PREFIX + digest
        want = b"\x00\x01" + b"\xff" * (k - 3 - len(t)) + b"\x00" + t
        got = pow(int.from_bytes(sig, "big"), e, n).to_bytes(k, "big") \
            if len(sig) == k else b""
        if not hmac.compare_digest(got, want):
            return refuse(400, "invalid_grant", "Invalid JWT Signature.")
        if claims.get("aud") != g.get("token_uri"):
            return refuse(400, "invalid_grant", "Invalid JWT: aud %r is not "
                          "%r" % (claims.get("aud"), g.get("token_uri")))
        if GOOGLE_SCOPE not in str(claims.get("scope", "")).split():
            return refuse(400, "invalid_scope", "Invalid scope")
        iat, exp = claims.get("iat"), claims.get("exp")
        if not isinstance(iat, int) or not isinstance(exp, int) \
                or iat > now + 60 or exp <= now or exp - iat > 3600:
            return refuse(400, "invalid_grant", "Invalid JWT: Token must be "
                          "a short-lived token (60 minutes) and in a "
                          "reasonable timeframe.")
        ttl = int(g.get("token_ttl") or 3600)
        with self.state.lock:
            tokens = self.state.__dict__.setdefault("google_tokens", {})
            tok = "ya29.mock-%d-%s" % (entry["seq"],
                                       hashlib.sha256(sig).hexdigest()[:16])
            tokens[tok] = (iss, now + ttl)
        body = json.dumps({"access_token": tok, "expires_in": ttl,
                           "token_type": "Bearer"}).encode()
        return self.send(conn, req, entry, gen, 200, body)

    # ------------------------------------------------------------ vertex

    def vertex(self, conn, req):
        m = self.m
        now = time.time()
        entry, gen, body = self.mock.new_entry(conn, req, now)
        entry["platform"] = "vertex"

        mm = VERTEX_PATH.match(req.path)
        if not mm or req.method != "POST":
            return self.google_error(conn, req, entry, gen, 404, "NOT_FOUND",
                                     "mock: no such method %s %s"
                                     % (req.method, req.path))
        project, location, model, action = mm.groups()
        model = urllib.parse.unquote(model)
        entry["model"] = model
        entry["project"] = project
        entry["location"] = location
        entry["stream"] = action == "streamRawPredict"
        entry["query"] = req.target.partition("?")[2]

        auth = (req.header("authorization") or "").strip()
        tok = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        with self.state.lock:
            tokens = self.state.__dict__.get("google_tokens", {})
            who = tokens.get(tok)
        entry["token"] = tok
        if who is None or who[1] <= now:
            entry["credential"] = tok
            return self.google_error(conn, req, entry, gen,
                                     *GOOGLE_ERRORS["401"])
        cred = who[0]
        entry["credential"] = cred
        with self.state.lock:
            self.state.cred_state(cred, now).requests += 1
        want = self.google().get("project")
        if want and project != want:
            return self.google_error(conn, req, entry, gen, 403,
                                     "PERMISSION_DENIED",
                                     "Permission denied on project %s"
                                     % project)

        step = self.mock.choose_step(req, cred)
        entry["step"] = step
        name, _, arg = step.partition(":")
        if name == "slow-headers":
            time.sleep(self.step_ms(arg, 1000) / 1000.0)
            name = "ok"
        if name in GOOGLE_ERRORS:
            return self.google_error(conn, req, entry, gen,
                                     *GOOGLE_ERRORS[name])
        if name == "529":
            # the model's own error, passed on in Anthropic's shape
            body = json.dumps(m.error_obj("overloaded_error", "Overloaded",
                                          entry["seq"])).encode()
            entry["error_type"] = "overloaded_error"
            return self.send(conn, req, entry, gen, 529, body)
        if name not in m.MESSAGE_STEPS:
            return self.google_error(conn, req, entry, gen, 400,
                                     "INVALID_ARGUMENT",
                                     "mock: unknown script step %r" % step)

        if not VERTEX_MODEL.match(model):
            return self.google_error(conn, req, entry, gen, *GOOGLE_ERRORS["404"])
        if not isinstance(body, dict):
            return self.google_error(conn, req, entry, gen, 400,
                                     "INVALID_ARGUMENT",
                                     "Invalid JSON payload received.")
        if "model" in body:
            return self.google_error(conn, req, entry, gen, 400,
                                     "INVALID_ARGUMENT",
                                     "Invalid JSON payload received. Unknown "
                                     "name \"model\": Cannot find field.")
        entry["anthropic_version"] = body.get("anthropic_version")
        if body.get("anthropic_version") not in \
                (self.google().get("versions") or [VERTEX_VERSION]):
            return self.google_error(conn, req, entry, gen, 400,
                                     "INVALID_ARGUMENT",
                                     "anthropic_version: must be %s"
                                     % VERTEX_VERSION)
        if entry["stream"] != (body.get("stream") is True):
            return self.google_error(conn, req, entry, gen, 400,
                                     "INVALID_ARGUMENT",
                                     "streamRawPredict takes \"stream\": true "
                                     "and rawPredict does not")
        entry["betas"] = req.header("anthropic-beta")
        checked = dict(body)
        del checked["anthropic_version"]
        checked["model"] = model
        err = m.validate_request(checked, False)
        if err:
            body = json.dumps(m.error_obj("invalid_request_error", err,
                                          entry["seq"])).encode()
            entry["error_type"] = "invalid_request_error"
            return self.send(conn, req, entry, gen, 400, body)
        try:
            total, bps = m.analyse_prompt(checked)
        except (ValueError, TypeError, RecursionError) as e:
            return self.google_error(conn, req, entry, gen, 400,
                                     "INVALID_ARGUMENT",
                                     "mock: cannot analyse prompt: %s" % e)
        mode_ms = 1000.0
        try:
            mode_ms = float(arg) if arg else 1000.0
        except ValueError:
            pass
        return self.mock.messages(conn, req, entry, gen, cred, checked,
                                  model, total, bps, name, mode_ms, now)
