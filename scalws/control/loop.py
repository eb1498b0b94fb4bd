"""The worker's outer loop: readers, timers, signals; nothing per request.

A worker's requests never pass through this loop: the engine's own epoll
holds every listener and connection, and `Engine._on_ready` serves from it
for up to SERVE_MS per call (ADR 0003). What is left for the outer loop is
one reader for the engine's relay fd, one for the master's control socket,
the engine's tick (4 a second), a shutdown timer, and six signals (and,
in the status process, a small HTTP/1 server: control/statusd.py). uvloop
did that until issue 37; with it came asyncio and ssl, 5.7 MiB of objects
and libraries in every worker's image (the master imports what a worker
runs, to share it) and a private copy of what each worker touches of them.
This loop is what the worker used of uvloop's API (and add_writer), on `select.epoll` (ADR
0035, docs/benchmarks/2026-12-07-footprint.md).

Semantics as asyncio's: callbacks run in the loop, in order (call_soon
FIFO, then readers, then due timers, each batch as it stood when the
iteration began); a callback that raises is logged and the loop goes on;
`stop()` ends `run_forever()` after the current batch. Signals: a
Python-level handler that does nothing and `signal.set_wakeup_fd`, whose
bytes (the signal numbers) wake the loop, which runs the callbacks; a
signal that interrupts the engine's serve call ends it early (EINTR), as
before.
"""
from __future__ import annotations

import collections
import heapq
import os
import select
import signal
import time
import traceback

from scalws.control.logs import log


class Handle:
    __slots__ = ("cb", "args", "cancelled")

    def __init__(self, cb, args):
        self.cb = cb
        self.args = args
        self.cancelled = False

    def cancel(self):
        self.cancelled = True
        self.cb = self.args = None  # what it holds goes now, not when it is due

    def _run(self):
        try:
            self.cb(*self.args)
        except Exception:  # noqa: BLE001 - as asyncio: logged, the loop goes on
            log.error("exception in callback %r:\n%s", self.cb, traceback.format_exc())


class TimerHandle(Handle):
    __slots__ = ("when", "seq")

    def __init__(self, when, seq, cb, args):
        super().__init__(cb, args)
        self.when = when
        self.seq = seq

    def __lt__(self, other):
        return (self.when, self.seq) < (other.when, other.seq)


_READ = select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR | select.EPOLLRDHUP
_WRITE = select.EPOLLOUT | select.EPOLLHUP | select.EPOLLERR


def _noop(signum, frame):
    pass


class Loop:
    def __init__(self):
        self._ep = select.epoll()
        self._readers = {}                  # fd -> Handle
        self._writers = {}                  # fd -> Handle
        self._masks = {}                    # fd -> the events registered for it
        self._ready = collections.deque()   # Handles due now
        self._timers = []                   # heap of TimerHandles
        self._seq = 0
        self._signals = {}                  # signum -> Handle
        self._wake = None                   # (read fd, write fd) once a signal is handled
        self._stopping = False
        self._closed = False

    # ---- callbacks ------------------------------------------------------------------------
    def call_soon(self, cb, *args) -> Handle:
        h = Handle(cb, args)
        self._ready.append(h)
        return h

    def call_later(self, delay, cb, *args) -> TimerHandle:
        self._seq += 1
        h = TimerHandle(time.monotonic() + max(0.0, delay), self._seq, cb, args)
        heapq.heappush(self._timers, h)
        return h

    # ---- descriptors ----------------------------------------------------------------------
    def add_reader(self, fd, cb, *args) -> None:
        self._add(fd, self._readers, cb, args)

    def add_writer(self, fd, cb, *args) -> None:
        self._add(fd, self._writers, cb, args)

    def remove_reader(self, fd) -> bool:
        return self._remove(fd, self._readers)

    def remove_writer(self, fd) -> bool:
        return self._remove(fd, self._writers)

    def _add(self, fd, table, cb, args):
        old = table.get(fd)
        if old is not None:
            old.cancel()
        table[fd] = Handle(cb, args)
        self._update(fd)

    def _remove(self, fd, table):
        h = table.pop(fd, None)
        if h is None:
            return False
        h.cancel()
        self._update(fd)
        return True

    def _update(self, fd):
        mask = (select.EPOLLIN if fd in self._readers else 0) | \
            (select.EPOLLOUT if fd in self._writers else 0)
        old = self._masks.get(fd, 0)
        if mask == old:
            return
        try:
            if not mask:
                del self._masks[fd]
                self._ep.unregister(fd)
            elif old:
                self._masks[fd] = mask
                self._ep.modify(fd, mask)
            else:
                self._ep.register(fd, mask)
                self._masks[fd] = mask
        except OSError:
            if mask:
                raise
            # unregistering a descriptor closed already: the kernel dropped it

    # ---- signals --------------------------------------------------------------------------
    def add_signal_handler(self, sig, cb, *args) -> None:
        if self._wake is None:
            r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self._wake = (r, w)
            self._ep.register(r, select.EPOLLIN)
            signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self._signals[sig] = Handle(cb, args)
        signal.signal(sig, _noop)
        signal.siginterrupt(sig, True)

    def _read_signals(self):
        while True:
            try:
                data = os.read(self._wake[0], 256)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            for signum in data:
                h = self._signals.get(signum)
                if h is not None:
                    self._ready.append(h)

    # ---- running --------------------------------------------------------------------------
    def run_forever(self) -> None:
        self._stopping = False
        try:
            while not self._stopping:
                self._run_once()
        finally:
            self._stopping = False

    def stop(self) -> None:
        self._stopping = True

    def _run_once(self):
        if self._ready:
            timeout = 0
        elif self._timers:
            timeout = max(0.0, self._timers[0].when - time.monotonic())
        else:
            timeout = -1
        wake = self._wake[0] if self._wake else -1
        for fd, ev in self._ep.poll(timeout):
            if fd == wake:
                self._read_signals()
                continue
            # an error or a hang-up wakes both: each finds it on its call
            if ev & _READ:
                h = self._readers.get(fd)
                if h is not None:
                    self._ready.append(h)
            if ev & _WRITE:
                h = self._writers.get(fd)
                if h is not None:
                    self._ready.append(h)
        now = time.monotonic()
        timers = self._timers
        while timers and timers[0].when <= now:
            h = heapq.heappop(timers)
            if not h.cancelled:
                self._ready.append(h)
        for _ in range(len(self._ready)):
            h = self._ready.popleft()
            if not h.cancelled:
                h._run()

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._wake is not None:
            signal.set_wakeup_fd(-1)
            for sig in self._signals:
                signal.signal(sig, signal.SIG_DFL)
            os.close(self._wake[0])
            os.close(self._wake[1])
            self._wake = None
        self._ep.close()
        self._readers.clear()
        self._writers.clear()
        self._masks.clear()
        self._ready.clear()
        self._timers.clear()
