"""`cache_zones.NAME.peers` in the file (directives/cache_peers.py) and
machine.local_addresses; the peers at work are tests/e2e/test_cache_peers.py."""
import pytest

from scalws.config import machine
from scalws.config.errors import ConfigError
from scalws.config.loader import load_config_text

SECRET = "s3cret-s3cret-s3cret"


def text(peers, listen="127.0.0.1:8081"):
    return f"""
cache_zones:
  z:
    max_size: 1m
    peers: {peers}
sites:
  - listen: "{listen}"
    routes:
      - {{path: /, proxy: {{url: "http://127.0.0.1:9", cache: {{zone: z}}}}}}
"""


def test_peers_make_a_hash_group_and_find_this_node():
    cfg = load_config_text(text(f'{{servers: ["127.0.0.1:8081", "127.0.0.1:8082"], '
                                f'secret: "{SECRET}"}}'), "F")
    p = cfg.cache_zones["z"].peers
    g = cfg.upstreams[p.upstream]
    assert (p.upstream, p.secret, g.balance) == ("peers:z", SECRET, "hash")
    assert [s.port for s in g.servers] == [8081, 8082]
    assert g.self_ports == [8081] and "127.0.0.1" in g.self_hosts
    assert not cfg.warnings


def test_self_names_this_node_and_a_secret_file(tmp_path):
    f = tmp_path / "secret"
    f.write_text(SECRET + "\n")
    f.chmod(0o600)
    cfg = load_config_text(text(f'{{servers: ["10.0.0.1:80", "10.0.0.2:80"], '
                                f'secret_file: "{f}", self: "10.0.0.2:80"}}'), "F")
    g = cfg.upstreams["peers:z"]
    assert (g.self_hosts, g.self_ports) == (["10.0.0.2"], [80])
    assert cfg.cache_zones["z"].peers.secret == SECRET


def test_a_node_that_is_none_of_the_peers_is_warned_about():
    cfg = load_config_text(text(f'{{servers: ["10.0.0.1:80"], secret: "{SECRET}"}}'), "F")
    assert any("none of the servers is this node" in str(w) for w in cfg.warnings)


@pytest.mark.parametrize("peers, message", [
    ('{servers: ["127.0.0.1:1"]}', "expected one of secret or secret_file"),
    ('{servers: ["127.0.0.1:1"], secret: "short"}', "at least 16 printable characters"),
    ('{servers: ["127.0.0.1:1"], secret: "with spaces inside it"}', "without spaces"),
    (f'{{secret: "{SECRET}"}}', "peers.servers: required key is missing"),
    (f'{{servers: ["https://127.0.0.1:1"], secret: "{SECRET}"}}',
     "peers are HOST:PORT addresses of their plain HTTP listeners"),
    (f'{{servers: ["unix:/run/a.sock"], secret: "{SECRET}"}}', "plain HTTP listeners"),
    (f'{{servers: ["127.0.0.1:1"], secret: "{SECRET}", secret_file: /x}}',
     "expected one of secret or secret_file"),
    ('{servers: ["127.0.0.1:1"], secret_file: /nonexistent/s}', "cannot read /nonexistent/s"),
    ("[a]", "expected a mapping with servers and secret"),
])
def test_peer_problems(peers, message):
    with pytest.raises(ConfigError) as info:
        load_config_text(text(peers), "F")
    assert message in str(info.value) and "cache_zones.z.peers" in str(info.value)


def test_local_addresses(tmp_path):
    fib = tmp_path / "fib_trie"
    fib.write_text("""Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 10.1.2.3
        /32 host LOCAL
     |-- 10.1.2.255
        /32 link BROADCAST
Local:
     |-- 127.0.0.1
        /32 host LOCAL
     |-- 10.1.2.3
        /32 host LOCAL
""")
    v6 = tmp_path / "if_inet6"
    v6.write_text("00000000000000000000000000000001 01 80 10 80       lo\n"
                  "fd000000000000000000000000000002 02 40 00 80     eth0\n")
    assert machine.local_addresses(str(fib), str(v6)) == ["10.1.2.3", "127.0.0.1", "::1",
                                                           "fd00::2"]


def test_a_peers_name_that_does_not_resolve_yet_waits(monkeypatch):
    """A headless Service before its first pod is ready: a warning, and a
    placeholder the master asks again (control/resolver.py), not an error
    as for an upstream."""
    from scalws.config.directives import upstreams
    from scalws.control import resolver
    monkeypatch.setattr(upstreams.dns, "resolve", lambda host, settings: ("fail", "no such name"))
    monkeypatch.setattr(upstreams.socket, "getaddrinfo", lambda *a, **k: [])
    cfg = load_config_text(text(f'{{servers: ["pods.web.svc:8081"], secret: "{SECRET}"}}'), "F")
    g = cfg.upstreams["peers:z"]
    assert [(s.host, s.resolve, s.port) for s in g.servers] == [("", "pods.web.svc", 8081)]
    assert any("'pods.web.svc' does not resolve yet (no such name)" in str(w)
               for w in cfg.warnings)
    assert resolver.names(cfg) == {"pods.web.svc": ["peers:z"]}
    assert resolver.apply(cfg, "pods.web.svc", ["10.0.0.2", "10.0.0.1"]) == ["peers:z"]
    assert [(s.host, s.port) for s in g.servers] == [("10.0.0.2", 8081), ("10.0.0.1", 8081)]
    # an upstream's name that does not resolve is still an error
    with pytest.raises(ConfigError, match="cannot resolve 'pods.web.svc'"):
        load_config_text(text(f'{{servers: ["127.0.0.1:1"], secret: "{SECRET}"}}')
                         .replace('url: "http://127.0.0.1:9"', 'url: "http://pods.web.svc:9"'), "F")
