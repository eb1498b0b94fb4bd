"""The reverse proxy end to end: real scalwsd in front of real upstreams
(tests/e2e/upstreams): the request head it rebuilds, paths, bodies of
100 MiB both ways in flat memory, upstream keep-alive, balancing, WebSocket
upgrades, Node.js and nginx upstreams.

Failures (refused, reset, stalled, malformed and cut upstreams, retries and
health) are in test_proxy_faults.py; the helpers both use (configs by
proxy_yaml(), clients, memory) are in proxylib.py.
"""
from __future__ import annotations

import email.utils
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.conftest import ROOT, read_response, recv_to_close
from tests.e2e.proxylib import (
    MIB, REQUEST_ID, TRUSTED, Client, RssWatch, echo_headers, ids, only_worker, parse_answer,
    post_while_reading, raw_exchange, request, wait_until, warm)
from tests.e2e.upstreams import pattern_sha256
from tests.e2e.upstreams.raw import RAW_MARKER, VALID_BODIES

pytestmark = pytest.mark.timeout(60)


# ---- the request head ----------------------------------------------------------

def test_hop_by_hop_request_headers_are_removed(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    r = raw_exchange(srv.port, (
        b"GET /echo HTTP/1.1\r\n"
        b"Host: front.test\r\n"
        b"Connection: keep-alive, X-Listed-In-Connection\r\n"
        b"X-Listed-In-Connection: secret\r\n"
        b"Keep-Alive: timeout=5\r\n"
        b"TE: trailers\r\n"
        b"Trailer: X-Checksum\r\n"
        b"Upgrade: h2c\r\n"
        b"Proxy-Authorization: Basic Zm9vOmJhcg==\r\n"
        b"Proxy-Connection: keep-alive\r\n"
        b"Proxy-Foo: 1\r\n"
        b"X-Kept: yes\r\n"
        b"User-Agent: test/1\r\n"
        b"\r\n"))
    h = echo_headers(r.json())
    for name in ("x-listed-in-connection", "keep-alive", "te", "trailer", "upgrade",
                 "proxy-authorization", "proxy-connection", "proxy-foo"):
        assert name not in h, f"hop-by-hop {name} reached the upstream: {h[name]}"
    for value in h.get("connection", []):
        tokens = {t.strip().lower() for t in value.split(",")}
        assert tokens <= {"keep-alive", "close"}, f"the client's Connection leaked: {value!r}"
    assert h["x-kept"] == ["yes"] and h["user-agent"] == ["test/1"]


def test_x_forwarded_from_an_untrusted_client(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    r = request(srv.port, "/echo", headers={
        "Host": "front.test:8080", "X-Forwarded-For": "1.2.3.4",
        "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.test"})
    h = echo_headers(r.json())
    assert h["x-forwarded-for"] == ["127.0.0.1"], \
        "an untrusted client's X-Forwarded-For must be dropped: XFF = the client only"
    assert h["x-forwarded-proto"] == ["http"]
    assert h["x-forwarded-host"] == ["front.test:8080"], "X-Forwarded-Host = the client's Host"
    assert h["host"] == ["front.test:8080"], "Host upstream = the client's Host by default"


def test_x_forwarded_for_from_a_trusted_proxy_is_appended_to(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    r = request(srv.port, "/echo", source=TRUSTED,
                headers={"Host": "front.test", "X-Forwarded-For": "1.2.3.4, 10.0.0.1"})
    assert echo_headers(r.json())["x-forwarded-for"] == ["1.2.3.4, 10.0.0.1, 127.0.0.2"]
    r = request(srv.port, "/echo", source=TRUSTED)
    assert echo_headers(r.json())["x-forwarded-for"] == ["127.0.0.2"]
    # The same header from 127.0.0.1 (not in trusted_proxies) is not believed.
    r = request(srv.port, "/echo", headers={"X-Forwarded-For": "1.2.3.4"})
    assert echo_headers(r.json())["x-forwarded-for"] == ["127.0.0.1"]


def access_records(path, n, timeout=5.0) -> list[dict]:
    def enough():
        try:
            with open(path) as f:
                recs = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return None
        return recs if len(recs) >= n else None
    return wait_until(enough, timeout, f"{n} lines in {path}")


def test_request_id_generated_returned_and_logged(proxy_server, upstream_app, tmp_path):
    a = upstream_app("a")
    log = tmp_path / "access.json"
    srv = proxy_server([a], top={"log": {"access": str(log), "format": "json", "flush": "100ms"}})
    seen = []
    for headers in ({}, {"X-Request-Id": "from-an-untrusted-client"}):
        r = request(srv.port, "/echo", headers=headers)
        upstream_ids = echo_headers(r.json()).get("x-request-id", [])
        assert len(upstream_ids) == 1, f"upstream got X-Request-Id {upstream_ids}"
        rid = upstream_ids[0]
        assert REQUEST_ID.fullmatch(rid), f"generated id {rid!r}: 16+ hex digits expected"
        assert rid != "from-an-untrusted-client"
        assert r.header("X-Request-Id") == rid, "the client gets the id the upstream got"
        seen.append(rid)
    assert seen[0] != seen[1]
    recs = access_records(log, 2)
    assert [rec["request_id"] for rec in recs[-2:]] == seen


def test_request_id_from_a_trusted_proxy_is_kept_when_sane(proxy_server, upstream_app, tmp_path):
    a = upstream_app("a")
    log = tmp_path / "access.json"
    srv = proxy_server([a], top={"log": {"access": str(log), "format": "json", "flush": "100ms"}})
    sane = ["abc-DEF_123.x", "a", "Z" * 64]
    insane = ["has space", "semi;colon", "a" * 65, "quote\"d", "caf\xe9"]
    got = []
    for rid in sane + insane:
        r = request(srv.port, "/echo", source=TRUSTED, headers={"X-Request-Id": rid})
        upstream = echo_headers(r.json()).get("x-request-id", [])
        assert len(upstream) == 1, upstream
        if rid in sane:
            assert upstream[0] == rid, f"a trusted proxy's sane id {rid!r} must pass"
        else:
            assert upstream[0] != rid and REQUEST_ID.fullmatch(upstream[0]), \
                f"an insane id {rid!r} must be replaced by a generated one, got {upstream[0]!r}"
        assert r.header("X-Request-Id") == upstream[0]
        got.append(upstream[0])
    recs = access_records(log, len(got))
    assert [rec["request_id"] for rec in recs[-len(got):]] == got


def test_host_is_the_clients_unless_proxy_host(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], routes=[
        {"path": "/keep/", "proxy": {"upstream": "app", "strip_prefix": "/keep"}},
        {"path": "/set/", "proxy": {"upstream": "app", "strip_prefix": "/set",
                                    "host": "example.com"}}])
    h = echo_headers(request(srv.port, "/keep/echo", headers={"Host": "front.test"}).json())
    assert h["host"] == ["front.test"]
    h = echo_headers(request(srv.port, "/set/echo", headers={"Host": "front.test"}).json())
    assert h["host"] == ["example.com"]
    assert h["x-forwarded-host"] == ["front.test"], "X-Forwarded-Host stays the client's"


def test_upstream_date_and_server_are_replaced(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    r = request(srv.port, "/headers?set=Server:upstream-x"
                          "&set=Date:Thu,%2001%20Jan%201970%2000:00:00%20GMT")
    assert r.status == 200 and r.body == b"headers"
    assert r.header("Server") == "scalws", r.headers
    date = email.utils.parsedate_to_datetime(r.header("Date")).timestamp()
    assert abs(date - time.time()) < 60, f"the upstream's Date leaked: {r.header('Date')}"


def test_hop_by_hop_response_headers_are_stripped(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    r = request(srv.port, "/headers?set=Connection:x-custom&set=X-Custom:1"
                          "&set=Keep-Alive:timeout=5&set=Proxy-Foo:1&set=Trailer:X-T"
                          "&set=Upgrade:foo&set=X-Kept:yes")
    assert r.status == 200 and r.body == b"headers"
    for name in ("X-Custom", "Keep-Alive", "Proxy-Foo", "Trailer", "Upgrade"):
        assert r.all(name) == [], f"{name} reached the client: {r.headers}"
    for value in r.all("Connection"):
        assert "x-custom" not in value.lower(), f"upstream's Connection leaked: {value!r}"
    assert r.header("X-Kept") == "yes"


def test_headers_set_and_remove_both_ways(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], proxy={"headers": {
        "request": {"set": {"X-A": "1"}, "remove": ["X-B"]},
        "response": {"set": {"X-C": "2"}, "remove": ["X-Powered-By"]}}})
    r = request(srv.port, "/echo", headers={"X-A": "0", "X-B": "gone", "X-Other": "o"})
    h = echo_headers(r.json())
    assert h["x-a"] == ["1"], "request set replaces the client's value"
    assert "x-b" not in h
    assert h["x-other"] == ["o"]
    assert r.header("X-C") == "2"
    r = request(srv.port, "/headers?set=X-C:9&set=X-Powered-By:php&set=X-Other:o")
    assert r.all("X-C") == ["2"], "response set replaces the upstream's value"
    assert r.all("X-Powered-By") == []
    assert r.header("X-Other") == "o"


def test_paths_strip_prefix_url_prefix_and_query(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], default_route=False, routes=[
        {"path": "/api/", "proxy": {"upstream": "app", "strip_prefix": "/api"}},
        {"path": "/u/", "proxy": {"url": f"http://{a.addr}/echo/v1/", "strip_prefix": "/u/"}},
        {"path": "/", "proxy": {"upstream": "app"}}])
    cases = [
        ("/api/echo/x?q=1&r=%20&s=a%2Fb", "/echo/x?q=1&r=%20&s=a%2Fb"),
        ("/api/echo", "/echo"),
        ("/u/x/y?z=1", "/echo/v1/x/y?z=1"),
        ("/u/", "/echo/v1/"),
        ("/echo/plain?k=v", "/echo/plain?k=v"),
    ]
    for client_path, upstream_path in cases:
        j = request(srv.port, client_path).json()
        assert j["path"] == upstream_path, f"{client_path} -> {j['path']}, want {upstream_path}"


def test_methods_statuses_and_small_bodies_pass_through(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    with Client(srv.port) as c:
        for method, body in (("POST", b"hello"), ("PUT", os.urandom(100_000)),
                             ("DELETE", b""), ("PATCH", b"{}")):
            j = c.request("/echo", method=method, body=body).json()
            assert (j["method"], j["body_len"]) == (method, len(body))
            assert j["body_sha256"] == hashlib.sha256(body).hexdigest()
        j = c.request("/echo", method="POST", body=iter([b"ab", b"cde"]), encode_chunked=True).json()
        assert (j["body_len"], j["body_sha256"]) == (5, hashlib.sha256(b"abcde").hexdigest())
        r = c.request("/echo", method="HEAD")
        assert r.status == 200 and r.body == b""
        for code, body in ((204, b""), (304, b""), (404, b"status 404\n"),
                           (500, b"status 500\n"), (503, b"status 503\n")):
            r = c.request(f"/status/{code}")
            assert (r.status, r.body) == (code, body), r


def test_unix_socket_upstream(proxy_server, upstream_app):
    u = upstream_app("u", unix=True)
    srv = proxy_server([u])
    j = request(srv.port, "/echo?x=1").json()
    assert (j["name"], j["path"]) == ("u", "/echo?x=1")
    assert request(srv.port, "/download?size=3000000").body == \
        u.get("/download?size=3000000")[2]


# ---- bodies --------------------------------------------------------------------

SIZE_100M = 100 * MIB
RSS_LIMIT_KIB = 40 * 1024


def body_pieces(block, count):
    for _ in range(count):
        yield block


@pytest.mark.timeout(120)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_upload_100mib_in_flat_memory(proxy_server, upstream_app, framing):
    a = upstream_app("a")
    srv = proxy_server([a], top={"limits": {"max_body_bytes": "1g"}})
    worker = only_worker(srv)
    warm(srv.port)
    block = os.urandom(MIB)
    expect = hashlib.sha256()
    for _ in range(100):
        expect.update(block)
    headers = {"Content-Length": str(SIZE_100M)} if framing == "content-length" else {}
    with RssWatch(worker) as w:
        r = request(srv.port, "/upload", method="POST", headers=headers, timeout=60,
                    body=body_pieces(block, 100), encode_chunked=framing == "chunked")
    j = r.json()
    assert j["len"] == SIZE_100M and j["sha256"] == expect.hexdigest()
    assert w.grown_kib < RSS_LIMIT_KIB, f"worker RSS grew {w.grown_kib} KiB during the upload"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("query", ["", "&chunked=1"], ids=["content-length", "chunked"])
def test_download_100mib_in_flat_memory(proxy_server, upstream_app, query):
    a = upstream_app("a")
    srv = proxy_server([a])
    worker = only_worker(srv)
    warm(srv.port)
    with RssWatch(worker) as w, Client(srv.port, timeout=60) as c:
        c.conn.request("GET", f"/download?size={SIZE_100M}{query}")
        r = c.conn.getresponse()
        assert r.status == 200
        h, n = hashlib.sha256(), 0
        while chunk := r.read(MIB):
            h.update(chunk)
            n += len(chunk)
    assert n == SIZE_100M, f"got {n} bytes"
    assert h.hexdigest() == pattern_sha256(SIZE_100M)
    assert w.grown_kib < RSS_LIMIT_KIB, f"worker RSS grew {w.grown_kib} KiB during the download"


@pytest.mark.timeout(120)
def test_a_client_that_stops_reading_costs_no_memory(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    worker = only_worker(srv)
    warm(srv.port)
    with Client(srv.port, timeout=60) as c:
        c.conn.request("GET", f"/download?size={SIZE_100M}")
        r = c.conn.getresponse()
        assert r.status == 200
        h = hashlib.sha256(r.read(64 * 1024))
        n = 64 * 1024
        # The client reads nothing for 2 s: a window in which an unthrottled
        # proxy would take all 100 MiB from the loopback upstream (< 1 s).
        with RssWatch(worker) as w:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 2.0:
                time.sleep(0.05)
        assert w.grown_kib < RSS_LIMIT_KIB, \
            f"worker RSS grew {w.grown_kib} KiB while its client did not read"
        # Then the client reads on and gets every byte.
        while chunk := r.read(MIB):
            h.update(chunk)
            n += len(chunk)
    assert n == SIZE_100M and h.hexdigest() == pattern_sha256(SIZE_100M)


# ---- keep-alive to upstreams ------------------------------------------------------

@pytest.mark.timeout(120)
def test_upstream_connections_are_reused(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], upstream={"keepalive": 32})

    def client(_):
        with Client(srv.port) as c:
            for _ in range(250):
                assert c.get("/echo").status == 200

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(client, range(4)))
    got = a.conns()
    assert got["requests"] == 1000, got
    assert got["connections"] <= 8, \
        f"1,000 requests over 4 client connections opened {got['connections']} upstream ones"


@pytest.mark.timeout(60)
def test_a_burst_wider_than_the_pool_reuses_its_connections(proxy_server, upstream_app):
    """More requests at once than `keepalive`: the extra connections live
    through the burst, so the next wave reuses them instead of connecting
    again (the waves of an HTTP/2 client's streams, ADR 0020), and close
    once idle for a second, down to `keepalive`."""
    a = upstream_app("a")
    srv = proxy_server([a], upstream={"keepalive": 2})
    wide = 12

    def wave(key):
        with ThreadPoolExecutor(wide) as pool:
            got = [pool.submit(request, srv.port, f"/hold/{key}") for _ in range(wide)]
            deadline = time.monotonic() + 10
            while json.loads(a.get(f"/held/{key}")[2])["held"] != wide:
                assert time.monotonic() < deadline, f"the upstream never held {wide} requests"
                time.sleep(0.02)
            assert a.release(key) == wide
            assert [r.result().status for r in got] == [200] * wide

    wave("w1")
    assert a.conns()["connections"] == wide
    wave("w2")
    assert a.conns()["connections"] == wide, "the second wave connected again"
    t0 = time.monotonic()
    a.wait_conns("active", lambda n: n <= 2, timeout=4.0,
                 what="(connections beyond keepalive: 2 close once idle for a second)")
    assert time.monotonic() - t0 >= 0.5, "the extra connections closed at once"
    assert a.conns()["active"] == 2, "keepalive: 2 connections stay pooled"


def test_keepalive_0_opens_a_connection_per_request(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], upstream={"keepalive": 0})
    with Client(srv.port) as c:
        seqs = [c.get("/echo").json()["conn_seq"] for _ in range(20)]
    assert len(set(seqs)) == 20, f"connections reused with keepalive: 0: {seqs}"
    a.wait_conns("active", lambda n: n == 0, what="(keepalive: 0 keeps none open)")
    assert a.conns()["connections"] == 20


@pytest.mark.timeout(120)
def test_keepalive_requests_bounds_each_connection(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], upstream={"keepalive_requests": 10})
    with Client(srv.port) as c:
        for _ in range(1000):
            assert c.get("/id").status == 200
    got = a.conns()
    assert got["requests"] == 1000
    assert 95 <= got["connections"] <= 110, \
        f"keepalive_requests: 10 over 1,000 requests: {got['connections']} connections (~100)"


