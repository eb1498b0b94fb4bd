"""scalws-controller: several scalwsd instances, pinned, limited, scaled.

    scalws-controller --config FILE [--cgroup-root DIR] [--cgroup-name NAME]

FILE is a scalwsd configuration with `instances:` (docs/configuration.md).
Instance slot I owns the CPUs instances.cpus[I*k:(I+1)*k] (k =
cpus_per_instance). The controller forks `python -m scalws --config FILE`
for it with SCALWS_INSTANCE=I (scalwsd refuses `instances:` without it),
after the child has joined its cgroups (cgroups.py) and set its CPU
affinity to its set; the scalwsd master then runs one worker per CPU of its
affinity, pinned, and binds its own SO_REUSEPORT sockets on the configured
ports, so the kernel spreads new connections over every instance's workers.

Readiness is scalwsd's sd_notify protocol: each slot has a datagram socket
the controller owns (its NOTIFY_SOCKET); READY=1 after start or after a
reload, RELOADING=1 when a reload begins.

- Supervision: an instance that exits unasked is started again, with the
  masters' backoff (apps.backoff) while it keeps dying young. The
  controller is a child subreaper: the workers of an instance whose master
  was killed are re-parented to it; they drain by themselves (their
  master's death is a TERM: PR_SET_PDEATHSIG), and any still there get
  TERM once the replacement is ready.
- HUP: the controller reads the file again, then reloads the instances one
  at a time (HUP, wait for READY=1), never all at once.
- TERM/INT: every instance stops gracefully, then the controller exits;
  QUIT: fast stop. USR1: reopen logs, here and in every instance.
- Autoscaling (docs/adr/0013-controller.md): every sample_interval the
  controller measures the busy share of the running instances' CPUs
  (scalws.control.stats when present, else the workers' utime+stime from
  /proc), the connections waiting in the listening sockets' accept queues
  (/proc/net/tcp, tcp6) and the p99 latency (stats' histogram, when
  present). `samples` hot samples in a row add an instance, `samples` cold
  ones remove the highest one, at most once per `cooldown`.

Managed apps (`apps:`) run once, here, for every instance (apps.py's
supervision: ready before the instances start, restarts with backoff,
output to the error log). Their sockets are named in <rundir>/apps.json,
whose path each instance gets in $SCALWS_APP_SOCKETS: its master starts no
app and points its `app:NAME` groups at those sockets. HUP starts a new
generation of the apps and waits until it is ready, rewrites the file, then
reloads the instances one at a time; the old generation stops once every
instance has reloaded and the web workers that were running before its
reload have exited. TERM: the instances drain first, then the apps stop.

Logs: the controller writes to the configured error log (logs.py); the
instances' masters and workers write to the same file, each line with its
pid.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import select
import signal
import socket
import sys
import tempfile
import time

from scalws.cli import controller_parser
from scalws.config.errors import ConfigError
from scalws.control import apps as apps_mod
from scalws.control import cfgload, cgroups, exclusive, procs, sdnotify, title
from scalws.control.logs import NOTICE, ErrorLog, log

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
           signal.SIGUSR1, signal.SIGCHLD)
RETIRE_GRACE = 10.0        # old app workers stop at most shutdown_timeout + this after a reload
QUICK_DEATH = 5.0          # an instance dying younger than this counts as a crash loop
FAST_STOP = 5.0            # QUIT: then KILL
PR_SET_CHILD_SUBREAPER = 36
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Instance:
    def __init__(self, slot, cpus, rundir):
        self.slot = slot
        self.cpus = cpus
        self.pid = 0
        self.state = "down"   # down, starting, ready, reloading, stopping, restart
        self.started = 0.0
        self.deadline = None  # READY expected by then (starting, reloading)
        self.restart_at = None
        self.quick_deaths = 0
        self.cgroup = False   # its groups exist
        self.ever_ready = False
        self.notify_path = os.path.join(rundir, f"notify-{slot}.sock")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.notify.setblocking(False)
        self.stats_path = os.path.join(rundir, f"stats-{slot}")
        self.prev = None      # last sample: (monotonic, {pid: ticks} | stats dict)

    @property
    def alive(self):
        return self.pid != 0


def _children(pid) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])   # utime, stime
    except (OSError, IndexError, ValueError):
        return None


def listen_queue(ports, files=("/proc/net/tcp", "/proc/net/tcp6")) -> int:
    """Connections waiting in the accept queues of the LISTEN sockets on
    `ports` (rx_queue of a listener is its accept queue's length)."""
    total = 0
    for path in files:
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if len(parts) < 5 or parts[3] != "0A":
                        continue
                    if int(parts[1].rsplit(":", 1)[1], 16) in ports:
                        total += int(parts[4].split(":")[1], 16)
        except (OSError, StopIteration, ValueError, IndexError):
            continue
    return total


def p99(prev, cur):
    """The 99th percentile, in seconds, of the requests counted between two
    stats histograms ({"buckets": [(le, cumulative)], "count"}); None when
    there were none."""
    try:
        pb = dict(prev["buckets"]) if prev else {}
        buckets = [(le, n - pb.get(le, 0)) for le, n in cur["buckets"]]
        count = cur["count"] - (prev["count"] if prev else 0)
    except (KeyError, TypeError):
        return None
    if count <= 0:
        return None
    for le, n in sorted(buckets):
        if n >= 0.99 * count:
            return le
    return float("inf")


def _stats_module():
    if importlib.util.find_spec("scalws.control.stats") is None:
        return None
    from scalws.control import stats  # noqa: the stats engineer's module
    return stats


class Controller:
    def __init__(self, config, path, cgroup=None):
        self.config = config
        self.path = path
        self.ins = config.instances
        self.errlog = ErrorLog(config.log.error, config.log.level, config.log.error_format)
        self.cgroup = cgroup
        self.pidfile = None        # exclusive.PidFile: `pid:` names the controller
        self.rundir = tempfile.mkdtemp(prefix="scalws-controller-")
        os.chmod(self.rundir, 0o755)
        k = self.ins.cpus_per_instance
        self.instances = [Instance(i, self.ins.cpus[i * k:(i + 1) * k], self.rundir)
                          for i in range(self.ins.max)]
        self.stats = _stats_module()
        self.stopping = None
        self.stop_deadline = None
        self.exit_code = 0
        self.pending = []
        self.orphans = set()       # workers of killed masters, re-parented to us
        self.started = False
        self.reload_queue = []
        self.reloading = None
        self.hot = self.cold = 0
        self.cooldown_until = 0.0
        self.next_sample = 0.0
        self.last_queue = 0
        self.apps = apps_mod.Apps()    # the managed apps, once for all instances
        self.apps_file = os.path.join(self.rundir, "apps.json")
        self.app_retiring = []         # [[procs, web worker pids to outlive, deadline]]
        # The `status:` listener: the controller's, summed over the instances'
        # counters files (their masters do not bind it); served by a child.
        self.status_sock = None
        self.statusd_pid = 0
        self.statusd_restart_at = None

    # ---- instances -----------------------------------------------------------
    def _argv(self, inst):
        argv = [sys.executable, "-m", "scalws", "--config", self.path]
        if self.stats is not None:
            argv += ["--stats-file", inst.stats_path]
        return argv

    def start(self, inst):
        while True:  # stale datagrams of a previous process
            try:
                inst.notify.recv(4096)
            except OSError:
                break
        if self.cgroup is not None and not inst.cgroup:
            try:
                self.cgroup.create(inst.slot, inst.cpus, self.ins.memory_limit,
                                   self.ins.cpu_quota)
                inst.cgroup = True
            except OSError as exc:
                log.warning("instance %d: cannot set up its cgroup (%s); running it "
                            "without cpu and memory limits", inst.slot, exc)
        env = dict(os.environ, SCALWS_INSTANCE=str(inst.slot),
                   NOTIFY_SOCKET=inst.notify_path, SCALWS_APP_SOCKETS=self.apps_file)
        argv = self._argv(inst)
        cg = self.cgroup if inst.cgroup else None
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                signal.set_wakeup_fd(-1)
                for s in SIGNALS:
                    signal.signal(s, signal.SIG_DFL)
                # A TERM when the controller dies (its masters drain and stop
                # their workers in turn); the signal outlives the execve.
                if not procs.follow_parent(signal.SIGTERM, parent):
                    os._exit(0)
                signal.pthread_sigmask(signal.SIG_SETMASK, set())
                if cg is not None:
                    cg.join(inst.slot, os.getpid())
                os.sched_setaffinity(0, inst.cpus)
                os.execve(argv[0], argv, env)
            except BaseException as exc:  # noqa: report anything, then exit
                os.write(2, f"scalws-controller: instance {inst.slot}: cannot start: "
                            f"{exc}\n".encode())
            os._exit(127)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        inst.pid = pid
        inst.state = "starting"
        inst.started = time.monotonic()
        inst.deadline = inst.started + self.ins.start_timeout
        inst.restart_at = None
        inst.prev = None
        log.info("instance %d starting (pid %d, cpus %s)", inst.slot, pid,
                 ",".join(map(str, inst.cpus)))

    def _signal(self, inst, sig):
        if inst.pid:
            try:
                os.kill(inst.pid, sig)
            except ProcessLookupError:
                pass

    def running(self):
        """Instances that are wanted: starting, ready, reloading or restarting."""
        return [i for i in self.instances if i.state in ("starting", "ready", "reloading",
                                                          "restart")]

    def scale_up(self, why):
        for inst in self.instances:
            if inst.state == "down" and not inst.alive:
                log.log(NOTICE, "scaling up to %d instances: %s", len(self.running()) + 1, why)
                self.start(inst)
                return True
        return False

    def scale_down(self, why):
        for inst in reversed(self.instances):
            if inst.state == "ready" and inst is not self.reloading:
                log.log(NOTICE, "scaling down to %d instances: %s; instance %d drains",
                        len(self.running()) - 1, why, inst.slot)
                inst.state = "stopping"
                self._signal(inst, signal.SIGTERM)
                return True
        return False

    # ---- events --------------------------------------------------------------
    def _on_notify(self, inst):
        while True:
            try:
                data = inst.notify.recv(4096)
            except OSError:
                return
            fields = dict(l.split("=", 1) for l in data.decode(errors="replace").splitlines()
                          if "=" in l)
            if fields.get("MAINPID") not in (None, str(inst.pid)):
                continue
            if fields.get("READY") == "1" and inst.state in ("starting", "reloading"):
                was = inst.state
                inst.state = "ready"
                inst.deadline = None
                inst.ever_ready = True
                log.info("instance %d %s (pid %d): %s", inst.slot,
                         "ready" if was == "starting" else "reloaded", inst.pid,
                         fields.get("STATUS", ""))
                if was == "reloading" and self.reloading is inst:
                    self.reloading = None
                if was == "starting":
                    self._release_orphans()

    def _release_orphans(self):
        """Workers of killed masters drain once every wanted instance is up."""
        if self.orphans and all(i.state != "starting" and i.state != "restart"
                                for i in self.instances):
            for pid in self.orphans:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            log.info("sent TERM to %d worker(s) left by killed instance masters",
                     len(self.orphans))
            self.orphans.clear()

    def _reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.orphans.discard(pid)
            if self.apps.exited(pid, status):
                continue
            if pid == self.statusd_pid:
                self.statusd_pid = 0
                how = apps_mod.describe_status(status)
                if self.stopping:
                    log.info("status process (pid %d) %s", pid, how)
                else:
                    log.error("status process (pid %d) %s; restarting in 1s", pid, how)
                    self.statusd_restart_at = time.monotonic() + 1.0
                continue
            inst = next((i for i in self.instances if i.pid == pid), None)
            if inst is None:
                continue
            inst.pid = 0
            try:  # a killed master leaves it: the status listener would count it
                os.unlink(inst.stats_path)
            except OSError:
                pass
            how = apps_mod.describe_status(status)
            # Its workers, when the master died first, are ours now.
            known = {i.pid for i in self.instances} | set(self.apps.procs) | {self.statusd_pid}
            self.orphans.update(p for p in _children(os.getpid()) if p not in known)
            if self.stopping or inst.state == "stopping":
                log.info("instance %d (pid %d) %s", inst.slot, pid, how)
                inst.state = "down"
                self._release_orphans()
                if self.stopping:
                    for p in self.orphans:
                        os.kill(p, signal.SIGTERM if self.stopping == "graceful"
                                else signal.SIGQUIT)
                continue
            if self.reloading is inst:
                self.reloading = None
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
            if not inst.ever_ready and not self.started and code in (1, 2, 3):
                log.critical("instance %d (pid %d) %s before it was ready: "
                             "stopping", inst.slot, pid, how)
                self.exit_code = 3
                self.stop("fast")
                inst.state = "down"
                continue
            lived = time.monotonic() - inst.started
            inst.quick_deaths = inst.quick_deaths + 1 if lived < QUICK_DEATH else 0
            delay = apps_mod.backoff(inst.quick_deaths)
            log.error("instance %d (pid %d) %s; restarting%s", inst.slot, pid, how,
                      f" in {delay:.1f}s (crash loop)" if delay else "")
            inst.state = "restart"
            inst.restart_at = time.monotonic() + delay

    def _on_signal(self, sig):
        if sig == signal.SIGCHLD:
            return
        if sig in (signal.SIGTERM, signal.SIGINT):
            if not self.stopping:
                log.log(NOTICE, "graceful stop (%s): draining %d instances",
                        signal.Signals(sig).name, len(self.running()))
                self.stop("graceful")
        elif sig == signal.SIGQUIT:
            log.log(NOTICE, "fast stop (SIGQUIT)")
            self.stop("fast")
        elif sig == signal.SIGHUP:
            if not self.stopping:
                self.reload()
        elif sig == signal.SIGUSR1:
            self.errlog.reopen()
            log.log(NOTICE, "reopening logs (SIGUSR1)")
            for inst in self.instances:
                self._signal(inst, signal.SIGUSR1)

    def stop(self, how):
        if not self.stopping:
            sdnotify.stopping()
        fast = how == "fast"
        self.stopping = how
        grace = FAST_STOP if fast else self.config.shutdown_timeout + 5.0
        self.stop_deadline = time.monotonic() + grace
        sig = signal.SIGQUIT if fast else signal.SIGTERM
        for inst in self.instances:
            if inst.state == "restart":
                inst.state = "down"
            if inst.alive:
                self._signal(inst, sig)
        for pid in self.orphans:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if fast:
            self.apps.stop_all(fast=True)
        self._stop_statusd()

    # ---- the status listener, summed over the instances ----------------------
    def _bind_status(self, config):
        """The `status.listen` socket, or None; raises OSError with the
        config line."""
        st = config.status
        if st is None or self.stats is None:
            return None
        from scalws.control import statusd
        return statusd.bind(st)

    def _start_statusd(self):
        """Forks the status process: every request reads each instance's
        counters file again (statusd.instances_source)."""
        self.statusd_restart_at = None
        if self.status_sock is None or self.config.status is None or self.stopping:
            return
        from scalws.control import statusd
        source = statusd.instances_source([({"instance": str(i.slot)}, i.stats_path)
                                           for i in self.instances])
        allow = self.config.status.allow
        rfd, wfd = os.pipe()
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        pid = os.fork()
        if pid == 0:
            try:
                os.close(rfd)
                title.set_title("scalws-controller: status", "scalws-ctl-stat")
                signal.set_wakeup_fd(-1)
                for sig in SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                for inst in self.instances:
                    inst.notify.close()
                for fd in self.apps.child_fds():
                    os.close(fd)
            except BaseException:  # noqa: statusd.run reports and exits
                pass
            statusd.run(source, allow, self.status_sock, self.errlog, wfd)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        os.close(wfd)
        try:
            select.select([rfd], [], [], 5.0)
        finally:
            os.close(rfd)
        self.statusd_pid = pid
        log.info("status process started (pid %d), listening on %s:%d, summing the "
                 "instances", pid, self.config.status.host, self.config.status.port)

    def _stop_statusd(self):
        if self.statusd_pid:
            try:
                os.kill(self.statusd_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _reload_status(self, old, new):
        """After a reload: a new status process (its `allow`), bound again
        only when the address changed."""
        self._stop_statusd()   # reaped as any child; the new one starts now
        self.statusd_pid = 0
        if new.status is None or old is None or (old.host, old.port) != (new.status.host,
                                                                          new.status.port):
            if self.status_sock is not None:
                self.status_sock.close()
                self.status_sock = None
            try:
                self.status_sock = self._bind_status(new)
            except OSError as exc:
                log.error("reload: %s; no status listener", exc)
        self._start_statusd()

    # ---- managed apps (apps.py), once for every instance ------------------------
    def _start_apps(self, config):
        """A new generation of every app, ready; then the instances are told
        its sockets (apps.json). Raises apps.AppError."""
        procs = self.apps.start(config)
        apps_mod.write_sockets(self.apps_file, procs, self.apps.gen)
        old, self.apps.current = self.apps.current, procs
        if old:
            # Stopped once every instance has reloaded (_reload_step adds the
            # web workers each one had before) and those workers are gone.
            self.app_retiring.append([old, set(), None])

    def _retire_apps(self, now):
        if not self.app_retiring or self.reload_queue or self.reloading is not None:
            return
        keep = []
        for entry in self.app_retiring:
            procs, pids, deadline = entry
            pids &= {p for p in pids if os.path.exists(f"/proc/{p}")}
            if entry[2] is None:
                entry[2] = deadline = now + self.config.shutdown_timeout + RETIRE_GRACE
            if pids and now < deadline:
                keep.append(entry)
                continue
            log.info("app generation %d retired: stopping its %d worker(s)",
                     procs[0].gen, len(procs))
            self.apps.stop(procs)
        self.app_retiring = keep

    def reload(self):
        """HUP: read the file again, then reload the instances one at a time."""
        sdnotify.reloading()
        try:
            new = cfgload.load(self.path, self.config)
        except (ConfigError, OSError) as exc:
            log.error("reload failed, the instances keep their configuration:\n%s", exc)
            sdnotify.ready("reload failed")
            return
        if new.instances is None:
            log.error("reload failed: %s has no 'instances' any more", self.path)
            sdnotify.ready("reload failed")
            return
        ni = new.instances
        if (ni.cpus, ni.cpus_per_instance) != (self.ins.cpus, self.ins.cpus_per_instance) \
                or ni.max > len(self.instances):
            log.warning("reload: instances.cpus, cpus_per_instance and a larger max "
                        "apply when scalws-controller restarts; keeping max %d",
                        len(self.instances))
            ni.max = min(ni.max, len(self.instances))
            ni.min = min(ni.min, ni.max)
        if (ni.memory_limit, ni.cpu_quota) != (self.ins.memory_limit, self.ins.cpu_quota):
            log.warning("reload: memory_limit and cpu_quota apply to instances started "
                        "from now on")
            for inst in self.instances:
                if not inst.alive:
                    inst.cgroup = False
        try:
            self._start_apps(new)
        except apps_mod.AppError as exc:
            log.error("reload failed, the instances and apps keep their configuration: %s",
                      exc)
            sdnotify.ready("reload failed")
            return
        old_status, self.config, self.ins = self.config.status, new, ni
        self._reload_status(old_status, new)
        # With apps, one still starting may have read the old apps.json: it
        # is reloaded too, once ready.
        states = ("ready", "reloading") + (("starting",) if self.app_retiring else ())
        self.reload_queue = [i for i in self.instances if i.state in states]
        log.log(NOTICE, "reloading %s: %d instances, one at a time", self.path,
                len(self.reload_queue))
        while len(self.running()) < self.ins.min and self.scale_up("instances.min"):
            pass
        while len(self.running()) > self.ins.max and self.scale_down("instances.max"):
            pass

    def _reload_step(self):
        if self.reloading is not None or self.stopping:
            return
        while self.reload_queue:
            if self.reload_queue[0].state == "starting":
                return            # HUP'd once ready
            inst = self.reload_queue.pop(0)
            if inst.state == "ready":
                inst.state = "reloading"
                inst.deadline = time.monotonic() + self.ins.start_timeout
                self.reloading = inst
                old_workers = set(_children(inst.pid))
                for entry in self.app_retiring:
                    if entry[2] is None:
                        entry[1] |= old_workers
                log.info("instance %d (pid %d): reloading", inst.slot, inst.pid)
                self._signal(inst, signal.SIGHUP)
                return
        if not self.reload_queue and self.reloading is None and self._was_reloading:
            self._was_reloading = False
            log.log(NOTICE, "reload done: every instance reloaded")
            sdnotify.ready(f"{len(self.running())} instances")

    _was_reloading = False

    def _deadlines(self, now):
        for inst in self.instances:
            if inst.deadline is None or now < inst.deadline:
                continue
            inst.deadline = None
            if inst.state == "starting":
                log.error("instance %d (pid %d) not ready in %gs: stopping it (it is "
                          "started again)", inst.slot, inst.pid, self.ins.start_timeout)
                self._signal(inst, signal.SIGQUIT)
            elif inst.state == "reloading":
                log.warning("instance %d (pid %d) did not finish its reload in %gs; "
                            "going on with the next", inst.slot, inst.pid,
                            self.ins.start_timeout)
                inst.state = "ready"
                if self.reloading is inst:
                    self.reloading = None
        if self.stop_deadline and now >= self.stop_deadline:
            self.stop_deadline = None
            alive = [i for i in self.instances if i.alive]
            log.warning("instances did not stop in time; killing %d", len(alive))
            for inst in alive:
                self._signal(inst, signal.SIGKILL)
            for pid in list(self.orphans):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for inst in self.instances:
            if inst.state == "restart" and inst.restart_at <= now and not self.stopping:
                self.start(inst)

    # ---- autoscaling ---------------------------------------------------------
    def _busy(self, inst, now):
        """(busy CPU-seconds, available CPU-seconds) since the previous sample
        of this instance; None on its first."""
        if self.stats is not None and os.path.exists(inst.stats_path):
            try:
                cur = self.stats.read(inst.stats_path, cache=False)
            except Exception as exc:  # noqa: a torn or missing file is no reason to stop
                log.debug("instance %d: stats: %s", inst.slot, exc)
                cur = None
            if cur is not None:
                prev, inst.prev = inst.prev, (now, cur)
                if not prev or "busy_ns" not in prev[1]:
                    return None
                busy = (cur["busy_ns"] - prev[1]["busy_ns"]) / 1e9
                idle = (cur["idle_ns"] - prev[1]["idle_ns"]) / 1e9
                return busy, busy + idle, prev[1].get("request_duration"), \
                    cur.get("request_duration")
        ticks = {}
        for pid in _children(inst.pid):
            t = _ticks(pid)
            if t is not None:
                ticks[pid] = t
        prev, inst.prev = inst.prev, (now, ticks)
        if not prev or not isinstance(prev[1], dict) or "busy_ns" in prev[1]:
            return None
        used = sum(t - prev[1][p] for p, t in ticks.items() if p in prev[1]) / CLK_TCK
        return used, (now - prev[0]) * len(inst.cpus), None, None

    def sample(self, now):
        ins = self.ins
        active = [i for i in self.instances if i.state in ("ready", "reloading")]
        if not active or any(i.state in ("starting", "restart", "stopping")
                             for i in self.instances):
            for inst in active:       # keep the baselines fresh meanwhile
                self._busy(inst, now)
            self.hot = self.cold = 0
            return
        busy = cap = 0.0
        merged_prev, merged_cur = None, None
        for inst in active:
            r = self._busy(inst, now)
            if r is None:
                return
            busy += r[0]
            cap += r[1]
            if r[3] is not None:
                merged_prev, merged_cur = _merge(merged_prev, r[2]), _merge(merged_cur, r[3])
        share = busy / cap if cap > 0 else 0.0
        ports = {l.port for s in self.config.sites for l in s.listen if l.kind == "tcp"}
        queue = listen_queue(ports)
        lat = p99(merged_prev, merged_cur) if merged_cur else None
        log.debug("sample: %d instances, busy %.0f%%, accept queue %d, p99 %s", len(active),
                  share * 100, queue, "-" if lat is None else f"{lat:g}s")
        reasons = []
        if share >= ins.scale_up_busy:
            reasons.append(f"busy {share:.0%} >= {ins.scale_up_busy:.0%}")
        if queue >= ins.scale_up_queue:
            reasons.append(f"accept queue {queue} >= {ins.scale_up_queue}")
        if ins.scale_up_p99 is not None and lat is not None and lat >= ins.scale_up_p99:
            reasons.append(f"p99 {lat:g}s >= {ins.scale_up_p99:g}s")
        cold = share <= ins.scale_down_busy and queue == 0 and not reasons
        self.hot = self.hot + 1 if reasons else 0
        self.cold = self.cold + 1 if cold else 0
        if now < self.cooldown_until:
            return
        if self.hot >= ins.samples and len(self.running()) < ins.max:
            if self.scale_up(", ".join(reasons) + f" for {self.hot} samples"):
                self.cooldown_until = now + ins.cooldown
                self.hot = self.cold = 0
        elif self.cold >= ins.samples and len(self.running()) > ins.min:
            if self.scale_down(f"busy {share:.0%} <= {ins.scale_down_busy:.0%} for "
                               f"{self.cold} samples"):
                self.cooldown_until = now + ins.cooldown
                self.hot = self.cold = 0

    # ---- main loop -----------------------------------------------------------
    def run(self) -> int:
        title.init()  # before any fork (control/title.py)
        title.set_title(f"scalws-controller: master process {self.path}", "scalws-ctl")
        sdnotify.setup()
        # One controller per pid file and address (the instances' masters,
        # with SCALWS_INSTANCE, skip both: they share the ports on purpose).
        try:
            if self.config.pid:
                self.pidfile = exclusive.PidFile(self.config.pid, "scalws-controller")
            exclusive.probe_free({l.key: l for s in self.config.sites
                                  for l in s.listen}.values())
        except exclusive.InUse as exc:
            log.critical("%s; not starting", exc)
            return 3
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        for s in SIGNALS:
            signal.signal(s, lambda sig, frame: self.pending.append(sig))
        if self.cgroup is not None:
            try:
                self.cgroup.setup()
                log.info("cgroup v%d: %s", self.cgroup.version, ", ".join(
                    os.path.dirname(d) for d in self.cgroup.dirs(0)))
            except OSError as exc:
                log.warning("cannot set up the cgroups under %s (%s): instances run "
                            "without cpu and memory limits", self.cgroup.root, exc)
                self.cgroup = None
        elif self.ins.memory_limit or self.ins.cpu_quota:
            log.warning("no cgroup hierarchy found: memory_limit and cpu_quota are not applied")
        try:
            self.status_sock = self._bind_status(self.config)
            self._start_apps(self.config)
        except (apps_mod.AppError, OSError) as exc:
            log.critical("%s; not starting", exc)
            signal.set_wakeup_fd(-1)
            self._cleanup()
            return 3
        self._start_statusd()
        for inst in self.instances[:self.ins.min]:
            self.start(inst)
        try:
            while True:
                if self.stopping and not any(i.alive for i in self.instances) \
                        and not self.orphans and not self.apps.alive() \
                        and not self.statusd_pid:
                    break
                now = time.monotonic()
                timeout = 1.0 if self.started else 0.1
                if not self.stopping:
                    timeout = min(timeout, max(0.0, self.next_sample - now))
                for inst in self.instances:
                    if inst.restart_at:
                        timeout = min(timeout, max(0.0, inst.restart_at - now))
                if self.statusd_restart_at:
                    timeout = min(timeout, max(0.0, self.statusd_restart_at - now))
                apps_due = self.apps.next_timeout()
                if apps_due is not None:
                    timeout = min(timeout, apps_due)
                socks = [i.notify for i in self.instances] + list(self.apps.pipes)
                r, _, _ = select.select([rfd] + socks, [], [], timeout)
                if rfd in r:
                    try:
                        while os.read(rfd, 512):
                            pass
                    except BlockingIOError:
                        pass
                for inst in self.instances:
                    if inst.notify in r:
                        self._on_notify(inst)
                while self.pending:
                    self._on_signal(self.pending.pop(0))
                self._reap()
                now = time.monotonic()
                self._deadlines(now)
                if self.reload_queue or self.reloading:
                    self._was_reloading = True
                self._reload_step()
                self._retire_apps(now)
                if self.statusd_restart_at and now >= self.statusd_restart_at:
                    self._start_statusd()
                # Instances (and their killed masters' workers) drain first.
                self.apps.tick({1} if self.orphans or any(i.alive for i in self.instances)
                               else set(), self.stopping)
                if not self.started and not self.stopping and \
                        all(i.state == "ready" for i in self.instances[:self.ins.min]):
                    self.started = True
                    self.next_sample = now + self.ins.sample_interval
                    addrs = ", ".join(l.text for s in self.config.sites for l in s.listen)
                    log.log(NOTICE, "scalws-controller started: %d instances ready, "
                            "listening on %s (pid %d)", self.ins.min, addrs, os.getpid())
                    if self.pidfile is not None:
                        self.pidfile.write()
                    sdnotify.ready(f"{self.ins.min} instances ready")
                if self.started and not self.stopping and now >= self.next_sample:
                    self.next_sample = now + self.ins.sample_interval
                    self.sample(now)
        finally:
            signal.set_wakeup_fd(-1)
            self._cleanup()
        log.log(NOTICE, "scalws-controller stopped")
        return self.exit_code

    def _cleanup(self):
        if self.pidfile is not None:
            self.pidfile.remove()
        if self.status_sock is not None:
            self.status_sock.close()
            self.status_sock = None
        for path in (self.apps_file, self.apps_file + ".tmp"):
            try:
                os.unlink(path)
            except OSError:
                pass
        self.apps.cleanup()
        for inst in self.instances:
            inst.notify.close()
            for path in (inst.notify_path, inst.stats_path):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            if self.cgroup is not None and inst.cgroup:
                self.cgroup.remove(inst.slot)
        if self.cgroup is not None:
            self.cgroup.close()
        try:
            os.rmdir(self.rundir)
        except OSError:
            pass


def _merge(acc, hist):
    """Sums two request_duration histograms (same bucket bounds)."""
    if hist is None:
        return acc
    if acc is None:
        return {"buckets": list(hist["buckets"]), "count": hist["count"]}
    counts = dict(acc["buckets"])
    return {"buckets": [(le, n + counts.get(le, 0)) for le, n in hist["buckets"]],
            "count": acc["count"] + hist["count"]}


def main(argv=None) -> int:
    args = controller_parser().parse_args(argv)
    try:
        config = cfgload.load(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    if config.instances is None:
        print(f"scalws-controller: {args.config} has no 'instances' section: run "
              f"`scalwsd --config {args.config}` for one instance", file=sys.stderr)
        return 1
    cg = None if args.no_cgroups else cgroups.detect(args.cgroup_root, args.cgroup_name)
    return Controller(config, os.path.abspath(args.config), cg).run()
