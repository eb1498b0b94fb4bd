"""HTTP/3 on the route kinds test_h3.py does not cover: managed
applications (uvicorn and Node.js behind `app:` routes) and an upstream's
interim answers (103 Early Hints) passed on over h3, with their field
names lowercase as RFC 9114 §4.2 requires (the upstream's come in mixed
case; nghttp3 lowercases what it copies, and this holds it to that)."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.e2e.h3client import H3
from tests.e2e.test_h3 import braces, pki, start, www  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(90)

APPS = os.path.join(os.path.dirname(__file__), "apps")


def test_an_upstreams_103_reaches_the_client_with_lowercase_names(server, pki, www,
                                                                  raw_upstream):
    route = (f'      - {{path: /raw/, proxy: {{url: "{raw_upstream.url}", strip_prefix: /raw, '
             'headers: {response: {remove: [X-Hidden]}}}}\n')
    srv = start(server, pki, www, extra_routes=route)
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        status, _, body = c.get("/raw/103")
        assert status == 200 and body == b"final RAWB\n"
        [stream] = [a for a in c.proto.answers.values() if a.get("interim")]
        interim = stream["interim"]
        # two 103s in order; hop-by-hop fields and the removed one dropped
        assert [dict(i)[":status"] for i in interim] == ["103", "103"]
        assert [k for k, _ in interim[0]] == [":status", "link"], interim[0]
        assert dict(interim[0])["link"] == "</a.css>; rel=preload"
        assert dict(interim[1])["link"] == "</b.js>; rel=preload"
        # a name of no QPACK static entry goes as a literal: lowercased by us
        status, _, body = c.get("/raw/103-hint")
        assert status == 200 and body == b"ok"
        [hint] = [a["interim"] for a in c.proto.answers.values()
                  if a.get("interim") and a is not stream]
        assert hint == [[(":status", "103"), ("link", "</a.css>; rel=preload"),
                         ("x-hint", "Yes")]]
        # and the connection goes on
        assert c.get("/hello")[0] == 200


def test_managed_apps_over_h3(server, pki, www):
    """An `app:` route to uvicorn (and to Node.js where it is installed):
    answers on one connection, concurrently, from the app's processes."""
    node = shutil.which("node") is not None
    head = braces(f"apps:\n  api:\n    asgi: \"asgi_app:app\"\n    dir: {APPS}\n    workers: 2\n"
                  + (f"  node:\n    command: [node, server.js]\n    dir: {APPS}\n" if node else ""))
    routes = "      - {path: /api/, app: api}\n"
    if node:
        routes += "      - {path: /node/, app: node}\n"
    srv = start(server, pki, www, head=head, extra_routes=routes)
    with H3(srv.port, cafile=pki.ca.cert_path, timeout=20) as c:
        answers = c.many([("GET", f"/api/pid?{i}", [], b"") for i in range(20)])
        assert [a[0] for a in answers] == [200] * 20
        pids = {a[2].split()[0] for a in answers}
        assert all(a[2].endswith(b" pid\n") for a in answers), answers[0]
        assert 1 <= len(pids) <= 2 and all(p.isdigit() for p in pids)
        slow = c.many([("GET", "/api/slow?0.3", [], b""), ("GET", "/hello", [], b"")])
        assert [a[0] for a in slow] == [200, 200] and slow[0][2].endswith(b" slow\n")
        if node:
            status, headers, body = c.get("/node/hello?x=1")
            assert status == 200 and b" node /node/hello?x=1" in body, body
            assert dict(headers)["content-type"] == "text/plain"


def udp_counters():
    with open("/proc/net/snmp") as f:
        names, values = [line.split()[1:] for line in f if line.startswith("Udp:")]
    return dict(zip(names, map(int, values)))


@pytest.mark.parametrize("gso", ["on", "off"])
def test_gso_sends_a_connections_packets_in_one_call_and_off_one_each(server, pki, www, gso):
    """A 3 MiB answer: with GSO the kernel counts one datagram sent per
    sendmsg of up to 64 packets (the client's receive counter sees each
    packet); with `http3.gso: off` one per packet. Either way it arrives
    whole."""
    import hashlib
    srv = start(server, pki, www, head="http3: {{gso: %s}}\n" % gso)
    with H3(srv.port, cafile=pki.ca.cert_path, timeout=30) as c:
        before = udp_counters()
        status, _, body = c.get("/big.bin")
        after = udp_counters()
        assert status == 200
        assert hashlib.sha256(body).digest() == \
            hashlib.sha256((www / "big.bin").read_bytes()).digest()
        assert [a[0] for a in c.many([("GET", "/hello", [], b"")] * 50)] == [200] * 50
    got = after["InDatagrams"] - before["InDatagrams"]  # ours (segments) + the client's acks
    sent = after["OutDatagrams"] - before["OutDatagrams"]  # the same, a GSO call counted once
    assert got > 2000, got
    if gso == "on":
        assert sent < got / 2, (sent, got)
    else:
        assert sent > got * 0.9, (sent, got)


def test_a_static_answers_field_names_are_lowercase(server, pki, www):
    """The static handler names its fields as HTTP/1 does (Last-Modified,
    ETag, Accept-Ranges, Vary); over h3 each goes out lowercase (RFC 9114
    4.2: a client must treat an uppercase name as malformed)."""
    srv = start(server, pki, www)
    with H3(srv.port, cafile=pki.ca.cert_path) as c:
        status, headers, body = c.get("/style.css")
        assert status == 200 and body == b"body { color: red }\n" * 50
        names = [k for k, _ in headers]
        assert {"last-modified", "etag", "accept-ranges", "vary", "content-type"} <= set(names)
        assert all(k == k.lower() for k in names), names
