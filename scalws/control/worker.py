"""A worker process: one loop (control/loop.py), one C engine, pinned to one CPU.

`run()` is called in the child right after the master forks. It owns the
listening sockets it was handed (the master keeps its own copies, so a
worker's exit never closes a listening socket), never binds, and exits with
os._exit so nothing of the master's Python state runs twice.

Signals (as nginx's workers): TERM/INT graceful stop (no new connections,
idle keep-alives closed at once, in-flight requests finished, exit within
shutdown_timeout); QUIT fast stop; USR1 reopen logs; HUP is the master's.
The master's death is a TERM too (PR_SET_PDEATHSIG): no worker outlives it.

A worker switches to its user (scalws/config/users.py: as root it never
stays root) and confines itself (control/sandbox.py) once it holds
everything it reads besides its document roots: sockets, TLS keys, log
descriptors and every module it imports. On USR1 the new log descriptors
come from the master over `ctl` (a SOCK_SEQPACKET socket), since the worker
may no longer open the log folders itself; the same socket brings the new
addresses of upstream host names (live DNS, control/resolver.py), applied
as they arrive.
"""
from __future__ import annotations

import os
import signal
import socket
import traceback

from scalws.config import users
from scalws.control import forkmem, procs, profiles, sandbox, title
from scalws.control import resolver as resolver_mod
from scalws.control.logs import log
from scalws.control.loop import Loop

TYPE_CHECKING = False  # typing is not imported at run time (a worker's memory)
if TYPE_CHECKING:
    from typing import NoReturn

# Exit status for "configuration is fine but this worker cannot start": the
# master backs off instead of restarting in a tight loop.
EXIT_STARTUP = 3

_ALL_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
                signal.SIGUSR1, signal.SIGCHLD}


class StartupError(Exception):
    """The configuration is valid but this worker cannot start (its access
    log's folder was removed, ...): logged in one line, without a traceback."""


def _open_access_log(path):
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)


# A log-descriptor message from the master (Master._send_logs): b"L", then
# b"E" or b"-" (an error log descriptor follows or not), then b"A" or b"-"
# (an access log descriptor); the descriptors in that order.
LOG_MESSAGE = 3
# A DNS update (control/resolver.py): b"U" and JSON {"name", "addrs"}.
DNS_MESSAGE = b"U"
CTL_MAX = 65536


