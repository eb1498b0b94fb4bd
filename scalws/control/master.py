"""The master process: sockets, workers, signals.

The master binds every listening address once per worker (SO_REUSEPORT, so
the kernel spreads connections over the workers' accept queues) and keeps
those sockets for its whole life; workers are forked and inherit them.
Because the master holds every socket, a worker that exits (crash, reload,
kill -9) never closes an accept queue: connections queued on its socket wait
for the worker that replaces it. Unix sockets cannot be SO_REUSEPORT: one
socket is shared by every worker.

The master is a plain loop around sigtimedwait(): signals are blocked and
consumed synchronously, so there is no handler re-entrancy and no event loop
to fork from. It never imports compiled code before it forks.

Signals: TERM/INT graceful stop, QUIT fast stop, HUP reload, USR1 reopen logs,
CHLD reap and restart.

Managed apps (`apps:`) are children too, started before the web workers
and stopped after them; scalws/control/apps.py supervises them and this
loop calls it after every wakeup (ADR 0010).
"""
from __future__ import annotations

import mmap
import os
import resource
import select
import signal
import socket
import time

from scalws.config import users
from scalws.config.errors import ConfigError
from scalws.control import apps as apps_mod
from scalws.control import (caps, cfgload, exclusive, forkmem, quicsteer, sandbox, sdnotify,
                            statusd, title, tlskeeper)
from scalws.control import health as health_mod
from scalws.control import resolver as resolver_mod
from scalws.control import stats as stats_mod
from scalws.control import watch as watch_mod
from scalws.control import worker as worker_mod
from scalws.control.logs import NOTICE, ErrorLog, log
from scalws.control.cacheshared import CacheMemory
from scalws.control.tlsshared import Generation, Tickets, has_tls

SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
           signal.SIGUSR1, signal.SIGCHLD}
READY_TIMEOUT = 10.0      # a new worker must report ready within this
QUICK_DEATH = 2.0         # a worker dying younger than this counts as a crash loop
STOPPED_TIMEOUT = 2.0     # old workers confirm they stopped accepting within this
MIGRATE_REQ = "/proc/sys/net/ipv4/tcp_migrate_req"
STEER_PAGE = 4096         # >= sizeof(sws_steer_shm_t) (net.h)

# A QUIC socket's buffers: a burst of a connection's packets (a flight of
# 32 segments of 1452 bytes, with GSO) and of new handshakes should not be
# dropped by the kernel. Asked for, capped by net.core.[rw]mem_max
# (docs/operations.md, "HTTP/3").
UDP_BUFFER = 4 << 20


def _udp_buffers(s):
    for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        try:
            s.setsockopt(socket.SOL_SOCKET, opt, UDP_BUFFER)
        except OSError:
            pass


class StartupError(Exception):
    """The master cannot start (bind failed, ...); message names the config line."""


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by signal {sig} ({name})" + (", core dumped" if os.WCOREDUMP(status) else "")
    return f"exited with code {os.WEXITSTATUS(status)}"


class Slot:
    """Worker `index` of generation `gen`."""

    def __init__(self, index, gen, config, tls, stats=None, cache=None):
        self.index = index
        self.gen = gen
        self.config = config
        self.tls = tls             # tlsshared.Generation: ticket keys and OCSP slots
        self.stats = stats         # stats.Block of its generation: the worker writes its slot
        self.cache = cache         # cacheshared.View of its generation: zones, registry, eventfds
        self.pid = 0
        self.started = 0.0
        self.quick_deaths = 0
        self.restart_at = None     # monotonic time of a pending restart
        self.stopping = False
        self.ack_fd = None         # its pipe after "R": a graceful stop says "S" (no more accepts)
        self.ctl = None            # our end of its control socket: log descriptors on USR1


