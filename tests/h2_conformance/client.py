"""A raw-frame HTTP/2 client for conformance cases (RFC 9113, RFC 7541).

Frames are built by hand (any length, flags, stream id or padding, valid
or not); header blocks come from the `hpack` package's encoder for valid
requests (Huffman and the dynamic table, so the server's decoder is
exercised) or from the byte-level helpers below for invalid ones. What the
server sends is read frame by frame; response header blocks go through one
`hpack` decoder per connection, in order, so its dynamic table follows the
server's.

The expectations a case ends with:
  conn_error(code)         GOAWAY with that error code, then the server
                           closes the connection (RFC 9113 §5.4.1);
  stream_error(sid, code)  RST_STREAM on that stream with that code, and
                           the connection still answers a PING (§5.4.2);
  response(sid)            a complete response on the stream;
  alive()                  a PING is answered and nothing went wrong.
Each raises Failed with what was seen instead.
"""
from __future__ import annotations

import contextlib
import os
import socket
import ssl
import struct
import time

import hpack

# Frame types (RFC 9113 §6) and flags.
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 0x1, 0x1, 0x4, 0x8, 0x20
TYPE_NAMES = {DATA: "DATA", HEADERS: "HEADERS", PRIORITY: "PRIORITY", RST_STREAM: "RST_STREAM",
              SETTINGS: "SETTINGS", PUSH_PROMISE: "PUSH_PROMISE", PING: "PING", GOAWAY: "GOAWAY",
              WINDOW_UPDATE: "WINDOW_UPDATE", CONTINUATION: "CONTINUATION"}

# Settings (§6.5.2).
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, \
    MAX_HEADER_LIST_SIZE = range(1, 7)

# Error codes (§7).
ERRORS = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
          "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL",
          "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY",
          "HTTP_1_1_REQUIRED"]
(NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, STREAM_CLOSED,
 FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR) = range(10)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def err_name(code: int) -> str:
    return ERRORS[code] if code < len(ERRORS) else f"0x{code:x}"


class Failed(AssertionError):
    """The server did not do what the case requires."""


class Frame:
    __slots__ = ("type", "flags", "sid", "payload", "fields")

    def __init__(self, ftype, flags, sid, payload):
        self.type, self.flags, self.sid, self.payload = ftype, flags, sid, payload
        self.fields = None  # a HEADERS frame's, decoded as it was read

    def code(self) -> int:
        """The error code of a GOAWAY or RST_STREAM."""
        return struct.unpack(">I", self.payload[4:8] if self.type == GOAWAY else self.payload[:4])[0]

    def __repr__(self):
        name = TYPE_NAMES.get(self.type, f"type{self.type}")
        extra = ""
        if self.type in (GOAWAY, RST_STREAM) and len(self.payload) >= (8 if self.type == GOAWAY else 4):
            extra = " " + err_name(self.code())
            if self.type == GOAWAY and len(self.payload) > 8:
                extra += f" {self.payload[8:80]!r}"
        return f"{name}(flags=0x{self.flags:x}, stream={self.sid}, len={len(self.payload)}{extra})"


# ---- building frames and header blocks ---------------------------------------------------------

def frame(ftype: int, flags: int, sid: int, payload: bytes = b"", length: int | None = None) -> bytes:
    """A frame; `length` overrides the length field (a lie about the payload)."""
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def settings(*pairs) -> bytes:
    return b"".join(struct.pack(">HI", k, v) for k, v in pairs)


def hp_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 §5.1) with `first`'s high bits set."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hp_str(s: bytes) -> bytes:
    """A string literal without Huffman (§5.2)."""
    return hp_int(len(s), 7) + s


def hp_literal(name, value) -> bytes:
    """A literal field without indexing, new name (§6.2.2): any bytes at all."""
    n = name.encode() if isinstance(name, str) else name
    v = value.encode() if isinstance(value, str) else value
    return b"\x00" + hp_str(n) + hp_str(v)


def hp_literals(fields) -> bytes:
    return b"".join(hp_literal(n, v) for n, v in fields)


def request_fields(path="/", method="GET", authority="localhost", scheme="http", extra=()):
    return [(":method", method), (":scheme", scheme), (":path", path), (":authority", authority),
            *extra]


# ---- the connection ------------------------------------------------------------------------------

