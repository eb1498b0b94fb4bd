"""The batching window (`batch_window`, on at 20 µs; ADR 0003) on a real
proxy: with several proxied requests in flight to an upstream slow enough to
open it, every answer still reaches its own client, and a worker waiting on
slow upstreams with no other traffic sleeps instead of polling."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.conftest import cpu_seconds
from tests.e2e.proxylib import Client, request

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("window", [None, "0", "1ms"])
def test_every_answer_reaches_its_client(proxy_server, upstream_app, window):
    # 3 ms per answer: over 10x the window (so it opens), 16 clients in flight.
    up = upstream_app("a", delay=0.003)
    srv = proxy_server([up], top={} if window is None else {"batch_window": window})

    def client(i):
        with Client(srv.port) as c:
            for j in range(25):
                body = f"client {i} request {j}".encode()
                r = c.request(f"/echo?c={i}&r={j}", method="POST", body=body)
                got = r.json()
                assert got["path"] == f"/echo?c={i}&r={j}", got
                assert got["body_len"] == len(body)
        return i

    with ThreadPoolExecutor(16) as pool:
        assert sorted(pool.map(client, range(16))) == list(range(16))


def test_waiting_on_slow_upstreams_does_not_poll(proxy_server, upstream_app):
    """Eight requests held 3 s by the upstream, and a light trickle of other
    requests (one every 5 ms, each waking the worker): the window may open as
    the eight arrive, but a poll with fewer than two events closes it, so the
    worker sleeps between the trickle's requests. A worker that kept polling
    every 20 µs while requests are in flight would burn a good part of a CPU."""
    up = upstream_app("a")
    srv = proxy_server([up], routes=[{"path": "= /ping", "respond": {"status": 200, "body": "pong"}}])
    (worker,) = srv.workers()
    for _ in range(20):  # answers of ~10 ms: the moving average opens the window
        assert request(srv.port, "/sleep?s=0.01").status == 200

    seen = up.conns()["requests"]
    with ThreadPoolExecutor(8) as pool, Client(srv.port) as trickle:
        held = [pool.submit(request, srv.port, "/sleep?s=3") for _ in range(8)]
        up.wait_conns("requests", lambda n: n >= seen + 8, what="(the eight held requests)")
        before, t0 = cpu_seconds(worker), time.monotonic()
        pings = 0
        while time.monotonic() - t0 < 1.5:
            assert trickle.request("/ping").body == b"pong"
            pings += 1
            time.sleep(0.005)
        used, elapsed = cpu_seconds(worker) - before, time.monotonic() - t0
        assert all(f.result().text == "slept" for f in held)
    assert pings > 100
    assert used <= 0.05 * elapsed, f"the worker used {used:.2f} s of CPU in {elapsed:.2f} s"
