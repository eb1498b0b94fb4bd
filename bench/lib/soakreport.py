"""The report of bench/soak.py: the error log's summary, the checks and the
verdict (build_report), report.json's dictionary, and report.md
(render_md). Pure functions of what the run recorded."""
from __future__ import annotations

import collections
import datetime
import json
import os
import re
import subprocess
from pathlib import Path

import soakload

REPO = Path(__file__).resolve().parent.parent.parent


# ---- the error log ----------------------------------------------------------

LOG_LINE = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[(\w+)\] (\d+)#(\S+): (.*)$")
NORMALIZE = [
    (re.compile(r"\b\d+\.\d+\.\d+\.\d+:\d+\b"), "ADDR"),
    (re.compile(r"pid \d+"), "pid N"),
    (re.compile(r"generation \d+"), "generation N"),
    (re.compile(r"/tmp/scalws-soak\.[^/\s]+"), "RUN"),
    (re.compile(r"request id: [0-9a-f]+"), "request id: ID"),
    (re.compile(r"\b\d+(\.\d+)?\b"), "N"),
]


def error_log_summary(text):
    levels = collections.Counter()
    messages = collections.Counter()
    crashes, tracebacks = [], 0
    for line in text.splitlines():
        m = LOG_LINE.match(line)
        if not m:
            if line.startswith("Traceback"):
                tracebacks += 1
            continue
        level, msg = m.group(1), m.group(4)
        levels[level] += 1
        norm = msg
        for rx, rep in NORMALIZE:
            norm = rx.sub(rep, norm)
        messages[(level, norm[:200])] += 1
        if "; restarting" in msg and "signal 9 (SIGKILL)" not in msg:
            crashes.append(line)
    return {"lines": sum(levels.values()), "by_level": dict(levels), "tracebacks": tracebacks,
            "crashes": crashes,
            "messages": [{"level": lv, "message": msg, "count": n}
                         for (lv, msg), n in messages.most_common()]}


# ---- the report -------------------------------------------------------------

def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, int(q * len(v)))], 2)


def growth(a, b):
    return round((b - a) * 100.0 / a, 2) if a else None


