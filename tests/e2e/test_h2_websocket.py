"""WebSocket over HTTP/2 (RFC 8441's extended CONNECT) to the HTTP/1.1
WebSocket upstreams HTTP/1 clients reach, and "Expect: 100-continue" over
HTTP/2 (issue 16). The client is python-hyper's h2 (frames, HPACK, flow
control) with the WebSocket framing written here (RFC 6455: masked client
frames, text, binary, ping/pong, close); the upstream is the aiohttp app of
tests/e2e/upstreams (its /ws echo)."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import subprocess
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest

from tests.e2e.test_h2 import _rss_kib, access_lines
from tests.tlspki import PKI

HOST = "127.0.0.1"
MIB = 1 << 20

SITE = """
workers: 1
log: {{level: info, access: {tmp}/access.log, format: json}}
limits: {{header_timeout: 5s, max_body_bytes: 4m}}
sites:
  - listen: ["127.0.0.1:{port} h2c"]
    routes:
      - path: /files/
        static: {{root: {tmp}/www}}
      - path: /up/
        proxy: {{url: "{upstream}", strip_prefix: /up}}
      - path: /slow/
        proxy: {{url: "{upstream}", strip_prefix: /slow, read_timeout: 1s}}
      - path: /
        respond: {{body: "hello over h2\\n"}}
"""


@pytest.fixture
def site(server, upstream_app, tmp_path):
    (tmp_path / "www" / "files").mkdir(parents=True)
    (tmp_path / "www" / "files" / "small.txt").write_bytes(b"small file\n")
    up = upstream_app()
    return server(SITE, upstream=up.url), up


# ---- WebSocket framing (RFC 6455 §5) --------------------------------------------------------

TEXT, BINARY, CLOSE, PING, PONG = 1, 2, 8, 9, 10


def ws_frame(opcode, payload=b"", fin=True):
    """A client frame: always masked (RFC 6455 §5.3)."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    key = os.urandom(4)
    body = bytes(b ^ key[i & 3] for i, b in enumerate(payload)) if n < 4096 else _mask(payload, key)
    return head + key + body


