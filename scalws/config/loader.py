"""Load a YAML configuration file into the model, or refuse it with every
problem it has.

    load_config(path)                        -> Config   (a file)
    load_config_text(text, source=...)       -> Config   (a string)
    default_config()                         -> Config   (scalwsd with no --config)

The document is composed with yaml.compose (SafeLoader), not constructed, so
that every node keeps its start mark; a walker then checks it against the
schema, converting units and filling defaults. Problems are collected, not
raised one by one: the caller gets one ConfigError listing all of them as
FILE:LINE:COLUMN: key.path: message. Handlers validate their own route key
through scalws.config.directives (the config half of each handler).

This module imports nothing compiled (no scalws.server, handlers, http), so
`scalwsd --check-config` works even when a native extension fails to build.
Regular expressions are checked with the C library's own regcomp through
ctypes, the same engine the router uses.

Relative paths (pid, log files, unix sockets) are taken relative to the
folder of the configuration file (the current folder for a string), and the
model holds them absolute: the server may change folder after loading.
"""
from __future__ import annotations

import ctypes
import difflib
import hashlib
import html
import ipaddress
import json
import os
import pwd
import re
import urllib.parse

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .directives import (HANDLERS, UNAVAILABLE_HANDLERS, app, cache, cache_peers, fastcgi,
                         protocols, proxy, resolver, tls)
from .directives.respond import header_value_problem
from .errors import ConfigError, Problem
from .machine import busy_poll_auto, usable_cpus
from .model import Config, Instances, Listen, LogConfig, Route, Site
from .units import DURATION_HINT, SIZE_HINT, format_size, parse_duration, parse_size

__all__ = ["load_config", "load_config_text", "default_config", "ConfigError"]

_TAG = "tag:yaml.org,2002:"
_SCALAR_KINDS = {
    _TAG + "str": "str",
    _TAG + "int": "int",
    _TAG + "float": "float",
    _TAG + "bool": "bool",
    _TAG + "null": "null",
}
_MERGE_TAG = _TAG + "merge"
_CONSTRUCTOR = yaml.constructor.SafeConstructor()

_NOT_AVAILABLE = "'{}' is not available in this version of scalws"


TOP_KEYS = ("workers", "user", "sandbox", "server_header", "shutdown_timeout", "watch_config",
            "pid", "log", "limits", "http2", "http3", "batch_window", "busy_poll", "trusted_proxies",
            "tls_tickets", "resolver", "upstreams", "cache_zones", "apps", "instances", "sites",
            "status")
# Keys of the design (DESIGN.md) that this version does not implement yet
# (none today; the mechanism stays for the next ones).
TOP_UNAVAILABLE: dict = {}
LOG_KEYS = ("access", "format", "error", "error_format", "level", "buffer", "flush")
SITE_KEYS = ("listen", "server_names", "tls", "routes")

LOG_FORMATS = ("combined", "json")
LOG_LEVELS = ("debug", "info", "notice", "warn", "error", "crit")
MAX_WORKERS = 1024
UNIX_PATH_MAX = 107            # sizeof(sun_path) - 1 on Linux


# --------------------------------------------------------------------------
# The walking context: positions, problems and typed readers of YAML nodes.
# Directive modules receive it as `ctx`.

