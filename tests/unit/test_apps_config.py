"""`apps:` and the `app:` route handler (scalws/config/directives/app.py):
what a valid file compiles to, and each mistake refused at its file:line
with the key path."""
import os
import sys
import textwrap

import pytest

from scalws.config.errors import ConfigError
from scalws.config.loader import load_config

SITE = """
sites:
  - listen: "127.0.0.1:8080"
    routes:
      - {path: /api/, app: api}
"""


def load(tmp_path, text):
    f = tmp_path / "scalws.yaml"
    f.write_text(textwrap.dedent(text))
    return load_config(str(f))


def problems(tmp_path, text):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return [(p.line, p.key_path, p.message) for p in info.value.problems]


def one(tmp_path, text):
    found = problems(tmp_path, text)
    assert len(found) == 1, found
    return found[0]


def test_asgi_app_defaults(tmp_path):
    cfg = load(tmp_path, 'apps:\n  api: {asgi: "main:app"}\n' + SITE)
    app = cfg.apps["api"]
    assert app.argv == [sys.executable, "-m", "uvicorn"] and app.asgi == "main:app"
    assert app.dir == str(tmp_path) and app.workers == 1 and app.restart == "always"
    assert app.start_timeout == 10.0 and app.stop_timeout == 10.0
    assert app.allocator == "system" and app.preload is None and app.cpus == []
    route = cfg.sites[0].routes[0]
    assert route.kind == "app"
    assert route.handler.upstream == "app:api" and route.handler.unavailable_503
    assert route.handler.retries == 1
    group = cfg.upstreams["app:api"]
    assert group.servers == []            # the master's, per generation


def test_command_app_and_route_options(tmp_path):
    (tmp_path / "srv").mkdir()
    cfg = load(tmp_path, """
        user: root
        apps:
          web:
            command: [sh, -c, "exec node server.js"]
            dir: srv
            workers: 3
            env: {NODE_ENV: production, N: 1}
            restart: on-failure
            start_timeout: 2s
            stop_timeout: 500ms
            cpus: [0]
        sites:
          - listen: "127.0.0.1:8080"
            routes:
              - {path: /w/, app: {name: web, strip_prefix: /w, read_timeout: 5s}}
        """)
    app = cfg.apps["web"]
    assert app.argv[0] == "/usr/bin/sh" or app.argv[0].endswith("/sh")
    assert app.argv[1:] == ["-c", "exec node server.js"] and app.asgi is None
    assert app.dir == str(tmp_path / "srv") and app.workers == 3
    assert app.env == {"NODE_ENV": "production", "N": "1"}
    assert (app.restart, app.start_timeout, app.stop_timeout, app.cpus) == \
        ("on-failure", 2.0, 0.5, [0])
    assert app.user == "root"             # the master's user: by default
    h = cfg.sites[0].routes[0].handler
    assert (h.strip_prefix, h.read_timeout, h.retries) == ("/w", 5.0, 3)


@pytest.mark.parametrize("allocator, lib", [("jemalloc", "libjemalloc.so.2"),
                                            ("mimalloc", "libmimalloc.so.2")])
def test_allocator(tmp_path, allocator, lib):
    text = f'apps:\n  api: {{asgi: "main:app", allocator: {allocator}}}\n' + SITE
    path = f"/usr/lib/x86_64-linux-gnu/{lib}"
    if os.path.exists(path):
        assert load(tmp_path, text).apps["api"].preload == path
    else:
        line, key, msg = one(tmp_path, text)
        assert key == "apps.api.allocator" and "install the Debian package" in msg


@pytest.mark.parametrize("body, line, key, message", [
    ('  api: {asgi: "main:app", wrokers: 2}', 3, "apps.api.wrokers",
     "unknown key 'wrokers'; did you mean 'workers'?"),
    ('  api: {workers: 2}', 3, "apps.api", "an app needs asgi"),
    ('  api: {asgi: "main:app", command: [node]}', 3, "apps.api.command",
     "asgi and command exclude each other"),
    ('  api: {asgi: "main"}', 3, "apps.api.asgi", "expected module:callable"),
    ('  api: {command: node}', 3, "apps.api.command", "expected a list"),
    ('  api: {command: [no-such-program-x]}', 3, "apps.api.command[0]",
     "'no-such-program-x' is not found in PATH"),
    ('  api: {asgi: "m:a", workers: 0}', 3, "apps.api.workers", "must be between 1 and 256"),
    ('  api: {asgi: "m:a", restart: sometimes}', 3, "apps.api.restart",
     "expected one of always, on-failure, never"),
    ('  api: {asgi: "m:a", allocator: tcmalloc}', 3, "apps.api.allocator",
     "expected one of system, jemalloc, mimalloc"),
    ('  api: {asgi: "m:a", dir: /no/such/folder}', 3, "apps.api.dir",
     "the folder /no/such/folder does not exist"),
    ('  api: {asgi: "m:a", user: no-such-user-x}', 3, "apps.api.user", "no such user"),
    ('  api: {asgi: "m:a", env: {SCALWS_APP_SOCKET: x}}', 3,
     "apps.api.env.SCALWS_APP_SOCKET", "is set by scalws"),
    ('  api: {asgi: "m:a", start_timeout: 0}', 3, "apps.api.start_timeout",
     "must be more than 0"),
    ('  api: {asgi: "m:a", cpus: [100000]}', 3, "apps.api.cpus[0]", "must be between"),
    ('  api: {command: [node], python: /usr/bin/python3}', 3, "apps.api.python",
     "python goes with asgi"),
])
def test_app_problems(tmp_path, body, line, key, message):
    got = one(tmp_path, "\napps:\n" + body + "\n" + SITE)
    assert got[0] == line and got[1] == key and message in got[2], got


def test_unknown_app_in_a_route(tmp_path):
    got = one(tmp_path, 'apps:\n  apx: {asgi: "m:a"}\n' + SITE)
    assert got == (7, "sites[0].routes[0].app", "unknown app 'api'; did you mean 'apx'?")
    got = one(tmp_path, SITE)
    assert got[1] == "sites[0].routes[0].app" and "no apps are defined" in got[2]


def test_route_mapping_problems(tmp_path):
    got = problems(tmp_path, 'apps:\n  api: {asgi: "m:a"}\n' + SITE.replace(
        "app: api}", "app: {name: api, strip_prefx: /a, read_timeout: -1}}"))
    assert [k for _, k, _ in got] == ["sites[0].routes[0].app.strip_prefx",
                                      "sites[0].routes[0].app.read_timeout"], got
    assert "did you mean 'strip_prefix'?" in got[0][2]
