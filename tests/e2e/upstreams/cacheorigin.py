"""An origin for the cache tests (tests/e2e/test_cache.py): a real HTTP/1.1
server in a thread whose answer each request's query describes, and which
counts what reached it.

    GET /any/path?cc=max-age%3D60&etag=v1&lm=1&vary=accept&size=5000
        cc        Cache-Control of the answer (absent: none)
        expires   seconds from now for Expires (may be negative)
        etag      ETag "<etag>"; a request whose If-None-Match names it gets 304
        lm        1: Last-Modified an hour ago (If-Modified-Since honoured)
        vary      Vary value; the body then names the request's values
        size      body bytes (default: a short line naming the path and the count)
        status    status of the answer (default 200)
        cookie    1: Set-Cookie
        tag       Cache-Tag value
        sleep     seconds before answering
        trickle   seconds between body chunks of 64 KiB (a slow fill)
        set       Name:Value, a field sent as given (repeatable: one line each,
                  in order; an empty value is sent empty)
Every method answers; POST and DELETE bodies are read. `fail[path]` makes
that path answer 500 (stale-if-error tests); `seen` lists (method, target,
headers) of every request.

Run as a program (`python -m tests.e2e.upstreams.cacheorigin HOST PORT`, in
a network namespace: bench/cache_peers.py) it prints "READY" and serves;
GET /__seen answers JSON [[method, target, {x-* fields}, client address]]
of every request so far.
"""
from __future__ import annotations

import email.utils
import json
import http.server
import socket
import threading
import time
import urllib.parse


class Origin:
    def __init__(self, host="127.0.0.1", port=0):
        self.seen = []
        self.fail = set()
        self.conns = []
        self.lock = threading.Lock()
        origin = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def setup(self):
                super().setup()
                with origin.lock:
                    origin.conns.append(self.connection)

            def answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                if self.path == "/__seen":     # the netns harness's view (__main__)
                    with origin.lock:
                        data = json.dumps([(m, p, self.headers_of(h), a)
                                           for (m, p, h), a in zip(origin.seen,
                                                                   origin.clients)]).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                with origin.lock:
                    origin.seen.append((self.command, self.path, dict(self.headers)))
                    origin.clients.append(self.client_address[0])
                    count = sum(1 for m, p, _ in origin.seen if p == self.path)
                u = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(u.query))
                sets = [v for k, v in urllib.parse.parse_qsl(u.query, keep_blank_values=True)
                        if k == "set"]
                if "sleep" in q:
                    time.sleep(float(q["sleep"]))
                status = int(q.get("status", 200))
                if u.path in origin.fail:
                    status = 500
                etag = f'"{q["etag"]}"' if "etag" in q else None
                lm = email.utils.formatdate(time.time() - 3600, usegmt=True) if q.get("lm") else None
                if status == 200 and self.command in ("GET", "HEAD"):
                    inm = self.headers.get("If-None-Match")
                    ims = self.headers.get("If-Modified-Since")
                    if (etag and inm and etag in inm) or (lm and ims and not inm):
                        status = 304
                if "size" in q:
                    body = (b"0123456789abcdef" * (int(q["size"]) // 16 + 1))[:int(q["size"])]
                else:
                    extra = ""
                    if "vary" in q:
                        extra = " " + ",".join(f"{h}={self.headers.get(h)}" for h in q["vary"].split(","))
                    body = f"{self.command} {u.path} n={count}{extra}\n".encode()
                self.send_response(status)
                self.send_header("Date", email.utils.formatdate(usegmt=True))
                if "cc" in q:
                    self.send_header("Cache-Control", q["cc"])
                if "expires" in q:
                    self.send_header("Expires", email.utils.formatdate(time.time() + float(q["expires"]),
                                                                       usegmt=True))
                if etag:
                    self.send_header("ETag", etag)
                if lm:
                    self.send_header("Last-Modified", lm)
                if "vary" in q:
                    self.send_header("Vary", q["vary"])
                if q.get("cookie"):
                    self.send_header("Set-Cookie", "s=1")
                if "tag" in q:
                    self.send_header("Cache-Tag", q["tag"])
                for v in sets:
                    name, _, value = v.partition(":")
                    self.send_header(name, value.lstrip())
                if status == 304:
                    self.end_headers()
                    return
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                trickle = float(q.get("trickle", 0))
                for i in range(0, len(body), 65536):
                    self.wfile.write(body[i:i + 65536])
                    self.wfile.flush()
                    if trickle:
                        time.sleep(trickle)

            do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = answer

            @staticmethod
            def headers_of(h):
                return {k: v for k, v in h.items() if k.lower().startswith("x-")}

        self.clients = []          # the peer address of each request in seen
        self.httpd = http.server.ThreadingHTTPServer((host, port), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def count(self, target, method=None) -> int:
        with self.lock:
            return sum(1 for m, p, _ in self.seen if p == target and (method is None or m == method))

    def requests(self, target):
        with self.lock:
            return [(m, h) for m, p, h in self.seen if p == target]

    def stop(self):
        """Stops listening and cuts every connection (the proxy's pooled ones too)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


if __name__ == "__main__":
    import sys
    o = Origin(sys.argv[1], int(sys.argv[2]))
    print("READY", o.port, flush=True)
    o.thread.join()
