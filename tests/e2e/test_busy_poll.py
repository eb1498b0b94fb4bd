"""Busy polling (`busy_poll`; docs/adr/0004-busy-poll.md) on a real worker:
a client that comes back within the poll finds the worker awake (it did not
sleep between its requests), a client that comes back seldom never makes it
poll, a worker left idle after load sleeps, and a client on the worker's own
CPU is not held up by the poll."""
from __future__ import annotations

import contextlib
import os
import re
import socket
import statistics
import time

import pytest

from tests.e2e.conftest import cpu_seconds, read_response

pytestmark = pytest.mark.timeout(60)

CONFIG = """\
workers: 1
busy_poll: {poll}
log:
  access: off
sites:
  - listen: 127.0.0.1:{{port}}
    routes:
      - path: = /r
        respond:
          body: "ok"
"""
REQUEST = b"GET /r HTTP/1.1\r\nHost: t\r\n\r\n"


def sleeps(pid: int) -> int:
    """How many times the process has blocked (voluntary context switches)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


@contextlib.contextmanager
def client_cpus(worker: int, same: bool):
    """Runs the client (this process) on the worker's CPU (`same`), or off
    it, as a load generator or an upstream on another core would be (on a
    one-CPU machine it stays where it is: the poll yields to it)."""
    before = os.sched_getaffinity(0)
    theirs = os.sched_getaffinity(worker)
    mine = theirs if same else (before - theirs) or before
    os.sched_setaffinity(0, mine)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def requests_with_pauses(port: int, count: int, pause: float) -> list[float]:
    """`count` requests on one connection, each `pause` seconds after the
    previous answer (busy-waited: a sleep this short is not kept). Returns
    each request's round trip, in seconds."""
    trips = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            t0 = time.perf_counter()
            s.sendall(REQUEST)
            status, _, body, rest = read_response(s)
            trips.append(time.perf_counter() - t0)
            assert (status, body, rest) == (200, b"ok", b"")
            until = time.perf_counter() + pause
            while time.perf_counter() < until:
                pass
    return trips


def close_requests(server, poll, same_cpu):
    """A worker with `busy_poll: poll` and a client that comes back 200 us
    after each answer, on the worker's CPU or off it: 50 requests to let the
    poll adapt, then 400 measured. Returns (worker pid, worker sleeps per
    request, 90th percentile of the round trips)."""
    srv = server(CONFIG.format(poll=poll))
    (worker,) = srv.workers()
    with client_cpus(worker, same=same_cpu):
        requests_with_pauses(srv.port, 50, 200e-6)
        before = sleeps(worker)
        trips = requests_with_pauses(srv.port, 400, 200e-6)
    return worker, (sleeps(worker) - before) / 400, statistics.quantiles(trips, n=10)[-1]


def test_a_client_that_comes_back_soon_finds_the_worker_awake(server):
    # Without polling the worker sleeps in every 200 us gap; with a poll of
    # up to 1 ms it grows its poll within a few gaps and then catches the
    # next request awake.
    measured = {}
    for poll in ("0", "1ms"):
        worker, measured[poll], _ = close_requests(server, poll, same_cpu=False)
        if poll == "1ms":
            # Left idle, the worker sleeps: no polling without events.
            cpu0, t0 = cpu_seconds(worker), time.monotonic()
            time.sleep(1.0)
            idle_cpu = (cpu_seconds(worker) - cpu0) / (time.monotonic() - t0)
            assert idle_cpu < 0.03, f"an idle worker used {idle_cpu:.1%} of a CPU"
    # Sleeps per request: about 1 without polling; with it, almost none on a
    # quiet machine, a quarter to two thirds with another process busy on
    # either CPU.
    assert measured["0"] >= 0.8, measured
    assert measured["1ms"] <= 0.75 * measured["0"], measured


def test_a_client_that_comes_back_seldom_does_not_make_it_poll(server):
    # Requests 5 ms apart, far over the 1 ms bound: every idle wait is long,
    # so the poll never starts. A worker that polled 1 ms before each sleep
    # would spend 20 % of a CPU here.
    srv = server(CONFIG.format(poll="1ms"))
    (worker,) = srv.workers()
    with client_cpus(worker, same=False):
        requests_with_pauses(srv.port, 20, 0.005)
        cpu0, t0 = cpu_seconds(worker), time.monotonic()
        requests_with_pauses(srv.port, 200, 0.005)
        used = (cpu_seconds(worker) - cpu0) / (time.monotonic() - t0)
    assert used < 0.08, f"the worker used {used:.1%} of a CPU"


def test_the_poll_yields_to_a_peer_on_the_same_cpu(server):
    # The client shares the worker's CPU and is busy between its requests
    # (an upstream or a local client would be): a worker that held the CPU
    # for its whole poll would keep the client from reading its answer. With
    # the yield the slowest tenth of round trips is as fast as without a poll
    # (about 55 us here); without it, about 1 ms, the whole poll.
    trip = {poll: close_requests(server, poll, same_cpu=True)[2] for poll in ("0", "1ms")}
    assert trip["1ms"] < 3 * trip["0"], trip


