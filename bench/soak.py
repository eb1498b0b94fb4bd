#!/usr/bin/env python3
"""Soak: a real scalwsd under mixed load for a long time, with reloads,
worker kills and upstream restarts; every request accounted for.

    .venv/bin/python bench/soak.py                       # 30 minutes (the issue's run)
    .venv/bin/python bench/soak.py --duration 60 --warmup 8 --timeout 6 \
        --hup-every 15 --kill-every 30 --first-kill 22 \
        --upstream-every 60 --first-upstream 37           # 60 s (tests/e2e/test_soak.py)
    .venv/bin/python bench/soak.py --calibrate 20        # the rate this box sustains
    .venv/bin/python bench/soak.py --serve 600           # the same servers, no load

What runs, in a temp folder of mode 0755 (as root the workers may run as
`nobody`: every file they read is world-readable, the upstreams listen on
TCP): one `python -m scalws --config` (2 workers, sandbox on, defaults
otherwise) with a plain and a TLS listener (a leaf under a throwaway CA;
h2 and http/1.1 by ALPN), routes static, proxy, proxy + response cache,
FastCGI and the WebSocket proxy; two upstream apps
(bench/apps/soak_upstream.py: tests/e2e/upstreams/app.py with a graceful
stop) in one group, two PHP-FPM pools in another. The load is
bench/lib/soakload.py: its docstring says what each request checks and
which failures are expected.

Schedule: `--warmup` seconds of load, a quiet sample of the resources (load
paused, client connections closed), `--duration` seconds of load with the
events, the requests in flight answered, the closing quiet sample, a TERM
to scalwsd. Each kind of event comes at k * period (the first at
`--first-*`, default one period) while more than `--tail` seconds remain,
one event at a time (one due while another runs waits for it):

  hup       SIGHUP to the master; done when it logs "reloaded" (a "reload
            failed" fails the event)
  kill      the current worker of index k % workers: SIGSTOP, its client
            connections read from /proc and marked as the kill's
            (soakload.Load.mark_victims), SIGKILL; done when its
            replacement runs
  upstream  a rolling restart of one app and one PHP-FPM pool (the first
            of each, then the second, ...): the app gets SIGTERM (it drains,
            see soak_upstream.py), PHP-FPM SIGTERM (children killed, as
            `systemctl restart` does); a new process on the same port

Resources: at each quiet sample, for the master, each worker and the TLS
keeper: VmRSS, RssAnon, and the descriptors by class (client and upstream
connections, listeners, pipes, eventfds, files, ...). A worker is a child
of the master pinned to one CPU (worker i to the i-th CPU of the master's
affinity, so `--workers` must not exceed the CPUs), the newest when a
reload's old one is still draining; workers are compared by index, since
reloads and kills replace them. Samples every `--sample-every` seconds under
load go to the JSON only.

Two fresh workers differ by more than a leak: a worker forked after the
master grew maps the master's new pages (the master's first reload adds
about 240 kB to its heap, then it stays flat: 30 HUPs, 2026-12-07), and a
worker's heap keeps what its load's bursts freed (after a burst,
malloc_trim(0) gives back 0.7-0.9 MiB of a worker's 25 MiB). So the check
charges a later worker only its own growth, and allows `--heap-slack`.

Verdict (PASS/FAIL, exit status 0/1): no unexpected failure; every event
done; for the master and each worker index, VmRSS and the descriptors
other than connections grew less than `--max-growth` % from the first
quiet sample to the last (VmRSS: or less than `--heap-slack` kB; a worker
forked later than the first sample is not charged what the master grew
by, see above); no client connection left on a worker at the
last one; no worker died other than by our SIGKILL; no Python traceback in
the error log; scalwsd exits 0 on TERM.

Output (`--out`, default results/soak/<date>): report.md, report.json
(every failure, event, sample and the per-second timeline), the config,
and in logs/ the error log and the upstreams' and PHP-FPM's logs (the run
folder is removed unless `--keep`). The default rate is about half of what this mix sustained on
the 2-vCPU development VM (`--calibrate`: 5200 requests/s unpaced, the
box saturated); run it on an otherwise idle box.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench" / "lib"))

import soakload  # noqa: E402
from soakreport import build_report, render_md  # noqa: E402
from tests.e2e.upstreams.fixtures import (  # noqa: E402
    free_port, start_until_ready, stop_process, wait_connectable)
from tests.e2e.upstreams.phpfpm import PHP_FPM, POOL  # noqa: E402
from tests.tlspki import PKI  # noqa: E402

DEFAULT_RATE = 2500
ECHO_PHP = "<?php\nheader('Content-Type: text/plain');\necho 'php ', $_GET['n'] ?? '';\n"


# ---- processes --------------------------------------------------------------

class App:
    """One soak_upstream.py (the proxy's upstream)."""

    def __init__(self, run, name, port):
        self.run, self.name, self.port = run, name, port
        self.proc = None
        self.log_path = os.path.join(run, f"upstream-{name}.log")

    def start(self):
        self.proc, _ = start_until_ready(
            [sys.executable, str(REPO / "bench" / "apps" / "soak_upstream.py"),
             "--name", self.name, "--port", str(self.port)], self.log_path)
        return self

    def stop(self, timeout=20.0):
        """SIGTERM: the app stops listening and finishes what it has."""
        stop_process(self.proc, signal.SIGTERM, timeout)


class Fpm:
    """One PHP-FPM pool on a TCP port (tests/e2e/upstreams/phpfpm.py's pool)."""

    def __init__(self, run, name, port, children):
        self.dir = os.path.join(run, f"php-fpm-{name}")
        os.makedirs(self.dir, exist_ok=True)
        self.name, self.port, self.children = name, port, children
        self.proc = None

    def start(self):
        conf = os.path.join(self.dir, "php-fpm.conf")
        pool = POOL.format(dir=self.dir, children=self.children, max_requests=0,
                           listen=f"127.0.0.1:{self.port}")
        pool = pool.replace("access.log = ", "; access.log = ")
        with open(conf, "w") as f:
            f.write(pool)
        with open(os.path.join(self.dir, "stderr.log"), "ab") as log:
            self.proc = subprocess.Popen([PHP_FPM, "-F", "-R", "-n", "-y", conf],
                                         stdout=log, stderr=subprocess.STDOUT)
        wait_connectable("127.0.0.1", self.port, self.proc, what=f"php-fpm {self.name}")
        return self

    def stop(self, timeout=20.0):
        """SIGTERM, what `systemctl restart php8.2-fpm` sends: the children
        die at once, the requests they had are reset (the proxy may retry
        them: GETs, no byte answered yet). SIGQUIT, PHP-FPM's graceful stop,
        took its whole process_control_timeout here (10 s), and requests
        that reached its socket meanwhile waited that long."""
        stop_process(self.proc, signal.SIGTERM, timeout)


class Scalwsd:
    def __init__(self, run, config_path):
        self.run = run
        self.config_path = config_path
        self.log_path = os.path.join(run, "error.log")
        self.proc = None

    def start(self):
        self._out = open(os.path.join(self.run, "scalwsd.out"), "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "scalws", "--config", self.config_path],
                                     cwd=str(REPO), stdout=self._out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while "scalws started" not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"scalwsd did not start:\n{self.log()}\n{self.out()}")
            time.sleep(0.05)
        return self

    @property
    def pid(self):
        return self.proc.pid

    def log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def out(self):
        with open(os.path.join(self.run, "scalwsd.out"), encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, timeout=40.0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self._out.close()


CONFIG = """\
# bench/soak.py: 2 workers, sandbox on, the rest the defaults
workers: {workers}
log:
  error: {run}/error.log
cache_zones:
  soak: {{max_size: 16m}}
upstreams:
  app: {{servers: ["127.0.0.1:{app0}", "127.0.0.1:{app1}"]}}
  php: {{servers: ["127.0.0.1:{fpm0}", "127.0.0.1:{fpm1}"]}}
sites:
  - listen: ["127.0.0.1:{port}", "127.0.0.1:{tls_port} tls"]
    tls: {{cert: {cert}, key: {key}}}
    routes:
      - {{path: /static/, static: {{root: {run}/www}}}}
      - {{path: /proxy/, proxy: {{upstream: app, strip_prefix: /proxy}}}}
      - {{path: /cache/, proxy: {{upstream: app, strip_prefix: /cache, cache: soak}}}}
      - {{path: "= /ws", proxy: {{upstream: app}}}}
      - {{path: /php/, fastcgi: {{upstream: php, root: {run}/www}}}}
"""


def parse_size(text):
    m = re.fullmatch(r"(\d+)([kKmM]?)", text)
    if not m:
        raise SystemExit(f"soak: size {text!r}: give bytes, or Nk, Nm")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20}[m.group(2).lower()]


def make_content(run, sizes):
    """The static files ({url path: bytes}), the PHP script, the certificates."""
    www = os.path.join(run, "www")
    os.makedirs(os.path.join(www, "static"))
    os.makedirs(os.path.join(www, "php"))
    files = {}
    for size in sizes:
        n = parse_size(size)
        files[f"/static/{size}.bin"] = os.urandom(n)
    for path, data in files.items():
        with open(www + path, "wb") as f:
            f.write(data)
    with open(os.path.join(www, "php", "echo.php"), "w") as f:
        f.write(ECHO_PHP)
    for d, _, names in os.walk(www):
        os.chmod(d, 0o755)
        for n in names:
            os.chmod(os.path.join(d, n), 0o644)
    # A leaf for localhost and 127.0.0.1 under an intermediate and a root (a
    # self-signed certificate would add warnings to the error log at every
    # reload); clients trust the root.
    pki = PKI(os.path.join(run, "pki"))
    root = pki.root()
    leaf = pki.leaf(pki.intermediate(root), ["localhost"], ips=["127.0.0.1"])
    os.chmod(pki.folder, 0o755)
    return files, {"cert": leaf.cert_path, "key": leaf.key_path, "ca": root.cert_path}


# ---- /proc ------------------------------------------------------------------

def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return out


def start_time(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def cpu_times():
    """(busy, steal, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    steal = v[7] if len(v) > 7 else 0
    total = sum(v[:8])
    return total - idle - steal, steal, total


def workers_by_index(master, cpus):
    """{index: pid} of the current workers: children pinned to one CPU
    (worker i is pinned to cpus[i % len(cpus)]); when a reload's old worker
    still drains, the newest one. Other children (TLS keeper): "keeper"."""
    found = collections.defaultdict(list)
    others = []
    for pid in children(master):
        st = proc_status(pid)
        if st is None:
            continue
        allowed = st.get("Cpus_allowed_list", "")
        try:
            t = start_time(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone since the list was read (a killed worker reaped meanwhile)
        if allowed.isdigit() and int(allowed) in cpus and len(cpus) > 1:
            found[cpus.index(int(allowed))].append((t, pid))
        else:
            others.append((t, pid))
    out = {i: max(v)[1] for i, v in found.items()}
    if others:
        out["keeper"] = max(others)[1]
    return out


def tcp_table():
    """{inode: (local port, remote port, state)} of every TCP socket."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    p = line.split()
                    out[p[9]] = (int(p[1].rsplit(":", 1)[1], 16), int(p[2].rsplit(":", 1)[1], 16),
                                 p[3])
        except FileNotFoundError:
            pass
    return out


def socket_inodes(pid):
    inodes = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.append(target[8:-1])
    return inodes


def client_ports_of(pid, listen_ports):
    """The client-side ports of the connections `pid` holds on our listeners."""
    table = tcp_table()
    ports = set()
    for ino in socket_inodes(pid):
        t = table.get(ino)
        if t and t[0] in listen_ports and t[2] != "0A":
            ports.add(t[1])
    return ports


def fd_classes(pid, listen_ports, upstream_ports, table, client_ports=None):
    """Counts of `pid`'s descriptors by class; the client ports of its client
    connections are added to `client_ports` (a list) when given."""
    counts = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            t = table.get(target[8:-1])
            if t is None:
                counts["unix socket"] += 1
            elif t[2] == "0A":
                counts["listener"] += 1
            elif t[0] in listen_ports:
                counts["client connection"] += 1
                if client_ports is not None:
                    client_ports.append(t[1])
            elif t[1] in upstream_ports:
                counts["upstream connection"] += 1
            else:
                counts["other tcp"] += 1
        elif target.startswith("pipe:"):
            counts["pipe"] += 1
        elif target.startswith("anon_inode:"):
            counts[target[11:].strip("[]")] += 1
        elif target.startswith("/memfd:"):
            counts["memfd"] += 1
        elif target.startswith("/dev/"):
            counts["device"] += 1
        else:
            counts["file"] += 1
    return counts


CONN_CLASSES = ("client connection", "upstream connection", "other tcp")


def sample_process(pid, listen_ports, upstream_ports, table):
    st = proc_status(pid)
    if st is None:
        return None
    kb = lambda k: int(st.get(k, "0 kB").split()[0])  # noqa: E731
    ports = []
    try:
        fds = fd_classes(pid, listen_ports, upstream_ports, table, ports)
    except (FileNotFoundError, ProcessLookupError):
        return None
    total = sum(fds.values())
    return {"pid": pid, "rss_kb": kb("VmRSS"), "rss_anon_kb": kb("RssAnon"),
            "rss_file_kb": kb("RssFile"), "rss_shmem_kb": kb("RssShmem"),
            "fds": total, "fds_not_conn": total - sum(fds[c] for c in CONN_CLASSES),
            "fd_classes": dict(fds), "client_ports": sorted(ports)}


def sample(master, cpus, listen_ports, upstream_ports):
    table = tcp_table()
    roles = {"master": master}
    for k, pid in workers_by_index(master, cpus).items():
        roles[f"worker {k}" if k != "keeper" else "tls keeper"] = pid
    return {role: sample_process(pid, listen_ports, upstream_ports, table)
            for role, pid in sorted(roles.items())}


# ---- the run ----------------------------------------------------------------

class Soak:
    def __init__(self, args, run, target, srv, apps, fpms, cpus):
        self.args = args
        self.run = run
        self.srv = srv
        self.apps = apps
        self.fpms = fpms
        self.cpus = cpus
        self.listen_ports = {target.port, target.tls_port}
        self.upstream_ports = {a.port for a in apps} | {f.port for f in fpms}
        mix = dict(soakload.DEFAULT_MIX)
        for item in filter(None, args.mix.split(",")):
            k, _, v = item.partition("=")
            mix[k] = float(v)
        lanes = {"h1": args.h1, "h1-tls": args.h1_tls, "h2": args.h2}
        self.load = soakload.Load(target, args.rate, mix, lanes, args.h2_streams, seed=args.seed,
                                  timeout=args.timeout)
        self.events = []
        self.samples = []
        self.quiet = {}
        self.kills = 0
        self.upstream_turn = 0
        self.log_pos = 0

    def t(self):
        return round(time.monotonic() - self.load.stats.t0, 3)

    async def run_all(self):
        load = self.load
        load.start()
        say(f"load started: {self.args.rate:g} requests/s, {self.args.warmup:g} s of warm-up")
        await asyncio.sleep(self.args.warmup)
        self.quiet["start"] = await self.quiet_sample()
        say(f"first sample taken; {self.args.duration:g} s of soak, events: "
            + (", ".join(f"{k} at {t:g}" for t, k in self.schedule()) or "none"))
        log_start = os.path.getsize(self.srv.log_path)
        load.stats.phase = "soak"
        self.cpu0, self.own0 = cpu_times(), os.times()
        self.t_soak = time.monotonic()
        self.soak_offset = self.t_soak - load.stats.t0  # the load's clock at the soak's 0
        load.resume()
        sampler = asyncio.get_running_loop().create_task(self.sampler())
        await self.chaos()
        left = self.t_soak + self.args.duration - time.monotonic()
        if left > 0:
            await asyncio.sleep(left)
        load.stats.phase = "end"
        self.soak_seconds = time.monotonic() - self.t_soak
        cpu1, own1 = cpu_times(), os.times()
        span = cpu1[2] - self.cpu0[2]
        own = own1.user + own1.system - self.own0.user - self.own0.system
        self.cpu = {"box_busy_pct": round(100.0 * (cpu1[0] - self.cpu0[0]) / span, 1),
                    "box_steal_pct": round(100.0 * (cpu1[1] - self.cpu0[1]) / span, 1),
                    "harness_pct_of_one_cpu": round(100.0 * own / self.soak_seconds, 1)}
        sampler.cancel()
        t = time.monotonic()
        await load.pause()
        self.drain_seconds = time.monotonic() - t
        say(f"soak over; the requests in flight took {self.drain_seconds:.1f} s to end")
        self.quiet["end"] = await self.quiet_sample(paused=True)
        await load.stop()
        self.log_start = log_start

    async def quiet_sample(self, paused=False):
        """The load paused and its connections closed; once the workers hold no
        client connection (3 s at most), a sample."""
        if not paused:
            await self.load.pause()
        deadline = time.monotonic() + 3
        while True:
            s = await self._sample()
            left = sum(v["fd_classes"].get("client connection", 0)
                       for k, v in s.items() if v and k.startswith("worker"))
            if not left or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        s["t"] = self.t()
        return s

    async def _sample(self):
        """A sample, read in a thread: /proc/net/tcp can be long, and the
        load's requests must not wait for it."""
        return await asyncio.get_running_loop().run_in_executor(
            None, sample, self.srv.pid, self.cpus, self.listen_ports, self.upstream_ports)

    async def sampler(self):
        while True:
            await asyncio.sleep(self.args.sample_every)
            s = await self._sample()
            s["t"] = self.t()
            self.samples.append(s)

    def schedule(self):
        a, d = self.args, self.args.duration
        ev = []
        for kind, every, first in (("hup", a.hup_every, a.first_hup),
                                   ("kill", a.kill_every, a.first_kill),
                                   ("upstream", a.upstream_every, a.first_upstream)):
            if not every:
                continue
            t = every if first is None else first
            while t <= d - a.tail:
                ev.append((t, kind))
                t += every
        return sorted(ev, key=lambda e: (e[0], ("hup", "kill", "upstream").index(e[1])))

    async def chaos(self):
        for at, kind in self.schedule():
            wait = self.t_soak + at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            rec = {"kind": kind, "due": at, "t": self.t(),
                   "t_soak": round(time.monotonic() - self.t_soak, 3)}
            try:
                await getattr(self, f"do_{kind}")(rec)
                rec.setdefault("ok", True)
            except Exception as exc:  # noqa: BLE001
                rec["ok"] = False
                rec["error"] = f"{exc.__class__.__name__}: {exc}"
            rec["took_s"] = round(self.t() - rec["t"], 3)
            self.events.append(rec)
            say(f"{kind} at {rec['t_soak']:g} s: {'done' if rec['ok'] else 'FAILED'} in "
                f"{rec['took_s']:g} s" + (f" ({rec['error']})" if "error" in rec else ""))

    async def _log_wait(self, pattern, fail, timeout):
        """Waits for a new error-log line matching `pattern` (False on `fail`)."""
        deadline = time.monotonic() + timeout
        buf = ""
        while time.monotonic() < deadline:
            with open(self.srv.log_path, encoding="utf-8", errors="replace") as f:
                f.seek(self.log_pos)
                buf += f.read()
                self.log_pos = f.tell()
            for line in buf.splitlines():
                if fail and fail in line:
                    return False, line
                if pattern in line:
                    return True, line
            await asyncio.sleep(0.05)
        return False, f"no {pattern!r} in the log within {timeout}s"

    async def do_hup(self, rec):
        self.log_pos = os.path.getsize(self.srv.log_path)
        os.kill(self.srv.pid, signal.SIGHUP)
        ok, line = await self._log_wait("reloaded ", "reload failed", 60)
        rec["ok"] = ok
        rec["detail"] = line.split(": ", 1)[-1][:200]

    async def do_kill(self, rec):
        index = self.kills % self.args.workers
        self.kills += 1
        pid = workers_by_index(self.srv.pid, self.cpus).get(index)
        if pid is None:
            raise RuntimeError(f"no worker {index}")
        # Frozen, the worker accepts nothing more: what /proc shows is exactly
        # what the SIGKILL takes with it.
        os.kill(pid, signal.SIGSTOP)
        try:
            ports = client_ports_of(pid, self.listen_ports)
            marked = self.load.mark_victims(ports, self.kills, time.monotonic())
        finally:
            os.kill(pid, signal.SIGKILL)  # kills a stopped process too
        rec.update({"kill_no": self.kills, "worker": index, "pid": pid,
                    "client_connections": len(ports), "marked": marked})
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            new = workers_by_index(self.srv.pid, self.cpus).get(index)
            if new is not None and new != pid:
                rec["replacement"] = new
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"worker {index} was not replaced within 15 s")

    async def do_upstream(self, rec):
        i = self.upstream_turn % 2
        self.upstream_turn += 1
        app, fpm = self.apps[i], self.fpms[i]
        loop = asyncio.get_running_loop()
        t = time.monotonic()
        await loop.run_in_executor(None, app.stop)
        rec["app"] = app.name
        rec["app_down_s"] = round(time.monotonic() - t, 3)
        await loop.run_in_executor(None, app.start)
        rec["app_restart_s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        await loop.run_in_executor(None, fpm.stop)
        rec["php_fpm"] = fpm.name
        rec["php_down_s"] = round(time.monotonic() - t, 3)
        await loop.run_in_executor(None, fpm.start)
        rec["php_restart_s"] = round(time.monotonic() - t, 3)


# ---- main -------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=1800, help="seconds of the soak phase (1800)")
    p.add_argument("--warmup", type=float, default=30, help="seconds of load before the first sample (30)")
    p.add_argument("--rate", type=float, default=DEFAULT_RATE,
                   help=f"requests (and WebSocket sessions) a second in all ({DEFAULT_RATE})")
    p.add_argument("--hup-every", type=float, default=60)
    p.add_argument("--kill-every", type=float, default=300)
    p.add_argument("--upstream-every", type=float, default=420)
    p.add_argument("--first-hup", type=float)
    p.add_argument("--first-kill", type=float)
    p.add_argument("--first-upstream", type=float)
    p.add_argument("--tail", type=float, default=5,
                   help="no event in the last TAIL seconds, so that each one's effects are measured (5)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--h1", type=int, default=8, help="HTTP/1.1 slots (connections), plain (8)")
    p.add_argument("--h1-tls", type=int, default=8, help="HTTP/1.1 slots over TLS (8)")
    p.add_argument("--h2", type=int, default=4, help="HTTP/2 connections (4)")
    p.add_argument("--h2-streams", type=int, default=4, help="slots per HTTP/2 connection (4)")
    p.add_argument("--mix", default="", help="kind=weight,... over " + ", ".join(
        f"{k}={v}" for k, v in soakload.DEFAULT_MIX.items()))
    p.add_argument("--static-sizes", default="1k,16k,200k",
                   help="sizes of the static files, one picked at random per request (1k,16k,200k)")
    p.add_argument("--timeout", type=float, default=15, help="seconds a request may take (15)")
    p.add_argument("--php-children", type=int, default=6)
    p.add_argument("--sample-every", type=float, default=10)
    p.add_argument("--max-growth", type=float, default=2.0, help="percent (2)")
    p.add_argument("--heap-slack", type=int, default=1024, metavar="KB",
                   help="RSS growth allowed whatever --max-growth says (1024 kB: a "
                        "worker's free heap after load)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="report folder (results/soak/<date>)")
    p.add_argument("--keep", action="store_true", help="keep the run folder")
    p.add_argument("--calibrate", type=float, metavar="SECONDS",
                   help="no events: unpaced load for SECONDS, prints the rate the box sustains")
    p.add_argument("--serve", type=float, metavar="SECONDS",
                   help="no load: start everything, print the addresses, wait SECONDS (to debug)")
    return p.parse_args(argv)


T0 = time.monotonic()


def say(msg):
    print(f"soak [{time.monotonic() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def bench_lock():
    """The benchmarks' lock (bench/lib/common.sh: BENCH_LOCK, `none` for
    none), held until exit, so that a soak and a benchmark never overlap."""
    import fcntl
    path = os.environ.get("BENCH_LOCK", "/tmp/scalws-bench.lock")
    if path == "none":
        return None
    f = open(path, "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        say(f"waiting for {path} (another benchmark is running)")
        fcntl.flock(f, fcntl.LOCK_EX)
    return f


def main(argv=None):
    args = parse_args(argv)
    lock = bench_lock()  # noqa: F841 - held while this process lives
    out = Path(args.out or REPO / "results" / "soak" / datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    run = tempfile.mkdtemp(prefix="scalws-soak.")
    os.chmod(run, 0o755)
    started = []
    code = 1
    try:
        files, certs = make_content(run, args.static_sizes.split(","))
        apps = [App(run, name, free_port()) for name in ("a", "b")]
        fpms = [Fpm(run, name, free_port(), args.php_children) for name in ("a", "b")]
        for p in apps + fpms:
            started.append(p.start())
        say(f"upstreams up: apps on {[a.port for a in apps]}, PHP-FPM on {[f.port for f in fpms]}")
        port, tls_port = free_port(), free_port()
        config = CONFIG.format(workers=args.workers, run=run, port=port, tls_port=tls_port,
                               cert=certs["cert"], key=certs["key"],
                               app0=apps[0].port, app1=apps[1].port,
                               fpm0=fpms[0].port, fpm1=fpms[1].port)
        config_path = os.path.join(run, "scalws.yaml")
        with open(config_path, "w") as f:
            f.write(config)
        srv = Scalwsd(run, config_path).start()
        started.append(srv)
        say(f"scalwsd up (pid {srv.pid}): http://127.0.0.1:{port}/, https://localhost:{tls_port}/")
        cpus = sorted(os.sched_getaffinity(srv.pid))
        target = soakload.Target("127.0.0.1", port, tls_port, certs["ca"], files)
        if args.calibrate:
            code = calibrate(args, target)
            return code
        if args.serve:
            print(f"soak: serving for {args.serve:g} s: http://127.0.0.1:{port}/ "
                  f"https://localhost:{tls_port}/ (CA {certs['ca']}), error log {srv.log_path}",
                  flush=True)
            time.sleep(args.serve)
            code = 0
            return code
        soak = Soak(args, run, target, srv, apps, fpms, cpus)
        _run_loop(soak.run_all())
        say("load stopped; TERM to scalwsd")
        stop_code = srv.stop()
        say(f"scalwsd exited {stop_code}")
        started.remove(srv)
        log_text = srv.log()
        rep = build_report(args, soak, stop_code, log_text, soak.log_start)
        (out / "report.json").write_text(json.dumps(rep, indent=1))
        (out / "report.md").write_text(render_md(rep))
        shutil.copy(config_path, out / "scalws.yaml")
        q = rep["requests"]
        print(f"soak: {rep['verdict']}: {q['total_sent']} requests, {q['failed_expected']} expected "
              f"and {q['failed_unexpected']} unexpected failures; report in {out}/report.md")
        for c in rep["checks"]:
            if not c["ok"]:
                print(f"  FAILED {c['check']}: {c['detail']}")
        code = 0 if rep["verdict"] == "PASS" else 1
    finally:
        for p in reversed(started):
            try:
                p.stop()
            except Exception as exc:  # noqa: BLE001
                print(f"soak: stopping {p}: {exc}", file=sys.stderr)
        keep_logs(run, out)
        if args.keep:
            print(f"soak: run folder kept: {run}", file=sys.stderr)
        else:
            shutil.rmtree(run, ignore_errors=True)
    return code


def keep_logs(run, out):
    """The logs of every process into OUT/logs (the run folder goes)."""
    dest = out / "logs"
    dest.mkdir(exist_ok=True)
    for name in ("error.log", "scalwsd.out", "upstream-a.log", "upstream-b.log",
                 "php-fpm-a/php-fpm.log", "php-fpm-b/php-fpm.log",
                 "php-fpm-a/stderr.log", "php-fpm-b/stderr.log"):
        src = os.path.join(run, name)
        if os.path.exists(src):
            shutil.copy(src, dest / name.replace("/", "-"))


def calibrate(args, target):
    async def go():
        mix = dict(soakload.DEFAULT_MIX)
        for item in filter(None, args.mix.split(",")):
            k, _, v = item.partition("=")
            mix[k] = float(v)
        load = soakload.Load(target, 0, mix,
                             {"h1": args.h1, "h1-tls": args.h1_tls, "h2": args.h2}, args.h2_streams,
                             seed=args.seed, timeout=args.timeout)
        load.start()
        await asyncio.sleep(3)
        n0, t0 = sum(load.stats.sent.values()), time.monotonic()
        cpu0 = os.times()
        await asyncio.sleep(args.calibrate)
        n1, t1 = sum(load.stats.sent.values()), time.monotonic()
        cpu1 = os.times()
        await load.stop()
        rps = (n1 - n0) / (t1 - t0)
        own = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (t1 - t0) * 100
        for f in load.stats.failures[:10]:
            print(f"  failure: {f}")
        print(f"calibrate: {rps:.0f} requests/s unpaced ({len(load.stats.failures)} failures); "
              f"the harness used {own:.0f} % of a CPU; half: --rate {rps / 2:.0f}")
    _run_loop(go())
    return 0


def _run_loop(coro):
    try:
        import uvloop
        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


if __name__ == "__main__":
    sys.exit(main())
