"""The probes of the status listener, `/ready` and `/live` (issue 34): what a
Kubernetes readinessProbe and livenessProbe ask. Ready once the workers are,
not ready from the moment a graceful stop starts draining, live all the
while; both answered to clients outside `status.allow` (a kubelet probes
from its node's address), which still get 403 for the counters."""
import http.client
import os
import signal
import socket
import time

CONF = """
workers: 2
shutdown_timeout: 10s
status: {{listen: "127.0.0.1:{port2}", allow: [{allow}]}}
sites:
  - listen: "127.0.0.1:{port}"
    routes:
      - {{path: /big, static: {{root: "{tmp}/www"}}}}
      - {{path: /, respond: {{body: "hello"}}}}
"""


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def start(server, tmp_path, allow='"127.0.0.0/8"'):
    (tmp_path / "www").mkdir(exist_ok=True)
    return server(CONF, allow=allow)


def test_ready_and_live_once_the_workers_are(server, tmp_path):
    srv = start(server, tmp_path)
    status = srv.ports[1]
    assert get(status, "/ready") == (200, "ready\n")
    assert get(status, "/live") == (200, "live: ready\n")
    assert get(status, "/ready?verbose=1")[0] == 200
    code, text = get(status, "/nothing")
    assert code == 404 and "/ready or /live" in text


def test_probes_answer_outside_allow_and_the_counters_do_not(server, tmp_path):
    srv = start(server, tmp_path, allow='"10.0.0.0/8"')
    status = srv.ports[1]
    assert get(status, "/ready") == (200, "ready\n")
    assert get(status, "/live")[0] == 200
    assert get(status, "/metrics")[0] == 403
    assert get(status, "/status")[0] == 403


def test_a_drain_is_not_ready_and_still_live(server, tmp_path):
    srv = start(server, tmp_path)
    status = srv.ports[1]
    big = tmp_path / "www" / "big"
    with open(big, "wb") as f:
        f.truncate(256 << 20)        # more than any socket buffer holds
    os.chmod(big, 0o644)
    # a download the client does not read: in flight for the whole drain
    slow = socket.create_connection(("127.0.0.1", srv.port))
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    assert slow.recv(12).startswith(b"HTTP/1.1 200")
    srv.kill(signal.SIGTERM)
    srv.wait_log("graceful stop")
    deadline = time.monotonic() + 5
    while get(status, "/ready")[0] != 503:
        assert time.monotonic() < deadline, "/ready still 200 after TERM"
        time.sleep(0.02)
    assert get(status, "/ready") == (503, "draining\n")
    assert get(status, "/live") == (200, "live: draining\n")
    assert srv.proc.poll() is None, "the master left before its download ended"
    slow.close()
    assert srv.proc.wait(15) == 0, srv.log()
    # and then the status listener is gone with the rest
    try:
        code = get(status, "/live")[0]
    except OSError:
        code = None
    assert code is None, code
