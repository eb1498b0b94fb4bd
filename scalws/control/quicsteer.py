"""Steering QUIC datagrams to the worker that owns their connection
(docs/adr/0032-http3-quic.md).

Every worker has its own UDP socket in the address's SO_REUSEPORT group.
The kernel would spread datagrams by their 4-tuple, which breaks two
things QUIC needs: a client that changes address (migration, a NAT
rebinding) keeps its connection, and a reload lets the old workers finish
their connections while the new ones take the new connections. So the
master attaches a classic BPF program to the group
(SO_ATTACH_REUSEPORT_CBPF; it sees the UDP payload) that reads the
destination connection ID:

- our connection IDs are 16 bytes whose byte 0 is the issuing worker's
  socket index in the group and byte 1 that index XOR a key byte the
  master picked: a packet whose ID passes that check goes to that socket,
  whatever address it comes from and whichever generation the worker is;
- a long-header packet whose ID is not ours is a client's first flight
  (its Initial or 0-RTT, with an ID it chose): it goes to a worker of the
  current generation chosen by the ID's first byte, the same one for each
  retransmission of that flight;
- anything else (a short header with an unknown ID) falls back to the
  kernel's hash.

The master keeps two sets of sockets per address, one per generation
parity, so that a reload's new workers never share a socket with the old
ones; the program is replaced once the new generation is ready.
"""
from __future__ import annotations

import ctypes
import os
import socket
import struct

from scalws.control.logs import log

SO_ATTACH_REUSEPORT_CBPF = 51
CID_LEN = 16               # csrc/http/h3/h3_int.h H3_SCID_LEN
MAX_TABLE = 100            # workers per generation the program can name (u8 jump offsets)
MAX_GROUP = 256            # socket indexes a connection ID's byte can hold

# classic BPF (linux/filter.h)
_LDB_ABS = 0x30            # BPF_LD | BPF_B | BPF_ABS
_JEQ_K, _JEQ_X, _JSET_K = 0x15, 0x1d, 0x45
_XOR_K, _MOD_K = 0xa4, 0x94
_TAX, _TXA = 0x07, 0x87
_RET_K, _RET_A = 0x06, 0x16
_FALLBACK = 0xFFFFFFFF     # past the group: the kernel hashes


def program(key: int, table: list[int]) -> list[tuple[int, int, int, int]]:
    """The instructions (code, jt, jf, k): `table` holds the group index
    of each current worker's socket, `key` the check byte."""
    n = len(table)
    if not 1 <= n <= MAX_TABLE:
        raise ValueError(f"{n} workers: steering names 1 to {MAX_TABLE}")
    head = 14                       # instructions before TABLE
    table_at = head
    rets_at = table_at + 2 + n + 1  # ldb, mod, n jeq, a default ret
    retx_at = rets_at + n
    fallback_at = retx_at + 2

    def jump(frm, to):
        off = to - frm - 1
        assert 0 <= off <= 255, (frm, to)
        return off

    p = [
        (_LDB_ABS, 0, 0, 0),                                # 0: the first byte
        (_JSET_K, 0, jump(1, 9), 0x80),                     # 1: long header?
        (_LDB_ABS, 0, 0, 5),                                # 2: DCID length
        (_JEQ_K, 0, jump(3, table_at), CID_LEN),            # 3
        (_LDB_ABS, 0, 0, 6),                                # 4: DCID[0]
        (_TAX, 0, 0, 0),                                    # 5
        (_LDB_ABS, 0, 0, 7),                                # 6: DCID[1]
        (_XOR_K, 0, 0, key),                                # 7
        (_JEQ_X, jump(8, retx_at), jump(8, table_at), 0),   # 8: ours: to its socket
        (_LDB_ABS, 0, 0, 1),                                # 9: short header: DCID[0]
        (_TAX, 0, 0, 0),                                    # 10
        (_LDB_ABS, 0, 0, 2),                                # 11: DCID[1]
        (_XOR_K, 0, 0, key),                                # 12
        (_JEQ_X, jump(13, retx_at), jump(13, fallback_at), 0),  # 13
    ]
    assert len(p) == table_at
    p.append((_LDB_ABS, 0, 0, 6))                           # the client's ID, first byte
    p.append((_MOD_K, 0, 0, n))
    for i in range(n):
        at = len(p)
        p.append((_JEQ_K, jump(at, rets_at + i), 0, i))
    p.append((_RET_K, 0, 0, table[0]))
    for i in range(n):
        p.append((_RET_K, 0, 0, table[i]))
    assert len(p) == retx_at
    p.append((_TXA, 0, 0, 0))
    p.append((_RET_A, 0, 0, 0))
    assert len(p) == fallback_at
    p.append((_RET_K, 0, 0, _FALLBACK))
    return p


