"""The load of bench/soak.py: paced clients that account for every request.

One asyncio process (uvloop when present) runs *slots*: each sends one
request at a time at a fixed pace (`rate / slots` a second; a slot late by
up to 0.25 s catches up, one later starts afresh), choosing its kind at
random by weight. Slots live on three transports:

  h1      HTTP/1.1 over TCP, one kept-alive connection per slot
  h1-tls  HTTP/1.1 over TLS (ALPN http/1.1), one connection per slot
  h2      HTTP/2 over TLS (ALPN h2): several slots share one connection,
          one stream each at a time (our own client: python-h2 refuses
          every frame after a GOAWAY, even the graceful one)

and the kinds are

  static      a file of the static route, compared byte for byte
  proxy       the proxy route (no cache): /headers?set=X-Seq:N, whose answer
              must carry X-Seq: N (an answer meant for another request shows)
  cache-hit   a cached proxy route, one of a few URLs stored with a day of
              freshness: the answer must be the right entry (X-Key); one
              whose Cache-Status is not a hit is noted (not a failure)
  cache-miss  the same route, a unique URL the upstream marks no-store: X-Seq
  php         FastCGI to PHP-FPM: echo.php?n=N must answer "php N"
  ws          a WebSocket session (h1 and h1-tls only): a new connection, the
              upgrade, three text messages echoed, the close handshake, and
              the end of the connection

A client closes its connection after a random number of requests (so
accepting, TLS handshakes and closing are soaked too) and opens another at
its next request. What the server asks is honoured and counted, never a
failure: `Connection: close`; an idle connection it closed, seen before
reuse; an HTTP/2 GOAWAY (no new stream on that connection; the streams it
covers may still finish).

Accounting: every request sent is recorded once, with its outcome, and
nothing is retried. (An HTTP/2 request whose connection turns out to have
had its GOAWAY before the request left goes on another connection: it was
not sent.) A failure is a request without the expected answer: a transport
error (connect refused, reset, end of stream before the whole answer, TLS
error, no complete answer within `timeout`), a status other than 200 (101
for ws), a wrong body or field, an HTTP/2 stream reset, or one left out of
a GOAWAY.

A failure is *expected* only when it was in flight on a killed worker. The
harness stops the worker (SIGSTOP: it accepts and answers nothing more),
reads the client connections it holds (its socket inodes in /proc/PID/fd,
matched in /proc/net/tcp to the client's port), calls Load.mark_victims,
which marks the live connections with those ports (and keeps the others
for a connect the worker accepted before this loop saw it complete: it is
marked as it registers), then SIGKILLs it. So
the rule is: a transport error (not a status or a body), on a connection
that the killed worker held at the kill, seen after the kill. That covers
the requests waiting for an answer and those sent on such a connection
before the client could see it close. Everything else is *unexpected*: any
failure on a connection of a surviving worker, of a reload's old worker,
during an upstream restart, a connection refused.
"""
from __future__ import annotations

import array
import asyncio
import base64
import collections
import hashlib
import random
import socket
import ssl
import struct
import time

from hpack import Decoder, Encoder

KINDS = ("static", "proxy", "cache-hit", "cache-miss", "php", "ws")
PROTOS = ("h1", "h1-tls", "h2")
DEFAULT_MIX = {"static": 3, "proxy": 2, "cache-hit": 2, "cache-miss": 1, "php": 1.5, "ws": 0.5}
CACHE_KEYS = 16  # the cache-hit URLs
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Failure(Exception):
    """A request that did not get its expected answer. `transport` is True for
    errors of the connection (what a killed worker causes), False for a bad
    answer (status, body, fields, a stream refused by GOAWAY)."""

    def __init__(self, category, detail, transport):
        super().__init__(f"{category}: {detail}")
        self.category = category
        self.detail = detail
        self.transport = transport


