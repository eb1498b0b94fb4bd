"""The configuration loader: happy paths, and every kind of problem with its
exact message and FILE:LINE:COLUMN position: units, ConfigError, whole
files, keys, types and ranges (sites, listen, routes and respond in
test_config_sites.py; what comes from the machine, busy_poll, batch_window
and the CPU quota, in test_config_machine.py).

Sample files are inline; each test writes its own into tmp_path. In the
expected problem lines the file name is shown as F.
"""
import html
import os
import pwd
import re
import subprocess
import sys

import pytest

from scalws.config import units
from scalws.config.errors import ConfigError, Problem
from scalws.config.loader import default_config, load_config, load_config_text
from scalws.config.model import Config, Respond
from tests.unit.configlib import ROOT, SITE, load, one_problem, problems


# --------------------------------------------------------------------------
# units

@pytest.mark.parametrize("text, expected", [
    (0, 0), (1024, 1024), ("1024", 1024), ("16k", 16384), ("16K", 16384),
    ("10m", 10 << 20), ("10M", 10 << 20), ("1g", 1 << 30), (" 4k ", 4096),
])
def test_parse_size(text, expected):
    assert units.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "k", "1.5m", "-1", "16kb", "1t", "ten", True, None, 1.5, -4])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError, match="^expected a size such as 16k or 10m$"):
        units.parse_size(text)


@pytest.mark.parametrize("text, expected", [
    (10, 10.0), (1.5, 1.5), ("10", 10.0), ("1.5", 1.5), ("500ms", 0.5), ("10s", 10.0),
    ("2m", 120.0), ("1h", 3600.0), ("1d", 86400.0), ("1m30s", 90.0),
    ("1h 30m", 5400.0), ("1s500ms", 1.5), (0, 0.0), ("20us", 0.00002), ("1ms500us", 0.0015),
])
def test_parse_duration(text, expected):
    assert units.parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "s", "10x", "-1s", "30s1m", "1m1m", "10S", "1.s", "5us1ms",
                                  float("inf"), float("nan"), -1, True, None])
def test_parse_duration_refuses(text):
    with pytest.raises(ValueError, match="^expected a duration such as 10s or 500ms$"):
        units.parse_duration(text)


def test_format_size():
    assert [units.format_size(n) for n in (0, 1000, 4096, 1 << 20, 3 << 30)] == \
        ["0", "1000", "4k", "1m", "3g"]


# --------------------------------------------------------------------------
# ConfigError

def test_config_error_format_and_order():
    err = ConfigError([
        ("a.yaml", 7, 3, "sites[0].routes[2].respond.status", "status 99 is out of range"),
        ("a.yaml", 2, 1, "workers", "must be between 1 and 1024, got 0"),
        ("a.yaml", 1, 1, "", "invalid YAML: oops"),
    ])
    assert str(err).splitlines() == [
        "a.yaml:1:1: invalid YAML: oops",
        "a.yaml:2:1: workers: must be between 1 and 1024, got 0",
        "a.yaml:7:3: sites[0].routes[2].respond.status: status 99 is out of range",
    ]
    assert err.problems[1] == ("a.yaml", 2, 1, "workers", "must be between 1 and 1024, got 0")
    assert isinstance(err.problems[0], Problem)


def test_config_error_pickles():
    import pickle
    err = ConfigError([("f", 1, 2, "k", "m")])
    assert str(pickle.loads(pickle.dumps(err))) == "f:1:2: k: m"


# --------------------------------------------------------------------------
# Happy paths

