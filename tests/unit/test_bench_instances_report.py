"""bench/lib/benchlib.py inst-report: the table bench/instances.sh prints
is the median of each cell's ok runs (it once printed the last run)."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCHLIB = REPO / "bench" / "lib" / "benchlib.py"
COLUMNS = ("server,scenario,instances,quota_pct,status,rps,p99_ms,cpu_us_per_req,"
           "server_cpu_pct,load_cpu_pct,non2xx,socket_errors,reason")


def report(tmp_path, rows):
    csv = tmp_path / "instances.csv"
    csv.write_text("# command: test\n" + COLUMNS + "\n" + "".join(r + "\n" for r in rows))
    out = subprocess.run([sys.executable, str(BENCHLIB), "inst-report", str(csv)],
                         capture_output=True, text=True, check=True).stdout
    assert (tmp_path / "instances.md").read_text().endswith(out)
    return {tuple(c.strip() for c in line.split("|")[1:4]): [c.strip() for c in line.split("|")[1:-1]]
            for line in out.splitlines() if line.startswith("| s") and "server" not in line}


def test_each_cell_is_the_median_of_its_ok_runs(tmp_path):
    cells = report(tmp_path, [
        # three runs of one instance, the last the slowest: the median is the middle one
        "srv,respond,1,25,ok,100,1.0,10.0,25.0,30.0,0,0,",
        "srv,respond,1,25,ok,300,3.0,30.0,25.0,30.0,0,0,",
        "srv,respond,1,25,ok,50,9.0,90.0,25.0,30.0,0,0,",
        # three instances: a failed run does not count, errors of ok runs add up
        "srv,respond,3,25,ok,600,2.0,10.0,75.0,80.0,1,0,",
        "srv,respond,3,25,failed,,,,,,,,instance 2 did not start",
        "srv,respond,3,25,ok,500,4.0,12.0,75.0,80.0,0,2,",
    ])
    one = cells[("srv", "respond", "1")]
    assert one[4] == "3" and one[5] == "100 (50–300)" and one[6] == "3.00" and one[7] == "30.00"
    three = cells[("srv", "respond", "3")]
    assert three[4] == "2" and three[5] == "550 (500–600)"
    assert three[10] == "3"                              # 1 non-2xx + 2 socket errors
    assert three[11] == "1.83"                           # 550 / (3 x 100), from the medians
    assert three[12] == "ok (1 run(s) not ok)"


def test_a_cell_without_an_ok_run_says_why(tmp_path):
    cells = report(tmp_path, [
        "srvx,tls-respond,1,60,n/a,,,,,,,,srvx: not installed",
        "srvx,tls-respond,1,60,n/a,,,,,,,,srvx: not installed",
    ])
    row = cells[("srvx", "tls-respond", "1")]
    assert row[4] == "0" and row[5] == "" and row[12] == "n/a: srvx: not installed"
