"""The config half of the reverse proxy (scalws/config/directives/proxy.py and upstreams.py,
the loader's `upstreams` and `trusted_proxies`): each accepted form, and each
problem with its exact message and FILE:LINE:COLUMN position.

Sample files are inline; in expected problem lines the file is shown as F.
Name resolution goes through upstreams.socket.getaddrinfo: the tests that need a
particular answer (several addresses, a failure) replace it (the `addresses`
fixture, tests/unit/conftest.py); "localhost" is resolved for real (from
/etc/hosts). Helpers: tests/unit/proxyconfiglib.py.
"""
import os
import subprocess
import sys
import textwrap

import pytest

from scalws.config.directives import upstreams
from scalws.config.loader import load_config
from scalws.config.model import Health, Proxy, Upstream, UpstreamServer
from tests.unit.proxyconfiglib import (G, GROUP_HEAD, P, ROOT, ROUTE_HEAD, flow, group_problem,
                                       group_text, load_group, load_proxy, one, problems_of,
                                       route_problem, route_text, write)

# TLS to upstreams: test_proxy_tls_config.py

# --------------------------------------------------------------------------
# The proxy route: accepted forms

def test_proxy_defaults(tmp_path):
    p, cfg = load_proxy(tmp_path, "upstream: api\n")
    assert p == Proxy(upstream="api")
    assert (p.path_prefix, p.strip_prefix, p.host) == ("", "", None)
    assert (p.connect_timeout, p.read_timeout, p.send_timeout) == (5.0, 60.0, 60.0)
    assert (p.retries, p.buffer_size) == (1, 64 << 10)
    assert (p.request_headers, p.response_headers) == ([], [])
    assert list(cfg.upstreams) == ["api", "web"]       # no implicit group


def test_proxy_every_key(tmp_path):
    p, cfg = load_proxy(tmp_path, """\
        url: "http://127.0.0.1:3000/v1/"
        strip_prefix: /api
        host: example.com
        connect_timeout: 2s
        read_timeout: 1m
        send_timeout: 500ms
        retries: 0
        headers:
          request: {set: {X-A: "1", X-Version: 1.0}, remove: [X-B]}
          response: {set: {X-C: "2"}, remove: [X-Powered-By, Server]}
        buffer_size: 16k
        """)
    assert p == Proxy(upstream="url:127.0.0.1:3000", path_prefix="/v1/",
                      strip_prefix="/api", host="example.com", connect_timeout=2.0,
                      read_timeout=60.0, send_timeout=0.5, retries=0,
                      request_headers=[("X-A", "1"), ("X-Version", "1.0"), ("X-B", None)],
                      response_headers=[("X-C", "2"), ("X-Powered-By", None),
                                        ("Server", None)],
                      buffer_size=16 << 10)
    group = cfg.upstreams["url:127.0.0.1:3000"]
    assert group == Upstream(name="url:127.0.0.1:3000", mark=group.mark, servers=[
        UpstreamServer(address="127.0.0.1:3000", host="127.0.0.1", port=3000,
                       mark=group.mark)])
    assert group.mark[1:] == (9, 16)


def test_shorthand_name(tmp_path):
    cfg = load_config(write(tmp_path, flow("web", "upstreams: {web: {servers: ['10.0.0.1:80']}}\n")))
    assert cfg.sites[0].routes[0].handler == Proxy(upstream="web")


@pytest.mark.parametrize("url, name, prefix, server", [
    ("http://127.0.0.1:3000/v1/", "url:127.0.0.1:3000", "/v1/", ("tcp", "127.0.0.1", 3000, "")),
    ("http://127.0.0.1:3000/v1", "url:127.0.0.1:3000", "/v1", ("tcp", "127.0.0.1", 3000, "")),
    ("http://127.0.0.1:3000", "url:127.0.0.1:3000", "", ("tcp", "127.0.0.1", 3000, "")),
    ("http://127.0.0.1:3000/", "url:127.0.0.1:3000", "", ("tcp", "127.0.0.1", 3000, "")),
    ("http://127.0.0.1", "url:127.0.0.1:80", "", ("tcp", "127.0.0.1", 80, "")),
    ("HTTP://10.1.2.3:8080/x/y", "url:10.1.2.3:8080", "/x/y", ("tcp", "10.1.2.3", 8080, "")),
    ("http://[::1]:3000", "url:[::1]:3000", "", ("tcp", "::1", 3000, "")),
    ("http://[0:0::1]:3000/a/", "url:[0:0::1]:3000", "/a/", ("tcp", "::1", 3000, "")),
    ("http://[::1]", "url:[::1]:80", "", ("tcp", "::1", 80, "")),
    ("unix:/run/app.sock", "url:unix:/run/app.sock", "", ("unix", "", 0, "/run/app.sock")),
])
def test_url_forms(tmp_path, url, name, prefix, server):
    for value in (f'"{url}"', f'{{url: "{url}"}}'):     # shorthand and key
        cfg = load_config(write(tmp_path, flow(value)))
        assert cfg.sites[0].routes[0].handler == Proxy(upstream=name, path_prefix=prefix)
        assert list(cfg.upstreams) == [name]
        (s,) = cfg.upstreams[name].servers
        assert (s.kind, s.host, s.port, s.path) == server
        assert s.address == name[len("url:"):]


def test_url_unix_relative_to_the_config(tmp_path):
    cfg = load_config(write(tmp_path, flow('"unix:run/app.sock"')))
    path = str(tmp_path / "run/app.sock")
    assert cfg.sites[0].routes[0].handler.upstream == f"url:unix:{path}"
    assert cfg.upstreams[f"url:unix:{path}"].servers[0].path == path


