"""The upstream side of the reverse proxy's config: the top-level
`upstreams` groups (servers and their addresses, resolved through
`resolver:`, balancing, keep-alive, health checks, client TLS),
`trusted_proxies`, and check_references(), which ties the routes' named
groups to them once the whole file is walked; and the small readers the
route side shares (a path, a Host value). directives/proxy.py (the
`proxy` route) and fastcgi.py, app.py, cache_peers.py use it. The
context's shared state and the resolution of names are described in
proxy.py's docstring; the keys in docs/configuration.md (`upstreams`,
`trusted_proxies`).
"""
from __future__ import annotations

import difflib
import ipaddress
import os
import re
import socket

from ..model import Health, Upstream, UpstreamServer, UpstreamTLS
from ... import dns
from .fields import Fields
from .respond import header_value_problem, is_token


UPSTREAM_KEYS = ("servers", "balance", "hash_key", "keepalive",
                 "keepalive_timeout", "keepalive_requests", "keepalive_time",
                 "health", "tls")
SERVER_KEYS = ("address", "weight", "max_fails", "fail_timeout", "backup",
               "max_connections")
HEALTH_KEYS = ("path", "interval", "timeout", "expect_status", "rise", "fall",
               "host")
TLS_KEYS = ("verify", "ca", "name", "sni", "cert", "key", "protocols")
TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
_OLD_PROTOCOLS = ("ssl2", "ssl3", "tls1", "tls10", "tls11")   # lowercase, without v . _ space
BALANCE = ("round_robin", "least_conn", "hash")
HASH_KEYS = ("client_addr", "uri", "header:NAME")
UNIX_PATH_MAX = 107            # sizeof(sun_path) - 1 on Linux
DEFAULT_HTTP_PORT = 80
DEFAULT_HTTPS_PORT = 443
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_LABEL_RE = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_STATUS_RANGE_RE = re.compile(r"([0-9]{3})\s*-\s*([0-9]{3})")
_STATUS_CLASS_RE = re.compile(r"([1-5])[xX][xX]")
_STATUS_HINT = ("expected a status (200), a range (\"200-399\"), a class (2xx) "
                "or a list of them")


def _sub(path, name):
    return f"{path}.{name}"


def _control_problem(text):
    if "\0" in text:
        return "must not contain NUL"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return "must not contain control characters"
    if any(c.isspace() for c in text):
        return "must not contain whitespace"
    return None


def _host_only(text):
    """The host of HOST[:PORT] or [V6][:PORT] (a Host header or an address
    as written), lowercase, without a trailing dot."""
    if text.startswith("["):
        host = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        host = text.partition(":")[0]
    else:
        host = text
    return host.rstrip(".").lower()


def _has_port(authority):
    if authority.startswith("["):
        return "]:" in authority or "]" not in authority   # (the parser says why)
    return ":" in authority


def _path_text(ctx, node, path):
    text = ctx.string(node, path)
    if text is None:
        return None
    if not text.startswith("/"):
        ctx.error(node, path, f"must start with '/', got '{text}'")
        return None
    why = _control_problem(text)
    if why is not None:
        ctx.error(node, path, why)
        return None
    return text


def _host_header(ctx, node, path):
    text = ctx.scalar_text(node, path)
    if text is None:
        return None
    if not text:
        ctx.error(node, path, "must not be empty")
        return None
    why = header_value_problem(text)
    if why is None and any(c.isspace() for c in text):
        why = "must not contain whitespace"
    if why is not None:
        ctx.error(node, path, why)
        return None
    return text


def compile_upstreams(ctx, node, path="upstreams") -> dict:
    """upstreams: {NAME: group} -> {name: Upstream} (bad groups left out)."""
    groups = ctx.mapping(node, path, None)
    if groups is None:
        return {}
    out = {}
    for name, (knode, vnode) in groups.items():
        gpath = _sub(path, name)
        ctx.upstream_names.add(name)
        if not _NAME_RE.fullmatch(name):
            ctx.error(knode, gpath, f"'{name}' is not a valid upstream name "
                      "(letters, digits, '_', '.' and '-')")
            continue
        group = _upstream(ctx, knode, vnode, gpath, name)
        if group is not None:
            out[name] = group
    return out


