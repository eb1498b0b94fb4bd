"""HTTP/2 priorities (RFC 9218; issue 16 point 3): real scalwsd processes and
a real client (python-hyper's h2, with PRIORITY_UPDATE frames written by
hand) that reads one connection at a limited rate, so that the server has to
choose which stream's bytes go next. Shown on a page's worth of static
assets: the urgent ones finish first; PRIORITY_UPDATE raises a stream mid-
download; incremental streams share the connection round-robin while
non-incremental ones of one urgency go one after another; a proxied
response's `priority` field (RFC 9218 §8) moves its stream too.

Two ways of limiting the client: by flow control (a 64 KiB connection
window, given back as the client processes DATA: the server never has more
than that in flight and picks every frame) and by TCP (windows wide open, a
small receive buffer, the socket read at a fixed rate: the server's socket
fills, and what it queued before an urgent request arrived is what the
urgent response waits behind)."""
from __future__ import annotations

import socket
import ssl
import struct
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

HOST = "127.0.0.1"
KIB, MIB = 1024, 1024 * 1024
PRIORITY_UPDATE = 0x10

SITE = """
workers: 1
log: {{level: info, access: {tmp}/access.log}}
{http2}
sites:
  - listen: ["127.0.0.1:{port} h2c", "127.0.0.1:{port2} tls"]
    server_names: [localhost]
    tls: {{cert: {cert}, key: {key}}}
    routes:
      - path: /files/
        static: {{root: {tmp}/www}}
      - path: /up/
        proxy: {{url: "{upstream}", strip_prefix: /up}}
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from tests.tlspki import PKI
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def site(server, pki, tmp_path):
    """A server with /files/{bulk,big,urgent,small}.bin; sizes in .sizes."""
    www = tmp_path / "www" / "files"
    www.mkdir(parents=True)
    sizes = {"bulk": 2 * MIB, "big": 10 * MIB, "urgent": 256 * KIB, "small": 4 * KIB}
    for name, size in sizes.items():
        (www / f"{name}.bin").write_bytes(bytes([len(name)]) * size)

    def make(upstream=None, http2=""):
        srv = server(SITE, cert=pki.ec.cert_path, key=pki.ec.key_path, http2=http2,
                     upstream=upstream.url if upstream else "http://127.0.0.1:9")
        srv.sizes = sizes
        return srv
    return make


class Client:
    """One HTTP/2 connection (h2c, or TLS with ALPN h2) that records, per
    stream, the bytes received, and the order in which streams ended.

    window: the connection's receive window. 65535 (the initial one) with
    h2's own WINDOW_UPDATE policy (half the window processed) keeps the
    server flow-control limited; a large one leaves TCP as the limit.
    rate: bytes per second read from the socket (None: as fast as Python
    goes); rcvbuf: SO_RCVBUF, set before connecting."""

    def __init__(self, port, *, window=65535, rate=None, rcvbuf=None, tls=None):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(30)
        s.connect((HOST, port))
        if tls:
            s = tls.wrap_socket(s, server_hostname="localhost")
            assert s.selected_alpn_protocol() == "h2"
        self.sock = s
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        # Stream windows never bind: the connection's (or TCP) does.
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
        if window > 65535:
            self.conn.increment_flow_control_window(window - 65535)
        self.flush()
        self.rate = rate
        self.t0 = time.monotonic()
        self.read_total = 0
        self.got = {}        # stream id -> body bytes so far
        self.status = {}     # stream id -> :status
        self.headers = {}    # stream id -> response fields
        self.done = []       # stream ids in the order they ended
        self.ended_at = {}   # stream id -> bytes of DATA the connection had carried then
        self.data_total = 0

    def flush(self):
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def get(self, path, priority=None):
        sid = self.conn.get_next_available_stream_id()
        fields = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"),
                  (":path", path)]
        if priority is not None:
            fields.append(("priority", priority))
        self.conn.send_headers(sid, fields, end_stream=True)
        self.got[sid] = 0
        self.flush()
        return sid

    def priority_update(self, sid, value):
        """RFC 9218 §7.1: PRIORITY_UPDATE on stream 0 naming `sid` (h2 has
        no API for it; the frame goes between h2's whole frames)."""
        self.flush()
        payload = struct.pack(">I", sid) + value.encode()
        self.sock.sendall(struct.pack(">I", len(payload))[1:] + bytes([PRIORITY_UPDATE, 0]) +
                          struct.pack(">I", 0) + payload)

    def pump(self):
        """Reads once (paced to `rate`) and handles what came."""
        if self.rate:
            ahead = self.read_total / self.rate - (time.monotonic() - self.t0)
            if ahead > 0:
                time.sleep(ahead)
        data = self.sock.recv(16 * KIB)
        if not data:
            raise AssertionError(f"the server closed the connection; ended: {self.done}")
        self.read_total += len(data)
        for ev in self.conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                self.headers[ev.stream_id] = dict(ev.headers)
                self.status[ev.stream_id] = self.headers[ev.stream_id][":status"]
            elif isinstance(ev, h2.events.DataReceived):
                self.got[ev.stream_id] += len(ev.data)
                self.data_total += len(ev.data)
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                self.done.append(ev.stream_id)
                self.ended_at[ev.stream_id] = self.data_total
            elif isinstance(ev, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                raise AssertionError(f"unexpected {ev}")
        self.flush()

    def until(self, pred, timeout=60):
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, f"timed out; ended: {self.done}, got: {self.got}"
            self.pump()

    def finish(self, sids, timeout=60):
        self.until(lambda: all(s in self.done for s in sids), timeout)

    def close(self):
        self.sock.close()


def rank(c, sid):
    return c.done.index(sid)


# ---- urgency ----------------------------------------------------------------------------

def test_urgent_assets_overtake_thirty_bulk_downloads(site):
    """30 large assets asked first (15 at u=5, 15 at the default u=3), then,
    once the bulk flows, two u=0 and two u=1 ones: the urgent four end
    before a second bulk asset does, u=0 before u=1, and every u=3 asset
    before any u=5 one."""
    srv = site()
    c = Client(srv.port)
    low = [c.get(f"/files/bulk.bin?low={i}", "u=5") for i in range(15)]
    mid = [c.get(f"/files/bulk.bin?mid={i}") for i in range(15)]
    c.until(lambda: c.data_total >= 512 * KIB)   # the server is well into the bulk
    before = c.data_total
    u0 = [c.get(f"/files/small.bin?u0={i}", "u=0") for i in range(2)]
    u1 = [c.get(f"/files/urgent.bin?u1={i}", "u=1, i") for i in range(2)]
    c.finish(u0 + u1)
    urgent_bytes = 2 * srv.sizes["small"] + 2 * srv.sizes["urgent"]
    overtaken_by = max(c.ended_at[s] for s in u0 + u1) - before - urgent_bytes
    bulk_done_meanwhile = [s for s in c.done if s in low + mid]
    c.finish(low + mid, timeout=120)
    c.close()
    assert all(c.status[s] == "200" for s in low + mid + u0 + u1)
    assert all(c.got[s] == srv.sizes["bulk"] for s in low + mid)
    assert all(c.got[s] == srv.sizes["small"] for s in u0)
    assert all(c.got[s] == srv.sizes["urgent"] for s in u1)
    # The server had at most its window (64 KiB) of bulk in flight when the
    # urgent requests came; a frame or two more is scheduling slack.
    assert overtaken_by <= 128 * KIB, overtaken_by
    assert len(bulk_done_meanwhile) <= 1, c.done
    assert max(rank(c, s) for s in u0) < min(rank(c, s) for s in u1), c.done
    assert max(rank(c, s) for s in mid) < min(rank(c, s) for s in low), c.done


def bulk_ahead_of_urgent(srv, port, tls=None):
    """Windows wide open, the socket read at 16 MiB/s through a 32 KiB
    receive buffer, a 10 MiB u=5 download under way, then a u=0 request:
    the bulk bytes that reached the client before the urgent answer did."""
    c = Client(port, window=1 << 30, rate=16 * MIB, rcvbuf=32 * KIB, tls=tls)
    big = c.get("/files/big.bin", "u=5")
    c.until(lambda: c.got[big] >= 2 * MIB)
    before = c.data_total
    urgent = c.get("/files/small.bin", "u=0")
    c.finish([urgent])
    overtaken_by = c.ended_at[urgent] - before - srv.sizes["small"]
    c.finish([big])
    c.close()
    assert c.got[big] == srv.sizes["big"] and c.got[urgent] == srv.sizes["small"]
    print(f"bulk bytes ahead of the urgent answer: {overtaken_by}")
    return overtaken_by


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
def test_a_10mib_download_delays_an_urgent_answer_by_about_one_batch(site, pki, tls):
    """The server's socket is full when the urgent request comes. What
    reaches the client before the urgent answer is what the server had
    already handed to the kernel or queued: about one output batch
    (64 KiB), not the megabytes a socket buffer can hold."""
    srv = site()
    ctx = None
    if tls:
        ctx = ssl.create_default_context(cafile=pki.ca.cert_path)
        ctx.set_alpn_protocols(["h2"])
    overtaken_by = bulk_ahead_of_urgent(srv, srv.ports[1] if tls else srv.port, ctx)
    assert overtaken_by <= 320 * KIB, overtaken_by


def test_without_an_unsent_limit_the_socket_buffer_decides(site):
    """`http2: {unsent_limit: 0}` leaves the kernel's socket buffer unbounded
    by TCP_NOTSENT_LOWAT: the urgent answer of the test above then waits
    behind what the socket had taken, megabytes here (3.1 MiB measured),
    not one batch. What the key turns off, and that it does."""
    with open("/proc/sys/net/ipv4/tcp_notsent_lowat") as f:
        if int(f.read()) < 1 << 30:
            pytest.skip("net.ipv4.tcp_notsent_lowat is set: without ours, the kernel's applies")
    srv = site(http2="http2: {unsent_limit: 0}")
    overtaken_by = bulk_ahead_of_urgent(srv, srv.port)
    assert overtaken_by > 1 * MIB, overtaken_by


# ---- reprioritization and incremental delivery -----------------------------------------

def test_priority_update_raises_a_stream_mid_download(site):
    """Four 2 MiB assets at u=5, not incremental: one after another, in the
    order they were asked for. A PRIORITY_UPDATE that makes the last one
    u=0 while the first is being sent lets it overtake all three; one that
    lowers the first to u=7 sends it last. On a second connection without
    updates the order stays the asked one."""
    srv = site()
    c = Client(srv.port)
    a, b, d, e = (c.get(f"/files/bulk.bin?{k}", "u=5") for k in "abde")
    c.until(lambda: c.got[a] >= 256 * KIB)
    assert c.got[b] == c.got[d] == c.got[e] == 0   # non-incremental: a alone so far
    c.priority_update(e, "u=0")
    c.priority_update(a, "u=7")
    c.finish([a, b, d, e])
    c.close()
    assert c.done == [e, b, d, a], c.done
    assert all(c.got[s] == srv.sizes["bulk"] for s in (a, b, d, e))
    # The control: no update, the order asked.
    c = Client(srv.port)
    sids = [c.get(f"/files/bulk.bin?{k}", "u=5") for k in "abde"]
    c.finish(sids)
    c.close()
    assert c.done == sids


def test_incremental_streams_share_and_others_queue(site):
    """Four 2 MiB assets at u=3 with `i`: round-robin, so when the first
    ends every other one has most of its bytes. The same four without `i`:
    when the first ends, the others have nothing yet."""
    srv = site()
    size = srv.sizes["bulk"]
    for inc in (True, False):
        c = Client(srv.port)
        sids = [c.get(f"/files/bulk.bin?{k}", "u=3, i" if inc else "u=3") for k in range(4)]
        c.until(lambda: len(c.done) >= 1)
        share = {s: c.got[s] for s in sids if s not in c.done}
        c.finish(sids)
        c.close()
        if inc:
            assert all(v >= size * 3 // 4 for v in share.values()), share
        else:
            assert c.done == sids and all(v == 0 for v in share.values()), share


# ---- a response's own priority (RFC 9218 §8) -------------------------------------------

@pytest.mark.parametrize("client, upstream, where", [
    (None, None, "last"),          # the control: u=3 like the bulk, and asked last
    (None, "u=0", "first"),        # the origin knows better
    ("u=1", "i=?0", "first"),      # the response names no urgency: the client's u=1 stays
    ("u=0", "u=7", "last"),        # the response's parameter wins over the request's
    ("update:u=1", "i=?0", "first"),   # the client's u=1, in a PRIORITY_UPDATE before the HEADERS
    ("update:u=1 u=5", "i=?0", "last"),  # ... which the request's own field replaces
], ids=["none", "upstream-u0", "merge-client-u1", "upstream-overrides-u0", "merge-early-update-u1",
        "field-replaces-early-update"])
def test_a_proxied_response_priority_moves_its_stream(site, upstream_app, client, upstream, where):
    """Six 2 MiB static assets at the default urgency go one after another;
    a 512 KiB proxied download asked once they flow comes after all of them
    at the same urgency, and before the second of them when its merged
    priority (each parameter the upstream's `priority` gives, else the
    client's, else the default) is more urgent. The client's may come in a
    PRIORITY_UPDATE sent before the request's HEADERS, unless the request
    has its own `priority` field ("update:EARLY [FIELD]")."""
    up = upstream_app()
    srv = site(upstream=up)
    c = Client(srv.port)
    bulk = [c.get(f"/files/bulk.bin?{k}") for k in range(6)]
    c.until(lambda: c.data_total >= 256 * KIB)
    q = f"&priority={upstream.replace('=', '%3D')}" if upstream else ""
    if client and client.startswith("update:"):
        early, _, client = client[len("update:"):].partition(" ")
        c.priority_update(c.conn.get_next_available_stream_id(), early)
    px = c.get(f"/up/download?size={512 * KIB}{q}", client or None)
    c.finish(bulk + [px])
    c.close()
    assert c.status[px] == "200" and c.got[px] == 512 * KIB
    if upstream:
        assert c.headers[px].get("priority") == upstream   # passed on as it came
    if where == "first":
        assert rank(c, px) <= 1, c.done
    else:
        assert c.done[-1] == px, c.done
