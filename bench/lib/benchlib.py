#!/usr/bin/env python3
"""Parsing, process accounting, aggregation and charts for bench/*.sh.

Subcommands (all called by the shell scripts):
  render TEMPLATE                      @NAME@ -> $NAME from the environment
  snapshot PID                         CPU ticks / VmHWM / VmRSS of PID's tree
  row ...                              one CSV result row from wrk/h2load output
  columns                              the CSV header line of run.sh
  aggregate DIR                        DIR/run-*.csv -> aggregate.csv/.md + charts
  (the concurrency sweep's rows and report: conclib.py)
  inst-report CSV                      instances table with efficiency
  hs-row ... / hs-report CSV           bench/handshakes.sh rows (tlshs output) and table
  (bench/cache_zipf.sh's rows and report: zipflib.py)
"""
import argparse
import csv
import glob
import io
import os
import re
import statistics
import sys

CLK_TCK = os.sysconf("SC_CLK_TCK")

COLUMNS = ["server", "scenario", "status", "rps", "p50_ms", "p99_ms", "cpu_us_per_req",
           "server_cpu_pct", "load_cpu_pct", "peak_rss_mib", "requests", "non2xx", "socket_errors",
           "upstream_reqs", "duration_s", "order", "reason", "steal_pct"]
METRICS = ["rps", "p50_ms", "p99_ms", "cpu_us_per_req", "server_cpu_pct", "load_cpu_pct", "peak_rss_mib",
           "steal_pct"]


# --------------------------------------------------------------- render
def cmd_render(a):
    text = open(a.template).read()

    def sub(m):
        name = m.group(1)
        if name not in os.environ:
            sys.exit(f"render: {a.template}: @{name}@ has no value")
        return os.environ[name]
    sys.stdout.write(re.sub(r"@([A-Z][A-Z0-9_]*)@", sub, text))