def test_url_group_is_shared_by_routes(tmp_path):
    cfg = load_config(write(tmp_path, textwrap.dedent("""\
        sites:
          - listen: 80
            routes:
              - {path: /a/, proxy: "http://127.0.0.1:3000/a/"}
              - {path: /b/, proxy: {url: "http://127.0.0.1:3000"}}
              - {path: /c/, proxy: "http://127.0.0.1:3001"}
        """)))
    routes = cfg.sites[0].routes
    assert [r.handler.upstream for r in routes] == \
        ["url:127.0.0.1:3000", "url:127.0.0.1:3000", "url:127.0.0.1:3001"]
    assert [r.handler.path_prefix for r in routes] == ["/a/", "", ""]
    assert list(cfg.upstreams) == ["url:127.0.0.1:3000", "url:127.0.0.1:3001"]
    group = cfg.upstreams["url:127.0.0.1:3000"]
    assert (group.balance, group.keepalive, group.health) == ("round_robin", 32, None)
    assert group.mark[1:] == (4, 28)                    # the first route's url


def test_url_with_a_name_is_resolved(tmp_path, addresses):
    addresses["app.internal"] = ["10.0.0.5", "fd00::5"]
    cfg = load_config(write(tmp_path, flow('"http://app.internal:8000/"')))
    assert cfg.sites[0].routes[0].handler.upstream == "url:app.internal:8000"
    servers = cfg.upstreams["url:app.internal:8000"].servers
    assert [(s.address, s.host, s.port) for s in servers] == \
        [("app.internal:8000", "10.0.0.5", 8000), ("app.internal:8000", "fd00::5", 8000)]


def test_headers_on_both_sides_keep_file_order(tmp_path):
    p, _ = load_proxy(tmp_path, """\
        upstream: api
        headers:
          response:
            remove: X-Powered-By
            set: {Cache-Control: no-store, X-Frame-Options: DENY}
          request:
            set: {X-Real-IP: "1.2.3.4"}
        """)
    assert p.request_headers == [("X-Real-IP", "1.2.3.4")]
    assert p.response_headers == [("Cache-Control", "no-store"),
                                  ("X-Frame-Options", "DENY"), ("X-Powered-By", None)]


def test_upstream_written_after_sites_and_unused_groups(tmp_path):
    cfg = load_config(write(tmp_path, flow(
        "{upstream: late}", "upstreams:\n  late: {servers: ['127.0.0.1:1']}\n"
        "  unused: {servers: ['127.0.0.1:2']}\n")))
    assert cfg.sites[0].routes[0].handler.upstream == "late"
    assert list(cfg.upstreams) == ["late", "unused"]


def test_bench_generator_config_parses(tmp_path):
    """bench/lib/gen_scalws.py's proxy scenario loads, and so does its
    cache-hit scenario's zone `bench` of 256m under `cache_zones`."""
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench/lib/gen_scalws.py"), "proxy",
         "--www", str(tmp_path), "--up-port", "9001"],
        check=True, capture_output=True, text=True).stdout
    cfg = load_config(write(tmp_path, out))
    assert cfg.sites[0].routes[0].handler == Proxy(upstream="up")
    up = cfg.upstreams["up"]
    assert (up.keepalive, [s.address for s in up.servers]) == (64, ["127.0.0.1:9001"])

    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench/lib/gen_scalws.py"), "cache-hit",
         "--www", str(tmp_path), "--up-port", "9001"],
        check=True, capture_output=True, text=True).stdout
    cfg = load_config(write(tmp_path, out))
    cache = cfg.sites[0].routes[0].handler.cache
    assert cache.zone == "bench" and list(cfg.cache_zones) == ["bench"]
    assert cfg.cache_zones[cache.zone].max_size == 256 << 20


# --------------------------------------------------------------------------
# The proxy route: problems

def test_proxy_wrong_type(tmp_path):
    assert one(problems_of(tmp_path, flow("5"))) == (
        "F:4:26: sites[0].routes[0].proxy: expected an upstream name, a URL such as "
        "http://127.0.0.1:3000, or a mapping with upstream or url; got an integer 5")


def test_proxy_needs_upstream_or_url(tmp_path):
    assert route_problem(tmp_path, "retries: 2\n") == \
        f"F:9:11: {P}: expected the key upstream (a group's name) or url (such as " \
        "http://127.0.0.1:3000)"


def test_proxy_upstream_and_url_exclude_each_other(tmp_path):
    assert route_problem(tmp_path, "upstream: api\nurl: http://127.0.0.1:3000\n") == \
        f"F:10:11: {P}.url: upstream and url exclude each other: give one"


def test_proxy_cache_is_compiled_by_the_cache_directive(tmp_path):
    """(tests/unit/test_cache_config.py has the rest.)"""
    cfg = load_config(write(tmp_path, ROUTE_HEAD + "          upstream: api\n"
                            "          cache: {max_size: 256m}\n"))
    assert cfg.sites[0].routes[0].handler.cache.zone == f"route:{tmp_path}/scalws.yaml:10"
    assert route_problem(tmp_path, "upstream: api\ncache: 5\n").startswith(
        f"F:10:18: {P}.cache: expected a zone's name, off, or a mapping")


@pytest.mark.parametrize("key, hint", [
    ("upstreams", "upstream"), ("strip_prefx", "strip_prefix"), ("read_timout", "read_timeout"),
    ("header", "headers"), ("retry", "retries"), ("URL", "url"),
])
def test_proxy_unknown_key_did_you_mean(tmp_path, key, hint):
    assert route_problem(tmp_path, f"upstream: api\n{key}: 1\n") == \
        f"F:10:11: {P}.{key}: unknown key '{key}'; did you mean '{hint}'?"


