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
