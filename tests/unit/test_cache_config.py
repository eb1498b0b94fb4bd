"""The config half of the response cache (scalws/config/directives/cache.py):
the top-level `cache_zones` and a proxy or fastcgi route's `cache:`, each
accepted form with the model it compiles to, and each refused value with its
exact message, its FILE:LINE:COLUMN and its key path.

Sample files are inline; in expected problem lines the file is shown as F.
"""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from scalws.config.directives.cache import parse_template
from scalws.config.errors import ConfigError
from scalws.config.loader import load_config
from scalws.config.model import CachePurge, CacheZone, RouteCache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A zone `main`, a group `api`, then one proxy route whose cache mapping's
# keys start at line 12, column 13 (its `cache:` key is at line 11, column 11).
ROUTE_HEAD = """\
cache_zones:
  main: {max_size: 64m, max_object_size: 1m}
upstreams:
  api: {servers: ["127.0.0.1:3000"]}
sites:
  - listen: 80
    routes:
      - path: /
        proxy:
          upstream: api
          cache:
"""
P = "sites[0].routes[0].proxy.cache"

# The same file with `cache_zones` as its only top-level key written so far:
# the zones' keys start at line 2, column 3.
ZONES_TAIL = """\
upstreams:
  api: {servers: ["127.0.0.1:3000"]}
sites:
  - listen: 80
    routes:
      - {path: /, proxy: {upstream: api, cache: main}}
"""


def write(tmp_path, text):
    path = tmp_path / "scalws.yaml"
    path.write_text(text)
    return path


def route_text(body):
    return ROUTE_HEAD + textwrap.indent(textwrap.dedent(body), " " * 12)


