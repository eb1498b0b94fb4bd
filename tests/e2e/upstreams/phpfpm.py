"""FastCGI applications for the FastCGI end-to-end tests (test_fastcgi*.py).

  php_fpm(unix=False, children=4, name="a", max_requests=0) -> PhpFpm
      a real PHP-FPM (Debian's /usr/sbin/php-fpm8.2, `-F -R -n`, its own
      config in tmp_path): one pool, pm=static with `children` workers
      (each replaced after `max_requests` requests, when not 0),
      catch_workers_output, listening on a free 127.0.0.1 port or (unix=True)
      on a unix socket. Ready once a connect succeeds. PhpFpm: .addr (as
      `servers:`/`connect:` write it), .port, .sock, .access() (the pool's
      access log lines, "METHOD REQUEST_URI STATUS PID" each; one per request
      that reached PHP), .conns() (established TCP connections to its port,
      from /proc/net/tcp), .stop(), .start() (again, same address), .log()
  fcgi_responder() -> Responder
      a FastCGI responder written here (socketserver, real FastCGI records),
      for answers PHP never gives: the mode is the request's SCRIPT_NAME
      (see Responder.answer). .addr .port .accepted (connections accepted)
      .requests (requests answered)

php.ini is not read (-n): the pool sets what the tests need (64M bodies).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import tempfile
import threading
import time

import pytest

from tests.e2e.upstreams.fixtures import free_port, stop_process, wait_connectable, _read_log

PHP_FPM = "/usr/sbin/php-fpm8.2"

POOL = """\
[global]
pid = {dir}/php-fpm.pid
error_log = {dir}/php-fpm.log
daemonize = no

[app]
listen = {listen}
listen.mode = 0666
pm = static
pm.max_children = {children}
pm.max_requests = {max_requests}
catch_workers_output = yes
decorate_workers_output = no
access.log = {dir}/access.log
access.format = "%m %{{REQUEST_URI}}e %s %p"
request_terminate_timeout = 30s
php_admin_value[post_max_size] = 64M
php_admin_value[upload_max_filesize] = 64M
php_admin_value[memory_limit] = 256M
php_admin_value[output_buffering] = 0
php_admin_flag[log_errors] = on
php_admin_flag[display_errors] = off
"""


def _tcp_sockets(port: int):
    """(local port, remote port, state) of the TCP sockets with `port` at
    either end."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    lp = int(fields[1].rsplit(":", 1)[1], 16)
                    rp = int(fields[2].rsplit(":", 1)[1], 16)
                    if port in (lp, rp):
                        yield lp, rp, fields[3]
        except FileNotFoundError:
            pass


def tcp_conns(port: int) -> int:
    """Established TCP connections whose local or remote port is `port`,
    counted once per connection (the server's side, local port = port)."""
    return sum(1 for lp, _, st in _tcp_sockets(port) if lp == port and st == "01")


def tcp_opened(port: int) -> int:
    """Connections to the server on `port` in the last minute: those open
    (its side, ESTABLISHED) and those closed, each of which leaves one
    socket in TIME_WAIT (06) on the side that closed first, for 60 s."""
    return sum(1 for lp, _, st in _tcp_sockets(port)
               if (lp == port and st == "01") or st == "06")


