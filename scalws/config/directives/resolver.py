"""`resolver:`: how the host names of upstream servers are resolved.

    resolver:
      nameservers: ["10.96.0.10", "127.0.0.1:5353"]   # default: /etc/resolv.conf's
      min_interval: 1s        # a name is asked again after its TTL,
      max_interval: 30s       #   bounded by these two
      timeout: 2s             # per try of a nameserver
      attempts: 2             # rounds over the nameservers
      ipv6: on                # ask AAAA beside A
    resolver: off             # names resolved once at load, by getaddrinfo()

A host name in an upstream's `servers` (or a proxy `url:`) is resolved
when the file is loaded (a name that does not resolve refuses the file),
and then again by the master while it runs (control/resolver.py): the
workers' groups follow the answers without a reload. The search list and
ndots are /etc/resolv.conf's; /etc/hosts is read first (scalws/dns.py).
"""
from __future__ import annotations

import ipaddress

from ... import dns
from ..model import Resolver

KEYS = ("nameservers", "min_interval", "max_interval", "timeout", "attempts", "ipv6")


def default() -> Resolver:
    """On, with /etc/resolv.conf's nameservers, search list and ndots (the
    file is read at each load, so a reload sees a changed one)."""
    conf = dns.read_resolv_conf()
    return Resolver(nameservers=conf["nameservers"], search=conf["search"],
                    ndots=conf["ndots"], attempts=conf["attempts"])


def compile(ctx, node, path) -> Resolver:
    """`resolver:` -> Resolver; problems reported through ctx (the default
    is returned with them, the file being refused anyway)."""
    r = default()
    r.mark = ctx.mark(node)
    kind = ctx.kind(node)
    if kind == "bool":
        r.enabled = bool(ctx.boolean(node, path))
        return r
    if kind != "map":
        ctx.error(node, path, f"expected off, on or a mapping with {', '.join(KEYS)}; "
                  f"got {ctx.describe(node)}")
        return r
    keys = ctx.mapping(node, path, KEYS)
    if keys is None:
        return r
    if "nameservers" in keys:
        servers = _nameservers(ctx, keys["nameservers"][1], f"{path}.nameservers")
        if servers:
            r.nameservers = servers
    for key in ("min_interval", "max_interval", "timeout"):
        if key in keys:
            value = ctx.duration(keys[key][1], f"{path}.{key}", lo=0.1, hi=86400.0)
            if value is not None:
                setattr(r, key, value)
    if "attempts" in keys:
        value = ctx.integer(keys["attempts"][1], f"{path}.attempts", 1, 5)
        if value is not None:
            r.attempts = value
    if "ipv6" in keys:
        value = ctx.boolean(keys["ipv6"][1], f"{path}.ipv6")
        if value is not None:
            r.ipv6 = value
    if r.min_interval > r.max_interval:
        where = keys.get("min_interval", keys.get("max_interval"))[1]
        ctx.error(where, f"{path}.min_interval", f"min_interval ({r.min_interval:g}s) is "
                  f"longer than max_interval ({r.max_interval:g}s)")
    return r


def _nameservers(ctx, node, path):
    if ctx.kind(node) != "seq" or not node.value:
        ctx.error(node, path, "expected a list of addresses such as 10.96.0.10 or "
                  f"127.0.0.1:5353, got {ctx.describe(node)}")
        return None
    out = []
    for i, item in enumerate(node.value):
        ipath = f"{path}[{i}]"
        text = ctx.string(item, ipath)
        if text is None:
            continue
        try:
            out.append(_nameserver(text))
        except ValueError as exc:
            ctx.error(item, ipath, str(exc))
    return out if len(out) == len(node.value) else None


def _nameserver(text):
    """'10.0.0.1', '10.0.0.1:53', '::1', '[::1]:53' -> (ip, port)."""
    host, port = text, 53
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"expected [IPV6]:PORT, got '{text}'")
        port = rest[1:] or "53"
    elif text.count(":") == 1:
        host, port = text.split(":")
    try:
        host = ipaddress.ip_address(host).compressed
    except ValueError:
        raise ValueError(f"'{host}' is not an IP address (a nameserver is written by "
                         "address)") from None
    if not str(port).isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"'{port}' is not a port (1..65535)")
    return (host, int(port))
