"""The config half of the FastCGI handler (scalws/config/directives/fastcgi.py):
the accepted forms, and each refused value with its exact message, its
FILE:LINE:COLUMN and its key path.

Sample files are inline; in expected problem lines the file is shown as F.
"""
import textwrap

import pytest

from scalws.config.errors import ConfigError
from scalws.config.loader import load_config
from scalws.config.model import FastCGI

# One group `php`, then one route whose fastcgi mapping's keys start at
# line 8, column 11.
ROUTE_HEAD = """\
upstreams:
  php: {servers: ["127.0.0.1:9000"]}
sites:
  - listen: 80
    routes:
      - path: "~ [^/]\\\\.php(/|$)"
        fastcgi:
"""
P = "sites[0].routes[0].fastcgi"


def write(tmp_path, text):
    path = tmp_path / "scalws.yaml"
    path.write_text(text)
    return path


def route_text(body):
    return ROUTE_HEAD + textwrap.indent(textwrap.dedent(body), " " * 10)


def problems(tmp_path, body):
    path = write(tmp_path, route_text(body))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [line.replace(str(path), "F", 1) for line in str(info.value).splitlines()]


def one_problem(tmp_path, body):
    lines = problems(tmp_path, body)
    assert len(lines) == 1, lines
    return lines[0]


def load_fastcgi(tmp_path, body):
    cfg = load_config(write(tmp_path, route_text(body)))
    route = cfg.sites[0].routes[0]
    assert route.kind == "fastcgi"
    return route.handler, cfg


def test_accepted_with_a_group_and_every_key(tmp_path):
    (tmp_path / "www").mkdir()
    fc, cfg = load_fastcgi(tmp_path, f"""\
        upstream: php
        root: {tmp_path}/www/
        index: app.php
        split_path_info: "^(.+\\\\.php)(/.*)$"
        check_script: off
        follow_symlinks: off
        keep_conn: off
        pipeline: off
        params: {{APP_ENV: production, HTTPS: "on", N: 3}}
        connect_timeout: 2s
        read_timeout: 500ms
        send_timeout: 1m
        retries: 0
        headers: {{response: {{remove: [X-Powered-By], set: {{X-Frame-Options: DENY}}}}}}
        buffer_size: 32k
        """)
    assert fc == FastCGI(
        upstream="php", root=f"{tmp_path}/www", index="app.php",
        split_path_info="^(.+\\.php)(/.*)$", check_script=False, follow_symlinks="off",
        keep_conn=False, pipeline=False,
        params=[("APP_ENV", "production"), ("HTTPS", "on"), ("N", "3")],
        connect_timeout=2.0, read_timeout=0.5, send_timeout=60.0, retries=0,
        response_headers=[("X-Frame-Options", "DENY"), ("X-Powered-By", None)],
        buffer_size=32 << 10)


def test_connect_makes_one_implicit_group_per_address(tmp_path):
    text = f"""\
sites:
  - listen: 80
    routes:
      - {{path: /a/, fastcgi: {{connect: "unix:/run/php/fpm.sock", root: {tmp_path}}}}}
      - {{path: /b/, fastcgi: {{connect: "unix:/run/php/fpm.sock", root: {tmp_path}}}}}
      - {{path: /c/, fastcgi: {{connect: "127.0.0.1:9000", root: {tmp_path}}}}}
"""
    cfg = load_config(write(tmp_path, text))
    names = [r.handler.upstream for r in cfg.sites[0].routes]
    assert names == ["fastcgi:unix:/run/php/fpm.sock"] * 2 + ["fastcgi:127.0.0.1:9000"]
    assert cfg.upstreams["fastcgi:unix:/run/php/fpm.sock"].servers[0].kind == "unix"
    # The defaults.
    fc = cfg.sites[0].routes[2].handler
    assert (fc.index, fc.check_script, fc.keep_conn, fc.pipeline, fc.split_path_info,
            fc.retries) == ("index.php", True, True, True, None, 1)


