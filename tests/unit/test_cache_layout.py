"""scalws/control/cacheshared.py reads a zone's counters without importing
the engine: the offset and field order it assumes are the engine's."""
from scalws.control import cacheshared


def test_counters_offset_and_fields_match_the_engine():
    from scalws.server.engine import cache_layout
    lay = cache_layout()
    assert lay["counters"] == cacheshared.COUNTERS_OFFSET
    assert lay["counters_size"] == 8 * len(cacheshared.COUNTERS)
    assert lay["holders"] == cacheshared.HOLDERS


def test_an_unformatted_zone_has_no_counters():
    import mmap
    mm = mmap.mmap(-1, 1 << 20, mmap.MAP_SHARED)
    assert cacheshared.counters(mm) == {}


def test_another_process_reads_a_zone_through_its_memfd():
    """counters_of maps a zone's first page through /proc/PID/fd (here our
    own pid): the memfd of the zone it is named for, a digest when the name
    is too long for memfd_create; a descriptor that is not that zone's, or
    is closed, is left out."""
    import mmap
    import os
    import struct
    long_name = "route:/" + "d" * 300 + "/site.yaml:12"
    fds = {}
    try:
        for k, zone in enumerate(("z", long_name)):
            fd = os.memfd_create(cacheshared.memfd_name(zone), os.MFD_CLOEXEC)
            fds[zone] = fd
            os.ftruncate(fd, 1 << 20)
            with mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED) as mm:
                struct.pack_into("<QI", mm, 0, 0x5357, 2)  # formatted
                struct.pack_into("<Q", mm, cacheshared.COUNTERS_OFFSET, 40 + k)  # hits
        assert len(cacheshared.memfd_name(long_name).encode()) <= 249
        got = cacheshared.counters_of(os.getpid(), fds)
        assert (got["z"]["hits"], got[long_name]["hits"]) == (40, 41), got
        assert cacheshared.counters_of(os.getpid(), {"other": fds["z"]}) == {}
        os.close(fds.pop("z"))
        closed = cacheshared.counters_of(os.getpid(), {"z": 999999, long_name: fds[long_name]})
        assert list(closed) == [long_name]
    finally:
        for fd in fds.values():
            os.close(fd)


def test_a_zone_without_a_memfd_is_anonymous_memory(monkeypatch):
    """Where memfd_create is refused (vm.memfd_noexec=2 on a kernel that
    refuses MFD_NOEXEC_SEAL too), the zone is an anonymous shared mapping:
    the workers share it, only its descriptor is missing from the layout."""
    import os
    from types import SimpleNamespace

    def refuse(name, flags=0):
        raise PermissionError(13, "memfd_create refused")
    cfg = SimpleNamespace(cache_zones={"z": SimpleNamespace(max_size=1 << 20)})
    monkeypatch.setattr(os, "memfd_create", refuse)
    mem = cacheshared.CacheMemory()
    view = mem.view(cfg)
    assert len(view.zones["z"]) == 1 << 20 and mem.zone_fds(cfg) == {}
    mem.prune(SimpleNamespace(cache_zones={}))  # a zone without a memfd goes too
    monkeypatch.undo()
    mem2 = cacheshared.CacheMemory()
    view2 = mem2.view(cfg)
    fd = mem2.zone_fds(cfg)["z"]
    assert os.readlink(f"/proc/self/fd/{fd}") == "/memfd:scalws-cache:z (deleted)"
    mem2.prune(SimpleNamespace(cache_zones={}))
    assert mem2.zone_fds(cfg) == {}
    for fd in view.efds + view2.efds:
        os.close(fd)
