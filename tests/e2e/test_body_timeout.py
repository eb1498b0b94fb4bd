"""limits.body_timeout end to end (issue 30, point 4): a request body that
stalls for body_timeout gets 408 with Connection: close while no answer has
started, the upstream exchange is abandoned (its connection closed, never
pooled), the access log says 408 and the error log that the client timed
out (not that it closed the connection); a body that keeps coming, however
slowly, is never cut. header_timeout is 30 s here and body_timeout 1 s, so
every timeout below tells the two apart.

Over HTTP/1.1 (plain and TLS) and HTTP/2 (h2c, frames by hand): proxy,
FastCGI, and respond/static routes, which answer at once and read the body
past afterwards: there the connection (HTTP/1.1) or the stream (HTTP/2,
RST_STREAM NO_ERROR) is ended instead, since the answer has gone already.
"""
from __future__ import annotations

import json
import socket
import ssl
import struct
import time

import pytest

from tests.e2e.conftest import read_response, recv_to_close
from tests.e2e.h2raw import (DATA, END_STREAM, GOAWAY, HEADERS, NO_ERROR, RST_STREAM, Client,
                             frame)
from tests.e2e.test_h2 import request_headers
from tests.e2e.upstreams.phpfpm import tcp_conns
from tests.tlspki import PKI

pytestmark = pytest.mark.timeout(60)

# body_timeout is 1 s and the engine ticks every 250 ms; header_timeout (30 s)
# would be far outside this window.
LOW, HIGH = 0.9, 2.5
TIMED_OUT = "client timed out sending the request body"

CONF = """
workers: 1
log: {{level: info, access: {tmp}/access.log, format: json}}
limits: {{body_timeout: 1s, header_timeout: 30s}}
upstreams:
  app: {{servers: ["{app}"]}}
sites:
  - listen: ["127.0.0.1:{port} h2c", "127.0.0.1:{port2} tls"]
    server_names: [localhost]
    tls: {{cert: {cert}, key: {key}}}
    routes:
      - path: /p/
        proxy: {{upstream: app, strip_prefix: /p, connect_timeout: 3s}}
      - path: /py/
        fastcgi: {{connect: "{fcgi}", root: {tmp}/www, check_script: false}}
      - path: /files/
        static: {{root: {tmp}/www}}
      - path: /
        respond: {{body: "hello\\n"}}
"""


CACHE_CONF = """
workers: 1
log: {{level: info, access: {tmp}/access.log, format: json}}
limits: {{body_timeout: 1s, header_timeout: 30s}}
cache_zones: {{z: {{max_size: 16m}}}}
sites:
  - listen: ["127.0.0.1:{port}"]
    routes:
      - {{path: /, proxy: {{url: "{url}", cache: {{zone: z}}}}}}
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def start(server, pki, tmp_path):
    """start(app=None, fcgi=None) -> the server; `app` is an "host:port"
    address or anything with .addr (nothing listens on port 9)."""
    (tmp_path / "www" / "files").mkdir(parents=True)
    (tmp_path / "www" / "files" / "small.txt").write_bytes(b"small file\n")

    def make(app=None, fcgi=None):
        addr = lambda x: x if isinstance(x, str) else x.addr  # noqa: E731
        return server(CONF, app=addr(app) if app else "127.0.0.1:9",
                      fcgi=addr(fcgi) if fcgi else "127.0.0.1:9",
                      cert=pki.ec.cert_path, key=pki.ec.key_path)
    return make


def wait_until(pred, timeout=5.0, what=""):
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def access_records(srv, n=1):
    """The access log's records once there are n of them (flushed every second)."""
    def enough():
        path = srv.tmp / "access.log"
        recs = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        return recs if len(recs) >= n else None
    return wait_until(enough, 5.0, f"{n} access-log records")


def h1_connect(srv, tls_ca=None):
    if tls_ca:
        ctx = ssl.create_default_context(cafile=tls_ca)
        s = socket.create_connection(("127.0.0.1", srv.ports[1]), timeout=10)
        return ctx.wrap_socket(s, server_hostname="localhost")
    return socket.create_connection(("127.0.0.1", srv.port), timeout=10)


