"""
What the benchmarks share: start and stop the mock upstream and an nginx
with the module in a private prefix, free ports, small HTTP helpers.
Python 3 standard library only.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

# the nginx to start: make test-asan names a wrapper that preloads the
# sanitizer runtimes into nginx alone
NGINX = os.environ.get("TEST_NGINX_BINARY") or "nginx"

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(cond, secs, what):
    deadline = time.monotonic() + secs
    delay = 0.005
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    raise RuntimeError("timed out waiting for %s" % what)


def wait_listening(port, secs, what):
    def up():
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return True
        except OSError:
            return False
    wait_for(up, secs, what)


class Mock:
    """t/mock/mock.py on n free ports."""

    def __init__(self, workdir, n, config=None):
        self.dir = os.path.join(workdir, "mock")
        os.makedirs(self.dir, exist_ok=True)
        ready = os.path.join(self.dir, "ready")
        for f in ("ready", "pid"):
            try:
                os.unlink(os.path.join(self.dir, f))
            except FileNotFoundError:
                pass
        cmd = [sys.executable, os.path.join(TOP, "t", "mock", "mock.py")]
        for _ in range(n):
            cmd += ["--listen", "127.0.0.1:0"]
        cmd += ["--log", os.path.join(self.dir, "log.jsonl"),
                "--pidfile", os.path.join(self.dir, "pid"),
                "--ready-file", ready]
        if config is not None:
            cfg = os.path.join(self.dir, "config.json")
            with open(cfg, "w") as f:
                json.dump(config, f)
            cmd += ["--config", cfg]
        self.out = open(os.path.join(self.dir, "stderr"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.out)
        wait_for(lambda: os.path.exists(ready), 10, "the mock")
        with open(ready) as f:
            self.ports = [int(ln.rsplit(":", 1)[1]) for ln in f.read().split()]

    def control(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.ports[0], timeout=30)
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data,
                  headers={"content-type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        c.close()
        return json.loads(raw) if raw else None

    def log(self):
        return self.control("GET", "/_mock/log")

    def reset(self):
        self.control("POST", "/_mock/reset")

    def stats(self):
        return self.control("GET", "/_mock/stats")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


class Redis:
    """Debian's redis-server on a free port, no persistence."""

    def __init__(self, workdir):
        self.dir = os.path.join(workdir, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.log = open(os.path.join(self.dir, "redis.log"), "w")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir,
             "--daemonize", "no"], stdout=self.log, stderr=self.log)
        wait_listening(self.port, 10, "redis-server")

    def pids(self):
        return [self.proc.pid]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Nginx:
    """Debian's nginx with the module, master + workers, in a prefix."""

    def __init__(self, workdir, module, http_conf, workers=2, port=None,
                 files=None, name="gw"):
        self.prefix = os.path.join(workdir, name)
        shutil.rmtree(self.prefix, ignore_errors=True)
        os.makedirs(os.path.join(self.prefix, "conf"))
        os.makedirs(os.path.join(self.prefix, "logs"))
        os.chmod(self.prefix, 0o755)
        p = self.prefix
        while p != "/":
            # workers run as nobody: every directory up must be searchable
            try:
                os.chmod(p, os.stat(p).st_mode | 0o011)
            except PermissionError:
                break
            p = os.path.dirname(p)
        self.port = port or free_port()
        for name_, text in (files or {}).items():
            with open(os.path.join(self.prefix, "conf", name_), "w") as f:
                f.write(text)
        load = "load_module %s;\n" % module if module else ""
        conf = """%s
worker_processes %d;
error_log logs/error.log warn;
pid logs/nginx.pid;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path client_body_temp;
    proxy_temp_path proxy_temp;
    fastcgi_temp_path fastcgi_temp;
    uwsgi_temp_path uwsgi_temp;
    scgi_temp_path scgi_temp;
%s
}
""" % (load, workers, http_conf.replace("@PORT@", str(self.port)))
        with open(os.path.join(self.prefix, "conf", "nginx.conf"), "w") as f:
            f.write(conf)
        r = subprocess.run([NGINX, "-p", self.prefix + "/", "-c",
                            "conf/nginx.conf", "-t", "-q"],
                           capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError("nginx -t: " + r.stderr)
        subprocess.run([NGINX, "-p", self.prefix + "/", "-c",
                        "conf/nginx.conf"], check=True)
        pidf = os.path.join(self.prefix, "logs", "nginx.pid")
        wait_for(lambda: os.path.exists(pidf), 10, "nginx")
        wait_listening(self.port, 10, "nginx listening")

    def pids(self):
        with open(os.path.join(self.prefix, "logs", "nginx.pid")) as f:
            master = int(f.read())
        out = subprocess.run(["pgrep", "-P", str(master)],
                             capture_output=True, text=True).stdout.split()
        return [master] + [int(x) for x in out]

    def stop(self):
        pidf = os.path.join(self.prefix, "logs", "nginx.pid")
        try:
            with open(pidf) as f:
                pid = int(f.read())
        except (FileNotFoundError, ValueError):
            return
        try:
            os.kill(pid, signal.SIGQUIT)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)

    def errors(self):
        with open(os.path.join(self.prefix, "logs", "error.log")) as f:
            return [ln for ln in f
                    if "[alert]" in ln or "[crit]" in ln or "[emerg]" in ln
                    or "signal" in ln]


def request(port, method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body.encode() if isinstance(body, str) else body
    c.request(method, path, body=data, headers=headers or {})
    r = c.getresponse()
    raw = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, raw