def test_upstream_connection_close_is_not_reused(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a])
    with Client(srv.port) as c:
        for _ in range(3):
            r = c.get("/close")
            assert (r.status, r.body) == (200, b"bye")
            closed = r.header("X-Conn-Seq")
            nxt = c.get("/echo").json()["conn_seq"]
            assert str(nxt) != closed, "a connection the upstream closed was used again"


def test_keepalive_timeout_closes_idle_upstream_connections(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], upstream={"keepalive_timeout": "1s"})
    assert request(srv.port, "/id").text == "a"
    t0 = time.monotonic()
    assert a.conns()["active"] == 1, "the connection is kept for the next request"
    a.wait_conns("active", lambda n: n == 0, timeout=4.0,
                 what="(an idle pooled connection is closed after keepalive_timeout: 1s)")
    assert time.monotonic() - t0 >= 0.7, "closed long before keepalive_timeout"


@pytest.mark.parametrize("path", ["/trickle?n=100&delay=0.05", f"/download?size={SIZE_100M}"],
                         ids=["trickle", "download"])
def test_client_gone_mid_response_closes_the_upstream_connection(proxy_server, upstream_app, path):
    a = upstream_app("a")
    srv = proxy_server([a])
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: a\r\n\r\n".encode())
    got = b""
    while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < 4:
        b = s.recv(65536)
        assert b, "connection closed before the body began"
        got += b
    seq = re.search(rb"\r\nX-Conn-Seq: (\d+)\r\n", got.split(b"\r\n\r\n", 1)[0], re.I)
    assert seq, got[:500]
    assert a.conns()["active"] == 1
    s.close()
    t0 = time.monotonic()
    # The trickle would go on for 5 s and the download is throttled: only the
    # proxy closing the connection brings it down this soon.
    a.wait_conns("active", lambda n: n == 0, timeout=3.0,
                 what="(the proxy must close an upstream connection whose client left)")
    assert time.monotonic() - t0 < 3.0
    j = request(srv.port, "/echo").json()
    assert str(j["conn_seq"]) != seq.group(1).decode()