class Worker:
    def __init__(self, config, index, cpu, sockets, errlog, ready_fd, tls=None, stats=None,
                 cache=None, ctl=None, master_pid=0, steer=None):
        self.config = config
        self.index = index
        self.cpu = cpu
        self.sockets = sockets  # [(listen key, socket)]
        self.errlog = errlog
        self.ready_fd = ready_fd
        self.tls = tls              # tlsshared.Generation
        self.stats = stats          # its slot of the shared counters (control/stats.py)
        self.cache = cache          # the cache's shared memory (control/cacheshared.py)
        self.engine = None
        self.loop = None
        self.access_fd = -1
        self.probe_fd = -1          # the sandbox's test hook (control/sandbox.py)
        self.smaps = None           # /proc/self/smaps until the start-up's pages go (_running)
        self.ctl = ctl              # socket: log descriptors (reopen_logs) and DNS updates
        self._logs = (False, -1, -1)  # the newest log message not applied yet
        self.master_pid = master_pid
        self.steer = steer          # the master's steering page (net/steer.c), or None

    def run(self) -> int:
        for sig in _ALL_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        # OpenSSL's socket BIO writes without MSG_NOSIGNAL: a peer that went
        # away must not kill the worker (Python ignores it already; say so).
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        # The stop and log signals stay blocked (as the master forked us)
        # until the loop runs its first callback: the master passes a TERM
        # on as soon as we report ready, and the handlers are set only
        # once the engine is built. Blocked, it waits.
        signal.pthread_sigmask(signal.SIG_SETMASK, _ALL_SIGNALS)
        self.errlog.set_worker(self.index)
        title.set_title(f"scalwsd: worker {self.index}", title.worker_comm(self.index))
        if self.cpu is not None:
            try:
                os.sched_setaffinity(0, {self.cpu})
            except OSError as exc:
                log.warning("worker %d: cannot pin to CPU %d: %s", self.index, self.cpu, exc)

        from scalws.server.engine import Engine  # loaded already: the master imports what
        # workers run (_load_data_plane)
        sandbox.preload()  # nothing is imported once it serves (docs/operations.md)

        profiles.prepare()  # an instrumented build's, before `user:` applies
        cfg = self.config
        try:
            self.engine = Engine(cfg, self.index, self.tls, self.stats, self.cache)
        except ValueError as exc:  # a certificate that no longer loads, ...
            raise StartupError(str(exc)) from None
        for key, sock, steer in self.sockets:
            fd = os.dup(sock.fileno())
            os.set_blocking(fd, False)
            self.engine.add_listener(fd, key, steer)
            sock.close()  # the engine owns the dup; the master keeps the original
        if self.steer is not None and cfg.workers > 1:
            self.engine.set_steering(self.steer, self.index, cfg.workers)
        self.engine.set_error_log(self.errlog.fd, cfg.log.level, cfg.log.error_format == "json")
        try:
            self._open_logs()
        except OSError as exc:
            raise StartupError(f"cannot open the access log {cfg.log.access}: "
                               f"{exc.strerror or exc}") from exc
        plan = sandbox.WorkerPlan(cfg)  # its roots opened while it may still reach them
        self.smaps = forkmem.open_smaps()  # read once it serves (_running)
        user = users.worker_user(cfg)
        if user:
            try:
                procs.become(user)
            except (KeyError, OSError) as exc:
                raise StartupError(f"cannot switch to the user {user}: {exc}") from None
        if self.master_pid and not procs.follow_parent(signal.SIGTERM, self.master_pid):
            raise StartupError("the master exited before this worker started")
        self.probe_fd = sandbox.open_probe()
        try:
            done = sandbox.apply_worker(cfg, self.index, self.engine.trap_sigsys, plan)
        except sandbox.SandboxError as exc:
            raise StartupError(str(exc)) from None
        if done:
            log.debug("worker %d: sandbox: %s", self.index, ", ".join(done))
        self.loop = Loop()

        loop = self.loop
        loop.add_signal_handler(signal.SIGTERM, self.graceful_stop)
        loop.add_signal_handler(signal.SIGINT, self.graceful_stop)
        loop.add_signal_handler(signal.SIGQUIT, self.fast_stop)
        loop.add_signal_handler(signal.SIGUSR1, self.reopen_logs)
        loop.add_signal_handler(signal.SIGHUP, lambda: None)
        if self.probe_fd >= 0:
            loop.add_signal_handler(signal.SIGUSR2, sandbox.run_probe, self.probe_fd, self.index)
        self.engine.start(loop)
        if self.ctl is not None:
            loop.add_reader(self.ctl.fileno(), self._read_ctl)
        loop.call_soon(self._running)
        loop.run_forever()
        self.engine.flush()
        return 0

    def _running(self):
        """The loop's first callback: signals can be handled now. The pipe
        stays open: a graceful stop says on it when this worker has stopped
        accepting ("S"), so that a reload reports READY only once no old
        worker can take a new connection (master.reload)."""
        os.write(self.ready_fd, b"R")
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _ALL_SIGNALS)
        # The code only start-up ran (the sandbox's set-up, the engine's
        # build, ...) leaves this worker's RSS: 2.8 MiB of a plain site's
        # 19.4 (ADR 0037); serving faults in again the pages it runs.
        log.debug("worker %d: %d mappings, %d kB of start-up pages unmapped (forkmem.py)",
                  self.index, *forkmem.drop_load_pages(self.smaps))
        self.smaps = None

    def _not_accepting(self):
        if self.ready_fd >= 0:
            try:
                os.write(self.ready_fd, b"S")
            except OSError:
                pass               # the master is gone or stopped listening: nothing to tell
            os.close(self.ready_fd)
            self.ready_fd = -1

    def _open_logs(self):
        cfg = self.config.log
        old = self.access_fd
        self.access_fd = _open_access_log(cfg.access) if cfg.access else -1
        self.engine.set_access_log(self.access_fd, cfg.format, cfg.buffer, cfg.flush)
        if old >= 0:
            os.close(old)

    def _read_ctl(self):
        """What the master sent on `ctl`: DNS updates are applied now; the
        newest log-descriptor message waits in self._logs for the USR1
        that follows it (older ones' descriptors are closed)."""
        while self.ctl is not None:
            try:
                msg, fds, flags, _addr = socket.recv_fds(self.ctl, CTL_MAX, 2)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                log.error("worker %d: reading the master's control socket: %s",
                          self.index, exc.strerror or exc)
                break
            if not msg and not fds:        # the master is gone
                if self.loop is not None:
                    self.loop.remove_reader(self.ctl.fileno())
                self.ctl.close()
                self.ctl = None
                break
            if msg[:1] == DNS_MESSAGE:
                for fd in fds:
                    os.close(fd)
                if flags & socket.MSG_TRUNC:
                    log.error("worker %d: a DNS update longer than %d bytes was cut; this "
                              "worker keeps its servers until the next", self.index, CTL_MAX)
                    continue
                self._dns_update(msg)
                continue
            for fd in self._logs[1:]:
                if fd >= 0:
                    os.close(fd)
            err, acc = -1, -1
            fds = list(fds)
            if len(msg) == LOG_MESSAGE and msg[1:2] == b"E" and fds:
                err = fds.pop(0)
            if len(msg) == LOG_MESSAGE and msg[2:3] == b"A" and fds:
                acc = fds.pop(0)
            for fd in fds:
                os.close(fd)
            self._logs = (True, err, acc)

    def _dns_update(self, msg):
        """A name's new addresses (control/resolver.py): the groups with
        servers from it change in the engine; connections to a removed
        address finish what they carry and close."""
        try:
            name, addrs = resolver_mod.decode(msg)
        except (ValueError, KeyError):
            log.error("worker %d: a malformed DNS message from the master", self.index)
            return
        for group in resolver_mod.apply(self.config, name, addrs):
            try:
                self.engine.set_upstream_servers(group, self.config.upstreams[group])
            except (MemoryError, ValueError) as exc:
                log.error("worker %d: upstream %s keeps its servers: %s", self.index, group,
                          exc or "out of memory")

    def _log_message(self):
        """The newest log-descriptor message the master sent, as (whether
        one came, error fd or -1, access fd or -1)."""
        self._read_ctl()
        got, self._logs = self._logs, (False, -1, -1)
        return got

    def reopen_logs(self):
        """USR1: the master opened the logs again (after logrotate moved
        them) and sent the descriptors; this worker only swaps them in."""
        got, err, acc = self._log_message()
        if not got:
            log.warning("worker %d: USR1 without new log descriptors from the master; "
                        "the logs stay as they were", self.index)
            return
        if err < 0 and acc < 0:
            return      # nothing to reopen: the error log is stderr, no access log
        if err >= 0:
            self.errlog.adopt(err)
            self.engine.set_error_log(self.errlog.fd, self.config.log.level,
                                      self.config.log.error_format == "json")
        if acc >= 0:
            cfg = self.config.log
            old = self.access_fd
            self.access_fd = acc
            self.engine.set_access_log(acc, cfg.format, cfg.buffer, cfg.flush)
            if old >= 0:
                os.close(old)
        log.log(25, "worker %d: logs reopened", self.index)

    def graceful_stop(self):
        if self.loop.is_closed():
            return
        if self.master_pid and os.getppid() != self.master_pid:
            log.warning("worker %d: the master (pid %d) is gone: finishing the requests in "
                        "flight, then exiting", self.index, self.master_pid)
        title.set_title(f"scalwsd: worker {self.index} (shutting down)")
        self.loop.call_later(self.config.shutdown_timeout, self._shutdown_timeout)
        self.engine.shutdown(self.loop.stop)  # no more accepts from here
        self._not_accepting()

    def _shutdown_timeout(self):
        log.warning("worker %d: shutdown_timeout (%gs) reached, closing %d connections",
                    self.index, self.config.shutdown_timeout, self.engine.counters()["active"])
        self.fast_stop()

    def fast_stop(self):
        self._not_accepting()
        self.engine.close_all()
        self.loop.stop()


def run(config, index, cpu, sockets, errlog, ready_fd, tls=None, stats=None,
        cache=None, ctl=None, master_pid=0, steer=None) -> "NoReturn":
    code = 0
    try:
        code = Worker(config, index, cpu, sockets, errlog, ready_fd, tls, stats, cache, ctl,
                      master_pid, steer).run()
    except StartupError as exc:
        try:
            log.critical("worker %d cannot start: %s", index, exc)
        finally:
            code = EXIT_STARTUP
    except BaseException:
        try:
            log.critical("worker %d failed to start or crashed:\n%s", index, traceback.format_exc())
        finally:
            code = EXIT_STARTUP
    finally:
        profiles.dump()  # a PGO training build's counters: os._exit skips them
        os._exit(code)
