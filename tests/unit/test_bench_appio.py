"""bench/lib/appio.py: what a server made the application do per request
(bench/run.sh APP_IO_OUT), from two snapshots and wrk's BENCH line."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APPIO = os.path.join(ROOT, "bench", "lib", "appio.py")


def appio(*args) -> str:
    return subprocess.run([sys.executable, APPIO, *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_a_snapshot_counts_this_process_and_the_machines_connects():
    snap = dict(kv.split("=") for kv in appio("snap", str(os.getpid())).split())
    assert set(snap) == {"rchar", "wchar", "syscr", "syscw", "active_opens"}
    assert all(int(v) >= 0 for v in snap.values())
    assert int(snap["syscr"]) > 0  # this interpreter has read its modules


def test_a_row_is_per_request_and_leaves_the_loads_own_connections_out(tmp_path):
    out = tmp_path / "load.txt"
    out.write_text("Running 6s test\nBENCH requests=1000 duration_us=6000000 bytes=1 status=0 connect=0 "
                   "read=0 write=0 timeout=0 p50_us=1 p90_us=1 p99_us=2 p999_us=2 max_us=3 mean_us=1.0\n")
    before = "rchar=100 wchar=50 syscr=10 syscw=5 active_opens=1000"
    after = "rchar=531100 wchar=86050 syscr=7010 syscw=2005 active_opens=1104"
    row = appio("row", "--server", "scalws", "--scenario", "php", "--out", str(out),
                "--before", before, "--after", after, "--conns", "64")
    header = appio("header").split(",")
    assert dict(zip(header, row.split(","))) == {
        "server": "scalws", "scenario": "php", "requests": "1000",
        "app_read_bytes": "531.0", "app_write_bytes": "86.0", "app_reads": "7.000",
        "app_writes": "2.000", "upstream_connects": "40", "requests_per_connect": "25.0"}
    # no connection beyond the load's own: nothing to divide by
    row = appio("row", "--server", "nginx", "--scenario", "node", "--out", str(out),
                "--before", before, "--after", after.replace("1104", "1064"), "--conns", "64")
    assert row.endswith(",0,")
