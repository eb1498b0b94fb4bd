"""Writes the counters of a PGO or BOLT training build before a process ends
with os._exit (workers, the TLS keeper).

A module built with SCALWS_PGO=gen (tools/pgo-build.sh) writes its counters
(build/pgo/*.gcda) from a destructor when its process exits normally;
os._exit runs no destructor, so those processes call `dump()` first. Each
module linked with -fprofile-generate carries its own copy of libgcov, with
its own counters and its own exported `__gcov_dump` (setup.py links it in),
so each loaded module is asked for its own.

A module that llvm-bolt instrumented (tools/pgo-build.sh --bolt) writes its
profile from its ELF destructor (DT_FINI, which BOLT points at its runtime's
__bolt_instr_fini); that symbol is not exported, so `prepare()` reads the
address from the module's dynamic section and calls it at the module's load
address.

`prepare()` finds them once the modules are loaded and before the process
may lose the right to open files (`user:`); it does nothing unless
scalws/_buildinfo.py says this is an instrumented build, so an ordinary
worker never loads ctypes.
"""
from __future__ import annotations

import struct
import sys

_MODULES = ("scalws.server.engine", "scalws.http.parser")
_dumps: list = []


_DT_FINI = 13
_PT_DYNAMIC = 2


def elf_fini(path: str) -> int:
    """DT_FINI of a 64-bit little-endian ELF shared object (its address
    relative to the load address), 0 when it has none."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return 0
        phoff, = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        for i in range(phnum):
            p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
            if p_type != _PT_DYNAMIC:
                continue
            f.seek(p_offset)
            dyn = f.read(p_filesz)
            for tag, val in struct.iter_unpack("<qQ", dyn[:len(dyn) // 16 * 16]):
                if tag == _DT_FINI:
                    return val
                if tag == 0:
                    break
    return 0


def prepare() -> None:
    try:
        from scalws import _buildinfo
    except ImportError:
        return
    if str(getattr(_buildinfo, "BOLT", "")).startswith("instrumented"):
        _prepare_bolt()
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


def _prepare_bolt() -> None:
    import ctypes
    for name in _MODULES:
        mod = sys.modules.get(name)
        fini = elf_fini(mod.__file__) if mod is not None else 0
        if not fini:
            continue
        # dlopen of a loaded file is that module; its handle is its struct
        # link_map, whose first member is the load address (l_addr)
        base = ctypes.c_size_t.from_address(ctypes.CDLL(mod.__file__)._handle).value
        _dumps.append(ctypes.CFUNCTYPE(None)(base + fini))


def dump() -> None:
    """Never raises: it runs on the way out of a process."""
    for flush in _dumps:
        try:
            flush()
        except Exception:
            pass
