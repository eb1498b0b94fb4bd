"""FastCGI connections against PHP-FPM's children (csrc/handlers/fastcgi_queue.c):
real scalwsd before a real PHP-FPM with few children.

PHP-FPM gives each open connection a child until it closes, so a connection
opened while every child holds one waits in FPM's accept queue. A worker
learns how many connections a server answers at once (or is told, by a
server's `max_connections`), and past it its requests wait in the worker,
oldest first, for a kept connection: the clients are served in turn, the
connections stay kept, and a wait is bounded by the route's read_timeout.
A GET or HEAD that would wait goes behind a request begun under 20 ms ago
on a kept connection instead, written at once, so that the child finds it
when it ends the one before.
"""
from __future__ import annotations

import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import urllib.request

import pytest

from scalws.control import stats
from tests.e2e.test_fastcgi import LAB, client, env, fcgi_yaml, get
from tests.e2e.test_metrics import parse_metrics
from tests.e2e.upstreams.phpfpm import tcp_conns, tcp_opened

pytestmark = pytest.mark.timeout(60)


def until(cond, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if v := cond():
            return v
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


# The shared counters in a file and the status listener (/metrics), for the
# tests that read the wait's counters (docs/operations.md, "Metrics").
COUNTERS = {"status": {"listen": "127.0.0.1:@PORT2@", "file": "@TMP@/stats.bin"}}


def counted(text: str) -> str:
    return text.replace("@PORT2@", "{port2}").replace("@TMP@", "{tmp}")


def php_counters(srv) -> dict:
    """The `php` group's counters, summed over the workers."""
    return stats.read(str(srv.tmp / "stats.bin"))["upstreams"]["php"]


def php_metrics(srv) -> dict:
    """{family: value} of the `php` group's series on /metrics (each
    family's single sample, or {state: value})."""
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.ports[1]}/metrics", timeout=5) as r:
        fams = parse_metrics(r.read().decode())
    out = {}
    for name, fam in fams.items():
        for _, labels, value in fam["samples"]:
            if labels.get("upstream") == "php" and name.startswith("scalws_upstream_"):
                if "state" in labels:
                    out.setdefault(name, {})[labels["state"]] = value
                elif "le" not in labels:
                    out[name] = value
    return out


def test_pool_larger_than_the_children(server, php_fpm):
    # The trap of FCGI_KEEP_CONN: two workers with the default pool (32
    # connections each) in front of two PHP children. Every pooled
    # connection holds a child, so a request on a new connection waits in
    # FPM's accept queue; before the fix it waited for read_timeout (30 s
    # here). Now a worker learns that the server answers fewer connections
    # than it opened, and a FastCGI group's connections live at most 1 s
    # (keepalive_time, keepalive_timeout): all 48 requests finish in
    # seconds.
    fpm = php_fpm(children=2)
    srv = server(fcgi_yaml([fpm.addr], upstream={"keepalive": 32},
                           fastcgi={"read_timeout": "30s"}, top={"workers": 2}))

    def one_client(i):
        for j in range(6):
            c = client(srv, timeout=40)   # new client connections: both workers get some
            assert env(c, f"/env.php?c={i}&r={j}")["get"] == {"c": str(i), "r": str(j)}
            c.close()
        return True

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one_client, range(8)))
    took = time.monotonic() - t0
    assert len(fpm.access()) == 48
    assert took < 10, f"48 requests took {took:.1f}s: connections held children"