def problems_of(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [line.replace(str(path), "F", 1) for line in str(info.value).splitlines()]


def one(lines):
    assert len(lines) == 1, lines
    return lines[0]


def route_problem(tmp_path, body):
    return one(problems_of(tmp_path, route_text(body)))


def load_cache(tmp_path, body):
    cfg = load_config(write(tmp_path, route_text(body)))
    return cfg.sites[0].routes[0].handler.cache, cfg


def mark(tmp_path, line, col):
    return (str(tmp_path / "scalws.yaml"), line, col)


# --------------------------------------------------------------------------
# Accepted forms

def test_every_key(tmp_path):
    rc, cfg = load_cache(tmp_path, """\
        zone: main
        max_object_size: 512k
        key: "$scheme://${host}$uri$is_args$args|$http_Accept_Language|$cookie_sid|$arg_v"
        methods: [GET]
        valid: {200: 10m, "301 308": 1h, any: 5s, 404: 30s}
        bypass: ["$cookie_session", "$arg_nocache$http_x_debug"]
        no_store: $arg_preview
        ignore: [Set-Cookie, expires]
        lock: {timeout: 3s}
        stale: {while_revalidate: 30s, if_error: 10m}
        tag_headers: [X-Tags, Cache-Tag]
        purge: {allow: ["10.1.2.3/8", "::1"]}
        """)
    assert rc == RouteCache(
        zone="main", max_object_size=512 << 10,
        key=[("var", "scheme"), ("lit", "://"), ("var", "host"), ("var", "uri"),
             ("var", "is_args"), ("var", "args"), ("lit", "|"), ("http", "accept-language"),
             ("lit", "|"), ("cookie", "sid"), ("lit", "|"), ("arg", "v")],
        key_text="$scheme://${host}$uri$is_args$args|$http_Accept_Language|$cookie_sid|$arg_v",
        methods=["GET", "HEAD"],
        valid=[(200, 600.0), (301, 3600.0), (308, 3600.0), (404, 30.0), (0, 5.0)],
        bypass=[[("cookie", "session")], [("arg", "nocache"), ("http", "x-debug")]],
        no_store=[[("arg", "preview")]],
        ignore=["set-cookie", "expires"],
        lock=True, lock_timeout=3.0,
        stale_while_revalidate=30.0, stale_if_error=600.0,
        tag_headers=["x-tags", "cache-tag"],
        purge=CachePurge(allow=["10.0.0.0/8", "::1/128"]),
        mark=mark(tmp_path, 11, 11))
    assert cfg.cache_zones == {"main": CacheZone(name="main", max_size=64 << 20,
                                                 max_object_size=1 << 20,
                                                 mark=mark(tmp_path, 2, 3))}
    assert cfg.warnings == []


def test_defaults_with_a_zone(tmp_path):
    rc, _ = load_cache(tmp_path, "zone: main\n")
    assert rc == RouteCache(zone="main", mark=mark(tmp_path, 11, 11))
    assert (rc.key_text, rc.methods, rc.lock, rc.lock_timeout, rc.purge, rc.tag_headers) == \
        ("$scheme$host$request_uri", ["GET", "HEAD"], True, 5.0, None,
         ["cache-tag", "surrogate-key"])


@pytest.mark.parametrize("body, targeted, remove", [
    # RFC 9213: CDN-Cache-Control is on every route's target list by default
    ("", ["cdn-cache-control"], []),
    ("cdn_cache_control: off\n", [], []),
    ("targeted_field: off\n", ["cdn-cache-control"], []),
    # our own field first; removed from responses unless told otherwise
    ("targeted_field: ScalWS-Cache-Control\n", ["scalws-cache-control", "cdn-cache-control"],
     ["scalws-cache-control"]),
    ("targeted_field: ScalWS-Cache-Control\ncdn_cache_control: off\n",
     ["scalws-cache-control"], ["scalws-cache-control"]),
    ("targeted_field: ScalWS-Cache-Control\nremove_targeted: []\n",
     ["scalws-cache-control", "cdn-cache-control"], []),
    ("targeted_field: ScalWS-Cache-Control\nremove_targeted: off\n",
     ["scalws-cache-control", "cdn-cache-control"], []),
    ("targeted_field: ScalWS-Cache-Control\nremove_targeted: [CDN-Cache-Control]\n",
     ["scalws-cache-control", "cdn-cache-control"], ["cdn-cache-control"]),
    ("targeted_field: X-CC\nremove_targeted: [cdn-cache-control, x-cc]\n",
     ["x-cc", "cdn-cache-control"], ["cdn-cache-control", "x-cc"]),
    ("remove_targeted: CDN-Cache-Control\n", ["cdn-cache-control"], ["cdn-cache-control"]),
])
def test_targeted_fields(tmp_path, body, targeted, remove):
    rc, cfg = load_cache(tmp_path, "zone: main\n" + body)
    assert (rc.targeted, rc.targeted_remove) == (targeted, remove)
    assert cfg.warnings == []


def test_a_zone_name_alone(tmp_path):
    cfg = load_config(write(tmp_path, "cache_zones: {main: {max_size: 64m}}\n" + ZONES_TAIL))
    rc = cfg.sites[0].routes[0].handler.cache
    assert rc == RouteCache(zone="main", mark=mark(tmp_path, 7, 42))


@pytest.mark.parametrize("value", ["off", "false", "no", '"off"'])
def test_off_is_no_cache(tmp_path, value):
    cfg = load_config(write(tmp_path, ROUTE_HEAD.replace("cache:\n", f"cache: {value}\n")))
    assert cfg.sites[0].routes[0].handler.cache is None


@pytest.mark.parametrize("body, lock, timeout", [
    ("lock: off", False, 5.0),
    ("lock: on", True, 5.0),
    ("lock: 2s", True, 2.0),
    ("lock: 1.5", True, 1.5),
    ("lock: {}", True, 5.0),
    ("lock: {timeout: 500ms}", True, 0.5),
])
def test_lock_forms(tmp_path, body, lock, timeout):
    rc, _ = load_cache(tmp_path, f"zone: main\n{body}\n")
    assert (rc.lock, rc.lock_timeout) == (lock, timeout)


@pytest.mark.parametrize("body, swr, sie", [
    ("stale: {while_revalidate: 1m}", 60.0, 0.0),
    ("stale: {if_error: 1d}", 0.0, 86400.0),
    ("stale: {}", 0.0, 0.0),
    ("stale: off", 0.0, 0.0),
])
def test_stale_forms(tmp_path, body, swr, sie):
    rc, _ = load_cache(tmp_path, f"zone: main\n{body}\n")
    assert (rc.stale_while_revalidate, rc.stale_if_error) == (swr, sie)


def test_lists_take_a_single_string_and_may_be_empty(tmp_path):
    rc, _ = load_cache(tmp_path, """\
        zone: main
        methods: HEAD
        bypass: $http_authorization
        ignore: vary
        tag_headers: []
        valid: {"200,203 204": 0}
        """)
    assert (rc.methods, rc.bypass, rc.ignore, rc.tag_headers, rc.valid) == (
        ["GET", "HEAD"], [[("http", "authorization")]], ["vary"], [],
        [(200, 0.0), (203, 0.0), (204, 0.0)])


def test_purge_on_relies_on_trusted_proxies(tmp_path):
    text = "trusted_proxies: [127.0.0.1]\n" + route_text("zone: main\npurge: on\n")
    cfg = load_config(write(tmp_path, text))
    assert cfg.sites[0].routes[0].handler.cache.purge == CachePurge(allow=[])
    cfg = load_config(write(tmp_path, text.replace("purge: on", "purge: {}")))
    assert cfg.sites[0].routes[0].handler.cache.purge == CachePurge(allow=[])
    cfg = load_config(write(tmp_path, text.replace("purge: on", "purge: off")))
    assert cfg.sites[0].routes[0].handler.cache.purge is None


# -- zones -----------------------------------------------------------------------

def test_implicit_zone_per_route(tmp_path):
    text = """\
upstreams:
  api: {servers: ["127.0.0.1:3000"]}
sites:
  - listen: 80
    routes:
      - path: /a/
        proxy:
          upstream: api
          cache: {max_size: 2m}
      - path: /b/
        proxy:
          upstream: api
          cache:
            max_size: 1g
            max_object_size: 100m
            key: $host$uri
      - {path: /c/, proxy: {upstream: api, cache: shared}}
cache_zones:
  shared: {max_size: 16m}
"""
    cfg = load_config(write(tmp_path, text))
    f = str(tmp_path / "scalws.yaml")
    a, b, c = (r.handler.cache for r in cfg.sites[0].routes)
    assert (a.zone, b.zone, c.zone) == (f"route:{f}:9", f"route:{f}:13", "shared")
    assert (a.max_object_size, b.max_object_size) == (None, None)
    assert b.key == [("var", "host"), ("var", "uri")]
    # named zones first, then the implicit ones in file order
    assert cfg.cache_zones == {
        "shared": CacheZone(name="shared", max_size=16 << 20, max_object_size=8 << 20,
                            mark=(f, 19, 3)),
        f"route:{f}:9": CacheZone(name=f"route:{f}:9", max_size=2 << 20,
                                  max_object_size=2 << 20, mark=(f, 9, 11)),
        f"route:{f}:13": CacheZone(name=f"route:{f}:13", max_size=1 << 30,
                                   max_object_size=100 << 20, mark=(f, 13, 11)),
    }


def test_implicit_zones_on_one_line(tmp_path):
    text = """\
upstreams: {api: {servers: ["127.0.0.1:3000"]}}
sites:
  - listen: 80
    routes: [{path: /a/, proxy: {upstream: api, cache: {max_size: 1m}}}, {path: /b/, proxy: {upstream: api, cache: {max_size: 1m}}}]
"""
    cfg = load_config(write(tmp_path, text))
    f = str(tmp_path / "scalws.yaml")
    assert list(cfg.cache_zones) == [f"route:{f}:4", f"route:{f}:4:109"]
    assert [r.handler.cache.zone for r in cfg.sites[0].routes] == list(cfg.cache_zones)


def test_zone_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "cache_zones:\n  main:\n  two: {}\n  small: {max_size: 4m}\n"
                            + ZONES_TAIL.replace("cache: main", "cache: main")))
    f = str(tmp_path / "scalws.yaml")
    assert cfg.cache_zones == {
        "main": CacheZone(name="main", mark=(f, 2, 3)),
        "two": CacheZone(name="two", mark=(f, 3, 3)),
        # max_object_size never exceeds the zone
        "small": CacheZone(name="small", max_size=4 << 20, max_object_size=4 << 20,
                           mark=(f, 4, 3)),
    }
    assert [(w.line, w.key_path, w.message) for w in cfg.warnings] == [
        (3, "cache_zones.two", "no route uses the zone 'two'"),
        (4, "cache_zones.small", "no route uses the zone 'small'"),
    ]


