"""Access and error logs end to end: formats, buffering, USR1 reopen, levels.

The servers here write their logs to files under the test's tmp folder; the
tests read those files (polling, bounded) rather than assuming a flush
happened after a sleep.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import time

from tests.e2e.conftest import read_response

ROUTES = """
        sites:
          - listen: "127.0.0.1:{port}"
            routes:
              - {{path: /, respond: {{status: 200, body: "hello"}}}}
              - {{path: "= /missing", respond: 404}}
"""


def logged(log_yaml: str, workers=1, extra="") -> str:
    return f"""
        workers: {workers}
        {extra}
        log: {log_yaml}
""" + ROUTES


def lines(path) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="strict") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def wait_lines(path, n, timeout=3.0) -> list[str]:
    """Returns the lines of `path` once it has at least `n` of them."""
    deadline = time.monotonic() + timeout
    while True:
        got = lines(path)
        if len(got) >= n:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"{path}: {len(got)} lines after {timeout}s, wanted {n}: {got}")
        time.sleep(0.01)


def wait_text(path, text, timeout=10.0, proc=None):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                content = f.read()
        except FileNotFoundError:
            content = ""
        if text in content:
            return content
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"scalwsd exited ({proc.returncode}):\n{content}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {text!r} in {path}:\n{content}")
        time.sleep(0.02)


def get(port, path="/", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def start_with_error_file(server, yaml_text, error_path):
    """The error log goes to a file, not to the fixture's stdout log, so
    readiness is read from that file."""
    srv = server(yaml_text, start=False)
    srv.start(wait=False)
    wait_text(error_path, "scalws started", proc=srv.proc)
    return srv


# ---- 9. combined -------------------------------------------------------------

COMBINED = re.compile(
    r'^(?P<addr>\d+\.\d+\.\d+\.\d+) - - '
    r'\[(?P<time>\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4})\] '
    r'"(?P<request>[^"]*)" (?P<status>\d{3}) (?P<bytes>\d+) '
    r'"(?P<referer>[^"]*)" "(?P<ua>[^"]*)" '
    r'(?P<rt>\d+\.\d{3}) (?P<rid>[0-9a-f]{16})$')


def test_combined_format(server, tmp_path):
    log = tmp_path / "access.log"
    srv = server(logged(f"{{{{access: {log}, format: combined, flush: 100ms}}}}"))
    assert get(srv.port, "/a?x=1", {"Referer": "http://r.test/", "User-Agent": "ua/1"}) \
        == (200, b"hello")
    assert get(srv.port, "/missing")[0] == 404
    # A quote, a backslash, a tab and a non-ASCII byte: escaped as \xHH.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b'GET /q HTTP/1.0\r\nUser-Agent: a"b\\c\td\xe9\r\n'
                  b'Referer: x"y\r\n\r\n')
        assert read_response(s)[0] == 200
    got = wait_lines(log, 3)
    assert len(got) == 3, got
    parsed = []
    for line in got:
        m = COMBINED.match(line)
        assert m, f"not combined: {line!r}"
        parsed.append(m.groupdict())
    a, b, c = parsed
    assert a["addr"] == "127.0.0.1"
    assert a["request"] == "GET /a?x=1 HTTP/1.1"
    assert (a["status"], a["bytes"]) == ("200", "5")
    assert (a["referer"], a["ua"]) == ("http://r.test/", "ua/1")
    assert b["request"] == "GET /missing HTTP/1.1" and b["status"] == "404"
    assert (b["referer"], b["ua"]) == ("-", "-")  # http.client sends neither
    assert b["bytes"] == "0"  # `respond: 404` has no body
    assert c["request"] == "GET /q HTTP/1.0"
    assert c["ua"] == r"a\x22b\x5cc\x09d\xe9"
    assert c["referer"] == r"x\x22y"
    # The time is the local time of the request, to the second.
    t = time.strptime(a["time"], "%d/%b/%Y:%H:%M:%S %z")
    assert abs(time.mktime(t[:8] + (-1,)) - time.time()) < 60
    assert len({p["rid"] for p in parsed}) == 3  # a distinct id per request


def refused_heads(port):
    """Three heads refused before they parse, each on its own connection:
    a version we do not speak, TLS bytes on a plain port, and a head cut
    short by header_timeout (1 s here). Returns their statuses."""
    got = []
    for data in (b"GET /v HTTP/5.6\r\nHost: a\r\n\r\n",
                 b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\"q\r\nrest",
                 b"GET /slow HTTP/1.1\r\nHost: a\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(data)
            got.append(read_response(s)[0])
    return got


def test_a_refused_head_is_logged_with_its_first_line_as_it_came(server, tmp_path):
    """nginx's $request for a request it could not parse: the line as
    received, escaped (no method, target and version of our own making)."""
    log, jlog = tmp_path / "access.log", tmp_path / "access.json"
    srv = server(logged(f"{{{{access: {log}, format: combined, flush: 100ms}}}}",
                        extra="limits: {{header_timeout: 1s}}"))
    assert refused_heads(srv.port) == [505, 400, 408]
    got = [COMBINED.match(line).groupdict() for line in wait_lines(log, 3)]
    assert [(g["request"], g["status"]) for g in got] == [
        ("GET /v HTTP/5.6", "505"),
        (r"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\x22q", "400"),
        ("GET /slow HTTP/1.1", "408")], got
    srv.stop()
    srv = server(logged(f"{{{{access: {jlog}, format: json, flush: 100ms}}}}",
                        extra="limits: {{header_timeout: 1s}}"))
    assert refused_heads(srv.port) == [505, 400, 408]
    recs = [json.loads(line) for line in wait_lines(jlog, 3)]
    assert [(r["method"], r["uri"], r["protocol"], r["status"]) for r in recs] == [
        ("", "GET /v HTTP/5.6", "", 505),
        ("", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\"q", "", 400),
        ("", "GET /slow HTTP/1.1", "", 408)], recs


# ---- 10. json ----------------------------------------------------------------

FIELDS = ["time", "remote_addr", "request_id", "method", "uri", "protocol", "status",
          "body_bytes_sent", "request_time", "host", "referer", "user_agent"]


def test_json_format(server, tmp_path):
    log = tmp_path / "access.json"
    srv = server(logged(f"{{{{access: {log}, format: json, flush: 100ms}}}}"))
    assert get(srv.port, "/j?k=v", {"Host": "example.test", "User-Agent": 'q"\\',
                                    "Referer": "http://r/"})[0] == 200
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"GET /missing HTTP/1.1\r\nHost: h\r\nUser-Agent: \xff\tz\r\n"
                  b"Connection: close\r\n\r\n")
        assert read_response(s)[0] == 404
    got = wait_lines(log, 2)
    assert len(got) == 2
    recs = [json.loads(line) for line in got]  # each line is one valid JSON object
    for rec in recs:
        assert list(rec) == FIELDS, rec
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d.*", rec["time"]), rec["time"]
        assert re.fullmatch(r"[0-9a-f]{16}", rec["request_id"])
        assert isinstance(rec["status"], int) and isinstance(rec["body_bytes_sent"], int)
        assert isinstance(rec["request_time"], (int, float)) and rec["request_time"] >= 0
        assert rec["remote_addr"] == "127.0.0.1" and rec["method"] == "GET"
        assert rec["protocol"] == "HTTP/1.1"
    a, b = recs
    assert (a["uri"], a["status"], a["body_bytes_sent"]) == ("/j?k=v", 200, 5)
    assert (a["host"], a["user_agent"], a["referer"]) == ("example.test", 'q"\\', "http://r/")
    assert (b["uri"], b["status"], b["host"], b["referer"]) == ("/missing", 404, "h", "")
    assert b["user_agent"] == "\xff\tz"  # \u00HH escapes, decoded by json
    assert "\\u00ff\\u0009z" in got[1]
    assert a["request_id"] != b["request_id"]


# ---- 11. buffering -------------------------------------------------------------

def test_buffered_lines_flush_within_interval(server, tmp_path):
    log = tmp_path / "access.log"
    srv = server(logged(f"{{{{access: {log}, flush: 1s}}}}", workers=2))
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    for _ in range(40):
        c.request("GET", "/")
        assert c.getresponse().read() == b"hello"
    c.close()
    t0 = time.monotonic()
    wait_lines(log, 40, timeout=2.5)  # each worker flushes within ~1 s (+ a tick)
    assert time.monotonic() - t0 < 2.0
    assert len(lines(log)) == 40


def test_a_full_buffer_is_flushed_at_once(server, tmp_path):
    # flush: 1h, so only the buffer filling up writes anything after the first
    # line (which goes out at once); a line that does not fit flushes the
    # buffer before it is added, so at most one buffer's worth is ever held.
    log = tmp_path / "access.log"
    srv = server(logged(f"{{{{access: {log}, flush: 1h, buffer: 4k}}}}", workers=1))
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    for i in range(150):
        c.request("GET", f"/?n={i}")
        assert c.getresponse().read() == b"hello"
    c.close()
    on_disk = log.stat().st_size  # the answers went out after their flushes
    assert srv.stop() == 0
    total = log.stat().st_size
    assert len(lines(log)) == 150 and total > 3 * 4096  # several buffers' worth
    assert total - on_disk <= 4096, (on_disk, total)
    assert on_disk < total, "nothing was buffered"
    assert log.read_bytes()[:on_disk].endswith(b"\n")  # whole lines only


def test_buffered_lines_flushed_on_graceful_exit(server, tmp_path):
    log = tmp_path / "access.log"
    srv = server(logged(f"{{{{access: {log}, flush: 1h, buffer: 1m}}}}", workers=2))
    # The first flush may happen at once; after it, nothing is written for
    # an hour unless the buffer fills (it cannot: 1 MiB) or the worker exits.
    assert get(srv.port)[1] == b"hello"
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    for _ in range(59):
        c.request("GET", "/")
        assert c.getresponse().read() == b"hello"
    c.close()
    before = len(lines(log))
    assert before < 60, "lines were not buffered"
    assert srv.stop() == 0
    got = lines(log)
    assert len(got) == 60, f"{len(got)} lines after a graceful stop (had {before})"


# ---- 12. USR1 -------------------------------------------------------------------

def test_usr1_reopens_access_and_error_logs(server, tmp_path):
    access, error = tmp_path / "access.log", tmp_path / "error.log"
    srv = start_with_error_file(
        server, logged(f"{{{{access: {access}, error: {error}, flush: 100ms}}}}", workers=2),
        error)
    for _ in range(3):
        assert get(srv.port)[0] == 200
    wait_lines(access, 3)
    os.rename(access, str(access) + ".1")
    os.rename(error, str(error) + ".1")
    srv.kill(signal.SIGUSR1)
    # The master and both workers say so in the new error log.
    wait_text(error, "reopening logs (SIGUSR1)", proc=srv.proc)
    wait_text(error, "worker 0: logs reopened", proc=srv.proc)
    wait_text(error, "worker 1: logs reopened", proc=srv.proc)
    for _ in range(4):
        assert get(srv.port, "/after")[0] == 200
    new = wait_lines(access, 4)
    assert len(new) == 4 and all('"GET /after HTTP/1.1"' in line for line in new)
    old = lines(str(access) + ".1")
    assert len(old) == 3 and all('"GET / HTTP/1.1"' in line for line in old)
    old_err = lines(str(error) + ".1")
    assert any("scalws started" in line for line in old_err)
    assert not any("reopen" in line for line in old_err)
    assert srv.stop() == 0
    assert "scalws stopped" in open(error).read()  # the master writes to the new file too


# ---- 13. error log levels and content ----------------------------------------------

ERR_LINE = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[(\w+)\] (\d+)#([-\d]+): (.*)$")


def test_error_log_levels_and_worker_death(server, tmp_path):
    error = tmp_path / "error.log"
    srv = start_with_error_file(
        server, logged(f"{{{{error: {error}, level: info}}}}", workers=2), error)
    pids = sorted(srv.workers())
    assert len(pids) == 2
    text = open(error).read()
    started = [m for m in map(ERR_LINE.match, text.splitlines())
               if m and "started (pid" in m.group(4)]
    assert sorted((m.group(1), m.group(3)) for m in started) == [("info", "-"), ("info", "-")]
    assert sorted(int(re.search(r"pid (\d+)", m.group(4)).group(1)) for m in started) == pids

    os.kill(pids[0], signal.SIGKILL)
    text = wait_text(error, f"(pid {pids[0]}) killed by signal 9", proc=srv.proc)
    line = next(l for l in text.splitlines() if f"(pid {pids[0]}) killed" in l)
    m = ERR_LINE.match(line)
    assert m and m.group(1) == "error" and int(m.group(2)) == srv.pid, line
    assert "killed by signal 9 (SIGKILL); restarting" in m.group(4)
    # The replacement's start is logged at info too.
    replacement = wait_for_new_worker(srv, pids)
    wait_text(error, f"started (pid {replacement},", proc=srv.proc)
    assert open(error).read().count("started (pid") == 3


def wait_for_new_worker(srv, old, timeout=5.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [p for p in srv.workers() if p not in old]
        if new:
            return new[0]
        time.sleep(0.01)
    raise AssertionError("no replacement worker")


def test_error_log_default_level_is_notice(server, tmp_path):
    error = tmp_path / "error.log"
    start_with_error_file(server, logged(f"{{{{error: {error}}}}}"), error)
    text = open(error).read()
    assert "[notice]" in text and "scalws started" in text
    assert "[info]" not in text and "started (pid" not in text


def test_long_fields_are_cut_not_dropped(server, tmp_path):
    # With a 4 KiB buffer a request with a 6 KB User-Agent is still logged,
    # its fields cut so the line fits: a long header cannot hide a request.
    log = tmp_path / "access.json"
    srv = server(logged(f"{{{{access: {log}, format: json, buffer: 4k, flush: 100ms}}}}"))
    assert get(srv.port, "/long", {"User-Agent": "u" * 6000, "Referer": "r" * 6000})[0] == 200
    assert get(srv.port, "/short")[0] == 200
    recs = [json.loads(line) for line in wait_lines(log, 2)]
    assert [r["uri"] for r in recs] == ["/long", "/short"]
    cut = (4096 - 640) // (6 * 5)  # LOG_FIXED in csrc/http/accesslog.c
    assert recs[0]["user_agent"] == "u" * cut and recs[0]["referer"] == "r" * cut
