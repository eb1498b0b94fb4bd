"""scalws-controller with real scalwsd instances (docs/operations.md,
"scalws-controller"): pinning, cgroups (v1 here, v2 with a fake root),
supervision, rolling reload, graceful stop, autoscaling, config errors.

This machine has 2 CPUs: every test uses cpus_per_instance: 1 and cpus [0, 1].
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from scalws.config.errors import ConfigError
from scalws.config.loader import load_config_text
from scalws.control import cgroups
from scalws.control.controller import listen_queue, p99
from tests.e2e.conftest import ROOT, free_port, raw, statuses

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")

V1_ROOT = "/sys/fs/cgroup"
HAVE_V1 = os.access(os.path.join(V1_ROOT, "cpu"), os.W_OK) and \
    not os.path.exists(os.path.join(V1_ROOT, "cgroup.controllers"))


class Controller:
    def __init__(self, tmp_path, body, args=(), env=None):
        self.port = free_port()
        self.log_path = tmp_path / "error.log"
        self.cfg = tmp_path / "scalws.yaml"
        self.cfg.write_text(textwrap.dedent(body).format(port=self.port, log=self.log_path))
        self.out = open(tmp_path / "stderr.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from scalws.cli import controller_main; "
             "sys.exit(controller_main())", "--config", str(self.cfg), *args],
            cwd=ROOT, stdout=self.out, stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env})

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_log(self, text, count=1, timeout=15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log().count(text) >= count:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"controller exited {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {text!r}:\n{self.log()}")

    def masters(self) -> list:
        pid = self.proc.pid
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]

    def stop(self, sig=signal.SIGTERM, timeout=20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.out.close()


def children(pid) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def title(pid) -> tuple:
    """What ps (cmdline) and top (comm) show for pid."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        line = f.read().rstrip(b"\0").replace(b"\0", b" ").decode()
    with open(f"/proc/{pid}/comm") as f:
        return line, f.read().rstrip("\n")


def cpus_allowed(pid) -> str:
    with open(f"/proc/{pid}/status") as f:
        return re.search(r"Cpus_allowed_list:\s*(\S+)", f.read()).group(1)


class Load:
    """Clients in threads, one connection per request; counts failures."""

    def __init__(self, port, threads=1, pause=0.0, path="/"):
        self.port, self.pause, self.path = port, pause, path
        self.pids = set()  # first words of the bodies (the test app's pid)
        self.ok = 0
        self.failed = []
        self.stop_ev = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self):
        req = f"GET {self.path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode()
        while not self.stop_ev.is_set():
            try:
                data = raw(self.port, req)
                got = statuses(data)
                if got == [200]:
                    self.ok += 1
                    self.pids.add(data.split(b"\r\n\r\n", 1)[1].split(b" ", 1)[0])
                else:
                    self.failed.append(got)
            except OSError as exc:
                self.failed.append(repr(exc))
            if self.pause:
                time.sleep(self.pause)

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(10)
        return self.ok, self.failed


SITE = """\
log: {{error: "{log}", level: info}}
shutdown_timeout: 5s
sites:
  - listen: ["127.0.0.1:{port}"]
    routes:
      - {{path: /, respond: {{status: 200, body: "ok\\n"}}}}
"""