class Master:
    def __init__(self, config, config_path=None, stats_file=None):
        self.config = config
        self.path = config_path
        # The shared counters (stats.py, ADR 0011): the current generation's
        # block, the status listener's socket and process (statusd.py).
        self.stats_file = stats_file
        self.stats = None
        self.status_sock = None
        self.statusd = {}          # pid -> Block it serves
        self.statusd_pid = 0
        self.watch = None          # control/watch.py: `watch_config`, None when off
        self.resolver = None       # control/resolver.py: the upstreams' host names
        self._dns_unsent = {}      # (worker index, name) -> addresses not sent yet
        self.health = health_mod.Health()  # read by the status process: /ready, /live
        self._statusd_stopped = set()      # pids asked to stop once a graceful stop drained
        self.statusd_restart_at = None
        self.errlog = ErrorLog(config.log.error, config.log.level, config.log.error_format)
        self.sockets = {}          # listen key -> [socket per worker] (unix: one, shared)
        self.slots = {}            # index -> Slot of the current generation
        self.children = {}         # pid -> Slot (every generation)
        self.gen = 0
        self._ready_fds = set()    # read ends of readiness pipes not yet closed
        self._ack_slots = {}       # those pipes -> their Slot
        self.stopping = None       # None, "graceful", "fast"
        self.stop_deadline = None
        # TLS: the ticket-key page (kept across reloads), the current
        # generation's shared memory, and its keeper (tlskeeper.py).
        self.tickets = None
        self.tls = None
        # The response cache's zones, registry and eventfds (cacheshared.py).
        self.cache = CacheMemory()
        self.keepers = {}          # pid -> Generation it keeps
        self.keeper_pid = 0        # the current generation's keeper
        self.keeper_restart_at = None
        # Managed applications (control/apps.py); under scalws-controller it
        # runs them and $SCALWS_APP_SOCKETS names their sockets.
        self.apps = apps_mod.Apps(os.environ.get("SCALWS_APP_SOCKETS")
                                  if os.environ.get("SCALWS_INSTANCE") else None)
        # The pid file, locked for the master's life (exclusive.PidFile);
        # under scalws-controller the controller's.
        self.pidfile = None
        # Fair accept (ADR 0023): the steering page the workers share, for
        # the master's life; none under scalws-controller, whose instances
        # share one reuseport group per address.
        self.steer = None if os.environ.get("SCALWS_INSTANCE") else mmap.mmap(-1, STEER_PAGE)
        self.quic = quicsteer.QuicSockets()  # HTTP/3's socket sets, key byte, secret

    # ---- sockets -----------------------------------------------------------
    def _bind(self, listen):
        try:
            if listen.kind == "unix":
                try:
                    os.unlink(listen.path)
                except FileNotFoundError:
                    pass
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.bind(listen.path)
                os.chmod(listen.path, 0o666)
            else:
                family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
                udp = listen.kind == "quic"
                s = socket.socket(family, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if udp:
                    _udp_buffers(s)
                s.bind((listen.host, listen.port))
            if listen.kind != "quic":
                s.listen(listen.backlog)
            s.setblocking(False)
            return s
        except OSError as exc:
            f, line, col = listen.mark
            raise StartupError(f"{f}:{line}:{col}: listen '{listen.text}': cannot bind: "
                               f"{exc.strerror or exc}") from exc

    def _listens(self, config):
        out = {}
        for site in config.sites:
            for listen in site.listen:
                out.setdefault(listen.key, listen)
        return out

    def _ensure_sockets(self, config):
        """Binds what `config` needs that is not bound yet; returns the keys
        no longer needed (closed once the workers that use them are gone)."""
        wanted = self._listens(config)
        if not os.environ.get("SCALWS_INSTANCE"):  # the controller's instances share on purpose
            try:
                exclusive.probe_free(wanted.values(), held=set(self.sockets))
            except exclusive.InUse as exc:
                raise StartupError(str(exc)) from None
        parity = (self.gen + 1) % 2  # of the generation these sockets are for
        for key, listen in wanted.items():
            socks = self.sockets.setdefault(key, [])
            if listen.kind == "quic":
                self.quic.ensure(key, socks, parity, config.workers, lambda: self._bind(listen))
                continue
            n = 1 if listen.kind == "unix" else config.workers
            while len(socks) < n:
                socks.append(self._bind(listen))
        stale = []
        for key, socks in self.sockets.items():
            if key not in wanted:
                stale.append(key)
            elif key[0] == "tcp":
                while len(socks) > config.workers:
                    socks.pop().close()  # tcp_migrate_req moves its queue to the others
        return stale

    def _close_keys(self, keys):
        for key in keys:
            self.quic.forget(key)
            for s in self.sockets.pop(key, []):
                s.close()
            if key[0] == "unix":
                try:
                    os.unlink(key[1])
                except OSError:
                    pass

    def _worker_sockets(self, config, index, gen):
        """(key, socket, steer) for worker `index` of generation `gen`."""
        out = []
        for key in self._listens(config):
            socks = self.sockets[key]
            if key[0] == "quic":
                sock = self.quic.socket_of(key, gen, index)
                out.append((key, sock, self.quic.steer_of(key, sock, socks)))
            else:
                out.append((key, socks[0] if key[0] == "unix" else socks[index], None))
        return out

    # ---- workers -----------------------------------------------------------
    def _close_in_child(self, keep=(), cache=False):
        """In a freshly forked child: closes what only the master needs (the
        listening sockets not in `keep`, every readiness pipe, the apps'
        output pipes, the status socket unless kept, the workers' control
        sockets, and unless `cache` the cache's descriptors). A copy of a
        sibling's listening socket would keep it alive, and its queue
        unserved, after the master closes it."""
        if not cache:
            for fd in self.cache.fds():
                os.close(fd)
        mine = {id(s) for s in keep}
        for socks in self.sockets.values():
            for s in socks:
                if id(s) not in mine:
                    s.close()
        for fd in self._ready_fds:
            os.close(fd)
        for fd in self.apps.child_fds():
            os.close(fd)
        if self.status_sock is not None and id(self.status_sock) not in mine:
            self.status_sock.close()
        for slot in self.children.values():
            if slot.ctl is not None:
                slot.ctl.close()
        if self.pidfile is not None:
            self.pidfile.close_in_child()

    @staticmethod
    def _load_data_plane():
        """Imports what a worker runs (the engine, sandbox.preload's modules;
        control/loop.py came with worker.py) here, once, before any fork:
        their code, relocations and objects are then the master's pages,
        shared by every worker, instead of a private copy in each (4 idle
        workers: 3.9 MiB private each instead of 7.8); _fork keeps the
        children's collections off them. New native code therefore needs a
        restart, not a HUP (the package restarts on upgrade)."""
        import scalws.server.engine  # noqa: F401
        sandbox.preload()

    def _title(self):
        """ps and top: the master, or the controller's instance it is."""
        title.init()  # before any fork: the children write where we would
        inst = os.environ.get("SCALWS_INSTANCE")
        if inst:
            cpus = title.cpu_list(os.sched_getaffinity(0))
            title.set_title(f"scalws-controller: instance {inst} (cpus {cpus})",
                            f"scalws-inst{inst}")
        else:
            title.set_title(f"scalwsd: master process {self.path or ''}".rstrip(), "scalwsd")

    def _spawn(self, slot):
        """Forks worker `slot`; returns the read end of its readiness pipe."""
        cfg = slot.config
        rfd, wfd = os.pipe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        theirs.setblocking(False)
        cpu = cfg.cpus[slot.index % len(cfg.cpus)] if cfg.cpus else None
        socks = self._worker_sockets(cfg, slot.index, slot.gen)
        master = os.getpid()
        pid = forkmem.fork()
        if pid == 0:
            os.close(rfd)
            ours.close()
            self._close_in_child(keep=[s for _, s, _ in socks], cache=True)
            worker_mod.run(cfg, slot.index, cpu, socks, self.errlog, wfd, slot.tls,
                           slot.stats.slot(slot.index) if slot.stats else None,
                           slot.cache, theirs, master, self.steer)  # never returns
        os.close(wfd)
        theirs.close()
        if slot.ctl is not None:
            slot.ctl.close()
        slot.ctl = ours
        self._ready_fds.add(rfd)
        slot.ack_fd = rfd
        self._ack_slots[rfd] = slot
        slot.pid = pid
        slot.started = time.monotonic()
        slot.restart_at = None
        self.children[pid] = slot
        log.info("worker %d started (pid %d, cpu %s)", slot.index, pid, cpu)
        return rfd

    def _await_ready(self, fds, timeout=READY_TIMEOUT):
        """Waits until every worker whose pipe is in `fds` reported ready
        (or died). Returns the number that reported ready. The pipe of a
        ready worker stays open (Slot.ack_fd: _await_stopped)."""
        pending = set(fds)
        ready = 0
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.health.beat()  # a start or reload that waits is not a stuck master
            r, _, _ = select.select(list(pending), [], [], min(left, 1.0))
            for fd in r:
                pending.discard(fd)
                if os.read(fd, 1) == b"R":
                    ready += 1
                else:
                    self._drop_ack(fd)
        for fd in pending:
            self._drop_ack(fd)
        return ready

    def _drop_ack(self, fd):
        slot = self._ack_slots.pop(fd, None)
        if slot is not None:
            slot.ack_fd = None
        self._ready_fds.discard(fd)
        os.close(fd)

    def _await_stopped(self, slots, timeout=STOPPED_TIMEOUT):
        """After a graceful stop was asked of `slots`: waits until each says
        it no longer accepts ("S", or its pipe closes as it exits), so that
        a reload announces READY only once every new connection goes to the
        new generation (old and new workers share the listening sockets)."""
        pending = {s.ack_fd for s in slots if s.ack_fd is not None}
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                log.info("reload: %d old workers did not confirm they stopped accepting",
                         len(pending))
                break
            self.health.beat()
            r, _, _ = select.select(list(pending), [], [], min(left, 1.0))
            for fd in r:
                pending.discard(fd)
                self._drop_ack(fd)
        for fd in pending:
            self._drop_ack(fd)

    def _start_generation(self, config, tls, stats=None):
        self.gen += 1
        cache = self.cache.view(config)  # the zones outlive generations (cacheshared.py)
        slots = {i: Slot(i, self.gen, config, tls, stats, cache) for i in range(config.workers)}
        fds = [self._spawn(s) for s in slots.values()]
        ready = self._await_ready(fds)
        log.debug("master: %d mappings, %d kB of load-time pages unmapped (forkmem.py)",
                  *forkmem.drop_load_pages())
        return slots, ready

    # ---- the TLS keeper ------------------------------------------------------
    def _tls_generation(self, config):
        if self.tickets is None:
            self.tickets = Tickets()
            self.tickets.seed(config.tickets.rotation)  # before any worker exists
        return Generation(config, self.tickets)

    def _start_keeper(self, config, tls):
        """Forks the keeper of `tls` and waits for its first round (OCSP
        fetched, so the first handshakes staple); returns its pid, 0 when
        the configuration has no TLS."""
        if not has_tls(config):
            return 0
        rfd, wfd = os.pipe()
        master = os.getpid()
        pid = forkmem.fork()
        if pid == 0:
            os.close(rfd)
            title.set_title("scalwsd: TLS keeper", "scalwsd-tls")
            self._close_in_child()  # it serves nothing
            tlskeeper.run(config, tls, self.errlog, wfd, master)  # never returns
        os.close(wfd)
        self._ready_fds.add(rfd)
        self.keepers[pid] = tls
        log.info("TLS keeper started (pid %d)", pid)
        if not self._await_ready([rfd]):
            log.warning("the TLS keeper (pid %d) did not finish its first round in %gs; "
                        "starting the workers anyway", pid, READY_TIMEOUT)
        self._done_with_pipe(rfd)
        return pid

    def _done_with_pipe(self, rfd):
        """A readiness pipe that says nothing after "R" (the TLS keeper's, the
        status process's): closed once read, or it would stay open for the
        master's life, one per reload."""
        if rfd in self._ready_fds:
            self._drop_ack(rfd)

    # ---- the shared counters and the status process -------------------------
    def _stats_block(self, config):
        """A new counters block for `config`'s workers, before they fork."""
        path = self.stats_file or (config.status.file if config.status else None)
        self.cache.view(config)  # the zones first: the block names their memfds (cacheshared.py)
        try:
            return stats_mod.Block(config, config.workers, path,
                                   self.cache.zone_fds(config) if path else None)
        except OSError as exc:
            raise StartupError(f"cannot create the counters file {path}: "
                               f"{exc.strerror or exc}") from exc

    def _bind_status(self, config):
        st = config.status
        # Under scalws-controller the status listener is the controller's,
        # summed over the instances' counters files (ADR 0011).
        if st is None or os.environ.get("SCALWS_INSTANCE"):
            return None
        try:
            return statusd.bind(st)
        except OSError as exc:
            raise StartupError(str(exc)) from exc

    def _start_statusd(self, config, block):
        """Forks the status process serving `block`; returns its pid (0: no
        `status:` listener)."""
        if config.status is None or self.status_sock is None:
            return 0
        zones = self.cache.view(config).zones  # made before the fork: shared with the workers
        rfd, wfd = os.pipe()
        master = os.getpid()
        pid = forkmem.fork()
        if pid == 0:
            os.close(rfd)
            title.set_title("scalwsd: status", "scalwsd-status")
            self._close_in_child(keep=[self.status_sock])  # it serves only its own socket
            statusd.run(block.mm, config.status.allow, self.status_sock, self.errlog, wfd, zones,
                        user=users.worker_user(config), master=master, health=self.health.mm)
        os.close(wfd)
        self._ready_fds.add(rfd)
        self.statusd[pid] = block
        log.info("status process started (pid %d), listening on %s:%d", pid,
                 config.status.host, config.status.port)
        self._await_ready([rfd])
        self._done_with_pipe(rfd)
        return pid

    def _statusd_exited(self, pid, status):
        self.statusd.pop(pid)
        if pid != self.statusd_pid or self.stopping:
            log.info("status process (pid %d) %s", pid, _describe_status(status))
            return
        log.error("status process (pid %d) %s; restarting in 1s", pid, _describe_status(status))
        self.statusd_pid = 0
        self.statusd_restart_at = time.monotonic() + 1.0

    def _stop_keeper(self, pid):
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _send_logs(self, slots):
        """USR1: opens each access log the workers of `slots` write (their
        generation's path) and sends it with the error log's new descriptor
        over each one's control socket (worker.LOG_MESSAGE); the worker,
        which may not open them itself, swaps them in when the USR1 that
        follows arrives."""
        opened = {}
        try:
            for slot in slots:
                if slot.ctl is None:
                    continue
                path = slot.config.log.access
                if path and path not in opened:
                    try:
                        opened[path] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                               | os.O_CLOEXEC, 0o644)
                    except OSError as exc:
                        log.error("reopening the access log %s failed: %s; the workers keep "
                                  "the one they have", path, exc.strerror or exc)
                        opened[path] = -1
                fds, flags = [], b"L"
                if self.errlog.path:
                    fds.append(self.errlog.fd)
                flags += b"E" if self.errlog.path else b"-"
                acc = opened.get(path, -1) if path else -1
                if acc >= 0:
                    fds.append(acc)
                flags += b"A" if acc >= 0 else b"-"
                try:
                    socket.send_fds(slot.ctl, [flags], fds)
                except OSError as exc:  # a worker that does not read them (dying)
                    log.info("worker %d (pid %d): log descriptors not sent: %s", slot.index,
                             slot.pid, exc.strerror or exc)
        finally:
            for fd in opened.values():
                if fd >= 0:
                    os.close(fd)

    def _signal_slots(self, slots, sig):
        for slot in slots:
            if slot.pid:
                try:
                    os.kill(slot.pid, sig)
                except ProcessLookupError:
                    pass

    # ---- main loop ---------------------------------------------------------
    def _tune_sysctls(self):
        """With tcp_migrate_req=1 the kernel moves connections queued on a
        closing SO_REUSEPORT socket to another socket of the group, instead of
        resetting them; it matters when a reload lowers `workers`."""
        try:
            with open(MIGRATE_REQ) as f:
                if f.read().strip() == "1":
                    return
            if os.geteuid() == 0:
                with open(MIGRATE_REQ, "w") as f:
                    f.write("1")
                log.info("set net.ipv4.tcp_migrate_req=1 (reuseport queues survive a "
                         "worker-count reduction)")
                return
        except OSError:
            pass
        log.log(NOTICE, "net.ipv4.tcp_migrate_req is 0: lowering `workers` on reload can "
                "reset connections queued on removed sockets (see docs/operations.md)")

    def _say_user(self, cfg):
        """As root, the workers never stay root by accident: say who they
        run as (scalws/config/users.py)."""
        if os.geteuid() != 0:
            return
        user = users.worker_user(cfg)
        if user is None:
            raise StartupError("no user: is set and this system has neither of the users "
                               f"{' nor '.join(users.DEFAULT_USERS)}: set user: to the one the "
                               "workers should run as")
        if not cfg.user:
            log.log(NOTICE, "the workers run as %s (started as root without user:)", user)

    def _drop_caps(self, cfg):
        """As root, once the sockets are bound, the sysctls set and the logs
        open: keep only the capabilities of caps.KEEP (ADR 0012), before any
        child is forked. `sandbox: off` keeps them all."""
        if os.geteuid() != 0 or cfg.sandbox == "off":
            return
        try:
            kept, bounding = caps.drop_master()
        except OSError as exc:
            log.warning("cannot lower the master's capabilities: %s", exc.strerror or exc)
            return
        log.info("master capabilities lowered to %s%s", ", ".join(caps.names(kept)) or "none",
                 "" if bounding else " (the bounding set could not be lowered)")

    def _raise_nofile(self):
        """Each connection is a descriptor: lift the soft limit to the hard
        one (nginx's worker_rlimit_nofile), inherited by the workers, and say
        so when max_connections cannot fit."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
                soft = hard
            except (ValueError, OSError):
                pass
        need = self.config.limits.max_connections + 64
        if need > soft:
            log.warning("limits.max_connections is %d but a worker may open only %d files "
                        "(RLIMIT_NOFILE); connections beyond that are refused with EMFILE",
                        self.config.limits.max_connections, soft)

    def run(self) -> int:
        cfg = self.config
        self._title()
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        sdnotify.setup()  # before any child exists: they must not inherit it
        if cfg.pid and not os.environ.get("SCALWS_INSTANCE"):
            try:
                self.pidfile = exclusive.PidFile(cfg.pid)  # before binding: a twin stops here
            except exclusive.InUse as exc:
                raise StartupError(str(exc)) from None
        try:
            sandbox.check(cfg)  # `required`: refuse; `on`: warn once, here
        except sandbox.SandboxError as exc:
            raise StartupError(f"{exc}; not starting") from None
        self._say_user(cfg)
        for w in users.check(cfg):
            log.warning("%s", w)
        self._raise_nofile()
        self._ensure_sockets(cfg)
        self._tune_sysctls()
        self._drop_caps(cfg)
        for w in cfg.warnings:
            log.warning("%s", w)
        if cfg.busy_poll_auto:
            log.info("busy_poll auto: %s", cfg.busy_poll_auto)
        self._start_apps(cfg)
        self._load_data_plane()
        self.tls = self._tls_generation(cfg)
        self.keeper_pid = self._start_keeper(cfg, self.tls)
        self.stats = self._stats_block(cfg)
        self.status_sock = self._bind_status(cfg)
        self.statusd_pid = self._start_statusd(cfg, self.stats)
        self.quic.steer(cfg, self.gen + 1, self.sockets)  # before the workers: they learn
        # whether it steers
        self.slots, ready = self._start_generation(cfg, self.tls, self.stats)
        if self.pidfile is not None:
            self.pidfile.write()  # init scripts wait for it: once the workers are ready
        addrs = ", ".join(l.text for l in self._listens(cfg).values())
        log.log(NOTICE, "scalws started: %d of %d workers ready, listening on %s (pid %d)",
                ready, cfg.workers, addrs, os.getpid())
        sdnotify.ready(f"{ready} of {cfg.workers} workers ready, listening on {addrs}")
        if ready:
            self.health.set(health_mod.READY)
        self.watch = self._make_watch(cfg)
        self.resolver = resolver_mod.Resolver(cfg)
        try:
            while True:
                if self.stopping and not self.children and not self.keepers \
                        and not self.statusd and not self.apps.alive():
                    break
                self.health.beat()
                timeout = self._next_timeout()
                info = signal.sigtimedwait(SIGNALS, timeout)
                if info is not None:
                    self._on_signal(info.si_signo)
                self._reap()
                self._restart_due()
                self._check_stop_deadline()
                self._stop_statusd_once_drained()
                self._check_watch()
                self._check_dns()
                self.apps.tick({s.gen for s in self.children.values()}, self.stopping)
        finally:
            self._close_keys(list(self.sockets))
            self.apps.cleanup()
            if self.stats is not None:
                self.stats.remove()
            if self.pidfile is not None:
                self.pidfile.remove()
        log.log(NOTICE, "scalws stopped")
        return 0

    def _next_timeout(self):
        now = time.monotonic()
        times = [s.restart_at for s in self.slots.values() if s.restart_at]
        if self.keeper_restart_at:
            times.append(self.keeper_restart_at)
        if self.statusd_restart_at:
            times.append(self.statusd_restart_at)
        if self.stop_deadline:
            times.append(self.stop_deadline)
        if self.watch is not None:
            times.append(self.watch.next_due())
        if self.resolver is not None and not self.stopping:
            due = self.resolver.next_due()
            if due is not None:
                times.append(due)
            if self._dns_unsent:
                times.append(now + 0.05)
        apps_due = self.apps.next_timeout()
        if apps_due is not None:
            times.append(now + apps_due)
        if not times:
            return 1.0
        return max(0.0, min(min(times) - now, 1.0))

    def _on_signal(self, sig):
        if sig == signal.SIGCHLD:
            return
        if sig in (signal.SIGTERM, signal.SIGINT):
            if not self.stopping:
                log.log(NOTICE, "graceful stop (%s): draining workers", signal.Signals(sig).name)
                self.stopping = "graceful"
                self.health.set(health_mod.DRAINING)  # /ready fails from now; /live holds
                sdnotify.stopping()
                self.stop_deadline = time.monotonic() + self.config.shutdown_timeout + 2.0
                self._signal_slots(self.children.values(), signal.SIGTERM)
                for pid in list(self.keepers):  # the status process: once drained
                    self._stop_keeper(pid)
                self._close_listeners()
        elif sig == signal.SIGQUIT:
            log.log(NOTICE, "fast stop (SIGQUIT)")
            if not self.stopping:
                sdnotify.stopping()
            self.stopping = "fast"
            self.health.set(health_mod.DRAINING)
            self.stop_deadline = time.monotonic() + 2.0
            self._signal_slots(self.children.values(), signal.SIGQUIT)
            for pid in list(self.keepers) + list(self.statusd):
                self._stop_keeper(pid)
            self._close_listeners()
            self.apps.stop_all(fast=True)
        elif sig == signal.SIGHUP:
            if not self.stopping:
                self._reload_notified()
        elif sig == signal.SIGUSR1:
            self.errlog.reopen()
            log.log(NOTICE, "reopening logs (SIGUSR1)")
            self._send_logs(self.children.values())
            self._signal_slots(self.children.values(), signal.SIGUSR1)

    # ---- managed apps (control/apps.py) --------------------------------------
    def _start_apps(self, cfg):
        """At startup: every app ready before the web workers start, or
        scalwsd refuses to start."""
        try:
            procs = self.apps.start(cfg)
            self.apps.assign(cfg, procs)
        except apps_mod.AppError as exc:
            self.apps.cleanup()
            raise StartupError(f"{exc}; not starting") from None
        self.apps.current = procs

    def _close_listeners(self):
        """On stop, as nginx's master does: once the workers have closed their
        copies too, the sockets are gone, so new connections are refused at
        once instead of waiting in an accept queue nobody will serve."""
        self._close_keys(list(self.sockets))

    def _make_watch(self, cfg):
        """The watch of `watch_config` (control/watch.py), None when off."""
        if not cfg.watch_config or not self.path:
            return None
        if os.environ.get("SCALWS_INSTANCE"):
            log.warning("watch_config: ignored under scalws-controller (send it SIGHUP)")
            return None
        return watch_mod.ConfigWatch(self.path, cfg.watch_config, cfg.source_digest)

    def _check_watch(self):
        if self.watch is None or self.stopping or not self.watch.changed(time.monotonic()):
            return
        log.log(NOTICE, "%s changed: reloading (watch_config)", self.path)
        self._reload_notified()

    # ---- live DNS for upstream servers (control/resolver.py) -----------------
    def _check_dns(self):
        if self.resolver is None or self.stopping:
            return
        for name, addrs in self.resolver.step():
            resolver_mod.apply(self.config, name, addrs)  # what restarted workers fork with
            self._dns_unsent.update({(slot.index, name): addrs for slot in self.slots.values()})
        self._send_dns()

    def _send_dns(self):
        """Each worker of the generation gets the names whose set changed; one
        whose socket is full gets them at a later pass (newest set only)."""
        for (index, name), addrs in list(self._dns_unsent.items()):
            slot = self.slots.get(index)
            if slot is None or slot.ctl is None or not slot.pid:
                del self._dns_unsent[(index, name)]   # it forks with the new set
                continue
            try:
                slot.ctl.send(resolver_mod.encode(name, addrs))
            except BlockingIOError:
                continue
            except OSError as exc:  # a worker that is going away
                log.info("worker %d (pid %d): DNS update not sent: %s", slot.index, slot.pid,
                         exc.strerror or exc)
            del self._dns_unsent[(index, name)]

    def _reload_notified(self):
        """A reload (HUP or watch_config) between RELOADING=1 and READY=1."""
        sdnotify.reloading()
        sdnotify.ready(self.reload())

    def reload(self):
        """Loads the file again and replaces the workers with a new
        generation; returns one line on the outcome (the service manager's
        STATUS)."""
        if not self.path:
            log.warning("reload (SIGHUP) ignored: running the built-in default configuration")
            return "reload ignored: built-in default configuration"
        if self.watch is not None:  # this content is tried now: the watch leaves it
            self.watch.tried_now(watch_mod.digest(self.path))
        try:
            new = cfgload.load(self.path, self.config)
        except ConfigError as exc:
            log.error("reload failed, keeping the current configuration:\n%s", exc)
            return "reload failed, serving the previous configuration"
        except OSError as exc:
            log.error("reload failed, keeping the current configuration: %s", exc)
            return "reload failed, serving the previous configuration"
        try:
            sandbox.check(new)
        except sandbox.SandboxError as exc:
            log.error("reload failed, keeping the current configuration: %s", exc)
            return "reload failed, serving the previous configuration"
        try:
            stale = self._ensure_sockets(new)
        except StartupError as exc:
            log.error("reload failed, keeping the current configuration: %s", exc)
            return "reload failed, serving the previous configuration"
        old = list(self.slots.values())
        for w in new.warnings + users.check(new):
            log.warning("%s", w)
        if new.busy_poll_auto and new.busy_poll_auto != self.config.busy_poll_auto:
            log.info("busy_poll auto: %s", new.busy_poll_auto)
        # The apps' new workers are ready before any web worker points at them.
        try:
            app_procs = self.apps.start(new)
            self.apps.assign(new, app_procs)
        except apps_mod.AppError as exc:
            log.error("reload failed, keeping the current configuration: %s", exc)
            return "reload failed, serving the previous configuration"
        tls = self._tls_generation(new)
        keeper = self._start_keeper(new, tls)
        try:
            block = self._stats_block(new)
        except StartupError as exc:
            log.error("reload failed, keeping the current configuration: %s", exc)
            self._stop_keeper(keeper)
            self.apps.stop(app_procs)
            self.cache.prune(self.config)  # the zones only `new` had were made for nothing
            return "reload failed, serving the previous configuration"
        slots, ready = self._start_generation(new, tls, block)
        if ready < new.workers:
            log.error("reload: only %d of %d new workers became ready; keeping the old ones",
                      ready, new.workers)
            for s in slots.values():
                s.stopping = True
            self._signal_slots(slots.values(), signal.SIGQUIT)
            self._stop_keeper(keeper)
            self.apps.stop(app_procs)
            self.cache.prune(self.config)  # the failed workers keep their own mappings
            return "reload failed, serving the previous configuration"
        # New QUIC connections go to the new workers; the old ones keep theirs.
        self.quic.steer(new, self.gen, self.sockets)
        # The apps' old workers stop once the old web workers have drained.
        self.apps.commit(app_procs, self.gen)
        for s in old:
            s.stopping = True
        self._signal_slots(old, signal.SIGTERM)
        self._await_stopped(old)
        # The old generation's keeper goes; its workers keep the OCSP
        # responses it published until they finish (no refresh is needed
        # for that long).
        self._stop_keeper(self.keeper_pid)
        self.keeper_pid = keeper
        self.keeper_restart_at = None
        self.tls = tls
        self._reload_status(new, block)
        if (new.log.error, new.log.level, new.log.error_format) != \
                (self.config.log.error, self.config.log.level, self.config.log.error_format):
            self.errlog = ErrorLog(new.log.error, new.log.level, new.log.error_format)
        self.config = new
        self.slots = slots
        self.watch = self._make_watch(new)
        self.resolver.close()
        self.resolver = resolver_mod.Resolver(new)
        self._dns_unsent = {}
        self.cache.prune(new)
        self._close_keys(stale)
        log.log(NOTICE, "reloaded %s: %d workers (generation %d)", self.path, new.workers, self.gen)
        return f"{new.workers} workers ready (generation {self.gen})"

    def _reload_status(self, new, block):
        """After a reload: the new generation's block is the one served; the
        status listener is bound again only when its address changed (a
        bind error keeps the old one, logged)."""
        self.stats = block
        self._stop_keeper(self.statusd_pid)  # TERM; it is reaped as any child
        self.statusd_pid = 0
        old = self.config.status
        if new.status is None or old is None or (old.host, old.port) != (new.status.host,
                                                                          new.status.port):
            if self.status_sock is not None:
                self.status_sock.close()
                self.status_sock = None
            try:
                self.status_sock = self._bind_status(new)
            except StartupError as exc:
                log.error("reload: %s; no status listener", exc)
        self.statusd_pid = self._start_statusd(new, block)

    def _reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.keepers:
                self._keeper_exited(pid, status)
                continue
            if pid in self.statusd:
                self._statusd_exited(pid, status)
                continue
            if self.apps.exited(pid, status):
                continue
            slot = self.children.pop(pid, None)
            if slot is None:
                continue
            if slot.ack_fd is not None:
                self._drop_ack(slot.ack_fd)
            if slot.ctl is not None:
                slot.ctl.close()
                slot.ctl = None
            if slot.stopping or self.stopping:
                log.info("worker %d (pid %d, generation %d) %s", slot.index, pid, slot.gen,
                         _describe_status(status))
                continue
            if self.slots.get(slot.index) is not slot:
                continue
            lived = time.monotonic() - slot.started
            slot.quick_deaths = slot.quick_deaths + 1 if lived < QUICK_DEATH else 0
            delay = apps_mod.backoff(slot.quick_deaths)  # one policy for workers and apps
            log.error("worker %d (pid %d) %s; restarting%s", slot.index, pid,
                      _describe_status(status), f" in {delay:.1f}s (crash loop)" if delay else "")
            slot.pid = 0
            slot.restart_at = time.monotonic() + delay

    def _keeper_exited(self, pid, status):
        self.keepers.pop(pid)
        if pid != self.keeper_pid or self.stopping:
            log.info("TLS keeper (pid %d) %s", pid, _describe_status(status))
            return
        log.error("TLS keeper (pid %d) %s; restarting in 1s (ticket keys and OCSP "
                  "responses stay as published meanwhile)", pid, _describe_status(status))
        self.keeper_pid = 0
        self.keeper_restart_at = time.monotonic() + 1.0

    def _restart_due(self):
        if self.stopping:
            return
        now = time.monotonic()
        if self.keeper_restart_at and self.keeper_restart_at <= now:
            self.keeper_restart_at = None
            self.keeper_pid = self._start_keeper(self.config, self.tls)
        if self.statusd_restart_at and self.statusd_restart_at <= now:
            self.statusd_restart_at = None
            self.statusd_pid = self._start_statusd(self.config, self.stats)
        for slot in self.slots.values():
            if slot.restart_at is not None and slot.restart_at <= now and not slot.pid:
                fd = self._spawn(slot)
                if self._await_ready([fd], timeout=2.0) and self.health.state == health_mod.STARTING:
                    self.health.set(health_mod.READY)  # the first worker ready after a failed start

    def _stop_statusd_once_drained(self):
        """A graceful stop keeps the status process until the workers are
        gone: /ready says draining and /live stays true meanwhile (a
        liveness probe that failed during a drain would get it killed)."""
        if self.stopping and not self.children:
            for pid in self.statusd:
                if pid not in self._statusd_stopped:
                    self._statusd_stopped.add(pid)
                    self._stop_keeper(pid)

    def _check_stop_deadline(self):
        if self.stop_deadline and time.monotonic() >= self.stop_deadline and self.children:
            log.warning("workers did not stop in time; killing %d", len(self.children))
            self._signal_slots(self.children.values(), signal.SIGKILL)
            self.stop_deadline = None
