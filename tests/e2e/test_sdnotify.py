"""The master tells a service manager its state (sd_notify): READY=1 once the
workers serve, RELOADING=1 then READY=1 around a HUP, STOPPING=1 on stop,
and only the master speaks (the packaged unit has NotifyAccess=main)."""
import os
import signal
import socket
import struct
import time

import pytest

from tests.e2e.test_process import get_body, one_route


class NotifySocket:
    """A unix datagram socket standing in for systemd's notification socket;
    each message comes with the sender's pid (SO_PASSCRED)."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(self.path)

    def next(self, timeout=15.0):
        """The next message as (sender pid, {KEY: value})."""
        self.sock.settimeout(timeout)
        data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
        pid = None
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid, _uid, _gid = struct.unpack("iII", payload[:12])
        fields = dict(line.split("=", 1) for line in data.decode().splitlines())
        return pid, fields

    def close(self):
        self.sock.close()


@pytest.fixture
def notify(tmp_path):
    ns = NotifySocket(tmp_path / "notify.sock")
    yield ns
    ns.close()


def test_ready_reload_and_stop_are_announced_by_the_master_only(server, notify):
    srv = server(one_route("v1", workers=2), start=False)
    srv.start(wait=False, env={"NOTIFY_SOCKET": notify.path})
    pid, msg = notify.next()
    assert pid == srv.pid
    assert msg["READY"] == "1"
    assert msg["MAINPID"] == str(srv.pid)
    assert "2 of 2 workers ready" in msg["STATUS"]
    # READY means serving: no retry needed.
    assert get_body(srv.port) == b"v1"

    with open(srv.config_path) as f:
        text = f.read()
    with open(srv.config_path, "w") as f:
        f.write(text.replace('"v1"', '"v2"'))
    srv.kill(signal.SIGHUP)
    pid, msg = notify.next()
    assert pid == srv.pid and msg["RELOADING"] == "1"
    now_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert 0 < now_us - int(msg["MONOTONIC_USEC"]) < 30_000_000
    pid, msg = notify.next()
    assert pid == srv.pid and msg["READY"] == "1"
    assert "generation 2" in msg["STATUS"]
    assert get_body(srv.port) == b"v2"

    # A refused file: the reload ends (READY=1 again), the old workers serve.
    with open(srv.config_path, "w") as f:
        f.write(text.replace("workers: 2", "workers: 2\nwrokers: 3"))
    srv.kill(signal.SIGHUP)
    pid, msg = notify.next()
    assert msg["RELOADING"] == "1"
    pid, msg = notify.next()
    assert msg["READY"] == "1" and "reload failed" in msg["STATUS"]
    assert get_body(srv.port) == b"v2"

    srv.kill(signal.SIGTERM)
    pid, msg = notify.next()
    assert pid == srv.pid and msg["STOPPING"] == "1"
    assert srv.stop() == 0
    # Nothing else was sent: in particular no worker spoke for the service.
    notify.sock.settimeout(0.2)
    with pytest.raises(socket.timeout):
        notify.sock.recv(4096)


def test_abstract_notify_socket(server):
    name = f"scalws-test-{os.getpid()}-{id(server)}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)
    try:
        srv = server(one_route("x"), start=False)
        srv.start(wait=False, env={"NOTIFY_SOCKET": "@" + name})
        s.settimeout(15)
        assert b"READY=1" in s.recv(4096).split(b"\n")
        assert get_body(srv.port) == b"x"
    finally:
        s.close()