class PhpFpm:
    def __init__(self, workdir, sockdir, name="a", unix=False, children=4, max_requests=0):
        self.dir = os.path.join(workdir, f"php-fpm-{name}")
        os.makedirs(self.dir, exist_ok=True)
        self.name = name
        self.children = children
        self.max_requests = max_requests   # a child leaves after this many (0: never)
        self.sock = os.path.join(sockdir, f"{name}.sock") if unix else None
        self.port = None if unix else free_port()
        self.proc = None

    @property
    def addr(self) -> str:
        return f"unix:{self.sock}" if self.sock else f"127.0.0.1:{self.port}"

    def start(self) -> "PhpFpm":
        if not os.access(PHP_FPM, os.X_OK):
            pytest.fail(f"{PHP_FPM} is not installed: `make test` installs php-fpm "
                        "(Makefile SYSPKGS)")
        conf = os.path.join(self.dir, "php-fpm.conf")
        with open(conf, "w") as f:
            f.write(POOL.format(dir=self.dir, children=self.children,
                                max_requests=self.max_requests,
                                listen=self.sock or f"127.0.0.1:{self.port}"))
        log = open(os.path.join(self.dir, "stderr.log"), "ab")
        self.proc = subprocess.Popen([PHP_FPM, "-F", "-R", "-n", "-y", conf],
                                     stdout=log, stderr=subprocess.STDOUT)
        log.close()
        try:
            if self.sock:
                self._wait_unix()
            else:
                wait_connectable("127.0.0.1", self.port, self.proc, what="php-fpm")
        except AssertionError as e:
            stop_process(self.proc)
            raise AssertionError(f"{e}\n{self.log()}")
        return self

    def _wait_unix(self, timeout=20.0):
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.sock)
                return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"php-fpm exited ({self.proc.returncode})")
            if time.monotonic() >= deadline:
                raise AssertionError(f"php-fpm not listening on {self.sock}")
            time.sleep(0.02)

    def stop(self):
        stop_process(self.proc, sig=signal.SIGTERM, timeout=5)  # children killed, not waited

    def access(self) -> list[str]:
        return _read_log(os.path.join(self.dir, "access.log")).splitlines()

    def conns(self) -> int:
        assert self.port, "conns() counts TCP connections"
        return tcp_conns(self.port)

    def log(self) -> str:
        return (_read_log(os.path.join(self.dir, "php-fpm.log")) +
                _read_log(os.path.join(self.dir, "stderr.log")))

    def __repr__(self):
        return f"<PhpFpm {self.name} {self.addr}>"


@pytest.fixture
def php_fpm(tmp_path):
    started = []
    sockdir = tempfile.mkdtemp(prefix="sws-fpm-")  # AF_UNIX paths are <= 107 bytes
    os.chmod(sockdir, 0o755)   # the workers' user (nobody as root) walks to the socket

    def make(unix=False, children=4, name=None, max_requests=0) -> PhpFpm:
        fpm = PhpFpm(str(tmp_path), sockdir, name=name or f"fpm{len(started)}", unix=unix,
                     children=children, max_requests=max_requests)
        started.append(fpm)
        return fpm.start()

    yield make
    for fpm in started:
        fpm.stop()
    shutil.rmtree(sockdir, ignore_errors=True)


# ---- a FastCGI responder in Python ------------------------------------------------

FCGI_BEGIN_REQUEST, FCGI_END_REQUEST, FCGI_PARAMS, FCGI_STDIN, FCGI_STDOUT, FCGI_STDERR = \
    1, 3, 4, 5, 6, 7


def record(rtype, content=b"", rid=1, version=1) -> bytes:
    pad = -len(content) % 8
    return struct.pack(">BBHHBx", version, rtype, rid, len(content), pad) + content + b"\0" * pad


def end_request(rid=1, app_status=0, protocol_status=0) -> bytes:
    return record(FCGI_END_REQUEST, struct.pack(">IB3x", app_status, protocol_status), rid)


def stdout(data: bytes, rid=1) -> bytes:
    return record(FCGI_STDOUT, data, rid) + record(FCGI_STDOUT, b"", rid)


def decode_params(data: bytes) -> dict:
    out, i = {}, 0

    def length():
        nonlocal i
        if data[i] < 128:
            i += 1
            return data[i - 1]
        v = struct.unpack(">I", data[i:i + 4])[0] & 0x7FFFFFFF
        i += 4
        return v
    while i < len(data):
        nl, vl = length(), length()
        out[data[i:i + nl].decode()] = data[i + nl:i + nl + vl].decode("latin-1")
        i += nl + vl
    return out