DEBUG_LOG = {"log": {"level": "debug"}}  # "upstream connection to ... not kept: <why>"


@pytest.mark.parametrize("keepalive_time", ["1s", None], ids=["1s", "default"])
def test_keepalive_time_bounds_an_upstream_connections_age(proxy_server, upstream_app,
                                                           keepalive_time):
    a = upstream_app("a")
    srv = proxy_server([a], upstream={"keepalive_time": keepalive_time} if keepalive_time else None,
                       top=DEBUG_LOG)
    uses = {}  # conn_seq -> monotonic times of the answers it carried
    with Client(srv.port) as c:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            j = c.get("/echo").json()
            uses.setdefault(j["conn_seq"], []).append(time.monotonic())
            time.sleep(0.1)  # spacing: the time passing is what is under test
    spans = {seq: round(t[-1] - t[0], 2) for seq, t in uses.items()}
    if keepalive_time is None:
        assert len(uses) == 1, f"without keepalive_time one connection serves 2.5 s: {spans}"
        return
    assert len(uses) >= 2, f"keepalive_time: 1s, requests over 2.5 s on one connection: {spans}"
    assert all(span < 1.6 for span in spans.values()), \
        f"a connection served requests for longer than keepalive_time (1 s) allows: {spans}"
    assert len(uses[min(uses)]) >= 3, f"a connection younger than 1 s is reused: {spans}"
    srv.wait_log("not kept: connection too old")
    a.wait_conns("active", lambda n: n <= 1, what="(the aged connections are closed)")