def test_clients_past_the_children_take_turns_on_kept_connections(server, php_fpm):
    # 16 keep-alive clients before 2 children, a pool of 8 (the trap
    # above, in one worker): the worker opens connections until FPM stops
    # answering new ones, learns that it answers 2, and from then on the
    # requests wait in the worker for those two. Before, each request past
    # them opened a connection into FPM's accept queue, and the stall rule
    # closed kept ones to free children: a reconnect every ~10 requests
    # (about 40 here), none kept long.
    fpm = php_fpm(children=2)
    srv = server(counted(fcgi_yaml([fpm.addr], upstream={"keepalive": 8},
                                   top={"log": {"level": "debug", "access": False},
                                        **COUNTERS})))
    n_clients, n_req = 16, 25
    took = []
    before = tcp_opened(fpm.port)   # the fixture's readiness check

    def one_client(i):
        c = client(srv, timeout=30)
        for j in range(n_req):
            t = time.monotonic()
            assert env(c, f"/env.php?c={i}&r={j}")["get"] == {"c": str(i), "r": str(j)}
            took.append(time.monotonic() - t)
        c.close()
        return True

    with ThreadPoolExecutor(n_clients) as pool:
        assert all(pool.map(one_client, range(n_clients)))
    assert len(fpm.access()) == n_clients * n_req
    # The count learned: 2, or 1 where a child was slow to answer its
    # first request (it then grows by a connection answered at once).
    assert re.search(r"answers [12] connections at once \(was 0\)", srv.log()), srv.log()
    # The burst before the count was learned (up to one a client), the
    # connections replaced once a second (keepalive_time), one probe past
    # the count a second: far below a reconnect every ten requests.
    opened = tcp_opened(fpm.port) - before
    assert opened <= n_clients + 12, f"{opened} connections for {n_clients * n_req} requests"
    # In turn: no request waited behind many rounds of the others.
    assert max(took) < 2.0, f"a request waited {max(took):.2f}s"
    # Waiting happened in the worker, and the connections were kept.
    assert "FastCGI request waits for a connection" in srv.log()
    assert tcp_conns(fpm.port) <= 3   # two kept (a probe may be open)
    # The counters say the same as the debug log: each wait, each request
    # behind another, the count learned (1-3: a probe may have raised it);
    # once all is answered nothing waits and nothing is busy (the gauges
    # are refreshed at the worker's tick; idle connections live 1 s).
    log = srv.log()
    c = until(lambda: (lambda c: c["queued"] == 0 and c["conns_busy"] == 0 and c)(
        php_counters(srv)), "the gauges at rest")
    waits = log.count("FastCGI request waits for a connection")
    behind = log.count("FastCGI request written behind another")
    assert c["queue_waits"] == waits > 0, (c, waits)
    assert c["pipelined"] == behind, (c, behind)
    assert c["requests"] >= n_clients * n_req
    assert 1 <= c["capacity"] <= 3, c
    assert 0 < c["queue_wait_ms"] < waits * 2000 and c["queue_timeouts"] == 0, c
    m = php_metrics(srv)
    assert m["scalws_upstream_queued_total"] == c["queue_waits"]
    assert m["scalws_upstream_pipelined_total"] == c["pipelined"]
    assert m["scalws_upstream_capacity"] == c["capacity"]
    assert m["scalws_upstream_queue"] == 0
    assert m["scalws_upstream_queue_wait_seconds_total"] == c["queue_wait_ms"] / 1000


def slow_in_flight(srv, fpm, ms):
    """Starts GET /slow.php?ms= on a thread; returns (thread, result list)
    once its connection to PHP-FPM is open."""
    res = []

    def run():
        c = client(srv, timeout=30)
        res.append(get(c, f"/slow.php?ms={ms}"))

    t = threading.Thread(target=run)
    t.start()
    until(lambda: tcp_conns(fpm.port) == 1, "the slow request's connection")
    return t, res


def test_max_connections_queues_instead_of_502(server, php_fpm):
    # A server's max_connections on a FastCGI group bounds the connections
    # a worker opens to it; requests past it wait for one (HAProxy's
    # maxconn and queue), where a proxy group answers 502 (nginx's
    # max_conns). Four requests of 300 ms over one connection: one after
    # the other, by one child.
    fpm = php_fpm(children=4)
    srv = server(fcgi_yaml([{"address": fpm.addr, "max_connections": 1}]))
    before = tcp_opened(fpm.port)   # the fixture's readiness check
    t0 = time.monotonic()

    def one(i):
        c = client(srv, timeout=30)
        return get(c, f"/slow.php?ms=300&i={i}")[0]

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, range(4))) == [200] * 4
    took = time.monotonic() - t0
    assert took >= 1.15, f"four 300-ms requests over one connection in {took:.2f}s"
    pids = {line.split()[-1] for line in fpm.access()}
    assert len(fpm.access()) == 4 and len(pids) == 1, fpm.access()
    assert tcp_opened(fpm.port) - before == 1


