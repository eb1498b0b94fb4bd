"""HTTP/2 end to end (issue 16): real scalwsd processes, real clients (curl
--http2 / --http2-prior-knowledge, h2load, nghttp) and a small raw-frame
client for what clients never send (frames on closed streams), over TLS
with ALPN and over cleartext h2c; every route kind: respond, static (ranges,
conditionals, a 10 MiB file), proxy (uploads and streamed downloads through
a real upstream); GOAWAY on the graceful stop and the reload."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import time

import pytest

from tests.e2e.h2raw import (ACK, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, HOST, PING,
                             RST_STREAM, SETTINGS, WINDOW_UPDATE, Client, frame)
from tests.e2e.upstreams import pattern_block
from tests.tlspki import PKI



@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


SITE = """
workers: {workers}
log: {{level: info, access: {tmp}/access.log, format: json}}
limits: {{header_timeout: 5s, max_body_bytes: 64m}}
sites:
  - listen: ["127.0.0.1:{port} tls", "127.0.0.1:{port2} h2c", "127.0.0.1:{port3} tls http2=off"]
    server_names: [localhost]
    tls: {{cert: {cert}, key: {key}, hsts: {{max_age: 1d}}}}
    routes:
      - path: /files/
        static: {{root: {tmp}/www}}
      - path: /up/
        proxy: {{url: "{upstream}", strip_prefix: /up}}
      - path: /
        respond: {{body: "hello over h2\\n", headers: {{X-Site: a}}}}
"""


def start(server, pki, upstream=None, workers=1):
    return server(SITE, workers=workers, cert=pki.ec.cert_path, key=pki.ec.key_path,
                  upstream=upstream.url if upstream else "http://127.0.0.1:9")


@pytest.fixture(autouse=True)
def _www_dir(tmp_path):
    (tmp_path / "www" / "files").mkdir(parents=True)
    (tmp_path / "www" / "files" / "small.txt").write_bytes(b"small file\n")


@pytest.fixture
def www(tmp_path):
    big = os.urandom(10 * 1024 * 1024 + 4321)
    (tmp_path / "www" / "files" / "big.bin").write_bytes(big)
    return big


def curl(*args, binary=False, timeout=60):
    """curl's body and its -w summary (the last line): (body, summary)."""
    out = subprocess.run(["curl", "-sS", "--cacert", CA[0], *args, "-w", "\n%{http_version} %{http_code}"],
                         capture_output=True, timeout=timeout)
    assert out.returncode == 0, out.stderr.decode()
    body, _, summary = out.stdout.rpartition(b"\n")
    return (body if binary else body.decode()), summary.decode()


CA = [""]


@pytest.fixture(autouse=True)
def _ca(pki):
    CA[0] = pki.ca.cert_path


def https(srv, path, port=None):
    return f"https://localhost:{port or srv.port}{path}"


def access_lines(srv):
    path = srv.tmp / "access.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- a raw HTTP/2 client: frames by hand, HPACK literals without Huffman ----

def hpack_literal(fields):
    out = b""
    for name, value in fields:
        n, v = name.encode(), value.encode()
        assert len(n) < 127 and len(v) < 127
        out += b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v
    return out


def request_headers(sid, path="/", method="GET", end_stream=True, extra=()):
    block = hpack_literal([(":method", method), (":scheme", "http"), (":path", path),
                           (":authority", "localhost"), *extra])
    return frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), sid, block)


class RawH2(Client):
    """A cleartext HTTP/2 connection that reads frames one by one, header
    blocks as they came (this file's requests are HPACK literals)."""

    def __init__(self, port, timeout=10.0):
        super().__init__(port, timeout=timeout, decode=False)


# ---- selection: ALPN and prior knowledge ------------------------------------------------------

def test_alpn_chooses_h2_then_http11_and_h2c_serves_both(server, pki):
    srv = start(server, pki)
    body, summary = curl("--http2", https(srv, "/"))
    assert (body, summary) == ("hello over h2\n", "2 200")
    body, summary = curl("--http1.1", https(srv, "/"))
    assert (body, summary) == ("hello over h2\n", "1.1 200")
    # The TLS listener with http2=off never chooses h2.
    body, summary = curl("--http2", https(srv, "/", srv.ports[2]))
    assert (body, summary) == ("hello over h2\n", "1.1 200")
    ctx = ssl.create_default_context(cafile=pki.ca.cert_path)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with ctx.wrap_socket(socket.create_connection((HOST, srv.port)), server_hostname="localhost") as s:
        assert s.selected_alpn_protocol() == "h2"
    with ctx.wrap_socket(socket.create_connection((HOST, srv.ports[2])),
                         server_hostname="localhost") as s:
        assert s.selected_alpn_protocol() == "http/1.1"
    # Cleartext: prior knowledge speaks h2, HTTP/1.1 on the same port still works.
    body, summary = curl("--http2-prior-knowledge", f"http://127.0.0.1:{srv.ports[1]}/")
    assert (body, summary) == ("hello over h2\n", "2 200")
    body, summary = curl("--http1.1", f"http://127.0.0.1:{srv.ports[1]}/")
    assert (body, summary) == ("hello over h2\n", "1.1 200")
    # The access log: one line per request, HTTP/2.0 for the h2 ones.
    srv.stop()
    protos = [line["protocol"] for line in access_lines(srv)]
    assert protos.count("HTTP/2.0") == 2 and protos.count("HTTP/1.1") == 3, protos


