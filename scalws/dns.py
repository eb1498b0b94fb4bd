"""A small stub resolver for the names of upstream servers: A and AAAA
lookups over UDP with their TTLs, which getaddrinfo() does not give.

Used twice: by the loader (`resolve()`, blocking, once per name when the
file is loaded) and by the master's re-resolution (`Lookup`, a
non-blocking state machine it steps from its loop, control/resolver.py).
Pure Python, no compiled part: `--check-config` imports it.

What it does, as glibc's stub resolver does for `hosts: files dns`:
  - /etc/hosts first (the name as written); such a name has no TTL;
  - then each name of the search list (`search`/`domain` of resolv.conf,
    before the name as written when it has fewer than `ndots` dots, after
    it otherwise), each nameserver in turn, `attempts` rounds, `timeout`
    per try; A and AAAA asked together on one socket, EDNS0 for a 1232-byte
    answer; a truncated answer asks both again over TCP (a headless
    Service of more than ~70 pods);
  - an answer counts only from the nameserver asked (a connected socket),
    with our random id and our question; CNAME chains are followed within
    the answer; the TTL is the smallest of the records used.
Answers are sorted (IPv4 first), so that a server rotating its records
is not a change.
"""
from __future__ import annotations

import ipaddress
import os
import select
import socket
import struct
import time
from scalws.config.record import dataclass, field

A, AAAA, CNAME, OPT = 1, 28, 5, 41
CLASS_IN = 1
NOERROR, SERVFAIL, NXDOMAIN = 0, 2, 3
EDNS_SIZE = 1232             # the size DNS flag day 2020 settled on
MAX_CNAMES = 8
MAX_NAME = 255

RESOLV_CONF = "/etc/resolv.conf"
HOSTS = "/etc/hosts"


class DnsError(ValueError):
    """A malformed or unexpected DNS message."""


@dataclass
class Settings:
    """What a lookup needs (model.Resolver carries the same fields)."""
    nameservers: list = field(default_factory=lambda: [("127.0.0.1", 53)])  # [(ip, port)]
    search: list = field(default_factory=list)
    ndots: int = 1
    timeout: float = 2.0       # per try
    attempts: int = 2          # rounds over the nameservers
    ipv6: bool = True          # ask AAAA too
    hosts: str = HOSTS

    @classmethod
    def of(cls, r) -> "Settings":
        """The settings of a `resolver:` (model.Resolver, or anything with
        its fields)."""
        return cls(nameservers=list(r.nameservers), search=list(r.search), ndots=r.ndots,
                   timeout=r.timeout, attempts=r.attempts, ipv6=r.ipv6)


def read_resolv_conf(path: str = RESOLV_CONF) -> dict:
    """nameservers, search, ndots, timeout and attempts of resolv.conf, as
    glibc reads them (no nameserver: 127.0.0.1; at most 3)."""
    out = {"nameservers": [], "search": [], "ndots": 1, "timeout": 5.0, "attempts": 2}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        words = line.split("#", 1)[0].split(";", 1)[0].split()
        if not words:
            continue
        key, args = words[0], words[1:]
        if key == "nameserver" and args and len(out["nameservers"]) < 3:
            try:
                out["nameservers"].append((ipaddress.ip_address(args[0].split("%")[0]).compressed,
                                           53))
            except ValueError:
                pass
        elif key in ("search", "domain") and args:
            out["search"] = [d.rstrip(".") for d in args if d.rstrip(".")][:6]
        elif key == "options":
            for opt in args:
                name, _, value = opt.partition(":")
                if name in ("ndots", "timeout", "attempts") and value.isdigit():
                    n = int(value)
                    if name == "ndots":
                        out["ndots"] = min(n, 15)
                    elif name == "timeout":
                        out["timeout"] = float(max(1, min(n, 30)))
                    else:
                        out["attempts"] = max(1, min(n, 5))
    if not out["nameservers"]:
        out["nameservers"] = [("127.0.0.1", 53)]
    return out


_hosts_cache: dict = {}      # path -> (mtime_ns, size, {name: [addresses]})


