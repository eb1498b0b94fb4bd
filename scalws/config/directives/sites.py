"""A config file's `sites:` (each site's listen addresses, server names,
TLS and routes) and `status:` blocks, and the checks across sites
(docs/configuration.md); problems through the loader's context with
file:line and the key."""
from __future__ import annotations

import difflib
import ipaddress
import os
import re

from ..model import Listen, Site
from . import tls, upstreams
from .routes import _routes


SITE_KEYS = ("listen", "server_names", "tls", "routes")


UNIX_PATH_MAX = 107            # sizeof(sun_path) - 1 on Linux


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
        st.allow = upstreams.compile_trusted_proxies(ctx, keys["allow"][1], "status.allow")
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
