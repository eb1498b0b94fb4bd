"""Process supervision end to end: reload, worker death, stop signals, limits.

Every test starts a real master (`python -m scalws --config FILE`) and talks
to it with real clients; readiness is read from the error log or /proc, never
assumed after a sleep. Loops that generate traffic are bounded in both count
and time.
"""
from __future__ import annotations

import http.client
import os
import re
import select
import shutil
import signal
import socket
import threading
import time

import pytest

from tests.e2e.conftest import read_response

GET = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"


def one_route(body: str, workers=1, extra="") -> str:
    return f"""
        workers: {workers}
        {extra}
        sites:
          - listen: "127.0.0.1:{{port}}"
            routes:
              - {{{{path: /, respond: {{{{status: 200, body: "{body}"}}}}}}}}
    """


def get_body(port, path="/") -> bytes:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path)
        return c.getresponse().read()
    finally:
        c.close()


def wait_for(pred, timeout, what):
    """Polls `pred` (every 10 ms) until it returns a true value; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def peer_closed(sock) -> bool:
    """True when the server has closed an idle keep-alive connection: the
    socket is readable with nothing to read (EOF) or reset."""
    r, _, _ = select.select([sock], [], [], 0)
    if not r:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


# ---- /proc: which worker owns a client connection --------------------------

def _server_side_inodes(server_port):
    """{client port: inode} of established server-side sockets on server_port."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if state != "01":  # TCP_ESTABLISHED
                continue
            if int(local.rsplit(":", 1)[1], 16) == server_port:
                out[int(remote.rsplit(":", 1)[1], 16)] = int(inode)
    return out


def _socket_inodes(pid):
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return inodes
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def owners(server_port, socks, pids):
    """Maps each client socket in `socks` to the worker pid holding its
    server side, or None when no worker (yet) holds it."""
    by_port = _server_side_inodes(server_port)
    held = {pid: _socket_inodes(pid) for pid in pids}
    out = {}
    for s in socks:
        inode = by_port.get(s.getsockname()[1])
        out[s] = next((pid for pid, inodes in held.items() if inode in inodes), None)
    return out


# ---- 1. HUP reload under load -----------------------------------------------