@pytest.fixture
def quota_cgroup():
    """A cgroup holding half a CPU (a 5 ms quota per 10 ms), on the v1 cpu
    controller or on cgroup v2, removed afterwards. Ask for it before
    `server`, so that the servers in it have stopped when it is removed."""
    v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    # the real directory: /sys/fs/cgroup/cpu is often a link to cpu,cpuacct,
    # and the log names the mount point that /proc/self/mountinfo gives
    parent = os.path.realpath("/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/cpu")
    path = os.path.join(parent, f"scalws-test-quota-{os.getpid()}")
    try:
        os.mkdir(path)
    except OSError as exc:
        pytest.skip(f"needs root and a writable cgroup cpu controller ({parent}: {exc.strerror})")
    try:
        try:
            if v2:
                with open(os.path.join(path, "cpu.max"), "w") as f:
                    f.write("5000 10000")
            else:
                with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
                    f.write("10000")
                with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
                    f.write("5000")
        except FileNotFoundError:  # cgroup v2 without the cpu controller enabled here
            pytest.skip(f"no cpu controller in {parent}'s children (cgroup.subtree_control)")
        yield path
    finally:
        os.rmdir(path)


def test_auto_does_not_poll_under_a_cpu_quota(quota_cgroup, server, tmp_path, monkeypatch):
    # `busy_poll: auto` under a cgroup CPU quota smaller than the workers'
    # CPUs is off, virtual machine or not: the poll would spend the quota
    # that serves requests (ADR 0021).
    # The master says so at start, and the worker sleeps between requests
    # that come back at once (gaps of some 30 us), as with `busy_poll: 0`; a
    # 50 us poll, what `auto` is on a virtual machine without a quota,
    # catches most of them awake here (0.13-0.31 sleeps per request).
    wrap = tmp_path / "in-cgroup.sh"
    wrap.write_text(f'#!/bin/sh\nset -e\necho $$ >{quota_cgroup}/cgroup.procs\nexec "$@"\n')
    wrap.chmod(0o755)
    monkeypatch.setenv("SCALWS_TEST_WRAP", str(wrap))
    srv = server(CONFIG.format(poll="auto").replace("  access: off", "  access: off\n  level: info"))
    name = "cpu.max" if os.path.exists(os.path.join(quota_cgroup, "cpu.max")) else "cpu.cfs_quota_us"
    srv.wait_log(f"busy_poll auto: off: a CPU quota of 0.5 CPUs for 1 worker(s) on {quota_cgroup}/{name}")
    (worker,) = srv.workers()
    with open(os.path.join(quota_cgroup, "cgroup.procs")) as f:
        assert worker in {int(p) for p in f.read().split()}
    with client_cpus(worker, same=False):
        requests_with_pauses(srv.port, 50, 0)
        before = sleeps(worker)
        requests_with_pauses(srv.port, 400, 0)
    assert (sleeps(worker) - before) / 400 >= 0.8


AUTO_LINE = re.compile(r"busy_poll auto: (polling|not polling) \(polling (\d+) requests/s at ([\d.]+) us "
                       r"CPU each, not polling (\d+) at ([\d.]+) us\)")


def load_until(srv, text, timeout=15.0):
    """One client coming back at once, on another CPU than the worker's,
    until `text` is in the log (or `timeout`)."""
    (worker,) = srv.workers()
    deadline = time.monotonic() + timeout
    with client_cpus(worker, same=False):
        while text not in srv.log() and time.monotonic() < deadline:
            requests_with_pauses(srv.port, 300, 0)


def test_auto_measures_whether_the_poll_pays(server):
    # `busy_poll: auto` on a virtual machine: each worker serves 2 s with the
    # poll on and off in turn and keeps it where it cost no more CPU per
    # request, or gave 10 % more requests per second for at most as much
    # more CPU per request (ADR 0027), and says so at info with both
    # measurements. On bare metal `auto` is off.
    from scalws.config.machine import virtualized
    srv = server(CONFIG.format(poll="auto").replace("  access: off", "  access: off\n  level: info"))
    if not virtualized():
        srv.wait_log("busy_poll auto: off: not a virtual machine")
        load_until(srv, "busy_poll auto: polling", timeout=3.0)
        assert not AUTO_LINE.search(srv.log()), srv.log()
        return
    srv.wait_log("busy_poll auto: 50us: a virtual machine")
    load_until(srv, "requests/s at")
    m = AUTO_LINE.search(srv.log())
    assert m, srv.log()
    choice, rate_on, cpu_on, rate_off, cpu_off = m.group(1), *map(float, m.group(2, 3, 4, 5))
    assert rate_on > 0 and rate_off > 0 and cpu_on > 0 and cpu_off > 0, m.group(0)
    pays = cpu_on <= cpu_off or (rate_on >= 1.10 * rate_off and rate_on / rate_off >= cpu_on / cpu_off)
    assert choice == ("polling" if pays else "not polling"), m.group(0)


def test_a_fixed_poll_is_not_measured(server):
    # A duration is the operator's choice: the worker polls under it always,
    # with no measurement (and `0` never polls).
    srv = server(CONFIG.format(poll="50us").replace("  access: off", "  access: off\n  level: debug"))
    load_until(srv, "requests/s at", timeout=3.0)
    assert "busy_poll auto" not in srv.log(), srv.log()
