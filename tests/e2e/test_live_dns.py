"""Live DNS for upstream servers (scalws/dns.py, control/resolver.py): a
group whose server is a host name follows the name's answers while
scalwsd runs, without a reload. A DNS server the test runs on loopback
(tests/e2e/upstreams/dnsserver.py) gives app.test addresses in
127.0.0.0/8; each backend (a real HTTP/1.1 server in a thread) answers
its own address, so the client sees which server the proxy picked."""
import http.client
import http.server
import threading
import time

import pytest

from tests.e2e.conftest import free_port, until
from tests.e2e.upstreams.dnsserver import DnsServer

CONF = """
workers: {workers}
resolver:
  nameservers: ["127.0.0.1:{dns}"]
  min_interval: 100ms
  max_interval: 1s
  timeout: 300ms
  attempts: 1
upstreams:
  api:
    servers: ["{name}:{bport}"]
    balance: {balance}
sites:
  - listen: "127.0.0.1:{{port}}"
    routes:
      - path: /
        proxy:
          upstream: api
          retries: 0
"""


class Backend:
    """An HTTP/1.1 keep-alive server on (ip, port) answering its ip;
    /slow waits until release() first."""

    def __init__(self, ip, port):
        self.ip = ip
        self.gate = threading.Event()
        self.held = threading.Event()
        self.conns = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                outer.conns += 1
                super().setup()

            def do_GET(self):
                if self.path == "/slow":
                    outer.held.set()
                    outer.gate.wait(20)
                body = outer.ip.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer((ip, port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def dns():
    d = DnsServer().start()
    yield d
    d.stop()


@pytest.fixture
def backends():
    for _ in range(50):       # one port free on the three addresses
        port, made = free_port("127.0.0.2"), {}
        try:
            for ip in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
                made[ip] = Backend(ip, port)
            break
        except OSError:
            for b in made.values():
                b.stop()
    yield port, made
    for b in made.values():
        b.stop()


def get(port, path="/"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def answers(port, n=12):
    return {get(port)[1] for _ in range(n)}


def start(server, dns, bport, workers=1, balance="round_robin", name="app.test", run=True):
    return server(CONF.format(dns=dns.port, bport=bport, workers=workers, balance=balance,
                              name=name), start=run)


def test_addresses_join_and_leave_without_a_reload(server, dns, backends):
    bport, b = backends
    dns.set("app.test", ["127.0.0.2"])
    srv = start(server, dns, bport, workers=2)
    workers = sorted(srv.workers())
    assert answers(srv.port) == {"127.0.0.2"}

    dns.set("app.test", ["127.0.0.2", "127.0.0.3"])
    until(lambda: answers(srv.port) == {"127.0.0.2", "127.0.0.3"}, what="both servers")
    srv.wait_log("app.test now resolves to 127.0.0.2, 127.0.0.3 (added: 127.0.0.3")

    dns.set("app.test", ["127.0.0.4", "127.0.0.3"])   # order does not matter
    until(lambda: answers(srv.port) == {"127.0.0.3", "127.0.0.4"}, what="the new set")
    srv.wait_log("draining: 127.0.0.2")
    srv.wait_log('upstream server 127.0.0.2:%d of "api" removed (DNS)' % bport, count=2)
    assert sorted(srv.workers()) == workers            # the same processes
    assert "reloaded" not in srv.log()


def test_a_removed_server_finishes_what_it_carries(server, dns, backends):
    bport, b = backends
    dns.set("app.test", ["127.0.0.2"])
    srv = start(server, dns, bport)
    got = {}
    t = threading.Thread(target=lambda: got.update(r=get(srv.port, "/slow")))
    t.start()
    assert b["127.0.0.2"].held.wait(10)
    dns.set("app.test", ["127.0.0.3"])
    srv.wait_log("removed (DNS): 1 busy connections finish")
    assert answers(srv.port, 4) == {"127.0.0.3"}
    b["127.0.0.2"].gate.set()
    t.join(10)
    assert got["r"] == (200, "127.0.0.2")
    # its connection was not pooled again: a later request never reaches it
    before = b["127.0.0.2"].conns
    assert answers(srv.port, 6) == {"127.0.0.3"}
    assert b["127.0.0.2"].conns == before


@pytest.mark.parametrize("mode", ["drop", "servfail", "nxdomain"])
def test_a_failed_lookup_keeps_the_last_good_set(server, dns, backends, mode):
    bport, b = backends
    dns.set("app.test", ["127.0.0.2", "127.0.0.3"])
    srv = start(server, dns, bport)
    assert answers(srv.port) == {"127.0.0.2", "127.0.0.3"}
    if mode == "nxdomain":
        dns.records.clear()
    else:
        dns.mode = mode
    srv.wait_log("resolving app.test for upstream api failed")
    assert "keeping its last good addresses (127.0.0.2, 127.0.0.3)" in srv.log()
    asked = dns.queries("app.test")
    assert answers(srv.port) == {"127.0.0.2", "127.0.0.3"}
    until(lambda: dns.queries("app.test") > asked, what="a retry")
    assert srv.log().count("resolving app.test for upstream api failed") == 1  # said once
    dns.mode = "answer"
    dns.set("app.test", ["127.0.0.4"])
    srv.wait_log("resolving app.test for upstream api works again")
    until(lambda: answers(srv.port, 4) == {"127.0.0.4"}, what="the new server")


def test_a_cname_and_the_ttl(server, dns, backends):
    """A Service name that is an alias; the TTL (3 s here) decides when the
    master asks again, within min_interval and max_interval (1 s)."""
    bport, b = backends
    dns.alias("www.app.test", "pods.app.test")
    dns.set("pods.app.test", ["127.0.0.3"], ttl=3)
    srv = start(server, dns, bport, name="www.app.test")
    assert answers(srv.port) == {"127.0.0.3"}
    dns.set("pods.app.test", ["127.0.0.4"], ttl=3)
    until(lambda: answers(srv.port, 4) == {"127.0.0.4"}, what="the new server")
    # max_interval bounds a long TTL: asked about once a second
    n = dns.queries("www.app.test")
    time.sleep(2.5)
    assert 1 <= dns.queries("www.app.test") - n <= 8  # A and AAAA per lookup


def test_hash_balance_keeps_its_keys_when_a_server_joins(server, dns, backends):
    """Consistent hashing over resolved servers: a new address takes only
    its share of the keys; the others stay where they were."""
    bport, b = backends
    dns.set("app.test", ["127.0.0.2", "127.0.0.3"])
    srv = start(server, dns, bport, workers=2, balance="hash\n    hash_key: uri")
    paths = [f"/k{i}" for i in range(40)]
    before = {p: get(srv.port, p)[1] for p in paths}
    assert set(before.values()) == {"127.0.0.2", "127.0.0.3"}
    dns.set("app.test", ["127.0.0.2", "127.0.0.3", "127.0.0.4"])
    until(lambda: "127.0.0.4" in {get(srv.port, p)[1] for p in paths}, what="the third server")
    after = {p: get(srv.port, p)[1] for p in paths}
    moved = [p for p in paths if after[p] != before[p]]
    assert all(after[p] == "127.0.0.4" for p in moved), (before, after)
    assert 0 < len(moved) < len(paths) * 0.7


def test_a_name_that_does_not_resolve_refuses_the_file(server, dns, backends):
    bport, _ = backends
    srv = start(server, dns, bport, name="nowhere.app.test", run=False)
    srv.start(wait=False)
    assert srv.proc.wait(15) != 0
    assert "scalws-0.yaml:11:15: upstreams.api.servers[0]: cannot resolve 'nowhere.app.test': " \
        "no such name" in srv.log()


def test_with_health_checks_a_new_address_waits_for_its_first_check(server, dns, backends):
    bport, b = backends
    dns.set("app.test", ["127.0.0.2"])
    srv = start(server, dns, bport,
                balance="round_robin\n    health:\n      path: /\n      interval: 300ms")
    assert answers(srv.port) == {"127.0.0.2"}
    b["127.0.0.3"].stop()                        # not listening: its checks fail
    dns.set("app.test", ["127.0.0.2", "127.0.0.3"])
    srv.wait_log('127.0.0.3:%d of "api" added (DNS); up once its first health check passes'
                 % bport)
    # never picked while its checks fail: every request still answered by .2
    for _ in range(3):
        assert answers(srv.port, 8) == {"127.0.0.2"}
        time.sleep(0.3)


def test_a_set_that_keeps_changing_under_load_loses_nothing(server, dns, backends):
    """The set flips every 150 ms for 4 s while 4 clients keep requests in
    flight (keep-alive, some slow): every answer a 200 from a server of
    the set, the worker never restarts, and removed servers are freed (the
    worker's memory does not grow with the changes)."""
    bport, b = backends
    sets = [["127.0.0.2", "127.0.0.3"], ["127.0.0.3", "127.0.0.4"], ["127.0.0.2", "127.0.0.4"]]
    dns.set("app.test", sets[0], ttl=0)
    srv = start(server, dns, bport)
    (worker,) = srv.workers()
    b["127.0.0.2"].gate.set()
    b["127.0.0.3"].gate.set()
    b["127.0.0.4"].gate.set()

    def rss():
        # RssAnon: the process's own memory; the code an attack runs for the first
        # time since the worker dropped its start-up's pages (forkmem.py) is the page cache's
        with open(f"/proc/{worker}/status") as f:
            return int(next(l for l in f if l.startswith("RssAnon")).split()[1])

    stop = threading.Event()
    bad = []
    count = [0]

    def client():
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        while not stop.is_set():
            try:
                c.request("GET", "/")
                r = c.getresponse()
                body = r.read().decode()
                if r.status != 200 or body not in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
                    bad.append((r.status, body))
                count[0] += 1
            except (OSError, http.client.HTTPException) as exc:
                bad.append(repr(exc))
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        c.close()

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    before = rss()
    for i in range(27):
        dns.set("app.test", sets[(i + 1) % 3], ttl=0)   # asked again after min_interval
        time.sleep(0.15)
    stop.set()
    for t in threads:
        t.join(15)
    assert not bad, bad[:5]
    assert count[0] > 200
    assert srv.workers() == [worker]                 # never restarted
    assert srv.log().count("now resolves to") >= 10  # the changes were followed
    assert rss() - before < 2048, (before, rss())    # KiB: removed servers were freed
