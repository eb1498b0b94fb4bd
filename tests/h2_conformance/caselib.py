"""The registry of the conformance cases (CASES, @case) and what the case
modules share: a request's fields (R), a plain GET that must be served
(ok), a 32-bit field (u32)."""
from __future__ import annotations

import struct

from .client import Conn, Failed

CASES = []


def case(section, title):
    def register(fn):
        fn.section, fn.title = section, title
        CASES.append(fn)
        return fn
    return register


def u32(v):
    return struct.pack(">I", v)


def R(path="/", method="GET", extra=(), authority="localhost"):
    """A request's fields, for raw blocks (the scheme does not matter to them)."""
    return [(":method", method), (":scheme", "http"), (":path", path), (":authority", authority),
            *extra]


def ok(c: Conn, sid=1, path="/"):
    """A plain GET on sid is answered 200 (the connection is usable)."""
    c.headers(sid, c.req(path))
    status = c.status(sid)
    if status != 200:
        raise Failed(f"GET {path} answered {status}")
