#!/usr/bin/env python3
"""What a server makes the application do, per request (bench/run.sh with
APP_IO_OUT=FILE, on the php, node and python scenarios; issue 36).

    appio.py snap PID...      one line: the I/O counters of the PIDs and all
                              their descendants (/proc/PID/io: rchar, wchar,
                              syscr, syscw, which count socket reads and
                              writes too) and the machine's TCP active opens
                              (/proc/net/snmp: connect()s that started)
    appio.py row --server S --scenario X --out WRK_OUTPUT --before SNAP --after SNAP
                              one CSV row per measurement, per request:
                              bytes the application read (the request as it
                              arrives: head, FastCGI records) and wrote,
                              its read and write calls, and the upstream
                              connections the server opened (active opens
                              less the load's own connections, CONNS)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import parse_wrk, proc_table, tree  # noqa: E402

COLUMNS = ["server", "scenario", "requests", "app_read_bytes", "app_write_bytes",
           "app_reads", "app_writes", "upstream_connects", "requests_per_connect"]


def tcp_active_opens():
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("ActiveOpens")])


def cmd_snap(a):
    total = {"rchar": 0, "wchar": 0, "syscr": 0, "syscw": 0}
    table = proc_table()
    # each root's tree (PHP-FPM's children share their master's process group)
    for pid in {p for root in a.pids for p in tree(int(root), table)}:
        try:
            with open(f"/proc/{pid}/io") as f:
                for line in f:
                    k, v = line.split(":")
                    if k in total:
                        total[k] += int(v)
        except OSError:
            continue
    total["active_opens"] = tcp_active_opens()
    print(" ".join(f"{k}={v}" for k, v in total.items()))


def cmd_row(a):
    b = dict(x.split("=") for x in a.before.split())
    e = dict(x.split("=") for x in a.after.split())
    d = {k: int(e[k]) - int(b[k]) for k in b}
    n = parse_wrk(a.out)["requests"] or 1
    connects = max(0, d["active_opens"] - a.conns)
    row = [a.server, a.scenario, n, f"{d['rchar'] / n:.1f}", f"{d['wchar'] / n:.1f}",
           f"{d['syscr'] / n:.3f}", f"{d['syscw'] / n:.3f}", connects,
           f"{n / connects:.1f}" if connects else ""]
    print(",".join(str(x) for x in row))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sp = p.add_subparsers(dest="cmd", required=True)
    s = sp.add_parser("snap")
    s.add_argument("pids", nargs="+")
    s.set_defaults(f=cmd_snap)
    s = sp.add_parser("header")
    s.set_defaults(f=lambda a: print(",".join(COLUMNS)))
    s = sp.add_parser("row")
    for k in ("server", "scenario", "out", "before", "after"):
        s.add_argument("--" + k, required=True)
    s.add_argument("--conns", type=int, default=64, help="the load's own connections")
    s.set_defaults(f=cmd_row)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