def attach(sock: socket.socket, key: int, table: list[int]) -> None:
    """Attaches the program to sock's reuseport group (OSError on failure)."""
    insns = program(key, table)
    raw = b"".join(struct.pack("HBBI", *i) for i in insns)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HxxxxxxQ", len(insns), ctypes.addressof(buf))  # struct sock_fprog
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)


class QuicSockets:
    """The master's QUIC sockets: per quic address, one set per generation
    parity, never shrunk (a socket's index in the reuseport group is its
    place in the address's list, and no old worker shares a new one's
    socket); the key byte our connection IDs are checked with; the secret
    of resets, Retry tokens and tickets; whether the program steers."""

    def __init__(self):
        self.slots = {}                            # key -> (even sockets, odd sockets)
        self.key = 0
        while not self.key:                        # 1..255, uniform (os.urandom, not
            self.key = os.urandom(1)[0]            # `secrets`: see dns.py)
        self.secret = os.urandom(128)               # SWS_H3_SECRET
        self.unsteered = False

    def ensure(self, key, socks, parity, workers, bind):
        """At least `workers` sockets of `parity` for the address, new
        ones (bind()) appended to socks, the address's group."""
        mine = self.slots.setdefault(key, ([], []))[parity]
        while len(mine) < workers:
            socks.append(bind())
            mine.append(socks[-1])

    def socket_of(self, key, gen, index):
        return self.slots[key][gen % 2][index]

    def forget(self, key):
        self.slots.pop(key, None)

    def steer(self, config, gen, sockets):
        """Points each address's program at generation `gen`'s workers:
        after they are ready, before the old ones stop. Under
        scalws-controller the instances share each group, so the kernel's
        hash spreads packets (no migration across)."""
        if os.environ.get("SCALWS_INSTANCE"):
            no_early(config, "under scalws-controller")
            return
        for key, (even, odd) in self.slots.items():
            socks = sockets.get(key)
            mine = (even, odd)[gen % 2][:config.workers]
            if not socks or not mine:
                continue
            index = {id(s): i for i, s in enumerate(socks)}
            table = [index[id(s)] for s in mine]
            if len(socks) > MAX_GROUP or len(table) > MAX_TABLE:
                if not self.unsteered:
                    log.warning("HTTP/3: %d workers: QUIC packets are spread by address "
                                "(steering names up to %d): a client that moves loses its "
                                "connection", len(table), MAX_TABLE)
                self.unsteered = True
                no_early(config, "QUIC packets are not steered")
                continue
            try:
                attach(socks[0], self.key, table)
            except OSError as exc:
                log.warning("HTTP/3: cannot steer QUIC packets (%s): spread by address",
                            exc.strerror or exc)
                self.unsteered = True
                no_early(config, "QUIC packets are not steered")

    def steer_of(self, key, sock, socks):
        """(index in the group, key byte, the secret) for a worker's
        socket, the first two -1 when the program does not steer to it."""
        if self.unsteered or os.environ.get("SCALWS_INSTANCE"):
            return (-1, -1, self.secret)
        i = next(i for i, s in enumerate(socks) if s is sock)
        return (i, self.key, self.secret) if i < MAX_GROUP else (-1, -1, self.secret)


def no_early(config, why):
    """0-RTT's anti-replay holds only where a client's first flight and a
    replay of it reach one worker (csrc/http/h3/early.c): the workers take
    no early data there, and the log says why."""
    if config.http3.early_data and any(l.kind == "quic" for s in config.sites
                                       for l in s.listen):
        log.warning("HTTP/3: http3.early_data is on but %s: 0-RTT is off", why)