class Conn:
    """One HTTP/2 connection to the server, cleartext (prior knowledge) or
    TLS with ALPN h2. With `handshake`, the preface and our SETTINGS are
    sent and the exchange of SETTINGS (and their ACKs) is complete before
    the case begins."""

    def __init__(self, host, port, tls=False, cafile=None, server_name="localhost",
                 client_settings=(), handshake=True, timeout=3.0):
        self.timeout = timeout
        raw = socket.create_connection((host, port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            ctx = ssl.create_default_context(cafile=cafile) if cafile else ssl._create_unverified_context()
            ctx.set_alpn_protocols(["h2"])
            raw = ctx.wrap_socket(raw, server_hostname=server_name)
            if raw.selected_alpn_protocol() != "h2":
                raise Failed(f"ALPN chose {raw.selected_alpn_protocol()!r}, not h2")
        self.sock = raw
        self.scheme = "https" if tls else "http"
        self.buf = b""
        self.closed = False
        self._cork = None  # bytes held by corked()
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.seen: list[Frame] = []        # every frame received, for messages
        self.server_settings: dict[int, int] = {}
        self.window_auto = True            # answer DATA with WINDOW_UPDATE
        self.conn_window = 65535           # what we may send on the connection (§6.9.1)
        if handshake:
            self.send(PREFACE + frame(SETTINGS, 0, 0, settings(*client_settings)))
            self.handshake()

    # -- I/O
    @contextlib.contextmanager
    def corked(self):
        """Frames sent inside go out in one write (one TLS record): the
        server reads them together, so a request and what makes it
        malformed arrive before any answer could go out."""
        self._cork = bytearray()
        try:
            yield self
        finally:
            data, self._cork = bytes(self._cork), None
            self.send(data)

    def send(self, data: bytes):
        if self._cork is not None:
            self._cork += data
            return
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.closed = True  # what the server said before is still readable

    def send_frame(self, ftype, flags, sid, payload=b"", length=None):
        self.send(frame(ftype, flags, sid, payload, length))

    def read_frame(self, timeout: float | None = None) -> Frame | None:
        """The next frame, or None once the server closed. Answers SETTINGS
        and PING as a client must; raises Failed after `timeout` of
        silence."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failed(f"no frame within {timeout or self.timeout}s; seen: {self.seen[-8:]}")
            self.sock.settimeout(left)
            try:
                b = self.sock.recv(65536)
            except (socket.timeout, TimeoutError):
                continue
            except (ConnectionResetError, ssl.SSLError, OSError):
                b = b""
            if not b:
                self.closed = True
                return None
            self.buf += b
        n = int.from_bytes(self.buf[:3], "big")
        f = Frame(self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF,
                  self.buf[9:9 + n])
        self.buf = self.buf[9 + n:]
        self.seen.append(f)
        if f.type == HEADERS:
            # Every header block goes through the decoder in the order it
            # came, whichever expectation reads it: skipping one would leave
            # the dynamic table behind the server's.
            f.fields = self._decode(f)
        if f.type == SETTINGS and not f.flags & ACK:
            for i in range(0, len(f.payload) - 5, 6):
                k, v = struct.unpack(">HI", f.payload[i:i + 6])
                self.server_settings[k] = v
            self.send_frame(SETTINGS, ACK, 0)
        elif f.type == PING and not f.flags & ACK:
            self.send_frame(PING, ACK, 0, f.payload)
        elif f.type == WINDOW_UPDATE and f.sid == 0 and len(f.payload) == 4:
            self.conn_window += struct.unpack(">I", f.payload)[0] & 0x7FFFFFFF
        elif f.type == DATA and self.window_auto and f.payload:
            inc = struct.pack(">I", len(f.payload))
            self.send(frame(WINDOW_UPDATE, 0, 0, inc) + frame(WINDOW_UPDATE, 0, f.sid, inc))
        return f

    def handshake(self):
        """Until the server's SETTINGS came and it acknowledged ours."""
        got_settings = got_ack = False
        while not (got_settings and got_ack):
            f = self.read_frame()
            if f is None:
                raise Failed(f"closed during the handshake; seen: {self.seen}")
            if f.type == SETTINGS:
                got_ack |= bool(f.flags & ACK)
                got_settings |= not f.flags & ACK
            elif f.type == GOAWAY:
                raise Failed(f"GOAWAY during the handshake: {f}")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    # -- requests
    def block(self, fields, huffman=True) -> bytes:
        return self.enc.encode(fields, huffman=huffman)

    def headers(self, sid, fields=None, block=None, end_stream=True, end_headers=True, flags=0,
                pad: int | None = None, priority: bytes | None = None):
        """A HEADERS frame with `fields` encoded (or a raw `block`)."""
        if block is None:
            block = self.block(fields if fields is not None else self.req())
        f = flags | (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
        payload = block
        if priority is not None:
            f |= PRIO
            payload = priority + payload
        if pad is not None:
            f |= PADDED
            payload = bytes([pad]) + payload + b"\0" * pad
        self.send_frame(HEADERS, f, sid, payload)

    def req(self, path="/", method="GET", extra=(), authority="localhost"):
        return request_fields(path, method, authority, self.scheme, extra)

    def data(self, sid, payload=b"", end_stream=True, pad: int | None = None):
        f = END_STREAM if end_stream else 0
        if pad is not None:
            f |= PADDED
            payload = bytes([pad]) + payload + b"\0" * pad
        self.send_frame(DATA, f, sid, payload)

    def decode(self, f: Frame) -> list[tuple[str, str]]:
        """A response HEADERS frame's fields (decoded when read_frame read it)."""
        return f.fields if f.fields is not None else self._decode(f)

    def _decode(self, f: Frame) -> list[tuple[str, str]]:
        """A HEADERS frame's fields (padding and priority taken off)."""
        p = f.payload
        if f.flags & PADDED:
            p = p[1:len(p) - p[0]]
        if f.flags & PRIO:
            p = p[5:]
        return [(n, v) for n, v in self.dec.decode(p)]

    # -- expectations
    def _describe(self):
        return f"seen: {self.seen}" + (" (then closed)" if self.closed else "")

    def conn_error(self, code: int):
        """GOAWAY(code), then the connection closes."""
        while True:
            f = self.read_frame()
            if f is None:
                raise Failed(f"closed without GOAWAY {err_name(code)}; {self._describe()}")
            if f.type == HEADERS:
                self.decode(f)
            if f.type == RST_STREAM:
                raise Failed(f"RST_STREAM where GOAWAY {err_name(code)} was due; {self._describe()}")
            if f.type == GOAWAY:
                if f.code() != code:
                    raise Failed(f"GOAWAY {err_name(f.code())}, not {err_name(code)}: {f}")
                break
        while True:  # §5.4.1: the endpoint MUST close the connection after it
            f = self.read_frame()
            if f is None:
                return
            if f.type in (HEADERS, DATA, RST_STREAM) or (f.type == GOAWAY and f.code() != code):
                raise Failed(f"{f} after the GOAWAY; {self._describe()}")

    def stream_error(self, sid: int, code: int, allow_response=False):
        """RST_STREAM(code) on sid; the connection lives on. With
        allow_response, a response on sid may come before the reset."""
        while True:
            f = self.read_frame()
            if f is None:
                raise Failed(f"closed where RST_STREAM {err_name(code)} was due; {self._describe()}")
            if f.type == GOAWAY:
                raise Failed(f"{f} where RST_STREAM {err_name(code)} on stream {sid} was due")
            if f.type == HEADERS:
                fields = self.decode(f)
                if f.sid == sid and not allow_response:
                    raise Failed(f"answered {dict(fields).get(':status')} on stream {sid} where "
                                 f"RST_STREAM {err_name(code)} was due")
            if f.type in (DATA, HEADERS) and f.sid == sid and f.flags & END_STREAM and not allow_response:
                # (with allow_response the answer may be complete before
                # the bad part of the request arrives; the reset follows)
                raise Failed(f"stream {sid} ended normally where RST_STREAM {err_name(code)} was due")
            if f.type == RST_STREAM and f.sid == sid:
                if f.code() != code:
                    raise Failed(f"RST_STREAM {err_name(f.code())}, not {err_name(code)}, on stream {sid}")
                break
        self.alive()

    def response(self, sid: int):
        """(status, fields, body, trailers) of a complete response on sid."""
        fields, body, trailers = None, b"", []
        while True:
            f = self.read_frame()
            if f is None:
                raise Failed(f"closed before the response on stream {sid} ended; {self._describe()}")
            if f.type == GOAWAY:
                raise Failed(f"{f} before the response on stream {sid} ended")
            if f.type == RST_STREAM and f.sid == sid:
                raise Failed(f"stream {sid} reset ({err_name(f.code())}) instead of answered")
            if f.type == HEADERS:
                decoded = self.decode(f)
                if f.sid == sid:
                    if fields is None:
                        fields = decoded
                    else:
                        trailers = decoded
            if f.type == DATA and f.sid == sid:
                p = f.payload
                if f.flags & PADDED:
                    p = p[1:len(p) - p[0]]
                body += p
            if f.type in (HEADERS, DATA) and f.sid == sid and f.flags & END_STREAM:
                break
        status = int(dict(fields)[":status"])
        return status, fields, body, trailers

    def status(self, sid: int) -> int:
        return self.response(sid)[0]

    def alive(self):
        """A PING is answered: the connection survived, nothing reset it."""
        opaque = os.urandom(8)
        self.send_frame(PING, 0, 0, opaque)
        while True:
            f = self.read_frame()
            if f is None:
                raise Failed(f"closed where the connection should live on; {self._describe()}")
            if f.type == GOAWAY:
                raise Failed(f"{f} where the connection should live on; {self._describe()}")
            if f.type == HEADERS:
                self.decode(f)
            if f.type == PING and f.flags & ACK and f.payload == opaque:
                return

    def no_answer(self, sid: int):
        """Nothing on sid before a PING's answer (a frame the server ignored)."""
        opaque = os.urandom(8)
        self.send_frame(PING, 0, 0, opaque)
        while True:
            f = self.read_frame()
            if f is None or f.type == GOAWAY:
                raise Failed(f"connection ended; {self._describe()}")
            if f.sid == sid and f.type in (HEADERS, DATA, RST_STREAM):
                raise Failed(f"{f} where nothing was due on stream {sid}")
            if f.type == PING and f.flags & ACK and f.payload == opaque:
                return
