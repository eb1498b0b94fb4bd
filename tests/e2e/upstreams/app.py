"""An aiohttp upstream for the reverse-proxy tests.

    python -m tests.e2e.upstreams.app --port N [--host 127.0.0.1] [--unix PATH]
                                      [--name NAME] [--health-file FILE] [--delay S]

Prints one line "READY <port>" (or "READY unix:<path>") on stdout once it is
listening; `--port 0` picks a free port, which that line tells.

Endpoints (any method unless said; every answer carries X-Conn-Seq, the
conn_seq below):

  /echo...          JSON: name, method, path (raw target as received), headers
                    ([[name, value], ...] in order, latin-1), version, body_len,
                    body_sha256 (the body streamed through sha256), peer_port,
                    conn_seq (which accepted connection carried the request)
  /conns            JSON connection counts, see Connections
  /download?size=N[&chunked=1][&piece=M][&priority=V]
                    N bytes of the pattern in tests/e2e/upstreams/__init__.py,
                    with Content-Length, or chunked in pieces of M (64 KiB)
  /upload[?delay=S] streams the request body (Content-Length or chunked):
                    {"len", "sha256"}; with `delay`, waits S seconds before
                    reading any of it (the sender's writes back up meanwhile)
  /trickle?n=5&delay=0.2
                    n chunks "tick\\n", `delay` seconds apart (chunked)
  /sleep?s=2        sleeps, then "slept"
  /status/N         status N with a small body (none for 1xx, 204, 304)
  /cut?size=N&send=M[&rst=1]
                    declares Content-Length N, sends M body bytes, then aborts
                    the connection (FIN, or RST with rst=1)
  /cut?chunked=1&send=M[&rst=1]
                    chunked: M body bytes (in one chunk), then the same abort
  /reset            aborts the connection at once with an RST, no answer
  /close            "bye" with Connection: close; the connection is closed after
  /headers?set=Name:Value&set=...
                    200 "headers" carrying those extra headers as given
                    (hop-by-hop ones included; Server and Date as given win)
  /id               the --name value
  /hold/KEY[?timeout=30]
                    waits until /release/KEY (or `timeout` seconds), then "released KEY"
                    ("timed out KEY" after the timeout): a request held in flight for
                    as long as a test wants, without guessing durations
  /release/KEY      releases every request held on KEY, now and later
                    (JSON {"held": how many were waiting})
  /healthz          200 "ok", or 503 "down" while --health-file holds "down"
  /ws[?refuse=N]    WebSocket echo, text and binary (subprotocols chat.v2, chat);
                    the text "!headers" answers the request's headers as JSON,
                    "!close" closes from this side; with refuse, status N, no upgrade

`--delay S` makes every request except /conns, /healthz and /release wait S seconds
first: a slow server for least_conn.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import signal
import socket
import struct
import sys

from aiohttp import WSMsgType, web

from tests.e2e.upstreams import pattern_block

DIRECT_HEADER = "X-Test-Direct"


class Connections:
    """Exact connection accounting, from aiohttp's own hooks.

    aiohttp's low-level `web.Server` is told of every accepted connection
    (`connection_made(handler, transport)`) and of every closed one
    (`connection_lost(handler, exc)`) by the protocol object it creates per
    connection; both are wrapped on the runner's Server instance. A request
    finds its connection through `request.protocol` (that same handler).

    The test helpers query this server directly (fixtures.Upstream.conns()):
    those requests carry `X-Test-Direct: 1`, and a connection whose *first*
    request carries it is a "direct" one. The counts that tests assert on
    leave direct connections out, so they describe only what the proxy did:

      connections  connections accepted so far, direct ones excepted
                   (one accepted but never used counts: it is not direct)
      active       of those, the ones still open
      requests     requests received on them
      accepted     every connection accepted, direct ones included
      open         every connection open now, direct ones included
      open_seqs    the seq (X-Conn-Seq) of each proxied connection open now, sorted
    """

    def __init__(self):
        self.seq = 0
        self.info = {}  # handler -> {"seq", "direct", "requests"}
        self.closed_direct = 0
        self.closed_proxied = 0
        self.requests = 0

    def made(self, handler):
        self.seq += 1
        self.info[handler] = {"seq": self.seq, "direct": None, "requests": 0}

    def lost(self, handler):
        rec = self.info.pop(handler, None)
        if rec is None:
            return
        if rec["direct"]:
            self.closed_direct += 1
        else:
            self.closed_proxied += 1

    def seen(self, request) -> dict:
        rec = self.info.get(request.protocol)
        if rec is None:  # not expected; keeps a request answerable anyway
            rec = {"seq": 0, "direct": None, "requests": 0}
        if rec["direct"] is None:
            rec["direct"] = request.headers.get(DIRECT_HEADER) == "1"
        rec["requests"] += 1
        if not rec["direct"]:
            self.requests += 1
        return rec

    def snapshot(self) -> dict:
        open_direct = sum(1 for r in self.info.values() if r["direct"])
        open_all = len(self.info)
        return {
            "connections": self.seq - self.closed_direct - open_direct,
            "active": open_all - open_direct,
            "requests": self.requests,
            "accepted": self.seq,
            "open": open_all,
            "open_seqs": sorted(r["seq"] for r in self.info.values() if not r["direct"]),
        }


CONNS = Connections()
ARGS = argparse.Namespace(name="app", health_file=None, delay=0.0)


def _sock_of(request):
    transport = request.transport
    return transport, (transport.get_extra_info("socket") if transport else None)


def _peer_port(request):
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return peer[1]
    return None


def _rst(request):
    """Abort the request's connection with an RST (SO_LINGER {1, 0})."""
    transport, sock = _sock_of(request)
    if transport is None:
        return
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