class _Context:
    def __init__(self, source: str, base_dir: str):
        self.source = source
        self.base_dir = base_dir
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        # id(Listen or Route) -> (node, key path), for checks made later.
        self.origin: dict = {}
        self.explicit_backlog: set = set()     # id(Listen) with backlog=N
        # The reverse proxy (directives/proxy.py): routes may name a group
        # written later in the file, so names are checked after the walk.
        self.upstream_refs: list = []          # [(name, node, key path)]
        self.fastcgi_refs: list = []           # the ones made by fastcgi routes
        self.upstream_names: set = set()       # every name under `upstreams`
        self.implicit_upstreams: dict = {}     # "url:ADDRESS" -> Upstream
        self.resolver = None                   # model.Resolver, before the groups
        self.resolved: dict = {}               # host -> ("ok", addrs, ttl) | ("fail", why)
        self.pending_names_ok = False          # cache peers: a name may resolve later
        # Managed apps (directives/app.py): names under `apps`, routes' refs.
        self.app_names: set = set()
        self.app_refs: list = []               # [(name, node, key path)]
        # The response cache (directives/cache.py): routes may name a zone
        # written anywhere, so names are checked after the walk.
        self.cache_zone_names: set = set()     # every name under `cache_zones`
        self.cache_refs: list = []             # [(name, node, path, RouteCache, its
                                               #   max_object_size node or None)]
        self.implicit_cache_zones: dict = {}   # "route:FILE:LINE" -> CacheZone
        self.cache_purges: list = []           # [(node, path)] of purge relying on trusted_proxies

    # -- reporting ---------------------------------------------------------

    def error(self, where, path: str, message: str) -> None:
        """Record a problem at `where`: a Node, a yaml Mark or (line, col)."""
        if isinstance(where, Node):
            where = where.start_mark
        if isinstance(where, tuple):
            line, col = where
        else:
            line, col = where.line + 1, where.column + 1
        # One problem, one line: user text in keys and values (a quoted
        # "a\nb") must not break the FILE:LINE:COL format.
        self.problems.append(Problem(self.source, line, col, _one_line(path),
                                     _one_line(message)))

    def warning(self, where, path: str, message: str) -> None:
        """Record a problem that does not refuse the file (Config.warnings)."""
        n = len(self.problems)
        self.error(where, path, message)
        self.warnings.append(self.problems.pop(n))

    def mark(self, node: Node) -> tuple:
        m = node.start_mark
        return (self.source, m.line + 1, m.column + 1)

    # -- node kinds --------------------------------------------------------

    @staticmethod
    def kind(node: Node) -> str:
        """'map', 'seq', 'str', 'int', 'float', 'bool', 'null' or 'other'."""
        if isinstance(node, MappingNode):
            return "map"
        if isinstance(node, SequenceNode):
            return "seq"
        return _SCALAR_KINDS.get(node.tag, "other")

    def describe(self, node: Node) -> str:
        """What the node is, for "expected X, got Y" messages."""
        kind = self.kind(node)
        if kind == "str":
            text = node.value if len(node.value) <= 40 else node.value[:37] + "..."
            return f"a string '{text}'" if text else "an empty string"
        if kind == "int":
            return f"an integer {node.value}"
        if kind == "float":
            return f"a number {node.value}"
        if kind == "bool":
            return f"a boolean ({node.value})"
        if kind == "null":
            return "null"
        if kind == "map":
            return "a mapping"
        if kind == "seq":
            return "a list"
        return f"a value tagged {node.tag}"

    # -- mappings ----------------------------------------------------------

    def mapping(self, node, path, known, unavailable=None, ignore_prefix=None):
        """Return {key: (key_node, value_node)} for a mapping node.

        Reports duplicate keys (PyYAML would silently keep the last), keys
        that are not strings, and, when `known` is not None, unknown keys
        (with a did-you-mean) and `unavailable` ones (with their message);
        those are left out of the result. YAML merge keys (<<) are honoured:
        keys written in the mapping win over merged ones. Returns None after
        reporting if the node is not a mapping.
        """
        if not isinstance(node, MappingNode):
            self.error(node, path, f"expected a mapping, got {self.describe(node)}")
            return None
        result = {}
        for name, (knode, vnode) in self._pairs(node, path, set()).items():
            kpath = _join(path, name)
            if known is not None and name not in known:
                if ignore_prefix and name.startswith(ignore_prefix):
                    continue
                if unavailable and name in unavailable:
                    self.error(knode, kpath, unavailable[name])
                    continue
                candidates = list(known) + list(unavailable or ())
                close = difflib.get_close_matches(name, candidates, n=1)
                if not close:
                    close = difflib.get_close_matches(name.lower(), candidates, n=1)
                if close:
                    hint = f"; did you mean '{close[0]}'?"
                else:
                    hint = f" (known keys: {', '.join(known)})"
                self.error(knode, kpath, f"unknown key '{name}'{hint}")
                continue
            result[name] = (knode, vnode)
        return result

    def _pairs(self, node, path, visiting):
        """Own keys (duplicates reported) first, then merged keys not yet set."""
        own = {}
        merged = []
        visiting = visiting | {id(node)}
        for knode, vnode in node.value:
            if knode.tag == _MERGE_TAG:
                sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
                for src in sources:
                    if not isinstance(src, MappingNode):
                        self.error(src, path, "'<<' (merge) expects a mapping or a "
                                   f"list of mappings, got {self.describe(src)}")
                    elif id(src) not in visiting:
                        merged.append(src)
                continue
            if not isinstance(knode, ScalarNode) or self.kind(knode) == "null":
                self.error(knode, path, f"a key must be a string, got {self.describe(knode)}")
                continue
            name = knode.value
            if name in own:
                first = own[name][0].start_mark
                self.error(knode, _join(path, name),
                           f"duplicate key '{name}' (first at line {first.line + 1}, "
                           f"column {first.column + 1})")
                continue
            own[name] = (knode, vnode)
        for src in merged:
            for name, pair in self._pairs(src, path, visiting).items():
                own.setdefault(name, pair)
        return own

    def require(self, keys, node, path, name) -> bool:
        if name in keys:
            return True
        self.error(node, _join(path, name), "required key is missing")
        return False

    # -- scalars -----------------------------------------------------------
    # Each reader returns the converted value, or None after reporting.

    def integer(self, node, path, lo=None, hi=None):
        if self.kind(node) != "int":
            self.error(node, path, f"expected an integer, got {self.describe(node)}")
            return None
        value = _CONSTRUCTOR.construct_yaml_int(node)
        return self._in_range(node, path, value, lo, hi, str)

    def boolean(self, node, path):
        if self.kind(node) != "bool":
            self.error(node, path, f"expected on or off, got {self.describe(node)}")
            return None
        return _CONSTRUCTOR.construct_yaml_bool(node)

    def string(self, node, path, nonempty=True):
        if self.kind(node) != "str":
            self.error(node, path, f"expected a string, got {self.describe(node)}")
            return None
        if nonempty and not node.value:
            self.error(node, path, "must not be empty")
            return None
        return node.value

    def scalar_text(self, node, path):
        """A scalar as written (so `X-Version: 1.0` stays "1.0"); not null."""
        if self.kind(node) not in ("str", "int", "float", "bool"):
            self.error(node, path, f"expected a string, got {self.describe(node)}")
            return None
        return node.value

    def choice(self, node, path, choices):
        if self.kind(node) == "str" and node.value in choices:
            return node.value
        self.error(node, path, f"expected one of {', '.join(choices)}; "
                   f"got {self.describe(node)}")
        return None

    def size(self, node, path, lo=None, hi=None):
        kind = self.kind(node)
        try:
            if kind not in ("int", "str"):
                raise ValueError(SIZE_HINT)
            value = parse_size(_CONSTRUCTOR.construct_yaml_int(node)
                               if kind == "int" else node.value)
        except ValueError as e:
            self.error(node, path, f"{e}, got {self.describe(node)}")
            return None
        return self._in_range(node, path, value, lo, hi, format_size)

    def duration(self, node, path, lo=0.0, hi=None, positive=False):
        kind = self.kind(node)
        try:
            if kind == "int":
                raw = _CONSTRUCTOR.construct_yaml_int(node)
            elif kind == "float":
                raw = _CONSTRUCTOR.construct_yaml_float(node)
            elif kind == "str":
                raw = node.value
            else:
                raise ValueError(DURATION_HINT)
            value = parse_duration(raw)
        except ValueError as e:
            self.error(node, path, f"{e}, got {self.describe(node)}")
            return None
        if positive and value <= 0:
            self.error(node, path, f"must be more than 0, got {node.value}")
            return None
        return self._in_range(node, path, value, lo, hi, _fmt_seconds)

    def _in_range(self, node, path, value, lo, hi, fmt):
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            if lo is not None and hi is not None:
                bounds = f"between {fmt(lo)} and {fmt(hi)}"
            elif lo is not None:
                bounds = f"at least {fmt(lo)}"
            else:
                bounds = f"at most {fmt(hi)}"
            self.error(node, path, f"must be {bounds}, got {node.value}")
            return None
        return value

    # -- paths -------------------------------------------------------------

    def path(self, node, path):
        """A file path, made absolute against the configuration's folder."""
        text = self.string(node, path)
        if text is None:
            return None
        if "\0" in text:
            self.error(node, path, "must not contain NUL")
            return None
        return os.path.normpath(os.path.join(self.base_dir, text))

    def writable_file(self, node, path):
        """A path whose parent folder must exist (a log file)."""
        full = self.path(node, path)
        if full is None:
            return None
        parent = os.path.dirname(full)
        if os.path.isdir(full):
            self.error(node, path, f"{full} is a folder, expected a file path")
            return None
        if not os.path.isdir(parent):
            self.error(node, path, f"the folder {parent} does not exist")
            return None
        return full


def _one_line(text: str) -> str:
    """Escape unprintable characters (newlines, controls) as Python does."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _fmt_seconds(value: float) -> str:
    return f"{value:g}s"


# --------------------------------------------------------------------------
# Entry points

# `watch_config: on`: how often the file is read (control/watch.py).
WATCH_CONFIG_ON = 2.0


def _watch_config(ctx, node) -> float:
    """`watch_config`: on (every 2 s), off, or how often, 100ms..1h."""
    if ctx.kind(node) == "bool":
        return WATCH_CONFIG_ON if ctx.boolean(node, "watch_config") else 0.0
    value = ctx.duration(node, "watch_config", lo=0.0, hi=3600.0)
    if value is None:
        return 0.0
    if 0 < value < 0.1:
        ctx.error(node, "watch_config", "expected at least 100ms (off or 0 turns it off)")
        return 0.0
    return value


def load_config(path) -> Config:
    """Read and validate the file at `path`; raise ConfigError on problems."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError([(source, 0, 0, "", f"cannot read the file: "
                            f"{e.strerror or e}")]) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError([(source, line, col, "",
                            "the file is not UTF-8 text")]) from None
    base_dir = os.path.dirname(os.path.abspath(source))
    cfg = _load(text, source, base_dir)
    cfg.source_digest = hashlib.sha256(data).digest()
    return cfg


