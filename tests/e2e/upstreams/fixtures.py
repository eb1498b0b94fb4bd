"""Pytest fixtures that start upstreams for the reverse-proxy tests.

Loaded by tests/e2e/conftest.py. Each fixture stops what it started at the
test's teardown. Readiness is a "READY <port>" line on stdout (our own
servers) or a successful connect (Node.js, nginx), polled with a deadline.

  upstream_app(name="a", health_file=None, unix=None, delay=0.0, port=0) -> Upstream
      the aiohttp app (app.py). Upstream: .name .host .port .addr (as the
      `servers:` list writes it: "127.0.0.1:PORT" or "unix:/path") .url
      .health_file; .conns() (GET /conns directly, see app.Connections),
      .get(path) (a direct request: (status, headers, body)), .release(key)
      (ends the requests held on /hold/KEY), .open_seqs() (the X-Conn-Seq of
      each proxied connection open now), .set_health(ok),
      .stop() (the server dies: connections refused), .start() (again, on
      the same port), .log() (its stderr)
  raw_upstream -> RawUpstream: .port .addr .url (raw.py, canned answers)
  fault_proxy(target) -> FaultProxy, started, in front of `target` (an
      Upstream, a (host, port) pair or a port on 127.0.0.1)
  node_upstream -> ExternalUpstream: `node bench/apps/hello.js PORT`
      ("hello world"); fails when node is not installed
  nginx_upstream -> ExternalUpstream: nginx answering 200 "hello from nginx\\n"
      on every path; fails when the nginx binary is missing
"""
from __future__ import annotations

import http.client
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tests.e2e.ports import free_port  # noqa: F401  (re-exported)
from tests.e2e.upstreams.faultproxy import FaultProxy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DIRECT = {"X-Test-Direct": "1"}


def _read_log(path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def start_until_ready(cmd, log_path, timeout=20.0, env=None) -> tuple[subprocess.Popen, str]:
    """Starts `cmd` (stderr to `log_path`) and returns (process, the rest of
    its "READY ..." line) once that line is on its stdout."""
    log = open(log_path, "ab")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, env=env)
    log.close()
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while True:
        if b"\n" in buf:
            line, _, buf = buf.partition(b"\n")
            if line.startswith(b"READY"):
                return proc, line[5:].decode().strip()
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            stop_process(proc)
            raise AssertionError(f"{cmd}: no READY within {timeout}s:\n{_read_log(log_path)}")
        r, _, _ = select.select([fd], [], [], min(left, 0.5))
        if r:
            chunk = os.read(fd, 4096)
            if not chunk:
                proc.wait(5)
                raise AssertionError(f"{cmd}: exited ({proc.returncode}) before READY:\n"
                                     f"{_read_log(log_path)}")
            buf += chunk


def wait_connectable(host, port, proc=None, timeout=20.0, what="upstream"):
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what} exited ({proc.returncode}) before listening")
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not listening on {host}:{port} after {timeout}s")
        time.sleep(0.02)


