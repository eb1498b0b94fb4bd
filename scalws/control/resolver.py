"""Live DNS for upstream servers: the master asks again for every host
name its groups were written with, and the workers' groups follow.

The master holds one `Resolver` per configuration generation. Each name is
asked again when its TTL ends (bounded by `resolver.min_interval` and
`max_interval`; a name from /etc/hosts: max_interval), through the stub
resolver of scalws/dns.py, stepped from the master's loop (its sockets are
non-blocking; the loop wakes every 5 ms while a lookup is in flight). When
the sorted set of addresses changes, `apply()` rewrites the groups of the
master's configuration (what a restarted worker forks with) and the master
sends every worker of the generation the name and its addresses on its
control socket (worker.DNS_MESSAGE); the worker applies the same `apply()`
to its copy and hands each changed group to its engine
(`Engine.set_upstream_servers`): new addresses join, removed ones are no
longer picked and their connections drain. A failed lookup (timeout,
SERVFAIL, no such name, no address) keeps the last good set, says so once
in the error log, and is retried sooner (min_interval, doubling up to
max_interval). One master, one query per name: every worker sees the same
set, in the same order (consistent hashing agrees across workers).
"""
from __future__ import annotations

import json
import time

from scalws import dns
from scalws.config import record
from scalws.control.logs import NOTICE, log

IN_FLIGHT_WAKE = 0.005         # the master's loop timeout while a lookup runs


def names(config) -> dict:
    """host name -> the group names that have servers from it."""
    out: dict = {}
    for gname, group in config.upstreams.items():
        for s in group.servers:
            if s.resolve and gname not in out.setdefault(s.resolve, []):
                out[s.resolve].append(gname)
    return out


def apply(config, name: str, addrs: list) -> list:
    """Rewrites, in `config`, the servers that came from `name` to be one per
    address of `addrs` (each a copy of that item's first server, so its
    options stay); returns the names of the groups that changed."""
    changed = []
    for gname, group in config.upstreams.items():
        if not any(s.resolve == name for s in group.servers):
            continue
        out, seen, done = [], set(), set()
        for s in group.servers:
            if s.resolve == name:
                if s.entry in done:
                    continue
                done.add(s.entry)
                items = [record.replace(s, host=a) for a in addrs]
            else:
                items = [s]
            for item in items:
                key = (item.kind, item.host, item.port, item.path)
                if key not in seen:        # two items resolving to one address: the first
                    seen.add(key)
                    out.append(item)
        if [(s.host, s.port, s.entry) for s in out] != \
                [(s.host, s.port, s.entry) for s in group.servers]:
            group.servers = out
            changed.append(gname)
    return changed


def encode(name: str, addrs: list) -> bytes:
    return b"U" + json.dumps({"name": name, "addrs": addrs}).encode()


def decode(msg: bytes):
    """-> (name, addrs); ValueError when it is not a DNS message."""
    data = json.loads(msg[1:])
    name, addrs = data["name"], data["addrs"]
    if not isinstance(name, str) or not isinstance(addrs, list) or not addrs \
            or not all(isinstance(a, str) for a in addrs):
        raise ValueError("bad DNS message")
    return name, addrs


class _Name:
    def __init__(self, name, groups, addrs, due):
        self.name = name
        self.groups = groups
        self.addrs = addrs         # the last good set, sorted
        self.due = due
        self.lookup = None
        self.failing = False
        self.retry = 0.0           # the next delay after a failure


class Resolver:
    """The names of one configuration, asked again as their TTLs end."""

    def __init__(self, config, now=None):
        now = time.monotonic() if now is None else now
        self.conf = config.resolver
        self.settings = dns.Settings.of(self.conf)
        self.names = {}
        if not self.conf.enabled:
            return
        for name, groups in names(config).items():
            addrs = dns.sort_addresses(s.host for g in groups
                                       for s in config.upstreams[g].servers
                                       if s.resolve == name and s.host)
            # The load asked a moment ago; its TTL is not kept: min_interval.
            self.names[name] = _Name(name, groups, addrs, now + self.conf.min_interval)

    def close(self):
        for n in self.names.values():
            if n.lookup is not None:
                n.lookup.close()
                n.lookup = None

    def in_flight(self) -> bool:
        return any(n.lookup is not None for n in self.names.values())

    def next_due(self):
        """Monotonic time of the next thing to do, or None."""
        if not self.names:
            return None
        if self.in_flight():
            return time.monotonic() + IN_FLIGHT_WAKE
        return min(n.due for n in self.names.values())

    def step(self, now=None) -> list:
        """Starts the lookups due, steps those in flight; returns [(name,
        addresses)] for the names whose set changed."""
        now = time.monotonic() if now is None else now
        changes = []
        for n in self.names.values():
            if n.lookup is None and n.due <= now:
                n.lookup = dns.Lookup(n.name, self.settings, now)
            if n.lookup is None:
                continue
            n.lookup.step(now)
            result = n.lookup.result
            if result is None:
                continue
            n.lookup.close()
            n.lookup = None
            if result[0] == "ok":
                if self._good(n, result[1], result[2], now):
                    changes.append((n.name, n.addrs))
            else:
                self._failed(n, result[1], now)
        return changes

    def _good(self, n, addrs, ttl, now) -> bool:
        c = self.conf
        wait = c.max_interval if ttl is None else min(max(float(ttl), c.min_interval),
                                                      c.max_interval)
        n.due = now + wait
        if n.failing:
            log.log(NOTICE, "resolving %s for upstream %s works again", n.name,
                    ", ".join(n.groups))
            n.failing, n.retry = False, 0.0
        if addrs == n.addrs:
            return False
        added = [a for a in addrs if a not in n.addrs]
        gone = [a for a in n.addrs if a not in addrs]
        log.log(NOTICE, "upstream %s: %s now resolves to %s (added: %s; draining: %s)",
                ", ".join(n.groups), n.name, ", ".join(addrs), ", ".join(added) or "none",
                ", ".join(gone) or "none")
        n.addrs = addrs
        return True

    def _failed(self, n, why, now):
        c = self.conf
        n.retry = min(c.max_interval, max(c.min_interval, n.retry * 2))
        n.due = now + n.retry
        if not n.failing:
            log.warning("resolving %s for upstream %s failed: %s; keeping its last good "
                        "addresses (%s), retrying in %gs", n.name, ", ".join(n.groups), why,
                        ", ".join(n.addrs), n.retry)
            n.failing = True
