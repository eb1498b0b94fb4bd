"""Gathering a mapping's validated values, shared by the directive modules."""
from __future__ import annotations


class Fields:
    """The values of one mapping's keys as they are validated. A check that
    found a problem has reported it and returns None: `put` then turns `ok`
    False, so the mapping is refused as a whole after every key was checked
    (all problems reported at once, none of the values used)."""

    def __init__(self):
        self.ok = True
        self.values = {}

    def put(self, key, value):
        if value is None:
            self.ok = False
        else:
            self.values[key] = value
