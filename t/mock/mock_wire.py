"""The mock's wire: HTTP/1.1 over raw sockets, as the tests need it.

Requests read with their exact framing (Content-Length, chunked, limits on
lines, headers and bodies; a peer that goes away), and responses written
head by head, so a test can script keep-alive, chunking, half-sent bodies
and abrupt closes that http.server would not allow.  Standard library only.
"""

import socket
import time


MAX_LINE = 65536                 # request line / header line / chunk line
MAX_HEADERS = 256
MAX_HEADER_BYTES = 256 * 1024

TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789"
                        "abcdefghijklmnopqrstuvwxyz"
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZ")

REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized",
    402: "Payment Required", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
    413: "Request Entity Too Large", 422: "Unprocessable Entity",
    429: "Too Many Requests", 500: "Internal Server Error",
    502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
    529: "Overloaded",
}


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


def read_request(conn, limits):
    """A Request, or None at a clean EOF between requests.  limits: the
    most a body may have, by path prefix (None: any other path)."""
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
    max_body = limits[None]
    for prefix, most in limits.items():
        if prefix and (req.path == prefix
                       or req.path.startswith(prefix + "/")):
            max_body = most

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
