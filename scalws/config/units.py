"""Sizes and durations as operators write them, in nginx's notation.

parse_size:     1024, "1024", "16k", "10M", "1g"  -> int bytes
                (case-insensitive suffix, binary multiples: k = 1024)
parse_duration: 10, 1.5, "50us", "500ms", "10s", "2m", "1h", "1d", "1m30s", "1h 30m"
                -> float seconds (a bare number is seconds; units are
                lowercase because nginx's "M" means months, not minutes)

Both refuse anything else with a ValueError whose message is the hint the
loader shows (it appends what it got). Range checks belong to the caller:
these only convert. Booleans are refused even though bool is an int.
"""
from __future__ import annotations

import math
import re

SIZE_HINT = "expected a size such as 16k or 10m"
DURATION_HINT = "expected a duration such as 10s or 500ms"

_SIZE_RE = re.compile(r"([0-9]+)\s*([kmg]?)", re.IGNORECASE)
_SIZE_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}

_NUMBER_RE = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_DURATION_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(us|ms|s|m|h|d)\s*")
# Largest unit first; each unit at most once ("1m30s", not "30s1m").
_DURATION_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 0.000001}
_DURATION_ORDER = list(_DURATION_UNITS)


def parse_size(value) -> int:
    """Return `value` in bytes; ValueError(SIZE_HINT) if it is not a size."""
    if isinstance(value, bool):
        raise ValueError(SIZE_HINT)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(SIZE_HINT)
        return value
    if not isinstance(value, str):
        raise ValueError(SIZE_HINT)
    m = _SIZE_RE.fullmatch(value.strip())
    if m is None:
        raise ValueError(SIZE_HINT)
    return int(m.group(1)) * _SIZE_MULT[m.group(2).lower()]


def parse_duration(value) -> float:
    """Return `value` in seconds; ValueError(DURATION_HINT) if it is not one."""
    if isinstance(value, bool):
        raise ValueError(DURATION_HINT)
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(DURATION_HINT)
        return float(value)
    if not isinstance(value, str):
        raise ValueError(DURATION_HINT)
    text = value.strip()
    if not text:
        raise ValueError(DURATION_HINT)
    if _NUMBER_RE.fullmatch(text):
        return float(text)
    total = 0.0
    pos = 0
    last_unit = -1
    while pos < len(text):
        m = _DURATION_PART_RE.match(text, pos)
        if m is None:
            raise ValueError(DURATION_HINT)
        unit = _DURATION_ORDER.index(m.group(2))
        if unit <= last_unit:
            raise ValueError(DURATION_HINT)
        last_unit = unit
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return total


def format_size(n: int) -> str:
    """The shortest exact notation for `n` bytes: 16384 -> "16k"."""
    for suffix in ("g", "m", "k"):
        mult = _SIZE_MULT[suffix]
        if n and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)
