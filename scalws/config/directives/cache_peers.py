"""`cache_zones.NAME.peers`: several nodes share one zone's keys.

    cache_zones:
      main:
        max_size: 256m
        peers:
          servers: ["scalws-peers.web.svc.cluster.local:8080"]   # or a list of addresses
          secret_file: /etc/scalws/peers/secret                  # or secret: "..."
          self: "10.1.2.3:8080"          # optional: which server is this node

A consistent hash of a request's cache key over the servers names the node
that owns it. The node a client reached forwards a GET or HEAD whose key
another live node owns to that node (plain HTTP, marked `X-Scalws-Peer:
SECRET SCHEME`), which serves it from its store or its origin as for any
client and never forwards a marked request again (one hop); the first node
stores nothing of it. When the owner is down (passive health: a failed
connection marks it down for the server's fail_timeout), the next node on
the ring owns the key, perhaps this one. A PURGE this node accepts goes to
every other node, marked (the secret authorises it there).

The servers become the implicit upstream group "peers:NAME" (balance hash,
host names re-resolved like any upstream's: a headless Service's name
follows its pods). A server is this node when its address is one of this
host's (machine.local_addresses) and its port one of this file's plain
listeners, or when it is `self`.
"""
from __future__ import annotations

import os

from ..machine import local_addresses
from ..model import CachePeers, Upstream
from . import upstreams

KEYS = ("servers", "secret", "secret_file", "self", "connect_timeout", "read_timeout")
PREFIX = "peers:"
SECRET_MIN = 16


def group_name(zone: str) -> str:
    return PREFIX + zone


def compile(ctx, node, path, zone):
    """`peers:` of zone `zone` -> CachePeers (its group added to
    ctx.implicit_upstreams), or None after reporting."""
    if ctx.kind(node) != "map":
        ctx.error(node, path, "expected a mapping with servers and secret (or secret_file), "
                  f"got {ctx.describe(node)}")
        return None
    keys = ctx.mapping(node, path, KEYS)
    if keys is None:
        return None
    ok = ctx.require(keys, node, path, "servers")
    # A headless Service lists ready pods only: the first pod starts before
    # its name resolves, so a name without an address waits (a warning).
    ctx.pending_names_ok = True
    try:
        servers = upstreams._servers(ctx, keys["servers"][1], f"{path}.servers") if ok else None
    finally:
        ctx.pending_names_ok = False
    secret = _secret(ctx, keys, node, path)
    peers = CachePeers(upstream=group_name(zone), secret=secret or "", mark=ctx.mark(node))
    for key in ("connect_timeout", "read_timeout"):
        if key in keys:
            value = ctx.duration(keys[key][1], f"{path}.{key}", positive=True)
            if value is None:
                return None
            setattr(peers, key, value)
    group = Upstream(name=peers.upstream, servers=servers or [], balance="hash",
                     mark=ctx.mark(node))
    if "self" in keys:
        text = ctx.string(keys["self"][1], f"{path}.self")
        mine = upstreams._address(ctx, keys["self"][1], f"{path}.self", text) if text else None
        if not mine:
            return None
        group.self_hosts = sorted({s.host for s in mine})
        group.self_ports = [mine[0].port]
    if servers is None or secret is None:
        return None
    if any(s.kind != "tcp" for s in servers) or \
            any(upstreams._is_https(ctx, item) for item in keys["servers"][1].value):
        ctx.error(keys["servers"][1], f"{path}.servers", "peers are HOST:PORT addresses "
                  "of their plain HTTP listeners")
        return None
    ctx.implicit_upstreams[peers.upstream] = group
    return peers


def _secret(ctx, keys, node, path):
    if ("secret" in keys) == ("secret_file" in keys):
        ctx.error(node, path, "expected one of secret or secret_file (the peers' shared "
                  "secret)")
        return None
    if "secret" in keys:
        text = ctx.string(keys["secret"][1], f"{path}.secret")
        where, wpath = keys["secret"][1], f"{path}.secret"
    else:
        where, wpath = keys["secret_file"][1], f"{path}.secret_file"
        fname = ctx.path(where, wpath)
        if fname is None:
            return None
        try:
            with open(fname, encoding="utf-8") as f:
                text = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            ctx.error(where, wpath, f"cannot read {fname}: {getattr(exc, 'strerror', exc)}")
            return None
        if os.stat(fname).st_mode & 0o004:
            ctx.warning(where, wpath, f"{fname} is readable by every user")
    if text is None:
        return None
    if len(text) < SECRET_MIN or any(ord(c) <= 0x20 or ord(c) >= 0x7F for c in text):
        ctx.error(where, wpath, f"expected at least {SECRET_MIN} printable characters "
                  "without spaces")
        return None
    return text


def finish(ctx, cfg) -> None:
    """Once the sites are known: which server of each peers group is this
    node (unless `self` said), and a warning when none is."""
    ports = sorted({l.port for s in cfg.sites for l in s.listen
                    if l.kind == "tcp" and not l.tls})
    hosts = None
    for zone in cfg.cache_zones.values():
        if zone.peers is None or zone.peers.upstream not in cfg.upstreams:
            continue
        group = cfg.upstreams[zone.peers.upstream]
        if not group.self_ports:
            hosts = local_addresses() if hosts is None else hosts
            group.self_hosts, group.self_ports = hosts, ports
        if any(not s.host for s in group.servers):
            continue           # a name not resolved yet: said already
        if not any(s.host in group.self_hosts and s.port in group.self_ports
                   for s in group.servers):
            _, line, col = zone.peers.mark
            ctx.warning((line, col), f"cache_zones.{zone.name}.peers",
                        "none of the servers is this node (its address and a plain listener's "
                        "port): it forwards every key and stores none; give self if it is one")