def test_unknown_upstream_did_you_mean(tmp_path):
    assert route_problem(tmp_path, "upstream: apj\n") == \
        f"F:9:21: {P}.upstream: unknown upstream 'apj'; did you mean 'api'?"
    assert one(problems_of(tmp_path, flow("Web", "upstreams: {web: {servers: ['127.0.0.1:1']}}\n"))) == \
        "F:4:26: sites[0].routes[0].proxy: unknown upstream 'Web'; did you mean 'web'?"


def test_unknown_upstream_lists_the_groups(tmp_path):
    assert route_problem(tmp_path, "upstream: zzz\n") == \
        f"F:9:21: {P}.upstream: unknown upstream 'zzz' (upstreams: api, web)"


def test_unknown_upstream_when_none_is_defined(tmp_path):
    assert one(problems_of(tmp_path, flow("api"))) == (
        "F:4:26: sites[0].routes[0].proxy: unknown upstream 'api': no upstreams are "
        "defined (add it under the top-level key upstreams)")


def test_a_bad_group_is_not_also_unknown(tmp_path):
    """A route naming a group whose definition is refused gets no second error."""
    assert one(problems_of(tmp_path, flow("api", "upstreams:\n  api: {servers: []}\n"))) == \
        "F:6:18: upstreams.api.servers: expected at least one server"


@pytest.mark.parametrize("value, message", [
    ("127.0.0.1:3000", "'127.0.0.1:3000' is not an upstream name (letters, digits, '_', "
     "'.' and '-'); for an address write a URL, as http://127.0.0.1:3000"),
    ("'my api'", "'my api' is not an upstream name (letters, digits, '_', '.' and '-')"),
    ("''", "must not be empty"),
])
def test_bad_upstream_names(tmp_path, value, message):
    assert one(problems_of(tmp_path, flow(value))) == \
        f"F:4:26: sites[0].routes[0].proxy: {message}"


def test_upstream_wrong_type(tmp_path):
    assert route_problem(tmp_path, "upstream: [api]\n") == \
        f"F:9:21: {P}.upstream: expected a string, got a list"


@pytest.mark.parametrize("url, message", [
    ("https://127.0.0.1:3000/?x", "a proxy url has no query string or fragment"),
    ("ftp://127.0.0.1:21", "the scheme 'ftp' is not supported: expected http://, "
     "https:// or unix:"),
    ("api", "expected a URL such as http://127.0.0.1:3000 or unix:/run/app.sock, got "
     "'api'; for an upstream group write upstream: api"),
    ("/srv/app", "expected a URL such as http://127.0.0.1:3000 or unix:/run/app.sock, "
     "got '/srv/app'"),
    ("http://127.0.0.1:3000/a?b=1", "a proxy url has no query string or fragment"),
    ("http://127.0.0.1:3000/#top", "a proxy url has no query string or fragment"),
    ("http://user:pw@127.0.0.1:3000", "a proxy url has no user name or password"),
    ("http:///x", "expected a host after 'http://'"),
    ("http://127.0.0.1:0", "port must be between 1 and 65535, got 0"),
    ("http://127.0.0.1:99999", "port must be between 1 and 65535, got 99999"),
    ("http://127.0.0.1:http", "'http' is not a port number"),
    ("http://::1:3000", "an IPv6 address goes in brackets, as in [::1]:3000"),
    ("http://[::1:3000", "missing ']' after the IPv6 address in '[::1:3000'"),
    ("http://[::g]:3000", "'::g' is not an IPv6 address"),
    ("http://300.1.1.1:80", "'300.1.1.1' is not an IPv4 address"),
    ("http://bad_host!:80", "'bad_host!' is not a valid host name"),
    ("http://127.0.0.1:3000/a b", "must not contain whitespace"),
    ("unix:", "expected a socket path after 'unix:'"),
])
def test_url_problems(tmp_path, url, message):
    assert route_problem(tmp_path, f'url: "{url}"\n') == f"F:9:16: {P}.url: {message}"


def test_url_unix_path_too_long(tmp_path):
    sock = "/run/" + "s" * 120
    assert route_problem(tmp_path, f"url: unix:{sock}\n") == (
        f"F:9:16: {P}.url: the socket path {sock} is longer than 107 bytes (the limit "
        "of a unix socket address)")


def test_url_name_that_does_not_resolve(tmp_path, addresses):
    assert one(problems_of(tmp_path, flow('"http://nosuch.internal:80"'))) == (
        "F:4:26: sites[0].routes[0].proxy: cannot resolve 'nosuch.internal': "
        "no such name")


@pytest.mark.parametrize("body, where, message", [
    ("strip_prefix: api", "10:25", "strip_prefix: must start with '/', got 'api'"),
    ("strip_prefix: ''", "10:25", "strip_prefix: must not be empty"),
    ("strip_prefix: '/a b'", "10:25", "strip_prefix: must not contain whitespace"),
    ("host: ''", "10:17", "host: must not be empty"),
    ("host: 'a b'", "10:17", "host: must not contain whitespace"),
    ('host: "a\\r\\nX-Evil: 1"', "10:17", "host: must not contain CR or LF"),
    ("host: [a]", "10:17", "host: expected a string, got a list"),
    ("connect_timeout: 0", "10:28", "connect_timeout: must be more than 0, got 0"),
    ("read_timeout: fast", "10:25", "read_timeout: expected a duration such as 10s or "
     "500ms, got a string 'fast'"),
    ("send_timeout: 5M", "10:25", "send_timeout: expected a duration such as 10s or "
     "500ms, got a string '5M'"),
    ("retries: -1", "10:20", "retries: must be between 0 and 100, got -1"),
    ("retries: two", "10:20", "retries: expected an integer, got a string 'two'"),
    ("buffer_size: 1k", "10:24", "buffer_size: must be between 4k and 16m, got 1k"),
    ("buffer_size: 32m", "10:24", "buffer_size: must be between 4k and 16m, got 32m"),
    ("buffer_size: 1.5m", "10:24", "buffer_size: expected a size such as 16k or 10m, "
     "got a string '1.5m'"),
])
def test_proxy_value_problems(tmp_path, body, where, message):
    assert route_problem(tmp_path, f"upstream: api\n{body}\n") == f"F:{where}: {P}.{message}"


