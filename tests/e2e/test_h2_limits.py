"""limits.keepalive_requests on HTTP/2 (as nginx counts it since 1.19.7):
after that many streams, the graceful stop's two GOAWAYs and a close that
serves the streams in flight; and the rapid reset's single answer. Real
scalwsd processes; a raw HTTP/2 client and curl."""
from __future__ import annotations

import struct
import subprocess

import pytest

from tests.e2e.h2raw import (CANCEL, DATA, END_STREAM, ENHANCE_YOUR_CALM, GOAWAY, HEADERS, NO_ERROR,
                             PING, RST_STREAM, Client, frame, request)
from tests.tlspki import PKI

SITE = """
workers: 1
limits: {{keepalive_requests: {kr}}}
http2: {{reset_burst: 20, reset_rate: 1}}
sites:
  - listen: ["127.0.0.1:{port} h2c", "127.0.0.1:{port2} tls"]
    server_names: [localhost]
    tls: {{cert: {cert}, key: {key}}}
    routes:
      - path: /
        respond: {{body: "ok\\n"}}
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return PKI.localhost(tmp_path_factory.mktemp("pki"))


def start(server, pki, kr):
    return server(SITE, kr=kr, cert=pki.ec.cert_path, key=pki.ec.key_path)


def goaways(frames):
    return [struct.unpack(">II", f[3][:8]) for f in frames if f[0] == GOAWAY]


def test_keepalive_requests_ends_an_h2_connection_gracefully(server, pki):
    srv = start(server, pki, 3)
    c = Client(srv.port).ready()
    # Three streams: the third is the last the connection takes. GOAWAY
    # "no new streams" (2^31-1) and a PING come with it.
    c.send(request(1) + request(3) + request(5))
    f, seen = c.until(lambda f: f[0] == GOAWAY)
    assert struct.unpack(">II", f[3][:8]) == (0x7FFFFFFF, NO_ERROR), f
    # A stream that crossed the first GOAWAY is still served (RFC 9113 §6.8):
    # the final GOAWAY, once the PING is answered (auto_ack), names it.
    c.send(request(7))
    frames = list(seen)
    while (g := c.read_frame()) is not None:
        frames.append(g)
    assert goaways(frames) == [(7, NO_ERROR)], goaways(frames)
    ended = {f[2] for f in frames if f[0] in (DATA, HEADERS) and f[1] & END_STREAM}
    assert ended == {1, 3, 5, 7}, frames
    assert not [f for f in frames if f[0] == RST_STREAM], frames
    assert any(f[0] == PING for f in seen + frames)


def test_keepalive_requests_loses_nothing_for_a_real_client(server, pki):
    """curl --parallel over TLS, 8 at a time, 300 requests on connections
    that each take 7 streams: every one answered 200 over HTTP/2 (one final
    GOAWAY at once would refuse streams in flight, which curl 7.88 retries
    only once)."""
    srv = start(server, pki, 7)
    out = subprocess.run(["curl", "-sS", "--http2", "--cacert", pki.ca.cert_path, "--parallel",
                          "--parallel-max", "8", "-o", "/dev/null", "-w", "%{http_code} %{http_version}\n",
                          f"https://localhost:{srv.ports[1]}/?n=[1-300]"],
                         capture_output=True, text=True, timeout=120)
    codes = out.stdout.splitlines()
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(codes) == 300 and set(codes) == {"200 2"}, (len(codes), set(codes))


def test_rapid_reset_over_tls_is_one_goaway(server, pki):
    """The rapid reset is answered by the budget alone: one GOAWAY
    ENHANCE_YOUR_CALM, no other GOAWAY before or after it (libnghttp2's own
    limiter used to say INTERNAL_ERROR first over TLS)."""
    srv = start(server, pki, 1000)
    c = Client(srv.ports[1], tls_ca=pki.ca.cert_path).ready()
    frames = []
    for i in range(40):
        try:
            c.send(request(1 + 2 * i, end_stream=False) +
                   frame(RST_STREAM, 0, 1 + 2 * i, struct.pack(">I", CANCEL)))
        except (BrokenPipeError, ConnectionResetError, OSError):
            break
    while (g := c.read_frame()) is not None:
        frames.append(g)
    got = goaways(frames)
    assert len(got) == 1 and got[0][1] == ENHANCE_YOUR_CALM, got
