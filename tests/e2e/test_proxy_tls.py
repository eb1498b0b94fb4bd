"""TLS to upstreams end to end: a real scalwsd in front of a real HTTPS
upstream (tests/e2e/upstreams/tlsapp.py: Python's http.server behind the ssl
module), certificates from tests/tlspki.py.

What the upstream saw is asserted from its side (its control port's
/stats: TCP accepts, completed and resumed handshakes, the SNI of each);
what scalwsd decided, from the answers and its error log.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import sys
import time

import pytest

from tests.e2e.proxylib import proxy_yaml
from tests.e2e.upstreams.fixtures import start_until_ready, stop_process
from tests.tlspki import PKI

pytestmark = pytest.mark.timeout(60)

PATTERN = bytes(range(256)) * 256


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """One PKI for the module: the trusted root and its leaf for localhost
    (and 127.0.0.1), another root nobody trusts with its own leaf, a
    self-signed certificate, and a client certificate."""
    p = PKI(tmp_path_factory.mktemp("pki"))
    root = p.root()
    other = p.root(name="Another Root CA")
    return {
        "root": root,
        "leaf": p.leaf(root, ["localhost"], key="ec"),
        "leaf_ip": p.leaf(root, ["localhost"], ips=["127.0.0.1"], key="ec", name="leaf-ip"),
        "other_root": other,
        "other_leaf": p.leaf(other, ["localhost"], key="ec", name="other-leaf"),
        "self_signed": p.self_signed(["localhost"], name="self"),
        "client": p.leaf(root, ["client.test"], key="ec", name="client", cn="client.test",
                         server_auth=False),
    }


class TLSUpstream:
    def __init__(self, workdir, cert, max_tls=None, client_ca=None):
        self.log_path = os.path.join(workdir, f"tlsapp-{id(self)}.log")
        cmd = [sys.executable, "-m", "tests.e2e.upstreams.tlsapp",
               "--cert", cert.cert_path, "--key", cert.key_path]
        if max_tls:
            cmd += ["--max-tls", max_tls]
        if client_ca:
            cmd += ["--client-ca", client_ca.cert_path]
        self.proc, where = start_until_ready(cmd, self.log_path)
        self.port, self.control = (int(x) for x in where.split())

    def stats(self) -> dict:
        c = http.client.HTTPConnection("127.0.0.1", self.control, timeout=10)
        try:
            c.request("GET", "/stats")
            return json.loads(c.getresponse().read())
        finally:
            c.close()

    def wait_stats(self, pred, timeout=5.0):
        deadline = time.monotonic() + timeout
        while True:
            st = self.stats()
            if pred(st) or time.monotonic() > deadline:
                return st
            time.sleep(0.05)

    def stop(self):
        stop_process(self.proc)


@pytest.fixture
def tls_upstream(tmp_path):
    started = []

    def make(cert, **kw):
        up = TLSUpstream(str(tmp_path), cert, **kw)
        started.append(up)
        return up

    yield make
    for up in started:
        up.stop()


def url_yaml(url, tls=None, host=None, extra=None) -> str:
    """A site on {port} whose `/` route proxies to `url` (with `tls:`,
    `host:` and the `extra` proxy keys when given)."""
    proxy = {"url": url, **(extra or {})}
    if tls is not None:
        proxy["tls"] = tls
    if host is not None:
        proxy["host"] = host
    cfg = {"workers": 1, "sites": [{"listen": ["127.0.0.1:@PORT@"],
                                    "routes": [{"path": "/", "proxy": proxy}]}]}
    text = json.dumps(cfg, indent=2)
    return text.replace("{", "{{").replace("}", "}}").replace("@PORT@", "{port}")


def get(port, path, method="GET", body=None, headers=None, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    return r.status, data


def echo(port, path="/echo", **kw) -> dict:
    status, data = get(port, path, **kw)
    assert status == 200, (status, data[:300])
    return json.loads(data)


# ---- working proxying --------------------------------------------------------------------

def test_get_post_and_large_bodies_over_https(server, tls_upstream, pki):
    up = tls_upstream(pki["leaf"])
    srv = server(url_yaml(f"https://localhost:{up.port}/", {"ca": pki["root"].cert_path}))
    info = echo(srv.port, "/echo/a?b=1")
    assert (info["method"], info["path"], info["version"]) == ("GET", "/echo/a?b=1", "TLSv1.3")
    assert info["sni"] == "localhost"
    body = os.urandom(300_000)
    info = echo(srv.port, method="POST", body=body)
    assert (info["body_len"], info["body_sha256"]) == (len(body),
                                                       hashlib.sha256(body).hexdigest())
    # a body of unknown length: re-chunked by the proxy
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=15)
    parts = [b"a" * 1000, os.urandom(70_000), b"z"]
    c.request("POST", "/echo", body=iter(parts), encode_chunked=True)
    r = c.getresponse()
    info = json.loads(r.read())
    c.close()
    assert (r.status, info["body_len"], info["body_sha256"]) == (
        200, 71_001, hashlib.sha256(b"".join(parts)).hexdigest())
    # A body of many records, larger than the proxy's buffer: what OpenSSL
    # holds when the buffer fills must come out too (no stall, no loss).
    size = 3 * 1024 * 1024 + 12345
    status, data = get(srv.port, f"/big?size={size}")
    assert status == 200 and data == big(size)
    assert up.stats()["snis"] == ["localhost"]             # one connection, SNI sent


def big(size) -> bytes:
    return (PATTERN * (size // len(PATTERN) + 1))[:size]


@pytest.mark.parametrize("size", [3000, 10000, 16000, 100_000, 1 << 20])
def test_input_held_inside_openssl(server, tls_upstream, pki, size):
    """buffer_size 4k: one 16 KiB record fills the proxy's buffer four times,
    and what it leaves decrypted inside OpenSSL is all there is (the socket
    is empty): the proxy must come back for it without an epoll event."""
    up = tls_upstream(pki["leaf"])
    srv = server(url_yaml(f"https://localhost:{up.port}/", {"ca": pki["root"].cert_path},
                          extra={"buffer_size": "4k", "read_timeout": "3s"}))
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    for _ in range(2):         # and the pooled connection is still in step
        status, data = get(srv.port, f"/big?size={size}", conn=conn)
        assert status == 200 and data == big(size)
    conn.close()
    assert up.stats()["accepts"] == 1


def test_slow_client_with_input_inside_openssl(server, tls_upstream, pki):
    """A client slower than the proxy: the proxy stops reading the upstream
    each time the client is full. The upstream sends its last record alone,
    after a pause: when the proxy stops while reading it, what is left sits
    decrypted inside OpenSSL with nothing in the socket, and once the client
    drained the proxy must come back for it without an epoll event."""
    import socket
    up = tls_upstream(pki["leaf"])
    srv = server(url_yaml(f"https://localhost:{up.port}/", {"ca": pki["root"].cert_path},
                          extra={"buffer_size": "4k", "read_timeout": "5s"}))
    size = 1024 * 1024 + 16000
    for _ in range(6):
        with socket.socket() as s:
            # Small segments and a small window keep the proxy's send buffer
            # small (Linux sizes it from them): it backs up every few reads.
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            s.settimeout(10)
            s.connect(("127.0.0.1", srv.port))
            s.sendall(f"GET /big?size={size}&tail=16000&pause=0.1 HTTP/1.1\r\n"
                      "Host: t\r\n\r\n".encode())
            got = b""
            while b"\r\n\r\n" not in got:
                got += s.recv(1024)
            head, _, rest = got.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            h = hashlib.sha256(rest)
            n = len(rest)
            time.sleep(0.2)                  # the proxy backs up
            while n < size:
                b = s.recv(16384)
                assert b, f"closed after {n} bytes"
                h.update(b)
                n += len(b)
                time.sleep(0.0002)
        assert h.hexdigest() == hashlib.sha256(big(size)).hexdigest()


def test_keepalive_reuses_one_connection(server, tls_upstream, pki):
    up = tls_upstream(pki["leaf"])
    srv = server(url_yaml(f"https://localhost:{up.port}", {"ca": pki["root"].cert_path}))
    conns = {echo(srv.port)["conn"] for _ in range(10)}
    assert len(conns) == 1
    st = up.stats()
    assert (st["accepts"], st["handshakes"], st["failed"]) == (1, 1, 0), st


@pytest.mark.parametrize("max_tls", ["1.3", "1.2"])
def test_new_connections_resume_the_session(server, tls_upstream, pki, max_tls):
    """keepalive_requests: 1 closes each connection after its request: every
    next one resumes the session the server gave (TLS 1.3 tickets arrive
    after the handshake, TLS 1.2 sessions at its end)."""
    up = tls_upstream(pki["leaf"], max_tls=max_tls)
    srv = server(proxy_yaml([f"https://localhost:{up.port}"],
                            upstream={"keepalive_requests": 1,
                                      "tls": {"ca": pki["root"].cert_path}}))
    infos = [echo(srv.port) for _ in range(5)]
    assert [i["version"] for i in infos] == [f"TLSv{max_tls}"] * 5
    assert len({i["conn"] for i in infos}) == 5
    assert [i["reused"] for i in infos] == [False, True, True, True, True]
    st = up.stats()
    assert (st["accepts"], st["handshakes"], st["reused"]) == (5, 5, 4), st


def test_upstream_closing_then_resumed(server, tls_upstream, pki):
    """The upstream ends the pooled connection (Connection: close): the next
    request opens one that resumes."""
    up = tls_upstream(pki["leaf"])
    srv = server(url_yaml(f"https://localhost:{up.port}", {"ca": pki["root"].cert_path}))
    first = echo(srv.port)
    assert get(srv.port, "/close") == (200, b"bye")
    nxt = echo(srv.port)
    assert nxt["conn"] != first["conn"] and nxt["reused"] is True
    assert up.stats()["handshakes"] == 2


# ---- verification ------------------------------------------------------------------------------

def test_wrong_ca_is_502_with_the_reason(server, tls_upstream, pki):
    up = tls_upstream(pki["other_leaf"])
    srv = server(url_yaml(f"https://localhost:{up.port}", {"ca": pki["root"].cert_path}))
    assert get(srv.port, "/echo")[0] == 502
    srv.wait_log("upstream SSL certificate verify error: (20:unable to get local issuer "
                 "certificate)")
    line = next(l for l in srv.log().splitlines() if "verify error" in l)
    assert "[error]" in line and f"upstream: 127.0.0.1:{up.port}" in line, line
    assert 'name: "localhost"' in line, line
    assert up.stats()["handshakes"] == 0


def test_system_store_refuses_a_private_ca(server, tls_upstream, pki):
    """No ca: the system's store, which does not know our test root."""
    up = tls_upstream(pki["leaf"])
    srv = server(url_yaml(f"https://localhost:{up.port}"))
    assert get(srv.port, "/")[0] == 502
    srv.wait_log("upstream SSL certificate verify error: (20:")


