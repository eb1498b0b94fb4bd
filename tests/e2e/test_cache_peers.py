"""Cache peers (`cache_zones.NAME.peers`, directives/cache_peers.py,
csrc/handlers/dispatch.c): three real scalwsd nodes on loopback ports share
one zone's keys by consistent hashing, in front of one origin
(tests/e2e/upstreams/cacheorigin.py, which counts what reaches it). The
same objects asked through each node in turn reach the origin once each;
a node that dies moves only its keys; a PURGE on one node reaches all.
The multi-host version (network namespaces) is tests/e2e/test_cache_peers_netns.py."""
import http.client
import json
import os
import signal
import time
import urllib.request

import pytest

from tests.e2e.conftest import free_port
from tests.e2e.upstreams.cacheorigin import Origin

pytestmark = pytest.mark.timeout(90)

SECRET = "peers-secret-0123456789"

NODE = """
workers: {workers}
cache_zones:
  z:
    max_size: 16m
    peers:
      servers: ["127.0.0.1:{p1}", "127.0.0.1:{p2}", "127.0.0.1:{p3}"]
      secret: "{secret}"
      self: "127.0.0.1:{me}"
status:
  listen: "127.0.0.1:{status}"
sites:
  - listen: "127.0.0.1:{me}"
    routes:
      - path: /
        proxy:
          url: "http://127.0.0.1:{origin}"
          cache: {{zone: z, purge: {{allow: [127.0.0.2/32]}}}}
"""


@pytest.fixture
def origin():
    o = Origin()
    yield o
    o.stop()


class Nodes:
    def __init__(self, server, origin, workers=1):
        self.ports = [free_port() for _ in range(3)]
        self.status = [free_port() for _ in range(3)]
        self.nodes = []
        for i, me in enumerate(self.ports):
            text = NODE.format(workers=workers, p1=self.ports[0], p2=self.ports[1],
                               p3=self.ports[2], me=me, secret=SECRET, origin=origin.port,
                               status=self.status[i])
            self.nodes.append(server(text.replace("{", "{{").replace("}", "}}")))

    def get(self, i, path, method="GET", headers=None, source="127.0.0.1"):
        c = http.client.HTTPConnection("127.0.0.1", self.ports[i], timeout=10,
                                       source_address=(source, 0))
        try:
            c.request(method, path, headers=headers or {})
            r = c.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
        finally:
            c.close()

    def metrics(self, i):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.status[i]}/metrics",
                                    timeout=5) as r:
            return r.read().decode()


def peer_counter(text, result):
    for line in text.splitlines():
        if line.startswith(f'scalws_cache_peer_requests_total{{result="{result}"}}'):
            return int(float(line.split()[-1]))
    raise AssertionError(f"no peer counter {result!r} in:\n{text}")


def paths(n=30):
    return [f"/obj/{i}?cc=max-age%3D300" for i in range(n)]


def test_each_object_reaches_the_origin_once_through_three_nodes(server, origin):
    nodes = Nodes(server, origin)
    for i in range(3):                       # every object through every node
        for p in paths():
            status, h, body = nodes.get(i, p)
            assert status == 200 and body.startswith(b"GET /obj/"), (status, body)
    assert all(origin.count(p) == 1 for p in paths()), \
        {p: origin.count(p) for p in paths() if origin.count(p) != 1}
    # the marker (the secret) never reaches the origin
    assert not any("X-Scalws-Peer" in h for p in paths() for _, h in origin.requests(p))
    m = [nodes.metrics(i) for i in range(3)]
    forwarded = sum(peer_counter(t, "forwarded") for t in m)
    received = sum(peer_counter(t, "received_hit") + peer_counter(t, "received_miss")
                   for t in m)
    local = sum(peer_counter(t, "local") for t in m)
    assert forwarded == received and forwarded + local == 90
    # each node owns some keys: about two thirds of the requests were forwarded
    assert 40 <= forwarded <= 80, (forwarded, local)
    assert sum(peer_counter(t, "received_hit") for t in m) >= forwarded - 30


def kill_node(srv):
    """A node dies at once, workers and all: a SIGKILL of the master alone
    is a TERM to its workers (PR_SET_PDEATHSIG), which drain, answering on
    for a while over the connections the other nodes keep to them."""
    pids, todo = [], [srv.proc.pid]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    srv.proc.wait(10)


def test_a_dead_node_moves_only_its_keys(server, origin):
    nodes = Nodes(server, origin)
    for p in paths():
        assert nodes.get(0, p)[0] == 200
    before = {p: origin.count(p) for p in paths()}
    assert set(before.values()) == {1}
    kill_node(nodes.nodes[2])
    # through node 0: every request answered, the failed forwards included
    # (the retry goes to the next node on the ring)
    for _ in range(2):
        for p in paths():
            status, _, _ = nodes.get(0, p)
            assert status == 200
    refetched = [p for p in paths() if origin.count(p) > 1]
    # only node 2's keys were fetched again, once each (by their new owner)
    assert 0 < len(refetched) < len(paths()) * 0.7, refetched
    assert all(origin.count(p) == 2 for p in refetched)
    nodes.nodes[2].proc = None               # killed on purpose: not checked at teardown
    m = nodes.metrics(0)
    assert peer_counter(m, "owner_down") > 0