def stop_process(proc, sig=signal.SIGTERM, timeout=5.0):
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    finally:
        if proc.stdout:
            proc.stdout.close()


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class Upstream:
    """One app.py process (see the module docstring)."""

    def __init__(self, name, workdir, health_file=None, unix=None, delay=0.0, port=0,
                 host="127.0.0.1"):
        self.name = name
        self.host = host
        self.port = port
        self.unix = unix
        self.delay = delay
        self.health_file = str(health_file or os.path.join(workdir, f"health-{name}"))
        self.log_path = os.path.join(workdir, f"upstream-{name}.log")
        self.proc = None

    @property
    def addr(self) -> str:
        return f"unix:{self.unix}" if self.unix else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return "http://localhost" if self.unix else f"http://{self.host}:{self.port}"

    def start(self) -> "Upstream":
        cmd = [sys.executable, "-m", "tests.e2e.upstreams.app", "--name", self.name,
               "--host", self.host, "--port", str(self.port),
               "--health-file", self.health_file]
        if self.unix:
            if os.path.exists(self.unix):
                os.unlink(self.unix)
            cmd += ["--unix", self.unix]
        if self.delay:
            cmd += ["--delay", str(self.delay)]
        self.proc, where = start_until_ready(cmd, self.log_path)
        if not self.unix:
            self.port = int(where)
        return self

    def stop(self):
        """The server goes away: its port refuses connections afterwards."""
        stop_process(self.proc)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return _read_log(self.log_path)

    def set_health(self, ok: bool):
        """/healthz answers 200 (ok) or 503 (not ok) from the next request on."""
        if ok:
            try:
                os.unlink(self.health_file)
            except FileNotFoundError:
                pass
        else:
            with open(self.health_file + ".tmp", "w") as f:
                f.write("down")
            os.replace(self.health_file + ".tmp", self.health_file)

    def _conn(self, timeout=10):
        if self.unix:
            return _UnixHTTPConnection(self.unix, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def get(self, path, method="GET", headers=None, body=None, timeout=10):
        """A request straight to this server (not through scalwsd), marked
        direct so that conns() leaves its connection out."""
        c = self._conn(timeout)
        try:
            c.request(method, path, body=body, headers={**DIRECT, **(headers or {})})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def conns(self) -> dict:
        """{"connections", "active", "requests", "accepted", "open"}: see
        app.Connections; the first three leave out direct connections."""
        status, _, body = self.get("/conns")
        assert status == 200, (status, body)
        return json.loads(body)

    def release(self, key) -> int:
        """Answers the requests held on /hold/KEY (and any later ones); returns
        how many were waiting."""
        status, _, body = self.get(f"/release/{key}")
        assert status == 200, (status, body)
        return json.loads(body)["held"]

    def open_seqs(self) -> list[int]:
        """The X-Conn-Seq of every proxied connection open now."""
        return self.conns()["open_seqs"]

    def wait_conns(self, key, pred, timeout=5.0, what=""):
        """Polls conns() until pred(conns()[key]); returns the last value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.conns()[key]
            if pred(value):
                return value
            if time.monotonic() >= deadline:
                raise AssertionError(f"{self.name}: {key} = {value} after {timeout}s {what}")
            time.sleep(0.02)

    def __repr__(self):
        return f"<Upstream {self.name} {self.addr}>"


class RawUpstream:
    def __init__(self, workdir):
        self.host = "127.0.0.1"
        self.port = 0
        self.log_path = os.path.join(workdir, "upstream-raw.log")
        self.proc = None

    @property
    def addr(self):
        return f"{self.host}:{self.port}"

    @property
    def url(self):
        return f"http://{self.addr}"

    def start(self):
        self.proc, where = start_until_ready(
            [sys.executable, "-m", "tests.e2e.upstreams.raw", "--port", "0"], self.log_path)
        self.port = int(where)
        return self

    def stop(self):
        stop_process(self.proc)


class ExternalUpstream:
    def __init__(self, name, port, proc, log_path):
        self.name, self.host, self.port, self.proc, self.log_path = \
            name, "127.0.0.1", port, proc, log_path

    @property
    def addr(self):
        return f"{self.host}:{self.port}"

    @property
    def url(self):
        return f"http://{self.addr}"

    def log(self):
        return _read_log(self.log_path)


@pytest.fixture
def upstream_app(tmp_path):
    started = []
    sockdir = tempfile.mkdtemp(prefix="sws-up-")  # short: AF_UNIX paths are <= 107 bytes
    os.chmod(sockdir, 0o755)   # scalwsd's workers (nobody, when the tests run as root) connect

    def make(name="a", health_file=None, unix=None, delay=0.0, port=0) -> Upstream:
        if unix is True:
            unix = os.path.join(sockdir, f"{name}.sock")
        up = Upstream(name, str(tmp_path), health_file=health_file, unix=unix,
                      delay=delay, port=port)
        started.append(up)
        return up.start()

    yield make
    for up in started:
        up.stop()
    shutil.rmtree(sockdir, ignore_errors=True)


@pytest.fixture
def raw_upstream(tmp_path):
    up = RawUpstream(str(tmp_path)).start()
    yield up
    up.stop()


@pytest.fixture
def fault_proxy():
    started = []

    def make(target, mode="pass") -> FaultProxy:
        if isinstance(target, int):
            host, port = "127.0.0.1", target
        elif isinstance(target, tuple):
            host, port = target
        else:
            host, port = target.host, target.port
        fp = FaultProxy(host, port).start()
        started.append(fp)
        if mode != "pass":
            fp.mode = mode
        return fp

    yield make
    for fp in started:
        fp.stop()


@pytest.fixture
def node_upstream(tmp_path):
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.fail("node (Node.js) is not installed: `make test` installs it (Makefile SYSPKGS)")
    port = free_port()
    log_path = str(tmp_path / "upstream-node.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([node, os.path.join(ROOT, "bench", "apps", "hello.js"), str(port)],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_connectable("127.0.0.1", port, proc, what="node hello.js")
    except AssertionError as e:
        stop_process(proc)
        raise AssertionError(f"{e}\n{_read_log(log_path)}")
    yield ExternalUpstream("node", port, proc, log_path)
    stop_process(proc)


def _nginx_binary():
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx")
         if os.access(p, os.X_OK)), None)


NGINX_CONF = """\
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
{temp_paths}
    keepalive_requests 100000;
    keepalive_timeout 75s;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            default_type text/plain;
            return 200 "hello from nginx\\n";
        }}
    }}
}}
"""


@pytest.fixture
def nginx_upstream(tmp_path):
    nginx = _nginx_binary()
    if nginx is None:
        pytest.fail("the nginx binary is not installed: `make test` installs it (Makefile SYSPKGS)")
    tmp = tmp_path / "nginx"
    tmp.mkdir()
    # Temp folders in the tmp folder, for the modules this build has (each
    # has its --http-*-temp-path configure flag; naming one for a module that
    # is compiled out is an "unknown directive").
    configure = subprocess.run([nginx, "-V"], capture_output=True, text=True).stderr
    temp_paths = "\n".join(
        f"    {name}_temp_path {tmp}/{name};"
        for name, flag in (("client_body", "client-body"), ("proxy", "proxy"),
                           ("fastcgi", "fastcgi"), ("uwsgi", "uwsgi"), ("scgi", "scgi"))
        if f"--http-{flag}-temp-path" in configure or name == "client_body")
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, temp_paths=temp_paths))
    log_path = str(tmp / "stderr.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([nginx, "-p", str(tmp), "-e", str(tmp / "nginx-error.log"),
                                 "-c", str(conf), "-g", "daemon off;"],
                                cwd=str(tmp), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_connectable("127.0.0.1", port, proc, what="nginx")
    except AssertionError as e:
        stop_process(proc)
        raise AssertionError(f"{e}\n{_read_log(log_path)}\n{_read_log(tmp / 'nginx-error.log')}")
    yield ExternalUpstream("nginx", port, proc, log_path)
    stop_process(proc, sig=signal.SIGQUIT, timeout=10)
