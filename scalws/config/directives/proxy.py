"""The config half of the reverse proxy: the `proxy` route handler, the
top-level `upstreams` groups and `trusted_proxies`.

    upstreams:
      api:
        servers: ["127.0.0.1:3000", {address: "[::1]:3001", weight: 2}]
        balance: least_conn
        health: {path: /healthz}
    sites:
      - routes:
          - {path: /api/, proxy: {upstream: api, strip_prefix: /api}}
          - {path: /b/, proxy: api}                        # an upstream name
          - {path: /c/, proxy: "http://127.0.0.1:3000/v1/"}  # a URL
          - {path: /d/, proxy: {url: "https://api.example.com/", tls: {ca: ca.pem}}}

TLS to upstreams: `https://` in a url: or in a group's servers (all of
them or none), or a group's `tls:` (on, or a mapping of the options; a url:
route takes the same mapping beside url). Options (UpstreamTLS): verify (on
by default), ca (a PEM file; default: the system's store), name (the name
the certificate must carry and SNI sends; default: the route's `host:` on a
url: route, else each server's host as written), sni (on; an IP address is
never sent), cert and key (a client certificate), protocols.

compile() validates a route's `proxy:` value and returns a model.Proxy, or
None after reporting every problem through the loader's context (`ctx`, see
loader._Context), in the shape of respond.compile. upstreams.py's
compile_upstreams() and compile_trusted_proxies() do the same for the
top-level keys; the loader calls them and then check_references(), once
the whole file is walked, because a route may name a group written
further down the file.

The context carries the state shared between those calls:
  ctx.upstream_refs        [(name, node, path)] of every `upstream:` named
  ctx.upstream_names       names written under `upstreams` (valid or not)
  ctx.implicit_upstreams   "url:<address>" -> Upstream, made from `url:`
                           ("url:https://<address>" for https, "#2", "#3"...
                           appended for routes whose TLS options differ)

Host names (in servers and in url) are resolved here, through the stub
resolver of `resolver:` (scalws/dns.py; getaddrinfo() with `resolver:
off`): each address a name resolves to becomes its own UpstreamServer with
the same options and `resolve` set to the name, which the master asks
again while it runs (control/resolver.py); the model holds numeric
addresses only. The
keys, their defaults and the runtime's behaviour are documented in
docs/configuration.md (sections `upstreams`, `proxy`, `trusted_proxies`).
"""
from __future__ import annotations

from ..model import Proxy, Upstream, UpstreamTLS
from . import cache
from .fields import Fields
from .respond import header_value_problem, is_token
from .upstreams import (DEFAULT_HTTP_PORT, DEFAULT_HTTPS_PORT, _NAME_RE, _control_problem,
                        _has_port, _host_header, _host_only, _path_text, _sub, _tcp_servers, _tls,
                        _unix_server)

KEYS = ("upstream", "url", "strip_prefix", "host", "connect_timeout",
        "read_timeout", "send_timeout", "retries", "headers", "buffer_size", "tls",
        "cache")
HEADERS_KEYS = ("request", "response")
HEADER_ACTIONS = ("set", "remove")


IMPLICIT_PREFIX = "url:"


_HOP = "hop-by-hop headers are handled by the proxy"
_FRAMING = "the proxy chooses the framing"
# Headers the proxy runtime owns, by lowercase name -> why, per direction.
_OWNED_COMMON = {
    "connection": _HOP, "keep-alive": _HOP, "te": _HOP, "trailer": _HOP,
    "upgrade": _HOP, "transfer-encoding": _FRAMING, "content-length": _FRAMING,
}
OWNED_REQUEST = {**_OWNED_COMMON, "host": "use proxy.host"}
OWNED_RESPONSE = {**_OWNED_COMMON, "host": "Host is a request header"}


# --------------------------------------------------------------------------
# The `proxy` route handler