def test_fastcgi_route(tmp_path):
    (tmp_path / "www").mkdir()
    text = f"""\
sites:
  - listen: 80
    routes:
      - path: "~ \\\\.php$"
        fastcgi:
          connect: "127.0.0.1:9000"
          root: {tmp_path}/www
          cache:
            zone: php
            valid: {{200: 1m}}
            bypass: $cookie_PHPSESSID
      - path: /
        fastcgi: {{connect: "127.0.0.1:9000", root: www, cache: {{max_size: 8m}}}}
cache_zones:
  php: {{max_size: 32m}}
"""
    cfg = load_config(write(tmp_path, text))
    f = str(tmp_path / "scalws.yaml")
    first, second = (r.handler.cache for r in cfg.sites[0].routes)
    assert first == RouteCache(zone="php", valid=[(200, 60.0)],
                               bypass=[[("cookie", "PHPSESSID")]], mark=(f, 8, 11))
    assert second.zone == f"route:{f}:13"
    assert list(cfg.cache_zones) == ["php", f"route:{f}:13"]


def test_fastcgi_route_problems(tmp_path):
    text = f"""\
sites:
  - listen: 80
    routes:
      - path: /
        fastcgi:
          connect: "127.0.0.1:9000"
          root: {tmp_path}
          cache: {{zone: phq, methods: [POST]}}
cache_zones: {{php: {{}}}}
"""
    assert problems_of(tmp_path, text) == [
        "F:8:25: sites[0].routes[0].fastcgi.cache.zone: unknown cache zone 'phq'; "
        "did you mean 'php'?",
        "F:8:40: sites[0].routes[0].fastcgi.cache.methods[0]: only GET and HEAD responses "
        "are cached, not POST (caching POST is not supported; unsafe methods invalidate "
        "the URL's entries instead)",
    ]


