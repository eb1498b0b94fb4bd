"""What the reverse proxy's end-to-end tests share (test_proxy.py,
test_proxy_faults.py, test_proxy_tls.py, test_batching.py): configs built
by proxy_yaml() (one group `app` and a site on 127.0.0.1:{port} whose last
route, `/`, proxies to it; JSON is YAML too; conftest.py's proxy_server
fixture starts one), clients that keep a connection or send raw bytes, and a
worker's memory watched while a block runs.
"""
from __future__ import annotations

import http.client
import json
import re
import select
import socket
import threading
import time

MIB = 1 << 20
TRUSTED = "127.0.0.2"          # a client bound to this address is a trusted proxy
REQUEST_ID = re.compile(r"[0-9a-fA-F]{16,}")


# ---- configs -----------------------------------------------------------------

def addr_of(x) -> str:
    """A `servers:` entry's address for an Upstream, FaultProxy, port or string."""
    if isinstance(x, str):
        return x
    if isinstance(x, int):
        return f"127.0.0.1:{x}"
    return x.addr


def server_entry(x):
    if isinstance(x, dict):
        return {**x, "address": addr_of(x["address"])}
    return addr_of(x)


def proxy_yaml(servers, upstream=None, proxy=None, routes=(), top=None, workers=1,
               default_route=True) -> str:
    """A config for the `server` fixture: `upstreams: {app: {servers, **upstream}}`,
    `trusted_proxies: [127.0.0.2/32]`, and one site whose routes are `routes`
    followed by `{path: /, proxy: {upstream: app, **proxy}}`."""
    cfg = {"workers": workers, "trusted_proxies": [f"{TRUSTED}/32"], **(top or {})}
    cfg["upstreams"] = {"app": {"servers": [server_entry(s) for s in servers],
                                **(upstream or {})}}
    all_routes = list(routes)
    if default_route:
        all_routes.append({"path": "/", "proxy": {"upstream": "app", **(proxy or {})}})
    cfg["sites"] = [{"listen": ["127.0.0.1:@PORT@"], "routes": all_routes}]
    text = json.dumps(cfg, indent=2)
    # The fixture runs str.format over the text: braces doubled, then {port}.
    return text.replace("{", "{{").replace("}", "}}").replace("@PORT@", "{port}")


# ---- clients -----------------------------------------------------------------

class Resp:
    def __init__(self, status, headers, body, reason=""):
        self.status, self.headers, self.body, self.reason = status, headers, body, reason

    def all(self, name) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def header(self, name):
        """The one value of `name`, None if absent; two are an error."""
        got = self.all(name)
        assert len(got) <= 1, f"{name} sent {len(got)} times: {got}"
        return got[0] if got else None

    def json(self):
        assert self.status == 200, f"{self.status}: {self.body[:300]!r}"
        return json.loads(self.body)

    @property
    def text(self):
        return self.body.decode("latin-1")

    def __repr__(self):
        return f"<Resp {self.status} {self.headers} {self.body[:80]!r}>"


class Client:
    """One keep-alive client connection (http.client), optionally bound to a
    source address (127.0.0.2 = a trusted proxy)."""

    def __init__(self, port, source=None, timeout=10):
        self.conn = http.client.HTTPConnection(
            "127.0.0.1", port, timeout=timeout,
            source_address=(source, 0) if source else None)

    def request(self, path, method="GET", headers=None, body=None, encode_chunked=False) -> Resp:
        self.conn.request(method, path, body=body, headers=headers or {},
                          encode_chunked=encode_chunked)
        r = self.conn.getresponse()
        return Resp(r.status, r.getheaders(), r.read(), r.reason)

    def get(self, path, **kw) -> Resp:
        return self.request(path, **kw)

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def request(port, path, method="GET", headers=None, body=None, source=None, timeout=10,
            encode_chunked=False) -> Resp:
    """One request on a new connection."""
    with Client(port, source=source, timeout=timeout) as c:
        return c.request(path, method=method, headers=headers, body=body,
                         encode_chunked=encode_chunked)


