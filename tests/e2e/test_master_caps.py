"""A master started as root keeps only caps.KEEP once started (ADR 0012)."""
from __future__ import annotations

import http.client
import os
import signal
import socket
import time

import pytest

from scalws.control import caps

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

KEPT = sum(1 << c for c in caps.KEEP)

CONF = """
workers: 2
sandbox: {mode}
log: {{access: "{tmp}/access.log", error: "{tmp}/error-0.log", level: info}}
sites:
  - listen: "127.0.0.1:{port}"
    routes:
      - {{path: /, static: {{root: "{tmp}/www"}}}}
"""

def get(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/index.html")
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def low_port_free(port=81):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def prepare(tmp_path):
    www = tmp_path / "www"
    www.mkdir(exist_ok=True)
    (www / "index.html").write_text("hello\n")


def test_master_keeps_only_what_it_needs(server, tmp_path):
    prepare(tmp_path)
    srv = server(CONF, mode="on")
    status = caps.current(srv.pid)
    assert status["CapEff"] == KEPT, caps.names(status["CapEff"])
    assert status["CapPrm"] == KEPT, caps.names(status["CapPrm"])
    assert status["CapBnd"] == KEPT, caps.names(status["CapBnd"])
    assert status["CapInh"] == 0 and status["CapAmb"] == 0
    assert "master capabilities lowered to CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_KILL, " \
           "CAP_SETGID, CAP_SETUID, CAP_NET_BIND_SERVICE" in srv.log()
    assert get(srv.port) == 200
    # The children inherit the lowered sets (without `user:` they stay root).
    for pid in srv.workers():
        assert caps.current(pid)["CapBnd"] == KEPT

    # USR1: the error log is reopened (created again after a "rotation").
    os.rename(tmp_path / "error-0.log", tmp_path / "error-0.log.1")
    srv.kill(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not (tmp_path / "error-0.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    srv.wait_log("reopening logs")  # in the error log the master created again
    assert get(srv.port) == 200

    # HUP: a reload that binds a port below 1024.
    low = 81 if low_port_free(81) else None
    if low is not None:
        path = srv.config_path
        text = open(path).read().replace(
            f'listen: "127.0.0.1:{srv.port}"',
            f'listen: ["127.0.0.1:{srv.port}", "127.0.0.1:{low}"]')
        with open(path, "w") as f:
            f.write(text)
    srv.kill(signal.SIGHUP)
    srv.wait_log("reloaded")
    assert "reload failed" not in srv.log()
    assert get(srv.port) == 200
    if low is not None:
        assert get(low) == 200
    assert caps.current(srv.pid)["CapEff"] == KEPT


def test_sandbox_off_keeps_everything(server, tmp_path):
    prepare(tmp_path)
    srv = server(CONF, mode="off")
    status = caps.current(srv.pid)
    mine = caps.current("self")
    assert status["CapEff"] == mine["CapEff"] != KEPT
    assert status["CapBnd"] == mine["CapBnd"]
    assert "master capabilities lowered" not in srv.log()
    assert get(srv.port) == 200


def _world_reachable(path):
    path = os.path.realpath(path)
    while path != "/":
        path = os.path.dirname(path)
        if not os.stat(path).st_mode & 0o001:
            return False
    return True


# An app as `user: nobody` runs Debian's /usr/bin/python3 (the test's own
# interpreter may live where nobody cannot reach it, such as /root) with a
# tiny HTTP server on the socket it is given, answering its pid.
_NOBODY_APP = (
    "import os, socket\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.bind(os.environ['SCALWS_APP_SOCKET']); s.listen(64)\n"
    "b = b'%d\\n' % os.getpid()\n"
    "while True:\n"
    "    c, _ = s.accept()\n"
    "    try:\n"
    "        if c.recv(65536):\n"
    "            c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n' % len(b) + b)\n"
    "    except OSError:\n"
    "        pass\n"
    "    c.close()\n")


def _nobody_app():
    code = _NOBODY_APP.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f"""  api:
    command: ["/usr/bin/python3", "-c", "{code}"]
    dir: /
    user: nobody
"""


@pytest.mark.parametrize("user", [False, True])
def test_apps_start_under_the_lowered_master(server, user):
    from tests.e2e.test_apps import app_pids, asgi, conf
    srv = server(conf(_nobody_app() if user else asgi()))
    assert caps.current(srv.pid)["CapEff"] == KEPT
    for pid in app_pids(srv.port, n=3):
        status = caps.current(pid)
        with open(f"/proc/{pid}/status") as f:
            uid = int(next(l for l in f if l.startswith("Uid:")).split()[1])
        if user:
            assert uid != 0 and status["CapEff"] == status["CapPrm"] == 0
        else:  # root without `user:`: at most what the master kept
            assert uid == 0 and status["CapPrm"] & ~KEPT == 0
