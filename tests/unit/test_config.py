"""The configuration loader: happy paths, and every kind of problem with its
exact message and FILE:LINE:COLUMN position.

Sample files are inline; each test writes its own into tmp_path. In the
expected problem lines the file name is shown as F.
"""
import html
import os
import pathlib
import pwd
import re
import subprocess
import sys
import textwrap

import pytest

from scalws.config import units
from scalws.config.errors import ConfigError, Problem
from scalws.config.loader import default_config, load_config, load_config_text
from scalws.config.model import Config, Listen, Respond

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A minimal valid site, for tests about everything else.
SITE = """\
sites:
  - listen: ":8080"
    routes:
      - {path: /, respond: 204}
"""


def write(tmp_path, text, name="scalws.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path, text):
    return load_config(write(tmp_path, text))


def problems(tmp_path, text):
    """The problem lines of a file that must be refused, file shown as F."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [line.replace(str(path), "F", 1) for line in str(info.value).splitlines()]


def one_problem(tmp_path, text):
    lines = problems(tmp_path, text)
    assert len(lines) == 1, lines
    return lines[0]


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


# --------------------------------------------------------------------------
# Sites and listen

@pytest.mark.parametrize("listen, expected", [
    ("example.com:80",
     "'example.com' is a host name: scalws resolves no names when loading; "
     "use an IP address (or localhost)"),
    ("300.1.1.1:80", "'300.1.1.1' is not an IPv4 address"),
    ("::1:80", "an IPv6 address goes in brackets, as in [::1]:8080"),
    ("[::1]", "expected [address]:port, got '[::1]' (the port is missing)"),
    ("[::1:80", "missing ']' after the IPv6 address in '[::1:80'"),
    ("[nope]:80", "'nope' is not an IPv6 address"),
    ("localhost", "expected host:port, :port or port, got 'localhost' (the port is missing)"),
    (":0", "port must be between 1 and 65535, got 0"),
    (":65536", "port must be between 1 and 65535, got 65536"),
    (":http", "'http' is not a port number"),
    ("unix:", "expected a socket path after 'unix:'"),
    (":443 tls", "listen option 'tls' needs the site's certificates: add tls: {cert: FILE, key: FILE} to the site"),
    (":443 ssl", "the listen option is called 'tls' in scalws (nginx's 'ssl')"),
    (":443 http2", "HTTP/2 is on by default on TLS listeners (ALPN h2); write 'h2c' for cleartext "
                   "HTTP/2 with prior knowledge, or 'http2=off' to refuse HTTP/2 on a TLS listener"),
    (":80 http2=on", "'http2=' applies to TLS listeners (ALPN); for cleartext HTTP/2 write 'h2c'"),
    (":80 http2=maybe", "listen option 'http2=maybe' is malformed; write http2=on or http2=off"),
    (":80 h2c=1", "listen option 'h2c=1' is malformed; write h2c"),
    (":80 h2c h2c", "listen option 'h2c' is given twice"),
    (":443 tls h2c", "'h2c' is cleartext HTTP/2; a TLS listener offers h2 through ALPN already "
                     "(remove 'h2c', or 'tls')"),
    (":80 default_server", "unknown listen option 'default_server'; did you mean 'default'?"),
    (":80 reuseport", "unknown listen option 'reuseport' (options: default, tls, h2c, http2=off, "
                      "quic, backlog=N)"),
    (":443 quic tls", "'quic' is a UDP listener for HTTP/3 (TLS 1.3 is part of QUIC): 'tls' "
                      "applies to TCP listeners; list the TCP address apart (e.g. \":443 tls\" "
                      "beside \":443 quic\")"),
    (":443 quic backlog=10", "'quic' is a UDP listener for HTTP/3 (TLS 1.3 is part of QUIC): "
                             "'backlog' applies to TCP listeners; list the TCP address apart "
                             "(e.g. \":443 tls\" beside \":443 quic\")"),
    ("unix:/run/x.sock quic", "QUIC runs over UDP: it cannot listen on a unix socket"),
    (":80 h2", "unknown listen option 'h2'; did you mean 'h2c'?"),
    (":80 backlog=0", "backlog must be an integer between 1 and 65535, got '0'"),
    (":80 backlog=many", "backlog must be an integer between 1 and 65535, got 'many'"),
    (":80 backlog", "listen option 'backlog' is malformed; write backlog=N"),
    (":80 default=yes", "listen option 'default=yes' is malformed; write default"),
    (":80 default default", "listen option 'default' is given twice"),
    (" ", "must not be empty"),
])
def test_listen_problems(tmp_path, listen, expected):
    text = f"sites:\n  - listen: '{listen}'\n    routes: [{{path: /, respond: 204}}]\n"
    assert one_problem(tmp_path, text) == f"F:2:13: sites[0].listen: {expected}"


def test_listen_h2_options(tmp_path):
    cfg = load(tmp_path, """\
        sites:
          - listen: [":8080 h2c", "127.0.0.1:8081"]
            routes: [{path: /, respond: 204}]
    """)
    assert [(l.h2c, l.serves_h2) for l in cfg.sites[0].listen] == [(True, True), (False, False)]
    assert one_problem(tmp_path, """\
        sites:
          - listen: [":8080 h2c"]
            routes: [{path: /, respond: 204}]
          - listen: [":8080"]
            server_names: [b.test]
            routes: [{path: /, respond: 204}]
    """) == ("F:4:14: sites[1].listen[0]: 0.0.0.0:8080 serves HTTP/2 at line 2: every site on "
             "one address must agree on 'h2c' / 'http2='")


def test_listen_unix_path_too_long(tmp_path):
    sock = "/tmp/" + "s" * 120
    text = f"sites:\n  - listen: 'unix:{sock}'\n    routes: [{{path: /, respond: 204}}]\n"
    assert one_problem(tmp_path, text) == (
        f"F:2:13: sites[0].listen: the socket path {sock} is longer than 107 bytes "
        "(the limit of a unix socket address)")


def test_listen_list_problems(tmp_path):
    assert problems(tmp_path, """\
        sites:
          - listen: [":80", "0.0.0.0:80", {port: 80}]
            routes: [{path: /, respond: 204}]
          - listen: []
            routes: [{path: /, respond: 204}]
          - routes: [{path: /, respond: 204}]
    """) == [
        "F:2:21: sites[0].listen[1]: '0.0.0.0:80' is already listed in this site (line 2)",
        "F:2:35: sites[0].listen[2]: expected an address such as 127.0.0.1:8080, :80, "
        "[::]:80 or unix:/run/scalws.sock, got a mapping",
        "F:4:13: sites[1].listen: expected at least one listen address",
        "F:6:5: sites[2].listen: required key is missing",
    ]


def test_sites_shape_problems(tmp_path):
    assert one_problem(tmp_path, "sites: {listen: 80}\n") == \
        "F:1:8: sites: expected a list of sites, got a mapping"
    assert one_problem(tmp_path, "sites: []\n") == "F:1:8: sites: expected at least one site"
    assert one_problem(tmp_path, "sites:\n  - \n") == \
        "F:2:4: sites[0]: expected a mapping, got null"
    assert one_problem(tmp_path, "sites:\n  - listen: 80\n    routes: []\n") == \
        "F:3:13: sites[0].routes: expected at least one route"
    assert one_problem(tmp_path, "sites:\n  - listen: 80\n") == \
        "F:2:5: sites[0].routes: required key is missing"
    assert one_problem(tmp_path, "sites:\n  - listen: 80\n    routes: {path: /}\n") == \
        "F:3:13: sites[0].routes: expected a list of routes, got a mapping"


def test_two_defaults_on_one_address(tmp_path):
    assert one_problem(tmp_path, """\
        sites:
          - listen: ":80 default"
            routes: [{path: /, respond: 204}]
          - listen: ["127.0.0.1:81", "80 default"]
            routes: [{path: /, respond: 204}]
    """) == "F:4:30: sites[1].listen[1]: 0.0.0.0:80 already has a default site: sites[0] (line 2)"


def test_server_name_repeated_on_shared_address(tmp_path):
    assert one_problem(tmp_path, """\
        sites:
          - listen: ":80"
            server_names: [a.example, b.example]
            routes: [{path: /, respond: 204}]
          - listen: ":81"
            server_names: [a.example]
            routes: [{path: /, respond: 204}]
          - listen: [":81", ":80"]
            server_names: [c.example, B.Example]
            routes: [{path: /, respond: 204}]
    """) == ("F:9:31: sites[2].server_names[1]: server name 'b.example' on 0.0.0.0:80 "
             "is already used by sites[0] (line 3)")


def test_conflicting_backlogs(tmp_path):
    assert one_problem(tmp_path, """\
        sites:
          - listen: ":80 backlog=100"
            routes: [{path: /, respond: 204}]
          - listen: ":80 backlog=200"
            routes: [{path: /, respond: 204}]
    """) == ("F:4:13: sites[1].listen: backlog=200 conflicts with backlog=100 for "
             "0.0.0.0:80 at line 2 (one socket, one backlog)")


@pytest.mark.parametrize("name, expected", [
    ("a*.example.com", "'a*.example.com': a wildcard must be the whole first label, as in *.example.com"),
    ("*", "'*': a wildcard must be the whole first label, as in *.example.com"),
    ("www.*", "'www.*': a wildcard must be the whole first label, as in *.example.com"),
    (".example.com", "'.example.com' (nginx's shorthand) is not supported: list "
                     "'example.com' and '*.example.com'"),
    ("~^www\\d+$", "regular-expression server names are not supported; use exact "
                   "names or *.suffix wildcards"),
    ("example.com:8080", "'example.com:8080' is not a host name (a server name has no "
                         "port or path: the port belongs to listen)"),
    ("exa mple.com", "'exa mple.com' is not a valid host name (labels of letters, digits "
                     "and inner hyphens, 1 to 63 long)"),
    ("-bad.example", "'-bad.example' is not a valid host name (labels of letters, digits "
                     "and inner hyphens, 1 to 63 long)"),
    ("a..b", "'a..b' is not a valid host name (labels of letters, digits and inner "
             "hyphens, 1 to 63 long)"),
    ("bücher.de", "'bücher.de' is not ASCII: write an internationalised name in its "
                  "xn-- (punycode) form"),
    ("", "a server name must not be empty"),
])
def test_server_name_problems(tmp_path, name, expected):
    text = (f"sites:\n  - listen: 80\n    server_names: ['{name}']\n"
            "    routes: [{path: /, respond: 204}]\n")
    assert one_problem(tmp_path, text) == f"F:3:20: sites[0].server_names[0]: {expected}"


def test_server_names_types_and_repeats(tmp_path):
    assert problems(tmp_path, """\
        sites:
          - listen: 80
            server_names: [a.example, 42, A.EXAMPLE.]
            routes: [{path: /, respond: 204}]
    """) == [
        "F:3:31: sites[0].server_names[1]: expected a host name, got an integer 42",
        "F:3:35: sites[0].server_names[2]: server name 'a.example' is already listed in "
        "this site (line 3)",
    ]


# --------------------------------------------------------------------------
# Routes

def route_problem(tmp_path, route):
    """The one problem of a site whose only route is `route` (flow YAML)."""
    text = f"sites:\n  - listen: 80\n    routes:\n      - {route}\n"
    return one_problem(tmp_path, text)


@pytest.mark.parametrize("route, expected", [
    ("{respond: 204}", "F:4:9: sites[0].routes[0].path: required key is missing"),
    ("{path: /}", "F:4:9: sites[0].routes[0]: a route needs a handler: one of respond, static, "
     "proxy, fastcgi, app"),
    ("{path: /, respond: 204, static: {root: /srv}}",
     "F:4:33: sites[0].routes[0].static: a route takes exactly one handler, found "
     "'respond' and 'static'"),
    ("{path: /, fastcgi: {connect: '127.0.0.1:9000'}}",
     "F:4:28: sites[0].routes[0].fastcgi.root: required key is missing"),
    ("{path: /, proxy: {upstream: api}}",
     "F:4:37: sites[0].routes[0].proxy.upstream: unknown upstream 'api': no "
     "upstreams are defined (add it under the top-level key upstreams)"),
    ("{path: /, fastcgi: {root: /tmp}}",
     "F:4:28: sites[0].routes[0].fastcgi: expected the key upstream (a group's name) or "
     "connect (such as 127.0.0.1:9000 or unix:/run/php/php8.2-fpm.sock)"),
    ("{path: /, fastcgi: {connect: 'http://x:9', root: /tmp}}",
     "F:4:38: sites[0].routes[0].fastcgi.connect: expected an address such as 127.0.0.1:9000 "
     "or unix:/run/php/php8.2-fpm.sock, not a URL ('http://x:9')"),
    ("{path: /, fastcgi: {connect: 'unix:/run/x.sock', root: /tmp, split_path_info: '(.*)'}}",
     "F:4:87: sites[0].routes[0].fastcgi.split_path_info: expected two groups, the script "
     "name and PATH_INFO, such as '^(.+\\.php)(/.*)$'"),
    ("{path: /, fastcgi: {connect: 'unix:/run/x.sock', root: /tmp, params: {REQUEST_URI: x}}}",
     "F:4:79: sites[0].routes[0].fastcgi.params.REQUEST_URI: REQUEST_URI is computed for each "
     "request and cannot be fixed for a route"),
    ("{path: /, app: shop}",
     "F:4:24: sites[0].routes[0].app: unknown app 'shop': no apps are defined (add it "
     "under the top-level key apps)"),
    ("{path: /, cache: {}}",
     "F:4:19: sites[0].routes[0].cache: 'cache' is not a handler: it goes inside a proxy "
     "or fastcgi route, as proxy: {upstream: NAME, cache: {zone: NAME}}"),
    ("{path: /, respond: 204, cache: {zone: z}}",
     "F:4:33: sites[0].routes[0].cache: 'cache' is not a handler: it goes inside a proxy "
     "or fastcgi route, as proxy: {upstream: NAME, cache: {zone: NAME}}"),
    ("{path: /, repsond: 204}",
     "F:4:19: sites[0].routes[0].repsond: unknown key 'repsond'; did you mean 'respond'?"),
    ("{path: api/, respond: 204}",
     "F:4:16: sites[0].routes[0].path: a path must start with '/', got 'api/'"),
    ("{path: '= exact', respond: 204}",
     "F:4:16: sites[0].routes[0].path: a path must start with '/', got 'exact'"),
    ("{path: '^/api', respond: 204}",
     "F:4:16: sites[0].routes[0].path: a path must start with '/', got '^/api'; "
     "for a regular expression write '~ ^/api'"),
    ("{path: '@fallback', respond: 204}",
     "F:4:16: sites[0].routes[0].path: a path must start with '/', got '@fallback'; "
     "named locations (@name) are not supported"),
    ("{path: '~ ', respond: 204}",
     "F:4:16: sites[0].routes[0].path: expected a regular expression after '~'"),
    ("{path: '~ (unclosed', respond: 204}",
     "F:4:16: sites[0].routes[0].path: invalid regular expression: Unmatched ( or \\("),
    ("{path: '~* [z-a]', respond: 204}",
     "F:4:16: sites[0].routes[0].path: invalid regular expression: Invalid range end"),
    ("{path: '~ ^/(?i)api', respond: 204}",
     "F:4:16: sites[0].routes[0].path: '(?' is PCRE syntax; routes use POSIX extended "
     "regular expressions (no (?i), (?:...) or lookarounds; use ~* for case-insensitive "
     "matching)"),
    ("{path: '~ ^/v\\d+/', respond: 204}",
     "F:4:16: sites[0].routes[0].path: '\\d' is PCRE syntax, not POSIX; write [0-9]"),
    ("{path: \"/a\\tb\", respond: 204}",
     "F:4:16: sites[0].routes[0].path: must not contain control characters"),
    ("{path: 5, respond: 204}",
     "F:4:16: sites[0].routes[0].path: expected a string, got an integer 5"),
    ("[/, 204]", "F:4:9: sites[0].routes[0]: expected a mapping, got a list"),
])
def test_route_problems(tmp_path, route, expected):
    assert route_problem(tmp_path, route) == expected


def test_escaped_backslash_d_is_a_literal(tmp_path):
    # "\\d" in the regex is a backslash then "d": not the PCRE class.
    cfg = load(tmp_path, "sites:\n  - listen: 80\n    routes:\n"
                         "      - {path: '~ a\\\\d', respond: 204}\n")
    assert cfg.sites[0].routes[0].pattern == "a\\\\d"


def test_duplicate_routes(tmp_path):
    assert problems(tmp_path, """\
        sites:
          - listen: 80
            routes:
              - {path: /a, respond: 204}
              - {path: "= /a", respond: 204}
              - {path: "^~ /a", respond: 204}
              - {path: "= /a", respond: 204}
              - {path: "~ x", respond: 204}
              - {path: "~* x", respond: 204}
              - {path: "~ x", respond: 204}
          - listen: 81
            routes:
              - {path: /a, respond: 204}
    """) == [
        "F:6:16: sites[0].routes[2].path: duplicate route for '/a' (first at line 4); "
        "only the first could ever match",
        "F:7:16: sites[0].routes[3].path: duplicate route for '/a' (first at line 5); "
        "only the first could ever match",
        "F:10:16: sites[0].routes[6].path: duplicate route for 'x' (first at line 8); "
        "only the first could ever match",
    ]


# --------------------------------------------------------------------------
# respond

@pytest.mark.parametrize("respond, expected", [
    ("99", "F:4:28: sites[0].routes[0].respond: status 99 is out of range (200..599)"),
    ("600", "F:4:28: sites[0].routes[0].respond: status 600 is out of range (200..599)"),
    ("101", "F:4:28: sites[0].routes[0].respond: status 101 is informational (1xx), not a "
            "final response; use 200..599"),
    ("'204'", "F:4:28: sites[0].routes[0].respond: expected a status such as 204 or a "
              "mapping with status, body, content_type, headers; got a string '204'"),
    ("null", "F:4:28: sites[0].routes[0].respond: expected a status such as 204 or a "
             "mapping with status, body, content_type, headers; got null"),
    ("{status: '200'}",
     "F:4:37: sites[0].routes[0].respond.status: expected an integer, got a string '200'"),
    ("{status: 100}",
     "F:4:37: sites[0].routes[0].respond.status: status 100 is informational (1xx), not a "
     "final response; use 200..599"),
    ("{status: 1000}",
     "F:4:37: sites[0].routes[0].respond.status: status 1000 is out of range (200..599)"),
    ("{status: 204, body: x}",
     "F:4:48: sites[0].routes[0].respond.body: a 204 response has no content: the body "
     "must be empty"),
    ("{status: 304, body: x}",
     "F:4:48: sites[0].routes[0].respond.body: a 304 response has no content: the body "
     "must be empty"),
    ("{status: 204, content_type: text/plain}",
     "F:4:56: sites[0].routes[0].respond.content_type: a 204 response has no content: "
     "remove content_type or set it to null"),
    ("{body: 42}", "F:4:35: sites[0].routes[0].respond.body: expected a string, got an integer 42"),
    ("{body: null}", "F:4:35: sites[0].routes[0].respond.body: expected a string, got null"),
    ("{content_type: ''}", "F:4:43: sites[0].routes[0].respond.content_type: must not be empty"),
    ("{content_type: \"text/html\\n\"}",
     "F:4:43: sites[0].routes[0].respond.content_type: must not contain CR or LF"),
    ("{headers: [X-A]}",
     "F:4:38: sites[0].routes[0].respond.headers: expected a mapping of header names to "
     "values, got a list"),
    ("{headers: {\"X A\": b}}",
     "F:4:39: sites[0].routes[0].respond.headers.X A: 'X A' is not a valid header name "
     "(letters, digits and !#$%&'*+-.^_`|~ only)"),
    ("{headers: {\"X:A\": b}}",
     "F:4:39: sites[0].routes[0].respond.headers.X:A: 'X:A' is not a valid header name "
     "(letters, digits and !#$%&'*+-.^_`|~ only)"),
    ("{headers: {X-A: \"a\\r\\nSet-Cookie: x\"}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: must not contain CR or LF"),
    ("{headers: {X-A: \"a\\0b\"}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: must not contain NUL"),
    ("{headers: {X-A: \"a\\x1bb\"}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: must not contain the control "
     "character 0x1b"),
    ("{headers: {X-A: \" padded\"}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: must not start or end with whitespace"),
    ("{headers: {X-A: null}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: expected a string, got null"),
    ("{headers: {X-A: []}}",
     "F:4:44: sites[0].routes[0].respond.headers.X-A: expected at least one value"),
    ("{headers: {X-A: [ok, {}]}}",
     "F:4:49: sites[0].routes[0].respond.headers.X-A[1]: expected a string, got a mapping"),
    ("{headers: {X-A: a, x-a: b}}",
     "F:4:47: sites[0].routes[0].respond.headers.x-a: header 'x-a' is already set as 'X-A' "
     "(names are case-insensitive); give one name a list of values to send it more than once"),
])
def test_respond_problems(tmp_path, respond, expected):
    assert route_problem(tmp_path, f"{{path: /, respond: {respond}}}") == expected


def test_problem_stays_on_one_line(tmp_path):
    lines = problems(tmp_path, """\
        sites:
          - listen: 80
            routes:
              - {path: /, respond: {headers: {"X\\nA": b}, status: "2\\r"}}
    """)
    assert lines == [
        "F:4:39: sites[0].routes[0].respond.headers.X\\nA: 'X\\nA' is not a valid header name "
        "(letters, digits and !#$%&'*+-.^_`|~ only)",
        "F:4:59: sites[0].routes[0].respond.status: expected an integer, got a string '2\\r'",
    ]


@pytest.mark.parametrize("name, advice", [
    ("Content-Length", "the server computes it from body"),
    ("transfer-encoding", "the server chooses the framing"),
    ("Connection", "the server manages connections (see limits.keepalive_*)"),
    ("Keep-Alive", "the server manages connections (see limits.keepalive_*)"),
    ("Date", "the server sends the current date"),
    ("Server", "use the top-level key server_header instead"),
    ("Content-Type", "use the key content_type instead"),
])
def test_respond_refuses_server_owned_headers(tmp_path, name, advice):
    assert route_problem(tmp_path, f"{{path: /, respond: {{headers: {{{name}: x}}}}}}") == (
        f"F:4:39: sites[0].routes[0].respond.headers.{name}: header '{name}' is set by "
        f"the server: {advice}")


def test_batch_window():
    from scalws.config.loader import load_config_text
    base = "sites: [{listen: ['127.0.0.1:8080'], routes: [{path: /, respond: {body: x}}]}]\n"
    assert load_config_text(base).batch_window == pytest.approx(20e-6)  # on by default
    assert load_config_text("batch_window: 0\n" + base).batch_window == 0
    assert load_config_text("batch_window: 50us\n" + base).batch_window == pytest.approx(0.00005)
    with pytest.raises(Exception, match=r"<string>:1:15: batch_window: expected at most 1ms"):
        load_config_text("batch_window: 2ms\n" + base)


def test_busy_poll():
    from scalws.config.machine import BUSY_POLL_AUTO, cpu_quota, virtualized
    base = "sites: [{listen: ['127.0.0.1:8080'], routes: [{path: /, respond: {body: x}}]}]\n"
    quota = cpu_quota()
    workers = len(os.sched_getaffinity(0))
    auto = BUSY_POLL_AUTO if virtualized() and (quota is None or quota[0] >= workers) else 0
    assert load_config_text(base).busy_poll_auto.startswith("50us" if auto else "off")
    assert load_config_text("busy_poll: 0\n" + base).busy_poll_auto == ""
    assert BUSY_POLL_AUTO == pytest.approx(50e-6)
    assert load_config_text(base).busy_poll == pytest.approx(auto)  # auto by default
    assert load_config_text("busy_poll: auto\n" + base).busy_poll == pytest.approx(auto)
    assert load_config_text("busy_poll: 0\n" + base).busy_poll == 0
    assert load_config_text("busy_poll: 20us\n" + base).busy_poll == pytest.approx(20e-6)
    assert load_config_text("busy_poll: 1ms\n" + base).busy_poll == pytest.approx(0.001)
    assert load_config_text("busy_poll: 5.0e-05\n" + base).busy_poll == pytest.approx(50e-6)  # seconds
    with pytest.raises(Exception, match=r"<string>:1:12: busy_poll: expected auto or at most 1ms "
                       r"\(0 turns it off\), got 2ms"):
        load_config_text("busy_poll: 2ms\n" + base)
    with pytest.raises(Exception, match=r"<string>:1:12: busy_poll: expected auto or a duration "
                       r"such as 50us \(0 turns it off\), got a string 'often'"):
        load_config_text("busy_poll: often\n" + base)
    with pytest.raises(Exception, match=r"<string>:1:1: busy_pol: unknown key.*did you mean 'busy_poll'"):
        load_config_text("busy_pol: 1ms\n" + base)


@pytest.mark.parametrize("flags, hypervisor, dmi, expected", [
    ("fpu vme de pse tsc msr hypervisor lahf_lm", None, None, True),   # x86 guest
    ("fpu vme de pse tsc msr lahf_lm", None, None, False),             # x86 bare metal
    ("fpu vme de pse tsc msr lahf_lm", "xen\n", None, True),           # the kernel knows a hypervisor
    (None, None, ("QEMU", "KVM Virtual Machine"), True),               # arm64 KVM guest
    (None, None, ("Amazon EC2", "c6g.large"), True),                   # arm64 EC2 instance
    (None, None, ("Amazon EC2", "c6g.metal"), False),                  # ... but not a metal one
    (None, None, ("Dell Inc.", "PowerEdge R650"), False),              # a server
    (None, None, None, False),                                         # nothing to go by
])
def test_virtualized(tmp_path, flags, hypervisor, dmi, expected):
    from scalws.config.machine import virtualized
    cpuinfo, hyp, dmi_dir = tmp_path / "cpuinfo", tmp_path / "hypervisor", tmp_path / "dmi"
    if flags is not None:
        cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: X\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    if hypervisor is not None:
        hyp.write_text(hypervisor)
    if dmi is not None:
        dmi_dir.mkdir()
        (dmi_dir / "sys_vendor").write_text(dmi[0] + "\n")
        (dmi_dir / "product_name").write_text(dmi[1] + "\n")
    assert virtualized(str(cpuinfo), str(hyp), str(dmi_dir)) is expected


def cgroup_tree(tmp_path, version, quotas, mount_root="/", path="/svc/instance-1"):
    """A fake /proc/self/cgroup, /proc/self/mountinfo and cgroup mount for
    cpu_quota: the process in `path`; quotas maps a directory under the
    mount ("" is its root) to (quota, period), quota None for none."""
    point = tmp_path / ("unified" if version == 2 else "cpu")
    if version == 2:
        mount = f"30 23 0:27 {mount_root} {point} rw - cgroup2 cgroup2 rw,nsdelegate"
        cg = f"0::{path}"
    else:
        mount = f"32 31 0:29 {mount_root} {point} rw,relatime - cgroup cgroup rw,cpu,cpuacct"
        cg = f"4:cpu,cpuacct:{path}\n0::/"
    rel = path[len(mount_root.rstrip("/")):] if mount_root != "/" else path
    (point / rel.lstrip("/")).mkdir(parents=True)
    for d, (quota, period) in quotas.items():
        where = point / d
        where.mkdir(parents=True, exist_ok=True)
        if version == 2:
            (where / "cpu.max").write_text(f"{'max' if quota is None else quota} {period}\n")
        else:
            (where / "cpu.cfs_quota_us").write_text(f"{-1 if quota is None else quota}\n")
            (where / "cpu.cfs_period_us").write_text(f"{period}\n")
    (tmp_path / "cgroup").write_text(cg + "\n1:name=systemd:/\n")
    (tmp_path / "mountinfo").write_text(
        "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        f"33 31 0:30 / {tmp_path}/cpuacct rw - cgroup cgroup rw,cpuacct\n{mount}\n")
    return str(tmp_path / "cgroup"), str(tmp_path / "mountinfo"), point


@pytest.mark.parametrize("version", [1, 2])
def test_cpu_quota(tmp_path, version):
    from scalws.config.machine import cpu_quota
    name = "cpu.max" if version == 2 else "cpu.cfs_quota_us"
    # none anywhere
    cg, mi, point = cgroup_tree(tmp_path / "a", version, {"": (None, 100000), "svc/instance-1": (None, 100000)})
    assert cpu_quota(cg, mi) is None
    # on the process's own group
    cg, mi, point = cgroup_tree(tmp_path / "b", version, {"svc/instance-1": (150000, 100000)})
    assert cpu_quota(cg, mi) == (1.5, f"{point}/svc/instance-1/{name}")
    # on an ancestor only, and the tightest of two
    cg, mi, point = cgroup_tree(tmp_path / "c", version, {"svc": (60000, 100000)})
    assert cpu_quota(cg, mi) == (0.6, f"{point}/svc/{name}")
    cg, mi, point = cgroup_tree(tmp_path / "d", version,
                                {"svc": (20000, 100000), "svc/instance-1": (6000, 10000)})
    assert cpu_quota(cg, mi) == (0.2, f"{point}/svc/{name}")
    # a container whose cgroup mount starts below the hierarchy's root
    cg, mi, point = cgroup_tree(tmp_path / "e", version, {"inst": (50000, 100000)},
                                mount_root="/docker/abc", path="/docker/abc/inst")
    assert cpu_quota(cg, mi) == (0.5, f"{point}/inst/{name}")
    # nothing readable
    assert cpu_quota(str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_cpu_quota_edge_cases(tmp_path):
    from scalws.config.machine import cpu_quota
    # a mount point with a space, which mountinfo writes as \040
    point = tmp_path / "cg root" / "cpu"
    (point / "svc").mkdir(parents=True)
    (point / "svc" / "cpu.cfs_quota_us").write_text("25000\n")
    (point / "svc" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cgroup").write_text("4:cpu,cpuacct:/svc\n0::/\n")
    esc = str(point).replace(" ", "\\040")
    mi = tmp_path / "mountinfo"
    mi.write_text(f"32 31 0:29 / {esc} rw - cgroup cgroup rw,cpu,cpuacct\n")
    assert cpu_quota(str(tmp_path / "cgroup"), str(mi)) == (0.25, f"{point}/svc/cpu.cfs_quota_us")
    # a bind mount of another group listed first does not hide the hierarchy's mount
    other = tmp_path / "other"
    other.mkdir()
    mi.write_text(f"31 30 0:29 /elsewhere {other} rw - cgroup cgroup rw,cpu,cpuacct\n"
                  f"32 31 0:29 / {esc} rw - cgroup cgroup rw,cpu,cpuacct\n")
    assert cpu_quota(str(tmp_path / "cgroup"), str(mi)) == (0.25, f"{point}/svc/cpu.cfs_quota_us")
    # a group above the mount (a cgroup namespace's "/..") is not looked for below it
    (tmp_path / "cgroup").write_text("4:cpu,cpuacct:/../svc\n")
    assert cpu_quota(str(tmp_path / "cgroup"), str(mi)) is None
    # bytes that are not UTF-8, a zero period, garbage: no quota, no exception
    (tmp_path / "cgroup").write_text("4:cpu,cpuacct:/svc\n")
    mi.write_bytes(b"40 31 0:40 / /media/caf\xe9 rw - ext4 /dev/sda1 rw\n" +
                   f"32 31 0:29 / {esc} rw - cgroup cgroup rw,cpu,cpuacct\n".encode())
    (point / "svc" / "cpu.cfs_period_us").write_text("0\n")
    assert cpu_quota(str(tmp_path / "cgroup"), str(mi)) is None
    (point / "svc" / "cpu.cfs_quota_us").write_text("lots\n")
    assert cpu_quota(str(tmp_path / "cgroup"), str(mi)) is None


def test_busy_poll_auto_and_the_quota(monkeypatch):
    # Off under a quota smaller than the workers' CPUs; a quota of a CPU per
    # worker or more cannot be spent by polling, so a virtual machine polls.
    from scalws.config import machine
    monkeypatch.setattr(machine, "virtualized", lambda: True)
    monkeypatch.setattr(machine, "cpu_quota", lambda: (1.5, "/cg/cpu.max"))
    assert machine.busy_poll_auto(2) == (0.0, "off: a CPU quota of 1.5 CPUs for 2 worker(s) on /cg/cpu.max")
    assert machine.busy_poll_auto(1) == (machine.BUSY_POLL_AUTO, "50us: a virtual machine")
    monkeypatch.setattr(machine, "cpu_quota", lambda: None)
    assert machine.busy_poll_auto(4) == (machine.BUSY_POLL_AUTO, "50us: a virtual machine")
    monkeypatch.setattr(machine, "virtualized", lambda: False)
    assert machine.busy_poll_auto(4) == (0.0, "off: not a virtual machine")
    monkeypatch.setattr(machine, "cpu_quota", lambda: (0.5, "/cg/cpu.max"))
    assert machine.busy_poll_auto(1)[0] == 0.0