def raw_exchange(port, data: bytes, method="GET", source=None, timeout=10) -> Resp:
    """Sends exact bytes; parses one response (any framing) with http.client."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                  source_address=(source, 0) if source else None) as s:
        s.sendall(data)
        r = http.client.HTTPResponse(s, method=method)
        r.begin()
        return Resp(r.status, r.getheaders(), r.read(), r.reason)


def parse_answer(data: bytes):
    """One Content-Length-framed response at the start of `data`:
    (status, headers with lowercase names, body), or None while incomplete."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", 0))
    if len(rest) < n:
        return None
    return int(lines[0].split(" ")[1]), headers, rest[:n]


def post_while_reading(port, path, size, timeout=15.0, headers=""):
    """POSTs a `size`-byte body (Content-Length) while reading what comes back,
    as a client must when the server may answer before it has taken the body.
    Stops at the first whole answer, at the server's close, or when sending
    fails. Returns (bytes received, body bytes sent)."""
    head = (f"POST {path} HTTP/1.1\r\nHost: a\r\nContent-Length: {size}\r\n"
            f"{headers}\r\n").encode()
    total = len(head) + size
    piece = b"x" * 65536
    pos, got, can_send = 0, b"", True
    deadline = time.monotonic() + timeout
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.setblocking(False)
        while parse_answer(got) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"no whole answer within {timeout}s: got {got[:300]!r}, " \
                             f"sent {max(0, pos - len(head))} of {size} body bytes"
            wr = [s] if can_send and pos < total else []
            r, w, _ = select.select([s], wr, [], left)
            if r:
                try:
                    b = s.recv(65536)
                except ConnectionResetError:
                    break
                if not b:
                    break
                got += b
            elif w:
                data = head[pos:] if pos < len(head) else piece[:total - pos]
                try:
                    pos += s.send(data)
                except BlockingIOError:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    can_send = False  # the server closed; what it answered is still read
    return got, max(0, pos - len(head))


def echo_headers(j) -> dict[str, list[str]]:
    """The headers an /echo answer says the upstream received: lowercase name -> values."""
    out = {}
    for k, v in j["headers"]:
        out.setdefault(k.lower(), []).append(v)
    return out


def ids(port, n, path="/id", client=None, **kw) -> list[str]:
    """Names of the upstreams that answered n requests of /id (one keep-alive connection)."""
    own = client is None
    c = client or Client(port)
    try:
        out = []
        for _ in range(n):
            r = c.get(path, **kw)
            assert r.status == 200, r
            out.append(r.text)
        return out
    finally:
        if own:
            c.close()


def wait_until(pred, timeout, what, interval=0.02):
    """Polls pred() until it is true; returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# ---- memory ------------------------------------------------------------------

def rss_kib(pid) -> int:
    # RssAnon: the process's own memory; the code an attack runs for the first
    # time since the worker dropped its start-up's pages (forkmem.py) is the page cache's
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))


class RssWatch:
    """Samples a process's RSS in a thread while the block runs; .grown_kib
    is the peak over the value at entry."""

    def __init__(self, pid, interval=0.02):
        self.pid, self.interval = pid, interval
        self.base = self.peak = 0
        self._stop = threading.Event()

    def _run(self):
        while not self._stop.wait(self.interval):
            try:
                self.peak = max(self.peak, rss_kib(self.pid))
            except (FileNotFoundError, ProcessLookupError, StopIteration):
                return

    def __enter__(self):
        self.base = self.peak = rss_kib(self.pid)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_kib(self.pid))

    @property
    def grown_kib(self):
        return self.peak - self.base


def only_worker(srv) -> int:
    workers = srv.workers()
    assert len(workers) == 1, f"expected one worker, got {workers}"
    return workers[0]


def warm(port, n=20):
    """A few proxied requests first, so a worker's pools are in its RSS baseline."""
    with Client(port) as c:
        for _ in range(n):
            assert c.get("/echo").status == 200
