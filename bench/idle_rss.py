"""RSS cost of idle keep-alive connections in one worker, beside nginx.

Opens N connections (default 10,000) to each server, sends one request on
each and reads the answer so every connection is an idle keep-alive one,
then reads the worker's VmRSS before and after (before: after 20 connections
of one request each, closed, so that one-off costs are not counted). With --tls every
connection first makes a TLS handshake (TLS 1.3, an ECDSA P-256
certificate made for the run; both servers release idle buffers), so the
figure is the cost of an idle TLS connection. Usage:
    .venv/bin/python bench/idle_rss.py [N] [--tls]
"""
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
N = int(ARGS[0]) if ARGS else 10_000
TLS = "--tls" in sys.argv
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQ = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not ready")


def listener_pid(port):
    """The worker holding the listening socket (a TLS master also has its
    TLS keeper as a child)."""
    out = subprocess.run(["ss", "-tlnpH", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    # The master holds the listening socket too (both servers): the worker
    # is the holder whose parent is another holder.
    pids = {int(p) for p in re.findall(r"pid=(\d+)", out)}
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            if int(f.read().rsplit(")", 1)[1].split()[1]) in pids:
                return pid
    return pids.pop()


CLIENT = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
CLIENT.check_hostname = False
CLIENT.verify_mode = ssl.CERT_NONE


def warm(port, n=20):
    """A few connections, one request each, closed: what a worker's first
    answers fault in or allocate once (the code it serves with, since
    ScalWS's workers drop their start-up's pages: ADR 0037) is no
    connection's cost."""
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        if TLS:
            s = CLIENT.wrap_socket(s, server_hostname="localhost")
        s.sendall(REQ)
        s.recv(4096)
        s.close()
    time.sleep(2.0)  # past ScalWS's idle heap trim (a second without connections)


def measure(port, worker_pid):
    warm(port)
    before = rss_kib(worker_pid)
    socks = []
    for i in range(N):
        s = socket.create_connection(("127.0.0.1", port))
        if TLS:
            s = CLIENT.wrap_socket(s, server_hostname="localhost")
        s.sendall(REQ)
        socks.append(s)
        if len(socks) % 500 == 0:
            for t in socks[-500:]:
                t.recv(4096)  # the answer (small, one segment)
    for t in socks[len(socks) // 500 * 500:]:
        t.recv(4096)
    time.sleep(0.5)  # let the worker settle after the last answers
    after = rss_kib(worker_pid)
    for s in socks:
        s.close()
    return before, after


def main():
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    tmp = tempfile.mkdtemp()
    cert, key = os.path.join(tmp, "c.pem"), os.path.join(tmp, "c.key")
    if TLS:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost", "-days", "2",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
    cfg = os.path.join(tmp, "s.yaml")
    with open(cfg, "w") as f:
        f.write("workers: 1\nlimits: {max_connections: 15000, keepalive_timeout: 300s}\n"
                f"sites:\n  - listen: \"127.0.0.1:18471{' tls' if TLS else ''}\"\n"
                + (f"    tls: {{cert: {cert}, key: {key}, ocsp_stapling: off}}\n" if TLS else "")
                + "    routes: [{path: /, respond: {status: 200, body: hello world}}]\n")
    ngx = os.path.join(tmp, "n.conf")
    ssl_conf = (f" ssl; ssl_certificate {cert}; ssl_certificate_key {key};"
                " ssl_protocols TLSv1.2 TLSv1.3;" if TLS else ";")
    with open(ngx, "w") as f:
        f.write(f"worker_processes 1; daemon off; error_log {tmp}/e.log; pid {tmp}/n.pid;\n"
                "worker_rlimit_nofile 20000; events { worker_connections 15000; }\n"
                "http { access_log off; keepalive_timeout 300s; server { listen 127.0.0.1:18472"
                + ssl_conf + " location / { return 200 'hello world'; } } }\n")
    procs = [subprocess.Popen([sys.executable, "-m", "scalws", "--config", cfg], cwd=ROOT,
                              stderr=subprocess.DEVNULL),
             subprocess.Popen(["nginx", "-c", ngx], stderr=subprocess.DEVNULL)]
    try:
        wait_port(18471)
        wait_port(18472)
        for name, port, proc in (("scalws", 18471, procs[0]), ("nginx", 18472, procs[1])):
            worker = listener_pid(port)
            before, after = measure(port, worker)
            print(f"{name:7s} worker RSS {before} KiB -> {after} KiB with {N} idle keep-alive "
                  f"{'TLS ' if TLS else ''}connections: {(after - before) * 1024 / N:.0f} bytes each")
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
