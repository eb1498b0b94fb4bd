"""scalws/control/loop.py: the worker's outer loop (readers, timers,
signals), with real descriptors and real signals."""
from __future__ import annotations

import io
import os
import signal
import socket
import time

import pytest

from scalws.control.loop import Loop


@pytest.fixture
def loop():
    lp = Loop()
    yield lp
    lp.close()
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)


def test_call_soon_runs_in_order_and_stop_ends_the_run(loop):
    seen = []
    loop.call_soon(seen.append, 1)
    loop.call_soon(seen.append, 2)
    loop.call_soon(loop.stop)
    loop.call_soon(seen.append, 3)  # the batch stop() was called in still runs
    loop.run_forever()
    assert seen == [1, 2, 3]


def test_timers_run_in_time_order_and_a_cancelled_one_never(loop):
    seen = []
    t0 = time.monotonic()
    loop.call_later(0.06, lambda: (seen.append(("late", time.monotonic() - t0)), loop.stop()))
    loop.call_later(0.02, lambda: seen.append(("early", time.monotonic() - t0)))
    loop.call_later(0.04, seen.append, ("cancelled", 0)).cancel()
    loop.run_forever()
    assert [w for w, _ in seen] == ["early", "late"]
    assert 0.02 <= seen[0][1] < 0.06 <= seen[1][1] < 0.5


def test_a_reader_runs_while_its_fd_is_readable_and_not_after_removal(loop):
    a, b = socket.socketpair()
    a.setblocking(False)
    got = []

    def on_read():
        got.append(a.recv(100))
        if len(got) == 2:
            assert loop.remove_reader(a.fileno())
            b.send(b"unread")  # no reader any more: stays in the socket
            loop.call_later(0.05, loop.stop)
        else:
            b.send(b"two")
    loop.add_reader(a.fileno(), on_read)
    b.send(b"one")
    guard = loop.call_later(5, loop.stop)  # a reader that never runs fails, not hangs
    loop.run_forever()
    guard.cancel()
    assert got == [b"one", b"two"]
    assert a.recv(100) == b"unread"
    assert not loop.remove_reader(a.fileno())
    a.close()
    b.close()


def test_a_signal_runs_its_callback_in_the_loop(loop):
    seen = []
    loop.add_signal_handler(signal.SIGUSR1, lambda tag: (seen.append(tag), loop.stop()), "usr1")
    loop.call_later(0.01, os.kill, os.getpid(), signal.SIGUSR1)
    loop.call_later(5, loop.stop)  # a lost signal fails the assertion, not the run
    loop.run_forever()
    assert seen == ["usr1"]


def test_a_blocked_signal_waits_and_runs_once_unblocked(loop):
    seen = []
    loop.add_signal_handler(signal.SIGUSR1, lambda: (seen.append(1), loop.stop()))
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        loop.call_soon(signal.pthread_sigmask, signal.SIG_SETMASK, old)
        loop.call_later(5, loop.stop)
        loop.run_forever()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    assert seen == [1]


def test_a_callback_that_raises_is_logged_and_the_loop_goes_on(loop, monkeypatch):
    from scalws.control.logs import log
    out = io.StringIO()
    monkeypatch.setattr(log, "stream", out)
    seen = []
    loop.call_soon(lambda: 1 / 0)
    loop.call_soon(seen.append, "after")
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == ["after"]
    assert "[error]" in out.getvalue() and "ZeroDivisionError" in out.getvalue()


def test_close(loop):
    assert not loop.is_closed()
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)
    loop.close()
    assert loop.is_closed()
    assert signal.set_wakeup_fd(-1) == -1  # the wake-up fd was taken back


def test_a_writer_runs_until_removed_and_a_reader_on_the_same_fd_keeps_running(loop):
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    seen = []

    def on_write():
        seen.append("w")
        a.send(b"x")
        loop.remove_writer(a.fileno())
        b.send(b"y")

    def on_read():
        seen.append(a.recv(10))
        loop.stop()
    loop.add_reader(a.fileno(), on_read)
    loop.add_writer(a.fileno(), on_write)
    loop.call_later(5, loop.stop)
    loop.run_forever()
    assert seen == ["w", b"y"]
    assert b.recv(10) == b"x"
    assert loop.remove_reader(a.fileno()) and not loop.remove_writer(a.fileno())
    a.close()
    b.close()
