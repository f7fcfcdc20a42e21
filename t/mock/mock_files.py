"""The mock's Files API: what it keeps, checks and answers.

A file belongs to the organisation of the credential that uploaded it
(Mock.org_of): to any other organisation its id is unknown (404
not_found_error, as for an id that never existed), and so is a Messages
request that names it in a content block's source ({"type": "file",
"file_id": ...}).  Every request needs the beta header
anthropic-beta: files-api-2025-04-14.  An upload is multipart/form-data
with one part named "file" (its filename and content type kept); a body
cut short, a part missing or a file over files_max_bytes (500 MB) is
refused.  Uploaded files are not downloadable (GET .../content: 400), as
with the API, unless the credential's files_downloadable is true.
Standard library only.
"""

import hashlib
import re

from mock_api import num, rfc3339, list_page

PREFIX = "/v1/files"
BETA = "files-api-2025-04-14"
MAX_BYTES = 500 * 1024 * 1024


def file_ids(body):
    """Every file_id a Messages body names in a source of type file"""
    out = []

    def walk(v):
        if isinstance(v, dict):
            src = v.get("source")
            if isinstance(src, dict) and src.get("type") == "file" and \
                    isinstance(src.get("file_id"), str):
                out.append(src["file_id"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(body.get("messages"))
    walk(body.get("system"))
    return out


def multipart_file(ctype, body):
    """(filename, content type, data) of the part named "file", or an
    error's message"""
    m = re.match(r'multipart/form-data\s*;\s*boundary="?([^";]+)"?',
                 ctype or "", re.I)
    if not m:
        return "Content-Type must be multipart/form-data with a boundary"
    delim = b"--" + m.group(1).encode("latin-1")
    if not body.startswith(delim) or \
            body.rstrip(b"\r\n")[-len(delim) - 2:] != delim + b"--":
        return "the multipart body is cut short or malformed"
    for part in body.split(delim)[1:-1]:
        if not part.startswith(b"\r\n") or not part.endswith(b"\r\n"):
            return "the multipart body is malformed"
        head, sep, data = part[2:-2].partition(b"\r\n\r\n")
        if not sep:
            return "the multipart body is malformed"
        hdrs = {}
        for line in head.decode("latin-1").split("\r\n"):
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        disp = hdrs.get("content-disposition", "")
        name = re.search(r'\bname="([^"]*)"', disp)
        if not name or name.group(1) != "file":
            continue
        fn = re.search(r'\bfilename="([^"]*)"', disp)
        fname = fn.group(1) if fn else ""
        if not 1 <= len(fname) <= 500:
            return "file: a filename of 1 to 500 characters is required"
        return (fname, hdrs.get("content-type", "application/octet-stream"),
                data)
    return "file: Field required"


class File:
    def __init__(self, fid, org, created, name, mime, data, downloadable):
        self.id = fid
        self.org = org
        self.created = created
        self.name = name
        self.mime = mime
        self.data = data
        self.downloadable = downloadable
        self.deleted = False

    def obj(self):
        return {"id": self.id, "type": "file", "filename": self.name,
                "mime_type": self.mime[:255], "size_bytes": len(self.data),
                "created_at": rfc3339(self.created),
                "downloadable": self.downloadable}


class Files:
    """Served for the Mock (its send_error, send_json_ok, send_simple,
    org_of and config); the files in its State."""

    def __init__(self, mock):
        self.mock = mock

    def owns(self, path):
        return path == PREFIX or path.startswith(PREFIX + "/")

    def find(self, org, fid):
        f = self.mock.state.files.get(fid)
        if f is None or f.org != org or f.deleted:
            return None
        return f

    def unknown(self, cred, body):
        """The first file a Messages body names that this credential's
        organisation does not hold, or None"""
        if not isinstance(body, dict):
            return None
        org = self.mock.org_of(cred)
        with self.mock.state.lock:
            for fid in file_ids(body):
                if self.find(org, fid) is None:
                    return fid
        return None

    def serve(self, conn, req, entry, gen, cred, mode, mode_ms, now):
        def err(status, etype, msg):
            return self.mock.send_error(conn, req, entry, gen, cred, status,
                                        etype, msg, now=now)

        def ok(obj):
            return self.mock.send_json_ok(conn, req, entry, gen, cred, obj,
                                          [], mode, mode_ms)

        p = req.path
        rest = p[len(PREFIX):].strip("/").split("/") if p != PREFIX else []
        if len(rest) > 2 or (len(rest) == 2 and rest[1] != "content"):
            return err(404, "not_found_error",
                       "Not found: %s %s" % (req.method, p))
        want = {0: ("GET", "POST"), 1: ("GET", "DELETE"), 2: ("GET",)}
        if req.method not in want[len(rest)]:
            return err(405, "invalid_request_error", "Method Not Allowed")
        betas = ",".join(v for n, v in req.headers if n == "anthropic-beta")
        if BETA not in [b.strip() for b in betas.split(",")]:
            return err(400, "invalid_request_error",
                       "the Files API requires the header anthropic-beta: "
                       "%s" % BETA)
        st = self.mock.state
        org = self.mock.org_of(cred)
        s = self.mock.config.settings(cred)
        if not rest and req.method == "POST":
            got = multipart_file(req.header("content-type"), req.body)
            if isinstance(got, str):
                return err(400, "invalid_request_error", got)
            name, mime, data = got
            if len(data) > num(s.get("files_max_bytes"), MAX_BYTES, 0):
                return err(413, "request_too_large",
                           "file: larger than the Files API takes")
            f = File("file_mock_%d_%d" % (st.gen, entry["seq"]), org, now,
                     name, mime, data, s.get("files_downloadable") is True)
            with st.lock:
                st.files[f.id] = f
            entry["file_id"] = f.id
            entry["file_sha256"] = hashlib.sha256(data).hexdigest()
            return ok(f.obj())
        if not rest:
            return self.list(req, org, err, ok)
        entry["file_id"] = rest[0]
        with st.lock:
            f = self.find(org, rest[0])
        if f is None:
            return err(404, "not_found_error", "File not found: %s"
                       % rest[0])
        if len(rest) == 2:
            if not f.downloadable:
                return err(400, "invalid_request_error",
                           "File %s is not downloadable" % f.id)
            return self.mock.send_simple(conn, req, 200, f.data, f.mime)
        if req.method == "DELETE":
            f.deleted = True
            return ok({"id": f.id, "type": "file_deleted"})
        return ok(f.obj())

    def list(self, req, org, err, ok):
        with self.mock.state.lock:
            mine = [f for f in self.mock.state.files.values()
                    if f.org == org and not f.deleted]
        got = list_page(req.target, mine, "file")
        if isinstance(got, str):
            return err(400, "invalid_request_error", got)
        page, more = got
        return ok({"data": [f.obj() for f in page], "has_more": more,
                   "first_id": page[0].id if page else None,
                   "last_id": page[-1].id if page else None})
