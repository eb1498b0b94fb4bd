#!/usr/bin/env python3
"""Rows and report of bench/cache_zipf.sh (split from benchlib.py, whose
helpers it uses): response caches under a Zipf key mix.

Subcommands (called by bench/cache_zipf.sh):
  columns                              the CSV header line
  row ...                              one row from wrk's zipf.lua output, /status and the cache files
  report CSV                           cache_zipf.md (medians over the runs)
"""
import argparse
import csv
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (CLK_TCK, SRV_ORDER, aggregate, cell, fmt, header_lines, kv,  # noqa: E402
                      load_steal_pct, ordered, parse_wrk, read_csv)

ZIPF_COLUMNS = ["server", "run", "order", "status", "hit_ratio", "upstream_miss_ratio", "responses",
                "hits", "classes", "upstream_reqs", "stored_since_start", "entries", "evictions",
                "evictions_from", "budget_mib", "mem_held_mib", "overhead_held_b", "overhead_store_b",
                "overhead_from",
                "topk_hit_ratio", "lru_hit_ratio", "rps", "p50_ms", "p99_ms", "cpu_us_per_req",
                "server_cpu_pct", "load_cpu_pct", "peak_rss_mib", "non2xx", "socket_errors",
                "steal_pct", "duration_s", "cache_counters", "reason"]
ZIPF_METRICS = ["hit_ratio", "upstream_miss_ratio", "entries", "evictions", "mem_held_mib", "overhead_held_b",
                "overhead_store_b", "topk_hit_ratio", "lru_hit_ratio", "rps", "p99_ms", "cpu_us_per_req",
                "server_cpu_pct", "load_cpu_pct", "peak_rss_mib", "steal_pct"]
# nginx's keys_zone: "One megabyte zone can store about 8 thousand keys"
# (proxy_cache_path documentation): the shared memory one entry's key node takes
NGINX_KEY_BYTES = (1 << 20) / 8000


def parse_zipf(path):
    """The ZIPF and ZIPFCLASS lines of bench/lib/zipf.lua."""
    text = open(path).read()
    m = re.search(r"^ZIPF (.*)$", text, re.M)
    if not m:
        raise ValueError("no ZIPF line in wrk output (wrk or zipf.lua failed?): " + text[-300:].strip())
    d = {k: int(v) for k, v in kv(m.group(1)).items()}
    classes = {c: int(n) for c, n in re.findall(r"^ZIPFCLASS (\S+) (\d+)$", text, re.M)}
    return d, classes


def flat_cache_numbers(doc):
    """Every number under a key whose name has "cache" in it (at any depth,
    lists left out: per-worker copies would count twice), as
    {"cache.hits": 12, ...}. Tolerant by design: it prints what /status has."""
    out = {}

    def walk(v, path, inside):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, path + [str(k)], inside or "cache" in str(k).lower())
        elif inside and isinstance(v, (int, float)) and not isinstance(v, bool):
            out[".".join(path)] = v
    walk(doc, [], False)
    return out


def pick(nums, names):
    """The value of the shortest key whose last part is one of NAMES (a
    zone total rather than a per-zone copy), or None."""
    hits = sorted((len(k), k) for k in nums if k.rsplit(".", 1)[-1] in names)
    return nums[hits[0][1]] if hits else None


def load_json(path):
    import json
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def cache_dir_files(d):
    """nginx's cache files under D (names of 32 hex digits; temporary files
    have a suffix): (count, apparent bytes, allocated bytes)."""
    n = apparent = alloc = 0
    for root, _, files in os.walk(d):
        for f in files:
            if len(f) != 32 or any(c not in "0123456789abcdef" for c in f):
                continue
            try:
                st = os.stat(os.path.join(root, f))
            except OSError:
                continue
            n += 1
            apparent += st.st_size
            alloc += st.st_blocks * 512
    return n, apparent, alloc


def zipf_probs(keys, s):
    w = [(i + 1) ** -s for i in range(keys)]
    h = sum(w)
    return [x / h for x in w]


def topk_hit_ratio(probs, k):
    """The best a cache of K entries can do under independent Zipf draws:
    holding the K most popular keys."""
    return sum(probs[:max(0, min(k, len(probs)))])