def hosts_lookup(name: str, path: str = HOSTS):
    """The addresses /etc/hosts gives `name` (in file order), or None. The
    file is parsed again only when it changed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    cached = _hosts_cache.get(path)
    if cached is None or cached[:2] != (st.st_mtime_ns, st.st_size):
        table: dict = {}
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    words = line.split("#", 1)[0].split()
                    if len(words) < 2:
                        continue
                    try:
                        addr = ipaddress.ip_address(words[0].split("%")[0]).compressed
                    except ValueError:
                        continue
                    for n in words[1:]:
                        addrs = table.setdefault(n.lower().rstrip("."), [])
                        if addr not in addrs:
                            addrs.append(addr)
        except OSError:
            return None
        cached = (st.st_mtime_ns, st.st_size, table)
        _hosts_cache[path] = cached
    return cached[2].get(name.lower().rstrip("."))


def sort_addresses(addrs):
    """IPv4 first, then by value: the order every process agrees on."""
    return sorted(set(addrs), key=lambda a: (":" in a, ipaddress.ip_address(a).packed))


# --------------------------------------------------------------------------
# The wire format (RFC 1035, RFC 6891 for the OPT record)

def encode_name(name: str) -> bytes:
    out = b""
    for label in name.rstrip(".").split("."):
        raw = label.encode("idna") if not label.isascii() else label.encode()
        if not raw or len(raw) > 63:
            raise DnsError(f"bad label in '{name}'")
        out += bytes([len(raw)]) + raw
    out += b"\0"
    if len(out) > MAX_NAME:
        raise DnsError(f"'{name}' is longer than 255 bytes")
    return out


def encode_query(qid: int, name: str, qtype: int) -> bytes:
    """A recursive query for (name, qtype, IN) with an EDNS0 OPT record."""
    head = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 1)
    opt = b"\0" + struct.pack("!HHIH", OPT, EDNS_SIZE, 0, 0)
    return head + encode_name(name) + struct.pack("!HH", qtype, CLASS_IN) + opt


def _read_name(msg: bytes, pos: int):
    """-> (lowercase dotted name, position after it in place)."""
    labels, end, jumps, total = [], None, 0, 0
    while True:
        if pos >= len(msg):
            raise DnsError("name runs past the message")
        n = msg[pos]
        if n & 0xC0 == 0xC0:
            if pos + 1 >= len(msg):
                raise DnsError("truncated compression pointer")
            target = ((n & 0x3F) << 8) | msg[pos + 1]
            if end is None:
                end = pos + 2
            jumps += 1
            if jumps > 64 or target >= pos:
                raise DnsError("compression pointer loop")
            pos = target
            continue
        if n & 0xC0:
            raise DnsError("unknown label type")
        pos += 1
        if n == 0:
            break
        if pos + n > len(msg):
            raise DnsError("label runs past the message")
        total += n + 1
        if total > MAX_NAME:
            raise DnsError("name longer than 255 bytes")
        labels.append(msg[pos:pos + n].decode("latin-1").lower())
        pos += n
    return ".".join(labels), (end if end is not None else pos)


@dataclass
class Answer:
    rcode: int
    truncated: bool
    addresses: list            # of the asked type, after CNAMEs, in answer order
    ttl: int | None            # smallest TTL of the records used; None: no address


def parse_response(msg: bytes, qid: int, qname: str, qtype: int) -> Answer:
    """The answer to our (qid, qname, qtype) query in `msg`; DnsError when
    it is malformed or answers another question."""
    if len(msg) < 12:
        raise DnsError("shorter than a header")
    rid, flags, qd, an, _ns, _ar = struct.unpack_from("!HHHHHH", msg)
    if rid != qid or not flags & 0x8000:
        raise DnsError("not the answer to our query")
    if (flags >> 11) & 0xF:
        raise DnsError("not a standard query's answer")
    if qd != 1:
        raise DnsError("answer without our question")
    name, pos = _read_name(msg, 12)
    if pos + 4 > len(msg):
        raise DnsError("truncated question")
    rtype, rclass = struct.unpack_from("!HH", msg, pos)
    pos += 4
    if name != qname.lower().rstrip(".") or rtype != qtype or rclass != CLASS_IN:
        raise DnsError("answer to another question")
    rcode = flags & 0xF
    records = []
    for _ in range(an):
        owner, pos = _read_name(msg, pos)
        if pos + 10 > len(msg):
            raise DnsError("truncated record")
        rtype, rclass, ttl, rdlen = struct.unpack_from("!HHIH", msg, pos)
        pos += 10
        if pos + rdlen > len(msg):
            raise DnsError("record data runs past the message")
        if rclass == CLASS_IN:
            if rtype == CNAME:
                target, after = _read_name(msg, pos)
                if after > pos + rdlen:
                    raise DnsError("CNAME runs past its record")
                records.append((owner, rtype, min(ttl, 0x7FFFFFFF), target))
            elif rtype == qtype == A and rdlen == 4:
                records.append((owner, rtype, min(ttl, 0x7FFFFFFF),
                                str(ipaddress.IPv4Address(msg[pos:pos + 4]))))
            elif rtype == qtype == AAAA and rdlen == 16:
                records.append((owner, rtype, min(ttl, 0x7FFFFFFF),
                                ipaddress.IPv6Address(msg[pos:pos + 16]).compressed))
        pos += rdlen
    # Follow the CNAME chain from the name asked.
    target, ttl = qname.lower().rstrip("."), None
    for _ in range(MAX_CNAMES + 1):
        addrs = [(t, v) for o, r, t, v in records if o == target and r == qtype]
        if addrs:
            ttl = min([t for t, _ in addrs] + ([ttl] if ttl is not None else []))
            out = []
            for _, v in addrs:
                if v not in out:
                    out.append(v)
            return Answer(rcode, bool(flags & 0x0200), out, ttl)
        alias = [(t, v) for o, r, t, v in records if o == target and r == CNAME]
        if not alias:
            break
        ttl = alias[0][0] if ttl is None else min(ttl, alias[0][0])
        target = alias[0][1]
    return Answer(rcode, bool(flags & 0x0200), [], None)


# --------------------------------------------------------------------------
# One name's lookup

def candidates(name: str, settings: Settings) -> list:
    """The names asked in turn (glibc's search rules)."""
    if name.endswith("."):
        return [name.rstrip(".")]
    searched = [f"{name}.{d}" for d in settings.search]
    if name.count(".") >= settings.ndots:
        return [name] + searched
    return searched + [name]


class Lookup:
    """A name's resolution, stepped by its owner: `fileno()` to wait on,
    `deadline` to wake at, then `step(now)`; `result` is set when it ends:
    ("ok", [addresses], ttl or None) or ("fail", why)."""

    def __init__(self, name: str, settings: Settings, now: float):
        self.name = name
        self.settings = settings
        self.result = None
        self.sock = None
        self.deadline = now
        self.tcp, self.out, self.inbuf = False, b"", b""
        addrs = hosts_lookup(name, settings.hosts)
        if addrs is not None:
            addrs = [a for a in addrs if settings.ipv6 or ":" not in a]
            if addrs:
                self.result = ("ok", sort_addresses(addrs), None)
                return
        self.names = candidates(name, settings)
        self.qtypes = (A, AAAA) if settings.ipv6 else (A,)
        self.cand = 0            # index in names
        self.server = 0          # index in settings.nameservers
        self.round = 0
        self.why = "no answer"
        self.negative = "no such name"
        self._send(now)

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _send(self, now, tcp=False):
        """Asks the current name of the current nameserver: over UDP, or
        over TCP (RFC 7766: each message after its 2-byte length) when a
        UDP answer came truncated."""
        self.close()
        host, port = self.settings.nameservers[self.server]
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.pending, self.answers = {}, {}
        self.tcp, self.out, self.inbuf = tcp, b"", b""
        qname = self.names[self.cand]
        try:
            kind = socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
            self.sock = socket.socket(family, kind | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
            try:
                self.sock.connect((host, port))   # UDP: only its answers reach us
            except BlockingIOError:
                pass                               # TCP: connecting
            for qtype in self.qtypes:
                # os.urandom, not `secrets`: that imports hmac and with it
                # OpenSSL, whose initialisation maps 3 MiB the master would keep.
                qid = int.from_bytes(os.urandom(2), "big")
                q = encode_query(qid, qname, qtype)
                if tcp:
                    self.out += struct.pack("!H", len(q)) + q
                else:
                    self.sock.send(q)
                self.pending[qtype] = qid
        except DnsError as exc:       # a search name too long: the next one
            self.cand += 1
            if self.cand >= len(self.names):
                self._end(("fail", str(exc)))
            else:
                self._send(now)
            return
        except OSError as exc:
            self.why = f"{host}: {exc.strerror or exc}"
            self.deadline = now       # next server at the next step
            self.pending = {}
            return
        self.deadline = now + self.settings.timeout

    def _end(self, result):
        self.close()
        self.result = result

    def _next_server(self, now, why):
        self.why = why
        self.server += 1
        if self.server >= len(self.settings.nameservers):
            self.server = 0
            self.round += 1
            if self.round >= self.settings.attempts:
                self._end(("fail", why))
                return
        self._send(now)

    def step(self, now: float):
        """Reads what arrived, moves on when the try timed out."""
        if self.result is not None:
            return
        while self.sock is not None and len(self.answers) < len(self.pending):
            try:
                if self.out:           # TCP: the queries, as the connection takes them
                    self.out = self.out[self.sock.send(self.out):]
                msg = self._receive()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:     # ICMP port unreachable, refused, reset, ...
                host = self.settings.nameservers[self.server][0]
                self._next_server(now, f"{host}: {exc.strerror or exc}")
                return
            if msg is None:
                break
            for qtype, qid in self.pending.items():
                if qtype in self.answers:
                    continue
                try:
                    answer = parse_response(msg, qid, self.names[self.cand], qtype)
                except DnsError:
                    continue           # not ours, or malformed: still waiting
                if answer.truncated and not self.tcp:
                    self._send(now, tcp=True)   # the whole answer over TCP
                    return
                self.answers[qtype] = answer
                break
        if self.pending and len(self.answers) == len(self.pending):
            self._judge(now)
        elif now >= self.deadline:
            host = self.settings.nameservers[self.server][0]
            self._next_server(now, self.why if not self.pending else f"{host}: timed out")

    def _receive(self):
        """One message, or None when none is whole yet (TCP)."""
        if not self.tcp:
            return self.sock.recv(65535)
        for _ in range(2):
            if len(self.inbuf) >= 2:
                n = struct.unpack_from("!H", self.inbuf)[0]
                if len(self.inbuf) >= 2 + n:
                    msg, self.inbuf = self.inbuf[2:2 + n], self.inbuf[2 + n:]
                    return msg
            chunk = self.sock.recv(65537)
            if not chunk:
                raise ConnectionResetError(0, "closed the connection")
            self.inbuf += chunk
        return None

    def _judge(self, now):
        host = self.settings.nameservers[self.server][0]
        answers = [self.answers[q] for q in self.qtypes]
        bad = [a.rcode for a in answers if a.rcode not in (NOERROR, NXDOMAIN)]
        if bad:
            self._next_server(now, f"{host}: {_RCODES.get(bad[0], f'rcode {bad[0]}')}")
            return
        addrs = [x for a in answers for x in a.addresses]
        if addrs:
            ttls = [a.ttl for a in answers if a.ttl is not None]
            self._end(("ok", sort_addresses(addrs), min(ttls)))
            return
        if all(a.rcode == NOERROR for a in answers):
            self.negative = "no address"
        self.cand += 1
        if self.cand >= len(self.names):
            self._end(("fail", self.negative))
            return
        self._send(now)


_RCODES = {1: "format error", 2: "server failure", 4: "not implemented", 5: "refused"}


def resolve(name: str, settings: Settings):
    """Blocking: ("ok", addresses, ttl) or ("fail", why)."""
    lookup = Lookup(name, settings, time.monotonic())
    while lookup.result is None:
        wait = max(0.0, lookup.deadline - time.monotonic())
        if lookup.fileno() >= 0:
            fd = lookup.fileno()
            select.select([fd], [fd] if lookup.out else [], [], wait)
        lookup.step(time.monotonic())
    return lookup.result