def build_report(args, soak, stop_code, log_text, log_start):
    st = soak.load.stats
    rows = []
    for kind in soakload.KINDS:
        for proto in soakload.PROTOS:
            sent = st.sent[("soak", kind, proto)]
            if not sent and not st.sent[("warmup", kind, proto)]:
                continue
            fails = [f for f in st.failures if f["kind"] == kind and f["proto"] == proto]
            lat = st.lat.get((kind, proto), [])
            rows.append({"kind": kind, "proto": proto, "sent": sent, "ok": st.ok[("soak", kind, proto)],
                         "warmup_sent": st.sent[("warmup", kind, proto)],
                         "end_sent": st.sent[("end", kind, proto)],
                         "failed_expected": sum(1 for f in fails if f["expected"]),
                         "failed_unexpected": sum(1 for f in fails if not f["expected"]),
                         "p50_ms": pct(lat, 0.50), "p99_ms": pct(lat, 0.99),
                         "max_ms": round(max(lat), 2) if lat else None})
    by_kind = {}
    for r in rows:
        k = by_kind.setdefault(r["kind"], {"sent": 0, "failed_expected": 0, "failed_unexpected": 0})
        for f in ("sent", "failed_expected", "failed_unexpected"):
            k[f] += r[f]
    for kind in by_kind:
        lat = [x for (k, _), a in st.lat.items() if k == kind for x in a]
        by_kind[kind].update({"p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)})
    for f in st.failures:
        f["t_soak"] = round(f["t_start"] - soak.soak_offset, 3)
    total_sent = sum(st.sent.values())
    unexpected = [f for f in st.failures if not f["expected"]]
    expected = [f for f in st.failures if f["expected"]]

    start, end = soak.quiet["start"], soak.quiet["end"]
    # A worker of a later generation is forked from the master as it is
    # then: it maps every anonymous page the master grew by since the first
    # sample, counted in its VmRSS too. Its own growth is the rest: the
    # master's is checked on the master (a leak there fails that check).
    ma, mb = start.get("master"), end.get("master")
    inherited = max(0, mb["rss_anon_kb"] - ma["rss_anon_kb"]) if ma and mb else 0
    resources = []
    for role in sorted(set(start) | set(end)):
        if role == "t":
            continue
        a, b = start.get(role), end.get(role)
        r = {"role": role, "start": a, "end": b}
        if a and b:
            forked_later = role.startswith("worker") and a["pid"] != b["pid"]
            r.update({"rss_growth_pct": growth(a["rss_kb"], b["rss_kb"]),
                      "rss_anon_growth_pct": growth(a["rss_anon_kb"], b["rss_anon_kb"]),
                      "inherited_kb": inherited if forked_later else 0,
                      "fds_growth_pct": growth(a["fds"], b["fds"]),
                      "fds_not_conn_growth_pct": growth(a["fds_not_conn"], b["fds_not_conn"])})
            r["rss_own_growth_kb"] = b["rss_kb"] - r["inherited_kb"] - a["rss_kb"]
            r["rss_own_growth_pct"] = growth(a["rss_kb"], b["rss_kb"] - r["inherited_kb"])
        resources.append(r)

    log = error_log_summary(log_text)
    log_soak = error_log_summary(log_text.encode()[log_start:].decode("utf-8", "replace"))
    checks = []

    def check(name, ok, detail):
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    check("unexpected failures", not unexpected, f"{len(unexpected)} unexpected, "
          f"{len(expected)} expected (in flight on a killed worker)")
    for kind in soakload.KINDS:
        if soak.load.mix.get(kind):
            check(f"requests of kind {kind}", by_kind.get(kind, {}).get("sent", 0) > 0,
                  f"{by_kind.get(kind, {}).get('sent', 0)} sent")
    for e in soak.events:
        t0, t1 = e["t"] - 1, e["t"] + e["took_s"] + 3
        near = [f for f in st.failures if t0 <= f["t_start"] <= t1 or t0 <= f["t_end"] <= t1]
        e["failures_near"] = {"expected": sum(1 for f in near if f["expected"]),
                              "unexpected": sum(1 for f in near if not f["expected"])}
    planned = soak.schedule()
    done = [e for e in soak.events if e.get("ok")]
    check("events", len(done) == len(planned),
          f"{len(done)} of {len(planned)} done: " + ", ".join(
              f"{k} {sum(1 for e in done if e['kind'] == k)}" for k in ("hup", "kill", "upstream")))
    for r in resources:
        if r["role"] == "tls keeper":
            continue
        if not (r["start"] and r["end"]):
            check(f"{r['role']} resources", False, "not sampled at start and end")
            continue
        detail = f"{r['start']['rss_kb']} -> {r['end']['rss_kb']} kB ({r['rss_growth_pct']:+.2f} %)"
        if r["inherited_kb"]:
            detail += (f"; {r['inherited_kb']} kB of it the master's growth, mapped at the "
                       f"fork: {r['rss_own_growth_pct']:+.2f} % its own")
        check(f"{r['role']} RSS", r["rss_own_growth_pct"] < args.max_growth
              or r["rss_own_growth_kb"] < args.heap_slack, detail)
        check(f"{r['role']} descriptors other than connections",
              r["fds_not_conn_growth_pct"] < args.max_growth,
              f"{r['start']['fds_not_conn']} -> {r['end']['fds_not_conn']} "
              f"({r['fds_not_conn_growth_pct']:+.2f} %); all descriptors "
              f"{r['start']['fds']} -> {r['end']['fds']}")
        if r["role"].startswith("worker"):
            ports = r["end"]["client_ports"]
            detail = f"{len(ports)} after the load closed its own"
            if ports:
                detail += "; " + "; ".join(_conn_story(p, st.failures) for p in ports)
            check(f"{r['role']} client connections left", not ports, detail)
    check("worker crashes", not log["crashes"], f"{len(log['crashes'])} deaths other than our SIGKILLs")
    check("tracebacks in the error log", not log["tracebacks"], f"{log['tracebacks']}")
    check("scalwsd stops cleanly on TERM", stop_code == 0, f"exit status {stop_code}")
    verdict = "PASS" if all(c["ok"] for c in checks) else "FAIL"

    return {
        "verdict": verdict, "checks": checks,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "git": _git(), "box": _box(), "args": vars(args),
        "soak_seconds": round(soak.soak_seconds, 2), "drain_seconds": round(soak.drain_seconds, 2),
        "cpu": soak.cpu,
        "requests": {"total_sent": total_sent, "soak_sent": sum(r["sent"] for r in rows),
                     "rate_rps": round(sum(r["sent"] for r in rows) / soak.soak_seconds, 1),
                     "failed_expected": len(expected), "failed_unexpected": len(unexpected),
                     "rows": rows, "by_kind": by_kind},
        "failures": st.failures, "notes": dict(st.notes), "connections": dict(st.conn),
        "events": soak.events, "resources": resources, "samples": soak.samples,
        "quiet_samples": soak.quiet,
        "error_log": {"whole_run": log, "soak_phase": log_soak,
                      "bytes": len(log_text.encode()), "bytes_at_soak_start": log_start},
        "timeline": {str(k): v for k, v in sorted(st.timeline.items())},
    }


def _conn_story(port, failures):
    """What the load saw on the connection from client port `port` (the last
    one it had from that port)."""
    fails = [f for f in failures if f["client_port"] == port]
    if not fails:
        return f"port {port}: no failure on it"
    last = fails[-1]
    return (f"port {port}: conn {last['conn']} ({last['proto']}), {len(fails)} failures on it, "
            f"the last {last['category']} at {last['t_soak']} s")


def _git():
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "-uno"],
                               capture_output=True, text=True).stdout.strip()
        return rev + (f" (+{len(dirty.splitlines())} uncommitted)" if dirty else "")
    except OSError:
        return "?"


