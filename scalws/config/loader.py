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

import difflib
import hashlib
import html
import json
import os
import pwd
import urllib.parse

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .directives import app, cache, cache_peers, fastcgi, protocols, resolver, tls, upstreams
from .directives.sites import _sites, _status
from .directives.respond import header_value_problem
from .errors import DEFAULT_SOURCE, ConfigError, Problem
from .machine import busy_poll_auto, usable_cpus
from .model import Config, Instances, LogConfig
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

LOG_FORMATS = ("combined", "json")
LOG_LEVELS = ("debug", "info", "notice", "warn", "error", "crit")
MAX_WORKERS = 1024


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
    return _load(default_yaml(folder), DEFAULT_SOURCE, folder)


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
        cfg.trusted_proxies = upstreams.compile_trusted_proxies(
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

    groups = {}
    if "upstreams" in keys:
        groups = upstreams.compile_upstreams(ctx, keys["upstreams"][1], "upstreams")

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
    cfg.upstreams = upstreams.check_references(ctx, groups)
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
