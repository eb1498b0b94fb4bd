"""The status process: serves /metrics (Prometheus text format 0.0.4) and
/status (JSON) from the shared counters block (stats.py), so that the
workers never do any work for a scrape (issue 20; ADR 0011).

A child of the master, like the TLS keeper: forked with the block and the
listening socket the master bound (a bind error is a start-up error with
the config line; a restarted status process reuses the socket), supervised
and restarted if it dies, replaced with the block of each new generation
on reload. A small server on the workers' loop (control/loop.py; it was
asyncio's until issue 37, whose 5.7 MiB the process carried for this):
HTTP/1.0 and
1.1 GET/HEAD, one request per connection, clients outside `status.allow`
refused with 403 (the probes `/ready` and `/live` excepted: they say one
word of the master's state, from its health page, health.py, and a kubelet
probes from its node's address).
"""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import traceback

from scalws.control import cacheshared  # noqa: F401 (stats.read's lazy import, before `user`)
from scalws.control import health as health_mod
from scalws.control import forkmem, procs, sandbox
from scalws.control import stats as stats_mod
from scalws.control.logs import log
from scalws.control.loop import Loop

TYPE_CHECKING = False  # typing is not imported at run time (a worker's memory)
if TYPE_CHECKING:
    from typing import NoReturn

HEAD_MAX = 8192
READ_TIMEOUT = 5.0         # from a connection's accept to its close
ACCEPT_BATCH = 64
ACCEPT_PAUSE = 1.0         # after an accept that failed (out of descriptors, ...)
PROM_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def instances_source(paths):
    """A StatusServer source for scalws-controller: [(label dict, stats
    file path)]; each file is read again on every request (a reload renames
    a new file over the path), one missing or invalid at that moment is
    skipped."""
    def source():
        dicts, labels = [], []
        for lab, path in paths:
            try:
                dicts.append(stats_mod.read(path))
            except Exception:  # noqa: gone, half-created or of another layout
                continue
            labels.append(lab)
        return dicts, labels
    return source


def bind(st):
    """The listening socket of `status:` (model.Status), non-blocking; an
    OSError naming the config line when it cannot be bound. The master and
    the controller both bind it this way."""
    family = socket.AF_INET6 if ":" in st.host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((st.host, st.port))
        s.listen(64)
    except OSError as exc:
        s.close()
        f, line, col = st.mark
        raise OSError(f"{f}:{line}:{col}: status.listen '{st.host}:{st.port}': "
                      f"cannot bind: {exc.strerror or exc}") from exc
    s.setblocking(False)
    return s


PROBES = ("/ready", "/live")


