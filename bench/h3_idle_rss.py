"""RSS of idle HTTP/3 connections against idle HTTP/2 ones, in one ScalWS
worker (issue 33: "RSS for 1,000 idle h3 connections against 1,000 idle h2
ones").

Starts scalwsd (1 worker, a site with `tls` and `quic` on one port, a
`respond` route), opens N connections of one kind, each with one request
answered so that it is idle and fully set up, then reads the worker's
VmRSS; a fresh server for the other kind. h2: Python's ssl and the h2
library (ALPN h2); h3: bench/h3load.c with --hold. Usage:
    .venv/bin/python bench/h3_idle_rss.py [N]          (default 1000)
"""
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import h2.config
import h2.connection
import h2.events

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H3LOAD = os.environ.get("H3LOAD", os.path.join(ROOT, "build", "bench", "h3load"))
PORT = 18451


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def worker_of(master):
    for _ in range(200):
        with open(f"/proc/{master}/task/{master}/children") as f:
            for pid in f.read().split():
                with open(f"/proc/{pid}/cmdline", "rb") as c:
                    if b"scalwsd: worker 0" in c.read():
                        return int(pid)
        time.sleep(0.05)
    raise RuntimeError("no worker")


def start(tmp):
    cfg = os.path.join(tmp, "site.yaml")
    with open(cfg, "w") as f:
        f.write(f"""workers: 1
http3: {{retry_above: off, max_connections: {N + 100}}}
limits: {{keepalive_timeout: 300s}}
sites:
  - listen: ["127.0.0.1:{PORT} tls", "127.0.0.1:{PORT} quic"]
    server_names: [localhost]
    tls: {{cert: {tmp}/cert.pem, key: {tmp}/key.pem}}
    routes:
      - {{path: /, respond: {{status: 200, body: "idle\\n"}}}}
""")
    log = open(os.path.join(tmp, "error.log"), "ab")
    p = subprocess.Popen([os.path.join(ROOT, ".venv", "bin", "scalwsd"), "--config", cfg],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        with open(os.path.join(tmp, "error.log")) as f:
            if "scalws started" in f.read():
                break
        time.sleep(0.05)
    return p


def h2_idle(n):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    socks = []
    for _ in range(n):
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", PORT)), server_hostname="localhost")
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        c.send_headers(1, [(":method", "GET"), (":scheme", "https"),
                           (":authority", "localhost"), (":path", "/")], end_stream=True)
        s.sendall(c.data_to_send())
        done = False
        while not done:
            for ev in c.receive_data(s.recv(65536)):
                done |= isinstance(ev, h2.events.StreamEnded)
            s.sendall(c.data_to_send())
        socks.append((s, c))
    return socks


def main():
    tmp = tempfile.mkdtemp(prefix="h3idle-")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{tmp}/key.pem",
                    "-out", f"{tmp}/cert.pem", "-days", "2", "-subj", "/CN=localhost"],
                   check=True, capture_output=True)
    os.chmod(tmp, 0o755)
    os.chmod(f"{tmp}/key.pem", 0o644)
    out = {}
    for kind in ("h2", "h3"):
        p = start(tmp)
        w = worker_of(p.pid)
        time.sleep(0.5)
        before = rss_kib(w)
        if kind == "h2":
            held = h2_idle(N)
            time.sleep(0.5)
            after = rss_kib(w)
            for s, _ in held:
                s.close()
        else:
            load = subprocess.Popen([H3LOAD, "-c", str(N), "-m", "1", "-n", str(N),
                                     "--hold", "30", "--sni", "localhost",
                                     f"https://127.0.0.1:{PORT}/"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            line = load.stderr.readline()
            if not line.startswith("holding"):
                raise RuntimeError(f"h3load: {line}")
            time.sleep(0.5)
            after = rss_kib(w)
            load.kill()
            load.wait()
        p.terminate()
        p.wait(30)
        out[kind] = (before, after, line.split()[1] if kind == "h3" else N)
    print(f"# {N} idle connections, one request answered on each; one worker's VmRSS (KiB)")
    print("| protocol | connections | before | after | per connection (KiB) |")
    print("|---|---|---|---|---|")
    for kind, (b, a, n) in out.items():
        print(f"| {kind} | {n} | {b} | {a} | {(a - b) / int(n):.1f} |")


if __name__ == "__main__":
    main()