def test_respond_head_and_fields(server, pki):
    srv = start(server, pki)
    out = subprocess.run(["curl", "-sS", "-i", "--http2", "--cacert", pki.ca.cert_path,
                          https(srv, "/x")], capture_output=True, text=True, check=True).stdout
    head, _, body = out.replace("\r\n", "\n").partition("\n\n")
    lines = head.split("\n")
    assert lines[0].strip() == "HTTP/2 200"
    fields = dict(line.split(": ", 1) for line in lines[1:])
    assert body == "hello over h2\n"
    assert fields["x-site"] == "a" and fields["content-length"] == "14"
    assert fields["strict-transport-security"] == "max-age=86400"
    assert re.match(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT$", fields["date"])
    assert all(k == k.lower() for k in fields), fields  # RFC 9113 §8.2.1
    assert "connection" not in fields
    # HEAD: the length a GET would have, no body.
    out = subprocess.run(["curl", "-sS", "-I", "--http2", "--cacert", pki.ca.cert_path,
                          https(srv, "/x")], capture_output=True, text=True, check=True).stdout
    assert out.startswith("HTTP/2 200") and "content-length: 14" in out


# ---- static ------------------------------------------------------------------------------------

def test_static_big_file_ranges_and_conditionals(server, pki, www):
    srv = start(server, pki)
    for url, flag in ((https(srv, "/files/big.bin"), "--http2"),
                      (f"http://127.0.0.1:{srv.ports[1]}/files/big.bin", "--http2-prior-knowledge")):
        body, summary = curl(flag, url, binary=True)
        assert summary == "2 200"
        assert hashlib.sha256(body).digest() == hashlib.sha256(www).digest()
    body, summary = curl("--http2", "-r", "100-199", https(srv, "/files/big.bin"), binary=True)
    assert summary == "2 206" and body == www[100:200]
    out = subprocess.run(["curl", "-sS", "-D", "-", "-o", "/dev/null", "--http2", "--cacert",
                          pki.ca.cert_path, https(srv, "/files/small.txt")],
                         capture_output=True, text=True, check=True).stdout
    etag = re.search(r"^etag: (.+)$", out, re.M).group(1)  # text=True: \r\n read as \n
    lm = re.search(r"^last-modified: (.+)$", out, re.M).group(1)
    body, summary = curl("--http2", "-H", f"If-None-Match: {etag}", https(srv, "/files/small.txt"))
    assert (body, summary) == ("", "2 304")
    body, summary = curl("--http2", "-H", f"If-Modified-Since: {lm}", https(srv, "/files/small.txt"))
    assert (body, summary) == ("", "2 304")
    body, summary = curl("--http2", "-r", "20000000-", https(srv, "/files/big.bin"))
    assert summary == "2 416"
    body, summary = curl("--http2", https(srv, "/files/missing"))
    assert summary == "2 404"


def test_precompressed_files_over_h2(server, pki, tmp_path):
    """A FILE.gz / FILE.br beside FILE answers for it when the client
    accepts that encoding, with its own ETag and Vary, and ranges apply to
    the encoded bytes (HTTP/2 as HTTP/1)."""
    plain = b"precompressed over h2\n" * 200
    gz = gzip.compress(plain)
    br = b"pretend-brotli-bytes"  # served, never decoded: the server does not look inside
    files = tmp_path / "www" / "files"
    (files / "app.js").write_bytes(plain)
    (files / "app.js.gz").write_bytes(gz)
    (files / "app.js.br").write_bytes(br)
    srv = start(server, pki)

    def get(*extra):
        out = subprocess.run(["curl", "-sS", "-D", "-", "--http2", "--cacert", pki.ca.cert_path,
                              *extra, https(srv, "/files/app.js")], capture_output=True, check=True).stdout
        head, _, body = out.partition(b"\r\n\r\n")
        return head.decode().lower(), body

    head, body = get("-H", "Accept-Encoding: gzip")
    assert head.startswith("http/2 200") and body == gz
    assert "content-encoding: gzip" in head and "vary: accept-encoding" in head
    gz_etag = re.search(r"^etag: (.+)$", head, re.M).group(1)
    head, body = get("-H", "Accept-Encoding: gzip, br")
    assert "content-encoding: br" in head and body == br
    head, body = get()
    assert "content-encoding" not in head and body == plain and "vary: accept-encoding" in head
    assert re.search(r"^etag: (.+)$", head, re.M).group(1) != gz_etag
    head, body = get("-H", "Accept-Encoding: gzip", "-r", "0-9")
    assert head.startswith("http/2 206") and body == gz[:10]


def test_https_redirect_over_h2c_keeps_the_target_as_sent(server, pki):
    """The plain listener's redirect to https (tls.redirect) over h2c: the
    Location keeps the target's case (its pieces are values, not names)."""
    srv = server("""
        workers: 1
        sites:
          - listen: ["127.0.0.1:{port} tls", "127.0.0.1:{port2} h2c"]
            server_names: [localhost]
            tls: {{cert: %s, key: %s, redirect: on}}
            routes:
              - {{path: /, respond: {{body: "ok"}}}}
        """ % (pki.ec.cert_path, pki.ec.key_path))
    out = subprocess.run(["curl", "-sS", "-D", "-", "-o", "/dev/null", "--http2-prior-knowledge",
                          "-H", "Host: localhost",
                          f"http://127.0.0.1:{srv.ports[1]}/Docs/Page?next=/Admin&Q=X"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("HTTP/2 301"), out
    assert re.search(r"^location: (.+)$", out, re.M).group(1) == \
        f"https://localhost:{srv.port}/Docs/Page?next=/Admin&Q=X", out


def test_many_streams_on_one_connection(server, pki, www):
    srv = start(server, pki)
    # nghttp: 40 URLs on one connection, all at once.
    urls = [f"http://127.0.0.1:{srv.ports[1]}/files/small.txt?{i}" for i in range(20)] + \
           [f"http://127.0.0.1:{srv.ports[1]}/n{i}" for i in range(20)]
    out = subprocess.run(["nghttp", "-n", "-s", *urls], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert len(re.findall(r"^\s*\d+\s+\+\S+\s+\+\S+\s+\S+\s+200\s", out.stdout, re.M)) == 40, \
        out.stdout
    # h2load: 4000 requests, 2 connections, 100 streams each at a time.
    out = subprocess.run(["h2load", "-n", "4000", "-c", "2", "-m", "100",
                          f"http://127.0.0.1:{srv.ports[1]}/"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"requests: 4000 total, 4000 started, 4000 done, 4000 succeeded, 0 failed, "
                     r"0 errored", out.stdout), out.stdout
    assert "status codes: 4000 2xx" in out.stdout
    # The same over TLS (ALPN h2), with a static file.
    out = subprocess.run(["h2load", "-n", "1000", "-c", "2", "-m", "50",
                          https(srv, "/files/small.txt")], capture_output=True, text=True,
                         timeout=120)
    assert "Application protocol: h2" in out.stdout, out.stdout
    assert re.search(r"requests: 1000 total, 1000 started, 1000 done, 1000 succeeded, 0 failed",
                     out.stdout), out.stdout
    srv.stop()
    assert sum(line["protocol"] == "HTTP/2.0" for line in access_lines(srv)) == 5040


# ---- the proxy ----------------------------------------------------------------------------------

def test_proxied_answers_do_not_wait_on_a_file_of_another_stream(server, pki, upstream_app,
                                                                tmp_path):
    # bench/soak.py found it: while a large file filled the connection's
    # output, a proxied answer on another stream waited for a `drained` that
    # nothing marked due (the connection's pending output counted as the
    # stream's own), and the stream hung for good. h2load alternates the two
    # URLs over one connection, two streams at a time.
    (tmp_path / "www" / "files" / "200k.bin").write_bytes(os.urandom(200 * 1024))
    up = upstream_app()
    srv = start(server, pki, upstream=up)
    for _ in range(3):
        out = subprocess.run(["h2load", "-n", "1000", "-c", "1", "-m", "2", "-t", "1", "-N", "5",
                              f"http://127.0.0.1:{srv.ports[1]}/files/200k.bin",
                              f"http://127.0.0.1:{srv.ports[1]}/up/id"],
                             capture_output=True, text=True, timeout=60)
        assert re.search(r"requests: 1000 total, 1000 started, 1000 done, 1000 succeeded",
                         out.stdout), out.stdout + out.stderr


def test_proxy_upload_and_streamed_download(server, pki, upstream_app, tmp_path):
    up = upstream_app()
    srv = start(server, pki, upstream=up)
    data = os.urandom(6 * 1024 * 1024 + 7)
    (tmp_path / "up.bin").write_bytes(data)
    # A body with a length: passed on with it.
    body, summary = curl("--http2", "--data-binary", f"@{tmp_path}/up.bin", https(srv, "/up/upload"))
    assert summary == "2 200"
    assert json.loads(body) == {"len": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    # Without a length (curl -T - over h2 sends none): chunked to the upstream.
    out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-T", "-",
                          f"http://127.0.0.1:{srv.ports[1]}/up/echo"], input=data,
                         capture_output=True, check=True, timeout=60).stdout
    echo = json.loads(out)
    assert echo["body_len"] == len(data) and echo["body_sha256"] == hashlib.sha256(data).hexdigest()
    fields = {k.lower(): v for k, v in echo["headers"]}
    assert fields.get("transfer-encoding") == "chunked" and "content-length" not in fields
    assert fields["host"] == f"127.0.0.1:{srv.ports[1]}"
    # A download streamed back, with and without a length.
    size = 20 * 1024 * 1024 + 5
    want = (pattern_block() * (size // len(pattern_block()) + 1))[:size]
    for q in ("", "&chunked=1&piece=7000"):
        body, summary = curl("--http2", https(srv, f"/up/download?size={size}{q}"), binary=True)
        assert summary == "2 200"
        assert len(body) == size and hashlib.sha256(body).digest() == hashlib.sha256(want).digest()
    srv.stop()
    lines = [line for line in access_lines(srv) if line["uri"].startswith("/up/")]
    assert [line["protocol"] for line in lines] == ["HTTP/2.0"] * 4
    assert [line["status"] for line in lines] == [200] * 4


def test_cookie_crumbs_are_joined_for_http1_upstreams(server, pki, upstream_app):
    up = upstream_app()
    srv = start(server, pki, upstream=up)
    c = RawH2(srv.ports[1])
    c.send(request_headers(1, "/up/echo", extra=[("cookie", "a=1"), ("cookie", "b=2")]))
    body = b""
    while True:
        f = c.read_frame()
        assert f is not None
        if f[0] == DATA and f[2] == 1:
            body += f[3]
            if f[1] & END_STREAM:
                break
    c.close()
    fields = [(k.lower(), v) for k, v in json.loads(body)["headers"]]
    assert [v for k, v in fields if k == "cookie"] == ["a=1; b=2"]


def test_the_request_id_is_never_indexed(server, pki, upstream_app):
    """X-Request-Id is new with every proxied answer: sent as a literal
    never indexed, it stays out of both HPACK tables, which keep the
    fields that repeat (server, content-type): those shrink to one byte
    from the second answer on."""
    import hpack
    up = upstream_app()
    srv = start(server, pki, upstream=up)
    c = RawH2(srv.ports[1])
    dec = hpack.Decoder()
    ids, sizes = [], []
    for sid in (1, 3, 5, 7):
        c.send(request_headers(sid, "/up/echo"))
        while True:
            f = c.read_frame()
            assert f is not None
            if f[0] == HEADERS and f[2] == sid:
                fields = dec.decode(f[3])
                sizes.append(len(f[3]))
                rid = [h for h in fields if h[0] == "x-request-id"]
                assert len(rid) == 1 and isinstance(rid[0], hpack.NeverIndexedHeaderTuple), fields
                ids.append(rid[0][1])
            if f[2] == sid and f[1] & END_STREAM:
                break
    c.close()
    assert len(set(ids)) == 4, ids
    names = [n for n, _ in dec.header_table.dynamic_entries]
    assert b"x-request-id" not in names and b"server" in names, names
    assert max(sizes[1:]) < sizes[0] / 2, sizes  # the repeated fields: indexed


# ---- errors -----------------------------------------------------------------------------------

def test_frames_on_a_closed_stream(server, pki, upstream_app):
    up = upstream_app()
    srv = start(server, pki, upstream=up)
    c = RawH2(srv.ports[1])
    c.send(request_headers(1, "/"))
    f, _ = c.until(lambda f: f[2] == 1 and f[1] & END_STREAM)
    assert f[0] == DATA and f[3] == b"hello over h2\n"
    # DATA on the closed stream 1: STREAM_CLOSED (RFC 9113 §5.1; h2spec
    # 5.1/8), as a stream error: the session remembers how its last streams
    # closed, and frames that crossed a reset of ours are ignored instead;
    # the connection goes on.
    c.send(frame(DATA, END_STREAM, 1, b"late") + request_headers(3, "/"))
    f, before = c.until(lambda f: f[2] == 3 and f[1] & END_STREAM)
    assert f[3] == b"hello over h2\n"
    assert [(b[0], b[2], b[3]) for b in before if b[0] in (GOAWAY, RST_STREAM)] == \
        [(RST_STREAM, 1, struct.pack(">I", 0x5))], before
    # A new request on the closed stream 1: a connection error STREAM_CLOSED
    # (the client ended it; nothing may follow, RFC 9113 §5.1).
    c.send(request_headers(1, "/"))
    f, _ = c.until(lambda f: f[0] == GOAWAY)
    last, code = struct.unpack(">II", f[3][:8])
    assert (last & 0x7FFFFFFF, code) == (3, 0x5)
    assert c.read_frame() is None  # and the connection ends
    c.close()
    # DATA after END_STREAM on a stream still open (its answer waits on the
    # upstream): STREAM_CLOSED; nghttp2 makes it a connection error (§5.4.1
    # allows it), and the proxied request is let go.
    c = RawH2(srv.ports[1])
    c.send(request_headers(1, "/up/hold/never?timeout=20"))
    deadline = time.monotonic() + 10
    while _held(up, "never") < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    c.send(frame(DATA, 0, 1, b"more"))
    f, _ = c.until(lambda f: f[0] in (RST_STREAM, GOAWAY))
    assert f[0] == GOAWAY and struct.unpack(">II", f[3][:8]) == (1, 0x5), f
    assert c.read_frame() is None
    c.close()
    deadline = time.monotonic() + 10
    while _held(up, "never") > 0:  # the upstream saw its request go
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # DATA on a stream never opened (idle): PROTOCOL_ERROR (§5.1).
    c = RawH2(srv.ports[1])
    c.send(frame(DATA, 0, 7, b"x"))
    f, _ = c.until(lambda f: f[0] == GOAWAY)
    assert struct.unpack(">II", f[3][:8])[1] == 0x1
    c.close()
    # The server is fine afterwards; the reset stream was logged as 499.
    assert curl("--http2", https(srv, "/"))[1] == "2 200"
    srv.stop()
    assert [line["status"] for line in access_lines(srv) if "/hold/" in line["uri"]] == [499]


def test_large_header_list_gets_431(server, pki):
    srv = start(server, pki)
    c = RawH2(srv.ports[1])
    many = [(f"x-h{i}", "v" * 100) for i in range(120)]
    c.send(request_headers(1, "/", extra=many))
    f, _ = c.until(lambda f: f[0] == HEADERS and f[2] == 1)
    assert b"431" in f[3]  # ":status: 431" as a literal or an indexed status
    c.close()


# ---- the graceful stop and the reload ------------------------------------------------------------

def test_goaway_on_stop_lets_streams_in_flight_finish(server, pki, upstream_app):
    up = upstream_app()
    srv = start(server, pki, upstream=up)
    c = RawH2(srv.ports[1])
    c.send(request_headers(1, "/up/hold/k1") + request_headers(3, "/up/hold/k1"))
    deadline = time.monotonic() + 10
    while _held(up, "k1") < 2:  # both requests reached the upstream
        assert time.monotonic() < deadline
        time.sleep(0.01)
    srv.kill(signal.SIGTERM)
    # First "no new streams" (the largest id), a PING, and once the PING is
    # answered the last stream it took (RFC 9113 §6.8), both NO_ERROR.
    f, seen1 = c.until(lambda f: f[0] == GOAWAY)
    assert struct.unpack(">II", f[3][:8]) == (2**31 - 1, 0)
    f, seen2 = c.until(lambda f: f[0] == GOAWAY)
    assert struct.unpack(">II", f[3][:8]) == (3, 0)
    assert any(p[0] == PING for p in seen1 + seen2)
    up.get("/release/k1")
    ended = set()
    bodies = {1: b"", 3: b""}
    while ended != {1, 3}:
        f = c.read_frame()
        assert f is not None, "closed before the streams in flight ended"
        if f[0] == DATA:
            bodies[f[2]] += f[3]
        if f[1] & END_STREAM and f[0] in (DATA, HEADERS):
            ended.add(f[2])
        assert f[0] != RST_STREAM, f
    assert bodies == {1: b"released k1", 3: b"released k1"}
    assert c.read_frame() is None  # then the connection ends
    c.close()
    assert srv.proc.wait(20) == 0


def _held(up, key):
    """How many requests the upstream holds on /hold/KEY."""
    status, _, body = up.get(f"/held/{key}")
    assert status == 200, body
    return json.loads(body)["held"]


def test_h2load_through_reload_loses_nothing(server, pki, upstream_app):
    """h2load's requests in flight when the workers are replaced all finish:
    the old worker says GOAWAY and serves what it took. (h2load never opens
    a new connection after a GOAWAY and counts the requests it could no
    longer send as failed, so every request here is sent before the
    reload: 4 connections x 16 streams, each held by the upstream.)"""
    up = upstream_app()
    srv = start(server, pki, upstream=up, workers=2)
    h2load = subprocess.Popen(["h2load", "-n", "64", "-c", "4", "-m", "16",
                               f"http://127.0.0.1:{srv.ports[1]}/up/hold/r"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while _held(up, "r") < 64:
            assert time.monotonic() < deadline and h2load.poll() is None
            time.sleep(0.01)
        old = srv.workers()
        srv.kill(signal.SIGHUP)
        srv.wait_log("(generation 2)", timeout=30)  # the old workers said GOAWAY and stopped accepting
        assert _held(up, "r") == 64 and h2load.poll() is None
        up.get("/release/r")
        out, _ = h2load.communicate(timeout=60)
    finally:
        if h2load.poll() is None:
            h2load.kill()
    assert "requests: 64 total, 64 started, 64 done, 64 succeeded, 0 failed, 0 errored" in out, out
    assert "status codes: 64 2xx" in out, out
    # The old workers exit once their streams ended.
    deadline = time.monotonic() + 20
    while any(p in srv.workers() for p in old):
        assert time.monotonic() < deadline, srv.log()
        time.sleep(0.02)


@pytest.mark.timeout(120)
def test_continuous_h2_load_across_reloads_loses_nothing(server, pki):
    """A client that keeps sending over HTTP/2 and opens a new connection
    after a GOAWAY, as browsers do (curl --parallel: 8 at once on one
    connection), through two reloads, each begun and finished while it
    sends: every request is answered 200 over HTTP/2. (h2load cannot show
    this: it never reconnects, ADR 0015; httpx fails every request in
    flight on any GOAWAY, even one that promises to serve them.)"""
    total = 20000
    srv = start(server, pki, workers=2)
    out = srv.tmp / "codes.txt"
    curl = subprocess.Popen(["curl", "-sS", "--http2", "--cacert", pki.ca.cert_path,
                             "--parallel", "--parallel-max", "8", "-o", "/dev/null",
                             "-w", "%{http_code} %{http_version}\n",
                             f"https://localhost:{srv.port}/?n=[1-{total}]"],
                            stdout=open(out, "w"), stderr=subprocess.PIPE, text=True)

    def done():
        return len(out.read_text().splitlines())

    try:
        for gen in (2, 3):
            start_at = done() + 500
            deadline = time.monotonic() + 30
            while done() < start_at:  # load flows before each reload
                assert time.monotonic() < deadline and curl.poll() is None, curl.stderr.read()
                time.sleep(0.01)
            srv.kill(signal.SIGHUP)
            srv.wait_log(f"(generation {gen})", timeout=30)
            assert curl.poll() is None and done() < total, "the load ended before the reload did"
        _, err = curl.communicate(timeout=90)
    finally:
        if curl.poll() is None:
            curl.kill()
    codes = out.read_text().splitlines()
    assert curl.returncode == 0, err
    assert len(codes) == total and set(codes) == {"200 2"}, (len(codes), set(codes), err)


# ---- the response cache ------------------------------------------------------------------------

def test_cache_hits_over_h2_are_sent_from_the_store(server, pki):
    from tests.e2e.upstreams.cacheorigin import Origin
    origin = Origin()
    try:
        srv = server(f"""
            workers: 1
            cache_zones: {{{{z: {{{{max_size: 16m}}}}}}}}
            sites:
              - listen: ["127.0.0.1:{{port}} h2c"]
                routes:
                  - path: /
                    proxy: {{{{url: "http://127.0.0.1:{origin.port}", cache: {{{{zone: z}}}}}}}}
        """)
        base = f"http://127.0.0.1:{srv.port}"
        for size in (100, 3 << 20):  # copied beside the head, and referenced in the store
            t = f"/c?cc=max-age%3D100&size={size}"
            out = [subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-D", "-", base + t],
                                  capture_output=True, check=True).stdout for _ in range(3)]
            heads = [o.partition(b"\r\n\r\n")[0].decode() for o in out]
            bodies = [o.partition(b"\r\n\r\n")[2] for o in out]
            assert all(h.startswith("HTTP/2 200") for h in heads), heads
            assert "fwd=miss" in heads[0] and all("scalws; hit" in h for h in heads[1:]), heads
            assert len(bodies[0]) == size and bodies[1] == bodies[2] == bodies[0]
            assert origin.count(t) == 1
    finally:
        origin.stop()


def test_request_body_over_max_body_bytes_gets_413(server, upstream_app, tmp_path):
    up = upstream_app()
    srv = server(f"""
        workers: 1
        log: {{{{access: {{tmp}}/access.log, format: json, level: info}}}}
        limits: {{{{max_body_bytes: 1m}}}}
        sites:
          - listen: ["127.0.0.1:{{port}} h2c"]
            routes:
              - path: /
                proxy: {{{{url: "{up.url}"}}}}
    """)
    data = os.urandom(3 * 1024 * 1024)
    (tmp_path / "big").write_bytes(data)
    url = f"http://127.0.0.1:{srv.port}/upload"
    # Declared too long: refused before any of it is read.
    out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w",
                          "%{http_code}", "--data-binary", f"@{tmp_path}/big", url],
                         capture_output=True, text=True, timeout=30)
    assert out.stdout == "413", out
    # No length, too long as it arrives: the upstream lets go, the client gets 413.
    out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w",
                          "%{http_code}", "-T", "-", url], input=data.decode("latin-1"),
                         capture_output=True, text=True, timeout=30, encoding="latin-1")
    assert out.stdout == "413", out
    # The proxy let go of its upstream side without saying the client left.
    assert "client closed the connection" not in srv.log(), srv.log()
    # Within the limit: passed on whole.
    out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-T", "-", url],
                         input=data[:500000], capture_output=True, timeout=30)
    assert json.loads(out.stdout) == {"len": 500000,
                                      "sha256": hashlib.sha256(data[:500000]).hexdigest()}
    srv.stop()
    assert [line["status"] for line in access_lines(srv)] == [413, 413, 200]


def test_settings_and_the_concurrent_stream_limit(server, pki, upstream_app):
    up = upstream_app()
    srv = start(server, pki, upstream=up)
    c = RawH2(srv.ports[1])
    f = c.read_frame()
    assert f[0] == SETTINGS and not f[1] & ACK  # the server's preface
    settings = dict(struct.unpack(">HI", f[3][i:i + 6]) for i in range(0, len(f[3]), 6))
    assert settings[0x3] == 128                 # MAX_CONCURRENT_STREAMS
    assert settings[0x4] == 256 * 1024          # INITIAL_WINDOW_SIZE
    assert settings[0x6] >= 8192                # MAX_HEADER_LIST_SIZE, from max_header_bytes
    assert settings.get(0x9) == 1               # NO_RFC7540_PRIORITIES
    c.until(lambda f: f[0] == SETTINGS and f[1] & ACK)  # our SETTINGS are in force
    # 129 streams at once: one over the limit. nghttp2 makes it a connection
    # error PROTOCOL_ERROR (RFC 9113 §5.1.2 allows PROTOCOL_ERROR or
    # REFUSED_STREAM, §5.4.1 a connection error for any stream error).
    c.send(b"".join(request_headers(1 + 2 * i, "/up/hold/lim") for i in range(129)))
    f, _ = c.until(lambda f: f[0] == GOAWAY)
    assert struct.unpack(">II", f[3][:8]) == (255, 0x1), f
    c.close()
    # Whatever of the streams it took reached the upstream is let go with it.
    deadline = time.monotonic() + 20
    while _held(up, "lim") > 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert curl("--http2-prior-knowledge", f"http://127.0.0.1:{srv.ports[1]}/")[1] == "2 200"


def _rss_kib(pid) -> int:
    # RssAnon: the process's own memory; the code an attack runs for the first
    # time since the worker dropped its start-up's pages (forkmem.py) is the page cache's
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


def test_proxy_to_a_slow_h2_reader_in_bounded_memory(server, pki, upstream_app):
    """The client's window paces the upstream: a 64 MiB download to a reader
    that opens its window 32 KiB every 10 ms never sits in the worker."""
    up = upstream_app()
    srv = server(f"""
        workers: 1
        sites:
          - listen: ["127.0.0.1:{{port}} h2c"]
            routes:
              - path: /
                proxy: {{{{url: "{up.url}"}}}}
    """)
    (worker,) = srv.workers()
    assert curl("--http2-prior-knowledge", f"http://127.0.0.1:{srv.port}/id")[1] == "2 200"
    rss0 = _rss_kib(worker)
    size = 64 << 20
    c = RawH2(srv.port)  # windows: 65535 for the connection and the stream
    c.send(request_headers(1, f"/download?size={size}"))
    h = hashlib.sha256()
    got = unacked = peak = 0
    opened = False
    while True:
        f = c.read_frame()
        assert f is not None and f[0] not in (RST_STREAM, GOAWAY), f
        if f[0] != DATA:
            continue
        h.update(f[3])
        got += len(f[3])
        unacked += len(f[3])
        if f[1] & END_STREAM:
            break
        if got < 4 << 20:
            if unacked >= 32768:  # slow: 32 KiB more every 10 ms (the window is 65535)
                time.sleep(0.01)
                inc = struct.pack(">I", unacked)
                c.send(frame(WINDOW_UPDATE, 0, 0, inc) + frame(WINDOW_UPDATE, 0, 1, inc))
                unacked = 0
                peak = max(peak, _rss_kib(worker) - rss0)
        elif not opened:  # then all at once
            inc = struct.pack(">I", (1 << 30))
            c.send(frame(WINDOW_UPDATE, 0, 0, inc) + frame(WINDOW_UPDATE, 0, 1, inc))
            opened = True
    c.close()
    want = hashlib.sha256((pattern_block() * (size // len(pattern_block()))))
    assert got == size and h.hexdigest() == want.hexdigest()
    assert peak < 8 * 1024, f"worker RSS grew by {peak} KiB while the client was slow"


def test_fastcgi_over_h2(server, php_fpm):
    from tests.e2e.test_fastcgi import MIB, fcgi_yaml
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], listen="127.0.0.1:@PORT@ h2c",
                           top={"limits": {"max_body_bytes": 64 * MIB}}))
    base = f"http://127.0.0.1:{srv.port}"
    out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", base + "/env.php?a=1"],
                         capture_output=True, check=True).stdout
    env = json.loads(out)
    assert env["get"] == {"a": "1"} and env["server"]["SERVER_PROTOCOL"] == "HTTP/2.0"  # nginx's
    assert env["server"]["REQUEST_METHOD"] == "GET"
    data = os.urandom(5 * MIB + 3)
    for args in (["--data-binary", "@-"], ["-T", "-"]):  # with a length, and without
        out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-X", "POST",
                              "-H", "Content-Type: application/octet-stream", *args,
                              base + "/md5.php"], input=data, capture_output=True,
                             check=True, timeout=60).stdout
        assert out.decode().split() == [hashlib.md5(data).hexdigest(), str(len(data)),
                                        str(len(data))], (args, out[:200])