@pytest.mark.parametrize("headers, where, message", [
    ("{request: {set: {'X A': 1}}}", "10:37", "headers.request.set.X A: 'X A' is not a "
     "valid header name (letters, digits and !#$%&'*+-.^_`|~ only)"),
    ("{request: {set: {X-A: \"1\\r\\nX-B: 2\"}}}", "10:42",
     "headers.request.set.X-A: must not contain CR or LF"),
    ("{request: {set: {X-A: \"a\\0b\"}}}", "10:42",
     "headers.request.set.X-A: must not contain NUL"),
    ("{request: {set: {X-A: null}}}", "10:42",
     "headers.request.set.X-A: expected a string, got null"),
    ("{request: {set: {Host: example.com}}}", "10:37", "headers.request.set.Host: header "
     "'Host' is managed by the proxy and cannot be set or removed: use proxy.host"),
    ("{request: {remove: [host]}}", "10:40", "headers.request.remove[0]: header 'host' is "
     "managed by the proxy and cannot be set or removed: use proxy.host"),
    ("{request: {set: {Connection: close}}}", "10:37", "headers.request.set.Connection: "
     "header 'Connection' is managed by the proxy and cannot be set or removed: "
     "hop-by-hop headers are handled by the proxy"),
    ("{response: {remove: [Keep-Alive]}}", "10:41", "headers.response.remove[0]: header "
     "'Keep-Alive' is managed by the proxy and cannot be set or removed: hop-by-hop "
     "headers are handled by the proxy"),
    ("{response: {remove: [Transfer-Encoding]}}", "10:41", "headers.response.remove[0]: "
     "header 'Transfer-Encoding' is managed by the proxy and cannot be set or removed: "
     "the proxy chooses the framing"),
    ("{request: {set: {content-length: 5}}}", "10:37", "headers.request.set.content-length: "
     "header 'content-length' is managed by the proxy and cannot be set or removed: the "
     "proxy chooses the framing"),
    ("{request: {remove: [TE]}}", "10:40", "headers.request.remove[0]: header 'TE' "
     "is managed by the proxy and cannot be set or removed: hop-by-hop headers are "
     "handled by the proxy"),
    ("{response: {set: {Upgrade: h2c}}}", "10:38", "headers.response.set.Upgrade: header "
     "'Upgrade' is managed by the proxy and cannot be set or removed: hop-by-hop headers "
     "are handled by the proxy"),
    ("{response: {set: {Host: x}}}", "10:38", "headers.response.set.Host: header 'Host' is "
     "managed by the proxy and cannot be set or removed: Host is a request header"),
    ("{request: {set: {X-A: 1, x-a: 2}}}", "10:45", "headers.request.set.x-a: header 'x-a' "
     "is already listed as 'X-A' (line 10; names are case-insensitive)"),
    ("{request: {set: {X-A: 1}, remove: [X-a]}}", "10:55", "headers.request.remove[0]: "
     "header 'X-a' is already listed as 'X-A' (line 10; names are case-insensitive)"),
    ("{request: {remove: 5}}", "10:39", "headers.request.remove: expected a list of "
     "header names, got an integer 5"),
    ("{request: {remove: [5]}}", "10:40", "headers.request.remove[0]: expected a string, "
     "got an integer 5"),
    ("{request: {set: [X-A]}}", "10:36", "headers.request.set: expected a mapping, got a list"),
    ("{request: {add: {X-A: 1}}}", "10:31", "headers.request.add: unknown key 'add' "
     "(known keys: set, remove)"),
    ("{requests: {}}", "10:21", "headers.requests: unknown key 'requests'; did you mean "
     "'request'?"),
    ("[X-A]", "10:20", "headers: expected a mapping, got a list"),
])
def test_header_problems(tmp_path, headers, where, message):
    assert route_problem(tmp_path, f"upstream: api\nheaders: {headers}\n") == \
        f"F:{where}: {P}.{message}"


def test_every_problem_in_one_pass(tmp_path):
    assert problems_of(tmp_path, route_text("""\
        upstream: nope
        strip_prefix: api
        retries: -2
        buffer_size: 1g
        """)) == [
        f"F:9:21: {P}.upstream: unknown upstream 'nope' (upstreams: api, web)",
        f"F:10:25: {P}.strip_prefix: must start with '/', got 'api'",
        f"F:11:20: {P}.retries: must be between 0 and 100, got -2",
        f"F:12:24: {P}.buffer_size: must be between 4k and 16m, got 1g",
    ]


# --------------------------------------------------------------------------
# upstreams: accepted forms

def test_group_defaults(tmp_path):
    up = load_group(tmp_path, 'servers: ["127.0.0.1:3000"]\n')
    assert up == Upstream(name="api", mark=up.mark, servers=[UpstreamServer(
        address="127.0.0.1:3000", host="127.0.0.1", port=3000, mark=up.servers[0].mark)])
    assert (up.balance, up.hash_key, up.keepalive) == ("round_robin", "client_addr", 32)
    assert (up.keepalive_timeout, up.keepalive_requests, up.health) == (60.0, 1000, None)
    assert up.keepalive_time == 3600.0
    assert up.mark[1:] == (6, 3)
    s = up.servers[0]
    assert (s.kind, s.weight, s.max_fails, s.fail_timeout) == ("tcp", 1, 1, 10.0)
    assert (s.backup, s.max_connections, s.mark[1:]) == (False, 0, (7, 15))