def test_reload_closes_pooled_upstream_connections_and_pools_none(proxy_server, upstream_app):
    a = upstream_app("a")
    srv = proxy_server([a], top=DEBUG_LOG)
    old = only_worker(srv)
    held = []
    try:
        # Two requests held in flight on the old worker, each on its own
        # upstream connection (B keeps the old worker alive to the end)...
        for n, key in enumerate(("b", "c"), 1):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(f"GET /hold/{key}?timeout=15 HTTP/1.1\r\nHost: a\r\n\r\n".encode())
            held.append(s)
            a.wait_conns("requests", lambda got, n=n: got == n, what=f"(/hold/{key} to arrive)")
        busy = set(a.open_seqs())
        assert len(busy) == 2, f"two held requests, two upstream connections: {busy}"
        # ... and one finished: its connection is back in the pool.
        r = request(srv.port, "/id")
        assert (r.status, r.text) == (200, "a"), r
        pooled = int(r.header("X-Conn-Seq"))
        assert pooled not in busy and set(a.open_seqs()) == busy | {pooled}, a.conns()

        srv.kill(signal.SIGHUP)
        srv.wait_log("reloaded")
        wait_until(lambda: pooled not in a.open_seqs(), 5.0,
                   "the old worker to close its pooled upstream connection when it stops")
        assert busy <= set(a.open_seqs()), "busy upstream connections finish their request"

        # C is answered now, while the old worker drains: its upstream
        # connection is closed after it instead of going back to a pool.
        assert a.release("c") == 1
        status, headers, body, _ = read_response(held[1])
        assert (status, body) == (200, b"released c"), (status, headers, body)
        assert headers.get("connection") == "close", f"a stopping worker keeps no client: {headers}"
        seq_c = int(headers["x-conn-seq"])
        wait_until(lambda: seq_c not in a.open_seqs(), 5.0,
                   "the stopping worker to close the upstream connection of its last answer")
        (seq_b,) = busy - {seq_c}
        assert seq_b in a.open_seqs(), "the old worker is still there (B in flight)"
        srv.wait_log("not kept: shutting down")

        # New connections reach the new worker, which pools as usual.
        with Client(srv.port) as c:
            seqs = set()
            for i in range(5):
                r = c.get("/echo")
                assert r.status == 200, f"request {i} after the reload: {r}"
                seqs.add(r.json()["conn_seq"])
        assert len(seqs) == 1 and not seqs & {pooled, seq_b, seq_c}, seqs
        assert [w for w in srv.workers() if w != old], "no new worker"

        assert a.release("b") == 1
        status, _, body, _ = read_response(held[0])
        assert (status, body) == (200, b"released b")
        wait_until(lambda: old not in srv.workers(), 10.0, "the old worker to exit")
        wait_until(lambda: seq_b not in a.open_seqs(), 5.0, "B's upstream connection to close")
    finally:
        a.release("b")
        a.release("c")
        for s in held:
            s.close()