def _upstream(ctx, knode, node, path, name):
    if ctx.kind(node) != "map":
        ctx.error(node, path, "expected a mapping with at least servers, such as "
                  f"{{servers: [\"127.0.0.1:3000\"]}}; got {ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, UPSTREAM_KEYS)
    if keys is None:
        return None
    fields = Fields()
    put, values = fields.put, fields.values

    servers = None
    secure = []                # [(item node, item path, https://?)] per servers item
    if ctx.require(keys, node, path, "servers"):
        servers = _servers(ctx, keys["servers"][1], _sub(path, "servers"), secure)
    fields.ok &= servers is not None

    if "balance" in keys:
        put("balance", ctx.choice(keys["balance"][1], _sub(path, "balance"), BALANCE))
    if "hash_key" in keys:
        hnode = keys["hash_key"][1]
        hpath = _sub(path, "hash_key")
        balance = values.get("balance", "round_robin")
        if "balance" in keys and "balance" not in values:
            fields.ok = False                 # the balance problem is reported already
        elif balance != "hash":
            ctx.error(keys["hash_key"][0], hpath, "hash_key applies only with "
                      f"balance: hash (balance is {balance})")
            fields.ok = False
        else:
            put("hash_key", _hash_key(ctx, hnode, hpath))
    if "keepalive" in keys:
        put("keepalive", ctx.integer(keys["keepalive"][1], _sub(path, "keepalive"),
                                     0, 1_000_000))
    if "keepalive_timeout" in keys:
        put("keepalive_timeout", ctx.duration(keys["keepalive_timeout"][1],
                                              _sub(path, "keepalive_timeout"),
                                              positive=True))
    if "keepalive_requests" in keys:
        put("keepalive_requests", ctx.integer(keys["keepalive_requests"][1],
                                              _sub(path, "keepalive_requests"),
                                              1, (1 << 31) - 1))
    if "keepalive_time" in keys:
        put("keepalive_time", ctx.duration(keys["keepalive_time"][1],
                                           _sub(path, "keepalive_time"),
                                           positive=True))
    if "health" in keys:
        health = _health(ctx, keys["health"][1], _sub(path, "health"))
        if health is False:
            fields.ok = False
        else:
            values["health"] = health

    tls = _group_tls(ctx, keys, path, servers, secure)
    if tls is False:
        fields.ok = False
    elif tls is not None:
        values["tls"] = tls

    if not fields.ok:
        return None
    return Upstream(name=name, servers=servers, mark=ctx.mark(knode), written=tuple(keys),
                    **values)


def _group_tls(ctx, keys, path, servers, secure):
    """A group's TLS: its `tls:`, or https:// servers (all or none) ->
    UpstreamTLS, None (plain), or False (reported)."""
    https = [item for item in secure if item[2]]
    if https and len(https) != len(secure):
        plain = next(item for item in secure if not item[2])
        ctx.error(plain[0], plain[1], "a group's servers are all https:// or none "
                  f"({https[0][1]} is https://): give every server https://, or "
                  "tls: on to the group")
        return False
    tls = None
    if "tls" in keys:
        tls = _tls(ctx, keys["tls"][1], _sub(path, "tls"), allow_off=True)
        if tls is False:
            return False
        if tls is None and https:
            ctx.error(keys["tls"][0], _sub(path, "tls"), "tls: off contradicts the "
                      "https:// servers")
            return False
    elif https:
        tls = UpstreamTLS(mark=ctx.mark(https[0][0]))
    if tls is None or servers is None:
        return tls
    ok = True
    for server in servers:
        if server.kind == "unix":
            if tls.name is None and tls.verify:
                ctx.error(keys["tls"][0] if "tls" in keys else https[0][0],
                          _sub(path, "tls"), f"the server {server.address} is a unix socket: "
                          "it has no host name to verify; give tls.name (or verify: off)")
                ok = False
                break
            server.tls_name = tls.name or ""
        else:
            server.tls_name = tls.name or _host_only(server.address)
    return tls if ok else False


def _tls(ctx, node, path, allow_off):
    """tls: on | off | {verify, ca, name, sni, cert, key, protocols} ->
    UpstreamTLS, None (off), or False (reported)."""
    kind = ctx.kind(node)
    if kind == "bool" or (kind == "str" and node.value in ("on", "off")):
        on = ctx.boolean(node, path) if kind == "bool" else node.value == "on"
        if on:
            return UpstreamTLS(mark=ctx.mark(node))
        if not allow_off:
            ctx.error(node, path, "an https:// url always uses TLS: give a mapping of "
                      "options (such as {ca: ca.pem}) or leave tls out")
            return False
        return None
    if kind != "map":
        ctx.error(node, path, "expected on, off or a mapping such as {ca: ca.pem, "
                  f"name: api.example.com}}; got {ctx.describe(node)}")
        return False
    keys = ctx.mapping(node, path, TLS_KEYS)
    if keys is None:
        return False
    fields = Fields()
    put, values = fields.put, fields.values
    for name in ("verify", "sni"):
        if name in keys:
            put(name, ctx.boolean(keys[name][1], _sub(path, name)))
    if "name" in keys:
        put("name", _tls_name(ctx, keys["name"][1], _sub(path, "name")))
    if "protocols" in keys:
        put("protocols", _tls_protocols(ctx, keys["protocols"][1], _sub(path, "protocols")))
    ca = None
    if "ca" in keys:
        ca = _pem_file(ctx, keys["ca"][1], _sub(path, "ca"), "certificate")
        put("ca", ca)
    if ("cert" in keys) != ("key" in keys):
        given, missing = ("cert", "key") if "cert" in keys else ("key", "cert")
        ctx.error(keys[given][0], _sub(path, given), f"a client certificate needs both "
                  f"cert and key: {missing} is missing")
        fields.ok = False
    elif "cert" in keys:
        cert = _pem_file(ctx, keys["cert"][1], _sub(path, "cert"), "certificate")
        key = _pem_file(ctx, keys["key"][1], _sub(path, "key"), "private key")
        put("cert", cert)
        put("key", key)
        if cert is not None and key is not None:
            why = _key_mismatch(cert, key)
            if why is not None:
                ctx.error(keys["key"][1], _sub(path, "key"), why)
                fields.ok = False
    if "ca" in keys and values.get("verify") is False and ca is not None:
        ctx.warning(keys["ca"][0], _sub(path, "ca"), "ca has no effect with verify: off")
    if not fields.ok:
        return False
    return UpstreamTLS(mark=ctx.mark(node), **values)


def _tls_name(ctx, node, path):
    text = ctx.string(node, path)
    if text is None:
        return None
    try:
        return ipaddress.ip_address(text.strip("[]")).compressed
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    if (not name.isascii() or len(name) > 253
            or not all(_LABEL_RE.fullmatch(label) for label in name.split("."))):
        ctx.error(node, path, f"'{text}' is not a host name or an IP address")
        return None
    return name.lower()


def _tls_protocols(ctx, node, path):
    if ctx.kind(node) == "seq":
        items = [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        if not items:
            ctx.error(node, path, "expected at least one protocol")
            return None
    else:
        items = [(node, path)]
    chosen = []
    ok = True
    for item, ipath in items:
        text = ctx.string(item, ipath)
        if text is None:
            ok = False
        elif re.sub(r"[v._ ]", "", text.lower()) in _OLD_PROTOCOLS:
            ctx.error(item, ipath, f"{text} is insecure and refused (RFC 8996 deprecates "
                      "TLS 1.0 and 1.1; SSL is broken): use TLSv1.2 and TLSv1.3")
            ok = False
        elif text not in TLS_PROTOCOLS:
            hint = difflib.get_close_matches(text, TLS_PROTOCOLS, n=1)
            ctx.error(item, ipath, f"unknown protocol '{text}'" +
                      (f"; did you mean '{hint[0]}'?" if hint else
                       f" (known: {', '.join(TLS_PROTOCOLS)})"))
            ok = False
        elif text in chosen:
            ctx.error(item, ipath, f"{text} is already listed")
            ok = False
        else:
            chosen.append(text)
    return [p for p in TLS_PROTOCOLS if p in chosen] if ok else None


def _pem_file(ctx, node, path, what):
    """A readable PEM file holding a `what` ("certificate" or "private key")
    -> its absolute path, or None after reporting."""
    full = ctx.path(node, path)
    if full is None:
        return None
    try:
        with open(full, "rb") as f:
            data = f.read(4 << 20)
    except OSError as e:
        ctx.error(node, path, f"cannot read {full}: {e.strerror or e}")
        return None
    marker = b"-----BEGIN CERTIFICATE-----" if what == "certificate" else b"PRIVATE KEY-----"
    if marker not in data:
        ctx.error(node, path, f"{full} holds no PEM {what}")
        return None
    if what == "certificate":
        from cryptography import x509
        try:
            x509.load_pem_x509_certificates(data)
        except ValueError as e:
            ctx.error(node, path, f"{full}: a certificate cannot be read ({e})")
            return None
    return full


def _key_mismatch(cert_path, key_path):
    """Why the key does not go with the certificate (or cannot be used), or None."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    with open(cert_path, "rb") as f:
        leaf = x509.load_pem_x509_certificates(f.read())[0]
    with open(key_path, "rb") as f:
        data = f.read()
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        return f"{key_path} is encrypted: the server cannot ask for a passphrase"
    except ValueError as e:
        return f"{key_path}: the private key cannot be read ({e})"
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, spki) != leaf.public_key().public_bytes(der, spki):
        return f"the key {key_path} does not belong to the certificate {cert_path}"
    return None


def _hash_key(ctx, node, path):
    text = ctx.string(node, path)
    if text is None:
        return None
    if text in ("client_addr", "uri"):
        return text
    if text.startswith("header:"):
        name = text[len("header:"):]
        if not is_token(name):
            ctx.error(node, path, f"'{name}' is not a valid header name "
                      "(letters, digits and !#$%&'*+-.^_`|~ only)")
            return None
        return text
    ctx.error(node, path, "expected client_addr, uri or header:NAME; got "
              f"{ctx.describe(node)}")
    return None


def _servers(ctx, node, path, secure=None):
    """servers: [...] -> [UpstreamServer]; `secure` gets (node, path, https?)
    for each item."""
    if ctx.kind(node) != "seq":
        ctx.error(node, path, f"expected a list of servers, got {ctx.describe(node)}")
        return None
    if not node.value:
        ctx.error(node, path, "expected at least one server")
        return None
    out = []
    seen = {}                  # endpoint -> line of its first entry
    ok = True
    for i, item in enumerate(node.value):
        ipath = f"{path}[{i}]"
        servers = _server(ctx, item, ipath)
        if secure is not None:
            secure.append((item, ipath, _is_https(ctx, item)))
        if servers is None:
            ok = False
            continue
        for server in servers:
            server.entry = i
            key = (server.kind, server.host or server.resolve, server.port, server.path)
            if key in seen:
                what = server.path if server.kind == "unix" else \
                    _fmt_host_port(server.host, server.port)
                ctx.error(item, ipath, f"{what} is already a server of this group "
                          f"(line {seen[key]}); give it a weight instead")
                ok = False
                break
            seen[key] = server.mark[1]
        else:
            out.extend(servers)
    if ok and all(s.backup for s in out):
        ctx.error(node, path, "every server is a backup: at least one must not be")
        ok = False
    return out if ok else None


def _is_https(ctx, item):
    """Whether a servers item is written https://HOST[:PORT]."""
    if ctx.kind(item) == "map":
        for knode, vnode in item.value:
            if getattr(knode, "value", None) == "address":
                item = vnode
                break
        else:
            return False
    return ctx.kind(item) == "str" and item.value.lower().startswith("https://")


def _server(ctx, node, path):
    """One item of servers -> [UpstreamServer] (several when a name resolves
    to several addresses), or None after reporting."""
    kind = ctx.kind(node)
    if kind == "str":
        return _address(ctx, node, path, node.value)
    if kind != "map":
        ctx.error(node, path, "expected an address such as 127.0.0.1:3000, "
                  "[::1]:3000 or unix:/run/app.sock, or a mapping with address; "
                  f"got {ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, SERVER_KEYS)
    if keys is None:
        return None
    fields = Fields()
    put, options = fields.put, fields.values

    servers = None
    if ctx.require(keys, node, path, "address"):
        anode = keys["address"][1]
        apath = _sub(path, "address")
        text = ctx.string(anode, apath)
        if text is not None:
            servers = _address(ctx, anode, apath, text)
    fields.ok &= servers is not None
    if "weight" in keys:
        put("weight", ctx.integer(keys["weight"][1], _sub(path, "weight"), 1, 1000))
    if "max_fails" in keys:
        put("max_fails", ctx.integer(keys["max_fails"][1], _sub(path, "max_fails"),
                                     0, 1000))
    if "fail_timeout" in keys:
        put("fail_timeout", ctx.duration(keys["fail_timeout"][1],
                                         _sub(path, "fail_timeout"), positive=True))
    if "backup" in keys:
        put("backup", ctx.boolean(keys["backup"][1], _sub(path, "backup")))
    if "max_connections" in keys:
        put("max_connections", ctx.integer(keys["max_connections"][1],
                                           _sub(path, "max_connections"), 0, 1_000_000))
    if not fields.ok:
        return None
    for server in servers:
        for key, value in options.items():
            setattr(server, key, value)
    return servers


def _address(ctx, node, path, text):
    """HOST:PORT, [V6]:PORT or unix:PATH -> [UpstreamServer], or None."""
    if text.lower().startswith("https://"):
        rest = text[len("https://"):]
        authority, slash, tail = rest.partition("/")
        if not authority:
            ctx.error(node, path, "expected a host after 'https://'")
            return None
        if tail or "?" in authority or "#" in authority or "@" in authority:
            ctx.error(node, path, f"a server is https://HOST:PORT, without a path: write "
                      f"'https://{authority.split('?')[0].split('#')[0]}'")
            return None
        if not _has_port(authority):
            authority = f"{authority}:{DEFAULT_HTTPS_PORT}"
        return _tcp_servers(ctx, node, path, authority)
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme.lower() == "http" and rest.split("/", 1)[0]:
            message = f"a server is an address, not a URL: write '{rest.split('/', 1)[0]}'"
        else:
            message = f"a server is an address such as 127.0.0.1:3000, not a URL ('{text}')"
        ctx.error(node, path, message)
        return None
    if text.startswith("unix:"):
        return _unix_server(ctx, node, path, text)
    return _tcp_servers(ctx, node, path, text)


def _unix_server(ctx, node, path, text):
    sock = text[len("unix:"):]
    if not sock:
        ctx.error(node, path, "expected a socket path after 'unix:'")
        return None
    if "\0" in sock:
        ctx.error(node, path, "must not contain NUL")
        return None
    full = os.path.normpath(os.path.join(ctx.base_dir, sock))
    if len(full.encode()) > UNIX_PATH_MAX:
        ctx.error(node, path, f"the socket path {full} is longer than "
                  f"{UNIX_PATH_MAX} bytes (the limit of a unix socket address)")
        return None
    return [UpstreamServer(address=text, kind="unix", path=full, mark=ctx.mark(node))]


def _tcp_servers(ctx, node, path, text):
    try:
        host, port, numeric = _split_host_port(text)
    except ValueError as e:
        ctx.error(node, path, str(e))
        return None
    mark = ctx.mark(node)
    if numeric:
        return [UpstreamServer(address=text, kind="tcp", host=host, port=port, mark=mark)]
    hosts, name = _resolve_at_load(ctx, node, path, host, port)
    if hosts is None:          # a cache peers' name with no address yet (cache_peers.py)
        return [UpstreamServer(address=text, kind="tcp", host="", port=port, resolve=host,
                               mark=mark)]
    if not hosts:
        return None
    return [UpstreamServer(address=text, kind="tcp", host=h, port=port, resolve=name, mark=mark)
            for h in hosts]


def _resolve_at_load(ctx, node, path, host, port):
    """-> (addresses, the name the master re-resolves or ""); ([], "") after
    reporting. With the resolver on, our stub resolver (scalws/dns.py)
    answers, as the master will later; a name only getaddrinfo() knows
    (nsswitch beyond files and dns) is used once, with a warning."""
    r = getattr(ctx, "resolver", None)
    if r is not None and r.enabled:
        got = ctx.resolved.get(host)
        if got is None:
            got = ctx.resolved[host] = dns.resolve(host, dns.Settings.of(r))
        if got[0] == "ok":
            return got[1], host
        if ctx.pending_names_ok:
            ctx.warning(node, path, f"'{host}' does not resolve yet ({got[1]}): no server from "
                        f"it until it does (asked again every {r.min_interval:g}s)")
            return None, host
    try:
        hosts = resolve(host, port)
    except OSError as e:
        reason = getattr(e, "strerror", None) or str(e)
        if r is not None and r.enabled:
            reason = got[1]       # what DNS said (getaddrinfo failed too)
        ctx.error(node, path, f"cannot resolve '{host}': {reason}")
        return [], ""
    if not hosts:
        ctx.error(node, path, f"cannot resolve '{host}': no TCP address")
        return [], ""
    if r is not None and r.enabled:
        ctx.warning(node, path, f"'{host}' is known to getaddrinfo() but not to DNS "
                    f"({got[1]}): resolved once, not followed while running")
    return hosts, ""


def resolve(host: str, port: int) -> list:
    """The numeric addresses `host` resolves to for TCP, in the resolver's
    order, without repeats (one getaddrinfo call; /etc/hosts, then DNS)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                               proto=socket.IPPROTO_TCP)
    out = []
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        addr = sockaddr[0]
        if family == socket.AF_INET6:
            addr = ipaddress.IPv6Address(addr).compressed
        if addr not in out:
            out.append(addr)
    return out


def _split_host_port(text):
    """-> (host, port, numeric); host is normalised when numeric."""
    if not text.strip():
        raise ValueError("must not be empty")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"missing ']' after the IPv6 address in '{text}'")
        inner, rest = text[1:end], text[end + 1:]
        try:
            host = ipaddress.IPv6Address(inner).compressed
        except ValueError:
            raise ValueError(f"'{inner}' is not an IPv6 address") from None
        if not rest.startswith(":"):
            raise ValueError(f"expected [address]:port, got '{text}' (the port is "
                             "missing)")
        return host, _port(rest[1:]), True
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"expected host:port, got '{text}' (the port is missing)")
    if ":" in host:
        raise ValueError("an IPv6 address goes in brackets, as in [::1]:3000")
    if not host:
        raise ValueError(f"expected host:port, got '{text}' (the host is missing)")
    port = _port(port)
    try:
        return str(ipaddress.IPv4Address(host)), port, True
    except ValueError:
        pass
    if re.fullmatch(r"[0-9.]+", host):
        raise ValueError(f"'{host}' is not an IPv4 address")
    name = host[:-1] if host.endswith(".") else host
    if (not name.isascii() or len(name) > 253
            or not all(_LABEL_RE.fullmatch(label) for label in name.split("."))):
        raise ValueError(f"'{host}' is not a valid host name")
    return host, port, False


def _port(text):
    if not text.isdigit():
        raise ValueError(f"'{text}' is not a port number")
    if not 1 <= int(text) <= 65535:
        raise ValueError(f"port must be between 1 and 65535, got {int(text)}")
    return int(text)


def _fmt_host_port(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _health(ctx, node, path):
    """health: on, off or a mapping -> Health, None (off), or False (reported)."""
    kind = ctx.kind(node)
    if kind == "bool":
        return Health() if ctx.boolean(node, path) else None
    if kind == "str" and node.value in ("on", "off"):
        return Health() if node.value == "on" else None
    if kind != "map":
        ctx.error(node, path, "expected on, off or a mapping such as "
                  f"{{path: /healthz}}; got {ctx.describe(node)}")
        return False
    keys = ctx.mapping(node, path, HEALTH_KEYS)
    if keys is None:
        return False
    fields = Fields()
    put, values = fields.put, fields.values

    if "path" in keys:
        put("path", _path_text(ctx, keys["path"][1], _sub(path, "path")))
    for name in ("interval", "timeout"):
        if name in keys:
            put(name, ctx.duration(keys[name][1], _sub(path, name), positive=True))
    if "expect_status" in keys:
        put("expect_status", _expect_status(ctx, keys["expect_status"][1],
                                            _sub(path, "expect_status")))
    for name in ("rise", "fall"):
        if name in keys:
            put(name, ctx.integer(keys[name][1], _sub(path, name), 1, 1000))
    if "host" in keys:
        put("host", _host_header(ctx, keys["host"][1], _sub(path, "host")))
    return Health(**values) if fields.ok else False


def _expect_status(ctx, node, path):
    """200, "200-399", "2xx", or a list of them -> [(lo, hi)]."""
    if ctx.kind(node) == "seq":
        if not node.value:
            ctx.error(node, path, "expected at least one status")
            return None
        items = [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
    else:
        items = [(node, path)]
    out = []
    ok = True
    for item, ipath in items:
        kind = ctx.kind(item)
        text = item.value.strip() if kind in ("int", "str") else None
        span = None
        if text is not None:
            if text.isdigit():
                span = (int(text), int(text))
            elif m := _STATUS_RANGE_RE.fullmatch(text):
                span = (int(m.group(1)), int(m.group(2)))
            elif m := _STATUS_CLASS_RE.fullmatch(text):
                span = (int(m.group(1)) * 100, int(m.group(1)) * 100 + 99)
        if span is None:
            ctx.error(item, ipath, f"{_STATUS_HINT}; got {ctx.describe(item)}")
            ok = False
        elif not (100 <= span[0] <= 599 and 100 <= span[1] <= 599):
            ctx.error(item, ipath, f"a status must be between 100 and 599, got {text}")
            ok = False
        elif span[0] > span[1]:
            ctx.error(item, ipath, f"the range {text} is empty (write the lower "
                      "status first)")
            ok = False
        else:
            out.append(span)
    return out if ok else None


def compile_trusted_proxies(ctx, node, path="trusted_proxies") -> list:
    """A list of CIDR networks or addresses -> normalised network strings."""
    kind = ctx.kind(node)
    if kind == "str":
        items = [(node, path)]
    elif kind == "seq":
        items = [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
    else:
        ctx.error(node, path, "expected a list of addresses or networks such as "
                  f"127.0.0.1 or 10.0.0.0/8; got {ctx.describe(node)}")
        return []
    out = []
    seen = {}
    for item, ipath in items:
        text = ctx.string(item, ipath)
        if text is None:
            continue
        try:
            net = ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            ctx.error(item, ipath, f"'{text}' is not an IP address or a network "
                      "(such as 10.0.0.0/8 or ::1); names are not accepted")
            continue
        norm = str(net)
        if norm in seen:
            ctx.error(item, ipath, f"{norm} is already listed (line {seen[norm]})")
            continue
        seen[norm] = item.start_mark.line + 1
        out.append(norm)
    return out


def check_references(ctx, upstreams: dict) -> dict:
    """Check every `upstream:` a route named against the groups, and return
    the groups with the implicit `url:` ones added after them."""
    known = sorted(ctx.upstream_names)
    for name, node, path in ctx.upstream_refs:
        if name in ctx.upstream_names:
            continue           # defined (a bad definition is reported there)
        if not known:
            ctx.error(node, path, f"unknown upstream '{name}': no upstreams are "
                      "defined (add it under the top-level key upstreams)")
            continue
        close = difflib.get_close_matches(name, known, n=1)
        if not close:
            close = difflib.get_close_matches(name.lower(), known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else \
            f" (upstreams: {', '.join(known)})"
        ctx.error(node, path, f"unknown upstream '{name}'{hint}")
    merged = dict(upstreams)
    for name, group in ctx.implicit_upstreams.items():
        merged.setdefault(name, group)
    return merged
