"""control/resolver.py: how a name's new addresses rewrite the groups
(the same function in the master and in each worker), and when names are
asked again (TTL within bounds, backoff after a failure). Lookups are
replaced by a table; tests/e2e/test_live_dns.py runs the real thing."""
import pytest

from scalws.config.model import Config, Resolver as ResolverConf, Upstream, UpstreamServer
from scalws.control import resolver


def server(host, name="", entry=0, **kw):
    return UpstreamServer(address=f"{name or host}:80", host=host, port=80, resolve=name,
                          entry=entry, **kw)


def config(*groups, **conf):
    cfg = Config()
    cfg.resolver = ResolverConf(nameservers=[("127.0.0.1", 53)], **conf)
    cfg.upstreams = {g.name: g for g in groups}
    return cfg


def test_apply_replaces_the_servers_of_the_name_and_keeps_their_options():
    g = Upstream(name="api", servers=[
        server("127.0.0.1", entry=0),
        server("10.0.0.1", "app", 1, weight=3, backup=True),
        server("10.0.0.2", "app", 1, weight=3, backup=True),
        server("10.0.0.9", "db", 2),
    ])
    other = Upstream(name="static", servers=[server("127.0.0.1")])
    cfg = config(g, other)
    assert resolver.apply(cfg, "app", ["10.0.0.2", "10.0.0.3"]) == ["api"]
    assert [(s.host, s.resolve, s.weight, s.backup) for s in g.servers] == [
        ("127.0.0.1", "", 1, False), ("10.0.0.2", "app", 3, True),
        ("10.0.0.3", "app", 3, True), ("10.0.0.9", "db", 1, False)]
    assert resolver.apply(cfg, "app", ["10.0.0.2", "10.0.0.3"]) == []   # no change
    assert resolver.apply(cfg, "nothing", ["10.0.0.4"]) == []


def test_apply_drops_an_address_another_item_has_already():
    g = Upstream(name="api", servers=[server("10.0.0.1", "a", 0), server("10.0.0.2", "b", 1)])
    cfg = config(g)
    resolver.apply(cfg, "b", ["10.0.0.1", "10.0.0.5"])
    assert [(s.host, s.resolve) for s in g.servers] == [("10.0.0.1", "a"), ("10.0.0.5", "b")]


def test_messages_round_trip_and_bad_ones_are_refused():
    msg = resolver.encode("app", ["10.0.0.1", "::1"])
    assert msg[:1] == b"U"
    assert resolver.decode(msg) == ("app", ["10.0.0.1", "::1"])
    for bad in (b'U{"name": 1, "addrs": []}', b'U{"name": "a", "addrs": [1]}', b"U{"):
        with pytest.raises(ValueError):
            resolver.decode(bad)


class FakeLookup:
    """dns.Lookup's shape, answered from a table at once."""
    table = {}
    asked = []

    def __init__(self, name, settings, now):
        self.name = name
        self.asked.append((name, now))
        self.result = self.table[name]
        self.deadline = now

    def step(self, now):
        pass

    def close(self):
        pass


@pytest.fixture
def fake(monkeypatch):
    FakeLookup.table = {}
    FakeLookup.asked = []
    monkeypatch.setattr(resolver.dns, "Lookup", FakeLookup)
    return FakeLookup


def test_ttl_within_bounds_and_backoff_after_failures(fake):
    g = Upstream(name="api", servers=[server("10.0.0.1", "app", 0)])
    r = resolver.Resolver(config(g, min_interval=2.0, max_interval=30.0), now=0.0)
    assert r.next_due() == 2.0
    fake.table["app"] = ("ok", ["10.0.0.1"], 300)
    assert r.step(2.0) == []                       # same set: no change
    assert r.names["app"].due == 32.0              # TTL 300 bounded by max_interval
    fake.table["app"] = ("ok", ["10.0.0.2"], 0)
    assert r.step(32.0) == [("app", ["10.0.0.2"])]
    assert r.names["app"].due == 34.0              # TTL 0 raised to min_interval
    fake.table["app"] = ("fail", "timed out")
    dues = []
    now = 34.0
    for _ in range(6):
        assert r.step(now) == []
        now = r.names["app"].due
        dues.append(now)
    assert [b - a for a, b in zip([34.0] + dues, dues)] == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert r.names["app"].addrs == ["10.0.0.2"]    # the last good set stays
    fake.table["app"] = ("ok", ["10.0.0.2"], None)  # /etc/hosts: max_interval
    r.step(now)
    assert (r.names["app"].failing, r.names["app"].due) == (False, now + 30.0)


def test_resolver_off_asks_nothing(fake):
    g = Upstream(name="api", servers=[server("10.0.0.1", "app", 0)])
    r = resolver.Resolver(config(g, enabled=False), now=0.0)
    assert r.next_due() is None and r.step(100.0) == [] and not fake.asked