# --------------------------------------------------------------------------
# Templates

@pytest.mark.parametrize("text, parts", [
    ("$request_uri", [("var", "request_uri")]),
    ("$scheme$host$request_uri", [("var", "scheme"), ("var", "host"), ("var", "request_uri")]),
    ("${uri}x-$request_method", [("var", "uri"), ("lit", "x-"), ("var", "request_method")]),
    ("a b $args c", [("lit", "a b "), ("var", "args"), ("lit", " c")]),
    ("$http_X_Forwarded_Proto", [("http", "x-forwarded-proto")]),
    ("${http_x-api-key}", [("http", "x-api-key")]),
    ("$cookie_Session_ID", [("cookie", "Session_ID")]),
    ("${cookie_a.b}", [("cookie", "a.b")]),
    ("$arg_Page.", [("arg", "Page"), ("lit", ".")]),
    ("no variables", [("lit", "no variables")]),
    ("", []),
])
def test_parse_template(text, parts):
    assert parse_template(text) == parts


@pytest.mark.parametrize("text, message", [
    ("$hots", "unknown variable $hots; did you mean $host?"),
    ("$uri_x", "unknown variable $uri_x; did you mean $uri?"),
    ("$remote_addr", "unknown variable $remote_addr (known: $scheme, $host, $request_uri, "
     "$uri, $args, $is_args, $request_method, $http_NAME, $cookie_NAME, $arg_NAME)"),
    ("$query_string", "unknown variable $query_string; write $args"),
    ("$http_", "$http_ needs a name after it, as in $http_accept_language"),
    ("${cookie_}", "$cookie_ needs a name after it, as in $cookie_session"),
    ("a$", "a '$' at column 2 of the template names no variable (variables are written "
     "$name or ${name})"),
    ("$ uri", "a '$' at column 1 of the template names no variable (variables are written "
     "$name or ${name})"),
    ("${}", "a '$' at column 1 of the template names no variable (variables are written "
     "$name or ${name})"),
    ("x${uri", "'${' at column 2 of the template has no closing '}'"),
    ("$uri\t", "must not contain control characters"),
])
def test_parse_template_problems(text, message):
    with pytest.raises(ValueError) as info:
        parse_template(text)
    assert str(info.value) == message


def test_request_method_in_the_key_is_a_warning(tmp_path):
    rc, cfg = load_cache(tmp_path, "zone: main\nkey: $request_method$host$request_uri\n")
    assert rc.key[0] == ("var", "request_method")
    assert [(w.line, w.column, w.key_path, w.message) for w in cfg.warnings] == [
        (13, 18, f"{P}.key", "the key contains $request_method: HEAD requests (answered "
         "from stored GET responses) and PURGE requests then find no entry")]


# --------------------------------------------------------------------------
# Problems of a route's cache

