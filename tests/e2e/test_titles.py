"""Process titles (issue 37, point 4): every process says what it is, in ps
(/proc/PID/cmdline) and in comm (/proc/PID/comm: top, pgrep, the OOM
killer's log), as nginx's do, and keeps saying it across reloads.
"""
from __future__ import annotations

import http.client
import signal
import socket
import time

import pytest

from scalws.control import title

BIG = 8 << 20

CONF = """
workers: 2
shutdown_timeout: 20s
status: {{listen: "127.0.0.1:{port3}"}}
sites:
  - listen: ["127.0.0.1:{port} tls", "127.0.0.1:{port2}"]
    tls: {{cert: "{cert}", key: "{key}"}}
    routes:
      - {{path: "= /big", respond: {{body: "{big}"}}}}
      - {{path: /, respond: {{body: "ok\\n"}}}}
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from tests.tlspki import PKI
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


def cmdline(pid) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().rstrip(b"\0").replace(b"\0", b" ").decode()


def comm(pid) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().rstrip("\n")


def titles(pids) -> dict:
    return {p: (cmdline(p), comm(p)) for p in pids}


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not (v := pred()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return v


def test_every_process_says_what_it_is_and_keeps_saying_it_across_a_reload(server, pki):
    srv = server(CONF, cert=pki.ec.cert_path, key=pki.ec.key_path, big="x" * BIG)
    assert titles([srv.pid]) == {srv.pid: (f"scalwsd: master process {srv.config_path}",
                                           "scalwsd")}
    want = {("scalwsd: worker 0", "scalwsd-worker0"), ("scalwsd: worker 1", "scalwsd-worker1"),
            ("scalwsd: status", "scalwsd-status"), ("scalwsd: TLS keeper", "scalwsd-tls")}
    first = titles(srv.workers())
    assert sorted(first.values()) == sorted(want)

    # a slow download holds worker N through the reload: it drains and says so
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", srv.ports[1]))
    slow.settimeout(10)
    slow.sendall(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
    assert slow.recv(4096).startswith(b"HTTP/1.1 200")
    srv.kill(signal.SIGHUP)
    srv.wait_log("(generation 2)", timeout=15)
    draining = wait_for(lambda: [p for p, (t, _) in titles(srv.workers()).items()
                                 if t.endswith("(shutting down)")], 10, "a draining worker")
    assert len(draining) == 1 and draining[0] in first
    index = first[draining[0]][0].rsplit(" ", 1)[1]
    assert titles(draining) == {draining[0]: (f"scalwsd: worker {index} (shutting down)",
                                              f"scalwsd-worker{index}")}
    slow.close()
    wait_for(lambda: draining[0] not in srv.workers(), 15, "the drained worker to exit")

    # the new generation: new processes, the same titles; the master's kept
    after = wait_for(lambda: (t := titles(srv.workers())) and sorted(t.values()) == sorted(want)
                     and t, 15, f"the titles {want}")
    workers = {p for p, (t, _) in after.items() if t.startswith("scalwsd: worker")}
    assert len(workers) == 2 and not workers & set(first)
    assert cmdline(srv.pid) == f"scalwsd: master process {srv.config_path}"
    c = http.client.HTTPConnection("127.0.0.1", srv.ports[1], timeout=5)
    c.request("GET", "/")
    assert c.getresponse().read() == b"ok\n"
    c.close()


def test_worker_comm_fits_in_15_bytes():
    assert title.worker_comm(0) == "scalwsd-worker0"
    assert title.worker_comm(9) == "scalwsd-worker9"
    assert title.worker_comm(10) == "scalwsd-w10"
    assert all(len(title.worker_comm(i)) <= title.COMM_MAX for i in range(100000))


def test_cpu_list_is_written_as_cpuset_files_write_it():
    assert title.cpu_list({2, 3}) == "2-3"
    assert title.cpu_list({0}) == "0"
    assert title.cpu_list({5, 0, 1, 2, 7, 8}) == "0-2,5,7-8"