def load_config_text(text: str, source: str = "<string>", base_dir=None) -> Config:
    """Validate a configuration given as a string; `source` names it in errors.

    Relative paths resolve against `base_dir` (default: the current folder).
    """
    return _load(text, source, base_dir or os.getcwd())


def default_config() -> Config:
    """The configuration of `scalwsd` started without --config: a welcome
    page at `/` and the current folder under it."""
    folder = os.getcwd()
    return _load(default_yaml(folder), "<built-in default>", folder)


# How many of the folder's entries the welcome page links to.
WELCOME_ENTRIES = 50


def default_yaml(folder: str) -> str:
    """The built-in default site for `folder` as YAML (docs/configuration.md,
    "The built-in default"). The welcome page is built here, once: it names
    the folder and links to its entries as they are at start; every other
    path is answered from the folder itself, folders by their listing."""
    try:
        names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
    except OSError:
        names = []
    dirs = [n + "/" for n in names if os.path.isdir(os.path.join(folder, n))]
    files = [n for n in names if not os.path.isdir(os.path.join(folder, n))]
    entries = dirs + files
    items = "".join(
        f'<li><a href="/{urllib.parse.quote(n)}">{html.escape(n)}</a></li>\n'
        for n in entries[:WELCOME_ENTRIES])
    if len(entries) > WELCOME_ENTRIES:
        items += f"<li>and {len(entries) - WELCOME_ENTRIES} more</li>\n"
    listing = (f"<ul>\n{items}</ul>\n" if items else
               "<p>It has no entries to show.</p>\n")
    page = WELCOME_PAGE.format(folder=html.escape(folder), listing=listing)
    # JSON strings are YAML double-quoted scalars: any folder name is safe.
    return DEFAULT_YAML.format(body=json.dumps(page), root=json.dumps(folder))


DEFAULT_YAML = """\
# scalwsd with no --config: a welcome page and the current folder on 127.0.0.1:8080.
workers: 1
sites:
  - listen: "127.0.0.1:8080"
    routes:
      - path: "= /"
        respond:
          status: 200
          content_type: "text/html; charset=utf-8"
          body: {body}
      - path: /
        static:
          root: {root}
          autoindex: on
"""

WELCOME_PAGE = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Welcome to ScalWS</title>
</head>
<body>
<h1>ScalWS is running</h1>
<p>This is the built-in default page: scalwsd was started without
a configuration file.</p>
<p>It also serves the folder it was started in, <code>{folder}</code>:
every other path is a file or a folder in it (a folder without an
index.html is listed; names starting with a dot are not served).
Its entries when scalwsd started:</p>
{listing}<p>To serve your own sites, write a configuration (see
docs/configuration.md), check it with
<code>scalwsd --check-config FILE</code> and start
<code>scalwsd --config FILE</code>.</p>
</body>
</html>
"""


def _load(text: str, source: str, base_dir: str) -> Config:
    ctx = _Context(source, base_dir)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        raise ConfigError([(source, *where, "", _yaml_message(e))]) from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        col = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        char = f"U+{e.character:04X}" if isinstance(e.character, int) else repr(e.character)
        raise ConfigError([(source, line, col, "", f"invalid YAML: {e.reason} "
                            f"(found {char})")]) from None
    except yaml.YAMLError as e:                    # no position known
        raise ConfigError([(source, 1, 1, "", f"invalid YAML: {e}")]) from None
    except RecursionError:
        raise ConfigError([(source, 1, 1, "", "the document is nested too deeply")]) from None

    cfg = _walk_document(ctx, root)
    if ctx.problems:
        raise ConfigError(dict.fromkeys(ctx.problems))   # drop exact repeats
    cfg.warnings = sorted(dict.fromkeys(ctx.warnings), key=lambda p: (p.file, p.line, p.column))
    return cfg


def _yaml_message(e: yaml.MarkedYAMLError) -> str:
    """PyYAML's problem and context as one sentence (position given apart)."""
    problem, context = e.problem, e.context
    if not problem:
        message = context or "syntax error"
    elif not context:
        message = problem
    elif problem.startswith("but "):          # "expected X" + "but found Y"
        message = f"{context}, {problem}"
    else:
        cm = e.context_mark
        where = f" at line {cm.line + 1}" if cm else ""
        message = f"{problem} ({context}{where})"
    if "'\\t'" in message:
        message += "; indent with spaces, not tabs"
    return f"invalid YAML: {message}"


# --------------------------------------------------------------------------
# The schema walk

