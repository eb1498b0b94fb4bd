#!/usr/bin/env python3
"""Interleaved comparison of `respond`: every server up at once, short slices.

    .venv/bin/python bench/interleave.py --rounds 30 --slice 2 \\
        scalws nginx scalws-nopoll:scalws:busy_poll=0
    .venv/bin/python bench/interleave.py --conns 1,4,16,64,256 --rounds 2 --slice 4 \\
        scalws nginx scalws-nopoll:scalws:busy_poll=0
    .venv/bin/python bench/interleave.py --alternate 100 --perf --rounds 3 --slice 6 \\
        scalws nginx scalws-nopoll:scalws:busy_poll=0

bench/multi.sh restarts each server for each measurement and runs them one
after the other, 10 s apiece; on a VM whose speed drifts by tens of percent
within minutes, two runs of the same server can differ more than ScalWS and
nginx do. Here all servers run side by side on CPU_SERVER (each with one
worker, idle while the others are measured), and wrk on CPU_LOAD visits
them in turn for SLICE seconds, ROUNDS times, the order rotated each round.
Neighbouring slices see the same box, so each round gives one ratio per
server against the first; the report is the median of those ratios, how
many rounds the server won, the CPU per request of each, how often per
request its worker blocked (voluntary context switches: each one is a
wake-up that whoever sent the next request paid for), and how much of the
two CPUs' time the hypervisor gave to something else ("steal"; a result
taken with more than a few percent of it says more about the host than
about the servers).

--conns runs the whole comparison at each concurrency in turn.

--tls serves and loads over HTTPS/1.1 (tls-respond): one self-signed ECDSA
P-256 certificate, nginx with bench/configs/nginx.conf.tmpl's TLS settings,
scalwsd with its defaults. --quota PCT puts each server in its own cgroup
v1 cpu group capped at PCT % of a CPU (10 ms periods, as bench/instances.sh
does), so that the server, not wrk, sets the rate: its rps is then
PCT % over its CPU per request.

--alternate MS starts one wrk per server instead, all on CPU_LOAD, and lets
only one run at a time (SIGSTOP/SIGCONT, MS milliseconds each, order
rotated), for SLICE seconds per server per round: drift slower than a few
hundred milliseconds cancels. With --perf it also samples CPU_LOAD
(`perf record -e cpu-clock`) and reports what each server costs the load
generator's core per request, in total and by the kernel or wrk function
that differs most from the first server's.

SPEC is NAME[:KIND][:KEY=VALUE,...]: KIND is scalws or nginx (default: NAME);
for scalws, KEY=VALUE pairs set top-level config keys (busy_poll=0),
ENV_X=V puts X=V into scalwsd's environment, and BIN=PATH runs that
scalwsd (another build: a before/after of one change).

Env: CONNS (64), CPU_SERVER (0), CPU_LOAD (1), WRK (wrk), NGINX (nginx),
SCALWSD (<repo>/.venv/bin/scalwsd).
"""
import argparse
import collections
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench" / "lib"))
import benchlib  # noqa: E402  (bench/lib/benchlib.py: /proc readers shared with the harness)

TICK = os.sysconf("SC_CLK_TCK")
BODY = "hello world"

SCALWS_YAML = """\
workers: 1
log:
  access: off
limits:
  keepalive_requests: 1000000   # as nginx's below and the harness's (gen_scalws.py)
{extra}sites:
  - listen: 127.0.0.1:{port}{tls}
    routes:
      - path: = /respond
        respond:
          status: 200
          body: "{body}"
          content_type: text/plain
"""

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; multi_accept off; }}
http {{
    access_log off;
    server_tokens off;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    {tls_conf}
    server {{
        listen 127.0.0.1:{port}{ssl} reuseport;
        location = /respond {{ default_type text/plain; return 200 "{body}"; }}
    }}
}}
"""


def nginx_tls(cert, key):
    """The ssl_* lines of bench/configs/nginx.conf.tmpl (ScalWS's TLS
    defaults, bench/README.md), so that both tools measure one nginx."""
    tmpl = (REPO / "bench" / "configs" / "nginx.conf.tmpl").read_text()
    lines = [ln.strip() for ln in tmpl.splitlines() if ln.strip().startswith("ssl_")]
    if not any(ln.startswith("ssl_certificate ") for ln in lines):
        sys.exit("bench/configs/nginx.conf.tmpl has no ssl_certificate line")
    return "\n    ".join(lines).replace("@CERT@", cert).replace("@KEY@", key)


CG_ROOT = "/sys/fs/cgroup/cpu"
CFS_PERIOD_US = 10000


def make_cert(tmp):
    """A self-signed ECDSA P-256 certificate for 127.0.0.1 (common.sh's make_cert)."""
    cert, key = f"{tmp}/cert.pem", f"{tmp}/key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key,
                    "-out", cert], check=True, capture_output=True)
    return cert, key


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_ticks(root):
    """utime + stime (with reaped children) of root and every descendant, in ticks."""
    return benchlib.snapshot([root])["ticks"]


