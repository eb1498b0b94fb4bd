"""HTTP/3 over QUIC end to end: real scalwsd, real clients (aioquic, a
second QUIC implementation in Python; ngtcp2's gtlsclient for interop),
every route kind, bodies both ways, many streams, a lossy path, migration,
and what a worker does with bad input."""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request

import pytest

from tests.e2e.h3client import H3
from tests.tlspki import PKI

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = PKI(tmp_path_factory.mktemp("pki"))
    p.ca = p.root()
    p.ec = p.leaf(p.ca, ["localhost", "a.test"], key="ec", name="ec")
    p.b = p.leaf(p.ca, ["*.b.test"], key="ec", name="b")
    return p


@pytest.fixture
def www(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "index.html").write_text("<h1>hello over h3</h1>\n")
    (root / "big.bin").write_bytes(random.Random(7).randbytes(3 << 20))
    (root / "style.css").write_text("body { color: red }\n" * 50)
    os.system(f"gzip -k -9 {root / 'style.css'}")
    os.chmod(root, 0o755)
    for f in root.iterdir():
        os.chmod(f, 0o644)
    return root


SITE = """
workers: {workers}
log: {{access: {tmp}/access.log, level: info}}
sites:
  - listen: ["127.0.0.1:{port} tls", "127.0.0.1:{port} quic"]
    server_names: [localhost, a.test]
    tls: {{cert: {cert}, key: {key}}}
    routes:
      - {{path: /hello, respond: {{status: 200, body: "hi over h3\\n"}}}}
      - {{path: /, static: {{root: {www}, precompressed: true}}}}
{extra_routes}
  - listen: ["127.0.0.1:{port} quic"]
    server_names: ["*.b.test"]
    tls: {{cert: {b_cert}, key: {b_key}}}
    routes:
      - {{path: /, respond: {{status: 200, body: "site b\\n"}}}}
"""


def start(server, pki, www, workers=1, extra_routes="", head="", **fmt):
    return server(head + SITE, workers=workers, cert=pki.ec.cert_path, key=pki.ec.key_path,
                  b_cert=pki.b.cert_path, b_key=pki.b.key_path, www=www,
                  extra_routes=extra_routes, **fmt)


def access_lines(srv):
    srv.stop(signal.SIGTERM)  # flushes the access log
    with open(srv.tmp / "access.log") as f:
        return f.read().splitlines()


def test_respond_static_ranges_conditionals_and_the_log(server, pki, www):
    srv = start(server, pki, www)
    big = (www / "big.bin").read_bytes()
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        status, h, body = c.get("/hello")
        assert (status, body) == (200, b"hi over h3\n")
        assert dict(h)["content-length"] == "11"
        status, h, body = c.get("/big.bin")
        assert status == 200 and body == big
        etag = dict(h)["etag"]
        status, h, body = c.get("/big.bin", [("range", "bytes=1000-1999")])
        assert status == 206 and body == big[1000:2000]
        assert dict(h)["content-range"] == f"bytes 1000-1999/{len(big)}"
        status, h, body = c.get("/big.bin", [("if-none-match", etag)])
        assert status == 304 and body == b""
        status, h, body = c.request("HEAD", "/big.bin")
        assert status == 200 and body == b"" and dict(h)["content-length"] == str(len(big))
        status, h, body = c.get("/style.css", [("accept-encoding", "gzip")])
        assert status == 200 and dict(h).get("content-encoding") == "gzip"
        assert body == (www / "style.css.gz").read_bytes()
        status, _, _ = c.get("/missing")
        assert status == 404
    lines = access_lines(srv)
    h3 = [line for line in lines if "HTTP/3.0" in line]
    assert len(h3) == 7, lines
    assert '"GET /big.bin HTTP/3.0" 206 1000' in "\n".join(h3)


