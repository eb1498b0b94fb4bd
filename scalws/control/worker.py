"""A worker process: one uvloop loop, one C engine, pinned to one CPU.

`run()` is called in the child right after the master forks. It owns the
listening sockets it was handed (the master keeps its own copies, so a
worker's exit never closes a listening socket), never binds, and exits with
os._exit so nothing of the master's Python state runs twice.

Signals (as nginx's workers): TERM/INT graceful stop (no new connections,
idle keep-alives closed at once, in-flight requests finished, exit within
shutdown_timeout); QUIT fast stop; USR1 reopen logs; HUP is the master's.
"""
from __future__ import annotations

import asyncio
import os
import pwd
import signal
import traceback

from scalws.control import profiles, sandbox
from scalws.control.logs import log

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


def _drop_privileges(user: str):
    if os.getuid() != 0:
        return
    pw = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)


class Worker:
    def __init__(self, config, index, cpu, sockets, errlog, ready_fd, tls=None, stats=None,
                 cache=None):
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

    def run(self) -> int:
        for sig in _ALL_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        # OpenSSL's socket BIO writes without MSG_NOSIGNAL: a peer that went
        # away must not kill the worker (Python ignores it already; say so).
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        # The stop and log signals stay blocked (as the master forked us)
        # until the loop runs: uvloop drops a signal that arrives after
        # add_signal_handler() but before run_forever(), and the master
        # passes a TERM on as soon as we report ready. Blocked, it waits.
        signal.pthread_sigmask(signal.SIG_SETMASK, _ALL_SIGNALS)
        self.errlog.set_worker(self.index)
        if self.cpu is not None:
            try:
                os.sched_setaffinity(0, {self.cpu})
            except OSError as exc:
                log.warning("worker %d: cannot pin to CPU %d: %s", self.index, self.cpu, exc)

        import uvloop  # compiled: imported only in workers

        from scalws.server.engine import Engine

        profiles.prepare()  # an instrumented build's, before `user:` applies
        cfg = self.config
        try:
            self.engine = Engine(cfg, self.index, self.tls, self.stats, self.cache)
        except ValueError as exc:  # a certificate that no longer loads, ...
            raise StartupError(str(exc)) from None
        for key, sock in self.sockets:
            fd = os.dup(sock.fileno())
            os.set_blocking(fd, False)
            self.engine.add_listener(fd, key)
            sock.close()  # the engine owns the dup; the master keeps the original
        self.engine.set_error_log(self.errlog.fd, cfg.log.level)
        try:
            self._open_logs()
        except OSError as exc:
            raise StartupError(f"cannot open the access log {cfg.log.access}: "
                               f"{exc.strerror or exc}") from exc
        if cfg.user:
            _drop_privileges(cfg.user)
        self.probe_fd = sandbox.open_probe()
        try:
            done = sandbox.apply_worker(cfg, self.index, self.engine.trap_sigsys)
        except sandbox.SandboxError as exc:
            raise StartupError(str(exc)) from None
        if done:
            log.debug("worker %d: sandbox: %s", self.index, ", ".join(done))
        # The loop after the sandbox: libuv's io_uring setup is refused
        # (ENOSYS) there, and it falls back to plain epoll (ADR 0012).
        self.loop = uvloop.new_event_loop()
        asyncio.set_event_loop(self.loop)

        loop = self.loop
        loop.add_signal_handler(signal.SIGTERM, self.graceful_stop)
        loop.add_signal_handler(signal.SIGINT, self.graceful_stop)
        loop.add_signal_handler(signal.SIGQUIT, self.fast_stop)
        loop.add_signal_handler(signal.SIGUSR1, self.reopen_logs)
        loop.add_signal_handler(signal.SIGHUP, lambda: None)
        if self.probe_fd >= 0:
            loop.add_signal_handler(signal.SIGUSR2, sandbox.run_probe, self.probe_fd, self.index)
        self.engine.start(loop)
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

    def reopen_logs(self):
        try:
            self.errlog.reopen()
            self.engine.set_error_log(self.errlog.fd, self.config.log.level)
            self._open_logs()
            log.log(25, "worker %d: logs reopened", self.index)
        except OSError as exc:
            log.error("worker %d: reopening logs failed: %s", self.index, exc)

    def graceful_stop(self):
        if self.loop.is_closed():
            return
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
        cache=None) -> "NoReturn":
    code = 0
    try:
        code = Worker(config, index, cpu, sockets, errlog, ready_fd, tls, stats, cache).run()
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
