"""Upstream servers for the reverse-proxy end-to-end tests.

- app.py: an aiohttp application (echo, downloads, uploads, slow and broken
  answers, WebSocket echo, health) run as `python -m tests.e2e.upstreams.app`.
- raw.py: a raw asyncio server answering canned, mostly malformed, bytes.
- faultproxy.py: a TCP proxy, in a thread, that resets, stalls, cuts and
  slows connections on demand (FaultProxy).
- fixtures.py: the pytest fixtures that start all of these (and Node.js and
  nginx upstreams) for one test and stop them after it.

The download pattern is defined here so that tests compute the expected
digest without importing aiohttp.
"""
from __future__ import annotations

import hashlib

PATTERN_PERIOD = 256
# Byte i of every download is (i * 7 + 3) & 0xff; the pattern repeats every
# 256 bytes, so a block of a multiple of 256 can be written over and over.
_BLOCK = bytes((i * 7 + 3) & 0xFF for i in range(PATTERN_PERIOD)) * 256  # 64 KiB


def pattern_block() -> bytes:
    """64 KiB of the download pattern, starting at offset 0."""
    return _BLOCK


def pattern(n: int) -> bytes:
    """The first n bytes of the download pattern (tests: small sizes only)."""
    reps = n // len(_BLOCK) + 1
    return (_BLOCK * reps)[:n]


def pattern_sha256(n: int) -> str:
    """sha256 hex digest of the first n bytes of the pattern, in constant memory."""
    h = hashlib.sha256()
    full, rest = divmod(n, len(_BLOCK))
    for _ in range(full):
        h.update(_BLOCK)
    h.update(_BLOCK[:rest])
    return h.hexdigest()