def test_alt_svc_on_tls_answers_and_sni_picks_the_certificate(server, pki, www):
    srv = start(server, pki, www, head="http3: {{alt_svc_max_age: 3600}}\n")
    ctx = ssl.create_default_context(cafile=pki.ca.cert_path)
    with socket.create_connection((HOST, srv.port)) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        s.sendall(b"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert f'Alt-Svc: h3=":{srv.port}"; ma=3600\r\n'.encode() in data
    # The second site has only a quic listener: its own certificate by SNI.
    with H3(srv.port, cafile=pki.ca.cert_path, server_name="x.b.test") as c:
        assert c.get("/")[2] == b"site b\n"
    with H3(srv.port, cafile=pki.ca.cert_path, server_name="a.test") as c:
        assert c.get("/hello")[2] == b"hi over h3\n"


PROXY_ROUTE = "      - {{path: /up/, proxy: {{url: \"{up}\", strip_prefix: /up}}}}\n"


def test_bodies_both_ways_through_the_proxy(server, pki, www, upstream_app):
    up = upstream_app()
    srv = start(server, pki, www, extra_routes=PROXY_ROUTE.format(up=up.url))
    body = random.Random(3).randbytes(1 << 20)
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        status, _, out = c.request("POST", "/up/upload", [("content-type", "x/y")], body)
        assert status == 200, out
        got = json.loads(out)
        assert got == {"len": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        status, _, out = c.get("/up/download?size=2000000")
        assert status == 200 and len(out) == 2000000
        status, _, out = c.get("/up/echo/x", [("cookie", "a=1"), ("cookie", "b=2")])
        echo = json.loads(out)
        hs = {k.lower(): v for k, v in echo["headers"]}
        assert hs["x-forwarded-proto"] == "https"
        assert hs["cookie"] == "a=1; b=2"  # RFC 9114 §4.2.1: crumbs joined for HTTP/1
        assert hs["host"] == f"localhost:{srv.port}"
        # chunked upstream answer, unknown length
        status, _, out = c.get("/up/trickle?n=3&delay=0.05")
        assert status == 200 and out == b"tick\n" * 3


def test_many_streams_at_once(server, pki, www):
    srv = start(server, pki, www)
    with H3(srv.port, cafile=pki.ca.cert_path, timeout=30) as c:
        reqs = [("GET", "/hello" if i % 2 else "/index.html", [], b"") for i in range(100)]
        answers = c.many(reqs)
        assert [a[0] for a in answers] == [200] * 100
        assert answers[1][2] == b"hi over h3\n"
        # and a second wave on the same connection: streams were given back
        assert [a[0] for a in c.many(reqs)] == [200] * 100


class LossyRelay:
    """A UDP relay between one client and the server that drops every
    `drop`-th datagram each way and swaps each `swap`-th with the next."""

    def __init__(self, server_port, drop=9, swap=5, cut_after=None):
        self.server = (HOST, server_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((HOST, 0))
        self.port = self.sock.getsockname()[1]
        self.up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.up.bind((HOST, 0))
        self.client = None
        self.drop, self.swap = drop, swap
        self.cut_after = cut_after  # server datagrams passed, then nothing more either way
        self.cut = threading.Event()
        self.counts = {"dropped": 0, "swapped": 0, "passed": 0}
        self.stop = False
        self.threads = [threading.Thread(target=self._pump, args=(True,), daemon=True),
                        threading.Thread(target=self._pump, args=(False,), daemon=True)]
        for t in self.threads:
            t.start()

    def _pump(self, from_client):
        src = self.sock if from_client else self.up
        n, held = 0, None
        src.settimeout(0.2)
        while not self.stop:
            try:
                data, addr = src.recvfrom(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if from_client:
                self.client = addr
            dest = (self.up, self.server) if from_client else (self.sock, self.client)
            if self.cut.is_set():
                continue
            if not from_client and self.cut_after is not None and n >= self.cut_after:
                self.cut.set()
                continue
            n += 1
            if n % self.drop == 0:
                self.counts["dropped"] += 1
                continue
            if held is not None:
                dest[0].sendto(data, dest[1])
                dest[0].sendto(held, dest[1])
                held = None
                self.counts["swapped"] += 1
                continue
            if n % self.swap == 0:
                held = data
                continue
            dest[0].sendto(data, dest[1])
            self.counts["passed"] += 1

    def close(self):
        self.stop = True
        for t in self.threads:
            t.join()
        self.sock.close()
        self.up.close()


def test_a_lossy_reordering_path_loses_nothing(server, pki, www, upstream_app):
    up = upstream_app()
    srv = start(server, pki, www, extra_routes=PROXY_ROUTE.format(up=up.url))
    relay = LossyRelay(srv.port)
    try:
        body = random.Random(5).randbytes(300_000)
        with H3(relay.port, cafile=pki.ca.cert_path, authority=f"localhost:{srv.port}",
                timeout=60) as c:
            # 1 MiB of the file (the aioquic client in Python is the slow part)
            status, _, out = c.get("/big.bin", [("range", "bytes=0-1048575")])
            assert status == 206 and out == (www / "big.bin").read_bytes()[:1 << 20]
            status, _, out = c.request("POST", "/up/upload", [], body)
            assert status == 200
            assert json.loads(out)["sha256"] == hashlib.sha256(body).hexdigest()
        assert relay.counts["dropped"] > 50 and relay.counts["swapped"] > 50, relay.counts
    finally:
        relay.close()


def test_a_graceful_stop_does_not_wait_for_a_client_that_vanished(server, pki, www):
    """The client goes silent in the middle of a download (its network is
    gone: nothing passes the relay any more), so our answer's stream is
    never acknowledged. A graceful stop closes that connection once the
    client has been silent for 2 s instead of waiting for it until
    shutdown_timeout (30 s)."""
    srv = start(server, pki, www)
    relay = LossyRelay(srv.port, drop=10**9, swap=10**9, cut_after=200)
    done = {}

    def download():
        try:
            with H3(relay.port, cafile=pki.ca.cert_path, authority=f"localhost:{srv.port}",
                    timeout=20) as c:
                done["answer"] = c.get("/big.bin")
        except Exception as exc:  # noqa: BLE001 - the client's side is cut on purpose
            done["error"] = exc

    t = threading.Thread(target=download, daemon=True)
    t.start()
    try:
        assert relay.cut.wait(15), relay.counts
        t0 = time.monotonic()
        assert srv.stop(timeout=15) == 0
        assert time.monotonic() - t0 < 10
        assert "shutdown_timeout" not in srv.log()
    finally:
        relay.close()
    assert "answer" not in done  # it never got the whole file


def gtlsclient(port, *urls, args=(), download=None, timeout=30):
    cmd = ["gtlsclient", "-q", "--exit-on-all-streams-close", *args]
    if download:
        cmd.append(f"--download={download}")
    return subprocess.run(cmd + [HOST, str(port), *urls], capture_output=True,
                          timeout=timeout)


def test_interop_with_ngtcp2s_client_and_migration(server, pki, www, tmp_path):
    """A second implementation (ngtcp2's example client on GnuTLS), and a
    client that changes its address mid-download (RFC 9000 §9)."""
    srv = start(server, pki, www)
    out = tmp_path / "dl"
    out.mkdir()
    r = gtlsclient(srv.port, f"https://localhost:{srv.port}/hello",
                   f"https://localhost:{srv.port}/big.bin", download=out)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert (out / "hello").read_bytes() == b"hi over h3\n"
    assert (out / "big.bin").read_bytes() == (www / "big.bin").read_bytes()
    (out / "big.bin").unlink()
    r = gtlsclient(srv.port, f"https://localhost:{srv.port}/big.bin", download=out,
                   args=["--change-local-addr=100ms", "--delay-stream=300ms"])
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert (out / "big.bin").read_bytes() == (www / "big.bin").read_bytes()
    lines = access_lines(srv)
    ports = {line.split()[0] for line in lines if "big.bin" in line}
    assert ports == {"127.0.0.1"}, lines


def test_bad_requests_get_their_status_and_others_are_served(server, pki, www):
    srv = start(server, pki, www, head="limits: {{max_body_bytes: 1000, max_header_bytes: 4096}}\n")
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        status, _, _ = c.get("/hello", [("x-big", "a" * 8000)])
        assert status == 431
        status, _, _ = c.request("POST", "/hello", [("content-length", "5000")], b"x" * 5000)
        assert status == 413
        status, _, _ = c.get("/hello", [("expect", "teapot")])
        assert status == 417
        # CONNECT with :path and :scheme is malformed (RFC 9114 §4.4): nghttp3
        # resets the stream (H3_MESSAGE_ERROR)
        status, h, _ = c.request("CONNECT", "/hello")
        assert status is None and h == [(":reset", 0x10E)]
        # the connection is still good
        assert c.get("/hello")[0] == 200
    with H3(srv.port, cafile=pki.ca.cert_path, authority="nobody.example") as c:
        assert c.get("/hello")[0] == 200  # the default site (the first)


def test_a_killed_worker_is_replaced_and_serves_h3(server, pki, www):
    srv = start(server, pki, www, workers=2)
    srv.expect_crashes = True
    victim = srv.workers()[0]
    os.kill(victim, signal.SIGKILL)
    srv.wait_log("restarting")
    srv.wait_log("ready", count=1)
    for _ in range(6):  # new connections (new ports) reach both workers
        with H3(srv.port, cafile=pki.ca.cert_path) as c:
            assert c.get("/hello")[0] == 200


def test_reloads_under_h3_load_lose_no_request(server, pki, www):
    """Three clients open connection after connection (8 requests at once
    on each) while the server reloads three times: every request is
    answered, on old workers that drain or on new ones."""
    srv = start(server, pki, www, workers=2)
    stop = threading.Event()
    results = {"answers": 0, "errors": []}
    lock = threading.Lock()

    def load():
        reqs = [("GET", "/hello" if i % 2 else "/index.html", [], b"") for i in range(8)]
        while not stop.is_set():
            try:
                with H3(srv.port, cafile=pki.ca.cert_path, timeout=10) as c:
                    statuses = [a[0] for a in c.many(reqs)]
                with lock:
                    results["answers"] += statuses.count(200)
                    if statuses != [200] * 8:
                        results["errors"].append(statuses)
            except Exception as exc:  # a lost request or connection
                with lock:
                    results["errors"].append(repr(exc))

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for n in range(1, 4):
            time.sleep(0.3)  # load on the generation before
            srv.kill(signal.SIGHUP)
            srv.wait_log("reloaded", timeout=20, count=n)
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not results["errors"], results["errors"][:5]
    assert results["answers"] >= 3 * 8 * 3, results


def test_migration_reaches_the_owning_worker_among_four(server, pki, www, tmp_path):
    """With four workers the kernel's 4-tuple hash would send a moved
    client's packets to another worker three times in four: the master's
    steering program routes them by our connection ID instead."""
    srv = start(server, pki, www, workers=4)
    for i in range(4):
        out = tmp_path / f"dl{i}"
        out.mkdir()
        r = gtlsclient(srv.port, f"https://localhost:{srv.port}/big.bin", download=out,
                       args=["--change-local-addr=100ms", "--delay-stream=300ms",
                             "--timeout=5s"])
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        assert (out / "big.bin").read_bytes() == (www / "big.bin").read_bytes(), i


def shutting_down(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"shutting down" in f.read()
    except OSError:
        return True


def test_reload_lets_old_connections_finish_while_new_ones_go_to_new_workers(
        server, pki, www, upstream_app):
    up = upstream_app()
    srv = start(server, pki, www, workers=2, extra_routes=PROXY_ROUTE.format(up=up.url))
    old_workers = set(srv.workers())
    held = {}
    ready = threading.Event()

    def hold():
        with H3(srv.port, cafile=pki.ca.cert_path, timeout=30) as c:
            assert c.get("/hello")[0] == 200
            ready.set()
            held["answer"] = c.get("/up/hold/k1?timeout=25")

    t = threading.Thread(target=hold)
    t.start()
    assert ready.wait(10)
    srv.kill(signal.SIGHUP)
    deadline = time.monotonic() + 15
    while not all(shutting_down(p) for p in old_workers):
        assert time.monotonic() < deadline, srv.log()
        time.sleep(0.02)
    # the old workers drain; new connections are the new workers'
    for _ in range(4):
        with H3(srv.port, cafile=pki.ca.cert_path) as c:
            assert c.get("/hello")[0] == 200
    assert not held  # still in flight on its old connection
    with urllib.request.urlopen(f"{up.url}/release/k1", timeout=5) as r:
        assert json.loads(r.read())["held"] == 1
    t.join(30)
    assert held["answer"][0] == 200 and held["answer"][2] == b"released k1", held
    srv.wait_log("reloaded")


def test_retry_proves_the_address_before_a_handshake(server, pki, www):
    """retry_above: 0: every new client gets a Retry first (RFC 9000
    §8.1.2) and connects with its token; a token that is not ours is refused."""
    srv = start(server, pki, www, head="http3: {{retry_above: 0}}\n")
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        assert c.get("/hello")[0] == 200
        assert c.proto._quic._retry_count == 1
    # a forged Retry token (our magic byte, the rest made up): no answer at all
    from aioquic.quic.connection import QuicConnection
    cfg = H3(srv.port, cafile=pki.ca.cert_path).cfg
    forged = QuicConnection(configuration=cfg)
    forged._peer_token = b"\xb6" + os.urandom(60)
    forged.connect((HOST, srv.port), now=time.monotonic())
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    for data, _ in forged.datagrams_to_send(now=time.monotonic()):
        s.sendto(data, (HOST, srv.port))
    with pytest.raises(socket.timeout):
        s.recvfrom(65536)
    s.close()
    with H3(srv.port, cafile=pki.ca.cert_path) as c:  # and others are served
        assert c.get("/hello")[0] == 200


def test_sessions_resume_on_every_worker(server, pki, www):
    srv = start(server, pki, www, workers=2)
    tickets = []
    with H3(srv.port, cafile=pki.ca.cert_path, ticket_handler=tickets.append) as c:
        assert c.get("/hello")[0] == 200
    assert tickets
    resumed = []
    for _ in range(6):  # new source ports: both workers see some
        with H3(srv.port, cafile=pki.ca.cert_path, session_ticket=tickets[-1]) as c:
            assert c.get("/hello")[0] == 200
            resumed.append(c.proto._quic.tls.session_resumed)
    assert all(resumed), resumed


def web_workers(srv) -> list[int]:
    """The master's children that are web workers (by their title)."""
    out = []
    for pid in srv.workers():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"scalwsd: worker" in f.read():
                    out.append(pid)
        except OSError:
            pass
    return out


def test_a_restarted_worker_answers_old_connections_with_a_stateless_reset(server, pki, www):
    """The connection's worker died; its replacement gets the client's next
    packet and answers with the stateless reset its predecessor promised
    (the token comes from the master's secret, RFC 9000 §10.3)."""
    srv = start(server, pki, www)
    srv.expect_crashes = True
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        assert c.get("/hello")[0] == 200
        quic = c.proto._quic
        cid = quic._peer_cid.cid
        token = quic._peer_cid.stateless_reset_token  # from our transport parameters
        assert len(token) == 16
        [worker] = web_workers(srv)
        os.kill(worker, signal.SIGKILL)
        srv.wait_log("worker 0 started", count=2)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(1.0)
        # a short-header packet on the old connection, as its client would send
        probe = bytes([0x40 | 0x01]) + cid + os.urandom(40)
        deadline = time.monotonic() + 10
        while True:  # the new worker may still be starting: its socket queues it
            s.sendto(probe, (HOST, srv.port))
            try:
                data, _ = s.recvfrom(65536)
                break
            except socket.timeout:
                assert time.monotonic() < deadline
        s.close()
    assert len(data) < len(probe) and data[0] & 0xC0 == 0x40
    assert data[-16:] == token


def braces(text: str) -> str:
    """Text that goes into the server fixture's template itself (its braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


def test_fastcgi_and_the_cache_over_h3(server, pki, www, php_fpm, upstream_app):
    """PHP-FPM (a body both ways, HTTPS in $_SERVER) and a cached proxy
    route: the second answer is the cache's."""
    from tests.e2e.test_fastcgi import LAB
    fpm = php_fpm(children=2)
    up = upstream_app()
    routes = (  # a value the template takes as it is (no braces doubled)
        f"      - {{path: '~ [^/]\\.php$', fastcgi: {{upstream: php, root: {LAB}}}}}\n"
        f'      - {{path: /c/, proxy: {{url: "{up.url}", strip_prefix: /c, cache: {{zone: z}}}}}}\n')
    head = braces(f'upstreams: {{php: {{servers: ["{fpm.addr}"], keepalive: 4}}}}\n'
                  'cache_zones: {z: {max_size: 8m}}\n')
    srv = start(server, pki, www, head=head, extra_routes=routes)
    body = os.urandom(300_000)
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        status, _, out = c.get("/env.php?a=1")
        assert status == 200, out
        env = json.loads(out)
        assert env["get"] == {"a": "1"} and env["server"]["HTTPS"] == "on"
        assert env["server"]["REQUEST_SCHEME"] == "https"
        assert env["server"]["SERVER_PROTOCOL"] == "HTTP/3.0"  # as nginx's $server_protocol
        status, _, out = c.request("POST", "/md5.php", [("content-length", str(len(body)))],
                                   body)
        assert status == 200, out
        assert out.split()[:2] == [hashlib.md5(body).hexdigest().encode(), str(len(body)).encode()]
        path = "/c/headers?set=Cache-Control:max-age%3D60"
        first = c.get(path)
        second = c.get(path)
        assert first[0] == second[0] == 200 and first[2] == second[2]
        assert "hit" not in dict(first[1])["cache-status"]
        assert dict(second[1])["cache-status"].startswith("scalws; hit")


def rss_kib(pid) -> int:
    # RssAnon: the process's own memory; the code an attack runs for the first
    # time since the worker dropped its start-up's pages (forkmem.py) is the page cache's
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))


def test_a_handshake_flood_meets_retry_and_others_are_served(server, pki, www):
    """300 first Initials from one socket, none of them followed up: past
    retry_above handshakes under way the worker answers with Retry (a
    packet, no state), its memory stays bounded, and a real client is served."""
    from aioquic.quic.connection import QuicConnection
    srv = start(server, pki, www, head="http3: {{retry_above: 50, handshake_timeout: 2s}}\n")
    [worker] = web_workers(srv)
    rss0 = rss_kib(worker)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    cfg = H3(srv.port, cafile=pki.ca.cert_path).cfg
    now = time.monotonic()
    for _ in range(300):
        q = QuicConnection(configuration=cfg)
        q.connect((HOST, srv.port), now=now)
        for data, _ in q.datagrams_to_send(now=now):
            s.sendto(data, (HOST, srv.port))
    retries = handshakes = 0
    s.settimeout(1.0)
    try:
        while True:
            data, _ = s.recvfrom(65536)
            if data[0] & 0xF0 == 0xF0:
                retries += 1
            elif data[0] & 0xF0 == 0xC0:
                handshakes += 1  # an Initial of ours: a handshake begun
    except socket.timeout:
        pass
    s.close()
    assert retries >= 240, (retries, handshakes)
    assert rss_kib(worker) - rss0 < 16 * 1024
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        assert c.get("/hello")[0] == 200
