#!/usr/bin/env python3
"""Writes the seeds of tests/fuzz/corpus/h3sess (fuzz_h3sess.c's input
format): a client's control and QPACK streams, requests whole and cut,
with bodies, sections waiting for inserts, partial takes, late
acknowledgements, GOAWAY, PRIORITY_UPDATEs before their requests, and a
few of the errors test_h3sess.c crafts.

    python3 tests/fuzz/h3sess_seeds.py tests/fuzz/corpus/h3sess

The names (seed-*) stay apart from libFuzzer's (content hashes)."""
import os
import sys

FIN, TAKE, PART, ACK, CLOSE, GOAWAY = 1, 2, 4, 8, 16, 32


def varint(v):
    if v < 64:
        return bytes([v])
    if v < 16384:
        return (v | 0x4000).to_bytes(2, "big")
    return (v | 0x80000000).to_bytes(4, "big")


def frame(t, payload):
    return varint(t) + varint(len(payload)) + payload


def lit(index, value):  # a literal with a static name reference, no Huffman
    v = value.encode()
    return bytes([0x50 | index]) + bytes([len(v)]) + v


GET = bytes([0, 0, 0xD1, 0xD7, 0xC1]) + lit(0, "a.example")  # GET https / a.example
POST = bytes([0, 0, 0xD4, 0xD7, 0xC1]) + lit(0, "a.example") + bytes([0x54, 0x01]) + b"5"
CONTROL = bytes([0]) + frame(4, varint(1) + varint(4096) + varint(7) + varint(100))
# QPACK encoder stream: capacity 220, insert :authority www.example.com
QENC = bytes([2, 0x3F, 0xBD, 0x01, 0xC0, 0x0F]) + b"www.example.com"
# a section using that entry: Required Insert Count 1 (encoded 2 at 4096: 1 % 256 + 1), Base 1
DYN = bytes([2, 0, 0xD1, 0xD7, 0xC1, 0x80])


def sel(kind_uni, k):  # fuzz_h3sess's stream byte: request 4k, uni 4k+2
    return (k << 2) | (1 if kind_uni else 0)


def rec(s, flags, data):
    out = b""
    while True:
        part, data = data[:255], data[255:]
        out += bytes([s, flags if not data else flags & ~FIN, len(part)]) + part
        if not data:
            return out


def main(d):
    os.makedirs(d, exist_ok=True)
    seeds = {}
    base = rec(sel(1, 0), 0, CONTROL)
    seeds["get"] = bytes([5]) + base + rec(sel(0, 0), FIN | TAKE | ACK, frame(1, GET)) + \
        rec(sel(0, 0), CLOSE, b"")
    seeds["get-cut"] = bytes([5]) + base + b"".join(
        rec(sel(0, 0), (FIN if i == len(frame(1, GET)) - 1 else 0) | TAKE,
            frame(1, GET)[i:i + 1]) for i in range(len(frame(1, GET)))) + rec(sel(0, 0), ACK, b"")
    seeds["post"] = bytes([5]) + base + rec(sel(0, 1), TAKE, frame(1, POST)) + \
        rec(sel(0, 1), FIN | TAKE | PART, frame(0, b"hello")) + rec(sel(0, 1), TAKE | ACK, b"")
    seeds["dynamic"] = bytes([2]) + base + rec(sel(1, 1), 0, QENC) + \
        rec(sel(0, 2), FIN | TAKE | ACK, frame(1, DYN))
    seeds["blocked"] = bytes([5]) + base + rec(sel(0, 3), FIN, frame(1, DYN)) + \
        rec(sel(1, 1), TAKE, QENC) + rec(sel(0, 3), TAKE | ACK, b"")
    seeds["many"] = bytes([8]) + base + b"".join(
        rec(sel(0, k), FIN | (TAKE if k % 2 else 0) | (PART if k % 3 == 0 else 0), frame(1, GET))
        for k in range(12)) + rec(sel(0, 0), TAKE | ACK | GOAWAY, b"") + \
        rec(sel(0, 20), FIN | TAKE, frame(1, GET))
    seeds["late-acks"] = bytes([5]) + base + b"".join(
        rec(sel(0, k), FIN | TAKE, frame(1, GET)) for k in range(4)) + rec(sel(0, 0), ACK, b"") + \
        b"".join(rec(sel(0, k), CLOSE, b"") for k in range(4))
    seeds["unknown-types"] = bytes([5]) + base + rec(sel(1, 2), 0, bytes([0x21, 0xAA])) + \
        rec(sel(0, 0), FIN | TAKE, frame(0x21, b"xyz") + frame(1, GET) + frame(0x21, b""))
    # RFC 9218 7.2: PRIORITY_UPDATEs that overtake their requests (kept,
    # then taken), one that cannot be read, then the requests
    upd = b"".join(frame(0xF0700, varint(sid) + v)
                   for sid, v in ((4, b"u=0"), (0, b"u=7, i"), (8, b"u=(")))
    seeds["priority-early"] = bytes([5]) + base + rec(sel(1, 0), 0, upd) + \
        rec(sel(0, 0), FIN | TAKE, frame(1, GET)) + rec(sel(0, 1), FIN | TAKE | ACK, frame(1, GET))
    seeds["err-data-first"] = bytes([5]) + base + rec(sel(0, 0), FIN, frame(0, b"abc"))
    seeds["err-no-settings"] = bytes([5]) + rec(sel(1, 0), 0, bytes([0]) + frame(7, b"\x00"))
    seeds["err-truncated"] = bytes([5]) + base + rec(sel(0, 0), FIN, frame(1, GET)[:-2])
    seeds["err-control-closed"] = bytes([5]) + rec(sel(1, 0), FIN, CONTROL)
    for name, data in seeds.items():
        with open(os.path.join(d, "seed-" + name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {d}")


if __name__ == "__main__":
    main(sys.argv[1])
