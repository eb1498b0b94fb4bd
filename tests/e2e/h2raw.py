"""A raw HTTP/2 client for the end-to-end tests (test_h2, test_h2_dos):
frames built by hand, read one by one; SETTINGS and PING acknowledged as
they come unless told not to; header blocks from the `hpack` package."""
from __future__ import annotations

import socket
import ssl
import struct

from hpack import Decoder, Encoder

HOST = "127.0.0.1"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0, 1, 2, 3, 4
PING, GOAWAY, WINDOW_UPDATE, CONTINUATION, PRIORITY_UPDATE = 6, 7, 8, 9, 0x10
END_STREAM, ACK, END_HEADERS = 1, 1, 4
NO_ERROR, PROTOCOL_ERROR, REFUSED_STREAM, CANCEL = 0x0, 0x1, 0x7, 0x8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x9, 0xB


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def block(path="/", extra=()):
    """A request's header block: HPACK without Huffman, starting with a
    dynamic table size update to 0 (RFC 7541 §4.2 asks for one after our
    SETTINGS_HEADER_TABLE_SIZE shrank the table; 0 keeps every block alone)."""
    enc = Encoder()
    enc.header_table_size = 0
    fields = [(":method", "GET"), (":scheme", "http"), (":path", path),
              (":authority", "localhost"), *extra]
    return enc.encode(fields, huffman=False)


def request(sid, path="/", end_stream=True, extra=()):
    return frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), sid, block(path, extra))


class Client:
    """An HTTP/2 connection read frame by frame; SETTINGS and PING are
    acknowledged as they are read unless auto_ack is off."""

    def __init__(self, port, tls_ca=None, timeout=10.0, auto_ack=True, settings=b"", decode=True):
        sock = socket.create_connection((HOST, port), timeout=timeout)
        if tls_ca:
            ctx = ssl.create_default_context(cafile=tls_ca)
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
            assert sock.selected_alpn_protocol() == "h2"
        self.sock = sock
        self.buf = b""
        self.dec = Decoder()  # the server's HPACK state for this connection
        self.auto_ack = auto_ack
        self.decode = decode  # HEADERS payloads as a dict (else the raw block)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))

    def send(self, data):
        self.sock.sendall(data)

    def read_frame(self):
        """(type, flags, stream id, payload), or None once the server closed;
        a HEADERS frame's payload decoded into a dict (with decode)."""
        while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
            try:
                b = self.sock.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                b = b""
            if not b:
                return None
            self.buf += b
        n = int.from_bytes(self.buf[:3], "big")
        f = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF,
             self.buf[9:9 + n])
        self.buf = self.buf[9 + n:]
        if f[0] == HEADERS and self.decode:
            assert f[1] & END_HEADERS  # the server's blocks fit in one frame here
            f = (*f[:3], dict(self.dec.decode(f[3])))
        if self.auto_ack and f[0] == SETTINGS and not f[1] & ACK:
            self.send(frame(SETTINGS, ACK, 0))
        if self.auto_ack and f[0] == PING and not f[1] & ACK:
            self.send(frame(PING, ACK, 0, f[3]))
        return f

    def until(self, pred):
        """Frames until pred(frame) holds: (that frame, the frames before it)."""
        seen = []
        while True:
            f = self.read_frame()
            if f is None:
                raise AssertionError(f"connection closed; frames: {seen}")
            if pred(f):
                return f, seen
            seen.append(f)

    def ready(self):
        """Once the server's SETTINGS arrived, were acknowledged, and ours were."""
        self.until(lambda f: f[0] == SETTINGS and not f[1] & ACK)
        self.until(lambda f: f[0] == SETTINGS and f[1] & ACK)
        return self

    def goaway(self):
        """The server's GOAWAY (last stream, error code); then it must close."""
        f, _ = self.until(lambda f: f[0] == GOAWAY)
        last, code = struct.unpack(">II", f[3][:8])
        rest = []
        while (g := self.read_frame()) is not None:
            rest.append(g)
        assert all(g[0] != HEADERS for g in rest), rest  # nothing new after GOAWAY
        assert all(g[0] != GOAWAY for g in rest), rest  # one reason, not a second one
        return last, code

    def get(self, sid, path="/"):
        """A request on this connection: its :status and body."""
        self.send(request(sid, path))
        status, body = None, b""
        while True:
            f = self.read_frame()
            assert f is not None, "connection closed"
            if f[2] != sid:
                continue
            if f[0] == HEADERS:
                status = f[3][":status"]
            elif f[0] == DATA:
                body += f[3]
            elif f[0] == RST_STREAM:
                raise AssertionError(f"stream {sid} reset: {f[3].hex()}")
            if f[1] & END_STREAM:
                return status, body

    def close(self):
        self.sock.close()