def test_an_answer_before_the_whole_request_body_is_not_reused(proxy_server, upstream_app):
    """/status/N answers without reading the request body: the upstream
    connection still has body bytes owed to it and must not carry the next
    request (aiohttp would read that request as the rest of the body)."""
    a = upstream_app("a")
    srv = proxy_server([a], top={"limits": {"max_body_bytes": "64m"}, **DEBUG_LOG})
    size = 32 * MIB  # more than every socket buffer on the way can hold
    got, sent = post_while_reading(srv.port, "/status/413", size)
    answer = parse_answer(got)
    assert answer is not None, f"no whole answer: {got[:300]!r}"
    status, headers, body = answer
    assert (status, body) == (413, b"status 413\n"), answer
    assert sent < size, "the whole body was sent before the answer: nothing left unsent"
    early = int(headers["x-conn-seq"])
    srv.wait_log("not kept: request not fully sent")
    # aiohttp would wait 10 s for the rest of the body: only the proxy closes it this soon.
    wait_until(lambda: early not in a.open_seqs(), 3.0,
               "the proxy to close an upstream connection it did not send the whole body on")
    for i in range(3):
        r = request(srv.port, "/echo", method="POST", body=b"next")
        j = r.json()
        assert (j["body_len"], j["path"]) == (4, "/echo"), f"request {i} after: {j}"
        assert j["conn_seq"] != early, "the half-sent connection carried another request"


def test_an_answer_before_the_whole_request_body_ends_the_client_connection(proxy_server,
                                                                            upstream_app):
    """The upstream answers (/status/413) while the client is still sending
    its body: the rest of that body is never read, so the answer must say
    Connection: close and the connection must then be closed (kept open, the
    unread body would be parsed as the next request). Guards a bug where the
    answer carried no Connection: close although the proxy closed after it."""
    a = upstream_app("a")
    srv = proxy_server([a], top={"limits": {"max_body_bytes": "64m"}})
    size = 10 * MIB
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        # The head and the first 64 KiB, then nothing more: a slow upload.
        s.sendall(f"POST /status/413 HTTP/1.1\r\nHost: a\r\nContent-Length: {size}\r\n\r\n"
                  .encode() + b"x" * 65536)
        status, headers, body, rest = read_response(s)
        assert (status, body) == (413, b"status 413\n"), (status, headers, body)
        assert headers.get("connection", "").lower() == "close", \
            f"an answer before the whole body must end the connection: {headers}"
        s.settimeout(5)
        try:
            while b := s.recv(65536):
                rest += b
        except ConnectionResetError:
            pass
        assert not rest, f"bytes after the answer: {rest[:200]!r}"


