"""The config half of the FastCGI handler: the `fastcgi` route handler.

    upstreams:
      php: {servers: ["unix:/run/php/php8.2-fpm.sock"], keepalive: 8}
    sites:
      - routes:
          - path: "~ [^/]\\.php(/|$)"
            fastcgi:
              upstream: php                      # a group, or
              # connect: "127.0.0.1:9000"        # one address (unix:/PATH too)
              root: /srv/app/public              # DOCUMENT_ROOT
              split_path_info: "^(.+\\.php)(/.*)$"
              params: {APP_ENV: production}
          - {path: /, static: {root: /srv/app/public,
                               try_files: [$uri, $uri/, "/index.php?$args"]}}

compile() validates a route's `fastcgi:` value and returns a
model.FastCGI, or None after reporting every problem through the loader's
context (file:line, key path), in the shape of proxy.compile. A group named
by `upstream:` is checked once the whole file is walked
(proxy.check_references); `connect:` makes an implicit group
"fastcgi:<address>", shared by the routes that write the same address, with
the pool's default keepalive. The keys, their defaults and the runtime's
behaviour are documented in docs/configuration.md (section `fastcgi`).
"""
from __future__ import annotations

import re

from ..model import FastCGI, Upstream
from . import cache, proxy, static, upstreams
from .fields import Fields

KEYS = ("upstream", "connect", "root", "index", "split_path_info", "check_script",
        "follow_symlinks", "keep_conn", "pipeline", "params", "connect_timeout", "read_timeout",
        "send_timeout", "retries", "headers", "buffer_size", "cache")
IMPLICIT_PREFIX = "fastcgi:"
# A FastCGI group's pooled connections live shortly unless the file says
# otherwise: PHP-FPM gives each open connection a child, so a connection
# kept idle (or kept busy by one worker) holds a child another worker's new
# connection may be waiting for (docs/operations.md, FastCGI).
FASTCGI_KEEPALIVE_TIMEOUT = 1.0
FASTCGI_KEEPALIVE_TIME = 1.0

# Parameters the handler computes; `params` may still override them (sent
# last, the application keeps the last value), but these ones cannot be
# right when fixed for a whole route.
_PER_REQUEST = {"REQUEST_URI", "QUERY_STRING", "REQUEST_METHOD", "CONTENT_LENGTH",
                "CONTENT_TYPE", "REMOTE_ADDR", "REMOTE_PORT"}
_PARAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _sub(path, name):
    return f"{path}.{name}"