def _walk_document(ctx: _Context, root) -> Config:
    cfg = Config(source=ctx.source)
    if root is None or ctx.kind(root) == "null":
        ctx.error((1, 1), "", "the file is empty: expected a mapping with at least "
                  "the key 'sites'")
        return cfg
    if not isinstance(root, MappingNode):
        ctx.error(root, "", "expected a mapping of settings at the top level, "
                  f"got {ctx.describe(root)}")
        return cfg
    keys = ctx.mapping(root, "", TOP_KEYS, TOP_UNAVAILABLE, ignore_prefix="x-")

    cpus = usable_cpus()
    cfg.cpus = cpus
    cfg.workers = len(cpus)
    if "workers" in keys:
        node = keys["workers"][1]
        if ctx.kind(node) == "str" and node.value == "auto":
            pass
        elif ctx.kind(node) == "int":
            n = ctx.integer(node, "workers", 1, MAX_WORKERS)
            if n is not None:
                cfg.workers = n
        else:
            ctx.error(node, "workers", f"expected an integer (1..{MAX_WORKERS}) or "
                      f"auto, got {ctx.describe(node)}")

    if "user" in keys:
        node = keys["user"][1]
        name = ctx.string(node, "user")
        if name is not None:
            try:
                pwd.getpwnam(name)
            except KeyError:
                ctx.error(node, "user", f"no such user '{name}' on this system")
            else:
                cfg.user = name
                cfg.user_mark = ctx.mark(node)

    if "sandbox" in keys:
        node = keys["sandbox"][1]
        if ctx.kind(node) == "bool":
            cfg.sandbox = "on" if ctx.boolean(node, "sandbox") else "off"
        elif ctx.kind(node) == "str" and node.value == "required":
            cfg.sandbox = "required"
        else:
            ctx.error(node, "sandbox", f"expected on, off or required, got {ctx.describe(node)}")

    if "server_header" in keys:
        cfg.server_header = _server_header(ctx, keys["server_header"][1])

    if "shutdown_timeout" in keys:
        value = ctx.duration(keys["shutdown_timeout"][1], "shutdown_timeout")
        if value is not None:
            cfg.shutdown_timeout = value

    if "watch_config" in keys:
        cfg.watch_config = _watch_config(ctx, keys["watch_config"][1])

    if "batch_window" in keys:
        node = keys["batch_window"][1]
        value = ctx.duration(node, "batch_window")
        if value is not None:
            if value > 0.001:
                ctx.error(node, "batch_window", "expected at most 1ms (0 turns it off)")
            else:
                cfg.batch_window = value

    node = keys["busy_poll"][1] if "busy_poll" in keys else None
    busy_auto = node is None or (ctx.kind(node) == "str" and node.value == "auto")
    if not busy_auto:
        value = _busy_poll(ctx, node)
        if value is not None:
            cfg.busy_poll, cfg.busy_poll_auto = value, ""

    if "pid" in keys:
        cfg.pid = ctx.path(keys["pid"][1], "pid")

    if "log" in keys:
        _log(ctx, keys["log"][1], cfg.log)

    if "limits" in keys:
        protocols.limits(ctx, keys["limits"][1], cfg.limits)
    if "http2" in keys:
        protocols.http2(ctx, keys["http2"][1], cfg.http2)
    if "http3" in keys:
        protocols.http3(ctx, keys["http3"][1], cfg.http3)

    if "trusted_proxies" in keys:
        cfg.trusted_proxies = proxy.compile_trusted_proxies(
            ctx, keys["trusted_proxies"][1], "trusted_proxies")

    if "status" in keys:
        cfg.status = _status(ctx, keys["status"][1])

    if "tls_tickets" in keys:
        cfg.tickets = tls.compile_tickets(ctx, keys["tls_tickets"][1], "tls_tickets")

    # Before the groups and the sites: their host names resolve through it.
    if "resolver" in keys:
        cfg.resolver = resolver.compile(ctx, keys["resolver"][1], "resolver")
    else:
        cfg.resolver = resolver.default()
    ctx.resolver = cfg.resolver

    upstreams = {}
    if "upstreams" in keys:
        upstreams = proxy.compile_upstreams(ctx, keys["upstreams"][1], "upstreams")

    zones = {}
    if "cache_zones" in keys:
        zones = cache.compile_zones(ctx, keys["cache_zones"][1], "cache_zones")

    if "apps" in keys:
        cfg.apps = app.compile_apps(ctx, keys["apps"][1], cfg)

    if "instances" in keys:
        cfg.instances = _instances(ctx, keys["instances"][1], keys.get("workers"))
        if cfg.instances is not None:
            cfg.workers = cfg.instances.cpus_per_instance
    if busy_auto:  # once the number of workers is known
        cfg.busy_poll, cfg.busy_poll_auto = busy_poll_auto(cfg.workers)

    if ctx.require(keys, root, "", "sites"):
        cfg.sites = _sites(ctx, keys["sites"][1])
        if cfg.instances is not None:
            _instances_listens(ctx, cfg.sites)
    # After the sites: routes name groups, and `url:` adds implicit ones.
    cfg.upstreams = proxy.check_references(ctx, upstreams)
    fastcgi.mark_groups(ctx, cfg.upstreams)
    app.check_references(ctx, cfg)
    cfg.cache_zones = cache.check_references(ctx, zones, cfg.trusted_proxies)
    cache_peers.finish(ctx, cfg)
    return cfg


INSTANCE_KEYS = tuple(k for k in Instances.__dataclass_fields__ if k != "mark")


def _instances(ctx, node, workers):
    """`instances:` (scalws-controller): counts, CPUs, limits and the
    autoscaling thresholds; None after an error in it."""
    keys = ctx.mapping(node, "instances", INSTANCE_KEYS)
    if keys is None:
        return None
    n = len(ctx.problems)
    ins = Instances(mark=ctx.mark(node))
    if workers is not None:
        ctx.error(workers[0], "workers", "under 'instances' each instance runs "
                  "instances.cpus_per_instance workers: remove 'workers'")
    for name in ("min", "max", "cpus_per_instance", "samples", "scale_up_queue"):
        if name in keys:
            value = ctx.integer(keys[name][1], f"instances.{name}", 1, MAX_WORKERS)
            if value is not None:
                setattr(ins, name, value)
    if "max" not in keys:
        ins.max = ins.min
    elif ins.max < ins.min:
        ctx.error(keys["max"][1], "instances.max",
                  f"must be at least instances.min ({ins.min}), got {ins.max}")
    usable = usable_cpus()
    ins.cpus = usable
    if "cpus" in keys:
        cpus = _cpu_list(ctx, keys["cpus"][1], "instances.cpus")
        if cpus is not None:
            ins.cpus = cpus
    need = ins.max * ins.cpus_per_instance
    if len(ins.cpus) < need:
        where = keys["cpus"][1] if "cpus" in keys else node
        ctx.error(where, "instances.cpus", f"instances.max x cpus_per_instance = {need} "
                  f"CPUs, but {len(ins.cpus)} are given ({_cpu_text(ins.cpus)})")
    if "memory_limit" in keys:
        ins.memory_limit = ctx.size(keys["memory_limit"][1], "instances.memory_limit",
                                    lo=16 * 1024 * 1024)
    if "cpu_quota" in keys:
        ins.cpu_quota = _fraction(ctx, keys["cpu_quota"][1], "instances.cpu_quota",
                                  hi=float(ins.cpus_per_instance), what="CPUs")
    for name in ("scale_up_busy", "scale_down_busy"):
        if name in keys:
            value = _fraction(ctx, keys[name][1], f"instances.{name}", hi=1.0)
            if value is not None:
                setattr(ins, name, value)
    if ins.scale_down_busy >= ins.scale_up_busy:
        where = keys.get("scale_down_busy", keys.get("scale_up_busy", (node, node)))[1]
        ctx.error(where, "instances.scale_down_busy", "must be below instances.scale_up_busy "
                  f"({ins.scale_down_busy:.0%} >= {ins.scale_up_busy:.0%})")
    if "scale_up_p99" in keys:
        ins.scale_up_p99 = ctx.duration(keys["scale_up_p99"][1], "instances.scale_up_p99",
                                        positive=True)
    for name in ("sample_interval", "cooldown", "start_timeout"):
        if name in keys:
            value = ctx.duration(keys[name][1], f"instances.{name}", lo=0.05 if name ==
                                 "sample_interval" else 0.0, hi=3600.0)
            if value is not None:
                setattr(ins, name, value)
    return ins if len(ctx.problems) == n else None


def _instances_listens(ctx, sites):
    """Several instances share a TCP port with SO_REUSEPORT; a unix socket
    cannot be shared that way (docs/operations.md, "scalws-controller")."""
    for i, site in enumerate(sites):
        for j, listen in enumerate(site.listen):
            if listen.kind == "unix":
                f, line, col = listen.mark
                ctx.error((line, col), f"sites[{i}].listen[{j}]", "a unix socket cannot "
                          "be shared by several instances: under 'instances' listen on "
                          "TCP addresses only")