def test_expect_100_continue_with_connection_close(proxy_server, upstream_app):
    """A proxied POST with `Expect: 100-continue` and `Connection: close`:
    the client waits for "100 Continue" before sending its body, so it must
    come (here within 2 s; curl waits 1 s), then the final answer. Guards a
    bug where the 100 was sent only on a keep-alive connection: the client
    waited out its own timeout."""
    a = upstream_app("a")
    srv = proxy_server([a])
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                  b"Expect: 100-continue\r\nConnection: close\r\n\r\n")
        s.settimeout(2)
        got = b""
        try:
            while b"\r\n\r\n" not in got:
                b = s.recv(65536)
                assert b, f"closed before 100 Continue: {got!r}"
                got += b
        except socket.timeout:
            pytest.fail(f"no 100 Continue within 2 s: {got!r}")
        assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), got[:200]
        s.settimeout(10)
        s.sendall(b"hello")
        got += recv_to_close(s)
    # Any further 1xx (the upstream's own 100) is skipped; then the final answer.
    data = got
    while data.startswith(b"HTTP/1.1 1"):
        data = data.split(b"\r\n\r\n", 1)[1]
    answer = parse_answer(data)
    assert answer is not None, f"no whole final answer: {got[:400]!r}"
    status, headers, body = answer
    assert status == 200, answer
    assert json.loads(body) == {"len": 5, "sha256": hashlib.sha256(b"hello").hexdigest()}


def test_bytes_after_the_response_are_dropped_and_the_connection_not_reused(proxy_server,
                                                                           raw_upstream):
    """raw.py's /extra answers "ok" (Content-Length: 2) followed by a whole
    second response, and keeps the connection open: reused, it would hand
    that response to the next request."""
    srv = proxy_server([raw_upstream], top=DEBUG_LOG)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /extra HTTP/1.1\r\nHost: a\r\n\r\n")
        status, headers, body, rest = read_response(s)
        assert (status, body) == (200, VALID_BODIES["/extra"]), (status, headers, body)
        assert headers.get("content-length") == "2", headers
        s.sendall(b"GET /conns HTTP/1.1\r\nHost: a\r\n\r\n")
        status, headers, body, rest = read_response(s, rest)
        assert RAW_MARKER not in body and not rest, \
            f"the bytes after the response reached the client: {body!r} {rest!r}"
        assert (status, json.loads(body)) == (200, {"connections": 2}), \
            f"the next request must go on a new upstream connection: {status} {body!r}"
    srv.wait_log("not kept: bytes after the response")


# ---- balancing -----------------------------------------------------------------------

def test_round_robin_follows_weights(proxy_server, upstream_app):
    a, b = upstream_app("a"), upstream_app("b")
    srv = proxy_server([a, {"address": b, "weight": 3}], upstream={"balance": "round_robin"})
    got = ids(srv.port, 400)
    na, nb = got.count("a"), got.count("b")
    assert na + nb == 400
    assert 90 <= na <= 110 and 290 <= nb <= 310, f"weights 1:3 over 400 requests gave {na}:{nb}"


def test_least_conn_avoids_the_busy_server(proxy_server, upstream_app):
    slow = upstream_app("slow", delay=1.0)
    fast = upstream_app("fast")
    srv = proxy_server([slow, fast], upstream={"balance": "least_conn"})

    def one(i):
        time.sleep(i * 0.05)  # a new request every 50 ms, while slow ones are in flight
        return request(srv.port, "/id", timeout=10).text

    with ThreadPoolExecutor(20) as pool:
        got = list(pool.map(one, range(20)))
    assert got.count("slow") + got.count("fast") == 20
    assert got.count("slow") <= 3, \
        f"least_conn sent {got.count('slow')} of 20 requests to the server busy for 1 s: {got}"


@pytest.mark.parametrize("hash_key", ["header:X-User", "uri", "client_addr"])
def test_hash_is_stable_per_key(proxy_server, upstream_app, hash_key):
    ups = [upstream_app(n) for n in ("a", "b", "c")]
    srv = proxy_server(ups, upstream={"balance": "hash", "hash_key": hash_key})

    def one(i):
        if hash_key == "uri":
            return request(srv.port, f"/id?user={i}").text
        if hash_key == "client_addr":  # all of 127/8 is local: 20 client addresses
            return request(srv.port, "/id", source=f"127.0.0.{10 + i}").text
        return request(srv.port, "/id", headers={"X-User": f"user-{i}"}).text

    chosen = {}
    for round_ in range(3):
        for i in range(20):
            name = one(i)
            assert chosen.setdefault(i, name) == name, \
                f"key {i} went to {chosen[i]}, then to {name} (round {round_})"
    used = set(chosen.values())
    assert len(used) >= 2, f"20 keys over 3 servers all hashed to {used}"


def test_backup_is_used_only_while_the_primary_is_down(proxy_server, upstream_app):
    a, b = upstream_app("a"), upstream_app("b")
    srv = proxy_server([{"address": a, "fail_timeout": "1s"}, {"address": b, "backup": True}],
                       proxy={"retries": 1})
    assert set(ids(srv.port, 20)) == {"a"}, "a backup served while the primary was up"
    a.stop()
    assert set(ids(srv.port, 10)) == {"b"}, "the backup must serve while the primary is down"
    a.start()  # the same port again
    wait_until(lambda: request(srv.port, "/id").text == "a", 5.0,
               "the primary to be used again after fail_timeout")
    assert set(ids(srv.port, 10)) == {"a"}


@pytest.mark.parametrize("max_connections", [1, 0])
def test_max_connections_sends_the_overflow_to_another_server(proxy_server, upstream_app,
                                                              max_connections):
    slow = upstream_app("slow", delay=1.5)  # every answer takes 1.5 s
    other = upstream_app("other")
    srv = proxy_server([{"address": slow, "max_connections": max_connections}, other])
    start = threading.Barrier(6)

    def one(_):
        start.wait(10)
        return request(srv.port, "/id", timeout=10)

    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(one, range(6)))
    assert all(r.status == 200 for r in got), got
    names = sorted(r.text for r in got)
    if max_connections:
        assert names.count("slow") == 1, \
            f"6 requests at once, max_connections: 1 on the slow server: {names}"
        assert slow.conns()["requests"] == 1
    else:
        assert names.count("slow") == 3, f"round robin without a limit: {names}"


