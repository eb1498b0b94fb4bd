"""The shared counters block: made by the master, written by the workers,
read by the status process (statusd.py) and by anyone who maps the file
(the controller). Pure Python (mmap + struct): no compiled import, so the
master may use it before it forks and a reader needs nothing of ScalWS's
build. Issue 20; docs/adr/0011-counters.md.

Layout (little-endian; every counter a uint64 at an 8-byte aligned offset):

  header, HEADER bytes rounded up to a page:
    0   magic   8s  b"SCALWSST"
    8   version u32 (VERSION; a reader refuses another)
    12  header_size u32  (where slot 0 starts; a multiple of 4096)
    16  n_workers u32
    20  slot_size u32    (a multiple of 4096: no two workers share a line)
    24  n_routes u32
    28  n_groups u32
    32  n_buckets u32    (duration buckets, +Inf included)
    36  layout_len u32   (bytes of the JSON below)
    40  created u64      (unix seconds)
    48  layout JSON: {"routes": [name, ...], "route_upstream": [group or null],
        "upstreams": [name, ...], "le_seconds": [0.001, ..., 10.0],
        "servers": [n per group], and with cache zones "pid": the master's,
        "cache_fds": {zone: memfd in that process} (cacheshared.counters_of)}
  slot i (worker i) at header_size + i * slot_size, as
  csrc/include/scalws/stats.h's structs:
    head: HEAD_FIELDS (u64 each), then the request-duration histogram
    routes: one histogram per route, in config order (sites, then routes)
    groups: GROUP_FIELDS per upstream group, in config.upstreams order
  a histogram: n_buckets non-cumulative counts, sum_ms, count.

Each worker writes only its own slot, with plain aligned 64-bit stores;
readers may read while it writes (a value may be a few increments old,
never torn). A worker that replaces a dead one continues its slot, so
totals never go back while the master lives. A reload (new routes) makes
a new block: with a file, written beside it and renamed over it, so a
reader that opens the path again sees the new one.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import time

MAGIC = b"SCALWSST"
VERSION = 2
HEADER = struct.Struct("<8sIIIIIIIIQ")
PAGE = 4096
LE_SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
N_BUCKETS = len(LE_SECONDS) + 1
# Cache peers' counters (stats.h): sent to the owner, kept here as the
# owner, of either those whose first owner was down, received, of which
# hits; PURGEs sent to peers.
PEER_FIELDS = ("peer_forwarded", "peer_local", "peer_owner_down", "peer_received",
               "peer_hits", "peer_purges")
HEAD_FIELDS = (["pid", "busy_ns", "idle_ns", "conns_accepted", "conns_active", "conns_idle",
                "conns_tls_accepted", "conns_tls_active", "requests"]
               + [f"status_{c}xx" for c in range(1, 6)]
               + ["bytes_in", "bytes_out"]
               # reserved for the cache (issue 17): zero until it exists
               + ["cache_hits", "cache_misses", "cache_stale", "cache_bypass",
                  "cache_stores", "cache_evictions", "cache_bytes", "cache_entries"]
               + ["h2_calm"]  # HTTP/2 connections ended by a DoS budget (ADR 0016)
               + list(PEER_FIELDS)  # cache peers (csrc/handlers/dispatch.c)
               + ["h3_active"])  # QUIC connections open (csrc/http/h3/), in conns_active too
HIST_WORDS = N_BUCKETS + 2
HEAD_BYTES = 8 * (len(HEAD_FIELDS) + HIST_WORDS)
GROUP_FIELDS = ["requests", "errors", "servers_up", "servers_down",
                # gauges: connections open to the group's servers, busy or not
                "conns_busy", "conns_idle",
                # FastCGI's wait in the worker (ADR 0038): the connections its
                # servers answer at once as learned (a gauge), requests waiting
                # now (a gauge), that waited, their wait, ended by read_timeout,
                # written behind another on a kept connection
                "capacity", "queued", "queue_waits", "queue_wait_ms", "queue_timeouts",
                "pipelined"]
# Summed over the workers (the gauges too: a worker's share of the group's
# connections and waits); servers_* are each worker's view (_read).
_GROUP_SUMMED = [f for f in GROUP_FIELDS if not f.startswith("servers_")]
CLASSES = ["1xx", "2xx", "3xx", "4xx", "5xx"]


def _round(n):
    return (n + PAGE - 1) // PAGE * PAGE


def slot_size(n_routes, n_groups):
    """As sws_stats_slot_size() in stats.h."""
    return _round(HEAD_BYTES + n_routes * 8 * HIST_WORDS + n_groups * 8 * len(GROUP_FIELDS))


def route_names(config):
    """A name per route, in config order: the site's first server name (or
    its first listen address) and the pattern, made unique."""
    names, seen = [], set()
    for site in config.sites:
        host = next((n for n in site.server_names), None) or \
            (site.listen[0].text if site.listen else "_")
        for route in site.routes:
            prefix = {"exact": "=", "prefix_noregex": "^~", "regex": "~",
                      "regex_icase": "~*"}.get(route.match, "")
            name = f"{host}{' ' + prefix + ' ' if prefix else ''}{route.pattern}"
            base, i = name, 2
            while name in seen:
                name, i = f"{base}#{i}", i + 1
            seen.add(name)
            names.append(name)
    return names


def layout_of(config, cache_fds=None):
    """cache_fds: name -> the memfd of each cache zone in this process (the
    master), so that a process that does not share the zones' mappings
    (scalws-controller's status process) can read their counters."""
    routes = [r for site in config.sites for r in site.routes]
    extra = {"pid": os.getpid(), "cache_fds": cache_fds} if cache_fds else {}
    return {**extra, "routes": route_names(config),
            "route_upstream": [getattr(r.handler, "upstream", None)
                               if r.kind in ("proxy", "app", "fastcgi") else None
                               for r in routes],
            "upstreams": list(config.upstreams),
            "servers": [len(u.servers) for u in config.upstreams.values()],
            "le_seconds": LE_SECONDS}


class Block:
    """The master's block for `n_workers` workers of `config`: an anonymous
    shared mapping, or a file-backed one at `path` (made at a temporary
    name and renamed over `path`, so readers never see half a header)."""

    def __init__(self, config, n_workers, path=None, cache_fds=None):
        self.layout = layout_of(config, cache_fds)
        blob = json.dumps(self.layout).encode()
        self.n_routes = len(self.layout["routes"])
        self.n_groups = len(self.layout["upstreams"])
        self.header_size = _round(HEADER.size + len(blob))
        self.slot_size = slot_size(self.n_routes, self.n_groups)
        self.n_workers = n_workers
        size = self.header_size + n_workers * self.slot_size
        self.path = path
        if path:
            tmp = f"{path}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.ftruncate(fd, size)
                self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED)
            finally:
                os.close(fd)
        else:
            self.mm = mmap.mmap(-1, size)   # MAP_SHARED | MAP_ANONYMOUS
        HEADER.pack_into(self.mm, 0, MAGIC, VERSION, self.header_size, n_workers,
                         self.slot_size, self.n_routes, self.n_groups, N_BUCKETS,
                         len(blob), int(time.time()))
        self.mm[HEADER.size:HEADER.size + len(blob)] = blob
        if path:
            os.rename(tmp, path)

    def slot(self, index):
        """Worker `index`'s slot, a writable memoryview for the engine."""
        off = self.header_size + index * self.slot_size
        return memoryview(self.mm)[off:off + self.slot_size]

    def remove(self):
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass


# ---- reading --------------------------------------------------------------------


def _hist(words, le):
    """A histogram as read() gives it: cumulative buckets, +Inf last."""
    cum, buckets = 0, []
    for i, bound in enumerate(le + [float("inf")]):
        cum += words[i]
        buckets.append((bound, cum))
    return {"buckets": buckets, "sum_seconds": words[N_BUCKETS] / 1000.0,
            "count": words[N_BUCKETS + 1]}


def _hist_add(a, b):
    if a is None:
        return {"buckets": list(b["buckets"]), "sum_seconds": b["sum_seconds"],
                "count": b["count"]}
    return {"buckets": [(le, x + y) for (le, x), (_, y) in zip(a["buckets"], b["buckets"])],
            "sum_seconds": a["sum_seconds"] + b["sum_seconds"], "count": a["count"] + b["count"]}


def _empty_hist(le):
    return _hist([0] * HIST_WORDS, le)


def read(source, zones=None, cache=True) -> dict:
    """The block at `source` (a path, or a mapping/buffer) summed over its
    workers, with each worker's own numbers in "workers"; with `zones`
    (name -> the cache zone's mapping, control/cacheshared.py) each zone's
    counters in "cache"; without, the zones the block's layout names
    ("cache_fds" of the master "pid": scalws-controller's status process
    reading an instance's file). cache=False: no "cache" at all (the
    autoscaler's samples)."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:  # a few pages: one read is a snapshot enough
            return read(f.read(), zones, cache)
    with memoryview(source) as buf:
        out, layout = _read(buf)
    if zones:
        from scalws.control.cacheshared import counters
        out["cache"] = {name: counters(mm) for name, mm in zones.items()}
    elif cache and layout.get("cache_fds"):  # another process's block: its master's memfds
        from scalws.control.cacheshared import counters_of
        out["cache"] = counters_of(layout["pid"], layout["cache_fds"])
    return out


def _read(buf):
    magic, version, header_size, n_workers, slot_sz, n_routes, n_groups, n_buckets, \
        layout_len, created = HEADER.unpack_from(buf, 0)
    if magic != MAGIC or version != VERSION or n_buckets != N_BUCKETS:
        raise ValueError(f"not a ScalWS counters block of version {VERSION} "
                         f"(magic {magic!r}, version {version})")
    layout = json.loads(bytes(buf[HEADER.size:HEADER.size + layout_len]))
    le = layout["le_seconds"]
    nh = len(HEAD_FIELDS)
    out = {"created": created, "workers": [], "busy_ns": 0, "idle_ns": 0, "requests": 0,
           "connections_active": 0, "connections_idle": 0, "connections_accepted": 0,
           "connections_tls_active": 0, "connections_tls_accepted": 0,
           "connections_h3_active": 0, "requests_by_class": {c: 0 for c in CLASSES}, "bytes_in": 0, "bytes_out": 0,
           "h2_calm": 0, **{f: 0 for f in PEER_FIELDS},
           "cache": {}, "request_duration": None, "routes": {}, "upstreams": {}}
    route_hists = [None] * n_routes
    groups = [dict.fromkeys(_GROUP_SUMMED, 0) for _ in range(n_groups)]
    downs = [0] * n_groups
    for w in range(n_workers):
        off = header_size + w * slot_sz
        words = struct.unpack_from(f"<{slot_sz // 8}Q", buf, off)
        head = dict(zip(HEAD_FIELDS, words[:nh]))
        dur = _hist(words[nh:nh + HIST_WORDS], le)
        out["workers"].append({
            "worker": w, "pid": head["pid"], "busy_ns": head["busy_ns"],
            "idle_ns": head["idle_ns"], "requests": head["requests"],
            "connections_active": head["conns_active"], "connections_idle": head["conns_idle"]})
        for key, field in (("busy_ns", "busy_ns"), ("idle_ns", "idle_ns"),
                           ("requests", "requests"), ("connections_active", "conns_active"),
                           ("connections_idle", "conns_idle"),
                           ("connections_accepted", "conns_accepted"),
                           ("connections_tls_active", "conns_tls_active"),
                           ("connections_tls_accepted", "conns_tls_accepted"),
                           ("connections_h3_active", "h3_active"),
                           ("bytes_in", "bytes_in"), ("bytes_out", "bytes_out"),
                           ("h2_calm", "h2_calm")) + tuple((f, f) for f in PEER_FIELDS):
            out[key] += head[field]
        for c in CLASSES:
            out["requests_by_class"][c] += head[f"status_{c}"]
        out["request_duration"] = _hist_add(out["request_duration"], dur)
        base = nh + HIST_WORDS
        for r in range(n_routes):
            h = _hist(words[base + r * HIST_WORDS:base + (r + 1) * HIST_WORDS], le)
            route_hists[r] = _hist_add(route_hists[r], h)
        base += n_routes * HIST_WORDS
        ng = len(GROUP_FIELDS)
        for g in range(n_groups):
            gw = dict(zip(GROUP_FIELDS, words[base + g * ng:base + (g + 1) * ng]))
            for f in _GROUP_SUMMED:
                groups[g][f] += gw[f]
            if head["pid"]:
                downs[g] = max(downs[g], gw["servers_down"])  # the worst view of any worker
    if out["request_duration"] is None:
        out["request_duration"] = _empty_hist(le)
    for r, name in enumerate(layout["routes"]):
        h = route_hists[r] or _empty_hist(le)
        out["routes"][name] = {"requests": h["count"], "duration": h,
                               "upstream": layout["route_upstream"][r]}
    for g, name in enumerate(layout["upstreams"]):
        # Duration of a group: of the client requests its routes answered.
        dur = None
        for r, up in enumerate(layout["route_upstream"]):
            if up == name:
                dur = _hist_add(dur, out["routes"][layout["routes"][r]]["duration"])
        n = layout["servers"][g]
        out["upstreams"][name] = {**groups[g],
                                  "servers_up": n - downs[g], "servers_down": downs[g],
                                  "duration": dur or _empty_hist(le)}
    return out, layout


# ---- rendering ------------------------------------------------------------------


def _esc(v):
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(d):
    if not d:
        return ""
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in d.items()) + "}"


def _num(v):
    if v == float("inf"):
        return "+Inf"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _sum_dicts(stats_dicts):
    """Sums several read() results (several instances) into one."""
    if len(stats_dicts) == 1:
        return stats_dicts[0]
    out = {"workers": [], "requests_by_class": {c: 0 for c in CLASSES}, "routes": {},
           "upstreams": {}, "request_duration": None, "cache": {}}
    for key in ("busy_ns", "idle_ns", "requests", "connections_active", "connections_idle",
                "connections_accepted", "connections_tls_active",
                "connections_tls_accepted", "connections_h3_active", "bytes_in", "bytes_out",
                "h2_calm") + PEER_FIELDS:
        out[key] = sum(s.get(key, 0) for s in stats_dicts)
    for s in stats_dicts:
        out["workers"] += s["workers"]
        for zone, c in s.get("cache", {}).items():
            o = out["cache"].setdefault(zone, {})
            for k, n in c.items():
                o[k] = o.get(k, 0) + n
        for c, n in s["requests_by_class"].items():
            out["requests_by_class"][c] = out["requests_by_class"].get(c, 0) + n
        out["request_duration"] = _hist_add(out["request_duration"], s["request_duration"])
        for name, r in s["routes"].items():
            o = out["routes"].setdefault(name, {"requests": 0, "duration": None})
            o["requests"] += r["requests"]
            o["duration"] = _hist_add(o["duration"], r["duration"])
        for name, u in s["upstreams"].items():
            o = out["upstreams"].setdefault(name, {**dict.fromkeys(GROUP_FIELDS, 0),
                                                   "duration": None})
            for k in GROUP_FIELDS:
                o[k] += u.get(k, 0)
            o["duration"] = _hist_add(o["duration"], u["duration"])
    return out


def render_prometheus(stats_dicts, instance_labels=None) -> str:
    """The Prometheus text exposition format 0.0.4 of read() results, one
    per instance: with `instance_labels` (a dict per instance) each
    instance's series carry its labels; without, they are summed."""
    if isinstance(stats_dicts, dict):
        stats_dicts = [stats_dicts]
    if instance_labels is None:
        groups = [({}, _sum_dicts(stats_dicts))]
    else:
        groups = list(zip(instance_labels, stats_dicts))
    lines = []

    def family(name, mtype, help_, samples):
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {mtype}")
        for inst, s in groups:
            for suffix, labels, value in samples(s):
                lines.append(f"{name}{suffix}{_labels({**inst, **labels})} {_num(value)}")

    def hist(h, labels):
        for le, n in h["buckets"]:
            yield "_bucket", {**labels, "le": _num(le) if le != float("inf") else "+Inf"}, n
        yield "_sum", labels, h["sum_seconds"]
        yield "_count", labels, h["count"]

    family("scalws_requests_total", "counter", "Requests answered, by status class.",
           lambda s: (("", {"status_class": c}, n) for c, n in s["requests_by_class"].items()))
    family("scalws_request_duration_seconds", "histogram",
           "Time from a request head's first byte to its access-log line (1-4 ms clock).",
           lambda s: hist(s["request_duration"], {}))
    family("scalws_route_request_duration_seconds", "histogram",
           "Request duration by route (config order names).",
           lambda s: (x for name, r in s["routes"].items()
                      for x in hist(r["duration"], {"route": name})))
    family("scalws_connections", "gauge", "Open client connections.",
           lambda s: [("", {"state": "active"}, s["connections_active"]),
                      ("", {"state": "idle"}, s["connections_idle"])])
    family("scalws_connections_by_protocol", "gauge", "Open client connections by protocol.",
           lambda s: [("", {"protocol": "http1"},
                       s["connections_active"] - s.get("connections_tls_active", 0)
                       - s.get("connections_h3_active", 0)),
                      ("", {"protocol": "http1_tls"}, s.get("connections_tls_active", 0)),
                      ("", {"protocol": "h3"}, s.get("connections_h3_active", 0))])
    family("scalws_connections_accepted_total", "counter", "Client connections accepted.",
           lambda s: [("", {}, s.get("connections_accepted", 0))])
    family("scalws_received_bytes_total", "counter", "Bytes read from clients (after TLS).",
           lambda s: [("", {}, s["bytes_in"])])
    family("scalws_sent_bytes_total", "counter", "Bytes written to clients (before TLS).",
           lambda s: [("", {}, s["bytes_out"])])
    family("scalws_http2_calm_total", "counter",
           "HTTP/2 connections ended with GOAWAY ENHANCE_YOUR_CALM: a DoS budget ran out "
           "(rapid reset, a frame flood, a CONTINUATION flood).",
           lambda s: [("", {}, s.get("h2_calm", 0))])
    family("scalws_cache_peer_requests_total", "counter",
           "Cache peers: requests forwarded to their key's owner or served here as "
           "its owner (local), of either those whose first owner was down and the next "
           "node on the ring stood in (owner_down), received from a peer and answered "
           "from the store (received_hit) or not (received_miss); PURGEs sent to the "
           "peers (purges_sent).",
           lambda s: [("", {"result": "forwarded"}, s.get("peer_forwarded", 0)),
                      ("", {"result": "local"}, s.get("peer_local", 0)),
                      ("", {"result": "owner_down"}, s.get("peer_owner_down", 0)),
                      ("", {"result": "received_hit"}, s.get("peer_hits", 0)),
                      ("", {"result": "received_miss"},
                       s.get("peer_received", 0) - s.get("peer_hits", 0)),
                      ("", {"result": "purges_sent"}, s.get("peer_purges", 0))])
    family("scalws_loop_busy_seconds_total", "counter",
           "Worker loop time spent handling events.",
           lambda s: (("", {"worker": str(w["worker"])}, w["busy_ns"] / 1e9)
                      for w in s["workers"]))
    family("scalws_loop_idle_seconds_total", "counter",
           "Worker loop time spent waiting for events.",
           lambda s: (("", {"worker": str(w["worker"])}, w["idle_ns"] / 1e9)
                      for w in s["workers"]))
    def per_group(key, per=1):
        """One sample per upstream group: its `key`, divided by `per` (ms to s)."""
        return lambda s: (("", {"upstream": n}, u.get(key, 0) / per if per != 1 else
                           u.get(key, 0)) for n, u in s["upstreams"].items())

    def per_group_state(**keys):
        """Per upstream group, a sample per state=key."""
        return lambda s: (("", {"upstream": n, "state": st}, u.get(k, 0))
                          for n, u in s["upstreams"].items() for st, k in keys.items())

    family("scalws_upstream_requests_total", "counter",
           "Requests sent to an upstream group's servers (retries included).",
           per_group("requests"))
    family("scalws_upstream_errors_total", "counter",
           "Failed attempts on an upstream group (connect, reset, timeout, bad answer).",
           per_group("errors"))
    family("scalws_upstream_servers", "gauge", "Servers of an upstream group up and down.",
           per_group_state(up="servers_up", down="servers_down"))
    family("scalws_upstream_connections", "gauge",
           "Connections open to an upstream group's servers: busy with a request, or "
           "idle (kept in the pool, or a health check's).",
           per_group_state(busy="conns_busy", idle="conns_idle"))
    family("scalws_upstream_capacity", "gauge",
           "FastCGI: connections a group's servers answer at once, as the workers learned "
           "them (their shares summed; 0: none learned, connections open as needed).",
           per_group("capacity"))
    family("scalws_upstream_queue", "gauge",
           "FastCGI: requests waiting in the workers for a connection to a group's servers.",
           per_group("queued"))
    family("scalws_upstream_queued_total", "counter",
           "FastCGI: requests that waited in a worker for a connection.",
           per_group("queue_waits"))
    family("scalws_upstream_queue_wait_seconds_total", "counter",
           "FastCGI: the time requests waited in the workers for a connection.",
           per_group("queue_wait_ms", per=1000))
    family("scalws_upstream_queue_timeouts_total", "counter",
           "FastCGI: waits ended by the route's read_timeout (answered 504).",
           per_group("queue_timeouts"))
    family("scalws_upstream_pipelined_total", "counter",
           "FastCGI: requests written behind another on a kept connection.",
           per_group("pipelined"))
    family("scalws_upstream_request_duration_seconds", "histogram",
           "Duration of the client requests answered through an upstream group.",
           lambda s: (x for n, u in s["upstreams"].items()
                      for x in hist(u["duration"], {"upstream": n})))
    events = ("hits", "misses", "expired", "stale", "revalidated", "bypassed", "purged",
              "evictions", "stored", "store_failed", "lock_waits", "updating")
    family("scalws_cache_events_total", "counter",
           "Response cache events by zone: hits, misses, expired (revalidated or refetched), "
           "stale (served stale), revalidated (304 refreshed), bypassed, purged (entries), "
           "evictions, stored, store_failed, lock_waits (collapsed misses), updating.",
           lambda s: (("", {"zone": z, "event": ev}, c.get(ev, 0))
                      for z, c in s.get("cache", {}).items() for ev in events if c))
    family("scalws_cache_entries", "gauge", "Entries stored in a cache zone.",
           lambda s: (("", {"zone": z}, c.get("entries", 0))
                      for z, c in s.get("cache", {}).items() if c))
    family("scalws_cache_bytes", "gauge",
           "A cache zone's bytes: stored (keys, heads, bodies), used (blocks with "
           "their entry headers), size (the zone's heap).",
           lambda s: (x for z, c in s.get("cache", {}).items() if c
                      for x in (("", {"zone": z, "kind": "stored"}, c.get("bytes_stored", 0)),
                                ("", {"zone": z, "kind": "used"}, c.get("mem_used", 0)),
                                ("", {"zone": z, "kind": "size"}, c.get("mem_size", 0)))))
    return "\n".join(lines) + "\n"


def render_json(stats_dicts, instance_labels=None) -> str:
    """/status: the sum over instances (and each worker's busy/idle), or
    one entry per instance with `instance_labels`."""
    if isinstance(stats_dicts, dict):
        stats_dicts = [stats_dicts]

    def clean(v):  # JSON has no infinity: the last bucket's bound is "+Inf"
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return "+Inf" if v == float("inf") else v

    if instance_labels is None:
        return json.dumps(clean(_sum_dicts(stats_dicts)))
    return json.dumps([{"labels": lab, "stats": clean(s)}
                       for lab, s in zip(instance_labels, stats_dicts)])