FULL = """\
workers: 2
user: root
sandbox: off
server_header: "scalws/1"
shutdown_timeout: 1m30s
pid: run/scalws.pid
log:
  access: logs/access.log
  format: json
  error: logs/error.log
  level: warn
  buffer: 128k
  flush: 500ms
limits:
  max_header_bytes: 32k
  max_headers: 50
  max_uri_bytes: 4k
  max_body_bytes: 1g
  header_timeout: 5s
  body_timeout: 30s
  keepalive_timeout: 0
  send_timeout: 2m
  keepalive_requests: 100
  max_connections: 20000
sites:
  - listen: [":80 default backlog=1024", "[::]:80", "unix:run/web.sock"]
    server_names: [Example.COM, "*.example.com", "www.example.org."]
    routes:
      - {path: "= /healthz", respond: {status: 200, body: "ok\\n"}}
      - {path: "^~ /static/", respond: 404}
      - path: "~* \\\\.(png|jpe?g)$"
        respond:
          status: 403
          content_type: text/html; charset=utf-8
          body: "<p>no</p>"
          headers: {Cache-Control: no-store, Set-Cookie: [a=1, b=2], X-Version: 1.0}
      - {path: "~ ^/api/v[0-9]+/", respond: {status: 503, content_type: null}}
      - {path: /, respond: {body: "héllo"}}
  - listen: "127.0.0.1:8080"
    routes:
      - {path: /, respond: 204}
"""


