"""The error log, in nginx's shape: `2026/12/02 12:00:00 [notice] 1234#0: message`,
or with `log.error_format: json` one JSON object per line, as a log shipper
reads a container's output: `{"time": "2026-12-02T12:00:00+00:00", "level":
"notice", "pid": 1234, "worker": 0, "msg": "message"}` (worker: the index, or
"-" for the master, "status", "tls"; a traceback inside msg). The engine's
lines (csrc/core/core.c, the SIGSYS handler) have the same fields.

The master opens it (a file, or stderr) before forking, so workers inherit
the same open file; on USR1 (logrotate's `postrotate kill -USR1`) the
master opens it again and sends the new descriptor to each worker, which
may not open files outside its document roots (control/worker.py). Levels are nginx's; `notice` sits between Python's
INFO and WARNING.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time

NOTICE = 25
logging.addLevelName(NOTICE, "notice")
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": NOTICE,
          "warn": logging.WARNING, "error": logging.ERROR, "crit": logging.CRITICAL}
_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", NOTICE: "notice",
          logging.WARNING: "warn", logging.ERROR: "error", logging.CRITICAL: "crit"}

log = logging.getLogger("scalws")


class _Formatter(logging.Formatter):
    worker = "-"  # the master; workers set their index after fork
    as_json = False  # log.error_format json

    def format(self, record):
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        level = _NAMES.get(record.levelno, record.levelname.lower())
        if self.as_json:
            when = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(record.created))
            worker = int(self.worker) if self.worker.isdigit() else self.worker
            return json.dumps({"time": when[:-2] + ":" + when[-2:], "level": level,
                               "pid": os.getpid(), "worker": worker, "msg": msg},
                              ensure_ascii=True, separators=(",", ":"))
        ts = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        return f"{ts} [{level}] {os.getpid()}#{self.worker}: {msg}"


class ErrorLog:
    """The process's error log; `fd` is what the C engine writes to."""

    def __init__(self, path: str | None, level: str, fmt: str = "text"):
        self.path = path
        self.level = level
        self.formatter = _Formatter()
        self.formatter.as_json = fmt == "json"
        self.handler = None
        self.stream = None
        self._open()
        log.setLevel(LEVELS[level])
        log.propagate = False

    def _open(self, fd=None):
        if fd is not None:
            self.stream = os.fdopen(fd, "a", buffering=1, encoding="utf-8",
                                    errors="backslashreplace")
        elif self.path:
            self.stream = open(self.path, "a", buffering=1, encoding="utf-8",
                               errors="backslashreplace")
        else:
            self.stream = sys.stderr
        handler = logging.StreamHandler(self.stream)
        handler.setFormatter(self.formatter)
        for old in list(log.handlers):  # one error log per process
            log.removeHandler(old)
        log.addHandler(handler)
        self.handler = handler

    @property
    def fd(self) -> int:
        return self.stream.fileno()

    def set_worker(self, index: int):
        self.formatter.worker = str(index)

    def reopen(self):
        """USR1: open the path again (after rotation) and close the old file."""
        if not self.path:
            return
        old = self.stream
        self._open()
        old.close()

    def adopt(self, fd: int):
        """A worker's USR1: write to `fd`, opened by the master (the worker
        may not open the path), and close the old file."""
        old = self.stream
        self._open(fd)
        if old is not sys.stderr:
            old.close()
