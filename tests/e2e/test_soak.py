"""The soak harness (bench/soak.py) shortened to 60 s, with its chaos
compressed: a HUP every 15 s (3), a worker SIGKILL at 22 s and 42 s (one of
each index), a rolling restart of the first upstream app and PHP-FPM pool at
37 s. One run (about 80 s) serves every test of the module; its report is
bench/soak.py's report.json.

test_verdict asserts the harness's own verdict; the other tests check the
same report one property at a time, so that a failure says which. The soak
found two server bugs, fixed since, each with a test of its own: HTTP/2
streams of proxied routes never answered while a large file was written on
the same connection (test_h2.py), and a pipe the master left open per reload
(test_no_orphans.py).

The workers compared are two different processes: the first quiet sample's
(8 s of warm-up) and the last one's, of a later generation (15 s old, forked
from the master after the last HUP). A leak in the master shows in the
master's RSS, and in every later worker's, which maps the master's pages:
the report charges a later worker only its own growth (the master's anon
growth subtracted). A worker's own leak must show within its 15 s. Between
two fresh workers the RSS differs by their heaps' high water, which the
load's bursts decide: over 11 runs on 2026-12-06 worker growth was +0.21 to
+2.37 % with no leak, and once the workers were smaller (issue 37: 25 MiB of
RSS, was 32) up to +3.85 % in CI on 2026-12-07, about 700 kB of it their
own, while malloc_trim(0) gives back 0.7-0.9 MiB of a worker's heap after
a burst. So the RSS may grow by 3 % (MAX_GROWTH) or by bench/soak.py's
--heap-slack (1 MiB), the descriptors by 3 %; bench/soak.py's long runs
allow 2 % or the same 1 MiB. Both kills come before the last HUP, so that the
workers compared at the end, like the first ones, never took over a killed
sibling's clients (with a kill at 52 s, worker 0 of the last generation
absorbed worker 1's reconnecting clients: the +2.37 %).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.e2e.conftest import ROOT

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

# 3 %: see the docstring (the long soak keeps bench/soak.py's default 2 %).
MAX_GROWTH = 3.0
SLACK_KB = 1024  # bench/soak.py's --heap-slack default
ARGS = ["--duration", "60", "--warmup", "8", "--timeout", "6",
        "--hup-every", "15", "--kill-every", "20", "--first-kill", "22",
        "--upstream-every", "60", "--first-upstream", "37", "--max-growth", str(MAX_GROWTH)]
KINDS = ("static", "proxy", "cache-hit", "cache-miss", "php", "ws")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("soak")
    # BENCH_LOCK=none: a benchmark running on the box does not hold the test up.
    proc = subprocess.run([sys.executable, "bench/soak.py", *ARGS, "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=220,
                          env={**os.environ, "BENCH_LOCK": "none"})
    path = out / "report.json"
    assert path.exists(), f"no report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    rep = json.loads(path.read_text())
    rep["exit_status"] = proc.returncode
    rep["output"] = proc.stdout + proc.stderr
    return rep


def failed_checks(rep):
    return [c for c in rep["checks"] if not c["ok"]]


def test_verdict(report):
    assert report["verdict"] == "PASS", failed_checks(report)
    assert report["exit_status"] == 0, report["output"]


def test_exit_status_follows_the_verdict(report):
    assert report["exit_status"] == (0 if report["verdict"] == "PASS" else 1), report["output"]


def test_every_kind_and_protocol_was_sent(report):
    rows = report["requests"]["rows"]
    for kind in KINDS:
        assert report["requests"]["by_kind"].get(kind, {}).get("sent", 0) > 0, kind
        protos = {r["proto"] for r in rows if r["kind"] == kind and r["sent"] > 0}
        want = {"h1", "h1-tls"} if kind == "ws" else {"h1", "h1-tls", "h2"}
        assert protos == want, (kind, protos)
    # The default rate: far more than a token of each.
    assert report["requests"]["soak_sent"] > 30000, report["requests"]


def test_every_event_happened(report):
    events = report["events"]
    assert [e["kind"] for e in events] == ["hup", "kill", "hup", "upstream", "kill", "hup"], events
    assert all(e["ok"] for e in events), events
    kills = [e for e in events if e["kind"] == "kill"]
    assert sorted(e["worker"] for e in kills) == [0, 1], kills
    assert all(e["replacement"] != e["pid"] for e in kills), kills
    assert all("generation" in e["detail"] for e in events if e["kind"] == "hup"), events


def test_no_unexpected_failure(report):
    """Only requests in flight on a killed worker may fail."""
    unexpected = [f for f in report["failures"] if not f["expected"]]
    assert not unexpected, unexpected[:20]


def test_expected_failures_are_the_kills(report):
    """Every expected failure is a transport error on a connection the
    killed worker held, observed after that kill."""
    kills = {e["kill_no"]: e for e in report["events"] if e["kind"] == "kill"}
    for f in report["failures"]:
        if f["expected"]:
            assert f["killed_by"] in kills, f
            assert f["category"] in ("reset", "eof", "tls", "io", "timeout"), f
            assert f["t_end"] >= kills[f["killed_by"]]["t"], f


def test_resources(report):
    for r in report["resources"]:
        if r["role"] == "tls keeper":
            continue  # one per generation: compared in the report only
        assert r["start"] and r["end"], r
        assert r["rss_own_growth_pct"] < MAX_GROWTH or r["rss_own_growth_kb"] < SLACK_KB, r
        assert r["inherited_kb"] == 0 or r["start"]["pid"] != r["end"]["pid"], r
        assert r["fds_not_conn_growth_pct"] < MAX_GROWTH, r


def test_no_client_connection_left(report):
    """The workers close every client connection the load closed."""
    for r in report["resources"]:
        if r["role"].startswith("worker"):
            assert not r["end"]["client_ports"], r["end"]


def test_no_crash_and_a_clean_stop(report):
    log = report["error_log"]["whole_run"]
    assert not log["crashes"], log["crashes"]
    assert log["tracebacks"] == 0, log
    assert log["by_level"].get("crit", 0) == 0, log["messages"]
    stop = [c for c in report["checks"] if c["check"] == "scalwsd stops cleanly on TERM"]
    assert stop and stop[0]["ok"], stop
