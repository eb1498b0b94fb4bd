"""Request framing that is already broken when it arrives (issue 30, point 7),
over raw sockets against a real scalwsd with every route kind.

A chunked body whose framing is broken in the bytes that came with the head
is a 400 on every route (respond, static, proxy, fastcgi, a cached proxy),
over HTTP/1.1 and over TLS, then a clean close; broken framing that arrives
after the answer went out ends the connection. A request line or header
line that is already at fault is answered as soon as its line ends, not at
the header timeout (10 s here), however the head is split into segments.
HTTP/2 has no chunked framing: a content-length that the DATA contradicts
is a stream error on every route kind, and the connection serves on.
"""
from __future__ import annotations

import json
import os
import re
import socket
import ssl
import struct
import time

import pytest
from hpack import Encoder

from tests.e2e.conftest import statuses
from tests.e2e.h2raw import (DATA, END_HEADERS, END_STREAM, HEADERS, PROTOCOL_ERROR, RST_STREAM,
                             Client, frame)
from tests.tlspki import PKI

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"
LAB = os.path.join(os.path.dirname(__file__), "php_apps", "lab")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


def site_yaml(upstream, fcgi, pki, tmp) -> str:
    """Plain HTTP/1 on {port}, TLS on {port2}, h2c on {port3}; one route of
    each kind. header_timeout is the default (10 s): an early answer is not
    the timeout's."""
    (tmp / "www").mkdir(exist_ok=True)
    (tmp / "www" / "f.txt").write_bytes(b"static file\n")
    cfg = {
        "workers": 1,
        "log": {"level": "info", "access": f"{tmp}/access.log", "format": "json"},
        "limits": {"max_body_bytes": "1k", "max_uri_bytes": "1k", "max_headers": 20},
        "cache_zones": {"z": {"max_size": "4m"}},
        "sites": [{
            "listen": ["127.0.0.1:@PORT@", "127.0.0.1:@PORT2@ tls", "127.0.0.1:@PORT3@ h2c"],
            "server_names": ["localhost"],
            "tls": {"cert": pki.ec.cert_path, "key": pki.ec.key_path},
            "routes": [
                {"path": "= /r", "respond": {"status": 200, "body": "respond\n"}},
                {"path": "/f.txt", "static": {"root": f"{tmp}/www"}},
                {"path": "/px/", "proxy": {"url": upstream.url, "strip_prefix": "/px"}},
                {"path": "/cache/", "proxy": {"url": upstream.url, "strip_prefix": "/cache",
                                              "cache": {"zone": "z"}}},
                {"path": "/fcgi/", "fastcgi": {"connect": fcgi.addr, "root": LAB,
                                               "check_script": False}},
                {"path": "/", "respond": {"status": 200, "body": "ok\n"}},
            ]}]}
    text = json.dumps(cfg, indent=2)
    return (text.replace("{", "{{").replace("}", "}}").replace("@PORT@", "{port}")
            .replace("@PORT2@", "{port2}").replace("@PORT3@", "{port3}"))


@pytest.fixture
def srv(server, upstream_app, fcgi_responder, pki, tmp_path):
    s = server(site_yaml(upstream_app("a"), fcgi_responder, pki, tmp_path))
    s.pki = pki
    return s


