"""RFC 9218 over HTTP/3 with a real client (aioquic): a PRIORITY_UPDATE
travels on the client's control stream, its request on a stream of its
own, so the update can reach the server first. It is kept until the
request's stream opens and then applies, over the request's own Priority
field (the update is the newer signal: RFC 9218 §7). The session-level
cases (the order writev offers streams in, the bound on updates kept) are
tests/c/test_h3sess.c's."""
from __future__ import annotations

import asyncio

import pytest
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import encode_frame

from tests.e2e.h3client import H3
from tests.e2e.test_h3 import pki, start, www  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(90)

PRIORITY_UPDATE = 0xF0700  # RFC 9218 §7.2, for a request stream


def test_an_update_that_overtakes_its_request_is_kept_for_it(server, pki, www):
    """Two 3 MiB downloads on one connection: A (the default, u=3) asked
    first, then B with `priority: u=7`, whose PRIORITY_UPDATE u=0 left in
    a datagram before B's request did. B ends first: the update was kept
    and taken over B's field. Without it, B (u=7) would wait for A."""
    srv = start(server, pki, www)
    with H3(srv.port, cafile=pki.ca.cert_path, timeout=30) as c:
        p = c.proto

        async def go():
            a = p.send("GET", "/big.bin", [], b"", c.authority)
            b_id = p._quic.get_next_available_stream_id()
            frame = encode_frame(PRIORITY_UPDATE, encode_uint_var(b_id) + b"u=0")
            p._quic.send_stream_data(p.h3._local_control_stream_id, frame)
            p.transmit()  # the update's datagram goes now, before B's request
            b = p.send("GET", "/big.bin", [("priority", "u=7")], b"", c.authority)
            return b_id, await asyncio.wait_for(asyncio.gather(a, b), 30)

        b_id, (ans_a, ans_b) = c.loop.run_until_complete(go())
        want = (www / "big.bin").read_bytes()
        assert ans_a["body"] == want and ans_b["body"] == want
        assert p.ended == [b_id, b_id - 4], p.ended


def test_an_update_for_a_stream_past_the_clients_limit_ends_the_connection(server, pki, www):
    """RFC 9218 §7.2: a PRIORITY_UPDATE for a request stream the client
    could not open yet (past QUIC's stream limit, max_concurrent_streams
    here 10, stream 40 the 11th) ends the connection with H3_ID_ERROR
    (0x108); one for the 10th is taken, and a new connection is served."""
    srv = start(server, pki, www, head="http3: {{max_concurrent_streams: 10}}\n")
    with H3(srv.port, cafile=pki.ca.cert_path, timeout=10) as c:
        p = c.proto
        for sid in (36, 40):  # the 10th stream the client may open, then the 11th
            frame = encode_frame(PRIORITY_UPDATE, encode_uint_var(sid) + b"u=1")
            p._quic.send_stream_data(p.h3._local_control_stream_id, frame)
            p.transmit()
        ended = c.wait_closed()
        assert ended.error_code == 0x108, (hex(ended.error_code), ended.reason_phrase)
    with H3(srv.port, cafile=pki.ca.cert_path, timeout=10) as c:
        assert c.get("/hello")[:3:2] == (200, b"hi over h3\n")

