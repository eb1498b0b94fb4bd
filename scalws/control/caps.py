"""The master's capabilities, lowered once it has started (ADR 0012).

A master started as root (the init.d variant, or by hand) binds its
sockets, sets its sysctls and opens its logs with every capability; after
that it keeps only what it needs for the rest of its life (KEEP) and drops
the others from its effective, permitted and inheritable sets, the ambient
set and the bounding set (the latter needs CAP_SETPCAP, which it has until
then). Children forked afterwards (workers, the TLS keeper, the status
process, apps) inherit the lowered sets; a root app without `user:` gets at
most KEEP after its execve, since the bounding set limits what root gains.

Pure Python: capset(2) and prctl(2) through ctypes, the numbers from
linux/capability.h. Nothing changes uid here, so PR_SET_KEEPCAPS is not
needed (a worker's or an app's setuid() to `user:` clears every capability,
as it should).
"""
from __future__ import annotations

import ctypes
import os

# linux/capability.h
CAP_CHOWN = 0
CAP_DAC_OVERRIDE = 1
CAP_KILL = 5
CAP_SETGID = 6
CAP_SETUID = 7
CAP_SETPCAP = 8
CAP_NET_BIND_SERVICE = 10

NAMES = {
    0: "CAP_CHOWN", 1: "CAP_DAC_OVERRIDE", 2: "CAP_DAC_READ_SEARCH", 3: "CAP_FOWNER",
    4: "CAP_FSETID", 5: "CAP_KILL", 6: "CAP_SETGID", 7: "CAP_SETUID", 8: "CAP_SETPCAP",
    9: "CAP_LINUX_IMMUTABLE", 10: "CAP_NET_BIND_SERVICE", 11: "CAP_NET_BROADCAST",
    12: "CAP_NET_ADMIN", 13: "CAP_NET_RAW", 14: "CAP_IPC_LOCK", 15: "CAP_IPC_OWNER",
    16: "CAP_SYS_MODULE", 17: "CAP_SYS_RAWIO", 18: "CAP_SYS_CHROOT", 19: "CAP_SYS_PTRACE",
    20: "CAP_SYS_PACCT", 21: "CAP_SYS_ADMIN", 22: "CAP_SYS_BOOT", 23: "CAP_SYS_NICE",
    24: "CAP_SYS_RESOURCE", 25: "CAP_SYS_TIME", 26: "CAP_SYS_TTY_CONFIG", 27: "CAP_MKNOD",
    28: "CAP_LEASE", 29: "CAP_AUDIT_WRITE", 30: "CAP_AUDIT_CONTROL", 31: "CAP_SETFCAP",
    32: "CAP_MAC_OVERRIDE", 33: "CAP_MAC_ADMIN", 34: "CAP_SYSLOG", 35: "CAP_WAKE_ALARM",
    36: "CAP_BLOCK_SUSPEND", 37: "CAP_AUDIT_READ", 38: "CAP_PERFMON", 39: "CAP_BPF",
    40: "CAP_CHECKPOINT_RESTORE",
}

# What the master needs after start:
#   NET_BIND_SERVICE  a reload may bind a new port below 1024 (listen, status)
#   SETUID, SETGID    workers and apps drop to `user:` (setgroups/initgroups too)
#   KILL              signalling children that run as another user
#   DAC_OVERRIDE      USR1 reopens logs logrotate created 0640 scalws:adm in a
#                     0750 scalws-owned folder; new workers open access logs
#                     there as root before they drop to `user:`
#   CHOWN             the apps' private socket folder, created (and chowned to
#                     the apps' user) when a reload adds the first app
# Not kept: SYS_RESOURCE (RLIMIT_NOFILE is raised before), SYS_NICE
# (sched_setaffinity of oneself needs none), SETPCAP, NET_ADMIN, SYS_ADMIN, ...
# The workers' sandbox needs none: no_new_privs, then Landlock and seccomp.
KEEP = (CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_NET_BIND_SERVICE)

_VERSION_3 = 0x20080522
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]


def last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


def names(mask: int) -> list[str]:
    return [NAMES.get(i, f"cap{i}") for i in range(64) if mask >> i & 1]


def _prctl(*args):
    args = list(args) + [0] * (5 - len(args))
    r = _libc.prctl(*args)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def _capset(eff: int, prm: int, inh: int):
    hdr = _Header(_VERSION_3, 0)
    data = (_Data * 2)()
    for i in range(2):
        data[i].effective = eff >> (32 * i) & 0xFFFFFFFF
        data[i].permitted = prm >> (32 * i) & 0xFFFFFFFF
        data[i].inheritable = inh >> (32 * i) & 0xFFFFFFFF
    if _libc.capset(ctypes.byref(hdr), data) < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"capset: {os.strerror(e)}")


def current(pid: int | str = "self") -> dict:
    """CapInh/CapPrm/CapEff/CapBnd/CapAmb of a process, as integers."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Cap"):
                k, v = line.split(":")
                out[k] = int(v, 16)
    return out


def drop_master(keep=KEEP) -> tuple[int, bool]:
    """Lowers this process's capabilities to `keep`. Does nothing unless
    euid is 0. Returns (the kept mask, whether the bounding set was
    lowered); raises OSError when capset fails."""
    want = 0
    for c in keep:
        want |= 1 << c
    bounding = True
    for c in range(last_cap() + 1):
        if not want >> c & 1:
            try:
                if _prctl(PR_CAPBSET_READ, c):
                    _prctl(PR_CAPBSET_DROP, c)
            except OSError:
                bounding = False  # no CAP_SETPCAP (a container): the other sets still go
    try:
        _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass  # a kernel before 4.3 has no ambient set
    have = current()
    kept = want & have.get("CapPrm", want)
    _capset(kept, kept, 0)
    return kept, bounding