def test_pinned_cgroups_restart_rolling_reload_and_stop(tmp_path):
    name = f"scalws-test-{os.getpid()}"
    args = ["--cgroup-root", V1_ROOT, "--cgroup-name", name] if HAVE_V1 else ["--no-cgroups"]
    c = Controller(tmp_path, "instances: {{min: 2, max: 2, cpus_per_instance: 1, "
                   "cpus: [0, 1], memory_limit: 256m, cpu_quota: 100%}}\n" + SITE, args)
    try:
        c.wait_log("scalws-controller started: 2 instances ready")
        masters = c.masters()
        assert len(masters) == 2
        workers = {m: children(m) for m in masters}
        sets = sorted(cpus_allowed(w) for ws in workers.values() for w in ws)
        assert sets == ["0", "1"], sets                  # disjoint, one CPU each
        # ps and top tell the controller and its instances apart (control/title.py)
        assert title(c.proc.pid) == (f"scalws-controller: master process {c.cfg}", "scalws-ctl")
        assert sorted(title(m) for m in masters) == [
            (f"scalws-controller: instance {i} (cpus {i})", f"scalws-inst{i}") for i in (0, 1)]
        assert sorted(title(w)[0] for ws in workers.values() for w in ws) == ["scalwsd: worker 0"] * 2
        if HAVE_V1:
            for i in range(2):
                d = {k: f"{V1_ROOT}/{k}/{name}/instance-{i}" for k in ("cpu", "cpuset", "memory")}
                procs = {int(p) for p in open(d["cpu"] + "/cgroup.procs").read().split()}
                assert open(d["cpu"] + "/cpu.cfs_quota_us").read().strip() == "100000"
                assert open(d["memory"] + "/memory.limit_in_bytes").read().strip() == "268435456"
                assert open(d["cpuset"] + "/cpuset.cpus").read().strip() == str(i)
                m = [m for m in masters if m in procs]
                assert len(m) == 1 and set(workers[m[0]]) <= procs

        # A killed instance is started again; the other keeps serving
        # meanwhile, and the killed one's workers drain and exit by themselves
        # (TERM on their master's death: PR_SET_PDEATHSIG), reaped by us.
        load = Load(c.port, threads=2)
        time.sleep(0.3)
        orphans = workers[masters[0]]
        os.kill(masters[0], signal.SIGKILL)
        c.wait_log("ready (pid", count=3)
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{p}") for p in orphans):
            assert time.monotonic() < deadline, "the killed master's workers outlived it"
            time.sleep(0.05)
        time.sleep(0.3)
        ok, failed = load.stop()
        assert not failed and ok > 0, failed
        assert len(c.masters()) == 2

        # Rolling reload: one instance at a time, no failed request.
        before = {m: set(children(m)) for m in c.masters()}
        load = Load(c.port, threads=2)
        c.proc.send_signal(signal.SIGHUP)
        c.wait_log("reload done: every instance reloaded")
        time.sleep(0.3)
        ok, failed = load.stop()
        assert not failed and ok > 0, failed
        for m, old in before.items():
            assert old.isdisjoint(children(m)), (old, children(m))
        steps = re.findall(r"instance (\d) (?:\(pid \d+\): (reloading)|(reloaded) \(pid)", c.log())
        assert [(i, a or b) for i, a, b in steps] in (
            [("0", "reloading"), ("0", "reloaded"), ("1", "reloading"), ("1", "reloaded")],
            [("1", "reloading"), ("1", "reloaded"), ("0", "reloading"), ("0", "reloaded")]), steps

        # TERM drains everything and exits 0; the cgroups are removed.
        assert c.stop() == 0, c.log()
        assert "scalws-controller stopped" in c.log()
        assert not any(os.path.exists(f"/proc/{m}") for m in before)
        if HAVE_V1:
            assert not os.path.exists(f"{V1_ROOT}/cpu/{name}")
    finally:
        c.stop()
    assert "Traceback" not in c.log()


APPS = os.path.join(ROOT, "tests", "e2e", "apps")


def cmdline(pid) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def app_pids(port, n=40) -> set:
    """The test app's pids seen by `n` requests, each on a new connection
    (SO_REUSEPORT spreads them over both instances' workers)."""
    req = b"GET /api/pid HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    pids = set()
    for _ in range(n):
        data = raw(port, req)
        assert statuses(data) == [200], data
        pids.add(int(data.split(b"\r\n\r\n", 1)[1].split()[0]))
    return pids