def test_group_every_key(tmp_path, addresses):
    addresses["app.local"] = ["10.0.0.7"]
    up = load_group(tmp_path, """\
        servers:
          - "127.0.0.1:3000"
          - {address: "[::1]:3001", weight: 2, max_fails: 3, fail_timeout: 30s,
             backup: true, max_connections: 100}
          - "unix:/run/app.sock"
          - {address: "app.local:3002", max_fails: 0}
        balance: hash
        hash_key: "header:X-User"
        keepalive: 0
        keepalive_timeout: 2m
        keepalive_requests: 50
        keepalive_time: 90s
        health: {path: /healthz, interval: 10s, timeout: 1s, expect_status: 204,
                 rise: 1, fall: 5, host: example.com}
        """)
    got = [(s.address, s.kind, s.host, s.port, s.path, s.weight, s.max_fails,
            s.fail_timeout, s.backup, s.max_connections, s.mark[1:]) for s in up.servers]
    assert got == [
        ("127.0.0.1:3000", "tcp", "127.0.0.1", 3000, "", 1, 1, 10.0, False, 0, (8, 9)),
        ("[::1]:3001", "tcp", "::1", 3001, "", 2, 3, 30.0, True, 100, (9, 19)),
        ("unix:/run/app.sock", "unix", "", 0, "/run/app.sock", 1, 1, 10.0, False, 0, (11, 9)),
        ("app.local:3002", "tcp", "10.0.0.7", 3002, "", 1, 0, 10.0, False, 0, (12, 19)),
    ]
    assert (up.balance, up.hash_key, up.keepalive) == ("hash", "header:X-User", 0)
    assert (up.keepalive_timeout, up.keepalive_requests, up.keepalive_time) == (120.0, 50, 90.0)
    assert up.health == Health(path="/healthz", interval=10.0, timeout=1.0,
                               expect_status=[(204, 204)], rise=1, fall=5,
                               host="example.com")


def test_localhost_is_resolved(tmp_path):
    """The real resolver: each address of localhost is one server, with the
    options of its entry and the address text as written."""
    up = load_group(tmp_path, 'servers: [{address: "localhost:3002", weight: 5}]\n')
    expected = upstreams.resolve("localhost", 3002)
    assert expected and set(expected) <= {"127.0.0.1", "::1"}
    assert [s.host for s in up.servers] == expected
    assert {(s.address, s.kind, s.port, s.weight) for s in up.servers} == \
        {("localhost:3002", "tcp", 3002, 5)}


def test_a_name_with_several_addresses(tmp_path, addresses):
    addresses["app"] = ["10.0.0.1", "10.0.0.2", "10.0.0.1", "fd00::0:2"]
    up = load_group(tmp_path, """\
        servers:
          - {address: "app:80", weight: 3, backup: true}
          - "127.0.0.1:80"
        """)
    assert [(s.address, s.host, s.weight, s.backup, s.mark[1:]) for s in up.servers] == [
        ("app:80", "10.0.0.1", 3, True, (8, 19)),
        ("app:80", "10.0.0.2", 3, True, (8, 19)),
        ("app:80", "fd00::2", 3, True, (8, 19)),       # repeats dropped, v6 compressed
        ("127.0.0.1:80", "127.0.0.1", 1, False, (9, 9)),
    ]


def test_unix_server_relative_to_the_config(tmp_path):
    up = load_group(tmp_path, 'servers: ["unix:app.sock"]\n')
    assert (up.servers[0].address, up.servers[0].path) == ("unix:app.sock",
                                                           str(tmp_path / "app.sock"))


@pytest.mark.parametrize("value, expected", [
    ("200", [(200, 200)]),
    ('"200"', [(200, 200)]),
    ('"200-399"', [(200, 399)]),
    ('"200 - 204"', [(200, 204)]),
    ("2xx", [(200, 299)]),
    ("3XX", [(300, 399)]),
    ("[200, 204]", [(200, 200), (204, 204)]),
    ('[2xx, "301-302", 404]', [(200, 299), (301, 302), (404, 404)]),
])
def test_health_expect_status(tmp_path, value, expected):
    up = load_group(tmp_path, f'servers: ["127.0.0.1:1"]\nhealth: {{expect_status: {value}}}\n')
    assert up.health == Health(expect_status=expected)


@pytest.mark.parametrize("value, expected", [
    ("true", Health()), ("on", Health()), ('"on"', Health()), ("{}", Health()),
    ("false", None), ("off", None), ('"off"', None),
])
def test_health_on_off(tmp_path, value, expected):
    up = load_group(tmp_path, f'servers: ["127.0.0.1:1"]\nhealth: {value}\n')
    assert up.health == expected


@pytest.mark.parametrize("balance, key, expected", [
    ("round_robin", None, "client_addr"), ("least_conn", None, "client_addr"),
    ("hash", None, "client_addr"), ("hash", "client_addr", "client_addr"),
    ("hash", "uri", "uri"), ("hash", '"header:Cookie"', "header:Cookie"),
])
def test_balance_and_hash_key(tmp_path, balance, key, expected):
    body = f'servers: ["127.0.0.1:1"]\nbalance: {balance}\n'
    if key:
        body += f"hash_key: {key}\n"
    up = load_group(tmp_path, body)
    assert (up.balance, up.hash_key) == (balance, expected)


def test_upstreams_may_be_empty(tmp_path):
    cfg = load_config(write(tmp_path, "upstreams: {}\n" + flow('"http://127.0.0.1:1"')))
    assert list(cfg.upstreams) == ["url:127.0.0.1:1"]


