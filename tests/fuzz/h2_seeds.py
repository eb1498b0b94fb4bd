"""Writes the hand-made seeds of tests/fuzz/corpus/h2 (fuzz_h2.c): what a
client sends after the preface and its first SETTINGS. Run from the
repository root: .venv/bin/python tests/fuzz/h2_seeds.py"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import hpack  # noqa: E402

from tests.h2_conformance.client import (  # noqa: E402
    ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, INITIAL_WINDOW_SIZE,
    PADDED, PING, PRIORITY, RST_STREAM, SETTINGS, WINDOW_UPDATE, frame, hp_int, hp_literals,
    settings)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "h2")


def req(path="/r", method="GET", extra=()):
    return [(":method", method), (":scheme", "http"), (":path", path), (":authority", "x"), *extra]


def seeds():
    enc = hpack.Encoder()
    ack = frame(SETTINGS, ACK, 0)
    yield "get", ack + frame(HEADERS, END_STREAM | END_HEADERS, 1, enc.encode(req()))
    enc = hpack.Encoder()
    yield "three-gets-dynamic-table", ack + b"".join(
        frame(HEADERS, END_STREAM | END_HEADERS, sid, enc.encode(req(p, extra=[("x-a", "indexed value")])))
        for sid, p in ((1, "/r"), (3, "/nope"), (5, "/big")))
    yield "big-window", frame(SETTINGS, 0, 0, settings((INITIAL_WINDOW_SIZE, 10))) + frame(
        HEADERS, END_STREAM | END_HEADERS, 1, hp_literals(req("/big"))) + frame(
        WINDOW_UPDATE, 0, 1, struct.pack(">I", 20000)) + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 20000))
    yield "post-body", frame(HEADERS, END_HEADERS, 1, hp_literals(req("/r", "POST", [("content-length", "5")]))) + \
        frame(DATA, END_STREAM, 1, b"hello")
    yield "proxy-post-trailers", frame(HEADERS, END_HEADERS, 1, hp_literals(req("/up/x", "POST"))) + \
        frame(DATA, 0, 1, b"part") + frame(HEADERS, END_STREAM | END_HEADERS, 1, hp_literals([("x-t", "1")]))
    yield "proxy-get", frame(HEADERS, END_STREAM | END_HEADERS, 1, hp_literals(req("/up/a?b=c")))
    b = hp_literals(req("/r", extra=[("cookie", "a=1"), ("cookie", "b=2")]))
    yield "continuation", frame(HEADERS, END_STREAM, 1, b[:7]) + frame(CONTINUATION, 0, 1, b[7:20]) + \
        frame(CONTINUATION, END_HEADERS, 1, b[20:])
    yield "padded", frame(HEADERS, END_HEADERS | PADDED, 1, b"\x03" + hp_literals(req("/r", "PUT")) + b"\0\0\0") + \
        frame(DATA, END_STREAM | PADDED, 1, b"\x02ab\0\0")
    yield "reset-mid-answer", frame(HEADERS, END_STREAM | END_HEADERS, 1, hp_literals(req("/big"))) + \
        frame(RST_STREAM, 0, 1, struct.pack(">I", 8)) + frame(HEADERS, END_STREAM | END_HEADERS, 3, hp_literals(req()))
    yield "ping-priority-goaway", frame(PING, 0, 0, b"12345678") + frame(PRIORITY, 0, 3, b"\0\0\0\0\x10") + \
        frame(HEADERS, END_STREAM | END_HEADERS, 5, hp_literals(req())) + frame(GOAWAY, 0, 0, b"\0" * 8)
    yield "head-options-connect", frame(HEADERS, END_STREAM | END_HEADERS, 1, hp_literals(req("/r", "HEAD"))) + \
        frame(HEADERS, END_STREAM | END_HEADERS, 3, hp_literals(req("*", "OPTIONS"))) + \
        frame(HEADERS, END_STREAM | END_HEADERS, 5, hp_literals([(":method", "CONNECT"), (":authority", "x:1")]))
    yield "bad-content-length", frame(HEADERS, END_HEADERS, 1, hp_literals(req("/r", "POST", [("content-length", "9")]))) + \
        frame(DATA, END_STREAM, 1, b"abc")
    yield "too-big-body", frame(SETTINGS, 0, 0, b"") + frame(HEADERS, END_HEADERS, 1, hp_literals(req("/up/", "POST"))) + \
        b"".join(frame(DATA, 0, 1, b"z" * 16384) for _ in range(5)) + frame(DATA, END_STREAM, 1, b"")
    yield "table-size-update", frame(HEADERS, END_STREAM | END_HEADERS, 1, hp_int(0, 5, 0x20) + hp_literals(req()))
    yield "path-dots", frame(HEADERS, END_STREAM | END_HEADERS, 1, hp_literals(req("/a/../r/%2e%2e/./x?q")))
    yield "many-headers", frame(HEADERS, END_STREAM | END_HEADERS, 1,
                                hp_literals(req("/r", extra=[(f"x-h{i}", "v" * 50) for i in range(80)])))

    # Framed mode (first byte 0x02): records [type][flags][stream][len][bytes];
    # HEADERS with flag 0x80 get a request's fields from the stream byte.
    def rec(ftype, flags, sid, payload=b""):
        return bytes([ftype, flags, sid, len(payload)]) + payload
    yield "framed-get", b"\x02" + rec(4, 1, 0) + rec(HEADERS, 0x80 | END_STREAM | END_HEADERS, 1)
    yield "framed-post-proxy", b"\x02" + rec(HEADERS, 0x80 | END_HEADERS, 0x29) + \
        rec(DATA, 0, 0x29, b"abc") + rec(HEADERS, END_STREAM | END_HEADERS, 0x29, hp_literals([("x-t", "1")]))
    yield "framed-big-window", b"\x02" + rec(HEADERS, 0x80 | END_STREAM | END_HEADERS, 5) + \
        rec(WINDOW_UPDATE, 0, 5, struct.pack(">I", 100000)) + rec(RST_STREAM, 0, 5, struct.pack(">I", 8))
    yield "framed-head-cl", b"\x02" + rec(HEADERS, 0x80 | END_HEADERS, 0x41, hp_literals([("content-length", "3")])) + \
        rec(DATA, END_STREAM, 0x41, b"xyz")
    yield "framed-leave", b"\x03" + rec(HEADERS, 0x80 | END_STREAM | END_HEADERS, 5) + \
        rec(HEADERS, 0x80 | END_STREAM | END_HEADERS, 9)
    # a reset in the packet that asks: the answer's HEADERS is queued, never framed
    cancel = struct.pack(">I", 8)
    yield "framed-reset-before-answer", b"\x02" + rec(HEADERS, 0x80 | END_STREAM | END_HEADERS, 1) + \
        rec(RST_STREAM, 0, 1, cancel)
    yield "framed-reset-before-big-answer", b"\x02" + rec(HEADERS, 0x80 | END_STREAM | END_HEADERS, 5) + \
        rec(RST_STREAM, 0, 5, cancel)
    yield "framed-resets-interleaved", b"\x03" + b"".join(
        rec(HEADERS, 0x80 | END_STREAM | END_HEADERS, s) for s in (1, 3)) + rec(RST_STREAM, 0, 1, cancel) + \
        rec(HEADERS, 0x80 | END_STREAM | END_HEADERS, 7) + rec(RST_STREAM, 0, 3, cancel) + rec(RST_STREAM, 0, 7, cancel)
    # PRIORITY_UPDATE (0x10, RFC 9218 §7.1) before the HEADERS it names, and for one never opened
    yield "framed-priority-update-early", b"\x02" + rec(0x10, 0, 0, struct.pack(">I", 1) + b"u=1") + \
        rec(0x10, 0, 0, struct.pack(">I", 3) + b"u=0, i") + rec(HEADERS, 0x80 | END_STREAM | END_HEADERS, 1) + \
        rec(HEADERS, 0x80 | END_STREAM | END_HEADERS, 3) + rec(0x10, 0, 0, struct.pack(">I", 5) + b"u=9")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(OUT, "seed-" + name), "wb") as f:
            f.write(data)