@pytest.mark.timeout(120)
def test_apps_run_once_for_all_instances(tmp_path):
    c = Controller(tmp_path, "instances: {{min: 2, max: 2, cpus_per_instance: 1, "
                   "cpus: [0, 1]}}\n" + f"""\
apps:
  api: {{{{asgi: "asgi_app:app", dir: "{APPS}", workers: 2}}}}
""" + SITE.replace("routes:\n", "routes:\n      - {{path: /api/, app: api}}\n"),
                   ["--no-cgroups"])
    try:
        c.wait_log("scalws-controller started: 2 instances ready", timeout=30)
        kids = c.masters()
        uvicorns = [p for p in kids if b"uvicorn" in cmdline(p)]
        masters = [p for p in kids if p not in uvicorns]
        assert len(uvicorns) == 2 and len(masters) == 2, [cmdline(p) for p in kids]
        # The instances run no app of their own.
        for m in masters:
            assert not any(b"uvicorn" in cmdline(w) for w in children(m))
        assert c.log().count("app api[0] started") == 1
        assert c.log().count("app api[1] started") == 1
        # Both instances reach the same two app processes.
        assert app_pids(c.port) == set(uvicorns)

        # A killed app worker is restarted once, by the controller.
        os.kill(uvicorns[0], signal.SIGKILL)
        c.wait_log("killed by signal 9 (SIGKILL); restarting")
        c.wait_log("started (pid", count=3)
        c.wait_log("ready (pid", count=3 + 2)    # 3 app workers, 2 instances
        time.sleep(0.5)
        assert c.log().count("restarting") == 1, c.log()
        killed = uvicorns[0]
        uvicorns = [p for p in c.masters() if b"uvicorn" in cmdline(p)]
        assert len(uvicorns) == 2 and killed not in uvicorns
        assert app_pids(c.port) == set(uvicorns)

        # HUP: one new app generation, a rolling reload, no failed request,
        # then the old app workers stop.
        load = Load(c.port, threads=2, path="/api/pid")
        time.sleep(0.3)
        c.proc.send_signal(signal.SIGHUP)
        c.wait_log("reload done: every instance reloaded", timeout=30)
        c.wait_log("app generation 1 retired", timeout=30)
        deadline = time.monotonic() + 15
        while any(os.path.exists(f"/proc/{p}") for p in uvicorns) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        ok, failed = load.stop()
        assert not failed and ok > 0, failed
        assert not any(os.path.exists(f"/proc/{p}") for p in uvicorns)
        assert c.log().count("generation 2, socket") == 2
        new = [p for p in c.masters() if b"uvicorn" in cmdline(p)]
        assert len(new) == 2 and set(new).isdisjoint(uvicorns)
        assert app_pids(c.port) == set(new)
        assert {int(p) for p in load.pids} <= set(uvicorns) | set(new)

        # TERM: the instances drain, then the apps stop.
        masters = [p for p in c.masters() if p not in new]
        assert c.stop() == 0, c.log()
        log = c.log()
        assert "scalws-controller stopped" in log
        assert not any(os.path.exists(f"/proc/{p}") for p in masters + new)
        last_instance = max(log.rfind(f"instance {i} (pid {m})") for i in (0, 1)
                            for m in masters)
        first_app = min(log.find(f"(pid {p}, generation 2)") for p in new)
        assert 0 < last_instance < first_app, log
    finally:
        c.stop()
    assert "Traceback" not in c.log()


def test_autoscale_up_and_down_with_fake_cgroup_v2(tmp_path):
    root = tmp_path / "cgroupfs"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    c = Controller(tmp_path, "instances: {{min: 1, max: 2, cpus_per_instance: 1, cpus: [0, 1], "
                   "memory_limit: 128m, cpu_quota: 0.5, scale_up_busy: 10%, "
                   "scale_down_busy: 5%, samples: 2, sample_interval: 0.4s, cooldown: 1s}}\n"
                   + SITE, ["--cgroup-root", str(root), "--cgroup-name", "ctl"])
    try:
        c.wait_log("scalws-controller started: 1 instances ready")
        # The v2 path: the group's files as the kernel would have them.
        assert (root / "cgroup.subtree_control").read_text().split() == ["+cpu", "+cpuset",
                                                                        "+memory"]
        g = root / "ctl" / "instance-0"
        assert (g / "cpu.max").read_text().split() == ["50000", "100000"]
        assert (g / "memory.max").read_text().strip() == str(128 << 20)
        assert (g / "cpuset.cpus").read_text().strip() == "0"
        assert int((g / "cgroup.procs").read_text()) == c.masters()[0]

        load = Load(c.port, threads=4)
        c.wait_log("scaling up to 2 instances", timeout=20)
        c.wait_log("instance 1 ready")
        assert len(c.masters()) == 2
        time.sleep(0.5)
        ok, failed = load.stop()
        assert not failed and ok > 0, failed

        slow = Load(c.port, threads=1, pause=0.05)       # light load through the scale-down
        c.wait_log("scaling down to 1 instances", timeout=20)
        c.wait_log("instance 1 (pid", timeout=10)         # ... exited with code 0
        time.sleep(0.3)
        ok, failed = slow.stop()
        assert not failed and ok > 0, failed
        assert len(c.masters()) == 1
        assert re.search(r"instance 1 \(pid \d+\) exited with code 0", c.log()), c.log()
        assert c.stop() == 0, c.log()
    finally:
        c.stop()
    assert "Traceback" not in c.log()