class StatusServer:
    def __init__(self, source, allow, zones=None, health=None, smaps=None):
        """`source`: the counters block (a mapping) of one scalwsd, or a
        callable returning (list of stats dicts, list of label dicts) to be
        summed (scalws-controller: one per running instance). `health`:
        the master's health page (health.py), None: no probes. `smaps`:
        this process's /proc/self/smaps (forkmem.open_smaps) when serve()
        is to drop the start-up's library pages once it is ready."""
        self.source = source
        self.zones = zones         # name -> cache zone mapping (control/cacheshared.py)
        self.health = health
        self.smaps = smaps
        self.allow = [ipaddress.ip_network(a, strict=False) for a in allow]
        self.loop = None

    def allowed(self, peer) -> bool:
        if not peer:
            return False
        try:
            addr = ipaddress.ip_address(peer[0].split("%")[0])
        except ValueError:
            return False
        if addr.version == 6 and addr.ipv4_mapped:
            addr = addr.ipv4_mapped
        return any(addr in net for net in self.allow)

    def answer(self, method, target):
        path = target.split("?", 1)[0]
        if path in PROBES and self.health is not None:
            ok, line = health_mod.probe(self.health, path)
            if ok:
                return 200, "OK", "text/plain", line.encode()
            return 503, "Service Unavailable", "text/plain", line.encode()
        if path not in ("/metrics", "/status"):
            known = "/metrics, /status, /ready or /live" if self.health is not None \
                else "/metrics or /status"
            return 404, "Not Found", "text/plain", f"not found: try {known}\n".encode()
        if callable(self.source):
            dicts, labels = self.source()
        else:
            dicts, labels = [stats_mod.read(self.source, self.zones)], None
        if path == "/metrics":
            # Summed: the same series with and without an `instance` label
            # in one exposition would be two families of one name.
            if not dicts:
                return 503, "Service Unavailable", "text/plain", b"no instance running\n"
            body = stats_mod.render_prometheus(dicts).encode()
            return 200, "OK", PROM_TYPE, body
        if labels is None:
            text = stats_mod.render_json(dicts)
        else:  # the sum, and each instance's own numbers
            total = json.loads(stats_mod.render_json(dicts)) if dicts else None
            text = json.dumps({"total": total,
                               "instances": json.loads(stats_mod.render_json(dicts, labels))})
        body = (text + "\n").encode()
        return 200, "OK", "application/json", body

    # ---- the server, on the worker's loop (control/loop.py): no asyncio -------------------
    def request(self, head, allowed):
        """(method, status, reason, content type, body) for a request head."""
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if not allowed and (len(line) != 3 or line[1].split("?", 1)[0] not in PROBES):
            return ("GET", 403, "Forbidden", "text/plain", b"forbidden\n")
        if len(line) != 3 or not line[2].startswith("HTTP/1."):
            return ("GET", 400, "Bad Request", "text/plain", b"bad request\n")
        if line[0] not in ("GET", "HEAD"):
            return (line[0], 405, "Method Not Allowed", "text/plain", b"")
        return (line[0], *self.answer(line[0], line[1]))

    def serve(self, sock, ready_fd):
        loop = self.loop = Loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            loop.add_signal_handler(sig, loop.stop)
        loop.add_reader(sock.fileno(), self._accept, sock)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT,
                                                    signal.SIGQUIT})
        os.write(ready_fd, b"R")
        os.close(ready_fd)
        if self.smaps is not None:  # the start-up's library pages, as a worker's
            forkmem.drop_load_pages(self.smaps)
            self.smaps = None
        loop.run_forever()
        loop.close()

    def _accept(self, lsock):
        for _ in range(ACCEPT_BATCH):
            try:
                sock, peer = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, ...: a pause, as asyncio's
                log.warning("status: accept: %s; accepting again in %gs", exc.strerror or exc,
                            ACCEPT_PAUSE)
                self.loop.remove_reader(lsock.fileno())
                self.loop.call_later(ACCEPT_PAUSE, self.loop.add_reader, lsock.fileno(),
                                     self._accept, lsock)
                return
            sock.setblocking(False)
            c = _Client(sock, self.allowed(peer))
            c.timer = self.loop.call_later(READ_TIMEOUT, self._close, c)
            if not c.allowed and self.health is None:
                self._reply(c, ("GET", 403, "Forbidden", "text/plain", b"forbidden\n"))
            else:
                self.loop.add_reader(c.fd, self._read, c)

    def _read(self, c):
        try:
            data = c.sock.recv(HEAD_MAX)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(c)
            return
        if not data:
            self._close(c)
            return
        c.buf += data
        end = c.buf.find(b"\r\n\r\n")
        if end < 0 or end + 4 > HEAD_MAX:
            if end >= 0 or len(c.buf) > HEAD_MAX:
                self._close(c)  # a head longer than HEAD_MAX: closed unanswered
            return
        self.loop.remove_reader(c.fd)
        try:
            answer = self.request(bytes(c.buf[:end + 4]), c.allowed)
        except Exception:  # noqa: BLE001 - a source that fails: its client gets a 500 now
            log.error("status: answering %r:\n%s", bytes(c.buf[:min(end, 200)]),
                      traceback.format_exc())
            answer = ("GET", 500, "Internal Server Error", "text/plain", b"internal error\n")
        self._reply(c, answer)

    def _reply(self, c, answer):
        method, status, reason, ctype, body = answer
        c.out = memoryview(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                           f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                           + (b"" if method == "HEAD" else body))
        self._write(c)

    def _write(self, c):
        try:
            c.out = c.out[c.sock.send(c.out):]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(c)
            return
        if c.out:
            self.loop.add_writer(c.fd, self._write, c)
        else:
            self._close(c)

    def _close(self, c):
        if c.sock is None:
            return
        c.timer.cancel()
        self.loop.remove_reader(c.fd)
        self.loop.remove_writer(c.fd)
        c.sock.close()
        c.sock = None


class _Client:
    """One connection: READ_TIMEOUT from its accept to its close, whatever
    it is doing (reading the head or the answer)."""
    __slots__ = ("sock", "fd", "allowed", "buf", "out", "timer")

    def __init__(self, sock, allowed):
        self.sock = sock
        self.fd = sock.fileno()
        self.allowed = allowed
        self.buf = bytearray()
        self.out = None
        self.timer = None


def run(source, allow, sock, errlog, ready_fd, zones=None, user=None, master=0,
        health=None) -> "NoReturn":
    """In the forked child: serve until TERM (or the death of the master,
    `master`'s pid: the same TERM); never returns. It reads only memory
    mapped before the fork, so as root it serves as the workers' `user`."""
    code = 0
    try:
        errlog.set_worker("status")
        smaps = forkmem.open_smaps()  # before `user`, as a worker does
        if user:
            sandbox.preload()  # the Python installation may be closed to `user`
            procs.become(user)
        if master and not procs.follow_parent(signal.SIGTERM, master):
            return
        for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_IGN if sig != signal.SIGCHLD else signal.SIG_DFL)
        StatusServer(source, allow, zones, health, smaps).serve(sock, ready_fd)
    except BaseException:
        try:
            log.critical("the status process failed:\n%s", traceback.format_exc())
        finally:
            code = 1
    finally:
        os._exit(code)
