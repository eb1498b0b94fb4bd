"""What a proxied answer carries besides its head and body (issue 32,
point 3): an upstream's 1xx (103 Early Hints above all) passed on before the
final answer, the trailer section of a chunked answer, and 100-continue
end to end, over HTTP/1.1 (raw sockets: the exact bytes), HTTP/1.0, h2c
and h2 over TLS (frames read one by one), and through the cache.

The upstream is raw.py, whose answers script their timing: PAUSE holds what
follows for PAUSE_S, so a 103 is seen to reach the client alone, before the
final answer exists, and a trailer section arrives in two reads.
"""
from __future__ import annotations

import socket
import subprocess
import time

import pytest
from hpack import Encoder

from tests.e2e.conftest import recv_to_close, statuses
from tests.e2e.h2raw import DATA, END_HEADERS, END_STREAM, HEADERS, RST_STREAM, Client, frame
from tests.e2e.upstreams.raw import PAUSE_S, TRAILERS_DROPPED, TRAILERS_KEPT, VALID_BODIES
from tests.tlspki import PKI

pytestmark = pytest.mark.timeout(60)

SITE = """
workers: 1
cache_zones: {{z: {{max_size: 8m}}}}
sites:
  - listen: ["127.0.0.1:{port}", "127.0.0.1:{port2} h2c", "127.0.0.1:{port3} tls"]
    server_names: [localhost]
    tls: {{cert: {cert}, key: {key}}}
    routes:
      - path: /cached/
        proxy: {{url: "{upstream}", strip_prefix: /cached, cache: {{zone: z}}}}
      - path: /
        proxy: {{url: "{upstream}", headers: {{response: {{remove: [X-Hidden]}}}}}}
"""

EARLY_A = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
EARLY_B = b"HTTP/1.1 103 Early Hints\r\nLink: </b.js>; rel=preload\r\n\r\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def srv(server, pki, raw_upstream):
    s = server(SITE, cert=pki.ec.cert_path, key=pki.ec.key_path, upstream=raw_upstream.url)
    s.pki = pki
    return s


# ---- helpers ----------------------------------------------------------------------------

def read_until(s, buf, marker):
    while marker not in buf:
        b = s.recv(65536)
        assert b, f"closed before {marker!r}: {buf!r}"
        buf += b
    return buf


def split_answers(data):
    """The 1xx heads (bytes, each with its blank line) and the final answer."""
    interim = []
    while data.startswith(b"HTTP/1.1 1"):
        head, _, data = data.partition(b"\r\n\r\n")
        interim.append(head + b"\r\n\r\n")
    return interim, data


def dechunk(data):
    """A chunked body: (the body, its trailer fields as (name, value) pairs);
    the section must end the bytes."""
    body = b""
    while True:
        size, _, data = data.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        body += data[:n]
        assert data[n:n + 2] == b"\r\n", data
        data = data[n + 2:]
    fields = []
    while not data.startswith(b"\r\n"):
        line, sep, data = data.partition(b"\r\n")
        assert sep, f"a trailer line without its end: {line!r}"
        name, _, value = line.decode().partition(":")
        fields.append((name, value.strip()))
    assert data == b"\r\n", f"the section's end, then nothing: {data!r}"
    return body, fields


def final_parts(data):
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs.setdefault(k.strip().lower(), []).append(v.strip())
    return lines[0], hdrs, body


def h2_client(srv, tls):
    if tls:
        return Client(srv.ports[2], tls_ca=srv.pki.ca.cert_path).ready()
    return Client(srv.ports[1]).ready()


def h2_request(c, sid, path, method="GET", extra=(), end_stream=True):
    enc = Encoder()
    enc.header_table_size = 0
    fields = [(":method", method), (":scheme", "http"), (":path", path),
              (":authority", "localhost"), *extra]
    c.send(frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), sid,
                 enc.encode(fields, huffman=False)))


def h2_frames(c, sid, stop=None):
    """Stream sid's frames as (type, flags, payload, seconds since the call)
    until END_STREAM or RST_STREAM (or stop(frames) holds)."""
    t0 = time.monotonic()
    got = []
    backlog = c.__dict__.setdefault("backlog", [])  # other streams' frames, read already
    while True:
        mine = [f for f in backlog if f[2] == sid]
        if mine:
            backlog.remove(mine[0])
            f = mine[0]
        else:
            f = c.read_frame()
            assert f is not None, f"connection closed: {got}"
            if f[2] != sid:
                backlog.append(f)
                continue
        got.append((f[0], f[1], f[3], time.monotonic() - t0))
        if f[0] == RST_STREAM or (f[0] in (HEADERS, DATA) and f[1] & END_STREAM):
            return got
        if stop and stop(got):
            return got


