"""The error log's budget under a storm of one failure (issue 30): one line
per cause and upstream per second, the lines folded into it counted on the
key's next line (`... (and N more like this in the last 1s)`) or on a line
of their own from the tick once the storm stops (`N more like this in the
last 1s: <the line they were like>`), so that no failure goes uncounted.
The access log still has every request.
"""
from __future__ import annotations

import collections
import json
import os
import re
import socket
import subprocess
import time

import pytest

from tests.e2e.test_fastcgi import fcgi_yaml
from tests.e2e.upstreams.fixtures import free_port
from tests.tlspki import PKI

pytestmark = pytest.mark.timeout(60)

SECONDS = 3
WORKER_LINE = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) \[\w+\] \d+#\d+: (.*)$")
CARRIED = re.compile(r" \(and (\d+) more like this in the last \d+s\)$")
SUMMARY = re.compile(r"^(\d+) more like this in the last \d+s: (.*)$")


def tally(log: str, cause: str, needle: str = ""):
    """The worker lines of `cause` (their text starts with it and holds
    `needle`): (lines written, lines folded, {second: lines written},
    {seconds whose lines carry a folded count})."""
    written, folded, per_second, carriers = 0, 0, collections.Counter(), set()
    for line in log.splitlines():
        m = WORKER_LINE.match(line)
        if not m:
            continue
        when, text = m.groups()
        s = SUMMARY.match(text)
        if s:
            if s.group(2).startswith(cause) and needle in s.group(2):
                folded += int(s.group(1))
                carriers.add(when)
            continue
        if not (text.startswith(cause) and needle in text):
            continue
        written += 1
        per_second[when] += 1
        c = CARRIED.search(text)
        if c:
            folded += int(c.group(1))
            carriers.add(when)
    return written, folded, per_second, carriers


def answered(access_path, path, status) -> int:
    try:
        with open(access_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return 0
    return text.count(f'"GET {path} HTTP/1.1" {status} ')


def settle(srv, causes, access, timeout=2.5):
    """Waits until, for every (cause, needle, path, status), the lines written
    plus those folded equal the path's answers with that status in the
    access log; returns the log. The tick writes a stopped storm's count
    within about a second."""
    deadline = time.monotonic() + timeout
    while True:
        log = srv.log()
        got = [(sum(tally(log, c, n)[:2]), answered(access, p, s)) for c, n, p, s in causes]
        if all(a == b and b > 0 for a, b in got) or time.monotonic() > deadline:
            return log, got
        time.sleep(0.1)


def test_an_upstream_outage_logs_a_line_per_cause_per_second(server, fault_proxy):
    """Two proxy routes, both down for the whole storm: one to a closed port
    (connect refused), one to an upstream that resets every connection once
    it read the request. Each failed request logs its failure and, its one
    server tried (retries: 1, the default), `no live upstreams`: four causes."""
    dead = f"127.0.0.1:{free_port()}"
    resets = fault_proxy(free_port(), mode="reset_after_request")
    cfg = {
        "workers": 1,
        "log": {"access": "@TMP@/access.log", "flush": "100ms"},
        "upstreams": {"dead": {"servers": [dead]}, "resets": {"servers": [resets.addr]}},
        "sites": [{"listen": ["127.0.0.1:@PORT@"], "routes": [
            {"path": "/refused", "proxy": {"upstream": "dead"}},
            {"path": "/reset", "proxy": {"upstream": "resets"}}]}],
    }
    text = json.dumps(cfg).replace("{", "{{").replace("}", "}}")
    srv = server(text.replace("@PORT@", "{port}").replace("@TMP@", "{tmp}"))
    access = os.path.join(srv.tmp, "access.log")
    before = os.path.getsize(srv.log_path)
    wrk = [subprocess.Popen(["wrk", "-t1", "-c16", f"-d{SECONDS}s",
                             f"http://127.0.0.1:{srv.port}{path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
           for path in ("/refused", "/reset")]
    for w in wrk:
        out, _ = w.communicate(timeout=SECONDS + 20)
        assert w.returncode == 0, out
    causes = [("connect() failed", dead, "/refused", 502),
              ('no live upstreams in "dead"', "", "/refused", 502),
              ("upstream closed or reset the connection", resets.addr, "/reset", 502),
              ('no live upstreams in "resets"', "", "/reset", 502)]
    log, got = settle(srv, causes, access)
    grown = os.path.getsize(srv.log_path) - before
    assert grown < 100_000, f"the storm wrote {grown} bytes of error log ({got})"
    for (cause, needle, path, _), (counted, failed) in zip(causes, got):
        written, folded, per_second, carriers = tally(log, cause, needle)
        assert failed > 10 * SECONDS, f"{path}: only {failed} failures: the storm did not happen"
        # Nothing lost: every failure is a line or counted in one.
        assert counted == failed, f"{cause}: {written} lines + {folded} folded != {failed} 502s"
        # One line per second (a single worker), each second after the
        # first carrying the previous one's count.
        assert max(per_second.values()) == 1, (cause, per_second)
        assert len(carriers) >= len(per_second) - 1, (cause, sorted(per_second), sorted(carriers))
        assert folded > 0, cause


# ---- other per-request and per-connection lines ----------------------------------------

def test_fastcgi_refused_storm_is_folded(server):
    """A FastCGI route whose application is down: the same budget."""
    dead = f"127.0.0.1:{free_port()}"
    srv = server(fcgi_yaml([dead], top={"log": {"access": "@TMP@/access.log", "flush": "100ms"}})
                 .replace("@TMP@", "{tmp}"))
    access = os.path.join(srv.tmp, "access.log")

    def one():
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            s.sendall(b"GET /env.php HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while s.recv(65536):
                pass
    for _ in range(300):
        one()
    causes = [("connect() failed", "fastcgi://" + dead, "/env.php", 502),
              ('no live upstreams in "php"', "", "/env.php", 502)]
    log, got = settle(srv, causes, access)
    for (cause, needle, _, _), (counted, failed) in zip(causes, got):
        written, folded, per_second, _ = tally(log, cause, needle)
        assert counted == failed == 300, (cause, written, folded, failed)
        assert max(per_second.values()) == 1 and folded > 0, (cause, per_second)


def test_tls_handshake_failures_are_folded(server, tmp_path):
    """Clients that send junk instead of a ClientHello (info level)."""
    pki = PKI(tmp_path / "pki")
    ca = pki.root()
    leaf = pki.leaf(ca, ["localhost"], key="ec", name="ec")
    srv = server(f"""
        workers: 1
        log: {{{{level: info}}}}
        sites:
          - listen: ["127.0.0.1:{{port}} tls"]
            tls: {{{{cert: {leaf.cert_path}, key: {leaf.key_path}}}}}
            routes:
              - {{{{path: /, respond: {{{{body: "ok"}}}}}}}}
        """)

    def one():
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            s.sendall(b"\x16\x03\x01\x00\x05\xff\xff\xff\xff\xff" + b"\0" * 64)
            try:
                while s.recv(65536):
                    pass
            except ConnectionResetError:
                pass
    for _ in range(300):
        one()
    deadline = time.monotonic() + 2.5
    while True:
        written, folded, per_second, _ = tally(srv.log(), "TLS handshake failed")
        if written + folded >= 300 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert written + folded == 300, (written, folded)
    assert max(per_second.values()) == 1 and folded > 0, per_second