def _transport_failure(exc) -> Failure:
    if isinstance(exc, Failure):
        return exc
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return Failure("timeout", "no complete answer in time", True)
    if isinstance(exc, asyncio.IncompleteReadError):
        what = "before any byte" if not exc.partial else f"after {len(exc.partial)} bytes"
        return Failure("eof", f"connection closed {what}", True)
    if isinstance(exc, ConnectionRefusedError):
        return Failure("connect", "connection refused", True)
    if isinstance(exc, ConnectionResetError):
        return Failure("reset", "connection reset", True)
    if isinstance(exc, ssl.SSLError):
        return Failure("tls", f"{exc.__class__.__name__}: {exc}", True)
    if isinstance(exc, (OSError, EOFError)):
        return Failure("io", f"{exc.__class__.__name__}: {exc}", True)
    if isinstance(exc, (asyncio.LimitOverrunError, ValueError)):
        return Failure("bad-answer", f"{exc.__class__.__name__}: {exc}", False)
    # Anything else is this client's own error: never an expected failure.
    return Failure("client", f"{exc.__class__.__name__}: {exc}", False)


class NotSent(Exception):
    """The connection picked for a request closed (or had its GOAWAY) before
    the request was sent: another one is picked; nothing was sent."""


class Target:
    """What the clients talk to: addresses, TLS, and the expected content."""

    def __init__(self, host, port, tls_port, cafile, static_files, php_path="/php/echo.php"):
        self.host = host
        self.port = port
        self.tls_port = tls_port
        self.static = static_files  # {url path: bytes}
        self.static_paths = sorted(static_files)
        self.php_path = php_path
        self.ctx_h1 = ssl.create_default_context(cafile=cafile)
        self.ctx_h1.set_alpn_protocols(["http/1.1"])
        self.ctx_h2 = ssl.create_default_context(cafile=cafile)
        self.ctx_h2.set_alpn_protocols(["h2"])


# ---- accounting -------------------------------------------------------------

class Stats:
    """Every request's outcome: counts and latencies per (kind, proto), every
    failure in full, and a per-second timeline."""

    def __init__(self, t0):
        self.t0 = t0
        self.phase = "warmup"
        self.sent = collections.Counter()        # (phase, kind, proto)
        self.ok = collections.Counter()
        self.lat = collections.defaultdict(lambda: array.array("d"))  # (kind, proto), soak only
        self.failures = []                       # dicts
        self.notes = collections.Counter()       # cache-hit answered by a miss, ...
        self.conn = collections.Counter()        # connections opened, closed by whom, ...
        self.timeline = collections.defaultdict(lambda: [0, 0, 0, 0, 0.0])
        # second -> [sent, ok, failed expected, failed unexpected, max latency ms]

    def record(self, kind, proto, start, end, failure=None, conn=None, info=None):
        key = (self.phase, kind, proto)
        self.sent[key] += 1
        ms = (end - start) * 1000.0
        sec = self.timeline[int(start - self.t0)]
        sec[0] += 1
        if ms > sec[4]:
            sec[4] = ms
        if failure is None:
            self.ok[key] += 1
            if self.phase == "soak":
                self.lat[(kind, proto)].append(ms)
            return
        victim = conn.victim if conn is not None else None
        expected = bool(failure.transport and victim is not None and end >= conn.victim_t)
        sec[2 if expected else 3] += 1
        rec = {
            "t_start": round(start - self.t0, 4), "t_end": round(end - self.t0, 4),
            "phase": self.phase, "kind": kind, "proto": proto,
            "category": failure.category, "detail": failure.detail,
            "expected": expected, "killed_by": victim,
            "conn": conn.id if conn is not None else None,
            "client_port": conn.port if conn is not None else None,
            "conn_requests_before": max(conn.requests - 1, 0) if conn is not None else None,
        }
        goaway = getattr(conn, "goaway", None)
        if goaway is not None:
            rec["goaway"] = {"last_stream": goaway[0], "code": H2_CODES.get(goaway[1], goaway[1]),
                             "t": round(conn.goaway_t - self.t0, 4)}
        if info:
            rec.update(info)
        self.failures.append(rec)


# ---- connections ------------------------------------------------------------

KILLED_PORT_S = 2.0  # how long a killed worker's unclaimed client port waits for its connect

