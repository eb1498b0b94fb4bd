"""The error log, in nginx's shape: `2026/12/02 12:00:00 [notice] 1234#0: message`,
or with `log.error_format: json` one JSON object per line, as a log shipper
reads a container's output: `{"time": "2026-12-02T12:00:00+00:00", "level":
"notice", "pid": 1234, "worker": 0, "msg": "message"}` (worker: the index, or
"-" for the master, "status", "tls"; a traceback inside msg). The engine's
lines (csrc/core/core.c, the SIGSYS handler) have the same fields.

The master opens it (a file, or stderr) before forking, so workers inherit
the same open file; on USR1 (logrotate's `postrotate kill -USR1`) the
master opens it again and sends the new descriptor to each worker, which
may not open files outside its document roots (control/worker.py). Levels
are nginx's; `notice` sits between Python's INFO and WARNING. `log` has
the calls of Python's logging that the code makes, not the package.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

# nginx's levels, numbered as Python's logging numbers them (`notice`
# between INFO and WARNING); LEVELS maps the configuration's names.
DEBUG, INFO, NOTICE, WARNING, ERROR, CRITICAL = 10, 20, 25, 30, 40, 50
LEVELS = {"debug": DEBUG, "info": INFO, "notice": NOTICE,
          "warn": WARNING, "error": ERROR, "crit": CRITICAL}
_NAMES = {v: k for k, v in LEVELS.items()}


class Logger:
    """`log`: the calls of a logging.Logger that this code makes (debug ...
    critical, log(level, ...), %-style arguments), without the logging
    package, whose objects (with threading's) weigh 0.36 MiB in every
    process (issue 37). One stream, written a line at a time; a line that
    cannot be written is dropped, as logging's handler drops it."""

    def __init__(self):
        self.level = WARNING
        self.stream = sys.stderr
        self.worker = "-"   # the master; workers set their index after fork
        self.as_json = False  # log.error_format json

    def setLevel(self, level: int):  # noqa: N802 (logging's name)
        self.level = level

    def log(self, level: int, msg, *args, exc_info=None):
        if level < self.level:
            return
        msg = str(msg)
        if args:
            try:
                msg = msg % args
            except (TypeError, ValueError, KeyError):
                msg = f"{msg} {args!r}"  # a wrong format loses no argument
        if exc_info:
            msg += "\n" + "".join(traceback.format_exception(*sys.exc_info())).rstrip("\n")
        try:
            self.stream.write(self.format(level, msg) + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a full disk, a closed file: the server goes on
            pass

    def format(self, level: int, msg: str) -> str:
        name = _NAMES.get(level, str(level))
        now = time.time()
        if self.as_json:
            when = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now))
            worker = int(self.worker) if self.worker.isdigit() else self.worker
            return json.dumps({"time": when[:-2] + ":" + when[-2:], "level": name,
                               "pid": os.getpid(), "worker": worker, "msg": msg},
                              ensure_ascii=True, separators=(",", ":"))
        ts = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now))
        return f"{ts} [{name}] {os.getpid()}#{self.worker}: {msg}"

    def debug(self, msg, *args, **kw):
        self.log(DEBUG, msg, *args, **kw)

    def info(self, msg, *args, **kw):
        self.log(INFO, msg, *args, **kw)

    def warning(self, msg, *args, **kw):
        self.log(WARNING, msg, *args, **kw)

    def error(self, msg, *args, **kw):
        self.log(ERROR, msg, *args, **kw)

    def critical(self, msg, *args, **kw):
        self.log(CRITICAL, msg, *args, **kw)


log = Logger()


class ErrorLog:
    """The process's error log; `fd` is what the C engine writes to."""

    def __init__(self, path: str | None, level: str, fmt: str = "text"):
        self.path = path
        self.level = level
        self.stream = None
        log.as_json = fmt == "json"
        self._open()
        log.setLevel(LEVELS[level])

    def _open(self, fd=None):
        if fd is not None:
            self.stream = os.fdopen(fd, "a", buffering=1, encoding="utf-8",
                                    errors="backslashreplace")
        elif self.path:
            self.stream = open(self.path, "a", buffering=1, encoding="utf-8",
                               errors="backslashreplace")
        else:
            self.stream = sys.stderr
        log.stream = self.stream  # one error log per process

    @property
    def fd(self) -> int:
        return self.stream.fileno()

    def set_worker(self, index: int):
        log.worker = str(index)

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
