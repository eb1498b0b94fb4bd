"""What the master's children do first: take their user, and follow the
master when it dies.

- `become(user)`: the worker's user switch (`user:`, or as root without it
  scalws/config/users.py's default), with the user's groups (initgroups, as
  nginx does, so a `www-data` membership reaches PHP-FPM's socket).
- `follow_parent(sig, parent)`: PR_SET_PDEATHSIG, so that a `kill -9` of
  the master (or of the controller above an instance's master) sends `sig`
  to the child instead of leaving it serving as an orphan. The kernel clears
  the setting when the child's credentials change, so it is set after
  `become`; and since the parent may have died before the call, the parent
  pid is compared afterwards (False: it is gone already).

Pure Python (ctypes): imports nothing compiled.
"""
from __future__ import annotations

import ctypes
import os
import pwd

PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]


def become(user: str) -> None:
    """As root: switch to `user` (its primary group and its groups); a
    no-op when not root. Raises KeyError (no such user) or OSError."""
    if os.getuid() != 0:
        return
    pw = pwd.getpwnam(user)
    os.initgroups(user, pw.pw_gid)
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)


def follow_parent(sig: int, parent: int) -> bool:
    """Asks for `sig` when the parent dies; False when `parent` is already
    gone (the caller acts as if `sig` had come)."""
    if _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return os.getppid() == parent
