"""HTTP/2 DoS budgets (issue 16, docs/adr/0016-h2-dos-budgets.md): attacks by
raw frames against a real scalwsd, each answered with the RFC's frame and
error code, with the worker's memory bounded and another client, connected
before the attack, still served after it."""
from __future__ import annotations

import os
import re
import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest
from hpack import Encoder

from tests.e2e.conftest import recv_to_close
from tests.e2e.h2raw import (ACK, CANCEL, COMPRESSION_ERROR, CONTINUATION, DATA, END_HEADERS,
                             END_STREAM, ENHANCE_YOUR_CALM, GOAWAY, HEADERS, HOST, NO_ERROR, PING,
                             PRIORITY, PRIORITY_UPDATE, PROTOCOL_ERROR, REFUSED_STREAM, RST_STREAM,
                             SETTINGS, WINDOW_UPDATE, Client, block, frame, request)
from tests.tlspki import PKI

CONFIG = """
workers: 1
log: {{level: info}}
limits: {{header_timeout: 2s, keepalive_timeout: 30s, send_timeout: 2s}}
status: {{listen: "127.0.0.1:{port3}", file: "{tmp}/stats.bin"}}
http2:
  max_concurrent_streams: 8
  max_header_list_size: 4k
  header_table_size: 1k
  max_continuations: 4
  reset_burst: 20
  reset_rate: 1
  frame_burst: 50
  frame_rate: 1
sites:
  - listen: ["127.0.0.1:{port} h2c", "127.0.0.1:{port2} tls"]
    server_names: [localhost]
    tls: {{cert: {cert}, key: {key}}}
    routes:
      - path: /files/
        static: {{root: {tmp}/www}}
      - path: /
        respond: {{body: "ok\\n"}}
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def srv(server, pki, tmp_path):
    (tmp_path / "www" / "files").mkdir(parents=True)
    (tmp_path / "www" / "files" / "big.bin").write_bytes(os.urandom(4 << 20))
    return server(CONFIG, cert=pki.ec.cert_path, key=pki.ec.key_path)


def worker(srv):
    """The one worker's pid (the master's log names it; TLS adds a keeper)."""
    pids = re.findall(r"worker 0 started \(pid (\d+)", srv.log())
    assert pids and int(pids[-1]) in srv.workers(), srv.log()
    return int(pids[-1])


def rss_kib(pid):
    # RssAnon: the process's own memory; the code an attack runs for the first
    # time since the worker dropped its start-up's pages (forkmem.py) is the page cache's
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


class Attack:
    """Around an attack: a bystander connected before it must be served
    after it, the worker's RSS must stay within `rss_kib` of its start, and
    the worker must be the same process."""

    def __init__(self, srv, rss_kib_max=2 * 1024):
        self.srv = srv
        self.max = rss_kib_max

    def __enter__(self):
        self.pid = worker(self.srv)
        self.by = Client(self.srv.port).ready()
        assert self.by.get(1)[1] == b"ok\n"
        self.rss = rss_kib(self.pid)
        return self

    def __exit__(self, *exc):
        if exc[0] is not None:
            return False
        assert self.by.get(3)[1] == b"ok\n"  # the bystander's connection lives on
        self.by.close()
        out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-w", "%{http_version}",
                              f"http://127.0.0.1:{self.srv.port}/"],
                             capture_output=True, text=True, timeout=10)
        assert out.stdout == "ok\n2", out
        assert worker(self.srv) == self.pid
        grown = rss_kib(self.pid) - self.rss
        assert grown < self.max, f"worker RSS grew by {grown} KiB"
        return False


def calm_count(srv):
    """Connections ended by a budget: the log's lines (one per connection),
    which must agree with scalws_http2_calm_total in /metrics."""
    logged = srv.log().count("GOAWAY ENHANCE_YOUR_CALM")
    with socket.create_connection((HOST, srv.ports[2]), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        body = recv_to_close(s).decode()
    m = re.search(r"^scalws_http2_calm_total (\d+)$", body, re.M)
    assert m, body[:2000]
    assert int(m.group(1)) == logged, (m.group(0), logged)
    return logged


def test_check_config_refuses_bad_http2_values(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("http2:\n  max_concurrent_streams: 128\n  reset_rate: 0\n  frame_burst: lots\n"
                   "sites:\n  - listen: 127.0.0.1:8081\n    routes: [{path: /, respond: 200}]\n")
    scalwsd = os.path.join(os.path.dirname(sys.executable), "scalwsd")
    r = subprocess.run([scalwsd, "--check-config", str(bad)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1
    assert r.stderr.splitlines()[:2] == [
        f"{bad}:3:15: http2.reset_rate: must be between 1 and 1000000, got 0",
        f"{bad}:4:16: http2.frame_burst: expected an integer, got a string 'lots'"]


# ---- streams ------------------------------------------------------------------------------------

def test_settings_from_the_http2_block(srv):
    c = Client(srv.port)
    f = c.read_frame()
    assert f[0] == SETTINGS and not f[1] & ACK
    settings = dict(struct.unpack(">HI", f[3][i:i + 6]) for i in range(0, len(f[3]), 6))
    assert settings[0x3] == 8             # MAX_CONCURRENT_STREAMS
    assert settings[0x4] == 256 * 1024    # INITIAL_WINDOW_SIZE (default)
    assert settings[0x6] == 4096          # MAX_HEADER_LIST_SIZE
    assert settings[0x1] == 1024          # HEADER_TABLE_SIZE
    c.close()


def test_streams_over_the_limit_are_refused_and_the_connection_lives(srv):
    with Attack(srv):
        # Before the client acknowledged our SETTINGS, a stream over the
        # limit is refused (RFC 9113 §5.1.2: REFUSED_STREAM, retryable);
        # after it, nghttp2 makes it a connection error PROTOCOL_ERROR
        # (test_h2.py's test_settings_and_the_concurrent_stream_limit).
        c = Client(srv.port, auto_ack=False)
        c.send(b"".join(request(1 + 2 * i, end_stream=False) for i in range(9)))
        f, _ = c.until(lambda f: f[0] == RST_STREAM)
        assert f[2] == 17 and struct.unpack(">I", f[3])[0] == REFUSED_STREAM
        # Once one of the eight ends, a new stream is served.
        c.send(frame(RST_STREAM, 0, 1, struct.pack(">I", CANCEL)))
        assert c.get(19)[1] == b"ok\n"
        c.close()


# ---- header blocks --------------------------------------------------------------------------------

def test_header_list_over_the_limit_is_431(srv):
    with Attack(srv):
        c = Client(srv.port).ready()
        big = [(f"x-pad-{i}", "v" * 100) for i in range(40)]  # ~5.6 KiB by RFC 9113 §6.5.2
        c.send(request(1, extra=big))
        f, _ = c.until(lambda f: f[0] == HEADERS and f[2] == 1)
        assert f[3][":status"] == "431", f
        # Under the limit, the same connection serves.
        assert c.get(3, "/")[0] == "200"
        c.close()


def test_one_field_over_64k_is_431(srv):
    """A single field longer than HPACK's 64 KiB (which our decoder does not
    keep, so the list limit never counts it): 431 as for a long list, not
    a reset, and the connection goes on. HEADERS and four CONTINUATIONs
    (max_continuations)."""
    with Attack(srv):
        c = Client(srv.port).ready()
        blk = block(extra=[("x-big", "v" * 70_000)])
        pieces = [blk[i:i + 16_384] for i in range(0, len(blk), 16_384)]
        assert len(pieces) == 5
        frames = frame(HEADERS, END_STREAM, 1, pieces[0])
        frames += b"".join(frame(CONTINUATION, END_HEADERS if i == len(pieces) - 1 else 0, 1, p)
                           for i, p in enumerate(pieces[1:], 1))
        c.send(frames)
        f, _ = c.until(lambda f: f[0] in (HEADERS, RST_STREAM) and f[2] == 1)
        assert f[0] == HEADERS and f[3][":status"] == "431", f
        assert c.get(3, "/")[0] == "200"
        c.close()


def test_hpack_table_larger_than_announced_is_a_compression_error(srv):
    with Attack(srv):
        c = Client(srv.port).ready()
        # A dynamic table size update to 4096 (RFC 7541 §6.3) above the 1k
        # we announced (SETTINGS_HEADER_TABLE_SIZE): RFC 7541 §4.2.
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x3f\xe1\x1f" + block()))
        assert c.goaway()[1] == COMPRESSION_ERROR


def test_continuation_flood_is_calmed(srv):
    with Attack(srv):
        c = Client(srv.port).ready()
        # A header block that never ends: HEADERS and CONTINUATIONs past
        # max_continuations (4), each full of header bytes (CVE-2024-27316).
        enc = Encoder()
        enc.header_table_size = 0
        piece = enc.encode([(f"x-{i}", "y" * 1000) for i in range(14)], huffman=False)[1:]
        frames = frame(HEADERS, END_STREAM, 1, block())
        frames += b"".join(frame(CONTINUATION, 0, 1, piece) for _ in range(50))
        try:
            c.send(frames)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may close before the last frames arrive
        assert c.goaway()[1] == ENHANCE_YOUR_CALM
    assert calm_count(srv) == 1


def test_unfinished_header_block_times_out_despite_a_trickle(srv):
    with Attack(srv):
        c = Client(srv.port).ready()
        hb = block(extra=[("x-slow", "z" * 100)])
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, hb)[:20])
        start = time.monotonic()
        # One more byte every 0.3 s: each is progress for the socket, none
        # for the header block, whose 2 s header_timeout still runs.
        c.sock.settimeout(0.3)
        at = 20
        got = None
        while got is None and time.monotonic() - start < 10:
            try:
                got = c.read_frame()
            except socket.timeout:
                c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, hb)[at:at + 1])
                at += 1
            if got is not None and got[0] != GOAWAY:
                got = None  # the end of the start (WINDOW_UPDATE)
        c.sock.settimeout(10)
        assert got is not None and got[0] == GOAWAY, got
        assert struct.unpack(">II", got[3][:8])[1] == NO_ERROR
        assert time.monotonic() - start < 2 + 2.5  # header_timeout, the tick, slack
        assert c.read_frame() is None
    assert "client timed out sending a request" in srv.log()


def test_idle_connection_gets_goaway_and_is_closed(server, pki, tmp_path):
    (tmp_path / "www").mkdir()
    srv = server(CONFIG.replace("keepalive_timeout: 30s", "keepalive_timeout: 1s"),
                 cert=pki.ec.cert_path, key=pki.ec.key_path)
    c = Client(srv.port).ready()
    start = time.monotonic()
    assert c.get(1)[0] == "200"
    assert c.goaway() == (1, NO_ERROR)
    assert 0.5 < time.monotonic() - start < 1 + 2.5  # keepalive_timeout, the tick, slack


# ---- floods -------------------------------------------------------------------------------------

def test_rapid_reset_is_calmed(srv):
    with Attack(srv):
        c = Client(srv.port).ready()
        # Streams opened and cancelled at once, past reset_burst (20): CVE-2023-44487.
        burst = b"".join(request(1 + 2 * i, end_stream=False) +
                         frame(RST_STREAM, 0, 1 + 2 * i, struct.pack(">I", CANCEL))
                         for i in range(40))
        try:
            c.send(burst)
        except (BrokenPipeError, ConnectionResetError):
            pass
        last, code = c.goaway()
        assert code == ENHANCE_YOUR_CALM  # ours, before nghttp2's INTERNAL_ERROR
        assert last <= 41  # stream 41's RST_STREAM was the 21st
    assert calm_count(srv) == 1
    assert "rapid reset" in srv.log()


def test_rapid_reset_over_tls_is_calmed(srv, pki):
    with Attack(srv):
        c = Client(srv.ports[1], tls_ca=pki.ca.cert_path).ready()
        for i in range(40):
            try:
                c.send(request(1 + 2 * i, end_stream=False) +
                       frame(RST_STREAM, 0, 1 + 2 * i, struct.pack(">I", CANCEL)))
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                break
        assert c.goaway()[1] == ENHANCE_YOUR_CALM


def _open_stream(c):
    c.send(request(1, end_stream=False))  # a stream to flood with empty DATA
    c.until(lambda f: f[0] == DATA and f[2] == 1 and f[1] & END_STREAM)


FLOODS = {
    "settings": lambda: frame(SETTINGS, 0, 0),
    "ping": lambda: frame(PING, 0, 0, b"12345678"),
    "empty_data": lambda: frame(DATA, 0, 1),
    "window_update": lambda: frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)),
    "priority": lambda: frame(PRIORITY, 0, 5, struct.pack(">IB", 3, 16)),
}
# PRIORITY_UPDATE and frames of unknown types: nghttp2 skips their bytes
# without a callback (ADR 0016); test_skipped_frames_cost_only_their_bytes.


@pytest.mark.parametrize("kind", sorted(FLOODS))
def test_frame_flood_is_calmed(srv, kind):
    with Attack(srv):
        c = Client(srv.port).ready()
        _open_stream(c)
        # frame_burst (50) of them pass, the rest find the bucket empty.
        try:
            c.send(FLOODS[kind]() * 200)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert c.goaway()[1] == ENHANCE_YOUR_CALM
    assert calm_count(srv) == 1
    assert "flood" in srv.log()


def test_skipped_frames_cost_only_their_bytes(srv):
    """Frames of an unknown type are skipped unparsed: no answer, no
    budget, and the connection serves on."""
    with Attack(srv):
        c = Client(srv.port).ready()
        c.send(frame(0xEE, 0, 0, b"x" * 16) * 2000)
        assert c.get(1)[0] == "200"
        c.close()
    assert calm_count(srv) == 0


def test_priority_update_flood(srv):
    """PRIORITY_UPDATE (RFC 9218) is read, so it spends the frame budget
    like PRIORITY: a flood ends with ENHANCE_YOUR_CALM."""
    with Attack(srv):
        c = Client(srv.port).ready()
        c.send(frame(PRIORITY_UPDATE, 0, 0, struct.pack(">I", 1) + b"u=1") * 1000)
        assert c.goaway()[1] == ENHANCE_YOUR_CALM
    assert calm_count(srv) == 1


def test_frames_within_the_rate_are_served(srv):
    """45 PINGs (and the 2 SETTINGS of the start) stay within frame_burst
    50: no GOAWAY, and the connection serves on."""
    c = Client(srv.port).ready()
    for i in range(3):
        c.send(frame(PING, 0, 0, b"abcdefgh") * 15)
        for _ in range(15):
            c.until(lambda f: f[0] == PING and f[1] & ACK)
    assert c.get(1)[1] == b"ok\n"
    c.close()
    assert calm_count(srv) == 0


def test_zero_window_update_is_a_protocol_error(srv):
    with Attack(srv):
        c = Client(srv.port).ready()
        c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0)))  # RFC 9113 §6.9
        assert c.goaway()[1] == PROTOCOL_ERROR


def test_download_acknowledged_frame_by_frame_is_not_a_flood(srv):
    """A client that sends WINDOW_UPDATE for every DATA frame (stream and
    connection) pays for them with the DATA it receives: 4 MiB in 256
    frames, ~512 WINDOW_UPDATEs, ten times frame_burst."""
    c = Client(srv.port).ready()
    c.send(request(1, "/files/big.bin"))
    got = 0
    while True:
        f = c.read_frame()
        assert f is not None and f[0] != GOAWAY, f
        if f[0] == DATA and f[2] == 1:
            got += len(f[3])
            if f[3]:
                c.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", len(f[3]))) +
                       frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", len(f[3]))))
            if f[1] & END_STREAM:
                break
    assert got == 4 << 20
    c.close()
    assert calm_count(srv) == 0


def test_tiny_frames_earn_no_credit_for_a_flood(srv):
    """A window of 1 byte makes every DATA frame a byte long; each
    acknowledged with the stream's WINDOW_UPDATE plus a PING: the bytes
    earn next to no credit (two frames per 16 KiB; a credit of two per
    frame paid for both forever), so the PINGs run the budget out."""
    with Attack(srv):
        c = Client(srv.port, settings=struct.pack(">HI", 0x4, 1)).ready()
        c.send(request(1, "/files/big.bin"))
        for _ in range(400):
            f, _ = c.until(lambda f: f[0] in (DATA, GOAWAY))
            if f[0] == GOAWAY:
                assert struct.unpack(">I", f[3][4:8])[0] == ENHANCE_YOUR_CALM
                break
            assert len(f[3]) == 1
            c.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 1)) + frame(PING, 0, 0, b"12345678"))
        else:
            raise AssertionError("400 one-byte frames paid for 400 PINGs and 400 WINDOW_UPDATEs")
    assert calm_count(srv) == 1


# ---- a reader that never reads -------------------------------------------------------------------

def test_stream_that_never_opens_its_window_is_dropped(srv):
    with Attack(srv):
        # INITIAL_WINDOW_SIZE 0 (RFC 9113 §6.5.2): no DATA may come, and
        # no WINDOW_UPDATE ever opens it; PINGs keep the socket busy.
        c = Client(srv.port, settings=struct.pack(">HI", 0x4, 0)).ready()
        c.send(b"".join(request(1 + 2 * i, "/files/big.bin") for i in range(8)))
        start = time.monotonic()
        c.sock.settimeout(0.5)
        got = None
        while time.monotonic() - start < 10:
            try:
                got = c.read_frame()
            except socket.timeout:
                c.send(frame(PING, 0, 0, b"stillhere"[:8]))
                continue
            if got is None or got[0] == GOAWAY:
                break
            assert got[0] != DATA, got
        assert got is not None and got[0] == GOAWAY, got
        assert struct.unpack(">II", got[3][:8])[1] == NO_ERROR
        assert time.monotonic() - start < 2 + 2.5  # send_timeout, the tick, slack
        c.sock.settimeout(10)
        assert c.read_frame() is None
    assert "client timed out reading the response" in srv.log()


def test_proxied_downloads_that_are_never_read_hold_bounded_memory(server, pki, upstream_app,
                                                                   tmp_path):
    """Eight 64 MiB downloads through the proxy to a client whose windows
    stay closed: the proxy stops reading its upstream (backpressure), the
    worker's RSS stays within 2 MiB (observed: under 0.5 MiB), and
    send_timeout ends the connection."""
    up = upstream_app()
    (tmp_path / "www").mkdir()
    srv = server(CONFIG.replace("      - path: /files/\n",
                                f"      - path: /dl/\n        proxy: {{{{url: \"{up.url}\", "
                                "strip_prefix: /dl}}\n      - path: /files/\n"),
                 cert=pki.ec.cert_path, key=pki.ec.key_path)
    with Attack(srv):
        c = Client(srv.port, settings=struct.pack(">HI", 0x4, 0)).ready()
        c.send(b"".join(request(1 + 2 * i, f"/dl/download?size={64 << 20}") for i in range(8)))
        start = time.monotonic()
        heads = 0
        while True:
            f = c.read_frame()
            assert f is not None and f[0] != DATA, f
            heads += f[0] == HEADERS
            if f[0] == GOAWAY:
                break
        assert heads == 8 and struct.unpack(">II", f[3][:8])[1] == NO_ERROR
        assert time.monotonic() - start < 2 + 2.5  # send_timeout, the tick, slack
        assert c.read_frame() is None


REFUSED_BLOCKS = [([("X-Upper", "1")], False), ([("connection", "keep-alive")], False),
                  ([(":path", "/again")], False), ([("X-Upper", "1")], True)]


def test_a_refused_header_block_leaves_the_connection_on_keepalive(srv):
    # nghttp2 refuses these blocks itself (an uppercase name, a
    # connection-specific field, a pseudo-header twice: RFC 9113 §8.2) with
    # RST_STREAM PROTOCOL_ERROR and no frame callback; `split` sends the
    # bad field in a CONTINUATION. The block is over, so the idle
    # connection is timed by keepalive_timeout (30 s), not by
    # header_timeout (2 s) as an unfinished block would be. One
    # connection per case, all waited on together.
    clients = []
    for bad, split in REFUSED_BLOCKS:
        c = Client(srv.port).ready()
        if split:
            hb = block(extra=[("x-fine", "y" * 40), *bad])
            c.send(frame(HEADERS, END_STREAM, 1, hb[:30]) +
                   frame(CONTINUATION, END_HEADERS, 1, hb[30:]))
        else:
            c.send(request(1, extra=bad))
        f, _ = c.until(lambda f: f[0] == RST_STREAM)
        assert (f[2], struct.unpack(">I", f[3])[0]) == (1, PROTOCOL_ERROR), (bad, split)
        clients.append(c)
    deadline = time.monotonic() + 2 + 2.5  # header_timeout, the tick, slack
    for (bad, split), c in zip(REFUSED_BLOCKS, clients):
        c.sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            f = c.read_frame()
        except socket.timeout:
            f = "still open"
        assert f == "still open", (bad, split, f)
    for c in clients:
        c.sock.settimeout(10)
        assert c.get(3) == ("200", b"ok\n")
    assert "timed out" not in srv.log()
