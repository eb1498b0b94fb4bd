"""Calling a function in a throwaway child process (issue 37).

Some control-plane work needs large libraries for a moment: loading the
configuration (PyYAML, the directive modules, and pyOpenSSL and
cryptography for a TLS site: scalws/control/cfgload.py) and fetching and
checking an OCSP response (cryptography: scalws/control/tlskeeper.py).
Imported in a long-lived process, their objects and code stay in it for
its whole life, and in the master they are mapped by every worker forked
from it: 4 to 9 MiB each (docs/benchmarks/2026-12-07-footprint.md).
`call(fn, *args)` forks, runs `fn` in the child, sends back what it
returned (or raised), pickled through a pipe, and the child exits: the
imports die with it.

The child is a copy of the caller (its privileges, descriptors and blocked
signals); it must only compute and answer. The caller waits for it: use
this where the work was synchronous already (`start` lets it do its own
work meanwhile, as scalwsd's start does its imports).
"""
from __future__ import annotations

import os
import pickle
import traceback


class ChildFailed(Exception):
    """The child died without an answer, or raised something that cannot
    be sent back; str() says which (with the child's traceback)."""


def _answer(fn, args, w):
    try:
        try:
            answer = ("return", fn(*args))
        except Exception as exc:  # noqa: BLE001 - sent back to be raised there
            answer = ("raise", exc)
        data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
    except BaseException:  # noqa: BLE001 - an answer that does not pickle
        data = pickle.dumps(("failed", traceback.format_exc()), pickle.HIGHEST_PROTOCOL)
    view = memoryview(data)
    while view:
        view = view[os.write(w, view):]


class Call:
    """fn(*args) running in a forked child (start); result() waits for it."""

    def __init__(self, fn, args):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(r)
                _answer(fn, args, w)
            except BaseException:  # noqa: BLE001 - nothing may escape into the caller's code
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self._r = pid, r

    def result(self):
        """fn's return value, or the exception it raised raised here;
        ChildFailed when the child gives neither. Once."""
        chunks = []
        try:
            while True:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(self._r)
        _, status = os.waitpid(self.pid, 0)
        if not chunks:
            how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                   else f"exit status {os.WEXITSTATUS(status)}")
            raise ChildFailed(f"the child process (pid {self.pid}) ended without an answer: {how}")
        kind, value = pickle.loads(b"".join(chunks))
        if kind == "return":
            return value
        if kind == "raise":
            raise value
        raise ChildFailed(value)


def start(fn, *args):
    """fn(*args) in a forked child, started now: the caller goes on with its
    own work and calls result() when it needs the answer."""
    return Call(fn, args)


def call(fn, *args):
    """fn(*args) in a forked child: its return value, or the exception it
    raised raised here; ChildFailed when the child gives neither."""
    return Call(fn, args).result()