def test_a_wait_ends_at_the_read_timeout_with_504(server, php_fpm):
    # The wait for a connection is bounded by the route's read_timeout
    # (what the request would have waited in FPM's accept queue): a
    # request of a route with 500 ms waits that long behind a 3-s script
    # holding the only connection, then is answered 504, and PHP never
    # sees it. The slow request is answered in full.
    fpm = php_fpm(children=4)
    quick = {"path": "= /env.php", "fastcgi": {"upstream": "php", "root": LAB,
                                                "read_timeout": "500ms"}}
    srv = server(counted(fcgi_yaml([{"address": fpm.addr, "max_connections": 1}],
                                   routes=[quick], top=COUNTERS)))
    t, res = slow_in_flight(srv, fpm, 3000)
    t0 = time.monotonic()
    status, _, _, _ = get(client(srv), "/env.php")
    took = time.monotonic() - t0
    assert status == 504
    assert 0.45 <= took < 2.0, took
    srv.wait_log("upstream timed out while waiting for a connection")
    t.join(10)
    assert res[0][0] == 200 and res[0][3] == b"late\n"
    assert [line.split()[1] for line in fpm.access()] == ["/slow.php?ms=3000"]
    c = php_counters(srv)
    assert (c["queue_waits"], c["queue_timeouts"], c["pipelined"]) == (1, 1, 0), c
    assert 450 <= c["queue_wait_ms"] < 2000, c
    assert php_metrics(srv)["scalws_upstream_queue_timeouts_total"] == 1


def test_a_client_that_leaves_while_waiting_is_never_sent(server, php_fpm):
    # Nothing of a waiting request has gone to the application: its client
    # leaving takes it off the wait, PHP never runs it, and the connection
    # goes on to the next request.
    fpm = php_fpm(children=4)
    # (keepalive_time: the connection outlives the 1.5-s script, so that
    # the next request finds it kept)
    srv = server(counted(fcgi_yaml([{"address": fpm.addr, "max_connections": 1}],
                                   upstream={"keepalive_time": "10s"},
                                   top={"log": {"level": "debug", "access": False},
                                        **COUNTERS})))
    before = tcp_opened(fpm.port)   # the fixture's readiness check
    t, res = slow_in_flight(srv, fpm, 1500)
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"GET /env.php?gone=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    srv.wait_log("FastCGI request waits for a connection")
    # While it waits (the worker's tick refreshes the gauges four times a
    # second; the slow script holds the connection for 1.5 s): one waiting,
    # one connection busy, none learned (max_connections set the limit).
    c = until(lambda: (lambda c: c["queued"] == 1 and c)(php_counters(srv)),
              "the waiting request in the gauge", timeout=1.4)
    assert (c["conns_busy"], c["capacity"], c["queue_waits"]) == (1, 0, 1), c
    m = php_metrics(srv)
    assert m["scalws_upstream_queue"] == 1
    assert m["scalws_upstream_connections"] == {"busy": 1, "idle": 0}
    s.close()
    t.join(10)
    assert res[0][0] == 200
    assert env(client(srv), "/env.php?next=1")["get"] == {"next": "1"}
    assert [line.split()[1] for line in fpm.access()] == ["/slow.php?ms=1500", "/env.php?next=1"]
    assert tcp_opened(fpm.port) - before == 1
    c = until(lambda: (lambda c: c["queued"] == 0 and c["conns_busy"] == 0 and c)(
        php_counters(srv)), "the gauges at rest")
    assert (c["queue_waits"], c["queue_timeouts"], c["pipelined"]) == (1, 0, 0), c



def raw_get(srv, path):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    return s


def read_all(s) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return data


def one_kept_connection(server, php_fpm, **fastcgi):
    """(fpm, srv): PHP-FPM with 4 children, scalwsd logging at debug with
    max_connections 1, and one request answered on that connection, so
    that the next one there is on a kept connection (a new one takes
    nothing behind it until it has answered)."""
    fpm = php_fpm(children=4)
    srv = server(fcgi_yaml([{"address": fpm.addr, "max_connections": 1}], fastcgi=fastcgi,
                           top={"log": {"level": "debug", "access": False}}))
    assert env(client(srv), "/env.php?warm=1")["get"] == {"warm": "1"}
    assert tcp_conns(fpm.port) == 1
    return fpm, srv