class Hammer(threading.Thread):
    """Keep-alive GET loop.

    A reconnect is fine when the server closed the connection cleanly after a
    complete response (Connection: close, or EOF seen before the next request
    is sent). One case is a race no HTTP/1.1 server can close on its own: the
    server closes an idle keep-alive connection (the old generation stops)
    while the client is sending its next request on it. RFC 9112 9.3.1 lets
    a client retry an idempotent request then; such requests are counted in
    `races`, retried once on a new connection, and that retry must succeed.
    Everything else that gets no complete 200 response is a failure: an
    error on a fresh connection, a partial response, a wrong status or body.
    """

    def __init__(self, port, stop, max_requests=20000):
        super().__init__(daemon=True)
        self.port, self.stop, self.max_requests = port, stop, max_requests
        self.ok = 0
        self.bodies = {}
        self.failures = []
        self.races = []
        self.reconnects = 0

    def _connect(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        conn.connect()
        return conn

    def _one(self, conn):
        """One GET on `conn`: (response, body), or raises."""
        conn.request("GET", "/")
        r = conn.getresponse()
        return r, r.read()

    def _check(self, r, body):
        if r.status != 200 or body not in (b"v1", b"v2"):
            self.failures.append(f"{r.status} {body!r}")
            return
        self.ok += 1
        self.bodies[body] = self.bodies.get(body, 0) + 1

    def run(self):
        conn = None
        used = 0
        while not self.stop.is_set() and self.ok + len(self.failures) < self.max_requests:
            if conn is not None and peer_closed(conn.sock):
                conn.close()
                conn = None
                self.reconnects += 1
            if conn is None:
                used = 0
                try:
                    conn = self._connect()
                except OSError as exc:
                    self.failures.append(f"connect: {exc!r}")
                    continue
            try:
                r, body = self._one(conn)
            except (http.client.RemoteDisconnected, ConnectionResetError,
                    BrokenPipeError) as exc:
                # No byte of a response arrived (RemoteDisconnected: EOF at
                # the status line; a reset/broken pipe while sending or
                # before the status line).
                conn.close()
                conn = None
                if used == 0:
                    self.failures.append(f"fresh connection: {exc!r}")
                    continue
                self.races.append(repr(exc))
                try:
                    conn = self._connect()
                    r, body = self._one(conn)
                except (OSError, http.client.HTTPException) as exc2:
                    self.failures.append(f"retry after {exc!r}: {exc2!r}")
                    if conn is not None:
                        conn.close()
                    conn = None
                    continue
                used = 0
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(repr(exc))  # e.g. a truncated response
                conn.close()
                conn = None
                continue
            self._check(r, body)
            used += 1
            if r.will_close:
                conn.close()
                conn = None
                self.reconnects += 1
        if conn is not None:
            conn.close()


def test_hup_reload_under_load_loses_no_request(server):
    srv = server(one_route("v1", workers=2))
    cfg = srv.config_path
    old = set(wait_for(lambda: len(srv.workers()) == 2 and srv.workers(), 5, "2 workers"))
    stop = threading.Event()
    hammers = [Hammer(srv.port, stop) for _ in range(4)]
    for h in hammers:
        h.start()
    try:
        wait_for(lambda: all(h.ok >= 20 for h in hammers), 5, "traffic on every thread")
        with open(cfg) as f:
            text = f.read()
        with open(cfg + ".tmp", "w") as f:
            f.write(text.replace('body: "v1"', 'body: "v2"'))
        os.replace(cfg + ".tmp", cfg)
        srv.kill(signal.SIGHUP)
        srv.wait_log("reloaded", timeout=10)
        # Keep the load on while the old generation drains and exits.
        wait_for(lambda: not old & set(srv.workers()), 10, "old workers to exit")
        served = sum(h.ok for h in hammers)
        wait_for(lambda: sum(h.ok for h in hammers) >= served + 200, 5, "traffic after reload")
    finally:
        stop.set()
        for h in hammers:
            h.join(10)
    failures = [f for h in hammers for f in h.failures]
    assert failures == [], f"{len(failures)} failed requests: {failures[:5]}"
    # The old generation answers a connection that was busy a moment ago
    # with Connection: close instead of closing it under the client
    # (csrc/engine.c and csrc/http/h1.c, sws_engine_shutdown), so not even the keep-alive race
    # that RFC 9112 9.3.1 lets clients retry happens here.
    races = [x for h in hammers for x in h.races]
    assert races == [], races
    assert sum(h.bodies.get(b"v1", 0) for h in hammers) > 0
    assert sum(h.bodies.get(b"v2", 0) for h in hammers) > 0
    new = set(srv.workers())
    assert len(new) == 2 and not new & old
    for _ in range(5):
        assert get_body(srv.port) == b"v2"  # new connections: new generation


# ---- 2. HUP with an invalid configuration ---------------------------------

def test_hup_with_invalid_config_keeps_old_generation(server):
    srv = server(one_route("v1", workers=2))
    before = sorted(wait_for(lambda: len(srv.workers()) == 2 and srv.workers(), 5, "workers"))
    with open(srv.config_path) as f:
        text = f.read()
    bad = text.replace("workers: 2", "workers: 2\nwrokers: 3")
    assert bad != text
    with open(srv.config_path, "w") as f:
        f.write(bad)
    srv.kill(signal.SIGHUP)
    srv.wait_log("reload failed")
    log = srv.log()
    name = os.path.basename(srv.config_path)
    assert f"{name}:3:1: wrokers: unknown key 'wrokers'" in log, log
    assert "reloaded" not in log
    assert get_body(srv.port) == b"v1"
    assert sorted(srv.workers()) == before


# ---- 3. kill -9 of one worker -----------------------------------------------

def test_worker_sigkill_is_replaced_and_other_worker_unaffected(server):
    srv = server(one_route("ok", workers=2))
    pids = wait_for(lambda: len(srv.workers()) == 2 and srv.workers(), 5, "2 workers")
    socks = []
    try:
        # Open keep-alive connections until both workers own at least one
        # (the kernel spreads them over the two SO_REUSEPORT sockets).
        owner = {}
        for _ in range(64):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(GET)  # a served request: the worker has accepted it
            assert read_response(s)[2] == b"ok"
            socks.append(s)
            if len(socks) >= 8:
                owner = owners(srv.port, socks, pids)
                if set(owner.values()) == set(pids):
                    break
        assert None not in owner.values(), owner
        assert set(owner.values()) == set(pids), "could not spread connections over both workers"
        victim, survivor = pids
        mine = [s for s in socks if owner[s] == survivor]

        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        replacement, took = [], None
        # Traffic on the surviving worker's connections while the other
        # restarts; fewer than keepalive_requests (1000) per connection, so
        # none is closed on purpose. The replacement is looked for between
        # rounds.
        deadline = killed_at + 1.0
        n = failures = 0
        while time.monotonic() < deadline and n < 500 * len(mine):
            for s in mine:
                s.sendall(GET)
                try:
                    status, headers, body, rest = read_response(s)
                    assert rest == b""
                    if (status, body) != (200, b"ok") or headers.get("connection") == "close":
                        failures += 1
                except (OSError, EOFError):
                    failures += 1
                n += 1
            if not replacement:
                replacement = [p for p in srv.workers() if p not in pids]
                took = time.monotonic() - killed_at
        if not replacement:
            replacement = wait_for(
                lambda: [p for p in srv.workers() if p not in pids], 5, "a replacement worker")
            took = time.monotonic() - killed_at
        assert failures == 0 and n >= len(mine)
        assert took < 1.0, f"replacement took {took:.2f}s"
        assert len(replacement) == 1 and sorted(srv.workers()) == sorted([survivor] + replacement)
        srv.wait_log(f"(pid {victim}) killed by signal 9")
        # Connections the dead worker held are gone, new ones are served.
        for _ in range(10):
            assert get_body(srv.port) == b"ok"
    finally:
        for s in socks:
            s.close()


# ---- 4. crash loop backoff ----------------------------------------------------

def test_crash_loop_backs_off_and_recovers(server, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    srv = server(one_route("ok", extra="log: {{access: {tmp}/logs/access.log}}"))
    srv.expect_crashes = True
    pid = wait_for(srv.workers, 5, "a worker")[0]
    # Passes validation at load, fails at every worker start from now on:
    # the access log's folder is gone.
    shutil.rmtree(logs)
    os.kill(pid, signal.SIGKILL)
    srv.wait_log("crash loop", count=3, timeout=10)
    log = srv.log()
    assert "cannot open the access log" in log, log
    delays = [float(line.split("restarting in ")[1].split("s")[0])
              for line in log.splitlines() if "(crash loop)" in line]
    assert delays[:3] == [0.2, 0.4, 0.8], delays  # exponential, not a tight loop
    # Fix the cause: the next restart succeeds and serves.
    logs.mkdir()
    wait_for(lambda: os.path.exists(logs / "access.log"), 10, "a worker to start again")
    assert get_body(srv.port) == b"ok"


# ---- 5. TERM drains in-flight requests ---------------------------------------

BIG = "".join(f"{i:07d}." for i in range(1 << 20))  # 8 MiB, every 8-byte block distinct


def test_term_drains_slow_in_flight_request(server):
    srv = server(f"""
        workers: 1
        sites:
          - listen: "127.0.0.1:{{port}}"
            routes:
              - {{{{path: "= /big", respond: {{{{body: "{BIG}"}}}}}}}}
              - {{{{path: /, respond: {{{{body: "small"}}}}}}}}
    """)
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", srv.port))
    slow.settimeout(10)
    idle = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    idle.sendall(GET)
    assert read_response(idle)[2] == b"small"
    slow.sendall(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
    data = slow.recv(4096)
    assert data.startswith(b"HTTP/1.1 200")

    srv.kill(signal.SIGTERM)
    termed = time.monotonic()
    # Idle keep-alive: closed at once, well before shutdown_timeout (30s).
    idle.settimeout(5)
    assert idle.recv(1) == b""
    assert time.monotonic() - termed < 1.0
    idle.close()

    # New connections are refused soon after TERM.
    def refused():
        try:
            with socket.create_connection(("127.0.0.1", srv.port), timeout=1) as s:
                s.sendall(GET)
                return s.recv(1) == b""  # closed without a response
        except ConnectionRefusedError:
            return True
        except ConnectionResetError:
            return True
    wait_for(refused, 2, "new connections to be refused")

    # The in-flight response continues, slowly, to its last byte.
    received = len(data)
    assert srv.proc.poll() is None and srv.workers(), "stopped before draining"
    chunks = [data]
    while True:
        b = slow.recv(65536)
        if not b:
            break
        chunks.append(b)
        received += len(b)
        if received < 1 << 20:
            time.sleep(0.002)  # a slow reader for the first MiB
    slow.close()
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    assert b"Content-Length: 8388608" in head
    assert body == BIG.encode()
    assert srv.proc.wait(15) == 0
    assert "graceful stop" in srv.log()


# ---- 6. shutdown_timeout -----------------------------------------------------

def test_shutdown_timeout_bounds_graceful_stop(server):
    srv = server(f"""
        workers: 1
        shutdown_timeout: 1s
        sites:
          - listen: "127.0.0.1:{{port}}"
            routes:
              - {{{{path: /, respond: {{{{body: "{BIG}"}}}}}}}}
    """)
    stuck = socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(("127.0.0.1", srv.port))
    stuck.settimeout(5)
    stuck.sendall(GET)
    assert stuck.recv(64).startswith(b"HTTP/1.1 200")  # and never read again
    t0 = time.monotonic()
    srv.kill(signal.SIGTERM)
    code = srv.proc.wait(10)
    took = time.monotonic() - t0
    assert code == 0
    assert 0.9 <= took <= 4.0, f"stopped after {took:.2f}s"
    assert "shutdown_timeout (1s) reached, closing 1 connections" in srv.log()
    stuck.close()


# ---- 7. QUIT -----------------------------------------------------------------

def test_quit_is_a_fast_stop(server):
    srv = server(one_route("ok", workers=2))
    conns = []
    for _ in range(4):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(GET)
        assert read_response(s)[2] == b"ok"
        conns.append(s)
    t0 = time.monotonic()
    srv.kill(signal.SIGQUIT)
    for s in conns:
        try:
            assert s.recv(1) == b""
        except ConnectionResetError:
            pass
        s.close()
    assert srv.proc.wait(5) == 0
    assert time.monotonic() - t0 < 2.0
    assert "fast stop (SIGQUIT)" in srv.log()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1)


# ---- 8. limits.max_connections -------------------------------------------------

def test_max_connections_per_worker(server):
    srv = server(one_route("ok", extra="limits: {{max_connections: 2}}"))
    a = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    b = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    for s in (a, b):
        s.sendall(GET)
        assert read_response(s)[2] == b"ok"
    c = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    c.sendall(GET)
    c.settimeout(0.5)  # bounded wait for a response that must not come
    with pytest.raises(socket.timeout):
        c.recv(1)
    # Both first connections still work: the third waits, it does not evict.
    b.sendall(GET)
    assert read_response(b)[2] == b"ok"
    a.close()
    c.settimeout(5)
    assert read_response(c)[2] == b"ok"
    b.close()
    c.close()


def test_workers_hold_only_their_own_listening_sockets(server):
    # With SO_REUSEPORT each worker has its own socket; a worker must not keep
    # a sibling's copy, or that socket would outlive the master closing it.
    srv = server(one_route("v1", workers=2))
    pids = wait_for(lambda: len(srv.workers()) == 2 and srv.workers(), 5, "2 workers")
    listening = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == srv.port:
                listening.add(int(fields[9]))
    assert len(listening) == 2  # one socket per worker
    held = [listening & _socket_inodes(pid) for pid in pids]
    assert all(len(h) == 1 for h in held) and held[0] != held[1], held


def _started_workers(srv, count):
    """{worker index: (pid, cpu)} from the master's "worker N started" lines."""
    srv.wait_log("started (pid", count=count)
    found = re.findall(r"worker (\d+) started \(pid (\d+), cpu (\w+)\)", srv.log())
    return {int(i): (int(pid), cpu) for i, pid, cpu in found}


def test_worker_i_is_pinned_to_the_ith_cpu(server):
    # Three workers on the CPUs this test may use: worker i on the i-th of
    # them, wrapping round when there are more workers than CPUs.
    cpus = sorted(os.sched_getaffinity(0))
    srv = server(one_route("ok", workers=3, extra="log: {{level: info}}"))
    workers = _started_workers(srv, 3)
    assert sorted(workers) == [0, 1, 2]
    for i, (pid, cpu) in workers.items():
        assert os.sched_getaffinity(pid) == {cpus[i % len(cpus)]}, (i, pid)
        assert cpu == str(cpus[i % len(cpus)])
    assert sorted(workers[i][0] for i in workers) == sorted(srv.workers())


def test_workers_auto_follows_the_masters_affinity(server):
    # Started under `taskset -c LAST`: `auto` is one worker, on that CPU.
    last = max(os.sched_getaffinity(0))
    srv = server(one_route("ok", workers="auto", extra="log: {{level: info}}"), start=False)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {last})  # this thread only; the master inherits it
    try:
        srv.start()
    finally:
        os.sched_setaffinity(0, before)
    ((pid, cpu),) = _started_workers(srv, 1).values()
    assert srv.workers() == [pid]
    assert os.sched_getaffinity(pid) == {last} and cpu == str(last)
    assert get_body(srv.port) == b"ok"


MIGRATE_REQ = "/proc/sys/net/ipv4/tcp_migrate_req"


def test_master_sets_tcp_migrate_req_or_says_why_not(server):
    # docs/operations.md, "Sysctls": with it, lowering `workers` on reload
    # moves the queued connections of a closed listening socket to the
    # others instead of resetting them. As root the master sets it; otherwise
    # it says at start that it is off.
    with open(MIGRATE_REQ) as f:
        saved = f.read().strip()
    root = os.geteuid() == 0
    if root:
        with open(MIGRATE_REQ, "w") as f:
            f.write("0")
    try:
        srv = server(one_route("ok", extra="log: {{level: info}}"))
        with open(MIGRATE_REQ) as f:
            now = f.read().strip()
        if root:
            assert now == "1"
            assert "set net.ipv4.tcp_migrate_req=1" in srv.log()
        elif saved == "0":
            assert "net.ipv4.tcp_migrate_req is 0" in srv.log()
        else:
            assert now == "1" and "tcp_migrate_req" not in srv.log()
    finally:
        if root:
            with open(MIGRATE_REQ, "w") as f:
                f.write(saved)