def test_name_mismatch_is_502(server, tls_upstream, pki):
    up = tls_upstream(pki["leaf"])
    srv = server(url_yaml(f"https://localhost:{up.port}", {"ca": pki["root"].cert_path,
                                                           "name": "api.example.com"}))
    assert get(srv.port, "/echo")[0] == 502
    srv.wait_log("upstream SSL certificate verify error: (62:hostname mismatch)")
    assert 'name: "api.example.com"' in srv.log()
    # the expected name is the SNI too (the server alerts after our verdict)
    st = up.wait_stats(lambda st: st["failed"])
    assert st["failed_snis"] and set(st["failed_snis"]) == {"api.example.com"}, st


def test_host_header_is_the_default_name(server, tls_upstream, pki):
    """With host: set, the certificate must carry that name (and SNI says it)."""
    up = tls_upstream(pki["leaf"])
    srv = server(url_yaml(f"https://127.0.0.1:{up.port}", {"ca": pki["root"].cert_path},
                          host="localhost:8443"))
    info = echo(srv.port)
    assert info["sni"] == "localhost"


def test_ip_address_names(server, tls_upstream, pki):
    """An IP address is verified against the certificate's IP entries and is
    never sent as SNI."""
    up = tls_upstream(pki["leaf_ip"])
    srv = server(url_yaml(f"https://127.0.0.1:{up.port}", {"ca": pki["root"].cert_path}))
    assert echo(srv.port)["sni"] is None
    up2 = tls_upstream(pki["leaf"])                   # localhost only
    srv2 = server(url_yaml(f"https://127.0.0.1:{up2.port}", {"ca": pki["root"].cert_path}))
    assert get(srv2.port, "/echo")[0] == 502
    srv2.wait_log("(64:IP address mismatch)")


