"""Managed applications: the master runs each app's workers, watches them and
carries their output to the error log (docs/operations.md, "Managed apps";
docs/adr/0010-managed-apps.md).

Each worker is a process of its own (uvicorn for `asgi:`, the command
otherwise), forked by the master and exec'd, listening on a unix socket the
master names: <rundir>/app-<name>-g<generation>-<index>.sock. The web
workers reach it through the implicit upstream group "app:<name>", whose
servers the master sets to the current generation's sockets before it forks
them (assign()).

- Start (start()): every worker of every app, then wait until each socket
  accepts a connection (polled every POLL seconds, up to the app's
  start_timeout). A worker that exits or is not ready in time fails the
  whole generation: at startup scalwsd refuses to start, on reload the old
  generation keeps serving.
- Restart: a current worker that dies is started again at once, then with
  the web workers' backoff while it keeps dying young (restart: never
  leaves it down, on-failure restarts only after a non-zero exit or a
  signal); its routes answer 503 + Retry-After while no worker is up.
  A restarted worker is not waited for: its socket refuses connections
  until it listens, and the proxy tries the app's other workers.
- Reload (HUP): a new generation starts and is ready before the master
  starts the new web workers; the old generation is retired and stopped
  only once every web worker older than the new generation has exited.
- Stop: TERM, then KILL after stop_timeout.

Output: each worker's stdout and stderr are pipes the master reads in its
own loop (poll(), called at least every POLL seconds while apps run):
no thread, so forking stays safe. Each line goes to the error log as
`app NAME[I] stdout: ...` (info) or `stderr:` (warn), cut at MAX_LINE bytes;
a partial last line is flushed when the worker exits.

Under scalws-controller the controller runs the apps once for all instances
(the controller's own Apps) and names their sockets in a JSON file,
{"generation": N, "apps": {NAME: [SOCKET, ...]}} (write_sockets()); each
instance's master gets its path in $SCALWS_APP_SOCKETS and makes an Apps
with sockets_file=PATH: it starts no app, and assign() points the app
groups at the sockets the file names (read again on every reload).
"""
from __future__ import annotations

import encodings.ascii  # noqa: F401 - the child may need it after setuid, when this Python's folders are out of reach
import errno
import json
import os
import pwd
import select
import signal
import socket
import time

from scalws.config.model import UpstreamServer, clean_path, group_name
from scalws.control import procs, sandbox
from scalws.control.logs import NOTICE, log

POLL = 0.025               # readiness probes and output reads, seconds
QUICK_DEATH = 2.0          # as the master's web workers
MAX_BACKOFF = 10.0
MAX_LINE = 4096            # longer output lines are cut
UNIX_PATH_MAX = 107
# Signals the master blocks; an exec'd program must not start with them blocked.
_UNBLOCK = {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
            signal.SIGUSR1, signal.SIGCHLD, signal.SIGPIPE}


class AppError(Exception):
    """An app could not start (message names the app and why)."""


def backoff(quick_deaths: int) -> float:
    """Delay before a restart: none the first time, then doubling from 0.1 s
    up to MAX_BACKOFF while the process keeps dying younger than QUICK_DEATH
    (the master's policy for web workers)."""
    return 0.0 if quick_deaths <= 1 else min(MAX_BACKOFF, 0.1 * 2 ** (quick_deaths - 1))


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by signal {sig} ({name})"
    return f"exited with code {os.WEXITSTATUS(status)}"


class Proc:
    """Worker `index` of app `app` (model.App) in generation `gen`."""

    def __init__(self, app, index, gen, sock):
        self.app = app
        self.index = index
        self.gen = gen
        self.sock = sock
        self.pid = 0
        self.started = 0.0
        self.ready = False
        self.quick_deaths = 0
        self.restart_at = None     # monotonic time of a pending restart
        self.stopping = False
        self.kill_at = None        # monotonic time of the KILL after a TERM
        self.timed_out = False     # killed for not being ready within start_timeout
        self.fds = []              # read ends of stdout, stderr

    @property
    def tag(self):
        return f"app {self.app.name}[{self.index}]"


