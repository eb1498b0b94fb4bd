"""An HTTPS upstream for the TLS-to-upstream tests (tests/e2e/test_proxy_tls.py):
Python's http.server behind the ssl module, one thread per connection.

    python -m tests.e2e.upstreams.tlsapp --cert PEM --key PEM [--port 0]
        [--max-tls 1.2|1.3] [--client-ca PEM]

Prints "READY <tls port> <control port>" once both listen. The TLS port
serves:

  /echo...          JSON: method, path, body_len, body_sha256, sni (the name
                    the client sent, null for none), conn (which accepted
                    connection), reused (whether its handshake resumed a
                    session), version (TLSv1.3, ...), client_cert (the
                    subject's CN of the client certificate, or null)
  /big?size=N[&tail=M&pause=S]
                    N bytes of a pattern (Content-Length), for bodies of many
                    records; with `tail`, the last M bytes (one record) go S
                    seconds (0.2) after the rest
  /close            "bye" with Connection: close; the connection ends after it
  /healthz          200 "ok"

The control port (plain HTTP, not counted) serves /stats: JSON accepts
(TCP connections accepted on the TLS port), handshakes (completed),
reused (of which resumed a session), failed (handshakes that failed, with
their reasons in `errors` and the SNI they got in `failed_snis`), snis (per
completed handshake, in order), paths (per request, in order).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

LOCK = threading.Lock()
STATS = {"accepts": 0, "handshakes": 0, "reused": 0, "failed": 0, "errors": [],
         "failed_snis": [], "snis": [], "paths": []}
_LOCAL = threading.local()     # the SNI of the handshake running in this thread
PATTERN = bytes(range(256)) * 256


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", 0) or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status, body: bytes, ctype="text/plain", close=False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self):
        body = self._body()
        url = urlsplit(self.path)
        with LOCK:
            STATS["paths"].append(url.path)
        conn = self.connection
        if url.path.startswith("/echo"):
            peer = conn.getpeercert()
            cn = None
            if peer:
                for rdn in peer.get("subject", ()):
                    for k, v in rdn:
                        if k == "commonName":
                            cn = v
            info = {"method": self.command, "path": self.path, "body_len": len(body),
                    "body_sha256": hashlib.sha256(body).hexdigest(),
                    "sni": getattr(conn, "sni", None), "conn": getattr(conn, "seq", 0),
                    "reused": conn.session_reused, "version": conn.version(),
                    "client_cert": cn}
            self._send(200, json.dumps(info).encode(), "application/json")
        elif url.path == "/big":
            q = parse_qs(url.query)
            size = int(q.get("size", ["0"])[0])
            data = (PATTERN * (size // len(PATTERN) + 1))[:size]
            tail = int(q.get("tail", ["0"])[0])
            if not tail:
                self._send(200, data, "application/octet-stream")
                return
            # size - tail bytes, a pause, then the last `tail` bytes (one record)
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            self.wfile.write(data[:size - tail])
            self.wfile.flush()
            time.sleep(float(q.get("pause", ["0.2"])[0]))
            self.wfile.write(data[size - tail:])
        elif url.path == "/close":
            self._send(200, b"bye", close=True)
        elif url.path == "/healthz":
            self._send(200, b"ok")
        else:
            self._send(404, b"not found")

    do_GET = do_POST = do_PUT = do_HEAD = _route


class TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, addr, ctx):
        super().__init__(addr, Handler)
        self.ctx = ctx

    def get_request(self):
        sock, addr = self.socket.accept()
        with LOCK:
            STATS["accepts"] += 1
            seq = STATS["accepts"]
        return sock, (addr, seq)

    def finish_request(self, request, client_address):
        # In the connection's own thread: the handshake blocks no one else.
        client_address, seq = client_address
        _LOCAL.sni = None
        request.settimeout(30)
        try:
            tls = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            with LOCK:
                STATS["failed"] += 1
                STATS["errors"].append(str(e))
                STATS["failed_snis"].append(_LOCAL.sni)
            request.close()
            return
        tls.seq = seq
        tls.sni = _LOCAL.sni
        with LOCK:
            STATS["handshakes"] += 1
            STATS["reused"] += bool(tls.session_reused)
            STATS["snis"].append(tls.sni)
        try:
            Handler(tls, client_address, self)
        except OSError:
            pass
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def shutdown_request(self, request):
        pass                   # finish_request closed it


class Control(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        with LOCK:
            body = json.dumps(STATS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--max-tls", choices=("1.2", "1.3"), default="1.3")
    p.add_argument("--client-ca", help="require a client certificate issued by this CA")
    args = p.parse_args(argv)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = (ssl.TLSVersion.TLSv1_2 if args.max_tls == "1.2"
                           else ssl.TLSVersion.TLSv1_3)
    if args.client_ca:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(args.client_ca)

    def on_sni(sslobj, name, context):
        _LOCAL.sni = name
        return None

    ctx.sni_callback = on_sni
    server = TLSServer((args.host, args.port), ctx)
    control = ThreadingHTTPServer((args.host, 0), Control)
    control.daemon_threads = True
    threading.Thread(target=control.serve_forever, daemon=True).start()
    print(f"READY {server.server_address[1]} {control.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    main()
