"""The reverse proxy when upstreams fail: refused, reset, stalled, slow,
malformed and cut answers; retries (idempotent methods only), passive and
active health, and the error log naming the upstream that failed.

Helpers come from proxylib.py, the `proxy_server` fixture from
conftest.py; the upstreams from tests/e2e/upstreams (upstream_app,
raw_upstream, fault_proxy).
"""
from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import socket
import time
import urllib.request

import pytest

from tests.e2e.conftest import raw, read_response, statuses
from tests.e2e.proxylib import (
    MIB, Client, ids, parse_answer, post_while_reading, raw_exchange, request,
    wait_until)
from tests.e2e.upstreams import pattern_sha256
from tests.e2e.upstreams.fixtures import free_port
from tests.e2e.upstreams.raw import RAW_MARKER, VALID_BODIES

pytestmark = pytest.mark.timeout(60)


def dead_addr() -> str:
    """An address on which nothing listens: connects are refused."""
    return f"127.0.0.1:{free_port()}"


def assert_logged(srv, text, timeout=5.0):
    """The error log (the fixture's scalwsd output) names `text` within `timeout`."""
    srv.wait_log(text, timeout=timeout)


# ---- refused connections and retries ---------------------------------------------------

def test_refused_server_is_skipped_for_the_next_one(proxy_server, upstream_app):
    dead = dead_addr()
    a = upstream_app("a")
    srv = proxy_server([dead, a], proxy={"retries": 1})
    for i in range(20):
        r = request(srv.port, "/id")
        assert (r.status, r.text) == (200, "a"), f"request {i}: {r}"
    assert_logged(srv, dead)


@pytest.mark.parametrize("retries", [0, 1])
def test_refused_and_nothing_else_is_502(proxy_server, retries):
    dead = dead_addr()
    srv = proxy_server([dead], proxy={"retries": retries})
    r = request(srv.port, "/id")
    assert r.status == 502, r
    assert_logged(srv, dead)


def test_no_retry_with_retries_0(proxy_server, upstream_app):
    dead = dead_addr()
    a = upstream_app("a")
    srv = proxy_server([{"address": dead, "max_fails": 0}, {"address": a, "max_fails": 0}],
                       proxy={"retries": 0})
    got = [request(srv.port, "/id").status for _ in range(10)]
    assert 502 in got, f"with retries: 0 a request that picks the dead server is a 502: {got}"
    assert 200 in got, got
    assert set(got) == {200, 502}


@pytest.mark.parametrize("retries", [0, 1])
def test_a_pooled_connection_closed_as_it_is_reused_is_retried(proxy_server, raw_upstream,
                                                                retries):
    """One server: raw.py's /once-per-conn answers the first request on a
    connection, keeps it open (no Connection: close), and closes it when the
    next request comes on it: a server closing an idle connection just as the
    proxy reuses it. That close says nothing about the server: a GET is
    retried on a fresh connection, without counting against `retries`.
    Guards a bug where the failed reuse marked the only server as tried and
    the request got a 502 ("no live upstreams")."""
    srv = proxy_server([raw_upstream], proxy={"retries": retries})
    with Client(srv.port) as c:
        for i in range(4):
            r = c.get("/once-per-conn")
            # Request i > 0 reuses connection i (the pooled one) and is retried
            # on connection i + 1.
            assert (r.status, r.text) == (200, f"conn {i + 1}"), f"request {i}: {r}"
    assert "no live upstreams" not in srv.log(), srv.log()


# ---- timeouts and stalls ----------------------------------------------------------------------

def test_read_timeout_is_504_and_closes_the_upstream_connection(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], proxy={"read_timeout": "1s", "retries": 0})
    t0 = time.monotonic()
    r = request(srv.port, "/sleep?s=3")
    took = time.monotonic() - t0
    assert r.status == 504, r
    assert 0.8 <= took < 2.5, f"504 after {took:.2f}s with read_timeout: 1s"
    # Closed by the proxy, before the upstream's 3 s are up.
    a.wait_conns("active", lambda n: n == 0, timeout=1.5,
                 what="(a timed-out upstream connection must be closed)")
    assert_logged(srv, a.addr)


def test_stalled_upstream_is_504_after_read_timeout(proxy_server, upstream_app, fault_proxy):
    a = upstream_app("a")
    fp = fault_proxy(a, mode="stall")
    srv = proxy_server([fp], proxy={"read_timeout": "1s", "retries": 0})
    t0 = time.monotonic()
    r = request(srv.port, "/id")
    took = time.monotonic() - t0
    assert r.status == 504, r
    assert 0.8 <= took < 2.5, f"504 after {took:.2f}s with read_timeout: 1s"
    assert fp.connections == 1
    assert_logged(srv, fp.addr)


