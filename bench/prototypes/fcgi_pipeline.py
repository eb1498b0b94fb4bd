#!/usr/bin/env python3
"""Does PHP-FPM serve FastCGI requests pipelined on one kept connection?
(issue 36's report, 2026-12-07: the next lever for php.)

Starts php-fpm (pm static, 2 children, pm.max_requests 5) on 127.0.0.1:19500
in a temporary directory, writes three requests back to back on one
connection (the first sleeps 200 ms) and reads the three answers, then
three more past the child's pm.max_requests. Prints what came back.
    python3 bench/prototypes/fcgi_pipeline.py [php-fpm binary]
"""
import glob
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time


def rec(kind, body):
    return struct.pack("!BBHHBx", 1, kind, 1, len(body), 0) + body


def request(script, query):
    params = {"SCRIPT_FILENAME": script, "REQUEST_METHOD": "GET", "QUERY_STRING": query}
    p = b"".join(bytes([len(k), len(v)]) + k.encode() + v.encode() for k, v in params.items())
    return rec(1, struct.pack("!HB5x", 1, 1)) + rec(4, p) + rec(4, b"") + rec(5, b"")


def answers(s, n):
    """The bodies of up to n answers, and "ok" or "EOF"."""
    buf, out, cur = b"", [], b""
    while len(out) < n:
        d = s.recv(65536)
        if not d:
            return out, "EOF"
        buf += d
        while len(buf) >= 8:
            _, kind, _, cl, pl = struct.unpack("!BBHHB", buf[:7])
            if len(buf) < 8 + cl + pl:
                break
            body, buf = buf[8:8 + cl], buf[8 + cl + pl:]
            if kind == 6:
                cur += body
            elif kind == 3:
                out.append(cur.split(b"\r\n\r\n", 1)[-1].decode())
                cur = b""
    return out, "ok"


def main():
    fpm = sys.argv[1] if len(sys.argv) > 1 else (shutil.which("php-fpm") or
                                                  sorted(glob.glob("/usr/sbin/php-fpm*"))[-1])
    d = tempfile.mkdtemp()
    os.chmod(d, 0o755)
    script = os.path.join(d, "hello.php")
    with open(script, "w") as f:
        f.write("<?php if (isset($_GET['sleep'])) usleep((int)$_GET['sleep']);"
                " echo 'answer ', $_GET['n'], ' from pid ', getmypid();\n")
    os.chmod(script, 0o644)
    conf = os.path.join(d, "fpm.conf")
    with open(conf, "w") as f:
        f.write(f"[global]\npid = {d}/fpm.pid\nerror_log = {d}/fpm.log\ndaemonize = no\n"
                "[www]\nuser = nobody\ngroup = nogroup\nlisten = 127.0.0.1:19500\n"
                "pm = static\npm.max_children = 2\npm.max_requests = 5\n")
    proc = subprocess.Popen([fpm, "-y", conf, "-F"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                s = socket.create_connection(("127.0.0.1", 19500))
                break
            except OSError:
                time.sleep(0.05)
        t = time.monotonic()
        s.sendall(request(script, "n=1&sleep=200000") + request(script, "n=2") + request(script, "n=3"))
        got = answers(s, 3)
        print("three pipelined, the first 200 ms:", got, f"{time.monotonic() - t:.3f} s")
        s.sendall(request(script, "n=4") + request(script, "n=5") + request(script, "n=6"))
        print("past pm.max_requests = 5:", answers(s, 3))
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