def headers_of(frames):
    return [(f[2], bool(f[1] & END_STREAM)) for f in frames if f[0] == HEADERS]


# ---- 1xx over HTTP/1 --------------------------------------------------------------------

def test_103_reaches_an_http11_client_alone_before_the_final_answer(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /103 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        first = read_until(s, b"", b"\r\n\r\n")
        # The upstream holds the rest for PAUSE_S: the 103 came alone, and
        # its hop-by-hop fields (Connection and what it names, Keep-Alive)
        # and the route's removed X-Hidden stayed behind.
        assert first == EARLY_A, first
        rest = recv_to_close(s)
    interim, final = split_answers(rest)
    assert interim == [EARLY_B], rest[:400]
    line, hdrs, body = final_parts(final)
    assert line == "HTTP/1.1 200 OK" and body == VALID_BODIES["/103"], final
    assert "link" not in hdrs, hdrs


def test_no_1xx_reaches_an_http10_client(srv):
    # RFC 9110 §15.2: HTTP/1.0 defined no 1xx.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /103 HTTP/1.0\r\nHost: a\r\n\r\n")
        data = recv_to_close(s)
    assert statuses(data) == [200], data[:300]
    assert data.endswith(VALID_BODIES["/103"])


def test_other_1xx_are_passed_on_but_not_the_upstreams_100(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /102-104 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        data = recv_to_close(s)
    interim, final = split_answers(data)
    assert interim == [b"HTTP/1.1 102 Processing\r\n\r\n",
                       b"HTTP/1.1 104 Upload Resumption Supported\r\n"
                       b"Upload-Draft-Interop-Version: 6\r\n\r\n"], data[:400]
    assert final_parts(final)[0] == "HTTP/1.1 200 OK" and final.endswith(b"\r\n\r\nok")


def test_a_1xx_does_not_start_the_answer(srv):
    # The upstream closes after its 103: the client still gets a final
    # answer (502), not a connection cut after the hint.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /103-then-close HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        data = recv_to_close(s)
    got = statuses(data)
    assert got[-1] == 502 and set(got[:-1]) == {103}, data[:500]


def test_at_most_16_interim_answers_then_the_upstream_is_a_bad_one(srv):
    """16 interim answers pass (15 of them 102, then a 103); a 17th is a bad
    response, answered 502 at once, not when the upstream (which holds the
    connection 20 s after its 17th) lets go."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /16-interim HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        got = statuses(recv_to_close(s))
    assert got == [102] * 15 + [103, 200], got
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /17-interim HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        got = statuses(recv_to_close(s))
    assert got == [102] * 16 + [502] and time.monotonic() - t0 < 5, got
    assert "upstream sent an invalid response" in srv.log()


# ---- 1xx over HTTP/2 --------------------------------------------------------------------

@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2-tls"])
def test_103_over_http2_is_a_headers_frame_before_the_final_one(srv, tls):
    c = h2_client(srv, tls)
    h2_request(c, 1, "/103")
    frames = h2_frames(c, 1)
    c.close()
    hs = headers_of(frames)
    assert [h[":status"] for h, _ in hs] == ["103", "103", "200"], frames
    assert hs[0] == ({":status": "103", "link": "</a.css>; rel=preload"}, False), hs[0]
    assert hs[1] == ({":status": "103", "link": "</b.js>; rel=preload"}, False), hs[1]
    # Each went as it came: the upstream paused between them.
    times = [f[3] for f in frames if f[0] == HEADERS]
    assert times[1] - times[0] > PAUSE_S / 2 and times[2] - times[1] > PAUSE_S / 2, times
    body = b"".join(f[2] for f in frames if f[0] == DATA)
    assert body == VALID_BODIES["/103"] and frames[-1][1] & END_STREAM


def test_other_1xx_over_http2(srv):
    c = h2_client(srv, False)
    h2_request(c, 1, "/102-104")
    hs = headers_of(h2_frames(c, 1))
    c.close()
    assert [h for h, _ in hs[:2]] == [{":status": "102"},
                                      {":status": "104", "upload-draft-interop-version": "6"}], hs
    assert hs[2][0][":status"] == "200" and len(hs) == 3, hs


@pytest.mark.parametrize("proto", ["--http1.1", "--http2-prior-knowledge"])
def test_curl_sees_the_103(srv, proto):
    port = srv.ports[1] if proto != "--http1.1" else srv.port
    out = subprocess.run(["curl", "-sS", "-v", proto, f"http://127.0.0.1:{port}/103"],
                         capture_output=True, timeout=30)
    err = out.stderr.decode()
    assert out.returncode == 0, err
    want = "< HTTP/1.1 103 Early Hints" if proto == "--http1.1" else "< HTTP/2 103"
    assert want in err and "< link: </a.css>; rel=preload" in err.lower(), err
    assert out.stdout == VALID_BODIES["/103"]


# ---- 1xx through the cache --------------------------------------------------------------

def test_103_on_a_cache_miss_is_passed_on_not_stored(srv):
    def get():
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"GET /cached/103 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            return recv_to_close(s)
    interim, final = split_answers(get())
    # (the cached route removes no field: X-Hidden passes)
    assert interim == [EARLY_A.replace(b"\r\n\r\n", b"\r\nX-Hidden: 1\r\n\r\n"), EARLY_B], interim
    line, hdrs, body = final_parts(final)
    assert line == "HTTP/1.1 200 OK" and "stored" in hdrs["cache-status"][0], hdrs
    assert body == VALID_BODIES["/103"]
    interim, final = split_answers(get())
    line, hdrs, body = final_parts(final)
    assert interim == [] and "hit" in hdrs["cache-status"][0], final[:300]
    assert "link" not in hdrs and body == VALID_BODIES["/103"], hdrs


# ---- trailers ---------------------------------------------------------------------------

def get_chunked(srv, path, te=True, minor=1):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.{minor}\r\nHost: a\r\nConnection: close\r\n".encode() +
                  (b"TE: trailers\r\n" if te else b"") + b"\r\n")
        return final_parts(recv_to_close(s))


def test_trailers_to_an_http11_client_that_said_te_trailers(srv):
    line, hdrs, rest = get_chunked(srv, "/trailers")
    assert line == "HTTP/1.1 200 OK" and hdrs["transfer-encoding"] == ["chunked"], hdrs
    body, fields = dechunk(rest)
    assert body == VALID_BODIES["/trailers"]
    # What RFC 9110 §6.5.1 keeps out of trailers (and the route's removed
    # field) is dropped; the rest passes whole, in order, across the
    # upstream's two reads.
    assert fields == TRAILERS_KEPT, fields
    # The Trailer field announcing them stays hop-by-hop (dropped).
    assert "trailer" not in hdrs


def test_trailers_are_dropped_without_te_trailers(srv):
    line, hdrs, rest = get_chunked(srv, "/trailers", te=False)
    assert rest.endswith(b"\r\n0\r\n\r\n"), rest
    assert dechunk(rest) == (VALID_BODIES["/trailers"], [])
    # HTTP/1.0: no chunks, no trailers, TE or not.
    line, hdrs, rest = get_chunked(srv, "/trailers", minor=0)
    assert "transfer-encoding" not in hdrs and rest == VALID_BODIES["/trailers"], (hdrs, rest)


def test_trailers_after_an_empty_body(srv):
    line, hdrs, rest = get_chunked(srv, "/trailers-only")
    assert rest == b"0\r\nX-Only: 1\r\n\r\n", rest


def test_too_many_trailer_fields_cut_the_answer(srv):
    # 200 fields: refused as a head with as many would be; the body went
    # already, so the client sees it cut (no last chunk), never complete.
    line, hdrs, rest = get_chunked(srv, "/many-trailers")
    assert line == "HTTP/1.1 200 OK" and rest == b"5\r\nhello\r\n", rest
    assert "upstream sent an invalid response" in srv.log()


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2-tls"])
def test_trailers_over_http2_end_the_stream(srv, tls):
    c = h2_client(srv, tls)
    h2_request(c, 1, "/trailers")          # no TE: HTTP/2 always takes trailers
    h2_request(c, 3, "/trailers-only")
    frames = h2_frames(c, 1)
    only = h2_frames(c, 3)
    c.close()
    hs = headers_of(frames)
    assert len(hs) == 2 and hs[0][0][":status"] == "200" and not hs[0][1], hs
    assert hs[1] == ({k.lower(): v for k, v in TRAILERS_KEPT}, True), hs[1]
    assert frames[-1][0] == HEADERS, "the trailers end the stream"
    assert not any(f[1] & END_STREAM for f in frames if f[0] == DATA)
    assert b"".join(f[2] for f in frames if f[0] == DATA) == VALID_BODIES["/trailers"]
    hs = headers_of(only)
    assert hs[-1] == ({"x-only": "1"}, True) and only[-1][0] == HEADERS, only
    assert b"".join(f[2] for f in only if f[0] == DATA) == b""


def test_trailers_pass_the_cache_but_are_not_stored(srv):
    line, hdrs, rest = get_chunked(srv, "/cached/trailers")
    assert "stored" in hdrs["cache-status"][0], hdrs
    body, fields = dechunk(rest)
    kept = TRAILERS_KEPT + [("X-Hidden", "1")]  # the cached route removes nothing
    assert body == VALID_BODIES["/trailers"] and fields == kept, fields
    line, hdrs, rest = get_chunked(srv, "/cached/trailers")
    assert "hit" in hdrs["cache-status"][0], hdrs
    framed = "transfer-encoding" in hdrs
    assert (dechunk(rest) if framed else (rest, [])) == (VALID_BODIES["/trailers"], []), rest


def test_curl_raw_shows_the_trailers(srv):
    out = subprocess.run(["curl", "-sS", "--raw", "-H", "TE: trailers",
                          f"http://127.0.0.1:{srv.port}/trailers"], capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.endswith(b"0\r\nX-Checksum: sha-256=abc\r\nX-Count: 2\r\n"
                               b"Content-Digest: " + TRAILERS_KEPT[2][1].encode() + b"\r\n\r\n"), \
        out.stdout
    assert not any(n.encode() + b":" in out.stdout for n, _ in TRAILERS_DROPPED)


# ---- 100-continue -----------------------------------------------------------------------

def post_expecting(srv, path, body=b"hello"):
    """A POST with Expect: 100-continue that waits for the 100 before its body;
    everything the client got."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: a\r\nContent-Length: {len(body)}\r\n"
                  f"Expect: 100-continue\r\nConnection: close\r\n\r\n".encode())
        s.settimeout(2)
        got = read_until(s, b"", b"\r\n\r\n")
        # (an upstream that answers at once may have its answer behind it)
        assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), got
        s.settimeout(10)
        try:
            s.sendall(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed already: what it sent is what counts
        return got + recv_to_close(s)


@pytest.mark.parametrize("path, want", [
    ("/100-early", [100, 200]),        # the upstream's own 100: no second one
    ("/102-104", [100, 102, 104, 200]),
    ("/early-417", [100, 417]),        # a final answer before the body was read
    ("/early-200", [100, 200]),
])
def test_100_continue_is_ours_once_over_http1(srv, path, want):
    data = post_expecting(srv, path)
    assert statuses(data) == want, data[:500]
    interim, final = split_answers(data)
    line, hdrs, body = final_parts(final)
    assert body == VALID_BODIES[path], final
    if path.startswith("/early"):
        # the body was not all read: the connection ends after the answer
        assert hdrs.get("connection") == ["close"], hdrs


VALID_STATUS = {"/100-early": 200, "/102-104": 200, "/early-417": 417, "/early-200": 200}


@pytest.mark.parametrize("path, want", [
    ("/100-early", ["100"]),
    ("/102-104", ["100", "102", "104"]),
    ("/early-417", ["100"]),
    ("/early-200", ["100"]),
])
def test_100_continue_is_ours_once_over_http2(srv, path, want):
    c = h2_client(srv, False)
    h2_request(c, 1, path, method="POST", end_stream=False,
               extra=[("content-length", "5"), ("expect", "100-continue")])
    first = h2_frames(c, 1, stop=lambda fs: fs[-1][0] == HEADERS)
    assert headers_of(first) == [({":status": "100"}, False)], first
    c.send(frame(DATA, END_STREAM, 1, b"hello"))
    frames = first + h2_frames(c, 1)
    c.close()
    hs = [h for h, _ in headers_of(frames)]
    assert [h[":status"] for h in hs] == want + [str(VALID_STATUS[path])], hs
    assert b"".join(f[2] for f in frames if f[0] == DATA) == VALID_BODIES[path]