def _box():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "?")
    except OSError:
        pass
    return {"cpu": model, "cpus": os.cpu_count(), "kernel": os.uname().release}


def _under_load(samples):
    """Per role, the range of VmRSS and the most descriptors in the samples
    taken under load."""
    out = {}
    for s in samples:
        for role, v in s.items():
            if role == "t" or not v:
                continue
            u = out.setdefault(role, {"rss_min": v["rss_kb"], "rss_max": v["rss_kb"],
                                      "fds_max": v["fds"], "pid_set": set()})
            u["rss_min"] = min(u["rss_min"], v["rss_kb"])
            u["rss_max"] = max(u["rss_max"], v["rss_kb"])
            u["fds_max"] = max(u["fds_max"], v["fds"])
            u["pid_set"].add(v["pid"])
    for u in out.values():
        u["pids"] = len(u.pop("pid_set"))
    return dict(sorted(out.items()))


def render_md(rep):
    L = []
    a = rep["args"]
    L.append(f"# Soak {rep['date']}: **{rep['verdict']}**\n")
    L.append(f"git {rep['git']}, {rep['box']['cpus']} × {rep['box']['cpu']}, kernel "
             f"{rep['box']['kernel']}. {rep['soak_seconds']:.0f} s of load at {a['rate']:g} req/s "
             f"(measured {rep['requests']['rate_rps']}) after {a['warmup']:g} s of warm-up; HUP every "
             f"{a['hup_every']:g} s, kill every {a['kill_every']:g} s, upstream restart every "
             f"{a['upstream_every']:g} s (0: never). CPU over the soak phase: the box (all CPUs) "
             f"{rep['cpu']['box_busy_pct']} % busy, {rep['cpu']['box_steal_pct']} % stolen by the "
             f"hypervisor; this harness {rep['cpu']['harness_pct_of_one_cpu']} % of one CPU.\n")
    L.append("## Verdict\n\n| check | ok | detail |\n|---|---|---|")
    for c in rep["checks"]:
        L.append(f"| {c['check']} | {'yes' if c['ok'] else '**NO**'} | {c['detail']} |")
    q = rep["requests"]
    L.append(f"\n## Requests\n\n{q['total_sent']} sent in all ({q['soak_sent']} in the soak phase, "
             f"the rest in the warm-up and the last answers); failed: {q['failed_expected']} "
             f"expected (in flight on a killed worker), {q['failed_unexpected']} unexpected.\n")
    L.append("| kind | proto | sent | ok | failed, expected | failed, unexpected | p50 ms | p99 ms | max ms |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in q["rows"]:
        L.append(f"| {r['kind']} | {r['proto']} | {r['sent']} | {r['ok']} | {r['failed_expected']} | "
                 f"{r['failed_unexpected']} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} |")
    L.append("\n| kind | sent | failed, expected | failed, unexpected | p50 ms | p99 ms |")
    L.append("|---|---:|---:|---:|---:|---:|")
    for k, r in q["by_kind"].items():
        L.append(f"| {k} | {r['sent']} | {r['failed_expected']} | {r['failed_unexpected']} | "
                 f"{r['p50_ms']} | {r['p99_ms']} |")
    if rep["notes"]:
        L.append("\nNotes (not failures): " + "; ".join(f"{k}: {v}" for k, v in rep["notes"].items()))
    L.append("\nConnections: " + "; ".join(f"{k}: {v}" for k, v in sorted(rep["connections"].items())))
    unexpected = [f for f in rep["failures"] if not f["expected"]]
    if unexpected:
        L.append("\n## Unexpected failures (first 40)\n")
        L.append("| t s (soak) | kind | proto | category | detail | conn | reqs before on it |")
        L.append("|---:|---|---|---|---|---:|---:|")
        for f in unexpected[:40]:
            goaway = f" (GOAWAY {f['goaway']})" if f.get("goaway") else ""
            L.append(f"| {f['t_soak']} | {f['kind']} | {f['proto']} | {f['category']} | "
                     f"{f['detail']}{goaway} {f.get('path', '')} | {f['conn']} | "
                     f"{f['conn_requests_before']} |")
    expected = collections.Counter((f["killed_by"], f["category"]) for f in rep["failures"]
                                   if f["expected"])
    if expected:
        L.append("\nExpected failures by kill: " + "; ".join(
            f"kill {k} {c}: {n}" for (k, c), n in sorted(expected.items())))
    L.append("\n## Events\n\n| t s (soak) | event | took s | ok | detail |\n|---:|---|---:|---|---|")
    for e in rep["events"]:
        detail = {k: v for k, v in e.items() if k not in ("kind", "due", "t", "t_soak", "ok", "took_s")}
        L.append(f"| {e['t_soak']} | {e['kind']} | {e['took_s']} | {'yes' if e['ok'] else '**NO**'} | "
                 f"{json.dumps(detail)} |")
    L.append("\n## Resources (quiet samples: load paused, client connections closed)\n")
    L.append("| role | pid start → end | VmRSS kB start → end | growth | of it the master's "
             "(kB) | own growth | RssAnon growth | fds start → end | fds other than connections "
             "| growth |")
    L.append("|---|---|---|---:|---:|---:|---:|---|---|---:|")
    for r in rep["resources"]:
        a, b = r["start"], r["end"]
        if not (a and b):
            L.append(f"| {r['role']} | {a and a['pid']} → {b and b['pid']} | | | | | | | | |")
            continue
        L.append(f"| {r['role']} | {a['pid']} → {b['pid']} | {a['rss_kb']} → {b['rss_kb']} | "
                 f"{r['rss_growth_pct']:+.2f} % | {r['inherited_kb']} | "
                 f"{r['rss_own_growth_pct']:+.2f} % | {r['rss_anon_growth_pct']:+.2f} % | "
                 f"{a['fds']} → {b['fds']} | {a['fds_not_conn']} → {b['fds_not_conn']} | "
                 f"{r['fds_not_conn_growth_pct']:+.2f} % |")
    for r in rep["resources"]:
        if r["start"] and r["end"]:
            L.append(f"- {r['role']}: descriptors at start {r['start']['fd_classes']}, "
                     f"at end {r['end']['fd_classes']}")
    under = _under_load(rep["samples"])
    if under:
        L.append(f"\nUnder load ({len(rep['samples'])} samples, every {rep['args']['sample_every']:g} s; "
                 "workers of every generation): " + "; ".join(
                     f"{role} VmRSS {u['rss_min']}-{u['rss_max']} kB, at most {u['fds_max']} "
                     f"descriptors, {u['pids']} processes" for role, u in under.items()))
    el = rep["error_log"]
    L.append(f"\n## Error log\n\n{el['bytes']} bytes, {el['whole_run']['lines']} lines: "
             + ", ".join(f"{k} {v}" for k, v in sorted(el["whole_run"]["by_level"].items()))
             + f"; in the soak phase: {el['soak_phase']['lines']} lines ("
             + ", ".join(f"{k} {v}" for k, v in sorted(el["soak_phase"]["by_level"].items())) + ").\n")
    L.append("| level | count | message (numbers and addresses as N, ADDR) |\n|---|---:|---|")
    for m in el["whole_run"]["messages"][:40]:
        L.append(f"| {m['level']} | {m['count']} | {m['message'].replace('|', '/')} |")
    return "\n".join(L) + "\n"
