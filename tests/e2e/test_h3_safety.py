"""HTTP/3's budgets attacked one by one (issue 33, point 4): 0-RTT (off by
default; when on, GET and HEAD only, and a replayed first flight serves
nothing twice), the stream limit, QPACK's table and blocked streams, the
handshake and idle timeouts, and the 3x amplification limit. Each with a
real client (aioquic) bent to break the rule, the connection ended with the
code RFC 9000 / RFC 9204 name, the worker's memory bounded, and another
client served meanwhile."""
from __future__ import annotations

import json
import signal
import socket
import time

import pytest

from scalws.control import stats
from tests.e2e.conftest import until
from tests.e2e.h3client import H3
from tests.e2e.test_h3 import HOST, pki, rss_kib, start, web_workers, www  # noqa: F401

pytestmark = pytest.mark.timeout(90)

STATUS = 'status: {{file: "{tmp}/stats.bin"}}\n'


def h3_conns(srv) -> int:
    return stats.read(srv.tmp / "stats.bin")["connections_h3_active"]


def a_ticket(srv, pki):
    tickets = []
    with H3(srv.port, cafile=pki.ca.cert_path, ticket_handler=tickets.append) as c:
        assert c.get("/hello")[0] == 200
    assert tickets
    return tickets[-1]


# ---- 0-RTT ---------------------------------------------------------------------------------

def test_early_data_is_off_by_default(server, pki, www):
    srv = start(server, pki, www)
    ticket = a_ticket(srv, pki)
    assert ticket.max_early_data_size is None  # the ticket does not offer it
    with H3(srv.port, cafile=pki.ca.cert_path, session_ticket=ticket, early=True) as c:
        status, _, body = c.get("/hello")
        assert status == 200 and body == b"hi over h3\n"
        assert c.proto._quic.tls.session_resumed and not c.proto._quic.tls.early_data_accepted


EARLY = "http3: {{early_data: on}}\n"
ECHO = "      - {{path: /up/, proxy: {{url: \"{up}\", strip_prefix: /up}}}}\n"


def test_early_data_when_on_serves_get_and_head_and_refuses_the_rest(server, pki, www,
                                                                      upstream_app):
    up = upstream_app()
    srv = start(server, pki, www, head=EARLY, extra_routes=ECHO.format(up=up.url))
    ticket = a_ticket(srv, pki)
    assert ticket.max_early_data_size == 0xFFFFFFFF  # RFC 9001 §4.6.1
    with H3(srv.port, cafile=pki.ca.cert_path, session_ticket=ticket, early=True) as c:
        answers = c.many([("GET", "/up/echo/a", [], b""), ("HEAD", "/hello", [], b""),
                          ("POST", "/up/echo/b", [("content-length", "2")], b"hi"),
                          ("DELETE", "/hello", [], b"")])
        assert c.proto._quic.tls.early_data_accepted
        assert [a[0] for a in answers] == [200, 200, 425, 425]
        # the origin learns that a request came early (RFC 8470 §5.1)
        echo = {k.lower(): v for k, v in json.loads(answers[0][2])["headers"]}
        assert echo["early-data"] == "1"
        # after the handshake the same methods are served, with no Early-Data
        status, _, out = c.request("POST", "/up/echo/b", [("content-length", "2")], b"hi")
        assert status == 200
        assert "early-data" not in {k.lower() for k, _ in json.loads(out)["headers"]}


def requests(srv) -> int:
    return stats.read(srv.tmp / "stats.bin")["requests"]


def test_a_replayed_first_flight_serves_nothing_twice(server, pki, www):
    """A client's first flight (Initial with its ClientHello, and a GET in
    0-RTT) captured and sent again from another address once the first
    connection is gone: the server begins a handshake (a new connection)
    but takes no early data from it (GnuTLS's anti-replay over our store),
    so the request is not served again."""
    from aioquic.h3.connection import H3Connection
    from aioquic.quic.connection import QuicConnection
    srv = start(server, pki, www,
                head=STATUS + "http3: {{early_data: on, handshake_timeout: 1s}}\n")
    ticket = a_ticket(srv, pki)
    until(lambda: h3_conns(srv) == 0, what="the ticket's connection gone")
    before = requests(srv)
    cfg = H3(srv.port, cafile=pki.ca.cert_path, session_ticket=ticket).cfg
    q = QuicConnection(configuration=cfg)
    now = time.monotonic()
    q.connect((HOST, srv.port), now=now)
    h = H3Connection(q)
    h.send_headers(q.get_next_available_stream_id(),
                   [(b":method", b"GET"), (b":scheme", b"https"),
                    (b":authority", f"localhost:{srv.port}".encode()), (b":path", b"/hello")],
                   end_stream=True)
    flight = [d for d, _ in q.datagrams_to_send(now=now)]
    # the Initial and the 0-RTT packet (coalesced in one datagram, or two)
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for d in flight:
        a.sendto(d, (HOST, srv.port))
    until(lambda: requests(srv) == before + 1, what="the early GET served")
    a.close()  # never answers: its handshake times out
    until(lambda: h3_conns(srv) == 0, what="the first connection dropped")
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.settimeout(5)
    for d in flight:
        b.sendto(d, (HOST, srv.port))
    assert b.recvfrom(65536)[0][0] & 0xF0 == 0xC0  # the server's Initial: a new handshake
    with H3(srv.port, cafile=pki.ca.cert_path) as c:  # after b's datagrams, on the same socket
        assert c.get("/hello")[0] == 200
    assert until(lambda: requests(srv) >= before + 2) and requests(srv) == before + 2
    b.close()


