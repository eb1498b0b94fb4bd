"""An `app:` route whose workers are all down answers 503 with Retry-After
at once (csrc/handlers/proxy.c, sws_proxy_t.unavailable_503), where a
`proxy:` route to the same dead socket answers 502. The group's servers are
set here as the master sets them (scalws/control/apps.py)."""
import os
import socket
import threading
import time

import pytest

from scalws.config.loader import load_config_text
from scalws.config.model import UpstreamServer
from scalws.server.engine import Engine

pytestmark = pytest.mark.timeout(30)

CONF = """
workers: 1
apps:
  api: {{command: [/bin/true]}}
sites:
  - listen: ["127.0.0.1:1"]
    routes:
      - {{path: /app/, app: api}}
      - {{path: /proxy/, proxy: "unix:{dead}"}}
"""


def fetch(port, path, out):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(4096)
        out.append(data)


def answer(eng, port, path):
    out = []
    t = threading.Thread(target=fetch, args=(port, path, out))
    t.start()
    deadline = time.monotonic() + 5
    while t.is_alive() and time.monotonic() < deadline:
        eng.run_blocking(0.02)
    t.join()
    head = out[0].split(b"\r\n\r\n")[0].decode()
    return int(head.split()[1]), head


def test_app_route_without_workers_answers_503_with_retry_after(tmp_path):
    refused = str(tmp_path / "refused.sock")   # bound, never listening
    s = socket.socket(socket.AF_UNIX)
    s.bind(refused)
    missing = str(tmp_path / "missing.sock")
    cfg = load_config_text(CONF.format(dead=missing))
    cfg.upstreams["app:api"].servers = [
        UpstreamServer(address=f"unix:{p}", kind="unix", path=p, max_fails=0)
        for p in (missing, refused)]
    eng = Engine(cfg, 0)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    lsock.setblocking(False)
    port = lsock.getsockname()[1]
    eng.add_listener(lsock.detach(), cfg.sites[0].listen[0].key)
    for _ in range(3):   # every worker tried, each refused at once
        t0 = time.monotonic()
        status, head = answer(eng, port, "/app/x")
        assert status == 503, head
        assert "\r\nRetry-After: 1" in head, head
        assert time.monotonic() - t0 < 1.0
    status, head = answer(eng, port, "/proxy/x")
    assert status == 502, head
    assert "Retry-After" not in head
    s.close()
    os.unlink(refused)
