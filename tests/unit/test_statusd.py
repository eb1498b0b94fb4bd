"""scalws/control/statusd.py's small server, in a forked child: a source
that raises answers 500 at once and closes, and the server goes on."""
from __future__ import annotations

import os
import signal
import socket
import time

from scalws.control.statusd import READ_TIMEOUT, StatusServer


def _failing_source():
    raise RuntimeError("the instances' files are gone")


def ask(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT / 2) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while True:  # until the server closes: within the timeout above, or it raises
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk


def test_a_failing_source_is_a_500_at_once_and_the_server_goes_on():
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    lsock.setblocking(False)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)  # the traceback it logs
            StatusServer(_failing_source, ["127.0.0.0/8"]).serve(lsock, w)
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 1) == b"R"
        port = lsock.getsockname()[1]
        t = time.monotonic()
        first = ask(port, "/status")
        assert first.startswith(b"HTTP/1.1 500 "), first
        assert time.monotonic() - t < 1.0
        assert ask(port, "/nothing").startswith(b"HTTP/1.1 404 ")  # still serving
    finally:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        os.close(r)
        lsock.close()