def test_tickets_from_before_a_reload_get_no_early_data(server, pki, www):
    """The new workers' anti-replay starts with their first connection:
    a ticket issued before cannot carry early data (its first flight may
    have reached an old worker's store), and the request is served after
    the handshake instead."""
    srv = start(server, pki, www, head=EARLY)
    ticket = a_ticket(srv, pki)
    srv.kill(signal.SIGHUP)
    srv.wait_log("reloaded")
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        assert c.get("/hello")[0] == 200  # a new worker's first connection
    with H3(srv.port, cafile=pki.ca.cert_path, session_ticket=ticket, early=True) as c:
        status, _, _ = c.get("/hello")
        assert status == 200 and c.proto._quic.tls.session_resumed
        assert not c.proto._quic.tls.early_data_accepted
    with H3(srv.port, cafile=pki.ca.cert_path, session_ticket=a_ticket(srv, pki),
            early=True) as c:
        assert c.get("/hello")[0] == 200 and c.proto._quic.tls.early_data_accepted


# ---- budgets -------------------------------------------------------------------------------

def served(srv, pki):
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        return c.get("/hello")[0] == 200


def test_a_client_past_the_stream_limit_is_closed_with_stream_limit_error(server, pki, www):
    srv = start(server, pki, www, head=STATUS + "http3: {{max_concurrent_streams: 10}}\n")

    def ignore_limit(proto):  # the client believes it may open 1,000 streams
        quic = proto._quic
        orig = quic._handle_max_streams_bidi_frame

        def handle(context, frame_type, buf):
            orig(context, frame_type, buf)
            quic._remote_max_streams_bidi = 1000
        quic._handle_max_streams_bidi_frame = handle
        quic._remote_max_streams_bidi = 1000

    with H3(srv.port, cafile=pki.ca.cert_path, setup=ignore_limit) as c:
        c.proto._quic._remote_max_streams_bidi = 1000
        with pytest.raises(ConnectionError, match="connection closed: 0x4 "):
            c.many([("GET", "/hello", [], b"")] * 40)  # STREAM_LIMIT_ERROR (RFC 9000 §4.6)
    assert served(srv, pki)
    until(lambda: h3_conns(srv) == 0, what="both connections gone")


class _Encoder:
    """pylsqpack's encoder told other settings than the server's."""
    def __init__(self, enc, capacity=None, blocked=None):
        self.enc, self.capacity, self.blocked = enc, capacity, blocked

    def apply_settings(self, max_table_capacity, blocked_streams):
        return self.enc.apply_settings(
            max_table_capacity=self.capacity or max_table_capacity,
            blocked_streams=self.blocked if self.blocked is not None else blocked_streams)

    def __getattr__(self, name):
        return getattr(self.enc, name)


def test_a_qpack_table_larger_than_announced_is_a_connection_error(server, pki, www):
    srv = start(server, pki, www, head=STATUS + "http3: {{qpack_table: 1k}}\n")

    def big_table(proto):
        proto.h3._encoder = _Encoder(proto.h3._encoder, capacity=64 << 10)

    with pytest.raises(ConnectionError, match="connection closed: 0x201 "):
        with H3(srv.port, cafile=pki.ca.cert_path, setup=big_table) as c:
            c.get("/hello", [("x-fill", "y" * 2000)])  # QPACK_ENCODER_STREAM_ERROR
            c.wait_closed()
    assert served(srv, pki)