def stalled_post(srv, path, method="POST", chunked=False, tls_ca=None):
    """A request whose body stops after 10 of its 100 bytes (chunked: after
    a first chunk of 10): (the socket, when the last byte went)."""
    s = h1_connect(srv, tls_ca)
    framing = "Transfer-Encoding: chunked" if chunked else "Content-Length: 100"
    body = b"a\r\n" + b"x" * 10 + b"\r\n" if chunked else b"x" * 10
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n{framing}\r\n\r\n".encode() + body)
    return s, time.monotonic()


def expect_408(s, t0):
    """The 408 within the window, Connection: close, then the server's close."""
    status, headers, _, rest = read_response(s)
    elapsed = time.monotonic() - t0
    assert status == 408, (status, headers)
    assert LOW <= elapsed <= HIGH, f"408 after {elapsed:.2f}s (body_timeout 1s)"
    assert headers.get("connection", "").lower() == "close", headers
    s.settimeout(5)
    assert rest + recv_to_close(s) == b""


def expect_log(srv, status, uri):
    recs = access_records(srv)
    assert [(r["status"], r["uri"]) for r in recs] == [(status, uri)], recs
    assert TIMED_OUT in srv.log(), srv.log()
    assert "client closed the connection" not in srv.log(), srv.log()


# ---- HTTP/1.1 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_h1_proxy_body_stall_is_408_and_the_upstream_request_abandoned(start, upstream_app,
                                                                       pki, tls):
    a = upstream_app("a")
    srv = start(a)
    s, t0 = stalled_post(srv, "/p/echo", tls_ca=pki.ca.cert_path if tls else None)
    with s:
        a.wait_conns("requests", lambda v: v == 1, what="for the proxied request")
        expect_408(s, t0)
    # Closed, not pooled: aiohttp still waited for 90 more bytes on it.
    a.wait_conns("active", lambda v: v == 0, what="after the 408")
    expect_log(srv, 408, "/p/echo")


def test_h1_chunked_body_stalled_between_chunks_is_408(start, upstream_app):
    a = upstream_app("a")
    srv = start(a)
    s, t0 = stalled_post(srv, "/p/echo", chunked=True)
    with s:
        expect_408(s, t0)
    a.wait_conns("active", lambda v: v == 0, what="after the 408")
    expect_log(srv, 408, "/p/echo")


def test_h1_cached_route_body_stall_is_408(server, upstream_app):
    """A request with a body on a cached route goes through the cache's tee
    (passed, never filled: only bodiless GET and HEAD are): the reason the
    client went reaches the proxy behind it."""
    a = upstream_app("a")
    srv = server(CACHE_CONF, url=a.url)
    s, t0 = stalled_post(srv, "/echo")
    with s:
        a.wait_conns("requests", lambda v: v == 1, what="for the proxied request")
        expect_408(s, t0)
    a.wait_conns("active", lambda v: v == 0, what="after the 408")
    expect_log(srv, 408, "/echo")


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
def test_h1_fastcgi_body_stall_is_408(start, fcgi_responder, chunked):
    """With a length the body streams to the application as STDIN, which
    then sees its connection closed; a chunked body is held until its end
    (FastCGI wants CONTENT_LENGTH), so no connection was made at all."""
    srv = start(fcgi=fcgi_responder)
    s, t0 = stalled_post(srv, "/py/x", chunked=chunked)
    with s:
        if not chunked:
            wait_until(lambda: fcgi_responder.accepted == 1, what="the FastCGI connection")
        expect_408(s, t0)
    wait_until(lambda: tcp_conns(fcgi_responder.port) == 0, what="the FastCGI connection to close")
    assert fcgi_responder.accepted == (0 if chunked else 1)
    assert fcgi_responder.requests == 0
    expect_log(srv, 408, "/py/x")


def test_h1_answer_started_then_body_stall_closes(start, upstream_app):
    """/trickle answers without reading the body: its head went to the
    client, so the timeout can only close the connection (the chunked body
    is cut short: no last chunk), and the upstream's connection with it."""
    a = upstream_app("a")
    srv = start(a)
    s, t0 = stalled_post(srv, "/p/trickle?n=40&delay=0.1")
    with s:
        s.settimeout(5)
        got = recv_to_close(s)
        elapsed = time.monotonic() - t0
    assert got.startswith(b"HTTP/1.1 200 "), got[:200]
    assert b"tick\n" in got and not got.endswith(b"0\r\n\r\n"), got[-100:]
    assert LOW <= elapsed <= HIGH, f"closed after {elapsed:.2f}s (body_timeout 1s)"
    a.wait_conns("active", lambda v: v == 0, what="after the close")
    assert TIMED_OUT in srv.log(), srv.log()
    assert "client closed the connection" not in srv.log()
    assert [r["status"] for r in access_records(srv)] == [200]


