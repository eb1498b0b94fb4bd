"""Memory footprint of a server's processes, idle and after load, beside
nginx and H2O (issue 37, point 1).

    [SCALWSD=...] .venv/bin/python bench/footprint.py [--workers 1,4] [--servers scalws,nginx,h2o]
                                        [--load-seconds 3] [--tls] [--out FILE.md]

Each server is started with W workers and the same site (one fixed answer,
`GET /` -> "hello world"; ScalWS also with a 64m cache zone, reported apart),
pinned to CPU 0; with --tls over TLS (a self-signed P-256 certificate made
for the run; ScalWS's TLS keeper is then in the tree). Measured from /proc/PID/smaps_rollup and smaps of every
process of its tree (the master and its descendants):
  idle    2 s after it answers
  loaded  after LOAD s of `wrk -t1 -c64` on CPU 1, once the connections closed
per process: PSS, private (clean + dirty), shared; in all: the tree's PSS
less what ScalWS's cache zones (memfd mappings) account for, and that apart.
PSS splits each shared page among the processes mapping it, so the sum over
a tree is its real cost; private is what one more worker adds.

With scalws among the servers, the floor of a Python worker is measured too:
one process of the same interpreter with nothing imported, and one that has
imported what a worker runs (the engine, control/worker.py and its loop;
until ADR 0035 also uvloop, and with it asyncio and ssl) and nothing else
(no configuration, no loop): no tree of Python processes can weigh less
than the second.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = 18390
SCALWSD = os.environ.get("SCALWSD", os.path.join(ROOT, ".venv", "bin", "scalwsd"))

SCALWS_CONF = """
workers: {w}
sandbox: on
cache_zones: {{fp: {{max_size: 64m}}}}
sites:
  - listen: "127.0.0.1:{port}{tls}"{tlsconf}
    routes:
      - {{path: /, respond: {{body: "hello world"}}}}
"""
NGINX_CONF = """
worker_processes {w};
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  server {{ listen 127.0.0.1:{port}{ssl}; {sslconf}location / {{ return 200 "hello world"; }} }}
}}
"""
H2O_CONF = """
num-threads: {w}
pid-file: {d}/h2o.pid
error-log: {d}/error.log
listen: {{host: 127.0.0.1, port: {port}{ssl}}}
hosts:
  default:
    paths:
      /:
        file.dir: {d}/www
"""


def tree(pid):
    """pid and its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            pass
    return out


def mem(pid):
    """(pss, private, shared, zone pss) in KiB; zone: memfd mappings."""
    r = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            k, _, v = line.partition(":")
            if v.strip().endswith("kB"):
                r[k] = int(v.split()[0])
    zone, cur = 0, ""
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                cur = line
            elif line.startswith("Pss:") and "/memfd:" in cur:
                zone += int(line.split()[1])
    return (r["Pss"], r["Private_Clean"] + r["Private_Dirty"],
            r["Shared_Clean"] + r["Shared_Dirty"], zone)


