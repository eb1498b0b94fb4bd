"""The response cache's shared memory (issue 17, docs/adr/0014-response-cache.md).

The master makes, before it forks any worker, and keeps for its life:

- one MAP_SHARED mapping of a memfd per cache zone (`cache_zones:` and the
  implicit zones of routes), zero-filled; the first worker to attach
  formats it (csrc/cache/store.c). A reload keeps a zone whose name and
  max_size are unchanged, so the entries survive it; a zone that changed
  size is a new, empty one (workers of the old generation keep the old
  mapping until they exit: theirs is inherited, not the master's);
- the holders' registry, one page: which process owns each of the
  SWS_CS_HOLDERS slots (csrc/include/scalws/cachestore.h);
- one eventfd per holder slot: a worker that ends a fill others wait for
  writes to the eventfds of their slots (collapsed misses across workers).

The status process reads the zones' counters from the same mappings
(`counters`): nothing is asked of the workers. A zone is a memfd, which
the master keeps open, so that scalws-controller's status process, which
shares no mapping with an instance, can map a zone's first page through
/proc/PID/fd of the instance's master (`counters_of`): the counters file
names the pid and the descriptors (stats.py's layout, "cache_fds").
"""
from __future__ import annotations

import mmap
import os
import struct
from scalws.config.record import dataclass, field

HOLDERS = 64                    # SWS_CS_HOLDERS
# sws_cs_counters_t, in order (uint64 each), at COUNTERS_OFFSET in the zone
# (tests/unit/test_cache_layout.py checks both against the engine).
COUNTERS = ("hits", "misses", "expired", "stale", "revalidated", "bypassed", "purged",
            "evictions", "stored", "store_failed", "lock_waits", "updating",
            "entries", "bytes_stored", "mem_used", "mem_size")


@dataclass
class View:
    """What one generation's workers get: zones by name, the registry, the eventfds."""
    zones: dict = field(default_factory=dict)   # name -> mmap
    registry: object = None
    efds: list = field(default_factory=list)


class CacheMemory:
    def __init__(self):
        self._zones = {}        # (name, max_size) -> mmap
        self._zone_fds = {}     # (name, max_size) -> its memfd, open for the master's life
        self._registry = None
        self._efds = []

    def view(self, config) -> View:
        """The mappings for `config` (made now for zones it adds)."""
        if not config.cache_zones:
            return View()
        if self._registry is None:
            self._registry = mmap.mmap(-1, mmap.PAGESIZE, mmap.MAP_SHARED)
            self._efds = [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(HOLDERS)]
        zones = {}
        for name, z in config.cache_zones.items():
            key = (name, z.max_size)
            if key not in self._zones:
                self._zones[key], fd = _zone_memory(name, z.max_size)
                if fd >= 0:
                    self._zone_fds[key] = fd
            zones[name] = self._zones[key]
        return View(zones, self._registry, list(self._efds))

    def fds(self) -> list:
        """Every descriptor the master holds for the cache (the zones'
        memfds, the eventfds): what a child that uses no cache closes
        (the TLS keeper, the status process, which reads its zones through
        mappings made before it forked)."""
        return list(self._zone_fds.values()) + list(self._efds)

    def zone_fds(self, config) -> dict:
        """name -> the memfd of each zone of `config` (after view(config))."""
        return {name: self._zone_fds[(name, z.max_size)]
                for name, z in config.cache_zones.items() if (name, z.max_size) in self._zone_fds}

    def prune(self, config):
        """Forgets the zones `config` no longer uses: after a reload, those of
        the old configuration only; after a failed one (`config` the one
        still served), those the new configuration added. Workers keep
        their own inherited mappings."""
        keep = {(n, z.max_size) for n, z in config.cache_zones.items()}
        for key in list(self._zones):
            if key not in keep:
                self._zones.pop(key).close()
                fd = self._zone_fds.pop(key, -1)
                if fd >= 0:
                    os.close(fd)


COUNTERS_OFFSET = 16            # sws_cs_t.c (after magic, state, formatter)
MEMFD_PREFIX = "scalws-cache:"  # a zone's memfd name: this and the zone's name
MFD_NOEXEC_SEAL = getattr(os, "MFD_NOEXEC_SEAL", 0x0008)  # Linux 6.3; refused (EINVAL) before


def _zone_memory(name, size):
    """(mapping, memfd) of a new zone; (anonymous mapping, -1) where no
    memfd can be made (a kernel with vm.memfd_noexec=2 that predates
    MFD_NOEXEC_SEAL's acceptance, an RLIMIT_FSIZE below the zone): the
    workers share it all the same, only scalws-controller cannot read its
    counters."""
    fd = -1
    for flags in (os.MFD_CLOEXEC | MFD_NOEXEC_SEAL, os.MFD_CLOEXEC):
        try:
            fd = os.memfd_create(memfd_name(name), flags)
            break
        except OSError:
            continue
    if fd >= 0:
        try:
            os.ftruncate(fd, size)
            return mmap.mmap(fd, size, mmap.MAP_SHARED), fd
        except OSError:
            os.close(fd)
    return mmap.mmap(-1, size, mmap.MAP_SHARED), -1


def memfd_name(zone: str) -> str:
    """The memfd name of a zone: MEMFD_PREFIX and its name, or a digest of
    a name too long for memfd_create (249 bytes; a route's own zone is
    named after its file's path)."""
    name = MEMFD_PREFIX + zone
    if len(name.encode()) > 249:
        import hashlib  # here: importing it initialises OpenSSL (3 MiB mapped)
        name = MEMFD_PREFIX + "sha256:" + hashlib.sha256(zone.encode()).hexdigest()
    return name


def counters(zone_mm) -> dict:
    """A zone's counters (sws_cs_counters_t) from its mapping; {} when no
    worker formatted it yet. No lock: each is one aligned 64-bit word."""
    magic, state = struct.unpack_from("<QI", zone_mm, 0)
    if state != 2:
        return {}
    vals = struct.unpack_from("<%dQ" % len(COUNTERS), zone_mm, COUNTERS_OFFSET)
    return dict(zip(COUNTERS, vals))


def counters_of(pid: int, fds: dict) -> dict:
    """The counters of another process's zones (name -> memfd number in
    process `pid`, the instance's master), each through /proc/PID/fd: a
    zone whose descriptor is gone or is no longer that zone's memfd (the
    instance restarted or reloaded since its counters file was read) is
    left out."""
    out = {}
    for name, fd in fds.items():
        path = f"/proc/{pid}/fd/{fd}"
        try:
            if os.readlink(path) != f"/memfd:{memfd_name(name)} (deleted)":
                continue
            with open(path, "rb") as f:
                with mmap.mmap(f.fileno(), mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
                    out[name] = counters(mm)
        except (OSError, ValueError):
            continue
    return out
