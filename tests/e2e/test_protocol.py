"""HTTP/1.1 framing over raw sockets: malformed and smuggling-shaped requests,
pipelining, bodies kept in sync, Expect, limits and timeouts."""
import os
import select
import subprocess
import socket
import threading
import time

import pytest

from tests.e2e.conftest import raw, read_response, statuses

CONF = """
workers: 1
limits: {{max_header_bytes: 4k, max_uri_bytes: 1k, max_headers: 20, max_body_bytes: 1000,
          header_timeout: {header_timeout}, keepalive_timeout: {keepalive_timeout}}}
sites:
  - listen: ["127.0.0.1:{port}"]
    routes:
      - {{path: /, respond: {{status: 200, body: "ok\\n"}}}}
      - {{path: "= /two", respond: {{status: 200, body: "two\\n"}}}}
"""


@pytest.fixture
def srv(server):
    return server(CONF, header_timeout="2s", keepalive_timeout="3s")


def refused(port, req: bytes, status: int):
    """The request gets `status`, `Connection: close`, and then a clean close."""
    data = raw(port, req)
    assert statuses(data) == [status], data[:300]
    head = data.split(b"\r\n\r\n", 1)[0]
    assert b"\r\nConnection: close" in head
    return data


BAD = [
    # (name, request, status)
    ("cl-and-te", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("duplicate-cl", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400),
    ("differing-cl", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400),
    ("cl-list", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc", 400),
    ("cl-not-digits", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc", 400),
    ("cl-hex", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x3\r\n\r\nabc", 400),
    ("cl-overflow", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400),
    ("te-gzip", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    ("te-chunked-not-last", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400),
    ("te-chunked-twice", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    ("te-in-http10", b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("obs-fold", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", 400),
    ("bare-cr", b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", 400),
    ("space-before-colon", b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400),
    ("bad-method-char", b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    ("nul-in-value", b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", 400),
    ("no-host-11", b"GET / HTTP/1.1\r\nX: a\r\n\r\n", 400),
    ("two-hosts", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ("bad-host", b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
    ("two-spaces", b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    ("garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
    ("http2-line", b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
    ("http3-line", b"GET / HTTP/3.0\r\nHost: a\r\n\r\n", 505),
    ("expect-other", b"GET / HTTP/1.1\r\nHost: a\r\nExpect: teapot\r\n\r\n", 417),
    ("body-too-large", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1001\r\n\r\n", 413),
    ("long-uri", b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414),
    ("long-uri-unfinished", b"GET /" + b"a" * 8000, 414),
    ("big-headers", b"GET / HTTP/1.1\r\nHost: a\r\n" + b"X-Big: " + b"b" * 5000 + b"\r\n\r\n", 431),
    ("connect", b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 501),
    ("authority-form-get", b"GET example.com:80 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    ("asterisk-not-options", b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    ("too-many-headers", b"GET / HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(30)) + b"\r\n", 431),
]


@pytest.mark.parametrize("name,req,status", BAD, ids=[b[0] for b in BAD])
def test_refused_and_closed(srv, name, req, status):
    refused(srv.port, req, status)


def test_413_is_sent_before_the_body(srv):
    # The client declares a body over the limit and sends none of it: the
    # answer must come anyway (RFC 9110 §15.5.14).
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n")
        status, headers, body, _ = read_response(s)
        assert status == 413 and headers["connection"] == "close"


def test_smuggling_attempt_answers_only_the_first(srv):
    # A second request hidden in a body whose length the two headers disagree
    # on must never be answered.
    data = raw(srv.port, b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 44\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                         b"GET /two HTTP/1.1\r\nHost: a\r\n\r\n")
    assert statuses(data) == [400] and b"two\n" not in data


def test_pipelined_requests_answered_in_order(srv):
    reqs = b"".join(b"GET %s HTTP/1.1\r\nHost: a\r\n\r\n" % p for p in (b"/", b"/two", b"/", b"/two"))
    data = raw(srv.port, reqs + b"GET /two HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert statuses(data) == [200] * 5
    bodies = [part.rsplit(b"\r\n\r\n", 1)[1][:4] for part in data.split(b"HTTP/1.1 ")[1:]]
    assert bodies == [b"ok\n", b"two\n", b"ok\n", b"two\n", b"two\n"]


def test_pipelined_1000_in_one_send(srv):
    reqs = b"GET /two HTTP/1.1\r\nHost: a\r\n\r\n" * 999 + \
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    data = raw(srv.port, reqs, timeout=10)
    assert statuses(data) == [200] * 1000 and data.endswith(b"ok\n")


def test_pipelined_past_the_read_buffer_with_nothing_after(srv):
    # 3,000 requests sent at once (96 KB) fill the worker's read buffer
    # (max_header_bytes + 64 KiB) more than once, and no byte comes after
    # them (no close, no FIN) to bring another event: every one is answered.
    # (An edge-triggered wait that did not come back for what a full read
    # left in the socket would stall here: branch wip/http1-et, issue 36's
    # report.)
    n = 3000
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"GET /two HTTP/1.1\r\nHost: a\r\n\r\n" * n)
        got, data = 0, b""
        while got < n:
            chunk = s.recv(1 << 20)
            assert chunk, f"closed after {got} answers"
            data += chunk
            got = data.count(b"HTTP/1.1 200")
        assert got == n and data.endswith(b"two\n")


def test_pipelined_batch_is_answered_in_one_write(srv):
    # DESIGN.md's hot-path rule, seen from the system calls: eight requests
    # that arrive in one segment get their eight answers in one sendmsg.
    (worker,) = srv.workers()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")  # accepted before tracing
        status, _, _, rest = read_response(s)
        assert status == 200 and rest == b""
        trace = subprocess.Popen(["strace", "-qq", "-p", str(worker), "-e", "signal=none",
                                  "-e", "trace=sendmsg,sendto,write,writev"],
                                 stderr=subprocess.PIPE)
        out = trace.stderr.fileno()
        os.set_blocking(out, False)

        def traced() -> str:
            got = b""
            while select.select([out], [], [], 0.05)[0]:
                try:
                    b = os.read(out, 65536)
                except BlockingIOError:
                    break
                if not b:
                    break
                got += b
            return got.decode(errors="replace")

        try:
            # strace is attached once it reports the worker's answer to a
            # request on a side connection.
            seen = ""
            deadline = time.monotonic() + 10
            while "sendmsg(" not in seen:
                assert time.monotonic() < deadline, f"strace did not attach: {seen!r}"
                raw(srv.port, b"GET /two HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                seen += traced()
            s.sendall(b"GET /two HTTP/1.1\r\nHost: a\r\n\r\n" * 8)
            data = b""
            while data.count(b"two\n") < 8:
                data += s.recv(65536)
            assert statuses(data) == [200] * 8
            after = traced()
        finally:
            trace.terminate()
            trace.wait()
    writes = [ln for ln in after.splitlines() if ln.startswith(("sendmsg(", "sendto(", "write("))]
    # one write, and it carried all eight answers
    assert len(writes) == 1 and writes[0].endswith(f"= {len(data)}"), after


@pytest.mark.parametrize("split", [1, 7, 50])
def test_pipelined_byte_trickle(srv, split):
    reqs = (b"POST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nTrailer: x\r\n\r\n"
            b"GET /two HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(reqs), split):
            s.sendall(reqs[i:i + split])
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    assert statuses(data) == [200, 200, 200]
    assert data.endswith(b"two\n")


def test_bodies_are_discarded_and_keepalive_stays_in_sync(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"POST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n")
        status, _, body, rest = read_response(s)
        assert (status, body) == (200, b"two\n")
        s.sendall(b"0123456789GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        status, _, body, rest = read_response(s, rest)
        assert (status, body) == (200, b"ok\n")
        # A body that looks like a request is data, not a request.
        s.sendall(b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 30\r\n\r\n"
                  b"GET /two HTTP/1.1\r\nHost: a\r\n\r\n")
        status, _, body, rest = read_response(s, rest)
        assert (status, body, rest) == (200, b"ok\n", b"")  # one answer, for the PUT
        s.sendall(b"GET /two HTTP/1.1\r\nHost: a\r\n\r\n")
        status, _, body, rest = read_response(s, rest)
        assert (status, body) == (200, b"two\n")
        s.settimeout(0.3)
        with pytest.raises(socket.timeout):
            s.recv(100)  # nothing more was answered


def test_bad_chunked_body_is_400(srv):
    # The body that came with the head is read past before the answer (as
    # nginx discards it): its broken framing is a 400, and nothing after it
    # is answered. (Every route kind, and TLS: test_framing.py.)
    refused(srv.port, b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"zz\r\nabc\r\n0\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n", 400)


def test_bad_chunked_body_after_the_answer_closes(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        status, headers, body, rest = read_response(s)
        assert (status, body, rest) == (200, b"ok\n", b"") and "connection" not in headers
        # The answer went out with the sound part; the framing breaks
        # afterwards: the connection ends, and /two is not answered.
        s.sendall(b"zz\r\n0\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n")
        assert s.recv(100) == b""


def test_chunked_body_over_limit(srv):
    body = b"".join(b"100\r\n" + b"x" * 256 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n"
    head = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    # Over max_body_bytes (1k here) in what came with the head: 413.
    refused(srv.port, head + body + b"GET /two HTTP/1.1\r\nHost: a\r\n\r\n", 413)
    # Passing it only later: answered from the head; the body, dropped as it
    # comes, passes the limit and the connection closes: /two is not answered.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(head + body[:200])
        status, _, resp_body, rest = read_response(s)
        assert (status, resp_body) == (200, b"ok\n")
        s.sendall(body[200:] + b"GET /two HTTP/1.1\r\nHost: a\r\n\r\n")
        assert rest + s.recv(100) == b""


def test_expect_100_continue(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"POST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(4096)
        assert buf.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(b"body")
        status, _, body, rest = read_response(s, buf[len(b"HTTP/1.1 100 Continue\r\n\r\n"):])
        assert (status, body) == (200, b"two\n")
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        assert read_response(s, rest)[:1] == (200,)
    # No body announced: no 100.
    data = raw(srv.port, b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n")
    assert b"100 Continue" not in data and statuses(data) == [200]


def test_leading_empty_lines_and_bare_lf(srv):
    data = raw(srv.port, b"\r\n\r\nGET /two HTTP/1.1\nHost: a\nConnection: close\n\n")
    assert statuses(data) == [200] and data.endswith(b"two\n")


def test_half_close_after_request_still_answered(srv):
    data = raw(srv.port, b"GET /two HTTP/1.1\r\nHost: a\r\n\r\n", shut=True)
    assert statuses(data) == [200] and data.endswith(b"two\n")


def test_slowloris_gets_408_and_worker_stays_responsive(srv):
    result = {}

    def slow():
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            start = time.monotonic()
            data = b""
            for ch in b"GET / HTTP/1.1\r\nHost: a\r\nX-Slow: " + b"y" * 100:
                try:
                    s.sendall(bytes([ch]))
                except (BrokenPipeError, ConnectionResetError):
                    break
                s.settimeout(1.0)  # one byte per second, reading what comes back
                try:
                    b = s.recv(4096)
                except socket.timeout:
                    continue
                except ConnectionResetError:
                    break
                data += b
                if not b or b"\r\n\r\n" in data:
                    break
            s.settimeout(5)
            try:
                while True:
                    b = s.recv(4096)
                    if not b:
                        break
                    data += b
            except (ConnectionResetError, socket.timeout):
                pass
            result["data"] = data
            result["elapsed"] = time.monotonic() - start

    t = threading.Thread(target=slow)
    t.start()
    # While the slow client dribbles, others are served without delay.
    worst = 0.0
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        assert statuses(raw(srv.port, b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")) == [200]
        worst = max(worst, time.monotonic() - t0)
    t.join(15)
    assert worst < 0.5
    assert statuses(result["data"]) == [408]
    assert 1.5 <= result["elapsed"] <= 5.0  # header_timeout is 2s, checked 4x a second


def test_timeouts_fire_while_the_worker_never_goes_quiet(srv):
    """Under continuous load the engine keeps waiting on its own epoll
    (sws_engine_serve, ADR 0003); it must still hand back to uvloop often
    enough for the tick: a stalled head gets its 408 on time."""
    import http.client
    stop = threading.Event()
    served = [0, 0]

    def hammer(i):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        while not stop.is_set():
            c.request("GET", "/two")
            r = c.getresponse()
            assert r.status == 200 and r.read() == b"two\n"
            served[i] += 1
        c.close()

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=8) as s:
            t0 = time.monotonic()
            s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n")  # and nothing more
            status = read_response(s)[0]
            elapsed = time.monotonic() - t0
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert status == 408
    assert 1.5 <= elapsed <= 3.5, elapsed  # header_timeout is 2s
    assert min(served) > 100  # the load really ran alongside


def test_idle_connection_without_request_is_closed_silently(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=6) as s:
        t0 = time.monotonic()
        assert s.recv(100) == b""  # no 408 for a connection that never spoke
        assert 1.5 <= time.monotonic() - t0 <= 4.0


def test_keepalive_timeout_closes_idle_connection(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=8) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        _, _, _, rest = read_response(s)
        t0 = time.monotonic()
        assert s.recv(100) == b""
        assert 2.5 <= time.monotonic() - t0 <= 5.0  # keepalive_timeout 3s


def test_keepalive_requests_limit(server):
    srv = server("""
        limits: {{keepalive_requests: 3}}
        sites:
          - listen: "127.0.0.1:{port}"
            routes: [{{path: /, respond: 200}}]
    """)
    data = raw(srv.port, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" * 5)
    assert statuses(data) == [200, 200, 200]
    assert data.count(b"Connection: close") == 1


def test_keepalive_off(server):
    srv = server("""
        limits: {{keepalive_timeout: 0}}
        sites:
          - listen: "127.0.0.1:{port}"
            routes: [{{path: /, respond: 200}}]
    """)
    data = raw(srv.port, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" * 2)
    assert statuses(data) == [200] and b"Connection: close" in data


def test_large_response_to_slow_reader(server):
    # A body bigger than the socket buffer goes out over many writable events.
    srv = server("""
        sites:
          - listen: "127.0.0.1:{port}"
            routes: [{{path: /, respond: {{status: 200, body: "{body}"}}}}]
    """, body="x" * 3_000_000)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        # A small receive window makes the server's writev stop short many times.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" * 2)
        status, _, body, rest = read_response(s)
        assert status == 200 and body == b"x" * 3_000_000
        status, _, body, rest = read_response(s, rest)
        assert status == 200 and len(body) == 3_000_000


def test_options_asterisk_is_routed(srv):
    # "*" is a valid target for OPTIONS (RFC 9112 §3.2.4); no route matches it.
    data = raw(srv.port, b"OPTIONS * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert statuses(data) == [404]


def test_head_refused_has_no_body(srv):
    data = raw(srv.port, b"HEAD /" + b"a" * 2000 + b" HTTP/1.1\r\nHost: a\r\n\r\n")
    assert statuses(data) == [414]
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Content-Length: " in head and body == b""


def test_no_100_continue_when_the_body_will_not_be_read(srv):
    # Connection: close means the body would be discarded: do not invite it.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n"
                  b"Expect: 100-continue\r\nConnection: close\r\n\r\n")
        status, headers, body, rest = read_response(s)
        assert status == 200 and headers["connection"] == "close"


def test_send_timeout_disconnects_a_client_that_stops_reading(server):
    srv = server("""
        limits: {{send_timeout: 1s}}
        sites:
          - listen: "127.0.0.1:{port}"
            routes: [{{path: /, respond: {{status: 200, body: "{body}"}}}}]
    """, body="x" * 8_000_000)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        time.sleep(3)  # the client reads nothing for 3 send_timeouts (the behaviour under test)
        got = 0
        try:
            while True:
                b = s.recv(1 << 20)
                if not b:
                    break
                got += len(b)
        except ConnectionResetError:
            pass
        # What the kernel had buffered arrives, then the close: never the whole body.
        assert 0 < got < 8_000_000
