"""The config half of managed applications: the top-level `apps` and the
`app` route handler.

    apps:
      api:
        asgi: "main:app"              # or command: ["node", "server.js"]
        dir: /srv/api                 # default: the configuration's folder
        workers: 2
        env: {KEY: value}
        allocator: jemalloc
    sites:
      - routes:
          - {path: /api/, app: api}
          - {path: /v2/, app: {name: api, strip_prefix: /v2, read_timeout: 5s}}

An app is run and supervised by the master (scalws/control/apps.py); each
worker listens on a unix socket the master names. A route `app: NAME`
compiles to a model.Proxy to the implicit upstream group "app:NAME", whose
servers are the current generation's sockets (filled in by the master
before it forks the web workers; empty here). Its `unavailable_503` makes
"no worker up" a 503 with Retry-After instead of a 502.

compile_apps() validates `apps` and adds the groups; compile() validates a
route's `app:`; check_references() checks, once the file is walked, that
every route names a defined app. Keys, defaults and behaviour are in
docs/configuration.md (`apps`, `app`).
"""
from __future__ import annotations

import difflib
import os
import pwd
import re
import shutil
import sys
import sysconfig

from ..model import GROUP_PREFIX, App, Proxy, Upstream, clean_path, group_name
from . import proxy, upstreams

KEYS = ("asgi", "command", "dir", "workers", "env", "python", "user", "restart",
        "start_timeout", "stop_timeout", "allocator", "cpus")
ROUTE_KEYS = ("name", "strip_prefix", "host", "connect_timeout", "read_timeout",
              "send_timeout", "headers", "buffer_size")
RESTART = ("always", "on-failure", "never")
ALLOCATORS = ("system", "jemalloc", "mimalloc")
# allocator -> (library file in the multiarch folder, Debian package)
LIBRARIES = {"jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
             "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0")}
MAX_WORKERS = 256

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_ASGI_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*(\(\))?")
_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by the master for each worker; an app's env: must not override them.
RESERVED_ENV = ("SCALWS_APP_SOCKET", "SCALWS_APP_NAME", "SCALWS_APP_WORKER", "LD_PRELOAD")


def library_dir() -> str:
    """Debian's multiarch library folder (/usr/lib/x86_64-linux-gnu)."""
    arch = sysconfig.get_config_var("MULTIARCH")
    if not arch:
        try:
            import subprocess
            arch = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"],
                                  capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            arch = ""
    return os.path.join("/usr/lib", arch) if arch else "/usr/lib"


def _sub(path, name):
    return f"{path}.{name}"


# --------------------------------------------------------------------------
# `apps:`

def compile_apps(ctx, node, cfg, path="apps") -> dict:
    """Validate the top-level `apps` mapping; returns name -> App and adds
    each app's group to ctx.implicit_upstreams."""
    keys = ctx.mapping(node, path, None)
    ctx.app_names.update(keys or ())
    out = {}
    for name, (knode, vnode) in (keys or {}).items():
        apath = _sub(path, name)
        if not _NAME_RE.fullmatch(name):
            ctx.error(knode, apath, f"'{name}' is not an app name (1 to 32 letters, "
                      "digits, '_', '.' and '-'; it names the app's sockets)")
            continue
        app = _app(ctx, knode, vnode, apath, name)
        if app is not None:
            out[name] = app
            # Servers: the master's, per generation (control/apps.py).
            ctx.implicit_upstreams[group_name(name)] = Upstream(
                name=group_name(name), servers=[], keepalive=64, mark=app.mark)
    return out