@pytest.mark.parametrize("buffer_size,status", [("4k", 502), ("16k", 200)])
def test_a_response_head_bigger_than_buffer_size_is_502(proxy_server, upstream_app,
                                                        buffer_size, status):
    a = upstream_app("a")
    srv = proxy_server([a], proxy={"buffer_size": buffer_size, "retries": 0})
    big = "v" * 6144  # a 6 KiB header: the head is bigger than 4k, smaller than 16k
    r = request(srv.port, f"/headers?set=X-Big:{big}")
    assert r.status == status, f"a 6 KiB response head with buffer_size: {buffer_size}: {r}"
    if status == 200:
        assert (r.header("X-Big"), r.body) == (big, b"headers")
    else:
        assert r.header("X-Big") is None and b"headers" not in r.body, r
        srv.wait_log(a.addr)
    r = request(srv.port, "/id")
    assert (r.status, r.text) == (200, "a"), f"the next request: {r}"


# ---- upgrades ------------------------------------------------------------------------

def test_websocket_echo_through_the_proxy(proxy_server, upstream_app):
    from websockets.sync.client import connect
    a = upstream_app("a")
    srv = proxy_server([a])
    with connect(f"ws://127.0.0.1:{srv.port}/ws", max_size=None, open_timeout=10,
                 close_timeout=5) as ws:
        ws.send("hello")
        assert ws.recv(timeout=10) == "hello"
        big = os.urandom(MIB)
        ws.send(big)
        assert ws.recv(timeout=10) == big
        ws.send("x" * 70_000)
        assert ws.recv(timeout=10) == "x" * 70_000
    assert request(srv.port, "/id").text == "a"  # plain requests still work


def test_websocket_closed_by_the_upstream_ends_cleanly(proxy_server, upstream_app, tmp_path):
    """The upstream's close reaches the client after what it sent before
    (its close frame), and the exchange is logged as a 101 with its bytes."""
    from websockets.exceptions import ConnectionClosedOK
    from websockets.sync.client import connect
    a = upstream_app("a")
    log = tmp_path / "access.json"
    srv = proxy_server([a], top={"log": {"access": str(log), "format": "json", "flush": "100ms"}})
    with connect(f"ws://127.0.0.1:{srv.port}/ws", open_timeout=10, close_timeout=5) as ws:
        ws.send("!close")
        with pytest.raises(ConnectionClosedOK) as closed:
            ws.recv(timeout=10)
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "upstream says bye")
    (rec,) = access_records(log, 1)
    assert (rec["status"], rec["uri"]) == (101, "/ws") and rec["body_bytes_sent"] > 0, rec


# ---- other upstreams ---------------------------------------------------------------------

def test_node_upstream(proxy_server, node_upstream):
    srv = proxy_server([node_upstream])
    with Client(srv.port) as c:
        for _ in range(100):
            r = c.get("/")
            assert (r.status, r.body) == (200, b"hello world"), r


@pytest.mark.timeout(120)
def test_nginx_upstream_1000_requests_over_keepalive(proxy_server, nginx_upstream):
    srv = proxy_server([nginx_upstream], upstream={"keepalive": 8})
    with Client(srv.port) as c:
        for i in range(1000):
            r = c.get(f"/n/{i}")
            assert (r.status, r.body) == (200, b"hello from nginx\n"), f"request {i}: {r}"


# ---- the configuration ------------------------------------------------------------------

SPEC_EXAMPLE = """\
trusted_proxies: ["127.0.0.2/32"]
upstreams:
  app:
    servers: ["127.0.0.1:{p1}", {{address: "127.0.0.1:{p2}", weight: 3, max_fails: 1, fail_timeout: 2s, backup: false, max_connections: 0}}]
    balance: round_robin
    keepalive: 32
    keepalive_timeout: 60s
    keepalive_requests: 1000
    keepalive_time: 1h
    health: {{path: /healthz, interval: 200ms, timeout: 1s, expect_status: "200-399", rise: 1, fall: 1}}
  hashed:
    servers: ["127.0.0.1:{p1}"]
    balance: hash
    hash_key: "header:X-User"
sites:
  - listen: ["127.0.0.1:{port}"]
    routes:
      - path: /api/
        proxy: {{upstream: app, strip_prefix: /api, host: example.com, connect_timeout: 1s, read_timeout: 1s, send_timeout: 5s, retries: 1,
                headers: {{request: {{set: {{X-A: "1"}}, remove: [X-B]}}, response: {{set: {{X-C: "2"}}, remove: [X-Powered-By]}}}},
                buffer_size: 64k}}
      - {{path: /h/, proxy: {{upstream: hashed}}}}
      - {{path: /u/, proxy: {{url: "http://127.0.0.1:{p1}/v1/", strip_prefix: /u/}}}}
"""


