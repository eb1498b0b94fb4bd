"""The config half of the response cache: the top-level `cache_zones` and
the `cache:` key of `proxy` and `fastcgi` routes.

    cache_zones:
      main: {max_size: 256m, max_object_size: 8m}
    sites:
      - routes:
          - path: /api/
            proxy:
              upstream: api
              cache:
                zone: main
                key: "$scheme$host$request_uri$http_accept_language"
                valid: {200: 10m, "301 308": 1h, 404: 30s, any: 5s}
                bypass: ["$cookie_session", "$arg_nocache"]
                lock: {timeout: 3s}
                stale: {while_revalidate: 30s, if_error: 10m}
                purge: {allow: ["10.0.0.0/8"]}
                targeted_field: ScalWS-Cache-Control   # RFC 9213, before CDN-Cache-Control
          - {path: /img/, proxy: {upstream: api, cache: {max_size: 64m}}}

compile_zones() validates `cache_zones` and returns {name: CacheZone};
compile() validates a route's `cache:` and returns a RouteCache, None
(`cache: off`) or False after reporting every problem through the loader's
context (file:line, key path), in the shape of proxy.compile. A route
naming `zone:` is checked once the whole file is walked (check_references:
the zone exists, the route's max_object_size fits in the zone's, someone
may purge); a route giving `max_size` instead gets a zone of its own,
"route:<file>:<line>" (the line of its `cache:`), added to
Config.cache_zones after the named ones.

The target list of RFC 9213 (`targeted_field`, `cdn_cache_control`,
`remove_targeted`) compiles to RouteCache.targeted, most precedent first,
and RouteCache.targeted_remove.

Templates (`key`, `bypass`, `no_store`) are split here into the parts the
runtime evaluates per request (model.RouteCache.key): literal text and
$scheme, $host, $request_uri, $uri, $args, $is_args, $request_method,
$http_NAME (`_` stands for `-`), $cookie_NAME, $arg_NAME; ${name} delimits
a name followed by letters. The keys, their defaults and the runtime's
behaviour (csrc/cache/) are documented in docs/configuration.md (sections
`cache_zones` and `cache`).
"""
from __future__ import annotations

import difflib
import re

from ..model import CachePurge, CacheZone, RouteCache
from ..units import format_size
from . import cache_peers
from .fields import Fields
from .respond import is_token

ZONE_KEYS = ("max_size", "max_object_size", "peers")
KEYS = ("zone", "max_size", "max_object_size", "key", "methods", "valid", "bypass",
        "no_store", "ignore", "lock", "stale", "tag_headers", "purge", "targeted_field",
        "cdn_cache_control", "remove_targeted")
LOCK_KEYS = ("timeout",)
STALE_KEYS = ("while_revalidate", "if_error")
PURGE_KEYS = ("allow",)

# A zone is shared memory the master maps for its life: at least room for
# a useful number of entries, at most what a machine this serves can lend.
ZONE_MIN = 1 << 20
ZONE_MAX = 64 << 30
# A route's own zone (max_size instead of zone) is "route:<file>:<line>";
# the colon keeps it apart from every name a file can give a zone.
IMPLICIT_PREFIX = "route:"

# The cache stores responses to GET and answers HEAD from them; responses
# to other methods are never stored (unsafe ones invalidate instead).
METHODS = ("GET", "HEAD")
# Response fields whose caching meaning `ignore` may turn off.
IGNORABLE = ("cache-control", "expires", "set-cookie", "vary")

# RFC 9213's targeted field for CDNs, on every route's target list unless
# `cdn_cache_control: off`.
CDN_CC = "cdn-cache-control"
# Fields the cache reads for another meaning: none can be a route's own
# targeted field.
NOT_TARGETED = ("cache-control", CDN_CC, "age", "cache-status", "date", "etag", "expires",
                "last-modified", "location", "content-location", "pragma", "set-cookie",
                "vary")