# --------------------------------------------------------------------------
# upstreams: problems

def test_upstreams_not_a_mapping(tmp_path):
    assert one(problems_of(tmp_path, "upstreams: [api]\n" + flow('"http://127.0.0.1:1"'))) == \
        "F:1:12: upstreams: expected a mapping, got a list"


@pytest.mark.parametrize("name", ["'a b'", "'url:x'", "'é'"])
def test_bad_group_name(tmp_path, name):
    text = f"upstreams:\n  {name}: {{servers: ['127.0.0.1:1']}}\n" + flow('"http://127.0.0.1:1"')
    shown = name.strip("'")
    assert one(problems_of(tmp_path, text)) == (
        f"F:2:3: upstreams.{shown}: '{shown}' is not a valid upstream name (letters, "
        "digits, '_', '.' and '-')")


def test_group_not_a_mapping(tmp_path):
    assert one(problems_of(tmp_path, GROUP_HEAD.replace("  api:\n", '  api: ["127.0.0.1:1"]\n'))) == (
        "F:6:8: upstreams.api: expected a mapping with at least servers, such as "
        "{servers: [\"127.0.0.1:3000\"]}; got a list")


def test_group_unknown_key_did_you_mean(tmp_path):
    assert group_problem(tmp_path, 'servers: ["127.0.0.1:1"]\nkeep_alive: 8\n') == \
        f"F:8:5: {G}.keep_alive: unknown key 'keep_alive'; did you mean 'keepalive'?"


def test_group_requires_servers(tmp_path):
    assert group_problem(tmp_path, "balance: least_conn\n") == \
        f"F:7:5: {G}.servers: required key is missing"


@pytest.mark.parametrize("body, where, message", [
    ("servers: []", "7:14", "servers: expected at least one server"),
    ('servers: "127.0.0.1:1"', "7:14", "servers: expected a list of servers, got a string "
     "'127.0.0.1:1'"),
    ("servers: [3000]", "7:15", "servers[0]: expected an address such as 127.0.0.1:3000, "
     "[::1]:3000 or unix:/run/app.sock, or a mapping with address; got an integer 3000"),
    ('servers: ["127.0.0.1"]', "7:15", "servers[0]: expected host:port, got '127.0.0.1' "
     "(the port is missing)"),
    ('servers: [":3000"]', "7:15", "servers[0]: expected host:port, got ':3000' (the host "
     "is missing)"),
    ('servers: ["127.0.0.1:0"]', "7:15", "servers[0]: port must be between 1 and 65535, got 0"),
    ('servers: ["127.0.0.1:65536"]', "7:15",
     "servers[0]: port must be between 1 and 65535, got 65536"),
    ('servers: ["::1:3000"]', "7:15",
     "servers[0]: an IPv6 address goes in brackets, as in [::1]:3000"),
    ('servers: ["[::1]"]', "7:15",
     "servers[0]: expected [address]:port, got '[::1]' (the port is missing)"),
    ('servers: ["1.2.3:80"]', "7:15", "servers[0]: '1.2.3' is not an IPv4 address"),
    ('servers: ["unix:"]', "7:15", "servers[0]: expected a socket path after 'unix:'"),
    ('servers: [""]', "7:15", "servers[0]: must not be empty"),
    ('servers: ["http://127.0.0.1:3000/"]', "7:15",
     "servers[0]: a server is an address, not a URL: write '127.0.0.1:3000'"),
    ('servers: ["https://127.0.0.1:3000/api"]', "7:15", "servers[0]: a server is "
     "https://HOST:PORT, without a path: write 'https://127.0.0.1:3000'"),
    ('servers: ["ftp://127.0.0.1:3000"]', "7:15", "servers[0]: a server is an address "
     "such as 127.0.0.1:3000, not a URL ('ftp://127.0.0.1:3000')"),
    ("servers: [{weight: 2}]", "7:15", "servers[0].address: required key is missing"),
    ("servers: [{address: 5}]", "7:25",
     "servers[0].address: expected a string, got an integer 5"),
    ('servers: [{address: "127.0.0.1:1", wieght: 2}]', "7:40",
     "servers[0].wieght: unknown key 'wieght'; did you mean 'weight'?"),
    ('servers: [{address: "127.0.0.1:1", weight: 0}]', "7:48",
     "servers[0].weight: must be between 1 and 1000, got 0"),
    ('servers: [{address: "127.0.0.1:1", weight: 1001}]', "7:48",
     "servers[0].weight: must be between 1 and 1000, got 1001"),
    ('servers: [{address: "127.0.0.1:1", max_fails: -1}]', "7:51",
     "servers[0].max_fails: must be between 0 and 1000, got -1"),
    ('servers: [{address: "127.0.0.1:1", fail_timeout: 0s}]', "7:54",
     "servers[0].fail_timeout: must be more than 0, got 0s"),
    ('servers: [{address: "127.0.0.1:1", fail_timeout: soon}]', "7:54",
     "servers[0].fail_timeout: expected a duration such as 10s or 500ms, got a string 'soon'"),
    ('servers: [{address: "127.0.0.1:1", backup: maybe}]', "7:48",
     "servers[0].backup: expected on or off, got a string 'maybe'"),
    ('servers: [{address: "127.0.0.1:1", max_connections: -1}]', "7:57",
     "servers[0].max_connections: must be between 0 and 1000000, got -1"),
    ('servers: ["127.0.0.1:1", "127.0.0.1:1"]', "7:30", "servers[1]: 127.0.0.1:1 is already "
     "a server of this group (line 7); give it a weight instead"),
    ('servers: ["[::1]:1", "[0::1]:1"]', "7:26", "servers[1]: [::1]:1 is already a server "
     "of this group (line 7); give it a weight instead"),
    ('servers: [{address: "127.0.0.1:1", backup: on}]', "7:14",
     "servers: every server is a backup: at least one must not be"),
    ('servers: ["127.0.0.1:1"]\nbalance: random', "8:14", "balance: expected one of "
     "round_robin, least_conn, hash; got a string 'random'"),
    ('servers: ["127.0.0.1:1"]\nhash_key: uri', "8:5",
     "hash_key: hash_key applies only with balance: hash (balance is round_robin)"),
    ('servers: ["127.0.0.1:1"]\nbalance: least_conn\nhash_key: uri', "9:5",
     "hash_key: hash_key applies only with balance: hash (balance is least_conn)"),
    ('servers: ["127.0.0.1:1"]\nbalance: hash\nhash_key: cookie', "9:15",
     "hash_key: expected client_addr, uri or header:NAME; got a string 'cookie'"),
    ('servers: ["127.0.0.1:1"]\nbalance: hash\nhash_key: "header:X User"', "9:15",
     "hash_key: 'X User' is not a valid header name (letters, digits and "
     "!#$%&'*+-.^_`|~ only)"),
    ('servers: ["127.0.0.1:1"]\nbalance: hash\nhash_key: "header:"', "9:15",
     "hash_key: '' is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)"),
    ('servers: ["127.0.0.1:1"]\nkeepalive: -1', "8:16",
     "keepalive: must be between 0 and 1000000, got -1"),
    ('servers: ["127.0.0.1:1"]\nkeepalive: on', "8:16",
     "keepalive: expected an integer, got a boolean (on)"),
    ('servers: ["127.0.0.1:1"]\nkeepalive_timeout: 0', "8:24",
     "keepalive_timeout: must be more than 0, got 0"),
    ('servers: ["127.0.0.1:1"]\nkeepalive_requests: 0', "8:25",
     "keepalive_requests: must be between 1 and 2147483647, got 0"),
    ('servers: ["127.0.0.1:1"]\nkeepalive_time: 0', "8:21",
     "keepalive_time: must be more than 0, got 0"),
    ('servers: ["127.0.0.1:1"]\nkeepalive_time: forever', "8:21",
     "keepalive_time: expected a duration such as 10s or 500ms, got a string 'forever'"),
])
def test_group_problems(tmp_path, body, where, message):
    assert group_problem(tmp_path, body + "\n") == f"F:{where}: {G}.{message}"