def _app(ctx, knode, node, path, name):
    keys = ctx.mapping(node, path, KEYS)
    if keys is None:
        return None
    before = len(ctx.problems)
    ok = True
    values = {}
    if "dir" in keys:
        d = ctx.path(keys["dir"][1], _sub(path, "dir"))
        if d is not None and not os.path.isdir(d):
            ctx.error(keys["dir"][1], _sub(path, "dir"), f"the folder {d} does not exist")
            d = None
        ok &= d is not None
        folder = d or ctx.base_dir
    else:
        folder = ctx.base_dir
    values["dir"] = folder

    if "asgi" in keys and "command" in keys:
        later = max(("asgi", "command"), key=lambda k: (keys[k][0].start_mark.line,
                                                         keys[k][0].start_mark.column))
        ctx.error(keys[later][0], _sub(path, later), "asgi and command exclude each "
                  "other: give one")
        return None
    if "asgi" in keys:
        spec = ctx.string(keys["asgi"][1], _sub(path, "asgi"))
        if spec is not None and not _ASGI_RE.fullmatch(spec):
            ctx.error(keys["asgi"][1], _sub(path, "asgi"), f"expected module:callable "
                      f"(as main:app or pkg.main:app), got '{spec}'")
            spec = None
        python = sys.executable
        if "python" in keys:
            python = ctx.path(keys["python"][1], _sub(path, "python"))
            if python is not None and not (os.path.isfile(python) and os.access(python, os.X_OK)):
                ctx.error(keys["python"][1], _sub(path, "python"),
                          f"{python} is not an executable file")
                python = None
        if spec is None or python is None:
            return None
        values["asgi"] = spec
        values["argv"] = [python, "-m", "uvicorn"]
    elif "command" in keys:
        if "python" in keys:
            ctx.error(keys["python"][0], _sub(path, "python"), "python goes with asgi; "
                      "a command names its own interpreter")
            ok = False
        argv = _command(ctx, keys["command"][1], _sub(path, "command"), folder,
                        _env(ctx, keys["env"][1], _sub(path, "env")) if "env" in keys else {})
        if argv is None:
            return None
        values["argv"] = argv
    else:
        ctx.error(knode, path, "an app needs asgi (module:callable, run by uvicorn) or "
                  "command (a list: the program and its arguments)")
        return None

    if "workers" in keys:
        values["workers"] = ctx.integer(keys["workers"][1], _sub(path, "workers"), 1, MAX_WORKERS)
    if "env" in keys:
        values["env"] = _env(ctx, keys["env"][1], _sub(path, "env"))
    if "user" in keys:
        unode = keys["user"][1]
        user = ctx.string(unode, _sub(path, "user"))
        if user is not None:
            try:
                pwd.getpwnam(user)
            except KeyError:
                ctx.error(unode, _sub(path, "user"), f"no such user '{user}' on this system")
                user = None
        values["user"] = user
    if "restart" in keys:
        values["restart"] = ctx.choice(keys["restart"][1], _sub(path, "restart"), RESTART)
    for key in ("start_timeout", "stop_timeout"):
        if key in keys:
            values[key] = ctx.duration(keys[key][1], _sub(path, key), positive=True, hi=3600.0)
    if "allocator" in keys:
        anode = keys["allocator"][1]
        kind = ctx.choice(anode, _sub(path, "allocator"), ALLOCATORS)
        values["allocator"] = kind
        if kind in LIBRARIES:
            lib, package = LIBRARIES[kind]
            full = os.path.join(library_dir(), lib)
            if not os.path.isfile(full):
                ctx.error(anode, _sub(path, "allocator"), f"{kind} needs {full}, which is "
                          f"missing: install the Debian package {package} "
                          f"(apt install {package})")
                values["allocator"] = None
            else:
                values["preload"] = full
    if "cpus" in keys:
        values["cpus"] = _cpus(ctx, keys["cpus"][1], _sub(path, "cpus"))
    if not ok or len(ctx.problems) > before:
        return None
    return App(name=name, mark=ctx.mark(knode), **values)


def _command(ctx, node, path, folder, env):
    """command: a non-empty list of strings; the program is found as a shell
    would (PATH of the app's environment, else the folder for ./x)."""
    if ctx.kind(node) != "seq" or not node.value:
        ctx.error(node, path, "expected a list: the program and its arguments, as "
                  f"[node, server.js]; got {ctx.describe(node)}")
        return None
    argv = []
    for i, item in enumerate(node.value):
        text = ctx.scalar_text(item, f"{path}[{i}]")
        if text is None:
            return None
        if "\0" in text:
            ctx.error(item, f"{path}[{i}]", "must not contain NUL")
            return None
        argv.append(text)
    prog = argv[0]
    if "/" in prog:
        full = os.path.normpath(os.path.join(folder, prog))
        if not (os.path.isfile(full) and os.access(full, os.X_OK)):
            ctx.error(node.value[0], f"{path}[0]", f"{full} is not an executable file")
            return None
    else:
        full = shutil.which(prog, path=(env or {}).get("PATH") or clean_path())
        if full is None:
            ctx.error(node.value[0], f"{path}[0]", f"'{prog}' is not found in PATH "
                      f"({(env or {}).get('PATH') or clean_path()})")
            return None
    argv[0] = full
    return argv


