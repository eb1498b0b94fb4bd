"""sws_engine_serve's contract (ADR 0003), through Engine.run_blocking: the
worker waits on the engine's epoll for at most the time asked, a signal
hands control back at once, so uvloop's timers and signal handlers run, and
with busy_poll the engine polls through short gaps only (ADR 0004)."""
import os
import signal
import socket
import threading
import time

import pytest

from scalws.config.loader import load_config_text
from scalws.server.engine import Engine

CONF = """
workers: 1
sites:
  - listen: ["127.0.0.1:1"]
    routes:
      - {path: /, respond: {status: 200, body: "ok"}}
"""


@pytest.fixture
def engine():
    return Engine(load_config_text(CONF), 0)


def test_an_idle_wait_lasts_the_time_asked(engine):
    for seconds in (0.02, 0.1):
        t0 = time.monotonic()
        engine.run_blocking(seconds)
        took = time.monotonic() - t0
        # the engine's clock is the coarse one: up to a jiffy (4 ms at HZ=250) late
        assert seconds - 0.005 <= took <= seconds + 0.05, (seconds, took)


def test_a_signal_ends_the_wait(engine):
    fired = []
    old = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    try:
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.02)
        engine.run_blocking(2.0)
        took = time.monotonic() - t0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert fired and took < 0.2, took


def served_engine(busy_poll):
    """An engine with `busy_poll` and a listening socket on a free port."""
    cfg = load_config_text(f"busy_poll: {busy_poll}\n" + CONF)
    eng = Engine(cfg, 0)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    lsock.setblocking(False)
    port = lsock.getsockname()[1]
    eng.add_listener(lsock.detach(), cfg.sites[0].listen[0].key)
    return eng, port


def client(port, count, pause, answered, cpus):
    """`count` requests on one connection, `pause` s after each answer, from
    a thread on `cpus` (sched_setaffinity(0) sets the calling thread's)."""
    os.sched_setaffinity(0, cpus)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        for _ in range(count):
            s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            data = b""
            while not data.endswith(b"ok"):
                data += s.recv(4096)
            answered.append(data)
            until = time.perf_counter() + pause
            while time.perf_counter() < until:
                pass


@pytest.mark.parametrize("pause, poll, caught_most", [
    (200e-6, "1ms", True),    # gaps well inside the bound: the poll catches them
    (0.005, "1ms", False),    # gaps over the bound: the poll never starts
    (200e-6, "0", False),     # off
])
def test_the_poll_catches_short_gaps_only(pause, poll, caught_most):
    eng, port = served_engine(poll)
    answered = []
    # The engine on one CPU and the client on another, as in a worker and
    # its load; on a single CPU the poll yields to the client and misses
    # more (tests/e2e/test_busy_poll.py covers that case).
    mine = os.sched_getaffinity(0)
    engine_cpu = {min(mine)}
    t = threading.Thread(target=client, args=(port, 200, pause, answered,
                                              (mine - engine_cpu) or mine))
    os.sched_setaffinity(0, engine_cpu)
    try:
        t.start()
        deadline = time.monotonic() + 10
        while t.is_alive() and time.monotonic() < deadline:
            eng.run_blocking(0.05)  # releases the GIL: the client runs meanwhile
        t.join()
    finally:
        os.sched_setaffinity(0, mine)
    assert len(answered) == 200
    c = eng.counters()
    # Quiet, about 190 of the 200 gaps are caught; a busy or stolen CPU
    # stretches some gaps past the bound (halving the poll), down to about
    # 60. A poll that never grew would catch none, one that never shrank
    # would poll all 200 of the long gaps.
    if caught_most:
        assert c["polls_caught"] >= 40, str(c)
    elif poll == "0":
        assert c["polls_caught"] == c["polls_missed"] == 0, str(c)
    else:
        assert c["polls_caught"] + c["polls_missed"] <= 20, str(c)