def _fraction(ctx, node, path, hi, what=None):
    """`75%` or `0.75` (or, with `what`, a number of CPUs such as 1.5 or 150%)."""
    kind = ctx.kind(node)
    value = None
    if kind in ("int", "float"):
        value = float(_CONSTRUCTOR.construct_yaml_float(node))
    elif kind == "str" and node.value.endswith("%"):
        try:
            value = float(node.value[:-1]) / 100
        except ValueError:
            value = None
    if value is None or value <= 0 or value > hi:
        bound = f"{hi:g} {what}" if what else "100%"
        ctx.error(node, path, f"expected a percentage such as 75% or a fraction above 0 "
                  f"and at most {bound}, got {ctx.describe(node)}")
        return None
    return value


def _cpu_list(ctx, node, path):
    """`[0, 1, 2]` or "0-3,6": CPU ids this machine has, each once."""
    ids = []
    kind = ctx.kind(node)
    if kind == "seq":
        for item in node.value:
            v = ctx.integer(item, path, 0, 65535)
            if v is None:
                return None
            ids.append(v)
    elif kind in ("str", "int"):
        try:
            for part in str(node.value).split(","):
                a, _, b = part.strip().partition("-")
                lo, hi = int(a), int(b or a)
                if hi < lo:
                    raise ValueError
                ids.extend(range(lo, hi + 1))
        except ValueError:
            ctx.error(node, path, f"expected a list of CPU ids or a range such as "
                      f"\"0-3,6\", got {ctx.describe(node)}")
            return None
    else:
        ctx.error(node, path, f"expected a list of CPU ids or a range such as \"0-3\", "
                  f"got {ctx.describe(node)}")
        return None
    if len(set(ids)) != len(ids):
        ctx.error(node, path, "names a CPU twice")
        return None
    have = os.cpu_count() or 1
    bad = [c for c in ids if c >= have]
    if bad:
        ctx.error(node, path, f"this machine has CPUs 0-{have - 1}, not {_cpu_text(bad)}")
        return None
    if not ids:
        ctx.error(node, path, "must name at least one CPU")
        return None
    return ids


def _cpu_text(ids) -> str:
    return ",".join(str(c) for c in ids)


def _busy_poll(ctx, node):
    """`busy_poll` other than `auto`: a duration up to 1ms, or None after an error."""
    kind = ctx.kind(node)
    if kind not in ("int", "float", "str") or (kind == "str" and not _is_duration(node.value)):
        ctx.error(node, "busy_poll", "expected auto or a duration such as 50us "
                  f"(0 turns it off), got {ctx.describe(node)}")
        return None
    value = ctx.duration(node, "busy_poll")
    if value is not None and value > 0.001:
        ctx.error(node, "busy_poll", f"expected auto or at most 1ms (0 turns it off), got {node.value}")
        return None
    return value


def _is_duration(text: str) -> bool:
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True


def _server_header(ctx, node):
    kind = ctx.kind(node)
    if kind == "bool" and not _CONSTRUCTOR.construct_yaml_bool(node):
        return None
    if kind == "str" and node.value == "off":
        return None
    if kind != "str":
        ctx.error(node, "server_header", f"expected a string or off, got {ctx.describe(node)}")
        return "scalws"
    if not node.value:
        ctx.error(node, "server_header", "must not be empty (use off to send no "
                  "Server header)")
        return "scalws"
    why = header_value_problem(node.value)
    if why is not None:
        ctx.error(node, "server_header", why)
        return "scalws"
    return node.value


def _log(ctx, node, log: LogConfig) -> None:
    keys = ctx.mapping(node, "log", LOG_KEYS)
    if keys is None:
        return
    if "access" in keys:
        vnode = keys["access"][1]
        if _is_off(ctx, vnode):
            log.access = None
        elif ctx.kind(vnode) == "str":
            log.access = ctx.writable_file(vnode, "log.access")
        else:
            ctx.error(vnode, "log.access", f"expected a file path or off, got "
                      f"{ctx.describe(vnode)}")
    if "error" in keys:
        vnode = keys["error"][1]
        if ctx.kind(vnode) == "str" and vnode.value == "stderr":
            log.error = None
        elif ctx.kind(vnode) == "str":
            log.error = ctx.writable_file(vnode, "log.error")
        else:
            ctx.error(vnode, "log.error", f"expected a file path or stderr, got "
                      f"{ctx.describe(vnode)}")
    if "format" in keys:
        log.format = ctx.choice(keys["format"][1], "log.format", LOG_FORMATS) or log.format
    if "error_format" in keys:
        log.error_format = ctx.choice(keys["error_format"][1], "log.error_format",
                                      ("text", "json")) or log.error_format
    if "level" in keys:
        log.level = ctx.choice(keys["level"][1], "log.level", LOG_LEVELS) or log.level
    if "buffer" in keys:
        value = ctx.size(keys["buffer"][1], "log.buffer", 4 << 10, 16 << 20)
        if value is not None:
            log.buffer = value
    if "flush" in keys:
        value = ctx.duration(keys["flush"][1], "log.flush", positive=True)
        if value is not None:
            log.flush = value


def _is_off(ctx, node) -> bool:
    kind = ctx.kind(node)
    return ((kind == "bool" and not _CONSTRUCTOR.construct_yaml_bool(node))
            or (kind == "str" and node.value == "off"))


# -- sites -----------------------------------------------------------------

def _sites(ctx, node) -> list:
    if ctx.kind(node) != "seq":
        ctx.error(node, "sites", f"expected a list of sites, got {ctx.describe(node)}")
        return []
    if not node.value:
        ctx.error(node, "sites", "expected at least one site")
        return []
    sites = []
    for i, item in enumerate(node.value):
        site = _site(ctx, item, f"sites[{i}]")
        if site is not None:
            sites.append((i, site))
    _check_across_sites(ctx, sites)
    return [site for _, (site, _) in sites]


def _site(ctx, node, path):
    """Return (Site, [(server name, its node, its path)]) or None."""
    keys = ctx.mapping(node, path, SITE_KEYS)
    if keys is None:
        return None
    site = Site(listen=[], server_names=[], routes=[], mark=ctx.mark(node))
    name_nodes = []
    if ctx.require(keys, node, path, "listen"):
        site.listen = _listens(ctx, keys["listen"][1], f"{path}.listen")
    if "server_names" in keys:
        name_nodes = _server_names(ctx, keys["server_names"][1], f"{path}.server_names")
        site.server_names = [name for name, _, _ in name_nodes]
    if "tls" in keys:
        site.tls = tls.compile_site_tls(ctx, keys["tls"][1], f"{path}.tls", site.server_names)
    tls_listens = [l for l in site.listen if l.tls or l.kind == "quic"]
    if tls_listens and site.tls is None and "tls" not in keys:
        first = tls_listens[0]
        lnode, lpath = ctx.origin[id(first)]
        ctx.error(lnode, lpath, f"listen option '{'quic' if first.kind == 'quic' else 'tls'}' "
                  "needs the site's certificates: add tls: {cert: FILE, key: FILE} to the site")
    if "tls" in keys and not tls_listens and site.listen:
        ctx.error(keys["tls"][0], f"{path}.tls", "the site has certificates but no listen "
                  "address with the 'tls' option (write e.g. \":443 tls\")")
    if ctx.require(keys, node, path, "routes"):
        site.routes = _routes(ctx, keys["routes"][1], f"{path}.routes")
    return site, name_nodes