async def _flushed(request, timeout=10.0):
    """Waits until the transport's user-space buffer is empty (all bytes in the kernel)."""
    transport = request.transport
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while transport is not None and transport.get_write_buffer_size() and loop.time() < deadline:
        await asyncio.sleep(0.001)


def _int(request, key, default):
    try:
        return int(request.query.get(key, default))
    except ValueError:
        raise web.HTTPBadRequest(text=f"bad {key}\n")


@web.middleware
async def track(request, handler):
    rec = CONNS.seen(request)
    request["conn_seq"] = rec["seq"]
    if (ARGS.delay and request.path not in ("/conns", "/healthz")
            and not request.path.startswith("/release/")):
        await asyncio.sleep(ARGS.delay)
    return await handler(request)


async def add_conn_seq(request, response):
    """Every answer says which connection carried it (X-Conn-Seq), so a test
    can tell whether the next request came on the same one."""
    if "conn_seq" in request:
        response.headers["X-Conn-Seq"] = str(request["conn_seq"])


async def echo(request):
    h = hashlib.sha256()
    n = 0
    async for chunk in request.content.iter_chunked(1 << 16):
        h.update(chunk)
        n += len(chunk)
    return web.json_response({
        "name": ARGS.name,
        "method": request.method,
        "path": request.raw_path,
        "version": f"{request.version.major}.{request.version.minor}",
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in request.raw_headers],
        "body_len": n,
        "body_sha256": h.hexdigest(),
        "peer_port": _peer_port(request),
        "conn_seq": request["conn_seq"],
    })


async def conns(request):
    return web.json_response(CONNS.snapshot())