class Registry:
    """The live connections, for Load.mark_victims."""

    def __init__(self):
        self.live = set()
        self.readers = set()  # HTTP/2 reader tasks
        self.seq = 0
        # Client ports a killed worker held that no live connection had yet:
        # port -> (kill number, when). A connect the worker accepted before
        # the SIGSTOP whose completion this loop had not run yet registers
        # after the kill (_connect takes its entry).
        self.killed = {}

    def next_id(self):
        self.seq += 1
        return self.seq


async def _connect(target, tls_ctx, reg, conn):
    """TCP connect, register (the port is known before any TLS byte, so a
    handshake cut by a kill is classified), then the TLS handshake."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(sock, (target.host, target.tls_port if tls_ctx else target.port))
    except BaseException:
        sock.close()
        raise
    conn.port = sock.getsockname()[1]
    conn.opened = time.monotonic()
    reg.live.add(conn)
    killed = reg.killed.pop(conn.port, None)
    if killed is not None and conn.opened - killed[1] < KILLED_PORT_S:
        conn.victim, conn.victim_t = killed
    try:
        if tls_ctx is None:
            return await asyncio.open_connection(sock=sock, limit=1 << 20)
        return await asyncio.open_connection(sock=sock, ssl=tls_ctx, server_hostname="localhost",
                                             ssl_handshake_timeout=10, limit=1 << 20)
    except BaseException:
        reg.live.discard(conn)
        sock.close()
        raise


class H1Conn:
    def __init__(self, reg, proto):
        self.id = reg.next_id()
        self.reg = reg
        self.proto = proto
        self.port = None
        self.opened = None
        self.victim = None   # the kill (its number) whose worker held this connection
        self.requests = 0
        self.last_used = None
        self.reader = self.writer = None
        self.closed = False

    async def open(self, target):
        ctx = target.ctx_h1 if self.proto == "h1-tls" else None
        self.reader, self.writer = await _connect(target, ctx, self.reg, self)
        return self

    def usable(self):
        return not self.closed and not self.reader.at_eof()

    def close(self):
        if not self.closed:
            self.closed = True
            self.reg.live.discard(self)
            if self.writer is not None:
                self.writer.transport.abort() if self.victim else self.writer.close()

    async def get(self, target, path, extra=b""):
        """One GET: (status, headers {lowercase bytes: bytes}, body)."""
        self.requests += 1
        port = target.tls_port if self.proto == "h1-tls" else target.port
        self.writer.write(b"GET %s HTTP/1.1\r\nHost: localhost:%d\r\nUser-Agent: scalws-soak\r\n%s\r\n"
                          % (path.encode(), port, extra))
        head = await self.reader.readuntil(b"\r\n\r\n")
        status, headers = _parse_head(head)
        body = await _read_body(self.reader, status, headers)
        self.last_used = time.monotonic()
        if headers.get(b"connection", b"").lower() == b"close":
            self.close()
        return status, headers, body


def _parse_head(head):
    lines = head.split(b"\r\n")
    if not lines[0].startswith(b"HTTP/1.1 ") or len(lines[0]) < 12:
        raise Failure("bad-head", repr(lines[0][:80]), False)
    status = int(lines[0][9:12])
    headers = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def _read_body(reader, status, headers):
    if status < 200 or status in (204, 304):
        return b""
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        parts = []
        while True:
            line = await reader.readuntil(b"\r\n")
            n = int(line.split(b";")[0], 16)
            if n == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return b"".join(parts)
            parts.append(await reader.readexactly(n))
            await reader.readexactly(2)
    if b"content-length" in headers:
        return await reader.readexactly(int(headers[b"content-length"]))
    return await reader.read()  # close-delimited


# ---- HTTP/2 -----------------------------------------------------------------

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = \
    0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 1, 1, 4, 8, 0x20
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_CODES = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR", 7: "REFUSED_STREAM",
            8: "CANCEL", 11: "ENHANCE_YOUR_CALM"}


def _frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes((ftype, flags)) + struct.pack(">I", sid) + payload


class _Stream:
    __slots__ = ("fut", "status", "headers", "body", "block")

    def __init__(self, fut):
        self.fut = fut
        self.status = None
        self.headers = None
        self.body = []
        self.block = b""


class H2Conn:
    """A minimal HTTP/2 client connection (frames by hand, HPACK from the
    `hpack` package). Its reader task completes each stream's future; after
    a GOAWAY the streams it left out fail at once, the others may finish,
    and no new stream is opened. python-h2 is not used: it refuses every
    frame after a GOAWAY, even the graceful one that promises to serve the
    streams in flight."""

    CONN_WINDOW = 1 << 30
    STREAM_WINDOW = 1 << 24

    def __init__(self, reg):
        self.id = reg.next_id()
        self.reg = reg
        self.proto = "h2"
        self.port = None
        self.opened = None
        self.victim = None
        self.requests = 0
        self.next_sid = 1
        self.streams = {}
        self.goaway = None       # (last stream id, code) once received
        self.closed = False
        self.lost = None         # the Failure every stream in flight got when the connection died
        self.enc = Encoder()
        self.dec = Decoder()
        self.recv_unacked = 0
        self.hblock_sid = None   # a header block continued in CONTINUATION frames
        self.draining = False    # replaced by a new connection: closed once its streams end
        self.task = None

    async def open(self, target):
        self.reader, self.writer = await _connect(target, target.ctx_h2, self.reg, self)
        alpn = self.writer.get_extra_info("ssl_object").selected_alpn_protocol()
        if alpn != "h2":
            self.close()
            raise Failure("alpn", f"the server chose {alpn!r}, not h2", True)
        self.authority = f"localhost:{target.tls_port}"
        settings = struct.pack(">HI", 2, 0) + struct.pack(">HI", 4, self.STREAM_WINDOW)
        self.writer.write(PREFACE + _frame(SETTINGS, 0, 0, settings) +
                          _frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.CONN_WINDOW - 65535)))
        self.task = asyncio.get_running_loop().create_task(self._read())
        self.reg.readers.add(self.task)
        self.task.add_done_callback(self.reg.readers.discard)
        return self

    def usable(self, limit):
        return not self.closed and self.goaway is None and self.requests < limit

    def idle(self):
        return not self.streams

    def close(self):
        if not self.closed:
            self.closed = True
            self.reg.live.discard(self)
            self.writer.transport.abort() if self.victim else self.writer.close()
        self._fail_all(self.lost or Failure("eof", "connection closed", True))

    def _fail_all(self, failure):
        for st in self.streams.values():
            if not st.fut.done():
                st.fut.set_exception(failure)
        self.streams.clear()

    async def get(self, path, timeout):
        if self.closed or self.goaway is not None:
            raise NotSent()
        self.requests += 1
        sid = self.next_sid
        self.next_sid += 2
        block = self.enc.encode([(":method", "GET"), (":scheme", "https"),
                                 (":authority", self.authority), (":path", path),
                                 ("user-agent", "scalws-soak")])
        st = _Stream(asyncio.get_running_loop().create_future())
        self.streams[sid] = st
        self.writer.write(_frame(HEADERS, END_HEADERS | END_STREAM, sid, block))
        try:
            async with asyncio.timeout(timeout):
                return await st.fut
        except TimeoutError:
            # The stream is given up (RST_STREAM CANCEL), not the connection:
            # its other streams go on, and it takes no new one.
            self.draining = True
            if not self.closed:
                self.writer.write(_frame(RST_STREAM, 0, sid, struct.pack(">I", 8)))
            raise Failure("timeout", f"stream {sid}: no complete answer in {timeout:g} s ("
                          + (f"head {st.status} and {sum(map(len, st.body))} body bytes received"
                             if st.status is not None else "nothing received") + ")", True) from None
        finally:
            self.streams.pop(sid, None)
            if (self.goaway is not None or self.draining) and not self.streams:
                self.close()

    async def _read(self):
        buf = b""
        try:
            while True:
                data = await self.reader.read(1 << 16)
                if not data:
                    raise Failure("eof", "connection closed", True)
                buf += data
                while len(buf) >= 9:
                    n = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + n:
                        break
                    ftype, flags = buf[3], buf[4]
                    sid = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                    payload = buf[9:9 + n]
                    buf = buf[9 + n:]
                    self._on_frame(ftype, flags, sid, payload)
        except Exception as exc:  # noqa: BLE001 - every way the connection dies fails its streams
            self.lost = _transport_failure(exc)
        finally:
            if not self.closed:
                self.closed = True
                self.reg.live.discard(self)
                self.writer.transport.abort()
            self._fail_all(self.lost or Failure("eof", "connection closed", True))

    def _on_frame(self, ftype, flags, sid, payload):
        if ftype == DATA:
            self.recv_unacked += len(payload)
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            st = self.streams.get(sid)
            if st is not None:
                st.body.append(payload)
                if flags & END_STREAM:
                    self._done(st)
            if self.recv_unacked > self.CONN_WINDOW // 2:
                self.writer.write(_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.recv_unacked)))
                self.recv_unacked = 0
        elif ftype in (HEADERS, CONTINUATION):
            if ftype == HEADERS:
                if flags & PADDED:
                    payload = payload[1:len(payload) - payload[0]]
                if flags & PRIORITY_FLAG:
                    payload = payload[5:]
                self.hblock_sid = sid
                self.hblock_end_stream = bool(flags & END_STREAM)
                self.hblock = payload
            else:
                self.hblock += payload
            if not flags & END_HEADERS:
                return
            fields = self.dec.decode(self.hblock)  # always: the HPACK table is the connection's
            st = self.streams.get(self.hblock_sid)
            if st is None:
                return
            if st.status is None:
                status = int(dict(fields).get(":status", "0"))
                if 100 <= status < 200:
                    return
                st.status = status
                st.headers = {k.lower().encode() if isinstance(k, str) else k.lower():
                              v.encode() if isinstance(v, str) else v for k, v in fields}
            if self.hblock_end_stream:
                self._done(st)
        elif ftype == RST_STREAM:
            st = self.streams.get(sid)
            code = struct.unpack(">I", payload[:4])[0]
            if st is not None and not st.fut.done():
                st.fut.set_exception(Failure("h2-reset", f"RST_STREAM {H2_CODES.get(code, code)}",
                                             False))
        elif ftype == SETTINGS:
            if not flags & ACK:
                self.writer.write(_frame(SETTINGS, ACK, 0))
        elif ftype == PING:
            if not flags & ACK:
                self.writer.write(_frame(PING, ACK, 0, payload))
        elif ftype == GOAWAY:
            last, code = struct.unpack(">II", payload[:8])
            if self.goaway is None:
                self.goaway_t = time.monotonic()
            self.goaway = (last, code)
            for s, st in list(self.streams.items()):
                if s > last and not st.fut.done():
                    st.fut.set_exception(Failure(
                        "h2-goaway", f"stream {s} left out of GOAWAY (last {last}, "
                        f"{H2_CODES.get(code, code)})", False))
            if not self.streams:
                self.close()

    def _done(self, st):
        if not st.fut.done():
            st.fut.set_result((st.status, st.headers, b"".join(st.body)))


# ---- the requests -----------------------------------------------------------

def make_request(kind, target, rng, seq):
    """(path, check): check(status, headers, body) raises Failure."""
    if kind == "static":
        path = rng.choice(target.static_paths)
        want = target.static[path]

        def check(status, headers, body):
            _status(status)
            if body != want:
                raise Failure("body", f"{path}: {len(body)} bytes, not the file's {len(want)}", False)
        return path, check
    if kind == "proxy":
        return f"/proxy/headers?set=X-Seq:{seq}", _field_check(b"x-seq", str(seq).encode())
    if kind == "cache-hit":
        k = rng.randrange(CACHE_KEYS)
        return (f"/cache/headers?set=Cache-Control:max-age%3D86400&set=X-Key:{k}",
                _field_check(b"x-key", str(k).encode(), cache="hit"))
    if kind == "cache-miss":
        return (f"/cache/headers?set=Cache-Control:no-store&set=X-Seq:{seq}",
                _field_check(b"x-seq", str(seq).encode(), cache="miss"))
    if kind == "php":
        want = f"php {seq}".encode()

        def check(status, headers, body):
            _status(status)
            if body != want:
                raise Failure("body", f"php: {body[:60]!r}, not {want!r}", False)
        return f"{target.php_path}?n={seq}", check
    raise ValueError(kind)


def _status(status, want=200):
    if status != want:
        raise Failure("status", f"status {status}", False)


def _field_check(name, value, cache=None):
    def check(status, headers, body, notes=None):
        _status(status)
        if body != b"headers":
            raise Failure("body", f"{body[:60]!r}", False)
        got = headers.get(name)
        if got != value:
            raise Failure("field", f"{name.decode()}: {got!r}, not {value!r}", False)
        if cache is not None and notes is not None:
            cs = headers.get(b"cache-status", b"")
            if cache == "hit" and b"; hit" not in cs:
                notes["cache-hit not a hit"] += 1
            if cache == "miss" and b"fwd=miss" not in cs:
                notes["cache-miss not fwd=miss"] += 1
    check.cache = cache
    return check


async def ws_session(target, reg, proto, rng, seq, stats, timeout):
    """One WebSocket session on its own connection, recorded as one request."""
    conn = H1Conn(reg, proto)
    conn.stage = "connect"
    start = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            await _ws_exchange(conn, target, proto, rng, seq)
        stats.record("ws", proto, start, time.monotonic())
    except Exception as exc:  # noqa: BLE001
        stats.record("ws", proto, start, time.monotonic(), _transport_failure(exc), conn,
                     {"ws_stage": conn.stage})
    finally:
        conn.close()


async def _ws_exchange(conn, target, proto, rng, seq):
    await conn.open(target)
    conn.stage = "upgrade"
    conn.requests = 1
    key = base64.b64encode(rng.randbytes(16))
    port = target.tls_port if proto == "h1-tls" else target.port
    conn.writer.write(b"GET /ws HTTP/1.1\r\nHost: localhost:%d\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                      b"Sec-WebSocket-Version: 13\r\nUser-Agent: scalws-soak\r\n\r\n" % (port, key))
    head = await conn.reader.readuntil(b"\r\n\r\n")
    status, headers = _parse_head(head)
    if status != 101:
        body = await _read_body(conn.reader, status, headers)
        raise Failure("status", f"status {status} to the upgrade: {body[:60]!r}", False)
    accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
    if headers.get(b"sec-websocket-accept") != accept:
        raise Failure("field", "wrong Sec-WebSocket-Accept", False)
    for i in range(3):
        conn.stage = f"echo {i}"
        msg = f"soak {seq} {i} {'x' * rng.randrange(200)}".encode()
        conn.writer.write(_ws_frame(0x1, msg, rng))
        op, data = await _ws_read(conn)
        if op != 0x1 or data != msg:
            raise Failure("body", f"ws echo {i}: opcode {op}, {data[:40]!r}", False)
    conn.stage = "close"
    conn.writer.write(_ws_frame(0x8, struct.pack(">H", 1000), rng))
    op, data = await _ws_read(conn)
    if op != 0x8:
        raise Failure("ws-close", f"opcode {op} instead of the close frame", False)
    # The upstream closes after the close handshake, and the tunnel with it.
    conn.stage = "end of the connection"
    if await conn.reader.read(1) != b"":
        raise Failure("ws-close", "bytes after the close frame", False)


def _ws_frame(opcode, payload, rng):
    mask = rng.randbytes(4)
    n = len(payload)
    head = bytes((0x80 | opcode,)) + (bytes((0x80 | n,)) if n < 126 else
                                      bytes((0x80 | 126,)) + struct.pack(">H", n))
    masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
    return head + mask + masked


async def _ws_read(conn):
    while True:
        b0, b1 = await conn.reader.readexactly(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", await conn.reader.readexactly(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", await conn.reader.readexactly(8))[0]
        if b1 & 0x80:
            raise Failure("ws-frame", "a masked frame from the server", False)
        data = await conn.reader.readexactly(n)
        op = b0 & 0x0F
        if op == 0x9:  # ping
            conn.writer.write(_ws_frame(0xA, data, random))
            continue
        if op == 0xA:
            continue
        return op, data


# ---- slots and the load -----------------------------------------------------

class Load:
    """The slots of every transport, paced to `rate` requests a second in
    total; pause() stops them and closes every connection (for the quiet
    resource samples), resume() starts them again, stop() ends them once
    their requests in flight are answered."""

    def __init__(self, target, rate, mix, lanes, h2_streams, seed=1, timeout=15.0,
                 churn=(50, 300), h2_churn=(200, 1000)):
        self.target = target
        self.rate = rate
        self.mix = mix
        self.lanes = lanes           # {"h1": n, "h1-tls": n, "h2": n connections}
        self.h2_streams = h2_streams
        self.seed = seed
        self.timeout = timeout
        self.churn = churn
        self.h2_churn = h2_churn
        self.reg = Registry()
        self.stats = Stats(time.monotonic())
        self.seq = 0
        self.running = asyncio.Event()
        self.stopping = False
        self.tasks = []
        self.idle = 0
        self.kills = []

    # -- control --
    def start(self):
        nslots = self.lanes["h1"] + self.lanes["h1-tls"] + self.lanes["h2"] * self.h2_streams
        self.nslots = nslots
        self.interval = nslots / self.rate if self.rate else 0.0
        # A slot late by less than this catches up (its next requests go at
        # once), so that the rate holds despite the slower answers.
        self.catch_up = max(self.interval, 0.25)
        loop = asyncio.get_running_loop()
        i = 0
        for proto in ("h1", "h1-tls"):
            for _ in range(self.lanes[proto]):
                self.tasks.append(loop.create_task(self._h1_slot(proto, i)))
                i += 1
        for _ in range(self.lanes["h2"]):
            lane = _H2Lane(self)
            for _ in range(self.h2_streams):
                self.tasks.append(loop.create_task(self._h2_slot(lane, i)))
                i += 1
        self.running.set()

    async def pause(self):
        """Returns once every slot is between requests with its connections closed."""
        self.running.clear()
        while self.idle < self.nslots:
            await asyncio.sleep(0.01)
        for conn in list(self.reg.live):
            conn.close()

    def resume(self):
        self.running.set()

    async def stop(self):
        self.stopping = True
        self.running.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for conn in list(self.reg.live):
            conn.close()
        for task in list(self.reg.readers):
            task.cancel()
        await asyncio.gather(*self.reg.readers, return_exceptions=True)

    def mark_victims(self, ports, kill_no, now):
        """The connections of the worker about to be killed (by client port);
        returns how many live connections were marked. A port no live
        connection has is kept a moment: its connect completed in the kernel
        (the worker accepted it) but not yet in this loop."""
        n = 0
        seen = set()
        for conn in self.reg.live:
            if conn.port in ports and conn.victim is None:
                conn.victim = kill_no
                conn.victim_t = now
                n += 1
            seen.add(conn.port)
        for port in set(ports) - seen:
            self.reg.killed[port] = (kill_no, now)
        return n

    # -- pacing --
    def _kind(self, rng, ws_ok):
        kinds = [k for k in KINDS if self.mix.get(k) and (ws_ok or k != "ws")]
        return rng.choices(kinds, [self.mix[k] for k in kinds])[0]

    def _next_seq(self):
        self.seq += 1
        return self.seq

    async def _pace(self, state):
        """Waits for the slot's next turn (or the resume after a pause);
        False once the load stops."""
        if not self.running.is_set():
            self.idle += 1
            await self._on_pause(state)
            await self.running.wait()
            self.idle -= 1
            state["next"] = time.monotonic()
        if self.stopping:
            return False
        now = time.monotonic()
        nxt = state["next"]
        if nxt > now:
            await asyncio.sleep(nxt - now)
        elif now - nxt > self.catch_up:
            nxt = now  # far behind (a slow answer, a pause): no burst to catch up
        state["next"] = nxt + self.interval
        return not self.stopping

    async def _on_pause(self, state):
        conn = state.get("conn")
        if conn is not None:
            conn.close()
            state["conn"] = None

    # -- HTTP/1.1 --
    async def _h1_slot(self, proto, i):
        rng = random.Random(self.seed * 1000 + i)
        state = {"next": time.monotonic() + rng.random() * self.interval, "conn": None}
        stats = self.stats
        while await self._pace(state):
            kind = self._kind(rng, True)
            seq = self._next_seq()
            if kind == "ws":
                await ws_session(self.target, self.reg, proto, rng, seq, stats, self.timeout)
                continue
            path, check = make_request(kind, self.target, rng, seq)
            conn = state["conn"]
            start = time.monotonic()
            info = None
            try:
                if conn is not None and not conn.usable():
                    stats.conn["h1 closed by the server while idle (seen before reuse)"] += 1
                    conn.close()
                    conn = None
                if conn is None:
                    conn = H1Conn(self.reg, proto)
                    conn.churn = rng.randint(*self.churn)
                    state["conn"] = conn
                    stats.conn[f"{proto} opened"] += 1
                    await asyncio.wait_for(conn.open(self.target), self.timeout)
                else:
                    info = {"idle_ms": round((start - conn.last_used) * 1000, 1)}
                status, headers, body = await asyncio.wait_for(
                    conn.get(self.target, path), self.timeout)
                _check(check, status, headers, body, stats)
                stats.record(kind, proto, start, time.monotonic())
                if conn.closed:
                    stats.conn["h1 Connection: close from the server"] += 1
                    state["conn"] = None
                elif conn.requests >= conn.churn:
                    conn.close()
                    state["conn"] = None
            except Exception as exc:  # noqa: BLE001
                f = _transport_failure(exc)
                if conn is not None:
                    info = dict(info or {}, path=path)
                stats.record(kind, proto, start, time.monotonic(), f, conn, info)
                if conn is not None:
                    conn.close()
                state["conn"] = None

    # -- HTTP/2 --
    async def _h2_slot(self, lane, i):
        rng = random.Random(self.seed * 1000 + i)
        state = {"next": time.monotonic() + rng.random() * self.interval}
        stats = self.stats
        while await self._pace(state):
            kind = self._kind(rng, False)
            seq = self._next_seq()
            path, check = make_request(kind, self.target, rng, seq)
            start = time.monotonic()
            conn = None
            try:
                while True:
                    conn = await lane.conn(rng, self.timeout)
                    try:
                        status, headers, body = await conn.get(path, self.timeout)
                        break
                    except NotSent:
                        continue
                _check(check, status, headers, body, stats)
                stats.record(kind, "h2", start, time.monotonic())
            except Exception as exc:  # noqa: BLE001
                stats.record(kind, "h2", start, time.monotonic(), _transport_failure(exc), conn,
                             {"path": path})


class _H2Lane:
    """One HTTP/2 connection shared by several slots: a new one is opened
    when it is closed, has had its GOAWAY, or has served its share."""

    def __init__(self, load):
        self.load = load
        self.current = None
        self.lock = asyncio.Lock()

    async def conn(self, rng, timeout):
        """The lane's connection, a new one if needed. Returns without
        yielding to the loop when the current one is usable, so that the
        caller's request goes out before any GOAWAY is read."""
        async with self.lock:
            c = self.current
            if c is not None and c.usable(c.churn):
                return c
            if c is not None:
                if c.goaway is not None:
                    self.load.stats.conn["h2 GOAWAY from the server"] += 1
                if c.idle():
                    c.close()
                else:
                    c.draining = True  # closed by its last stream (H2Conn.get)
            c = H2Conn(self.load.reg)
            c.churn = rng.randint(*self.load.h2_churn)
            self.current = c
            self.load.stats.conn["h2 opened"] += 1
            await asyncio.wait_for(c.open(self.load.target), timeout)
            return c

    def close(self):
        if self.current is not None:
            self.current.close()


def _check(check, status, headers, body, stats):
    """Runs a request's check; cache answers are noted in the soak phase only
    (the warm-up fills the cache)."""
    if getattr(check, "cache", None) is not None:
        check(status, headers, body, stats.notes if stats.phase == "soak" else None)
    else:
        check(status, headers, body)