@pytest.mark.parametrize("body, expected", [
    # the value as a whole
    ("{}", f"F:12:13: {P}: expected the key zone (a name under cache_zones) or max_size "
     "(a zone for this route alone, such as 64m)"),
    ("key: $uri", f"F:12:13: {P}: expected the key zone (a name under cache_zones) or "
     "max_size (a zone for this route alone, such as 64m)"),
    ("[main]", f"F:12:13: {P}: expected a zone's name, off, or a mapping with zone (a name "
     "under cache_zones) or max_size (a zone for this route alone); got a list"),
    ("zone: main\nmax_size: 1g", f"F:13:13: {P}.max_size: zone and max_size exclude each "
     "other: a named zone's size is given under cache_zones"),
    ("max_size: 1g\nzone: main", f"F:13:13: {P}.zone: zone and max_size exclude each "
     "other: a named zone's size is given under cache_zones"),
    ("zone: main\nvalidity: {200: 1m}",
     f"F:13:13: {P}.validity: unknown key 'validity'; did you mean 'valid'?"),
    ("zone: main\nnostore: $arg_x", f"F:13:13: {P}.nostore: unknown key 'nostore'; "
     "did you mean 'no_store'?"),
    ("zone: main\nkeys: $uri", f"F:13:13: {P}.keys: unknown key 'keys'; did you mean "
     "'key'?"),
    ("zone: main\nlifetime: 1m", f"F:13:13: {P}.lifetime: unknown key 'lifetime' (known "
     "keys: zone, max_size, max_object_size, key, methods, valid, bypass, no_store, ignore, "
     "lock, stale, tag_headers, purge, targeted_field, cdn_cache_control, remove_targeted)"),
    # zone
    ("zone: mian", f"F:12:19: {P}.zone: unknown cache zone 'mian'; did you mean 'main'?"),
    ("zone: other", f"F:12:19: {P}.zone: unknown cache zone 'other' (cache_zones: main)"),
    ("zone: 'route:x:1'", f"F:12:19: {P}.zone: 'route:x:1' is not a zone name (letters, "
     "digits, '_', '.' and '-')"),
    ("zone: 5", f"F:12:19: {P}.zone: expected a string, got an integer 5"),
    # sizes
    ("zone: main\nmax_object_size: 2m", f"F:13:30: {P}.max_object_size: must be at most "
     "the zone's max_object_size (1m, cache_zones.main at line 2), got 2m"),
    ("zone: main\nmax_object_size: 0", f"F:13:30: {P}.max_object_size: must be between 1 "
     "and 64g, got 0"),
    ("max_size: 512k", f"F:12:23: {P}.max_size: must be between 1m and 64g, got 512k"),
    ("max_size: 65g", f"F:12:23: {P}.max_size: must be between 1m and 64g, got 65g"),
    ("max_size: 1.5m", f"F:12:23: {P}.max_size: expected a size such as 16k or 10m, got "
     "a string '1.5m'"),
    ("max_size: 4m\nmax_object_size: 5m", f"F:13:30: {P}.max_object_size: must be at most "
     "max_size (4m), got 5m"),
    # key, bypass, no_store
    ("zone: main\nkey: $hots$uri", f"F:13:18: {P}.key: unknown variable $hots; did you "
     "mean $host?"),
    ("zone: main\nkey: static", f"F:13:18: {P}.key: 'static' has no variable: it would be "
     "the same for every request (variables start with '$', as in $request_uri)"),
    ("zone: main\nkey: ''", f"F:13:18: {P}.key: must not be empty"),
    ("zone: main\nkey: [$uri]", f"F:13:18: {P}.key: expected a string, got a list"),
    ("zone: main\nbypass: [$cookie_a, $remote_user]", f"F:13:33: {P}.bypass[1]: unknown "
     "variable $remote_user (known: $scheme, $host, $request_uri, $uri, $args, $is_args, "
     "$request_method, $http_NAME, $cookie_NAME, $arg_NAME)"),
    ("zone: main\nbypass: {a: 1}", f"F:13:21: {P}.bypass: expected a template such as "
     "$cookie_session or a list of them, got a mapping"),
    ("zone: main\nno_store: ['1']", f"F:13:24: {P}.no_store[0]: '1' has no variable: it "
     "would be the same for every request (variables start with '$', as in $request_uri)"),
    # methods
    ("zone: main\nmethods: [GET, POST]", f"F:13:28: {P}.methods[1]: only GET and HEAD "
     "responses are cached, not POST (caching POST is not supported; unsafe methods "
     "invalidate the URL's entries instead)"),
    ("zone: main\nmethods: [get]", f"F:13:23: {P}.methods[0]: methods are case-sensitive: "
     "write GET"),
    ("zone: main\nmethods: [GET, GET]", f"F:13:28: {P}.methods[1]: GET is already listed "
     "(line 13)"),
    ("zone: main\nmethods: 5", f"F:13:22: {P}.methods: expected a method (GET or HEAD) or "
     "a list of them, got an integer 5"),
    # valid
    ("zone: main\nvalid: {2xx: 1m}", f"F:13:21: {P}.valid.2xx: expected a status (200), "
     "several separated by spaces (\"200 301\") or any; got '2xx'"),
    ("zone: main\nvalid: {600: 1m}", f"F:13:21: {P}.valid.600: a status must be between "
     "100 and 599, got 600"),
    ("zone: main\nvalid: {101: 1m}", f"F:13:21: {P}.valid.101: status 101 is informational "
     "(1xx), not a final response: it is never stored"),
    ("zone: main\nvalid: {200: 1m, \"301 200\": 1h}", f"F:13:30: {P}.valid.301 200: status "
     "200 is already given (line 13)"),
    ("zone: main\nvalid: {\"200 any\": 1m}", f"F:13:21: {P}.valid.200 any: 'any' stands "
     "alone: it is every status the other keys do not name"),
    ("zone: main\nvalid: {200: soon}", f"F:13:26: {P}.valid.200: expected a duration such "
     "as 10s or 500ms, got a string 'soon'"),
    ("zone: main\nvalid: [200]", f"F:13:20: {P}.valid: expected a mapping, got a list"),
    # ignore, tag_headers
    ("zone: main\nignore: [vary, etag]", f"F:13:28: {P}.ignore[1]: expected one of "
     "cache-control, expires, set-cookie, vary; got 'etag'"),
    ("zone: main\nignore: [Vary, vary]", f"F:13:28: {P}.ignore[1]: 'vary' is already "
     "listed (line 13; names are case-insensitive)"),
    ("zone: main\ntag_headers: ['Cache Tag']", f"F:13:27: {P}.tag_headers[0]: 'Cache Tag' "
     "is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)"),
    ("zone: main\ntag_headers: [X-Tag, x-tag]", f"F:13:34: {P}.tag_headers[1]: 'x-tag' is "
     "already listed (line 13; names are case-insensitive)"),
    # lock, stale
    ("zone: main\nlock: 0", f"F:13:19: {P}.lock: must be more than 0, got 0"),
    ("zone: main\nlock: maybe", f"F:13:19: {P}.lock: expected a duration such as 10s or "
     "500ms, got a string 'maybe'"),
    ("zone: main\nlock: [1]", f"F:13:19: {P}.lock: expected on, off, a timeout such as "
     "5s, or {timeout: 5s}; got a list"),
    ("zone: main\nlock: {timeout: 0s}", f"F:13:29: {P}.lock.timeout: must be more than 0, "
     "got 0s"),
    ("zone: main\nlock: {timout: 1s}", f"F:13:20: {P}.lock.timout: unknown key 'timout'; "
     "did you mean 'timeout'?"),
    ("zone: main\nstale: {while_revalidate: 1m, if_eror: 1m}", f"F:13:43: {P}.stale."
     "if_eror: unknown key 'if_eror'; did you mean 'if_error'?"),
    ("zone: main\nstale: {if_error: -1s}", f"F:13:31: {P}.stale.if_error: expected a "
     "duration such as 10s or 500ms, got a string '-1s'"),
    ("zone: main\nstale: 30s", f"F:13:20: {P}.stale: expected off or a mapping such as "
     "{while_revalidate: 30s, if_error: 10m}; got a string '30s'"),
    # targeted fields (RFC 9213)
    ("zone: main\ntargeted_field: CDN-Cache-Control", f"F:13:29: {P}.targeted_field: "
     "'CDN-Cache-Control' cannot be the route's targeted field: it is on the target list "
     "already (cdn_cache_control: on turns it on or off)"),
    ("zone: main\ntargeted_field: cache-control", f"F:13:29: {P}.targeted_field: "
     "'cache-control' cannot be the route's targeted field: the cache reads that field for "
     "its own meaning"),
    ("zone: main\ntargeted_field: Age", f"F:13:29: {P}.targeted_field: 'Age' cannot be the "
     "route's targeted field: the cache reads that field for its own meaning"),
    ("zone: main\ntargeted_field: 'My Cache-Control'", f"F:13:29: {P}.targeted_field: 'My "
     "Cache-Control' is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)"),
    ("zone: main\ntargeted_field: [X-CC]", f"F:13:29: {P}.targeted_field: expected a header "
     "name such as ScalWS-Cache-Control, or off; got a list"),
    ("zone: main\ntargeted_field: 5", f"F:13:29: {P}.targeted_field: expected a header name "
     "such as ScalWS-Cache-Control, or off; got an integer 5"),
    ("zone: main\ncdn_cache_control: maybe", f"F:13:32: {P}.cdn_cache_control: expected on "
     "or off, got a string 'maybe'"),
    ("zone: main\ncdn_cache_control: off\nremove_targeted: [CDN-Cache-Control]",
     f"F:14:31: {P}.remove_targeted[0]: CDN-Cache-Control is not on the target list "
     "(cdn_cache_control: off), and a targeted field a cache does not use is passed through "
     "(RFC 9213 section 2.1)"),
    ("zone: main\nremove_targeted: [X-CC]", f"F:13:31: {P}.remove_targeted[0]: 'X-CC' is "
     "not on the route's target list (cdn-cache-control); remove other fields with "
     "headers.response.remove"),
    ("zone: main\ncdn_cache_control: off\nremove_targeted: X-CC", f"F:14:30: "
     f"{P}.remove_targeted: 'X-CC' is not on the route's target list (nothing "
     "(cdn_cache_control: off, no targeted_field)); remove other fields with "
     "headers.response.remove"),
    ("zone: main\ntargeted_field: X-CC\nremove_targeted: [x-cc, X-CC]", f"F:14:37: "
     f"{P}.remove_targeted[1]: 'X-CC' is already listed (line 14; names are "
     "case-insensitive)"),
    ("zone: main\nremove_targeted: {a: 1}", f"F:13:30: {P}.remove_targeted: expected a "
     "header name or a list of them, got a mapping"),
    # purge
    ("zone: main\npurge: on", f"F:13:20: {P}.purge: nobody could purge: trusted_proxies "
     "lists no address; give purge.allow, such as {allow: [127.0.0.1]}"),
    ("zone: main\npurge: {allow: []}", f"F:13:20: {P}.purge: nobody could purge: "
     "trusted_proxies lists no address; give purge.allow, such as {allow: [127.0.0.1]}"),
    ("zone: main\npurge: {allow: [localhost]}", f"F:13:29: {P}.purge.allow[0]: 'localhost' "
     "is not an IP address or a network (such as 10.0.0.0/8 or ::1); names are not "
     "accepted"),
    ("zone: main\npurge: {alow: [127.0.0.1]}", f"F:13:21: {P}.purge.alow: unknown key "
     "'alow'; did you mean 'allow'?"),
    ("zone: main\npurge: [127.0.0.1]", f"F:13:20: {P}.purge: expected on (the addresses "
     "of trusted_proxies), off, or {allow: [addresses or networks]}; got a list"),
])
def test_route_problems(tmp_path, body, expected):
    assert route_problem(tmp_path, body + "\n") == expected


