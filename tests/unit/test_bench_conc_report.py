"""bench/lib/conclib.py: concurrency.sh's report is the median of each
step's runs with their range and ratios to nginx, PSS beside RSS; a step
that answered nothing is not `ok`."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONCLIB = REPO / "bench" / "lib" / "conclib.py"


def conclib(*args):
    return subprocess.run([sys.executable, str(CONCLIB), *args], capture_output=True, text=True, check=True).stdout


def row(srv, clients, run, rps, cpu, rss, pss, status="ok", reason=""):
    # server,scenario,clients,wrk_procs,status,rps,p99_ms,non2xx,socket_errors,connect_err,read_err,
    # write_err,timeout_err,established,rss_before_mib,rss_after_mib,peak_rss_mib,cpu_us_per_req,
    # rss_mid_mib,pss_mid_mib,run,reason
    return (f"{srv},static-small,{clients},1,{status},{rps},5.0,0,0,0,0,0,0,{clients},"
            f"{rss},{rss},{rss},{cpu},{rss},{pss},{run},{reason}")


def report(tmp_path, rows):
    csv = tmp_path / "concurrency.csv"
    csv.write_text("# command: test\n" + conclib("columns") + "".join(r + "\n" for r in rows))
    conclib("report", str(csv))
    md = (tmp_path / "concurrency.md").read_text().split("## Against nginx")[0]
    return {tuple(c.strip() for c in line.split("|")[1:4]): [c.strip() for c in line.split("|")[1:-1]]
            for line in md.splitlines() if line.startswith("| ") and "---" not in line and "server" not in line}


def test_medians_ranges_and_ratios(tmp_path):
    cells = report(tmp_path, [
        row("scalws", 40000, 1, 70000, 12.0, 140, 60),
        row("scalws", 40000, 2, 90000, 10.0, 142, 61),
        row("scalws", 40000, 3, 60000, 14.0, 141, 62),
        row("nginx", 40000, 1, 50000, 15.0, 80, 70),
        row("nginx", 40000, 2, 55000, 13.0, 82, 72),
        row("nginx", 40000, 3, 40000, 20.0, 90, 71),
    ])
    s = cells[("scalws", "static-small", "40000")]
    assert s[4] == "70,000 [60,000-90,000]"
    assert s[5] == "12.00 [10.00-14.00]"
    assert s[9] == "141.0 / 61.0"
    assert s[11] == "3/3"
    # the ratio table: the same key, other columns
    md = (tmp_path / "concurrency.md").read_text()
    ratio = next(line for line in md.splitlines() if line.startswith("| scalws | static-small | 40000 | 1.40"))
    assert [c.strip() for c in ratio.split("|")[4:8]] == ["1.40", "0.80", "1.72", "0.86"]


def test_failed_runs_are_not_medians_but_are_reported(tmp_path):
    cells = report(tmp_path, [
        row("scalws", 1000, 1, 100000, 8.0, 130, 45),
        row("scalws", 1000, 2, 10, 99.0, 130, 45, status="invalid", reason="socket errors timeout=5"),
        row("scalws", 1000, 3, 120000, 7.0, 130, 45),
    ])
    s = cells[("scalws", "static-small", "1000")]
    assert s[4] == "110,000 [100,000-120,000]"
    assert s[11] == "2/3: socket errors timeout=5"


def test_a_step_without_answers_is_invalid(tmp_path):
    snap = "ticks=100 hwm_kib=1024 rss_kib=1024"
    out = tmp_path / "wrk.txt"
    out.write_text("BENCH requests=0 duration_us=5000000 p50_us=0 p99_us=0 status=0 connect=0 read=0 "
                   "write=0 timeout=0\n")
    line = conclib("row", "--server", "scalws", "--scenario", "tls-static-small", "--clients", "64",
                   "--established", "64", "--before", snap, "--mid", snap, "--after", snap,
                   "--mem", "pss_kib=2048 rss_kib=4096", "--run", "1", str(out))
    fields = line.strip().split(",")
    assert fields[4] == "invalid" and "no request answered" in line
    assert fields[18:21] == ["4.00", "2.00", "1"]
