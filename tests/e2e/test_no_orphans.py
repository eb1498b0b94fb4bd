"""No orphans, no twins (issue 30, point 3): the master's children notice its
death and stop after finishing what they serve; a second master for the same
pid file, or on an address another server listens on, refuses to start; a
pid file left by a dead master is taken over.
"""
from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.e2e.conftest import ROOT, free_port

CONF = """
workers: 2
pid: "{tmp}/scalwsd.pid"
shutdown_timeout: 10s
log: {{level: info}}
status: {{listen: "127.0.0.1:{port3}"}}
upstreams:
  up: {{servers: ["{up}"]}}
sites:
  - listen: ["127.0.0.1:{port} tls", "127.0.0.1:{port2}"]
    tls: {{cert: "{cert}", key: "{key}"}}
    routes:
      - {{path: /up/, proxy: {{upstream: up, strip_prefix: /up}}}}
      - {{path: /, respond: {{body: "ok\\n"}}}}
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from tests.tlspki import PKI
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


def start(server, pki, upstream_app, **kw):
    up = upstream_app()
    srv = server(CONF, up=up.addr, cert=pki.ec.cert_path, key=pki.ec.key_path, **kw)
    srv.up = up
    return srv


def _alive(pid) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _refused(port) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except ConnectionRefusedError:
        return True


def test_kill_9_of_the_master_stops_every_child_after_its_requests(server, pki, upstream_app):
    srv = start(server, pki, upstream_app)
    children = srv.workers()
    assert len(children) == 4  # two workers, the TLS keeper, the status process
    # a request in flight on a worker when the master dies
    result = {}

    def slow():
        c = http.client.HTTPConnection("127.0.0.1", srv.ports[1], timeout=15)
        c.request("GET", "/up/hold/k1")
        r = c.getresponse()
        result["got"] = (r.status, r.read())

    t = threading.Thread(target=slow)
    t.start()
    srv.up.wait_conns("active", lambda n: n >= 1, what="(the held request)")
    os.kill(srv.pid, signal.SIGKILL)
    srv.proc.wait(5)
    # the workers stopped accepting at once: new connections are refused
    # (their listening sockets closed with the master's)
    _wait(lambda: _refused(srv.ports[1]), 5, "a new connection was still accepted")
    # the request in flight finishes
    assert srv.up.release("k1") == 1
    t.join(10)
    assert result.get("got") == (200, b"released k1")
    _wait(lambda: not any(_alive(p) for p in children), 10,
          f"children outlived the master: {[p for p in children if _alive(p)]}")
    assert "the master (pid %d) is gone" % srv.pid in srv.log()
    srv.expect_crashes = True   # the master cannot log its end


def test_a_second_master_for_the_same_pid_file_refuses(server, pki, upstream_app, tmp_path):
    srv = start(server, pki, upstream_app)
    pidfile = tmp_path / "scalwsd.pid"
    assert pidfile.read_text() == f"{srv.pid}\n"
    twin = subprocess.run([sys.executable, "-m", "scalws", "--config", srv.config_path],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert twin.returncode == 3
    assert (f"pid: another scalwsd (pid {srv.pid}) is running with the pid file {pidfile}"
            in twin.stderr), twin.stderr
    assert pidfile.read_text() == f"{srv.pid}\n"
    # the first one still serves, alone
    c = http.client.HTTPConnection("127.0.0.1", srv.ports[1], timeout=5)
    c.request("GET", "/")
    assert c.getresponse().read() == b"ok\n"


def test_a_second_master_on_a_used_address_refuses(server, pki, upstream_app, tmp_path):
    srv = start(server, pki, upstream_app)
    other = tmp_path / "other.yaml"
    other.write_text(open(srv.config_path).read().replace("scalwsd.pid", "other.pid")
                     .replace(f"127.0.0.1:{srv.ports[2]}", f"127.0.0.1:{free_port()}"))
    twin = subprocess.run([sys.executable, "-m", "scalws", "--config", str(other)],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert twin.returncode == 3
    assert f"listen '127.0.0.1:{srv.ports[0]} tls': cannot bind: address already in use" in twin.stderr, \
        twin.stderr
    assert not (tmp_path / "other.pid").exists() or not (tmp_path / "other.pid").read_text()


def test_a_pid_file_left_by_a_dead_master_is_taken_over(server, pki, upstream_app, tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / "scalwsd.pid").write_text(f"{dead.pid}\n")
    srv = start(server, pki, upstream_app)
    assert (tmp_path / "scalwsd.pid").read_text() == f"{srv.pid}\n"
    assert f"was left by pid {dead.pid}, which is gone: taken over" in srv.log()
    assert srv.stop() == 0
    assert not (tmp_path / "scalwsd.pid").exists()


def test_reloads_leave_the_master_no_descriptor(server, pki, upstream_app):
    # The soak (bench/soak.py) found the TLS keeper's and the status process's
    # readiness pipes left open in the master, one more per reload.
    srv = start(server, pki, upstream_app)

    def fds():
        return sorted(os.readlink(f"/proc/{srv.pid}/fd/{fd}").split(":")[0]
                      for fd in os.listdir(f"/proc/{srv.pid}/fd"))

    srv.kill(signal.SIGHUP)
    srv.wait_log("reloaded", count=1)
    before = fds()
    for n in range(2, 7):
        srv.kill(signal.SIGHUP)
        srv.wait_log("reloaded", count=n)
    assert fds() == before