@pytest.mark.parametrize("value, expected", [
    ("on", f"F:11:18: {P}: expected a zone's name, off, or a mapping with zone (a name "
     "under cache_zones) or max_size (a zone for this route alone); got a boolean (on)"),
    ("", f"F:11:17: {P}: expected a zone's name, off, or a mapping with zone (a name under "
     "cache_zones) or max_size (a zone for this route alone); got null"),
    ("mian", f"F:11:18: {P}: unknown cache zone 'mian'; did you mean 'main'?"),
])
def test_route_value_problems(tmp_path, value, expected):
    text = ROUTE_HEAD.replace("cache:\n", f"cache: {value}\n")
    assert one(problems_of(tmp_path, text)) == expected


def test_unknown_zone_without_zones(tmp_path):
    text = route_text("zone: main\n").replace(
        "cache_zones:\n  main: {max_size: 64m, max_object_size: 1m}\n", "")
    assert one(problems_of(tmp_path, text)) == (
        f"F:10:19: {P}.zone: unknown cache zone 'main': no zones are defined (add it under "
        "the top-level key cache_zones, or give max_size instead of zone)")


def test_purge_on_with_a_refused_trusted_proxies(tmp_path):
    """Only trusted_proxies' own problem is reported, not "nobody could purge"."""
    text = "trusted_proxies: [localhost]\n" + route_text("zone: main\npurge: on\n")
    assert problems_of(tmp_path, text) == [
        "F:1:19: trusted_proxies[0]: 'localhost' is not an IP address or a network (such "
        "as 10.0.0.0/8 or ::1); names are not accepted"]


