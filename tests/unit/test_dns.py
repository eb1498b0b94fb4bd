"""scalws/dns.py (the stub resolver's wire format, search rules, hosts and
resolv.conf) and `resolver:` in the configuration. The lookups against a
live DNS server are tests/e2e/test_live_dns.py."""
import random
import struct

import pytest

from scalws import dns
from scalws.config.directives.resolver import _nameserver
from scalws.config.errors import ConfigError
from scalws.config.loader import load_config_text


def response(qid, name, qtype, records, rcode=0, flags=0x8180):
    """records: [(owner offset bytes or name, type, ttl, rdata)]"""
    q = dns.encode_name(name) + struct.pack("!HH", qtype, 1)
    out = struct.pack("!HHHHHH", qid, flags | rcode, 1, len(records), 0, 0) + q
    for owner, rtype, ttl, rdata in records:
        owner = owner if isinstance(owner, bytes) else dns.encode_name(owner)
        out += owner + struct.pack("!HHIH", rtype, 1, ttl, len(rdata)) + rdata
    return out


def test_a_query_asks_recursion_with_edns():
    q = dns.encode_query(0x1234, "App.Example", dns.AAAA)
    assert q[:12] == struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 1)
    assert q[12:29] == b"\x03App\x07Example\x00" + struct.pack("!HH", 28, 1)
    assert q[29:] == b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)


def test_addresses_with_compression_and_the_smallest_ttl():
    msg = response(7, "app.test", dns.A, [(b"\xc0\x0c", dns.A, 30, bytes([10, 0, 0, 2])),
                                          (b"\xc0\x0c", dns.A, 5, bytes([10, 0, 0, 1]))])
    a = dns.parse_response(msg, 7, "APP.test", dns.A)
    assert (a.rcode, a.addresses, a.ttl, a.truncated) == (0, ["10.0.0.2", "10.0.0.1"], 5, False)


def test_a_cname_chain_is_followed_and_its_ttl_counts():
    cname = dns.encode_name("pods.test")
    msg = response(1, "www.test", dns.AAAA, [
        ("www.test", dns.CNAME, 3, cname),
        ("pods.test", dns.AAAA, 60, bytes(15) + b"\x01"),
        ("other.test", dns.AAAA, 60, bytes(15) + b"\x02"),   # not on the chain
    ])
    a = dns.parse_response(msg, 1, "www.test", dns.AAAA)
    assert (a.addresses, a.ttl) == (["::1"], 3)


def test_a_cname_loop_ends_without_addresses():
    msg = response(1, "a.test", dns.A, [("a.test", dns.CNAME, 3, dns.encode_name("b.test")),
                                        ("b.test", dns.CNAME, 3, dns.encode_name("a.test"))])
    assert dns.parse_response(msg, 1, "a.test", dns.A).addresses == []


@pytest.mark.parametrize("mutate, why", [
    (lambda m: m[:2] + b"\x99\x99"[:0] + m[2:], None),          # itself: accepted
    (lambda m: b"\x00\x08" + m[2:], "not the answer"),          # another id
    (lambda m: m[:2] + b"\x01\x00" + m[4:], "not the answer"),  # a query, not a response
    (lambda m: m.replace(b"\x03app", b"\x03apq"), "another question"),
    (lambda m: m[:-2], "runs past"),
    (lambda m: m[:11], "shorter than a header"),
])
def test_answers_that_are_not_ours_are_refused(mutate, why):
    msg = response(7, "app.test", dns.A, [(b"\xc0\x0c", dns.A, 30, bytes([10, 0, 0, 2]))])
    if why is None:
        assert dns.parse_response(mutate(msg), 7, "app.test", dns.A).addresses == ["10.0.0.2"]
    else:
        with pytest.raises(dns.DnsError, match=why):
            dns.parse_response(mutate(msg), 7, "app.test", dns.A)


def test_a_compression_pointer_loop_is_refused():
    msg = response(7, "app.test", dns.A, [(b"\xc0\x1a", dns.A, 30, bytes(4))])
    # the record's owner points at itself (offset 26 = where it starts)
    assert msg[26:28] == b"\xc0\x1a"
    with pytest.raises(dns.DnsError, match="loop"):
        dns.parse_response(msg, 7, "app.test", dns.A)


def test_random_damage_raises_only_dns_error():
    """The parser's contract under damage: an Answer or DnsError, nothing
    else (a Python parser: this stands in for a libFuzzer target)."""
    rnd = random.Random(20261205)
    base = response(9, "www.app.test", dns.A, [
        (b"\xc0\x0c", dns.CNAME, 3, b"\x04pods\xc0\x10"),
        (b"\x04pods\xc0\x10", dns.A, 9, bytes([10, 1, 2, 3])),
    ])
    for _ in range(20000):
        m = bytearray(base)
        for _ in range(rnd.randint(1, 4)):
            op = rnd.random()
            if op < 0.6 and m:
                m[rnd.randrange(len(m))] = rnd.randrange(256)
            elif op < 0.8 and m:
                del m[rnd.randrange(len(m)):]
            else:
                m.insert(rnd.randrange(len(m) + 1), rnd.randrange(256))
        try:
            dns.parse_response(bytes(m), 9, "www.app.test", dns.A)
        except dns.DnsError:
            pass


def test_search_rules_follow_ndots():
    s = dns.Settings(search=["ns.svc.cluster.local", "svc.cluster.local"], ndots=5)
    assert dns.candidates("api", s) == ["api.ns.svc.cluster.local", "api.svc.cluster.local",
                                        "api"]
    assert dns.candidates("api.example.com.", s) == ["api.example.com"]
    s.ndots = 1
    assert dns.candidates("api.example.com", s)[0] == "api.example.com"


