"""scalws/control/logs.py: the error log's lines, in nginx's shape or as
JSON, from our logger (Python's logging package is not loaded)."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest

from scalws.control.logs import CRITICAL, NOTICE, ErrorLog, log


@pytest.fixture
def logged(monkeypatch):
    out = io.StringIO()
    for k, v in (("stream", out), ("level", 10), ("worker", "-"), ("as_json", False)):
        monkeypatch.setattr(log, k, v)
    return out


def test_lines_in_nginx_shape_at_or_above_the_level(logged):
    log.setLevel(NOTICE)
    log.info("not shown")
    log.log(NOTICE, "the workers run as %s", "nobody")
    log.worker = "3"
    log.critical("%d%% full", 99)
    lines = logged.getvalue().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[notice\] %d#-: the workers run "
                        r"as nobody" % os.getpid(), lines[0])
    assert lines[1].endswith(f"[crit] {os.getpid()}#3: 99% full")


def test_json_lines(logged):
    log.as_json = True
    log.worker = "status"
    log.error("a %s", "problem")
    rec = json.loads(logged.getvalue())
    assert rec["level"] == "error" and rec["msg"] == "a problem"
    assert rec["worker"] == "status" and rec["pid"] == os.getpid()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", rec["time"])


def test_a_wrong_format_loses_nothing_and_a_dead_stream_is_no_crash(logged):
    log.warning("%d items", "many")
    assert "%d items ('many',)" in logged.getvalue()
    logged.close()
    log.critical("after the stream closed")  # dropped, not raised


def test_an_exception_is_written_with_its_traceback(logged):
    try:
        1 / 0
    except ZeroDivisionError:
        log.error("failed", exc_info=True)
    assert "failed\nTraceback" in logged.getvalue()
    assert "ZeroDivisionError" in logged.getvalue()


def test_an_error_log_file_and_its_level(tmp_path, monkeypatch):
    monkeypatch.setattr(log, "stream", log.stream)
    monkeypatch.setattr(log, "level", log.level)
    path = tmp_path / "error.log"
    el = ErrorLog(str(path), "crit")
    log.error("below crit")
    log.log(CRITICAL, "kept")
    el.stream.close()
    assert path.read_text().count("\n") == 1 and "[crit]" in path.read_text()


def test_no_process_loads_the_heavy_standard_modules():
    """What every process of a tree would carry (issue 37): logging (0.36
    MiB of objects), dataclasses with inspect, ast and dis (1.5), typing
    (0.47), tempfile and shutil with bz2 and lzma (0.9): our logs.Logger,
    config/record.py, collections' namedtuple, and imports where used."""
    code = ("import sys, scalws.control.master, scalws.control.worker, "
            "scalws.control.statusd, scalws.control.tlskeeper; "
            "import scalws.server.engine; "
            "print(sorted(m for m in ('logging', 'threading', 'tempfile', 'shutil', "
            "'dataclasses', 'inspect', 'ast', 'dis', 'typing') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    assert out.strip() == "[]"
