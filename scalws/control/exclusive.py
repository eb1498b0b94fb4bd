"""One server per pid file and per address: no twins.

- `PidFile(path)`: the pid file, opened and locked at start with a POSIX
  record lock (fcntl F_SETLK). The kernel holds it while the process lives
  and drops it when it dies, however it dies, and a forked child never
  inherits it; so a second scalwsd (or scalws-controller) for the same file
  refuses to start, naming the first (F_GETLK says who holds it), and a
  file left by one that died is simply taken over. The pid is written
  later (`write`), once the server is ready: init scripts wait for it.
  Nothing else may open the file in this process: closing any descriptor
  of a file drops the process's POSIX locks on it.
- `probe_free(listens)`: SO_REUSEPORT lets a second server of the same user
  bind beside a first one without a word and take part of its connections;
  so each TCP address is first bound alone, without SO_REUSEPORT (with
  SO_REUSEADDR, so connections in TIME_WAIT do not count), and a unix
  socket is tried with connect before its file is replaced.

Pure Python: imports nothing compiled.
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
import struct

from scalws.control.logs import log

_FLOCK = "hhqqi4x"     # struct flock on x86-64 and aarch64: type, whence, start, len, pid


class InUse(Exception):
    """Another server holds the pid file or listens on an address; the
    message says which and what to do."""


def _holder(fd: int) -> int:
    """The pid holding a POSIX lock on fd's file, or 0."""
    try:
        req = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        l_type, _w, _s, _l, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, req))
    except OSError:
        return 0
    return pid if l_type != fcntl.F_UNLCK else 0


class PidFile:
    def __init__(self, path: str, what: str = "scalwsd"):
        self.path = path
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise InUse(f"pid: cannot open the pid file {path}: {exc.strerror or exc}") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise InUse(f"pid: cannot lock the pid file {path}: "
                            f"{exc.strerror or exc}") from None
            who = f"pid {holder}" if holder else "its pid unknown"
            stop = f"kill -TERM {holder}" if holder else f"kill -TERM $(cat {path})"
            raise InUse(f"pid: another {what} ({who}) is running with the pid file {path}; "
                        f"not starting a second one beside it (stop it first: {stop})") from None
        old = os.pread(fd, 32, 0).strip()
        if old:
            log.info("the pid file %s was left by pid %s, which is gone: taken over", path,
                     old.decode("ascii", "replace"))
        os.ftruncate(fd, 0)
        self.fd = fd

    def write(self) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def remove(self) -> None:
        """At exit: the file goes; the lock goes with the process."""
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def close_in_child(self) -> None:
        """In a forked child (which holds no lock: POSIX locks are not
        inherited), the descriptor only."""
        os.close(self.fd)


def probe_free(listens, held=()) -> None:
    """Raises InUse for the first of `listens` (config.model.Listen) that
    another process listens on. Keys in `held` are this process's own and
    not probed, nor TCP addresses on a port it holds (a wildcard beside a
    specific address of one configuration would collide with itself)."""
    held_ports = {(k[0], k[2]) for k in held if k[0] != "unix"}
    for listen in listens:
        if listen.key in held:
            continue
        if listen.kind == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(listen.path)
                in_use = True
            except OSError:
                in_use = False   # nobody answers: a stale file, replaced when bound
            finally:
                s.close()
        else:
            if (listen.kind, listen.port) in held_ports:
                continue
            family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
            s = socket.socket(family, socket.SOCK_DGRAM if listen.kind == "quic"
                              else socket.SOCK_STREAM)
            try:
                if listen.kind != "quic":
                    # TCP: past TIME_WAIT; a listener there still refuses the bind.
                    # (UDP: SO_REUSEADDR would share the port with another
                    # server's sockets that set it too.)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind((listen.host, listen.port))
                in_use = False
            except OSError as exc:
                in_use = exc.errno == errno.EADDRINUSE   # others: the real bind says
            finally:
                s.close()
        if in_use:
            f, line, col = listen.mark
            raise InUse(f"{f}:{line}:{col}: listen '{listen.text}': cannot bind: address "
                        f"already in use: another server (or another scalwsd) listens there")