def test_startup_failure_stops_the_controller(tmp_path):
    # an instance that refuses to start (`sandbox: required` on a kernel
    # that, as the test hook pretends, lacks Landlock) dies before it is
    # ready: the controller stops
    from scalws.control import sandbox
    c = Controller(tmp_path, "instances: {{min: 1, cpus_per_instance: 1, cpus: [0, 1]}}\n"
                   "sandbox: required\n" + SITE, ["--no-cgroups"],
                   env={sandbox.FAKE_ENV: "landlock"})
    assert c.proc.wait(20) == 3
    c.out.close()
    assert "before it was ready" in c.log()


def test_an_address_in_use_stops_the_controller_before_any_instance(tmp_path):
    # SO_REUSEPORT would let the instances share a port another server holds:
    # the controller tries each address alone first (control/exclusive.py)
    busy = free_port()
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", busy))
        s.listen()
        c = Controller(tmp_path, "instances: {{min: 1, cpus_per_instance: 1, cpus: [0, 1]}}\n"
                       + SITE.replace("{port}", str(busy)), ["--no-cgroups"])
        assert c.proc.wait(20) == 3
        c.out.close()
    assert f"listen '127.0.0.1:{busy}': cannot bind: address already in use" in c.log()
    assert "instance 0" not in c.log()


@pytest.mark.parametrize("body, expect", [
    ("instances: {min: 3, max: 2}\n", "t.yaml:1:26: instances.max: must be at least instances.min (3), got 2"),
    ("instances:\n  cpus_per_instance: 1\n  max: 3\n  cpus: [0, 1]\n",
     "t.yaml:4:9: instances.cpus: instances.max x cpus_per_instance = 3 CPUs, but 2 are given"),
    ("instances: {cpus: \"0-x\"}\n", "t.yaml:1:19: instances.cpus: expected a list of CPU ids"),
    ("instances: {scale_up_busy: 20%, scale_down_busy: 30%}\n",
     "instances.scale_down_busy: must be below instances.scale_up_busy"),
    ("instances: {cpu_quota: 3}\n", "t.yaml:1:24: instances.cpu_quota: expected a percentage"),
    ("instances: {mni: 1}\n", "t.yaml:1:13: instances.mni: unknown key 'mni'; did you mean 'min'?"),
    ("workers: 2\ninstances: {min: 1}\n", "t.yaml:1:1: workers: under 'instances'"),
])
def test_instances_config_errors(body, expect):
    text = body + "sites:\n  - listen: [\"127.0.0.1:8080\"]\n    routes: [{path: /, respond: {status: 200}}]\n"
    with pytest.raises(ConfigError) as e:
        load_config_text(text, source="t.yaml")
    assert expect in str(e.value), str(e.value)


def test_instances_refuse_unix_listens(tmp_path):
    text = ("instances: {min: 1, cpus: [0]}\nsites:\n  - listen: [\"unix:" + str(tmp_path) +
            "/s.sock\"]\n    routes: [{path: /, respond: {status: 200}}]\n")
    with pytest.raises(ConfigError) as e:
        load_config_text(text, source="t.yaml")
    assert "t.yaml:3:14: sites[0].listen[0]: a unix socket cannot be shared" in str(e.value)