def _env(ctx, node, path):
    keys = ctx.mapping(node, path, None)
    if keys is None:
        return None
    out = {}
    for name, (knode, vnode) in keys.items():
        if not _ENV_RE.fullmatch(name):
            ctx.error(knode, _sub(path, name), f"'{name}' is not an environment variable "
                      "name (letters, digits and '_', not starting with a digit)")
            continue
        if name in RESERVED_ENV:
            ctx.error(knode, _sub(path, name), f"{name} is set by scalws for each worker")
            continue
        value = ctx.scalar_text(vnode, _sub(path, name))
        if value is None:
            continue
        if "\0" in value:
            ctx.error(vnode, _sub(path, name), "must not contain NUL")
            continue
        out[name] = value
    return out


def _cpus(ctx, node, path):
    if ctx.kind(node) != "seq" or not node.value:
        ctx.error(node, path, f"expected a list of CPU numbers, got {ctx.describe(node)}")
        return None
    n = os.cpu_count() or 1
    out = []
    for i, item in enumerate(node.value):
        cpu = ctx.integer(item, f"{path}[{i}]", 0, n - 1)
        if cpu is None:
            return None
        out.append(cpu)
    return sorted(set(out))


# --------------------------------------------------------------------------
# The `app` route handler

def compile(ctx, node, path):
    """Validate a route's `app:` (a name, or a mapping with name and proxy
    options); returns a Proxy to the app's group, or None."""
    kind = ctx.kind(node)
    if kind == "str":
        name = _ref(ctx, node, path)
        return None if name is None else _proxy(name)
    if kind != "map":
        ctx.error(node, path, f"expected an app's name or a mapping with name; "
                  f"got {ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, ROUTE_KEYS)
    if keys is None:
        return None
    before = len(ctx.problems)
    if not ctx.require(keys, node, path, "name"):
        return None
    name = _ref(ctx, keys["name"][1], _sub(path, "name"))
    ok = name is not None
    values = {}
    if "strip_prefix" in keys:
        values["strip_prefix"] = upstreams._path_text(ctx, keys["strip_prefix"][1],
                                                  _sub(path, "strip_prefix"))
    if "host" in keys:
        values["host"] = upstreams._host_header(ctx, keys["host"][1], _sub(path, "host"))
    for key in ("connect_timeout", "read_timeout", "send_timeout"):
        if key in keys:
            values[key] = ctx.duration(keys[key][1], _sub(path, key), positive=True)
    if "headers" in keys:
        headers = proxy._headers(ctx, keys["headers"][1], _sub(path, "headers"))
        if headers is None:
            ok = False
        else:
            values["request_headers"], values["response_headers"] = headers
    if "buffer_size" in keys:
        values["buffer_size"] = ctx.size(keys["buffer_size"][1], _sub(path, "buffer_size"),
                                         4 << 10, 16 << 20)
    if not ok or len(ctx.problems) > before:
        return None
    return _proxy(name, **values)


def _proxy(name, **values):
    return Proxy(upstream=group_name(name), unavailable_503=True, **values)


def _ref(ctx, node, path):
    name = ctx.string(node, path)
    if name is None:
        return None
    ctx.app_refs.append((name, node, path))
    return name


def check_references(ctx, cfg) -> None:
    """After the walk: every route names a defined app; each app's routes
    may try each of its workers once before answering 503."""
    known = sorted(ctx.app_names)
    for name, node, path in ctx.app_refs:
        if name in known:
            continue
        if not known:
            ctx.error(node, path, f"unknown app '{name}': no apps are defined (add it "
                      "under the top-level key apps)")
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f" (apps: {', '.join(known)})"
        ctx.error(node, path, f"unknown app '{name}'{hint}")
    for site in cfg.sites:
        for route in site.routes:
            if route.kind == "app":
                app = cfg.apps.get(route.handler.upstream[len(GROUP_PREFIX):])
                if app is not None:
                    route.handler.retries = app.workers
    for app in cfg.apps.values():
        if app.user is None:
            app.user = cfg.user
