"""The proxy upstream of bench/soak.py: tests/e2e/upstreams/app.py (the
aiohttp app of the proxy tests: /id, /headers, /ws echo, ...) with a
graceful stop, so that restarting it is what a rolling deploy does.

    python bench/apps/soak_upstream.py --port N --name a [--grace 10]

Prints "READY <port>" once listening. On SIGTERM it stops listening (new
connections are refused at once), answers every further request with
`Connection: close` (so the proxy stops reusing its connections), waits
until no request or WebSocket session is in progress (`--grace` seconds at
most), then closes what is left and exits 0.

aiohttp's own graceful stop (AppRunner.cleanup) is not used alone: it
drops every byte that arrives on a connection once the stop has begun,
which hangs a WebSocket session in progress until the timeout.
tests/e2e/upstreams/app.py itself exits at once on SIGTERM, which the
proxy tests want.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from aiohttp import web  # noqa: E402

from tests.e2e.upstreams import app  # noqa: E402


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--name", default="app")
    p.add_argument("--grace", type=float, default=10.0)
    args = p.parse_args()
    app.ARGS.name = args.name
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

    state = {"busy": 0, "draining": False}

    @web.middleware
    async def in_progress(request, handler):
        state["busy"] += 1
        try:
            return await handler(request)
        finally:
            state["busy"] -= 1

    async def close_when_draining(request, response):
        if state["draining"] and not isinstance(response, web.WebSocketResponse):
            response.force_close()

    application = app.make_app()
    application.middlewares.insert(0, in_progress)
    application.on_response_prepare.append(close_when_draining)
    runner = web.AppRunner(application, access_log=None, shutdown_timeout=args.grace)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, backlog=1024, reuse_address=True)
    await site.start()
    sys.stdout.write(f"READY {site._server.sockets[0].getsockname()[1]}\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await site.stop()
    state["draining"] = True
    deadline = loop.time() + args.grace
    while state["busy"] and loop.time() < deadline:
        await asyncio.sleep(0.01)
    await runner.cleanup()  # the idle connections left are closed


if __name__ == "__main__":
    asyncio.run(main())
