"""A raw asyncio TCP upstream answering canned bytes, most of them malformed.

    python -m tests.e2e.upstreams.raw --port N [--host 127.0.0.1]

Prints "READY <port>" once listening (`--port 0` picks one). Per connection
it reads one request head (and a Content-Length body, if any), answers the
bytes that RESPONSES gives for its path, and closes, except after a path in
KEEP_OPEN: then it reads and answers the next request on the same
connection. Every canned body carries the marker RAW_MARKER, so a test can
assert that a malformed answer never reached the client. /conns answers the
number of connections accepted so far.

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
            if m and int(m.group(1)):
                await asyncio.wait_for(reader.readexactly(int(m.group(1))), 10)
            parts = head.split(b" ", 2)
            path = parts[1].decode("latin-1") if len(parts) > 1 else "?"
            path = path.split("?", 1)[0] or "?"
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
            if out:
                writer.write(out)
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