def lru_hit_ratio(probs, k):
    """An LRU cache of K entries under independent draws, by Che's
    approximation: the characteristic time T solves sum(1 - e^(-p T)) = K;
    hit ratio = sum(p (1 - e^(-p T)))."""
    import math
    if k <= 0:
        return 0.0
    if k >= len(probs):
        return 1.0
    lo, hi = 0.0, 1.0
    while sum(1 - math.exp(-p * hi) for p in probs) < k:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        if sum(1 - math.exp(-p * mid) for p in probs) < k:
            lo = mid
        else:
            hi = mid
    t = (lo + hi) / 2
    return sum(p * (1 - math.exp(-p * t)) for p in probs)


def cmd_zipf_columns(a):
    print(",".join(ZIPF_COLUMNS))


def cmd_zipf_row(a):
    w = csv.DictWriter(sys.stdout, fieldnames=ZIPF_COLUMNS, lineterminator="\n", extrasaction="ignore")
    base = {"server": a.server, "run": a.run, "order": a.order}
    if a.status in ("n/a", "failed", "skipped"):
        base.update(status=a.status, reason=a.reason)
        w.writerow({k: fmt(base.get(k, "")) for k in ZIPF_COLUMNS})
        return
    try:
        res = parse_wrk(a.out)
        z, classes = parse_zipf(a.out)
    except (ValueError, OSError, KeyError) as e:
        base.update(status="failed", reason=f"load tool output: {e}".replace("\n", " ")[:300])
        w.writerow({k: fmt(base.get(k, "")) for k in ZIPF_COLUMNS})
        return
    problems = []
    before, after = kv(a.before), kv(a.after)
    cpu_s = (int(after["ticks"]) - int(before["ticks"])) / CLK_TCK
    req, resp = res["requests"], z["responses"]
    hits = classes.get("hit", 0)
    up = stored = ""
    if a.upstream_before and a.upstream_after:
        up = max(0, int(a.upstream_after) - int(a.upstream_before) - 1)  # less the status request itself
    if a.upstream_start and a.upstream_after:
        stored = max(0, int(a.upstream_after) - int(a.upstream_start) - 2)  # less two status requests
    obj = a.obj_size
    # entries, evictions, the store's bytes: ScalWS from its counters,
    # nginx from its cache directory
    budget = a.budget_mib * (1 << 20)
    entries = evictions = ev_from = store = ov_from = held = ""
    counters = ""
    if a.cache_dir:
        n, apparent, alloc = cache_dir_files(a.cache_dir)
        entries = n
        held = a.keys_zone_kib * 1024 + alloc  # its shared memory and the files' tmpfs pages
        if stored != "":
            evictions, ev_from = max(0, stored - n), "stored - entries"
        if n:
            # a key node in keys_zone, plus what the file holds beyond the
            # body (nginx's header, the key, the response head) and the
            # tmpfs's rounding up to whole pages
            store = (alloc - n * obj) / n + NGINX_KEY_BYTES
            ov_from = (f"files: {alloc / n:.0f} B allocated per file ({apparent / n:.0f} B written, "
                       f"body {obj} B) + {NGINX_KEY_BYTES:.0f} B keys_zone node (documented 8000 keys/MiB)")
    elif a.status_after:
        held = budget  # a fixed shared mapping, mapped whole at start
        doc_a, doc_b = load_json(a.status_after), load_json(a.status_before)
        if doc_a is None:
            counters = "none: no /status JSON after the measurement"
        else:
            na, nb = flat_cache_numbers(doc_a), flat_cache_numbers(doc_b or {})
            counters = " ".join(f"{k}={v}" + (f"(+{v - nb[k]})" if k in nb and v != nb[k] else "")
                                for k, v in sorted(na.items())) or "none: /status has no cache numbers"
            entries = pick(na, ("entries", "cache_entries"))
            ev_a = pick(na, ("evictions", "cache_evictions"))
            if ev_a is not None:
                evictions, ev_from = ev_a, "counter, since start"
            elif entries is not None and stored != "":
                evictions, ev_from = max(0, stored - entries), "stored - entries"
            sb = pick(na, ("bytes", "cache_bytes", "bytes_stored", "stored_bytes", "used_bytes"))
            body = pick(na, ("body_bytes", "cache_body_bytes"))
            if entries:
                if body is not None and sb is not None:
                    store, ov_from = (sb - body) / entries, "counters: (bytes - body_bytes) / entries"
                elif sb is not None:
                    store = (sb - entries * obj) / entries
                    ov_from = f"counters: (bytes - entries x {obj} B body) / entries; assumes bytes counts what the store holds"
            if entries is None:
                entries = ""
    ov_held = (held / entries - obj) if held != "" and entries else ""
    if held != "" and budget and held > 1.05 * budget:
        problems.append(f"the cache held {held / (1 << 20):.1f} MiB, over its {a.budget_mib} MiB: "
                        "its hit ratio is not for the same memory")
    topk = lru = ""
    if entries:
        probs = zipf_probs(a.keys, a.zipf_s)
        topk, lru = topk_hit_ratio(probs, int(entries)), lru_hit_ratio(probs, int(entries))
    if req == 0:
        problems.append("no request completed")
    if res["non2xx"] or z["non200"]:
        problems.append(f"{max(res['non2xx'], z['non200'])} answers other than 200")
    if res["socket_errors"]:
        problems.append("socket errors " + " ".join(f"{k}={v}" for k, v in res["errors"].items() if v))
    if resp and classes.get("none", 0) > 0.001 * resp:
        problems.append(f"{classes['none']} answers said nothing of the cache (no Cache-Status / X-Cache)")
    if after.get("cpus") not in (None, "-", a.expect_cpus) and a.expect_cpus:
        problems.append(f"server allowed on CPUs {after.get('cpus')}, expected {a.expect_cpus}")
    load_pct, steal_pct = load_steal_pct(before, after)
    base.update(
        status="invalid" if problems else "ok", reason="; ".join(problems),
        hit_ratio=hits / resp if resp else "", upstream_miss_ratio=(up / req) if up != "" and req else "",
        responses=resp, hits=hits,
        classes=" ".join(f"{c}:{n}" for c, n in sorted(classes.items(), key=lambda x: -x[1])),
        upstream_reqs=up, stored_since_start=stored, entries=entries, evictions=evictions,
        evictions_from=ev_from, budget_mib=a.budget_mib, overhead_held_b=ov_held,
        mem_held_mib=held / (1 << 20) if held != "" else "",
        overhead_store_b=store, overhead_from=ov_from, topk_hit_ratio=topk, lru_hit_ratio=lru,
        rps=req / res["duration_s"] if res["duration_s"] else 0.0, p50_ms=res["p50_ms"], p99_ms=res["p99_ms"],
        cpu_us_per_req=cpu_s * 1e6 / req if req else 0.0,
        server_cpu_pct=100.0 * cpu_s / res["duration_s"] if res["duration_s"] else 0.0,
        load_cpu_pct=load_pct, steal_pct=steal_pct, peak_rss_mib=int(after["hwm_kib"]) / 1024.0,
        non2xx=res["non2xx"], socket_errors=res["socket_errors"], duration_s=res["duration_s"],
        cache_counters=counters)
    row = {k: fmt(base.get(k, "")) for k in ZIPF_COLUMNS}
    for k in ("hit_ratio", "upstream_miss_ratio", "topk_hit_ratio", "lru_hit_ratio"):
        row[k] = fmt(base[k], 4)
    for k in ("overhead_held_b", "overhead_store_b"):
        row[k] = fmt(base[k], 0)
    w.writerow(row)