# Template variables: the fixed ones, and the prefixes taking a name.
VARIABLES = ("scheme", "host", "request_uri", "uri", "args", "is_args", "request_method")
PREFIXES = ("http", "cookie", "arg")
# nginx names that have another spelling here.
_INSTEAD = {"query_string": "args", "document_uri": "uri",
            "request": "request_method and $request_uri"}
_VAR_RE = re.compile(r"\$(?:\{([A-Za-z0-9_.-]*)\}?|([A-Za-z0-9_]*))")

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_SPLIT_RE = re.compile(r"[\s,]+")


def _sub(path, name):
    return f"{path}.{name}"


# --------------------------------------------------------------------------
# Top-level `cache_zones`

def compile_zones(ctx, node, path="cache_zones") -> dict:
    """cache_zones: {NAME: {max_size, max_object_size}} -> {name: CacheZone}
    (bad zones left out; their names still count as defined)."""
    zones = ctx.mapping(node, path, None)
    if zones is None:
        return {}
    out = {}
    for name, (knode, vnode) in zones.items():
        zpath = _sub(path, name)
        ctx.cache_zone_names.add(name)
        if not _NAME_RE.fullmatch(name):
            ctx.error(knode, zpath, f"'{name}' is not a valid zone name "
                      "(letters, digits, '_', '.' and '-')")
            continue
        zone = _zone(ctx, vnode, zpath, name, ctx.mark(knode))
        if zone is not None:
            out[name] = zone
    return out