def _mask(payload, key):
    k = int.from_bytes(key * (len(payload) // 4 + 1), "little")
    v = int.from_bytes(payload, "little")
    return (v ^ (k & ((1 << (8 * len(payload))) - 1))).to_bytes(len(payload), "little")


class WsReader:
    """Messages out of a server's byte stream: (opcode, payload), fragments
    joined; server frames must not be masked."""

    def __init__(self):
        self.buf = bytearray()
        self.frag = None
        self.messages = []

    def feed(self, data):
        self.buf += data
        while True:
            if len(self.buf) < 2:
                return
            b0, b1 = self.buf[0], self.buf[1]
            assert not b1 & 0x80, "a server frame must not be masked"
            n, at = b1 & 0x7F, 2
            if n == 126:
                if len(self.buf) < 4:
                    return
                n, at = struct.unpack(">H", self.buf[2:4])[0], 4
            elif n == 127:
                if len(self.buf) < 10:
                    return
                n, at = struct.unpack(">Q", self.buf[2:10])[0], 10
            if len(self.buf) < at + n:
                return
            payload = bytes(self.buf[at:at + n])
            del self.buf[:at + n]
            op, fin = b0 & 0x0F, b0 & 0x80
            if op >= 8:
                self.messages.append((op, payload))
            elif op == 0:
                self.frag[1] += payload
                if fin:
                    self.messages.append((self.frag[0], bytes(self.frag[1])))
                    self.frag = None
            elif fin:
                self.messages.append((op, payload))
            else:
                self.frag = [op, bytearray(payload)]


# ---- an HTTP/2 client on python-hyper's h2 ---------------------------------------------------

class Stream:
    def __init__(self, ws=False):
        self.headers = None          # the final response's fields
        self.interim = []            # 1xx responses' fields
        self.data = bytearray()
        self.ended = False
        self.reset = None            # the error code of a RST_STREAM
        self.ws = WsReader() if ws else None   # only an extended CONNECT's DATA is frames


class H2Client:
    def __init__(self, port, ack_data=True, tls=None):
        self.sock = socket.create_connection((HOST, port), timeout=10)
        if tls:  # HTTP/2 chosen by ALPN
            self.sock = tls.wrap_socket(self.sock, server_hostname="localhost")
            assert self.sock.selected_alpn_protocol() == "h2"
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(cfg)
        self.conn.initiate_connection()
        self.ack_data = ack_data     # False: a reader that never opens its windows
        self.streams = {}
        self.settings = {}
        self.window_updates = 0
        self.closed = False
        self.flush()
        self.pump(lambda: self.settings)

    def flush(self):
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def read_once(self, timeout=10.0):
        """Reads and handles what the server sent; False on a timeout."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return False
        if not data:
            self.closed = True
            return True
        for ev in self.conn.receive_data(data):
            self._event(ev)
        self.flush()
        return True

    def _event(self, ev):
        s = self.streams.get(getattr(ev, "stream_id", None))
        if isinstance(ev, h2.events.RemoteSettingsChanged):
            self.settings.update({k: v.new_value for k, v in ev.changed_settings.items()})
        elif isinstance(ev, h2.events.InformationalResponseReceived):
            s.interim.append(dict(ev.headers))
        elif isinstance(ev, h2.events.ResponseReceived):
            s.headers = dict(ev.headers)
        elif isinstance(ev, h2.events.DataReceived):
            s.data += ev.data
            if s.ws is not None and s.headers and s.headers[":status"] == "200":
                s.ws.feed(ev.data)  # a tunnel's bytes; a refusal's body is not frames
            if self.ack_data:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            s.ended = True
        elif isinstance(ev, h2.events.StreamReset):
            s.reset = ev.error_code
        elif isinstance(ev, h2.events.WindowUpdated):
            self.window_updates += 1
        if isinstance(ev, (h2.events.ResponseReceived, h2.events.DataReceived)):
            assert s is not None

    def pump(self, pred, timeout=20.0):
        deadline = time.monotonic() + timeout
        while not pred():
            left = deadline - time.monotonic()
            assert left > 0 and not self.closed, "timed out (or the server closed)"
            self.read_once(left)

    def request(self, headers, end_stream=True, ws=False):
        sid = self.conn.get_next_available_stream_id()
        self.streams[sid] = Stream(ws)
        self.conn.send_headers(sid, headers, end_stream=end_stream)
        self.flush()
        return sid

    def get(self, path):
        return self.request([(":method", "GET"), (":scheme", "http"), (":path", path),
                             (":authority", "localhost")])

    def websocket(self, path, extra=()):
        """An extended CONNECT (RFC 8441 §4); returns the stream once its
        response came."""
        sid = self.request([(":method", "CONNECT"), (":protocol", "websocket"),
                            (":scheme", "http"), (":path", path), (":authority", "localhost"),
                            ("sec-websocket-version", "13"), *extra], end_stream=False, ws=True)
        self.pump(lambda: self.streams[sid].headers or self.streams[sid].reset is not None)
        return sid

    def send(self, sid, data, end_stream=False):
        """Sends as the windows allow, reading meanwhile."""
        data = memoryview(data)
        while data:
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if room <= 0:
                self.read_once()
                continue
            self.conn.send_data(sid, bytes(data[:room]))
            data = data[room:]
            self.flush()
        if end_stream:
            self.conn.end_stream(sid)
            self.flush()

    def ws_send(self, sid, opcode, payload, end_stream=False):
        self.send(sid, ws_frame(opcode, payload), end_stream)

    def ws_recv(self, sid, timeout=20.0):
        s = self.streams[sid]
        self.pump(lambda: s.ws.messages or s.ended or s.reset is not None, timeout)
        assert s.ws.messages, f"stream {sid} ended without a message (reset: {s.reset})"
        return s.ws.messages.pop(0)

    def close(self):
        self.sock.close()


def upstream_headers(c, sid):
    c.ws_send(sid, TEXT, b"!headers")
    op, payload = c.ws_recv(sid)
    assert op == TEXT
    return {k.lower(): v for k, v in json.loads(payload)}


# ---- WebSocket over HTTP/2 -------------------------------------------------------------------

def test_settings_announce_extended_connect(site):
    srv, _ = site
    c = H2Client(srv.port)
    assert c.settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL) == 1, c.settings
    c.close()


def test_echo_subprotocol_and_the_upstream_handshake(site):
    srv, up = site
    c = H2Client(srv.port)
    sid = c.websocket("/up/ws?x=1", extra=[("sec-websocket-protocol", "x-unknown, chat.v2"),
                                           ("user-agent", "h2-ws-test")])
    h = c.streams[sid].headers
    assert h[":status"] == "200", h
    assert h.get("sec-websocket-protocol") == "chat.v2", h  # the upstream's choice, passed back
    assert "sec-websocket-accept" not in h and "upgrade" not in h, h
    # What the HTTP/1.1 upstream saw: the upgrade an HTTP/1 client makes, our key.
    seen = upstream_headers(c, sid)
    assert seen["upgrade"].lower() == "websocket" and "upgrade" in seen["connection"].lower()
    assert seen["sec-websocket-version"] == "13"
    assert len(base64.b64decode(seen["sec-websocket-key"], validate=True)) == 16
    assert seen["sec-websocket-protocol"] == "x-unknown, chat.v2"
    # Messages both ways: text, binary, a ping, one larger than the stream's
    # window (256 KiB) and than ours (64 KiB).
    c.ws_send(sid, TEXT, "héllo".encode())
    assert c.ws_recv(sid) == (TEXT, "héllo".encode())
    blob = os.urandom(1000)
    c.ws_send(sid, BINARY, blob)
    assert c.ws_recv(sid) == (BINARY, blob)
    c.ws_send(sid, PING, b"are you there")
    assert c.ws_recv(sid) == (PONG, b"are you there")
    big = os.urandom(MIB)
    c.ws_send(sid, BINARY, big)
    assert c.ws_recv(sid) == (BINARY, big)
    # More than max_body_bytes (4m) in all: a tunnel is not a request body.
    for i in range(5):
        c.ws_send(sid, BINARY, big)
        assert c.ws_recv(sid) == (BINARY, big)
    for i in range(20):
        c.ws_send(sid, TEXT, f"message {i}".encode())
    assert [c.ws_recv(sid) for _ in range(20)] == [(TEXT, f"message {i}".encode()) for i in range(20)]
    # The client closes: the upstream answers the close and ends; the stream ends cleanly.
    c.ws_send(sid, CLOSE, struct.pack(">H", 1000) + b"done")
    op, payload = c.ws_recv(sid)
    assert op == CLOSE and payload[:2] == struct.pack(">H", 1000)
    c.pump(lambda: c.streams[sid].ended or c.streams[sid].reset is not None)
    assert c.streams[sid].ended and c.streams[sid].reset is None
    c.close()
    assert srv.stop() == 0  # the access log's buffer written out
    line = next(line for line in access_lines(srv) if line["uri"] == "/up/ws?x=1")
    assert (line["method"], line["status"], line["protocol"]) == ("CONNECT", 200, "HTTP/2.0"), line
    assert line["body_bytes_sent"] > 6 * MIB, line


def test_websocket_over_tls(server, upstream_app, tmp_path):
    """The same tunnel over TLS (ALPN h2): the transport's records carry
    the stream's DATA both ways."""
    (tmp_path / "pki").mkdir()
    pki = PKI(tmp_path / "pki")
    ca = pki.root()
    leaf = pki.leaf(ca, ["localhost"], key="ec", name="ec")
    up = upstream_app()
    srv = server("""
        workers: 1
        sites:
          - listen: ["127.0.0.1:{port} tls"]
            server_names: [localhost]
            tls: {{cert: {cert}, key: {key}}}
            routes:
              - path: /
                proxy: {{url: "{upstream}"}}
    """, cert=leaf.cert_path, key=leaf.key_path, upstream=up.url)
    ctx = ssl.create_default_context(cafile=ca.cert_path)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    c = H2Client(srv.port, tls=ctx)
    sid = c.websocket("/ws")
    assert c.streams[sid].headers[":status"] == "200"
    big = os.urandom(MIB + 3)
    c.ws_send(sid, BINARY, big)
    c.ws_send(sid, TEXT, b"after the big one")
    assert c.ws_recv(sid) == (BINARY, big)
    assert c.ws_recv(sid) == (TEXT, b"after the big one")
    c.ws_send(sid, CLOSE, struct.pack(">H", 1000))
    assert c.ws_recv(sid)[0] == CLOSE
    c.pump(lambda: c.streams[sid].ended or c.streams[sid].reset is not None)
    assert c.streams[sid].ended and c.streams[sid].reset is None
    c.close()


def test_two_websockets_and_a_get_on_one_connection(site):
    srv, _ = site
    c = H2Client(srv.port)
    a = c.websocket("/up/ws")
    b = c.websocket("/up/ws")
    assert c.streams[a].headers[":status"] == c.streams[b].headers[":status"] == "200"
    big_a, big_b = os.urandom(300_000), os.urandom(300_000)
    c.ws_send(a, BINARY, big_a)
    c.ws_send(b, BINARY, big_b)
    g = c.get("/files/small.txt")
    c.ws_send(a, TEXT, b"to a")
    c.ws_send(b, TEXT, b"to b")
    c.pump(lambda: c.streams[g].ended)
    assert c.streams[g].headers[":status"] == "200" and bytes(c.streams[g].data) == b"small file\n"
    assert c.ws_recv(a) == (BINARY, big_a) and c.ws_recv(a) == (TEXT, b"to a")
    assert c.ws_recv(b) == (BINARY, big_b) and c.ws_recv(b) == (TEXT, b"to b")
    g2 = c.get("/up/id")
    c.pump(lambda: c.streams[g2].ended)
    assert bytes(c.streams[g2].data) == b"a"
    c.close()


def test_upstream_refusal_reaches_the_client(site):
    srv, _ = site
    c = H2Client(srv.port)
    sid = c.websocket("/up/ws?refuse=403")
    c.pump(lambda: c.streams[sid].ended)
    s = c.streams[sid]
    assert s.headers[":status"] == "403" and bytes(s.data) == b"refused 403\n", (s.headers, s.data)
    # A 2xx that is not a 101 would read as an open WebSocket: 502.
    ok = c.websocket("/up/ws?refuse=200")
    c.pump(lambda: c.streams[ok].ended)
    assert c.streams[ok].headers[":status"] == "502", c.streams[ok].headers
    # the connection serves on
    g = c.get("/")
    c.pump(lambda: c.streams[g].ended)
    assert bytes(c.streams[g].data) == b"hello over h2\n"
    c.close()


def test_an_upstream_that_never_answers_the_upgrade_times_out(site):
    """The upstream's read_timeout (1s) runs while the 101 is awaited: a
    504, long before the client's own header_timeout (5s) would end the
    connection."""
    srv, up = site
    c = H2Client(srv.port)
    t0 = time.monotonic()
    sid = c.websocket("/slow/hold/never?timeout=30")
    took = time.monotonic() - t0
    assert c.streams[sid].headers[":status"] == "504" and took < 4, (c.streams[sid].headers, took)
    g = c.get("/")  # the connection serves on
    c.pump(lambda: c.streams[g].ended)
    assert bytes(c.streams[g].data) == b"hello over h2\n"
    up.release("never")
    c.close()


def test_routes_that_cannot_tunnel_and_plain_connect_get_501(site):
    srv, _ = site
    c = H2Client(srv.port)
    static = c.websocket("/files/small.txt")
    respond = c.websocket("/")
    other = c.request([(":method", "CONNECT"), (":protocol", "x-other"), (":scheme", "http"),
                       (":path", "/up/ws"), (":authority", "localhost")], end_stream=False)
    plain = c.request([(":method", "CONNECT"), (":authority", "example.com:443")], end_stream=False)
    c.pump(lambda: all(c.streams[s].headers for s in (static, respond, other, plain)))
    assert [c.streams[s].headers[":status"] for s in (static, respond, other, plain)] == ["501"] * 4
    c.close()


def test_client_reset_closes_the_upstream_connection(site):
    srv, up = site
    c = H2Client(srv.port)
    sid = c.websocket("/up/ws")
    seq = int(c.streams[sid].headers["x-conn-seq"])
    c.ws_send(sid, TEXT, b"one")
    assert c.ws_recv(sid) == (TEXT, b"one")
    assert seq in up.open_seqs()
    c.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    c.flush()
    deadline = time.monotonic() + 5
    while seq in up.open_seqs():
        assert time.monotonic() < deadline, "the upstream connection outlived the reset stream"
        time.sleep(0.02)
    g = c.get("/up/id")  # the connection serves on
    c.pump(lambda: c.streams[g].ended)
    assert bytes(c.streams[g].data) == b"a"
    c.close()


def test_upstream_close_ends_the_stream(site):
    srv, _ = site
    c = H2Client(srv.port)
    sid = c.websocket("/up/ws")
    c.ws_send(sid, TEXT, b"!close")
    op, payload = c.ws_recv(sid)
    assert op == CLOSE and payload == struct.pack(">H", 1000) + b"upstream says bye"
    c.ws_send(sid, CLOSE, struct.pack(">H", 1000))  # the closing handshake's answer (RFC 6455
    # §5.5.1): the upstream closes its TCP connection now, not after its close timeout
    c.pump(lambda: c.streams[sid].ended or c.streams[sid].reset is not None)
    assert c.streams[sid].ended and c.streams[sid].reset is None


def test_client_end_stream_half_closes_toward_the_upstream(site):
    """END_STREAM without a close frame: the upstream reads its end of input
    (shutdown), answers what it still had, and its close ends the stream."""
    srv, _ = site
    c = H2Client(srv.port)
    sid = c.websocket("/up/ws")
    c.ws_send(sid, TEXT, b"last words", end_stream=True)
    assert c.ws_recv(sid) == (TEXT, b"last words")
    c.pump(lambda: c.streams[sid].ended or c.streams[sid].reset is not None)
    assert c.streams[sid].ended and c.streams[sid].reset is None


def test_end_stream_on_the_connect_half_closes_toward_the_upstream(site):
    """END_STREAM on the extended CONNECT itself: the client will send
    nothing. The upstream reads its end of input once the upgrade is done,
    closes, and that ends the stream."""
    srv, _ = site
    c = H2Client(srv.port)
    sid = c.request([(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "http"),
                     (":path", "/up/ws"), (":authority", "localhost"),
                     ("sec-websocket-version", "13")], end_stream=True)
    c.pump(lambda: c.streams[sid].ended or c.streams[sid].reset is not None, timeout=10)
    s = c.streams[sid]
    assert s.headers[":status"] == "200" and s.ended and s.reset is None, (s.headers, s.reset)
    # the same refused by the upstream: its answer, and the connection serves on
    no = c.request([(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "http"),
                    (":path", "/up/ws?refuse=403"), (":authority", "localhost"),
                    ("sec-websocket-version", "13")], end_stream=True)
    c.pump(lambda: c.streams[no].ended or c.streams[no].reset is not None, timeout=10)
    assert c.streams[no].headers[":status"] == "403" and bytes(c.streams[no].data) == b"refused 403\n"
    g = c.get("/")
    c.pump(lambda: c.streams[g].ended)
    assert bytes(c.streams[g].data) == b"hello over h2\n"
    c.close()


def test_a_reader_that_stops_reading_keeps_the_worker_bounded(site):
    """The client sends and never opens its windows: the echo backs up
    into the stream's queue, the proxy stops reading the upstream, the
    upstream stops reading us, the stream's window closes on the client.
    The worker holds a bounded amount whatever the client tries to send."""
    srv, _ = site
    (worker,) = srv.workers()
    c = H2Client(srv.port, ack_data=False)
    sid = c.websocket("/up/ws")
    rss0 = _rss_kib(worker)
    msg = os.urandom(64 * 1024)
    sent = 0
    while sent < 64 * MIB:
        if c.conn.local_flow_control_window(sid) < len(msg) + 14:
            before = c.window_updates
            c.read_once(timeout=1.0)
            if c.window_updates == before and not c.read_once(timeout=1.0):
                break  # no window opened in a second: everything is backed up
            continue
        c.ws_send(sid, BINARY, msg)
        sent += len(msg)
    grew = _rss_kib(worker) - rss0
    assert sent > MIB, f"only {sent} bytes went before the windows closed"
    assert sent < 64 * MIB, "the client could send 64 MiB to a reader that never reads"
    assert grew < 8 * 1024, f"worker RSS grew by {grew} KiB ({sent >> 10} KiB sent)"
    # Reading again: every message comes back, in order.
    c.ack_data = True
    s = c.streams[sid]
    pending = s.data
    c.conn.acknowledge_received_data(len(pending), sid)
    c.flush()
    want = sent // len(msg)
    c.pump(lambda: len(s.ws.messages) >= want, timeout=60)
    assert all(m == (BINARY, msg) for m in s.ws.messages[:want])
    c.close()


# ---- Expect: 100-continue over HTTP/2 --------------------------------------------------------

def _post(c, path, length, expect=True):
    extra = [("expect", "100-continue")] if expect else []
    return c.request([(":method", "POST"), (":scheme", "http"), (":path", path),
                      (":authority", "localhost"), ("content-length", str(length)), *extra],
                     end_stream=False)


def test_expect_continue_to_a_proxy_route(site):
    srv, _ = site
    c = H2Client(srv.port)
    body = os.urandom(3 * MIB + 17)
    sid = _post(c, "/up/upload", len(body))
    c.pump(lambda: c.streams[sid].interim or c.streams[sid].headers)
    s = c.streams[sid]
    assert s.headers is None and [i[":status"] for i in s.interim] == ["100"], (s.interim, s.headers)
    c.send(sid, body, end_stream=True)
    c.pump(lambda: s.ended)
    assert s.headers[":status"] == "200"
    assert json.loads(bytes(s.data)) == {"len": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    c.close()


def test_expect_continue_refused_gets_a_final_answer_without_100(site):
    srv, _ = site
    c = H2Client(srv.port)
    too_big = _post(c, "/up/upload", 5 * MIB)  # over max_body_bytes (4m)
    respond = _post(c, "/", 1000)              # answered without reading the body
    c.pump(lambda: c.streams[too_big].ended and c.streams[respond].ended)
    for sid, status in ((too_big, "413"), (respond, "200")):
        s = c.streams[sid]
        assert s.interim == [] and s.headers[":status"] == status, (s.interim, s.headers)
    # no Expect: no 100 either
    plain = _post(c, "/up/upload", 5, expect=False)
    c.send(plain, b"hello", end_stream=True)
    c.pump(lambda: c.streams[plain].ended)
    assert c.streams[plain].interim == [] and c.streams[plain].headers[":status"] == "200"
    c.close()


def test_an_expectation_other_than_100_continue_is_417(site):
    # As over HTTP/1.1 (RFC 9110 §10.1.1): an expectation the server cannot
    # meet gets 417 and no 100; a list with 100-continue in it is read as a
    # list (OWS and empty elements as HTTP/1 reads them), over every Expect
    # field of the request.
    srv, _ = site
    c = H2Client(srv.port)
    head = [(":method", "POST"), (":scheme", "http"), (":path", "/up/upload"),
            (":authority", "localhost"), ("content-length", "5")]
    teapot = c.request(head + [("expect", "teapot")], end_stream=False)
    both = c.request(head + [("expect", "100-continue, x-more")], end_stream=False)
    spaced = c.request(head + [("expect", " , 100-Continue ,")], end_stream=False)
    two = c.request(head + [("expect", "100-continue"), ("expect", "x-more")], end_stream=False)
    c.pump(lambda: c.streams[teapot].ended and c.streams[both].ended and c.streams[two].ended and
           (c.streams[spaced].interim or c.streams[spaced].headers))
    for sid in (teapot, both, two):
        s = c.streams[sid]
        assert s.interim == [] and s.headers[":status"] == "417", (s.interim, s.headers)
    s = c.streams[spaced]
    assert s.headers is None and [i[":status"] for i in s.interim] == ["100"], (s.interim, s.headers)
    c.send(spaced, b"hello", end_stream=True)
    c.pump(lambda: s.ended)
    assert s.headers[":status"] == "200"
    c.close()


def test_curl_expect_continue_upload(site, tmp_path):
    srv, _ = site
    body = os.urandom(2 * MIB)
    path = tmp_path / "upload.bin"
    path.write_bytes(body)
    out = subprocess.run(["curl", "-sS", "-v", "--http2-prior-knowledge", "-H", "Expect: 100-continue",
                          "--data-binary", f"@{path}", f"http://127.0.0.1:{srv.port}/up/upload"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    assert "< HTTP/2 100" in out.stderr.decode(), out.stderr.decode()
    assert json.loads(out.stdout) == {"len": len(body), "sha256": hashlib.sha256(body).hexdigest()}