def test_sni_off(server, tls_upstream, pki):
    up = tls_upstream(pki["leaf"])
    srv = server(url_yaml(f"https://localhost:{up.port}", {"ca": pki["root"].cert_path,
                                                           "sni": False}))
    assert echo(srv.port)["sni"] is None


def test_verify_off_accepts_a_self_signed_upstream(server, tls_upstream, pki):
    up = tls_upstream(pki["self_signed"])
    on = server(url_yaml(f"https://localhost:{up.port}"))
    assert get(on.port, "/echo")[0] == 502
    on.wait_log("upstream SSL certificate verify error: (18:self-signed certificate)")
    off = server(url_yaml(f"https://localhost:{up.port}", {"verify": False}))
    info = echo(off.port)
    assert info["sni"] == "localhost"


def test_client_certificate(server, tls_upstream, pki):
    up = tls_upstream(pki["leaf"], client_ca=pki["root"])
    with_cert = server(url_yaml(f"https://localhost:{up.port}", {
        "ca": pki["root"].cert_path, "cert": pki["client"].cert_path,
        "key": pki["client"].key_path}))
    assert echo(with_cert.port)["client_cert"] == "client.test"
    without = server(url_yaml(f"https://localhost:{up.port}", {"ca": pki["root"].cert_path}))
    assert get(without.port, "/echo")[0] == 502