@pytest.mark.parametrize("method,path", [("POST", "/"), ("GET", "/files/small.txt")],
                         ids=["respond", "static"])
def test_h1_body_read_past_after_the_answer_is_bounded(start, method, path):
    """respond and static answer at once and read the body past: the answer
    is out, so a stalled body ends the connection after body_timeout."""
    srv = start()
    s, t0 = stalled_post(srv, path, method=method)
    with s:
        status, headers, _, rest = read_response(s)
        assert status == 200 and time.monotonic() - t0 < LOW, (status, headers)
        s.settimeout(5)
        assert rest + recv_to_close(s) == b""
        elapsed = time.monotonic() - t0
    assert LOW <= elapsed <= HIGH, f"closed after {elapsed:.2f}s (body_timeout 1s)"
    assert TIMED_OUT in srv.log(), srv.log()
    assert [(r["status"], r["uri"]) for r in access_records(srv)] == [(200, path)]


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
def test_h1_a_body_that_trickles_is_not_cut(start, upstream_app, chunked):
    """A byte every 0.4 s: 2.4 s in all, never 1 s without progress."""
    a = upstream_app("a")
    srv = start(a)
    with h1_connect(srv) as s:
        framing = "Transfer-Encoding: chunked" if chunked else "Content-Length: 6"
        s.sendall(f"POST /p/echo HTTP/1.1\r\nHost: localhost\r\n{framing}\r\n\r\n".encode())
        for i in range(6):
            time.sleep(0.4)
            s.sendall(b"1\r\n%d\r\n" % i if chunked else b"%d" % i)
        if chunked:
            s.sendall(b"0\r\n\r\n")
        status, _, body, _ = read_response(s)
    assert status == 200, body
    assert json.loads(body)["body_len"] == 6
    assert TIMED_OUT not in srv.log()


# ---- HTTP/2 ------------------------------------------------------------------------------------

def h2_post(c, sid, path, length=100, first=b"x" * 10):
    c.send(request_headers(sid, path, method="POST", end_stream=False,
                           extra=[("content-length", str(length))])
           + frame(DATA, 0, sid, first))


def stream_frames(c, sid, until):
    """Frames of stream sid until until(frame) holds (GOAWAY fails)."""
    got = []
    while True:
        f = c.read_frame()
        assert f is not None, f"connection closed; stream {sid} had {got}"
        assert f[0] != GOAWAY, f"GOAWAY {f[3].hex()}; stream {sid} had {got}"
        if f[2] == sid:
            got.append(f)
            if until(f):
                return got


def status_of(frames) -> int:
    """:status of the first HEADERS among a stream's frames (a WINDOW_UPDATE
    may come before it), decoded by the connection's HPACK state."""
    heads = [f for f in frames if f[0] == HEADERS]
    assert heads, frames
    return int(heads[0][3][":status"])


def is_rst(f):
    return f[0] == RST_STREAM


def test_h2_stalled_stream_gets_408_and_the_others_go_on(start, upstream_app):
    a = upstream_app("a")
    srv = start(a)
    c = Client(srv.port).ready()
    try:
        c.send(request_headers(1, "/p/hold/k"))  # waits on the upstream meanwhile
        a.wait_conns("requests", lambda v: v == 1, what="the held request")
        h2_post(c, 3, "/p/echo")
        t0 = time.monotonic()
        a.wait_conns("requests", lambda v: v == 2, what="the stalled request")
        got = stream_frames(c, 3, lambda f: f[1] & END_STREAM or is_rst(f))
        elapsed = time.monotonic() - t0
        assert status_of(got) == 408, got
        assert LOW <= elapsed <= HIGH, f"408 after {elapsed:.2f}s (body_timeout 1s)"
        # The 408 is whole (END_STREAM), then the client is told to stop sending.
        rst = stream_frames(c, 3, is_rst)[-1]
        assert struct.unpack(">I", rst[3])[0] == NO_ERROR
        # Stream 3's upstream connection is closed; stream 1's still waits.
        a.wait_conns("active", lambda v: v == 1, what="stream 3's upstream connection to close")
        assert a.release("k") == 1
        got = stream_frames(c, 1, lambda f: f[1] & END_STREAM or is_rst(f))
        assert status_of(got) == 200
        assert b"".join(f[3] for f in got if f[0] == DATA) == b"released k"
    finally:
        c.close()
    recs = access_records(srv, 2)
    assert sorted((r["status"], r["uri"], r["protocol"]) for r in recs) == [
        (200, "/p/hold/k", "HTTP/2.0"), (408, "/p/echo", "HTTP/2.0")], recs
    assert TIMED_OUT in srv.log() and "client closed the connection" not in srv.log()