def compile(ctx, node, path):
    """Validate `fastcgi:` at `node`; return a FastCGI or None."""
    if ctx.kind(node) != "map":
        ctx.error(node, path, "expected a mapping with root and upstream or connect, such "
                  "as {connect: \"unix:/run/php/php8.2-fpm.sock\", root: /srv/www}; got "
                  f"{ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, KEYS)
    if keys is None:
        return None
    fields = Fields()
    put, values = fields.put, fields.values

    if "upstream" in keys and "connect" in keys:
        later = max(("upstream", "connect"), key=lambda k: (keys[k][0].start_mark.line,
                                                             keys[k][0].start_mark.column))
        ctx.error(keys[later][0], _sub(path, later), "upstream and connect exclude each "
                  "other: give one")
        fields.ok = False
    elif "upstream" in keys:
        name = proxy._upstream_ref(ctx, keys["upstream"][1], _sub(path, "upstream"))
        if name is not None:
            ctx.fastcgi_refs.append(ctx.upstream_refs[-1])
        put("upstream", name)
    elif "connect" in keys:
        put("upstream", _connect(ctx, keys["connect"][1], _sub(path, "connect")))
    else:
        ctx.error(node, path, "expected the key upstream (a group's name) or connect "
                  "(such as 127.0.0.1:9000 or unix:/run/php/php8.2-fpm.sock)")
        fields.ok = False

    if ctx.require(keys, node, path, "root"):
        put("root", static._root(ctx, keys["root"][1], _sub(path, "root")))
    else:
        fields.ok = False
    if "index" in keys:
        put("index", _index(ctx, keys["index"][1], _sub(path, "index")))
    if "split_path_info" in keys:
        put("split_path_info", _split(ctx, keys["split_path_info"][1],
                                      _sub(path, "split_path_info")))
    for name in ("check_script", "keep_conn", "pipeline"):
        if name in keys:
            put(name, ctx.boolean(keys[name][1], _sub(path, name)))
    if "follow_symlinks" in keys:
        put("follow_symlinks", static._follow_symlinks(ctx, keys["follow_symlinks"][1],
                                                       _sub(path, "follow_symlinks")))
    if "params" in keys:
        put("params", _params(ctx, keys["params"][1], _sub(path, "params")))
    for name in ("connect_timeout", "read_timeout", "send_timeout"):
        if name in keys:
            put(name, ctx.duration(keys[name][1], _sub(path, name), positive=True))
    if "retries" in keys:
        put("retries", ctx.integer(keys["retries"][1], _sub(path, "retries"), 0, 100))
    if "headers" in keys:
        put("response_headers", _headers(ctx, keys["headers"][1], _sub(path, "headers")))
    if "buffer_size" in keys:
        put("buffer_size", ctx.size(keys["buffer_size"][1], _sub(path, "buffer_size"),
                                    4 << 10, 16 << 20))
    if "cache" in keys:
        rc = cache.compile(ctx, keys["cache"][0], keys["cache"][1], _sub(path, "cache"))
        if rc is False:
            fields.ok = False
        elif rc is not None:
            values["cache"] = rc
    if not fields.ok:
        return None
    return FastCGI(**values)


def mark_groups(ctx, upstreams: dict) -> None:
    """Once the file is walked: the groups fastcgi routes name speak
    FastCGI (their health checks too); one group cannot serve proxy routes
    as well, nor have TLS."""
    fastcgi_nodes = {id(node) for _, node, _ in ctx.fastcgi_refs}
    http_users = {}
    for name, node, path in ctx.upstream_refs:
        if id(node) not in fastcgi_nodes:
            http_users.setdefault(name, node.start_mark.line + 1)
    for name, node, path in ctx.fastcgi_refs:
        group = upstreams.get(name)
        if group is None:
            continue               # unknown: reported by check_references
        if name in http_users:
            ctx.error(node, path, f"the group '{name}' is used by a proxy route too (line "
                      f"{http_users[name]}): a group speaks either HTTP or FastCGI; give "
                      "each its own group")
            continue
        if group.tls is not None:
            ctx.error(node, path, f"the group '{name}' has TLS: FastCGI runs over plain TCP "
                      "or unix sockets")
            continue
        group.protocol = "fastcgi"
    for group in upstreams.values():
        if group.name.startswith(IMPLICIT_PREFIX):
            group.protocol = "fastcgi"
        if group.protocol == "fastcgi":
            if "keepalive_timeout" not in group.written:
                group.keepalive_timeout = FASTCGI_KEEPALIVE_TIMEOUT
            if "keepalive_time" not in group.written:
                group.keepalive_time = FASTCGI_KEEPALIVE_TIME


def _connect(ctx, node, path):
    """connect: HOST:PORT or unix:/PATH -> the implicit group's name."""
    text = ctx.string(node, path)
    if text is None:
        return None
    if "://" in text:
        ctx.error(node, path, f"expected an address such as 127.0.0.1:9000 or "
                  f"unix:/run/php/php8.2-fpm.sock, not a URL ('{text}')")
        return None
    servers = upstreams._address(ctx, node, path, text)
    if servers is None:
        return None
    key = f"unix:{servers[0].path}" if servers[0].kind == "unix" else text
    name = IMPLICIT_PREFIX + key
    if name not in ctx.implicit_upstreams:
        ctx.implicit_upstreams[name] = Upstream(name=name, servers=servers, mark=ctx.mark(node))
    return name


def _index(ctx, node, path):
    text = ctx.string(node, path)
    if text is None:
        return None
    if "/" in text or text in (".", "..") or any(ord(c) < 0x20 or c.isspace() for c in text):
        ctx.error(node, path, f"expected a file name such as index.php, got '{text}'")
        return None
    return text


def _split(ctx, node, path):
    """A POSIX ERE with two groups (the script name, PATH_INFO)."""
    from .routes import _regex_problem
    text = ctx.string(node, path)
    if text is None:
        return None
    why = _regex_problem(text, icase=False)
    if why is None:
        groups = _count_groups(text)
        if groups < 2:
            why = ("expected two groups, the script name and PATH_INFO, such as "
                   "'^(.+\\.php)(/.*)$'")
    if why is not None:
        ctx.error(node, path, why)
        return None
    return text


def _count_groups(pattern):
    """Opening parentheses that start a group (not escaped, not in [...])."""
    n = 0
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "]":
                i += 1
        elif c == "(":
            n += 1
        i += 1
    return n


def _params(ctx, node, path):
    """params: {NAME: value} -> [(name, value)] in order."""
    pairs = ctx.mapping(node, path, None)
    if pairs is None:
        return None
    out = []
    ok = True
    for name, (knode, vnode) in pairs.items():
        ppath = _sub(path, name)
        if not _PARAM_NAME_RE.fullmatch(name):
            ctx.error(knode, ppath, f"'{name}' is not a parameter name (letters, digits "
                      "and '_', not starting with a digit)")
            ok = False
            continue
        if name.upper() in _PER_REQUEST:
            ctx.error(knode, ppath, f"{name} is computed for each request and cannot be "
                      "fixed for a route")
            ok = False
            continue
        value = ctx.scalar_text(vnode, ppath)
        if value is None:
            ok = False
            continue
        if "\0" in value or "\n" in value or "\r" in value:
            ctx.error(vnode, ppath, "must not contain NUL or line breaks")
            ok = False
            continue
        out.append((name, value))
    return out if ok else None


def _headers(ctx, node, path):
    """headers: {response: {set, remove}} -> [(name, value or None)]."""
    keys = ctx.mapping(node, path, ("response",))
    if keys is None:
        return None
    if "response" not in keys:
        return []
    return proxy._header_actions(ctx, keys["response"][1], _sub(path, "response"),
                                 proxy.OWNED_RESPONSE)