def test_failed_handshake_goes_to_the_next_server(server, tls_upstream, pki):
    """A verification failure is a failed attempt: the request is retried
    on the group's next server."""
    bad = tls_upstream(pki["other_leaf"])
    good = tls_upstream(pki["leaf"])
    srv = server(proxy_yaml([f"https://localhost:{bad.port}", f"https://localhost:{good.port}"],
                            upstream={"tls": {"ca": pki["root"].cert_path}}))
    for _ in range(4):
        echo(srv.port)
    assert bad.stats()["handshakes"] == 0
    assert good.stats()["handshakes"] >= 1
    assert "certificate verify error" in srv.log()


# ---- groups ---------------------------------------------------------------------------------

def test_group_tls_on_with_health_checks_over_tls(server, tls_upstream, pki):
    up = tls_upstream(pki["leaf"])
    srv = server(proxy_yaml([f"localhost:{up.port}"], upstream={
        "tls": {"ca": pki["root"].cert_path},
        "health": {"path": "/healthz", "interval": "0.2s"}}))
    st = up.wait_stats(lambda st: st["paths"].count("/healthz") >= 2)
    assert st["paths"].count("/healthz") >= 2, st
    assert st["failed"] == 0 and st["handshakes"] >= 2
    info = echo(srv.port)
    assert info["sni"] == "localhost"


@pytest.mark.in_process
def test_engine_counts_handshakes_and_resumptions(tls_upstream, pki):
    """Engine.counters(): upstream_tls_handshakes and upstream_tls_resumed,
    from an engine served in this process (run_blocking) while a thread
    sends three requests, each on a new upstream connection."""
    import socket
    import threading

    from scalws.config.loader import load_config_text
    from scalws.server.engine import Engine
    up = tls_upstream(pki["leaf"])
    cfg = load_config_text(f"""
workers: 1
upstreams:
  app:
    servers: ["https://localhost:{up.port}"]
    keepalive_requests: 1
    tls: {{ca: "{pki['root'].cert_path}"}}
sites:
  - listen: ["127.0.0.1:1"]
    routes:
      - {{path: /, proxy: app}}
""")
    eng = Engine(cfg, 0)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    lsock.setblocking(False)
    port = lsock.getsockname()[1]
    eng.add_listener(lsock.detach(), cfg.sites[0].listen[0].key)
    statuses = []

    def client():
        for _ in range(3):
            statuses.append(get(port, "/echo")[0])

    t = threading.Thread(target=client)
    t.start()
    deadline = time.monotonic() + 20
    while t.is_alive() and time.monotonic() < deadline:
        eng.run_blocking(0.05)
    t.join(1)
    c = eng.counters()
    assert statuses == [200, 200, 200]
    assert (c["upstream_tls_handshakes"], c["upstream_tls_resumed"]) == (3, 2), c
    assert c["upstream_conns"] == 3
