"""Writes the counters of a PGO training build before a process ends with
os._exit (workers, the TLS keeper).

A module built with SCALWS_PGO=gen (tools/pgo-build.sh) writes its counters
(build/pgo/*.gcda) from a destructor when its process exits normally;
os._exit runs no destructor, so those processes call `dump()` first. Each
module linked with -fprofile-generate carries its own copy of libgcov, with
its own counters and its own exported `__gcov_dump` (setup.py links it in),
so each loaded module is asked for its own.

`prepare()` finds them once the modules are loaded and before the process
may lose the right to open files (`user:`); it does nothing unless
scalws/_buildinfo.py says this is an instrumented build, so an ordinary
worker never loads ctypes.
"""
from __future__ import annotations

import sys

_MODULES = ("scalws.server.engine", "scalws.http.parser")
_dumps: list = []


def prepare() -> None:
    try:
        from scalws import _buildinfo
    except ImportError:
        return
    if not str(getattr(_buildinfo, "PGO", "")).startswith("gen"):
        return
    import ctypes
    for name in _MODULES:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        try:
            # dlopen of a loaded file is that same module, not a copy
            _dumps.append(ctypes.CDLL(mod.__file__)["__gcov_dump"])
        except (OSError, AttributeError):
            pass  # not instrumented after all: tools/pgo-build.sh finds the profiles missing


def dump() -> None:
    """Never raises: it runs on the way out of a process."""
    for flush in _dumps:
        try:
            flush()
        except Exception:
            pass