def test_send_timeout_is_504_when_the_upstream_takes_no_body(proxy_server, upstream_app,
                                                             fault_proxy):
    a = upstream_app("a")
    fp = fault_proxy(a, mode="deaf")  # accepts, never reads
    srv = proxy_server([fp], proxy={"send_timeout": "1s", "read_timeout": "30s", "retries": 0},
                       top={"limits": {"max_body_bytes": "64m"}})
    size = 50 * MIB  # far more than the socket buffers on the way hold
    t0 = time.monotonic()
    got, sent = post_while_reading(srv.port, "/upload", size, timeout=15)
    took = time.monotonic() - t0
    answer = parse_answer(got)
    assert answer is not None and answer[0] == 504, \
        f"no answer began and the upstream took nothing for 1 s: want a 504, got {got[:300]!r}"
    assert sent < size, "the whole body went: the upstream did read"
    assert 0.8 <= took < 4.0, f"504 after {took:.2f}s with send_timeout: 1s"
    assert fp.connections == 1, "a send timeout is not retried"
    assert_logged(srv, fp.addr)


@contextlib.contextmanager
def blackhole():
    """Yields a port on 127.0.0.1 where a connect never completes: a listener
    that never accepts, its queue filled, so further SYNs are dropped and a
    connect hangs until connect_timeout."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    port = lsock.getsockname()[1]
    fillers = []
    try:
        while True:
            s = socket.socket()
            s.settimeout(0.3)
            try:
                s.connect(("127.0.0.1", port))
            except (socket.timeout, BlockingIOError):
                s.close()
                break
            fillers.append(s)
            assert len(fillers) < 50, "the listen queue never filled"
        yield port
    finally:
        for s in fillers:
            s.close()
        lsock.close()


def test_connect_timeout(proxy_server):
    with blackhole() as port:
        srv = proxy_server([port], proxy={"connect_timeout": "1s", "retries": 0})
        t0 = time.monotonic()
        r = request(srv.port, "/id")
        took = time.monotonic() - t0
        assert r.status in (502, 504), r  # nginx answers 504 here
        assert 0.8 <= took < 2.5, f"answered after {took:.2f}s with connect_timeout: 1s"
        assert_logged(srv, f"127.0.0.1:{port}")


def test_connect_timeout_is_retried_on_the_next_server(proxy_server, upstream_app):
    """A connect that times out is a connect failure: retried on the next
    server (any method: nothing was sent) and logged "while connecting".
    Guards a bug where the timeout's kind was read after it had been reset,
    so every connect timeout counted as a read timeout: not retried (a 504)
    and logged "timed out while reading the response"."""
    a = upstream_app("a")
    with blackhole() as port:
        srv = proxy_server([{"address": f"127.0.0.1:{port}", "max_fails": 0}, a],
                           proxy={"connect_timeout": "1s", "retries": 1})
        # Round robin: one of each two requests tries the blackhole first.
        for i in range(2):
            r = request(srv.port, "/id")
            assert (r.status, r.text) == (200, "a"), f"request {i}: {r}"
        assert_logged(srv, f"upstream timed out while connecting, upstream: 127.0.0.1:{port}")
        assert "while reading" not in srv.log(), srv.log()


def test_a_client_slow_to_read_is_not_a_read_timeout(proxy_server, upstream_app):
    """read_timeout bounds waiting for the upstream, not for the client: while
    the client does not read, the proxy stops reading the upstream and no
    timeout runs. A client that pauses 3 s (read_timeout: 1s) still gets the
    whole 4 MiB. Guards a bug where the read deadline set before the pause
    stayed armed: the answer was cut after read_timeout."""
    a = upstream_app("a")
    srv = proxy_server([a], proxy={"read_timeout": "1s", "retries": 0})
    size = 4 * MIB
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the proxy backs up soon
    s.settimeout(10)
    with s:
        s.connect(("127.0.0.1", srv.port))
        s.sendall(f"GET /download?size={size} HTTP/1.1\r\nHost: a\r\n\r\n".encode())
        time.sleep(3)  # the client pauses on purpose: longer than read_timeout
        status, headers, body, _ = read_response(s)
    assert status == 200, (status, headers)
    assert len(body) == size and hashlib.sha256(body).hexdigest() == pattern_sha256(size), \
        f"{len(body)} of {size} bytes, or not the pattern"
    assert "timed out" not in srv.log(), srv.log()


def test_a_client_pausing_its_upload_is_not_a_send_timeout(proxy_server, upstream_app):
    """send_timeout bounds the upstream taking the body, not the client
    sending it. The upstream waits 0.6 s before reading (the proxy's writes
    back up, so the send timeout runs and is then met); then the client
    pauses 2.5 s mid-upload with send_timeout: 1s: the request completes.
    Guards a bug where the send deadline from before the pause stayed armed
    (and fired as a "read" timeout): a 504."""
    a = upstream_app("a")
    srv = proxy_server([a], proxy={"send_timeout": "1s", "read_timeout": "30s", "retries": 0},
                       top={"limits": {"max_body_bytes": "64m"}})
    size, first = 8 * MIB, 6 * MIB
    body = b"x" * size
    with socket.create_connection(("127.0.0.1", srv.port), timeout=15) as s:
        s.sendall(f"POST /upload?delay=0.6 HTTP/1.1\r\nHost: a\r\n"
                  f"Content-Length: {size}\r\n\r\n".encode())
        s.sendall(body[:first])  # fast at first: more than the buffers on the way hold
        time.sleep(2.5)  # the client pauses on purpose: longer than send_timeout
        try:
            s.sendall(body[first:])
        except OSError as e:  # the answer (a 504) may already have closed it
            sent_error = e
        else:
            sent_error = None
        status, headers, got, _ = read_response(s)
    assert status == 200, f"{status} {got[:200]!r} (sending the rest: {sent_error})"
    assert json.loads(got) == {"len": size, "sha256": hashlib.sha256(body).hexdigest()}
    assert "timed out" not in srv.log(), srv.log()


# ---- resets --------------------------------------------------------------------------------

def test_reset_at_connect_is_502(proxy_server, upstream_app, fault_proxy):
    a = upstream_app("a")
    fp = fault_proxy(a, mode="reset_on_connect")
    srv = proxy_server([fp], proxy={"retries": 0})
    assert request(srv.port, "/id").status == 502
    assert_logged(srv, fp.addr)


def test_upstream_reset_before_answering_is_502(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], proxy={"retries": 0})
    assert request(srv.port, "/reset").status == 502
    assert request(srv.port, "/id").text == "a", "the next request is served"


def reset_after_request_pair(proxy_server, upstream_app, fault_proxy):
    """Two servers, never marked down: a fault proxy that resets every
    connection once it has read a request head, and a good server b."""
    a, b = upstream_app("a"), upstream_app("b")
    fp = fault_proxy(a, mode="reset_after_request")
    srv = proxy_server([{"address": fp, "max_fails": 0}, {"address": b, "max_fails": 0}],
                       proxy={"retries": 1})
    return srv, fp, b


def test_post_is_not_retried(proxy_server, upstream_app, fault_proxy):
    srv, fp, b = reset_after_request_pair(proxy_server, upstream_app, fault_proxy)
    hit = 0
    for i in range(8):
        fp_before, b_before = fp.requests, b.conns()["requests"]
        r = request(srv.port, "/upload", method="POST", body=b"not twice")
        b_after = b.conns()["requests"]
        if fp.requests > fp_before:
            hit += 1
            assert r.status == 502, f"POST {i} was reset by the upstream: want 502, got {r}"
            assert fp.requests == fp_before + 1, "the POST was sent twice to the same server"
            assert b_after == b_before, "a POST must not be retried on another server"
        else:
            assert r.status == 200 and b_after == b_before + 1, r
    assert hit >= 2, f"round robin over 2 servers: only {hit} of 8 POSTs went to the faulty one"


def test_get_is_retried_on_the_next_server(proxy_server, upstream_app, fault_proxy):
    srv, fp, b = reset_after_request_pair(proxy_server, upstream_app, fault_proxy)
    for i in range(8):
        r = request(srv.port, "/id")
        assert (r.status, r.text) == (200, "b"), f"GET {i}: {r}"
    assert fp.requests >= 2, f"only {fp.requests} GETs tried the faulty server first"
    assert_logged(srv, fp.addr)


@pytest.mark.parametrize("after,expect", [(10, "502"), (200_000, "cut")],
                         ids=["in-the-head", "in-the-body"])
def test_reset_mid_response(proxy_server, upstream_app, fault_proxy, after, expect):
    a = upstream_app("a")
    fp = fault_proxy(a, mode=f"cut_response_after:{after}")
    srv = proxy_server([fp], proxy={"retries": 0})
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    c.request("GET", f"/download?size={MIB}")
    r = c.getresponse()
    if expect == "502":
        assert r.status == 502, "no byte of the answer was sent: a 502"
        r.read()
    else:
        assert r.status == 200
        with pytest.raises((http.client.IncompleteRead, ConnectionResetError)):
            body = r.read()
            pytest.fail(f"a cut answer looked complete to the client ({len(body)} bytes)")
    c.close()
    assert_logged(srv, fp.addr)


# ---- slow upstreams -------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["", "&chunked=1&piece=1000"], ids=["length", "chunked"])
def test_partial_writes_still_give_the_whole_body(proxy_server, upstream_app, fault_proxy, query):
    a = upstream_app("a")
    fp = fault_proxy(a, mode="slow:4096:0.002")
    srv = proxy_server([fp])
    r = request(srv.port, f"/download?size={MIB}{query}", timeout=30)
    assert r.status == 200 and len(r.body) == MIB
    assert hashlib.sha256(r.body).hexdigest() == pattern_sha256(MIB)


def test_trickled_chunks_are_passed_as_they_come(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /trickle?n=3&delay=1 HTTP/1.1\r\nHost: a\r\n\r\n")
        t0 = time.monotonic()
        got = b""
        while b"tick\n" not in got:
            b = s.recv(65536)
            assert b, "closed before the first tick"
            got += b
        # The first tick is sent at once, the next a second later: a proxy
        # that buffers the whole answer shows the first only after 2 s.
        assert time.monotonic() - t0 < 0.8, "the first chunk was held back"


# ---- malformed answers ------------------------------------------------------------------------

BAD_ANSWERS = ["/bad-cl", "/two-cl", "/cl-te", "/garbage", "/bad-chunk", "/big-head",
               "/early-close"]


@pytest.mark.parametrize("path", BAD_ANSWERS)
def test_malformed_answer_is_502_and_never_passed_on(proxy_server, raw_upstream, path):
    srv = proxy_server([raw_upstream], proxy={"retries": 0})
    data = raw(srv.port, f"GET {path} HTTP/1.1\r\nHost: a\r\n"
                          f"Connection: close\r\n\r\n".encode(), timeout=10)
    assert data.startswith(b"HTTP/1.1 502 "), f"{path}: {data[:300]!r}"
    assert statuses(data) == [502], f"{path}: one answer, a 502, and nothing else: {data[:400]!r}"
    assert RAW_MARKER not in data, f"{path}: the upstream's body reached the client"
    assert b"X-Big-" not in data
    assert_logged(srv, raw_upstream.addr)
    # The worker is fine afterwards.
    r = request(srv.port, "/http10")
    assert (r.status, r.body) == (200, VALID_BODIES["/http10"])


@pytest.mark.parametrize("path", ["/no-length", "/http10"])
def test_close_delimited_answers_are_passed_whole_and_chunked(proxy_server, raw_upstream, path):
    srv = proxy_server([raw_upstream])
    r = raw_exchange(srv.port, f"GET {path} HTTP/1.1\r\nHost: a\r\n\r\n".encode())
    assert (r.status, r.body) == (200, VALID_BODIES[path]), r
    assert r.header("Transfer-Encoding") == "chunked" or \
        r.header("Content-Length") == str(len(VALID_BODIES[path])), \
        f"an HTTP/1.1 client needs a framed body: {r.headers}"


def test_interim_answers_then_the_final_one(proxy_server, raw_upstream):
    srv = proxy_server([raw_upstream])
    data = raw(srv.port, b"GET /100-then-200 HTTP/1.1\r\nHost: a\r\n"
                          b"Connection: close\r\n\r\n", timeout=10)
    # Skip any 1xx passed on; then the final answer, whole.
    while data.startswith(b"HTTP/1.1 1"):
        data = data.split(b"\r\n\r\n", 1)[1]
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), data[:300]
    if b"transfer-encoding: chunked" in head.lower():
        size, _, rest = body.partition(b"\r\n")
        body = rest[:int(size, 16)]
    assert body == VALID_BODIES["/100-then-200"]


# ---- the upstream dies mid-body -----------------------------------------------------------------

def test_upstream_gone_mid_body_with_length(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    c.request("GET", "/cut?size=1000000&send=100000")
    r = c.getresponse()
    assert r.status == 200
    with pytest.raises(http.client.IncompleteRead):
        r.read()
    c.close()
    data = raw(srv.port, b"GET /cut?size=1000000&send=100000 HTTP/1.1\r\nHost: a\r\n\r\n",
               timeout=10)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert len(body) < 1_000_000, "a short body must not be made to look whole"
    if b"transfer-encoding: chunked" in head.lower():
        assert not body.endswith(b"0\r\n\r\n")
    assert_logged(srv, a.addr)


def test_upstream_gone_mid_chunked_body(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    data = raw(srv.port, b"GET /cut?chunked=1&send=100000 HTTP/1.1\r\nHost: a\r\n\r\n",
               timeout=10)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), data[:300]
    assert not body.endswith(b"0\r\n\r\n"), "no terminating chunk after a cut"
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    c.request("GET", "/cut?chunked=1&send=100000&rst=1")
    r = c.getresponse()
    with pytest.raises((http.client.IncompleteRead, ConnectionResetError)):
        r.read()
    c.close()


# ---- health ---------------------------------------------------------------------------------

def test_passive_health_skips_a_failed_server_for_fail_timeout(proxy_server, upstream_app,
                                                                 fault_proxy):
    a, b = upstream_app("a"), upstream_app("b")
    fp = fault_proxy(a, mode="reset_on_connect")
    srv = proxy_server([{"address": fp, "max_fails": 1, "fail_timeout": "2s"}, b],
                       proxy={"retries": 1})
    with Client(srv.port) as c:
        for _ in range(4):
            assert c.get("/id").text == "b"
            if fp.connections:
                break
        assert fp.connections == 1, "round robin never tried the faulty server"
        failed_at = time.monotonic()
        # Within fail_timeout it is not tried again.
        while time.monotonic() - failed_at < 1.5:
            assert c.get("/id").text == "b"
        assert fp.connections == 1, \
            f"the failed server was tried {fp.connections - 1} more times within fail_timeout"

        def tried_again():
            assert c.get("/id").text == "b"
            return fp.connections > 1
        wait_until(tried_again, 6.0, "the failed server to be tried after fail_timeout")
        assert time.monotonic() - failed_at >= 1.5
    assert_logged(srv, fp.addr)


@pytest.mark.timeout(90)
def test_active_health_takes_a_server_out_and_back(proxy_server, upstream_app):
    a, b = upstream_app("a"), upstream_app("b")
    srv = proxy_server([a, b], upstream={"health": {
        "path": "/healthz", "interval": "200ms", "timeout": "1s",
        "expect_status": "200-399", "rise": 1, "fall": 1}})
    assert set(ids(srv.port, 10)) == {"a", "b"}
    a.set_health(False)
    wait_until(lambda: set(ids(srv.port, 10)) == {"b"}, 5.0,
               "a server failing /healthz to be taken out")
    assert set(ids(srv.port, 20)) == {"b"}
    assert_logged(srv, a.addr)
    a.set_health(True)
    wait_until(lambda: "a" in ids(srv.port, 10), 5.0, "the server to be brought back")
    assert set(ids(srv.port, 10)) == {"a", "b"}


# ---- the client goes away ---------------------------------------------------------------------

def test_client_gone_while_waiting_closes_the_upstream_connection(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], proxy={"read_timeout": "10s"})
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(b"GET /sleep?s=5 HTTP/1.1\r\nHost: a\r\n\r\n")
    a.wait_conns("active", lambda n: n == 1, what="(the request to reach the upstream)")
    s.close()
    a.wait_conns("active", lambda n: n == 0, timeout=3.0,
                 what="(the proxy must close the upstream connection when its client leaves)")


@pytest.mark.timeout(60)
def test_many_clients_leaving_at_once_do_not_disturb_the_worker(proxy_server, upstream_app):
    """Clients and upstream answers in the same batch of events: wrk keeps 64
    requests in flight and then closes every connection at once, so a client
    close and its upstream's answer meet in one epoll batch (the worker must
    not touch a connection closed earlier in the batch; it once did, and
    aborted). The same worker keeps serving and every upstream connection
    of an aborted request is closed."""
    import subprocess
    a = upstream_app("a")
    srv = proxy_server([a], upstream={"keepalive": 64})
    workers = srv.workers()
    for _round in range(4):
        subprocess.run(["wrk", "-t1", "-c64", "-d1s", f"http://127.0.0.1:{srv.port}/id"],
                       check=True, capture_output=True, timeout=20)
    body = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/id", timeout=5).read()
    assert body == b"a"
    assert srv.workers() == workers, "a worker was restarted:\n" + srv.log()
    assert "signal" not in srv.log(), srv.log()
