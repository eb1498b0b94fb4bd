#!/usr/bin/env python3
"""Seeds of tests/fuzz/corpus/h2sess (fuzz_h2sess.c's input format).

    python3 tests/fuzz/h2sess_seeds.py tests/fuzz/corpus/h2 tests/fuzz/corpus/h2sess

Writes, into the second folder:
  - h2-NAME: every input of corpus/h2 (fuzz_h2.c's whole-engine inputs)
    as raw mode: the preface and the empty SETTINGS fuzz_h2 sends first,
    then the input's bytes, or its framed records expanded as fuzz_h2's
    framed() does (a valid request's fields before a HEADERS record with
    flag 0x80); our settings and the ways of answering cycle over them;
  - seed-raw-*: hand-made client exchanges (requests with bodies,
    trailers, CONTINUATION, SETTINGS that shrink the header table and the
    windows, WINDOW_UPDATE, PING, RST_STREAM, PRIORITY_UPDATE, bytes a few
    at a time, output out of room);
  - seed-oracle-*: oracle-mode inputs (byte 0 bit 7 set) over the settings,
    windows, chunks and actions.
The names (h2-*, seed-*) stay apart from libFuzzer's (content hashes).
"""
import os
import struct
import sys

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(typ, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([typ, flags]) + struct.pack(">I", sid) + payload


def lit(name, value):
    """An HPACK literal without indexing, new name, no Huffman (short strings)."""
    n, v = name.encode(), value.encode() if isinstance(value, str) else value
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def lit_inc(name, value):
    """An HPACK literal with incremental indexing, new name."""
    n, v = name.encode(), value.encode()
    return b"\x40" + bytes([len(n)]) + n + bytes([len(v)]) + v


def request(method="GET", path="/", extra=()):
    b = lit(":method", method) + lit(":scheme", "https") + lit(":path", path) + lit(":authority", "x")
    for n, v in extra:
        b += lit(n, v)
    return b


def settings(*pairs):
    return frame(4, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def framed(d):
    """fuzz_h2.c's framed(): records [type][flags][stream][len][bytes]."""
    methods = ["GET", "POST", "HEAD", "OPTIONS", "PUT", "CONNECT", "DELETE", "get"]
    paths = ["/r", "/big", "/up/x?y", "/nope", "*", "/a/../r", "/up/", ""]
    out = b""
    while len(d) >= 4:
        typ, flags, sid = d[0], d[1], d[2]
        ln = min(d[3], len(d) - 4)
        block = b""
        if typ == 1 and flags & 0x80:
            flags &= 0x7F
            block = (lit(":method", methods[sid >> 5]) + lit(":scheme", "http")
                     + lit(":path", paths[(sid >> 2) & 7]) + lit(":authority", "x"))
        body = block + d[4:4 + ln]
        out += frame(typ, flags, sid & 0x1F, body)
        d = d[4 + ln:]
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)

    def write(name, data):
        with open(os.path.join(dst, name), "wb") as f:
            f.write(data)

    start = PREFACE + frame(4, 0, 0)  # what fuzz_h2 sends first
    for i, name in enumerate(sorted(os.listdir(src))):
        with open(os.path.join(src, name), "rb") as f:
            d = f.read()
        body = framed(d[1:]) if d and d[0] & 2 else d
        f0 = 0x01 | (i % 4) << 1 | ((i // 4) % 16) << 3
        f1 = (i % 7 == 3) * 0x20 | (i % 5 == 1) * 0x40
        write("h2-" + name, bytes([f0 & 0x7F, f1]) + start + body)

    # ---- hand-made raw-mode exchanges (byte 0 bit 0 clear: the preface is added) ----
    s0 = settings()
    get1 = frame(1, 5, 1, request("GET", "/a", [("accept", "*/*"), ("user-agent", "seed")]))
    post3 = (frame(1, 4, 3, request("POST", "/up", [("content-length", "10")]))
             + frame(0, 0, 3, b"01234") + frame(0, 1, 3, b"56789"))
    trailers5 = (frame(1, 4, 5, request("PUT", "/t")) + frame(0, 0, 5, b"x" * 100)
                 + frame(1, 5, 5, lit("x-checksum", "abc")))
    blk = request("GET", "/c", [("x-long", "v" * 120), ("x-long2", "w" * 120)])
    cont7 = frame(1, 0, 7, blk[:40]) + frame(9, 0, 7, blk[40:100]) + frame(9, 4, 7, blk[100:]) \
        + frame(0, 1, 7, b"")
    wu = frame(8, 0, 0, struct.pack(">I", 1 << 20)) + frame(8, 0, 1, struct.pack(">I", 100000))
    ping = frame(6, 0, 0, b"12345678")
    rst9 = frame(1, 4, 9, request("POST", "/r")) + frame(0, 0, 9, b"a" * 50) + frame(3, 0, 9, b"\0\0\0\x08")
    pu = frame(0x10, 0, 0, struct.pack(">I", 11) + b"u=1, i") + frame(1, 5, 11, request("GET", "/p"))
    inc = frame(1, 5, 13, request("GET", "/i") + lit_inc("x-idx", "1")) \
        + frame(1, 5, 15, request("GET", "/j") + b"\xbe")  # the entry just added, by index 62
    seeds = {
        "get": s0 + get1,
        "post": s0 + post3,
        "trailers": s0 + trailers5,
        "continuation": s0 + cont7,
        "window-updates": s0 + wu + get1 + post3,
        "ping-rst": s0 + ping + rst9 + get1,
        "priority-update": s0 + pu,
        "indexed": s0 + inc,
        "all": s0 + get1 + post3 + trailers5 + cont7 + wu + ping + rst9 + pu + inc,
        # the client's windows of 1 then 100000, its header table 0 then 4096
        "small-windows": settings((4, 1), (1, 0)) + get1 + post3
        + settings((4, 100000)) + frame(8, 0, 0, struct.pack(">I", 1 << 24))
        + settings((1, 4096)) + trailers5,
        "table-changes": settings((1, 100)) + get1 + frame(4, 1, 0) + settings((1, 0))
        + frame(1, 5, 3, request("GET", "/b")) + settings((1, 8192)) + frame(1, 5, 5, request("GET", "/d")),
        "max-frame": settings((5, 1 << 20), (3, 1)) + get1 + frame(1, 5, 3, request("GET", "/2")),
        "settings-ack": s0 + frame(4, 1, 0) + get1,
        "bad-preface-settings": frame(8, 0, 0, b"\0\0\0\1") + get1,
        "goaway": s0 + get1 + frame(7, 0, 0, b"\0\0\0\1\0\0\0\0"),
        # an empty block over an empty HEADERS and an empty CONTINUATION
        # (the session passed hpack NULL: fuzz_h2's finding of 2026-12-05)
        "empty-continuation": s0 + frame(1, 0, 1) + frame(9, 4, 1) + frame(1, 5, 3, request("GET", "/b")),
        # DATA on an even stream below the highest (answered RST_STREAM on an idle stream)
        "data-even-stream": s0 + frame(1, 5, 3, request("GET", "/a")) + frame(0, 0, 2, b"x"),
    }
    for i, (name, data) in enumerate(sorted(seeds.items())):
        for f0, f1 in ((0x00, 0x00), (0x02 | 0x08, 0x13), (0x04 | 0x30, 0x21), (0x06 | 0x40, 0x7C)):
            write("seed-raw-%s-%02x%02x" % (name, f0, f1), bytes([f0, f1]) + data)

    # ---- oracle mode: byte 0 bit 7, then the actions ----
    acts = [
        bytes([0, 0, 0, 0, 4, 7]),
        bytes([0, 1, 2, 3, 5, 0, 0, 1, 6, 2]),
        bytes([7, 0] + [9] * 30 + [0x87, 1] + [3] * 30),
        bytes([5, 1, 0, 5, 4, 1, 5, 2, 2, 6, 3]),
        bytes(range(256)),
    ]
    heads = [(0x80, 0x00, 0x00), (0x81, 0x35, 0x06), (0xa6, 0x00, 0x11), (0xd7, 0x99, 0x0e),
             (0x8b, 0x10, 0x1d), (0xf2, 0xcc, 0x02), (0x9c, 0x01, 0x13)]
    for i, h in enumerate(heads):
        for j, a in enumerate(acts):
            write("seed-oracle-%d-%d" % (i, j), bytes(h) + a)


if __name__ == "__main__":
    main()