def test_scalwsd_refuses_instances_and_defaults(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("instances: {min: 1, cpus: [0, 1]}\nsites:\n  - listen: [\"127.0.0.1:1\"]\n"
                   "    routes: [{path: /, respond: {status: 200}}]\n")
    r = subprocess.run([sys.executable, "-m", "scalws", "--config", str(cfg)], cwd=ROOT,
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 1 and f"{cfg}:1:12: instances:" in r.stderr \
        and "scalws-controller --config" in r.stderr, r.stderr
    ins = load_config_text(cfg.read_text()).instances
    assert (ins.min, ins.max, ins.scale_up_busy, ins.scale_down_busy, ins.samples) == \
        (1, 1, 0.75, 0.30, 3)


def test_listen_queue_and_p99(tmp_path):
    f = tmp_path / "tcp"
    f.write_text("  sl  local_address rem_address   st tx_queue rx_queue\n"
                 "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000007 00:00000000 0\n"
                 "   1: 0100007F:1F90 0100007F:C000 01 00000000:00000009 00:00000000 0\n"
                 "   2: 0100007F:1F91 00000000:0000 0A 00000000:00000003 00:00000000 0\n")
    assert listen_queue({8080}, files=(str(f),)) == 7
    prev = {"buckets": [(0.01, 10), (0.1, 10), (1.0, 10)], "count": 10}
    cur = {"buckets": [(0.01, 60), (0.1, 109), (1.0, 110)], "count": 110}
    assert p99(prev, cur) == 0.1
    assert p99(cur, cur) is None


def test_cgroup_detect(tmp_path):
    assert cgroups.detect(str(tmp_path)) is None
    for c in ("cpu", "cpuset", "memory"):
        (tmp_path / c).mkdir()
    assert cgroups.detect(str(tmp_path)).version == 1
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert cgroups.detect(str(tmp_path)).version == 2


def test_sample_uses_the_stats_counters(tmp_path):
    """With scalws.control.stats (the shared-memory counters), busy share and
    p99 come from its read(); hysteresis: `samples` hot samples, then one
    scale-up, then the cooldown."""
    from scalws.control.controller import Controller as Ctl
    text = ("instances: {min: 1, max: 2, cpus: [0, 1], samples: 2, scale_up_p99: 100ms, "
            "cooldown: 60s}\nlog: {error: \"" + str(tmp_path / "e.log") + "\"}\n"
            "sites:\n  - listen: [\"127.0.0.1:1\"]\n    routes: [{path: /, respond: {status: 200}}]\n")
    cfg = load_config_text(text)
    ctl = Ctl(cfg, str(tmp_path / "c.yaml"))
    seq = iter(range(100))

    class FakeStats:
        @staticmethod
        def read(path, cache=True):
            assert not cache  # a sample needs no cache zones (stats.read's cache=False)
            n = next(seq)
            # 10% busy, but requests slow: every new one in the 0.5 s bucket
            return {"busy_ns": n * 10**8, "idle_ns": n * 9 * 10**8,
                    "request_duration": {"buckets": [(0.01, 0), (0.5, 10 * n), (5.0, 10 * n)],
                                         "sum_seconds": 0.0, "count": 10 * n}}

    ctl.stats = FakeStats
    inst = ctl.instances[0]
    open(inst.stats_path, "w").close()
    inst.state, inst.pid = "ready", 1
    ups = []
    ctl.scale_up = lambda why: ups.append(why) or True
    for t in range(5):
        ctl.sample(float(t))
    assert len(ups) == 1 and "p99 0.5s >= 0.1s for 2 samples" in ups[0], ups
    inst.pid = 0
    ctl._cleanup()


def test_status_listener_is_the_controllers_summed_over_instances(tmp_path):
    """Issue 20 under the controller: the instances do not bind `status:`;
    the controller serves /metrics and /status summed over their counters."""
    import json
    sport = free_port()
    c = Controller(tmp_path, "instances: {{min: 2, max: 2, cpus_per_instance: 1, cpus: [0, 1]}}\n"
                   f"status: {{{{listen: \"127.0.0.1:{sport}\"}}}}\n" + SITE, ["--no-cgroups"])
    get = lambda path: raw(sport, f"GET {path} HTTP/1.1\r\nHost: s\r\n\r\n".encode())
    try:
        c.wait_log("scalws-controller started: 2 instances ready")
        assert c.log().count("status process started") == 1, c.log()
        n = 60
        for _ in range(n):
            assert statuses(raw(c.port, b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")) \
                == [200]
        deadline = time.monotonic() + 10
        while True:
            data = get("/metrics")
            assert statuses(data) == [200], data
            text = data.split(b"\r\n\r\n", 1)[1].decode()
            total = sum(int(float(m)) for m in re.findall(
                r"^scalws_requests_total(?:\{[^}]*\})? (\S+)$", text, re.M))
            if total == n or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert total == n, text
        data = get("/status")
        assert statuses(data) == [200], data
        st = json.loads(data.split(b"\r\n\r\n", 1)[1])
        assert sorted(i["labels"]["instance"] for i in st["instances"]) == ["0", "1"], st
        assert st["total"]["requests"] == n, st["total"]
        assert sum(i["stats"]["requests"] for i in st["instances"]) == n
        assert statuses(get("/nope")) == [404]
        assert c.stop() == 0, c.log()
    finally:
        c.stop()
    assert "Traceback" not in c.log()


def test_controller_status_has_each_instances_cache_zones(tmp_path):
    """The cache zones are each instance's own shared memory; the
    controller's status process reads their counters through the
    instances' masters (/proc/PID/fd of each zone's memfd, named in the
    counters file): /status gives them per instance and summed, /metrics
    summed."""
    import json
    from tests.e2e.upstreams.cacheorigin import Origin
    origin = Origin()
    sport = free_port()
    body = ("instances: {{min: 2, max: 2, cpus_per_instance: 1, cpus: [0, 1]}}\n"
            f"status: {{{{listen: \"127.0.0.1:{sport}\"}}}}\n"
            "cache_zones: {{z: {{max_size: 8m}}}}\n"
            "log: {{error: \"{log}\", level: info}}\n"
            "sites:\n  - listen: [\"127.0.0.1:{port}\"]\n    routes:\n"
            f"      - {{{{path: /, proxy: {{{{url: \"http://127.0.0.1:{origin.port}\", cache: z}}}}}}}}\n")
    c = Controller(tmp_path, body, ["--no-cgroups"])
    get = lambda path: raw(sport, f"GET {path} HTTP/1.1\r\nHost: s\r\n\r\n".encode())
    try:
        c.wait_log("scalws-controller started: 2 instances ready")
        n = 20
        for _ in range(n):  # a connection each: both instances get some
            assert statuses(raw(c.port, b"GET /a?cc=max-age%3D60 HTTP/1.1\r\nHost: t\r\n"
                                        b"Connection: close\r\n\r\n")) == [200]
        misses = len(origin.seen)   # one fill per instance that was asked
        assert 1 <= misses <= 2, origin.seen
        data = get("/status")
        assert statuses(data) == [200], data
        st = json.loads(data.split(b"\r\n\r\n", 1)[1])
        z = st["total"]["cache"]["z"]
        assert (z["misses"], z["hits"], z["stored"]) == (misses, n - misses, misses), z
        per = [i["stats"]["cache"]["z"] for i in st["instances"]]  # both formatted at start
        assert sum(p["hits"] + p["misses"] for p in per) == n, per
        assert z["entries"] == misses and z["mem_size"] == sum(p["mem_size"] for p in per), z
        assert all(7 << 20 < p["mem_size"] <= 8 << 20 for p in per), per
        text = get("/metrics").split(b"\r\n\r\n", 1)[1].decode()
        assert f'scalws_cache_events_total{{zone="z",event="hits"}} {n - misses}' in text, text
        assert f'scalws_cache_entries{{zone="z"}} {misses}' in text, text
        assert c.stop() == 0, c.log()
    finally:
        c.stop()
        origin.stop()
    assert "Traceback" not in c.log()