def cmd_zipf_report(a):
    rows = read_csv(a.csv)
    out_dir = os.path.dirname(os.path.abspath(a.csv))
    agg = aggregate(rows, metrics=ZIPF_METRICS, key=lambda r: (r["server"], "zipf"))
    servers = ordered(sorted({k[0] for k in agg}), SRV_ORDER)
    runs = sorted({r["run"] for r in rows}, key=lambda x: int(x or 0))
    md = ["# Response caches under a Zipf key mix", "",
          f"Medians of {len(runs)} run(s); only `ok` measurements count. Every request asks for one "
          "of the keys, drawn from a Zipf law (the same seeded sequence on every server), from a "
          "cache smaller than the working set. The hit ratio is the share of answers the cache "
          "said were hits (ScalWS: `Cache-Status: scalws; hit`; nginx: `X-Cache: HIT`); the "
          "upstream miss ratio is the share of requests that reached the upstream (its "
          "stub_status), which checks it.", "",
          "```"] + header_lines(a.csv) + ["```", ""]
    cols = [("hit_ratio", "hit ratio", 4), ("upstream_miss_ratio", "upstream miss ratio", 4),
            ("lru_hit_ratio", "LRU would get (Che)", 4), ("topk_hit_ratio", "top-k bound", 4),
            ("entries", "entries held", 0), ("evictions", "evictions", 0),
            ("mem_held_mib", "cache memory held (MiB)", 1),
            ("overhead_held_b", "memory per entry beyond its body (B)", 0),
            ("overhead_store_b", "per entry beyond its body, as stored (B)", 0),
            ("rps", "rps", 0), ("p99_ms", "p99 ms", 2), ("cpu_us_per_req", "CPU µs/req", 2),
            ("server_cpu_pct", "server CPU %", 0), ("load_cpu_pct", "load CPU %", 0),
            ("peak_rss_mib", "peak RSS MiB", 1)]
    md += ["## Medians", "", "| server | " + " | ".join(c[1] for c in cols) + " |",
           "|---|" + "---|" * len(cols)]
    for srv in servers:
        g = agg[(srv, "zipf")]
        md.append(f"| {srv} | " + " | ".join(cell(g, m, nd) for m, _, nd in cols) + " |")
    md += ["", "## Per run", "",
           "| server | run | status | hit ratio | answers by cache status | entries | evictions (from) | "
           "per entry beyond body: of memory held / as stored (how) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] in ("n/a", "failed", "skipped"):
            md.append(f"| {r['server']} | {r['run']} | {r['status']}: {r['reason']} | | | | | |")
            continue
        md.append(f"| {r['server']} | {r['run']} | {r['status']}{': ' + r['reason'] if r['reason'] else ''} | "
                  f"{r['hit_ratio']} | {r['classes']} | {r['entries']} | {r['evictions']} ({r['evictions_from']}) | "
                  f"{r['overhead_held_b']} / {r['overhead_store_b']} ({r['overhead_from']}) |")
    counters = [r for r in rows if r.get("cache_counters")]
    if counters:
        md += ["", "## ScalWS cache counters (/status, after the measurement; (+n): during it)", ""]
        for r in counters:
            md.append(f"- {r['server']} run {r['run']}: {r['cache_counters']}")
    md += ["", "## Reading it", "",
           "- *LRU would get* and *top-k bound* are what an LRU cache (Che's approximation) and the "
           "best possible cache would hit with as many entries as this server held at the end, under "
           "the same Zipf law: a cache above the LRU figure evicts better than recency alone.",
           "- *Cache memory held*: ScalWS: its zone, a fixed shared mapping of max_size; nginx: its "
           "keys_zone plus the tmpfs pages of its cache files at the end. Both were given the same "
           "memory (CACHE_SIZE); a row that held more than 5 % over it is invalid. *Memory per entry "
           "beyond its body*: that memory divided by the entries held, less the body: everything one "
           "entry costs besides its body, fragmentation and page rounding included (for ScalWS "
           "meaningful once the zone is full: evictions > 0).",
           "- *As stored*: ScalWS from its counters (what the store holds less the bodies, per "
           "entry); nginx from its files (allocated tmpfs bytes per file less the body, plus the "
           "documented keys_zone node of ~131 B).",
           "- nginx checks max_size in its cache manager, which wakes at most every 10 s here; "
           "what bounds it within a run is its keys_zone, sized for as many keys as max_size holds "
           "files (bench/lib/servers.sh, nginx_cache_split). A full keys_zone evicts the least "
           "recently used entry at once, and the manager then trims to 7/8 of the keys, so nginx "
           "holds between 7/8 and all of its keys. Its evictions are estimated as responses stored "
           "since start less entries held.",
           "- The load generator runs Lua for every request (the key draw) and every answer (its "
           "cache header): rps and latency here say less than in run.sh; compare hit ratios, "
           "entries and memory."]
    with open(os.path.join(out_dir, "cache_zipf.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {out_dir}/cache_zipf.md")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sp = p.add_subparsers(dest="cmd", required=True)
    s = sp.add_parser("columns"); s.set_defaults(f=cmd_zipf_columns)
    s = sp.add_parser("row")
    s.add_argument("--server", required=True)
    for k in ("run", "order", "status", "reason", "out", "before", "after", "upstream-start",
              "upstream-before", "upstream-after", "status-before", "status-after", "cache-dir",
              "expect-cpus"):
        s.add_argument("--" + k, default="")
    s.add_argument("--keys", type=int, default=100000)
    s.add_argument("--zipf-s", type=float, default=1.0)
    s.add_argument("--obj-size", type=int, default=4096)
    s.add_argument("--budget-mib", type=int, default=0, help="the cache's memory: zone max_size, or keys_zone + max_size")
    s.add_argument("--keys-zone-kib", type=int, default=0, help="nginx: its keys_zone")
    s.set_defaults(f=cmd_zipf_row)
    s = sp.add_parser("report"); s.add_argument("csv"); s.set_defaults(f=cmd_zipf_report)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
