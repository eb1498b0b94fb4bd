"""The shared counters and the `status:` listener (issue 20): real scalwsd
processes, real traffic, the counters read from the file by this process
(stats.read), /metrics parsed strictly, /status, and a real Prometheus."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest

from scalws.control import stats
from tests.e2e.conftest import free_port, read_response, until

CONFIG = """\
workers: 2
status: {{listen: "127.0.0.1:{port2}", file: "{tmp}/stats.bin"}}
upstreams:
  dead: {{servers: ["127.0.0.1:{port3}"]}}
sites:
  - listen: "127.0.0.1:{port}"
    server_names: [example.org]
    routes:
      - {{path: /, respond: {{status: 200, body: "hello\\n"}}}}
      - {{path: /missing, respond: {{status: 404, body: "no\\n"}}}}
      - {{path: /px/, proxy: {{upstream: dead}}}}
"""


def get(port, path, host="example.org"):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        status, headers, body, _ = read_response(s)
        return status, headers, body


# A strict parser of the text exposition format 0.0.4 (enough for ours).
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
                    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*)?\})? '
                    r'([-+]?(?:[0-9.]+(?:e[-+]?[0-9]+)?|Inf|NaN))$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """{family: {"type": t, "samples": [(name, labels, value)]}}; raises on
    anything the format does not allow."""
    assert text.endswith("\n")
    fams, current = {}, None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert name not in fams, f"family {name} twice"
            current = fams[name] = {"type": None, "samples": []}
        elif line.startswith("# TYPE "):
            _, _, name, t = line.split(" ")
            assert t in ("counter", "gauge", "histogram") and name in fams
            fams[name]["type"] = t
        else:
            m = SAMPLE.match(line)
            assert m, f"bad sample line {line!r}"
            name = m.group(1)
            fam = next(f for f in (name, re.sub(r"_(bucket|sum|count)$", "", name)) if f in fams)
            assert fams[fam] is current, f"{name} outside its family"
            labels = dict(LABEL.findall(m.group(2) or ""))
            current["samples"].append((name, labels, float(m.group(3).replace("Inf", "inf"))))
    for name, f in fams.items():
        if f["type"] == "histogram":
            by = {}
            for n, lab, v in f["samples"]:
                if n.endswith("_bucket"):
                    key = tuple(sorted((k, x) for k, x in lab.items() if k != "le"))
                    by.setdefault(key, []).append((lab["le"], v))
            for key, buckets in by.items():
                assert buckets[-1][0] == "+Inf"
                vals = [v for _, v in buckets]
                assert vals == sorted(vals), f"{name}{key}: buckets not cumulative"
    return fams


def value(fams, name, **labels):
    fam = re.sub(r"_(bucket|sum|count)$", "", name)
    fam = fam if fam in fams else name
    for n, lab, v in fams[fam]["samples"]:
        if n == name and all(lab.get(k) == x for k, x in labels.items()):
            return v
    raise KeyError((name, labels))


@pytest.fixture
def srv(server):
    s = server(CONFIG)
    s.stats = str(s.tmp / "stats.bin")
    s.status_port = s.ports[1]
    return s


def test_counters_move_with_traffic_and_sum_over_workers(srv):
    n = 20
    for _ in range(n):
        assert get(srv.port, "/")[0] == 200
        assert get(srv.port, "/missing")[0] == 404
        assert get(srv.port, "/px/a")[0] in (502, 503)
    d = until(lambda: (lambda d: d["requests"] >= 3 * n and d)(stats.read(srv.stats)),
              what="the requests in the counters")
    assert d["requests"] == 3 * n
    assert d["requests_by_class"] == {"1xx": 0, "2xx": n, "3xx": 0, "4xx": n, "5xx": n}
    assert d["routes"]["example.org/"]["requests"] == n
    assert d["routes"]["example.org/missing"]["requests"] == n
    assert d["routes"]["example.org/px/"]["duration"]["count"] == n
    assert d["request_duration"]["count"] == 3 * n
    assert d["request_duration"]["buckets"][-1][1] == 3 * n
    up = d["upstreams"]["dead"]
    assert up["requests"] >= n and up["errors"] >= n
    assert up["servers_up"] + up["servers_down"] == 1
    # Each request line and Host is at least 40 bytes; answers more.
    assert d["bytes_in"] >= 3 * n * 40 and d["bytes_out"] >= 3 * n * 60
    assert d["connections_accepted"] == 3 * n
    assert len(d["workers"]) == 2
    assert sum(w["requests"] for w in d["workers"]) == d["requests"]
    assert all(w["requests"] > 0 for w in d["workers"])  # 60 connections over 2 reuseport sockets
    assert all(w["pid"] in srv.workers() for w in d["workers"])


def test_keepalive_connections_are_active_and_idle(srv):
    socks = []
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(b"GET / HTTP/1.1\r\nHost: example.org\r\n\r\n")
        assert read_response(s)[0] == 200
        socks.append(s)
    until(lambda: (lambda d: d["connections_active"] == 5 and d["connections_idle"] == 5)(
        stats.read(srv.stats)), what="5 active idle connections")
    for s in socks:
        s.close()
    until(lambda: stats.read(srv.stats)["connections_active"] == 0, what="no connections")


def test_busy_time_grows_under_load(srv):
    before = stats.read(srv.stats)
    req = b"GET / HTTP/1.1\r\nHost: example.org\r\n\r\n"
    for _ in range(10):  # 200 requests per connection: under keepalive_requests
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            for _ in range(10):
                s.sendall(req * 20)
                buf = b""
                for _ in range(20):
                    _, _, _, buf = read_response(s, buf)
    after = until(lambda: (lambda d: d["requests"] >= before["requests"] + 2000 and d)(
        stats.read(srv.stats)), what="2000 requests")
    assert after["busy_ns"] > before["busy_ns"]
    assert after["idle_ns"] > before["idle_ns"]


def test_metrics_and_status_endpoints(srv):
    for _ in range(3):
        get(srv.port, "/")
    until(lambda: stats.read(srv.stats)["requests"] >= 3)
    st, headers, body = get(srv.status_port, "/metrics", host="localhost")
    assert st == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    fams = parse_metrics(body.decode())
    assert value(fams, "scalws_requests_total", status_class="2xx") == 3
    assert value(fams, "scalws_request_duration_seconds_count") == 3
    assert value(fams, "scalws_route_request_duration_seconds_bucket", route="example.org/",
                 le="+Inf") == 3
    assert value(fams, "scalws_connections", state="active") >= 0
    assert value(fams, "scalws_loop_busy_seconds_total", worker="1") >= 0
    assert value(fams, "scalws_upstream_servers", upstream="dead", state="up") == 1
    assert fams["scalws_requests_total"]["type"] == "counter"
    assert fams["scalws_request_duration_seconds"]["type"] == "histogram"
    st, headers, body = get(srv.status_port, "/status", host="localhost")
    assert st == 200 and headers["content-type"] == "application/json"
    j = json.loads(body)
    assert j["requests_by_class"]["2xx"] == 3 and len(j["workers"]) == 2
    assert {"busy_ns", "idle_ns"} <= set(j["workers"][0])
    assert get(srv.status_port, "/nope", host="localhost")[0] == 404


def test_a_restarted_worker_keeps_the_totals(srv):
    for _ in range(20):
        get(srv.port, "/")
    d = until(lambda: (lambda d: d["requests"] >= 20 and d)(stats.read(srv.stats)))
    victim = d["workers"][0]
    other = d["workers"][1]
    os.kill(victim["pid"], signal.SIGKILL)
    after = until(lambda: (lambda d: d["workers"][0]["pid"] not in (0, victim["pid"]) and d)(
        stats.read(srv.stats)), what="worker 0 restarted")
    assert after["workers"][1]["requests"] == other["requests"]
    assert after["workers"][0]["requests"] == victim["requests"]  # its slot continues
    assert after["requests"] == d["requests"]


def test_status_listener_refuses_addresses_not_allowed(server):
    s = server(CONFIG.replace('file: "{tmp}/stats.bin"', "allow: [10.0.0.0/8]"))
    st, _, body = get(s.ports[1], "/metrics", host="localhost")
    assert st == 403 and b"scalws_" not in body


def test_anonymous_block_and_stats_file_option(server, tmp_path):
    """Without a file the block is anonymous; --stats-file makes one, removed at exit."""
    s = server(CONFIG.replace(', file: "{tmp}/stats.bin"', ""))
    assert get(s.ports[1], "/metrics", host="localhost")[0] == 200
    assert not (tmp_path / "stats.bin").exists()


@pytest.mark.skipif(not shutil.which("prometheus"), reason="Debian's prometheus is not installed "
                    "(make sysdeps installs it)")
def test_scraped_by_a_real_prometheus(srv, tmp_path):
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: scalws\n"
                   f"    static_configs: [{{targets: ['127.0.0.1:{srv.status_port}']}}]\n")
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen(["prometheus", f"--config.file={cfg}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(7):
            get(srv.port, "/")

        def query():
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(
                {"query": 'sum(scalws_requests_total{status_class="2xx"})'})
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    res = json.load(r)["data"]["result"]
            except OSError:
                return None
            return res and float(res[0]["value"][1]) >= 7 and res
        res = until(query, timeout=30, what="Prometheus to scrape the counters")
        assert float(res[0]["value"][1]) == 7
    finally:
        prom.send_signal(signal.SIGTERM)
        prom.wait(20)
        log.close()
