#!/usr/bin/env python3
"""Rows, medians, table and chart of bench/concurrency.sh (split from
benchlib.py, whose helpers it uses).

Subcommands (called by bench/concurrency.sh):
  columns                              the CSV header line
  pss PID...                           Pss (smaps_rollup) and VmRSS of the PIDs' process trees, KiB
  row ...                              one row from a step's wrk outputs and snapshots
  report CSV                           concurrency.md (medians over the runs, ranges) and concurrency.png
"""
import argparse
import csv
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import CLK_TCK, fmt, header_lines, kv, parse_wrk, proc_table, read_csv, status_kib, tree  # noqa: E402

COLUMNS = ["server", "scenario", "clients", "wrk_procs", "status", "rps", "p99_ms", "non2xx",
           "socket_errors", "connect_err", "read_err", "write_err", "timeout_err",
           "established", "rss_before_mib", "rss_after_mib", "peak_rss_mib",
           "cpu_us_per_req", "rss_mid_mib", "pss_mid_mib", "run", "reason"]


def pss_kib(pid):
    """Proportional set size: each page shared by n processes counts 1/n
    (a forked tree's shared interpreter pages count once in the sum)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cmd_columns(a):
    print(",".join(COLUMNS))


def cmd_pss(a):
    table = proc_table()
    members = [m for p in a.pids for m in tree(int(p), table)]
    print(f"pss_kib={sum(pss_kib(p) for p in members)} "
          f"rss_kib={sum(status_kib(p, 'VmRSS') for p in members)}")


def cmd_row(a):
    req = non2xx = 0
    errs = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    dur = 0.0
    p99 = 0.0
    problems = []
    for f in a.outs:
        try:
            r = parse_wrk(f)
        except (ValueError, OSError, KeyError) as e:
            problems.append(f"{os.path.basename(f)}: {e}"[:200].replace("\n", " "))
            continue
        req += r["requests"]
        non2xx += r["non2xx"]
        for k in errs:
            errs[k] += r["errors"][k]
        dur = max(dur, r["duration_s"])
        p99 = max(p99, r["p99_ms"])
    before, after, mid, mem = kv(a.before), kv(a.after), kv(a.mid), kv(a.mem)
    cpu_s = (int(after["ticks"]) - int(before["ticks"])) / CLK_TCK
    serr = sum(errs.values())
    if non2xx:
        problems.append(f"{non2xx} non-2xx")
    if serr:
        problems.append("socket errors " + " ".join(f"{k}={v}" for k, v in errs.items() if v))
    if not req and not problems:
        problems.append("no request answered (with TLS: the step too short for its handshakes?)")
    if a.established < a.clients:
        problems.append(f"only {a.established} of {a.clients} connections established at mid-step")
    d = {"server": a.server, "scenario": a.scenario, "clients": a.clients, "wrk_procs": len(a.outs),
         "status": "invalid" if problems else "ok", "rps": req / dur if dur else 0.0,
         "p99_ms": p99, "non2xx": non2xx, "socket_errors": serr,
         "connect_err": errs["connect"], "read_err": errs["read"], "write_err": errs["write"],
         "timeout_err": errs["timeout"], "established": a.established,
         "rss_before_mib": int(before["rss_kib"]) / 1024.0,
         "rss_after_mib": int(after["rss_kib"]) / 1024.0,
         "peak_rss_mib": max(int(after["hwm_kib"]), int(mid.get("hwm_kib", 0))) / 1024.0,
         "cpu_us_per_req": cpu_s * 1e6 / req if req else 0.0,
         "rss_mid_mib": int(mem.get("rss_kib", 0)) / 1024.0,
         "pss_mid_mib": int(mem.get("pss_kib", 0)) / 1024.0,
         "run": a.run, "reason": "; ".join(problems)}
    w = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    w.writerow({k: fmt(v) for k, v in d.items()})


def cell(rows):
    """One (server, scenario, clients) cell over its runs: medians of the
    ok runs and their ranges; errors summed over every run."""
    ok = [r for r in rows if r["status"] == "ok"]
    use = ok or rows
    med = {k: statistics.median(float(r[k] or 0) for r in use)
           for k in ("rps", "p99_ms", "cpu_us_per_req", "peak_rss_mib", "rss_mid_mib", "pss_mid_mib")}
    rng = {k: (min(float(r[k] or 0) for r in use), max(float(r[k] or 0) for r in use))
           for k in ("rps", "cpu_us_per_req")}
    bad = [r for r in rows if r["status"] != "ok"]
    return {**med, "range": rng, "runs": len(rows), "ok": len(ok),
            "established": min(int(r["established"] or 0) for r in rows),
            "non2xx": sum(int(r["non2xx"] or 0) for r in rows),
            "socket_errors": sum(int(r["socket_errors"] or 0) for r in rows),
            "reason": bad[-1]["reason"] if bad else ""}


def cmd_report(a):
    rows = read_csv(a.csv)
    out_dir = os.path.dirname(os.path.abspath(a.csv))
    groups, na = {}, []
    for r in rows:
        if r["status"] in ("n/a", "failed"):
            na.append(r)
            continue
        groups.setdefault((r["server"], r["scenario"]), {}).setdefault(int(r["clients"]), []).append(r)
    nruns = max((len(rs) for g in groups.values() for rs in g.values()), default=0)
    md = ["# Concurrency sweep", "", "```"] + header_lines(a.csv) + ["```", "",
          f"Medians of {nruns} run(s) per step (rotating server order), the range in brackets. "
          "RSS and PSS: the server's process tree in the middle of the step (PSS counts a page "
          "shared by n processes 1/n, so a forked tree's shared pages count once); peak: the "
          "sum of the processes' VmHWM.", "",
          "| server | scenario | clients | established | rps | CPU µs/req | p99 ms | non-2xx | "
          "socket errors | RSS / PSS MiB | peak RSS MiB | ok runs |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in na:
        md.append(f"| {r['server']} | {r['scenario']} | {r['clients']} | | | | | | | | | "
                  f"{r['status']}: {r['reason']} |")
    cells = {}
    for (srv, sc), steps in groups.items():
        for c in sorted(steps):
            x = cells[srv, sc, c] = cell(steps[c])
            (r0, r1), (c0, c1) = x["range"]["rps"], x["range"]["cpu_us_per_req"]
            md.append(f"| {srv} | {sc} | {c} | {x['established']} | {x['rps']:,.0f} "
                      f"[{r0:,.0f}-{r1:,.0f}] | {x['cpu_us_per_req']:.2f} [{c0:.2f}-{c1:.2f}] | "
                      f"{x['p99_ms']:.1f} | {x['non2xx']} | {x['socket_errors']} | "
                      f"{x['rss_mid_mib']:.1f} / {x['pss_mid_mib']:.1f} | {x['peak_rss_mib']:.1f} | "
                      f"{x['ok']}/{x['runs']}{': ' + x['reason'] if x['reason'] else ''} |")
    servers = sorted({s for s, _ in groups})
    if "nginx" in servers and len(servers) > 1:
        md += ["", "## Against nginx (ratios of the medians)", "",
               "| server | scenario | clients | rps | CPU per request | RSS | PSS |", "|---|---|---|---|---|---|---|"]
        for (srv, sc, c), x in sorted(cells.items()):
            n = cells.get(("nginx", sc, c))
            if srv == "nginx" or not n:
                continue
            q = lambda k: f"{x[k] / n[k]:.2f}" if n[k] else "-"  # noqa: E731
            md.append(f"| {srv} | {sc} | {c} | {q('rps')} | {q('cpu_us_per_req')} | "
                      f"{q('rss_mid_mib')} | {q('pss_mid_mib')} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
        for (srv, sc), steps in groups.items():
            xs = sorted(steps)
            ax1.plot(xs, [cells[srv, sc, c]["rps"] for c in xs], marker="o", label=f"{srv} {sc}")
            ax2.plot(xs, [cells[srv, sc, c]["cpu_us_per_req"] for c in xs], marker="o", label=f"{srv} {sc}")
        for ax, t in ((ax1, "requests per second (median)"), (ax2, "server CPU µs per request (median)")):
            ax.set_xscale("log")
            ax.set_xlabel("concurrent keep-alive clients")
            ax.set_title(t)
            ax.grid(True, alpha=0.3)
        ax1.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "concurrency.png"), dpi=110)
        md += ["", "![concurrency](concurrency.png)"]
    except ImportError:
        md += ["", "(matplotlib missing: no chart)"]
    with open(os.path.join(out_dir, "concurrency.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {out_dir}/concurrency.md")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = p.add_subparsers(required=True)
    s = sp.add_parser("columns"); s.set_defaults(f=cmd_columns)
    s = sp.add_parser("pss"); s.add_argument("pids", nargs="+"); s.set_defaults(f=cmd_pss)
    s = sp.add_parser("row")
    for k in ("server", "scenario", "before", "after", "mid", "mem", "run"):
        s.add_argument("--" + k, default="")
    s.add_argument("--clients", type=int, required=True)
    s.add_argument("--established", type=int, default=0)
    s.add_argument("outs", nargs="*")
    s.set_defaults(f=cmd_row)
    s = sp.add_parser("report"); s.add_argument("csv"); s.set_defaults(f=cmd_report)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
