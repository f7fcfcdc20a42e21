"""The mock's scripting: which step a request meets (an x-mock-script
header, or a credential's configured behaviour, in turn), and the log
entry every request leaves for the tests to read back.  Standard library
only.
"""

import hashlib
import json
import time


class Scripting:
    """The failure scripting and the request log, a part of the Mock
    server."""

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

    def finish(self, entry, gen, body_sent):
        if body_sent is not None:
            entry["resp_len"] = len(body_sent)
            entry["resp_sha256"] = hashlib.sha256(body_sent).hexdigest()
        self.state.append_log(entry, gen)