def name(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        line = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    return line[:48]


def answers(port, tls):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            if tls:
                ctx = ssl.create_default_context()
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
                s = ctx.wrap_socket(s)
            s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def start(server, w, d, tls):
    os.makedirs(f"{d}/www", exist_ok=True)
    with open(f"{d}/www/index.html", "w") as f:
        f.write("hello world")
    cert, key = f"{d}/cert.pem", f"{d}/key.pem"
    if tls:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                        "-keyout", key, "-out", cert], capture_output=True, check=True)
    if server == "scalws":
        conf = f"{d}/scalws.yaml"
        open(conf, "w").write(SCALWS_CONF.format(
            w=w, port=PORT, tls=" tls" if tls else "",
            tlsconf=f'\n    tls: {{cert: "{cert}", key: "{key}"}}' if tls else ""))
        cmd = [SCALWSD, "--config", conf]
    elif server == "nginx":
        conf = f"{d}/nginx.conf"
        open(conf, "w").write(NGINX_CONF.format(
            w=w, d=d, port=PORT, ssl=" ssl" if tls else "",
            sslconf=f"ssl_certificate {cert}; ssl_certificate_key {key}; " if tls else ""))
        cmd = ["nginx", "-p", d, "-e", f"{d}/error.log", "-c", conf, "-g", "daemon off;"]
    else:
        conf = f"{d}/h2o.conf"
        open(conf, "w").write(H2O_CONF.format(
            w=w, d=d, port=PORT,
            ssl=f", ssl: {{certificate-file: {cert}, key-file: {key}}}" if tls else ""))
        cmd = ["h2o", "-m", "master", "-c", conf]
    p = subprocess.Popen(["taskset", "-c", "0", *cmd], stdout=open(f"{d}/out.log", "wb"),
                         stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while not answers(PORT, tls):
        if p.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{server} did not start: {open(f'{d}/out.log').read()[-2000:]}")
        time.sleep(0.05)
    return p


def sample(p):
    rows = []
    for pid in tree(p.pid):
        try:
            rows.append((pid, name(pid), *mem(pid)))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return rows


FLOOR = {
    "bare interpreter": "pass",
    "the engine + the worker's modules imported": "import scalws.server.engine, "
                                                  "scalws.control.worker",
}


def floor(out):
    """PSS of a lone process of scalwsd's interpreter, per FLOOR entry."""
    python = os.path.join(os.path.dirname(os.path.realpath(SCALWSD)), "python")
    if not os.access(python, os.X_OK):  # a packaged scalwsd (/usr/sbin): its shebang's
        with open(SCALWSD, "rb") as f:
            python = f.readline()[2:].split()[0].decode()
    rows = []
    for what, code in FLOOR.items():
        p = subprocess.Popen([python, "-c", f"{code}\nimport sys, time\n"
                              "print('ready', flush=True)\ntime.sleep(60)"],
                             stdout=subprocess.PIPE)
        try:
            p.stdout.readline()
            time.sleep(1)
            pss, priv, _, _ = mem(p.pid)
            rows.append((what, pss, priv))
        finally:
            p.kill()
            p.wait()
    out.append("\n### floor: one Python process of scalwsd's interpreter\n\n"
               "| process | PSS KiB | private KiB |\n|---|---:|---:|")
    out += [f"| {what} | {pss} | {priv} |" for what, pss, priv in rows]
    return rows


def report(server, w, phase, rows, out):
    pss = sum(r[2] for r in rows)
    zone = sum(r[5] for r in rows)
    out.append(f"\n### {server}, {w} worker(s), {phase}: {(pss - zone) / 1024:.1f} MiB PSS"
               + (f" (+ {zone / 1024:.1f} MiB of cache zone pages touched)" if zone else "")
               + "\n\n| process | PSS KiB | private KiB | shared KiB |\n|---|---:|---:|---:|")
    for pid, nm, p, priv, sh, z in rows:
        out.append(f"| {nm} | {p - z} | {priv} | {sh} |")
    return (pss - zone) / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="1,4")
    ap.add_argument("--servers", default="scalws,nginx,h2o")
    ap.add_argument("--load-seconds", type=int, default=3)
    ap.add_argument("--tls", action="store_true", help="serve over TLS (HTTP/1.1)")
    ap.add_argument("--out")
    a = ap.parse_args()
    servers = [s for s in a.servers.split(",") if s == "scalws" or shutil.which(s)]
    out, summary = [], []
    for w in [int(x) for x in a.workers.split(",")]:
        for server in servers:
            d = tempfile.mkdtemp(prefix="scalws-footprint.")
            os.chmod(d, 0o755)
            p = start(server, w, d, a.tls)
            try:
                time.sleep(2)
                idle = report(server, w, "idle", sample(p), out)
                if shutil.which("wrk") and a.load_seconds:
                    subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c64",
                                    f"-d{a.load_seconds}s",
                                    f"{'https' if a.tls else 'http'}://127.0.0.1:{PORT}/"],
                                   capture_output=True, check=True)
                    time.sleep(1)
                loaded = report(server, w, "after load", sample(p), out)
                summary.append((server, w, idle, loaded))
            finally:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                shutil.rmtree(d, ignore_errors=True)
    floors = floor(out) if "scalws" in servers else []
    head = ["| server | workers | PSS idle (MiB) | PSS after load (MiB) | idle / nginx's |",
            "|---|---:|---:|---:|---:|"]
    ngx = {w: i for s, w, i, _ in summary if s == "nginx"}
    for s, w, i, l in summary:
        ratio = f"{i / ngx[w]:.1f}" if w in ngx else "-"
        head.append(f"| {s} | {w} | {i:.1f} | {l:.1f} | {ratio} |")
    for what, pss, _ in floors:
        ratio = f"{pss / 1024 / ngx[1]:.1f}" if 1 in ngx else "-"
        head.append(f"| python, {what} | - | {pss / 1024:.1f} | - | {ratio} (of 1 worker's) |")
    title = "# Footprint" + (" (TLS)" if a.tls else "")
    text = "\n".join([title, "", *head, *out]) + "\n"
    if a.out:
        open(a.out, "w").write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