def test_purge_allow_needs_no_trusted_proxies(tmp_path):
    rc, _ = load_cache(tmp_path, "zone: main\npurge: {allow: 127.0.0.1}\n")
    assert rc.purge == CachePurge(allow=["127.0.0.1/32"])


def test_every_problem_is_reported_at_once(tmp_path):
    lines = problems_of(tmp_path, route_text("""\
        zone: nope
        max_object_size: huge
        key: $nope
        methods: [PUT]
        valid: {999: 1s}
        ignore: [etag]
        lock: never
        purge: on
        """))
    assert [l.split(": ", 2)[1] for l in lines] == [
        f"{P}.zone", f"{P}.max_object_size", f"{P}.key", f"{P}.methods[0]",
        f"{P}.valid.999", f"{P}.ignore[0]", f"{P}.lock", f"{P}.purge"]
    assert all(l.startswith("F:") for l in lines)


def test_a_bad_cache_refuses_the_route_only_once(tmp_path):
    """The proxy route is refused because of its cache; nothing else is said."""
    lines = problems_of(tmp_path, route_text("zone: main\nvalid: {200: x}\n"))
    assert lines == [f"F:13:26: {P}.valid.200: expected a duration such as 10s or 500ms, "
                     "got a string 'x'"]


# --------------------------------------------------------------------------
# Problems of cache_zones

