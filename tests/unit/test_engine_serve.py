"""sws_engine_serve's contract (ADR 0003), through Engine.run_blocking: the
worker waits on the engine's epoll for at most the time asked, and a signal
hands control back at once, so uvloop's timers and signal handlers run."""
import signal
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