class Responder:
    """A FastCGI responder. What it answers depends on SCRIPT_NAME:

      /redirect-local   only "Location: /other.txt" (a local redirect)
      /bad-version      a STDOUT record with version 2
      /other-id         a STDOUT record for request id 2
      /truncated        a STDOUT record cut inside the CGI head, then the
                        connection is closed
      /truncated-body   a whole head and part of the body, then closed
      /close-silently   nothing: the connection is closed
      /redirect-php     only "Location: /env.php?from=py" (a local redirect to
                        the .php route)
      /byte-by-byte     a 200 whose head comes one byte per STDOUT record, each
                        sent alone, STDERR records between them
      /overloaded       END_REQUEST with FCGI_OVERLOADED, no STDOUT
      /no-stdout        END_REQUEST alone
      /long-stderr      a 5000-byte STDERR line, then "a\nb\n", then a page
      /garbage          bytes that are no record at all
      anything else     200 "ok <SCRIPT_NAME> conn <N>\\n" (N: the connection's
                        number, 1 for the first accepted)

    After the bad answers the connection stays open (except /truncated) and
    serves further requests, so a client that pooled it would be seen
    (accepted would not grow). Honours FCGI_KEEP_CONN: without it the
    connection is closed after END_REQUEST.
    """

    def __init__(self):
        self.accepted = 0
        self.requests = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                with outer.lock:
                    outer.accepted += 1
                    conn_no = outer.accepted
                outer.serve(self.request, conn_no)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def _read(sock, n):
        buf = b""
        while len(buf) < n:
            b = sock.recv(n - len(buf))
            if not b:
                raise EOFError
            buf += b
        return buf

    def _request(self, sock):
        """One request: (request id, keep_conn, params)."""
        params, rid, keep = b"", 1, False
        while True:
            version, rtype, rid, clen, plen = struct.unpack(">BBHHBx", self._read(sock, 8))
            content = self._read(sock, clen + plen)[:clen]
            if rtype == FCGI_BEGIN_REQUEST:
                keep = bool(content[2] & 1)
            elif rtype == FCGI_PARAMS:
                params += content
            elif rtype == FCGI_STDIN and clen == 0:
                return rid, keep, decode_params(params)

    def serve(self, sock, conn_no):
        try:
            while True:
                rid, keep, params = self._request(sock)
                with self.lock:
                    self.requests += 1
                script = params.get("SCRIPT_NAME", "")
                if script == "/close-silently":
                    return
                if script == "/byte-by-byte":
                    head = b"Status: 203 Partial\r\nX-A: 1\r\n\r\n"
                    for i in range(len(head)):
                        sock.sendall(record(FCGI_STDOUT, head[i:i + 1], rid)
                                     + record(FCGI_STDERR, b"e%d\n" % i, rid))
                        time.sleep(0.002)
                    sock.sendall(stdout(b"body", rid) + end_request(rid))
                else:
                    sock.sendall(self.answer(script, rid, conn_no))
                if script.startswith("/truncated") or (not keep and script not in BAD):
                    return
        except (EOFError, OSError):
            return
        finally:
            sock.close()

    @staticmethod
    def answer(script, rid, conn_no) -> bytes:
        if script == "/redirect-local":
            return stdout(b"Location: /other.txt\r\n\r\n", rid) + end_request(rid)
        if script == "/redirect-php":
            return stdout(b"Location: /env.php?from=py\r\n\r\n", rid) + end_request(rid)
        if script == "/overloaded":
            return end_request(rid, protocol_status=2)
        if script == "/no-stdout":
            return end_request(rid)
        if script == "/long-stderr":
            return (record(FCGI_STDERR, b"L" * 5000, rid) + record(FCGI_STDERR, b"\na\nb\n", rid)
                    + stdout(b"Content-Type: text/plain\r\n\r\nfine", rid) + end_request(rid))
        if script == "/bad-version":
            return record(FCGI_STDOUT, b"Status: 200\r\n\r\nhello", rid, version=2)
        if script == "/other-id":
            return stdout(b"Status: 200\r\n\r\nhello", rid + 1) + end_request(rid + 1)
        if script == "/truncated":
            return record(FCGI_STDOUT, b"Content-Type: text/plain\r\n\r\n" + b"x" * 1000,
                          rid)[:8 + 10]
        if script == "/truncated-body":
            return record(FCGI_STDOUT, b"Content-Type: text/plain\r\n\r\n" + b"x" * 1000,
                          rid)[:600]
        if script == "/garbage":
            return b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        body = f"ok {script} conn {conn_no}\n".encode()
        return stdout(b"Content-Type: text/plain\r\n\r\n" + body, rid) + end_request(rid)


BAD = ("/bad-version", "/other-id", "/garbage")


@pytest.fixture
def fcgi_responder():
    r = Responder().start()
    yield r
    r.stop()
