"""HTTP/3's budgets attacked one by one (issue 33, point 4): 0-RTT (off by
default; when on, GET and HEAD only, and a replayed first flight serves
nothing twice), the stream limit, QPACK's table and blocked streams, the
handshake and idle timeouts, and the 3x amplification limit. Each with a
real client (aioquic) bent to break the rule, the connection ended with the
code RFC 9000 / RFC 9204 name, the worker's memory bounded, and another
client served meanwhile."""
from __future__ import annotations

import signal
import socket
import time

import pytest

from scalws.control import stats
from tests.e2e.h3client import H3
from tests.e2e.test_h3 import HOST, braces, pki, rss_kib, start, web_workers, www  # noqa: F401

pytestmark = pytest.mark.timeout(90)

STATUS = 'status: {{file: "{tmp}/stats.bin"}}\n'


def h3_conns(srv) -> int:
    return stats.read(srv.tmp / "stats.bin")["connections_h3_active"]


def until(fn, timeout=10.0, what="condition"):
    """Polls fn() (the counters are published at the end of each pass)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


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
        import json
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
