"""A raw asyncio TCP upstream answering canned bytes, most of them malformed.

    python -m tests.e2e.upstreams.raw --port N [--host 127.0.0.1]

Prints "READY <port>" once listening (`--port 0` picks one). Per connection
it reads one request head (and a Content-Length body, if any), answers the
bytes that RESPONSES gives for its path, and closes, except after a path in
KEEP_OPEN: then it reads and answers the next request on the same
connection. Every canned body carries the marker RAW_MARKER, so a test can
assert that a malformed answer never reached the client. /conns answers the
number of connections accepted so far.

Two markers script an answer's timing: PAUSE in its bytes waits PAUSE_S
there (so that what came before reaches the client alone: a 1xx before the
final answer, half a trailer section); READ_BODY reads the request's
Content-Length body there instead of before the answer (an upstream that
answers before it read the body, then reads it).

/once-per-conn answers the first request on a connection ("conn N", N the
connection's number, 1 for the first accepted) and keeps the connection open
without a Connection: close; a later /once-per-conn request on that
connection is read, and then the connection is closed without a byte: a
keep-alive server closing an idle connection just as a client reuses it.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys

RAW_MARKER = b"RAWBODY"
PAUSE = b"\0PAUSE\0"
PAUSE_S = 0.4
READ_BODY = b"\0READ_BODY\0"

# The trailer section of /trailers: the fields a proxy passes on, then (after
# a PAUSE, so that the section spans reads) those it must drop (RFC 9110
# 6.5.1: framing, routing, controls, authentication, content format, state,
# hop-by-hop, and X-Hidden, which the tests' route removes from answers).
TRAILERS_KEPT = [("X-Checksum", "sha-256=abc"), ("X-Count", "2"),
                 ("Content-Digest", "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:")]
TRAILERS_DROPPED = [("Content-Length", "99"), ("Transfer-Encoding", "chunked"), ("Host", "evil"),
                    ("Cache-Control", "no-store"), ("Authorization", "Basic eDp5"),
                    ("Set-Cookie", "a=b"), ("Content-Type", "text/html"), ("If-Match", "*"),
                    ("Location", "/elsewhere"), ("Connection", "close"), ("Server", "up"),
                    ("Date", "Mon, 01 Jan 2024 00:00:00 GMT"), ("X-Request-Id", "up"),
                    ("Proxy-Foo", "1"), ("TE", "trailers"), ("Trailer", "X-More"),
                    ("X-Hidden", "1")]


def _fields(pairs) -> bytes:
    return b"".join(f"{n}: {v}\r\n".encode() for n, v in pairs)

# What a proxy must make of each: "bad" = a 502, never passed through;
# "ok" = a valid answer, passed through whole.
RESPONSES: dict[str, bytes] = {
    # Content-Length that is not a number.
    "/bad-cl": b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n" + RAW_MARKER,
    # Two different Content-Lengths (response smuggling).
    "/two-cl": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"
               + RAW_MARKER,
    # Both Content-Length and Transfer-Encoding: chunked.
    "/cl-te": b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"7\r\n" + RAW_MARKER + b"\r\n0\r\n\r\n",
    # Not HTTP at all.
    "/garbage": b"HELLO WORLD\r\n\r\n" + RAW_MARKER,
    # A chunk size that is not hex.
    "/bad-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"zz\r\n" + RAW_MARKER + b"\r\n0\r\n\r\n",
    # No length: the body ends at the close (valid, RFC 9112 6.3 item 8).
    "/no-length": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"
                  b"close-delimited " + RAW_MARKER + b"\n",
    # An HTTP/1.0 answer, close-delimited.
    "/http10": b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n"
               b"from http/1.0 " + RAW_MARKER + b"\n",
    # Closes without a byte.
    "/early-close": b"",
    # Interim answers, then the final one.
    "/100-then-200": b"HTTP/1.1 100 Continue\r\n\r\n"
                     b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
                     b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nContent-Type: text/plain\r\n\r\n"
                     b"final " + RAW_MARKER[:4] + b"\n",
    # Two 103 Early Hints, each alone on the wire for PAUSE_S (hop-by-hop
    # fields and X-Hidden in the first), then a cacheable final answer.
    "/103": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n"
            b"Connection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nX-Hidden: 1\r\n\r\n" + PAUSE +
            b"HTTP/1.1 103 Early Hints\r\nLink: </b.js>; rel=preload\r\n\r\n" + PAUSE +
            b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nContent-Type: text/plain\r\n"
            b"Cache-Control: max-age=60\r\n\r\nfinal " + RAW_MARKER[:4] + b"\n",
    # 16 interim answers and a final one (as many as a proxy takes), and 17
    # with no final one (one more than it takes: the upstream never ends).
    "/16-interim": b"HTTP/1.1 102 Processing\r\n\r\n" * 15
                   + b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
                   + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "/17-interim": b"HTTP/1.1 102 Processing\r\n\r\n" * 17 + PAUSE * 50,
    # A 103 with a field of no QPACK static table entry, in mixed case.
    "/103-hint": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nX-Hint: Yes\r\n\r\n"
                 b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    # A 103, then the connection closes: no answer.
    "/103-then-close": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
    # Other interim answers: 102 and 104 passed on, the upstream's 100 not.
    "/102-104": b"HTTP/1.1 102 Processing\r\n\r\n"
                b"HTTP/1.1 104 Upload Resumption Supported\r\nUpload-Draft-Interop-Version: 6\r\n\r\n"
                b"HTTP/1.1 100 Continue\r\n\r\n" + PAUSE +
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    # A chunked body with a trailer section that spans two reads.
    "/trailers": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n"
                 b"Content-Type: text/plain\r\nCache-Control: max-age=60\r\n\r\n"
                 b"5\r\nhello\r\n6\r\n world\r\n0\r\n" + _fields(TRAILERS_KEPT[:2]) + PAUSE +
                 _fields(TRAILERS_KEPT[2:] + TRAILERS_DROPPED) + b"\r\n",
    # More trailer fields than a proxy takes (128), after the body went.
    "/many-trailers": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n" +
                      PAUSE + b"0\r\n" + b"".join(b"X-T%d: %d\r\n" % (i, i) for i in range(200)) +
                      b"\r\n",
    # Trailers and no body at all.
    "/trailers-only": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"0\r\nX-Only: 1\r\n\r\n",
    # Its own 100 Continue at once (no Expect reached it), the body read,
    # then the answer.
    "/100-early": b"HTTP/1.1 100 Continue\r\n\r\n" + READ_BODY +
                  b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    # A final answer before the body was read (then it is read).
    "/early-417": b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 4\r\n\r\nnope" + READ_BODY,
    "/early-200": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly" + READ_BODY,
    # A valid answer ("ok"), then bytes no request asked for: a whole second
    # response, so that a proxy reusing the connection would hand it to the
    # next request (a desync). The connection stays open (KEEP_OPEN).
    "/extra": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
              b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n" + RAW_MARKER,
    # 100 KiB of header lines.
    "/big-head": b"HTTP/1.1 200 OK\r\n"
                 + b"".join(b"X-Big-%04d: %s\r\n" % (i, b"v" * 88) for i in range(1024))
                 + b"Content-Length: 7\r\n\r\n" + RAW_MARKER,
}

# Paths after whose answer the connection is kept open for another request.
KEEP_OPEN = {"/extra", "/once-per-conn"}

# The bodies a proxy must pass on for the valid cases.
VALID_BODIES = {
    "/extra": b"ok",
    "/no-length": b"close-delimited " + RAW_MARKER + b"\n",
    "/http10": b"from http/1.0 " + RAW_MARKER + b"\n",
    "/100-then-200": b"final " + RAW_MARKER[:4] + b"\n",
    "/103": b"final " + RAW_MARKER[:4] + b"\n",
    "/102-104": b"ok",
    "/trailers": b"hello world",
    "/trailers-only": b"",
    "/100-early": b"ok",
    "/early-417": b"nope",
    "/early-200": b"early",
}

_CL = re.compile(rb"\r\ncontent-length:\s*(\d+)\s*\r\n", re.I)

ACCEPTED = 0


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
    global ACCEPTED
    ACCEPTED += 1
    seq = ACCEPTED
    served = 0  # requests answered on this connection
    try:
        path = ""
        while path == "" or path in KEEP_OPEN:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            m = _CL.search(head)
            body_len = int(m.group(1)) if m else 0
            parts = head.split(b" ", 2)
            path = parts[1].decode("latin-1") if len(parts) > 1 else "?"
            path = path.split("?", 1)[0] or "?"
            if body_len and READ_BODY not in RESPONSES.get(path, b""):
                await asyncio.wait_for(reader.readexactly(body_len), 10)
            if path == "/once-per-conn" and served:
                break  # a reused connection: closed under the request
            served += 1
            if path == "/conns":
                body = b'{"connections": %d}' % ACCEPTED
                out = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            elif path == "/once-per-conn":
                body = b"conn %d" % seq
                out = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            else:
                out = RESPONSES.get(path,
                                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            for i, piece in enumerate(out.split(PAUSE)):
                if i:
                    await asyncio.sleep(PAUSE_S)
                for j, part in enumerate(piece.split(READ_BODY)):
                    if j and body_len:
                        await asyncio.wait_for(reader.readexactly(body_len), 10)
                    if part:
                        writer.write(part)
                        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
            ConnectionError):
        pass
    finally:
        writer.close()


async def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    server = await asyncio.start_server(handle, args.host, args.port, limit=1 << 20,
                                        reuse_address=True, backlog=1024)
    sys.stdout.write(f"READY {server.sockets[0].getsockname()[1]}\n")
    sys.stdout.flush()
    await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    os._exit(0)