@pytest.mark.parametrize("zones, expected", [
    ("main: {max_size: 64m, max_object_size: 128m}", "F:2:42: cache_zones.main."
     "max_object_size: must be at most max_size (64m), got 128m"),
    ("main: {max_size: 100k}", "F:2:20: cache_zones.main.max_size: must be between 1m and "
     "64g, got 100k"),
    ("main: {max_size: 128g}", "F:2:20: cache_zones.main.max_size: must be between 1m and "
     "64g, got 128g"),
    ("main: {max_size: lots}", "F:2:20: cache_zones.main.max_size: expected a size such as "
     "16k or 10m, got a string 'lots'"),
    ("main: {max_objet_size: 1m}", "F:2:10: cache_zones.main.max_objet_size: unknown key "
     "'max_objet_size'; did you mean 'max_object_size'?"),
    ("main: {max_size: 64m, zone: x}", "F:2:25: cache_zones.main.zone: unknown key 'zone' "
     "(known keys: max_size, max_object_size, peers)"),
    ("main: 64m", "F:2:9: cache_zones.main: expected a mapping such as {max_size: 256m}, "
     "got a string '64m'"),
    ("main: {}\n  'a b': {}", "F:3:3: cache_zones.a b: 'a b' is not a valid zone name "
     "(letters, digits, '_', '.' and '-')"),
    ("main: {}\n  main: {}", "F:3:3: cache_zones.main: duplicate key 'main' (first at line "
     "2, column 3)"),
])
def test_zone_problems(tmp_path, zones, expected):
    assert one(problems_of(tmp_path, f"cache_zones:\n  {zones}\n" + ZONES_TAIL)) == expected


def test_cache_zones_must_be_a_mapping(tmp_path):
    assert problems_of(tmp_path, "cache_zones: [main]\n" + ZONES_TAIL) == [
        "F:1:14: cache_zones: expected a mapping, got a list",
        "F:7:49: sites[0].routes[0].proxy.cache: unknown cache zone 'main': no zones are "
        "defined (add it under the top-level key cache_zones, or give max_size instead of "
        "zone)",
    ]


def test_a_bad_zone_is_still_known_to_routes(tmp_path):
    """A route naming a zone whose definition is refused is not told the name is unknown."""
    assert problems_of(tmp_path, "cache_zones:\n  main: {max_size: 1k}\n" + ZONES_TAIL) == [
        "F:2:20: cache_zones.main.max_size: must be between 1m and 64g, got 1k"]


def test_cache_zones_did_you_mean(tmp_path):
    assert problems_of(tmp_path, "cache_zone: {main: {}}\n" + ZONES_TAIL) == [
        "F:1:1: cache_zone: unknown key 'cache_zone'; did you mean 'cache_zones'?",
        "F:7:49: sites[0].routes[0].proxy.cache: unknown cache zone 'main': no zones are "
        "defined (add it under the top-level key cache_zones, or give max_size instead of "
        "zone)"]


# --------------------------------------------------------------------------
# The command line and the documentation

def test_check_config_command(tmp_path):
    good = write(tmp_path, "cache_zones: {main: {max_size: 64m}}\n" + ZONES_TAIL)
    r = subprocess.run([sys.executable, "-m", "scalws", "--check-config", "--config",
                        str(good)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("cache_zones: {main: {max_size: 64m}}\n"
                   + ZONES_TAIL.replace("cache: main", "cache: {zone: mian}"))
    r = subprocess.run([sys.executable, "-m", "scalws", "--check-config", "--config",
                        str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1
    assert f"{bad}:7:56: sites[0].routes[0].proxy.cache.zone: unknown cache zone 'mian'; " \
        "did you mean 'main'?" in r.stderr + r.stdout


def test_documented_cache_examples_load(tmp_path):
    """The YAML of docs/configuration.md's cache_zones and cache sections loads."""
    doc = open(os.path.join(ROOT, "docs/configuration.md")).read()
    zones = doc[doc.index("### `cache_zones`"):doc.index("\n## Sites")]
    route = doc[doc.index("### `cache`\n"):doc.index("\n### `app`")]
    block, peers = re.findall(r"```yaml\n(.*?)```", zones, re.DOTALL)
    cfg = load_config(write(tmp_path, block + ZONES_TAIL.replace("cache: main",
                                                                 "cache: media")))
    assert cfg.cache_zones["media"].max_object_size == 64 << 20
    # Cache peers: a cluster's name and a Secret's file, here an address and a file
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123\n")
    secret.chmod(0o600)
    cfg = load_config(write(tmp_path, peers.replace(
        "scalws-peers.web.svc.cluster.local", "127.0.0.1").replace(
        "/etc/scalws/peers/secret", str(secret)) + ZONES_TAIL.replace("listen: 80",
                                                                     "listen: 8080")))
    assert cfg.cache_zones["main"].peers.upstream == "peers:main"
    assert cfg.upstreams["peers:main"].self_ports == [8080]
    (block,) = re.findall(r"```yaml\n(.*?)```", route, re.DOTALL)
    cfg = load_config(write(tmp_path, block.replace("/srv/app/public", str(tmp_path))))
    api, img, php, static = (r.handler.cache for r in cfg.sites[0].routes)
    assert (api.zone, php.zone, static.zone) == ("main", "main", "main")
    assert img.zone in cfg.cache_zones and cfg.warnings == []
