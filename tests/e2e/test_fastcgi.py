"""The FastCGI client end to end: real scalwsd in front of a real PHP-FPM
(Debian's php-fpm8.2, started per test by the php_fpm fixture) and, for the
answers PHP never gives, a FastCGI responder written in Python
(fcgi_responder; both in tests/e2e/upstreams/phpfpm.py). The PHP scripts are
in tests/e2e/php_apps/lab.

The client: TCP and unix sockets, FCGI_KEEP_CONN and the pool, balancing and
passive health, request bodies as STDIN, responses with backpressure, STDERR
to the error log, Status/Location (RFC 3875), local redirects, malformed
records, timeouts, a dead PHP-FPM. Then the CGI parameters a PHP
application reads ($_SERVER). The front controllers (try_files to
index.php, WordPress- and Laravel-shaped) are in test_fastcgi_apps.py.

Every config is built by fcgi_yaml(): one group `php`, a site on
127.0.0.1:{port} with a `~ [^/]\\.php(/|$)` fastcgi route and a static `/`.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import ssl
import time

import pytest

from tests.e2e.conftest import ROOT, read_response, recv_to_close

pytestmark = pytest.mark.timeout(60)

MIB = 1 << 20
LAB = os.path.join(ROOT, "tests", "e2e", "php_apps", "lab")
PHP_ROUTE = "~ [^/]\\.php(/|$)"
SPLIT = "^(.+\\.php)(/.*)$"
TRUSTED = "127.0.0.2"


def fcgi_yaml(servers, fastcgi=None, upstream=None, routes=(), top=None, root=LAB,
              static=None, listen="127.0.0.1:@PORT@", site=None) -> str:
    """`upstreams: {php: {servers, keepalive: 8, **upstream}}` and one site whose
    routes are `routes`, then the .php route (fastcgi to php, root, split),
    then `/` served by static from root."""
    cfg = {"workers": 1, "trusted_proxies": [f"{TRUSTED}/32"], **(top or {})}
    cfg["upstreams"] = {"php": {"servers": list(servers), "keepalive": 8, **(upstream or {})}}
    cfg["sites"] = [{"listen": [listen], **(site or {}), "routes": [
        *routes,
        {"path": PHP_ROUTE, "fastcgi": {"upstream": "php", "root": root,
                                        "split_path_info": SPLIT, **(fastcgi or {})}},
        {"path": "/", "static": {"root": root, **(static or {})}},
    ]}]
    text = json.dumps(cfg, indent=2)
    return text.replace("{", "{{").replace("}", "}}").replace("@PORT@", "{port}")


def client(srv, timeout=10) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)


def get(c, path, method="GET", body=None, headers=None, chunked=False):
    """(status, reason, headers lowercased, body) on the keep-alive client c."""
    c.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
    r = c.getresponse()
    data = r.read()
    return r.status, r.reason, {k.lower(): v for k, v in r.getheaders()}, data


def env(c, path="/env.php", **kw) -> dict:
    status, _, _, body = get(c, path, **kw)
    assert status == 200, (status, body[:500])
    return json.loads(body)


# ---- 1. connections: TCP, unix, FCGI_KEEP_CONN --------------------------------------

def test_keep_conn_one_pooled_connection_serves_sequential_requests(server, php_fpm):
    fpm = php_fpm(children=4)
    srv = server(fcgi_yaml([fpm.addr]))
    c = client(srv)
    pids = {env(c)["pid"] for _ in range(12)}
    # Twelve requests, one FastCGI connection: the same PHP child served all
    # of them (pm=static with 4 children: new connections go to any child).
    assert len(pids) == 1, pids
    assert fpm.conns() == 1
    assert len(fpm.access()) == 12
    # A second client, one after the other: the pooled connection again.
    c2 = client(srv)
    assert env(c2)["pid"] in pids
    assert fpm.conns() == 1


def test_keep_conn_off_opens_a_connection_per_request(server, php_fpm, fcgi_responder):
    fpm = php_fpm(children=4)
    srv = server(fcgi_yaml([fpm.addr], fastcgi={"keep_conn": False}, routes=[
        {"path": "/py/", "fastcgi": {"connect": fcgi_responder.addr, "root": LAB,
                                     "check_script": False, "keep_conn": False}}]))
    c = client(srv)
    for _ in range(5):
        env(c)
        assert fpm.conns() == 0  # PHP-FPM closes it after END_REQUEST: nothing pooled
    assert len(fpm.access()) == 5
    for i in range(5):
        status, _, _, body = get(c, "/py/x")
        assert status == 200 and body == f"ok /py/x conn {i + 1}\n".encode(), body
    assert fcgi_responder.accepted == 5

    # The same responder with keep_conn on (the default): one connection.
    srv2 = server(fcgi_yaml([fpm.addr], routes=[
        {"path": "/py/", "fastcgi": {"connect": fcgi_responder.addr, "root": LAB,
                                     "check_script": False}}]))
    c2 = client(srv2)
    for _ in range(5):
        status, _, _, body = get(c2, "/py/y")
        assert status == 200 and body == b"ok /py/y conn 6\n", body
    assert fcgi_responder.accepted == 6


def test_unix_socket_with_connect_and_pooled(server, php_fpm):
    fpm = php_fpm(unix=True, children=3)
    cfg = json.dumps({"workers": 1, "sites": [{"listen": ["127.0.0.1:@PORT@"], "routes": [
        {"path": PHP_ROUTE, "fastcgi": {"connect": fpm.addr, "root": LAB}}]}]})
    srv = server(cfg.replace("{", "{{").replace("}", "}}").replace("@PORT@", "{port}"))
    c = client(srv)
    seen = [env(c) for _ in range(8)]
    assert len({s["pid"] for s in seen}) == 1
    assert seen[0]["server"]["SCRIPT_FILENAME"] == os.path.join(LAB, "env.php")
    assert len(fpm.access()) == 8


# ---- 1. groups: balancing, passive health ----------------------------------------------

def test_two_pools_balanced_and_one_down(server, php_fpm):
    a, b = php_fpm(name="a", children=2), php_fpm(name="b", children=2)
    srv = server(fcgi_yaml([a.addr, b.addr], upstream={"balance": "round_robin"}))
    c = client(srv)
    for _ in range(10):
        env(c)
    assert len(a.access()) == 5 and len(b.access()) == 5, (a.access(), b.access())

    b.stop()
    t0 = time.monotonic()
    for _ in range(10):
        s = env(c)  # a refused connect goes to the next server: still 200
        assert s["server"]["SCRIPT_NAME"] == "/env.php"
    assert time.monotonic() - t0 < 5
    assert len(a.access()) == 15
    assert "connect() failed" in srv.log() and b.addr in srv.log()


# ---- 1. request bodies as STDIN -------------------------------------------------------------

def rss_kib(pid) -> int:
    # RssAnon: the process's own memory; the code an attack runs for the first
    # time since the worker dropped its start-up's pages (forkmem.py) is the page cache's
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


def test_large_post_streamed_and_chunked_post_held(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], top={"limits": {"max_body_bytes": 128 * MIB}}))
    (worker,) = srv.workers()
    c = client(srv, timeout=30)
    env(c)
    rss0 = rss_kib(worker)
    data = os.urandom(40 * MIB + 12345)
    status, _, _, body = get(c, "/md5.php", "POST", data,
                             {"Content-Type": "application/octet-stream"})
    assert status == 200
    assert body.decode().split() == [hashlib.md5(data).hexdigest(), str(len(data)),
                                     str(len(data))]
    # Streamed as it came: the worker did not hold the 40 MiB.
    grown = rss_kib(worker) - rss0
    assert grown < 16 * 1024, f"worker RSS grew by {grown} KiB for a 40 MiB body"

    pieces = [os.urandom(100_000) for _ in range(30)]
    status, _, _, body = get(c, "/md5.php", "POST", iter(pieces),
                             {"Transfer-Encoding": "chunked",
                              "Content-Type": "application/octet-stream"}, chunked=True)
    whole = b"".join(pieces)
    assert status == 200
    # Held whole, then sent with its CONTENT_LENGTH (PHP reads exactly that).
    assert body.decode().split() == [hashlib.md5(whole).hexdigest(), str(len(whole)),
                                     str(len(whole))]
    # Small ones that come with the head, and empty ones.
    for framing, data in ((b"Transfer-Encoding: chunked", b"5\r\nhello\r\n0\r\n\r\n"),
                          (b"Transfer-Encoding: chunked", b"0\r\n\r\n"),
                          (b"Content-Length: 0", b"")):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(b"POST /md5.php HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n\r\n" + data)
        status, _, body, _ = read_response(s)
        s.close()
        sent = b"hello" if data.startswith(b"5") else b""
        assert (status, body.decode().split()) == (
            200, [hashlib.md5(sent).hexdigest(), str(len(sent)), str(len(sent))]), framing


# ---- 1. responses with backpressure -----------------------------------------------------------

def big_expected(mib) -> str:
    block = bytes(i % 251 for i in range(65536))
    h = hashlib.sha256()
    for _ in range(mib * 16):
        h.update(block)
    return h.hexdigest()


def test_large_response_to_a_slow_reader_in_bounded_memory(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr]))
    (worker,) = srv.workers()
    c = client(srv)
    env(c)
    rss0 = rss_kib(worker)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.sendall(b"GET /big.php?mib=24 HTTP/1.1\r\nHost: x\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"transfer-encoding: chunked" in head.lower(), head
    raw = bytearray(rest)
    peak = 0
    # A slow reader: 64 KiB every 10 ms for the first 4 MiB (PHP writes far
    # faster), then the rest at full speed.
    while len(raw) < 4 * MIB:
        b = s.recv(65536)
        assert b
        raw += b
        time.sleep(0.01)
        peak = max(peak, rss_kib(worker) - rss0)
    while not raw.endswith(b"\r\n0\r\n\r\n"):
        b = s.recv(1 << 20)
        assert b, "connection closed before the last chunk"
        raw += b
    s.close()
    body = dechunk(bytes(raw))
    assert len(body) == 24 * MIB
    assert hashlib.sha256(body).hexdigest() == big_expected(24)
    assert peak < 8 * 1024, f"worker RSS grew by {peak} KiB while the client was slow"
    assert env(c)["pid"]  # the connection went back to the pool after it


def dechunk(data: bytes) -> bytes:
    out, i = [], 0
    while True:
        j = data.index(b"\r\n", i)
        n = int(data[i:j].split(b";")[0], 16)
        if n == 0:
            return b"".join(out)
        out.append(data[j + 2:j + 2 + n])
        i = j + 2 + n + 2


# ---- 1. STDERR, Status, Location ---------------------------------------------------------------

def test_stderr_lines_go_to_the_error_log_with_the_request_id(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr]))
    c = client(srv)
    status, _, headers, body = get(c, "/stderr.php?tag=t42")
    assert status == 200 and body == b"logged\n"
    rid = headers["x-request-id"]
    srv.wait_log("second line from php")
    # PHP-FPM sends a request's messages as one STDERR record, joined by "; "
    # and without a line break: one line, written when the request ends.
    lines = [l for l in srv.log().splitlines() if "FastCGI sent in stderr" in l]
    assert len(lines) == 1, lines
    assert ('"PHP message: first line from php t42; PHP message: second line from php"'
            in lines[0]), lines
    assert f"request id: {rid}" in lines[0] and "[error]" in lines[0]
    assert '"GET /stderr.php?tag=t42"' in lines[0] and fpm.addr in lines[0]


def test_status_and_location_per_rfc3875(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr]))
    c = client(srv)
    status, _, headers, body = get(c, "/status.php?code=404")
    assert (status, body) == (404, b"status page\n")
    assert "status" not in headers
    status, reason, _, body = get(c, "/status.php?teapot=1")
    assert (status, reason, body) == (418, "I'm a teapot", b"status page\n")
    status, _, headers, _ = get(c, "/status.php?to=http://x/")
    assert status == 302 and headers["location"] == "http://x/"
    status, _, headers, _ = get(c, "/status.php?code=301&to=http://y/a")
    assert status == 301 and headers["location"] == "http://y/a"


def test_php_cannot_send_an_interim_answer(server, php_fpm):
    """FastCGI carries one CGI response (RFC 3875 §6): PHP's
    http_response_code(103) makes `Status: 103` its final status, which no
    answer may have; it is refused (502), never an early hint followed by
    the page, nor a 103 with a body."""
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr]))
    c = client(srv)
    status, _, _, body = get(c, "/status.php?code=103")
    assert status == 502 and b"status page" not in body, (status, body)
    assert "upstream sent an invalid FastCGI response" in srv.log()


def test_local_redirect_is_routed_again(server, php_fpm, fcgi_responder):
    fpm = php_fpm(children=1)
    srv = server(fcgi_yaml([fpm.addr], routes=[
        {"path": "/redirect-local", "fastcgi": {"connect": fcgi_responder.addr, "root": LAB,
                                                "check_script": False}}]))
    c = client(srv)
    status, _, headers, body = get(c, "/redirect-local")
    assert (status, body) == (200, b"other file\n")
    assert "location" not in headers
    # The responder's connection went back to its pool: the next one reuses it.
    status, _, _, body = get(c, "/redirect-local")
    assert (status, body) == (200, b"other file\n")
    assert fcgi_responder.accepted == 1 and fcgi_responder.requests == 2


def test_local_redirect_to_a_respond_route(server, fcgi_responder):
    """The dispatcher answers a local redirect on a respond route (fastcgi.c
    reaches it through the hook it registered, e->fx.local_answer)."""
    srv = server(fcgi_yaml(["127.0.0.1:9"], routes=[
        {"path": "= /other.txt", "respond": {"status": 200, "body": "from respond"}},
        {"path": "/redirect-local", "fastcgi": {"connect": fcgi_responder.addr, "root": LAB,
                                                "check_script": False}}]))
    c = client(srv)
    status, _, headers, body = get(c, "/redirect-local")
    assert (status, body) == (200, b"from respond")
    assert "location" not in headers


# ---- 1. malformed answers, timeouts, PHP-FPM down -------------------------------------------------

def responder_server(server, responder, **fastcgi):
    """A site whose every path goes to the Python responder (group `py`)."""
    cfg = json.dumps({"workers": 1, "upstreams": {"py": {"servers": [responder.addr],
                                                         "keepalive": 4}},
                      "sites": [{"listen": ["127.0.0.1:@PORT@"], "routes": [
                          {"path": "/", "fastcgi": {"upstream": "py", "root": LAB,
                                                    "check_script": False, **fastcgi}}]}]})
    return server(cfg.replace("{", "{{").replace("}", "}}").replace("@PORT@", "{port}"))


@pytest.mark.parametrize("bad", ["/bad-version", "/other-id", "/truncated", "/garbage"])
def test_bad_records_are_502_and_the_connection_is_dropped(server, fcgi_responder, bad):
    srv = responder_server(server, fcgi_responder, retries=0)
    c = client(srv)
    assert get(c, "/ok")[3] == b"ok /ok conn 1\n"
    status, _, _, body = get(c, bad)
    assert status == 502, (status, body)
    assert b"hello" not in body and b"xxxx" not in body
    assert "invalid FastCGI response" in srv.log() or "closed or reset" in srv.log()
    # Sent once: the pooled connection that answered part of it and broke
    # was not taken for a stale one (fixed: it was, and the request went out
    # again whatever `retries` said).
    assert fcgi_responder.requests == 2
    # The next request works, on a new connection (the bad one was not pooled).
    assert get(c, "/ok")[3] == b"ok /ok conn 2\n"
    assert get(c, "/ok")[3] == b"ok /ok conn 2\n"
    assert fcgi_responder.accepted == 2


def test_a_post_is_never_sent_twice(server, fcgi_responder):
    srv = responder_server(server, fcgi_responder, retries=3)
    c = client(srv)
    assert get(c, "/ok")[0] == 200
    # The application closes the pooled connection without a word: it may
    # have run the POST, so it is not sent again (fixed: a reset of a
    # reused connection was retried for every method).
    status, _, _, _ = get(c, "/close-silently", "POST", b"a=1",
                          {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 502
    assert fcgi_responder.requests == 2
    # A GET there is sent again, on a new connection, even with retries 0
    # (a stale pooled connection is no attempt); that one closes too: 502.
    srv2 = responder_server(server, fcgi_responder, retries=0)
    c2 = client(srv2)
    assert get(c2, "/ok")[0] == 200
    assert get(c2, "/close-silently")[0] == 502
    assert fcgi_responder.requests == 2 + 3


def test_a_response_cut_mid_body_is_cut_for_the_client(server, fcgi_responder):
    srv = responder_server(server, fcgi_responder)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    s.sendall(b"GET /truncated-body HTTP/1.1\r\nHost: x\r\n\r\n")
    data = recv_to_close(s)  # we close it: the client sees the truncation
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" in head.lower(), data[:300]
    assert b"x" * 100 in body and not body.endswith(b"0\r\n\r\n")
    assert "closed or reset" in srv.log()
    c = client(srv)
    assert get(c, "/ok")[3] == b"ok /ok conn 2\n"


def test_read_timeout_is_504_and_php_fpm_down_is_502_at_once(server, php_fpm, tmp_path):
    fpm = php_fpm(children=2)
    dead_port = socket.socket()
    dead_port.bind(("127.0.0.1", 0))  # bound, not listening: connections refused
    port = dead_port.getsockname()[1]
    # A listener whose backlog is full: connects to it hang (SYNs dropped).
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    fillers = []
    for _ in range(3):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(full.getsockname())
        fillers.append(f)
    srv = server(fcgi_yaml([fpm.addr], fastcgi={"read_timeout": "300ms"}, routes=[
        {"path": "/stalled/", "fastcgi": {"connect": "127.0.0.1:%d" % full.getsockname()[1],
                                          "root": LAB, "check_script": False,
                                          "connect_timeout": "300ms"}},
        {"path": "/down/", "fastcgi": {"connect": f"127.0.0.1:{port}", "root": LAB,
                                       "check_script": False}},
        {"path": "/down-unix/", "fastcgi": {"connect": f"unix:{tmp_path}/none.sock",
                                            "root": LAB, "check_script": False}}]))
    # (/down/x, not /down/x.php: the regex route would take a .php path.)
    c = client(srv)
    t0 = time.monotonic()
    status, _, _, _ = get(c, "/slow.php?ms=2000")
    took = time.monotonic() - t0
    assert status == 504 and 0.25 < took < 1.5, (status, took)
    assert "timed out while reading" in srv.log()
    c = client(srv)
    assert env(c)["pid"]  # the timed-out connection was not pooled
    for path in ("/down/x", "/down-unix/x"):
        t0 = time.monotonic()
        status, _, _, _ = get(c, path)
        assert status == 502 and time.monotonic() - t0 < 1, (path, status)
    # A connect timeout is a 504, also once the retry found no other server
    # (fixed: that said 502).
    t0 = time.monotonic()
    status, _, _, _ = get(c, "/stalled/x")
    assert status == 504 and time.monotonic() - t0 < 1.5, status
    assert "timed out while connecting" in srv.log()
    dead_port.close()
    full.close()
    for f in fillers:
        f.close()


# ---- 2. the parameters ------------------------------------------------------------------------

def test_cgi_parameters_as_php_sees_them(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], fastcgi={"params": {"APP_ENV": "testing",
                                                            "SERVER_SOFTWARE": "x"}}))
    c = client(srv)
    c.connect()
    local_port = c.sock.getsockname()[1]
    d = env(c, "/env.php/a/b%20c?x=1&y=%C3%A9", method="POST", body=b"k=v",
            headers={"Host": "site.test:8080", "Content-Type": "application/x-www-form-urlencoded",
                     "Proxy": "http://evil:1/", "X-Custom-Thing": "yes", "Accept": "a/b"})
    s = d["server"]
    assert s["SCRIPT_FILENAME"] == os.path.join(LAB, "env.php")
    assert s["SCRIPT_NAME"] == "/env.php"
    assert s["PATH_INFO"] == "/a/b c"
    assert s["PATH_TRANSLATED"] == LAB + "/a/b c"
    assert s["DOCUMENT_ROOT"] == LAB
    assert s["REQUEST_URI"] == "/env.php/a/b%20c?x=1&y=%C3%A9"
    assert s["QUERY_STRING"] == "x=1&y=%C3%A9" and d["get"] == {"x": "1", "y": "é"}
    assert s["REQUEST_METHOD"] == "POST"
    assert s["CONTENT_TYPE"] == "application/x-www-form-urlencoded"
    assert s["CONTENT_LENGTH"] == "3"
    assert s["SERVER_NAME"] == "site.test"
    assert s["SERVER_PORT"] == str(srv.port) and s["SERVER_ADDR"] == "127.0.0.1"
    assert s["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert s["GATEWAY_INTERFACE"] == "CGI/1.1"
    assert s["REMOTE_ADDR"] == "127.0.0.1" and s["REMOTE_PORT"] == str(local_port)
    assert s["HTTP_HOST"] == "site.test:8080"
    assert s["HTTP_X_CUSTOM_THING"] == "yes" and s["HTTP_ACCEPT"] == "a/b"
    assert "HTTP_PROXY" not in s  # httpoxy
    assert "HTTPS" not in s and s["REQUEST_SCHEME"] == "http"
    assert s["APP_ENV"] == "testing"
    assert s["SERVER_SOFTWARE"] == "x"  # the operator's params come last and win
    assert len(s["HTTP_X_REQUEST_ID"]) >= 16
    assert "HTTP_CONTENT_TYPE" not in s and "HTTP_CONTENT_LENGTH" not in s

    # HTTP/1.0, the index file for a folder, no PATH_INFO.
    s10 = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    s10.sendall(b"GET /env.php HTTP/1.0\r\nHost: h\r\n\r\n")
    st, _, body, _ = read_response(s10)
    s10.close()
    d10 = json.loads(body)["server"]
    assert st == 200 and d10["SERVER_PROTOCOL"] == "HTTP/1.0"
    assert d10["PATH_INFO"] == "" and d10["QUERY_STRING"] == ""
    assert "CONTENT_LENGTH" not in d10 or d10["CONTENT_LENGTH"] == ""


def test_server_addr_on_a_wildcard_listener_is_the_address_each_client_reached(server, php_fpm):
    """A listener bound to one address gives SERVER_ADDR without asking the
    kernel; on 0.0.0.0 each connection's own local address is asked for, so
    two clients reaching two loopback addresses see their own."""
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], listen="0.0.0.0:@PORT@"))
    for addr in ("127.0.0.1", "127.0.0.3"):
        c = http.client.HTTPConnection(addr, srv.port, timeout=10)
        d = env(c)["server"]
        c.close()
        assert d["SERVER_ADDR"] == addr and d["SERVER_PORT"] == str(srv.port), d


def test_remote_addr_from_a_trusted_proxy(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr]))
    xff = {"X-Forwarded-For": "198.51.100.9, 203.0.113.7"}
    s = socket.create_connection(("127.0.0.1", srv.port), source_address=(TRUSTED, 0))
    s.sendall(b"GET /env.php HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 198.51.100.9, "
              b"203.0.113.7\r\n\r\n")
    st, _, body, _ = read_response(s)
    s.close()
    d = json.loads(body)["server"]
    assert d["REMOTE_ADDR"] == "203.0.113.7"
    assert "REMOTE_PORT" not in d  # not the forwarded client's
    # From an untrusted peer the header is not believed.
    d = env(client(srv), headers=xff)["server"]
    assert d["REMOTE_ADDR"] == "127.0.0.1" and d["REMOTE_PORT"]


def test_https_on_on_a_tls_listener(server, php_fpm, tmp_path):
    from tests.tlspki import PKI
    pki = PKI(tmp_path / "pki")
    ca = pki.root()
    leaf = pki.leaf(ca, ["localhost"], key="ec", name="leaf")
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], listen="127.0.0.1:@PORT@ tls",
                           site={"tls": {"cert": leaf.cert_path, "key": leaf.key_path}}))
    ctx = ssl.create_default_context(cafile=ca.cert_path)
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", srv.port), timeout=10),
                        server_hostname="localhost")
    s.sendall(b"GET /env.php?q=1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
    st, _, body, _ = read_response(s)
    s.close()
    d = json.loads(body)["server"]
    assert st == 200
    assert d["HTTPS"] == "on" and d["REQUEST_SCHEME"] == "https"
    assert d["SERVER_PORT"] == str(srv.port) and d["SERVER_NAME"] == "localhost"


def test_missing_script_is_our_404_and_never_reaches_php(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr]))
    c = client(srv)
    env(c)
    # (/other.txt/x.php: the cgi.fix_pathinfo attack, a non-PHP file run as
    # a script through PATH_INFO; the script checked is the whole path.)
    for path in ("/nope.php", "/nope.php/x/y", "/sub/nope.php?a=1", "/other.txt.php",
                 "/other.txt/x.php", "/other.txt/x.php/y"):
        status, _, _, _ = get(c, path)
        assert status == 404, path
    env(c)
    # Only the two env.php requests reached PHP-FPM.
    assert [l.split()[:3] for l in fpm.access()] == [["GET", "/env.php", "200"]] * 2


def test_request_uri_is_the_original_after_try_files(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], static={"try_files": ["$uri", "$uri/", "/env.php?$args"]}))
    c = client(srv)
    s = env(c, "/pretty/path/?z=1&w=%20")["server"]
    assert s["REQUEST_URI"] == "/pretty/path/?z=1&w=%20"
    assert s["SCRIPT_NAME"] == "/env.php"
    assert s["SCRIPT_FILENAME"] == os.path.join(LAB, "env.php")
    assert s["QUERY_STRING"] == "z=1&w=%20"
    assert s["REQUEST_METHOD"] == "GET"
    # A file that is there is served by static, not PHP.
    status, _, _, body = get(c, "/other.txt")
    assert (status, body) == (200, b"other file\n")
    assert len(fpm.access()) == 1


# ---- more of the exchange: HEAD, local redirects to PHP, odd records, a client gone ------------

def test_head_answer_has_no_false_length_and_the_connection_is_kept(server, php_fpm):
    fpm = php_fpm(children=4)
    srv = server(fcgi_yaml([fpm.addr]))
    c = client(srv)
    pid = env(c)["pid"]
    status, _, headers, body = get(c, "/env.php", "HEAD")
    assert status == 200 and body == b""
    # PHP sends no body to a HEAD: the length a GET would have is unknown,
    # so none is claimed (fixed: it said Content-Length: 0).
    assert "content-length" not in headers, headers
    assert headers["content-type"] == "application/json"
    assert env(c)["pid"] == pid and fpm.conns() == 1


def test_local_redirect_to_the_php_route_keeps_the_clients_request_uri(server, php_fpm,
                                                                       fcgi_responder):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], routes=[
        {"path": "/redirect-php", "fastcgi": {"connect": fcgi_responder.addr, "root": LAB,
                                              "check_script": False}}]))
    c = client(srv)
    for method, body in (("GET", None), ("POST", b"a=1")):
        d = env(c, "/redirect-php?orig=1", method=method, body=body,
                headers={"Content-Type": "application/x-www-form-urlencoded"} if body else {})
        s = d["server"]
        assert s["REQUEST_URI"] == "/redirect-php?orig=1"
        assert (s["SCRIPT_NAME"], s["QUERY_STRING"], d["get"]) == ("/env.php", "from=py",
                                                                   {"from": "py"})
        assert s["REQUEST_METHOD"] == "GET"  # RFC 3875 §6.2.2: the new request is a GET
        assert s.get("CONTENT_LENGTH", "") == ""
    assert fcgi_responder.accepted == 1 and fpm.conns() == 1
    assert [l.split()[:2] for l in fpm.access()] == [["GET", "/redirect-php?orig=1"]] * 2


def test_odd_but_valid_records_and_application_errors(server, fcgi_responder):
    srv = responder_server(server, fcgi_responder)
    c = client(srv)
    # A head one byte per record and per read, STDERR records between.
    status, reason, headers, body = get(c, "/byte-by-byte")
    assert (status, reason, headers["x-a"], body) == (203, "Partial", "1", b"body")
    srv.wait_log('FastCGI sent in stderr: "e29"')
    # FCGI_OVERLOADED is 503, END_REQUEST without a head 502.
    assert get(c, "/overloaded")[0] == 503
    assert get(c, "/no-stdout")[0] == 502
    # A long STDERR line is cut, so that the line keeps its request id
    # even with a long target (fixed: a 1024-byte cut filled elog's whole
    # line, and the upstream and request id were lost); breaks split lines.
    status, _, headers, body = get(c, "/long-stderr?pad=" + "p" * 3000)
    assert (status, body) == (200, b"fine")
    srv.wait_log('FastCGI sent in stderr: "b"')
    lines = [l for l in srv.log().splitlines() if "/long-stderr" in l]
    assert len(lines) == 3, lines
    assert f'"{"L" * 480}", upstream: fastcgi://{fcgi_responder.addr}' in lines[0]
    assert all(l.endswith(f"request id: {headers['x-request-id']}") for l in lines), lines
    assert 'FastCGI sent in stderr: "a"' in lines[1]


def test_client_gone_mid_response_frees_the_connection(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr]))
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(b"GET /big.php?mib=64 HTTP/1.1\r\nHost: x\r\n\r\n")
    got = 0
    while got < 2 * MIB:
        b = s.recv(65536)
        assert b
        got += len(b)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()  # a reset, mid-body
    c = client(srv)
    for _ in range(3):
        assert env(c)["pid"]
    # The abandoned exchange's connection was closed, not pooled: one left.
    deadline = time.monotonic() + 5
    while fpm.conns() != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fpm.conns() == 1


def test_php_fpm_restart_drops_the_pooled_connection(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr]))
    c = client(srv)
    for _ in range(3):
        env(c)
    fpm.stop()
    fpm.start()  # the pooled connection is closed under us
    status, _, _, body = get(c, "/md5.php", "POST", b"abc")
    assert (status, body) == (200, hashlib.md5(b"abc").hexdigest().encode() + b" 3 3\n")
    env(c)
    assert fpm.conns() == 1


def test_a_body_to_a_missing_script_is_read_past(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], top={"limits": {"max_body_bytes": 1 * MIB}}))
    c = client(srv)
    # A body for a script that is not there: our 404, the body read and
    # dropped, the client's connection still good.
    status, _, _, _ = get(c, "/nope.php", "POST", os.urandom(512 * 1024),
                          {"Content-Type": "application/octet-stream"})
    assert status == 404
    assert env(c)["pid"]
    assert [l.split()[1] for l in fpm.access()] == ["/env.php"]


def test_response_headers_pass_through(server, php_fpm):
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], fastcgi={"headers": {"response": {
        "remove": ["X-Powered-By"], "set": {"X-Frame-Options": "DENY"}}}}))
    c = client(srv)
    c.request("GET", "/cookies.php")
    r = c.getresponse()
    assert r.read() == b"cookies\n" and r.status == 200
    assert r.msg.get_all("Set-Cookie") == ["a=1", "b=2; path=/x; HttpOnly"]
    assert r.getheader("X-Long") == "v" * 5000
    assert r.getheader("X-Powered-By") is None and r.getheader("X-Frame-Options") == "DENY"
    assert r.getheader("Server") == "scalws"


def test_concurrent_clients_share_the_pool(server, php_fpm):
    from concurrent.futures import ThreadPoolExecutor
    # PHP-FPM gives a child to each open connection until it closes: idle
    # pooled connections hold children. keepalive < children is the sizing
    # operations.md asks for; test_pool_larger_than_the_children covers the
    # other case.
    fpm = php_fpm(children=4)
    srv = server(fcgi_yaml([fpm.addr], upstream={"keepalive": 3}))
    expected = big_expected(1)

    def one_client(i):
        c = client(srv, timeout=20)
        for j in range(6):
            if (i + j) % 3 == 0:
                status, _, _, body = get(c, "/big.php?mib=1")
                assert status == 200 and hashlib.sha256(body).hexdigest() == expected
            elif (i + j) % 3 == 1:
                data = os.urandom(200_000 + i)
                status, _, _, body = get(c, "/md5.php", "POST", data)
                assert body.split()[0].decode() == hashlib.md5(data).hexdigest()
            else:
                assert env(c, f"/env.php?c={i}&r={j}")["get"] == {"c": str(i), "r": str(j)}
        return True

    with ThreadPoolExecutor(10) as pool:
        assert all(pool.map(one_client, range(10)))
    assert len(fpm.access()) == 60
    # At most `keepalive` idle connections are kept once the burst is over.
    assert fpm.conns() <= 3


def test_chunked_body_over_max_body_bytes_is_413(server, php_fpm):
    # A chunked body's length shows only as it arrives: once it passes
    # max_body_bytes the client gets 413 (not a reset), the connection
    # ends, and PHP never saw the request (it is held whole for
    # CONTENT_LENGTH). A Content-Length over the limit is refused before
    # any of it is read.
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], top={"limits": {"max_body_bytes": 64 * 1024}}))

    def pieces():
        for _ in range(40):
            yield os.urandom(4096)

    c = client(srv)
    c.request("POST", "/md5.php", body=pieces(), encode_chunked=True)
    r = c.getresponse()
    assert r.status == 413
    assert r.getheader("Connection") == "close"
    r.read()
    c.close()
    c = client(srv)
    status, _, _, _ = get(c, "/md5.php", "POST", os.urandom(65 * 1024))
    assert status == 413
    c = client(srv)
    data = os.urandom(60 * 1024)
    status, _, _, body = get(c, "/md5.php", "POST", iter([data]), chunked=True)
    assert status == 200 and body.split()[0].decode() == hashlib.md5(data).hexdigest()
    assert [l.split()[1] for l in fpm.access()] == ["/md5.php"]