async def download(request):
    size = _int(request, "size", 0)
    piece = _int(request, "piece", 1 << 16)
    chunked = request.query.get("chunked") == "1"
    if piece <= 0:
        raise web.HTTPBadRequest(text="bad piece\n")
    resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    if "priority" in request.query:  # RFC 9218's response field (test_h2_priority)
        resp.headers["Priority"] = request.query["priority"]
    if not chunked:
        resp.content_length = size
    # Without a length aiohttp frames the body chunked to an HTTP/1.1 client
    # (one chunk per write) and close-delimited to an HTTP/1.0 one.
    await resp.prepare(request)
    block = pattern_block()
    if chunked:
        # Pieces of `piece` bytes, each its own write and so its own chunk.
        big = block * (piece // len(block) + 2)
        off = 0
        while off < size:
            n = min(piece, size - off)
            start = off % len(block)
            await resp.write(big[start:start + n])
            off += n
    else:
        full, rest = divmod(size, len(block))
        for _ in range(full):
            await resp.write(block)
        if rest:
            await resp.write(block[:rest])
    await resp.write_eof()
    return resp


async def upload(request):
    if request.method not in ("POST", "PUT"):
        raise web.HTTPMethodNotAllowed(request.method, ["POST", "PUT"])
    delay = float(request.query.get("delay", "0"))
    if delay:
        await asyncio.sleep(delay)
    h = hashlib.sha256()
    n = 0
    async for chunk in request.content.iter_chunked(1 << 16):
        h.update(chunk)
        n += len(chunk)
    return web.json_response({"len": n, "sha256": h.hexdigest()})


async def trickle(request):
    n = _int(request, "n", 5)
    delay = float(request.query.get("delay", "0.2"))
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    for i in range(n):
        if i:
            await asyncio.sleep(delay)
        await resp.write(b"tick\n")
    await resp.write_eof()
    return resp


async def sleep(request):
    await asyncio.sleep(float(request.query.get("s", "2")))
    return web.Response(text="slept")


async def status(request):
    code = int(request.match_info["code"])
    if code < 200 or code in (204, 304):
        return web.Response(status=code)
    return web.Response(status=code, text=f"status {code}\n")


async def cut(request):
    send = _int(request, "send", 0)
    rst = request.query.get("rst") == "1"
    resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    if request.query.get("chunked") != "1":
        resp.content_length = _int(request, "size", send * 2 + 1)
    await resp.prepare(request)
    if send:
        await resp.write(pattern_block()[:send] if send <= 65536 else
                         (pattern_block() * (send // 65536 + 1))[:send])
    await _flushed(request)
    if rst:
        _rst(request)
    else:
        request.transport.abort()  # a FIN now, the response unfinished
    return resp


async def reset(request):
    _rst(request)
    return web.Response()  # never sent: the connection is gone


async def close(request):
    resp = web.Response(text="bye")
    resp.force_close()  # "Connection: close" in the head, and aiohttp closes after
    return resp


async def headers(request):
    resp = web.Response(text="headers")
    for item in request.query.getall("set", []):
        name, sep, value = item.partition(":")
        if not sep or not name:
            raise web.HTTPBadRequest(text=f"bad set={item!r}\n")
        resp.headers.add(name, value.lstrip())
    return resp


HOLDS: dict[str, asyncio.Event] = {}
HELD: dict[str, int] = {}


async def hold(request):
    key = request.match_info["key"]
    timeout = float(request.query.get("timeout", "30"))
    event = HOLDS.setdefault(key, asyncio.Event())
    HELD[key] = HELD.get(key, 0) + 1
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        return web.Response(text=f"timed out {key}")
    finally:
        HELD[key] -= 1
    return web.Response(text=f"released {key}")


async def release(request):
    key = request.match_info["key"]
    held = HELD.get(key, 0)
    HOLDS.setdefault(key, asyncio.Event()).set()
    return web.json_response({"held": held})


async def held(request):
    return web.json_response({"held": HELD.get(request.match_info["key"], 0)})


async def ident(request):
    return web.Response(text=ARGS.name)


async def healthz(request):
    if ARGS.health_file:
        try:
            with open(ARGS.health_file) as f:
                if f.read().strip() == "down":
                    return web.Response(status=503, text="down")
        except FileNotFoundError:
            pass
    return web.Response(text="ok")


async def ws(request):
    refuse = _int(request, "refuse", 0)
    if refuse:
        return web.Response(status=refuse, text=f"refused {refuse}\n")
    sock = web.WebSocketResponse(max_msg_size=64 << 20, protocols=("chat.v2", "chat"))
    await sock.prepare(request)
    async for msg in sock:
        if msg.type == WSMsgType.TEXT and msg.data == "!headers":
            await sock.send_str(json.dumps([[k.decode("latin-1"), v.decode("latin-1")]
                                            for k, v in request.raw_headers]))
        elif msg.type == WSMsgType.TEXT and msg.data == "!close":
            await sock.close(code=1000, message=b"upstream says bye")
            break
        elif msg.type == WSMsgType.TEXT:
            await sock.send_str(msg.data)
        elif msg.type == WSMsgType.BINARY:
            await sock.send_bytes(msg.data)
        else:
            break
    return sock


async def echo_any(request):
    if request.path.startswith("/echo"):
        return await echo(request)
    raise web.HTTPNotFound(text=f"no route for {request.path}\n")


def make_app() -> web.Application:
    app = web.Application(middlewares=[track], client_max_size=1 << 40)
    app.on_response_prepare.append(add_conn_seq)
    app.router.add_route("*", "/conns", conns)
    app.router.add_route("*", "/download", download)
    app.router.add_route("*", "/upload", upload)
    app.router.add_route("*", "/trickle", trickle)
    app.router.add_route("*", "/sleep", sleep)
    app.router.add_route("*", r"/status/{code:\d+}", status)
    app.router.add_route("*", "/cut", cut)
    app.router.add_route("*", "/reset", reset)
    app.router.add_route("*", "/close", close)
    app.router.add_route("*", "/headers", headers)
    app.router.add_route("*", "/id", ident)
    app.router.add_route("*", "/hold/{key}", hold)
    app.router.add_route("*", "/release/{key}", release)
    app.router.add_route("*", "/held/{key}", held)
    app.router.add_route("*", "/healthz", healthz)
    app.router.add_route("GET", "/ws", ws)
    app.router.add_route("*", "/{tail:.*}", echo_any)  # /echo, /echo/x, /echoes...
    return app


async def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--unix", metavar="PATH")
    p.add_argument("--name", default="app")
    p.add_argument("--health-file", metavar="FILE")
    p.add_argument("--delay", type=float, default=0.0)
    args = p.parse_args(argv)
    ARGS.name, ARGS.health_file, ARGS.delay = args.name, args.health_file, args.delay

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # A reset or cut connection is the point of several endpoints: quiet.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

    runner = web.AppRunner(make_app(), access_log=None, handler_cancellation=True)
    await runner.setup()
    server = runner.server
    made, lost = server.connection_made, server.connection_lost

    def connection_made(handler, transport):
        CONNS.made(handler)
        made(handler, transport)

    def connection_lost(handler, exc=None):
        CONNS.lost(handler)
        lost(handler, exc)

    server.connection_made = connection_made
    server.connection_lost = connection_lost

    if args.unix:
        site = web.UnixSite(runner, args.unix)
        await site.start()
        os.chmod(args.unix, 0o666)  # as PHP-FPM's listen.mode: scalwsd's workers may be nobody
        where = f"unix:{args.unix}"
    else:
        site = web.TCPSite(runner, args.host, args.port, backlog=1024, reuse_address=True)
        await site.start()
        where = str(site._server.sockets[0].getsockname()[1])
    sys.stdout.write(f"READY {where}\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()  # then exit at once: open connections are not waited for


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    os._exit(0)
