"""scalws/control/health.py: the probes' verdict from the master's health
page, including a master that stopped beating (SIGSTOP, a deadlock)."""
import struct
import time

from scalws.control import health


def page(state, age):
    h = health.Health()
    struct.pack_into("<IIQ", h.mm, 0, state, 0, time.monotonic_ns() - int(age * 1e9))
    return h.mm


def test_ready_only_when_ready_and_beating():
    assert health.probe(page(health.READY, 0.5), "/ready") == (True, "ready\n")
    assert health.probe(page(health.STARTING, 0.5), "/ready") == (False, "starting\n")
    assert health.probe(page(health.DRAINING, 0.5), "/ready") == (False, "draining\n")


def test_live_while_the_master_beats_whatever_its_state():
    for state in (health.STARTING, health.READY, health.DRAINING):
        ok, _ = health.probe(page(state, 1.0), "/live")
        assert ok


def test_a_master_that_stopped_beating_is_neither():
    for path in ("/live", "/ready"):
        ok, line = health.probe(page(health.READY, health.STALE + 1), path)
        assert not ok and line.startswith("master not responding: last seen 11."), line


def test_the_page_is_shared_with_a_child():
    import os
    h = health.Health()
    pid = os.fork()
    if pid == 0:
        h.set(health.DRAINING)
        os._exit(0)
    os.waitpid(pid, 0)
    assert health.read(h.mm)[0] == health.DRAINING