def compile(ctx, node, path):
    """Validate `proxy:` at `node`; return a Proxy or None."""
    kind = ctx.kind(node)
    if kind == "str":
        return _shorthand(ctx, node, path)
    if kind != "map":
        ctx.error(node, path, "expected an upstream name, a URL such as "
                  "http://127.0.0.1:3000, or a mapping with upstream or url; "
                  f"got {ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, KEYS)
    if keys is None:
        return None
    fields = Fields()
    put, values = fields.put, fields.values
    host = None
    if "host" in keys:
        host = _host_header(ctx, keys["host"][1], _sub(path, "host"))
        put("host", host)

    # Exactly one of upstream and url.
    if "upstream" in keys and "url" in keys:
        later = max(("upstream", "url"), key=lambda k: (keys[k][0].start_mark.line,
                                                         keys[k][0].start_mark.column))
        ctx.error(keys[later][0], _sub(path, later), "upstream and url exclude "
                  "each other: give one")
        fields.ok = False
    elif "upstream" in keys:
        put("upstream", _upstream_ref(ctx, keys["upstream"][1], _sub(path, "upstream")))
        if "tls" in keys:
            unode = keys["upstream"][1]
            group = unode.value if ctx.kind(unode) == "str" else "NAME"
            ctx.error(keys["tls"][0], _sub(path, "tls"), "tls goes with an https:// url; "
                      f"for a group, give tls under upstreams.{group}")
            fields.ok = False
    elif "url" in keys:
        tls = (keys["tls"][0], keys["tls"][1], _sub(path, "tls")) if "tls" in keys else None
        target = _url(ctx, keys["url"][1], _sub(path, "url"), tls, host)
        if target is None:
            fields.ok = False
        else:
            values["upstream"], values["path_prefix"] = target
    else:
        ctx.error(node, path, "expected the key upstream (a group's name) or url "
                  "(such as http://127.0.0.1:3000)")
        fields.ok = False

    if "strip_prefix" in keys:
        put("strip_prefix", _path_text(ctx, keys["strip_prefix"][1],
                                       _sub(path, "strip_prefix")))
    for name in ("connect_timeout", "read_timeout", "send_timeout"):
        if name in keys:
            put(name, ctx.duration(keys[name][1], _sub(path, name), positive=True))
    if "retries" in keys:
        put("retries", ctx.integer(keys["retries"][1], _sub(path, "retries"), 0, 100))
    if "headers" in keys:
        headers = _headers(ctx, keys["headers"][1], _sub(path, "headers"))
        if headers is None:
            fields.ok = False
        else:
            values["request_headers"], values["response_headers"] = headers
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
    return Proxy(**values)


def _looks_like_url(text):
    return "://" in text or text.startswith("unix:")


def _shorthand(ctx, node, path):
    """proxy: NAME (an upstream group) or proxy: URL."""
    text = node.value
    if _looks_like_url(text):
        target = _url(ctx, node, path)
        if target is None:
            return None
        return Proxy(upstream=target[0], path_prefix=target[1])
    name = _upstream_ref(ctx, node, path)
    return None if name is None else Proxy(upstream=name)


def _upstream_ref(ctx, node, path):
    """A group's name; checked against `upstreams` once the file is walked."""
    name = ctx.string(node, path)
    if name is None:
        return None
    if not _NAME_RE.fullmatch(name):
        hint = ""
        if ":" in name and not _looks_like_url(name):
            hint = f"; for an address write a URL, as http://{name}"
        ctx.error(node, path, f"'{name}' is not an upstream name (letters, digits, "
                  f"'_', '.' and '-'){hint}")
        return None
    ctx.upstream_refs.append((name, node, path))
    return name


def _url(ctx, node, path, tls=None, host=None):
    """url: http(s)://HOST[:PORT][/PATH] or unix:/PATH -> (implicit group,
    prefix). `tls`: the route's (key node, value node, path) of `tls:`;
    `host`: its `host:` (the default expected name of an https server)."""
    text = ctx.string(node, path)
    if text is None:
        return None
    scheme, sep, rest = text.partition("://")
    secure = scheme.lower() == "https"
    if tls is not None and not secure:
        ctx.error(tls[0], tls[2], "tls applies only to an https:// url")
        return None
    if text.startswith("unix:") and not sep:
        servers = _unix_server(ctx, node, path, text)
        if servers is None:
            return None
        address, prefix = f"unix:{servers[0].path}", ""
    elif not sep:
        hint = ""
        if _NAME_RE.fullmatch(text):
            hint = f"; for an upstream group write upstream: {text}"
        ctx.error(node, path, "expected a URL such as http://127.0.0.1:3000 or "
                  f"unix:/run/app.sock, got '{text}'{hint}")
        return None
    elif scheme.lower() not in ("http", "https"):
        ctx.error(node, path, f"the scheme '{scheme}' is not supported: expected "
                  "http://, https:// or unix:")
        return None
    else:
        authority, slash, tail = rest.partition("/")
        prefix = slash + tail
        if "?" in authority or "#" in authority or "?" in prefix or "#" in prefix:
            ctx.error(node, path, "a proxy url has no query string or fragment")
            return None
        if "@" in authority:
            ctx.error(node, path, "a proxy url has no user name or password")
            return None
        why = _control_problem(prefix)
        if why is not None:
            ctx.error(node, path, why)
            return None
        if prefix == "/":
            prefix = ""
        if not authority:
            ctx.error(node, path, f"expected a host after '{scheme}://'")
            return None
        address = authority
        if not _has_port(authority):
            address = f"{authority}:{DEFAULT_HTTPS_PORT if secure else DEFAULT_HTTP_PORT}"
        servers = _tcp_servers(ctx, node, path, address)
        if servers is None:
            return None
    if not secure:
        name = IMPLICIT_PREFIX + address
        if name not in ctx.implicit_upstreams:
            ctx.implicit_upstreams[name] = Upstream(name=name, servers=servers,
                                                    mark=ctx.mark(node))
        return name, prefix
    options = UpstreamTLS(mark=ctx.mark(node))
    if tls is not None:
        options = _tls(ctx, tls[1], tls[2], allow_off=False)
        if not options:
            return None
    default_name = _host_only(host) if host else None
    for server in servers:
        server.tls_name = options.name or default_name or _host_only(server.address)
    # Routes with the same https url share a group (and its pool and
    # sessions) when they verify alike; else each set of options has its own.
    key = (_tls_key(options), tuple(s.tls_name for s in servers))
    base = f"{IMPLICIT_PREFIX}https://{address}"
    name, n = base, 1
    while name in ctx.implicit_upstreams:
        group = ctx.implicit_upstreams[name]
        if (_tls_key(group.tls), tuple(s.tls_name for s in group.servers)) == key:
            return name, prefix
        n += 1
        name = f"{base}#{n}"
    ctx.implicit_upstreams[name] = Upstream(name=name, servers=servers, tls=options,
                                            mark=ctx.mark(node))
    return name, prefix


def _tls_key(t):
    return (t.verify, t.ca, t.name, t.sni, t.cert, t.key, tuple(t.protocols))


# -- headers ----------------------------------------------------------------

def _headers(ctx, node, path):
    """headers: {request: {set, remove}, response: {set, remove}} -> two lists."""
    keys = ctx.mapping(node, path, HEADERS_KEYS)
    if keys is None:
        return None
    ok = True
    out = {"request": [], "response": []}
    for side, owned in (("request", OWNED_REQUEST), ("response", OWNED_RESPONSE)):
        if side in keys:
            got = _header_actions(ctx, keys[side][1], _sub(path, side), owned)
            if got is None:
                ok = False
            else:
                out[side] = got
    return (out["request"], out["response"]) if ok else None


def _header_actions(ctx, node, path, owned):
    keys = ctx.mapping(node, path, HEADER_ACTIONS)
    if keys is None:
        return None
    ok = True
    seen = {}                  # lowercase name -> (as written, line)
    sets, removes = [], []

    def check_name(name, where, hpath):
        lname = name.lower()
        if not is_token(name):
            ctx.error(where, hpath, f"'{name}' is not a valid header name "
                      "(letters, digits and !#$%&'*+-.^_`|~ only)")
            return False
        if lname in owned:
            ctx.error(where, hpath, f"header '{name}' is managed by the proxy and "
                      f"cannot be set or removed: {owned[lname]}")
            return False
        if lname in seen:
            first, line = seen[lname]
            ctx.error(where, hpath, f"header '{name}' is already listed as "
                      f"'{first}' (line {line}; names are case-insensitive)")
            return False
        seen[lname] = (name, where.start_mark.line + 1)
        return True

    if "set" in keys:
        spath = _sub(path, "set")
        snode = keys["set"][1]
        pairs = ctx.mapping(snode, spath, None)
        if pairs is None:
            ok = False
        else:
            for name, (knode, vnode) in pairs.items():
                hpath = _sub(spath, name)
                if not check_name(name, knode, hpath):
                    ok = False
                    continue
                value = ctx.scalar_text(vnode, hpath)
                why = None if value is None else header_value_problem(value)
                if why is not None:
                    ctx.error(vnode, hpath, why)
                if value is None or why is not None:
                    ok = False
                    continue
                sets.append((name, value))

    if "remove" in keys:
        rpath = _sub(path, "remove")
        rnode = keys["remove"][1]
        kind = ctx.kind(rnode)
        if kind == "str":
            items = [(rnode, rpath)]
        elif kind == "seq":
            items = [(item, f"{rpath}[{i}]") for i, item in enumerate(rnode.value)]
        else:
            ctx.error(rnode, rpath, "expected a list of header names, got "
                      f"{ctx.describe(rnode)}")
            items = []
            ok = False
        for item, ipath in items:
            name = ctx.string(item, ipath)
            if name is None or not check_name(name, item, ipath):
                ok = False
                continue
            removes.append((name, None))
    return sets + removes if ok else None


# --------------------------------------------------------------------------
# Top-level `upstreams`


# -- servers -------------------------------------------------------------------


# -- health checks -------------------------------------------------------------


# --------------------------------------------------------------------------
# Top-level `trusted_proxies`


# --------------------------------------------------------------------------
# After the walk