def test_the_spec_example_config_checks(tmp_path):
    cfg = tmp_path / "proxy.yaml"
    cfg.write_text(SPEC_EXAMPLE.format(p1=18001, p2=18002, port=18000))
    r = subprocess.run([sys.executable, "-m", "scalws", "--check-config", str(cfg)],
                       cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "test is successful" in r.stdout, r.stderr


def test_pipelined_requests_are_proxied_in_order(proxy_server, upstream_app):
    """Requests pipelined behind a proxied one (with Content-Length and
    chunked bodies between them) wait in the connection's stash and are
    answered in order, one upstream exchange at a time."""
    a = upstream_app("a")
    srv = proxy_server([a])
    req = (b"GET /echo/1 HTTP/1.1\r\nHost: x\r\n\r\n"
           b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
           b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"3\r\nabc\r\n0\r\n\r\n"
           b"GET /echo/4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(req)
        buf = b""
        answers = []
        for _ in range(4):
            status, headers, body, buf = read_response(s, buf)
            answers.append((status, json.loads(body)))
    assert [st for st, _ in answers] == [200] * 4, answers
    assert answers[0][1]["path"] == "/echo/1"
    assert answers[1][1] == {"len": 5, "sha256": hashlib.sha256(b"hello").hexdigest()}
    assert answers[2][1] == {"len": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}
    assert answers[3][1]["path"] == "/echo/4"


def test_a_post_being_uploaded_when_the_server_stops_is_finished(proxy_server, upstream_app):
    """A graceful stop (SIGTERM to the master) lets a proxied request in
    progress finish: a POST whose body is half sent when the stop begins is
    sent whole, answered whole (with Connection: close), and the server then
    exits 0. Guards a bug where the stop took the proxied connection, still
    in its head state, for an idle one and closed it under the upload."""
    a = upstream_app("a")
    srv = proxy_server([a])
    body = b"0123456789abcdefghij"
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n"
                  % len(body) + body[:10])
        a.wait_conns("requests", lambda n: n == 1, what="(the POST to reach the upstream)")
        srv.kill(signal.SIGTERM)
        srv.wait_log("graceful stop")
        # The client pauses on purpose: longer than the 0.5 s grace that a
        # stop gives connections that look idle.
        time.sleep(1.0)
        s.sendall(body[10:])
        status, headers, got, rest = read_response(s)
        assert status == 200, (status, headers, got)
        assert json.loads(got) == {"len": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        assert headers.get("connection", "").lower() == "close", headers
    try:
        code = srv.proc.wait(15)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"scalwsd did not exit after the request:\n{srv.log()}")
    assert code == 0, srv.log()
    assert "scalws stopped" in srv.log()


def tcp_rx_queued(local_port=None, remote_port=None) -> int:
    """Bytes waiting in the receive queues of the IPv4 TCP sockets (this
    network namespace) with that local and/or remote port: what a stopped
    process has not read yet."""
    total = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            lport = int(fields[1].split(":")[1], 16)
            rport = int(fields[2].split(":")[1], 16)
            if local_port is not None and lport != local_port:
                continue
            if remote_port is not None and rport != remote_port:
                continue
            total += int(fields[4].split(":")[1], 16)
    return total


def test_pipelined_post_while_the_worker_is_paused_is_not_reset(proxy_server, upstream_app):
    """GET + a POST with half its body pipelined in one write; the GET is held
    at the upstream. With the worker stopped (SIGSTOP) the upstream answers
    the GET and then the rest of the POST body arrives, so after SIGCONT both
    events come in one batch: the GET's answer starts the POST on the other
    server (a connect in progress: reading from the client is paused), and
    the client's readable event from before that change must not be taken
    for the client leaving. Both are answered, in order, on a connection that
    stays open. Guards a bug where that stale event reset the connection."""
    a, b = upstream_app("a"), upstream_app("b")
    srv = proxy_server([a, b], upstream={"keepalive": 0})  # the POST always connects
    worker = only_worker(srv)
    body = b"0123456789"
    for it in range(3):
        key = f"k{it}"
        before = a.conns()["requests"] + b.conns()["requests"]
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(f"GET /hold/{key} HTTP/1.1\r\nHost: a\r\n\r\n".encode()
                      + b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n"
                      % len(body) + body[:5])
            wait_until(lambda: a.conns()["requests"] + b.conns()["requests"] > before, 5.0,
                       "the GET to reach an upstream")
            ups = {a.port, b.port}
            os.kill(worker, signal.SIGSTOP)
            try:
                a.release(key)
                b.release(key)
                wait_until(lambda: any(tcp_rx_queued(remote_port=p) for p in ups), 5.0,
                           "the GET's answer to wait in the stopped worker's socket")
                s.sendall(body[5:])
                client_port = s.getsockname()[1]
                wait_until(lambda: tcp_rx_queued(srv.port, client_port), 5.0,
                           "the rest of the body to wait in the stopped worker's socket")
            finally:
                os.kill(worker, signal.SIGCONT)
            try:
                status1, _, got1, buf = read_response(s)
                status2, _, got2, buf = read_response(s, buf)
            except (EOFError, ConnectionResetError) as e:
                raise AssertionError(f"iteration {it}: connection lost: {e!r}")
            assert (status1, got1) == (200, f"released {key}".encode()), (it, status1, got1)
            assert status2 == 200, (it, status2, got2)
            assert json.loads(got2) == {"len": len(body),
                                        "sha256": hashlib.sha256(body).hexdigest()}, it
            # The connection stays open for another request.
            s.sendall(b"GET /id HTTP/1.1\r\nHost: a\r\n\r\n")
            status3, _, got3, _ = read_response(s, buf)
            assert status3 == 200 and got3 in (b"a", b"b"), (it, status3, got3)
    assert srv.workers() == [worker]