def test_full_example(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "run").mkdir()
    cfg = load(tmp_path, FULL)
    assert isinstance(cfg, Config)
    assert cfg.source == str(tmp_path / "scalws.yaml")
    assert cfg.workers == 2
    assert cfg.cpus == sorted(os.sched_getaffinity(0))
    assert cfg.user == "root"
    assert cfg.sandbox == "off"
    assert cfg.server_header == "scalws/1"
    assert cfg.shutdown_timeout == 90.0
    assert cfg.pid == str(tmp_path / "run/scalws.pid")

    assert cfg.log.access == str(tmp_path / "logs/access.log")
    assert cfg.log.error == str(tmp_path / "logs/error.log")
    assert (cfg.log.format, cfg.log.level) == ("json", "warn")
    assert (cfg.log.buffer, cfg.log.flush) == (128 * 1024, 0.5)

    lim = cfg.limits
    assert (lim.max_header_bytes, lim.max_headers, lim.max_uri_bytes) == (32768, 50, 4096)
    assert lim.max_body_bytes == 1 << 30
    assert (lim.header_timeout, lim.keepalive_timeout, lim.send_timeout) == (5.0, 0.0, 120.0)
    assert lim.body_timeout == 30.0
    assert (lim.keepalive_requests, lim.max_connections) == (100, 20000)

    site, site2 = cfg.sites
    assert site.mark == (cfg.source, 26, 5)
    a, b, c = site.listen
    assert (a.kind, a.host, a.port, a.default, a.backlog, a.text) == \
        ("tcp", "0.0.0.0", 80, True, 1024, ":80 default backlog=1024")
    assert a.mark == (cfg.source, 26, 14)
    assert a.key == ("tcp", "0.0.0.0", 80)
    assert (b.kind, b.host, b.port, b.default, b.backlog) == ("tcp", "::", 80, False, 511)
    assert (c.kind, c.path, c.key) == ("unix", str(tmp_path / "run/web.sock"),
                                       ("unix", str(tmp_path / "run/web.sock")))
    assert site.server_names == ["example.com", "*.example.com", "www.example.org"]

    r = site.routes
    assert [(x.match, x.pattern, x.kind) for x in r] == [
        ("exact", "/healthz", "respond"),
        ("prefix_noregex", "/static/", "respond"),
        ("regex_icase", r"\.(png|jpe?g)$", "respond"),
        ("regex", "^/api/v[0-9]+/", "respond"),
        ("prefix", "/", "respond"),
    ]
    assert r[0].mark == (cfg.source, 29, 9)
    assert r[0].handler == Respond(200, b"ok\n", [], "text/plain")
    assert r[1].handler == Respond(404, b"", [], None)
    assert r[2].handler == Respond(403, b"<p>no</p>", [
        ("Cache-Control", "no-store"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"),
        ("X-Version", "1.0")], "text/html; charset=utf-8")
    assert r[3].handler == Respond(503, b"", [], None)
    assert r[4].handler == Respond(200, "héllo".encode(), [], "text/plain")

    assert site2.listen[0].host == "127.0.0.1" and site2.listen[0].port == 8080
    assert site2.server_names == []


def test_defaults_filled(tmp_path):
    cfg = load(tmp_path, SITE)
    affinity = sorted(os.sched_getaffinity(0))
    assert cfg.workers == len(affinity) and cfg.cpus == affinity
    assert cfg.user is None and cfg.sandbox == "on" and cfg.pid is None
    assert cfg.server_header == "scalws"
    assert cfg.shutdown_timeout == 30.0
    assert cfg.log == type(cfg.log)()           # every log default
    assert cfg.log.access is None and cfg.log.error is None
    assert (cfg.log.format, cfg.log.level, cfg.log.buffer, cfg.log.flush) == \
        ("combined", "notice", 65536, 1.0)
    lim = cfg.limits
    assert (lim.max_header_bytes, lim.max_headers, lim.max_uri_bytes, lim.max_body_bytes) == \
        (16384, 100, 8192, 10 << 20)
    assert (lim.header_timeout, lim.keepalive_timeout, lim.send_timeout) == (10.0, 75.0, 60.0)
    assert lim.body_timeout == 60.0
    assert (lim.keepalive_requests, lim.max_connections) == (10000, 10000)
    (listen,) = cfg.sites[0].listen
    assert (listen.kind, listen.host, listen.port, listen.default, listen.backlog) == \
        ("tcp", "0.0.0.0", 8080, False, 511)


def test_workers_auto_and_number(tmp_path):
    cfg = load(tmp_path, "workers: auto\n" + SITE)
    assert cfg.workers == len(os.sched_getaffinity(0))
    cfg = load(tmp_path, "workers: 7\n" + SITE)
    assert cfg.workers == 7 and cfg.cpus == sorted(os.sched_getaffinity(0))


@pytest.mark.parametrize("value", ["off", "false", "'off'", "no"])
def test_server_header_off(tmp_path, value):
    assert load(tmp_path, f"server_header: {value}\n" + SITE).server_header is None


def test_log_off_and_stderr(tmp_path):
    cfg = load(tmp_path, "log: {access: off, error: stderr}\n" + SITE)
    assert cfg.log.access is None and cfg.log.error is None


def test_uri_limit_follows_header_limit_down(tmp_path):
    cfg = load(tmp_path, "limits: {max_header_bytes: 4k}\n" + SITE)
    assert cfg.limits.max_uri_bytes == 4096


@pytest.mark.parametrize("text, expected", [
    ("8080", ("tcp", "0.0.0.0", 8080, "")),
    (":8080", ("tcp", "0.0.0.0", 8080, "")),
    ("*:8080", ("tcp", "0.0.0.0", 8080, "")),
    ("127.0.0.1:8080", ("tcp", "127.0.0.1", 8080, "")),
    ("localhost:8080", ("tcp", "127.0.0.1", 8080, "")),
    ("LocalHost:1", ("tcp", "127.0.0.1", 1, "")),
    ("[::]:8080", ("tcp", "::", 8080, "")),
    ("[::1]:65535", ("tcp", "::1", 65535, "")),
    ("[0:0::1]:80", ("tcp", "::1", 80, "")),
    ("unix:/run/scalws.sock", ("unix", "", 0, "/run/scalws.sock")),
])
def test_listen_forms(tmp_path, text, expected):
    cfg = load(tmp_path, f"sites:\n  - listen: '{text}'\n    routes: [{{path: /, respond: 204}}]\n")
    listen = cfg.sites[0].listen[0]
    assert (listen.kind, listen.host, listen.port, listen.path) == expected
    assert listen.text == text


def test_listen_integer_port(tmp_path):
    cfg = load(tmp_path, "sites:\n  - listen: 8080\n    routes: [{path: /, respond: 204}]\n")
    assert cfg.sites[0].listen[0].key == ("tcp", "0.0.0.0", 8080)


def test_virtual_hosts_share_a_listen_key(tmp_path):
    cfg = load(tmp_path, """\
        sites:
          - listen: ":80 backlog=2048"
            server_names: [a.example]
            routes: [{path: /, respond: 200}]
          - listen: ":80 default"
            server_names: [b.example]
            routes: [{path: /, respond: 201}]
    """)
    a, b = cfg.sites
    assert a.listen[0].key == b.listen[0].key
    assert [a.listen[0].default, b.listen[0].default] == [False, True]
    # One socket, one backlog: the value given once applies to every site.
    assert [a.listen[0].backlog, b.listen[0].backlog] == [2048, 2048]


@pytest.mark.parametrize("text, expected", [
    ("= /exact", ("exact", "/exact")),
    ("=/exact", ("exact", "/exact")),
    ("/prefix/", ("prefix", "/prefix/")),
    ("^~ /img/", ("prefix_noregex", "/img/")),
    ("~ \\.php$", ("regex", "\\.php$")),
    ("~* ^/API/", ("regex_icase", "^/API/")),
    ("~ [[:digit:]]+", ("regex", "[[:digit:]]+")),
])
def test_route_patterns(tmp_path, text, expected):
    cfg = load(tmp_path, f"sites:\n  - listen: 80\n    routes:\n      - path: '{text}'\n"
                         "        respond: 204\n")
    route = cfg.sites[0].routes[0]
    assert (route.match, route.pattern) == expected


def test_respond_forms(tmp_path):
    cfg = load(tmp_path, """\
        sites:
          - listen: 80
            routes:
              - {path: /a, respond: 204}
              - {path: /b, respond: {}}
              - {path: /c, respond: {status: 200, body: "x", content_type: null}}
              - {path: /d, respond: {status: 200, body: "", content_type: text/plain}}
              - {path: /e, respond: {status: 301, headers: {Location: "https://example.com/"}}}
    """)
    assert [r.handler for r in cfg.sites[0].routes] == [
        Respond(204, b"", [], None),
        Respond(200, b"", [], None),
        Respond(200, b"x", [], None),
        Respond(200, b"", [], "text/plain"),
        Respond(301, b"", [("Location", "https://example.com/")], None),
    ]


def test_merge_keys_and_x_keys(tmp_path):
    cfg = load(tmp_path, """\
        x-defaults:
          ok: &ok {status: 200, body: "ok", headers: {X-A: a}}
        sites:
          - listen: 80
            routes:
              - {path: /a, respond: *ok}
              - {path: /b, respond: {<<: *ok, body: "mine"}}
    """)
    a, b = (r.handler for r in cfg.sites[0].routes)
    assert a == Respond(200, b"ok", [("X-A", "a")], "text/plain")
    assert b == Respond(200, b"mine", [("X-A", "a")], "text/plain")


def test_load_config_text_and_relative_paths(tmp_path):
    (tmp_path / "logs").mkdir()
    text = "log: {access: logs/a.log}\n" + SITE
    cfg = load_config_text(text, source="inline", base_dir=str(tmp_path))
    assert cfg.source == "inline"
    assert cfg.log.access == str(tmp_path / "logs/a.log")
    assert cfg.sites[0].listen[0].mark == ("inline", 3, 13)


def test_default_config():
    cfg = default_config()
    assert cfg.source == "<built-in default>"
    assert cfg.workers == 1
    (site,) = cfg.sites
    (listen,) = site.listen
    assert (listen.kind, listen.host, listen.port) == ("tcp", "127.0.0.1", 8080)
    route, folder = site.routes
    assert (route.match, route.pattern, route.kind) == ("exact", "/", "respond")
    assert (folder.match, folder.pattern, folder.kind) == ("prefix", "/", "static")
    assert folder.handler.root == os.getcwd() and folder.handler.autoindex
    page = route.handler
    assert page.status == 200
    assert page.content_type == "text/html; charset=utf-8"
    body = page.body.decode()
    assert body.startswith("<!DOCTYPE html>") and body.rstrip().endswith("</html>")
    assert "ScalWS is running" in body and "docs/configuration.md" in body
    assert f"<code>{html.escape(os.getcwd())}</code>" in body
    assert cfg.limits == type(cfg.limits)() and cfg.log == type(cfg.log)()


def test_loader_imports_nothing_compiled():
    code = ("import sys, scalws.config.loader as l; l.default_config(); "
            "bad = [m for m in sys.modules if m.startswith(('scalws.server', "
            "'scalws.handlers', 'scalws.http', 'scalws.upstream'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_documented_full_example_loads(tmp_path):
    """docs/configuration.md's full example is valid (paths moved to tmp_path)."""
    doc = (ROOT / "docs/configuration.md").read_text()
    m = re.search(r"<!-- full-example -->\s*```yaml\n(.*?)```", doc, re.DOTALL)
    assert m, "docs/configuration.md lost its full example"
    text = m.group(1).replace("/var/log/scalws", str(tmp_path))
    text = text.replace("/run/scalws", str(tmp_path))
    text = re.sub(r"(?m)^user: .*$", f"user: {pwd.getpwuid(os.getuid()).pw_name}", text)
    cfg = load_config_text(text, source="example")
    assert cfg.sites and all(site.routes for site in cfg.sites)


def test_documented_error_output_is_real(tmp_path):
    """The sample --check-config output in docs/configuration.md is exact."""
    doc = (ROOT / "docs/configuration.md").read_text()
    m = re.search(r"For this file:\s*```yaml\n(.*?)```\s*the output is:\s*```text\n(.*?)```",
                  doc, re.DOTALL)
    assert m, "docs/configuration.md lost its sample error output"
    path = tmp_path / "scalws.yaml"
    path.write_text(m.group(1))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).replace(str(path), "scalws.yaml") == m.group(2).rstrip("\n")


# --------------------------------------------------------------------------
# Whole-file problems

def test_unreadable_file(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}:0:0: cannot read the file: No such file or directory"


def test_folder_instead_of_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert str(info.value) == f"{tmp_path}:0:0: cannot read the file: Is a directory"


@pytest.mark.parametrize("text", ["", "\n\n", "# nothing here\n", "---\n", "null\n"])
def test_empty_document(tmp_path, text):
    assert one_problem(tmp_path, text) == \
        "F:1:1: the file is empty: expected a mapping with at least the key 'sites'"


@pytest.mark.parametrize("text, got", [
    ("- a\n- b\n", "a list"), ("just words\n", "a string 'just words'"), ("42\n", "an integer 42"),
])
def test_non_mapping_document(tmp_path, text, got):
    assert one_problem(tmp_path, text) == \
        f"F:1:1: expected a mapping of settings at the top level, got {got}"


@pytest.mark.parametrize("text, expected", [
    ("workers: 2\nlog: {access: x\n",
     "F:3:1: invalid YAML: expected ',' or '}', but got '<stream end>' "
     "(while parsing a flow mapping at line 2)"),
    ("workers: 2\n  user: x\n", "F:2:7: invalid YAML: mapping values are not allowed here"),
    ("a: 1\n---\nb: 2\n",
     "F:2:1: invalid YAML: expected a single document in the stream, but found another document"),
    ("sites:\n\t- x\n",
     "F:2:1: invalid YAML: found character '\\t' that cannot start any token "
     "(while scanning for the next token); indent with spaces, not tabs"),
    ("a: *nowhere\n", "F:1:4: invalid YAML: found undefined alias 'nowhere'"),
    ("a: \x07\n", "F:1:4: invalid YAML: special characters are not allowed (found U+0007)"),
])
def test_yaml_syntax_errors(tmp_path, text, expected):
    assert one_problem(tmp_path, text) == expected


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"workers: 2\nserver_header: caf\xe9\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}:2:19: the file is not UTF-8 text"


def test_missing_sites(tmp_path):
    assert one_problem(tmp_path, "workers: 2\n") == "F:1:1: sites: required key is missing"


# --------------------------------------------------------------------------
# Keys: unknown, unavailable, duplicate, non-string

def test_unknown_key_did_you_mean(tmp_path):
    assert one_problem(tmp_path, "wrokers: 2\n" + SITE) == \
        "F:1:1: wrokers: unknown key 'wrokers'; did you mean 'workers'?"


def test_unknown_key_lists_known_keys(tmp_path):
    assert one_problem(tmp_path, "log: {colour: red}\n" + SITE) == \
        ("F:1:7: log.colour: unknown key 'colour' (known keys: access, format, "
         "error, error_format, level, buffer, flush)")


def test_unknown_nested_key(tmp_path):
    assert one_problem(tmp_path, """\
        sites:
          - listen: 80
            routes:
              - {path: /, respond: {status: 200, bdy: x}}
    """) == "F:4:42: sites[0].routes[0].respond.bdy: unknown key 'bdy'; did you mean 'body'?"


def test_site_tls_without_a_tls_listener(tmp_path):
    # (The tls block itself is tested in test_tls_config.py.)
    out = problems(tmp_path, """\
        sites:
          - listen: 443
            tls: {cert: a.pem}
            routes: [{path: /, respond: 204}]
    """)
    assert "F:3:5: sites[0].tls: the site has certificates but no listen address with the " \
           "'tls' option (write e.g. \":443 tls\")" in out


def test_duplicate_keys(tmp_path):
    assert problems(tmp_path, """\
        workers: 2
        sites:
          - listen: 80
            routes:
              - path: /
                respond: {status: 200, status: 201}
        workers: 3
    """) == [
        "F:6:32: sites[0].routes[0].respond.status: duplicate key 'status' (first at line 6, column 19)",
        "F:7:1: workers: duplicate key 'workers' (first at line 1, column 1)",
    ]


def test_non_string_key(tmp_path):
    assert one_problem(tmp_path, SITE + "? [a, b]\n: 1\n") == \
        "F:5:3: a key must be a string, got a list"


# --------------------------------------------------------------------------
# Types, null, ranges and units

@pytest.mark.parametrize("line, expected", [
    ("workers: 0", "F:1:10: workers: must be between 1 and 1024, got 0"),
    ("workers: 1025", "F:1:10: workers: must be between 1 and 1024, got 1025"),
    ("workers: four", "F:1:10: workers: expected an integer (1..1024) or auto, got a string 'four'"),
    ("workers: 2.5", "F:1:10: workers: expected an integer (1..1024) or auto, got a number 2.5"),
    ("workers: null", "F:1:10: workers: expected an integer (1..1024) or auto, got null"),
    ("user: nosuchuser-scalws", "F:1:7: user: no such user 'nosuchuser-scalws' on this system"),
    ("user: 0", "F:1:7: user: expected a string, got an integer 0"),
    ("sandbox: maybe", "F:1:10: sandbox: expected on, off or required, got a string 'maybe'"),
    ("sandbox: 3", "F:1:10: sandbox: expected on, off or required, got an integer 3"),
    ("server_header: on", "F:1:16: server_header: expected a string or off, got a boolean (on)"),
    ("server_header: ''",
     "F:1:16: server_header: must not be empty (use off to send no Server header)"),
    ('server_header: "a\\r\\nX-Evil: 1"', "F:1:16: server_header: must not contain CR or LF"),
    ('server_header: "caf\\u00e9"', "F:1:16: server_header: must be ASCII (found 'é')"),
    ("shutdown_timeout: soon",
     "F:1:19: shutdown_timeout: expected a duration such as 10s or 500ms, got a string 'soon'"),
    ("shutdown_timeout: [1]",
     "F:1:19: shutdown_timeout: expected a duration such as 10s or 500ms, got a list"),
    ("pid: ", "F:1:5: pid: expected a string, got null"),
    ("log: /var/log", "F:1:6: log: expected a mapping, got a string '/var/log'"),
    ("log: {format: text}", "F:1:15: log.format: expected one of combined, json; got a string 'text'"),
    ("log: {level: warning}",
     "F:1:14: log.level: expected one of debug, info, notice, warn, error, crit; "
     "got a string 'warning'"),
    ("log: {buffer: 1k}", "F:1:15: log.buffer: must be between 4k and 16m, got 1k"),
    ("log: {buffer: 32m}", "F:1:15: log.buffer: must be between 4k and 16m, got 32m"),
    ("log: {buffer: lots}",
     "F:1:15: log.buffer: expected a size such as 16k or 10m, got a string 'lots'"),
    ("log: {flush: 0}", "F:1:14: log.flush: must be more than 0, got 0"),
    ("log: {access: on}", "F:1:15: log.access: expected a file path or off, got a boolean (on)"),
    ("log: {error: 5}", "F:1:14: log.error: expected a file path or stderr, got an integer 5"),
    ("limits: {max_header_bytes: 512}",
     "F:1:28: limits.max_header_bytes: must be between 1k and 1m, got 512"),
    ("limits: {max_header_bytes: 2m}",
     "F:1:28: limits.max_header_bytes: must be between 1k and 1m, got 2m"),
    ("limits: {max_headers: 0}", "F:1:23: limits.max_headers: must be between 1 and 1000, got 0"),
    ("limits: {max_headers: abc}",
     "F:1:23: limits.max_headers: expected an integer, got a string 'abc'"),
    ("limits: {max_headers: true}",
     "F:1:23: limits.max_headers: expected an integer, got a boolean (true)"),
    ("limits: {max_uri_bytes: 32k}",
     "F:1:25: limits.max_uri_bytes: must not exceed max_header_bytes (16k)"),
    ("limits: {max_body_bytes: 0}",
     "F:1:26: limits.max_body_bytes: 0 is not allowed: to accept large bodies give a "
     "large size such as 1g (nginx's 0 = unlimited has no equivalent)"),
    ("limits: {header_timeout: 0}", "F:1:26: limits.header_timeout: must be more than 0, got 0"),
    ("limits: {body_timeout: 0s}", "F:1:24: limits.body_timeout: must be more than 0, got 0s"),
    ("limits: {body_timeout: soon}",
     "F:1:24: limits.body_timeout: expected a duration such as 10s or 500ms, got a string 'soon'"),
    ("limits: {keepalive_timeout: 1x}",
     "F:1:29: limits.keepalive_timeout: expected a duration such as 10s or 500ms, got a string '1x'"),
    ("limits: {send_timeout: -5}",
     "F:1:24: limits.send_timeout: expected a duration such as 10s or 500ms, got an integer -5"),
    ("limits: {keepalive_requests: 0}",
     "F:1:30: limits.keepalive_requests: must be between 1 and 2147483647, got 0"),
    ("limits: {max_connections: 1000001}",
     "F:1:27: limits.max_connections: must be between 1 and 1000000, got 1000001"),
    ("limits: {max_connections: null}",
     "F:1:27: limits.max_connections: expected an integer, got null"),
])
def test_top_level_value_problems(tmp_path, line, expected):
    assert one_problem(tmp_path, line + "\n" + SITE) == expected


def test_http2_block(tmp_path):
    cfg = load(tmp_path, "http2: {max_concurrent_streams: 64, stream_window: 1m, "
                         "connection_window: 4m, max_header_list_size: 32k, header_table_size: 0, "
                         "max_continuations: 2, reset_burst: 50, reset_rate: 5, frame_burst: 200, "
                         "frame_rate: 20, unsent_limit: 0}\n" + SITE)
    h = cfg.http2
    assert h.unsent_limit == 0
    assert (h.max_concurrent_streams, h.stream_window, h.connection_window) == (64, 1 << 20, 4 << 20)
    assert (h.max_header_list_size, h.header_table_size, h.max_continuations) == (32 << 10, 0, 2)
    assert (h.reset_burst, h.reset_rate, h.frame_burst, h.frame_rate) == (50, 5, 200, 20)


def test_http2_defaults(tmp_path):
    h = load(tmp_path, SITE).http2
    assert (h.max_concurrent_streams, h.stream_window, h.connection_window) == (128, 256 << 10, 1 << 20)
    assert h.max_header_list_size is None  # from limits, in the engine
    assert (h.header_table_size, h.max_continuations, h.unsent_limit) == (4096, 8, 16 << 10)
    assert (h.reset_burst, h.reset_rate, h.frame_burst, h.frame_rate) == (1000, 33, 1000, 100)


@pytest.mark.parametrize("line, expected", [
    ("http2: 5", "F:1:8: http2: expected a mapping, got an integer 5"),
    ("http2: {max_streams: 5}",
     "F:1:9: http2.max_streams: unknown key 'max_streams'; did you mean 'max_concurrent_streams'?"),
    ("http2: {max_concurrent_streams: 0}",
     "F:1:33: http2.max_concurrent_streams: must be between 1 and 10000, got 0"),
    ("http2: {stream_window: 2g}",
     "F:1:24: http2.stream_window: must be between 1k and 2147483647, got 2g"),
    ("http2: {connection_window: 16k}",
     "F:1:28: http2.connection_window: must be between 65535 and 2147483647, got 16k"),
    ("http2: {max_header_list_size: 100}",
     "F:1:31: http2.max_header_list_size: must be between 1k and 2m, got 100"),
    ("http2: {header_table_size: 1m}",
     "F:1:28: http2.header_table_size: must be between 0 and 64k, got 1m"),
    ("http2: {max_continuations: 0}",
     "F:1:28: http2.max_continuations: must be between 1 and 1000, got 0"),
    ("http2: {reset_burst: many}",
     "F:1:22: http2.reset_burst: expected an integer, got a string 'many'"),
    ("http2: {reset_rate: 0}", "F:1:21: http2.reset_rate: must be between 1 and 1000000, got 0"),
    ("http2: {frame_burst: 2000000}",
     "F:1:22: http2.frame_burst: must be between 1 and 1000000, got 2000000"),
    ("http2: {frame_rate: -1}", "F:1:21: http2.frame_rate: must be between 1 and 1000000, got -1"),
    ("http2: {unsent_limit: 1g}", "F:1:23: http2.unsent_limit: must be between 0 and 64m, got 1g"),
    ("http2: {unsent_limit: 100}", "F:1:23: http2.unsent_limit: expected 0 (none) or at least 4k, got 100"),
])
def test_http2_problems(tmp_path, line, expected):
    assert one_problem(tmp_path, line + "\n" + SITE) == expected


def test_log_folder_must_exist(tmp_path):
    assert one_problem(tmp_path, "log: {access: nowhere/access.log}\n" + SITE) == \
        f"F:1:15: log.access: the folder {tmp_path}/nowhere does not exist"


def test_log_path_is_a_folder(tmp_path):
    assert one_problem(tmp_path, f"log: {{error: {tmp_path}}}\n" + SITE) == \
        f"F:1:14: log.error: {tmp_path} is a folder, expected a file path"


def test_all_problems_reported_together(tmp_path):
    lines = problems(tmp_path, """\
        workers: 0
        log: {level: loud}
        limits: {max_headers: 0}
        sites:
          - listen: ":99999"
            routes:
              - {path: nope, respond: 99}
    """)
    assert [line.split(": ")[1] for line in lines] == [
        "workers", "log.level", "limits.max_headers", "sites[0].listen",
        "sites[0].routes[0].path", "sites[0].routes[0].respond",
    ]
    assert [line.split(":")[1] for line in lines] == ["1", "2", "3", "5", "7", "7"]