def test_more_streams_blocked_on_qpack_than_announced_is_a_connection_error(server, pki, www):
    """The client's encoder references table entries whose inserts it holds
    back on its encoder stream: each request waits on them, and one more
    than qpack_blocked_streams is QPACK_DECOMPRESSION_FAILED."""
    srv = start(server, pki, www, head=STATUS + "http3: {{qpack_blocked_streams: 2}}\n")
    held = []

    def hold_inserts(proto):
        h3 = proto.h3
        h3._encoder = _Encoder(h3._encoder, blocked=100)
        send = proto._quic.send_stream_data

        def send_stream_data(stream_id, data, end_stream=False):
            if stream_id == h3._local_encoder_stream_id and len(data) > 6:
                held.append(data)  # inserts (the first bytes, the capacity, go)
                return None
            return send(stream_id, data, end_stream)
        proto._quic.send_stream_data = send_stream_data

    with H3(srv.port, cafile=pki.ca.cert_path, setup=hold_inserts, timeout=5) as c:
        with pytest.raises(ConnectionError, match="connection closed: 0x200 "):
            c.many([("GET", "/hello", [("x-token", "t" * 40), ("x-other", "o" * 40)], b"")
                    for _ in range(8)])
    assert held
    assert served(srv, pki)


def first_initials(srv, pki, n, sock):
    """n first Initials (new connections) from sock, never followed up."""
    from aioquic.quic.connection import QuicConnection
    cfg = H3(srv.port, cafile=pki.ca.cert_path).cfg
    now = time.monotonic()
    sent = 0
    for _ in range(n):
        q = QuicConnection(configuration=cfg)
        q.connect((HOST, srv.port), now=now)
        for data, _ in q.datagrams_to_send(now=now):
            sock.sendto(data, (HOST, srv.port))
            sent += len(data)
    return sent


def test_half_open_handshakes_are_dropped_at_handshake_timeout(server, pki, www):
    srv = start(server, pki, www,
                head=STATUS + "http3: {{retry_above: off, handshake_timeout: 1s}}\n")
    [worker] = web_workers(srv)
    rss0 = rss_kib(worker)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    first_initials(srv, pki, 100, s)
    until(lambda: h3_conns(srv) == 100, what="100 handshakes under way")
    t0 = time.monotonic()
    assert served(srv, pki)  # meanwhile
    until(lambda: h3_conns(srv) == 0, timeout=10, what="the half-open handshakes dropped")
    assert time.monotonic() - t0 < 5
    assert rss_kib(worker) - rss0 < 24 * 1024
    s.close()


def test_an_idle_connection_ends_at_idle_timeout_and_a_busy_one_does_not(server, pki, www):
    srv = start(server, pki, www, head=STATUS + "http3: {{idle_timeout: 1s}}\n")
    with H3(srv.port, cafile=pki.ca.cert_path) as idle, \
            H3(srv.port, cafile=pki.ca.cert_path) as busy:
        assert idle.get("/hello")[0] == 200
        until(lambda: h3_conns(srv) == 2, what="two connections")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.0:  # the busy one asks every 0.3 s
            assert busy.get("/hello")[0] == 200
            time.sleep(0.3)
        assert h3_conns(srv) == 1  # the idle one went without a packet (RFC 9000 §10.1)
    until(lambda: h3_conns(srv) == 0, what="no connections")


def test_before_the_address_is_proved_the_server_sends_at_most_three_times_what_it_got(
        server, tmp_path_factory):
    """A first Initial from an address that never answers (a spoofed one:
    the victim would get our handshake): with a certificate chain larger
    than 3x that datagram, the server sends no more than 3x, its
    retransmissions included (RFC 9000 §8.1)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding
    from tests.tlspki import PKI
    p = PKI(tmp_path_factory.mktemp("bigpki"))
    root = p.root(key="rsa4096")
    leaf = p.leaf(p.intermediate(root, key="rsa4096"), ["localhost"], key="rsa4096",
                  include_root=True)
    with open(leaf.cert_path, "rb") as f:
        chain = x509.load_pem_x509_certificates(f.read())
    chain_bytes = sum(len(c.public_bytes(Encoding.DER)) for c in chain)
    srv = server("""
workers: 1
http3: {{retry_above: off}}
sites:
  - listen: ["127.0.0.1:{port} quic"]
    tls: {{cert: {cert}, key: {key}}}
    routes: [{{path: /, respond: {{status: 200, body: "ok\\n"}}}}]
""", cert=leaf.cert_path, key=leaf.key_path)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    class Ca:  # first_initials wants the client's trust store
        ca = root
    sent = first_initials(srv, Ca, 1, s)
    assert chain_bytes > 3 * sent, (chain_bytes, sent)  # the whole flight would exceed it
    got = 0
    s.settimeout(2.0)  # the first flight and the retransmission its first PTO brings
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            got += len(s.recvfrom(65536)[0])
    except socket.timeout:
        pass
    s.close()
    assert 0 < got <= 3 * sent, (got, sent)
    with H3(srv.port, cafile=root.cert_path) as c:  # a client that answers gets it all
        assert c.get("/")[2] == b"ok\n"