def wait_ready(port, proc, tls, timeout=10.0):
    end = time.monotonic() + timeout
    req = b"GET /respond HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    ctx = None
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"server on :{port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as raw, \
                    (ctx.wrap_socket(raw) if ctx else raw) as s:
                s.sendall(req)
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"server on :{port} not ready after {timeout} s")


class Server:
    def __init__(self, spec, tmp, cpu, tls=None, quota=None):
        parts = spec.split(":")
        self.name = parts[0]
        self.kind = parts[1] if len(parts) > 1 and "=" not in parts[1] else self.name
        opts = [kv for p in parts[1:] if "=" in p for kv in p.split(",")]
        if self.kind not in ("scalws", "nginx"):
            sys.exit(f"{spec}: KIND must be scalws or nginx")
        self.port = free_port()
        self.tls = tls
        self.cgroup = None
        d = Path(tmp) / self.name
        (d / "tmp").mkdir(parents=True)
        env = dict(os.environ)
        pin = ["taskset", "-c", str(cpu)]
        if self.kind == "scalws":
            kv = [o.split("=", 1) for o in opts]
            extra = "".join(f"{k}: {v}\n" for k, v in kv if not k.startswith("ENV_") and k != "BIN")
            env.update({k[4:]: v for k, v in kv if k.startswith("ENV_")})
            cfg = d / "scalws.yaml"
            yaml = SCALWS_YAML.format(port=self.port, body=BODY, extra=extra,
                                      tls=" tls" if tls else "")
            if tls:
                yaml += f"    tls: {{cert: {tls[0]}, key: {tls[1]}}}\n"
            cfg.write_text(yaml)
            scalwsd = dict(kv).get("BIN") or os.environ.get("SCALWSD", str(REPO / ".venv/bin/scalwsd"))
            cmd = pin + [scalwsd, "--config", str(cfg)]
        else:
            if opts:
                sys.exit(f"{spec}: options are for scalws")
            cfg = d / "nginx.conf"
            cfg.write_text(NGINX_CONF.format(
                port=self.port, body=BODY, dir=d, ssl=" ssl" if tls else "",
                tls_conf=nginx_tls(*tls) if tls else ""))
            cmd = pin + [os.environ.get("NGINX", "nginx"), "-c", str(cfg), "-p", str(d)]
        if quota:
            # its own group, entered before exec: the master and its worker
            self.cgroup = Path(CG_ROOT) / f"sws-interleave-{os.getpid()}-{self.name}"
            self.cgroup.mkdir()
            (self.cgroup / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (self.cgroup / "cpu.cfs_quota_us").write_text(str(quota * CFS_PERIOD_US // 100))
            cmd = ["bash", "-c", 'echo $$ >"$0/cgroup.procs" && exec "$@"', str(self.cgroup)] + cmd
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                     stderr=open(d / "stderr.log", "w"))
        try:
            wait_ready(self.port, self.proc, tls)
        except BaseException:
            self.stop()
            raise
        self.rps, self.cpu_us, self.sleeps, self.load_us, self.steal = [], [], [], [], []
        self.cpus = (cpu, int(os.environ.get("CPU_LOAD", "1")))
        self.symbols = collections.Counter()  # --perf: load-core samples by function

    def worker(self):
        """The process that answers: scalwsd's (or nginx's) one worker."""
        kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return int(kids[-1]) if kids else self.proc.pid

    def clear(self):
        for v in (self.rps, self.cpu_us, self.sleeps, self.load_us, self.steal):
            v.clear()
        self.symbols.clear()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.cgroup:
            for _ in range(50):  # the worker may outlive the master by a moment
                try:
                    self.cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def blocked(pid):
    """Voluntary context switches of pid so far: how often it went to sleep."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def stolen(cpus):
    """Steal ticks of these CPUs so far: time the hypervisor ran something
    else on them."""
    return benchlib.steal_jiffies(set(cpus))[0]


def wrk_cmd(server, secs, conns, cpu):
    return ["taskset", "-c", str(cpu), os.environ.get("WRK", "wrk"), "-t1", f"-c{conns}",
            f"-d{secs}s", f"{'https' if server.tls else 'http'}://127.0.0.1:{server.port}/respond"]


def check_wrk(server, out):
    m = re.search(r"(\d+) requests in", out)
    if re.search(r"Non-2xx|Socket errors", out) or not m or int(m.group(1)) == 0:
        sys.exit(f"{server.name}: wrk reported errors or no answers:\n{out}")
    return int(m.group(1))


def wrk_slice(server, secs, conns, cpu):
    w = server.worker()
    t0, b0, s0 = tree_ticks(server.proc.pid), blocked(w), stolen(server.cpus)
    out = subprocess.run(wrk_cmd(server, secs, conns, cpu), capture_output=True, text=True,
                         check=True).stdout
    t1, b1, s1 = tree_ticks(server.proc.pid), blocked(w), stolen(server.cpus)
    server.steal.append((s1 - s0) / TICK / secs / len(server.cpus) * 100)
    check_wrk(server, out)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    server.rps.append(rps)
    server.cpu_us.append((t1 - t0) / TICK * 1e6 / (rps * secs))
    server.sleeps.append((b1 - b0) / (rps * secs))


def perf_samples(data, tids):
    """{tid: Counter(function -> samples)} from a `perf record -g` file, by
    the function each sample landed in."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "tid,ip,sym"],
                         capture_output=True, text=True, check=True).stdout
    per = {t: collections.Counter() for t in tids}
    cur, first = None, False
    for line in out.splitlines():
        if not line.strip():
            cur = None
        elif not line.startswith("\t"):  # a sample's tid (perf may pad it); its frames follow, tabbed
            cur, first = per.get(int(line.split()[0])), True
        elif cur is not None and first:
            parts = line.split(None, 1)
            cur[parts[1].split("+")[0] if len(parts) > 1 else "?"] += 1
            first = False
    return per


def wrk_thread(p):
    """The tid of wrk's one load thread, once it exists (wrk -t1)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        tids = [int(t) for t in os.listdir(f"/proc/{p.pid}/task") if int(t) != p.pid]
        if tids:
            return tids[0]
        time.sleep(0.001)
    sys.exit("wrk did not start its thread")


def alternate_round(servers, secs, conns, cpu, period, perf, tmp):
    """One wrk per server, only one running at a time, `period` seconds each,
    until each has run about `secs` seconds."""
    n = len(servers)
    wrks, rec = [], None
    try:
        tids, ran = {}, [0.0] * n
        for s in servers:
            wrks.append(subprocess.Popen(wrk_cmd(s, int(secs * n + 30), conns, cpu),
                                         stdout=subprocess.PIPE, text=True))
            tids[s.name] = wrk_thread(wrks[-1])
            os.kill(wrks[-1].pid, signal.SIGSTOP)  # before it has done much: it connects on its turn
        w = [s.worker() for s in servers]
        if perf:
            rec = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-C",
                                    str(cpu), "-g", "-o", f"{tmp}/perf.data"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(0.3)
        st0 = stolen(servers[0].cpus)
        t0 = [tree_ticks(s.proc.pid) for s in servers]
        b0 = [blocked(x) for x in w]
        k, start = 0, time.monotonic()
        while time.monotonic() < start + secs * n:
            for i in ((k + j) % n for j in range(n)):
                os.kill(wrks[i].pid, signal.SIGCONT)
                c0 = time.monotonic()
                time.sleep(period)
                os.kill(wrks[i].pid, signal.SIGSTOP)
                ran[i] += time.monotonic() - c0
            k += 1
        elapsed = time.monotonic() - start
        t1 = [tree_ticks(s.proc.pid) for s in servers]
        b1 = [blocked(x) for x in w]
        steal = (stolen(servers[0].cpus) - st0) / TICK / elapsed / len(servers[0].cpus) * 100
        if rec:
            rec.send_signal(signal.SIGINT)
            if rec.wait() not in (0, -signal.SIGINT, 128 + signal.SIGINT):  # stopped by our SIGINT
                sys.exit(f"perf record failed ({rec.returncode}): {rec.stderr.read()}")
        for p in wrks:
            os.kill(p.pid, signal.SIGINT)  # wrk prints its totals on SIGINT
            os.kill(p.pid, signal.SIGCONT)
        counts = [check_wrk(s, p.communicate()[0]) for s, p in zip(servers, wrks)]
    finally:
        for p in wrks + ([rec] if rec else []):
            if p.poll() is None:
                p.kill()  # a stopped process dies of SIGKILL too
                p.wait()
    per = perf_samples(f"{tmp}/perf.data", tids.values()) if perf else {}
    for i, s in enumerate(servers):
        s.rps.append(counts[i] / ran[i])  # per second of its own turns
        s.cpu_us.append((t1[i] - t0[i]) / TICK * 1e6 / counts[i])
        s.sleeps.append((b1[i] - b0[i]) / counts[i])
        s.steal.append(steal)
        if perf:
            c = per[tids[s.name]]
            if not c:
                sys.exit(f"perf recorded no sample of {s.name}'s wrk (thread {tids[s.name]})")
            s.load_us.append(sum(c.values()) / 4000 * 1e6 / counts[i])
            s.symbols.update({f: v * 1e9 / 4000 / counts[i] for f, v in c.items()})  # ns/req


def report(servers, rounds, conns, how):
    base = servers[0]
    print(f"{how}, wrk -t1 -c{conns}; ratios against {base.name}, round by round")
    load = any(s.load_us for s in servers)
    print(f"{'server':<16} {'rps median':>11} {'ratio':>6} {'won':>7} {'CPU us/req':>10} {'ratio':>6}"
          f" {'sleeps/req':>10} {'steal %':>7}" + (f" {'load us/req':>11}" if load else ""))
    for s in servers:
        ratios = [x / y for x, y in zip(s.rps, base.rps)]
        cratios = [x / y for x, y in zip(s.cpu_us, base.cpu_us)]
        won = sum(x > y for x, y in zip(s.rps, base.rps))
        print(f"{s.name:<16} {statistics.median(s.rps):>11.0f} {statistics.median(ratios):>6.3f} "
              f"{won:>3}/{rounds:<3} {statistics.median(s.cpu_us):>10.2f} "
              f"{statistics.median(cratios):>6.3f} {statistics.median(s.sleeps):>10.4f}"
              f" {statistics.median(s.steal):>7.1f}"
              + (f" {statistics.median(s.load_us):>11.2f}" if load else ""))
    if load:
        names = set().union(*(s.symbols for s in servers))
        diff = sorted(names, key=lambda f: -max(abs(s.symbols[f] - base.symbols[f]) for s in servers))
        print(f"\nload core, ns per request (mean of {rounds} rounds), largest differences:")
        print(f"{'function':<34}" + "".join(f" {s.name[:11]:>11}" for s in servers))
        for f in diff[:12]:
            print(f"{f[:34]:<34}" + "".join(f" {s.symbols[f] / rounds:>11.0f}" for s in servers))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--slice", type=int, default=2, help="seconds per server per round")
    ap.add_argument("--conns", default=os.environ.get("CONNS", "64"),
                    help="concurrency, or a comma-separated list run in turn")
    ap.add_argument("--alternate", type=float, metavar="MS",
                    help="one wrk per server, taking turns every MS milliseconds")
    ap.add_argument("--perf", action="store_true", help="with --alternate: the load core's cost")
    ap.add_argument("--tls", action="store_true", help="HTTPS/1.1 (tls-respond)")
    ap.add_argument("--quota", type=int, metavar="PCT", help="cap each server at PCT %% of a CPU")
    ap.add_argument("specs", nargs="+", metavar="SPEC")
    a = ap.parse_args()
    if len(a.specs) < 2:
        sys.exit("name at least two servers")
    if a.perf and not a.alternate:
        sys.exit("--perf needs --alternate")
    cpu_srv = int(os.environ.get("CPU_SERVER", "0"))
    cpu_load = int(os.environ.get("CPU_LOAD", "1"))
    for tool in ("taskset", os.environ.get("WRK", "wrk")) + (("perf",) if a.perf else ()):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found")
    if a.quota is not None and not (0 < a.quota <= 100 and os.access(CG_ROOT, os.W_OK)):
        sys.exit(f"--quota needs 1..100 and a writable cgroup v1 cpu controller at {CG_ROOT}")
    secs = a.slice
    with tempfile.TemporaryDirectory(prefix="sws-interleave-") as tmp:
        os.chmod(tmp, 0o755)
        tls = make_cert(tmp) if a.tls else None
        servers = []
        try:
            for spec in a.specs:
                servers.append(Server(spec, tmp, cpu_srv, tls, a.quota))
            for conns in (int(c) for c in a.conns.split(",")):
                for s in servers:  # warm up: accept the connections, fill caches
                    wrk_slice(s, 1, conns, cpu_load)
                    s.clear()
                n = len(servers)
                for r in range(a.rounds):
                    if a.alternate:
                        alternate_round(servers[r % n:] + servers[:r % n], secs, conns, cpu_load,
                                        a.alternate / 1000, a.perf, tmp)
                    else:
                        for i in range(n):
                            wrk_slice(servers[(r + i) % n], secs, conns, cpu_load)
                how = (f"alternate: {a.rounds} rounds, {secs} s each in {a.alternate:g} ms turns"
                       if a.alternate else f"interleave: {a.rounds} rounds x {secs} s")
                how += (", HTTPS" if a.tls else "") + (f", each server capped at {a.quota} % of a CPU"
                                                       if a.quota else "")
                report(servers, a.rounds, conns, f"{how}, servers on CPU {cpu_srv}, "
                       f"wrk on CPU {cpu_load}")
                print()
        finally:
            for s in servers:
                s.stop()


if __name__ == "__main__":
    main()