def test_resolv_conf(tmp_path):
    p = tmp_path / "resolv.conf"
    p.write_text("# kubelet\nnameserver 10.96.0.10\nnameserver fe80::1%eth0\nnameserver x\n"
                 "search ns.svc.cluster.local svc.cluster.local\n"
                 "options ndots:5 timeout:3 attempts:9 rotate\n")
    c = dns.read_resolv_conf(str(p))
    assert c["nameservers"] == [("10.96.0.10", 53), ("fe80::1", 53)]
    assert c["search"] == ["ns.svc.cluster.local", "svc.cluster.local"]
    assert (c["ndots"], c["timeout"], c["attempts"]) == (5, 3.0, 5)
    assert dns.read_resolv_conf(str(tmp_path / "none"))["nameservers"] == [("127.0.0.1", 53)]


def test_hosts_file_is_read_first_and_again_when_it_changes(tmp_path):
    p = tmp_path / "hosts"
    p.write_text("127.0.0.1 localhost\n10.0.0.5 app.local app # comment\n::1 app\n")
    s = dns.Settings(nameservers=[("127.0.0.1", 9)], hosts=str(p))
    lk = dns.Lookup("App", s, 0.0)
    assert lk.result == ("ok", ["10.0.0.5", "::1"], None) and lk.sock is None
    p.write_text("10.0.0.6 app\n# longer than before\n")
    assert dns.Lookup("app", s, 0.0).result == ("ok", ["10.0.0.6"], None)
    s.ipv6 = False
    p.write_text("::1 v6only\n")
    assert dns.Lookup("v6only", s, 0.0).result is None   # asks DNS instead


def test_a_silent_nameserver_fails_after_every_try(tmp_path):
    """A UDP socket that never answers: each nameserver tried `attempts`
    times, then ("fail", why)."""
    import socket
    hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hole.bind(("127.0.0.1", 0))
    s = dns.Settings(nameservers=[("127.0.0.1", hole.getsockname()[1])], timeout=0.1,
                     attempts=2, hosts=str(tmp_path / "none"))
    try:
        assert dns.resolve("x.test", s) == ("fail", "127.0.0.1: timed out")
        # A and AAAA, twice
        hole.settimeout(0)
        got = 0
        while True:
            try:
                hole.recv(512)
                got += 1
            except BlockingIOError:
                break
        assert got == 4
    finally:
        hole.close()


def test_sorted_addresses_are_one_order_for_every_process():
    assert dns.sort_addresses(["::1", "10.0.0.10", "10.0.0.9", "10.0.0.9"]) == \
        ["10.0.0.9", "10.0.0.10", "::1"]


# --------------------------------------------------------------------------
# resolver: in the file

BASE = """
sites:
  - listen: "127.0.0.1:8080"
    routes: [{path: /, respond: {body: ok}}]
"""


def test_resolver_keys():
    cfg = load_config_text(BASE + """
resolver:
  nameservers: ["10.96.0.10", "[fd00::a]:5353"]
  min_interval: 500ms
  max_interval: 1m
  timeout: 1s
  attempts: 3
  ipv6: off
""")
    r = cfg.resolver
    assert r.nameservers == [("10.96.0.10", 53), ("fd00::a", 5353)]
    assert (r.min_interval, r.max_interval, r.timeout, r.attempts, r.ipv6, r.enabled) == \
        (0.5, 60.0, 1.0, 3, False, True)


@pytest.mark.parametrize("text, message", [
    ("resolver: 3", "resolver: expected off, on or a mapping"),
    ("resolver: {nameservers: [dns.local]}",
     "resolver.nameservers[0]: 'dns.local' is not an IP address"),
    ("resolver: {nameservers: []}", "resolver.nameservers: expected a list of addresses"),
    ("resolver: {min_interval: 10s, max_interval: 5s}",
     "resolver.min_interval: min_interval (10s) is longer than max_interval (5s)"),
    ("resolver: {attempts: 0}", "resolver.attempts"),
    ("resolver: {ttl: 5}", "resolver.ttl: unknown key 'ttl'"),
])
def test_resolver_problems(text, message):
    with pytest.raises(ConfigError) as info:
        load_config_text(BASE + text + "\n", "F")
    assert message in str(info.value)
    assert "F:" in str(info.value)


def test_nameserver_forms():
    assert _nameserver("127.0.0.1:5353") == ("127.0.0.1", 5353)
    assert _nameserver("::1") == ("::1", 53)
    assert _nameserver("[::1]:54") == ("::1", 54)
    with pytest.raises(ValueError):
        _nameserver("127.0.0.1:0")


def test_a_truncated_answer_is_asked_again_over_tcp(tmp_path):
    """More addresses than a UDP answer carries (a headless Service of many
    pods): the truncated answer is asked again over TCP, and all come."""
    from tests.e2e.upstreams.dnsserver import DnsServer
    d = DnsServer().start()
    try:
        addrs = [f"10.9.{i // 250}.{i % 250 + 1}" for i in range(300)]
        d.set("big.test", addrs)
        d.udp_max = 10
        s = dns.Settings(nameservers=[("127.0.0.1", d.port)], timeout=2.0,
                         hosts=str(tmp_path / "none"))
        ok, got, ttl = dns.resolve("big.test", s)
        assert ok == "ok" and got == dns.sort_addresses(addrs) and ttl == 1
        assert d.tcp_queries == 2                 # A and AAAA, after their UDP answers
    finally:
        d.stop()