class Apps:
    """Every app worker of every generation, for the master (or, with
    `sockets_file`, none: the controller runs them)."""

    def __init__(self, sockets_file=None):
        self.sockets_file = sockets_file
        self.gen = 0
        self.current = []          # [Proc] of the generation the web workers use
        self.procs = {}            # pid -> Proc, every live worker
        self.retiring = []         # [(web generation, [Proc])]: stop once older web workers are gone
        self.pipes = {}            # fd -> [Proc, "stdout" | "stderr", bytearray]
        self.rundir = None
        self.sandbox_cfg = None    # the Config whose `sandbox:` applies to new workers
        self._private = False      # rundir made by us: removed at exit

    # ---- the sockets' folder -------------------------------------------------
    def _rundir(self, config):
        """$RUNTIME_DIRECTORY (systemd's RuntimeDirectory=), else the pid
        file's folder, else a private folder under /tmp (removed at exit)."""
        if self.rundir:
            return self.rundir
        room = UNIX_PATH_MAX - len("/app--g000000-000.sock") - max(
            (len(n) for n in config.apps), default=0)
        candidates = []
        if os.environ.get("RUNTIME_DIRECTORY"):
            candidates.append(os.environ["RUNTIME_DIRECTORY"].split(":")[0])
        if config.pid:
            candidates.append(os.path.dirname(config.pid))
        for d in candidates:
            if len(d) <= room and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
                self.rundir = d
                return d
        import tempfile  # here: with its shutil, bz2, lzma, random, 1.2 MiB in every process
        d = tempfile.mkdtemp(prefix="scalws-apps-")
        os.chmod(d, 0o755)
        users = {a.user for a in config.apps.values() if a.user}
        if os.geteuid() == 0 and len(users) == 1:
            pw = pwd.getpwnam(users.pop())
            os.chown(d, pw.pw_uid, pw.pw_gid)
        self.rundir, self._private = d, True
        return d

    def cleanup(self):
        if self._private and self.rundir:
            import shutil
            shutil.rmtree(self.rundir, ignore_errors=True)

    # ---- starting ------------------------------------------------------------
    def start(self, config):
        """Starts a new generation of every app in `config` and waits until
        each worker accepts connections; returns its [Proc] (not yet
        current: see commit()). Raises AppError after killing them if one
        cannot start."""
        if not config.apps or self.sockets_file:
            return []
        rundir = self._rundir(config)
        self.sandbox_cfg = config  # its `sandbox:` mode confines the app workers
        self.gen += 1
        procs = []
        for app in config.apps.values():
            for i in range(app.workers):
                p = Proc(app, i, self.gen, os.path.join(
                    rundir, f"app-{app.name}-g{self.gen}-{i}.sock"))
                procs.append(p)
                self._spawn(p)
        try:
            self._await_ready(procs)
        except AppError:
            self.kill(procs)
            raise
        return procs

    def _env(self, p):
        app = p.app
        home = os.environ.get("HOME", "/")
        if app.user:
            try:
                home = pwd.getpwnam(app.user).pw_dir
            except KeyError:
                pass
        env = {"PATH": clean_path(), "LANG": os.environ.get("LANG", "C.UTF-8"), "HOME": home}
        for key in ("TZ", "LC_ALL", "SYSTEMD_EXEC_PID"):
            if key in os.environ:
                env[key] = os.environ[key]
        if app.asgi:
            env["PYTHONUNBUFFERED"] = "1"   # print() reaches the log line by line
        env.update(app.env)
        env.update(SCALWS_APP_SOCKET=p.sock, SCALWS_APP_NAME=app.name,
                   SCALWS_APP_WORKER=str(p.index))
        if app.preload:
            env["LD_PRELOAD"] = app.preload
        return env

    def _argv(self, p):
        app = p.app
        if app.asgi:
            return [*app.argv, "--uds", p.sock, "--loop", "uvloop", "--http", "httptools",
                    "--no-access-log", "--timeout-keep-alive", "75", "--log-level", "warning",
                    "--app-dir", app.dir, app.asgi]
        return list(app.argv)

    def _spawn(self, p):
        app = p.app
        try:
            os.unlink(p.sock)    # a restart's, or one left by a crash
        except FileNotFoundError:
            pass
        argv, env = self._argv(p), self._env(p)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                # Its own process group: a terminal's ^C reaches the master,
                # which stops the app after the web workers have drained.
                os.setpgid(0, 0)
                for sig in _UNBLOCK:
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, set())
                if app.cpus:
                    os.sched_setaffinity(0, app.cpus)
                os.chdir(app.dir)
                if app.user and os.getuid() == 0:
                    pw = pwd.getpwnam(app.user)
                    os.initgroups(app.user, pw.pw_gid)
                    os.setgid(pw.pw_gid)
                    os.setuid(pw.pw_uid)
                # TERM when the master (or controller) dies: no orphan apps.
                if not procs.follow_parent(signal.SIGTERM, parent):
                    os._exit(0)
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                if self.sandbox_cfg is not None:  # the apps' looser profile (ADR 0012)
                    sandbox.apply_app(self.sandbox_cfg, app, os.path.dirname(p.sock))
                os.execve(argv[0], argv, env)
            except BaseException as exc:  # noqa: BLE001 - reported through the pipe
                try:
                    os.write(2, f"cannot start {argv[0]}: {exc}\n".encode())
                finally:
                    os._exit(127)
        os.close(out_w)
        os.close(err_w)
        for fd, stream in ((out_r, "stdout"), (err_r, "stderr")):
            os.set_blocking(fd, False)
            self.pipes[fd] = [p, stream, bytearray()]
        p.fds = [out_r, err_r]
        p.pid = pid
        p.started = time.monotonic()
        p.ready = p.timed_out = False
        p.restart_at = None
        self.procs[pid] = p
        log.info("%s started (pid %d, generation %d, socket %s)", p.tag, pid, p.gen, p.sock)

    def child_fds(self):
        """Descriptors a forked web worker or keeper must close."""
        return list(self.pipes)

    @staticmethod
    def _accepts(path) -> bool:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(POLL)
            s.connect(path)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def _mark_ready(self, p):
        p.ready = True
        try:
            os.chmod(p.sock, 0o666)  # the web workers may run as another user
        except OSError:
            pass
        log.info("%s ready (pid %d)", p.tag, p.pid)

    def _await_ready(self, procs):
        pending = list(procs)
        while pending:
            self.poll(POLL)
            now = time.monotonic()
            for p in list(pending):
                pid, status = os.waitpid(p.pid, os.WNOHANG)
                if pid:
                    self._gone(p, status)
                    raise AppError(f"app '{p.app.name}' worker {p.index} {describe_status(status)} "
                                   "before it was ready (its output is in the error log above)")
                if self._accepts(p.sock):
                    self._mark_ready(p)
                    pending.remove(p)
                elif now - p.started > p.app.start_timeout:
                    raise AppError(f"app '{p.app.name}' worker {p.index} did not accept "
                                   f"connections on {p.sock} within {p.app.start_timeout:g}s "
                                   "(start_timeout)")

    def assign(self, config, procs):
        """Points config's app groups at `procs`' sockets (before the web
        workers of `config` are forked); with sockets_file, at the sockets
        it names (AppError when it lacks an app of `config`)."""
        if self.sockets_file:
            self._assign_external(config)
            return
        for name in config.apps:
            config.upstreams[group_name(name)].servers = [
                UpstreamServer(address=f"unix:{p.sock}", kind="unix", path=p.sock,
                               max_fails=0, mark=p.app.mark)
                for p in procs if p.app.name == name]

    def _assign_external(self, config):
        if not config.apps:
            return
        try:
            with open(self.sockets_file) as f:
                socks = json.load(f)["apps"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AppError(f"cannot read the app sockets from {self.sockets_file}: {exc}") \
                from None
        for name, app in config.apps.items():
            if not socks.get(name):
                raise AppError(f"app '{name}' is not run by scalws-controller yet (not in "
                               f"{self.sockets_file}): reload the controller (HUP)")
            config.upstreams[group_name(name)].servers = [
                UpstreamServer(address=f"unix:{path}", kind="unix", path=path,
                               max_fails=0, mark=app.mark)
                for path in socks[name]]

    def commit(self, procs, web_gen):
        """`procs` become current; the generation before retires once every
        web worker older than `web_gen` has exited."""
        if self.current:
            self.retiring.append((web_gen, self.current))
        self.current = procs

    # ---- stopping ------------------------------------------------------------
    def stop(self, procs, fast=False):
        """TERM (then KILL after stop_timeout) to each live worker of `procs`."""
        now = time.monotonic()
        for p in procs:
            p.restart_at = None
            if p.pid and not p.stopping:
                p.stopping = True
                p.kill_at = now + (min(2.0, p.app.stop_timeout) if fast else p.app.stop_timeout)
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def kill(self, procs):
        """SIGKILL and reap `procs` now (a generation that failed to start)."""
        for p in procs:
            if p.pid:
                p.stopping = True
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    _, status = os.waitpid(p.pid, 0)
                except ChildProcessError:
                    status = 0
                self._gone(p, status)

    def stop_all(self, fast=False):
        self.stop(list(self.procs.values()), fast)
        for _, retired in self.retiring:
            for p in retired:
                p.restart_at = None
        for p in self.current:
            p.restart_at = None

    def alive(self) -> bool:
        return bool(self.procs)

    # ---- the master's loop ---------------------------------------------------
    def exited(self, pid, status) -> bool:
        """The master reaped `pid`: True if it was an app worker."""
        p = self.procs.get(pid)
        if p is None:
            return False
        self._gone(p, status)
        if p.stopping:
            log.info("%s (pid %d, generation %d) %s", p.tag, pid, p.gen, describe_status(status))
            return True
        if p not in self.current:
            return True
        failed = not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
        if p.app.restart == "never" or (p.app.restart == "on-failure" and not failed):
            log.error("%s (pid %d) %s; not restarted (restart: %s): its routes answer 503 "
                      "while no worker is up", p.tag, pid, describe_status(status), p.app.restart)
            return True
        lived = time.monotonic() - p.started
        p.quick_deaths = p.quick_deaths + 1 if lived < QUICK_DEATH or not p.ready else 0
        delay = backoff(p.quick_deaths)
        log.error("%s (pid %d) %s; restarting%s", p.tag, pid, describe_status(status),
                  f" in {delay:.1f}s (crash loop)" if delay else "")
        p.restart_at = time.monotonic() + delay
        return True

    def _gone(self, p, status):
        """Bookkeeping of a worker that exited: its output, pipes, socket."""
        self.procs.pop(p.pid, None)
        for fd in p.fds:
            entry = self.pipes.pop(fd, None)
            if entry is not None:
                self._read(fd, entry, final=True)
            os.close(fd)
        p.fds = []
        p.pid = 0
        p.ready = False
        p.kill_at = None
        try:
            os.unlink(p.sock)
        except OSError:
            pass

    def tick(self, web_gens, stopping):
        """Called by the master after every wakeup: output, readiness of
        restarted workers, restarts and KILLs due, retiring generations.
        `web_gens`: generations of the live web workers."""
        self.poll(0)
        now = time.monotonic()
        if stopping and not web_gens:
            # The web workers have drained: now the apps go.
            self.stop_all(fast=stopping == "fast")
        keep = []
        for web_gen, retired in self.retiring:
            if any(g < web_gen for g in web_gens):
                keep.append((web_gen, retired))
            else:
                self.stop(retired)
        self.retiring = keep
        for p in list(self.procs.values()):
            if p.kill_at is not None and now >= p.kill_at:
                log.warning("%s (pid %d) did not stop within %gs; killing it", p.tag, p.pid,
                            p.app.stop_timeout)
                p.kill_at = None
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            elif not p.ready and not p.stopping and not p.timed_out:
                if self._accepts(p.sock):
                    self._mark_ready(p)
                elif now - p.started > p.app.start_timeout:
                    log.error("%s (pid %d) did not accept connections within %gs; killing it",
                              p.tag, p.pid, p.app.start_timeout)
                    p.timed_out = True
                    os.kill(p.pid, signal.SIGKILL)
        if not stopping:
            for p in self.current:
                if p.restart_at is not None and p.restart_at <= now and not p.pid:
                    self._spawn(p)

    def next_timeout(self):
        """Seconds until this module needs the master's loop again, or None."""
        if not self.procs and not any(p.restart_at for p in self.current):
            return None
        times = [POLL]  # output and readiness are polled
        now = time.monotonic()
        times += [p.restart_at - now for p in self.current if p.restart_at]
        return max(0.0, min(times))

    # ---- output --------------------------------------------------------------
    def poll(self, timeout):
        """Reads what the workers wrote, waiting up to `timeout` seconds."""
        if not self.pipes:
            if timeout:
                time.sleep(timeout)
            return
        try:
            r, _, _ = select.select(list(self.pipes), [], [], timeout)
        except InterruptedError:
            return
        for fd in r:
            entry = self.pipes.get(fd)
            if entry is not None and self._read(fd, entry):
                del self.pipes[fd]   # EOF: closed when the worker is reaped

    def _read(self, fd, entry, final=False) -> bool:
        """Logs the complete lines `fd` has; True at end of file."""
        p, stream, buf = entry
        eof = False
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                eof = True
                break
            if not data:
                eof = True
                break
            buf += data
            if len(data) < 65536:
                break
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) >= MAX_LINE:
                    nl = len(buf)
                else:
                    break
            self._line(p, stream, bytes(buf[:nl]))
            del buf[:nl + 1]
        if (eof or final) and buf:
            self._line(p, stream, bytes(buf))
            buf.clear()
        return eof

    @staticmethod
    def _line(p, stream, raw):
        text = raw.rstrip(b"\r").decode("utf-8", "backslashreplace")
        if len(text) > MAX_LINE:
            text = text[:MAX_LINE] + " [cut]"
        log.log(20 if stream == "stdout" else 30, "%s %s: %s", p.tag, stream, text)


def write_sockets(path, procs, gen):
    """Names `procs`' sockets in `path` for the instances (replaced
    atomically: a master reading it sees the old file or the new)."""
    apps = {}
    for p in procs:
        apps.setdefault(p.app.name, []).append(p.sock)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"generation": gen, "apps": apps}, f)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


__all__ = ["Apps", "AppError", "backoff", "write_sockets", "NOTICE"]
