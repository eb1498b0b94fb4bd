"""End-to-end fixtures: real scalwsd processes from inline YAML on free ports.

`server(yaml)` writes the config (with `{port}`, `{port2}`, ... and `{tmp}`
filled in), starts `python -m scalws --config FILE`, and returns once the
master has logged that its workers are ready. At teardown every server still
running gets SIGTERM and must exit 0 within its shutdown timeout, with no
traceback in its error log.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tests.e2e.ports import free_port  # noqa: F401  (re-exported: tests import it from here)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Server:
    def __init__(self, config_path, log_path, ports, tmp):
        self.config_path = config_path
        self.log_path = log_path
        self.ports = ports
        self.port = ports[0]
        self.tmp = tmp
        self.proc = None

    expect_crashes = False  # set by a test that makes workers die on purpose

    def start(self, wait=True, env=None):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            os.environ.get("SCALWS_TEST_WRAP", "").split() +
            [sys.executable, "-m", "scalws", "--config", self.config_path],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env})
        if wait:
            self.wait_log("scalws started", timeout=15)
        return self

    @property
    def pid(self):
        return self.proc.pid

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_log(self, text, timeout=10.0, count=1):
        """Returns once `text` occurs `count` times in the error log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log().count(text) >= count:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"scalwsd exited ({self.proc.returncode}):\n{self.log()}")
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {text!r} in the log:\n{self.log()}")

    def workers(self) -> list[int]:
        """PIDs of the master's live children."""
        try:
            with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:
                return [int(p) for p in f.read().split()]
        except FileNotFoundError:
            return []

    def kill(self, sig):
        os.kill(self.pid, sig)

    def stop(self, sig=signal.SIGTERM, timeout=20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"scalwsd did not stop within {timeout}s:\n{self.log()}")
        self._log.close()
        return code


def traversable(path) -> None:
    """Lets every user walk through `path` and the folders above it (o+x,
    not o+r): scalwsd started as root runs its workers as `nobody`, which
    must reach what a test puts in pytest's 0700 folders (a symlink's
    target, a unix socket) as it would on a server."""
    path = os.path.abspath(path)
    while path not in ("/", "/tmp"):
        mode = os.stat(path).st_mode
        if mode & 0o001 == 0:
            os.chmod(path, mode | 0o001)
        path = os.path.dirname(path)


@pytest.fixture
def server(tmp_path):
    started = []
    traversable(tmp_path)

    def make(yaml_text, start=True, nports=3, **fmt):
        ports = [free_port() for _ in range(nports)]
        values = {"tmp": str(tmp_path), "port": ports[0]}
        values.update({f"port{i + 1}": p for i, p in enumerate(ports)})
        values.update(fmt)
        cfg = tmp_path / f"scalws-{len(started)}.yaml"
        cfg.write_text(textwrap.dedent(yaml_text).format(**values))
        srv = Server(str(cfg), str(tmp_path / f"error-{len(started)}.log"), ports, tmp_path)
        started.append(srv)
        if start:
            srv.start()
        return srv

    yield make
    for srv in started:
        if srv.proc is not None and srv.proc.poll() is None:
            code = srv.stop()
            assert code == 0, f"scalwsd exited {code}:\n{srv.log()}"
        if srv.proc is not None:
            log = srv.log()
            assert "Traceback" not in log, log
            # A worker that died by itself (not a test's SIGKILL) is a crash,
            # even when the master's restart hid it from the clients.
            crashes = [line for line in log.splitlines()
                       if "; restarting" in line and "signal 9 (SIGKILL)" not in line]
            assert not crashes or srv.expect_crashes, log


@pytest.fixture
def proxy_server(server):
    """proxy_server(servers, upstream=None, proxy=None, routes=(), top=None,
    workers=1) -> the started Server, configured by proxylib.proxy_yaml
    (the reverse proxy's tests, test_proxy*.py and test_batching.py)."""
    from tests.e2e.proxylib import proxy_yaml

    def make(servers, **kw):
        return server(proxy_yaml(servers, **kw))
    return make


def until(fn, timeout=10.0, what="condition"):
    """Polls fn() until it returns something true, and returns that: for
    state with no event to wait on (the shared counters, published at the
    end of each pass and tick)."""
    deadline = time.monotonic() + timeout
    v = None
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what} (last: {v!r})")


def cpu_seconds(pid: int) -> float:
    """CPU time the process has used (utime + stime), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def recv_to_close(sock) -> bytes:
    """Everything `sock` receives until the peer closes (or resets) it."""
    chunks = []
    while True:
        try:
            b = sock.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks)


def raw(port, data: bytes, host="127.0.0.1", timeout=5.0, shut=False) -> bytes:
    """Sends `data` on a new connection and reads until the server closes."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        return recv_to_close(s)


def read_response(sock, buf=b""):
    """Reads one Content-Length-framed response from `sock`.
    Returns (status, headers dict lowercased, body, leftover bytes)."""
    while b"\r\n\r\n" not in buf:
        b = sock.recv(65536)
        if not b:
            raise EOFError(f"connection closed mid-head: {buf!r}")
        buf += b
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", 0))
    while len(rest) < n:
        b = sock.recv(65536)
        if not b:
            raise EOFError("connection closed mid-body")
        rest += b
    return status, headers, rest[:n], rest[n:]


STATUS_RE = re.compile(rb"^HTTP/1\.1 (\d{3}) ", re.M)


def statuses(data: bytes) -> list[int]:
    return [int(m.group(1)) for m in STATUS_RE.finditer(data)]


# Upstreams for the reverse-proxy tests (test_proxy*.py): upstream_app,
# raw_upstream, fault_proxy, node_upstream, nginx_upstream.
from tests.e2e.upstreams.fixtures import (  # noqa: E402,F401
    fault_proxy, nginx_upstream, node_upstream, raw_upstream, upstream_app)
# FastCGI applications for test_fastcgi*.py: php_fpm, fcgi_responder.
from tests.e2e.upstreams.phpfpm import fcgi_responder, php_fpm  # noqa: E402,F401