@pytest.mark.parametrize("health, where, message", [
    ("5s", "8:13", "health: expected on, off or a mapping such as {path: /healthz}; got a "
     "string '5s'"),
    ("{path: healthz}", "8:20", "health.path: must start with '/', got 'healthz'"),
    ("{interval: 0}", "8:24", "health.interval: must be more than 0, got 0"),
    ("{timeout: x}", "8:23", "health.timeout: expected a duration such as 10s or 500ms, "
     "got a string 'x'"),
    ("{rise: 0}", "8:20", "health.rise: must be between 1 and 1000, got 0"),
    ("{fall: 1001}", "8:20", "health.fall: must be between 1 and 1000, got 1001"),
    ("{host: 'a b'}", "8:20", "health.host: must not contain whitespace"),
    ("{paht: /}", "8:14", "health.paht: unknown key 'paht'; did you mean 'path'?"),
    ("{expect_status: 99}", "8:29", "health.expect_status: a status must be between 100 "
     "and 599, got 99"),
    ("{expect_status: 600}", "8:29", "health.expect_status: a status must be between 100 "
     "and 599, got 600"),
    ("{expect_status: 6xx}", "8:29", "health.expect_status: expected a status (200), a "
     "range (\"200-399\"), a class (2xx) or a list of them; got a string '6xx'"),
    ("{expect_status: '200-700'}", "8:29", "health.expect_status: a status must be between "
     "100 and 599, got 200-700"),
    ("{expect_status: '399-200'}", "8:29", "health.expect_status: the range 399-200 is "
     "empty (write the lower status first)"),
    ("{expect_status: []}", "8:29", "health.expect_status: expected at least one status"),
    ("{expect_status: [200, ok]}", "8:35", "health.expect_status[1]: expected a status "
     "(200), a range (\"200-399\"), a class (2xx) or a list of them; got a string 'ok'"),
    ("{expect_status: [[200]]}", "8:30", "health.expect_status[0]: expected a status (200), "
     "a range (\"200-399\"), a class (2xx) or a list of them; got a list"),
    ("{expect_status: true}", "8:29", "health.expect_status: expected a status (200), a "
     "range (\"200-399\"), a class (2xx) or a list of them; got a boolean (true)"),
])
def test_health_problems(tmp_path, health, where, message):
    assert group_problem(tmp_path, f'servers: ["127.0.0.1:1"]\nhealth: {health}\n') == \
        f"F:{where}: {G}.{message}"


def test_server_name_that_does_not_resolve(tmp_path, addresses):
    assert group_problem(tmp_path, 'servers: ["127.0.0.1:1", "nosuch.internal:80"]\n') == (
        f"F:7:30: {G}.servers[1]: cannot resolve 'nosuch.internal': no such name")


def test_resolved_servers_name_what_the_master_asks_again(tmp_path, addresses):
    """Each server from a name carries it (control/resolver.py asks it
    again) and the index of its item (the options it copies)."""
    addresses["app"] = ["10.0.0.2", "10.0.0.1"]
    up = load_group(tmp_path, 'servers: ["127.0.0.1:80", "app:80"]\n')
    assert [(s.host, s.resolve, s.entry) for s in up.servers] == [
        ("127.0.0.1", "", 0), ("10.0.0.1", "app", 1), ("10.0.0.2", "app", 1)]


