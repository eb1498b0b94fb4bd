"""Ports for the servers the e2e tests start.

`bind(0)` hands out a port from the kernel's ephemeral range, the pool every
outgoing connection takes its source port from: between the moment a test
picks such a port and the moment scalwsd binds it, a client connection (a
readiness probe, a `--check-config` run, an upstream pool) can take it, and
the server fails with "Address already in use" (seen in a fresh clone's
`make test`, 2026-12-05). These ports come from below that range instead, in
turn from a start that differs per process, each checked free by a bind: no
connection is ever given one, and one pytest process never hands the same
port out twice before it has gone round the range. bench/ uses 18xxx.
"""
from __future__ import annotations

import os
import random
import socket

LOW, HIGH = 20000, 32000


def _bounds() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        eph_low = 32768
    return LOW, min(HIGH, eph_low)


_low, _high = _bounds()
_next = random.Random(os.getpid()).randrange(_low, _high) if _high - _low >= 1000 else 0


def free_port(host: str = "127.0.0.1", family: int = socket.AF_INET) -> int:
    """A TCP port nothing listens on at `host`, outside the ephemeral range
    (the kernel's choice when the range leaves no room below it)."""
    global _next
    if not _next:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return s.getsockname()[1]
    for _ in range(_high - _low):
        port = _next
        _next = _low + (_next + 1 - _low) % (_high - _low)
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_low}-{_high - 1} on {host}")