@pytest.mark.parametrize("pipeline", [True, False])
def test_a_get_goes_behind_a_request_just_begun_and_gets_its_own_answer(server, php_fpm,
                                                                        pipeline):
    # Behind a 400-ms script on the only connection: a GET sent at once goes
    # behind it (written there, no wait in the worker), and each client gets
    # its own answer, by the same child, on the same connection. With
    # `pipeline: off` it waits in the worker for that connection instead.
    fpm, srv = one_kept_connection(server, php_fpm, pipeline=pipeline)
    before = tcp_opened(fpm.port)
    a = raw_get(srv, "/slow.php?ms=400")
    b = raw_get(srv, "/env.php?behind=1")
    ra, rb = read_all(a), read_all(b)
    assert ra.startswith(b"HTTP/1.1 200") and ra.endswith(b"late\n"), ra
    assert rb.startswith(b"HTTP/1.1 200") and b'"behind":"1"' in rb, rb
    assert ("FastCGI request waits for a connection" in srv.log()) != pipeline
    assert ("FastCGI request written behind another" in srv.log()) == pipeline
    assert [line.split()[1] for line in fpm.access()] == [
        "/env.php?warm=1", "/slow.php?ms=400", "/env.php?behind=1"]
    assert len({line.split()[-1] for line in fpm.access()}) == 1
    assert tcp_opened(fpm.port) == before


def test_not_behind_a_request_begun_long_ago(server, php_fpm):
    # A script that has run for more than 20 ms may run long: a GET then
    # waits in the worker for the first connection to come free rather than
    # behind it (here it is the same one, max_connections 1).
    fpm, srv = one_kept_connection(server, php_fpm)
    a = raw_get(srv, "/slow.php?ms=600")
    time.sleep(0.15)   # the condition under test: the first request's age
    b = raw_get(srv, "/env.php?later=1")
    srv.wait_log("FastCGI request waits for a connection")
    assert read_all(a).endswith(b"late\n")
    assert b'"later":"1"' in read_all(b)


def test_a_child_leaving_at_max_requests_drops_nothing(server, php_fpm):
    # pm.max_requests: a child ends its last answer and closes; the request
    # written behind it was never read, and goes again on another
    # connection (a GET: the one kind that goes behind). Every client gets
    # its own answer, and PHP ran each request once.
    fpm = php_fpm(children=2, max_requests=7)
    srv = server(fcgi_yaml([fpm.addr], upstream={"keepalive": 8},
                           top={"log": {"level": "info", "access": False}}))
    n_clients, n_req = 12, 20

    def one_client(i):
        c = client(srv, timeout=30)
        for j in range(n_req):
            assert env(c, f"/env.php?c={i}&r={j}")["get"] == {"c": str(i), "r": str(j)}
        c.close()
        return True

    with ThreadPoolExecutor(n_clients) as pool:
        assert all(pool.map(one_client, range(n_clients)))
    runs = [line.split()[1] for line in fpm.access()]
    assert len(runs) == n_clients * n_req and len(set(runs)) == len(runs), \
        f"{len(runs)} runs of {len(set(runs))} requests"
    assert len({line.split()[-1] for line in fpm.access()}) >= n_clients * n_req // 7
    # Connections did close under requests written behind, sent again (an
    # info line, not an error: it is routine).
    assert "before its turn: sent again" in srv.log()
    assert "[error]" not in srv.log()


def test_a_client_gone_behind_another_never_gets_its_answer_to_the_next(server, php_fpm):
    # The request behind was written, so PHP runs it and its answer follows
    # on the connection after the one before: its client leaving must not
    # hand that answer to whoever comes next. The connection is closed after
    # the first answer, and the next request goes on a new one.
    fpm, srv = one_kept_connection(server, php_fpm)
    a = raw_get(srv, "/slow.php?ms=500")
    b = raw_get(srv, "/env.php?gone=1")
    srv.wait_log("FastCGI request written behind another")
    b.close()
    assert read_all(a).endswith(b"late\n")
    # Closed after the first answer: because a request went behind it, or,
    # when its answer came in the same read, because of the bytes after it.
    srv.wait_log("FastCGI connection to")
    reasons = re.findall(r"not kept: (.+)", srv.log())
    assert reasons and reasons[-1] in ("a request was written behind this one",
                                       "bytes after END_REQUEST"), reasons
    assert env(client(srv), "/env.php?next=1")["get"] == {"next": "1"}
    until(lambda: len(fpm.access()) == 4, "PHP's access log")
    uris = [line.split()[1] for line in fpm.access()]
    assert uris[:2] == ["/env.php?warm=1", "/slow.php?ms=500"], uris
    assert sorted(uris[2:]) == ["/env.php?gone=1", "/env.php?next=1"], uris  # two children