@pytest.mark.parametrize("body, expected", [
    ("upstream: php\nroot: /tmp\nsplit_path_inf: '^(.+)(/.*)$'\n",
     f"F:10:11: {P}.split_path_inf: unknown key 'split_path_inf'; did you mean "
     "'split_path_info'?"),
    ("upstream: php\nconnect: 127.0.0.1:9001\nroot: /tmp\n",
     f"F:9:11: {P}.connect: upstream and connect exclude each other: give one"),
    ("root: /tmp\n",
     f"F:8:11: {P}: expected the key upstream (a group's name) or connect (such as "
     "127.0.0.1:9000 or unix:/run/php/php8.2-fpm.sock)"),
    ("connect: 'http://127.0.0.1:9000'\nroot: /tmp\n",
     f"F:8:20: {P}.connect: expected an address such as 127.0.0.1:9000 or "
     "unix:/run/php/php8.2-fpm.sock, not a URL ('http://127.0.0.1:9000')"),
    ("upstream: php\n",
     f"F:8:11: {P}.root: required key is missing"),
    ("upstream: php\nroot: /etc/hostname\n",
     f"F:9:17: {P}.root: /etc/hostname is not a folder"),
    ("upstream: php\nroot: /nonexistent/dir\n",
     f"F:9:17: {P}.root: the folder /nonexistent/dir does not exist"),
    ("upstream: php\nroot: /tmp\nsplit_path_info: '^(.+\\.php(/.*)$'\n",
     f"F:10:28: {P}.split_path_info: invalid regular expression: Unmatched ( or \\("),
    ("upstream: php\nroot: /tmp\nsplit_path_info: '^(.+\\.php)/.*$'\n",
     f"F:10:28: {P}.split_path_info: expected two groups, the script name and PATH_INFO, "
     "such as '^(.+\\.php)(/.*)$'"),
    ("upstream: php\nroot: /tmp\nsplit_path_info: '^[(](.+\\.php)/.*$'\n",
     f"F:10:28: {P}.split_path_info: expected two groups, the script name and PATH_INFO, "
     "such as '^(.+\\.php)(/.*)$'"),
    ("upstream: php\nroot: /tmp\nparams:\n  APP-ENV: x\n",
     f"F:11:13: {P}.params.APP-ENV: 'APP-ENV' is not a parameter name (letters, digits and "
     "'_', not starting with a digit)"),
    ("upstream: php\nroot: /tmp\nparams:\n  1X: x\n",
     f"F:11:13: {P}.params.1X: '1X' is not a parameter name (letters, digits and "
     "'_', not starting with a digit)"),
    ("upstream: php\nroot: /tmp\nparams:\n  APP_ENV: x\n  query_string: y\n",
     f"F:12:13: {P}.params.query_string: query_string is computed for each request and "
     "cannot be fixed for a route"),
    ("upstream: php\nroot: /tmp\nparams:\n  REMOTE_ADDR: 10.0.0.1\n",
     f"F:11:13: {P}.params.REMOTE_ADDR: REMOTE_ADDR is computed for each request and "
     "cannot be fixed for a route"),
    ("upstream: php\nroot: /tmp\nparams:\n  A: \"x\\ny\"\n",
     f"F:11:16: {P}.params.A: must not contain NUL or line breaks"),
    ("upstream: php\nroot: /tmp\nread_timeout: 10 minutes\n",
     f"F:10:25: {P}.read_timeout: expected a duration such as 10s or 500ms, got a string "
     "'10 minutes'"),
    ("upstream: php\nroot: /tmp\nconnect_timeout: 0s\n",
     f"F:10:28: {P}.connect_timeout: must be more than 0, got 0s"),
    ("upstream: phq\nroot: /tmp\n",
     f"F:8:21: {P}.upstream: unknown upstream 'phq'; did you mean 'php'?"),
    ("upstream: php\nroot: /tmp\nbuffer_size: 1k\n",
     f"F:10:24: {P}.buffer_size: must be between 4k and 16m, got 1k"),
    ("upstream: php\nroot: /tmp\nkeep_conn: maybe\n",
     f"F:10:22: {P}.keep_conn: expected on or off, got a string 'maybe'"),
    ("upstream: php\nroot: /tmp\nindex: a/index.php\n",
     f"F:10:18: {P}.index: expected a file name such as index.php, got 'a/index.php'"),
    ("upstream: php\nroot: /tmp\nretries: -1\n",
     f"F:10:20: {P}.retries: must be between 0 and 100, got -1"),
    ("upstream: php\nroot: /tmp\ncache: on\n",
     f"F:10:18: {P}.cache: expected a zone's name, off, or a mapping with zone (a name "
     "under cache_zones) or max_size (a zone for this route alone); got a boolean (on)"),
])
def test_each_refused_value_names_its_place(tmp_path, body, expected):
    assert one_problem(tmp_path, body) == expected


def test_every_problem_is_reported_at_once(tmp_path):
    lines = problems(tmp_path, """\
        upstream: nope
        root: /nonexistent/dir
        split_path_info: '(.*)'
        read_timeout: soon
        params: {REQUEST_METHOD: GET}
        """)
    assert sorted(l.split(": ", 2)[1] for l in lines) == sorted([
        f"{P}.upstream", f"{P}.root", f"{P}.split_path_info", f"{P}.params.REQUEST_METHOD",
        f"{P}.read_timeout"])
    assert all(l.startswith("F:") for l in lines)