def connect(srv, tls=False, timeout=5.0):
    sock = socket.create_connection((HOST, srv.ports[1] if tls else srv.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        ctx = ssl.create_default_context(cafile=srv.pki.ca.cert_path)
        sock = ctx.wrap_socket(sock, server_hostname="localhost")
    return sock


def read_to_close(sock) -> bytes:
    """All the server sends until its FIN; a reset fails the test (the
    answer must survive the close: the server lingers)."""
    data = b""
    while True:
        try:
            b = sock.recv(65536)
        except ssl.SSLEOFError:  # a TLS peer that closes without close_notify
            return data
        if not b:
            return data
        data += b


def nothing_within(sock, seconds):
    """Asserts the server sends nothing (and keeps the connection) for a while."""
    sock.settimeout(seconds)
    try:
        got = sock.recv(1)
    except (socket.timeout, TimeoutError):
        return
    finally:
        sock.settimeout(5)
    raise AssertionError(f"answered early: {got!r}")


def access_statuses(srv, uri):
    """The statuses the access log gives `uri` (the server is stopped first,
    so that every line is written)."""
    assert srv.stop() == 0
    lines = [json.loads(x) for x in (srv.tmp / "access.log").read_text().splitlines()]
    return [line["status"] for line in lines if line["uri"] == uri]


# ---- broken chunked bodies ---------------------------------------------------------------

ROUTES = {"respond": "/r", "static": "/f.txt", "proxy": "/px/echo", "fastcgi": "/fcgi/x.php",
          "cache": "/cache/echo"}

BROKEN = {
    # llhttp-style vectors: a chunked body broken in one place each
    "size not hex": b"zz\r\nabc\r\n0\r\n\r\n",
    "size then junk": b"3x\r\nabc\r\n0\r\n\r\n",
    "no CRLF after data": b"3\r\nabcX\r\n0\r\n\r\n",
    "bare LF after size": b"3\nabc\r\n0\r\n\r\n",
    "empty extension": b"3;\r\nabc\r\n0\r\n\r\n",
    "17 digits": b"00000000000000003\r\nabc\r\n0\r\n\r\n",
    "bad trailer": b"3\r\nabc\r\n0\r\nX : y\r\n\r\n",
}


def chunked_request(method, path, body, host="localhost"):
    return (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            + body + f"GET /r HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())


@pytest.mark.parametrize("tls", [False, True], ids=["http", "tls"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_broken_chunked_body_in_one_write_is_400_on_every_route(srv, route, tls):
    path = ROUTES[route]
    for method in ("POST", "GET"):
        for name, body in BROKEN.items():
            with connect(srv, tls) as s:
                s.sendall(chunked_request(method, path, body))
                data = read_to_close(s)
            # One answer, a 400 that says it closes; the request after the
            # broken body is never answered.
            assert statuses(data) == [400], (route, method, name, data[:200])
            assert b"\r\nConnection: close" in data.split(b"\r\n\r\n")[0]
    assert access_statuses(srv, path) == [400] * 2 * len(BROKEN)


def test_sound_chunked_bodies_still_pass(srv):
    # The body that came with the head is read past before the answer (or
    # goes upstream); the next request is answered on the same connection.
    for path in ROUTES.values():
        with connect(srv) as s:
            s.sendall(chunked_request("GET", path, b"3;a=b\r\nabc\r\n0\r\nX: y\r\n\r\n")[:-2]
                      + b"Connection: close\r\n\r\n")
            data = read_to_close(s)
        # (a proxied JSON body ends without a line end: no ^ for the second)
        assert re.findall(rb"HTTP/1\.1 (\d{3}) ", data) == [b"200", b"200"], (path, data[:300])
        assert data.endswith(b"respond\n")


def test_chunked_body_over_the_limit_in_one_write_is_413(srv):
    body = b"".join(b"100\r\n" + b"x" * 256 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n"
    for path in ROUTES.values():
        with connect(srv) as s:
            s.sendall(chunked_request("POST", path, body))
            assert statuses(read_to_close(s)) == [413], path


def test_broken_framing_after_the_answer_closes(srv):
    # The answer goes out with the sound part of the body; the bytes that
    # break it come later and can only end the connection. The access log
    # says what was sent: 200.
    with connect(srv) as s:
        s.sendall(b"POST /r HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        got = b""
        while b"respond\n" not in got:
            got += s.recv(4096)
        assert statuses(got) == [200] and b"Connection: close" not in got
        s.sendall(b"zz\r\n0\r\n\r\nGET /r HTTP/1.1\r\nHost: a\r\n\r\n")
        assert read_to_close(s) == b""
    assert access_statuses(srv, "/r") == [200]


def test_broken_framing_before_the_proxy_answers_is_400(srv, upstream_app):
    # The head and a sound chunk went upstream; the upstream waits for the
    # rest when the framing breaks: nothing was answered yet, so the client
    # gets 400 (not a bare close), and the access log says 400.
    with connect(srv) as s:
        s.sendall(b"POST /px/upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"3\r\nabc\r\n")
        nothing_within(s, 0.3)
        s.sendall(b"3\r\ndefX\r\n0\r\n\r\n")
        data = read_to_close(s)
    assert statuses(data) == [400]
    assert access_statuses(srv, "/px/upload") == [400]
    # The proxy let go of its upstream side without saying the client left.
    assert "client closed the connection" not in srv.log(), srv.log()


def test_chunked_body_outgrowing_the_limit_at_the_proxy_is_413(srv):
    # As above, the head and a sound chunk went upstream first; then the
    # body passes max_body_bytes (1k): 413, and no "client closed" line.
    with connect(srv) as s:
        s.sendall(b"POST /px/upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"3\r\nabc\r\n")
        nothing_within(s, 0.3)
        s.sendall(b"".join(b"100\r\n" + b"x" * 256 + b"\r\n" for _ in range(5)))
        data = read_to_close(s)
    assert statuses(data) == [413]
    assert access_statuses(srv, "/px/upload") == [413]
    assert "client closed the connection" not in srv.log(), srv.log()


# ---- heads already at fault: answered at once, whatever the split -------------------------

EARLY = [
    # (name, bytes sent (the head is never finished), status); the faulty
    # line is the last one, but for "HTTP/2.0 with a field"
    ("HTTP/5.6", b"GET / HTTP/5.6\r\n", 505),
    ("HTTP/2.0 with a field", b"GET / HTTP/2.0\r\nHost: a\r\n", 505),
    ("second Content-Length", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n", 400),
    ("Content-Length and chunked", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
                                   b"Transfer-Encoding: chunked\r\n", 400),
    ("chunked not last", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n", 400),
    ("second Host", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n", 400),
    ("obs-fold", b"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n", 400),
    ("space before colon", b"GET / HTTP/1.1\r\nHost : a\r\n", 400),
    ("NUL in a value", b"GET / HTTP/1.1\r\nX: a\x00b\r\n", 400),
    ("bad method", b"G(T / HTTP/1.1\r\n", 400),
    ("long target", b"GET /" + b"a" * 1100 + b" HTTP/1.1\r\n", 414),
    ("too many fields", b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(21)), 431),
]


def splits(data: bytes) -> list[list[bytes]]:
    """The head in one segment; cut just before the faulty line's end;
    after the request-line; and the last 8 bytes one at a time."""
    first_end = data.find(b"\n") + 1
    out = [[data], [data[:-1], data[-1:]]]
    if 0 < first_end < len(data):
        out.append([data[:first_end], data[first_end:]])
    out.append([data[:-8]] + [data[i:i + 1] for i in range(len(data) - 8, len(data))])
    return out


def answered(s, timeout) -> bytes:
    """What the server sends within `timeout` (b"" for nothing yet)."""
    s.settimeout(timeout)
    try:
        return s.recv(4096)
    except (socket.timeout, TimeoutError):
        return b""
    finally:
        s.settimeout(5)


@pytest.mark.parametrize("name,data,status", EARLY, ids=[e[0] for e in EARLY])
def test_a_head_at_fault_is_answered_when_the_line_ends(srv, name, data, status):
    # What comes before the faulty line is sound: the server waits for it.
    sound = 0 if name == "HTTP/2.0 with a field" else data.rstrip(b"\n").rfind(b"\n") + 1
    if sound:
        with connect(srv) as s:
            s.sendall(data[:sound])
            nothing_within(s, 0.3)
            s.sendall(data[sound:])
            assert statuses(answered(s, 1.0)) == [status], name
    # Then whatever the split: at the latest once the faulty line has ended
    # (sooner when a segment holds the faulty byte and the parser sees it),
    # well before header_timeout (10 s).
    for pieces in splits(data):
        with connect(srv) as s:
            head = b""
            for piece in pieces[:-1]:
                s.sendall(piece)
                head = answered(s, 0.05)
                if head:
                    break
            if not head:
                s.sendall(pieces[-1])
                head = answered(s, 1.0)
            assert statuses(head) == [status], (name, [len(p) for p in pieces], head[:100])
            rest = read_to_close(s)
            assert statuses(head + rest) == [status]
            assert b"\r\nConnection: close" in (head + rest).split(b"\r\n\r\n")[0]


def test_a_head_at_fault_is_answered_at_once_over_tls(srv):
    for data, status in ((b"GET / HTTP/5.6\r\n", 505),
                         (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n", 400)):
        with connect(srv, tls=True) as s:
            s.sendall(data[:10])
            nothing_within(s, 0.05)
            s.sendall(data[10:])
            s.settimeout(1.0)
            head = s.recv(4096)
            assert statuses(head) == [status]
            s.settimeout(5)
            read_to_close(s)


def test_a_sound_head_still_waits(srv):
    with connect(srv) as s:
        s.sendall(b"POST /r HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nExpect: teapot\r\n")
        nothing_within(s, 0.5)  # 501 and 417 need the whole head: it may still add a 400
        s.sendall(b"Content-Length: 1\r\n")
        s.settimeout(1.0)
        assert statuses(s.recv(4096)) == [400]
    with connect(srv) as s:
        s.sendall(b"GET /r HTTP/1.1\r\n")
        nothing_within(s, 0.3)
        s.sendall(b"Host: a\r\n")
        nothing_within(s, 0.3)
        s.sendall(b"\r\n")
        s.settimeout(2)
        assert statuses(s.recv(4096)) == [200]


def test_a_head_that_stops_inside_a_bad_line_gets_400_at_the_timeout(server):
    # The fault is inside a line whose end never comes, in the second
    # segment: the header timeout looks at what arrived and answers what one
    # segment would have got at once, 400, not 408.
    srv = server("""
        limits: {{header_timeout: 1s}}
        sites:
          - listen: "127.0.0.1:{port}"
            routes: [{{path: /, respond: 200}}]
    """)
    with socket.create_connection((HOST, srv.port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n")
        nothing_within(s, 0.1)
        s.sendall(b"X: a\x01b")
        t0 = time.monotonic()
        data = read_to_close(s)
    assert statuses(data) == [400] and 0.5 < time.monotonic() - t0 < 3


# ---- HTTP/2: no chunked framing; a content-length the DATA contradicts --------------------

def h2_block(method, path, extra=()):
    enc = Encoder()
    enc.header_table_size = 0
    return enc.encode([(":method", method), (":scheme", "http"), (":path", path),
                       (":authority", "localhost"), *extra], huffman=False)


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2"])
def test_h2_content_length_against_data_is_a_stream_error_on_every_route(srv, tls):
    for route, path in ROUTES.items():
        for declared, body in (("10", b"short"), ("2", b"longer")):
            c = Client(srv.ports[1] if tls else srv.ports[2], tls_ca=srv.pki.ca.cert_path if tls else None)
            # the body comes with the request, before any answer
            c.send(frame(HEADERS, END_HEADERS, 1, h2_block("POST", path, [("content-length", declared)]))
                   + frame(DATA, END_STREAM, 1, body))
            f, seen = c.until(lambda f: f[2] == 1 and (f[0] == RST_STREAM or f[1] & END_STREAM))
            assert f[0] == RST_STREAM and struct.unpack(">I", f[3])[0] == PROTOCOL_ERROR, \
                (route, declared, f, seen)
            assert not [x for x in seen if x[2] == 1 and x[0] == HEADERS], (route, seen)
            # the connection serves on
            assert c.get(3, "/r") == ("200", b"respond\n"), route
            c.close()