def _zone(ctx, node, path, name, mark):
    """One zone's mapping (null: the defaults) -> CacheZone or None."""
    zone = CacheZone(name=name, mark=mark)
    if ctx.kind(node) == "null":
        return zone
    if ctx.kind(node) != "map":
        ctx.error(node, path, "expected a mapping such as {max_size: 256m}, got "
                  f"{ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, ZONE_KEYS)
    if keys is None:
        return None
    if "peers" in keys:
        zone.peers = cache_peers.compile(ctx, keys["peers"][1], _sub(path, "peers"), name)
        if zone.peers is None:
            return None
    return _sizes(ctx, keys, path, zone)


def _sizes(ctx, keys, path, zone):
    """Fill zone's max_size and max_object_size from `keys`; the zone or None."""
    fields = Fields()
    if "max_size" in keys:
        fields.put("max_size", ctx.size(keys["max_size"][1], _sub(path, "max_size"),
                                        ZONE_MIN, ZONE_MAX))
    if "max_object_size" in keys:
        fields.put("max_object_size", ctx.size(keys["max_object_size"][1],
                                               _sub(path, "max_object_size"), 1, ZONE_MAX))
    if not fields.ok:
        return None
    zone.max_size = fields.values.get("max_size", zone.max_size)
    if "max_object_size" in fields.values:
        zone.max_object_size = fields.values["max_object_size"]
        if zone.max_object_size > zone.max_size:
            ctx.error(keys["max_object_size"][1], _sub(path, "max_object_size"),
                      f"must be at most max_size ({format_size(zone.max_size)}), got "
                      f"{keys['max_object_size'][1].value}")
            return None
    else:
        zone.max_object_size = min(zone.max_object_size, zone.max_size)
    return zone


# --------------------------------------------------------------------------
# A route's `cache:`

def compile(ctx, knode, node, path):
    """Validate a proxy or fastcgi route's `cache:` (key node `knode`, value
    `node`); return a RouteCache, None for `cache: off`, or False after
    reporting."""
    kind = ctx.kind(node)
    if kind == "bool" and not ctx.boolean(node, path):
        return None
    if kind == "str" and node.value == "off":
        return None
    if kind == "str":
        rc = RouteCache(zone="", mark=ctx.mark(knode))
        return rc if _zone_ref(ctx, node, path, rc, None) else False
    if kind != "map":
        ctx.error(node, path, "expected a zone's name, off, or a mapping with zone (a "
                  "name under cache_zones) or max_size (a zone for this route alone); "
                  f"got {ctx.describe(node)}")
        return False
    keys = ctx.mapping(node, path, KEYS)
    if keys is None:
        return False
    fields = Fields()
    put, values = fields.put, fields.values
    rc = RouteCache(zone="", mark=ctx.mark(knode))

    if "zone" in keys and "max_size" in keys:
        later = max(("zone", "max_size"), key=lambda k: (keys[k][0].start_mark.line,
                                                         keys[k][0].start_mark.column))
        ctx.error(keys[later][0], _sub(path, later), "zone and max_size exclude each "
                  "other: a named zone's size is given under cache_zones")
        fields.ok = False
    elif "zone" in keys:
        monode = keys["max_object_size"][1] if "max_object_size" in keys else None
        if not _zone_ref(ctx, keys["zone"][1], _sub(path, "zone"), rc, monode):
            fields.ok = False
        if monode is not None:
            put("max_object_size", ctx.size(monode, _sub(path, "max_object_size"),
                                            1, ZONE_MAX))
    elif "max_size" in keys:
        zone = _implicit_zone(ctx, knode, keys, path)
        if zone is None:
            fields.ok = False
        else:
            rc.zone = zone.name
    else:
        ctx.error(node, path, "expected the key zone (a name under cache_zones) or "
                  "max_size (a zone for this route alone, such as 64m)")
        fields.ok = False

    if "key" in keys:
        knode_ = keys["key"][1]
        parts = _template(ctx, knode_, _sub(path, "key"))
        if parts is None:
            fields.ok = False
        else:
            values["key"], values["key_text"] = parts, knode_.value
            if ("var", "request_method") in parts:
                ctx.warning(knode_, _sub(path, "key"), "the key contains $request_method: "
                            "HEAD requests (answered from stored GET responses) and PURGE "
                            "requests then find no entry")
    if "methods" in keys:
        put("methods", _methods(ctx, keys["methods"][1], _sub(path, "methods")))
    if "valid" in keys:
        put("valid", _valid(ctx, keys["valid"][1], _sub(path, "valid")))
    for name in ("bypass", "no_store"):
        if name in keys:
            put(name, _templates(ctx, keys[name][1], _sub(path, name)))
    if "ignore" in keys:
        put("ignore", _names(ctx, keys["ignore"][1], _sub(path, "ignore"), IGNORABLE))
    if "lock" in keys:
        lock = _lock(ctx, keys["lock"][1], _sub(path, "lock"))
        if lock is None:
            fields.ok = False
        else:
            values["lock"], timeout = lock
            if timeout is not None:
                values["lock_timeout"] = timeout
    if "stale" in keys:
        stale = _stale(ctx, keys["stale"][1], _sub(path, "stale"))
        if stale is None:
            fields.ok = False
        else:
            values.update(stale)
    if "tag_headers" in keys:
        put("tag_headers", _names(ctx, keys["tag_headers"][1], _sub(path, "tag_headers"),
                                  None))
    if "purge" in keys:
        purge = _purge(ctx, keys["purge"][1], _sub(path, "purge"))
        if purge is False:
            fields.ok = False
        elif purge is not None:
            values["purge"] = purge
    targeted = _targeted(ctx, keys, path)
    if targeted is None:
        fields.ok = False
    else:
        values["targeted"], values["targeted_remove"] = targeted
    if not fields.ok:
        return False
    for name, value in values.items():
        setattr(rc, name, value)
    return rc


def _zone_ref(ctx, node, path, rc, monode) -> bool:
    """A zone's name, checked against cache_zones once the file is walked."""
    name = ctx.string(node, path)
    if name is None:
        return False
    if not _NAME_RE.fullmatch(name):
        ctx.error(node, path, f"'{name}' is not a zone name (letters, digits, '_', '.' "
                  "and '-')")
        return False
    rc.zone = name
    ctx.cache_refs.append((name, node, path, rc, monode))
    return True


def _implicit_zone(ctx, knode, keys, path):
    """max_size (and max_object_size) without zone: a zone for this route,
    named after the line of its `cache:` key."""
    m = knode.start_mark
    name = f"{IMPLICIT_PREFIX}{ctx.source}:{m.line + 1}"
    if name in ctx.implicit_cache_zones:      # two routes on one line (flow style)
        name = f"{name}:{m.column + 1}"
    zone = _sizes(ctx, keys, path, CacheZone(name=name, mark=ctx.mark(knode)))
    if zone is not None:
        ctx.implicit_cache_zones[name] = zone
    return zone


# -- templates ---------------------------------------------------------------

def _template(ctx, node, path):
    """A template string -> its parts (model.RouteCache.key), or None."""
    text = ctx.string(node, path)
    if text is None:
        return None
    try:
        parts = parse_template(text)
    except ValueError as e:
        ctx.error(node, path, str(e))
        return None
    if not any(kind != "lit" for kind, _ in parts):
        ctx.error(node, path, f"'{text}' has no variable: it would be the same for every "
                  "request (variables start with '$', as in $request_uri)")
        return None
    return parts


def parse_template(text: str) -> list:
    """Split `text` into [("lit", text) | ("var", name) | ("http", name) |
    ("cookie", name) | ("arg", name)], adjacent literals merged; ValueError
    naming the first problem."""
    for c in text:
        if c == "\0" or ord(c) < 0x20 or ord(c) == 0x7F:
            raise ValueError("must not contain control characters")
    parts = []

    def lit(s):
        if not s:
            return
        if parts and parts[-1][0] == "lit":
            parts[-1] = ("lit", parts[-1][1] + s)
        else:
            parts.append(("lit", s))

    pos = 0
    while True:
        i = text.find("$", pos)
        if i < 0:
            lit(text[pos:])
            break
        lit(text[pos:i])
        m = _VAR_RE.match(text, i)
        braced = m.group(1) is not None
        name = m.group(1) if braced else m.group(2)
        if braced and not m.group(0).endswith("}"):
            raise ValueError(f"'${{' at column {i + 1} of the template has no closing '}}'")
        if not name:
            raise ValueError(f"a '$' at column {i + 1} of the template names no variable "
                             "(variables are written $name or ${name})")
        parts.append(_variable(name))
        pos = m.end()
    return parts


def _variable(name):
    if name in VARIABLES:
        return ("var", name)
    for prefix in PREFIXES:
        if name.startswith(prefix + "_"):
            arg = name[len(prefix) + 1:]
            if not arg:
                raise ValueError(f"${prefix}_ needs a name after it, as in "
                                 f"${_EXAMPLE[prefix]}")
            if prefix == "http":
                return ("http", arg.replace("_", "-").lower())
            return (prefix, arg)
    if name in _INSTEAD:
        raise ValueError(f"unknown variable ${name}; write ${_INSTEAD[name]}")
    known = list(VARIABLES) + [f"{p}_NAME" for p in PREFIXES]
    close = difflib.get_close_matches(name, known, n=1) or \
        difflib.get_close_matches(name.lower(), known, n=1)
    hint = f"; did you mean ${close[0]}?" if close else \
        f" (known: ${', $'.join(known)})"
    raise ValueError(f"unknown variable ${name}{hint}")


_EXAMPLE = {"http": "http_accept_language", "cookie": "cookie_session", "arg": "arg_page"}


def _templates(ctx, node, path):
    """One template or a list of them -> [parts], or None."""
    items = _list_items(ctx, node, path, "template such as $cookie_session")
    if items is None:
        return None
    out = []
    ok = True
    for item, ipath in items:
        parts = _template(ctx, item, ipath)
        if parts is None:
            ok = False
        else:
            out.append(parts)
    return out if ok else None


def _list_items(ctx, node, path, what):
    """A list's items with their paths (a single string is a list of one)."""
    kind = ctx.kind(node)
    if kind == "seq":
        return [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
    if kind == "str":
        return [(node, path)]
    ctx.error(node, path, f"expected a {what} or a list of them, got {ctx.describe(node)}")
    return None


# -- methods, valid, names -----------------------------------------------------

def _methods(ctx, node, path):
    """GET and HEAD, whatever the list says; any other method is refused."""
    items = _list_items(ctx, node, path, "method (GET or HEAD)")
    if items is None:
        return None
    ok = True
    seen = {}
    for item, ipath in items:
        name = ctx.string(item, ipath)
        if name is None:
            ok = False
        elif name in seen:
            ctx.error(item, ipath, f"{name} is already listed (line {seen[name]})")
            ok = False
        elif name not in METHODS:
            if name.upper() in METHODS:
                why = f"methods are case-sensitive: write {name.upper()}"
            else:
                why = (f"only GET and HEAD responses are cached, not {name} (caching "
                       "POST is not supported; unsafe methods invalidate the URL's "
                       "entries instead)")
            ctx.error(item, ipath, why)
            ok = False
        else:
            seen[name] = item.start_mark.line + 1
    return list(METHODS) if ok else None


_VALID_HINT = ("expected a status (200), several separated by spaces (\"200 301\") "
               "or any")


def _valid(ctx, node, path):
    """valid: {status|"s1 s2"|any: duration} -> [(status or 0, seconds)] in
    written order, `any` last."""
    pairs = ctx.mapping(node, path, None)
    if pairs is None:
        return None
    out, last = [], []
    seen = {}                    # status -> line of the key that gave it
    ok = True
    for name, (knode, vnode) in pairs.items():
        vpath = _sub(path, name)
        seconds = ctx.duration(vnode, vpath)
        statuses = _statuses(ctx, knode, vpath, name, seen)
        if seconds is None or statuses is None:
            ok = False
            continue
        for status in statuses:
            (last if status == 0 else out).append((status, seconds))
    return out + last if ok else None


def _statuses(ctx, knode, path, name, seen):
    words = [w for w in _SPLIT_RE.split(name.strip()) if w]
    if not words:
        ctx.error(knode, path, _VALID_HINT)
        return None
    if "any" in words and len(words) > 1:
        ctx.error(knode, path, "'any' stands alone: it is every status the other keys "
                  "do not name")
        return None
    out = []
    for word in words:
        if word == "any":
            status = 0
        elif not word.isdigit():
            ctx.error(knode, path, f"{_VALID_HINT}; got '{word}'")
            return None
        else:
            status = int(word)
            if not 100 <= status <= 599:
                ctx.error(knode, path, f"a status must be between 100 and 599, got {word}")
                return None
            if status < 200:
                ctx.error(knode, path, f"status {status} is informational (1xx), not a "
                          "final response: it is never stored")
                return None
        if status in seen:
            ctx.error(knode, path, f"status {word} is already given (line {seen[status]})")
            return None
        seen[status] = knode.start_mark.line + 1
        out.append(status)
    return out


def _names(ctx, node, path, choices):
    """A list of header names (or one) -> lowercase names; `choices`, if
    given, are the names allowed."""
    items = _list_items(ctx, node, path, "header name")
    if items is None:
        return None
    out = []
    ok = True
    seen = {}
    for item, ipath in items:
        name = ctx.string(item, ipath)
        if name is None:
            ok = False
            continue
        low = name.lower()
        if choices is not None and low not in choices:
            ctx.error(item, ipath, f"expected one of {', '.join(choices)}; got '{name}'")
            ok = False
        elif choices is None and not is_token(name):
            ctx.error(item, ipath, f"'{name}' is not a valid header name "
                      "(letters, digits and !#$%&'*+-.^_`|~ only)")
            ok = False
        elif low in seen:
            ctx.error(item, ipath, f"'{name}' is already listed (line {seen[low]}; names "
                      "are case-insensitive)")
            ok = False
        else:
            seen[low] = item.start_mark.line + 1
            out.append(low)
    return out if ok else None


# -- lock, stale, purge ----------------------------------------------------------

def _lock(ctx, node, path):
    """on | off | a duration | {timeout: duration} -> (on?, timeout or None)."""
    kind = ctx.kind(node)
    if kind == "bool":
        return ctx.boolean(node, path), None
    if kind == "str" and node.value in ("on", "off"):
        return node.value == "on", None
    if kind == "map":
        keys = ctx.mapping(node, path, LOCK_KEYS)
        if keys is None:
            return None
        if "timeout" not in keys:
            return True, None
        timeout = ctx.duration(keys["timeout"][1], _sub(path, "timeout"), positive=True)
        return None if timeout is None else (True, timeout)
    if kind in ("int", "float", "str"):
        timeout = ctx.duration(node, path, positive=True)
        return None if timeout is None else (True, timeout)
    ctx.error(node, path, "expected on, off, a timeout such as 5s, or {timeout: 5s}; got "
              f"{ctx.describe(node)}")
    return None


def _stale(ctx, node, path):
    """{while_revalidate, if_error} (off: neither) -> RouteCache fields."""
    kind = ctx.kind(node)
    if (kind == "bool" and not ctx.boolean(node, path)) or (kind == "str" and
                                                             node.value == "off"):
        return {"stale_while_revalidate": 0.0, "stale_if_error": 0.0}
    if kind != "map":
        ctx.error(node, path, "expected off or a mapping such as {while_revalidate: 30s, "
                  f"if_error: 10m}}; got {ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, STALE_KEYS)
    if keys is None:
        return None
    fields = Fields()
    for name in STALE_KEYS:
        if name in keys:
            fields.put(f"stale_{name}", ctx.duration(keys[name][1], _sub(path, name)))
    return fields.values if fields.ok else None


def _purge(ctx, node, path):
    """on | off | {allow: [CIDRs]} -> CachePurge, None (off), or False."""
    kind = ctx.kind(node)
    if kind == "bool" or (kind == "str" and node.value in ("on", "off")):
        on = node.value == "on" if kind == "str" else ctx.boolean(node, path)
        if not on:
            return None
        purge = CachePurge()
    elif kind == "map":
        from .upstreams import compile_trusted_proxies
        n = len(ctx.problems)
        keys = ctx.mapping(node, path, PURGE_KEYS)
        purge = CachePurge()
        if keys is not None and "allow" in keys:
            purge.allow = compile_trusted_proxies(ctx, keys["allow"][1], _sub(path, "allow"))
        if len(ctx.problems) != n:
            return False
    else:
        ctx.error(node, path, "expected on (the addresses of trusted_proxies), off, or "
                  f"{{allow: [addresses or networks]}}; got {ctx.describe(node)}")
        return False
    if not purge.allow:
        ctx.cache_purges.append((node, path))
    return purge


# -- targeted fields (RFC 9213) ----------------------------------------------------

def _targeted(ctx, keys, path):
    """targeted_field, cdn_cache_control and remove_targeted -> (the target
    list, the names removed from responses), or None after reporting."""
    own = None
    if "targeted_field" in keys:
        node = keys["targeted_field"][1]
        fpath = _sub(path, "targeted_field")
        if ctx.kind(node) == "bool" and not ctx.boolean(node, fpath):
            pass                                   # off: none of our own
        elif ctx.kind(node) != "str":
            ctx.error(node, fpath, "expected a header name such as ScalWS-Cache-Control, "
                      f"or off; got {ctx.describe(node)}")
            return None
        elif node.value == "off":
            pass
        elif not is_token(node.value):
            ctx.error(node, fpath, f"'{node.value}' is not a valid header name (letters, "
                      "digits and !#$%&'*+-.^_`|~ only)")
            return None
        elif node.value.lower() in NOT_TARGETED:
            why = ("it is on the target list already (cdn_cache_control: on turns it on or "
                   "off)" if node.value.lower() == CDN_CC else
                   "the cache reads that field for its own meaning")
            ctx.error(node, fpath, f"'{node.value}' cannot be the route's targeted field: "
                      f"{why}")
            return None
        else:
            own = node.value.lower()
    cdn = True
    if "cdn_cache_control" in keys:
        cdn = ctx.boolean(keys["cdn_cache_control"][1], _sub(path, "cdn_cache_control"))
        if cdn is None:
            return None
    targeted = ([own] if own else []) + ([CDN_CC] if cdn else [])
    if "remove_targeted" not in keys:
        return targeted, [own] if own else []
    node = keys["remove_targeted"][1]
    rpath = _sub(path, "remove_targeted")
    if (ctx.kind(node) == "seq" and not node.value) or \
            (ctx.kind(node) == "bool" and not ctx.boolean(node, rpath)):
        return targeted, []                        # [] or off: every field passed on
    names = _names(ctx, node, rpath, None)
    if names is None:
        return None
    items = _list_items(ctx, node, rpath, "header name")
    for name, (item, ipath) in zip(names, items):
        if name not in targeted:
            if name == CDN_CC:
                why = ("CDN-Cache-Control is not on the target list (cdn_cache_control: "
                       "off), and a targeted field a cache does not use is passed through "
                       "(RFC 9213 section 2.1)")
            else:
                listed = ", ".join(targeted) or "nothing (cdn_cache_control: off, no " \
                    "targeted_field)"
                why = (f"'{item.value}' is not on the route's target list ({listed}); "
                       "remove other fields with headers.response.remove")
            ctx.error(item, ipath, why)
            return None
    return targeted, names


# --------------------------------------------------------------------------
# After the walk

def check_references(ctx, zones: dict, trusted_proxies: list) -> dict:
    """Check every zone a route named, each route's max_object_size against
    its zone's, and that someone may purge where purge relies on
    trusted_proxies; return the zones with the implicit ones after them."""
    known = sorted(ctx.cache_zone_names)
    used = set()
    for name, node, path, rc, monode in ctx.cache_refs:
        used.add(name)
        if name not in ctx.cache_zone_names:
            if not known:
                ctx.error(node, path, f"unknown cache zone '{name}': no zones are defined "
                          "(add it under the top-level key cache_zones, or give max_size "
                          "instead of zone)")
                continue
            close = difflib.get_close_matches(name, known, n=1) or \
                difflib.get_close_matches(name.lower(), known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else \
                f" (cache_zones: {', '.join(known)})"
            ctx.error(node, path, f"unknown cache zone '{name}'{hint}")
            continue
        zone = zones.get(name)
        if zone is None or rc.max_object_size is None:
            continue           # a bad zone is reported where it is defined
        if rc.max_object_size > zone.max_object_size:
            mpath = path.rpartition(".")[0] + ".max_object_size"
            ctx.error(monode, mpath, "must be at most the zone's max_object_size "
                      f"({format_size(zone.max_object_size)}, cache_zones.{name} at line "
                      f"{zone.mark[1]}), got {monode.value}")
    for name, zone in zones.items():
        if name not in used:
            _, line, col = zone.mark
            ctx.warning((line, col), f"cache_zones.{name}", f"no route uses the zone "
                        f"'{name}'")
    # (A trusted_proxies refused for its own problems says nothing here.)
    if not trusted_proxies and not any(p.key_path.startswith("trusted_proxies")
                                       for p in ctx.problems):
        for node, path in ctx.cache_purges:
            ctx.error(node, path, "nobody could purge: trusted_proxies lists no address; "
                      "give purge.allow, such as {allow: [127.0.0.1]}")
    merged = dict(zones)
    for name, zone in ctx.implicit_cache_zones.items():
        merged.setdefault(name, zone)
    return merged
