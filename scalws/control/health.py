"""The master's health page, read by the status process for the probes
`/ready` and `/live` (docs/operations.md, "Probes"; a Kubernetes
Deployment's readinessProbe and livenessProbe).

One page of shared anonymous memory made by the master before it forks
anything, so every status process it forks (the first, a restarted one,
each reload's) maps the same page: the master's state and the monotonic
time of its last pass. The master writes it; the status process only
reads. No lock: a reader that sees the state of one write and the time of
another is at most one pass off.
"""
from __future__ import annotations

import mmap
import struct
import time

_PAGE = struct.Struct("<IIQ")  # state, reserved, heartbeat (CLOCK_MONOTONIC ns)

STARTING, READY, DRAINING = 0, 1, 2
NAMES = {STARTING: "starting", READY: "ready", DRAINING: "draining"}

# The master passes its loop at least once a second (and beats while it
# waits for workers during a start or a reload); a heartbeat older than this
# means it is stuck.
STALE = 10.0


class Health:
    def __init__(self):
        self.mm = mmap.mmap(-1, mmap.PAGESIZE)  # MAP_SHARED | MAP_ANONYMOUS
        self.state = STARTING
        self.beat()

    def set(self, state: int) -> None:
        self.state = state
        self.beat()

    def beat(self) -> None:
        _PAGE.pack_into(self.mm, 0, self.state, 0, time.monotonic_ns())


def read(mm) -> tuple[int, float]:
    """(state, seconds since the master's last beat) from a health page."""
    state, _, ns = _PAGE.unpack_from(mm, 0)
    return state, max(0.0, (time.monotonic_ns() - ns) / 1e9)


def probe(mm, path: str) -> tuple[bool, str]:
    """The answer to `/ready` or `/live`: (ok, one line saying why)."""
    state, age = read(mm)
    name = NAMES.get(state, f"state {state}")
    if age >= STALE:
        return False, f"master not responding: last seen {age:.1f}s ago ({name})\n"
    if path == "/live":
        return True, f"live: {name}\n"
    return state == READY, f"{name}\n"