def test_a_stream_reset_with_its_bytes_still_queued_leaves_the_connection_sound(server, pki,
                                                                                upstream_app):
    """The client cancels a proxied download while the server's socket is
    full of its frames (referencing the proxy's buffer): the proxy lets go,
    what was queued still goes out intact, and the connection serves on."""
    up = upstream_app()
    srv = start(server, pki, upstream=up)
    c = RawH2(srv.ports[1])
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    big = struct.pack(">I", 1 << 30)
    size = 256 << 20
    c.send(frame(WINDOW_UPDATE, 0, 0, big) + request_headers(1, f"/up/download?size={size}") +
           frame(WINDOW_UPDATE, 0, 1, big))
    # Read nothing until the server's side is stuck: our receive queue stops growing.
    import fcntl
    import termios

    def queued():
        return struct.unpack("i", fcntl.ioctl(c.sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    last, deadline = -1, time.monotonic() + 20
    while True:
        n = queued()
        if n == last and n > 32 * 1024:
            break
        assert time.monotonic() < deadline
        last = n
        time.sleep(0.05)
    c.send(frame(RST_STREAM, 0, 1, struct.pack(">I", 0x8)) + request_headers(3, "/"))  # CANCEL
    block = pattern_block()
    off = 0
    while True:
        f = c.read_frame()
        assert f is not None and f[0] != GOAWAY, f
        if f[0] == DATA and f[2] == 1:  # what was already queued: the pattern, in order
            at = off % len(block)
            want = (block * (len(f[3]) // len(block) + 2))[at:at + len(f[3])]
            assert f[3] == want, f"stream 1 corrupted at offset {off}"
            off += len(f[3])
        if f[2] == 3 and f[1] & END_STREAM:
            assert f[3] == b"hello over h2\n"
            break
    assert 0 < off < size
    c.close()
    srv.stop()
    statuses = {line["uri"]: line["status"] for line in access_lines(srv)}
    assert statuses[f"/up/download?size={size}"] == 200  # its answer had started