def test_a_purge_on_one_node_reaches_every_node(server, origin):
    nodes = Nodes(server, origin)
    p = "/obj/x?cc=max-age%3D300"
    for i in range(3):
        assert nodes.get(i, p)[0] == 200
    assert origin.count(p) == 1
    status, _, body = nodes.get(1, p, method="PURGE", source="127.0.0.2")
    assert status == 200, body
    assert json.loads(body)["peers"] == 2
    # the owner (whichever it is) dropped it: the next GET anywhere refetches
    deadline = time.monotonic() + 5
    while origin.count(p) == 1 and time.monotonic() < deadline:
        nodes.get(2, p)
        time.sleep(0.05)
    assert origin.count(p) == 2
    # a PURGE from a client outside purge.allow goes nowhere
    status, _, _ = nodes.get(0, p, method="PURGE", source="127.0.0.1")
    assert status == 403
    assert sum(peer_counter(nodes.metrics(i), "purges_sent") for i in range(3)) == 2


def test_a_forged_marker_is_an_ordinary_request(server, origin):
    """A client that sends X-Scalws-Peer without the secret is forwarded like
    any other (the marker is checked, then dropped toward the origin); one
    with a wrong secret cannot PURGE."""
    nodes = Nodes(server, origin)
    p = "/obj/forged?cc=max-age%3D300"
    for i in range(3):
        assert nodes.get(i, p, headers={"X-Scalws-Peer": "guess http"})[0] == 200
    assert origin.count(p) == 1
    status, _, _ = nodes.get(0, p, method="PURGE", headers={"X-Scalws-Peer": "x" * 23 + " http"})
    assert status == 403


def test_a_tag_purge_reaches_every_node(server, origin):
    """PURGE with Cache-Tag: entries on every owner that carry the tag go."""
    nodes = Nodes(server, origin)
    tagged = [f"/t/{i}?cc=max-age%3D300&tag=red" for i in range(12)]
    other = "/t/blue?cc=max-age%3D300&tag=blue"
    for p in tagged + [other]:
        for i in range(3):
            assert nodes.get(i, p)[0] == 200
    assert all(origin.count(p) == 1 for p in tagged + [other])
    status, _, body = nodes.get(2, "/", method="PURGE", source="127.0.0.2",
                                headers={"Cache-Tag": "red"})
    assert status == 200 and json.loads(body)["peers"] == 2, body
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for p in tagged:
            nodes.get(0, p)
        if all(origin.count(p) == 2 for p in tagged):
            break
        time.sleep(0.05)
    assert all(origin.count(p) == 2 for p in tagged), [origin.count(p) for p in tagged]
    nodes.get(1, other)
    assert origin.count(other) == 1          # another tag stays


PENDING = """
workers: 1
resolver:
  nameservers: ["127.0.0.1:{dns}"]
  min_interval: 100ms
  max_interval: 1s
cache_zones:
  z:
    max_size: 16m
    peers:
      servers: ["peers.app.test:{port}"]
      secret: "{secret}"
      self: "{me}:{port}"
sites:
  - listen: "{me}:{port}"
    routes:
      - path: /
        proxy:
          url: "http://127.0.0.1:{origin}"
          cache: {{zone: z}}
"""


def test_peers_by_a_name_that_resolves_later(server, origin):
    """A headless Service lists ready pods only: the first pod starts before
    the name resolves. It serves alone, then shares once the name lists the
    nodes (no reload)."""
    from tests.e2e.upstreams.dnsserver import DnsServer
    d = DnsServer().start()
    try:
        port = free_port("127.0.0.11")
        nodes = []
        for me in ("127.0.0.11", "127.0.0.12"):
            text = PENDING.format(dns=d.port, port=port, secret=SECRET, me=me,
                                  origin=origin.port)
            nodes.append(server(text.replace("{", "{{").replace("}", "}}")))
        for n in nodes:
            assert "'peers.app.test' does not resolve yet (no such name)" in n.log()

        def get(ip, path):
            c = http.client.HTTPConnection(ip, port, timeout=10)
            try:
                c.request("GET", path, headers={"Host": "www.example.test"})
                r = c.getresponse()
                return r.status, r.read()
            finally:
                c.close()

        alone = "/alone?cc=max-age%3D300"
        assert get("127.0.0.11", alone)[0] == 200 and get("127.0.0.12", alone)[0] == 200
        assert origin.count(alone) == 2                  # islands until the name resolves
        d.set("peers.app.test", ["127.0.0.11", "127.0.0.12"])
        for n in nodes:
            n.wait_log("peers.app.test now resolves to 127.0.0.11, 127.0.0.12")
        shared = [f"/shared/{i}?cc=max-age%3D300" for i in range(20)]
        for p in shared:
            for ip in ("127.0.0.11", "127.0.0.12"):
                assert get(ip, p)[0] == 200
        assert all(origin.count(p) == 1 for p in shared), [origin.count(p) for p in shared]
    finally:
        d.stop()