@pytest.mark.parametrize("route", ["fastcgi", "respond"])
def test_h2_stalled_fastcgi_and_read_past_bodies(start, fcgi_responder, route):
    """FastCGI: 408 on the stream, the application's connection closed.
    respond: its 200 went at once; the body read past is ended by
    RST_STREAM NO_ERROR. The connection serves the next stream either way."""
    srv = start(fcgi=fcgi_responder)
    c = Client(srv.port).ready()
    try:
        h2_post(c, 1, "/py/x" if route == "fastcgi" else "/")
        t0 = time.monotonic()
        got = stream_frames(c, 1, is_rst)
        elapsed = time.monotonic() - t0
        status = status_of(got)
        assert struct.unpack(">I", got[-1][3])[0] == NO_ERROR, got
        assert LOW <= elapsed <= HIGH, f"reset after {elapsed:.2f}s (body_timeout 1s)"
        assert status == (408 if route == "fastcgi" else 200), got
        c.send(request_headers(3, "/"))
        got = stream_frames(c, 3, lambda f: f[1] & END_STREAM)
        assert status_of(got) == 200
    finally:
        c.close()
    if route == "fastcgi":
        assert fcgi_responder.accepted == 1
        wait_until(lambda: tcp_conns(fcgi_responder.port) == 0, what="the FastCGI connection")
    assert TIMED_OUT in srv.log(), srv.log()
    recs = access_records(srv, 2)
    assert recs[0]["status"] == status and recs[0]["uri"] == ("/py/x" if status == 408 else "/")


def test_h2_a_body_that_trickles_is_not_cut(start, upstream_app):
    a = upstream_app("a")
    srv = start(a)
    c = Client(srv.port).ready()
    try:
        h2_post(c, 1, "/p/echo", length=6, first=b"0")
        for i in range(1, 6):
            time.sleep(0.4)
            c.send(frame(DATA, END_STREAM if i == 5 else 0, 1, b"%d" % i))
        got = stream_frames(c, 1, lambda f: f[1] & END_STREAM or is_rst(f))
    finally:
        c.close()
    assert status_of(got) == 200, got
    assert json.loads(b"".join(f[3] for f in got if f[0] == DATA))["body_len"] == 6
    assert TIMED_OUT not in srv.log()


def test_h2_a_client_without_window_is_not_timed(start):
    """The upstream's connect hangs (a listener whose accept queue is full
    drops the SYN), so the proxy takes no body: the client fills its stream
    window and must wait for our WINDOW_UPDATE. That is our stall, not the
    client's: no 408 after body_timeout; the connect timeout (3 s) answers."""
    with socket.socket() as lst, socket.socket() as filler:
        lst.bind(("127.0.0.1", 0))
        lst.listen(0)
        filler.connect(lst.getsockname())  # the one connection the queue holds
        srv = start(app="127.0.0.1:%d" % lst.getsockname()[1])
        c = Client(srv.port).ready()
        try:
            window = 256 * 1024  # http2.stream_window's default
            h2_post(c, 1, "/p/upload", length=window + 1, first=b"")
            for off in range(0, window, 16384):
                c.send(frame(DATA, 0, 1, b"x" * 16384))
            t0 = time.monotonic()
            got = stream_frames(c, 1, lambda f: f[1] & END_STREAM or is_rst(f))
            elapsed = time.monotonic() - t0
        finally:
            c.close()
    assert status_of(got) in (502, 504), got
    assert elapsed >= 2.5, f"answered after {elapsed:.2f}s: before the connect timeout"
    assert TIMED_OUT not in srv.log(), srv.log()
