"""Memory the master shares with its workers for TLS (csrc/include/scalws/tls.h).

Two kinds of region, both anonymous shared mappings made by the master
before it forks, so every worker (and the TLS keeper) sees the same pages:

- the session-ticket keys: one page for the master's whole life, so a
  session made with one worker resumes on any other, and after a reload
  (the new generation of workers maps the same page). The master writes
  the first key before any worker exists; from then on the keeper
  (tlskeeper.py) rotates it through the engine's seqlocked writer.
- the OCSP slots of one generation: one SWS_OCSP_SLOT-byte slot per
  certificate of a site that staples, filled by that generation's keeper.

This module imports nothing compiled: the master may not before it forks.
The layout constants below are checked against the C structs by
tests/unit/test_tls_shared.py (engine.tls_layout()).
"""
from __future__ import annotations

import mmap
import os
import struct
import time

TICKET_KEY = 80            # sws_ticket_key_t: name 16, AES 32, HMAC 32
TICKET_KEYS = 3            # SWS_TICKET_KEYS
TICKET_HEAD = 24           # seq, current, count, lifetime (u32 each), rotated (i64)
TICKET_SHM = TICKET_HEAD + TICKET_KEYS * TICKET_KEY
OCSP_SLOT = 16384          # SWS_OCSP_SLOT


class Tickets:
    """The ticket-key page; `seed` writes the first key."""

    def __init__(self):
        self.mm = mmap.mmap(-1, mmap.PAGESIZE)   # MAP_SHARED | MAP_ANONYMOUS

    def seed(self, lifetime: float) -> None:
        """The first key, written before any reader exists (no seqlock
        needed): sequence 0, current slot 0, one key."""
        struct.pack_into("<IIIIq", self.mm, 0, 0, 0, 1, int(lifetime), int(time.time()))
        self.mm[TICKET_HEAD:TICKET_HEAD + TICKET_KEY] = os.urandom(TICKET_KEY)

    def state(self) -> tuple:
        """(count, current, lifetime, rotated) as last published."""
        _seq, current, count, lifetime, rotated = struct.unpack_from("<IIIIq", self.mm, 0)
        return count, current, lifetime, rotated


class Generation:
    """What one generation of workers maps: the ticket page, and its own
    OCSP slots. `ocsp_first[site index]` is the slot of the site's first
    certificate (the others follow); `ocsp_certs` lists (slot, site index,
    Certificate) for the keeper."""

    def __init__(self, config, tickets: Tickets):
        self.tickets = tickets.mm if config.tickets.enabled else None
        self.ocsp_first = {}
        self.ocsp_certs = []
        slot = 0
        for idx, site in enumerate(config.sites):
            t = site.tls
            if t is None or not t.ocsp_stapling or not any(l.tls for l in site.listen):
                continue
            self.ocsp_first[idx] = slot
            for cert in t.certificates:
                self.ocsp_certs.append((slot, idx, cert))
                slot += 1
        self.ocsp = mmap.mmap(-1, slot * OCSP_SLOT) if slot else None

    def ocsp_state(self, slot: int) -> tuple:
        """(length, expires) of what the slot holds now."""
        _seq, length, expires = struct.unpack_from("<IIq", self.ocsp, slot * OCSP_SLOT)
        return length, expires


def has_tls(config) -> bool:
    return any(l.tls for site in config.sites for l in site.listen)