def test_resolver_off_resolves_once_with_getaddrinfo(tmp_path, monkeypatch):
    def no_dns(host, settings):
        raise AssertionError("the stub resolver was asked")
    monkeypatch.setattr(upstreams.dns, "resolve", no_dns)
    cfg = load_config(write(tmp_path, textwrap.dedent("""\
        resolver: off
        upstreams:
          api: {servers: ["localhost:80"]}
        sites:
          - listen: "127.0.0.1:8080"
            routes: [{path: /, proxy: api}]
        """)))
    assert cfg.upstreams["api"].servers[0].resolve == ""
    assert not cfg.resolver.enabled


def test_a_name_only_getaddrinfo_knows_is_used_once_with_a_warning(tmp_path, monkeypatch,
                                                                   addresses):
    addresses["mdns.local"] = ["10.0.0.9"]
    monkeypatch.setattr(upstreams.dns, "resolve", lambda host, settings: ("fail", "no such name"))
    cfg = load_config(write(tmp_path, textwrap.dedent("""\
        upstreams:
          api: {servers: ["mdns.local:80"]}
        sites:
          - listen: "127.0.0.1:8080"
            routes: [{path: /, proxy: api}]
        """)))
    s = cfg.upstreams["api"].servers[0]
    assert (s.host, s.resolve) == ("10.0.0.9", "")
    assert any("'mdns.local' is known to getaddrinfo() but not to DNS (no such name): "
               "resolved once" in str(w) for w in cfg.warnings), cfg.warnings


def test_server_name_that_is_not_a_host_name(tmp_path):
    assert group_problem(tmp_path, 'servers: ["a..b:80"]\n') == \
        f"F:7:15: {G}.servers[0]: 'a..b' is not a valid host name"


def test_every_group_problem_in_one_pass(tmp_path):
    assert problems_of(tmp_path, group_text("""\
        servers: ["127.0.0.1", {address: "127.0.0.1:2", weight: 0}]
        balance: fastest
        health: {rise: -1}
        """)) == [
        f"F:7:15: {G}.servers[0]: expected host:port, got '127.0.0.1' (the port is missing)",
        f"F:7:61: {G}.servers[1].weight: must be between 1 and 1000, got 0",
        f"F:8:14: {G}.balance: expected one of round_robin, least_conn, hash; got a "
        "string 'fastest'",
        f"F:9:20: {G}.health.rise: must be between 1 and 1000, got -1",
    ]


# --------------------------------------------------------------------------
# trusted_proxies

def test_trusted_proxies(tmp_path):
    cfg = load_config(write(tmp_path, """\
trusted_proxies: ["127.0.0.1/32", "10.1.2.3/8", "::1", 192.168.0.1, "2001:DB8::/32", "fe80::1/10"]
""" + flow('"http://127.0.0.1:1"')))
    assert cfg.trusted_proxies == ["127.0.0.1/32", "10.0.0.0/8", "::1/128",
                                   "192.168.0.1/32", "2001:db8::/32", "fe80::/10"]


def test_trusted_proxies_default_and_single(tmp_path):
    assert load_config(write(tmp_path, flow('"http://127.0.0.1:1"'))).trusted_proxies == []
    cfg = load_config(write(tmp_path, "trusted_proxies: 10.0.0.0/8\n" +
                            flow('"http://127.0.0.1:1"')))
    assert cfg.trusted_proxies == ["10.0.0.0/8"]
    cfg = load_config(write(tmp_path, "trusted_proxies: []\n" + flow('"http://127.0.0.1:1"')))
    assert cfg.trusted_proxies == []


@pytest.mark.parametrize("value, where, message", [
    ("[proxy.local]", "1:19", "trusted_proxies[0]: 'proxy.local' is not an IP address or a "
     "network (such as 10.0.0.0/8 or ::1); names are not accepted"),
    ('["10.0.0.0/33"]', "1:19", "trusted_proxies[0]: '10.0.0.0/33' is not an IP address "
     "or a network (such as 10.0.0.0/8 or ::1); names are not accepted"),
    ("[8]", "1:19", "trusted_proxies[0]: expected a string, got an integer 8"),
    ("{a: 1}", "1:18", "trusted_proxies: expected a list of addresses or networks such as "
     "127.0.0.1 or 10.0.0.0/8; got a mapping"),
    ('["10.0.0.0/8", "10.9.9.9/8"]', "1:33",
     "trusted_proxies[1]: 10.0.0.0/8 is already listed (line 1)"),
])
def test_trusted_proxies_problems(tmp_path, value, where, message):
    text = f"trusted_proxies: {value}\n" + flow('"http://127.0.0.1:1"')
    assert one(problems_of(tmp_path, text)) == f"F:{where}: {message}"


def test_trusted_proxies_did_you_mean(tmp_path):
    text = "trusted_proxy: [127.0.0.1]\n" + flow('"http://127.0.0.1:1"')
    assert one(problems_of(tmp_path, text)) == \
        "F:1:1: trusted_proxy: unknown key 'trusted_proxy'; did you mean 'trusted_proxies'?"


# --------------------------------------------------------------------------

def test_check_config_reports_proxy_problems(tmp_path):
    """scalwsd --check-config prints the proxy problems as FILE:LINE:COL lines."""
    path = write(tmp_path, flow("{upstream: apx}", "upstreams: {api: {servers: ['127.0.0.1:1']}}\n"))
    code = ("import sys; from scalws.config.loader import load_config, ConfigError\n"
            "try:\n    load_config(sys.argv[1])\nexcept ConfigError as e:\n"
            "    print(e); sys.exit(1)\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 1
    assert out.stdout.strip() == (f"{path}:4:37: sites[0].routes[0].proxy.upstream: "
                                  "unknown upstream 'apx'; did you mean 'api'?")
