"""The master's memory and its children's (issue 37): what a fork shares,
and what the master gives back once its workers run.

`fork()` is os.fork() for a child that shares the master's objects.
`drop_load_pages()` unmaps, in the master, the library pages it only read
while loading (docs/adr/0036-master-load-pages.md).
"""
from __future__ import annotations

import ctypes
import gc
import os
import re

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
MADV_DONTNEED = 4

# "start-end perms offset dev inode [path]", the line that opens a mapping
# in /proc/PID/smaps; the fields that follow it are "Key:   N kB" lines.
_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ (\d+)")


def fork() -> int:
    """os.fork() for a child that shares the master's objects: frozen
    (gc.freeze) across the fork, so that the child's collections never walk
    them, and so never copy the pages they share; the master collects its
    own as before (gc.unfreeze), or what a reload drops would never go.
    The C heap's free pages go back to the kernel first (malloc_trim): a
    child that allocates there gets fresh pages of its own instead of
    copying pages that the master then keeps too (1 MiB less per install,
    docs/benchmarks/2026-12-05-footprint.md)."""
    _libc.malloc_trim(0)
    gc.freeze()
    pid = os.fork()
    if pid:
        gc.unfreeze()
    return pid


def load_only_mappings(lines):
    """(start, end, resident kB) of each mapping that holds nothing but a
    file's own pages: private, never writable, backed by a file (inode not
    0), not one page of it copied (Anonymous: 0 kB), some of it resident.
    Such a page is the file's content, in the page cache: unmapped, it
    comes back on the next access, the same. `lines`: /proc/PID/smaps's."""
    found = []
    cur = None
    for line in lines:
        m = _MAPPING.match(line)
        if m:
            lo, hi, perms, inode = m.groups()
            cur = None
            if perms[1] != "w" and perms[3] == "p" and inode != "0":
                cur = {"range": (int(lo, 16), int(hi, 16))}
                found.append(cur)
            continue
        if cur is not None:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Anonymous"):
                cur[key] = int(rest.split()[0])
    return [(*v["range"], v["Rss"]) for v in found
            if v.get("Anonymous") == 0 and v.get("Rss", 0) > 0]


def open_smaps():
    """/proc/self/smaps, opened now for a drop_load_pages() later: a worker
    opens it before its sandbox, which refuses the open afterwards (the
    read through a descriptor opened before is allowed). None without
    /proc."""
    try:
        return open("/proc/self/smaps")
    except OSError:
        return None


def drop_load_pages(smaps=None):
    """Unmaps this process's resident pages of its read-only file mappings
    (load_only_mappings): the dynamic linker's tables of every library the
    engine links (read to relocate and bind them, about 1 MiB of libcrypto's
    alone) and the code their constructors and our start-up ran; what the
    process runs afterwards faults in again, the same pages. In the master
    (1.7 MiB of an idle master's private memory, a plain site) no worker
    ever maps them (a fork copies no page table entry of a file mapping
    without copied pages); in a worker, once it serves, they are the
    start-up's (the sandbox's set-up, the interpreter's compiler, ...).
    None of either's objects. `smaps`: /proc/self/smaps opened earlier
    (open_smaps), read from its start and closed here; None opens it now.
    Returns (mappings, kB) unmapped: kB counts what was resident, shared
    pages (the interpreter's code) included."""
    try:
        f = smaps if smaps is not None else open("/proc/self/smaps")
        with f:  # line by line: no large string
            f.seek(0)
            mappings = load_only_mappings(f)
    except OSError:  # no /proc (a container without it): nothing to do
        return 0, 0
    n = kb = 0
    for lo, hi, rss in mappings:
        if _libc.madvise(lo, hi - lo, MADV_DONTNEED) == 0:
            n += 1
            kb += rss
    _libc.malloc_trim(0)  # what reading the file took from the C heap
    return n, kb