def _items(ctx, node, path, what):
    """A list node's items with their paths, or a single scalar as one item."""
    kind = ctx.kind(node)
    if kind == "seq":
        if not node.value:
            ctx.error(node, path, f"expected at least one {what}")
        return [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
    if kind in ("str", "int"):
        return [(node, path)]
    ctx.error(node, path, f"expected a {what} or a list of them, got {ctx.describe(node)}")
    return []


# -- listen ------------------------------------------------------------------

_LISTEN_OPTIONS = ("default", "backlog", "tls", "h2c", "http2", "quic")
_LISTEN_UNAVAILABLE = {
    "ssl": "the listen option is called 'tls' in scalws (nginx's 'ssl')",
}


def _listens(ctx, node, path) -> list:
    out = []
    seen = {}
    for item, ipath in _items(ctx, node, path, "listen address"):
        listen = _listen(ctx, item, ipath)
        if listen is None:
            continue
        if listen.key in seen:
            ctx.error(item, ipath, f"'{_fmt_key(listen.key)}' is already listed in "
                      f"this site (line {seen[listen.key]})")
            continue
        seen[listen.key] = listen.mark[1]
        ctx.origin[id(listen)] = (item, ipath)
        out.append(listen)
    return out


def _listen(ctx, node, path):
    kind = ctx.kind(node)
    if kind not in ("str", "int"):
        ctx.error(node, path, "expected an address such as 127.0.0.1:8080, :80, "
                  f"[::]:80 or unix:/run/scalws.sock, got {ctx.describe(node)}")
        return None
    text = node.value
    words = text.split()
    if not words:
        ctx.error(node, path, "must not be empty")
        return None
    listen = Listen(kind="tcp", text=text, mark=ctx.mark(node))
    ok = True
    addr = words[0]
    if addr.startswith("unix:"):
        listen.kind = "unix"
        sock = addr[len("unix:"):]
        if not sock:
            ctx.error(node, path, "expected a socket path after 'unix:'")
            return None
        listen.path = os.path.normpath(os.path.join(ctx.base_dir, sock))
        if len(listen.path.encode()) > UNIX_PATH_MAX:
            ctx.error(node, path, f"the socket path {listen.path} is longer than "
                      f"{UNIX_PATH_MAX} bytes (the limit of a unix socket address)")
            ok = False
    else:
        try:
            listen.host, listen.port = _host_port(addr)
        except ValueError as e:
            ctx.error(node, path, str(e))
            ok = False

    seen = set()
    for word in words[1:]:
        name, eq, value = word.partition("=")
        if name in seen:
            ctx.error(node, path, f"listen option '{name}' is given twice")
            ok = False
            continue
        seen.add(name)
        if name == "default" and not eq:
            listen.default = True
        elif name == "tls" and not eq:
            if listen.kind == "unix":
                ctx.error(node, path, "TLS on a unix socket is not supported")
                ok = False
            listen.tls = True
        elif name == "h2c" and not eq:
            listen.h2c = True
        elif name == "quic" and not eq:
            if listen.kind == "unix":
                ctx.error(node, path, "QUIC runs over UDP: it cannot listen on a unix socket")
                ok = False
            else:
                listen.kind = "quic"
        elif name == "http2" and eq and value in ("on", "off"):
            listen.http2 = value == "on"
        elif name == "http2" and not eq:
            ctx.error(node, path, "HTTP/2 is on by default on TLS listeners (ALPN h2); write "
                      "'h2c' for cleartext HTTP/2 with prior knowledge, or 'http2=off' to "
                      "refuse HTTP/2 on a TLS listener")
            ok = False
        elif name == "backlog" and eq:
            if not value.isdigit() or not 1 <= int(value) <= 65535:
                ctx.error(node, path, f"backlog must be an integer between 1 and "
                          f"65535, got '{value}'")
                ok = False
            else:
                listen.backlog = int(value)
                ctx.explicit_backlog.add(id(listen))
        elif name in _LISTEN_UNAVAILABLE:
            ctx.error(node, path, _LISTEN_UNAVAILABLE[name])
            ok = False
        elif name in _LISTEN_OPTIONS:
            form = {"backlog": "backlog=N", "http2": "http2=on or http2=off"}.get(name, name)
            ctx.error(node, path, f"listen option '{word}' is malformed; write {form}")
            ok = False
        else:
            close = difflib.get_close_matches(name, _LISTEN_OPTIONS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else \
                " (options: default, tls, h2c, http2=off, quic, backlog=N)"
            ctx.error(node, path, f"unknown listen option '{word}'{hint}")
            ok = False
    if listen.h2c and listen.tls:
        ctx.error(node, path, "'h2c' is cleartext HTTP/2; a TLS listener offers h2 through "
                  "ALPN already (remove 'h2c', or 'tls')")
        ok = False
    if listen.kind == "quic" and (listen.tls or listen.h2c or "http2" in seen or
                                  "backlog" in seen):
        other = next(o for o in ("tls", "h2c", "http2", "backlog") if o in seen)
        ctx.error(node, path, f"'quic' is a UDP listener for HTTP/3 (TLS 1.3 is part of QUIC): "
                  f"'{other}' applies to TCP listeners; list the TCP address apart "
                  f"(e.g. \":443 tls\" beside \":443 quic\")")
        ok = False
    if "http2" in seen and not listen.tls and ok:
        ctx.error(node, path, "'http2=' applies to TLS listeners (ALPN); for cleartext "
                  "HTTP/2 write 'h2c'")
        ok = False
    return listen if ok else None


STATUS_KEYS = ("listen", "allow", "file")


def _status(ctx, node):
    """`status: {listen: "127.0.0.1:9145", allow: [CIDRs], file: PATH}`
    (docs/configuration.md, "status")."""
    from scalws.config.model import Status
    st = Status(mark=ctx.mark(node))
    if ctx.kind(node) == "null":  # `status:` alone: the defaults
        return st
    if ctx.kind(node) != "map":
        ctx.error(node, "status", "expected a mapping such as {listen: \"127.0.0.1:9145\"}, "
                  f"got {ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, "status", STATUS_KEYS)
    if "listen" in keys:
        lnode = keys["listen"][1]
        text = ctx.scalar_text(lnode, "status.listen")
        if text is not None:
            try:
                host, port = _host_port(text.strip())
                if text.strip().startswith(":") or text.strip().isdigit():
                    host = "127.0.0.1"  # loopback unless an address is given
                st.host, st.port = host, port
            except ValueError as e:
                ctx.error(lnode, "status.listen", str(e))
    if "allow" in keys:
        st.allow = proxy.compile_trusted_proxies(ctx, keys["allow"][1], "status.allow")
    if "file" in keys:
        st.file = ctx.path(keys["file"][1], "status.file")
    return st


def _host_port(addr: str):
    """Parse host:port, :port, port, *:port or [v6]:port; ValueError if not."""
    if addr.isdigit():
        host, port = "0.0.0.0", addr
    elif addr.startswith("["):
        end = addr.find("]")
        if end < 0:
            raise ValueError(f"missing ']' after the IPv6 address in '{addr}'")
        inner, rest = addr[1:end], addr[end + 1:]
        if not rest.startswith(":"):
            raise ValueError(f"expected [address]:port, got '{addr}' (the port is missing)")
        try:
            host = ipaddress.IPv6Address(inner).compressed
        except ValueError:
            raise ValueError(f"'{inner}' is not an IPv6 address") from None
        port = rest[1:]
    else:
        host, sep, port = addr.rpartition(":")
        if not sep:
            raise ValueError(f"expected host:port, :port or port, got '{addr}' "
                             "(the port is missing)")
        if ":" in host:
            raise ValueError("an IPv6 address goes in brackets, as in [::1]:8080")
        if host in ("", "*"):
            host = "0.0.0.0"
        elif host.lower() == "localhost":
            host = "127.0.0.1"
        else:
            try:
                host = str(ipaddress.IPv4Address(host))
            except ValueError:
                if re.fullmatch(r"[0-9.]+", host):
                    raise ValueError(f"'{host}' is not an IPv4 address") from None
                raise ValueError(f"'{host}' is a host name: scalws resolves no names "
                                 "when loading; use an IP address (or localhost)") from None
    if not port.isdigit():
        raise ValueError(f"'{port}' is not a port number")
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"port must be between 1 and 65535, got {int(port)}")
    return host, int(port)


def _fmt_key(key: tuple) -> str:
    if key[0] == "unix":
        return f"unix:{key[1]}"
    host = f"[{key[1]}]" if ":" in key[1] else key[1]
    return f"{host}:{key[2]}" + (" quic" if key[0] == "quic" else "")


# -- server names ------------------------------------------------------------

_LABEL_RE = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


def _server_names(ctx, node, path) -> list:
    out = []
    seen = {}
    for item, ipath in _items(ctx, node, path, "server name"):
        if ctx.kind(item) != "str":
            ctx.error(item, ipath, f"expected a host name, got {ctx.describe(item)}")
            continue
        try:
            name = _server_name(item.value)
        except ValueError as e:
            ctx.error(item, ipath, str(e))
            continue
        if name in seen:
            ctx.error(item, ipath, f"server name '{name}' is already listed in this "
                      f"site (line {seen[name]})")
            continue
        seen[name] = item.start_mark.line + 1
        out.append((name, item, ipath))
    return out


def _server_name(text: str) -> str:
    """Normalise a server name (lowercase, no trailing dot); ValueError if bad."""
    name = text.strip().lower()
    if name.endswith(".") and len(name) > 1:
        name = name[:-1]
    if not name:
        raise ValueError("a server name must not be empty")
    if not name.isascii():
        raise ValueError(f"'{text}' is not ASCII: write an internationalised name "
                         "in its xn-- (punycode) form")
    if name.startswith("[") and name.endswith("]"):
        try:
            return f"[{ipaddress.IPv6Address(name[1:-1]).compressed}]"
        except ValueError:
            raise ValueError(f"'{text}' is not an IPv6 address") from None
    if name.startswith("~"):
        raise ValueError("regular-expression server names are not supported; use "
                         "exact names or *.suffix wildcards")
    if name.startswith("."):
        raise ValueError(f"'{text}' (nginx's shorthand) is not supported: list "
                         f"'{name[1:]}' and '*{name}'")
    if ":" in name or "/" in name:
        raise ValueError(f"'{text}' is not a host name (a server name has no port "
                         "or path: the port belongs to listen)")
    labels = name.split(".")
    if "*" in name:
        if not name.startswith("*.") or name.count("*") > 1:
            raise ValueError(f"'{text}': a wildcard must be the whole first label, "
                             "as in *.example.com")
        labels = labels[1:]
    if len(name) > 253:
        raise ValueError(f"'{text[:40]}...' is longer than 253 characters")
    for label in labels:
        if not _LABEL_RE.fullmatch(label):
            raise ValueError(f"'{text}' is not a valid host name (labels of letters, "
                             "digits and inner hyphens, 1 to 63 long)")
    return name


# -- routes --------------------------------------------------------------------

_ROUTE_KEYS = ("path", *HANDLERS, *UNAVAILABLE_HANDLERS)
_MODIFIER_RE = re.compile(r"(=|\^~|~\*|~)\s*(.*)", re.DOTALL)
_MATCH = {"=": "exact", "": "prefix", "^~": "prefix_noregex",
          "~": "regex", "~*": "regex_icase"}


def _routes(ctx, node, path) -> list:
    if ctx.kind(node) != "seq":
        ctx.error(node, path, f"expected a list of routes, got {ctx.describe(node)}")
        return []
    if not node.value:
        ctx.error(node, path, "expected at least one route")
        return []
    routes = []
    seen = {}   # identity of a pattern -> line of its first route
    for i, item in enumerate(node.value):
        rpath = f"{path}[{i}]"
        route = _route(ctx, item, rpath)
        if route is None:
            continue
        # "/a" and "^~ /a" are the same prefix (nginx: duplicate location).
        ident = ("prefix" if route.match == "prefix_noregex" else route.match,
                 route.pattern)
        if ident in seen:
            ctx.error(ctx.origin[id(route)][0], f"{rpath}.path",
                      f"duplicate route for '{route.pattern}' (first at line "
                      f"{seen[ident]}); only the first could ever match")
            continue
        seen[ident] = route.mark[1]
        routes.append(route)
    return routes


def _route(ctx, node, path):
    keys = ctx.mapping(node, path, _ROUTE_KEYS)
    if keys is None:
        return None
    ok = True
    # A refused key (cache: beside a handler, most likely) is reported for
    # itself, not as a second handler.
    for name in keys:
        if name in UNAVAILABLE_HANDLERS:
            ctx.error(keys[name][0], _join(path, name), UNAVAILABLE_HANDLERS[name])
            ok = False
    handlers = [name for name in keys if name != "path" and name not in UNAVAILABLE_HANDLERS]
    match = pattern = None
    if ctx.require(keys, node, path, "path"):
        parsed = _pattern(ctx, keys["path"][1], f"{path}.path")
        if parsed is None:
            ok = False
        else:
            match, pattern = parsed
    else:
        ok = False

    handler = None
    if not handlers:
        # An unknown key (already reported) is most likely a misspelt handler.
        written = {k.value for k, _ in node.value if isinstance(k, ScalarNode)}
        if not written - {"path", "<<"}:
            ctx.error(node, path, "a route needs a handler: one of "
                      f"{', '.join(HANDLERS)}")
        ok = False
    elif len(handlers) > 1:
        ctx.error(keys[handlers[1]][0], _join(path, handlers[1]),
                  f"a route takes exactly one handler, found '{handlers[0]}' "
                  f"and '{handlers[1]}'")
        ok = False
    else:
        kind = handlers[0]
        handler = HANDLERS[kind](ctx, keys[kind][1], _join(path, kind))
        ok &= handler is not None

    if not ok:
        return None
    route = Route(match=match, pattern=pattern, kind=kind, handler=handler,
                  mark=ctx.mark(node))
    ctx.origin[id(route)] = (keys["path"][1], f"{path}.path")
    return route


def _pattern(ctx, node, path):
    """Parse `= /x`, `/x`, `^~ /x`, `~ re`, `~* re` -> (match, pattern)."""
    text = ctx.string(node, path)
    if text is None:
        return None
    m = _MODIFIER_RE.fullmatch(text)
    modifier, pattern = (m.group(1), m.group(2)) if m else ("", text)
    match = _MATCH[modifier]
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in pattern):
        ctx.error(node, path, "must not contain control characters")
        return None
    if match.startswith("regex"):
        if not pattern:
            ctx.error(node, path, f"expected a regular expression after '{modifier}'")
            return None
        why = _regex_problem(pattern, icase=match == "regex_icase")
        if why is not None:
            ctx.error(node, path, why)
            return None
    elif not pattern.startswith("/"):
        hint = ""
        if not modifier and re.search(r"[\^$*()\[\]\\|+?]", pattern):
            hint = f"; for a regular expression write '~ {pattern}'"
        elif not modifier and pattern.startswith("@"):
            hint = "; named locations (@name) are not supported"
        ctx.error(node, path, f"a path must start with '/', got '{pattern}'{hint}")
        return None
    return match, pattern


# POSIX regcomp through ctypes: the router compiles routes with the same
# libc, so a pattern that passes here compiles there. glibc constants.
_REG_EXTENDED, _REG_ICASE, _REG_NOSUB = 1, 2, 8
_REGEX_T_SIZE = 256            # >= sizeof(regex_t) (64 on glibc x86-64)
_libc = None


def _load_libc():
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(None)
            libc.regcomp.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
            libc.regcomp.restype = ctypes.c_int
            libc.regerror.argtypes = [ctypes.c_int, ctypes.c_void_p,
                                      ctypes.c_char_p, ctypes.c_size_t]
            libc.regerror.restype = ctypes.c_size_t
            libc.regfree.argtypes = [ctypes.c_void_p]
            libc.regfree.restype = None
            _libc = libc
        except (OSError, AttributeError):
            _libc = False
    return _libc


def _regex_problem(pattern: str, icase: bool):
    """Why `pattern` is not a valid POSIX extended regex, or None."""
    # PCRE habits that POSIX either refuses with an obscure message or, worse,
    # accepts with another meaning (glibc reads \d as a plain 'd').
    if "(?" in pattern:
        return ("'(?' is PCRE syntax; routes use POSIX extended regular "
                "expressions (no (?i), (?:...) or lookarounds; use ~* for "
                "case-insensitive matching)")
    for escape, instead in (("\\d", "[0-9]"), ("\\D", "[^0-9]")):
        if re.search(r"(?<!\\)(?:\\\\)*" + re.escape(escape), pattern):
            return f"'{escape}' is PCRE syntax, not POSIX; write {instead}"
    data = pattern.encode("utf-8")
    if b"\0" in data:
        return "must not contain NUL"
    libc = _load_libc()
    if not libc:
        return None                # no C library to ask: the router will
    preg = ctypes.create_string_buffer(_REGEX_T_SIZE)
    flags = _REG_EXTENDED | _REG_NOSUB | (_REG_ICASE if icase else 0)
    rc = libc.regcomp(preg, data, flags)
    message = None
    if rc != 0:
        buf = ctypes.create_string_buffer(256)
        libc.regerror(rc, preg, buf, len(buf))
        text = buf.value.decode("utf-8", "replace") or f"error {rc}"
        message = f"invalid regular expression: {text}"
    libc.regfree(preg)             # glibc leaves a failed regex_t safe to free
    return message


# -- checks across sites -------------------------------------------------------

def _check_across_sites(ctx, sites) -> None:
    """Defaults, server names and backlogs among sites sharing an address.

    Each problem is reported at the later of the two places that clash.
    """
    defaults = {}      # listen key -> (site index, line)
    names = {}         # (listen key, name) -> (site index, line)
    backlogs = {}      # listen key -> (backlog, line) where given explicitly
    by_key = {}        # listen key -> [Listen]
    tls_of = {}        # listen key -> (tls, line) as first listed
    h2_of = {}         # listen key -> (serves HTTP/2, line) as first listed
    for i, (site, name_entries) in sites:
        reported = set()
        for listen in site.listen:
            key = listen.key
            by_key.setdefault(key, []).append(listen)
            addr = _fmt_key(key)
            lnode, lpath = ctx.origin[id(listen)]
            if key in tls_of and tls_of[key][0] != listen.tls:
                ctx.error(lnode, lpath, f"{addr} is {'TLS' if tls_of[key][0] else 'plain'} "
                          f"at line {tls_of[key][1]}: every site on one address must agree on "
                          "the 'tls' option")
            tls_of.setdefault(key, (listen.tls, listen.mark[1]))
            if key in h2_of and h2_of[key][0] != listen.serves_h2:
                ctx.error(lnode, lpath, f"{addr} {'serves' if h2_of[key][0] else 'refuses'} "
                          f"HTTP/2 at line {h2_of[key][1]}: every site on one address must "
                          "agree on 'h2c' / 'http2='")
            h2_of.setdefault(key, (listen.serves_h2, listen.mark[1]))
            if listen.default:
                if key in defaults:
                    j, line = defaults[key]
                    ctx.error(lnode, lpath, f"{addr} already has a default site: "
                              f"sites[{j}] (line {line})")
                else:
                    defaults[key] = (i, listen.mark[1])
            if id(listen) in ctx.explicit_backlog:
                if key in backlogs and backlogs[key][0] != listen.backlog:
                    value, line = backlogs[key]
                    ctx.error(lnode, lpath, f"backlog={listen.backlog} conflicts with "
                              f"backlog={value} for {addr} at line {line} (one "
                              "socket, one backlog)")
                else:
                    backlogs.setdefault(key, (listen.backlog, listen.mark[1]))
            for name, nnode, npath in name_entries:
                prior = names.get((key, name))
                if prior is None:
                    names[(key, name)] = (i, nnode.start_mark.line + 1)
                elif prior[0] != i and name not in reported:
                    reported.add(name)
                    ctx.error(nnode, npath, f"server name '{name}' on {addr} is "
                              f"already used by sites[{prior[0]}] (line {prior[1]})")
    # Every Listen of one socket carries the backlog that was asked for.
    for key, listens in by_key.items():
        if key in backlogs:
            for listen in listens:
                listen.backlog = backlogs[key][0]
