"""RSS cost of idle keep-alive connections in one worker, beside nginx.

Opens N connections (default 10,000) to each server, sends one request on
each and reads the answer so every connection is an idle keep-alive one,
then reads the worker's VmRSS before and after. Usage:
    .venv/bin/python bench/idle_rss.py [N]
"""
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQ = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not ready")


def measure(port, worker_pid):
    before = rss_kib(worker_pid)
    socks = []
    sel = selectors.DefaultSelector()
    for i in range(N):
        s = socket.create_connection(("127.0.0.1", port))
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
    cfg = os.path.join(tmp, "s.yaml")
    with open(cfg, "w") as f:
        f.write("workers: 1\nlimits: {max_connections: 15000, keepalive_timeout: 300s}\n"
                "sites:\n  - listen: 127.0.0.1:18471\n"
                "    routes: [{path: /, respond: {status: 200, body: hello world}}]\n")
    ngx = os.path.join(tmp, "n.conf")
    with open(ngx, "w") as f:
        f.write(f"worker_processes 1; daemon off; error_log {tmp}/e.log; pid {tmp}/n.pid;\n"
                "worker_rlimit_nofile 20000; events {{ worker_connections 15000; }}\n"
                "http {{ access_log off; keepalive_timeout 300s; server {{ listen 127.0.0.1:18472;"
                " location / {{ return 200 'hello world'; }} }} }}\n".replace("{{", "{").replace("}}", "}"))
    procs = [subprocess.Popen([sys.executable, "-m", "scalws", "--config", cfg], cwd=ROOT,
                              stderr=subprocess.DEVNULL),
             subprocess.Popen(["nginx", "-c", ngx], stderr=subprocess.DEVNULL)]
    try:
        wait_port(18471)
        wait_port(18472)
        for name, port, proc in (("scalws", 18471, procs[0]), ("nginx", 18472, procs[1])):
            worker = children(proc.pid)[0]
            before, after = measure(port, worker)
            print(f"{name:7s} worker RSS {before} KiB -> {after} KiB with {N} idle keep-alive "
                  f"connections: {(after - before) * 1024 / N:.0f} bytes each")
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