# --------------------------------------------------------------- /proc
def proc_table():
    """pid -> (ppid, ticks incl. reaped children, process group)."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rindex(")") + 2:].split()
        # rest[0] = state (field 3); utime..cstime are fields 14..17
        ppid = int(rest[1])
        ticks = sum(int(x) for x in rest[11:15])
        table[int(d)] = (ppid, ticks, int(rest[2]))
    return table


def tree(root, table):
    """ROOT and its descendants, less those that lead a process group of
    their own below ROOT: scalwsd's managed app workers (setpgid), which
    are the application, as the uvicorn or node the other servers proxy to
    is, and is not counted for them either."""
    children = {}
    for pid, (ppid, *_) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        if p in table and (p == root or table[p][2] != p):
            out.append(p)
            todo.extend(children.get(p, []))
    return out


def status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpus_allowed(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return line.split()[1]
    except OSError:
        pass
    return "?"


def snapshot(pids):
    """Sum over the process trees of PIDS: utime+stime+cutime+cstime (so a
    child that exited and was reaped by a tree member still counts), VmHWM
    and VmRSS."""
    table = proc_table()
    members = []
    for r in pids:
        members.extend(tree(r, table))
    ticks = sum(table[p][1] for p in members)
    hwm = sum(status_kib(p, "VmHWM") for p in members)
    rss = sum(status_kib(p, "VmRSS") for p in members)
    cpus = sorted({cpus_allowed(p) for p in members})
    return {"ticks": ticks, "hwm_kib": hwm, "rss_kib": rss, "nproc": len(members),
            "cpus": ",".join(cpus) or "-"}


def cpu_fields(cpus):
    """The /proc/stat time fields (user .. steal, jiffies) summed over these CPUs."""
    total = [0] * 8
    with open("/proc/stat") as f:
        for line in f:
            name, *v = line.split()
            if name[3:].isdigit() and int(name[3:]) in cpus:
                total = [t + int(x) for t, x in zip(total, v[:8])]
    return total


def cpu_jiffies(cpu):
    """(busy, total) jiffies of one CPU: all but idle and iowait."""
    v = cpu_fields({int(cpu)})
    return sum(v) - v[3] - v[4], sum(v)


def steal_jiffies(cpus):
    """(steal, total) jiffies summed over these CPUs: time the hypervisor
    gave to something else while they wanted to run."""
    v = cpu_fields(cpus)
    return v[7], sum(v)


def cmd_snapshot(a):
    s = snapshot([int(p) for p in a.pids])
    if a.cpu != "":
        s["cpu_busy"], s["cpu_total"] = cpu_jiffies(a.cpu)
    if a.steal_cpus:
        s["steal"], s["steal_total"] = steal_jiffies({int(c) for c in a.steal_cpus.split(",")})
    print(" ".join(f"{k}={v}" for k, v in s.items()))


def kv(text):
    return dict(x.split("=", 1) for x in text.split() if "=" in x)


def load_steal_pct(before, after):
    """The load CPU's busy share and the steal share between two snapshots
    (cmd_snapshot's --cpu and --steal-cpus), in %; "" where not measured."""
    load_pct = steal_pct = ""
    if "cpu_total" in after and int(after["cpu_total"]) > int(before["cpu_total"]):
        load_pct = 100.0 * (int(after["cpu_busy"]) - int(before["cpu_busy"])) / (
            int(after["cpu_total"]) - int(before["cpu_total"]))
    if "steal_total" in after and int(after["steal_total"]) > int(before["steal_total"]):
        steal_pct = 100.0 * (int(after["steal"]) - int(before["steal"])) / (
            int(after["steal_total"]) - int(before["steal_total"]))
    return load_pct, steal_pct


# --------------------------------------------------------------- load tools
def parse_wrk(path):
    """The BENCH line printed by bench/lib/report.lua."""
    text = open(path).read()
    m = re.search(r"^BENCH (.*)$", text, re.M)
    if not m:
        raise ValueError("no BENCH line in wrk output (wrk failed?): " + text[-300:].strip())
    d = {k: float(v) for k, v in kv(m.group(1)).items()}
    return {
        "requests": int(d["requests"]),
        "duration_s": d["duration_us"] / 1e6,
        "p50_ms": d["p50_us"] / 1000.0,
        "p99_ms": d["p99_us"] / 1000.0,
        "non2xx": int(d["status"]),
        "socket_errors": int(d["connect"] + d["read"] + d["write"] + d["timeout"]),
        "errors": {k: int(d[k]) for k in ("connect", "read", "write", "timeout")},
        "proto": "http/1.1",
    }


def percentile(sorted_vals, p):
    if not sorted_vals:
        return 0.0
    k = max(0, min(len(sorted_vals) - 1, int(round(p / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[k]


def parse_h2load(path, logfile):
    text = open(path).read()
    m = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", text)
    r = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
    c = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    if not (m and r and c):
        raise ValueError("cannot parse h2load output: " + text[-300:].strip())
    dur = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
    total, started, done, ok, failed, errored, timeout = (int(x) for x in r.groups())
    s2, s3, s4, s5 = (int(x) for x in c.groups())
    proto = re.search(r"Application protocol: (\S+)", text)
    durations, starts = [], []
    if logfile and os.path.exists(logfile):
        # one line per request: start (µs since epoch), status, duration (µs)
        with open(logfile) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[1].lstrip("-").isdigit():
                    starts.append(int(parts[0]))
                    durations.append(int(parts[-1]))
    durations.sort()
    stopped = "Process Request Failure" in text
    if starts and (max(starts) - min(starts)) / 1e6 < 0.9 * dur:
        stopped = True
    return {
        "requests": s2 + s3 + s4 + s5,
        "duration_s": dur,
        "p50_ms": percentile(durations, 50) / 1000.0,
        "p99_ms": percentile(durations, 99) / 1000.0,
        "non2xx": s3 + s4 + s5,
        # h2load's "failed" includes non-2xx answers; the rest are transport errors
        "socket_errors": errored + timeout + max(0, failed - (s3 + s4 + s5) - errored - timeout),
        "errors": {"errored": errored, "timeout": timeout, "failed": failed},
        "proto": proto.group(1) if proto else "?",
        "stopped_early": stopped,
    }


def fmt(v, nd=2):
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def cmd_columns(a):
    print(",".join(COLUMNS))


def write_row(d):
    w = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n", extrasaction="ignore")
    w.writerow({k: fmt(d.get(k, "")) for k in COLUMNS})


def cmd_row(a):
    base = {"server": a.server, "scenario": a.scenario, "order": a.order}
    if a.status in ("n/a", "failed", "skipped"):
        base.update(status=a.status, reason=a.reason)
        write_row(base)
        return
    try:
        res = parse_h2load(a.out, a.h2log) if a.tool == "h2load" else parse_wrk(a.out)
    except (ValueError, OSError, KeyError) as e:
        base.update(status="failed", reason=f"load tool output: {e}".replace("\n", " ")[:300])
        write_row(base)
        return
    before, after = kv(a.before), kv(a.after)
    cpu_s = (int(after["ticks"]) - int(before["ticks"])) / CLK_TCK
    req = res["requests"]
    up = ""
    if a.upstream_before != "" and a.upstream_after != "":
        # stub_status counts our own two status requests too
        up = max(0, int(a.upstream_after) - int(a.upstream_before) - 1)
    problems = []
    if req == 0:
        problems.append("no request completed")
    if res["non2xx"]:
        problems.append(f"{res['non2xx']} non-2xx")
    if res["socket_errors"]:
        problems.append("socket errors " + " ".join(f"{k}={v}" for k, v in res["errors"].items() if v))
    if a.scenario.startswith("cache-") and up != "" and up > 0.001 * req:
        problems.append(f"{up} requests reached the upstream (not all hits)")
    if res.get("stopped_early"):
        problems.append("h2load stopped sending before the end (server closed connections: GOAWAY or keep-alive limit)")
    if a.scenario.startswith("tls-h2") and res["proto"] != "h2":
        problems.append(f"negotiated {res['proto']}, not h2")
    if a.scenario.startswith("tls-h3") and res["proto"] != "h3":
        problems.append(f"negotiated {res['proto']}, not h3")
    if after.get("cpus") not in (None, "-", a.expect_cpus) and a.expect_cpus:
        problems.append(f"server allowed on CPUs {after.get('cpus')}, expected {a.expect_cpus}")
    load_pct, steal_pct = load_steal_pct(before, after)
    base.update(
        load_cpu_pct=load_pct, steal_pct=steal_pct,
        status="invalid" if problems else "ok",
        rps=req / res["duration_s"] if res["duration_s"] else 0.0,
        p50_ms=res["p50_ms"], p99_ms=res["p99_ms"],
        cpu_us_per_req=(cpu_s * 1e6 / req) if req else 0.0,
        server_cpu_pct=100.0 * cpu_s / res["duration_s"] if res["duration_s"] else 0.0,
        peak_rss_mib=int(after["hwm_kib"]) / 1024.0,
        requests=req, non2xx=res["non2xx"], socket_errors=res["socket_errors"],
        upstream_reqs=up, duration_s=res["duration_s"], reason="; ".join(problems),
    )
    write_row(base)


# --------------------------------------------------------------- aggregate
def read_csv(path):
    lines = [l for l in open(path) if not l.startswith("#") and l.strip()]
    return list(csv.DictReader(io.StringIO("".join(lines))))


def header_lines(path):
    return [l.rstrip("\n") for l in open(path) if l.startswith("#")]


def ordered(seq, preferred):
    seen = []
    for x in preferred + seq:
        if x in seq and x not in seen:
            seen.append(x)
    return seen


SCEN_ORDER = ["static-small", "static-1m", "respond", "proxy", "cache-hit", "cache-1m",
              "tls-static-small", "tls-respond", "tls-h2-static-small", "tls-h2-respond", "tls-h2-proxy", "tls-h3-static-small",
              "tls-h3-proxy", "php", "node", "python"]
SRV_ORDER = ["scalws", "scalws-base", "scalws-alt", "nginx", "h2o", "lighttpd", "haproxy", "caddy"]
TABLES = [("rps", "Requests per second", 0), ("p99_ms", "p99 latency (ms)", 2),
          ("cpu_us_per_req", "Server CPU per request (µs, whole process tree)", 2),
          ("peak_rss_mib", "Peak RSS of the server tree (MiB, sum of VmHWM)", 1),
          ("p50_ms", "p50 latency (ms)", 2), ("server_cpu_pct", "Server CPU use (% of one CPU)", 0),
          ("load_cpu_pct", "Load CPU busy (% of CPU_LOAD: wrk/h2load, upstreams, apps)", 0),
          ("steal_pct", "Steal (% of both CPUs' time the hypervisor gave to others)", 1)]


def aggregate(rows, metrics=None, key=lambda r: (r["server"], r["scenario"])):
    metrics = metrics or METRICS
    groups = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    agg = {}
    for k, rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]
        g = {"n_ok": len(ok), "n_invalid": sum(r["status"] == "invalid" for r in rs),
             "n_failed": sum(r["status"] == "failed" for r in rs),
             "n_na": sum(r["status"] in ("n/a", "skipped") for r in rs), "n": len(rs),
             "reasons": sorted({r["reason"] for r in rs if r["reason"] and r["status"] != "ok"})}
        for m in metrics:
            vals = [float(r[m]) for r in ok if r.get(m) not in (None, "")]
            g[m] = (statistics.median(vals), min(vals), max(vals)) if vals else None
        agg[k] = g
    return agg


def status_of(g):
    if g["n_ok"]:
        return "ok"
    if g["n_na"] == g["n"]:
        return "n/a"
    if g["n_invalid"]:
        return "invalid"
    return "failed"


def cell(g, m, nd):
    if g is None:
        return "—"
    st = status_of(g)
    if st != "ok":
        return st
    if g[m] is None:
        return "—"
    v = g[m][0]
    s = f"{v:,.{nd}f}".replace(",", " ")
    if g["n_ok"] < g["n"]:
        s += f" ({g['n_ok']}/{g['n']} valid)"
    return s


def cmd_aggregate(a):
    d = a.dir
    files = sorted(glob.glob(os.path.join(d, "run-*.csv")),
                   key=lambda p: int(re.search(r"run-(\d+)", p).group(1)))
    if not files:
        sys.exit(f"aggregate: no run-*.csv in {d}")
    rows = []
    for f in files:
        rows.extend(read_csv(f))
    agg = aggregate(rows)
    servers = ordered(sorted({k[0] for k in agg}), SRV_ORDER)
    scens = ordered(sorted({k[1] for k in agg}), SCEN_ORDER)

    with open(os.path.join(d, "aggregate.csv"), "w") as f:
        for l in header_lines(files[0]):
            f.write(l + "\n")
        f.write(f"# aggregate of {len(files)} runs: {', '.join(os.path.basename(x) for x in files)}\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["server", "scenario", "metric", "median", "min", "max", "n_ok", "n_invalid",
                    "n_failed", "n_runs", "status", "reason"])
        for srv in servers:
            for sc in scens:
                g = agg.get((srv, sc))
                if not g:
                    continue
                for m in METRICS:
                    v = g[m]
                    w.writerow([srv, sc, m] + ([fmt(v[0]), fmt(v[1]), fmt(v[2])] if v else ["", "", ""]) +
                               [g["n_ok"], g["n_invalid"], g["n_failed"], g["n"], status_of(g),
                                " | ".join(g["reasons"])])

    md = [f"# Benchmark aggregate: {os.path.basename(os.path.abspath(d))}", "",
          f"Medians of {len(files)} runs (rotating server order); only `ok` measurements count. "
          "`n/a`: the server cannot run the scenario; `invalid`: every run had non-2xx answers "
          "or socket errors; `(k/N valid)`: median of the k valid runs. Ratios are against nginx "
          "(for rps: higher is better; for latency, CPU and memory: lower is better).", "",
          "```"] + header_lines(files[0]) + ["```", ""]
    others = [s for s in servers if s != "nginx"]
    for m, title, nd in TABLES:
        md += [f"## {title}", ""]
        head = ["scenario"] + servers + ([f"{s} / nginx" for s in others] if "nginx" in servers else [])
        md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for sc in scens:
            line = [sc] + [cell(agg.get((s, sc)), m, nd) for s in servers]
            if "nginx" in servers:
                for s in others:
                    line.append(ratio_text(agg.get((s, sc)), agg.get(("nginx", sc)), m))
            md.append("| " + " | ".join(line) + " |")
        md.append("")
    md += ["## Range (min – max over valid runs)", "", "| server | scenario | rps | p99 ms | CPU µs/req | RSS MiB |",
           "|---|---|---|---|---|---|"]
    for srv in servers:
        for sc in scens:
            g = agg.get((srv, sc))
            if not g or status_of(g) != "ok":
                continue
            rng = lambda m, nd: f"{g[m][1]:.{nd}f} – {g[m][2]:.{nd}f}" if g[m] else "—"
            md.append(f"| {srv} | {sc} | {rng('rps', 0)} | {rng('p99_ms', 2)} | "
                      f"{rng('cpu_us_per_req', 2)} | {rng('peak_rss_mib', 1)} |")
    md += ["", "## Not measured and invalid measurements", ""]
    notes = 0
    for srv in servers:
        for sc in scens:
            g = agg.get((srv, sc))
            if g and g["reasons"]:
                notes += 1
                md.append(f"- {srv} / {sc} ({status_of(g)}, {g['n_ok']}/{g['n']} valid): "
                          + "; ".join(g["reasons"]))
    if not notes:
        md.append("- none: every measurement of every server was valid.")
    charts = make_charts(d, agg, servers, scens)
    if charts:
        md += ["", "## Charts (ratio vs nginx)", ""] + [f"![{c}](charts/{c})" for c in charts]
    with open(os.path.join(d, "aggregate.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {d}/aggregate.csv, {d}/aggregate.md" + (f", {len(charts)} charts" if charts else ""))


def ratio(g, base, m):
    if (not g or not base or status_of(g) != "ok" or status_of(base) != "ok"
            or g[m] is None or base[m] is None or not base[m][0]):
        return None
    return g[m][0] / base[m][0]


def ratio_text(g, base, m):
    r = ratio(g, base, m)
    if r is not None:
        return f"{r:.2f}"
    if g and status_of(g) != "ok":
        return status_of(g)
    return "—"


def make_charts(d, agg, servers, scens):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("aggregate: matplotlib missing, no charts (pip install matplotlib)", file=sys.stderr)
        return []
    if "nginx" not in servers:
        return []
    others = [s for s in servers if s != "nginx"]
    os.makedirs(os.path.join(d, "charts"), exist_ok=True)
    made = []
    for m, title, _ in TABLES[:4]:
        fig, ax = plt.subplots(figsize=(max(10, 0.95 * len(scens)), 4.5))
        width = 0.8 / max(1, len(others))
        top = 1.2
        for i, s in enumerate(others):
            xs, ys = [], []
            for j, sc in enumerate(scens):
                r = ratio(agg.get((s, sc)), agg.get(("nginx", sc)), m)
                if r is not None:
                    xs.append(j + (i - (len(others) - 1) / 2) * width)
                    ys.append(r)
                else:
                    g = agg.get((s, sc))
                    ax.text(j + (i - (len(others) - 1) / 2) * width, 0.02,
                            status_of(g) if g else "—", rotation=90, ha="center", va="bottom", fontsize=7)
            ax.bar(xs, ys, width=width, label=s)
            top = max([top] + ys)
            for x, y in zip(xs, ys):
                ax.text(x, y, f"{y:.2f}", ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xlim(-0.6, len(scens) - 0.4)
        ax.set_ylim(0, top * 1.15)
        ax.set_xticks(range(len(scens)))
        ax.set_xticklabels(scens, rotation=20, ha="right")
        better = "higher is better" if m == "rps" else "lower is better"
        ax.set_ylabel(f"{m} / nginx ({better})")
        ax.set_title(f"{title}: ratio vs nginx (median)")
        if others:
            ax.legend()
        fig.tight_layout()
        name = f"ratio-{m}.png"
        fig.savefig(os.path.join(d, "charts", name), dpi=110)
        plt.close(fig)
        made.append(name)
    return made


# --------------------------------------------------------------- instances
def inst_median(rows):
    """One (server, scenario, instances) cell from its runs: the median of
    each figure over the ok runs, errors summed, the rps range; the last
    problem when no run was ok."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return dict(rows[-1], runs=0, rps_min=None, rps_max=None)
    med = {k: statistics.median(float(r[k]) for r in ok)
           for k in ("rps", "p99_ms", "cpu_us_per_req", "server_cpu_pct", "load_cpu_pct")}
    rps = [float(r["rps"]) for r in ok]
    return dict(ok[0], **med, runs=len(ok), rps_min=min(rps), rps_max=max(rps),
                non2xx=sum(int(r["non2xx"]) for r in ok),
                socket_errors=sum(int(r["socket_errors"]) for r in ok))


def cmd_inst_report(a):
    rows = read_csv(a.csv)
    out_dir = os.path.dirname(os.path.abspath(a.csv))
    runs = {}
    for r in rows:
        runs.setdefault((r["server"], r["scenario"]), {}).setdefault(int(r["instances"]), []).append(r)
    md = ["# Instances: 1 against N", "", "```"] + header_lines(a.csv) + ["```", "",
          "efficiency = rps(N) / (N × rps(1)); each instance is capped to the same CPU share. "
          "Each figure is the median of the ok runs (how many: `runs`; the rps range beside it).", "",
          "| server | scenario | instances | CPU share each | runs | rps (min–max) | p99 ms | CPU µs/req | server CPU % | load CPU % | errors | efficiency | status |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (srv, sc), d in runs.items():
        cells = {n: inst_median(v) for n, v in d.items()}
        one = cells.get(1)
        for n in sorted(cells):
            r = cells[n]
            if not r["runs"]:
                md.append(f"| {srv} | {sc} | {n} | | 0 | | | | | | | | {r['status']}: {r['reason']} |")
                continue
            eff = ""
            if n > 1 and one and one["runs"] and one["rps"]:
                eff = f"{r['rps'] / (n * one['rps']):.2f}"
            failed = len(d[n]) - r["runs"]
            md.append(f"| {srv} | {sc} | {n} | {r['quota_pct']} % | {r['runs']} | "
                      f"{r['rps']:,.0f} ({r['rps_min']:,.0f}–{r['rps_max']:,.0f}) | {r['p99_ms']:.2f} | "
                      f"{r['cpu_us_per_req']:.2f} | {r['server_cpu_pct']:.1f} | {r['load_cpu_pct']:.1f} | "
                      f"{r['non2xx'] + r['socket_errors']} | {eff} | "
                      f"ok{f' ({failed} run(s) not ok)' if failed else ''} |")
    with open(os.path.join(out_dir, "instances.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md[next(i for i, x in enumerate(md) if x.startswith("efficiency")):]))


INST_COLUMNS = ["server", "scenario", "instances", "quota_pct", "status", "rps", "p99_ms",
                "cpu_us_per_req", "server_cpu_pct", "load_cpu_pct", "non2xx", "socket_errors", "reason"]


def cmd_inst_columns(a):
    print(",".join(INST_COLUMNS))


def cmd_inst_row(a):
    req = non2xx = serr = 0
    dur = p99 = 0.0
    problems = []
    for f in a.outs:
        try:
            r = parse_wrk(f)
        except (ValueError, OSError, KeyError) as e:
            problems.append(str(e)[:200].replace("\n", " "))
            continue
        req += r["requests"]
        non2xx += r["non2xx"]
        serr += r["socket_errors"]
        dur = max(dur, r["duration_s"])
        p99 = max(p99, r["p99_ms"])
    before, after = kv(a.before), kv(a.after)
    cpu_s = (int(after["ticks"]) - int(before["ticks"])) / CLK_TCK
    if non2xx:
        problems.append(f"{non2xx} non-2xx")
    if serr:
        problems.append(f"{serr} socket errors")
    if not req:
        problems.append("no request completed")
    load_pct = load_steal_pct(before, after)[0]
    d = {"server": a.server, "scenario": a.scenario, "instances": a.instances, "quota_pct": a.quota_pct,
         "status": "invalid" if problems else "ok", "rps": req / dur if dur else 0.0, "p99_ms": p99,
         "cpu_us_per_req": cpu_s * 1e6 / req if req else 0.0,
         "server_cpu_pct": 100.0 * cpu_s / dur if dur else 0.0, "load_cpu_pct": load_pct,
         "non2xx": non2xx, "socket_errors": serr,
         "reason": "; ".join(problems)}
    w = csv.DictWriter(sys.stdout, fieldnames=INST_COLUMNS, lineterminator="\n")
    w.writerow({k: fmt(v) for k, v in d.items()})


# --------------------------------------------------------------- handshakes
HS_COLUMNS = ["server", "test", "proto", "status", "hs_per_s", "cpu_us_per_hs", "server_cpu_pct",
              "load_cpu_pct", "hs_p50_ms", "hs_p99_ms", "full", "resumed", "resumed_frac", "failures",
              "cert", "cipher", "group", "peak_rss_mib", "steal_pct", "duration_s", "run", "order",
              "reason"]
HS_METRICS = ["hs_per_s", "cpu_us_per_hs", "server_cpu_pct", "load_cpu_pct", "hs_p50_ms", "hs_p99_ms",
              "resumed_frac", "steal_pct"]
HS_TESTS = ["ecdsa-full", "rsa-full", "resumed"]
HS_TABLES = [("hs_per_s", "Handshakes per second (the test's kind: full, or resumed)", 0),
             ("cpu_us_per_hs", "Server CPU per handshake (µs, whole process tree, connection and answer included)", 1),
             ("server_cpu_pct", "Server CPU use (% of one CPU: ~100 = the server was the limit)", 0),
             ("load_cpu_pct", "Load CPU busy (% of CPU_LOAD: ~100 = tlshs was the limit)", 0),
             ("hs_p50_ms", "Handshake latency p50 (ms, connect to handshake done)", 2),
             ("hs_p99_ms", "Handshake latency p99 (ms)", 2),
             ("resumed_frac", "Share of handshakes resumed", 4),
             ("steal_pct", "Steal (% of both CPUs' time the hypervisor gave to others)", 1)]


def parse_tlshs(path):
    """The TLSHS line bench/tlshs.c prints last, and its `first:` error lines."""
    text = open(path).read()
    m = re.search(r"^TLSHS (.*)$", text, re.M)
    if not m:
        raise ValueError("no TLSHS line in tlshs output: " + text[-300:].strip())
    d = kv(m.group(1))
    firsts = re.findall(r"^\s+(\w+): \d+, first: (.*)$", text, re.M)
    return d, firsts


def cmd_hs_columns(a):
    print(",".join(HS_COLUMNS))


def cmd_hs_row(a):
    base = {"server": a.server, "test": a.test, "proto": a.proto, "run": a.run, "order": a.order}
    w = csv.DictWriter(sys.stdout, fieldnames=HS_COLUMNS, lineterminator="\n", extrasaction="ignore")
    if a.status in ("n/a", "failed", "skipped"):
        base.update(status=a.status, reason=a.reason)
        w.writerow({k: fmt(base.get(k, "")) for k in HS_COLUMNS})
        return
    try:
        d, firsts = parse_tlshs(a.out)
        full, resumed = int(d["full"]), int(d["resumed"])
        dur = float(d["duration_s"])
        failures = int(d["failures"])
    except (ValueError, OSError, KeyError) as e:
        base.update(status="failed", reason=f"tlshs output: {e}".replace("\n", " ")[:300])
        w.writerow({k: fmt(base.get(k, "")) for k in HS_COLUMNS})
        return
    before, after = kv(a.before), kv(a.after)
    cpu_s = (int(after["ticks"]) - int(before["ticks"])) / CLK_TCK
    hs = full + resumed
    resumed_test = a.test == "resumed"
    problems = []
    if hs == 0:
        problems.append("no handshake completed")
    if failures:
        kinds = " ".join(f"{k}={d[k]}" for k in ("connect_err", "handshake_err", "io_err", "bad_response",
                                                 "timeout") if d.get(k, "0") != "0")
        problems.append(f"{failures} failures ({kinds}; first: "
                        + "; ".join(f"{k}: {v}" for k, v in firsts)[:200] + ")")
    if a.expect_cert and d.get("cert") not in (a.expect_cert, "-"):
        problems.append(f"server certificate {d.get('cert')}, expected {a.expect_cert}")
    if a.expect_proto and hs and d.get("proto") != a.expect_proto:
        problems.append(f"negotiated {d.get('proto')}, expected {a.expect_proto}")
    if d.get("mixed", "0") != "0":
        problems.append(f"{d['mixed']} handshakes negotiated another protocol, cipher or certificate")
    frac = float(d.get("resumed_frac", 0))
    if resumed_test and hs:
        # the only full handshakes allowed: each slot's first
        offered, miss, no_ticket = (int(d.get(k, 0)) for k in ("resume_offered", "resume_miss", "no_ticket"))
        if not offered:
            problems.append(f"no session to offer: no resumable session after {full} full handshakes")
        elif miss > 0.001 * offered:
            problems.append(f"{miss} of {offered} offered sessions not resumed ({100 * frac:.2f} % resumed)")
        if no_ticket:
            problems.append(f"{no_ticket} full handshakes left no resumable session (no ticket)")
    if not resumed_test and resumed:
        problems.append(f"{resumed} resumed handshakes in a full-handshake test")
    if after.get("cpus") not in (None, "-", a.expect_cpus) and a.expect_cpus:
        problems.append(f"server allowed on CPUs {after.get('cpus')}, expected {a.expect_cpus}")
    load_pct, steal_pct = load_steal_pct(before, after)
    kind = "resumed" if resumed_test else "full"
    base.update(
        status="invalid" if problems else "ok", reason="; ".join(problems),
        hs_per_s=(resumed if resumed_test else full) / dur if dur else 0.0,
        cpu_us_per_hs=cpu_s * 1e6 / hs if hs else 0.0,
        server_cpu_pct=100.0 * cpu_s / dur if dur else 0.0, load_cpu_pct=load_pct, steal_pct=steal_pct,
        hs_p50_ms=float(d.get(f"{kind}_p50_ms", 0)), hs_p99_ms=float(d.get(f"{kind}_p99_ms", 0)),
        full=full, resumed=resumed, resumed_frac=frac, failures=failures,
        cert=d.get("cert", ""), cipher=d.get("cipher", ""), group=d.get("group", ""),
        peak_rss_mib=int(after["hwm_kib"]) / 1024.0, duration_s=dur,
    )
    row = {k: fmt(base.get(k, "")) for k in HS_COLUMNS}
    row["resumed_frac"] = fmt(frac, 4)
    w.writerow(row)


def cmd_hs_report(a):
    rows = read_csv(a.csv)
    out_dir = os.path.dirname(os.path.abspath(a.csv))
    label = lambda r: f"{r['test']} {r['proto']}"
    agg = aggregate(rows, metrics=HS_METRICS, key=lambda r: (r["server"], label(r)))
    servers = ordered(sorted({k[0] for k in agg}), SRV_ORDER)
    protos = ordered(sorted({r["proto"] for r in rows}), ["tls13", "tls12"])
    tests = [f"{t} {p}" for p in protos for t in HS_TESTS if any(k[1] == f"{t} {p}" for k in agg)]
    runs = sorted({r["run"] for r in rows}, key=lambda x: int(x or 0))
    others = [s for s in servers if s != "nginx"]
    md = ["# TLS handshakes", "",
          f"Medians of {len(runs)} runs (rotating server order); only `ok` measurements count. "
          "`ecdsa-full`, `rsa-full`: new full handshakes with the ECDSA P-256 or the RSA 2048 "
          "certificate (one certificate configured per measurement); `resumed`: every connection "
          "offers the session ticket of its slot's first handshake. Each connection makes one "
          "request (`Connection: close`). Ratios are against nginx (handshakes/s: higher is "
          "better; CPU and latency: lower is better).", "",
          "```"] + header_lines(a.csv) + ["```", ""]
    for m, title, nd in HS_TABLES:
        md += [f"## {title}", ""]
        head = ["test"] + servers + ([f"{s} / nginx" for s in others] if "nginx" in servers else [])
        md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for t in tests:
            line = [t] + [cell(agg.get((s, t)), m, nd) for s in servers]
            if "nginx" in servers:
                line += [ratio_text(agg.get((s, t)), agg.get(("nginx", t)), m) if m not in ("resumed_frac", "steal_pct")
                         else "" for s in others]
            md.append("| " + " | ".join(line) + " |")
        md.append("")
    md += ["## Range (min – max over valid runs)", "",
           "| server | test | handshakes/s | CPU µs/handshake | server CPU % | load CPU % |", "|---|---|---|---|---|---|"]
    for srv in servers:
        for t in tests:
            g = agg.get((srv, t))
            if not g or status_of(g) != "ok":
                continue
            rng = lambda m, nd: f"{g[m][1]:.{nd}f} – {g[m][2]:.{nd}f}" if g[m] else "—"
            md.append(f"| {srv} | {t} | {rng('hs_per_s', 0)} | {rng('cpu_us_per_hs', 1)} | "
                      f"{rng('server_cpu_pct', 0)} | {rng('load_cpu_pct', 0)} |")
    md += ["", "## Negotiated", ""]
    seen = {}
    for r in rows:
        if r["status"] in ("ok", "invalid") and r["cipher"]:
            seen.setdefault((r["server"], label(r)), set()).add(f"{r['cipher']}, {r['group']}, {r['cert']}")
    for (srv, t), v in sorted(seen.items()):
        md.append(f"- {srv} / {t}: " + " | ".join(sorted(v)))
    md += ["", "## Not measured and invalid measurements", ""]
    notes = 0
    for srv in servers:
        for t in tests:
            g = agg.get((srv, t))
            if g and g["reasons"]:
                notes += 1
                md.append(f"- {srv} / {t} ({status_of(g)}, {g['n_ok']}/{g['n']} valid): " + "; ".join(g["reasons"]))
    if not notes:
        md.append("- none: every measurement of every server was valid.")
    with open(os.path.join(out_dir, "handshakes.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {out_dir}/handshakes.md")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sp = p.add_subparsers(dest="cmd", required=True)
    s = sp.add_parser("render"); s.add_argument("template"); s.set_defaults(f=cmd_render)
    s = sp.add_parser("snapshot"); s.add_argument("pids", nargs="+")
    s.add_argument("--cpu", default="", help="also report busy/total jiffies of this CPU (the load CPU)")
    s.add_argument("--steal-cpus", default="", help="also report steal/total jiffies of these CPUs (a,b)")
    s.set_defaults(f=cmd_snapshot)
    s = sp.add_parser("columns"); s.set_defaults(f=cmd_columns)
    s = sp.add_parser("row")
    for k in ("server", "scenario"):
        s.add_argument("--" + k, required=True)
    for k in ("order", "status", "reason", "tool", "out", "h2log", "before", "after",
              "upstream-before", "upstream-after", "expect-cpus"):
        s.add_argument("--" + k, default="")
    s.set_defaults(f=cmd_row)
    s = sp.add_parser("aggregate"); s.add_argument("dir"); s.set_defaults(f=cmd_aggregate)
    s = sp.add_parser("inst-columns"); s.set_defaults(f=cmd_inst_columns)
    s = sp.add_parser("inst-row")
    for k in ("server", "scenario", "before", "after", "instances", "quota_pct"):
        s.add_argument("--" + k, default="")
    s.add_argument("outs", nargs="*")
    s.set_defaults(f=cmd_inst_row)
    s = sp.add_parser("inst-report"); s.add_argument("csv"); s.set_defaults(f=cmd_inst_report)
    s = sp.add_parser("hs-columns"); s.set_defaults(f=cmd_hs_columns)
    s = sp.add_parser("hs-row")
    for k in ("server", "test"):
        s.add_argument("--" + k, required=True)
    for k in ("proto", "run", "order", "status", "reason", "out", "before", "after", "expect-cert",
              "expect-proto", "expect-cpus"):
        s.add_argument("--" + k, default="")
    s.set_defaults(f=cmd_hs_row)
    s = sp.add_parser("hs-report"); s.add_argument("csv"); s.set_defaults(f=cmd_hs_report)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
